/* The inline proxy under abuse (issue 18 items 13-15): a flood of bad connections logs a bounded
 * number of lines with the rest counted; one address cannot take every slot by default; a client
 * trickling a request is cut at proxy.request.read.timeout.ms; the listen backlog is a key; a low
 * open-file limit is said at start; an ApiVersions answer that cannot be parsed never reaches the
 * client uncapped, and is counted and logged once. Real sockets; a scripted upstream. */
#include "test_inline_rig.h"

#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

TestSuite(inline_abuse, .timeout = 120);

static void start_scripted(irig *r, int *lfd)
{
    uint16_t port;
    char addr[64];
    irig_init(r);
    *lfd = irig_listen(&port);
    snprintf(addr, sizeof addr, "127.0.0.1:%u", port);
    irig_set(r, "proxy.bootstrap.listen", "127.0.0.1:0");
    irig_set(r, "proxy.bootstrap.upstream", addr);
}

static int log_lines(irig *r)
{
    pthread_mutex_lock(&r->log_lock);
    int n = r->log_lines;
    pthread_mutex_unlock(&r->log_lock);
    return n;
}

static char *metrics_of(irig *r)
{
    km_buf m;
    km_buf_init(&m);
    km_inline_render_metrics(r->proxy, &m);
    km_buf_put(&m, "", 1);
    return (char *)m.data;
}

/* 300 clients each send a frame no request may have: every one is cut, a few lines say so. */
Test(inline_abuse, a_flood_of_bad_connections_logs_a_bounded_number_of_lines)
{
    irig r;
    int lfd;
    start_scripted(&r, &lfd);
    cr_assert_eq(fcntl(lfd, F_SETFL, O_NONBLOCK), 0);
    irig_start(&r);
    enum { N = 300 };
    static const uint8_t garbage[8] = {0x7f, 0xff, 0xff, 0xff, 'j', 'u', 'n', 'k'};
    for (int i = 0; i < N; i++) {
        int fd = irig_connect(irig_port(&r, -1));
        cr_assert(irig_send_all(fd, garbage, sizeof garbage));
        cr_assert(irig_wait_eof(fd), "bad client %d was not cut", i);
        close(fd);
        /* The proxy reads a client once its upstream is connected (proxy.upstream.hold.ms): the
         * upstream's accept queue is emptied so that it never stops taking connections. */
        for (int up; (up = accept4(lfd, NULL, NULL, SOCK_NONBLOCK)) >= 0;)
            close(up);
    }
    km_inline_stats st;
    irig_stop(&r, &st);
    cr_expect_eq(st.cut, N);
    int lines = log_lines(&r);
    cr_expect(lines >= 1 && lines <= 20, "%d warning lines for %d bad connections", lines, N);
    irig_resume(&r);
    close(lfd);
    irig_free(&r); /* the window's summary goes out at the latest now */
    cr_expect(strstr(r.last_log, "more client-cut warnings") && strstr(r.last_log, " were not logged"),
              "no summary with the count: %s", r.last_log);
}

Test(inline_abuse, one_address_cannot_take_every_slot_by_default)
{
    km_inline_config c;
    km_inline_config_defaults(&c);
    cr_expect_lt(c.max_connections_per_ip, c.max_connections, "per ip %d, all %d", c.max_connections_per_ip,
                 c.max_connections);
    cr_expect_gt(c.request_read_timeout_ms, 0);
    km_inline_config_free(&c);
}

/* A client that sends the first bytes of a request and then nothing is cut at the read deadline,
 * long before the idle timeout; one that sends whole requests slowly is not. */
Test(inline_abuse, a_trickled_request_is_cut_at_the_read_deadline)
{
    irig r;
    int lfd;
    start_scripted(&r, &lfd);
    irig_set(&r, "proxy.request.read.timeout.ms", "300");
    irig_set(&r, "proxy.idle.timeout.ms", "600000");
    irig_start(&r);
    int fd = irig_connect(irig_port(&r, -1));
    static const uint8_t head[6] = {0, 0, 0, 40, 0, 18}; /* a 40-byte ApiVersions frame, 6 bytes of it */
    cr_assert(irig_send_all(fd, head, sizeof head));
    cr_assert(irig_wait_eof(fd), "a client stuck inside a request was never cut");
    close(fd);
    km_inline_stats st;
    irig_stop(&r, &st);
    cr_expect_eq(st.cut, 1);
    cr_expect(strstr(r.last_log, "proxy.request.read.timeout.ms"), "log: %s", r.last_log);
    close(lfd);
    irig_free(&r);
}

Test(inline_abuse, the_listen_backlog_is_a_key)
{
    km_inline_config c;
    km_inline_config_defaults(&c);
    km_err err = {{0}};
    cr_expect_eq(km_inline_config_set(&c, "proxy.listen.backlog", "4096", "test", &err), 0, "%s", err.msg);
    cr_expect_eq(c.listen_backlog, 4096);
    cr_expect_eq(km_inline_config_set(&c, "proxy.listen.backlog", "0", "test", &err), -1);
    cr_expect(strstr(err.msg, "proxy.listen.backlog must be an integer in [1, 65535]"), "%s", err.msg);
    km_inline_config_free(&c);
}

/* Each Criterion test runs in its own process: the lowered limit ends with it. */
Test(inline_abuse, a_low_open_file_limit_is_said_at_start)
{
    struct rlimit low = {256, 256};
    cr_assert_eq(setrlimit(RLIMIT_NOFILE, &low), 0);
    irig r;
    int lfd;
    start_scripted(&r, &lfd);
    irig_set(&r, "proxy.max.connections", "1000");
    irig_start(&r);
    irig_stop(&r, NULL);
    cr_expect(strstr(r.last_log, "RLIMIT_NOFILE") && strstr(r.last_log, "proxy.max.connections=1000"), "log: %s",
              r.last_log);
    irig_resume(&r);
    close(lfd);
    irig_free(&r);
}

static void ask_api_versions(int fd, int16_t version)
{
    km_api_versions_request av;
    km_api_versions_request_init(&av);
    av.client_software_name = km_cstr("t"), av.client_software_version = km_cstr("1");
    size_t len;
    uint8_t *f = irig_request(KM_API_API_VERSIONS, version > 4 ? 3 : version, 7, &av, &len);
    f[7] = (uint8_t)version; /* a version past our spec: the same bytes, as a newer client would send */
    cr_assert(irig_send_all(fd, f, len));
    free(f);
}

/* The upstream answers: correlation id 7, ErrorCode 0, then bytes that are no ApiVersions body. */
static void answer_garbage(int up)
{
    uint8_t *req;
    size_t len;
    cr_assert(irig_read_frame(up, &req, &len), "the upstream got no request");
    free(req);
    static const uint8_t bad[] = {0, 0, 0, 11, 0, 0, 0, 7, 0, 0, 0x7f, 0xff, 0xff, 0xff, 0x01};
    cr_assert(irig_send_all(up, bad, sizeof bad));
}

Test(inline_abuse, an_unparseable_api_versions_answer_is_never_passed_and_is_counted)
{
    irig r;
    int lfd;
    start_scripted(&r, &lfd);
    irig_start(&r);
    const int16_t versions[] = {3, 0, 9};
    for (size_t i = 0; i < sizeof versions / sizeof versions[0]; i++) {
        int fd = irig_connect(irig_port(&r, -1)), up = irig_accept(lfd);
        ask_api_versions(fd, versions[i]);
        answer_garbage(up);
        uint8_t *got = NULL;
        size_t n = 0;
        cr_expect(!irig_read_frame(fd, &got, &n), "ApiVersions v%d: an answer that cannot be capped reached the "
                  "client (%zu bytes)", versions[i], n);
        free(got);
        close(fd), close(up);
    }
    irig_stop(&r, NULL);
    char *m = metrics_of(&r);
    cr_expect(strstr(m, "kmproxy_inline_api_versions_unparsed_total 3\n"), "%s", m);
    free(m);
    irig_resume(&r);
    close(lfd);
    irig_free(&r);
}
