/* The request builders, every version, each sent to a simulator advertising that maximum. */
#include "km_broker.h"
#include "km_brokersim.h"
#include "test_broker_client.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

typedef struct rig { km_bsim *sim; int fd; km_arena arena; } rig;

static void rig_start(rig *r, const char *api, int v)
{
    km_bsim_config cfg;
    km_bsim_config_init(&cfg);
    cfg.broker_id = 1;
    char spec[64];
    snprintf(spec, sizeof spec, "%s=%d", api, v);
    km_err err;
    cr_assert(!km_bsim_parse_max_versions(&cfg, spec, &err), "%s", err.msg);
    r->sim = km_bsim_start_thread(&cfg, &err);
    cr_assert(r->sim, "%s", err.msg);
    r->fd = tbc_connect(km_bsim_port(r->sim));
    cr_assert(r->fd >= 0);
    km_arena_init(&r->arena, 0);
}

static void rig_stop(rig *r)
{
    close(r->fd);
    km_bsim_stop_thread(r->sim);
    km_arena_free(&r->arena);
}

static const int32_t R12[] = { 1, 2 }, R123[] = { 1, 2, 3 }, R3[] = { 3 };

static void parts4(km_bp_part p[4])
{
    for (int i = 0; i < 4; i++) {
        p[i] = (km_bp_part){ .topic = i < 2 ? "alpha" : "beta", .partition = i % 2, .controller_epoch = 9,
                             .leader = 1 + i % 2, .leader_epoch = 3 + i, .partition_epoch = 5 + i,
                             .leader_recovery_state = 0, .is_new = true, .isr = { R12, 2 },
                             .replicas = { R123, 3 }, .adding = { R3, 1 }, .removing = { NULL, 0 } };
        p[i].topic_id.b[0] = (uint8_t)(i < 2 ? 0xA : 0xB);
    }
}

static const km_endpoint EPS[2] = { { "PLAINTEXT", "10.0.0.1", 9092, 0 }, { "INTERNAL", "10.0.0.1", 9093, 3 } };

static void brokers2(km_broker b[2], const km_broker *ptr[2])
{
    for (int i = 0; i < 2; i++) {
        memset(&b[i], 0, sizeof b[i]);
        b[i].id = i + 1;
        b[i].epoch = 10;
        b[i].rack = i ? "rack-b" : NULL;
        b[i].n_endpoints = 2;
        b[i].endpoints = EPS;
        b[i].is_migrating_zk_broker = true;
        ptr[i] = &b[i];
    }
}

static json_t *find(json_t *arr, const char *key, const char *val, const char *key2, int v2)
{
    size_t i;
    json_t *x;
    json_array_foreach(arr, i, x) {
        if (strcmp(json_string_value(json_object_get(x, key)), val))
            continue;
        if (!key2 || json_integer_value(json_object_get(x, key2)) == v2)
            return x;
    }
    return NULL;
}

static void check_lisr_state(json_t *st, int v)
{
    json_t *parts = json_object_get(st, "partitions");
    cr_assert_eq(json_array_size(parts), 4, "v%d", v);
    json_t *b1 = find(parts, "topic", "beta", "partition", 1);
    cr_assert(b1, "v%d", v);
    cr_assert_eq(json_integer_value(json_object_get(b1, "leaderEpoch")), 6, "v%d", v);
    cr_assert_eq(json_integer_value(json_object_get(b1, "leader")), 2, "v%d", v);
    cr_assert_eq(json_integer_value(json_object_get(b1, "controllerEpoch")), 9, "v%d", v);
    cr_assert_eq(json_array_size(json_object_get(b1, "addingReplicas")), v >= 3 ? 1u : 0u, "v%d", v);
    cr_assert_eq(json_is_null(json_object_get(b1, "topicId")), v < 5, "topic ids from v5: v%d", v);
    json_t *byv = json_object_get(json_object_get(st, "requests"), "LEADER_AND_ISR");
    char k[4];
    snprintf(k, sizeof k, "%d", v);
    cr_assert_eq(json_integer_value(json_object_get(byv, k)), 1, "v%d counted", v);
}

Test(build, leader_and_isr_every_version)
{
    for (int v = 0; v <= 7; v++) {
        rig r;
        rig_start(&r, "LeaderAndIsr", v);
        km_bp_part p[4];
        parts4(p);
        km_broker b[2];
        const km_broker *bp[2];
        brokers2(b, bp);
        km_bp_ctl c = { 3000, 4, 10, KM_CTL_TYPE_FULL, true };
        km_leader_and_isr_request rq;
        km_err err;
        cr_assert(!km_bp_leader_and_isr((int16_t)v, &c, p, 4, bp, 2, "INTERNAL", &r.arena, &rq, &err), "%s", err.msg);
        cr_assert_eq(rq.live_leaders.count, 2);
        cr_assert_eq(rq.live_leaders.items[0].port, 9093);
        km_leader_and_isr_response rs;
        cr_assert(tbc_call(r.fd, KM_API_LEADER_AND_ISR, (int16_t)v, &rq, &rs, &r.arena), "v%d", v);
        cr_assert_eq(rs.error_code, 0, "v%d", v);
        cr_assert_eq(v < 5 ? rs.partition_errors.count : rs.topics.count, v < 5 ? 4 : 2, "v%d", v);
        json_t *st = km_bsim_state_json(r.sim);
        check_lisr_state(st, v);
        json_decref(st);
        rig_stop(&r);
    }
}

static void check_umr_brokers(json_t *st, int v)
{
    json_t *brokers = json_object_get(json_object_get(st, "metadata"), "brokers");
    cr_assert_eq(json_array_size(brokers), 2, "v%d", v);
    json_t *b2 = json_array_get(brokers, 1);
    json_t *eps = json_object_get(b2, "endpoints");
    /* v0: one PLAINTEXT host:port; v1-2: no custom listener names; v3+: all listeners */
    cr_assert_eq(json_array_size(eps), v >= 3 ? 2u : 1u, "v%d", v);
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(eps, 0), "listener")), "PLAINTEXT");
    cr_assert_eq(json_is_string(json_object_get(b2, "rack")), v >= 2, "racks from v2: v%d", v);
}

Test(build, update_metadata_every_version)
{
    for (int v = 0; v <= 8; v++) {
        rig r;
        rig_start(&r, "UpdateMetadata", v);
        km_bp_part p[4];
        parts4(p);
        p[3].offline = (km_i32_list){ R3, 1 };
        km_broker b[2];
        const km_broker *bp[2];
        brokers2(b, bp);
        km_bp_ctl c = { 3000, 4, 10, KM_CTL_TYPE_FULL, true };
        km_update_metadata_request rq;
        km_err err;
        cr_assert(!km_bp_update_metadata((int16_t)v, &c, p, 4, bp, 2, &r.arena, &rq, &err), "%s", err.msg);
        km_update_metadata_response rs;
        cr_assert(tbc_call(r.fd, KM_API_UPDATE_METADATA, (int16_t)v, &rq, &rs, &r.arena), "v%d", v);
        cr_assert_eq(rs.error_code, 0, "v%d", v);
        json_t *st = km_bsim_state_json(r.sim);
        check_umr_brokers(st, v);
        json_t *md = json_object_get(st, "metadata");
        cr_assert_eq(json_integer_value(json_object_get(md, "controllerId")), 3000);
        cr_assert_eq(json_is_true(json_object_get(md, "isKRaftController")), v >= 8, "v%d", v);
        json_t *beta = find(json_object_get(md, "topics"), "name", "beta", NULL, 0);
        cr_assert(beta, "v%d", v);
        cr_assert_eq(json_is_null(json_object_get(beta, "topicId")), v < 7, "topic ids from v7: v%d", v);
        json_t *b1 = json_array_get(json_object_get(beta, "partitions"), 1);
        cr_assert_eq(json_integer_value(json_object_get(b1, "zkVersion")), 8);
        cr_assert_eq(json_array_size(json_object_get(b1, "offlineReplicas")), v >= 4 ? 1u : 0u, "v%d", v);
        json_decref(st);
        rig_stop(&r);
    }
}

Test(build, stop_replica_every_version)
{
    for (int v = 0; v <= 4; v++) {
        rig r;
        rig_start(&r, "StopReplica", v);
        km_bp_part p[4];
        parts4(p);
        km_bp_ctl c = { 3000, 4, 10, KM_CTL_TYPE_INCREMENTAL, true };
        km_leader_and_isr_request lq;
        km_leader_and_isr_response ls;
        km_err err;
        cr_assert(!km_bp_leader_and_isr(7, &c, p, 4, NULL, 0, "INTERNAL", &r.arena, &lq, &err), "%s", err.msg);
        cr_assert(tbc_call(r.fd, KM_API_LEADER_AND_ISR, 7, &lq, &ls, &r.arena));
        km_bp_stop s[3] = { { "alpha", 1, KM_EPOCH_DURING_DELETE, true }, { "beta", 0, 5, true },
                            { "alpha", 0, KM_EPOCH_DURING_DELETE, true } };
        km_stop_replica_request rq;
        cr_assert(!km_bp_stop_replica((int16_t)v, &c, s, 3, &r.arena, &rq, &err), "%s", err.msg);
        km_stop_replica_response rs;
        cr_assert(tbc_call(r.fd, KM_API_STOP_REPLICA, (int16_t)v, &rq, &rs, &r.arena), "v%d", v);
        cr_assert_eq(rs.error_code, 0, "v%d", v);
        cr_assert_eq(rs.partition_errors.count, 3, "v%d", v);
        json_t *st = km_bsim_state_json(r.sim);
        json_t *parts = json_object_get(st, "partitions");
        cr_assert_eq(json_array_size(parts), 1, "v%d", v);
        cr_assert(find(parts, "topic", "beta", "partition", 1), "v%d", v);
        json_decref(st);
        rig_stop(&r);
    }
}

Test(build, stop_replica_old_versions_need_one_delete_flag)
{
    km_arena a;
    km_arena_init(&a, 0);
    km_bp_ctl c = { 3000, 4, 10, 0, true };
    km_bp_stop s[2] = { { "alpha", 0, 1, true }, { "alpha", 1, 1, false } };
    km_stop_replica_request rq;
    km_err err;
    cr_assert_eq(km_bp_stop_replica(2, &c, s, 2, &a, &rq, &err), -1);
    cr_assert(strstr(err.msg, "DeletePartition"), "%s", err.msg);
    cr_assert_eq(km_bp_stop_replica(3, &c, s, 2, &a, &rq, &err), 0);
    km_arena_free(&a);
}

Test(build, error_names_are_kafkas)
{
    cr_assert_str_eq(km_broker_err_name(77), "STALE_BROKER_EPOCH");
    cr_assert_str_eq(km_broker_err_name(11), "STALE_CTRL_EPOCH"); /* librdkafka's spelling */
    cr_assert_str_eq(km_broker_err_name(74), "FENCED_LEADER_EPOCH");
    cr_assert_str_eq(km_broker_err_name(0), "NO_ERROR");
}
