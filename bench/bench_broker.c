/* bench_broker: time from a PartitionChangeRecord appended to the log until every ZK-mode broker
 * has acked what it implies (LeaderAndIsr to the replicas, UpdateMetadata to all), over 10,000
 * leader changes with 5 simulated brokers; against the loopback TCP round trip measured in the
 * same run (one 64-byte ping-pong through the kernel, no event loop). */
#include "bench_util.h"
#include "test_broker_rig.h"

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

int main(void)
{
    static double lat[CHANGES], rtt[CHANGES];
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
    double l50 = pct(lat, CHANGES, 0.50), l99 = pct(lat, CHANGES, 0.99);
    double r50 = pct(rtt, CHANGES, 0.50), r99 = pct(rtt, CHANGES, 0.99);
    printf("bench_broker: %d leader changes, %d ZK-mode brokers (200 partitions, RF 3)%s\n", CHANGES, BROKERS,
           ok ? ", converged" : ", NOT converged");
    printf("  record appended -> all brokers acked: p50 %.1f us  p99 %.1f us\n", l50 * 1e6, l99 * 1e6);
    printf("  of which append + read + image + build (no network):  p50 %.1f us  p99 %.1f us\n",
           pct(read_lat, CHANGES, 0.5) * 1e6, pct(read_lat, CHANGES, 0.99) * 1e6);
    printf("  loopback TCP round trip (baseline):   p50 %.1f us  p99 %.1f us\n", r50 * 1e6, r99 * 1e6);
    printf("  ratio: p50 %.1fx  p99 %.1fx\n", l50 / r50, l99 / r99);
    brig_free(&r);
    return ok ? 0 : 1;
}
