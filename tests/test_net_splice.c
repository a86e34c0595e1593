/* km_net_forward: frame bodies spliced socket -> pipe -> socket over real loopback TCP pairs.
 *
 * A small proxy on km_net sits between two TCP pairs: a producer writes size-prefixed frames into
 * the source connection; for each frame the proxy sends a head of its own ('H' + size) from user
 * space and hands the body to km_net_forward; a sink reads what comes out.  The sink must see
 * exactly head, body, head, body... in order, whatever the sink's pace, and the byte counters must
 * add up. */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <errno.h>
#include <ev.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "km_net.h"

typedef struct rig {
    struct ev_loop *loop;
    ev_timer guard, tick;
    ev_io prod_w, sink_w;
    int prod_fd, sink_fd;
    km_net_conn *a, *b;          /* the proxy's source and destination connections */
    bool splice;                 /* the proxy calls km_net_forward */
    /* the proxy's parser */
    uint8_t hdr[4];
    size_t have;
    uint64_t left;
    uint64_t spliced, copied;    /* body bytes through progress / through on_bytes */
    int forwards, heads_behind;  /* forwards started; heads sent while b held bytes */
    /* the producer */
    uint8_t *src;
    size_t src_len, src_off, src_stop; /* the producer closes at src_stop (src_len: after all) */
    /* the sink */
    uint8_t *out;
    size_t out_len, out_cap, sink_stop; /* sink_stop: the sink closes after this many bytes (0: never) */
    bool slow, sink_eof;
    /* outcomes */
    bool a_closed, b_closed;
    km_err a_why, b_why;
    bool a_clean, b_clean;
} rig;

static void guard_fired(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop, (void)w, (void)revents;
    cr_assert_fail("event loop guard: the test made no progress");
}

/* A connected loopback TCP pair, both ends non-blocking. */
static void tcp_pair(int fds[2], int rcvbuf)
{
    int l = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    cr_assert(l >= 0 && bind(l, (struct sockaddr *)&a, sizeof a) == 0 && listen(l, 1) == 0);
    cr_assert(getsockname(l, (struct sockaddr *)&a, &al) == 0);
    fds[0] = socket(AF_INET, SOCK_STREAM, 0);
    if (rcvbuf) /* before connect, so the window is small from the start */
        setsockopt(fds[0], SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    cr_assert(connect(fds[0], (struct sockaddr *)&a, sizeof a) == 0);
    fds[1] = accept(l, NULL, NULL);
    cr_assert(fds[1] >= 0);
    close(l);
    for (int i = 0; i < 2; i++)
        fcntl(fds[i], F_SETFL, fcntl(fds[i], F_GETFL) | O_NONBLOCK);
}

/* ---- the proxy ---------------------------------------------------------------------- */

static void px_progress(km_net_conn *from, size_t n, void *ud)
{
    rig *r = ud;
    cr_assert_eq(from, r->a);
    cr_assert_leq(n, r->left, "progress past the frame: %zu of %llu", n, (unsigned long long)r->left);
    r->left -= n;
    r->spliced += n;
}

static void px_send(rig *r, const void *d, size_t n)
{
    km_err e = {{0}};
    cr_assert_eq(km_net_send(r->b, d, n, &e), 0, "%s", e.msg);
}

static size_t px_bytes(km_net_conn *c, const uint8_t *d, size_t len, void *ud)
{
    rig *r = ud;
    size_t off = 0;
    while (off < len) {
        if (r->left) {
            size_t k = len - off < r->left ? len - off : (size_t)r->left;
            px_send(r, d + off, k);
            r->left -= k, r->copied += k, off += k;
            continue;
        }
        size_t k = 4 - r->have < len - off ? 4 - r->have : len - off;
        memcpy(r->hdr + r->have, d + off, k);
        r->have += k, off += k;
        if (r->have < 4)
            continue;
        r->have = 0;
        r->left = (uint64_t)r->hdr[0] << 24 | r->hdr[1] << 16 | r->hdr[2] << 8 | r->hdr[3];
        uint8_t head[5] = {'H', r->hdr[0], r->hdr[1], r->hdr[2], r->hdr[3]};
        if (km_net_queued(r->b))
            r->heads_behind++;
        px_send(r, head, sizeof head);
    }
    if (r->splice && r->left && km_net_forward(c, r->b, r->left, px_progress) == 0)
        r->forwards++;
    return len;
}

static void px_a_close(km_net_conn *c, const km_err *why, void *ud)
{
    (void)c;
    rig *r = ud;
    r->a_closed = true, r->a_clean = !why;
    if (why)
        r->a_why = *why;
    r->a = NULL;
    if (r->b)
        km_net_shutdown(r->b); /* what was forwarded still reaches the sink */
}

static void px_b_close(km_net_conn *c, const km_err *why, void *ud)
{
    (void)c;
    rig *r = ud;
    r->b_closed = true, r->b_clean = !why;
    if (why)
        r->b_why = *why;
    r->b = NULL;
    if (why && r->a) /* a clean close comes from a shutdown: the sink's EOF ends the run */
        km_net_close(r->a);
    if (why)
        r->a = NULL, ev_break(r->loop, EVBREAK_ALL);
}

/* ---- producer and sink ------------------------------------------------------------------ */

static void produce(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)revents;
    rig *r = w->data;
    while (r->src_off < r->src_stop) {
        ssize_t n = send(r->prod_fd, r->src + r->src_off, r->src_stop - r->src_off, MSG_NOSIGNAL);
        if (n < 0 && errno == EAGAIN)
            return;
        cr_assert_gt(n, 0, "producer: %s", strerror(errno));
        r->src_off += (size_t)n;
    }
    ev_io_stop(loop, w);
    if (r->src_stop < r->src_len) { /* gone in the middle of a frame */
        close(r->prod_fd);
        r->prod_fd = -1;
    }
}

static void sink_read(rig *r, size_t budget)
{
    while (budget && !r->sink_eof && r->sink_fd >= 0) {
        if (r->out_len == r->out_cap) {
            r->out_cap = r->out_cap ? 2 * r->out_cap : 1 << 20;
            r->out = realloc(r->out, r->out_cap);
        }
        size_t want = r->out_cap - r->out_len < budget ? r->out_cap - r->out_len : budget;
        if (r->sink_stop && want > r->sink_stop - r->out_len)
            want = r->sink_stop - r->out_len;
        ssize_t n = recv(r->sink_fd, r->out + r->out_len, want, 0);
        if (n < 0 && errno == EAGAIN)
            return;
        if (n <= 0) {
            r->sink_eof = true;
            ev_io_stop(r->loop, &r->sink_w);
            ev_break(r->loop, EVBREAK_ALL);
            return;
        }
        r->out_len += (size_t)n, budget -= (size_t)n;
        if (r->sink_stop && r->out_len == r->sink_stop) { /* unread bytes remain: the close resets */
            ev_io_stop(r->loop, &r->sink_w);
            ev_timer_stop(r->loop, &r->tick);
            close(r->sink_fd);
            r->sink_fd = -1;
            return;
        }
    }
}

static void sink_ready(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)loop, (void)revents;
    sink_read(w->data, SIZE_MAX);
}

static void sink_tick(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop, (void)revents;
    sink_read(w->data, 48 * 1024); /* a slow reader: 48 KiB per 2 ms */
}

/* frames[i] bytes each, patterned; returns the stream the sink must see. */
static uint8_t *build(rig *r, const size_t *frames, int n, size_t *expect_len)
{
    size_t total = 0;
    for (int i = 0; i < n; i++)
        total += 4 + frames[i];
    r->src = malloc(total);
    uint8_t *expect = malloc(total + (size_t)n);
    size_t at = 0, ex = 0;
    for (int i = 0; i < n; i++) {
        uint32_t size = (uint32_t)frames[i];
        uint8_t be[4] = {(uint8_t)(size >> 24), (uint8_t)(size >> 16), (uint8_t)(size >> 8), (uint8_t)size};
        memcpy(r->src + at, be, 4);
        expect[ex++] = 'H';
        memcpy(expect + ex, be, 4);
        at += 4, ex += 4;
        for (size_t j = 0; j < size; j++)
            r->src[at + j] = expect[ex + j] = (uint8_t)(j * 131u + (unsigned)i * 7u + (j >> 12));
        at += size, ex += size;
    }
    r->src_len = r->src_stop = total;
    *expect_len = ex;
    return expect;
}

static void rig_start(rig *r, bool splice, bool slow)
{
    memset(r, 0, sizeof *r);
    signal(SIGPIPE, SIG_IGN); /* as kmproxy does: km_net_forward requires it */
    r->loop = ev_loop_new(EVFLAG_AUTO);
    r->splice = splice, r->slow = slow;
    int sp[2], dp[2];
    tcp_pair(sp, 0);
    tcp_pair(dp, slow ? 16 * 1024 : 0);
    r->prod_fd = sp[0], r->sink_fd = dp[0];
    if (slow) { /* a small send buffer too, so the destination meets EAGAIN early and often */
        int snd = 16 * 1024;
        setsockopt(dp[1], SOL_SOCKET, SO_SNDBUF, &snd, sizeof snd);
    }
    km_err e = {{0}};
    km_net_handlers ha = {.on_bytes = px_bytes, .on_close = px_a_close};
    km_net_handlers hb = {.on_close = px_b_close};
    r->a = km_net_accept(r->loop, sp[1], "source", NULL, &ha, r, &e);
    r->b = km_net_accept(r->loop, dp[1], "destination", NULL, &hb, r, &e);
    cr_assert(r->a && r->b, "%s", e.msg);
    ev_timer_init(&r->guard, guard_fired, 30., 0.);
    ev_timer_start(r->loop, &r->guard);
    ev_io_init(&r->prod_w, produce, r->prod_fd, EV_WRITE);
    r->prod_w.data = r;
    ev_io_init(&r->sink_w, sink_ready, r->sink_fd, EV_READ);
    r->sink_w.data = r;
    ev_timer_init(&r->tick, sink_tick, 0.002, 0.002);
    r->tick.data = r;
}

static void rig_run(rig *r)
{
    ev_io_start(r->loop, &r->prod_w);
    if (r->slow)
        ev_timer_start(r->loop, &r->tick);
    else
        ev_io_start(r->loop, &r->sink_w);
    ev_run(r->loop, 0);
}

static void rig_free(rig *r)
{
    if (r->a)
        km_net_close(r->a);
    if (r->b)
        km_net_close(r->b);
    if (r->prod_fd >= 0)
        close(r->prod_fd);
    if (r->sink_fd >= 0)
        close(r->sink_fd);
    ev_loop_destroy(r->loop);
    free(r->src);
    free(r->out);
}

/* The producer finishes, then closes its end: the source's EOF shuts the destination down
 * after a flush, so the sink sees EOF exactly after the last byte. */
static void close_producer_when_done(struct ev_loop *loop, ev_io *w, int revents)
{
    rig *r = w->data;
    produce(loop, w, revents);
    if (r->src_off == r->src_len && r->prod_fd >= 0) {
        close(r->prod_fd);
        r->prod_fd = -1;
    }
}

static void pass_through(bool splice, bool slow, const size_t *frames, int n)
{
    rig r;
    rig_start(&r, splice, slow);
    size_t expect_len;
    uint8_t *expect = build(&r, frames, n, &expect_len);
    ev_set_cb(&r.prod_w, close_producer_when_done);
    rig_run(&r);
    cr_assert(r.sink_eof && r.a_closed && r.a_clean, "the sink saw EOF %d, the source closed %d (%s)", r.sink_eof,
              r.a_closed, r.a_why.msg);
    cr_assert_eq(r.out_len, expect_len, "the sink got %zu of %zu bytes", r.out_len, expect_len);
    cr_assert(memcmp(r.out, expect, expect_len) == 0, "the sink's bytes differ from head, body, head, body...");
    cr_assert_eq(r.spliced + r.copied + 4 * (size_t)n, r.src_len, "every body byte went one way or the other");
    if (splice) {
        size_t bodies = r.src_len - 4 * (size_t)n;
        cr_assert_gt(r.forwards, 0);
        cr_assert_gt(r.spliced, bodies / 2, "only %llu of %zu body bytes were spliced",
                     (unsigned long long)r.spliced, bodies);
    } else {
        cr_assert_eq(r.spliced, 0);
    }
    free(expect);
    rig_free(&r);
}

static const size_t big_frames[] = {3u << 20, 100, 1u << 20, 20000, 5, 2u << 20};

Test(net_splice, large_frames_pass_through_the_kernel_in_order)
{
    pass_through(true, false, big_frames, 6);
}

Test(net_splice, the_same_frames_copied_without_forward)
{
    pass_through(false, false, big_frames, 6);
}

static const size_t slow_frames[] = {700000, 40000, 300000, 17, 500000};

Test(net_splice, slow_reader_keeps_heads_behind_spliced_bytes)
{
    rig r;
    rig_start(&r, true, true);
    size_t expect_len;
    uint8_t *expect = build(&r, slow_frames, 5, &expect_len);
    ev_set_cb(&r.prod_w, close_producer_when_done);
    rig_run(&r);
    cr_assert(r.sink_eof && r.a_clean, "the sink saw EOF %d, the source: %s", r.sink_eof, r.a_why.msg);
    cr_assert_eq(r.out_len, expect_len, "the sink got %zu of %zu bytes", r.out_len, expect_len);
    cr_assert(memcmp(r.out, expect, expect_len) == 0, "the sink's bytes differ from head, body, head, body...");
    cr_assert_gt(r.spliced, 0);
    /* A head sent while the destination still held spliced or queued bytes went out after them. */
    cr_assert_gt(r.heads_behind, 0, "the slow sink never left bytes waiting at the destination");
    free(expect);
    rig_free(&r);
}

Test(net_splice, counters_count_spliced_bytes)
{
    rig r;
    rig_start(&r, true, false);
    size_t expect_len, frames[] = {1u << 20};
    uint8_t *expect = build(&r, frames, 1, &expect_len);
    ev_set_cb(&r.sink_w, sink_ready);
    ev_io_start(r.loop, &r.prod_w);
    ev_io_start(r.loop, &r.sink_w);
    while (r.out_len < expect_len)
        ev_run(r.loop, EVRUN_ONCE);
    km_net_stats sa, sb;
    km_net_get_stats(r.a, &sa);
    km_net_get_stats(r.b, &sb);
    cr_assert_eq(sa.bytes_in, r.src_len);
    cr_assert_eq(sb.bytes_out, expect_len);
    cr_assert_eq(sa.bytes_spliced, r.spliced);
    cr_assert_gt(sa.bytes_spliced, 0);
    cr_assert_eq(km_net_queued(r.b), 0);
    free(expect);
    rig_free(&r);
}

Test(net_splice, source_closing_mid_body_still_delivers_what_it_sent)
{
    rig r;
    rig_start(&r, true, false);
    size_t expect_len, frames[] = {2u << 20};
    uint8_t *expect = build(&r, frames, 1, &expect_len);
    r.src_stop = 900000; /* inside the body */
    rig_run(&r);
    cr_assert(r.a_closed && r.a_clean, "stream mode: the owner judges an EOF inside its frame");
    cr_assert_gt(r.left, 0, "the proxy's count still says it was inside a body");
    cr_assert_eq(r.out_len, 5 + r.src_stop - 4, "what the source sent reaches the sink, then EOF");
    cr_assert(memcmp(r.out, expect, r.out_len) == 0);
    cr_assert(r.sink_eof && r.b_closed && r.b_clean);
    free(expect);
    rig_free(&r);
}

Test(net_splice, destination_closing_mid_splice_is_reported)
{
    rig r;
    rig_start(&r, true, true);
    size_t expect_len, frames[] = {4u << 20};
    uint8_t *expect = build(&r, frames, 1, &expect_len);
    r.sink_stop = 300000; /* the sink hangs up with bytes unread: a reset */
    rig_run(&r);
    cr_assert(r.b_closed && !r.b_clean, "the destination's failure reaches on_close");
    cr_assert(strstr(r.b_why.msg, "write to destination"), "%s", r.b_why.msg);
    cr_assert_gt(r.spliced, 0);
    free(expect);
    rig_free(&r);
}

Test(net_splice, forward_refuses_what_it_cannot_do)
{
    rig r;
    rig_start(&r, true, false);
    while (!km_net_is_ready(r.a) || !km_net_is_ready(r.b))
        ev_run(r.loop, EVRUN_ONCE);
    cr_assert_eq(km_net_forward(r.a, r.b, KM_NET_FORWARD_MIN - 1, px_progress), -1, "too small to be worth it");
    cr_assert_eq(km_net_forward(r.a, r.a, 1u << 20, px_progress), -1, "onto itself");
    cr_assert_eq(km_net_forward(r.b, r.a, 1u << 20, px_progress), -1, "from a framed (not stream) connection");
    signal(SIGPIPE, SIG_DFL);
    cr_assert_eq(km_net_forward(r.a, r.b, 1u << 20, px_progress), -1, "SIGPIPE would kill the process");
    signal(SIGPIPE, SIG_IGN);
    cr_assert_eq(km_net_forward(r.a, r.b, 1u << 20, px_progress), 0, "and with it ignored, it forwards");
    cr_assert_eq(km_net_forward(r.a, r.b, 1u << 20, px_progress), -1, "one forward at a time");
    rig_free(&r);
}
