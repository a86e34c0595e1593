/* The health port under siege (issue 27 item 7): whoever reaches metrics.listen can open idle or
 * slow connections; a `kmproxy run` must still answer every /healthz and /readyz probe (curl), cut
 * a slowloris before its request completes, and refuse POST while the guard is off. The daemon
 * runs with ZooKeeper unreachable: alive (200) and not ready (503), both answers. */
#include "km_testsupport.h"
#include "ops_daemon.h"
#include "ops_util.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

TestSuite(health_port, .timeout = 300);

#define IDLE 200
#define SLOW 50
#define ROUNDS 15

/* A non-blocking connection to the port (a full backlog must not block the test). */
static int dial(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    cr_assert(fd >= 0, "socket: %s", strerror(errno));
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    int rc = connect(fd, (struct sockaddr *)&sa, sizeof sa);
    cr_assert(rc == 0 || errno == EINPROGRESS, "connect: %s", strerror(errno));
    return fd;
}

/* The server closed it (EOF or reset); a connection still connecting or open is not closed. */
static bool closed_by_server(int fd)
{
    char b[64];
    ssize_t n = recv(fd, b, sizeof b, MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != ENOTCONN);
}

/* Re-opens every connection the server closed, so the siege never lets up; slow ones send one
 * more byte of a request that never ends. */
static void keep_siege(int *idle, int *slow, int port)
{
    for (int i = 0; i < IDLE; i++)
        if (closed_by_server(idle[i])) {
            close(idle[i]);
            idle[i] = dial(port);
        }
    for (int i = 0; i < SLOW; i++) {
        if (closed_by_server(slow[i])) {
            close(slow[i]);
            slow[i] = dial(port);
        }
        send(slow[i], "G", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    }
}

static void start_unready(inst *a, env *e, const char *tag, const char *const *extra)
{
    env_init(e);
    char zk[64];
    snprintf(zk, sizeof zk, "127.0.0.1:%d/kafka", ops_dead_port());
    start(a, e, tag, zk, extra);
    char *body = scrape_until(a, "/healthz", 200, "\"alive\":true", 60);
    free(body);
}

Test(health_port, probes_are_answered_while_idle_and_slow_connections_hold_the_port)
{
    env e;
    inst a;
    start_unready(&a, &e, "siege", (const char *const[]){"brokers.enabled=false", NULL});
    int idle[IDLE], slow[SLOW];
    for (int i = 0; i < IDLE; i++)
        idle[i] = dial(a.port);
    for (int i = 0; i < SLOW; i++)
        slow[i] = dial(a.port);
    int healthz = 0, readyz = 0;
    for (int round = 0; round < ROUNDS; round++) {
        keep_siege(idle, slow, a.port);
        char *body = NULL;
        healthz += ops_curl(a.port, "/healthz", &body) == 200 && strstr(body, "\"alive\":true");
        free(body);
        keep_siege(idle, slow, a.port);
        readyz += ops_curl(a.port, "/readyz", &body) == 503 && strstr(body, "\"ready\":false");
        free(body);
    }
    cr_expect_eq(healthz, ROUNDS, "/healthz answered %d of %d probes", healthz, ROUNDS);
    cr_expect_eq(readyz, ROUNDS, "/readyz answered %d of %d probes", readyz, ROUNDS);
    for (int i = 0; i < IDLE; i++)
        close(idle[i]);
    for (int i = 0; i < SLOW; i++)
        close(slow[i]);
    stop_cleanly(&a);
    env_free(&e);
}

/* One byte every 100 ms of a 4000-byte request (400 s to complete): the server closes it long
 * before, and a probe right after is answered. */
Test(health_port, a_slowloris_is_cut_before_its_request_completes)
{
    env e;
    inst a;
    start_unready(&a, &e, "slowloris", (const char *const[]){"brokers.enabled=false", NULL});
    int fd = dial(a.port);
    const char head[] = "GET /healthz HTTP/1.0\r\nX-Pad: ";
    size_t sent = 0, total = 4000;
    bool cut = false;
    while (!cut && sent < total) {
        char byte = sent < sizeof head - 1 ? head[sent] : 'x';
        cut = send(fd, &byte, 1, MSG_NOSIGNAL) < 0 || closed_by_server(fd);
        sent++;
        poll(NULL, 0, 100);
    }
    cr_expect(cut, "the server took all %zu bytes of a slowloris request", total);
    close(fd);
    char *body = NULL;
    cr_expect_eq(ops_curl(a.port, "/healthz", &body), 200, "%s", body);
    free(body);
    stop_cleanly(&a);
    env_free(&e);
}

/* The daemon's port has no POST handler without the inline proxy: a POST is still refused by the
 * guard (403), and the port's GETs stay open. */
Test(health_port, post_is_forbidden_without_the_guard_enabled)
{
    env e;
    inst a;
    start_unready(&a, &e, "post", (const char *const[]){"brokers.enabled=false", NULL});
    char url[128], *out = NULL;
    snprintf(url, sizeof url, "http://127.0.0.1:%d/capture/on", a.port);
    char *argv[] = {"/usr/bin/curl", "-s", "-m", "10", "-X", "POST", "-w", "\n%{http_code}", url, NULL};
    km_test_run(argv, NULL, 0, &out, NULL, NULL);
    cr_expect(out && strstr(out, "metrics.post.enabled") && strstr(out, "\n403"), "%s", out);
    free(out);
    char *body = NULL;
    cr_expect_eq(ops_curl(a.port, "/metrics", &body), 200);
    free(body);
    stop_cleanly(&a);
    env_free(&e);
}
