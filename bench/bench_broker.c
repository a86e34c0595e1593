/* bench_broker: time from a PartitionChangeRecord appended to the log until every ZK-mode broker
 * has acked what it implies (LeaderAndIsr to the replicas, UpdateMetadata to all), over 10,000
 * leader changes with 5 simulated brokers; against the loopback TCP round trip measured in the
 * same run (one 64-byte ping-pong through the kernel, no event loop).  A second pass puts a real
 * ZooKeeper in the path with Kafka's ordering (KRaftMigrationDriver: ZooKeeper written and
 * acknowledged first, then the RPCs): the difference between the two is the cost of the order. */
#include "bench_util.h"
#include "km_zkbridge.h"
#include "test_broker_rig.h"
#include "zkserver.h"

#include <arpa/inet.h>
#include <ev.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define CHANGES 10000
#define ZK_CHANGES 2000
#define BROKERS 5


static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double pct(double *v, int n, double p)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    int i = (int)(p * (n - 1) + 0.5);
    return v[i];
}

/* ---- baseline: loopback round trip ----------------------------------------------------------- */

static void *echo(void *arg)
{
    int fd = accept(*(int *)arg, NULL, NULL);
    char buf[64];
    ssize_t n;
    while ((n = recv(fd, buf, sizeof buf, MSG_WAITALL)) == (ssize_t)sizeof buf)
        if (send(fd, buf, sizeof buf, 0) != (ssize_t)sizeof buf)
            break;
    close(fd);
    return NULL;
}

static int loopback_rtt(double *out, int n)
{
    int lfd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in sa = { .sin_family = AF_INET };
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof sa;
    if (bind(lfd, (struct sockaddr *)&sa, sizeof sa) || listen(lfd, 1) ||
        getsockname(lfd, (struct sockaddr *)&sa, &len))
        return -1;
    pthread_t t;
    pthread_create(&t, NULL, echo, &lfd);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa))
        return -1;
    char buf[64] = { 0 };
    for (int i = 0; i < n; i++) {
        double t0 = bench_wall_s();
        if (send(fd, buf, sizeof buf, 0) != (ssize_t)sizeof buf ||
            recv(fd, buf, sizeof buf, MSG_WAITALL) != (ssize_t)sizeof buf)
            return -1;
        out[i] = bench_wall_s() - t0;
    }
    close(fd);
    pthread_join(t, NULL);
    close(lfd);
    return 0;
}

/* ---- propagation ------------------------------------------------------------------------------- */

static bool converged(brig *r) { return brig_converged(r); }

/* The k-th partition of the image (round robin over all) moves its leadership to the next ISR member. */
static bool change_leader(brig *r, int k)
{
    size_t it = 0, seen = 0, total = km_image_partition_count(r->img);
    size_t want = (size_t)k % total;
    const km_topic *t;
    while ((t = km_image_next_topic(r->img, &it))) {
        int32_t np = km_topic_partition_count(t);
        if (want >= seen + (size_t)np) {
            seen += (size_t)np;
            continue;
        }
        km_partition x;
        km_topic_partition(t, (int32_t)(want - seen), &x);
        km_partition_change_record rec;
        km_partition_change_record_init(&rec);
        rec.topic_id = km_topic_id(t);
        rec.partition_id = x.id;
        for (int32_t i = 0; i < x.isr.n; i++)
            if (x.isr.v[i] == x.leader)
                rec.leader = x.isr.v[(i + 1) % x.isr.n];
        return brig_append(r, &km_partition_change_record_desc, &rec);
    }
    return false;
}

static double read_lat[CHANGES];

static int propagate(brig *r, double *lat, int n)
{
    for (int i = 0; i < n; i++) {
        double t0 = bench_wall_s();
        int64_t target = km_metalog_writer_next_offset(r->w);
        if (!change_leader(r, i))
            return -1;
        /* what an inotify wake-up would do: read the log, publish the delta, then run the loop
         * until every broker answered */
        while (km_image_offset(r->img) < target)
            if (!brig_pump(r))
                return -1;
        read_lat[i] = bench_wall_s() - t0;
        while (km_bprop_pending(r->prop))
            ev_run(r->loop, EVRUN_ONCE);
        lat[i] = bench_wall_s() - t0;
    }
    return 0;
}

/* ---- ZooKeeper first ----------------------------------------------------------------------------- */

typedef struct zk_path { km_zkb *zkb; bool synced; } zk_path;

static void on_phase(km_zkb *b, km_zkb_phase phase, void *ctx)
{
    brig *r = ctx;
    zk_path *z = r->ud;
    if (phase != KM_ZKB_DUAL_WRITE)
        return;
    km_bprop_hold(r->prop, false);
    km_bprop_zk_holds(r->prop, km_zkw_confirmed_offset(km_zkb_writer(b)));
    z->synced = true;
}

static void on_confirmed(km_zkb *b, int64_t offset, void *ctx)
{
    (void)b;
    km_bprop_zk_holds(((brig *)ctx)->prop, offset);
}

static int32_t zk_epoch_of(km_bprop *p, void *ud)
{
    (void)p;
    return km_zkw_zk_controller_epoch(km_zkb_writer(((zk_path *)((brig *)ud)->ud)->zkb));
}

static void quiet(km_log_level level, const char *msg, void *ctx) { (void)level; (void)msg; (void)ctx; }
static bool zk_synced(brig *r) { return ((zk_path *)r->ud)->synced; }

/* The daemon's wiring: the bridge gets each delta first, the propagator's requests wait for
 * ZooKeeper's acknowledgement of their offset. */
static bool zk_pump(brig *r)
{
    zk_path *z = r->ud;
    km_err err;
    int rc;
    while ((rc = km_image_follow_next(r->follow, r->delta, &err)) == 1)
        if (km_zkb_delta(z->zkb, r->delta, &err) || km_bprop_publish(r->prop, r->delta, &err))
            return fprintf(stderr, "bench_broker: %s\n", err.msg), false;
    return rc == 0;
}

static int propagate_zk(brig *r, double *lat, int n)
{
    for (int i = 0; i < n; i++) {
        double t0 = bench_wall_s();
        int64_t target = km_metalog_writer_next_offset(r->w);
        if (!change_leader(r, CHANGES + i))
            return -1;
        while (km_image_offset(r->img) < target)
            if (!zk_pump(r))
                return -1;
        while (km_bprop_pending(r->prop))
            ev_run(r->loop, EVRUN_ONCE);
        lat[i] = bench_wall_s() - t0;
    }
    return 0;
}

/* Replaces the rig's propagator with a ZooKeeper-ordered one behind a bridge to a real ZooKeeper. */
static int zk_setup(brig *r, zk_path *z, km_zks **zs)
{
    char err[256] = "";
    km_err kerr;
    if (!(*zs = km_zks_start(1, NULL, 0, err, sizeof err)))
        return fprintf(stderr, "bench_broker: ZooKeeper: %s\n", err), -1;
    /* the brokers hold the first pass's controller epoch: the claim must go above it */
    km_zkc *c = km_zkc_open(km_zks_hosts(*zs, 0), NULL, 10000);
    char epoch[16];
    snprintf(epoch, sizeof epoch, "%d", r->zk_epoch);
    int zrc = c ? km_zkc_create(c, "/controller_epoch", epoch, 0) : ZCONNECTIONLOSS;
    km_zkc_close(c);
    if (zrc != ZOK)
        return fprintf(stderr, "bench_broker: ZooKeeper: create /controller_epoch: %s\n", zerror(zrc)), -1;
    r->ud = z;
    km_bprop_free(r->prop);
    km_bprop_config pc = { .controller_id = BRIG_CONTROLLER, .listener = "PLAINTEXT", .request_timeout = 10,
                           .backoff_base = 0.01, .backoff_max = 0.2, .zk_ordered = true,
                           .zk_controller_epoch = zk_epoch_of, .ud = r };
    km_zkb_config zc = { .zk = { .hosts = km_zks_hosts(*zs, 0), .controller_id = BRIG_CONTROLLER,
                                 .controller_epoch = 1, .log = quiet },
                         .on_phase = on_phase, .on_confirmed = on_confirmed, .ctx = r };
    if (!(r->prop = km_bprop_new(r->loop, &pc, &kerr)) || !(z->zkb = km_zkb_new(r->loop, r->img, &zc, &kerr)))
        return fprintf(stderr, "bench_broker: %s\n", kerr.msg), -1;
    if (!brig_run_until(r, zk_synced, 60))
        return fprintf(stderr, "bench_broker: ZooKeeper full sync did not finish: %s\n",
                       km_zkb_error(z->zkb) ? km_zkb_error(z->zkb) : "timeout"), -1;
    r->zk_epoch = km_zkw_zk_controller_epoch(km_zkb_writer(z->zkb));
    if (km_bprop_activate(r->prop, r->img, r->zk_epoch, &kerr))
        return fprintf(stderr, "bench_broker: %s\n", kerr.msg), -1;
    return brig_run_until(r, converged, 60) ? 0 : (fprintf(stderr, "bench_broker: %s\n", r->why), -1);
}

int main(void)
{
    static double lat[CHANGES], rtt[CHANGES], zlat[ZK_CHANGES];
    brig r;
    brig_opts o = { .brokers = BROKERS, .topics = 20, .partitions = 10, .replication = 3, .leader_changes = 0 };
    if (!brig_init(&r, &o) || !brig_activate(&r) || !brig_run_until(&r, converged, 60)) {
        fprintf(stderr, "bench_broker: setup: %s\n", r.why);
        return 1;
    }
    if (loopback_rtt(rtt, CHANGES) || propagate(&r, lat, CHANGES)) {
        fprintf(stderr, "bench_broker: %s\n", r.why[0] ? r.why : "loopback baseline failed");
        return 1;
    }
    bool ok = brig_run_until(&r, converged, 30);
    zk_path z = { 0 };
    km_zks *zs = NULL;
    if (!ok || zk_setup(&r, &z, &zs) || propagate_zk(&r, zlat, ZK_CHANGES) || !brig_run_until(&r, converged, 30)) {
        fprintf(stderr, "bench_broker: FAILED%s%s\n", r.why[0] ? ": " : "", r.why);
        km_zkb_free(z.zkb);
        brig_free(&r);
        km_zks_stop(zs);
        return 1;
    }
    double l50 = pct(lat, CHANGES, 0.50), l99 = pct(lat, CHANGES, 0.99);
    double z50 = pct(zlat, ZK_CHANGES, 0.50), z99 = pct(zlat, ZK_CHANGES, 0.99);
    double r50 = pct(rtt, CHANGES, 0.50), r99 = pct(rtt, CHANGES, 0.99);
    printf("bench_broker: %d leader changes, %d ZK-mode brokers (200 partitions, RF 3), converged\n", CHANGES,
           BROKERS);
    printf("  record appended -> all brokers acked: p50 %.1f us  p99 %.1f us\n", l50 * 1e6, l99 * 1e6);
    printf("  of which append + read + image + build (no network):  p50 %.1f us  p99 %.1f us\n",
           pct(read_lat, CHANGES, 0.5) * 1e6, pct(read_lat, CHANGES, 0.99) * 1e6);
    printf("  ZooKeeper first (%d changes, real ZooKeeper, acked before the RPCs):  p50 %.1f us  p99 %.1f us\n",
           ZK_CHANGES, z50 * 1e6, z99 * 1e6);
    printf("  loopback TCP round trip (baseline):   p50 %.1f us  p99 %.1f us\n", r50 * 1e6, r99 * 1e6);
    printf("  ratio to the baseline: without ZooKeeper p50 %.1fx p99 %.1fx; ZooKeeper first p50 %.1fx p99 %.1fx\n",
           l50 / r50, l99 / r99, z50 / r50, z99 / r99);
    printf("  cost of the ordering (ZooKeeper first minus without): p50 %+.1f us  p99 %+.1f us\n",
           (z50 - l50) * 1e6, (z99 - l99) * 1e6);
    km_zkb_free(z.zkb);
    brig_free(&r);
    km_zks_stop(zs);
    return 0;
}
