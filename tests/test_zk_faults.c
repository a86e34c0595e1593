/* KAFKA-21062 and friends: the writer behind a proxy that lets ZooKeeper commit a multi, then drops
 * the reply and cuts the connection. The writer must carry on by itself (no new event from the
 * test), end with lag 0, ZooKeeper equal to what it was told to write, nothing applied twice. */
#include "test_zk_util.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static km_zks *zs;
static km_zkc *zc;
static km_fp *fp;

static void start_zk(void)
{
    char err[512] = "";
    zs = km_zks_start(1, NULL, 0, err, sizeof err);
    cr_assert(zs, "%s", err);
    zc = km_zkc_open(km_zks_hosts(zs, 0), NULL, 10000);
    cr_assert(zc);
    fp = km_fp_start(km_zks_port(zs, 0), err, sizeof err);
    cr_assert(fp, "%s", err);
}

static void stop_zk(void)
{
    km_fp_stop(fp);
    km_zkc_close(zc);
    km_zks_stop(zs);
}

TestSuite(zk_faults, .init = start_zk, .fini = stop_zk, .timeout = 600);

/* What the test told the writer to write, to compare ZooKeeper with. */
typedef struct model {
    int rounds;
    char path[8][32];
    char value[8][48];
    int version[8];
} model;

/* One batch: updates every counter node and creates one new node, split over several multis
 * (max_multi_ops 2), so there are data-only multis and a final checkpoint multi. */
static void submit_round(zkt_writer *t, model *md, int64_t offset)
{
    km_zop ops[9];
    char created[32], cval[32];
    for (int i = 0; i < 8; i++) {
        snprintf(md->value[i], sizeof md->value[i], "round-%d-node-%d", md->rounds, i);
        ops[i] = (km_zop){KM_ZOP_SET, md->path[i], md->value[i], (int)strlen(md->value[i]), false};
        md->version[i]++;
    }
    snprintf(created, sizeof created, "/d/new-%04d", md->rounds);
    snprintf(cval, sizeof cval, "%d", md->rounds);
    ops[8] = (km_zop){KM_ZOP_CREATE, created, cval, (int)strlen(cval), false};
    km_err err = {{0}};
    cr_assert_eq(km_zkw_submit(t->w, ops, 9, offset, 1, &err), 0, "%s", err.msg);
    md->rounds++;
}

static void assert_zk_equals(const model *md, int64_t offset)
{
    for (int i = 0; i < 8; i++) {
        int v = -1;
        char *d = zkt_get(zc, md->path[i], &v);
        cr_assert(d && !strcmp(d, md->value[i]), "%s holds %s (zkVersion %d), want %s", md->path[i], d ? d : "(none)", v,
                  md->value[i]);
        cr_assert_eq(v, md->version[i], "%s: zkVersion %d, want %d (a write applied twice?)", md->path[i], v,
                     md->version[i]);
        free(d);
    }
    char **kids = NULL;
    int n = 0;
    cr_assert_eq(km_zkc_children(zc, "/d", &kids, &n), ZOK);
    cr_assert_eq(n, 8 + md->rounds, "/d has %d children, want %d", n, 8 + md->rounds);
    km_zkc_free_strings(kids, n);
    char *mig = zkt_get(zc, "/migration", NULL), want[64];
    snprintf(want, sizeof want, "\"kraft_metadata_offset\":%lld,", (long long)offset);
    cr_assert(strstr(mig, want), "%s does not hold %s", mig, want);
    free(mig);
}

static zkt_writer *setup(model *md)
{
    km_zkc_mkdirs(zc, "/d");
    zkt_writer *t = zkt_writer_new(km_fp_hosts(fp), 3000, 5, &(km_zkw_config){.max_multi_ops = 2});
    cr_assert(t);
    cr_assert(zkt_wait_state(t, KM_ZKW_READY, 30000));
    memset(md, 0, sizeof *md);
    km_zop ops[8];
    for (int i = 0; i < 8; i++) {
        snprintf(md->path[i], sizeof md->path[i], "/d/n%d", i);
        snprintf(md->value[i], sizeof md->value[i], "initial");
        ops[i] = (km_zop){KM_ZOP_CREATE, md->path[i], "initial", 7, false};
    }
    km_err err = {{0}};
    cr_assert_eq(km_zkw_submit(t->w, ops, 8, 1, 1, &err), 0, "%s", err.msg);
    cr_assert(zkt_wait_drained(t, 30000));
    return t;
}

static void faults_in_a_row(km_fp_match match, km_fp_action action, int times, int skip)
{
    model md;
    zkt_writer *t = setup(&md);
    int fired0 = km_fp_fired(fp);
    for (int i = 0; i < times; i++) {
        km_fp_arm(fp, match, action, "/migration", skip);
        int64_t offset = 10 + i;
        submit_round(t, &md, offset);
        km_zkw_note_log_offset(t->w, offset);
        cr_assert(zkt_wait_drained(t, 30000), "round %d: state %s, pending %zu, fence: %s", i,
                  km_zkw_state_name(km_zkw_get_state(t->w)), km_zkw_pending_ops(t->w), km_zkw_fence_reason(t->w));
        cr_assert_eq(km_fp_fired(fp), fired0 + i + 1, "round %d: the fault did not fire", i);
        cr_assert_eq(km_zkw_confirmed_offset(t->w), offset);
    }
    assert_zk_equals(&md, 10 + times - 1);
    km_zkw_metrics m;
    km_zkw_get_metrics(t->w, &m);
    cr_assert_eq(m.write_behind_lag, 0);
    cr_assert_eq(m.state, KM_ZKW_READY);
    cr_assert_eq(t->fenced, 0);
    cr_assert_eq(t->resync, 0, "a lost ack must never look like drift");
    cr_assert_eq(m.claims, 1, "a lost connection keeps the session: no re-claim");
    if (action == KM_FP_DROP_REPLY)
        cr_assert_geq(m.lost_acks_adopted, (uint64_t)times, "each lost ack is adopted, not resent blindly");
    zkt_writer_free(t);
}

Test(zk_faults, lost_ack_on_checkpoint_multi_100_times)
{
    faults_in_a_row(KM_FP_MULTI_CHECKPOINT, KM_FP_DROP_REPLY, 100, 0);
}

Test(zk_faults, lost_ack_on_data_multi_100_times)
{
    faults_in_a_row(KM_FP_MULTI_DATA, KM_FP_DROP_REPLY, 100, 1);
}

Test(zk_faults, request_lost_before_the_server_20_times)
{
    faults_in_a_row(KM_FP_MULTI_ANY, KM_FP_DROP_REQUEST, 20, 2);
}

/* A deep pipeline cut at random points: whatever prefix landed is adopted, the rest resent. */
Test(zk_faults, cuts_with_many_multis_outstanding)
{
    model md;
    zkt_writer *t = setup(&md);
    for (int i = 0; i < 20; i++) {
        for (int b = 0; b < 10; b++)
            submit_round(t, &md, 100 + i * 10 + b);
        km_fp_arm(fp, KM_FP_MULTI_ANY, KM_FP_DROP_REPLY, "/migration", (i * 7) % 40);
        cr_assert(zkt_wait_drained(t, 30000), "round %d: %s", i, km_zkw_state_name(km_zkw_get_state(t->w)));
    }
    assert_zk_equals(&md, 100 + 19 * 10 + 9);
    cr_assert_eq(t->fenced + t->resync, 0);
    zkt_writer_free(t);
}

/* The claim multi and the /migration write during the claim lose their acks too. */
Test(zk_faults, lost_ack_during_the_claim)
{
    km_fp_arm(fp, KM_FP_MULTI_ANY, KM_FP_DROP_REPLY, "/migration", 0); /* the claim multi */
    zkt_writer *t = zkt_writer_new(km_fp_hosts(fp), 3000, 5, NULL);
    cr_assert(zkt_wait_state(t, KM_ZKW_READY, 30000), "%s", km_zkw_state_name(km_zkw_get_state(t->w)));
    cr_assert_eq(km_fp_fired(fp), 1);
    char *epoch = zkt_get(zc, "/controller_epoch", NULL);
    cr_assert_str_eq(epoch, "1", "the claim must land once");
    free(epoch);
    zkt_writer_free(t);
    /* second claim (a new controller epoch); lose the ack of its /migration write */
    km_fp_arm(fp, KM_FP_MULTI_CHECKPOINT, KM_FP_DROP_REPLY, "/migration", 0);
    t = zkt_writer_new(km_fp_hosts(fp), 3000, 6, NULL);
    cr_assert(zkt_wait_state(t, KM_ZKW_READY, 30000), "%s", km_zkw_fence_reason(t->w));
    cr_assert_eq(km_fp_fired(fp), 2);
    int v;
    free(zkt_get(zc, "/migration", &v));
    cr_assert_eq(km_zkw_migration_version(t->w), v);
    epoch = zkt_get(zc, "/controller_epoch", NULL);
    cr_assert_str_eq(epoch, "2");
    free(epoch);
    zkt_writer_free(t);
}

/* KAFKA-16667 by construction: every read of /migration - during the claim and during lost-ack
 * recovery - comes right after a sync(), with nothing but reads in between. */
Test(zk_faults, every_migration_read_follows_a_sync)
{
    model md;
    zkt_writer *t = setup(&md);
    for (int i = 0; i < 5; i++) {
        km_fp_arm(fp, i % 2 ? KM_FP_MULTI_CHECKPOINT : KM_FP_MULTI_DATA, KM_FP_DROP_REPLY, "/migration", 0);
        submit_round(t, &md, 50 + i);
        cr_assert(zkt_wait_drained(t, 30000));
    }
    static km_fp_req log[KM_FP_LOG_MAX];
    int n = km_fp_log(fp, log, KM_FP_LOG_MAX), reads = 0;
    bool synced = false;
    for (int i = 0; i < n; i++) {
        if (log[i].type == 9) /* sync */
            synced = true;
        else if (log[i].type == 4 && !strcmp(log[i].path, "/migration")) {
            cr_assert(synced, "request %d: getData /migration without a sync() before it", i);
            reads++;
        } else if (log[i].type != 4 && log[i].type != 8 && log[i].type != 12) /* a write */
            synced = false;
    }
    cr_assert_geq(reads, 6, "the claim and 5 recoveries read /migration (%d reads)", reads);
    zkt_writer_free(t);
}
