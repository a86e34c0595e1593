/* zkbridge writer against a real ZooKeeper: claim, /migration, pipelined multis, splitting,
 * the write-behind bound, and fencing on a genuine second writer. */
#include "test_zk_util.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static km_zks *zs;
static km_zkc *zc;

static void start_zk(void)
{
    char err[512] = "";
    zs = km_zks_start(1, NULL, 0, err, sizeof err);
    cr_assert(zs, "%s", err);
    zc = km_zkc_open(km_zks_hosts(zs, 0), NULL, 10000);
    cr_assert(zc, "test client cannot connect");
}

static void stop_zk(void)
{
    km_zkc_close(zc);
    km_zks_stop(zs);
}

TestSuite(zk_writer, .init = start_zk, .fini = stop_zk, .timeout = 240);

static zkt_writer *claimed_writer(int32_t id, int32_t epoch, const km_zkw_config *cfg)
{
    zkt_writer *t = zkt_writer_new(km_zks_hosts(zs, 0), id, epoch, cfg);
    cr_assert(t);
    cr_assert(zkt_wait_state(t, KM_ZKW_READY, 30000), "writer is %s: %s", km_zkw_state_name(km_zkw_get_state(t->w)),
              km_zkw_fence_reason(t->w));
    return t;
}

static bool resync_seen(zkt_writer *t) { return t->resync > 0; }

Test(zk_writer, claim_on_empty_zookeeper)
{
    zkt_writer *t = claimed_writer(3000, 5, NULL);
    int v = -1;
    char *epoch = zkt_get(zc, "/controller_epoch", &v);
    cr_assert_str_eq(epoch, "1");
    cr_assert_eq(v, 0);
    cr_assert_eq(km_zkw_zk_controller_epoch(t->w), 1);
    char *ctrl = zkt_get(zc, "/controller", NULL);
    cr_assert(ctrl && strstr(ctrl, "{\"version\":2,\"brokerid\":3000,\"timestamp\":\""), "%s", ctrl);
    cr_assert(strstr(ctrl, "\",\"kraftControllerEpoch\":5}"), "%s", ctrl);
    char *mig = zkt_get(zc, "/migration", &v);
    cr_assert_str_eq(mig, "{\"version\":0,\"kraft_controller_id\":3000,\"kraft_controller_epoch\":5,"
                          "\"kraft_metadata_offset\":-1,\"kraft_metadata_epoch\":-1}");
    /* absent, so created (guarded by our /controller_epoch): its version is ours by construction */
    cr_assert_eq(v, 0);
    cr_assert_eq(km_zkw_migration_version(t->w), 0);
    cr_assert_eq(t->claimed, 1);
    free(epoch); free(ctrl); free(mig);
    zkt_writer_free(t);
}

Test(zk_writer, claim_takes_over_a_zk_controller_and_keeps_the_offset)
{
    cr_assert_eq(km_zkc_create(zc, "/controller", "{\"version\":1,\"brokerid\":1,\"timestamp\":\"1\"}", 0), ZOK);
    cr_assert_eq(km_zkc_create(zc, "/controller_epoch", "7", 0), ZOK);
    cr_assert_eq(km_zkc_create(zc, "/migration",
                               "{\"version\":0,\"kraft_controller_id\":1,\"kraft_controller_epoch\":1,"
                               "\"kraft_metadata_offset\":42,\"kraft_metadata_epoch\":3}", 0), ZOK);
    zkt_writer *t = claimed_writer(3001, 9, NULL);
    char *epoch = zkt_get(zc, "/controller_epoch", NULL);
    cr_assert_str_eq(epoch, "8");
    cr_assert_eq(km_zkw_confirmed_offset(t->w), 42);
    cr_assert_eq(km_zkw_confirmed_epoch(t->w), 3);
    int v;
    char *mig = zkt_get(zc, "/migration", &v);
    cr_assert(strstr(mig, "\"kraft_controller_id\":3001,\"kraft_controller_epoch\":9,\"kraft_metadata_offset\":42"));
    cr_assert_eq(v, km_zkw_migration_version(t->w));
    free(epoch); free(mig);
    zkt_writer_free(t);
}

Test(zk_writer, claim_refused_when_a_higher_kraft_epoch_holds_controller)
{
    const char *held = "{\"version\":2,\"brokerid\":3002,\"timestamp\":\"1\",\"kraftControllerEpoch\":10}";
    cr_assert_eq(km_zkc_create(zc, "/controller", held, 0), ZOK);
    cr_assert_eq(km_zkc_create(zc, "/controller_epoch", "4", 0), ZOK);
    zkt_writer *t = zkt_writer_new(km_zks_hosts(zs, 0), 3000, 9, NULL);
    cr_assert(zkt_wait_state(t, KM_ZKW_REFUSED, 30000), "state %s", km_zkw_state_name(km_zkw_get_state(t->w)));
    cr_assert(strstr(km_zkw_fence_reason(t->w), "epoch 10"), "%s", km_zkw_fence_reason(t->w));
    char *epoch = zkt_get(zc, "/controller_epoch", NULL), *ctrl = zkt_get(zc, "/controller", NULL);
    cr_assert_str_eq(epoch, "4");
    cr_assert_str_eq(ctrl, held);
    cr_assert_null(zkt_get(zc, "/migration", NULL));
    km_err err = {{0}};
    cr_assert_eq(km_zkw_submit(t->w, NULL, 0, 1, 1, &err), -1);
    free(epoch); free(ctrl);
    zkt_writer_free(t);
}

/* KafkaZkClient.tryRegisterKRaftControllerAsActiveController: a KRaft epoch in /controller that is not
 * older than ours refuses the claim, even when our own node id wrote it (a restarted controller, a
 * second `zk sync` of one log); a newer epoch claims. */
Test(zk_writer, claim_refused_at_the_epoch_in_controller_even_from_the_same_node)
{
    zkt_writer *t = claimed_writer(3000, 5, NULL);
    zkt_writer_free(t);
    char *held = zkt_get(zc, "/controller", NULL);
    t = zkt_writer_new(km_zks_hosts(zs, 0), 3000, 5, NULL);
    cr_assert(zkt_wait_state(t, KM_ZKW_REFUSED, 30000), "state %s", km_zkw_state_name(km_zkw_get_state(t->w)));
    cr_assert(strstr(km_zkw_fence_reason(t->w), "KRaft controller 3000 at epoch 5, not lower than our epoch 5"),
              "%s", km_zkw_fence_reason(t->w));
    char *epoch = zkt_get(zc, "/controller_epoch", NULL), *ctrl = zkt_get(zc, "/controller", NULL);
    cr_assert_str_eq(epoch, "1", "a refused claim writes nothing");
    cr_assert_str_eq(ctrl, held);
    free(epoch); free(ctrl);
    zkt_writer_free(t);
    t = claimed_writer(3000, 6, NULL);
    epoch = zkt_get(zc, "/controller_epoch", NULL);
    cr_assert_str_eq(epoch, "2");
    free(epoch); free(held);
    zkt_writer_free(t);
}

/* Batches of creates then updates; /migration must end at the last batch, one zkVersion per batch. */
Test(zk_writer, pipelined_batches_land_in_order)
{
    km_zkc_mkdirs(zc, "/t");
    zkt_writer *t = claimed_writer(3000, 5, &(km_zkw_config){.max_multi_ops = 7, .max_inflight = 16});
    int v0 = km_zkw_migration_version(t->w);
    km_err err = {{0}};
    char paths[40][32], vals[40][32];
    for (int b = 0; b < 40; b++) {
        km_zop ops[20];
        for (int i = 0; i < 20; i++) {
            snprintf(paths[i], sizeof paths[i], "/t/n%02d", i);
            snprintf(vals[i], sizeof vals[i], "b%d", b);
            ops[i] = (km_zop){b == 0 ? KM_ZOP_CREATE : KM_ZOP_SET, paths[i], vals[i], (int)strlen(vals[i]), false};
        }
        cr_assert_eq(km_zkw_submit(t->w, ops, 20, 100 + b, 2, &err), 0, "%s", err.msg);
    }
    cr_assert(zkt_wait_drained(t, 60000), "state %s", km_zkw_state_name(km_zkw_get_state(t->w)));
    int v;
    char *mig = zkt_get(zc, "/migration", &v);
    cr_assert_eq(v, v0 + 40, "one /migration bump per batch, got %d from %d", v, v0);
    cr_assert(strstr(mig, "\"kraft_metadata_offset\":139,\"kraft_metadata_epoch\":2}"), "%s", mig);
    for (int i = 0; i < 20; i++) {
        char *d = zkt_get(zc, paths[i], &v);
        cr_assert_str_eq(d, "b39");
        cr_assert_eq(v, 39);
        free(d);
    }
    km_zkw_metrics m;
    km_zkw_get_metrics(t->w, &m);
    cr_assert_eq(m.write_behind_lag, 0);
    cr_assert_eq(m.multis_ok, 40 * 3);
    cr_assert_eq(m.znodes_created, 20);
    cr_assert_eq(m.znodes_updated, 39 * 20);
    free(mig);
    zkt_writer_free(t);
}

/* A batch far bigger than one multi may be is split, and still moves /migration exactly once. */
Test(zk_writer, large_batch_is_split_under_the_byte_limit)
{
    km_zkc_mkdirs(zc, "/big");
    zkt_writer *t = claimed_writer(3000, 5, &(km_zkw_config){.max_multi_bytes = 64 * 1024, .max_multi_ops = 100000});
    enum { N = 3000 };
    static char paths[N][32];
    static char value[200];
    memset(value, 'x', sizeof value - 1);
    static km_zop ops[N];
    for (int i = 0; i < N; i++) {
        snprintf(paths[i], sizeof paths[i], "/big/z%05d", i);
        ops[i] = (km_zop){KM_ZOP_CREATE, paths[i], value, (int)strlen(value), false};
    }
    int v0 = km_zkw_migration_version(t->w);
    km_err err = {{0}};
    cr_assert_eq(km_zkw_submit(t->w, ops, N, 7, 1, &err), 0, "%s", err.msg);
    cr_assert(zkt_wait_drained(t, 60000));
    km_zkw_metrics m;
    km_zkw_get_metrics(t->w, &m);
    cr_assert_gt(m.multis_ok, 8, "3000 x ~260 bytes must take several 64 KiB multis, took %llu",
                 (unsigned long long)m.multis_ok);
    int v;
    free(zkt_get(zc, "/migration", &v));
    cr_assert_eq(v, v0 + 1);
    char **kids = NULL;
    int n = 0;
    cr_assert_eq(km_zkc_children(zc, "/big", &kids, &n), ZOK);
    cr_assert_eq(n, N);
    km_zkc_free_strings(kids, n);
    zkt_writer_free(t);
}

/* A znode larger than the multis are packed to goes alone in one; one that the server's
 * jute.maxbuffer cannot take is refused before anything is queued, naming it and the key. */
Test(zk_writer, unit_that_cannot_fit_one_multi_is_refused)
{
    static char big[8000];
    memset(big, 'y', sizeof big - 1);
    km_zop ops[3] = {{KM_ZOP_CREATE, "/small1", "s", 1, false}, {KM_ZOP_CREATE, "/big8k", big, (int)strlen(big), false},
                     {KM_ZOP_CREATE, "/small2", "s", 1, false}};
    zkt_writer *t = claimed_writer(3000, 5, &(km_zkw_config){.max_multi_bytes = 4096});
    km_err err = {{0}};
    cr_assert_eq(km_zkw_submit(t->w, ops, 3, 1, 1, &err), 0, "%s", err.msg);
    cr_assert(zkt_wait_drained(t, 30000));
    km_zkw_metrics m;
    km_zkw_get_metrics(t->w, &m);
    cr_assert_eq(m.multis_ok, 3, "small, the big one alone, small: %llu multis", (unsigned long long)m.multis_ok);
    cr_assert_not(km_zkw_znode_too_large(t->w));
    zkt_writer_free(t);

    t = claimed_writer(3000, 6, &(km_zkw_config){.jute_maxbuffer = 4096});
    km_zop op = {KM_ZOP_CREATE, "/huge", big, (int)strlen(big), false};
    cr_assert_eq(km_zkw_submit(t->w, &op, 1, 2, 1, &err), -1);
    cr_assert(strstr(err.msg, "/huge is 7999 bytes") && strstr(err.msg, "zookeeper.jute.maxbuffer=4096"), "%s",
              err.msg);
    cr_assert(km_zkw_znode_too_large(t->w));
    cr_assert_eq(km_zkw_pending_ops(t->w), 0);
    cr_assert_eq(t->resync, 0, "refused, not re-synced");
    km_zop seq = {KM_ZOP_CREATE_SEQ, "/c/config_change_", "{}", 2, false};
    cr_assert_eq(km_zkw_submit(t->w, &seq, 1, 1, 1, &err), -1);
    cr_assert(strstr(err.msg, "sequential"), "%s", err.msg);
    zkt_writer_free(t);
}

Test(zk_writer, write_behind_bound_refuses_until_drained)
{
    km_zkc_mkdirs(zc, "/wb");
    zkt_writer *t = claimed_writer(3000, 5, &(km_zkw_config){.max_pending_ops = 10, .max_multi_ops = 5});
    char paths[10][16];
    km_zop ops[10];
    for (int i = 0; i < 10; i++) {
        snprintf(paths[i], sizeof paths[i], "/wb/%d", i);
        ops[i] = (km_zop){KM_ZOP_CREATE, paths[i], "v", 1, false};
    }
    km_err err = {{0}};
    cr_assert(km_zkw_can_accept(t->w));
    cr_assert_eq(km_zkw_submit(t->w, ops, 10, 10, 1, &err), 0, "%s", err.msg);
    cr_assert_not(km_zkw_can_accept(t->w), "10 pending ops fill a bound of 10");
    km_zkw_note_log_offset(t->w, 25);
    cr_assert(zkt_run_until(t->loop, (bool (*)(void *))km_zkw_idle, t->w, 30000));
    cr_assert(km_zkw_can_accept(t->w));
    km_zkw_metrics m;
    km_zkw_get_metrics(t->w, &m);
    cr_assert_eq(m.write_behind_lag, 15, "log at 25, ZooKeeper confirmed 10: lag %lld", (long long)m.write_behind_lag);
    cr_assert_geq(m.blocking_kraft_ms, 0);
    zkt_writer_free(t);
}

/* A batch's /migration write waits for the batch's other multis. Here the first one fails (its
 * znode drifted behind our back) while the second lands: the third, which would move /migration,
 * must never be sent, or ZooKeeper would claim an offset whose data it lacks. */
Test(zk_writer, migration_bump_never_outruns_a_failed_multi_of_its_batch)
{
    km_zkc_mkdirs(zc, "/h/x");
    zkt_writer *t = claimed_writer(3000, 5, &(km_zkw_config){.max_multi_ops = 2, .max_inflight = 16});
    km_zkw_cache_put(t->w, "/h/x", 0);
    cr_assert_eq(km_zkc_set(zc, "/h/x", "drift", -1, NULL), ZOK); /* now at zkVersion 1 */
    int v0;
    char *before = zkt_get(zc, "/migration", &v0);
    km_zop ops[5] = {{KM_ZOP_SET, "/h/x", "a", 1, false}, {KM_ZOP_CREATE, "/h/a", "a", 1, false},
                     {KM_ZOP_CREATE, "/h/b", "b", 1, false}, {KM_ZOP_CREATE, "/h/c", "c", 1, false},
                     {KM_ZOP_CREATE, "/h/d", "d", 1, false}};
    km_err err = {{0}};
    cr_assert_eq(km_zkw_submit(t->w, ops, 5, 77, 3, &err), 0, "%s", err.msg);
    cr_assert(zkt_run_until(t->loop, (bool (*)(void *))resync_seen, t, 30000), "no RESYNC after the drifted setData");
    char *b = zkt_get(zc, "/h/b", NULL);
    cr_assert_str_eq(b, "b", "the second multi was sent alongside the first");
    int v;
    char *after = zkt_get(zc, "/migration", &v);
    cr_assert_eq(v, v0, "/migration moved although the batch's first multi failed: %s", after);
    cr_assert_str_eq(after, before);
    cr_assert_null(zkt_get(zc, "/h/d", NULL), "the /migration multi must not have been sent");
    cr_assert_eq(km_zkw_confirmed_offset(t->w), -1);
    free(b); free(before); free(after);
    zkt_writer_free(t);
}

/* Partial batches (the full sync's stream) only check /migration; the batch that ends them moves it
 * once, after all of them are acknowledged. */
Test(zk_writer, partial_batches_ride_on_one_migration_version)
{
    km_zkc_mkdirs(zc, "/p");
    zkt_writer *t = claimed_writer(3000, 5, &(km_zkw_config){.max_multi_ops = 4, .max_inflight = 16});
    int v0 = km_zkw_migration_version(t->w);
    km_err err = {{0}};
    cr_assert_eq(km_zkw_submit_partial(t->w, NULL, 0, &err), 0, "%s", err.msg);
    cr_assert(km_zkw_idle(t->w), "an empty partial batch queues nothing");
    char paths[25][16];
    km_zop ops[25];
    for (int i = 0; i < 25; i++) {
        snprintf(paths[i], sizeof paths[i], "/p/%02d", i);
        ops[i] = (km_zop){KM_ZOP_CREATE, paths[i], "v", 1, false};
    }
    cr_assert_eq(km_zkw_submit_partial(t->w, ops, 10, &err), 0, "%s", err.msg);
    cr_assert_eq(km_zkw_submit_partial(t->w, ops + 10, 10, &err), 0, "%s", err.msg);
    cr_assert_eq(km_zkw_submit(t->w, ops + 20, 5, 50, 2, &err), 0, "%s", err.msg);
    cr_assert(zkt_wait_drained(t, 30000));
    int v;
    char *mig = zkt_get(zc, "/migration", &v);
    cr_assert_eq(v, v0 + 1, "one /migration write for the three batches, got zkVersion %d from %d", v, v0);
    cr_assert(strstr(mig, "\"kraft_metadata_offset\":50,\"kraft_metadata_epoch\":2}"), "%s", mig);
    char **kids = NULL;
    int n = 0;
    cr_assert_eq(km_zkc_children(zc, "/p", &kids, &n), ZOK);
    cr_assert_eq(n, 25);
    km_zkc_free_strings(kids, n);
    km_zkw_metrics m;
    km_zkw_get_metrics(t->w, &m);
    cr_assert_eq(m.multis_ok, 3 + 3 + 2);
    cr_assert_eq(t->confirmed, 1, "only the ending batch confirms an offset");
    free(mig);
    zkt_writer_free(t);
}

/* Someone else moves /migration behind our back: we must fence and write nothing more. */
Test(zk_writer, second_writer_on_migration_fences)
{
    km_zkc_mkdirs(zc, "/f");
    zkt_writer *t = claimed_writer(3000, 5, NULL);
    cr_assert_eq(km_zkc_set(zc, "/migration", "{\"version\":0,\"kraft_controller_id\":9,\"kraft_controller_epoch\":9,"
                                              "\"kraft_metadata_offset\":5,\"kraft_metadata_epoch\":1}", -1, NULL), ZOK);
    km_zop op = {KM_ZOP_CREATE, "/f/a", "1", 1, false};
    km_err err = {{0}};
    cr_assert_eq(km_zkw_submit(t->w, &op, 1, 100, 1, &err), 0, "%s", err.msg);
    cr_assert(zkt_wait_state(t, KM_ZKW_FENCED, 30000), "state %s", km_zkw_state_name(km_zkw_get_state(t->w)));
    cr_assert(strstr(km_zkw_fence_reason(t->w), "second writer"), "%s", km_zkw_fence_reason(t->w));
    cr_assert_eq(t->fenced, 1);
    cr_assert_geq(t->errors_logged, 1);
    cr_assert_null(zkt_get(zc, "/f/a", NULL), "the fenced batch must not land");
    km_zop op2 = {KM_ZOP_CREATE, "/f/b", "1", 1, false};
    cr_assert_eq(km_zkw_submit(t->w, &op2, 1, 101, 1, &err), -1);
    zkt_spin(t->loop, 300);
    cr_assert_null(zkt_get(zc, "/f/b", NULL));
    char *json = km_zkw_metrics_json(t->w);
    cr_assert(strstr(json, "\"zk_migration_state\":\"FENCED\""), "%s", json);
    free(json);
    zkt_writer_free(t);
}

Test(zk_writer, second_controller_claim_fences)
{
    km_zkc_mkdirs(zc, "/g");
    zkt_writer *t = claimed_writer(3000, 5, NULL);
    cr_assert_eq(km_zkc_set(zc, "/controller_epoch", "2", -1, NULL), ZOK);
    km_zop op = {KM_ZOP_CREATE, "/g/a", "1", 1, false};
    km_err err = {{0}};
    cr_assert_eq(km_zkw_submit(t->w, &op, 1, 100, 1, &err), 0, "%s", err.msg);
    cr_assert(zkt_wait_state(t, KM_ZKW_FENCED, 30000));
    cr_assert(strstr(km_zkw_fence_reason(t->w), "/controller_epoch"), "%s", km_zkw_fence_reason(t->w));
    cr_assert_null(zkt_get(zc, "/g/a", NULL));
    zkt_writer_free(t);
}
