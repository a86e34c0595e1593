/* The metrics endpoint answers a real HTTP client over loopback, and survives bad ones. */
#include "km_metrics.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <ev.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

typedef struct http_client {
    uint16_t port;
    const char *request;
    char response[4096];
    atomic_bool done;
} http_client;

static void *client_main(void *arg)
{
    http_client *c = arg;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(c->port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) {
        send(fd, c->request, strlen(c->request), MSG_NOSIGNAL);
        size_t got = 0;
        for (ssize_t n; (n = recv(fd, c->response + got, sizeof c->response - 1 - got, 0)) > 0;)
            got += (size_t)n;
        c->response[got] = '\0';
    }
    close(fd);
    atomic_store(&c->done, true);
    return NULL;
}

static void poll_done(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)revents;
    if (atomic_load(&((http_client *)t->data)->done))
        ev_break(loop, EVBREAK_ALL);
}

static void render(km_buf *out, void *ud)
{
    (void)ud;
    km_metrics_sample(out, "kmproxy_zk_write_behind_lag", "gauge", "Records behind.", NULL, true, 0);
    km_metrics_sample(out, "kmproxy_broker_errors_total", "counter", "Errors.", "broker=\"1\"", true, 3);
    km_metrics_sample(out, "kmproxy_broker_errors_total", "counter", "Errors.", "broker=\"2\"", false, 0);
}

static void fetch(km_metrics_server *s, struct ev_loop *loop, const char *request, char *out, size_t cap)
{
    http_client c = {.port = km_metrics_port(s), .request = request};
    pthread_t th;
    pthread_create(&th, NULL, client_main, &c);
    ev_timer poll;
    ev_timer_init(&poll, poll_done, 0.005, 0.005);
    poll.data = &c;
    ev_timer_start(loop, &poll);
    ev_run(loop, 0);
    ev_timer_stop(loop, &poll);
    pthread_join(th, NULL);
    snprintf(out, cap, "%s", c.response);
}

Test(metrics, serves_prometheus_text)
{
    struct ev_loop *loop = ev_loop_new(0);
    km_err err = {{0}};
    km_metrics_server *s = km_metrics_listen(loop, "127.0.0.1:0", render, NULL, &err);
    cr_assert(s, "%s", err.msg);
    char resp[4096];
    fetch(s, loop, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", resp, sizeof resp);
    cr_assert(strstr(resp, "HTTP/1.0 200 OK"), "%s", resp);
    cr_assert(strstr(resp, "# TYPE kmproxy_zk_write_behind_lag gauge\nkmproxy_zk_write_behind_lag 0\n"), "%s", resp);
    cr_assert(strstr(resp, "kmproxy_broker_errors_total{broker=\"1\"} 3\nkmproxy_broker_errors_total{broker=\"2\"} 0"),
              "%s", resp);
    fetch(s, loop, "GET /other HTTP/1.0\r\n\r\n", resp, sizeof resp);
    cr_assert(strstr(resp, "404"), "%s", resp);
    km_metrics_free(s);
    ev_loop_destroy(loop);
}

Test(metrics, bad_listen_address)
{
    struct ev_loop *loop = ev_loop_new(0);
    km_err err = {{0}};
    cr_assert_null(km_metrics_listen(loop, "localhost", render, NULL, &err));
    cr_assert(strstr(err.msg, "expected IPv4-HOST:PORT"), "%s", err.msg);
    cr_assert_null(km_metrics_listen(loop, "nohost:80", render, NULL, &err));
    cr_assert(strstr(err.msg, "not an IPv4 address"), "%s", err.msg);
    ev_loop_destroy(loop);
}

/* ---- a loop held up past the request deadline ------------------------------------------------ */

typedef struct stalled_loop {
    struct ev_loop *loop;
    km_metrics_server *s;
    ev_async stop;
} stalled_loop;

/* /stall holds the loop 3 s (what a long full sync does to the daemon's loop); other paths answer. */
static int stalling_route(const char *path, km_buf *body, void *ud)
{
    (void)ud;
    if (!strcmp(path, "/stall"))
        sleep(3);
    km_buf_put(body, "{}", 2);
    return 200;
}

static void on_stop(struct ev_loop *loop, ev_async *w, int revents)
{
    (void)w, (void)revents;
    ev_break(loop, EVBREAK_ALL);
}

static void *run_loop(void *arg)
{
    stalled_loop *l = arg;
    ev_run(l->loop, 0);
    return NULL;
}

static int dial(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    struct timeval tv = {20, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
}

static size_t read_all(int fd, char *out, size_t cap)
{
    size_t got = 0;
    for (ssize_t n; got < cap - 1 && (n = recv(fd, out + got, cap - 1 - got, 0)) > 0;)
        got += (size_t)n;
    out[got] = '\0';
    return got;
}

/* A probe whose request arrived within the deadline is answered even when the loop only gets to it
 * after the deadline: the deadline is for clients that send too little, not for a busy server. */
Test(metrics, a_request_that_arrived_in_time_is_answered_after_a_stall)
{
    stalled_loop l = {.loop = ev_loop_new(0)};
    km_err err = {{0}};
    l.s = km_metrics_listen(l.loop, "127.0.0.1:0", render, NULL, &err);
    cr_assert(l.s, "%s", err.msg);
    km_metrics_set_route(l.s, stalling_route);
    ev_async_init(&l.stop, on_stop);
    ev_async_start(l.loop, &l.stop);
    pthread_t th;
    pthread_create(&th, NULL, run_loop, &l);
    uint16_t port = km_metrics_port(l.s);
    int probe = dial(port);
    usleep(300 * 1000); /* accepted: its deadline runs */
    int staller = dial(port);
    const char stall[] = "GET /stall HTTP/1.0\r\n\r\n", healthz[] = "GET /healthz HTTP/1.0\r\n\r\n";
    cr_assert_eq(send(staller, stall, sizeof stall - 1, 0), (ssize_t)(sizeof stall - 1));
    usleep(500 * 1000); /* the loop is inside /stall now */
    cr_assert_eq(send(probe, healthz, sizeof healthz - 1, 0), (ssize_t)(sizeof healthz - 1));
    char resp[1024];
    read_all(probe, resp, sizeof resp);
    cr_expect(strstr(resp, "HTTP/1.0 200 OK"), "the probe sent in time got: '%s'", resp);
    read_all(staller, resp, sizeof resp);
    cr_expect(strstr(resp, "HTTP/1.0 200 OK"), "%s", resp);
    close(probe), close(staller);
    ev_async_send(l.loop, &l.stop);
    pthread_join(th, NULL);
    km_metrics_free(l.s);
    ev_loop_destroy(l.loop);
}
