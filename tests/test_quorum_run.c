/* test_quorum_run.c - `kmproxy run` (the binary) with metadata.source=quorum: once it has applied
 * the committed log, a new leader whose log contradicts an applied record makes it exit 1 naming
 * the offset and epoch.  The simulators run on a thread; the leadership moves on that thread as
 * soon as the observer has fetched everything (a condition, not a delay). */
#include "test_quorum_util.h"
#include "km_testsupport.h"
#include "zkserver.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct run_rig {
    struct ev_loop *loop;
    km_rsim *sims[2];
    char servers[128];
    int64_t end;
    int32_t epoch;
    ev_timer watch;
    ev_async stop;
    pthread_t thread;
} run_rig;

/* On the simulators' thread: the observer fetches at the log end, so it has applied every
 * committed record; now node 2 leads with a log that rewrote some of them. */
static void on_watch(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)revents;
    run_rig *r = w->data;
    km_rsim_stats st;
    km_rsim_get_stats(r->sims[0], &st);
    if (st.last_fetch_offset < r->end)
        return;
    for (int i = 0; i < 2; i++)
        km_rsim_set_leader(r->sims[i], 2, r->epoch + 1);
    ev_timer_stop(loop, w);
}

static void on_stop(struct ev_loop *loop, ev_async *w, int revents)
{
    (void)w;
    (void)revents;
    ev_break(loop, EVBREAK_ALL);
}

static void *run(void *arg)
{
    ev_run(((run_rig *)arg)->loop, 0);
    return NULL;
}

Test(quorum_run, a_contradiction_of_applied_records_exits_1_naming_offset_and_epoch, .timeout = 240)
{
    char zerr[512];
    km_zks *zks = km_zks_start(1, NULL, 0, zerr, sizeof zerr);
    cr_assert(zks, "ZooKeeper: %s", zerr);
    char *tmp = km_test_tmpdir("qrun"), gendir[600], seg[700], zk[160];
    snprintf(gendir, sizeof gendir, "%s/gen", tmp);
    snprintf(seg, sizeof seg, "%s/00000000000000000000.log", gendir);
    snprintf(zk, sizeof zk, "%s/kafka", km_zks_hosts(zks, -1));
    km_gen_opts g = {.brokers = 3, .topics = 2, .partitions = 2, .zk_migration = true, .seed = 5};
    km_err e;
    cr_assert_geq(km_gen_write(gendir, &g, NULL, &e), 0, "%s", e.msg);
    size_t len;
    uint8_t *log = tq_read_file(seg, &len);
    run_rig r = { .loop = ev_loop_new(0) };
    tq_make_sims(r.loop, 2, NULL, r.sims, r.servers, sizeof r.servers);
    for (int i = 0; i < 2; i++)
        cr_assert_eq(km_rsim_append(r.sims[i], log, len, &e), 0, "%s", e.msg);
    r.end = km_rsim_log_end(r.sims[0]);
    r.epoch = km_rsim_last_epoch(r.sims[0]);
    km_rsim_truncate(r.sims[1], r.end - 8); /* node 2 lost committed records... */
    km_buf other;
    km_buf_init(&other);
    int64_t from = km_rsim_log_end(r.sims[1]);
    tq_config_batch(&other, from, r.epoch + 1, 3, "rewritten"); /* ...and wrote others at a newer epoch */
    cr_assert_eq(km_rsim_append(r.sims[1], other.data, other.len, &e), 0, "%s", e.msg);
    for (int i = 0; i < 2; i++)
        km_rsim_set_leader(r.sims[i], 1, r.epoch);
    ev_timer_init(&r.watch, on_watch, 0.01, 0.01);
    r.watch.data = &r;
    ev_timer_start(r.loop, &r.watch);
    ev_async_init(&r.stop, on_stop);
    ev_async_start(r.loop, &r.stop);
    cr_assert_eq(pthread_create(&r.thread, NULL, run, &r), 0);

    char src[64], boot[200], zkc[200];
    snprintf(src, sizeof src, "metadata.source=quorum");
    snprintf(boot, sizeof boot, "controller.quorum.bootstrap.servers=%s", r.servers);
    snprintf(zkc, sizeof zkc, "zookeeper.connect=%s", zk);
    char *argv[] = { (char *)km_test_binary(), "run", "--set", src, "--set", boot, "--set", zkc, "--set",
                     "brokers.enabled=false", NULL };
    char *out = NULL, *errs = NULL;
    size_t n;
    int rc = km_test_run(argv, NULL, 0, &out, &n, &errs);
    ev_async_send(r.loop, &r.stop);
    pthread_join(r.thread, NULL);
    char want[64];
    snprintf(want, sizeof want, "offset %lld", (long long)from);
    cr_assert_eq(rc, 1, "kmproxy run exited %d:\n%s", rc, errs);
    cr_assert(strstr(errs, "metadata quorum") && strstr(errs, want) && strstr(errs, "epoch"), "%s", errs);
    for (int i = 0; i < 2; i++)
        km_rsim_free(r.sims[i]);
    ev_loop_destroy(r.loop);
    km_buf_free(&other);
    free(log);
    free(out);
    free(errs);
    km_zks_stop(zks);
    km_test_rmtree(tmp);
    free(tmp);
}
