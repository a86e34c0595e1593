/* The inline proxy splicing frame bodies (km_net_forward) between plaintext sockets: an 8 MiB
 * Produce request up and an 8 MiB Fetch response down, through a scripted upstream, must arrive
 * byte for byte, with the proxy's counters as if the bytes had crossed user space.  While either
 * reader stalls, the proxy holds a pipe (the forward is running); once the frames are done, it
 * holds none. */
#include "test_inline_rig.h"

#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

TestSuite(inline_splice, .timeout = 120);

#define BIG (8u << 20) /* more than the kernel's socket buffers can absorb at a stall */
#define STALL_AT (1u << 20)

typedef struct script {
    int lfd, up, client;
    uint8_t *produce, *fetch, *fetch_resp;
    size_t produce_len, fetch_len, fetch_resp_len;
    sem_t stalled, go;
    bool up_ok;
    char why[200];
} script;

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
}

static void pattern(uint8_t *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(i * 151u + seed + (i >> 13));
}

/* Produce v7, acks=1: header, null transactional id, acks, timeout, then BIG bytes the proxy
 * never parses (it reads only the header and the acks). */
static uint8_t *produce_request(int32_t corr, size_t *len)
{
    static const uint8_t head[] = {0, 0, 0, 7, 0, 0, 0, 0, 0, 1, 't', 0xff, 0xff, 0, 1, 0, 0, 0x75, 0x30};
    *len = 4 + sizeof head + BIG;
    uint8_t *f = malloc(*len);
    put32(f, (uint32_t)(*len - 4));
    memcpy(f + 4, head, sizeof head);
    put32(f + 8, (uint32_t)corr);
    pattern(f + 4 + sizeof head, BIG, 3);
    return f;
}

/* Fetch v4 with no topics. */
static uint8_t *fetch_request(int32_t corr, size_t *len)
{
    static const uint8_t body[] = {0, 1, 0, 4, 0, 0, 0, 0, 0, 1, 't', 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0,
                                   0, 0, 0, 1, 0, 0x10, 0, 0, 0, 0, 0, 0, 0};
    *len = 4 + sizeof body;
    uint8_t *f = malloc(*len);
    put32(f, sizeof body);
    memcpy(f + 4, body, sizeof body);
    put32(f + 8, (uint32_t)corr);
    return f;
}

static bool read_exact(int fd, uint8_t *p, size_t n)
{
    while (n) {
        ssize_t k = recv(fd, p, n, 0);
        if (k <= 0)
            return false;
        p += k, n -= (size_t)k;
    }
    return true;
}

/* A loopback connection with a small receive buffer (set before connecting, so it holds). */
static int small_connect(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0), small = 64 * 1024;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert(fd >= 0 && setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small) == 0);
    cr_assert(connect(fd, (struct sockaddr *)&a, sizeof a) == 0, "connect to the proxy: %s", strerror(errno));
    return fd;
}

static int count_pipes(void)
{
    DIR *d = opendir("/proc/self/fd");
    cr_assert(d);
    int n = 0;
    char path[300], target[64];
    for (struct dirent *e; (e = readdir(d));) {
        snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
        ssize_t k = readlink(path, target, sizeof target - 1);
        if (k > 0 && (target[k] = 0, strncmp(target, "pipe:", 5) == 0))
            n++;
    }
    closedir(d);
    return n;
}

#define UP_FAIL(...) return snprintf(s->why, sizeof s->why, __VA_ARGS__), NULL

/* The upstream: reads the Produce, stalling a while in the middle, answers it; answers the
 * Fetch with BIG bytes. */
static void *upstream(void *arg)
{
    script *s = arg;
    s->up = irig_accept(s->lfd);
    uint8_t *got = malloc(s->produce_len);
    if (!read_exact(s->up, got, STALL_AT))
        UP_FAIL("the upstream got less than %u bytes of the Produce", STALL_AT);
    sem_post(&s->stalled);
    sem_wait(&s->go);
    if (!read_exact(s->up, got + STALL_AT, s->produce_len - STALL_AT))
        UP_FAIL("the Produce request ended early");
    if (memcmp(got, s->produce, s->produce_len))
        UP_FAIL("the Produce request arrived changed");
    free(got);
    uint8_t resp[16] = {0};
    put32(resp, 12), put32(resp + 4, 7);
    if (!irig_send_all(s->up, resp, sizeof resp))
        UP_FAIL("cannot answer the Produce");
    uint8_t fetch[64];
    if (!read_exact(s->up, fetch, s->fetch_len) || memcmp(fetch, s->fetch, s->fetch_len))
        UP_FAIL("the Fetch request did not arrive as sent");
    if (!irig_send_all(s->up, s->fetch_resp, s->fetch_resp_len))
        UP_FAIL("cannot answer the Fetch");
    s->up_ok = true;
    return NULL;
}

static void *client_writer(void *arg)
{
    script *s = arg;
    irig_send_all(s->client, s->produce, s->produce_len);
    irig_send_all(s->client, s->fetch, s->fetch_len);
    return NULL;
}

Test(inline_splice, big_bodies_pass_spliced_with_exact_counters)
{
    irig r;
    script s = {0};
    uint16_t port;
    char addr[64];
    signal(SIGPIPE, SIG_IGN); /* as `kmproxy proxy` does (cli_proxy.c); else km_net_forward declines */
    irig_init(&r);
    s.lfd = irig_listen(&port);
    int small = 64 * 1024; /* inherited by the accepted upstream socket */
    setsockopt(s.lfd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    snprintf(addr, sizeof addr, "127.0.0.1:%u", port);
    irig_set(&r, "proxy.broker.1.listen", "127.0.0.1:0");
    irig_set(&r, "proxy.broker.1.upstream", addr);
    irig_start(&r);
    s.produce = produce_request(7, &s.produce_len);
    s.fetch = fetch_request(8, &s.fetch_len);
    s.fetch_resp_len = 12 + BIG;
    s.fetch_resp = calloc(1, s.fetch_resp_len);
    put32(s.fetch_resp, (uint32_t)(s.fetch_resp_len - 4)), put32(s.fetch_resp + 4, 8);
    pattern(s.fetch_resp + 12, BIG, 5); /* after throttle time 0 and no topics: bytes a client skips */
    sem_init(&s.stalled, 0, 0), sem_init(&s.go, 0, 0);
    int pipes_idle = count_pipes();

    s.client = small_connect(irig_port(&r, 1));
    pthread_t ut, ct;
    pthread_create(&ut, NULL, upstream, &s);
    pthread_create(&ct, NULL, client_writer, &s);
    sem_wait(&s.stalled);
    usleep(50 * 1000); /* the proxy meets the full socket */
    int pipes_up = count_pipes();
    sem_post(&s.go);

    uint8_t *got = malloc(s.fetch_resp_len);
    uint8_t presp[16];
    cr_assert(read_exact(s.client, presp, sizeof presp), "no Produce response");
    cr_assert(read_exact(s.client, got, STALL_AT), "the Fetch response stopped early");
    usleep(50 * 1000); /* the client stalls in the middle of the response */
    int pipes_down = count_pipes();
    cr_assert(read_exact(s.client, got + STALL_AT, s.fetch_resp_len - STALL_AT), "the Fetch response ended early");
    pthread_join(ct, NULL);
    pthread_join(ut, NULL);
    cr_assert(s.up_ok, "%s", s.why);
    cr_assert(memcmp(got, s.fetch_resp, s.fetch_resp_len) == 0, "the Fetch response arrived changed");

    km_inline_stats st;
    irig_stop(&r, &st);
    cr_expect_eq(st.bytes_up, s.produce_len + s.fetch_len);
    cr_expect_eq(st.bytes_down, sizeof presp + s.fetch_resp_len);
    cr_expect_eq(st.requests, 2);
    cr_expect_eq(st.responses, 2);
    cr_expect_eq(st.cut, 0);
    cr_expect_geq(pipes_up, pipes_idle + 2, "no pipe while the Produce body was on its way: not spliced");
    cr_expect_geq(pipes_down, pipes_idle + 2, "no pipe while the Fetch body was on its way: not spliced");
    irig_resume(&r);
    close(s.client), close(s.up), close(s.lfd);
    for (int i = 0; i < 500 && count_pipes() > pipes_idle; i++) /* until the proxy has seen the close */
        usleep(10 * 1000);
    cr_expect_eq(count_pipes(), pipes_idle, "pipes left behind after the session");
    free(got), free(s.produce), free(s.fetch), free(s.fetch_resp);
    irig_free(&r);
}
