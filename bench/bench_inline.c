/* bench_inline: Produce (1 KiB records, acks=1) through the inline proxy against the same
 * traffic sent straight to the upstream and through haproxy in TCP mode, all in one run.
 *
 * The upstream is librdkafka's mock cluster (one broker).  A raw client pipelines Produce v7
 * requests on one connection, so every byte of every target crosses the same path (a Kafka
 * client would leave haproxy after its first Metadata answer).  Printed: throughput in MB/s
 * (window 32, 16 records per request), p50/p99 round trip (window 1, one record) and the
 * latency each proxy adds, the upstream's ceiling (window 128, straight), ratios against
 * "direct", and the proxies' resident memory with 1,000 open client connections.
 *
 * Throughput: each target runs ROUNDS times, taking turns with the others; medians are printed.
 * Latency: the targets take turns request by request (one connection each, the order rotating),
 * so a burst of load on the shared machine lands on all of them alike instead of on whichever
 * target happened to be running; p50/p99 are over every sample of a target.
 *
 * Usage: bench_inline [requests]   (default 15000 per run, and as many round trips per target for
 * the latencies.  Runs of 3000 lasted about 90 ms, so short that their MB/s moved in steps of
 * the kernel's 4 ms tick and a ratio of two runs jumped by 10%.) */
#include "bench_util.h"
#include "km_codec.h"
#include "km_metalog.h" /* km_crc32c */
#include "km_testsupport.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#define RECORD_BYTES 1024
#define CONNS_FOR_RSS 1000
#define ROUNDS 5 /* targets take turns, ROUNDS times; medians reported: a shared machine's noise evens out */

typedef struct target {
    const char *name;
    uint16_t port;
    pid_t pid;            /* 0: no process of its own (direct) */
    double mbps, p50_us, p99_us;         /* MB/s: median over the rounds; latency: over all samples */
    double round_mbps[ROUNDS];
    double slice_p99[ROUNDS];            /* p99 of each consecutive 1/ROUNDS of the latency samples */
    long rss_idle_kb, rss_conns_kb;
    bool ok;
} target;

/* ---- a raw Produce load generator ---------------------------------------------------------- */

static void put_varint(km_buf *b, int64_t v) { km_buf_put_varlong(b, v); }

/* A v2 record batch of n 1 KiB records (what a producer would send, uncompressed). */
static void record_batch(km_buf *b, int n)
{
    static uint8_t value[RECORD_BYTES];
    memset(value, 'v', sizeof value);
    size_t start = b->len;
    km_buf_put_i64(b, 0);                  /* base offset */
    km_buf_put_i32(b, 0);                  /* batch length, patched */
    km_buf_put_i32(b, -1);                 /* partition leader epoch */
    km_buf_put_i8(b, 2);                   /* magic */
    size_t crc_at = b->len;
    km_buf_put_i32(b, 0);                  /* crc, patched */
    km_buf_put_i16(b, 0);                  /* attributes */
    km_buf_put_i32(b, n - 1);              /* last offset delta */
    km_buf_put_i64(b, 1700000000000);      /* first timestamp */
    km_buf_put_i64(b, 1700000000000);      /* max timestamp */
    km_buf_put_i64(b, -1), km_buf_put_i16(b, -1), km_buf_put_i32(b, -1); /* no producer id */
    km_buf_put_i32(b, n);
    for (int i = 0; i < n; i++) {
        int64_t len = 1 + 1 + km_varint_size(i) + 1 + km_varint_size(RECORD_BYTES) + RECORD_BYTES + 1;
        put_varint(b, len);
        km_buf_put_i8(b, 0);               /* attributes */
        put_varint(b, 0);                  /* timestamp delta */
        put_varint(b, i);                  /* offset delta */
        put_varint(b, -1);                 /* null key */
        put_varint(b, RECORD_BYTES);
        km_buf_put(b, value, RECORD_BYTES);
        put_varint(b, 0);                  /* headers */
    }
    km_buf_patch_i32(b, start + 8, (int32_t)(b->len - start - 12));
    uint32_t crc = km_crc32c(0, b->data + crc_at + 4, b->len - crc_at - 4);
    km_buf_patch_i32(b, crc_at, (int32_t)crc);
}

/* One framed Produce v7 request (acks=1) of n records; its correlation id sits at byte 8. */
static km_buf produce_frame(int n)
{
    km_buf batch, out;
    km_buf_init(&batch);
    km_buf_init(&out);
    record_batch(&batch, n);
    km_produce_request_partition_produce_data part = {.index = 0, .records = {batch.data, (int32_t)batch.len}};
    km_produce_request_topic_produce_data topic = {.name = km_cstr("bench")};
    topic.partition_data.count = 1, topic.partition_data.items = &part;
    km_produce_request req;
    km_produce_request_init(&req);
    req.acks = 1, req.timeout_ms = 30000;
    req.topic_data.count = 1, req.topic_data.items = &topic;
    km_err err = {{0}};
    if (km_frame_request(KM_API_PRODUCE, 7, 0, "bench", &req, &out, &err))
        fprintf(stderr, "bench_inline: %s\n", err.msg), exit(1);
    km_buf_free(&batch);
    return out;
}

static int dial(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct timeval tv = {.tv_sec = 30};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, (struct sockaddr *)&a, sizeof a)) {
        close(fd);
        return -1;
    }
    return fd;
}

static bool io_all(int fd, void *p, size_t n, bool out)
{
    uint8_t *b = p;
    while (n) {
        ssize_t k = out ? send(fd, b, n, MSG_NOSIGNAL) : recv(fd, b, n, 0);
        if (k <= 0)
            return false;
        b += k;
        n -= (size_t)k;
    }
    return true;
}

/* Whether a response body (after the size) answers `corr` with no error.  The ProduceResponse
 * v7 body: correlation id, [topics: name, [partition, error_code, ...]]. */
static bool ack_ok(const uint8_t *body, uint32_t len, int32_t corr)
{
    size_t err_at = 4 + 4 + 2 + strlen("bench") + 4 + 4; /* corr, topics count, name, partitions, index */
    return len > err_at + 1 && (int32_t)km_be32(body) == corr && body[err_at] == 0 && body[err_at + 1] == 0;
}

/* Reads one response (blocking); checks it answers `corr` with no error. */
static bool read_ack(int fd, int32_t corr)
{
    uint8_t head[4], body[512];
    if (!io_all(fd, head, 4, false))
        return false;
    uint32_t size = km_be32(head);
    return size >= 4 && size <= sizeof body && io_all(fd, body, size, false) && ack_ok(body, size, corr);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* A pipelining client on a non-blocking socket: it sends while fewer than `window` requests
 * are unanswered and reads answers as they come, so neither side of the connection waits on a
 * full buffer the other would drain (a blocking client stalls a fast upstream at large windows). */
typedef struct pump {
    int fd, window, count, next, done;
    size_t sent_off;                 /* bytes of request `next` already sent */
    km_buf frame;
    uint8_t in[64 * 1024];
    size_t in_len;
} pump;

static bool pump_send(pump *p)
{
    while (p->next < p->count && p->next - p->done < p->window) {
        if (p->sent_off == 0)
            km_buf_patch_i32(&p->frame, 8, p->next);
        ssize_t k = send(p->fd, p->frame.data + p->sent_off, p->frame.len - p->sent_off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k < 0)
            return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
        p->sent_off += (size_t)k;
        if (p->sent_off == p->frame.len)
            p->sent_off = 0, p->next++;
    }
    return true;
}

static bool pump_receive(pump *p)
{
    ssize_t k = recv(p->fd, p->in + p->in_len, sizeof p->in - p->in_len, MSG_DONTWAIT);
    if (k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
        return false;
    p->in_len += k > 0 ? (size_t)k : 0;
    size_t at = 0;
    while (p->in_len - at >= 4) {
        uint32_t size = km_be32(p->in + at);
        if (size < 4 || size > 512)
            return false;
        if (p->in_len - at < 4 + size)
            break;
        if (!ack_ok(p->in + at + 4, size, p->done))
            return false;
        p->done++;
        at += 4 + size;
    }
    memmove(p->in, p->in + at, p->in_len - at);
    p->in_len -= at;
    return true;
}

/* Pipelines `count` Produce requests of `records` records, `window` in flight; fills MB/s. */
static bool run_load(uint16_t port, int records, int window, int count, double *mbps)
{
    pump *p = calloc(1, sizeof *p);
    if (!p)
        return false;
    *p = (pump){.fd = dial(port), .window = window, .count = count, .frame = produce_frame(records)};
    bool ok = p->fd >= 0;
    double t0 = bench_wall_s();
    while (ok && p->done < p->count) {
        bool want_out = p->next < p->count && p->next - p->done < p->window;
        struct pollfd pfd = {p->fd, (short)(POLLIN | (want_out ? POLLOUT : 0)), 0};
        ok = poll(&pfd, 1, 30000) == 1 && (!(pfd.revents & POLLOUT) || pump_send(p)) &&
             (!(pfd.revents & (POLLIN | POLLERR | POLLHUP)) || pump_receive(p));
    }
    double wall = bench_wall_s() - t0;
    if (ok)
        *mbps = (double)count * records * RECORD_BYTES / wall / 1e6;
    if (p->fd >= 0)
        close(p->fd);
    km_buf_free(&p->frame);
    free(p);
    return ok;
}

/* ---- the proxies as child processes -------------------------------------------------------- */

static uint16_t free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    bind(fd, (struct sockaddr *)&a, sizeof a);
    getsockname(fd, (struct sockaddr *)&a, &len);
    close(fd);
    return ntohs(a.sin_port);
}

static bool wait_listening(uint16_t port)
{
    for (int i = 0; i < 500; i++) {
        int fd = dial(port);
        if (fd >= 0) {
            close(fd);
            return true;
        }
        usleep(10000);
    }
    return false;
}

static pid_t spawn(char *const argv[])
{
    pid_t parent = getpid(), pid = fork();
    if (pid == 0) {
        bench_die_with_parent(parent); /* an interrupted bench leaves no proxy behind */
        int null = open("/dev/null", 1);
        dup2(null, 1), dup2(null, 2);
        execvp(argv[0], argv);
        _exit(127);
    }
    return pid;
}

static bool start_kmproxy(target *t, const char *upstream)
{
    char listen[64], up[96];
    t->port = free_port();
    snprintf(listen, sizeof listen, "proxy.bootstrap.listen=127.0.0.1:%u", t->port);
    snprintf(up, sizeof up, "proxy.bootstrap.upstream=%s", upstream);
    /* CONNS_FOR_RSS clients come from one address: above the per-IP default (1000), as haproxy's maxconn is */
    char *argv[] = {(char *)km_test_binary(), "proxy", "--set", listen, "--set", up, "--set", "log.level=error",
                    "--set", "proxy.max.connections.per.ip=4000", NULL};
    t->pid = spawn(argv);
    return wait_listening(t->port);
}

static bool have_haproxy(void)
{
    return system("command -v haproxy >/dev/null 2>&1") == 0;
}

static bool start_haproxy(target *t, const char *upstream, const char *cfg_path)
{
    t->port = free_port();
    FILE *f = fopen(cfg_path, "w");
    if (!f)
        return false;
    fprintf(f, "global\n  maxconn 4000\ndefaults\n  mode tcp\n  timeout connect 5s\n  timeout client 60s\n"
               "  timeout server 60s\nfrontend f\n  bind 127.0.0.1:%u\n  default_backend b\nbackend b\n"
               "  server upstream %s\n", t->port, upstream);
    fclose(f);
    char *argv[] = {"haproxy", "-db", "-f", (char *)cfg_path, NULL};
    t->pid = spawn(argv);
    return wait_listening(t->port);
}

static long rss_kb(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6))
            kb = atol(line + 6);
    if (f)
        fclose(f);
    return kb;
}

/* Resident memory with CONNS_FOR_RSS idle clients, each proven accepted by a round trip on the last. */
static bool measure_rss(target *t)
{
    t->rss_idle_kb = rss_kb(t->pid);
    int *fds = malloc(CONNS_FOR_RSS * sizeof *fds);
    bool ok = fds != NULL;
    int n = 0;
    for (; ok && n < CONNS_FOR_RSS; n++)
        ok = (fds[n] = dial(t->port)) >= 0;
    double mbps;
    ok = ok && run_load(t->port, 1, 1, 10, &mbps);
    t->rss_conns_kb = rss_kb(t->pid);
    for (int i = 0; i < n; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    free(fds);
    return ok;
}

static void stop(target *t)
{
    if (t->pid > 0) {
        kill(t->pid, SIGTERM);
        waitpid(t->pid, NULL, 0);
    }
}

/* ---- main --------------------------------------------------------------------------------- */

static bool bench_round(target *t, int count, int round)
{
    t->ok = run_load(t->port, 16, 32, count, &t->round_mbps[round]);
    if (!t->ok)
        fprintf(stderr, "bench_inline: %s: the Produce run failed\n", t->name);
    return t->ok;
}

static double median(double *v)
{
    qsort(v, ROUNDS, sizeof *v, cmp_double);
    return v[ROUNDS / 2];
}

/* One Produce of one record on `fd`, answered; its round trip in seconds, or -1. */
static double round_trip(int fd, km_buf *frame, int32_t corr)
{
    km_buf_patch_i32(frame, 8, corr);
    double t0 = bench_wall_s();
    if (!io_all(fd, frame->data, frame->len, true) || !read_ack(fd, corr))
        return -1;
    return bench_wall_s() - t0;
}

/* The q-quantile of n samples (sorted in place). */
static double quantile(double *v, int n, double q)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[(int)(n * q)];
}

/* p99 of each consecutive slice of the samples: shows whether a ratio of the whole holds
 * across the run or comes from one burst. */
static void slice_p99s(target *t, const double *lat, int count)
{
    int per = count / ROUNDS;
    double *tmp = malloc((size_t)per * sizeof *tmp);
    for (int r = 0; tmp && r < ROUNDS; r++) {
        memcpy(tmp, lat + r * per, (size_t)per * sizeof *tmp);
        t->slice_p99[r] = quantile(tmp, per, 0.99) * 1e6;
    }
    free(tmp);
}

/* Round trips with one request in flight, the targets taking turns request by request (the
 * first of each turn rotating), `count` samples each; fills every target's p50/p99. */
static bool measure_latency(target *const *all, int n, int count)
{
    km_buf frame = produce_frame(1);
    int fds[3] = {-1, -1, -1};
    double *lat[3] = {NULL, NULL, NULL};
    bool ok = true;
    for (int i = 0; i < n; i++)
        ok = ok && (fds[i] = dial(all[i]->port)) >= 0 && (lat[i] = calloc((size_t)count, sizeof *lat[i]));
    for (int k = 0; ok && k < count; k++)
        for (int j = 0; ok && j < n; j++) {
            int i = (k + j) % n;
            ok = (lat[i][k] = round_trip(fds[i], &frame, k)) >= 0;
            if (!ok)
                fprintf(stderr, "bench_inline: %s: a Produce round trip failed\n", all[i]->name);
        }
    for (int i = 0; i < n; i++) {
        if (ok) {
            slice_p99s(all[i], lat[i], count);
            all[i]->p50_us = quantile(lat[i], count, 0.50) * 1e6;
            all[i]->p99_us = quantile(lat[i], count, 0.99) * 1e6;
        }
        if (fds[i] >= 0)
            close(fds[i]);
        free(lat[i]);
    }
    km_buf_free(&frame);
    return ok;
}

/* Throughput: every target once per round, in turn, so a burst of load elsewhere hits them
 * alike; then the interleaved latency samples. */
static bool bench_targets(target *const *all, int n, int count)
{
    for (int round = 0; round < ROUNDS; round++)
        for (int i = 0; i < n; i++)
            if (!bench_round(all[i], count, round))
                return false;
    for (int i = 0; i < n; i++)
        all[i]->mbps = median(all[i]->round_mbps);
    return measure_latency(all, n, count);
}

int main(int argc, char **argv)
{
    int count = argc > 1 ? atoi(argv[1]) : 15000;
    if (count < 100 * ROUNDS) {
        fprintf(stderr, "bench_inline: requests per run must be a number >= %d, not '%s'\n", 100 * ROUNDS, argv[1]);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    char errstr[256], cfg_path[] = "/tmp/bench_inline_haproxy_XXXXXX";
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "log_level", "3", errstr, sizeof errstr);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof errstr);
    rd_kafka_mock_cluster_t *mock = rk ? rd_kafka_mock_cluster_new(rk, 1) : NULL;
    if (!mock || rd_kafka_mock_topic_create(mock, "bench", 1, 1)) {
        fprintf(stderr, "bench_inline: cannot start librdkafka's mock cluster\n");
        return 1;
    }
    const char *upstream = rd_kafka_mock_cluster_bootstraps(mock);
    target direct = {.name = "direct"}, km = {.name = "kmproxy"}, ha = {.name = "haproxy"};
    direct.port = (uint16_t)atoi(strchr(upstream, ':') + 1);
    bool ok = start_kmproxy(&km, upstream);
    bool with_haproxy = have_haproxy();
    int cfg_fd = mkstemp(cfg_path);
    if (cfg_fd >= 0)
        close(cfg_fd);
    if (!with_haproxy)
        printf("haproxy: NOT INSTALLED (deploy/install-deps.sh installs it): its column is skipped\n");
    else if (!start_haproxy(&ha, upstream, cfg_path))
        ok = false, fprintf(stderr, "bench_inline: haproxy did not start\n");
    unlink(cfg_path); /* haproxy has read it (it listens), or never will: an interrupted run leaves nothing */
    double ceiling = 0;
    ok = ok && run_load(direct.port, 16, 128, count, &ceiling);
    target *all[] = {&direct, &km, &ha};
    ok = ok && bench_targets(all, with_haproxy ? 3 : 2, count);
    ok = ok && measure_rss(&km) && (!with_haproxy || measure_rss(&ha));
    stop(&km), stop(&ha);
    rd_kafka_mock_cluster_destroy(mock);
    rd_kafka_destroy(rk);
    if (!ok) {
        fprintf(stderr, "bench_inline: FAILED: no figures reported\n");
        return 1;
    }
    printf("Produce, 1 KiB records, acks=1, one connection; upstream: librdkafka mock broker; %d requests a run.\n"
           "MB/s: medians of %d rounds in which the targets take turns; p50/p99: %d round trips each, the\n"
           "targets taking turns request by request\n", count, ROUNDS, count);
    printf("upstream ceiling (direct, 128 in flight): %.1f MB/s\n", ceiling);
    printf("%-8s %10s %10s %10s %14s %14s %12s %14s\n", "target", "MB/s", "p50 us", "p99 us", "added p50 us",
           "added p99 us", "RSS idle KB", "RSS 1000c KB");
    for (int i = 0; i < (with_haproxy ? 3 : 2); i++) {
        target *t = all[i];
        printf("%-8s %10.1f %10.0f %10.0f %14.0f %14.0f", t->name, t->mbps, t->p50_us, t->p99_us,
               t->p50_us - direct.p50_us, t->p99_us - direct.p99_us);
        if (t->pid)
            printf(" %12ld %14ld\n", t->rss_idle_kb, t->rss_conns_kb);
        else
            printf(" %12s %14s\n", "-", "-");
    }
    for (int i = 0; i < (with_haproxy ? 3 : 2); i++) {
        printf("%s MB/s of the %d rounds, sorted:", all[i]->name, ROUNDS);
        for (int r = 0; r < ROUNDS; r++)
            printf(" %.1f", all[i]->round_mbps[r]);
        printf("\n");
    }
    printf("ratio kmproxy/direct throughput: %.2f (target >= 0.90)\n", km.mbps / direct.mbps);
    if (with_haproxy) {
        printf("ratio kmproxy/haproxy throughput: %.2f, p50: %.2f, p99: %.2f (below 1 is faster)\n",
               km.mbps / ha.mbps, km.p50_us / ha.p50_us, km.p99_us / ha.p99_us);
        printf("ratio kmproxy/haproxy of the latency each adds to direct: p50 %.2f, p99 %.2f\n",
               (km.p50_us - direct.p50_us) / (ha.p50_us - direct.p50_us),
               (km.p99_us - direct.p99_us) / (ha.p99_us - direct.p99_us));
        printf("ratio kmproxy/haproxy p99 in each of %d consecutive slices of the latency run:", ROUNDS);
        for (int r = 0; r < ROUNDS; r++)
            printf(" %.2f", km.slice_p99[r] / ha.slice_p99[r]);
        printf("\n");
    }
    return 0;
}
