/* The inline proxy's corner cases, with raw sockets on the client side and either librdkafka's
 * mock cluster or a scripted upstream (a socket the test answers by hand, with frames our codec
 * encodes) where the mock cannot produce the case: DescribeCluster, batched FindCoordinator,
 * SaslHandshake v0's raw tokens, an unknown API, a broker that never answers. */
#include "km_testsupport.h"
#include "test_inline_rig.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

TestSuite(inline_edge, .timeout = 120);

/* ---- helpers ------------------------------------------------------------------------ */

static void start_over_mock(irig *r)
{
    irig_init(r);
    irig_mock(r, 3, "edge", 1);
    irig_dynamic(r);
}

/* Proxy with its bootstrap listener in front of a scripted upstream (*lfd). */
static void start_scripted(irig *r, int *lfd)
{
    uint16_t port;
    char addr[64], base[16];
    irig_init(r);
    *lfd = irig_listen(&port);
    snprintf(addr, sizeof addr, "127.0.0.1:%u", port);
    snprintf(base, sizeof base, "%d", km_test_free_port_base(8));
    irig_set(r, "proxy.bootstrap.listen", "127.0.0.1:0");
    irig_set(r, "proxy.bootstrap.upstream", addr);
    irig_set(r, "proxy.listen.host", "127.0.0.1");
    irig_set(r, "proxy.advertised.host", "127.0.0.1");
    irig_set(r, "proxy.port.base", base);
}

static void send_request(int fd, int16_t api, int16_t ver, int32_t corr, const void *body)
{
    size_t len;
    uint8_t *f = irig_request(api, ver, corr, body, &len);
    cr_assert(irig_send_all(fd, f, len));
    free(f);
}

/* The scripted upstream reads one request and checks its header. */
static void expect_request(int up, int16_t api, int16_t ver, int32_t corr)
{
    uint8_t *p;
    size_t len;
    cr_assert(irig_read_frame(up, &p, &len), "the upstream got no request");
    km_reader r;
    km_reader_init(&r, p, len);
    km_request_header_view h;
    km_arena a;
    km_arena_init(&a, 1 << 20);
    km_err err = {{0}};
    cr_assert_eq(km_parse_request_header(&r, &h, &a, &err), 0, "%s", err.msg);
    cr_assert_eq(h.api_key, api);
    cr_assert_eq(h.api_version, ver);
    cr_assert_eq(h.correlation_id, corr);
    km_arena_free(&a);
    free(p);
}

static void send_response(int up, int16_t api, int16_t ver, int32_t corr, const void *body)
{
    km_buf b;
    km_buf_init(&b);
    km_err err = {{0}};
    cr_assert_eq(km_frame_response(api, ver, corr, body, &b, &err), 0, "%s", err.msg);
    cr_assert(irig_send_all(up, b.data, b.len));
    km_buf_free(&b);
}

/* Reads a response frame on the client and decodes its body into obj (arena a). */
static void read_response(int fd, int16_t api, int16_t ver, int32_t corr, void *obj, km_arena *a)
{
    uint8_t *p;
    size_t len;
    cr_assert(irig_read_frame(fd, &p, &len), "no response for correlation id %d", corr);
    km_reader r;
    km_reader_init(&r, p, len);
    int32_t got;
    km_err err = {{0}};
    cr_assert_eq(km_parse_response_header(&r, api, ver, &got, &err), 0, "%s", err.msg);
    cr_assert_eq(got, corr);
    const km_message_desc *md = km_find_message(KM_K_RESPONSE, api);
    uint8_t *copy = km_arena_alloc(a, len + 1); /* decoded strings point into the frame */
    memcpy(copy, p, len);
    cr_assert_eq(km_decode(md, ver, copy + r.pos, len - r.pos, obj, a, NULL, &err), 0, "%s", err.msg);
    free(p);
}

static bool log_mentions(irig *r, const char *what)
{
    pthread_mutex_lock(&r->log_lock);
    bool yes = strstr(r->last_log, what) != NULL;
    pthread_mutex_unlock(&r->log_lock);
    return yes;
}

/* A librdkafka client gets metadata through the proxy: the proxy still serves others. */
static void others_still_served(irig *r)
{
    char bootstrap[64];
    snprintf(bootstrap, sizeof bootstrap, "127.0.0.1:%u", irig_port(r, -1));
    rd_kafka_t *rk = irig_producer(bootstrap, NULL);
    const struct rd_kafka_metadata *md = NULL;
    cr_assert_eq(rd_kafka_metadata(rk, 1, NULL, &md, 10000), 0, "metadata through the proxy failed");
    cr_assert_eq(md->broker_cnt, 3);
    for (int i = 0; i < md->broker_cnt; i++)
        cr_assert_eq(md->brokers[i].port, r->cfg.port_base + md->brokers[i].id);
    rd_kafka_metadata_destroy(md);
    rd_kafka_destroy(rk);
}

/* ---- garbage, limits, timeouts ------------------------------------------------------------ */

/* An ApiVersions v0 round trip over the mock: the answer must come back, without error. */
static void api_versions_round_trip(int fd, int32_t corr)
{
    km_api_versions_request av;
    km_api_versions_request_init(&av);
    send_request(fd, KM_API_API_VERSIONS, 0, corr, &av);
    km_arena a;
    km_arena_init(&a, 1 << 20);
    km_api_versions_response avr;
    read_response(fd, KM_API_API_VERSIONS, 0, corr, &avr, &a);
    cr_expect_eq(avr.error_code, 0);
    km_arena_free(&a);
}

Test(inline_edge, garbage_oversized_bad_header_truncated_are_cut_alone)
{
    irig r;
    start_over_mock(&r);
    irig_set(&r, "proxy.max.frame.bytes", "65536");
    irig_start(&r);
    uint16_t port = irig_port(&r, -1);
    int keep = irig_connect(port); /* a healthy client before, during and after */
    int fd = irig_connect(port);
    cr_assert(irig_send_all(fd, "GET / HTTP/1.1\r\n\r\n", 18));
    cr_assert(irig_wait_eof(fd), "garbage did not cut the client");
    close(fd);
    cr_expect(log_mentions(&r, "exceeds proxy.max.frame.bytes"), "log: %s", r.last_log);
    fd = irig_connect(port);
    uint8_t big[4] = {0, 1, 0, 1}; /* 65537 bytes: one past the limit */
    cr_assert(irig_send_all(fd, big, 4));
    cr_assert(irig_wait_eof(fd));
    close(fd);
    fd = irig_connect(port);
    uint8_t bad[12] = {0, 0, 0, 8, 0, 3, 0xff, 0xff, 0, 0, 0, 1}; /* Metadata version -1 */
    cr_assert(irig_send_all(fd, bad, sizeof bad));
    cr_assert(irig_wait_eof(fd));
    close(fd);
    cr_expect(log_mentions(&r, "api version -1 is negative"), "log: %s", r.last_log);
    fd = irig_connect(port);
    uint8_t part[14] = {0, 0, 0, 100, 0, 18, 0, 0, 0, 0, 0, 9, 0, 0};
    cr_assert(irig_send_all(fd, part, sizeof part));
    close(fd); /* truncated: the client leaves mid-frame */
    api_versions_round_trip(keep, 5);
    others_still_served(&r);
    close(keep);
    km_inline_stats st;
    for (int i = 0; i < 2000; i++) { /* the truncated client's close reaches the proxy's loop */
        pthread_mutex_lock(&r.log_lock);
        bool seen = strstr(r.last_log, "inside a request frame") != NULL;
        pthread_mutex_unlock(&r.log_lock);
        if (seen)
            break;
        usleep(10000);
    }
    irig_stop(&r, &st);
    cr_expect_eq(st.cut, 4, "cut %llu", (unsigned long long)st.cut);
    irig_free(&r);
}

Test(inline_edge, connection_limits_refuse_with_a_log_line)
{
    irig r;
    start_over_mock(&r);
    irig_set(&r, "proxy.max.connections.per.ip", "3");
    irig_start(&r);
    uint16_t port = irig_port(&r, -1);
    int fds[3];
    for (int i = 0; i < 3; i++)
        fds[i] = irig_connect(port);
    int extra = irig_connect(port);
    cr_assert(irig_wait_eof(extra), "a 4th connection from one IP was not refused");
    close(extra);
    cr_expect(log_mentions(&r, "proxy.max.connections.per.ip"), "log: %s", r.last_log);
    for (int i = 0; i < 3; i++) { /* the first three are served */
        api_versions_round_trip(fds[i], i);
        close(fds[i]);
    }
    km_inline_stats st;
    irig_stop(&r, &st);
    cr_expect_eq(st.refused, 1);
    irig_free(&r);

    start_over_mock(&r);
    irig_set(&r, "proxy.max.connections", "2");
    irig_start(&r);
    port = irig_port(&r, -1);
    fds[0] = irig_connect(port), fds[1] = irig_connect(port), extra = irig_connect(port);
    cr_assert(irig_wait_eof(extra), "a 3rd connection was not refused by proxy.max.connections=2");
    cr_expect(log_mentions(&r, "proxy.max.connections reached"), "log: %s", r.last_log);
    close(extra), close(fds[0]), close(fds[1]);
    irig_free(&r);
}

Test(inline_edge, idle_clients_are_closed)
{
    irig r;
    start_over_mock(&r);
    irig_set(&r, "proxy.idle.timeout.ms", "300");
    irig_start(&r);
    int fd = irig_connect(irig_port(&r, -1));
    cr_assert(irig_wait_eof(fd), "an idle client was never closed");
    close(fd);
    irig_free(&r);
}

Test(inline_edge, a_broker_that_never_answers_times_out)
{
    irig r;
    int lfd;
    start_scripted(&r, &lfd);
    irig_set(&r, "proxy.request.timeout.ms", "300");
    irig_start(&r);
    int fd = irig_connect(irig_port(&r, -1)), up = irig_accept(lfd);
    km_metadata_request mr;
    km_metadata_request_init(&mr);
    send_request(fd, KM_API_METADATA, 4, 9, &mr);
    cr_assert(irig_wait_eof(fd), "the client was not closed after the request timeout");
    cr_expect(log_mentions(&r, "did not answer METADATA v4 (correlation id 9)"), "log: %s", r.last_log);
    close(fd), close(up), close(lfd);
    irig_free(&r);
}

/* ---- address rewriting beyond what the mock answers ---------------------------------------- */

Test(inline_edge, describe_cluster_and_find_coordinator_carry_proxy_addresses)
{
    irig r;
    int lfd;
    start_scripted(&r, &lfd);
    irig_start(&r);
    int base = r.cfg.port_base, fd = irig_connect(irig_port(&r, -1)), up = irig_accept(lfd);
    km_arena a;
    km_arena_init(&a, 1 << 20);

    /* Every version of DescribeCluster, v0 to v2 (Kafka 4.x: IsFenced, kept as it was) */
    for (int16_t v = 0; v <= 2; v++) {
        km_describe_cluster_request dcq;
        km_describe_cluster_request_init(&dcq);
        dcq.include_fenced_brokers = v >= 2;
        send_request(fd, KM_API_DESCRIBE_CLUSTER, v, 1 + v, &dcq);
        expect_request(up, KM_API_DESCRIBE_CLUSTER, v, 1 + v);
        km_describe_cluster_response dc;
        km_describe_cluster_response_init(&dc);
        km_describe_cluster_response_broker brokers[2] = {
            {.broker_id = 1, .host = km_cstr("10.9.9.1"), .port = 9092},
            {.broker_id = 2, .host = km_cstr("10.9.9.2"), .port = 9093, .is_fenced = v >= 2}};
        dc.brokers.count = 2, dc.brokers.items = brokers, dc.cluster_id = km_cstr("c1"), dc.endpoint_type = 1;
        send_response(up, KM_API_DESCRIBE_CLUSTER, v, 1 + v, &dc);
        km_describe_cluster_response dcr;
        read_response(fd, KM_API_DESCRIBE_CLUSTER, v, 1 + v, &dcr, &a);
        cr_assert_eq(dcr.brokers.count, 2);
        for (int i = 0; i < 2; i++) {
            cr_expect(km_str_eq(dcr.brokers.items[i].host, "127.0.0.1"));
            cr_expect_eq(dcr.brokers.items[i].port, base + dcr.brokers.items[i].broker_id);
            cr_expect_eq(dcr.brokers.items[i].is_fenced, v >= 2 && dcr.brokers.items[i].broker_id == 2);
        }
        cr_expect(km_str_eq(dcr.cluster_id, "c1"), "nothing else changes");
    }

    km_find_coordinator_request fcq;
    km_find_coordinator_request_init(&fcq);
    fcq.key = km_cstr("g");
    send_request(fd, KM_API_FIND_COORDINATOR, 3, 5, &fcq);
    expect_request(up, KM_API_FIND_COORDINATOR, 3, 5);
    km_find_coordinator_response fc;
    km_find_coordinator_response_init(&fc);
    fc.node_id = 3, fc.host = km_cstr("10.9.9.3"), fc.port = 9094;
    send_response(up, KM_API_FIND_COORDINATOR, 3, 5, &fc);
    km_find_coordinator_response fcr;
    read_response(fd, KM_API_FIND_COORDINATOR, 3, 5, &fcr, &a);
    cr_expect(km_str_eq(fcr.host, "127.0.0.1"));
    cr_expect_eq(fcr.port, base + 3);

    km_find_coordinator_request_init(&fcq); /* v4+: batched */
    km_str keys[2] = {km_cstr("g1"), km_cstr("g2")};
    fcq.coordinator_keys.count = 2, fcq.coordinator_keys.items = keys;
    send_request(fd, KM_API_FIND_COORDINATOR, 4, 6, &fcq);
    expect_request(up, KM_API_FIND_COORDINATOR, 4, 6);
    km_find_coordinator_response_init(&fc);
    km_find_coordinator_response_coordinator cs[2] = {
        {.key = km_cstr("g1"), .node_id = 2, .host = km_cstr("10.9.9.2"), .port = 9093},
        {.key = km_cstr("g2"), .node_id = -1, .host = km_cstr(""), .port = -1, .error_code = 15}};
    fc.coordinators.count = 2, fc.coordinators.items = cs;
    send_response(up, KM_API_FIND_COORDINATOR, 4, 6, &fc);
    read_response(fd, KM_API_FIND_COORDINATOR, 4, 6, &fcr, &a);
    cr_assert_eq(fcr.coordinators.count, 2);
    cr_expect(km_str_eq(fcr.coordinators.items[0].host, "127.0.0.1"));
    cr_expect_eq(fcr.coordinators.items[0].port, base + 2);
    cr_expect_eq(fcr.coordinators.items[1].error_code, 15, "an error entry passes as it was");
    cr_expect_eq(fcr.coordinators.items[1].port, -1);

    /* Every version of Metadata, v0 to v13 (Kafka 4.x: a top-level ErrorCode, kept as it was). */
    for (int16_t v = 0; v <= 13; v++) {
        km_metadata_request mq;
        km_metadata_request_init(&mq);
        send_request(fd, KM_API_METADATA, v, 10 + v, &mq);
        expect_request(up, KM_API_METADATA, v, 10 + v);
        km_metadata_response m;
        km_metadata_response_init(&m);
        km_metadata_response_response_broker mb[1] = {{.node_id = 1, .host = km_cstr("10.9.9.1"), .port = 9092}};
        m.brokers.count = 1, m.brokers.items = mb, m.error_code = v >= 13 ? 7 : 0;
        send_response(up, KM_API_METADATA, v, 10 + v, &m);
        km_metadata_response mr;
        read_response(fd, KM_API_METADATA, v, 10 + v, &mr, &a);
        cr_assert_eq(mr.brokers.count, 1);
        cr_expect(km_str_eq(mr.brokers.items[0].host, "127.0.0.1"));
        cr_expect_eq(mr.brokers.items[0].port, base + 1);
        cr_expect_eq(mr.error_code, v >= 13 ? 7 : 0);
    }
    km_arena_free(&a);
    close(fd), close(up), close(lfd);
    km_inline_stats st;
    irig_stop(&r, &st);
    cr_expect_eq(st.rewritten, 3 + 2 + 14);
    irig_free(&r);
}

/* Static routes only (no port.base): a broker without a listener is left out of the answer. */
Test(inline_edge, a_broker_without_a_listener_is_left_out)
{
    irig r;
    uint16_t port;
    char addr[64];
    irig_init(&r);
    int lfd = irig_listen(&port);
    snprintf(addr, sizeof addr, "127.0.0.1:%u", port);
    irig_set(&r, "proxy.broker.1.listen", "127.0.0.1:0");
    irig_set(&r, "proxy.broker.1.upstream", addr);
    irig_start(&r);
    int fd = irig_connect(irig_port(&r, 1)), up = irig_accept(lfd);
    km_metadata_request mq;
    km_metadata_request_init(&mq);
    send_request(fd, KM_API_METADATA, 9, 1, &mq);
    expect_request(up, KM_API_METADATA, 9, 1);
    km_metadata_response m;
    km_metadata_response_init(&m);
    km_metadata_response_response_broker mb[2] = {{.node_id = 1, .host = km_cstr("10.9.9.1"), .port = 9092},
                                                  {.node_id = 2, .host = km_cstr("10.9.9.2"), .port = 9092}};
    m.brokers.count = 2, m.brokers.items = mb;
    send_response(up, KM_API_METADATA, 9, 1, &m);
    km_arena a;
    km_arena_init(&a, 1 << 20);
    km_metadata_response mr;
    read_response(fd, KM_API_METADATA, 9, 1, &mr, &a);
    cr_assert_eq(mr.brokers.count, 1);
    cr_expect_eq(mr.brokers.items[0].node_id, 1);
    cr_expect_eq(mr.brokers.items[0].port, irig_port(&r, 1));
    km_arena_free(&a);
    close(fd), close(up), close(lfd);
    irig_free(&r);
}

/* Answers one Metadata v1 request naming broker 5 at 127.0.0.1:port; checks the client sees the proxy. */
static void metadata_names_broker5(irig *r, int fd, int up, int32_t corr, uint16_t port)
{
    km_metadata_request mq;
    km_metadata_request_init(&mq);
    send_request(fd, KM_API_METADATA, 1, corr, &mq);
    expect_request(up, KM_API_METADATA, 1, corr);
    km_metadata_response m;
    km_metadata_response_init(&m);
    km_metadata_response_response_broker mb = {.node_id = 5, .host = km_cstr("127.0.0.1"), .port = port};
    m.brokers.count = 1, m.brokers.items = &mb;
    send_response(up, KM_API_METADATA, 1, corr, &m);
    km_arena a;
    km_arena_init(&a, 1 << 20);
    km_metadata_response mr;
    read_response(fd, KM_API_METADATA, 1, corr, &mr, &a);
    cr_assert_eq(mr.brokers.items[0].port, r->cfg.port_base + 5);
    km_arena_free(&a);
}

static void api_versions_reaches(int client, int upstream, int32_t corr)
{
    km_api_versions_request av;
    km_api_versions_request_init(&av);
    send_request(client, KM_API_API_VERSIONS, 0, corr, &av);
    expect_request(upstream, KM_API_API_VERSIONS, 0, corr);
}

/* A broker restarting onto a new address: new connections go there, the live one stays. */
Test(inline_edge, an_upstream_move_affects_new_connections_only)
{
    irig r;
    int lfd;
    start_scripted(&r, &lfd);
    irig_start(&r);
    uint16_t pa, pb, port5;
    int la = irig_listen(&pa), lb = irig_listen(&pb);
    int fd = irig_connect(irig_port(&r, -1)), up = irig_accept(lfd);
    metadata_names_broker5(&r, fd, up, 1, pa);
    port5 = (uint16_t)(r.cfg.port_base + 5);
    int old_client = irig_connect(port5), old_up = irig_accept(la);
    api_versions_reaches(old_client, old_up, 1);
    metadata_names_broker5(&r, fd, up, 2, pb); /* broker 5 moved to B */
    int new_client = irig_connect(port5), new_up = irig_accept(lb);
    api_versions_reaches(new_client, new_up, 2);
    api_versions_reaches(old_client, old_up, 3); /* the live connection still goes to A */
    close(new_client), close(new_up), close(old_client), close(old_up);
    close(fd), close(up), close(lfd), close(la), close(lb);
    irig_free(&r);
}

/* ---- protocol corner cases ------------------------------------------------------------------- */

/* SaslHandshake v0 switches to raw size-prefixed tokens (PLAIN: one each way, the server's
 * empty), then Kafka frames resume: the Metadata after it must be paired and rewritten. */
Test(inline_edge, sasl_handshake_v0_raw_tokens_then_kafka_frames)
{
    irig r;
    int lfd;
    start_scripted(&r, &lfd);
    irig_start(&r);
    int fd = irig_connect(irig_port(&r, -1)), up = irig_accept(lfd);
    km_sasl_handshake_request hq;
    km_sasl_handshake_request_init(&hq);
    hq.mechanism = km_cstr("PLAIN");
    send_request(fd, KM_API_SASL_HANDSHAKE, 0, 1, &hq);
    expect_request(up, KM_API_SASL_HANDSHAKE, 0, 1);
    km_sasl_handshake_response hs;
    km_sasl_handshake_response_init(&hs);
    km_str mechs[1] = {km_cstr("PLAIN")};
    hs.mechanisms.count = 1, hs.mechanisms.items = mechs;
    send_response(up, KM_API_SASL_HANDSHAKE, 0, 1, &hs);
    km_arena a;
    km_arena_init(&a, 1 << 20);
    km_sasl_handshake_response hr;
    read_response(fd, KM_API_SASL_HANDSHAKE, 0, 1, &hr, &a);
    cr_assert_eq(hr.error_code, 0);
    static const uint8_t token[] = {0, 0, 0, 10, 0, 'u', 's', 'e', 'r', 0, 'p', 'w', 'd', '!'};
    cr_assert(irig_send_all(fd, token, sizeof token));
    uint8_t *p;
    size_t len;
    cr_assert(irig_read_frame(up, &p, &len), "the token did not reach the upstream");
    cr_assert_eq(len, 10);
    cr_assert_eq(memcmp(p, token + 4, 10), 0);
    free(p);
    static const uint8_t empty_token[4] = {0};
    cr_assert(irig_send_all(up, empty_token, 4));
    cr_assert(irig_read_frame(fd, &p, &len), "the server's token did not reach the client");
    cr_assert_eq(len, 0);
    free(p);
    metadata_names_broker5(&r, fd, up, 2, 9092);
    km_arena_free(&a);
    close(fd), close(up), close(lfd);
    km_inline_stats st;
    irig_stop(&r, &st);
    cr_expect_eq(st.cut, 0);
    irig_free(&r);
}

/* An API key the codec does not know, and a version past the codec's: forwarded byte for byte
 * both ways and counted. */
Test(inline_edge, unknown_api_and_version_pass_untouched)
{
    irig r;
    int lfd;
    start_scripted(&r, &lfd);
    irig_start(&r);
    int fd = irig_connect(irig_port(&r, -1)), up = irig_accept(lfd);
    static const uint8_t req[][20] = {
        {0, 0, 0, 16, 0x03, 0xe7, 0, 0, 0, 0, 0, 77, 0, 2, 'c', 'l', 'x', 'y', 'z', '!'}, /* api 999 v0 */
        {0, 0, 0, 16, 0, 3, 0, 99, 0, 0, 0, 78, 0, 2, 'c', 'l', 'x', 'y', 'z', '!'},      /* Metadata v99 */
    };
    static const uint8_t resp[][11] = {{0, 0, 0, 7, 0, 0, 0, 77, 'a', 'b', 'c'}, {0, 0, 0, 7, 0, 0, 0, 78, 'd', 'e', 'f'}};
    for (int i = 0; i < 2; i++) {
        cr_assert(irig_send_all(fd, req[i], sizeof req[i]));
        uint8_t *p;
        size_t len;
        cr_assert(irig_read_frame(up, &p, &len));
        cr_assert(len == 16 && !memcmp(p, req[i] + 4, 16), "request %d changed on the way", i);
        free(p);
        cr_assert(irig_send_all(up, resp[i], sizeof resp[i]));
        cr_assert(irig_read_frame(fd, &p, &len));
        cr_assert(len == 7 && !memcmp(p, resp[i] + 4, 7), "response %d changed on the way", i);
        free(p);
    }
    close(fd), close(up), close(lfd);
    km_inline_stats st;
    irig_stop(&r, &st);
    cr_expect_eq(st.unknown_api, 2);
    cr_expect_eq(st.cut, 0);
    irig_free(&r);
}

/* Pipelining against the mock: ApiVersions and Metadata of the versions the mock knows (it
 * knows ApiVersions v0-2 and Metadata v0-2), all written at once, answered in order. */
static const int16_t MOCK_METADATA[4] = {0, 1, 2, 1}; /* librdkafka 2.0's mock: Metadata v0-2 */

Test(inline_edge, pipelined_requests_are_paired_in_order)
{
    irig r;
    start_over_mock(&r);
    irig_start(&r);
    int fd = irig_connect(irig_port(&r, -1));
    km_buf all;
    km_buf_init(&all);
    km_err err = {{0}};
    enum { ROUNDS = 200 };
    for (int i = 0; i < ROUNDS; i++) {
        km_api_versions_request av;
        km_api_versions_request_init(&av);
        av.client_software_name = km_cstr("irig"), av.client_software_version = km_cstr("1");
        km_metadata_request mq;
        km_metadata_request_init(&mq);
        cr_assert_eq(km_frame_request(KM_API_API_VERSIONS, 2, 2 * i, "irig", &av, &all, &err), 0, "%s", err.msg);
        cr_assert_eq(km_frame_request(KM_API_METADATA, MOCK_METADATA[i % 4], 2 * i + 1, "irig", &mq, &all, &err), 0,
                     "%s", err.msg);
    }
    cr_assert(irig_send_all(fd, all.data, all.len));
    km_buf_free(&all);
    for (int i = 0; i < ROUNDS; i++) {
        km_arena a;
        km_arena_init(&a, 1 << 20);
        km_api_versions_response avr;
        read_response(fd, KM_API_API_VERSIONS, 2, 2 * i, &avr, &a);
        cr_assert_eq(avr.error_code, 0);
        km_metadata_response mr;
        read_response(fd, KM_API_METADATA, MOCK_METADATA[i % 4], 2 * i + 1, &mr, &a);
        cr_assert_eq(mr.brokers.count, 3);
        for (int b = 0; b < 3; b++)
            cr_assert_eq(mr.brokers.items[b].port, r.cfg.port_base + mr.brokers.items[b].node_id);
        km_arena_free(&a);
    }
    close(fd);
    irig_free(&r);
}

/* Bytes split inside frame heads, in both directions: reads that start in the middle of one
 * frame's head and end in the middle of another's.  What the proxy forwards is byte for byte
 * what was sent (it sends a head gathered across two reads together with the bytes after it,
 * from two buffers, and must not reuse the first before they are out). */
typedef struct dribble {
    int fd;
    const uint8_t *p;
    size_t n;
    size_t head;   /* the bytes of each frame's head (the proxy gathers that much before going on) */
    unsigned seed;
} dribble;

/* Sends d's bytes in pieces, cutting inside the head of about every other frame, a pause after
 * each piece so that the proxy reads it on its own. */
static void *dribble_out(void *arg)
{
    dribble *d = arg;
    size_t from = 0;
    for (size_t at = 0; at + 4 <= d->n;) {
        size_t len = 4 + (size_t)km_be32(d->p + at);
        size_t span = len < d->head ? len : d->head;
        if (rand_r(&d->seed) % 2 && span > 1) {
            size_t cut = at + 1 + (size_t)rand_r(&d->seed) % (span - 1);
            if (!irig_send_all(d->fd, d->p + from, cut - from))
                return "send failed";
            from = cut;
            usleep(100);
        }
        at += len;
    }
    return irig_send_all(d->fd, d->p + from, d->n - from) ? NULL : "send failed";
}

static bool read_exactly(int fd, uint8_t *p, size_t n)
{
    while (n) {
        ssize_t k = read(fd, p, n);
        if (k <= 0)
            return false;
        p += k, n -= (size_t)k;
    }
    return true;
}

/* K Produce v9 requests (records: random bytes of random length) or their answers (error
 * messages of random length), framed back to back. */
static void produce_stream(km_buf *out, int k, bool responses, unsigned seed)
{
    static uint8_t junk[9000];
    for (size_t i = 0; i < sizeof junk; i++)
        junk[i] = (uint8_t)rand_r(&seed);
    km_err err = {{0}};
    char msg[2100];
    for (int i = 0; i < k; i++) {
        size_t len = (size_t)rand_r(&seed) % (i % 7 ? 300 : sizeof junk); /* mostly small: many heads per read */
        if (responses) {
            memset(msg, 'm', sizeof msg);
            msg[len % (sizeof msg - 1)] = 0;
            km_produce_response_partition_produce_response part = {
                .base_offset = i, .log_append_time_ms = -1, .error_message = km_cstr(msg),
                .current_leader = {.leader_id = -1, .leader_epoch = -1}}; /* v9 lacks it: its default */
            km_produce_response_topic_produce_response topic = {.name = km_cstr("dribble")};
            topic.partition_responses.count = 1, topic.partition_responses.items = &part;
            km_produce_response resp;
            km_produce_response_init(&resp);
            resp.responses.count = 1, resp.responses.items = &topic;
            cr_assert_eq(km_frame_response(KM_API_PRODUCE, 9, i, &resp, out, &err), 0, "%s", err.msg);
        } else {
            km_produce_request_partition_produce_data part = {.index = 0, .records = {junk, (int32_t)len}};
            km_produce_request_topic_produce_data topic = {.name = km_cstr("dribble")};
            topic.partition_data.count = 1, topic.partition_data.items = &part;
            km_produce_request req;
            km_produce_request_init(&req);
            req.acks = 1, req.timeout_ms = 30000;
            req.topic_data.count = 1, req.topic_data.items = &topic;
            cr_assert_eq(km_frame_request(KM_API_PRODUCE, 9, i, "dribble", &req, out, &err), 0, "%s", err.msg);
        }
    }
}

/* Sends `sent` on `from` in pieces cut inside frame heads of `head` bytes; checks that `to`
 * receives exactly those bytes. */
static void dribble_through(int from, int to, const km_buf *sent, size_t head, unsigned seed, const char *way)
{
    dribble d = {from, sent->data, sent->len, head, seed};
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, dribble_out, &d), 0);
    uint8_t *got = malloc(sent->len);
    bool ok = read_exactly(to, got, sent->len);
    void *why;
    pthread_join(th, &why);
    cr_assert_null(why, "%s: %s", way, (char *)why);
    cr_assert(ok, "%s: the stream ended early", way);
    for (size_t i = 0; i < sent->len; i++)
        cr_assert_eq(got[i], sent->data[i], "%s: byte %zu of %zu differs (seed %u)", way, i, sent->len, seed);
    free(got);
}

Test(inline_edge, frames_cut_inside_their_heads_pass_byte_for_byte)
{
    irig r;
    int lfd;
    start_scripted(&r, &lfd);
    irig_start(&r);
    int fd = irig_connect(irig_port(&r, -1));
    int up = irig_accept(lfd);
    enum { FRAMES = 400 };
    for (unsigned seed = 1; seed <= 3; seed++) {
        km_buf requests, responses;
        km_buf_init(&requests), km_buf_init(&responses);
        produce_stream(&requests, FRAMES, false, seed);
        produce_stream(&responses, FRAMES, true, seed);
        dribble_through(fd, up, &requests, 4 + 1024, seed, "client to broker"); /* INL_REQ_PREFIX_FIRST */
        dribble_through(up, fd, &responses, 8, seed, "broker to client");       /* size, correlation id */
        km_buf_free(&requests), km_buf_free(&responses);
    }
    close(fd), close(up), close(lfd);
    km_inline_stats st;
    irig_stop(&r, &st);
    cr_assert_eq(st.requests, 3 * FRAMES);
    cr_assert_eq(st.responses, 3 * FRAMES);
    cr_assert_eq(st.cut, 0);
    irig_free(&r);
}

/* ---- back-pressure and many clients ------------------------------------------------------------- */

/* A client that pipelines thousands of requests and reads nothing: the proxy stops reading its
 * broker at proxy.connection.buffer.bytes, others are served meanwhile, and once the client
 * reads, every response arrives in order. */
Test(inline_edge, a_client_that_never_reads_is_held_within_its_bound)
{
    irig r;
    irig_init(&r);
    irig_mock(&r, 3, "wide", 60);
    irig_dynamic(&r);
    irig_set(&r, "proxy.connection.buffer.bytes", "65536");
    irig_start(&r);
    int fd = irig_connect(irig_port(&r, -1));
    enum { N = 8000 };
    km_buf all;
    km_buf_init(&all);
    km_err err = {{0}};
    for (int i = 0; i < N; i++) {
        km_metadata_request mq;
        km_metadata_request_init(&mq);
        mq.topics.count = -1; /* every topic */
        cr_assert_eq(km_frame_request(KM_API_METADATA, 1, i, "stuck", &mq, &all, &err), 0, "%s", err.msg);
    }
    cr_assert(irig_send_all(fd, all.data, all.len));
    km_buf_free(&all);
    others_still_served(&r);
    others_still_served(&r);
    size_t total = 0;
    for (int i = 0; i < N; i++) {
        km_arena a;
        km_arena_init(&a, 1 << 20);
        km_metadata_response mr;
        read_response(fd, KM_API_METADATA, 1, i, &mr, &a);
        cr_assert_eq(mr.topics.count, 1, "response %d: %d topics", i, mr.topics.count);
        total += 1;
        km_arena_free(&a);
    }
    close(fd);
    km_inline_stats st;
    irig_stop(&r, &st);
    cr_expect_eq(total, N);
    cr_expect_gt(st.bytes_down, 4u << 20, "the responses (%llu bytes) should outgrow the socket buffers",
                 (unsigned long long)st.bytes_down);
    cr_expect_lt(st.buffered_high_water, 4 * 65536, "held %llu bytes for one client",
                 (unsigned long long)st.buffered_high_water);
    irig_free(&r);
}

Test(inline_edge, a_thousand_idle_connections)
{
    irig r;
    start_over_mock(&r);
    irig_set(&r, "proxy.max.connections.per.ip", "2000"); /* all from 127.0.0.1, past the default 1000 */
    irig_start(&r);
    enum { N = 1000 };
    int *fds = malloc(N * sizeof *fds);
    for (int i = 0; i < N; i++)
        fds[i] = irig_connect(irig_port(&r, -1));
    others_still_served(&r);
    km_api_versions_request av; /* the last of them is served too */
    km_api_versions_request_init(&av);
    send_request(fds[N - 1], KM_API_API_VERSIONS, 0, 1, &av);
    km_arena a;
    km_arena_init(&a, 1 << 20);
    km_api_versions_response avr;
    read_response(fds[N - 1], KM_API_API_VERSIONS, 0, 1, &avr, &a);
    km_arena_free(&a);
    for (int i = 0; i < N; i++)
        close(fds[i]);
    free(fds);
    km_inline_stats st;
    irig_stop(&r, &st);
    cr_expect_geq(st.accepted, N);
    cr_expect_eq(st.cut, 0);
    irig_free(&r);
}

/* ---- a 64 MiB Fetch response ------------------------------------------------------------------ */

enum { BIG_RECORDS = (64 << 20) + 12345 };

typedef struct big_upstream {
    int up;
    bool ok;
} big_upstream;

static const km_struct_desc *sub_of(const km_struct_desc *sd, const char *field)
{
    for (uint16_t i = 0; i < sd->nfields; i++)
        if (!strcmp(sd->fields[i].name, field))
            return sd->fields[i].sub;
    return NULL;
}

/* The scripted broker answers one Fetch v4 with 64 MiB of records, from its own thread, since
 * the proxy makes it wait while the client reads. */
static void *serve_big_fetch(void *arg)
{
    big_upstream *b = arg;
    uint8_t *p;
    size_t len;
    if (!irig_read_frame(b->up, &p, &len))
        return NULL;
    free(p);
    uint8_t *records = malloc(BIG_RECORDS);
    for (size_t i = 0; i < BIG_RECORDS; i++)
        records[i] = (uint8_t)(i * 7 + i / 4096);
    km_fetch_response f;
    km_fetch_response_init(&f);
    km_fetch_response_able_topic_response t;
    memset(&t, 0, sizeof t);
    km_fetch_response_partition_data part;
    km_init(sub_of(sub_of(km_fetch_response_desc.root, "Responses"), "Partitions"), &part);
    part.records = (km_bytes){records, BIG_RECORDS};
    t.topic = km_cstr("big");
    t.partitions.count = 1, t.partitions.items = &part;
    f.responses.count = 1, f.responses.items = &t;
    km_buf out;
    km_buf_init(&out);
    km_err err = {{0}};
    b->ok = !km_frame_response(KM_API_FETCH, 4, 42, &f, &out, &err) && irig_send_all(b->up, out.data, out.len);
    km_buf_free(&out);
    free(records);
    return NULL;
}

Test(inline_edge, a_64mb_fetch_response_streams_with_bounded_buffers)
{
    irig r;
    int lfd;
    start_scripted(&r, &lfd);
    irig_start(&r);
    int fd = irig_connect(irig_port(&r, -1));
    big_upstream b = {.up = irig_accept(lfd)};
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, serve_big_fetch, &b), 0);
    km_fetch_request fq;
    km_fetch_request_init(&fq);
    fq.max_bytes = INT32_MAX;
    send_request(fd, KM_API_FETCH, 4, 42, &fq);
    km_arena a;
    km_arena_init(&a, 256u << 20);
    km_fetch_response fr;
    read_response(fd, KM_API_FETCH, 4, 42, &fr, &a);
    pthread_join(th, NULL);
    cr_assert(b.ok, "the scripted broker could not send its answer");
    cr_assert_eq(fr.responses.count, 1);
    km_bytes rec = fr.responses.items[0].partitions.items[0].records;
    cr_assert_eq(rec.len, BIG_RECORDS);
    for (size_t i = 0; i < BIG_RECORDS; i++)
        if (rec.ptr[i] != (uint8_t)(i * 7 + i / 4096))
            cr_assert_fail("records differ at byte %zu", i);
    km_arena_free(&a);
    close(fd), close(b.up), close(lfd);
    km_inline_stats st;
    irig_stop(&r, &st);
    cr_expect_geq(st.largest_frame, 64u << 20);
    cr_expect_lt(st.buffered_high_water, 512u << 10, "held %llu bytes at once",
                 (unsigned long long)st.buffered_high_water);
    fprintf(stderr, "64 MiB fetch: frame of %llu bytes, at most %llu bytes held\n",
            (unsigned long long)st.largest_frame, (unsigned long long)st.buffered_high_water);
    irig_free(&r);
}

/* A broker registered in the KRaft log (what the daemon reports) gets its listener at once:
 * clients can reach it before any Metadata response has named it. */
Test(inline_edge, a_registered_broker_gets_its_listener_before_any_metadata)
{
    irig r;
    int lfd;
    start_scripted(&r, &lfd);
    irig_start(&r);
    uint16_t p7;
    int l7 = irig_listen(&p7);
    irig_stop(&r, NULL);
    km_inline_broker_registered(r.proxy, 7, "127.0.0.1", p7);
    irig_resume(&r);
    int c7 = irig_connect((uint16_t)(r.cfg.port_base + 7)), u7 = irig_accept(l7);
    api_versions_reaches(c7, u7, 1);
    close(c7), close(u7), close(l7), close(lfd);
    irig_free(&r);
}

/* Fetch v16+ and Produce v10+ answers can carry leader endpoints (KIP-951): ApiVersions offers
 * the versions before them, so no upstream address can reach a client that way. */
Test(inline_edge, api_versions_stop_before_responses_that_carry_endpoints)
{
    irig r;
    int lfd;
    start_scripted(&r, &lfd);
    irig_start(&r);
    int fd = irig_connect(irig_port(&r, -1)), up = irig_accept(lfd);
    km_api_versions_request av;
    km_api_versions_request_init(&av);
    av.client_software_name = km_cstr("t"), av.client_software_version = km_cstr("1");
    send_request(fd, KM_API_API_VERSIONS, 3, 1, &av);
    expect_request(up, KM_API_API_VERSIONS, 3, 1);
    km_api_versions_response resp;
    km_api_versions_response_init(&resp);
    km_api_versions_response_api_version keys[4] = {{.api_key = KM_API_PRODUCE, .max_version = 11},
                                                    {.api_key = KM_API_FETCH, .min_version = 4, .max_version = 17},
                                                    {.api_key = KM_API_METADATA, .max_version = 12},
                                                    {.api_key = KM_API_SHARE_FETCH, .max_version = 0}};
    resp.api_keys.count = 4, resp.api_keys.items = keys;
    send_response(up, KM_API_API_VERSIONS, 3, 1, &resp);
    km_arena a;
    km_arena_init(&a, 1 << 20);
    km_api_versions_response got;
    read_response(fd, KM_API_API_VERSIONS, 3, 1, &got, &a);
    cr_assert_eq(got.api_keys.count, 3, "ShareFetch is no longer offered");
    cr_expect_eq(got.api_keys.items[0].max_version, 9);
    cr_expect_eq(got.api_keys.items[1].max_version, 15);
    cr_expect_eq(got.api_keys.items[1].min_version, 4);
    cr_expect_eq(got.api_keys.items[2].max_version, 12, "other APIs as the broker said");
    km_arena_free(&a);
    close(fd), close(up), close(lfd);
    irig_free(&r);
}

/* A newer broker (Kafka 4.x) offers Metadata v13 and DescribeCluster v2, and a future one more:
 * every API whose answers carry broker addresses is offered up to the version the rewriter
 * rewrites (the codec's newest), never past it, or its answer would pass with upstream addresses. */
Test(inline_edge, api_versions_cap_address_carrying_apis_at_what_the_rewriter_knows)
{
    irig r;
    int lfd;
    start_scripted(&r, &lfd);
    irig_start(&r);
    int fd = irig_connect(irig_port(&r, -1)), up = irig_accept(lfd);
    km_api_versions_request av;
    km_api_versions_request_init(&av);
    send_request(fd, KM_API_API_VERSIONS, 2, 1, &av);
    expect_request(up, KM_API_API_VERSIONS, 2, 1);
    km_api_versions_response resp;
    km_api_versions_response_init(&resp);
    km_api_versions_response_api_version keys[4] = {{.api_key = KM_API_METADATA, .max_version = 14},
                                                    {.api_key = KM_API_FIND_COORDINATOR, .max_version = 9},
                                                    {.api_key = KM_API_DESCRIBE_CLUSTER, .max_version = 3},
                                                    {.api_key = KM_API_DESCRIBE_GROUPS, .max_version = 99}};
    resp.api_keys.count = 4, resp.api_keys.items = keys;
    send_response(up, KM_API_API_VERSIONS, 2, 1, &resp);
    km_arena a;
    km_arena_init(&a, 1 << 20);
    km_api_versions_response got;
    read_response(fd, KM_API_API_VERSIONS, 2, 1, &got, &a);
    cr_assert_eq(got.api_keys.count, 4);
    static const int16_t want[4] = {13, 6, 2, 99}; /* Kafka 4.x's newest rewritten ones; others as they were */
    for (int i = 0; i < 4; i++)
        cr_expect_eq(got.api_keys.items[i].max_version, want[i], "api %d offered up to v%d", got.api_keys.items[i].api_key,
                     got.api_keys.items[i].max_version);
    km_arena_free(&a);
    close(fd), close(up), close(lfd);
    irig_free(&r);
}

/* A newer broker's tagged fields in a flexible response header (header v1) come back to the client
 * as they were when the body is rewritten, the bytes checked at the frame level. */
Test(inline_edge, unknown_header_tags_of_a_rewritten_response_are_kept)
{
    irig r;
    int lfd;
    start_scripted(&r, &lfd);
    irig_start(&r);
    int base = r.cfg.port_base, fd = irig_connect(irig_port(&r, -1)), up = irig_accept(lfd);
    km_metadata_request mq;
    km_metadata_request_init(&mq);
    send_request(fd, KM_API_METADATA, 12, 5, &mq);
    expect_request(up, KM_API_METADATA, 12, 5);
    km_response_header h;
    km_response_header_init(&h);
    h.correlation_id = 5;
    km_raw_tag tags[2] = {{.tag = 3, .data = {(const uint8_t *)"abc", 3}}, {.tag = 9, .data = {(const uint8_t *)"z", 1}}};
    h.unknown_tags.count = 2, h.unknown_tags.items = tags;
    km_metadata_response m;
    km_metadata_response_init(&m);
    km_metadata_response_response_broker mb[1] = {{.node_id = 2, .host = km_cstr("10.9.9.2"), .port = 9093}};
    m.brokers.count = 1, m.brokers.items = mb;
    km_buf b;
    km_buf_init(&b);
    km_err err = {{0}};
    km_buf_put_i32(&b, 0);
    cr_assert_eq(km_encode(&km_response_header_desc, 1, &h, &b, &err), 0, "%s", err.msg);
    size_t header_len = b.len - 4;
    cr_assert_eq(km_encode(&km_metadata_response_desc, 12, &m, &b, &err), 0, "%s", err.msg);
    km_buf_patch_i32(&b, 0, (int32_t)(b.len - 4));
    uint8_t header[64];
    cr_assert_leq(header_len, sizeof header);
    memcpy(header, b.data + 4, header_len);
    cr_assert(irig_send_all(up, b.data, b.len));
    km_buf_free(&b);
    uint8_t *p;
    size_t len;
    cr_assert(irig_read_frame(fd, &p, &len), "no answer");
    cr_assert_geq(len, header_len);
    cr_expect(!memcmp(p, header, header_len), "the response header changed on the way");
    km_arena a;
    km_arena_init(&a, 1 << 20);
    km_response_header hr;
    km_metadata_response mr;
    cr_assert_eq(km_decode(&km_response_header_desc, 1, p, header_len, &hr, &a, NULL, &err), 0, "%s", err.msg);
    cr_expect_eq(hr.unknown_tags.count, 2);
    cr_assert_eq(km_decode(&km_metadata_response_desc, 12, p + header_len, len - header_len, &mr, &a, NULL, &err), 0,
                 "%s", err.msg);
    cr_assert_eq(mr.brokers.count, 1);
    cr_expect(km_str_eq(mr.brokers.items[0].host, "127.0.0.1"), "the body was rewritten");
    cr_expect_eq(mr.brokers.items[0].port, base + 2);
    free(p);
    km_arena_free(&a);
    close(fd), close(up), close(lfd);
    irig_free(&r);
}

/* A streamed response's top-level error code is counted per broker and API (Heartbeat v1:
 * throttle time, then the error code), with no need to hold the response. */
Test(inline_edge, top_level_errors_are_counted_per_broker_and_api)
{
    irig r;
    int lfd;
    start_scripted(&r, &lfd);
    irig_start(&r);
    int fd = irig_connect(irig_port(&r, -1)), up = irig_accept(lfd);
    km_heartbeat_request hq;
    km_heartbeat_request_init(&hq);
    hq.group_id = km_cstr("g"), hq.member_id = km_cstr("m");
    for (int32_t corr = 1; corr <= 2; corr++) {
        send_request(fd, KM_API_HEARTBEAT, 1, corr, &hq);
        expect_request(up, KM_API_HEARTBEAT, 1, corr);
        km_heartbeat_response hr;
        km_heartbeat_response_init(&hr);
        hr.error_code = corr == 1 ? 27 : 0; /* REBALANCE_IN_PROGRESS, then NONE */
        send_response(up, KM_API_HEARTBEAT, 1, corr, &hr);
        km_arena a;
        km_arena_init(&a, 1 << 20);
        km_heartbeat_response got;
        read_response(fd, KM_API_HEARTBEAT, 1, corr, &got, &a);
        cr_expect_eq(got.error_code, hr.error_code);
        km_arena_free(&a);
    }
    close(fd), close(up), close(lfd);
    irig_stop(&r, NULL);
    km_buf m;
    km_buf_init(&m);
    km_inline_render_metrics(r.proxy, &m);
    km_buf_put(&m, "", 1);
    cr_expect(strstr((char *)m.data, "kmproxy_inline_response_errors_total{broker=\"-1\",api=\"HEARTBEAT\"} 1\n"),
              "%s", (char *)m.data);
    km_buf_free(&m);
    irig_free(&r);
}

/* ---- requests the broker may hold, an unreachable broker (issue 21) ---------------------------- */

/* The upstream gets the request, holds it for hold_ms (past proxy.request.timeout.ms), answers. */
static void held_then_answered(int fd, int up, int16_t api, int16_t ver, int32_t corr, const void *req,
                               const void *resp, int hold_ms)
{
    send_request(fd, api, ver, corr, req);
    expect_request(up, api, ver, corr);
    usleep((useconds_t)hold_ms * 1000);
    send_response(up, api, ver, corr, resp);
    uint8_t *p;
    size_t len;
    cr_assert(irig_read_frame(fd, &p, &len), "%s v%d held %d ms within what it allows was cut", km_api_name(api),
              ver, hold_ms);
    cr_expect_eq((int32_t)km_be32(p), corr);
    free(p);
}

Test(inline_edge, requests_held_within_their_own_allowance_pass)
{
    irig r;
    int lfd;
    start_scripted(&r, &lfd);
    irig_set(&r, "proxy.request.timeout.ms", "300");
    irig_start(&r);
    int fd = irig_connect(irig_port(&r, -1)), up = irig_accept(lfd);

    km_fetch_request fq;
    km_fetch_request_init(&fq);
    fq.max_wait_ms = 1500;
    km_fetch_response fr;
    km_fetch_response_init(&fr);
    held_then_answered(fd, up, KM_API_FETCH, 11, 1, &fq, &fr, 800);
    held_then_answered(fd, up, KM_API_FETCH, 15, 2, &fq, &fr, 800); /* no ReplicaId from v15 */

    km_join_group_request jq;
    km_join_group_request_init(&jq);
    jq.group_id = km_cstr("g"), jq.session_timeout_ms = 200, jq.rebalance_timeout_ms = 1500;
    jq.protocol_type = km_cstr("consumer");
    km_join_group_response jr;
    km_join_group_response_init(&jr);
    held_then_answered(fd, up, KM_API_JOIN_GROUP, 7, 3, &jq, &jr, 800);
    km_sync_group_request sq; /* held until the leader's assignment, up to the rebalance timeout */
    km_sync_group_request_init(&sq);
    sq.group_id = km_cstr("g");
    km_sync_group_response sr;
    km_sync_group_response_init(&sr);
    held_then_answered(fd, up, KM_API_SYNC_GROUP, 5, 4, &sq, &sr, 800);
    jq.session_timeout_ms = 1500; /* v0 has no rebalance timeout: the session timeout stands in */
    held_then_answered(fd, up, KM_API_JOIN_GROUP, 0, 5, &jq, &jr, 800);

    km_produce_request pq;
    km_produce_request_init(&pq);
    pq.acks = -1, pq.timeout_ms = 1500;
    km_produce_response pr;
    km_produce_response_init(&pr);
    held_then_answered(fd, up, KM_API_PRODUCE, 9, 6, &pq, &pr, 800);

    km_create_topics_request cq; /* its timeout comes after the topics: decoded whole */
    km_create_topics_request_init(&cq);
    km_create_topics_request_creatable_topic topic = {.name = km_cstr("t"), .num_partitions = 1,
                                                      .replication_factor = 1};
    cq.topics.count = 1, cq.topics.items = &topic, cq.timeout_ms = 1500;
    km_create_topics_response cr;
    km_create_topics_response_init(&cr);
    held_then_answered(fd, up, KM_API_CREATE_TOPICS, 7, 7, &cq, &cr, 800);

    /* Pipelined behind a held Fetch: a Metadata's time starts when the Fetch is answered, as a
     * broker reads a connection's next request only after answering the one before. */
    send_request(fd, KM_API_FETCH, 11, 8, &fq);
    km_metadata_request mq;
    km_metadata_request_init(&mq);
    send_request(fd, KM_API_METADATA, 4, 9, &mq);
    expect_request(up, KM_API_FETCH, 11, 8);
    expect_request(up, KM_API_METADATA, 4, 9);
    usleep(800 * 1000);
    send_response(up, KM_API_FETCH, 11, 8, &fr);
    usleep(100 * 1000);
    km_metadata_response mr;
    km_metadata_response_init(&mr);
    send_response(up, KM_API_METADATA, 4, 9, &mr);
    for (int32_t corr = 8; corr <= 9; corr++) {
        uint8_t *p;
        size_t len;
        cr_assert(irig_read_frame(fd, &p, &len), "correlation id %d was cut", corr);
        cr_expect_eq((int32_t)km_be32(p), corr);
        free(p);
    }

    /* Past its own allowance plus the proxy's timeout: still cut. */
    fq.max_wait_ms = 400;
    send_request(fd, KM_API_FETCH, 11, 10, &fq);
    expect_request(up, KM_API_FETCH, 11, 10);
    cr_assert(irig_wait_eof(fd), "a Fetch held past its MaxWaitMs + proxy.request.timeout.ms was not cut");
    cr_expect(log_mentions(&r, "FETCH v11 (correlation id 10) within the 400 ms the request allows plus "
                               "proxy.request.timeout.ms=300"), "log: %s", r.last_log);
    close(fd), close(up), close(lfd);
    km_inline_stats st;
    irig_stop(&r, &st);
    cr_expect_eq(st.cut, 1);
    irig_free(&r);
}

/* A listening socket on a given port (the one the proxy's upstream points at). */
static int listen_on(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0, "port %u was taken meanwhile", port);
    cr_assert_eq(listen(fd, 16), 0);
    return fd;
}

Test(inline_edge, a_client_is_held_while_its_broker_is_down_and_served_once_it_is_back)
{
    irig r;
    int lfd;
    start_scripted(&r, &lfd);
    struct sockaddr_in a;
    socklen_t alen = sizeof a;
    cr_assert_eq(getsockname(lfd, (struct sockaddr *)&a, &alen), 0);
    uint16_t port = ntohs(a.sin_port);
    close(lfd); /* the broker is down: connections to it are refused */
    irig_set(&r, "proxy.upstream.hold.ms", "20000");
    irig_start(&r);
    int fd = irig_connect(irig_port(&r, -1));
    km_api_versions_request avq;
    km_api_versions_request_init(&avq);
    send_request(fd, KM_API_API_VERSIONS, 0, 1, &avq);
    usleep(400 * 1000); /* a few refused dials */
    lfd = listen_on(port);
    struct pollfd pl = {.fd = lfd, .events = POLLIN};
    cr_assert_eq(poll(&pl, 1, 20000), 1, "the proxy did not dial the broker again once it was back (log: %s)",
                 r.last_log);
    int up = irig_accept(lfd);
    expect_request(up, KM_API_API_VERSIONS, 0, 1);
    km_api_versions_response avr;
    km_api_versions_response_init(&avr);
    send_response(up, KM_API_API_VERSIONS, 0, 1, &avr);
    uint8_t *p;
    size_t len;
    cr_assert(irig_read_frame(fd, &p, &len), "the held client got no answer once its broker was back");
    cr_expect_eq((int32_t)km_be32(p), 1);
    free(p);
    cr_expect(log_mentions(&r, "holding the client for up to proxy.upstream.hold.ms=20000"), "log: %s", r.last_log);
    close(fd), close(up), close(lfd);
    km_inline_stats st;
    irig_stop(&r, &st);
    cr_expect_eq(st.cut, 0);
    cr_expect_geq(st.upstream_failures, 1);
    irig_free(&r);
}

/* 400 clients of a broker that is down: each is held, each dial failure is counted, and the
 * "holding the client" warning goes through the connection-warning limiter, not once per client. */
#define INL_TEST_LOG_BURST 10 /* inline_loglimit.c's INL_LOG_BURST: lines of one kind per window */
Test(inline_edge, holding_many_clients_logs_a_bounded_number_of_lines)
{
    enum { CLIENTS = 400 };
    irig r;
    int lfd;
    start_scripted(&r, &lfd);
    close(lfd); /* the broker is down */
    irig_set(&r, "proxy.upstream.hold.ms", "60000");
    irig_start(&r);
    static int fds[CLIENTS];
    for (int i = 0; i < CLIENTS; i++)
        fds[i] = irig_connect(irig_port(&r, -1));
    km_inline_stats st = {0};
    /* every client accepted, and as many failed dials (a client's first comes at its accept) */
    for (int tries = 0; tries < 600 && (st.accepted < CLIENTS || st.upstream_failures < CLIENTS); tries++) {
        usleep(50 * 1000);
        irig_stop(&r, &st);
        irig_resume(&r);
    }
    cr_assert_geq(st.upstream_failures, CLIENTS, "only %llu dials failed", (unsigned long long)st.upstream_failures);
    pthread_mutex_lock(&r.log_lock);
    int lines = r.log_lines;
    pthread_mutex_unlock(&r.log_lock);
    cr_expect_leq(lines, INL_TEST_LOG_BURST + 2, "%d lines logged for %d held clients (last: %s)", lines, CLIENTS,
                  r.last_log);
    for (int i = 0; i < CLIENTS; i++)
        close(fds[i]);
    irig_stop(&r, &st);
    irig_free(&r);
}

Test(inline_edge, a_client_held_past_upstream_hold_ms_is_closed)
{
    irig r;
    int lfd;
    start_scripted(&r, &lfd);
    close(lfd); /* and it stays down */
    irig_set(&r, "proxy.upstream.hold.ms", "300");
    irig_start(&r);
    int fd = irig_connect(irig_port(&r, -1));
    cr_assert(irig_wait_eof(fd), "a client whose broker stays down was held forever");
    cr_expect(log_mentions(&r, "within proxy.upstream.hold.ms"), "log: %s", r.last_log);
    close(fd);
    irig_free(&r);
}

/* proxy.threads: the acceptor spreads clients over every worker (the least loaded first), each
 * worker serves its own, and the figures (stats, /metrics) are the sums of the workers'. */
Test(inline_edge, clients_spread_over_the_workers_and_the_figures_add_up)
{
    irig r;
    start_over_mock(&r);
    irig_set(&r, "proxy.threads", "3");
    irig_start(&r);
    cr_assert_eq(km_inline_threads(r.proxy), 3);
    uint16_t port = irig_port(&r, -1);
    enum { CLIENTS = 9 };
    int fds[CLIENTS];
    for (int i = 0; i < CLIENTS; i++) { /* held open: each next one goes to a worker with fewer */
        fds[i] = irig_connect(port);
        api_versions_round_trip(fds[i], i);
    }
    km_inline_stats all, w;
    km_inline_get_stats(r.proxy, &all);
    cr_expect_eq(all.open, CLIENTS);
    uint64_t accepted = 0, requests = 0, bytes = 0;
    for (size_t k = 0; k < 3; k++) {
        km_inline_get_worker_stats(r.proxy, k, &w);
        cr_expect_eq(w.open, CLIENTS / 3, "worker %zu holds %llu clients", k, (unsigned long long)w.open);
        cr_expect_eq(w.requests, CLIENTS / 3, "worker %zu served %llu requests", k, (unsigned long long)w.requests);
        accepted += w.accepted, requests += w.requests, bytes += w.bytes_up + w.bytes_down;
    }
    cr_expect_eq(accepted, all.accepted);
    cr_expect_eq(requests, all.requests);
    cr_expect_eq(bytes, all.bytes_up + all.bytes_down);
    km_buf m;
    km_buf_init(&m);
    km_inline_render_metrics(r.proxy, &m);
    km_buf_put(&m, "", 1);
    char line[96];
    snprintf(line, sizeof line, "kmproxy_inline_requests_total{broker=\"-1\",api=\"API_VERSIONS\"} %d\n", CLIENTS);
    cr_expect(strstr((char *)m.data, line), "metrics lack '%s':\n%s", line, (char *)m.data);
    cr_expect(strstr((char *)m.data, "kmproxy_inline_worker_connections_open{worker=\"2\"} 3\n"), "%s",
              (char *)m.data);
    km_buf_free(&m);
    for (int i = 0; i < CLIENTS; i++)
        close(fds[i]);
    irig_free(&r);
}

/* Shutdown with clients on every worker, some mid-request: each worker ends its own sessions and
 * its thread, every client sees its connection close, and nothing is left (ASan: no leak). */
Test(inline_edge, freeing_the_proxy_ends_every_workers_clients)
{
    irig r;
    start_over_mock(&r);
    irig_set(&r, "proxy.threads", "3");
    irig_start(&r);
    uint16_t port = irig_port(&r, -1);
    enum { CLIENTS = 6 };
    int fds[CLIENTS];
    for (int i = 0; i < CLIENTS; i++) {
        fds[i] = irig_connect(port);
        api_versions_round_trip(fds[i], i);
    }
    uint8_t half[10] = {0, 0, 0, 100, 0, 18, 0, 0, 0, 0}; /* a request's first bytes, the rest never sent */
    cr_assert(irig_send_all(fds[0], half, sizeof half));
    km_inline_stats st;
    km_inline_get_stats(r.proxy, &st);
    cr_expect_eq(st.open, CLIENTS);
    irig_free(&r);
    for (int i = 0; i < CLIENTS; i++) {
        cr_expect(irig_wait_eof(fds[i]), "client %d still connected after the proxy was freed", i);
        close(fds[i]);
    }
}

/* proxy.threads=0: one worker per CPU the process may run on (its affinity), not per CPU online. */
Test(inline_edge, the_default_worker_count_follows_the_cpu_affinity)
{
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(sched_getcpu() >= 0 ? sched_getcpu() : 0, &one);
    cr_assert_eq(sched_setaffinity(0, sizeof one, &one), 0); /* this test's own process only */
    irig r;
    start_over_mock(&r);
    irig_set(&r, "proxy.threads", "0");
    irig_start(&r);
    cr_expect_eq(km_inline_threads(r.proxy), 1);
    irig_free(&r);
}
