/* bench_inline: Produce (1 KiB records, acks=1) through the inline proxy (`kmproxy proxy`) and
 * through haproxy in TCP mode, against the same traffic sent straight to the upstream, in one run
 * (issue 21, part 3).  The upstream is librdkafka's mock cluster (one broker); a raw client
 * pipelines Produce v7 requests, so every byte of every target crosses the same path (a Kafka
 * client would leave haproxy after its first Metadata answer).
 *
 * Targets: direct; kmproxy and haproxy with 1 and with 2 worker threads (`--set proxy.threads=N`,
 * haproxy `nbthread N`), each plaintext and TLS-terminated.  TLS: clients speak TLS to the proxy,
 * the proxy plaintext to the mock.  Both proxies serve one throwaway self-signed P-256 certificate
 * made at start; the client offers TLS 1.3 with TLS_AES_128_GCM_SHA256 only, haproxy is pinned to
 * it too (kmproxy has no cipher setting: the client's offer pins it), and the suite each proxy
 * negotiated is checked and printed.  haproxy runs with its defaults otherwise (no splicing).
 *
 * One more target, in the MB/s and CPU table only: "haproxy+splice", plaintext with 1 thread and
 * `option splice-auto`, since kmproxy splices the rest of a frame body that passes unchanged once
 * 64 KiB or more of it remain (KM_NET_FORWARD_MIN) while haproxy by default copies.  Its CPU s/GB
 * is printed next to kmproxy's for reference; the targets still compare with haproxy's
 * defaults.  This bench's Produce requests are about 16.5 KiB (16 records), below kmproxy's
 * threshold, and haproxy splices only when it expects to fill a buffer: neither is expected to
 * splice much here (one run under strace: haproxy+splice made one splice call for every four
 * recvfrom), so the two haproxy rows mostly show the same work.
 *
 * Printed, each with its spread:
 *  - MB/s (2 connections, 32 requests of 16 records in flight on each): median and min..max over
 *    ROUNDS rounds; in each round every target runs once, the order rotating by one per round.
 *  - CPU seconds per GB forwarded: the proxy process's CPU time (all its threads, read through
 *    clock_getcpuclockid before and after each run; the other proxies idle meanwhile) over the
 *    request and response bytes the client moved; median and min..max over the rounds.  Next to
 *    it, how busy the proxy and the client + mock were (% of one CPU): a client + mock near 100%
 *    bounds the MB/s; both far below 100% mean other programs held the CPUs (the load average
 *    before and after the run is printed too).
 *  - p50/p99 round trip (one request of one record in flight) of direct and of every proxy (1 and
 *    2 workers, plaintext and TLS): the targets take turns request by request, so a burst of load
 *    on the shared machine lands on all of them alike; each figure with its min..max over ROUNDS
 *    consecutive slices of the run.  Added latency = a proxy's quantile minus direct's.
 *  - resident memory of the 1-worker plaintext proxies with 1,000 open client connections.
 *  - the ratios issue 21 names and whether its targets are met.
 *
 * Pinning (when the bench may use 2 CPUs or more): the bench itself (the load client and the mock
 * broker's threads, created after the pinning) runs on the first allowed CPU; a 1-worker proxy
 * alone on the second, so neither the client nor the mock takes the proxy's core and the proxy's
 * figures are its own.  A 2-worker proxy gets the next two CPUs; on a 2-CPU machine that is both,
 * so it shares the first with the client and the mock (its figures are printed with that note).
 * The client and the mock sharing one CPU bound every target's MB/s alike, direct's included.
 * For the round trips every proxy, the 2-worker ones included (all their threads), joins the
 * client and the mock on their CPU: with one request in flight none of them wants the CPU while
 * another works, so each proxy's added latency is its own work.  Pinned apart, every hop waited
 * for another CPU to wake, which on this virtual machine added about 110 us to every proxy's p50
 * alike (146 us pinned apart, 35 unpinned) and let another program's burst on the proxy's CPU set
 * its p99; left unpinned, the scheduler's placement moved each slice's p50 between 45 and 150 us.
 * A 2-worker proxy loses nothing by it here: its one round-trip connection is served by one worker
 * while the other idles, so what its figures show against the 1-worker one is what the worker
 * design adds to a request's path (hand-off, per-worker state), not a second CPU's wake-up.
 *
 * Usage: bench_inline [requests]   (default 15000 per run, and as many round trips per target for
 * the latencies.  Runs of 3000 lasted about 90 ms, so short that their MB/s moved in steps of
 * the kernel's 4 ms tick and a ratio of two runs jumped by 10%.  The round trips of all nine
 * targets took about 10 s of the whole bench's 30-45 s on this 2-CPU machine, so they keep the
 * full count.) */
#include "bench_util.h"
#include "km_codec.h"
#include "km_metalog.h" /* km_crc32c */
#include "km_testsupport.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define RECORD_BYTES 1024
#define CONNS_FOR_RSS 1000
#define ROUNDS 5     /* throughput rounds, and latency slices */
#define LOAD_CONNS 2 /* connections of a throughput run: a 2-worker proxy can use both workers */
#define CIPHER "TLS_AES_128_GCM_SHA256"

enum { DIRECT, KM1, HA1, KM2, HA2, KM1T, HA1T, KM2T, HA2T, HA1S, NTARGETS }; /* HA1S: haproxy+splice */

typedef struct target {
    const char *name;
    int threads;                       /* worker threads; 0: direct */
    bool tls, haproxy, present;        /* present: measured (haproxy installed) */
    bool splice;                       /* haproxy with `option splice-auto` */
    uint16_t port;
    pid_t pid;                         /* 0: no process of its own (direct) */
    char log_path[4200];               /* the file taking its stdout and stderr */
    double round_mbps[ROUNDS], round_cpu_gb[ROUNDS];
    double round_busy[ROUNDS], round_client_busy[ROUNDS]; /* % of one CPU: the proxy; the client + mock */
    double whole[2], slice[2][ROUNDS]; /* p50 [0] and p99 [1] round trip, us: the run, each slice */
    char cipher[64];                   /* the TLS version and suite it negotiated */
    long rss_idle_kb, rss_conns_kb;
} target;

enum { P50, P99 };
static const double quantiles[2] = {0.50, 0.99};

/* The round trips are measured through direct and every proxy. */
#define NLAT 9
static const int latency_targets[NLAT] = {DIRECT, KM1, HA1, KM1T, HA1T, KM2, HA2, KM2T, HA2T};

typedef struct spread {
    double med, min, max;
} spread;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static spread spread_of(const double *v, int n)
{
    double s[ROUNDS];
    memcpy(s, v, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, cmp_double);
    return (spread){s[n / 2], s[0], s[n - 1]};
}

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
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, (struct sockaddr *)&a, sizeof a)) {
        close(fd);
        return -1;
    }
    return fd;
}

/* A client connection, plaintext (ssl NULL) or TLS. */
typedef struct conn {
    int fd;
    SSL *ssl;
} conn;

/* Connects to t (TLS when it terminates TLS, checking the suite it picks); nonblocking after
 * the handshake when asked. */
static bool conn_open(conn *c, target *t, SSL_CTX *tls, bool nonblocking)
{
    *c = (conn){.fd = dial(t->port)};
    if (c->fd < 0)
        return false;
    if (t->tls) {
        if (!(c->ssl = SSL_new(tls)) || !SSL_set_fd(c->ssl, c->fd) || SSL_connect(c->ssl) != 1) {
            const char *why = ERR_reason_error_string(ERR_get_error());
            fprintf(stderr, "bench_inline: %s: the TLS handshake failed: %s\n", t->name, why ? why : "?");
            return false;
        }
        snprintf(t->cipher, sizeof t->cipher, "%s %s", SSL_get_version(c->ssl), SSL_get_cipher_name(c->ssl));
        if (strcmp(SSL_get_cipher_name(c->ssl), CIPHER))
            return fprintf(stderr, "bench_inline: %s negotiated %s, not %s\n", t->name, t->cipher, CIPHER), false;
    }
    return !nonblocking || fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) | O_NONBLOCK) == 0;
}

static void conn_close(conn *c)
{
    SSL_free(c->ssl);
    if (c->fd >= 0)
        close(c->fd);
    *c = (conn){.fd = -1};
}

/* Sends (out) or receives up to n bytes: how many; 0 when the socket would block (or, blocking,
 * timed out); -1 on an error or the peer's close. */
static ssize_t conn_io(conn *c, void *p, size_t n, bool out)
{
    if (!c->ssl) {
        ssize_t k = out ? send(c->fd, p, n, MSG_NOSIGNAL) : recv(c->fd, p, n, 0);
        if (k > 0)
            return k;
        return k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) ? 0 : -1;
    }
    int k = out ? SSL_write(c->ssl, p, (int)n) : SSL_read(c->ssl, p, (int)n);
    if (k > 0)
        return k;
    int e = SSL_get_error(c->ssl, k);
    return e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE ? 0 : -1;
}

/* Blocking: all n bytes, or false. */
static bool io_all(conn *c, void *p, size_t n, bool out)
{
    uint8_t *b = p;
    while (n) {
        ssize_t k = conn_io(c, b, n, out);
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
static bool read_ack(conn *c, int32_t corr)
{
    uint8_t head[4], body[512];
    if (!io_all(c, head, 4, false))
        return false;
    uint32_t size = km_be32(head);
    return size >= 4 && size <= sizeof body && io_all(c, body, size, false) && ack_ok(body, size, corr);
}

/* A pipelining client on a non-blocking connection: it sends while fewer than `window` requests
 * are unanswered and reads answers as they come, so neither side of the connection waits on a
 * full buffer the other would drain (a blocking client stalls a fast upstream at large windows). */
typedef struct pump {
    conn c;
    int window, count, next, done;
    size_t sent_off;                 /* bytes of request `next` already sent */
    uint64_t bytes;                  /* request and response bytes moved */
    km_buf frame;
    uint8_t in[64 * 1024];
    size_t in_len;
} pump;

static bool pump_send(pump *p)
{
    while (p->next < p->count && p->next - p->done < p->window) {
        if (p->sent_off == 0)
            km_buf_patch_i32(&p->frame, 8, p->next);
        ssize_t k = conn_io(&p->c, p->frame.data + p->sent_off, p->frame.len - p->sent_off, true);
        if (k <= 0)
            return k == 0;
        p->sent_off += (size_t)k;
        p->bytes += (uint64_t)k;
        if (p->sent_off == p->frame.len)
            p->sent_off = 0, p->next++;
    }
    return true;
}

/* Checks and counts the complete answers in p->in. */
static bool pump_parse(pump *p)
{
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

/* Reads until the socket would block: TLS may hold decrypted bytes poll() cannot see. */
static bool pump_receive(pump *p)
{
    for (;;) {
        ssize_t k = conn_io(&p->c, p->in + p->in_len, sizeof p->in - p->in_len, false);
        if (k < 0)
            return false;
        if (k == 0)
            return true;
        p->in_len += (size_t)k;
        p->bytes += (uint64_t)k;
        if (!pump_parse(p))
            return false;
    }
}

/* One poll over every unfinished pump; false on an error or 30 s without progress. */
static bool pumps_step(pump *p, int n, int *finished)
{
    struct pollfd pfd[LOAD_CONNS];
    for (int i = 0; i < n; i++) {
        bool want_out = p[i].next < p[i].count && p[i].next - p[i].done < p[i].window;
        int fd = p[i].done < p[i].count ? p[i].c.fd : -1; /* a finished pump is left out */
        pfd[i] = (struct pollfd){fd, (short)(POLLIN | (want_out ? POLLOUT : 0)), 0};
    }
    if (poll(pfd, (nfds_t)n, 30000) <= 0)
        return false;
    *finished = 0;
    for (int i = 0; i < n; i++) {
        short ev = pfd[i].revents;
        if ((ev & POLLOUT && !pump_send(&p[i])) || (ev & (POLLIN | POLLERR | POLLHUP) && !pump_receive(&p[i])))
            return false;
        *finished += p[i].done == p[i].count;
    }
    return true;
}

/* CPU seconds used so far by every thread of process pid (0: none, for direct): its utime +
 * stime, in ns where /proc/<pid>/stat counts 10 ms ticks (coarse for runs of a tenth of a second). */
static bool proc_cpu_s(pid_t pid, double *s)
{
    clockid_t id;
    struct timespec ts;
    *s = 0;
    if (pid == 0)
        return true;
    if (clock_getcpuclockid(pid, &id) || clock_gettime(id, &ts))
        return false;
    *s = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
    return true;
}

typedef struct load {
    double mbps, cpu_s, wall_s, client_cpu_s; /* client_cpu_s: this process, the client and the mock */
    uint64_t bytes;
} load;

/* Pipelines `count` Produce requests of `records` records over `conns` connections to t, `window`
 * in flight on each: MB/s of records, bytes moved both ways, CPU seconds of t's process. */
static bool run_load(target *t, SSL_CTX *tls, int conns, int records, int window, int count, load *out)
{
    pump *p = calloc((size_t)conns, sizeof *p);
    bool ok = p != NULL;
    for (int i = 0; ok && i < conns; i++)
        p[i].c.fd = -1;
    for (int i = 0; ok && i < conns; i++) {
        p[i].window = window, p[i].count = count / conns + (i < count % conns), p[i].frame = produce_frame(records);
        ok = conn_open(&p[i].c, t, tls, true);
    }
    double cpu0 = 0, cpu1 = 0, t0 = bench_wall_s(), client0 = bench_cpu_s();
    ok = ok && proc_cpu_s(t->pid, &cpu0);
    for (int finished = 0; ok && finished < conns;)
        ok = pumps_step(p, conns, &finished);
    double wall = bench_wall_s() - t0, client = bench_cpu_s() - client0;
    ok = ok && proc_cpu_s(t->pid, &cpu1);
    *out = (load){.mbps = (double)count * records * RECORD_BYTES / wall / 1e6, .cpu_s = cpu1 - cpu0,
                  .wall_s = wall, .client_cpu_s = client};
    for (int i = 0; p && i < conns; i++) {
        out->bytes += p[i].bytes;
        conn_close(&p[i].c);
        km_buf_free(&p[i].frame);
    }
    free(p);
    return ok;
}

/* ---- the proxies as child processes -------------------------------------------------------- */

typedef struct bench_env {
    char *dir;                  /* temp dir: certificate, haproxy configs, proxy logs */
    char pem[4096];             /* self-signed certificate and its key, one file */
    const char *upstream;       /* the mock broker, host:port */
    cpu_set_t client_cpus, proxy_cpus[3]; /* proxy_cpus[threads] */
    bool pinned, shared2;       /* shared2: a 2-worker proxy shares the client's CPU */
    double load_before;         /* the load average before the first run */
} bench_env;

/* The bench on the first allowed CPU; a proxy of n workers on the n next ones, or on all. */
static void plan_cpus(bench_env *e)
{
    cpu_set_t all;
    int cpus[CPU_SETSIZE], n = 0;
    if (sched_getaffinity(0, sizeof all, &all))
        return;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &all))
            cpus[n++] = c;
    if (n < 2)
        return;
    e->pinned = true;
    CPU_ZERO(&e->client_cpus);
    CPU_SET(cpus[0], &e->client_cpus);
    for (int threads = 1; threads <= 2; threads++) {
        CPU_ZERO(&e->proxy_cpus[threads]);
        for (int i = 0; i < threads; i++)
            CPU_SET(cpus[n > threads ? 1 + i : i], &e->proxy_cpus[threads]);
    }
    e->shared2 = n <= 2;
}

/* A throwaway self-signed P-256 certificate for CN=localhost and its key, in one PEM file. */
static bool make_certificate(const char *path)
{
    EVP_PKEY *key = EVP_EC_gen("P-256");
    X509 *x = X509_new();
    X509_NAME *name = x ? X509_get_subject_name(x) : NULL;
    FILE *f = NULL;
    bool ok = key && name && X509_set_version(x, 2) && ASN1_INTEGER_set(X509_get_serialNumber(x), 1) &&
              X509_gmtime_adj(X509_getm_notBefore(x), -3600) && X509_gmtime_adj(X509_getm_notAfter(x), 86400) &&
              X509_set_pubkey(x, key) &&
              X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)"localhost", -1, -1, 0) &&
              X509_set_issuer_name(x, name) && X509_sign(x, key, EVP_sha256()) > 0 && (f = fopen(path, "w")) &&
              PEM_write_X509(f, x) && PEM_write_PrivateKey(f, key, NULL, NULL, 0, NULL, NULL);
    if (f && fclose(f))
        ok = false;
    X509_free(x);
    EVP_PKEY_free(key);
    return ok;
}

/* The client's TLS: 1.3 with CIPHER only, no verification (the certificate is throwaway). */
static SSL_CTX *client_tls(void)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    if (ctx && SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION) && SSL_CTX_set_ciphersuites(ctx, CIPHER)) {
        SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
        SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
        return ctx;
    }
    SSL_CTX_free(ctx);
    return NULL;
}

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

/* Whether t listens within 5 s (and its process still runs). */
static bool wait_listening(target *t)
{
    for (int i = 0; i < 500; i++) {
        if (waitpid(t->pid, NULL, WNOHANG) == t->pid) {
            t->pid = 0;
            return false;
        }
        int fd = dial(t->port);
        if (fd >= 0) {
            close(fd);
            return true;
        }
        usleep(10000);
    }
    return false;
}

/* Forks argv on `cpus` (NULL: unpinned), its stdout and stderr into `log_path`. */
static pid_t spawn(char *const argv[], const cpu_set_t *cpus, const char *log_path)
{
    pid_t parent = getpid(), pid = fork();
    if (pid == 0) {
        bench_die_with_parent(parent); /* an interrupted bench leaves no proxy behind */
        if (cpus)
            sched_setaffinity(0, sizeof *cpus, cpus);
        int out = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(out, 1), dup2(out, 2);
        execvp(argv[0], argv);
        _exit(127);
    }
    return pid;
}

/* Prints what a proxy that did not start said. */
static void report_start_failure(const target *t)
{
    char buf[2048];
    FILE *f = fopen(t->log_path, "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    buf[n] = 0;
    if (f)
        fclose(f);
    fprintf(stderr, "bench_inline: %s threads=%d%s did not start; it said:\n%s\n", t->name, t->threads,
            t->tls ? " tls" : "", n ? buf : "(nothing)");
}

static bool start_kmproxy(target *t, const bench_env *e)
{
    char listen[64], up[96], threads[32], cert[4200], key[4200];
    snprintf(listen, sizeof listen, "proxy.bootstrap.listen=127.0.0.1:%u", t->port);
    snprintf(up, sizeof up, "proxy.bootstrap.upstream=%s", e->upstream);
    snprintf(threads, sizeof threads, "proxy.threads=%d", t->threads);
    snprintf(cert, sizeof cert, "proxy.client.ssl.certificate.location=%s", e->pem);
    snprintf(key, sizeof key, "proxy.client.ssl.key.location=%s", e->pem);
    /* CONNS_FOR_RSS clients come from one address: above the per-IP default (1000), as haproxy's maxconn is */
    char *argv[] = {(char *)km_test_binary(), "proxy", "--set", listen, "--set", up, "--set", "log.level=error",
                    "--set", "proxy.max.connections.per.ip=4000", "--set", threads,
                    t->tls ? "--set" : NULL, cert, "--set", key, NULL};
    t->pid = spawn(argv, e->pinned ? &e->proxy_cpus[t->threads] : NULL, t->log_path);
    return wait_listening(t);
}

static bool have_haproxy(void)
{
    return system("command -v haproxy >/dev/null 2>&1") == 0;
}

static bool write_haproxy_cfg(const target *t, const bench_env *e, const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return false;
    fprintf(f, "global\n  maxconn 4000\n  nbthread %d\n", t->threads);
    if (t->tls)
        fprintf(f, "  ssl-default-bind-ciphersuites %s\n  ssl-default-bind-options ssl-min-ver TLSv1.3\n", CIPHER);
    fprintf(f, "defaults\n  mode tcp\n  timeout connect 5s\n  timeout client 60s\n  timeout server 60s\n%s"
               "frontend f\n  bind 127.0.0.1:%u", t->splice ? "  option splice-auto\n" : "", t->port);
    if (t->tls)
        fprintf(f, " ssl crt %s", e->pem);
    fprintf(f, "\n  default_backend b\nbackend b\n  server upstream %s\n", e->upstream);
    return fclose(f) == 0;
}

static bool start_haproxy(target *t, const bench_env *e)
{
    char cfg[4200];
    snprintf(cfg, sizeof cfg, "%s/haproxy-%d%s%s.cfg", e->dir, t->threads, t->tls ? "-tls" : "",
             t->splice ? "-splice" : "");
    if (!write_haproxy_cfg(t, e, cfg))
        return false;
    char *argv[] = {"haproxy", "-db", "-f", cfg, NULL};
    t->pid = spawn(argv, e->pinned ? &e->proxy_cpus[t->threads] : NULL, t->log_path);
    return wait_listening(t);
}

static bool start_target(target *t, const bench_env *e)
{
    t->port = free_port();
    snprintf(t->log_path, sizeof t->log_path, "%s/%s-%d%s.log", e->dir, t->name, t->threads, t->tls ? "-tls" : "");
    bool ok = t->haproxy ? start_haproxy(t, e) : start_kmproxy(t, e);
    if (!ok)
        report_start_failure(t);
    return ok;
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
    load l;
    ok = ok && run_load(t, NULL, 1, 1, 1, 10, &l);
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

/* Moves every thread of process pid (0: this one) onto `cpus`. */
static void move_threads(pid_t pid, const cpu_set_t *cpus)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", pid ? (int)pid : (int)getpid());
    DIR *d = opendir(path);
    for (struct dirent *t; d && (t = readdir(d));)
        if (atoi(t->d_name) > 0)
            sched_setaffinity(atoi(t->d_name), sizeof *cpus, cpus);
    if (d)
        closedir(d);
}

/* For the round trips, the client, the mock and every proxy share the client's CPU:
 * with one request in flight they never want a CPU at the same time, and pinned apart every hop
 * waits for another CPU to wake (see the header). */
static void colocate_for_latency(const target *all, const bench_env *e)
{
    if (!e->pinned)
        return;
    move_threads(0, &e->client_cpus);
    for (int i = 0; i < NLAT; i++)
        if (all[latency_targets[i]].pid > 0)
            move_threads(all[latency_targets[i]].pid, &e->client_cpus);
}

/* ---- the measurements ---------------------------------------------------------------------- */

/* Throughput: every present target once per round, the first rotating, so a burst of load
 * elsewhere hits them alike and none always runs right after the same other one. */
static bool measure_throughput(target *all, SSL_CTX *tls, int count)
{
    for (int round = 0; round < ROUNDS; round++)
        for (int j = 0; j < NTARGETS; j++) {
            target *t = &all[(round + j) % NTARGETS];
            load l;
            if (!t->present)
                continue;
            if (!run_load(t, tls, LOAD_CONNS, 16, 32, count, &l)) {
                fprintf(stderr, "bench_inline: %s threads=%d%s: the Produce run failed\n", t->name, t->threads,
                        t->tls ? " tls" : "");
                return false;
            }
            t->round_mbps[round] = l.mbps;
            t->round_cpu_gb[round] = l.cpu_s / ((double)l.bytes / 1e9);
            t->round_busy[round] = 100 * l.cpu_s / l.wall_s;
            t->round_client_busy[round] = 100 * l.client_cpu_s / l.wall_s;
        }
    return true;
}

/* One Produce of one record on c, answered; its round trip in seconds, or -1. */
static double round_trip(conn *c, km_buf *frame, int32_t corr)
{
    km_buf_patch_i32(frame, 8, corr);
    double t0 = bench_wall_s();
    if (!io_all(c, frame->data, frame->len, true) || !read_ack(c, corr))
        return -1;
    return bench_wall_s() - t0;
}

/* The q-quantile of n samples (sorted in place). */
static double quantile(double *v, int n, double q)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[(int)(n * q)];
}

/* p50 and p99 of the whole and of each consecutive 1/ROUNDS of the samples (in us): shows
 * whether a ratio holds across the run or comes from one burst. */
static bool latency_figures(target *t, double *lat, int count)
{
    int per = count / ROUNDS;
    double *tmp = malloc((size_t)per * sizeof *tmp);
    if (!tmp)
        return false;
    for (int r = 0; r < ROUNDS; r++) {
        memcpy(tmp, lat + r * per, (size_t)per * sizeof *tmp);
        for (int q = P50; q <= P99; q++)
            t->slice[q][r] = quantile(tmp, per, quantiles[q]) * 1e6;
    }
    free(tmp);
    for (int q = P50; q <= P99; q++) /* sorts lat: after the slices */
        t->whole[q] = quantile(lat, count, quantiles[q]) * 1e6;
    return true;
}

/* Round trips with one request in flight, the present latency targets taking turns request by
 * request (the first of each turn rotating), `count` samples each. */
static bool measure_latency(target *all, SSL_CTX *tls, int count)
{
    km_buf frame = produce_frame(1);
    target *t[NLAT];
    conn c[NLAT];
    double *lat[NLAT] = {NULL};
    int n = 0;
    bool ok = true;
    for (int i = 0; i < NLAT; i++)
        if (all[latency_targets[i]].present)
            c[n] = (conn){.fd = -1}, t[n++] = &all[latency_targets[i]];
    for (int i = 0; i < n; i++)
        ok = ok && conn_open(&c[i], t[i], tls, false) && (lat[i] = calloc((size_t)count, sizeof *lat[i]));
    for (int k = 0; ok && k < count; k++)
        for (int j = 0; ok && j < n; j++) {
            int i = (k + j) % n;
            ok = (lat[i][k] = round_trip(&c[i], &frame, k)) >= 0;
            if (!ok)
                fprintf(stderr, "bench_inline: %s%s: a Produce round trip failed\n", t[i]->name,
                        t[i]->tls ? " tls" : "");
        }
    for (int i = 0; i < n; i++) {
        ok = ok && latency_figures(t[i], lat[i], count);
        conn_close(&c[i]);
        free(lat[i]);
    }
    km_buf_free(&frame);
    return ok;
}

/* The 1-minute load average: other programs on a shared machine show in every figure. */
static double load_average(void)
{
    double avg = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f && fscanf(f, "%lf", &avg) != 1)
        avg = -1;
    if (f)
        fclose(f);
    return avg;
}

/* ---- the report ---------------------------------------------------------------------------- */

/* "median (min..max)", padded to a column of `width`. */
static void print_spread(spread s, int decimals, int width)
{
    char buf[96];
    snprintf(buf, sizeof buf, "%.*f (%.*f..%.*f)", decimals, s.med, decimals, s.min, decimals, s.max);
    printf("%-*s ", width, buf);
}

static void print_table(const target *all, double ceiling)
{
    printf("upstream ceiling (direct, %d connections, 128 in flight each, one run): %.1f MB/s\n", LOAD_CONNS, ceiling);
    printf("median (min..max) of %d rounds: MB/s; the proxy's CPU seconds per GB forwarded; %% of one CPU busy in "
           "the proxy, and in the client + mock\n", ROUNDS);
    printf("%-14s %3s %-4s %-26s %-26s %-18s %-18s %s\n", "target", "thr", "tls", "MB/s", "proxy CPU s/GB",
           "proxy %CPU", "client+mock %CPU", "TLS suite");
    for (int i = 0; i < NTARGETS; i++) {
        const target *t = &all[i];
        if (!t->present)
            continue;
        printf("%-14s %3d %-4s ", t->name, t->threads, t->tls ? "yes" : "no");
        print_spread(spread_of(t->round_mbps, ROUNDS), 1, 26);
        if (t->pid) {
            print_spread(spread_of(t->round_cpu_gb, ROUNDS), 3, 26);
            print_spread(spread_of(t->round_busy, ROUNDS), 0, 18);
        } else
            printf("%-26s %-18s ", "-", "-");
        print_spread(spread_of(t->round_client_busy, ROUNDS), 0, 18);
        printf("%s\n", t->tls ? t->cipher : "-");
    }
}

/* One quantile of t's round trips, and what it adds to direct's: "p99 255 (121..863) added +58 (-13..+170)". */
static void print_quantile(const target *t, const target *d, int q)
{
    double added[ROUNDS];
    for (int r = 0; r < ROUNDS; r++)
        added[r] = t->slice[q][r] - d->slice[q][r];
    spread s = spread_of(t->slice[q], ROUNDS), a = spread_of(added, ROUNDS);
    printf("  %s %.0f (%.0f..%.0f)", q == P50 ? "p50" : "p99", t->whole[q], s.min, s.max);
    if (t != d)
        printf(" added %+.0f (%+.0f..%+.0f)", t->whole[q] - d->whole[q], a.min, a.max);
}

static void print_latency(const target *all)
{
    printf("round trips (1 record, 1 in flight), us: the whole run (min..max of %d slices)\n", ROUNDS);
    for (int i = 0; i < NLAT; i++) {
        const target *t = &all[latency_targets[i]];
        if (!t->present)
            continue;
        printf("%-14s %3d %-4s", t->name, t->threads, t->tls ? "tls" : "");
        print_quantile(t, &all[DIRECT], P50);
        print_quantile(t, &all[DIRECT], P99);
        printf("\n");
    }
}

/* Per-round ratios a/b of two per-round figures. */
static spread ratio_spread(const double *a, const double *b)
{
    double r[ROUNDS];
    for (int i = 0; i < ROUNDS; i++)
        r[i] = a[i] / b[i];
    return spread_of(r, ROUNDS);
}

static const char *met(bool yes) { return yes ? "MET" : "NOT MET"; }

/* In how many rounds a/b <= bound (at_most) or >= bound. */
static int rounds_within(const double *a, const double *b, double bound, bool at_most)
{
    int n = 0;
    for (int i = 0; i < ROUNDS; i++)
        n += at_most ? a[i] / b[i] <= bound : a[i] / b[i] >= bound;
    return n;
}

/* One part of a target line, judged on the median of the per-round ratios a/b. */
static void print_judged(const char *sep, const char *label, const double *a, const double *b, double bound,
                         bool at_most)
{
    spread s = ratio_spread(a, b);
    bool ok = at_most ? s.med <= bound : s.med >= bound;
    printf("%s %s %s (median %.2f; %d of %d rounds)", sep, label, met(ok), s.med, rounds_within(a, b, bound, at_most),
           ROUNDS);
}

/* CPU/GB kmproxy over haproxy with `threads` workers each. */
static void print_cpu_ratio(const target *all, int threads, int km, int ha, int km_tls, int ha_tls)
{
    spread plain = ratio_spread(all[km].round_cpu_gb, all[ha].round_cpu_gb);
    spread tls = ratio_spread(all[km_tls].round_cpu_gb, all[ha_tls].round_cpu_gb);
    printf("cpu_per_gb kmproxy/haproxy threads=%d plain=%.2f (rounds %.2f..%.2f) tls=%.2f (rounds %.2f..%.2f)\n",
           threads, plain.med, plain.min, plain.max, tls.med, tls.min, tls.max);
}

/* For reference, not a target: kmproxy against haproxy with splice-auto (1 thread, plaintext). */
static void print_splice_reference(const target *all)
{
    spread r = ratio_spread(all[KM1].round_cpu_gb, all[HA1S].round_cpu_gb);
    spread k = spread_of(all[KM1].round_cpu_gb, ROUNDS), h = spread_of(all[HA1S].round_cpu_gb, ROUNDS);
    printf("cpu_per_gb kmproxy/haproxy+splice threads=1 plain=%.2f (rounds %.2f..%.2f): kmproxy %.3f s/GB, "
           "haproxy+splice %.3f s/GB (reference only: the targets compare with haproxy's defaults)\n",
           r.med, r.min, r.max, k.med, h.med);
}

static void print_cpu_targets(const target *all)
{
    for (int threads = 1; threads <= 2; threads++) {
        int km = threads == 1 ? KM1 : KM2, ha = threads == 1 ? HA1 : HA2;
        int km_tls = threads == 1 ? KM1T : KM2T, ha_tls = threads == 1 ? HA1T : HA2T;
        printf("target cpu_per_gb kmproxy <= haproxy, threads=%d:", threads);
        print_judged("", "plain", all[km].round_cpu_gb, all[ha].round_cpu_gb, 1, true);
        print_judged(",", "tls", all[km_tls].round_cpu_gb, all[ha_tls].round_cpu_gb, 1, true);
        printf("\n");
    }
}

static void print_throughput_ratios(const target *all, bool with_haproxy)
{
    const double *d = all[DIRECT].round_mbps;
    spread k1 = ratio_spread(all[KM1].round_mbps, d), k2 = ratio_spread(all[KM2].round_mbps, d);
    printf("throughput kmproxy/direct threads=1 %.2f (rounds %.2f..%.2f) threads=2 %.2f (rounds %.2f..%.2f)\n",
           k1.med, k1.min, k1.max, k2.med, k2.min, k2.max);
    if (with_haproxy) {
        spread h1 = ratio_spread(all[HA1].round_mbps, d), h2 = ratio_spread(all[HA2].round_mbps, d);
        printf("throughput haproxy/direct threads=1 %.2f (rounds %.2f..%.2f) threads=2 %.2f (rounds %.2f..%.2f)\n",
               h1.med, h1.min, h1.max, h2.med, h2.min, h2.max);
    }
}

static void print_throughput_target(const target *all)
{
    printf("target throughput kmproxy >= 0.95x direct:");
    print_judged("", "threads=1", all[KM1].round_mbps, all[DIRECT].round_mbps, 0.95, false);
    print_judged(",", "threads=2", all[KM2].round_mbps, all[DIRECT].round_mbps, 0.95, false);
    printf("\n");
}

/* Added latency (a quantile minus direct's) of kmproxy over haproxy's: the whole run's, and
 * min..max of the slices'. */
static void print_added_ratio(const target *all, int km, int ha, int q, const char *label)
{
    const target *d = &all[DIRECT], *k = &all[km], *h = &all[ha];
    double r[ROUNDS], kw = k->whole[q] - d->whole[q], hw = h->whole[q] - d->whole[q];
    bool defined = hw > 0;
    for (int i = 0; i < ROUNDS; i++) {
        double hs = h->slice[q][i] - d->slice[q][i];
        defined = defined && hs > 0;
        r[i] = (k->slice[q][i] - d->slice[q][i]) / hs;
    }
    spread s = spread_of(r, ROUNDS);
    printf("%s_added kmproxy/haproxy %s=", q == P50 ? "p50" : "p99", label);
    if (defined)
        printf("%.2f (slices %.2f..%.2f)", kw / hw, s.min, s.max);
    else
        printf("n/a (haproxy added <= 0 us in the run or in a slice)");
    printf(": kmproxy %+.0f us, haproxy %+.0f us\n", kw, hw);
}

/* The p99 target: kmproxy adds no more than haproxy in every slice. */
static void print_p99_target(const target *all, int km, int ha, const char *label)
{
    const target *d = &all[DIRECT], *k = &all[km], *h = &all[ha];
    int slices_met = 0;
    for (int i = 0; i < ROUNDS; i++)
        slices_met += k->slice[P99][i] - d->slice[P99][i] <= h->slice[P99][i] - d->slice[P99][i];
    printf("target added p99 kmproxy <= haproxy in each of %d slices, %s: %s (%d of %d)\n", ROUNDS, label,
           met(slices_met == ROUNDS), slices_met, ROUNDS);
}

static void print_report(const target *all, const bench_env *e, double ceiling, int count, bool with_haproxy)
{
    printf("Produce, 1 KiB records, acks=1; upstream: librdkafka mock broker; %d requests a run.\n", count);
    printf("load average (1 min) before the run %.2f, after %.2f (this bench's own included), on %ld CPUs\n",
           e->load_before, load_average(), sysconf(_SC_NPROCESSORS_ONLN));
    if (e->pinned)
        printf("pinning (MB/s, CPU): client + mock broker on 1 CPU; 1-worker proxies alone on another; 2-worker "
               "proxies on 2 CPUs%s; round trips: every proxy (all threads of a 2-worker one) on the client's CPU\n",
               e->shared2 ? ", sharing the client's (this machine has 2)" : "");
    else
        printf("pinning: none (one CPU allowed): client, mock and proxy share it\n");
    print_table(all, ceiling);
    print_latency(all);
    printf("RSS KB idle / with %d connections: kmproxy %ld / %ld", CONNS_FOR_RSS, all[KM1].rss_idle_kb,
           all[KM1].rss_conns_kb);
    if (with_haproxy)
        printf(", haproxy %ld / %ld", all[HA1].rss_idle_kb, all[HA1].rss_conns_kb);
    printf("\n-- issue 21 ratios (median over rounds, or whole run; min..max over rounds or slices)\n");
    if (with_haproxy) {
        print_cpu_ratio(all, 1, KM1, HA1, KM1T, HA1T);
        print_cpu_ratio(all, 2, KM2, HA2, KM2T, HA2T);
        print_splice_reference(all);
    } else
        printf("cpu_per_gb kmproxy/haproxy: haproxy NOT INSTALLED, not measured\n");
    print_throughput_ratios(all, with_haproxy);
    for (int q = P50; with_haproxy && q <= P99; q++) {
        print_added_ratio(all, KM1, HA1, q, "threads=1 plain");
        print_added_ratio(all, KM1T, HA1T, q, "threads=1 tls");
        print_added_ratio(all, KM2, HA2, q, "threads=2 plain");
        print_added_ratio(all, KM2T, HA2T, q, "threads=2 tls");
    }
    if (!with_haproxy)
        printf("p50_added, p99_added kmproxy/haproxy: haproxy NOT INSTALLED, not measured\n");
    printf("-- issue 21 targets%s%s\n", with_haproxy ? " (haproxy: its defaults, not haproxy+splice)" : "",
           e->pinned && e->shared2 ? " (threads=2: the proxy shares a CPU with the client and the mock)" : "");
    if (with_haproxy)
        print_cpu_targets(all);
    print_throughput_target(all);
    if (with_haproxy) {
        print_p99_target(all, KM1, HA1, "threads=1 plain");
        print_p99_target(all, KM1T, HA1T, "threads=1 tls");
        print_p99_target(all, KM2, HA2, "threads=2 plain");
        print_p99_target(all, KM2T, HA2T, "threads=2 tls");
    } else
        printf("targets against haproxy (CPU/GB, added p99): not evaluated, haproxy NOT INSTALLED\n");
}

/* ---- main --------------------------------------------------------------------------------- */

static void define_targets(target *all, bool with_haproxy)
{
    all[DIRECT] = (target){.name = "direct", .present = true};
    for (int i = KM1; i <= HA2T; i++) {
        int k = i - KM1; /* KM1 HA1 KM2 HA2, then the same with TLS */
        all[i] = (target){.name = k % 2 ? "haproxy" : "kmproxy", .haproxy = k % 2, .threads = 1 + (k / 2) % 2,
                          .tls = k >= 4};
        all[i].present = !all[i].haproxy || with_haproxy;
    }
    all[HA1S] = (target){.name = "haproxy+splice", .haproxy = true, .splice = true, .threads = 1,
                         .present = with_haproxy};
}

/* Starts every present proxy; then removes the temp dir (the proxies have read what they need,
 * and an interrupted run leaves nothing behind). */
static bool start_all(target *all, bench_env *e)
{
    bool ok = true;
    for (int i = KM1; ok && i < NTARGETS; i++)
        ok = !all[i].present || start_target(&all[i], e);
    km_test_rmtree(e->dir);
    free(e->dir);
    e->dir = NULL;
    return ok;
}

static bool set_up(bench_env *e)
{
    if (!(e->dir = km_test_tmpdir("bench-inline")))
        return fprintf(stderr, "bench_inline: cannot make a temp dir\n"), false;
    snprintf(e->pem, sizeof e->pem, "%s/bench.pem", e->dir);
    if (make_certificate(e->pem))
        return true;
    fprintf(stderr, "bench_inline: cannot write a certificate to %s\n", e->pem);
    km_test_rmtree(e->dir);
    free(e->dir);
    e->dir = NULL;
    return false;
}

int main(int argc, char **argv)
{
    int count = argc > 1 ? atoi(argv[1]) : 15000;
    if (count < 100 * ROUNDS) {
        fprintf(stderr, "bench_inline: requests per run must be a number >= %d, not '%s'\n", 100 * ROUNDS, argv[1]);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    bench_env e = {.load_before = load_average()};
    plan_cpus(&e);
    if (e.pinned) /* before librdkafka starts the mock's threads: they inherit it */
        sched_setaffinity(0, sizeof e.client_cpus, &e.client_cpus);
    char errstr[256];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "log_level", "3", errstr, sizeof errstr);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof errstr);
    rd_kafka_mock_cluster_t *mock = rk ? rd_kafka_mock_cluster_new(rk, 1) : NULL;
    if (!mock || rd_kafka_mock_topic_create(mock, "bench", 1, 1)) {
        fprintf(stderr, "bench_inline: cannot start librdkafka's mock cluster\n");
        return 1;
    }
    e.upstream = rd_kafka_mock_cluster_bootstraps(mock);
    bool with_haproxy = have_haproxy();
    if (!with_haproxy)
        printf("haproxy: NOT INSTALLED (deploy/install-test-deps.sh installs it): its figures are skipped\n");
    target all[NTARGETS];
    define_targets(all, with_haproxy);
    all[DIRECT].port = (uint16_t)atoi(strchr(e.upstream, ':') + 1);
    SSL_CTX *tls = client_tls();
    bool ok = tls && set_up(&e) && start_all(all, &e);
    load ceiling = {0};
    ok = ok && run_load(&all[DIRECT], NULL, LOAD_CONNS, 16, 128, count, &ceiling);
    ok = ok && measure_throughput(all, tls, count);
    if (ok)
        colocate_for_latency(all, &e);
    ok = ok && measure_latency(all, tls, count);
    ok = ok && measure_rss(&all[KM1]) && (!with_haproxy || measure_rss(&all[HA1]));
    for (int i = 0; i < NTARGETS; i++)
        stop(&all[i]);
    SSL_CTX_free(tls);
    rd_kafka_mock_cluster_destroy(mock);
    rd_kafka_destroy(rk);
    if (!ok) {
        fprintf(stderr, "bench_inline: FAILED: no figures reported\n");
        return 1;
    }
    print_report(all, &e, ceiling.mbps, count, with_haproxy);
    return 0;
}
