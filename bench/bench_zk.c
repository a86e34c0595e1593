/* bench_zk: znodes written per second by a full sync (SYNC_KRAFT_TO_ZK) of a 100,000-partition
 * image, against the raw ZooKeeper C client pipelining zoo_amulti of the same ops (same grouping,
 * same in-flight depth, no guards) on the same kind of server in the same run. Both clocks start
 * before zookeeper_init, so session set-up counts on both sides. Each side writes to its
 * own fresh server (empty database, cold JVM), twice in alternating order. After each of its full
 * syncs the bridge re-syncs the ZooKeeper it filled (a restart), timed against the bare client
 * reading the same znodes. A 10 ms ticker reports the longest the loop was held up. */
#include "faultproxy.h"
#include "km_image.h"
#include "km_testsupport.h"
#include "km_zkbridge.h"
#include "zkserver.h"

#include <ev.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MULTI_OPS 1000
#define INFLIGHT 64

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

typedef struct raw_multi {
    zoo_op_t zops[MULTI_OPS];
    zoo_op_result_t res[MULTI_OPS];
    struct Stat st[MULTI_OPS];
    int *outstanding, *failed;
} raw_multi;

static void on_raw(int rc, const void *data)
{
    raw_multi *m = (raw_multi *)data;
    (*m->outstanding)--;
    if (rc != ZOK)
        (*m->failed)++;
}

static void pump(zhandle_t *zh)
{
    int fd = -1, interest = 0;
    struct timeval tv = {0, 0};
    zookeeper_interest(zh, &fd, &interest, &tv);
    struct pollfd p = {fd, (short)(((interest & ZOOKEEPER_READ) ? POLLIN : 0) | ((interest & ZOOKEEPER_WRITE) ? POLLOUT : 0)), 0};
    int ms = (int)(tv.tv_sec * 1000 + tv.tv_usec / 1000);
    poll(&p, fd >= 0 ? 1 : 0, ms > 0 && ms < 50 ? ms : 50);
    zookeeper_process(zh, ((p.revents & (POLLIN | POLLHUP | POLLERR)) ? ZOOKEEPER_READ : 0) |
                              ((p.revents & POLLOUT) ? ZOOKEEPER_WRITE : 0));
}

static void init_op(zoo_op_t *z, const km_zop *o)
{
    if (o->kind == KM_ZOP_CREATE || o->kind == KM_ZOP_CREATE_SEQ)
        zoo_create_op_init(z, o->path, o->data, o->len, &ZOO_OPEN_ACL_UNSAFE,
                           o->kind == KM_ZOP_CREATE_SEQ ? ZOO_PERSISTENT_SEQUENTIAL : ZOO_PERSISTENT, NULL, 0);
    else
        zoo_set_op_init(z, o->path, o->data, o->len, -1, NULL);
}

/* The same ops through the bare client: multis of up to MULTI_OPS ops (cut at unit boundaries like
 * the writer), INFLIGHT outstanding. Returns seconds, or -1. */
static double raw_run(const char *hosts, const km_zop *ops, size_t n)
{
    double t0 = now_s(); /* from zookeeper_init on, like the bridge's run */
    zhandle_t *zh = zookeeper_init(hosts, NULL, 30000, NULL, NULL, 0);
    if (zh) /* as the bridge does: no DNS round trip per loop iteration */
        zoo_set_servers_resolution_delay(zh, 10000);
    while (zh && zoo_state(zh) != ZOO_CONNECTED_STATE)
        pump(zh);
    int outstanding = 0, failed = 0;
    raw_multi *slots = calloc(INFLIGHT * 2, sizeof *slots);
    size_t at = 0, slot = 0;
    while (zh && (at < n || outstanding)) {
        while (at < n && outstanding < INFLIGHT) {
            raw_multi *m = &slots[slot++ % (INFLIGHT * 2)];
            size_t k = 0;
            while (at < n && (k < MULTI_OPS - 1 || ops[at - 1].join_next) && k < MULTI_OPS)
                init_op(&m->zops[k++], &ops[at++]);
            m->outstanding = &outstanding;
            m->failed = &failed;
            if (zoo_amulti(zh, (int)k, m->zops, m->res, on_raw, m) != ZOK)
                return -1;
            outstanding++;
        }
        pump(zh);
    }
    double t = now_s() - t0;
    if (getenv("BENCH_VERBOSE"))
        fprintf(stderr, "bench_zk: raw run %.3f s\n", t);
    if (zh)
        zookeeper_close(zh);
    free(slots);
    return failed || !zh ? -1 : t;
}

static void bench_log(km_log_level lvl, const char *msg, void *ctx)
{
    (void)ctx;
    if (lvl <= KM_LOG_WARN || getenv("BENCH_VERBOSE"))
        fprintf(stderr, "bench_zk: %s\n", msg);
}

static bool idle(void *ctx) { return km_zkb_idle(ctx) || km_zkb_get_phase(ctx) == KM_ZKB_STOPPED; }

/* A 10 ms ticker: the longest gap between two ticks is the longest the loop was held up. */
typedef struct ticker {
    ev_timer t;
    double last, worst;
    km_zkb *b;
} ticker;

static void tick(struct ev_loop *l, ev_timer *t, int r)
{
    (void)l; (void)r;
    ticker *k = (ticker *)t;
    double now = now_s();
    if (now - k->last > k->worst)
        k->worst = now - k->last;
    if (now - k->last > 0.05 && getenv("BENCH_VERBOSE"))
        fprintf(stderr, "bench_zk: loop held %.0f ms (phase %d, planning %d)\n", (now - k->last) * 1e3,
                (int)km_zkb_get_phase(k->b), (int)km_zkb_planning(k->b));
    k->last = now;
}

typedef struct bridge_result {
    double secs, worst_stall;
    size_t written;
} bridge_result;

/* A bridge (claim included) driven until ZooKeeper equals the image. -1 secs on failure. */
static bridge_result bridge_run(const char *hosts, const km_image *img, int32_t epoch)
{
    bridge_result r = {-1, 0, 0};
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    km_zkb_config cfg = {.zk = {.hosts = hosts, .controller_id = 3000, .controller_epoch = epoch,
                                .max_multi_ops = MULTI_OPS, .max_inflight = INFLIGHT, .max_pending_ops = 400000,
                                .session_timeout_ms = 30000, .log = bench_log}};
    km_err err = {{0}};
    double t0 = now_s();
    km_zkb *b = km_zkb_new(loop, img, &cfg, &err);
    if (!b)
        return fprintf(stderr, "bench_zk: %s\n", err.msg), r;
    ticker k = {.last = t0, .b = b};
    ev_timer_init(&k.t, tick, 0.01, 0.01);
    ev_timer_start(loop, &k.t);
    while (!idle(b))
        ev_run(loop, EVRUN_ONCE);
    double secs = now_s() - t0;
    if (getenv("BENCH_VERBOSE"))
        fprintf(stderr, "bench_zk: bridge run %.3f s, longest loop stall %.0f ms\n", secs, k.worst * 1e3);
    km_zkb_summary s;
    km_zkb_get_summary(b, &s);
    if (km_zkb_idle(b))
        r = (bridge_result){secs, k.worst, s.created + s.updated + s.deleted};
    else
        fprintf(stderr, "bench_zk: bridge stopped: %s\n", km_zkb_error(b));
    ev_timer_stop(loop, &k.t);
    km_zkb_free(b);
    ev_loop_destroy(loop);
    return r;
}

static void on_read(int rc, const char *value, int len, const struct Stat *st, const void *data)
{
    (void)value; (void)len; (void)st;
    int *outstanding = (int *)data;
    outstanding[0]--;
    outstanding[1] += rc != ZOK;
}

/* The baseline of a re-sync: the bare client reading every znode of the ops (notifications aside),
 * as many in flight as the bridge's reader keeps. Returns seconds, or -1. */
static double raw_read(const char *hosts, const km_zop *ops, size_t n)
{
    double t0 = now_s();
    zhandle_t *zh = zookeeper_init(hosts, NULL, 30000, NULL, NULL, 0);
    if (zh)
        zoo_set_servers_resolution_delay(zh, 10000);
    while (zh && zoo_state(zh) != ZOO_CONNECTED_STATE)
        pump(zh);
    int counts[2] = {0, 0}; /* outstanding, failed */
    size_t at = 0;
    while (zh && (at < n || counts[0])) {
        for (; at < n && counts[0] < 512; at++)
            if (ops[at].kind != KM_ZOP_CREATE_SEQ) {
                if (zoo_aget(zh, ops[at].path, 0, on_read, counts) != ZOK)
                    return -1;
                counts[0]++;
            }
        pump(zh);
    }
    double t = now_s() - t0;
    if (zh)
        zookeeper_close(zh);
    return counts[1] || !zh ? -1 : t;
}

typedef struct run_times {
    double sync, raw_sync, resync, raw_read, worst_stall;
    size_t written;
} run_times;

/* One measured run on a fresh server: both sides start from an empty database and a cold JVM. The
 * bridge's run then re-syncs the ZooKeeper it filled (a restart: read, compare, write nothing),
 * timed against the bare client reading the same znodes. */
static int fresh_run(bool bridge, const km_image *img, const km_zop *ops, size_t n, run_times *rt)
{
    char err[512] = "";
    km_zks *zs = km_zks_start(1, NULL, 0, err, sizeof err);
    if (!zs)
        return fprintf(stderr, "bench_zk: %s\n", err), -1;
    const char *hosts = km_zks_hosts(zs, 0);
    int rc = 0;
    if (!bridge) {
        double t = raw_run(hosts, ops, n);
        rc = t < 0 ? -1 : 0;
        rt->raw_sync += t;
    } else {
        bridge_result first = bridge_run(hosts, img, 1), again = bridge_run(hosts, img, 2);
        double read = raw_read(hosts, ops, n);
        rc = first.secs < 0 || again.secs < 0 || read < 0 || again.written ? -1 : 0;
        rt->sync += first.secs;
        rt->resync += again.secs;
        rt->raw_read += read;
        rt->written = first.written;
        rt->worst_stall = fmax(rt->worst_stall, fmax(first.worst_stall, again.worst_stall));
    }
    km_zks_stop(zs);
    return rc;
}

int main(int argc, char **argv)
{
    int topics = argc > 1 ? atoi(argv[1]) : 1000, partitions = argc > 2 ? atoi(argv[2]) : 100;
    setenv("KM_ZK_XMX", "2g", 0);
    char *dir = km_test_tmpdir("benchzk"), log[512];
    snprintf(log, sizeof log, "%s/log", dir);
    km_image *img = km_image_new();
    km_gen_opts o = {.brokers = 3, .topics = topics, .partitions = partitions, .seed = 1, .zk_migration = true};
    km_err kerr = {{0}};
    km_zop *ops = NULL;
    size_t n = 0;
    if (km_gen_write(log, &o, img, &kerr) < 0 || km_zk_full_sync_ops(img, 1, &ops, &n, &kerr))
        return fprintf(stderr, "bench_zk: %s\n", kerr.msg), 1;
    /* raw, bridge, bridge, raw: each side gets the same share of early and late runs */
    static const bool order[] = {false, true, true, false};
    run_times rt = {0};
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++)
        if (fresh_run(order[i], img, ops, n, &rt))
            return fprintf(stderr, "bench_zk: run %zu failed\n", i), 1;
    double ours_rate = (double)rt.written * 2 / rt.sync, raw_rate = (double)n * 2 / rt.raw_sync;
    printf("zk full sync, %d partitions: %zu znodes, bridge %.0f znodes/s (claim, read, plan, guarded multis "
           "included), raw zoo_amulti %.0f znodes/s, ratio %.2f (target >= 0.80)\n",
           topics * partitions, rt.written, ours_rate, raw_rate, ours_rate / raw_rate);
    printf("zk re-sync of an in-sync ZooKeeper (claim, read, compare, nothing written): %.2f s, raw pipelined "
           "getData of the same znodes %.2f s, ratio %.2f; longest loop stall in any bridge run %.0f ms\n",
           rt.resync / 2, rt.raw_read / 2, rt.raw_read / rt.resync, rt.worst_stall * 1e3);
    km_zk_ops_free(ops, n);
    km_image_free(img);
    km_test_rmtree(dir);
    free(dir);
    return 0;
}
