/* The inline proxy test rig: see test_inline_rig.h. */
#include "test_inline_rig.h"
#include "km_testsupport.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <ev.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

void irig_mock(irig *r, int brokers, const char *topic, int partitions)
{
    char errstr[256];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "log_level", "3", errstr, sizeof errstr);
    r->mock_rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof errstr);
    cr_assert(r->mock_rk, "mock host instance: %s", errstr);
    r->mock = rd_kafka_mock_cluster_new(r->mock_rk, brokers);
    cr_assert(r->mock, "rd_kafka_mock_cluster_new");
    snprintf(r->mock_bootstraps, sizeof r->mock_bootstraps, "%s", rd_kafka_mock_cluster_bootstraps(r->mock));
    if (topic)
        cr_assert_eq(rd_kafka_mock_topic_create(r->mock, topic, partitions, 1), RD_KAFKA_RESP_ERR_NO_ERROR);
}

/* The bootstraps list names brokers 1..n in order. */
void irig_mock_broker_address(const irig *r, int32_t id, char *out, size_t cap)
{
    const char *s = r->mock_bootstraps;
    for (int32_t i = 1; i < id && s; i++) {
        s = strchr(s, ',');
        s = s ? s + 1 : NULL;
    }
    cr_assert(s, "mock broker %d not in '%s'", id, r->mock_bootstraps);
    size_t n = strcspn(s, ",");
    cr_assert_lt(n, cap);
    memcpy(out, s, n);
    out[n] = '\0';
}

void irig_init(irig *r)
{
    memset(r, 0, sizeof *r);
    km_inline_config_defaults(&r->cfg);
    /* The default 10000 clients need more descriptors than a test's open-file limit may give, which
     * the proxy warns about at start; the suites use far fewer. */
    r->cfg.max_connections = 4000;
    pthread_mutex_init(&r->log_lock, NULL);
    char threads[32];
    if (km_test_proxy_threads(threads, sizeof threads))
        irig_set(r, "proxy.threads", threads + strlen("proxy.threads="));
}

void irig_set(irig *r, const char *key, const char *value)
{
    km_err err = {{0}};
    cr_assert_eq(km_inline_config_set(&r->cfg, key, value, "test", &err), 0, "%s", err.msg);
}

void irig_dynamic(irig *r)
{
    char first[64], base[16];
    irig_mock_broker_address(r, 1, first, sizeof first);
    snprintf(base, sizeof base, "%d", km_test_free_port_base(8));
    irig_set(r, "proxy.bootstrap.listen", "127.0.0.1:0");
    irig_set(r, "proxy.bootstrap.upstream", first);
    irig_set(r, "proxy.listen.host", "127.0.0.1");
    irig_set(r, "proxy.advertised.host", "127.0.0.1");
    irig_set(r, "proxy.port.base", base);
}

static void proxy_log(void *ud, int level, const char *msg)
{
    irig *r = ud;
    fprintf(stderr, "proxy[%d]: %s\n", level, msg);
    if (level > 1)
        return;
    pthread_mutex_lock(&r->log_lock);
    r->log_lines++;
    snprintf(r->last_log, sizeof r->last_log, "%s", msg);
    pthread_mutex_unlock(&r->log_lock);
}

static void on_stop(struct ev_loop *loop, ev_async *w, int revents)
{
    (void)w, (void)revents;
    ev_break(loop, EVBREAK_ALL);
}

static void *run_loop(void *arg)
{
    irig *r = arg;
    ev_run(r->loop, 0);
    return NULL;
}

void irig_start(irig *r)
{
    km_err err = {{0}};
    signal(SIGPIPE, SIG_IGN); /* as kmproxy proxy and the daemon do: the proxy splices frame bodies then */
    r->loop = ev_loop_new(EVFLAG_AUTO);
    r->proxy = km_inline_new(r->loop, &r->cfg, proxy_log, r, &err);
    cr_assert(r->proxy, "km_inline_new: %s", err.msg);
    r->stop = malloc(sizeof *r->stop);
    ev_async_init(r->stop, on_stop);
    ev_async_start(r->loop, r->stop);
    cr_assert_eq(pthread_create(&r->thread, NULL, run_loop, r), 0);
    r->running = true;
}

uint16_t irig_port(irig *r, int32_t broker_id)
{
    return km_inline_listen_port(r->proxy, broker_id); /* static listeners only change before start */
}

void irig_stop(irig *r, km_inline_stats *stats)
{
    if (r->running) {
        ev_async_send(r->loop, r->stop);
        pthread_join(r->thread, NULL);
        r->running = false;
    }
    if (stats)
        km_inline_get_stats(r->proxy, stats);
}

void irig_resume(irig *r)
{
    cr_assert(!r->running);
    cr_assert_eq(pthread_create(&r->thread, NULL, run_loop, r), 0);
    r->running = true;
}

void irig_free(irig *r)
{
    irig_stop(r, NULL);
    km_inline_free(r->proxy);
    if (r->loop)
        ev_loop_destroy(r->loop);
    free(r->stop);
    km_inline_config_free(&r->cfg);
    if (r->mock)
        rd_kafka_mock_cluster_destroy(r->mock);
    if (r->mock_rk)
        rd_kafka_destroy(r->mock_rk);
    pthread_mutex_destroy(&r->log_lock);
}

static rd_kafka_conf_t *client_conf(const char *bootstrap, const char *const *extra)
{
    char errstr[256];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    cr_assert_eq(rd_kafka_conf_set(conf, "bootstrap.servers", bootstrap, errstr, sizeof errstr), RD_KAFKA_CONF_OK);
    rd_kafka_conf_set(conf, "log_level", "3", errstr, sizeof errstr);
    for (; extra && extra[0]; extra += 2)
        cr_assert_eq(rd_kafka_conf_set(conf, extra[0], extra[1], errstr, sizeof errstr), RD_KAFKA_CONF_OK,
                     "%s=%s: %s", extra[0], extra[1], errstr);
    return conf;
}

rd_kafka_t *irig_producer(const char *bootstrap, const char *const *extra)
{
    char errstr[256];
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, client_conf(bootstrap, extra), errstr, sizeof errstr);
    cr_assert(rk, "producer: %s", errstr);
    return rk;
}

rd_kafka_t *irig_consumer(const char *bootstrap, const char *group, const char *const *extra)
{
    char errstr[256];
    rd_kafka_conf_t *conf = client_conf(bootstrap, extra);
    rd_kafka_conf_set(conf, "group.id", group, errstr, sizeof errstr);
    rd_kafka_conf_set(conf, "auto.offset.reset", "earliest", errstr, sizeof errstr);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof errstr);
    cr_assert(rk, "consumer: %s", errstr);
    rd_kafka_poll_set_consumer(rk);
    return rk;
}

static void set_timeout(int fd)
{
    struct timeval tv = {.tv_sec = 20};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

int irig_connect(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0, "connect to port %u: %s", port, strerror(errno));
    set_timeout(fd);
    return fd;
}

int irig_listen(uint16_t *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    cr_assert_eq(listen(fd, 128), 0);
    getsockname(fd, (struct sockaddr *)&a, &len);
    *port = ntohs(a.sin_port);
    return fd;
}

int irig_accept(int lfd)
{
    int fd = accept(lfd, NULL, NULL);
    cr_assert_geq(fd, 0, "accept: %s", strerror(errno));
    set_timeout(fd);
    return fd;
}

bool irig_send_all(int fd, const void *p, size_t n)
{
    const uint8_t *b = p;
    while (n) {
        ssize_t k = send(fd, b, n, MSG_NOSIGNAL);
        if (k <= 0)
            return false;
        b += k;
        n -= (size_t)k;
    }
    return true;
}

static bool recv_all(int fd, void *p, size_t n)
{
    uint8_t *b = p;
    while (n) {
        ssize_t k = recv(fd, b, n, 0);
        if (k <= 0)
            return false;
        b += k;
        n -= (size_t)k;
    }
    return true;
}

bool irig_read_frame(int fd, uint8_t **out, size_t *len)
{
    uint8_t size[4];
    if (!recv_all(fd, size, 4))
        return false;
    *len = km_be32(size);
    *out = malloc(*len ? *len : 1);
    return recv_all(fd, *out, *len);
}

bool irig_wait_eof(int fd)
{
    uint8_t b[4096];
    for (;;) {
        ssize_t k = recv(fd, b, sizeof b, 0);
        if (k == 0 || (k < 0 && errno == ECONNRESET))
            return true;
        if (k < 0)
            return false; /* timeout */
    }
}

uint8_t *irig_request(int16_t api, int16_t ver, int32_t corr, const void *body, size_t *len)
{
    km_buf b;
    km_buf_init(&b);
    km_err err = {{0}};
    cr_assert_eq(km_frame_request(api, ver, corr, "irig", body, &b, &err), 0, "%s", err.msg);
    *len = b.len;
    return b.data;
}
