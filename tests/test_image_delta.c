/* test_image_delta.c - replay semantics (Kafka 3.9 MetadataDelta) and the deltas they produce. */
#include "test_image_util.h"

#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

static ti_ctx C;

static void setup(void) { ti_ctx_open(&C); }
static void teardown(void) { ti_ctx_close(&C); }

TestSuite(image_delta, .init = setup, .fini = teardown);

#define SETL(f, n, p) ((f).count = (n), (f).items = (p))

/* Three brokers, topic "t" (uuid 1) with partitions 0 [1,2,3] and 1 [2,3,1]; then a fresh delta. */
static void cluster(void)
{
    for (int32_t b = 1; b <= 3; b++)
        ti_broker(&C, b, 10 + b, true);
    ti_topic(&C, "t", ti_uuid(1));
    ti_partition(&C, ti_uuid(1), 0, TI_LIST(1, 2, 3), 1);
    ti_partition(&C, ti_uuid(1), 1, TI_LIST(2, 3, 1), 2);
    km_delta_clear(C.delta);
}

static km_partition part(int32_t pid)
{
    const km_topic *t = km_image_topic_by_name(C.img, "t");
    cr_assert(t);
    km_partition p;
    cr_assert(km_topic_partition(t, pid, &p));
    return p;
}

static bool list_is(km_i32_list l, const int32_t *v, int32_t n)
{
    return l.n == n && (n == 0 || !memcmp(l.v, v, (size_t)n * 4));
}

static int count_partition_changes(km_partition_change *last)
{
    size_t it = 0;
    int n = 0;
    while (km_delta_next_partition(C.delta, &it, last))
        n++;
    return n;
}

Test(image_delta, new_topic_is_created_with_its_partitions)
{
    ti_topic(&C, "a", ti_uuid(9));
    ti_partition(&C, ti_uuid(9), 0, TI_LIST(1), 1);
    size_t it = 0;
    km_topic_change tc;
    cr_assert(km_delta_next_topic(C.delta, &it, &tc));
    cr_assert_eq(tc.op, KM_CREATED);
    cr_assert_str_eq(tc.name, "a");
    cr_assert_eq(tc.new_partitions, 1);
    km_partition_change pc;
    cr_assert_eq(count_partition_changes(&pc), 1);
    cr_assert(!pc.has_old && pc.has_new);
    cr_assert_str_eq(pc.topic_name, "a");
    /* Directories absent from the record: defaultToMigrating. */
    cr_assert_eq(pc.new.directories.n, 1);
    cr_assert(!memcmp(&pc.new.directories.v[0], &KM_DIR_MIGRATING, 16));
    cr_assert_eq(km_delta_offset(C.delta), C.off - 1);
}

Test(image_delta, leader_change_bumps_leader_and_partition_epoch)
{
    cluster();
    km_partition_change_record r;
    ti_change_init(&r, ti_uuid(1), 0);
    r.leader = 2;
    cr_assert_eq(ti_change(&C, &r), 0, "%s", C.err.msg);
    km_partition p = part(0);
    cr_assert_eq(p.leader, 2);
    cr_assert_eq(p.leader_epoch, 1);
    cr_assert_eq(p.partition_epoch, 1);
    cr_assert(list_is(p.isr, TI_LIST(1, 2, 3)), "null ISR means no change");
    km_partition_change pc;
    cr_assert_eq(count_partition_changes(&pc), 1);
    cr_assert_eq(pc.partition, 0);
    cr_assert(pc.has_old && pc.has_new);
    cr_assert_eq(pc.old.leader, 1);
    cr_assert_eq(pc.new.leader, 2);
    cr_assert_eq(pc.what, KM_PC_LEADER | KM_PC_LEADER_EPOCH | KM_PC_PARTITION_EPOCH);
}

Test(image_delta, leader_set_to_same_leader_still_bumps_epoch)
{
    cluster();
    km_partition_change_record r;
    ti_change_init(&r, ti_uuid(1), 0);
    r.leader = 1;            /* how the controller forces an epoch bump */
    cr_assert_eq(ti_change(&C, &r), 0, "%s", C.err.msg);
    cr_assert_eq(part(0).leader_epoch, 1);
    r.leader = KM_NO_LEADER; /* leader lost */
    cr_assert_eq(ti_change(&C, &r), 0, "%s", C.err.msg);
    cr_assert_eq(part(0).leader, -1);
    cr_assert_eq(part(0).leader_epoch, 2);
    cr_assert_eq(part(0).partition_epoch, 2);
}

Test(image_delta, isr_change_keeps_leader_epoch)
{
    cluster();
    km_partition_change_record r;
    ti_change_init(&r, ti_uuid(1), 1);
    int32_t isr[] = {2, 3};
    r.isr.count = 2;
    r.isr.items = isr;
    cr_assert_eq(ti_change(&C, &r), 0, "%s", C.err.msg);
    km_partition p = part(1);
    cr_assert_eq(p.leader, 2);
    cr_assert_eq(p.leader_epoch, 0);
    cr_assert_eq(p.partition_epoch, 1);
    cr_assert(list_is(p.isr, TI_LIST(2, 3)));
    km_partition_change pc;
    cr_assert_eq(count_partition_changes(&pc), 1);
    cr_assert_eq(pc.what, KM_PC_ISR | KM_PC_PARTITION_EPOCH);
    cr_assert(list_is(pc.old.isr, TI_LIST(2, 3, 1)), "the before state is kept");
}

Test(image_delta, net_change_over_several_records)
{
    cluster();
    km_partition_change_record r;
    ti_change_init(&r, ti_uuid(1), 0);
    r.leader = 2;
    cr_assert_eq(ti_change(&C, &r), 0);
    r.leader = 3;
    cr_assert_eq(ti_change(&C, &r), 0);
    km_partition_change pc;
    cr_assert_eq(count_partition_changes(&pc), 1);
    cr_assert_eq(pc.old.leader, 1);
    cr_assert_eq(pc.old.leader_epoch, 0);
    cr_assert_eq(pc.new.leader, 3);
    cr_assert_eq(pc.new.leader_epoch, 2);
}

Test(image_delta, reassignment_adds_then_removes_replicas)
{
    cluster();
    ti_broker(&C, 4, 40, false);
    km_partition_change_record r;
    ti_change_init(&r, ti_uuid(1), 0);
    int32_t all[] = {1, 2, 3, 4}, adding[] = {4}, removing[] = {1};
    SETL(r.replicas, 4, all);
    SETL(r.adding_replicas, 1, adding);
    SETL(r.removing_replicas, 1, removing);
    cr_assert_eq(ti_change(&C, &r), 0, "%s", C.err.msg);
    km_partition p = part(0);
    cr_assert(list_is(p.replicas, TI_LIST(1, 2, 3, 4)));
    cr_assert(list_is(p.adding_replicas, TI_LIST(4)));
    cr_assert(list_is(p.removing_replicas, TI_LIST(1)));
    cr_assert_eq(p.directories.n, 4);
    /* No directories anywhere (before 3.7): KAFKA-16583 keeps them MIGRATING, resized (test_image_dirs). */
    cr_assert(!memcmp(&p.directories.v[0], &KM_DIR_MIGRATING, 16));
    cr_assert(!memcmp(&p.directories.v[3], &KM_DIR_MIGRATING, 16));
    cr_assert_eq(p.leader_epoch, 0);

    /* Completion: replicas [2,3,4], ISR [2,3,4], leader moves off the removed replica. */
    ti_change_init(&r, ti_uuid(1), 0);
    int32_t fin[] = {2, 3, 4};
    SETL(r.replicas, 3, fin);
    SETL(r.isr, 3, fin);
    SETL(r.adding_replicas, 0, NULL);
    SETL(r.removing_replicas, 0, NULL);
    r.leader = 2;
    cr_assert_eq(ti_change(&C, &r), 0, "%s", C.err.msg);
    p = part(0);
    cr_assert(list_is(p.replicas, TI_LIST(2, 3, 4)));
    cr_assert_eq(p.adding_replicas.n, 0);
    cr_assert_eq(p.removing_replicas.n, 0);
    cr_assert_eq(p.leader_epoch, 1);
    cr_assert_eq(p.partition_epoch, 2);
    cr_assert_eq(p.directories.n, 3);
    cr_assert(!memcmp(&p.directories.v[2], &KM_DIR_MIGRATING, 16));
    km_partition_change pc;
    cr_assert_eq(count_partition_changes(&pc), 1);
    cr_assert(pc.what & KM_PC_REPLICAS);
    cr_assert(list_is(pc.old.replicas, TI_LIST(1, 2, 3)), "before the first change of the delta");
}

Test(image_delta, leader_recovery_state)
{
    cluster();
    km_partition_change_record r;
    ti_change_init(&r, ti_uuid(1), 0);
    r.leader_recovery_state = KM_LRS_RECOVERING;
    r.leader = 3;
    cr_assert_eq(ti_change(&C, &r), 0);
    cr_assert_eq(part(0).leader_recovery_state, KM_LRS_RECOVERING);
    ti_change_init(&r, ti_uuid(1), 0);     /* -1: no change */
    cr_assert_eq(ti_change(&C, &r), 0);
    cr_assert_eq(part(0).leader_recovery_state, KM_LRS_RECOVERING);
    r.leader_recovery_state = 7;
    cr_assert_eq(ti_change(&C, &r), -1);
    cr_assert(strstr(C.err.msg, "leader recovery state 7"), "%s", C.err.msg);
}

Test(image_delta, unknown_partition_and_topic_are_errors)
{
    cluster();
    km_partition_change_record r;
    ti_change_init(&r, ti_uuid(1), 5);
    r.leader = 1;
    cr_assert_eq(ti_change(&C, &r), -1);
    cr_assert(strstr(C.err.msg, "test: offset"), "%s", C.err.msg);
    cr_assert(strstr(C.err.msg, "PARTITION_CHANGE_RECORD v1: unknown partition t-5"), "%s", C.err.msg);
    /* The image is poisoned: later records fail with the same error. */
    ti_change_init(&r, ti_uuid(1), 0);
    cr_assert_eq(ti_change(&C, &r), -1);
    cr_assert(strstr(C.err.msg, "t-5"), "%s", C.err.msg);
}

Test(image_delta, topic_deletion_drops_partitions_and_configs)
{
    cluster();
    ti_config(&C, KM_CFG_TOPIC, "t", "retention.ms", "1000");
    km_delta_clear(C.delta);
    km_remove_topic_record r;
    km_remove_topic_record_init(&r);
    r.topic_id = ti_uuid(1);
    cr_assert_eq(ti_apply(&C, KM_MDR_REMOVE_TOPIC_RECORD, 0, &r), 0, "%s", C.err.msg);
    cr_assert_null(km_image_topic_by_name(C.img, "t"));
    cr_assert_null(km_image_config(C.img, KM_CFG_TOPIC, "t"));
    cr_assert_eq(km_image_partition_count(C.img), 0);
    size_t it = 0;
    km_topic_change tc;
    cr_assert(km_delta_next_topic(C.delta, &it, &tc));
    cr_assert_eq(tc.op, KM_DELETED);
    cr_assert_eq(tc.old_partitions, 2);
    km_partition_change pc;
    cr_assert_eq(count_partition_changes(&pc), 2);
    cr_assert(pc.has_old && !pc.has_new);
    cr_assert_str_eq(pc.topic_name, "t");
    km_config_change cc;
    it = 0;
    cr_assert(km_delta_next_config(C.delta, &it, &cc));
    cr_assert(cc.old && !cc.new);
    cr_assert_str_eq(km_config_get(cc.old, "retention.ms"), "1000");
    /* Deleting again: Kafka fails the replay. */
    cr_assert_eq(ti_apply(&C, KM_MDR_REMOVE_TOPIC_RECORD, 0, &r), -1);
}

Test(image_delta, created_and_deleted_in_one_delta_is_invisible)
{
    cluster();
    ti_topic(&C, "tmp", ti_uuid(7));
    ti_partition(&C, ti_uuid(7), 0, TI_LIST(1), 1);
    km_remove_topic_record r;
    km_remove_topic_record_init(&r);
    r.topic_id = ti_uuid(7);
    cr_assert_eq(ti_apply(&C, KM_MDR_REMOVE_TOPIC_RECORD, 0, &r), 0, "%s", C.err.msg);
    cr_assert(km_delta_empty(C.delta));
}

static km_broker_change broker_change(void)
{
    size_t it = 0;
    km_broker_change bc;
    cr_assert(km_delta_next_broker(C.delta, &it, &bc));
    cr_assert_not(km_delta_next_broker(C.delta, &it, &bc), "one broker changed");
    return bc;
}

Test(image_delta, broker_fence_unfence_unregister)
{
    cluster();
    km_unfence_broker_record u;
    km_unfence_broker_record_init(&u);
    u.id = 2;
    u.epoch = 12;
    cr_assert_eq(ti_apply(&C, KM_MDR_UNFENCE_BROKER_RECORD, 0, &u), 0, "%s", C.err.msg);
    km_broker_change bc = broker_change();
    cr_assert_eq(bc.what, KM_BC_UNFENCED);
    cr_assert(bc.old->fenced && !bc.new->fenced);
    cr_assert(!km_image_broker(C.img, 2)->fenced);

    km_delta_clear(C.delta);
    km_fence_broker_record f;
    km_fence_broker_record_init(&f);
    f.id = 2;
    f.epoch = 12;
    cr_assert_eq(ti_apply(&C, KM_MDR_FENCE_BROKER_RECORD, 0, &f), 0, "%s", C.err.msg);
    cr_assert_eq(broker_change().what, KM_BC_FENCED);

    km_delta_clear(C.delta);
    km_unregister_broker_record ur;
    km_unregister_broker_record_init(&ur);
    ur.broker_id = 2;
    ur.broker_epoch = 12;
    cr_assert_eq(ti_apply(&C, KM_MDR_UNREGISTER_BROKER_RECORD, 0, &ur), 0, "%s", C.err.msg);
    bc = broker_change();
    cr_assert_eq(bc.what, KM_BC_UNREGISTERED);
    cr_assert_null(bc.new);
    cr_assert_null(km_image_broker(C.img, 2));
    cr_assert_eq(km_image_broker_count(C.img), 2);
}

Test(image_delta, fence_at_wrong_epoch_or_unknown_broker_fails)
{
    cluster();
    km_fence_broker_record f;
    km_fence_broker_record_init(&f);
    f.id = 1;
    f.epoch = 99;
    cr_assert_eq(ti_apply(&C, KM_MDR_FENCE_BROKER_RECORD, 0, &f), -1);
    cr_assert(strstr(C.err.msg, "FENCE_BROKER_RECORD v0: tried to fence broker 1, but the given epoch, 99, did not "
                                "match the current broker epoch, 11"), "%s", C.err.msg);
}

Test(image_delta, registration_change_controlled_shutdown)
{
    cluster();
    km_broker_registration_change_record r;
    km_broker_registration_change_record_init(&r);
    r.broker_id = 3;
    r.broker_epoch = 13;
    r.fenced = -1;           /* UNFENCE */
    cr_assert_eq(ti_apply(&C, KM_MDR_BROKER_REGISTRATION_CHANGE_RECORD, 0, &r), 0, "%s", C.err.msg);
    r.fenced = 0;
    r.in_controlled_shutdown = 1;
    cr_assert_eq(ti_apply(&C, KM_MDR_BROKER_REGISTRATION_CHANGE_RECORD, 0, &r), 0, "%s", C.err.msg);
    const km_broker *b = km_image_broker(C.img, 3);
    cr_assert(!b->fenced && b->in_controlled_shutdown && b->is_migrating_zk_broker);
    cr_assert_eq(broker_change().what, KM_BC_UNFENCED | KM_BC_SHUTDOWN_STARTED);
    r.fenced = 2;
    cr_assert_eq(ti_apply(&C, KM_MDR_BROKER_REGISTRATION_CHANGE_RECORD, 0, &r), -1);
    cr_assert(strstr(C.err.msg, "unknown value for fenced field: 2"), "%s", C.err.msg);
}

Test(image_delta, reregistration_is_reported)
{
    cluster();
    ti_broker(&C, 1, 77, true);
    km_broker_change bc = broker_change();
    cr_assert(bc.what & KM_BC_REREGISTERED);
    cr_assert_eq(bc.old->epoch, 11);
    cr_assert_eq(bc.new->epoch, 77);
    ti_broker(&C, 9, 78, false);
    size_t it = 0;
    int n = 0;
    while (km_delta_next_broker(C.delta, &it, &bc))
        n++;
    cr_assert_eq(n, 2);
    cr_assert_eq(bc.what, KM_BC_REGISTERED);
}

Test(image_delta, config_set_change_delete)
{
    ti_config(&C, KM_CFG_TOPIC, "t", "b.key", "1");
    ti_config(&C, KM_CFG_TOPIC, "t", "a.key", "2");
    const km_config_res *r = km_image_config(C.img, KM_CFG_TOPIC, "t");
    cr_assert_eq(r->n, 2);
    cr_assert_str_eq(r->kv[0].name, "a.key", "kept sorted");
    km_delta_clear(C.delta);
    ti_config(&C, KM_CFG_TOPIC, "t", "a.key", "3");
    ti_config(&C, KM_CFG_TOPIC, "t", "b.key", NULL);
    r = km_image_config(C.img, KM_CFG_TOPIC, "t");
    cr_assert_eq(r->n, 1);
    cr_assert_str_eq(km_config_get(r, "a.key"), "3");
    size_t it = 0;
    km_config_change cc;
    cr_assert(km_delta_next_config(C.delta, &it, &cc));
    cr_assert_str_eq(cc.name, "t");
    cr_assert_str_eq(km_config_get(cc.old, "a.key"), "2");
    cr_assert_str_eq(km_config_get(cc.old, "b.key"), "1");
    cr_assert_null(km_config_get(cc.new, "b.key"));
    ti_config(&C, KM_CFG_TOPIC, "t", "a.key", NULL);
    cr_assert_null(km_image_config(C.img, KM_CFG_TOPIC, "t"), "an empty resource is dropped");
    ti_config(&C, KM_CFG_BROKER, "", "x", "y");
    cr_assert_str_eq(km_config_get(km_image_config(C.img, KM_CFG_BROKER, ""), "x"), "y");
}

static void begin(void)
{
    km_begin_transaction_record b;
    km_begin_transaction_record_init(&b);
    b.name = km_cstr("txn");
    cr_assert_eq(ti_apply(&C, KM_MDR_BEGIN_TRANSACTION_RECORD, 0, &b), 0, "%s", C.err.msg);
}

Test(image_delta, transaction_commit_applies_at_end)
{
    cluster();
    int64_t before = km_image_offset(C.img);
    begin();
    ti_topic(&C, "x", ti_uuid(5));
    ti_partition(&C, ti_uuid(5), 0, TI_LIST(1, 2), 1);
    cr_assert_null(km_image_topic_by_name(C.img, "x"), "nothing is visible inside the transaction");
    cr_assert(km_image_in_transaction(C.img));
    cr_assert_eq(km_image_offset(C.img), before, "the offset stays before the transaction");
    km_end_transaction_record e;
    km_end_transaction_record_init(&e);
    cr_assert_eq(ti_apply(&C, KM_MDR_END_TRANSACTION_RECORD, 0, &e), 0, "%s", C.err.msg);
    const km_topic *t = km_image_topic_by_name(C.img, "x");
    cr_assert(t);
    cr_assert_eq(km_topic_partition_count(t), 1);
    cr_assert_eq(km_image_offset(C.img), C.off - 1);
    size_t it = 0;
    km_topic_change tc;
    cr_assert(km_delta_next_topic(C.delta, &it, &tc));
    cr_assert_eq(tc.op, KM_CREATED);
}

Test(image_delta, transaction_abort_drops_records)
{
    cluster();
    begin();
    ti_topic(&C, "x", ti_uuid(5));
    km_abort_transaction_record a;
    km_abort_transaction_record_init(&a);
    cr_assert_eq(ti_apply(&C, KM_MDR_ABORT_TRANSACTION_RECORD, 0, &a), 0, "%s", C.err.msg);
    cr_assert_null(km_image_topic_by_name(C.img, "x"));
    cr_assert(!km_image_in_transaction(C.img));
    cr_assert(km_delta_empty(C.delta));
    cr_assert_eq(km_image_offset(C.img), C.off - 1);
}

Test(image_delta, transaction_markers_out_of_order_fail)
{
    km_end_transaction_record e;
    km_end_transaction_record_init(&e);
    cr_assert_eq(ti_apply(&C, KM_MDR_END_TRANSACTION_RECORD, 0, &e), -1);
    cr_assert(strstr(C.err.msg, "END_TRANSACTION_RECORD v0: no BeginTransactionRecord before it"), "%s", C.err.msg);
    km_image_free(C.img);
    C.img = km_image_new();
    begin();
    km_begin_transaction_record b;
    km_begin_transaction_record_init(&b);
    cr_assert_eq(ti_apply(&C, KM_MDR_BEGIN_TRANSACTION_RECORD, 0, &b), -1);
    cr_assert(strstr(C.err.msg, "already in a transaction"), "%s", C.err.msg);
}

Test(image_delta, unknown_type_and_version_are_errors)
{
    km_topic_record r;
    km_topic_record_init(&r);
    r.name = km_cstr("x");
    cr_assert_eq(km_image_apply(C.img, KM_MDR_TOPIC_RECORD, 7, &r, 42, 3, "f.log", NULL, &C.err), -1);
    cr_assert_str_eq(C.err.msg, "f.log: offset 42: TOPIC_RECORD v7: unsupported version (known: 0-0)");
    km_image_free(C.img);
    C.img = km_image_new();
    cr_assert_eq(km_image_apply(C.img, 6, 0, &r, 43, 3, "f.log", NULL, &C.err), -1);
    cr_assert_str_eq(C.err.msg, "f.log: offset 43: record type 6 v0: unknown metadata record type");
}

Test(image_delta, features_and_migration_state)
{
    km_feature_level_record f;
    km_feature_level_record_init(&f);
    f.name = km_cstr("metadata.version");
    f.feature_level = KM_MV_3_9_IV0;
    cr_assert_eq(ti_apply(&C, KM_MDR_FEATURE_LEVEL_RECORD, 0, &f), 0);
    f.name = km_cstr("kraft.version");
    f.feature_level = 1;
    cr_assert_eq(ti_apply(&C, KM_MDR_FEATURE_LEVEL_RECORD, 0, &f), 0);
    cr_assert_eq(km_image_metadata_version(C.img), 21);
    cr_assert_eq(km_image_feature(C.img, "kraft.version"), 1);
    f.feature_level = 0;     /* removes */
    cr_assert_eq(ti_apply(&C, KM_MDR_FEATURE_LEVEL_RECORD, 0, &f), 0);
    cr_assert_eq(km_image_feature(C.img, "kraft.version"), 0);
    size_t it = 0;
    km_feature_change fc;
    cr_assert(km_delta_next_feature(C.delta, &it, &fc));
    cr_assert_str_eq(fc.name, "metadata.version");
    cr_assert_eq(fc.new_level, 21);
    cr_assert_not(km_delta_next_feature(C.delta, &it, &fc), "kraft.version came and went");
    f.name = km_cstr("metadata.version");
    cr_assert_eq(ti_apply(&C, KM_MDR_FEATURE_LEVEL_RECORD, 0, &f), -1, "metadata.version cannot be 0");

    km_image_free(C.img);
    C.img = km_image_new();
    km_delta_clear(C.delta);
    km_zk_migration_state_record z;
    km_zk_migration_state_record_init(&z);
    z.zk_migration_state = KM_ZKM_MIGRATION;
    cr_assert_eq(ti_apply(&C, KM_MDR_ZK_MIGRATION_STATE_RECORD, 0, &z), 0);
    cr_assert_eq(km_image_zk_migration_state(C.img), KM_ZKM_MIGRATION);
    int o, n;
    cr_assert(km_delta_zk_migration_state(C.delta, &o, &n));
    cr_assert_eq(o, KM_ZKM_NONE);
    cr_assert_eq(n, KM_ZKM_MIGRATION);
}

Test(image_delta, acls_quotas_scram_producer_ids_tokens)
{
    km_access_control_entry_record a;
    km_access_control_entry_record_init(&a);
    a.id = ti_uuid(3);
    a.resource_type = 2;
    a.resource_name = km_cstr("t");
    a.pattern_type = 3;
    a.principal = km_cstr("User:a");
    a.host = km_cstr("*");
    a.operation = 3;
    a.permission_type = 3;
    cr_assert_eq(ti_apply(&C, KM_MDR_ACCESS_CONTROL_ENTRY_RECORD, 0, &a), 0, "%s", C.err.msg);
    cr_assert_str_eq(km_image_acl(C.img, ti_uuid(3))->principal, "User:a");
    km_remove_access_control_entry_record ra;
    km_remove_access_control_entry_record_init(&ra);
    ra.id = ti_uuid(3);
    cr_assert_eq(ti_apply(&C, KM_MDR_REMOVE_ACCESS_CONTROL_ENTRY_RECORD, 0, &ra), 0, "%s", C.err.msg);
    cr_assert_null(km_image_acl(C.img, ti_uuid(3)));

    km_client_quota_record q;
    km_client_quota_record_init(&q);
    km_client_quota_record_entity_data ent[2] = {{.entity_type = km_cstr("user"), .entity_name = km_cstr("u")},
                                                 {.entity_type = km_cstr("client-id"), .entity_name = {NULL, -1}}};
    q.entity.count = 2;
    q.entity.items = ent;
    q.key = km_cstr("producer_byte_rate");
    q.value = 5.0;
    cr_assert_eq(ti_apply(&C, KM_MDR_CLIENT_QUOTA_RECORD, 0, &q), 0, "%s", C.err.msg);
    size_t it = 0;
    const km_client_quota *cq = km_image_next_quota(C.img, &it);
    cr_assert(cq);
    cr_assert_eq(cq->n_parts, 2);
    cr_assert_str_eq(cq->parts[0].type, "client-id", "parts sorted by type");
    cr_assert_null(cq->parts[0].name, "the default entity");
    cr_assert_eq(cq->kv[0].value, 5.0);
    q.remove = true;
    cr_assert_eq(ti_apply(&C, KM_MDR_CLIENT_QUOTA_RECORD, 0, &q), 0, "%s", C.err.msg);
    it = 0;
    cr_assert_null(km_image_next_quota(C.img, &it), "an entity with no quota left is dropped");

    km_producer_ids_record p;
    km_producer_ids_record_init(&p);
    p.broker_id = 1;
    p.broker_epoch = 5;
    p.next_producer_id = 2000;
    cr_assert_eq(ti_apply(&C, KM_MDR_PRODUCER_IDS_RECORD, 0, &p), 0, "%s", C.err.msg);
    cr_assert_eq(km_image_producer_ids(C.img).next_producer_id, 2000);
    km_producer_ids po, pn;
    cr_assert(km_delta_producer_ids(C.delta, &po, &pn));
    cr_assert_eq(po.next_producer_id, -1);
    cr_assert_eq(pn.next_producer_id, 2000);

    km_delta_clear(C.delta);
    km_remove_access_control_entry_record_init(&ra);
    ra.id = ti_uuid(4);
    cr_assert_eq(ti_apply(&C, KM_MDR_REMOVE_ACCESS_CONTROL_ENTRY_RECORD, 0, &ra), -1);
    cr_assert(strstr(C.err.msg, "failed to find existing ACL"), "%s", C.err.msg);
}

Test(image_delta, full_delta_lists_everything_as_created)
{
    cluster();
    ti_config(&C, KM_CFG_TOPIC, "t", "k", "v");
    km_delta *d = km_delta_new();
    cr_assert_eq(km_image_full_delta(C.img, d, &C.err), 0, "%s", C.err.msg);
    size_t it = 0;
    int np = 0, nb = 0;
    km_partition_change pc;
    while (km_delta_next_partition(d, &it, &pc)) {
        cr_assert(!pc.has_old && pc.has_new);
        np++;
    }
    km_broker_change bc;
    it = 0;
    while (km_delta_next_broker(d, &it, &bc)) {
        cr_assert_eq(bc.what, KM_BC_REGISTERED);
        nb++;
    }
    cr_assert_eq(np, 2);
    cr_assert_eq(nb, 3);
    km_config_change cc;
    it = 0;
    cr_assert(km_delta_next_config(d, &it, &cc));
    km_delta_free(d);
}

Test(image_delta, delta_outlives_image_changes)
{
    cluster();
    km_partition_change_record r;
    ti_change_init(&r, ti_uuid(1), 0);
    int32_t isr[] = {1};
    SETL(r.isr, 1, isr);
    cr_assert_eq(ti_change(&C, &r), 0);
    km_delta *kept = C.delta;
    C.delta = km_delta_new();
    km_remove_topic_record rt;
    km_remove_topic_record_init(&rt);
    rt.topic_id = ti_uuid(1);
    cr_assert_eq(ti_apply(&C, KM_MDR_REMOVE_TOPIC_RECORD, 0, &rt), 0);
    size_t it = 0;
    km_partition_change pc;
    cr_assert(km_delta_next_partition(kept, &it, &pc));
    cr_assert(list_is(pc.new.isr, TI_LIST(1)), "still readable after the topic is gone");
    cr_assert_str_eq(pc.topic_name, "t");
    km_delta_free(kept);
}

Test(image_delta, replica_lists_are_interned)
{
    cluster();
    ti_partition(&C, ti_uuid(1), 2, TI_LIST(1, 2, 3), 1);
    cr_assert_eq(part(0).replicas.v, part(2).replicas.v);
    cr_assert_eq(part(0).replicas.v, part(0).isr.v);
}

Test(image_delta, hostile_partition_id_is_refused)
{
    ti_topic(&C, "t", ti_uuid(1));
    km_partition_record r;
    km_partition_record_init(&r);
    r.topic_id = ti_uuid(1);
    r.partition_id = INT32_MAX;
    r.replicas.count = r.isr.count = r.removing_replicas.count = r.adding_replicas.count = r.directories.count = 0;
    cr_assert_eq(ti_apply(&C, KM_MDR_PARTITION_RECORD, 1, &r), -1);
    cr_assert(strstr(C.err.msg, "PARTITION_RECORD v1: partition id 2147483647 out of range"), "%s", C.err.msg);
}

Test(image_delta, scram_and_delegation_tokens)
{
    km_user_scram_credential_record s;
    km_user_scram_credential_record_init(&s);
    uint8_t salt[4] = {1, 2, 3, 4};
    s.name = km_cstr("alice");
    s.mechanism = 2;
    s.salt = (km_bytes){salt, 4};
    s.stored_key = s.server_key = (km_bytes){salt, 2};
    s.iterations = 8192;
    cr_assert_eq(ti_apply(&C, KM_MDR_USER_SCRAM_CREDENTIAL_RECORD, 0, &s), 0, "%s", C.err.msg);
    const km_scram *sc = km_image_scram(C.img, "alice", 2);
    cr_assert(sc);
    cr_assert_eq(sc->iterations, 8192);
    cr_assert_eq(sc->salt.len, 4);
    cr_assert_null(km_image_scram(C.img, "alice", 1), "per mechanism");
    km_remove_user_scram_credential_record rs;
    km_remove_user_scram_credential_record_init(&rs);
    rs.name = km_cstr("alice");
    rs.mechanism = 2;
    cr_assert_eq(ti_apply(&C, KM_MDR_REMOVE_USER_SCRAM_CREDENTIAL_RECORD, 0, &rs), 0, "%s", C.err.msg);
    cr_assert_null(km_image_scram(C.img, "alice", 2));
    size_t it = 0;
    km_scram_change sch;
    cr_assert_not(km_delta_next_scram(C.delta, &it, &sch), "added and removed within the delta");

    km_delegation_token_record t;
    km_delegation_token_record_init(&t);
    km_str renewers[] = {km_cstr("User:r")};
    t.token_id = km_cstr("tok1");
    t.owner = km_cstr("User:o");
    t.requester = km_cstr("User:o");
    t.renewers.count = 1;
    t.renewers.items = renewers;
    t.expiration_timestamp = 99;
    cr_assert_eq(ti_apply(&C, KM_MDR_DELEGATION_TOKEN_RECORD, 0, &t), 0, "%s", C.err.msg);
    const km_token *tk = km_image_token(C.img, "tok1");
    cr_assert(tk);
    cr_assert_str_eq(tk->renewers[0], "User:r");
    cr_assert_eq(tk->expiration_timestamp, 99);
    km_delta_clear(C.delta);
    km_remove_delegation_token_record rt;
    km_remove_delegation_token_record_init(&rt);
    rt.token_id = km_cstr("tok1");
    cr_assert_eq(ti_apply(&C, KM_MDR_REMOVE_DELEGATION_TOKEN_RECORD, 0, &rt), 0, "%s", C.err.msg);
    cr_assert_null(km_image_token(C.img, "tok1"));
    km_token_change tch;
    it = 0;
    cr_assert(km_delta_next_token(C.delta, &it, &tch));
    cr_assert(tch.old && !tch.new);
    cr_assert_str_eq(tch.old->owner, "User:o");
}

Test(image_delta, added_partitions_change_the_topic)
{
    cluster();
    ti_partition(&C, ti_uuid(1), 2, TI_LIST(3, 1, 2), 3);
    size_t it = 0;
    km_topic_change tc;
    cr_assert(km_delta_next_topic(C.delta, &it, &tc));
    cr_assert_eq(tc.op, KM_CHANGED);
    cr_assert_eq(tc.old_partitions, 2);
    cr_assert_eq(tc.new_partitions, 3);
    km_partition_change pc;
    cr_assert_eq(count_partition_changes(&pc), 1);
    cr_assert(!pc.has_old && pc.has_new);
    cr_assert_eq(pc.partition, 2);
}

/* A TopicRecord naming another topic's id.  Kafka's controller never writes one (each topic gets
 * a fresh Uuid), and Kafka's image cannot hold it (TopicsDelta.replay(TopicRecord) re-keys the id
 * while apply() leaves the old name in topicsByName).  Replacing the old topic here made the
 * delta (keyed by id) carry the old name with the new partitions: the brokers never learnt the
 * new topic while the image held it.  It is refused, naming both topics. */
Test(image_delta, topic_record_reusing_another_topics_id_is_refused)
{
    cluster();
    km_topic_record r;
    km_topic_record_init(&r);
    r.name = km_cstr("u");
    r.topic_id = ti_uuid(1); /* t's */
    cr_assert_eq(ti_apply(&C, KM_MDR_TOPIC_RECORD, 0, &r), -1, "a second name for t's id was accepted");
    cr_assert(strstr(C.err.msg, "\"u\"") && strstr(C.err.msg, "\"t\""), "%s", C.err.msg);
    cr_assert_not_null(km_image_topic_by_name(C.img, "t"));
    cr_assert_null(km_image_topic_by_name(C.img, "u"));
}
