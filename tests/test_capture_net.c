/* km_capture fed by a real km_net exchange over loopback, as the inline proxy
 * will do it: endpoints from the accepted fd, frames from on_frame and sends,
 * then tshark decodes the result on the listener's real port. */
#include <criterion/criterion.h>

#include <ev.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "km_capture.h"
#include "km_net.h"
#include "km_testsupport.h"

typedef struct rig {
    struct ev_loop *loop;
    km_capture *cap;
    km_capture_conn *cc;
    km_capture_endpoint client, server;
    km_net_conn *server_conn, *client_conn;
    int responses;
    bool server_closed;
} rig;

static void srv_frame(km_net_conn *c, const uint8_t *p, size_t len, void *ud)
{
    rig *r = ud;
    km_capture_frame(r->cap, r->cc, KM_CAPTURE_C2S, p, len);
    km_reader rd;
    km_reader_init(&rd, p, len);
    km_arena a;
    km_arena_init(&a, 1 << 20);
    km_request_header_view h;
    km_err err = {{0}};
    cr_assert_eq(km_parse_request_header(&rd, &h, &a, &err), 0, "%s", err.msg);
    km_api_versions_response resp;
    km_api_versions_response_init(&resp);
    km_api_versions_response_api_version keys[2] = {{.api_key = 18, .max_version = 3}, {.api_key = 3}};
    resp.api_keys.count = 2;
    resp.api_keys.items = keys;
    km_buf out;
    km_buf_init(&out);
    cr_assert_eq(km_frame_response(h.api_key, h.api_version, h.correlation_id, &resp, &out, &err), 0, "%s", err.msg);
    km_capture_frame(r->cap, r->cc, KM_CAPTURE_S2C, out.data + 4, out.len - 4);
    cr_assert_eq(km_net_send(c, out.data, out.len, &err), 0, "%s", err.msg);
    km_buf_free(&out);
    km_arena_free(&a);
}

static void srv_close(km_net_conn *c, const km_err *why, void *ud)
{
    (void)c;
    rig *r = ud;
    cr_assert_null(why, "%s", why ? why->msg : "");
    km_capture_conn_close(r->cap, r->cc);
    r->server_closed = true;
    ev_break(r->loop, EVBREAK_ALL);
}

static const km_net_handlers srv_h = {.on_frame = srv_frame, .on_close = srv_close};

static void on_accept(km_net_listener *l, int fd, const char *peer, void *ud)
{
    (void)l;
    rig *r = ud;
    km_err err = {{0}};
    cr_assert_eq(km_capture_endpoints_of_fd(fd, false, &r->client, &r->server, &err), 0, "%s", err.msg);
    r->cc = km_capture_conn_open(r->cap, r->client, r->server);
    r->server_conn = km_net_accept(r->loop, fd, peer, NULL, &srv_h, r, &err);
    cr_assert(r->server_conn, "%s", err.msg);
}

static void cli_frame(km_net_conn *c, const uint8_t *p, size_t len, void *ud)
{
    (void)p; (void)len;
    rig *r = ud;
    if (++r->responses == 2) {
        km_net_close(c);
        r->client_conn = NULL;
    }
}

static void cli_close(km_net_conn *c, const km_err *why, void *ud)
{
    (void)c;
    cr_assert_fail("client closed early: %s", why ? why->msg : "by peer");
    (void)ud;
}

static const km_net_handlers cli_h = {.on_frame = cli_frame, .on_close = cli_close};

static void send_api_versions(km_net_conn *c, int16_t ver, int32_t corr)
{
    km_api_versions_request req;
    km_api_versions_request_init(&req);
    req.client_software_name = km_cstr("kmproxy-test");
    req.client_software_version = km_cstr("1.0");
    km_buf b;
    km_buf_init(&b);
    km_err err = {{0}};
    cr_assert_eq(km_frame_request(KM_API_API_VERSIONS, ver, corr, "net-capture", &req, &b, &err), 0, "%s", err.msg);
    cr_assert_eq(km_net_send(c, b.data, b.len, &err), 0, "%s", err.msg);
    km_buf_free(&b);
}

static char *run_tshark(const char *path, uint16_t port, const char *filter, const char *field)
{
    char decode[64];
    snprintf(decode, sizeof decode, "tcp.port==%u,kafka", port);
    const char *argv[] = {"/usr/bin/tshark", "-n", "-r", path, "-d", decode, "-Y", filter, "-T", "fields",
                          "-e", field, NULL};
    char *out = NULL;
    cr_assert_eq(km_test_run((char *const *)argv, NULL, 0, &out, NULL, NULL), 0);
    return out;
}

Test(capture_net, live_km_net_exchange_decodes_in_tshark)
{
    char *dir = km_test_tmpdir("capnet");
    char path[512], jsonl[512];
    snprintf(path, sizeof path, "%s/live.pcapng", dir);
    snprintf(jsonl, sizeof jsonl, "%s/live.jsonl", dir);
    rig r = {.loop = ev_loop_new(EVFLAG_AUTO)};
    km_err err = {{0}};
    km_capture_opts o = {.pcapng_path = path, .jsonl_path = jsonl};
    r.cap = km_capture_open(&o, &err);
    cr_assert(r.cap, "%s", err.msg);
    km_net_listener *l = km_net_listen(r.loop, "127.0.0.1", 0, on_accept, &r, &err);
    cr_assert(l, "%s", err.msg);
    uint16_t port = km_net_listener_port(l);
    r.client_conn = km_net_connect(r.loop, "127.0.0.1", port, NULL, &cli_h, &r, &err);
    cr_assert(r.client_conn, "%s", err.msg);
    send_api_versions(r.client_conn, 3, 11);
    send_api_versions(r.client_conn, 2, 12);
    ev_run(r.loop, 0);
    cr_assert(r.server_closed);
    cr_assert_eq(r.server.port, port);
    cr_assert_eq(r.client.ip, 0x7f000001u);
    km_net_listener_free(l);
    cr_assert_eq(km_capture_close(r.cap, &err), 0, "%s", err.msg);
    ev_loop_destroy(r.loop);

    char *bad = run_tshark(path, port, "_ws.malformed || _ws.expert.severity >= warning", "frame.number");
    cr_assert_str_empty(bad, "%s", bad);
    free(bad);
    char *corr = run_tshark(path, port, "kafka", "kafka.correlation_id");
    cr_assert_str_eq(corr, "11\n11\n12\n12\n", "%s", corr); /* each request, then its answer */
    free(corr);
    char *sport = run_tshark(path, port, "kafka.request_key", "tcp.srcport");
    char want[16];
    snprintf(want, sizeof want, "%u\n", r.client.port);
    cr_assert(strncmp(sport, want, strlen(want)) == 0, "the client's real port: %s vs %s", sport, want);
    free(sport);
    km_test_rmtree(dir);
    free(dir);
}

/* The same exchange captured by km_net's own tap on the client connection,
 * switched on before the connect completes. */
Test(capture_net, km_net_capture_tap_on_a_dialled_connection)
{
    char *dir = km_test_tmpdir("captap");
    char path[512];
    snprintf(path, sizeof path, "%s/tap.pcapng", dir);
    rig r = {.loop = ev_loop_new(EVFLAG_AUTO)}; /* r.cap stays NULL: the server captures nothing */
    km_err err = {{0}};
    km_capture_opts o = {.pcapng_path = path};
    km_capture *tap = km_capture_open(&o, &err);
    cr_assert(tap, "%s", err.msg);
    km_net_listener *l = km_net_listen(r.loop, "127.0.0.1", 0, on_accept, &r, &err);
    cr_assert(l, "%s", err.msg);
    uint16_t port = km_net_listener_port(l);
    r.client_conn = km_net_connect(r.loop, "127.0.0.1", port, NULL, &cli_h, &r, &err);
    cr_assert(r.client_conn, "%s", err.msg);
    km_net_capture(r.client_conn, tap);
    send_api_versions(r.client_conn, 3, 21); /* queued before connected */
    send_api_versions(r.client_conn, 1, 22);
    ev_run(r.loop, 0);
    cr_assert(r.server_closed);
    km_net_listener_free(l);
    km_capture_stats st;
    km_capture_get_stats(tap, &st);
    cr_assert_eq(st.frames, 4);
    cr_assert_eq(km_capture_close(tap, &err), 0, "%s", err.msg);
    ev_loop_destroy(r.loop);

    char *bad = run_tshark(path, port, "_ws.malformed || _ws.expert.severity >= warning", "frame.number");
    cr_assert_str_empty(bad, "%s", bad);
    free(bad);
    char *corr = run_tshark(path, port, "kafka", "kafka.correlation_id");
    cr_assert_str_eq(corr, "21\n22\n21\n22\n", "both requests were queued before the first answer: %s", corr);
    free(corr);
    char *fin = run_tshark(path, port, "tcp.flags.fin == 1", "frame.number");
    cr_assert_neq(fin[0], '\0', "the tap closes the stream when the connection closes");
    free(fin);
    km_test_rmtree(dir);
    free(dir);
}

/* IPv6 peers have no place in an IPv4 capture; they map into 127.255.0.0/16
 * and still make a decodable stream. */
Test(capture_net, ipv6_connection_maps_into_an_ipv4_capture)
{
    char *dir = km_test_tmpdir("cap6");
    char path[512];
    snprintf(path, sizeof path, "%s/v6.pcapng", dir);
    rig r = {.loop = ev_loop_new(EVFLAG_AUTO)};
    km_err err = {{0}};
    km_capture_opts o = {.pcapng_path = path};
    r.cap = km_capture_open(&o, &err);
    cr_assert(r.cap, "%s", err.msg);
    km_net_listener *l = km_net_listen(r.loop, "::1", 0, on_accept, &r, &err);
    if (!l)
        cr_skip_test("no IPv6 loopback: %s", err.msg);
    uint16_t port = km_net_listener_port(l);
    r.client_conn = km_net_connect(r.loop, "::1", port, NULL, &cli_h, &r, &err);
    cr_assert(r.client_conn, "%s", err.msg);
    char want[32];
    snprintf(want, sizeof want, "[::1]:%u", port);
    cr_assert_str_eq(km_net_peer(r.client_conn), want);
    send_api_versions(r.client_conn, 3, 31);
    send_api_versions(r.client_conn, 3, 32);
    ev_run(r.loop, 0);
    cr_assert(r.server_closed);
    cr_assert_eq(r.client.ip >> 16, 0x7fffu, "mapped client address %08x", r.client.ip);
    cr_assert_eq(r.server.ip, r.client.ip, "the same IPv6 address maps to the same IPv4 one");
    cr_assert_eq(r.server.port, port);
    km_net_listener_free(l);
    cr_assert_eq(km_capture_close(r.cap, &err), 0, "%s", err.msg);
    ev_loop_destroy(r.loop);
    char *corr = run_tshark(path, port, "kafka", "kafka.correlation_id");
    cr_assert_str_eq(corr, "31\n31\n32\n32\n", "%s", corr);
    free(corr);
    km_test_rmtree(dir);
    free(dir);
}
