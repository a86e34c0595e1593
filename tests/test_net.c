/* km_net over real loopback sockets: framed echo (plain and TLS), frame limits,
 * peers that vanish mid-frame, refused and stalled connects, back-pressure, pause. */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <ev.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "km_net.h"
#include "test_tls_certs.h"

#define MAX_FRAMES 16

typedef struct end {
    km_net_conn *conn;
    int frames;
    size_t sizes[MAX_FRAMES];
    uint8_t *data[MAX_FRAMES];  /* copies of what arrived */
    bool ready, closed, clean;
    km_err why;
    int drains;
} end;

typedef struct world {
    struct ev_loop *loop;
    ev_timer guard;
    ev_timer resume;            /* un-pauses the server */
    int frames_at_resume;
    km_net_listener *lis;
    km_net_opts server_opts;
    end server, client;
    bool echo;                  /* server sends every frame back */
    int pause_after;            /* server pauses after this many frames (0: never) */
    bool close_in_frame;        /* server closes from inside its first on_frame */
    int raw_accepted_fd;        /* with raw_accept: the fd, never wrapped */
    bool raw_accept;
    int want_client_frames;
    const km_net_handlers *server_h; /* NULL: server_handlers */
    size_t stream_calls, stream_bytes, stream_largest; /* stream-mode server: on_bytes */
    int seq_next, seq_bad;      /* numbered frames (seq_frame): the next expected, those out of place */
} world;

static void guard_fired(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop; (void)w; (void)revents;
    cr_assert_fail("event loop guard: the test made no progress");
}

static void world_init(world *w)
{
    memset(w, 0, sizeof *w);
    signal(SIGPIPE, SIG_IGN); /* belt and braces: km_net must not need it */
    w->loop = ev_loop_new(EVFLAG_AUTO);
    w->raw_accepted_fd = -1;
    ev_timer_init(&w->guard, guard_fired, 30., 0.);
    ev_timer_start(w->loop, &w->guard);
}

static void end_free(end *e)
{
    for (int i = 0; i < e->frames && i < MAX_FRAMES; i++)
        free(e->data[i]);
}

static void world_free(world *w)
{
    if (w->server.conn && !w->server.closed)
        km_net_close(w->server.conn);
    if (w->client.conn && !w->client.closed)
        km_net_close(w->client.conn);
    km_net_listener_free(w->lis);
    if (w->raw_accepted_fd >= 0)
        close(w->raw_accepted_fd);
    end_free(&w->server);
    end_free(&w->client);
    ev_loop_destroy(w->loop);
}

static void record(end *e, const uint8_t *p, size_t len)
{
    if (e->frames < MAX_FRAMES) {
        e->sizes[e->frames] = len;
        e->data[e->frames] = malloc(len ? len : 1);
        memcpy(e->data[e->frames], p, len);
    }
    e->frames++;
}

static void resume_soon(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)loop; (void)revents;
    world *w = t->data;
    w->frames_at_resume = w->server.frames;
    km_net_pause(w->server.conn, false);
}

static void server_frame(km_net_conn *c, const uint8_t *p, size_t len, void *ud)
{
    world *w = ud;
    record(&w->server, p, len);
    if (w->close_in_frame) {
        km_net_close(c);
        w->server.closed = true; /* closed by us: no on_close will come */
        ev_break(w->loop, EVBREAK_ALL);
        return;
    }
    if (w->echo) {
        km_err err = {{0}};
        cr_assert_eq(km_net_send_frame(c, p, len, &err), 0, "%s", err.msg);
    }
    if (w->pause_after && w->server.frames == w->pause_after) {
        km_net_pause(c, true);
        ev_timer_init(&w->resume, resume_soon, 0.01, 0.);
        w->resume.data = w;
        ev_timer_start(w->loop, &w->resume);
    }
}

static void on_close_common(end *e, const km_err *why)
{
    e->closed = true;
    e->clean = why == NULL;
    if (why)
        e->why = *why;
}

static void server_close(km_net_conn *c, const km_err *why, void *ud)
{
    (void)c;
    world *w = ud;
    on_close_common(&w->server, why);
    ev_break(w->loop, EVBREAK_ALL);
}

static void server_ready(km_net_conn *c, void *ud) { (void)c; ((world *)ud)->server.ready = true; }

static const km_net_handlers server_handlers = {
    .on_ready = server_ready, .on_frame = server_frame, .on_close = server_close};

static void accepted(km_net_listener *l, int fd, const char *peer, void *ud)
{
    (void)l;
    world *w = ud;
    if (w->raw_accept) {
        w->raw_accepted_fd = fd;
        return;
    }
    km_err err = {{0}};
    const km_net_handlers *h = w->server_h ? w->server_h : &server_handlers;
    w->server.conn = km_net_accept(w->loop, fd, peer, &w->server_opts, h, w, &err);
    cr_assert(w->server.conn, "%s", err.msg);
    cr_assert(strncmp(peer, "127.0.0.1:", 10) == 0, "%s", peer);
}

static void client_ready(km_net_conn *c, void *ud) { (void)c; ((world *)ud)->client.ready = true; }

static void client_frame(km_net_conn *c, const uint8_t *p, size_t len, void *ud)
{
    (void)c;
    world *w = ud;
    record(&w->client, p, len);
    if (w->client.frames == w->want_client_frames)
        ev_break(w->loop, EVBREAK_ALL);
}

static void client_drain(km_net_conn *c, void *ud) { (void)c; ((world *)ud)->client.drains++; }

static void client_close(km_net_conn *c, const km_err *why, void *ud)
{
    (void)c;
    world *w = ud;
    on_close_common(&w->client, why);
    ev_break(w->loop, EVBREAK_ALL);
}

static const km_net_handlers client_handlers = {
    .on_ready = client_ready, .on_frame = client_frame, .on_drain = client_drain, .on_close = client_close};

static uint16_t start_server(world *w)
{
    km_err err = {{0}};
    w->lis = km_net_listen(w->loop, "127.0.0.1", 0, accepted, w, &err);
    cr_assert(w->lis, "%s", err.msg);
    cr_assert_neq(km_net_listener_port(w->lis), 0);
    return km_net_listener_port(w->lis);
}

static void connect_client(world *w, uint16_t port, const km_net_opts *opts)
{
    km_err err = {{0}};
    w->client.conn = km_net_connect(w->loop, "127.0.0.1", port, opts, &client_handlers, w, &err);
    cr_assert(w->client.conn, "%s", err.msg);
}

/* A plain blocking socket for peers that misbehave on purpose. */
static int raw_client(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    return fd;
}

static uint8_t *pattern(size_t len, unsigned seed)
{
    uint8_t *p = malloc(len ? len : 1);
    for (size_t i = 0; i < len; i++)
        p[i] = (uint8_t)(i * 31 + seed);
    return p;
}

/* A throwaway PKI, a server context with its certificate and a client context trusting its CA. */
typedef struct tls_pair {
    km_test_pki pki;
    km_tls_ctx *server, *client;
} tls_pair;

static void tls_pair_make(tls_pair *t)
{
    cr_assert_eq(km_test_pki_make(&t->pki), 0);
    km_err err = {{0}};
    km_tls_config scfg = {.cert_file = t->pki.server_cert, .key_file = t->pki.server_key};
    km_tls_config ccfg = {.ca_file = t->pki.ca};
    t->server = km_tls_server_ctx_new(&scfg, &err);
    t->client = t->server ? km_tls_client_ctx_new(&ccfg, &err) : NULL;
    cr_assert(t->server && t->client, "%s", err.msg);
}

static void tls_pair_free(tls_pair *t)
{
    km_tls_ctx_free(t->server);
    km_tls_ctx_free(t->client);
    km_test_pki_free(&t->pki);
}

static void echo_round_trip(world *w, uint16_t port, const km_net_opts *copts)
{
    w->echo = true;
    connect_client(w, port, copts);
    const size_t sizes[] = {0, 1, 1000, 3u << 20, 77};
    const int n = (int)(sizeof sizes / sizeof sizes[0]);
    uint8_t *sent[5];
    km_err err = {{0}};
    for (int i = 0; i < n; i++) { /* queued before the connect completes: flushed on ready */
        sent[i] = pattern(sizes[i], (unsigned)i);
        cr_assert_eq(km_net_send_frame(w->client.conn, sent[i], sizes[i], &err), 0, "%s", err.msg);
    }
    w->want_client_frames = n;
    ev_run(w->loop, 0);
    cr_assert(w->client.ready);
    cr_assert_eq(w->client.frames, n, "client got %d frames; close: %s", w->client.frames, w->client.why.msg);
    for (int i = 0; i < n; i++) {
        cr_assert_eq(w->client.sizes[i], sizes[i]);
        cr_assert_arr_eq(w->client.data[i], sent[i], sizes[i]);
        free(sent[i]);
    }
    km_net_close(w->client.conn);
    w->client.closed = true;
    ev_run(w->loop, 0); /* until the server sees the close */
    cr_assert(w->server.closed && w->server.clean, "server: %s", w->server.why.msg);
}

Test(net, framed_echo_over_loopback)
{
    world w;
    world_init(&w);
    uint16_t port = start_server(&w);
    echo_round_trip(&w, port, NULL);
    cr_assert_eq(w.server.frames, 5);
    world_free(&w);
}

Test(net, framed_echo_over_tls)
{
    tls_pair t;
    tls_pair_make(&t);
    km_tls_ctx *sctx = t.server, *cctx = t.client;
    world w;
    world_init(&w);
    w.server_opts.tls = sctx;
    uint16_t port = start_server(&w);
    km_net_opts copts = {.tls = cctx, .tls_name = "localhost"};
    echo_round_trip(&w, port, &copts);
    world_free(&w);
    tls_pair_free(&t);
}

Test(net, tls_name_mismatch_reaches_on_close)
{
    km_test_pki pki;
    cr_assert_eq(km_test_pki_make(&pki), 0);
    km_err err = {{0}};
    km_tls_config scfg = {.cert_file = pki.server_cert, .key_file = pki.server_key};
    km_tls_config ccfg = {.ca_file = pki.ca};
    km_tls_ctx *sctx = km_tls_server_ctx_new(&scfg, &err), *cctx = km_tls_client_ctx_new(&ccfg, &err);
    world w;
    world_init(&w);
    w.server_opts.tls = sctx;
    uint16_t port = start_server(&w);
    km_net_opts copts = {.tls = cctx, .tls_name = "kafka-9.example"};
    connect_client(&w, port, &copts);
    while (!w.client.closed)
        ev_run(w.loop, EVRUN_ONCE);
    cr_assert_not(w.client.ready);
    cr_assert(strstr(w.client.why.msg, "kafka-9.example") && strstr(w.client.why.msg, "hostname mismatch"),
              "%s", w.client.why.msg);
    world_free(&w);
    km_tls_ctx_free(sctx);
    km_tls_ctx_free(cctx);
    km_test_pki_free(&pki);
}

static void expect_server_error(uint16_t port, world *w, const void *bytes, size_t len, bool close_after)
{
    int fd = raw_client(port);
    cr_assert_eq(write(fd, bytes, len), (ssize_t)len);
    if (close_after)
        close(fd);
    while (!w->server.closed)
        ev_run(w->loop, EVRUN_ONCE);
    if (!close_after)
        close(fd);
}

Test(net, oversized_frame_is_refused_with_the_limit_named)
{
    world w;
    world_init(&w);
    w.server_opts.max_frame = 1024;
    uint16_t port = start_server(&w);
    uint8_t frame[4 + 8] = {0, 0, 4, 1}; /* 1025 bytes announced */
    expect_server_error(port, &w, frame, sizeof frame, false);
    cr_assert_not(w.server.clean);
    cr_assert(strstr(w.server.why.msg, "size 1025 exceeds the 1024 byte frame limit"), "%s", w.server.why.msg);
    cr_assert(strstr(w.server.why.msg, "127.0.0.1:"), "%s", w.server.why.msg);
    cr_assert_eq(w.server.frames, 0);
    world_free(&w);
}

Test(net, default_limit_is_100_mib_and_negative_sizes_fail)
{
    world w;
    world_init(&w);
    uint16_t port = start_server(&w);
    uint8_t frame[8] = {0xff, 0xff, 0xff, 0xfe, 1, 2, 3, 4};
    expect_server_error(port, &w, frame, sizeof frame, false);
    cr_assert(strstr(w.server.why.msg, "size -2 is negative"), "%s", w.server.why.msg);
    world_free(&w);

    world_init(&w);
    port = start_server(&w);
    uint8_t big[4] = {0x06, 0x40, 0x00, 0x01}; /* 100 MiB + 1 */
    expect_server_error(port, &w, big, sizeof big, false);
    cr_assert(strstr(w.server.why.msg, "size 104857601 exceeds the 104857600 byte frame limit"), "%s",
              w.server.why.msg);
    world_free(&w);
}

Test(net, peer_disconnecting_mid_frame_is_an_error)
{
    world w;
    world_init(&w);
    uint16_t port = start_server(&w);
    uint8_t frame[4 + 3 + 4 + 10] = {0, 0, 0, 3, 'a', 'b', 'c', 0, 0, 0, 100};
    expect_server_error(port, &w, frame, sizeof frame, true);
    cr_assert_eq(w.server.frames, 1, "the complete frame before the cut still arrives");
    cr_assert(strstr(w.server.why.msg, "closed the connection mid-frame: 10 of 100 payload bytes received"), "%s",
              w.server.why.msg);
    cr_assert(strstr(w.server.why.msg, "stream byte 7"), "%s", w.server.why.msg);
    world_free(&w);
}

Test(net, peer_disconnecting_inside_size_prefix)
{
    world w;
    world_init(&w);
    uint16_t port = start_server(&w);
    uint8_t frame[2] = {0, 0};
    expect_server_error(port, &w, frame, sizeof frame, true);
    cr_assert(strstr(w.server.why.msg, "inside a frame's size prefix (2 of 4 bytes"), "%s", w.server.why.msg);
    world_free(&w);
}

Test(net, refused_connect_is_reported_through_on_close)
{
    world w;
    world_init(&w);
    uint16_t port = start_server(&w);
    km_net_listener_free(w.lis); /* nobody listens there any more */
    w.lis = NULL;
    connect_client(&w, port, NULL);
    ev_run(w.loop, 0);
    cr_assert(w.client.closed && !w.client.ready);
    cr_assert(strstr(w.client.why.msg, "connect to 127.0.0.1:") && strstr(w.client.why.msg, "Connection refused"),
              "%s", w.client.why.msg);
    world_free(&w);
}

Test(net, stalled_tls_handshake_times_out)
{
    km_test_pki pki;
    cr_assert_eq(km_test_pki_make(&pki), 0);
    km_err err = {{0}};
    km_tls_config ccfg = {.ca_file = pki.ca};
    km_tls_ctx *cctx = km_tls_client_ctx_new(&ccfg, &err);
    world w;
    world_init(&w);
    w.raw_accept = true; /* accepts, then never answers the ClientHello */
    uint16_t port = start_server(&w);
    km_net_opts copts = {.tls = cctx, .tls_name = "localhost", .connect_timeout = 0.2};
    connect_client(&w, port, &copts);
    ev_run(w.loop, 0);
    cr_assert(w.client.closed);
    cr_assert(strstr(w.client.why.msg, "TLS handshake with 127.0.0.1:") && strstr(w.client.why.msg, "timed out"),
              "%s", w.client.why.msg);
    world_free(&w);
    km_tls_ctx_free(cctx);
    km_test_pki_free(&pki);
}

Test(net, write_queue_is_bounded_and_drains)
{
    world w;
    world_init(&w);
    uint16_t port = start_server(&w);
    w.echo = true;
    km_net_opts copts = {.write_limit = 1000};
    connect_client(&w, port, &copts);
    uint8_t buf[600] = {0};
    km_err err = {{0}};
    cr_assert_eq(km_net_send_frame(w.client.conn, buf, sizeof buf, &err), 0, "%s", err.msg);
    cr_assert_eq(km_net_queued(w.client.conn), 604);
    cr_assert_eq(km_net_send_frame(w.client.conn, buf, sizeof buf, &err), -1);
    cr_assert(strstr(err.msg, "write queue full (604 of 1000 bytes queued, 604 more refused)"), "%s", err.msg);
    cr_assert_eq(km_net_queued(w.client.conn), 604, "a refused send queues nothing");
    w.want_client_frames = 1;
    ev_run(w.loop, 0);
    cr_assert_eq(w.client.frames, 1);
    cr_assert_geq(w.client.drains, 1);
    cr_assert_eq(km_net_room(w.client.conn), 1000);
    km_net_stats st;
    km_net_get_stats(w.client.conn, &st);
    cr_assert_eq(st.bytes_out, 604);
    cr_assert_eq(st.bytes_in, 604);
    cr_assert_eq(st.frames_in, 1);
    cr_assert_eq(km_net_send_frame(w.client.conn, buf, sizeof buf, &err), 0, "%s", err.msg);
    world_free(&w);
}

Test(net, pause_holds_frames_back_then_delivers_in_order)
{
    world w;
    world_init(&w);
    w.pause_after = 1;
    uint16_t port = start_server(&w);
    int fd = raw_client(port);
    uint8_t frames[3 * 5];
    for (int i = 0; i < 3; i++) { /* three 1-byte frames in one write: all land in one read */
        uint8_t f[5] = {0, 0, 0, 1, (uint8_t)('x' + i)};
        memcpy(frames + 5 * i, f, 5);
    }
    cr_assert_eq(write(fd, frames, sizeof frames), (ssize_t)sizeof frames);
    while (w.server.frames < 3)
        ev_run(w.loop, EVRUN_ONCE);
    cr_assert_eq(w.frames_at_resume, 1, "nothing is delivered while paused");
    for (int i = 0; i < 3; i++)
        cr_assert_eq(w.server.data[i][0], 'x' + i);
    close(fd);
    world_free(&w);
}

Test(net, close_inside_on_frame_stops_delivery)
{
    world w;
    world_init(&w);
    w.close_in_frame = true;
    uint16_t port = start_server(&w);
    int fd = raw_client(port);
    uint8_t frames[10] = {0, 0, 0, 1, 'a', 0, 0, 0, 1, 'b'};
    cr_assert_eq(write(fd, frames, sizeof frames), 10);
    ev_run(w.loop, 0);
    cr_assert_eq(w.server.frames, 1);
    w.server.conn = NULL;
    char c;
    cr_assert_leq(read(fd, &c, 1), 0, "the server side is gone");
    close(fd);
    world_free(&w);
}

Test(net, backoff_grows_with_jitter_and_resets)
{
    km_backoff a, b;
    km_backoff_init(&a, 0.1, 5.0, 42);
    km_backoff_init(&b, 0.1, 5.0, 43);
    bool differs = false;
    for (unsigned i = 0; i < 80; i++) {
        double cap = 0.1 * (double)(1ull << (i < 60 ? i : 60));
        if (cap > 5.0)
            cap = 5.0;
        double da = km_backoff_next(&a), db = km_backoff_next(&b);
        cr_assert(da >= cap / 2 && da <= cap, "attempt %u: %f outside [%f, %f]", i, da, cap / 2, cap);
        differs |= da != db;
    }
    cr_assert(differs, "different seeds must jitter differently");
    km_backoff_reset(&a);
    double first = km_backoff_next(&a);
    cr_assert(first >= 0.05 && first <= 0.1, "%f", first);
}

Test(net, shutdown_flushes_then_closes_cleanly)
{
    world w;
    world_init(&w);
    uint16_t port = start_server(&w);
    connect_client(&w, port, NULL);
    size_t len = 3u << 20;
    uint8_t *big = pattern(len, 9);
    km_err err = {{0}};
    cr_assert_eq(km_net_send_frame(w.client.conn, big, len, &err), 0, "%s", err.msg);
    km_net_shutdown(w.client.conn); /* before the connect even completed */
    cr_assert_eq(km_net_send_frame(w.client.conn, big, 1, &err), -1);
    cr_assert(strstr(err.msg, "shutting down"), "%s", err.msg);
    while (!w.client.closed || !w.server.closed)
        ev_run(w.loop, EVRUN_ONCE);
    cr_assert(w.client.clean, "%s", w.client.why.msg);
    cr_assert(w.server.clean, "%s", w.server.why.msg);
    cr_assert_eq(w.server.frames, 1);
    cr_assert_eq(w.server.sizes[0], len);
    cr_assert_arr_eq(w.server.data[0], big, len);
    free(big);
    world_free(&w);
}

Test(net, shutdown_gives_up_on_a_peer_that_never_reads)
{
    world w;
    world_init(&w);
    w.raw_accept = true;
    uint16_t port = start_server(&w);
    km_net_opts copts = {.connect_timeout = 0.3};
    connect_client(&w, port, &copts);
    while (!w.client.ready && !w.client.closed)
        ev_run(w.loop, EVRUN_ONCE);
    cr_assert(w.client.ready, "%s", w.client.why.msg);
    size_t len = 48u << 20; /* far more than loopback socket buffers hold */
    uint8_t *big = calloc(1, len);
    km_err err = {{0}};
    cr_assert_eq(km_net_send_frame(w.client.conn, big, len, &err), 0, "%s", err.msg);
    free(big);
    km_net_shutdown(w.client.conn);
    while (!w.client.closed)
        ev_run(w.loop, EVRUN_ONCE);
    cr_assert_not(w.client.clean);
    cr_assert(strstr(w.client.why.msg, "flush timed out") && strstr(w.client.why.msg, "bytes unsent"), "%s",
              w.client.why.msg);
    world_free(&w);
}

Test(net, localhost_falls_back_across_resolved_addresses)
{
    world w;
    world_init(&w);
    w.echo = true;
    uint16_t port = start_server(&w); /* 127.0.0.1 only; "localhost" may resolve to ::1 first */
    km_err err = {{0}};
    w.client.conn = km_net_connect(w.loop, "localhost", port, NULL, &client_handlers, &w, &err);
    cr_assert(w.client.conn, "%s", err.msg);
    cr_assert(strncmp(km_net_peer(w.client.conn), "localhost:", 10) == 0, "%s", km_net_peer(w.client.conn));
    uint8_t one = 1;
    cr_assert_eq(km_net_send_frame(w.client.conn, &one, 1, &err), 0, "%s", err.msg);
    w.want_client_frames = 1;
    ev_run(w.loop, 0);
    cr_assert_eq(w.client.frames, 1, "%s", w.client.why.msg);
    world_free(&w);
}

Test(net, mutual_tls_over_km_net)
{
    km_test_pki pki;
    cr_assert_eq(km_test_pki_make(&pki), 0);
    km_err err = {{0}};
    km_tls_config scfg = {.cert_file = pki.server_cert, .key_file = pki.server_key, .ca_file = pki.ca,
                          .require_client_cert = true};
    km_tls_config ccfg = {.ca_file = pki.ca, .cert_file = pki.client_cert, .key_file = pki.client_key};
    km_tls_ctx *sctx = km_tls_server_ctx_new(&scfg, &err), *cctx = km_tls_client_ctx_new(&ccfg, &err);
    cr_assert(sctx && cctx, "%s", err.msg);
    world w;
    world_init(&w);
    w.server_opts.tls = sctx;
    uint16_t port = start_server(&w);
    km_net_opts copts = {.tls = cctx}; /* tls_name defaults to the host dialled: 127.0.0.1 (an IP SAN) */
    echo_round_trip(&w, port, &copts);
    world_free(&w);
    km_tls_ctx_free(sctx);
    km_tls_ctx_free(cctx);
    km_test_pki_free(&pki);
}

static void accept_once(km_net_listener *l, int fd, const char *peer, void *ud)
{
    (void)peer;
    world *w = ud;
    w->raw_accepted_fd = fd;
    km_net_listener_free(l); /* from inside its own callback, with more connections pending */
    w->lis = NULL;
    ev_break(w->loop, EVBREAK_ALL);
}

Test(net, listener_freed_inside_accept_callback)
{
    world w;
    world_init(&w);
    km_err err = {{0}};
    w.lis = km_net_listen(w.loop, "127.0.0.1", 0, accept_once, &w, &err);
    cr_assert(w.lis, "%s", err.msg);
    uint16_t port = km_net_listener_port(w.lis);
    int a = raw_client(port), b = raw_client(port); /* both wait in the backlog */
    ev_run(w.loop, 0);
    cr_assert_null(w.lis);
    cr_assert_geq(w.raw_accepted_fd, 0);
    close(a);
    close(b);
    world_free(&w);
}

/* Frames trickling in a few bytes at a time, the loop running between writes,
 * so size prefixes and payloads are split at every kind of boundary. */
Test(net, frames_split_at_arbitrary_boundaries)
{
    world w;
    world_init(&w);
    uint16_t port = start_server(&w);
    int fd = raw_client(port);
    while (!w.server.conn)
        ev_run(w.loop, EVRUN_ONCE);
    uint8_t stream[4096];
    size_t len = 0, sizes[MAX_FRAMES];
    for (int i = 0; i < MAX_FRAMES; i++) {
        sizes[i] = (size_t)(i * 37 % 200);
        uint8_t hdr[4] = {0, 0, (uint8_t)(sizes[i] >> 8), (uint8_t)sizes[i]};
        memcpy(stream + len, hdr, 4);
        for (size_t k = 0; k < sizes[i]; k++)
            stream[len + 4 + k] = (uint8_t)(i + k);
        len += 4 + sizes[i];
    }
    uint64_t rng = 7;
    for (size_t off = 0; off < len;) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        size_t n = 1 + (size_t)(rng >> 61); /* 1..8 bytes */
        if (n > len - off)
            n = len - off;
        cr_assert_eq(write(fd, stream + off, n), (ssize_t)n);
        off += n;
        ev_run(w.loop, EVRUN_NOWAIT);
    }
    while (w.server.frames < MAX_FRAMES)
        ev_run(w.loop, EVRUN_ONCE);
    for (int i = 0; i < MAX_FRAMES; i++) {
        cr_assert_eq(w.server.sizes[i], sizes[i], "frame %d", i);
        for (size_t k = 0; k < sizes[i]; k++)
            cr_assert_eq(w.server.data[i][k], (uint8_t)(i + k));
    }
    close(fd);
    world_free(&w);
}

/* With TLS, paused data can sit decrypted inside OpenSSL where the fd never
 * signals it; resuming must still deliver it. */
Test(net, pause_and_resume_over_tls)
{
    tls_pair t;
    tls_pair_make(&t);
    km_tls_ctx *sctx = t.server, *cctx = t.client;
    km_err err = {{0}};
    world w;
    world_init(&w);
    w.server_opts.tls = sctx;
    w.pause_after = 1;
    uint16_t port = start_server(&w);
    km_net_opts copts = {.tls = cctx, .tls_name = "localhost"};
    connect_client(&w, port, &copts);
    uint8_t *frames[3];
    for (int i = 0; i < 3; i++) { /* 40 kB each: several TLS records per frame */
        frames[i] = pattern(40000, (unsigned)i + 3);
        cr_assert_eq(km_net_send_frame(w.client.conn, frames[i], 40000, &err), 0, "%s", err.msg);
    }
    while (w.server.frames < 3 && !w.server.closed)
        ev_run(w.loop, EVRUN_ONCE);
    cr_assert_eq(w.server.frames, 3, "%s", w.server.why.msg);
    cr_assert_eq(w.frames_at_resume, 1);
    for (int i = 0; i < 3; i++) {
        cr_assert_arr_eq(w.server.data[i], frames[i], 40000);
        free(frames[i]);
    }
    world_free(&w);
    tls_pair_free(&t);
}

Test(net, listening_on_a_busy_port_names_it)
{
    world w;
    world_init(&w);
    uint16_t port = start_server(&w);
    km_err err = {{0}};
    km_net_listener *again = km_net_listen(w.loop, "127.0.0.1", port, accepted, &w, &err);
    cr_assert_null(again);
    char want[64];
    snprintf(want, sizeof want, "listen on 127.0.0.1:%u: Address already in use", port);
    cr_assert_str_eq(err.msg, want);
    cr_assert_null(km_net_listen(w.loop, "no-such-host.invalid", 0, accepted, &w, &err));
    cr_assert(strstr(err.msg, "no-such-host.invalid") && strstr(err.msg, "cannot resolve"), "%s", err.msg);
    world_free(&w);
}

/* The usual misconfiguration, both ways round: the errors must say what happened. */
Test(net, tls_and_plaintext_mixups_are_explained)
{
    tls_pair t;
    tls_pair_make(&t);
    km_tls_ctx *sctx = t.server, *cctx = t.client;

    world w; /* TLS client, plaintext server */
    world_init(&w);
    uint16_t port = start_server(&w);
    km_net_opts copts = {.tls = cctx, .tls_name = "localhost", .connect_timeout = 5};
    connect_client(&w, port, &copts);
    while (!w.server.closed)
        ev_run(w.loop, EVRUN_ONCE);
    cr_assert(strstr(w.server.why.msg, "the peer is speaking TLS to a plaintext endpoint"), "%s", w.server.why.msg);
    while (!w.client.closed)
        ev_run(w.loop, EVRUN_ONCE);
    cr_assert(strstr(w.client.why.msg, "TLS handshake with localhost: peer closed the connection"), "%s",
              w.client.why.msg);
    world_free(&w);

    world_init(&w); /* plaintext Kafka client, TLS server */
    w.server_opts.tls = sctx;
    port = start_server(&w);
    uint8_t api_versions[] = {0, 0, 0, 10, 0, 18, 0, 0, 0, 0, 0, 1, 0xff, 0xff};
    expect_server_error(port, &w, api_versions, sizeof api_versions, false);
    cr_assert(strstr(w.server.why.msg, "TLS handshake with 127.0.0.1:"), "%s", w.server.why.msg);
    cr_assert(strstr(w.server.why.msg, "wrong version number"), "OpenSSL's reason is passed on: %s",
              w.server.why.msg);
    world_free(&w);
    tls_pair_free(&t);
}

/* ---- TLS records gathered per read ------------------------------------------------------- */

static void paused_ready(km_net_conn *c, void *ud)
{
    ((world *)ud)->server.ready = true;
    km_net_pause(c, true); /* until the test has everything waiting in the socket */
}

static size_t count_bytes(km_net_conn *c, const uint8_t *d, size_t len, void *ud)
{
    (void)c, (void)d;
    world *w = ud;
    w->stream_calls++;
    w->stream_bytes += len;
    if (len > w->stream_largest)
        w->stream_largest = len;
    return len;
}

/* A TLS server with handlers h (paused_ready: it reads nothing until the test resumes it) and a
 * TLS client connecting to it. */
static void tls_world_paused(world *w, tls_pair *t, const km_net_handlers *h)
{
    tls_pair_make(t);
    world_init(w);
    w->server_h = h;
    w->server_opts.tls = t->server;
    uint16_t port = start_server(w);
    km_net_opts copts = {.tls = t->client, .tls_name = "localhost"};
    connect_client(w, port, &copts);
}

/* TLS delivers one record (16 KiB at most) per SSL_read; records already waiting go to the owner
 * together, so a proxy sends once per buffer rather than once per record. */
Test(net, tls_records_waiting_are_delivered_together)
{
    static const km_net_handlers stream = {.on_ready = paused_ready, .on_bytes = count_bytes,
                                           .on_close = server_close};
    tls_pair t;
    world w;
    tls_world_paused(&w, &t, &stream);
    km_err err = {{0}};
    const size_t total = 200000; /* 13 records; the loopback socket holds them all */
    uint8_t *data = pattern(total, 9);
    cr_assert_eq(km_net_send(w.client.conn, data, total, &err), 0, "%s", err.msg);
    while (!w.server.ready || km_net_queued(w.client.conn))
        ev_run(w.loop, EVRUN_ONCE);
    km_net_pause(w.server.conn, false);
    while (w.stream_bytes < total && !w.server.closed)
        ev_run(w.loop, EVRUN_ONCE);
    cr_assert_eq(w.stream_bytes, total, "%s", w.server.why.msg);
    cr_assert_gt(w.stream_largest, 16384, "one record per on_bytes call (largest %zu)", w.stream_largest);
    cr_assert_leq(w.stream_calls, 5, "%zu on_bytes calls for %zu bytes", w.stream_calls, total);
    free(data);
    world_free(&w);
    tls_pair_free(&t);
}

/* Frame i: its number, then (i % 200) bytes of pattern; anything else counts as out of place. */
static void seq_frame(km_net_conn *c, const uint8_t *p, size_t len, void *ud)
{
    (void)c;
    world *w = ud;
    size_t want = 4 + (size_t)(w->seq_next % 200);
    bool ok = len == want && km_be32(p) == (uint32_t)w->seq_next;
    for (size_t i = 4; ok && i < len; i++)
        ok = p[i] == (uint8_t)(i * 31 + (size_t)w->seq_next);
    w->seq_bad += !ok;
    w->seq_next++;
}

/* Thousands of small frames queued behind a reader that does not read: the queue's pieces go out
 * gathered into records of up to 16 KiB, and when the socket is full OpenSSL must get the same
 * first bytes again (a wrong retry fails with "bad write retry"): every frame arrives, in order. */
Test(net, small_frames_over_tls_gathered_into_records_arrive_in_order)
{
    static const km_net_handlers numbered = {.on_ready = paused_ready, .on_frame = seq_frame,
                                             .on_close = server_close};
    tls_pair t;
    world w;
    tls_world_paused(&w, &t, &numbered);
    km_err err = {{0}};
    enum { FRAMES = 100000 }; /* about 10 MB: more than the loopback socket buffers hold */
    uint8_t buf[4 + 200];
    for (int i = 0; i < FRAMES; i++) {
        size_t len = 4 + (size_t)(i % 200);
        buf[0] = (uint8_t)(i >> 24), buf[1] = (uint8_t)(i >> 16), buf[2] = (uint8_t)(i >> 8), buf[3] = (uint8_t)i;
        for (size_t k = 4; k < len; k++)
            buf[k] = (uint8_t)(k * 31 + (size_t)i);
        cr_assert_eq(km_net_send_frame(w.client.conn, buf, len, &err), 0, "frame %d: %s", i, err.msg);
        if (i % 5000 == 4999) /* let some go out (and the socket fill) while the rest queue */
            ev_run(w.loop, EVRUN_NOWAIT);
    }
    while (!w.server.ready)
        ev_run(w.loop, EVRUN_ONCE);
    for (int i = 0; i < 50; i++) /* the client writes until the reader's socket is full */
        ev_run(w.loop, EVRUN_NOWAIT);
    cr_assert_gt(km_net_queued(w.client.conn), 0, "nothing left queued: the socket never filled");
    km_net_pause(w.server.conn, false);
    while (w.seq_next < FRAMES && !w.server.closed && !w.client.closed)
        ev_run(w.loop, EVRUN_ONCE);
    cr_assert_eq(w.seq_next, FRAMES, "server: %s; client: %s", w.server.why.msg, w.client.why.msg);
    cr_assert_eq(w.seq_bad, 0);
    world_free(&w);
    tls_pair_free(&t);
}
