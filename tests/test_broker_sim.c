/* The ZK-mode broker simulator, driven directly over a socket with the codec:
 * strict decoding, Kafka's epoch rules, and the state dump. */
#include "km_broker.h"
#include "km_brokersim.h"
#include "test_broker_client.h"
#include "zkserver.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <string.h>
#include <unistd.h>

#define SELF 1
#define CTRL 3000

static km_bsim *sim;
static int fd = -1;
static km_arena arena;

static km_bsim_kafka kafka_rules;
static const char *sim_zk;

static void start(const char *max_versions, int64_t kraft_epoch)
{
    km_bsim_config cfg;
    km_bsim_config_init(&cfg);
    cfg.kafka = kafka_rules;
    cfg.zk_connect = sim_zk;
    cfg.broker_id = SELF;
    cfg.kraft_broker_epoch = kraft_epoch;
    km_err err;
    cr_assert(!km_bsim_parse_max_versions(&cfg, max_versions, &err), "%s", err.msg);
    sim = km_bsim_start_thread(&cfg, &err);
    cr_assert(sim, "%s", err.msg);
    fd = tbc_connect(km_bsim_port(sim));
    cr_assert(fd >= 0);
    km_arena_init(&arena, 0);
}

static void stop(void)
{
    if (fd >= 0)
        close(fd);
    km_bsim_stop_thread(sim);
    km_arena_free(&arena);
}

static const int32_t R123[] = { 1, 2, 3 }, R12[] = { 1, 2 }, R23[] = { 2, 3 };

static km_bp_part part(const char *topic, int32_t p, int32_t leader, int32_t le, int32_t pe)
{
    km_bp_part x = { .topic = topic, .partition = p, .controller_epoch = 5, .leader = leader, .leader_epoch = le,
                     .partition_epoch = pe, .isr = { R12, 2 }, .replicas = { R123, 3 } };
    x.topic_id.b[0] = (uint8_t)topic[strlen(topic) - 1];
    x.topic_id.b[15] = 1;
    return x;
}

static km_bp_ctl ctl(int32_t zk_epoch, int8_t type)
{
    return (km_bp_ctl){ .controller_id = CTRL, .controller_epoch = zk_epoch, .broker_epoch = 10, .type = type,
                        .kraft = true };
}

static km_leader_and_isr_response lisr(int16_t v, const km_bp_ctl *c, const km_bp_part *parts, size_t n)
{
    km_leader_and_isr_request rq;
    km_err err;
    cr_assert(!km_bp_leader_and_isr(v, c, parts, n, NULL, 0, "PLAINTEXT", &arena, &rq, &err), "%s", err.msg);
    km_leader_and_isr_response rs;
    cr_assert(tbc_call(fd, KM_API_LEADER_AND_ISR, v, &rq, &rs, &arena), "LeaderAndIsr v%d call", v);
    return rs;
}

static int16_t lisr_part_error(int16_t v, const km_leader_and_isr_response *rs, int i)
{
    if (v < 5)
        return rs->partition_errors.items[i].error_code;
    return rs->topics.items[0].partition_errors.items[i].error_code;
}

static json_t *state(void) { return km_bsim_state_json(sim); }

static json_t *part_state(json_t *st, const char *topic, int p)
{
    json_t *parts = json_object_get(st, "partitions"), *x;
    size_t i;
    json_array_foreach(parts, i, x) {
        if (!strcmp(json_string_value(json_object_get(x, "topic")), topic) &&
            json_integer_value(json_object_get(x, "partition")) == p)
            return x;
    }
    return NULL;
}

static json_int_t geti(json_t *o, const char *k) { return json_integer_value(json_object_get(o, k)); }

Test(brokersim, api_versions_lists_capped_versions, .fini = stop)
{
    start("LeaderAndIsr=3,UpdateMetadata=5", -1);
    km_api_versions_request rq;
    km_api_versions_request_init(&rq);
    km_api_versions_response rs;
    cr_assert(tbc_call(fd, KM_API_API_VERSIONS, 3, &rq, &rs, &arena));
    cr_assert_eq(rs.error_code, 0);
    int found = 0;
    for (int32_t i = 0; i < rs.api_keys.count; i++) {
        const km_api_versions_response_api_version *av = &rs.api_keys.items[i];
        if (av->api_key == KM_API_LEADER_AND_ISR) {
            found++;
            cr_expect_eq(av->max_version, 3);
        }
        if (av->api_key == KM_API_UPDATE_METADATA) {
            found++;
            cr_expect_eq(av->max_version, 5);
        }
        if (av->api_key == KM_API_STOP_REPLICA) {
            found++;
            cr_expect_eq(av->max_version, 4);
        }
    }
    cr_assert_eq(found, 3);
    /* a version it does not serve: v0 answer with UNSUPPORTED_VERSION, as Kafka does */
    cr_assert(tbc_call(fd, KM_API_API_VERSIONS, 4, &rq, &rs, &arena));
    cr_assert_eq(rs.error_code, 35);
    cr_assert(rs.api_keys.count >= 4);
}

Test(brokersim, leader_and_isr_epoch_rules, .fini = stop)
{
    start("", 10);
    km_bp_ctl c = ctl(7, KM_CTL_TYPE_INCREMENTAL);
    km_bp_part p = part("t1", 0, 1, 4, 6);
    km_leader_and_isr_response rs = lisr(7, &c, &p, 1);
    cr_assert_eq(rs.error_code, 0);
    cr_assert_eq(lisr_part_error(7, &rs, 0), 0);
    /* equal leader epoch: accepted from a KRaft controller */
    p.partition_epoch = 7;
    rs = lisr(7, &c, &p, 1);
    cr_assert_eq(lisr_part_error(7, &rs, 0), 0);
    /* ...but not from a ZK controller: STALE_CONTROLLER_EPOCH per partition */
    c.kraft = false;
    rs = lisr(7, &c, &p, 1);
    cr_assert_eq(rs.error_code, 0);
    cr_assert_eq(lisr_part_error(7, &rs, 0), 11);
    c.kraft = true;
    /* lower leader epoch: STALE_CONTROLLER_EPOCH per partition, state unchanged */
    p.leader_epoch = 3;
    rs = lisr(7, &c, &p, 1);
    cr_assert_eq(lisr_part_error(7, &rs, 0), 11);
    /* not a replica: UNKNOWN_TOPIC_OR_PARTITION */
    km_bp_part q = part("t1", 1, 2, 1, 1);
    q.replicas = (km_i32_list){ R23, 2 };
    rs = lisr(7, &c, &q, 1);
    cr_assert_eq(lisr_part_error(7, &rs, 0), 3);
    json_t *st = state();
    json_t *x = part_state(st, "t1", 0);
    cr_assert(x);
    cr_assert_eq(geti(x, "leaderEpoch"), 4);
    cr_assert_eq(geti(x, "partitionEpoch"), 7);
    cr_assert_null(part_state(st, "t1", 1));
    cr_assert_eq(geti(st, "controllerEpoch"), 7);
    json_decref(st);
}

Test(brokersim, stale_controller_and_broker_epochs, .fini = stop)
{
    start("", 10);
    km_bp_ctl c = ctl(7, KM_CTL_TYPE_INCREMENTAL);
    km_bp_part p = part("t1", 0, 1, 4, 6);
    cr_assert_eq(lisr(7, &c, &p, 1).error_code, 0);
    c.controller_epoch = 6;
    km_leader_and_isr_response rs = lisr(7, &c, &p, 1);
    cr_assert_eq(rs.error_code, 11);
    c.controller_epoch = 7;
    c.broker_epoch = 9; /* below the registration epoch 10 */
    rs = lisr(7, &c, &p, 1);
    cr_assert_eq(rs.error_code, 77);
    cr_assert_eq(lisr_part_error(7, &rs, 0), 77);
    c.broker_epoch = -1; /* unknown epoch is never stale */
    p.leader_epoch = 5;
    cr_assert_eq(lisr(7, &c, &p, 1).error_code, 0);
    /* UpdateMetadata and StopReplica follow the same two rules */
    km_update_metadata_request um;
    km_err err;
    c.broker_epoch = 9;
    cr_assert(!km_bp_update_metadata(8, &c, &p, 1, NULL, 0, &arena, &um, &err), "%s", err.msg);
    km_update_metadata_response ur;
    cr_assert(tbc_call(fd, KM_API_UPDATE_METADATA, 8, &um, &ur, &arena));
    cr_assert_eq(ur.error_code, 77);
    c.broker_epoch = 10;
    c.controller_epoch = 2;
    cr_assert(!km_bp_update_metadata(8, &c, &p, 1, NULL, 0, &arena, &um, &err), "%s", err.msg);
    cr_assert(tbc_call(fd, KM_API_UPDATE_METADATA, 8, &um, &ur, &arena));
    cr_assert_eq(ur.error_code, 11);
    km_bp_stop s = { "t1", 0, 5, true };
    km_stop_replica_request sq;
    cr_assert(!km_bp_stop_replica(4, &c, &s, 1, &arena, &sq, &err), "%s", err.msg);
    km_stop_replica_response sr;
    cr_assert(tbc_call(fd, KM_API_STOP_REPLICA, 4, &sq, &sr, &arena));
    cr_assert_eq(sr.error_code, 11);
    json_t *st = state();
    cr_assert(part_state(st, "t1", 0), "a stale StopReplica must not delete");
    json_decref(st);
}

Test(brokersim, stop_replica_fences_old_leader_epoch_and_deletes, .fini = stop)
{
    start("", -1);
    km_bp_ctl c = ctl(7, KM_CTL_TYPE_INCREMENTAL);
    km_bp_part ps[2] = { part("t1", 0, 1, 4, 6), part("t1", 1, 2, 4, 6) };
    cr_assert_eq(lisr(7, &c, ps, 2).error_code, 0);
    km_bp_stop s[2] = { { "t1", 0, 3, true }, { "t1", 1, KM_EPOCH_DURING_DELETE, true } };
    km_stop_replica_request sq;
    km_err err;
    cr_assert(!km_bp_stop_replica(4, &c, s, 2, &arena, &sq, &err), "%s", err.msg);
    km_stop_replica_response sr;
    cr_assert(tbc_call(fd, KM_API_STOP_REPLICA, 4, &sq, &sr, &arena));
    cr_assert_eq(sr.error_code, 0);
    cr_assert_eq(sr.partition_errors.count, 2);
    cr_assert_eq(sr.partition_errors.items[0].error_code, 74);
    cr_assert_eq(sr.partition_errors.items[1].error_code, 0);
    json_t *st = state();
    cr_assert(part_state(st, "t1", 0));
    cr_assert_null(part_state(st, "t1", 1));
    json_decref(st);
}

Test(brokersim, full_requests_drop_strays_and_deleted_topics, .fini = stop)
{
    start("", -1);
    km_bp_ctl c = ctl(7, KM_CTL_TYPE_INCREMENTAL);
    km_bp_part ps[2] = { part("t1", 0, 1, 4, 6), part("t2", 0, 1, 4, 6) };
    cr_assert_eq(lisr(7, &c, ps, 2).error_code, 0);
    km_update_metadata_request um;
    km_update_metadata_response ur;
    km_err err;
    cr_assert(!km_bp_update_metadata(8, &c, ps, 2, NULL, 0, &arena, &um, &err), "%s", err.msg);
    cr_assert(tbc_call(fd, KM_API_UPDATE_METADATA, 8, &um, &ur, &arena));
    cr_assert_eq(ur.error_code, 0);
    /* full requests without t2: the broker drops it from its replicas and its cache */
    c.type = KM_CTL_TYPE_FULL;
    cr_assert_eq(lisr(7, &c, ps, 1).error_code, 0);
    cr_assert(!km_bp_update_metadata(8, &c, ps, 1, NULL, 0, &arena, &um, &err), "%s", err.msg);
    cr_assert(tbc_call(fd, KM_API_UPDATE_METADATA, 8, &um, &ur, &arena));
    json_t *st = state();
    cr_assert(part_state(st, "t1", 0));
    cr_assert_null(part_state(st, "t2", 0));
    json_t *topics = json_object_get(json_object_get(st, "metadata"), "topics");
    cr_assert_eq(json_array_size(topics), 1);
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(topics, 0), "name")), "t1");
    json_decref(st);
}

Test(brokersim, leader_during_delete_removes_from_cache, .fini = stop)
{
    start("", -1);
    km_bp_ctl c = ctl(7, KM_CTL_TYPE_INCREMENTAL);
    km_bp_part p = part("t1", 0, 1, 4, 6);
    km_update_metadata_request um;
    km_update_metadata_response ur;
    km_err err;
    cr_assert(!km_bp_update_metadata(6, &c, &p, 1, NULL, 0, &arena, &um, &err), "%s", err.msg);
    cr_assert(tbc_call(fd, KM_API_UPDATE_METADATA, 6, &um, &ur, &arena));
    p.leader = KM_LEADER_DURING_DELETE;
    cr_assert(!km_bp_update_metadata(6, &c, &p, 1, NULL, 0, &arena, &um, &err), "%s", err.msg);
    cr_assert(tbc_call(fd, KM_API_UPDATE_METADATA, 6, &um, &ur, &arena));
    json_t *st = state();
    cr_assert_eq(json_array_size(json_object_get(json_object_get(st, "metadata"), "topics")), 0);
    json_decref(st);
}

/* ---- strict decoding: anything off closes the connection -------------------------------------- */

static void assert_rejected(const char *what)
{
    cr_assert(tbc_closed(fd), "%s: the connection should be closed", what);
    json_t *st = state();
    cr_assert_eq(geti(st, "rejected"), 1, "%s", what);
    cr_log_info("%s: %s", what, json_string_value(json_object_get(st, "lastRejection")));
    json_decref(st);
}

static void frame_lisr(int16_t v, km_buf *out)
{
    km_bp_ctl c = ctl(7, KM_CTL_TYPE_INCREMENTAL);
    km_bp_part p = part("t1", 0, 1, 4, 6);
    km_leader_and_isr_request rq;
    km_err err;
    cr_assert(!km_bp_leader_and_isr(v, &c, &p, 1, NULL, 0, "PLAINTEXT", &arena, &rq, &err), "%s", err.msg);
    km_buf_init(out);
    cr_assert(!km_frame_request(KM_API_LEADER_AND_ISR, v, 1, "t", &rq, out, &err), "%s", err.msg);
}

static void resize_frame(km_buf *b)
{
    km_buf_patch_i32(b, 0, (int32_t)(b->len - 4));
}

Test(brokersim, rejects_trailing_bytes, .fini = stop)
{
    start("", -1);
    km_buf b;
    frame_lisr(7, &b);
    km_buf_put_i8(&b, 0);
    resize_frame(&b);
    cr_assert(tbc_send_raw(fd, b.data, b.len));
    km_buf_free(&b);
    assert_rejected("trailing byte");
}

Test(brokersim, rejects_unadvertised_version, .fini = stop)
{
    start("LeaderAndIsr=4", -1);
    km_buf b;
    frame_lisr(5, &b);
    cr_assert(tbc_send_raw(fd, b.data, b.len));
    km_buf_free(&b);
    assert_rejected("v5 above the advertised v4");
}

Test(brokersim, rejects_wrong_header_version, .fini = stop)
{
    start("", -1);
    /* LeaderAndIsr v4 is flexible: header v2.  Send it with header v1 (no tagged fields). */
    km_buf b;
    frame_lisr(4, &b);
    km_buf bad;
    km_buf_init(&bad);
    km_request_header h;
    km_request_header_init(&h);
    h.request_api_key = KM_API_LEADER_AND_ISR;
    h.request_api_version = 4;
    h.correlation_id = 1;
    h.client_id = km_cstr("t");
    km_err err;
    km_buf_put_i32(&bad, 0);
    cr_assert(!km_encode(&km_request_header_desc, 1, &h, &bad, &err), "%s", err.msg);
    size_t hdr2 = 4 + 2 + 2 + 4 + 2 + 1 + 1; /* size, key, version, corr, client id "t", tags */
    km_buf_put(&bad, b.data + hdr2, b.len - hdr2);
    resize_frame(&bad);
    cr_assert(tbc_send_raw(fd, bad.data, bad.len));
    km_buf_free(&b);
    km_buf_free(&bad);
    assert_rejected("header v1 on a flexible version");
}

Test(brokersim, rejects_truncated_body, .fini = stop)
{
    start("", -1);
    km_buf b;
    frame_lisr(7, &b);
    b.len -= 3;
    resize_frame(&b);
    cr_assert(tbc_send_raw(fd, b.data, b.len));
    km_buf_free(&b);
    assert_rejected("truncated body");
}

Test(brokersim, counts_requests_by_api_and_version, .fini = stop)
{
    start("", -1);
    km_bp_ctl c = ctl(7, KM_CTL_TYPE_INCREMENTAL);
    km_bp_part p = part("t1", 0, 1, 4, 6);
    lisr(2, &c, &p, 1);
    p.leader_epoch++;
    lisr(7, &c, &p, 1);
    p.leader_epoch++;
    lisr(7, &c, &p, 1);
    json_t *st = state();
    json_t *byv = json_object_get(json_object_get(st, "requests"), "LEADER_AND_ISR");
    cr_assert_eq(geti(byv, "2"), 1);
    cr_assert_eq(geti(byv, "7"), 2);
    json_decref(st);
}

/* ReplicaManager.scala of Kafka 3.4.0 takes only a higher leader epoch and has no stray
 * detection; ZkMetadataCache there ignores Type=FULL.  Both came with 3.6.2. */
Test(brokersim, an_ibp_3_4_broker_has_none_of_the_3_6_2_rules, .fini = stop)
{
    kafka_rules = KM_BSIM_KAFKA_IBP_3_4;
    start("", -1);
    kafka_rules = KM_BSIM_KAFKA_3_6_2;
    km_bp_ctl c = ctl(7, KM_CTL_TYPE_INCREMENTAL);
    km_bp_part ps[2] = { part("t1", 0, 1, 4, 6), part("t2", 0, 1, 4, 6) };
    km_leader_and_isr_response rs = lisr(7, &c, ps, 2);
    cr_assert_eq(lisr_part_error(7, &rs, 0), 0);
    /* equal leader epoch from a KRaft controller: refused */
    ps[0].partition_epoch = 7;
    rs = lisr(7, &c, ps, 1);
    cr_assert_eq(lisr_part_error(7, &rs, 0), 11);
    /* a FULL request without t2 leaves t2's log alone */
    c.type = KM_CTL_TYPE_FULL;
    ps[0].leader_epoch = 5;
    cr_assert_eq(lisr(7, &c, ps, 1).error_code, 0);
    json_t *st = state();
    cr_assert(part_state(st, "t2", 0), "a 3.4 broker dropped a stray");
    cr_assert_eq(geti(part_state(st, "t1", 0), "leaderEpoch"), 5);
    cr_assert_eq(geti(st, "strayLogsRemoved"), 0);
    cr_assert_eq(geti(json_object_get(st, "leaderAndIsrByType"), "2"), 1);
    json_decref(st);
}

/* LogManager.getOrCreateLog -> fetchLogConfig: the config ZooKeeper holds when the log is made. */
Test(brokersim, a_new_log_gets_the_topic_config_zookeeper_holds_then, .fini = stop)
{
    char err[256] = "";
    km_zks *zs = km_zks_start(1, NULL, 0, err, sizeof err);
    cr_assert(zs, "%s", err);
    km_zkc *zc = km_zkc_open(km_zks_hosts(zs, 0), NULL, 10000);
    cr_assert(zc);
    cr_assert_eq(km_zkc_mkdirs(zc, "/config/topics"), ZOK);
    const char *conf = "{\"version\":1,\"config\":{\"min.insync.replicas\":\"2\"}}";
    cr_assert_eq(km_zkc_create(zc, "/config/topics/t1", conf, 0), ZOK);
    sim_zk = km_zks_hosts(zs, 0);
    start("", -1);
    sim_zk = NULL;
    km_bp_ctl c = ctl(7, KM_CTL_TYPE_INCREMENTAL);
    km_bp_part ps[2] = { part("t1", 0, 1, 4, 6), part("t2", 0, 1, 4, 6) };
    cr_assert_eq(lisr(7, &c, ps, 2).error_code, 0);
    json_t *st = state(), *logs = json_object_get(st, "logsCreated");
    cr_assert_eq(json_array_size(logs), 2);
    for (size_t i = 0; i < 2; i++) {
        json_t *l = json_array_get(logs, i);
        const char *t = json_string_value(json_object_get(l, "topic"));
        cr_assert(json_is_true(json_object_get(l, "configRead")));
        if (!strcmp(t, "t1"))
            cr_assert_str_eq(json_string_value(json_object_get(l, "config")), conf);
        else
            cr_assert(json_is_null(json_object_get(l, "config")), "t2 has no config znode: broker defaults");
    }
    json_decref(st);
    km_zkc_close(zc);
    km_zks_stop(zs);
}
