/* bench_zk: znodes written per second by a full sync (SYNC_KRAFT_TO_ZK) of a 100,000-partition
 * image, against the raw ZooKeeper C client pipelining zoo_amulti of the same ops (same grouping,
 * same in-flight depth, no guards) on the same kind of server in the same run. Each side writes to its
 * own fresh server (empty database, cold JVM), twice in alternating order. */
#include "faultproxy.h"
#include "km_image.h"
#include "km_testsupport.h"
#include "km_zkbridge.h"
#include "zkserver.h"

#include <ev.h>
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
    zhandle_t *zh = zookeeper_init(hosts, NULL, 30000, NULL, NULL, 0);
    if (zh) /* as the bridge does: no DNS round trip per loop iteration */
        zoo_set_servers_resolution_delay(zh, 10000);
    while (zh && zoo_state(zh) != ZOO_CONNECTED_STATE)
        pump(zh);
    int outstanding = 0, failed = 0;
    raw_multi *slots = calloc(INFLIGHT * 2, sizeof *slots);
    size_t at = 0, slot = 0;
    double t0 = now_s();
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

static void tick(struct ev_loop *l, ev_timer *t, int r) { (void)l; (void)t; (void)r; }

/* The bridge's full sync onto an empty chroot, claim included. Returns seconds, or -1. */
static double bridge_run(const char *hosts, const km_image *img, size_t *written)
{
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    km_zkb_config cfg = {.zk = {.hosts = hosts, .controller_id = 3000, .controller_epoch = 1,
                                .max_multi_ops = MULTI_OPS, .max_inflight = INFLIGHT, .max_pending_ops = 400000,
                                .session_timeout_ms = 30000, .log = bench_log}};
    km_err err = {{0}};
    double t0 = now_s();
    km_zkb *b = km_zkb_new(loop, img, &cfg, &err);
    if (!b)
        return fprintf(stderr, "bench_zk: %s\n", err.msg), -1;
    ev_timer t;
    ev_timer_init(&t, tick, 0.01, 0.01);
    ev_timer_start(loop, &t);
    while (!idle(b))
        ev_run(loop, EVRUN_ONCE);
    double secs = now_s() - t0;
    if (getenv("BENCH_VERBOSE"))
        fprintf(stderr, "bench_zk: bridge run %.3f s\n", secs);
    km_zkb_summary s;
    km_zkb_get_summary(b, &s);
    *written = s.created + s.updated;
    bool ok = km_zkb_idle(b);
    if (!ok)
        fprintf(stderr, "bench_zk: bridge stopped: %s\n", km_zkb_error(b));
    ev_timer_stop(loop, &t);
    km_zkb_free(b);
    ev_loop_destroy(loop);
    return ok ? secs : -1;
}

/* One measured run on a fresh server: both sides start from an empty database and a cold JVM. */
static double fresh_run(bool bridge, const km_image *img, const km_zop *ops, size_t n, size_t *written)
{
    char err[512] = "";
    km_zks *zs = km_zks_start(1, NULL, 0, err, sizeof err);
    if (!zs)
        return fprintf(stderr, "bench_zk: %s\n", err), -1;
    double t = bridge ? bridge_run(km_zks_hosts(zs, 0), img, written) : raw_run(km_zks_hosts(zs, 0), ops, n);
    km_zks_stop(zs);
    return t;
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
    size_t n = 0, written = 0;
    if (km_gen_write(log, &o, img, &kerr) < 0 || km_zk_full_sync_ops(img, 1, &ops, &n, &kerr))
        return fprintf(stderr, "bench_zk: %s\n", kerr.msg), 1;
    /* raw, bridge, bridge, raw: each side gets the same share of early and late runs */
    static const bool order[] = {false, true, true, false};
    double raw = 0, ours = 0;
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
        double t = fresh_run(order[i], img, ops, n, &written);
        if (t < 0)
            return fprintf(stderr, "bench_zk: run %zu failed\n", i), 1;
        *(order[i] ? &ours : &raw) += t;
    }
    double ours_rate = (double)written * 2 / ours, raw_rate = (double)n * 2 / raw;
    printf("zk full sync, %d partitions: %zu znodes, bridge %.0f znodes/s (claim, read, plan, guarded multis "
           "included), raw zoo_amulti %.0f znodes/s, ratio %.2f (target >= 0.80)\n",
           topics * partitions, written, ours_rate, raw_rate, ours_rate / raw_rate);
    km_zk_ops_free(ops, n);
    km_image_free(img);
    km_test_rmtree(dir);
    free(dir);
    return 0;
}
