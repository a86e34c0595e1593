/* km_net data path: framed reading into a bounded buffer, the bounded write queue. */
#include "net_private.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#define RBUF_INITIAL (64u * 1024u)
#define RBUF_SHRINK (1024u * 1024u) /* give back big-frame buffers once they are done */
#define READ_BUDGET 16              /* reads per event, so one busy peer cannot starve the rest */
#define WRITEV_MAX 16
#define TLS_RECORD_MAX 16384         /* plaintext bytes in one TLS record */

void km_net__free_buffers(km_net_conn *c)
{
    free(c->rbuf);
    c->rbuf = NULL;
    for (net_chunk *k = c->head, *next; k; k = next) {
        next = k->next;
        free(k);
    }
    c->head = c->tail = NULL;
    c->queued = 0;
}

static void fail_msg(km_net_conn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail_msg(km_net_conn *c, const char *fmt, ...)
{
    km_err e;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e.msg, sizeof e.msg, fmt, ap);
    va_end(ap);
    km_net__fail(c, &e);
}

/* Size prefix at rbuf[off]: 0 and the payload size, or -1 after failing c. */
static int frame_size(km_net_conn *c, size_t off, size_t *size)
{
    uint32_t raw = km_be32(c->rbuf + off);
    uint64_t at = c->rx_offset + off;
    if (raw > INT32_MAX) {
        fail_msg(c, "frame from %s at stream byte %llu: size %d is negative", c->peer, (unsigned long long)at,
                 (int32_t)raw);
        return -1;
    }
    if (raw > c->opts.max_frame) {
        /* A TLS record header (0x16 0x03) first thing on a plaintext connection is
         * the classic TLS-vs-plaintext listener mix-up; say so. */
        bool tls_hello = at == 0 && !c->tls && c->rbuf[off] == 0x16 && c->rbuf[off + 1] == 0x03;
        fail_msg(c, "frame from %s at stream byte %llu: size %u exceeds the %zu byte frame limit%s", c->peer,
                 (unsigned long long)at, raw, c->opts.max_frame,
                 tls_hello ? " (the peer is speaking TLS to a plaintext endpoint)" : "");
        return -1;
    }
    *size = raw;
    return 0;
}

static void consume(km_net_conn *c, size_t off)
{
    if (off == 0)
        return;
    memmove(c->rbuf, c->rbuf + off, c->rlen - off);
    c->rlen -= off;
    c->rx_offset += off;
    if (c->rcap > RBUF_SHRINK && c->rlen <= RBUF_INITIAL) {
        uint8_t *smaller = realloc(c->rbuf, RBUF_INITIAL);
        if (smaller) {
            c->rbuf = smaller;
            c->rcap = RBUF_INITIAL;
        }
    }
}

/* Hands every complete frame in rbuf to on_frame; false once c is dead. */
static bool deliver_frames(km_net_conn *c)
{
    size_t off = 0, size = 0;
    while (!c->paused && c->rlen - off >= 4) {
        if (frame_size(c, off, &size))
            return false;
        if (c->rlen - off - 4 < size)
            break;
        c->stats.frames_in++;
        km_net__tap_in(c, c->rbuf + off + 4, size);
        km_net__enter(c);
        if (c->h.on_frame)
            c->h.on_frame(c, c->rbuf + off + 4, size, c->ud);
        if (!km_net__leave(c))
            return false;
        off += 4 + size;
    }
    consume(c, off);
    return true;
}

/* Stream mode: offers what rbuf holds; false once c is dead. */
static bool deliver_bytes(km_net_conn *c)
{
    if (c->paused || c->rlen == 0)
        return true;
    km_net__enter(c);
    size_t took = c->h.on_bytes(c, c->rbuf, c->rlen, c->ud);
    if (!km_net__leave(c))
        return false;
    if (took < c->rlen) /* a forward counts from after everything offered */
        c->fwd_left = 0;
    consume(c, took < c->rlen ? took : c->rlen);
    return true;
}

static bool deliver(km_net_conn *c)
{
    return c->h.on_bytes ? deliver_bytes(c) : deliver_frames(c);
}

/* Grows rbuf geometrically, never past the frame being assembled, so a peer
 * announcing a huge frame only costs memory as its bytes actually arrive. */
static bool ensure_room(km_net_conn *c)
{
    if (!c->rbuf) { /* given back while idle (release_idle) */
        if (!(c->rbuf = malloc(RBUF_INITIAL))) {
            fail_msg(c, "read from %s: out of memory for the receive buffer", c->peer);
            return false;
        }
        c->rcap = RBUF_INITIAL;
    }
    if (c->rlen < c->rcap)
        return true;
    if (c->h.on_bytes) /* stream mode: full only while the owner has paused us */
        return false;
    size_t want = c->rcap * 2, need = 4 + (size_t)km_be32(c->rbuf); /* rlen == rcap >= 4 here */
    if (want > need)
        want = need;
    uint8_t *grown = realloc(c->rbuf, want);
    if (!grown) {
        fail_msg(c, "frame from %s: out of memory buffering %zu bytes", c->peer, want);
        return false;
    }
    c->rbuf = grown;
    c->rcap = want;
    return true;
}

/* TLS gives one record (at most 16 KiB) per read.  The records already here are gathered into
 * the buffer before the owner sees them, so a proxy parses and sends once per buffer rather than
 * once per record.  Whatever stopped the gathering is held and answers the next read. */
static km_tls_status tls_read(km_net_conn *c, uint8_t *dst, size_t cap, size_t *n, km_err *err)
{
    if (c->tls_held != KM_TLS_OK) {
        km_tls_status held = c->tls_held;
        c->tls_held = KM_TLS_OK;
        *err = c->tls_held_err;
        return held;
    }
    km_tls_status st = km_tls_read(c->tls, dst, cap, n, err);
    while (st == KM_TLS_OK && *n < cap) {
        size_t more = 0;
        km_tls_status next = km_tls_read(c->tls, dst + *n, cap - *n, &more, &c->tls_held_err);
        if (next != KM_TLS_OK) {
            c->tls_held = next;
            break;
        }
        *n += more;
    }
    return st;
}

static km_tls_status raw_read(km_net_conn *c, size_t *n, km_err *err)
{
    uint8_t *dst = c->rbuf + c->rlen;
    size_t cap = c->rcap - c->rlen;
    if (c->tls)
        return tls_read(c, dst, cap, n, err);
    for (;;) {
        ssize_t got = recv(c->fd, dst, cap, 0);
        if (got > 0) {
            *n = (size_t)got;
            return KM_TLS_OK;
        }
        if (got == 0)
            return KM_TLS_CLOSED;
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return KM_TLS_WANT_READ;
        km_fail(err, "read from %s: %s", c->peer, strerror(errno));
        return KM_TLS_ERROR;
    }
}

static void peer_closed(km_net_conn *c)
{
    if (c->rlen == 0 || c->h.on_bytes) /* stream mode: the owner knows its own framing */
        km_net__fail(c, NULL);
    else if (c->rlen < 4)
        fail_msg(c, "peer %s closed the connection inside a frame's size prefix (%zu of 4 bytes, stream byte %llu)",
                 c->peer, c->rlen, (unsigned long long)c->rx_offset);
    else
        fail_msg(c, "peer %s closed the connection mid-frame: %zu of %u payload bytes received (frame at stream byte %llu)",
                 c->peer, c->rlen - 4, km_be32(c->rbuf), (unsigned long long)c->rx_offset);
}

/* A connection whose socket is drained and whose buffer holds nothing gives the buffer back: an idle
 * connection costs no receive buffer, and a burst of connections leaves none behind. */
static void release_idle(km_net_conn *c)
{
    if (c->fwd_to && !c->fwd_left) /* a parked splice link too: its destination's pipe */
        km_net__forward_end(c);
    if (c->rlen == 0 && c->rbuf) {
        free(c->rbuf);
        c->rbuf = NULL;
        c->rcap = 0;
    }
}

void km_net__read_ready(km_net_conn *c)
{
    if (!deliver(c)) /* frames held back by a pause come first */
        return;
    for (int i = 0; i < READ_BUDGET; i++) {
        if (c->paused || c->fwd_wait)
            return;
        if (c->fwd_left && c->rlen == 0) { /* km_net_forward: the kernel moves the bytes (net_splice.c) */
            net_pump st = km_net__pump(c);
            if (st == NET_PUMP_STOP)
                release_idle(c);
            if (st == NET_PUMP_STOP || st == NET_PUMP_DEAD)
                return;
            continue;
        }
        if (!ensure_room(c))
            return;
        km_err e = {{0}};
        size_t n = 0;
        km_tls_status st = raw_read(c, &n, &e);
        if (st == KM_TLS_WANT_READ || st == KM_TLS_WANT_WRITE) {
            c->read_block = st;
            release_idle(c);
            return;
        }
        if (st == KM_TLS_CLOSED) {
            peer_closed(c);
            return;
        }
        if (st == KM_TLS_ERROR) {
            km_net__fail(c, &e);
            return;
        }
        bool drained = !c->tls && n < c->rcap - c->rlen; /* a short plaintext read emptied the socket */
        c->rlen += n;
        c->stats.bytes_in += n;
        if (!deliver(c))
            return;
        if (drained) {
            /* Back to the poller rather than a recv that only says EAGAIN: one syscall less per
             * frame.  epoll is level-triggered, so bytes (or EOF) that came meanwhile wake us. */
            c->read_block = KM_TLS_WANT_READ;
            release_idle(c);
            return;
        }
    }
    ev_feed_event(c->loop, &c->rio, EV_READ); /* budget spent: continue next loop iteration */
}

/* TLS, idle: the caller's bytes go straight into SSL_write (a frame head and what follows as two
 * writes), saving the queue's copy and a poll round with its watcher changes.  What OpenSSL did
 * not take is queued by the caller; after a WANT it must be offered again starting with the same
 * bytes, which the queue does (write_block records which event to wait for). */
static size_t tls_write_through(km_net_conn *c, const uint8_t *prefix, size_t plen, const void *data, size_t len)
{
    const uint8_t *piece[2] = {prefix, data};
    size_t left[2] = {plen, len}, done = 0;
    for (int i = 0; i < 2; i++)
        while (left[i]) {
            size_t put = 0;
            km_err ignored = {{0}}; /* an error is met again, and reported, by the queued retry */
            km_tls_status st = km_tls_write(c->tls, piece[i], left[i], &put, &ignored);
            if (st != KM_TLS_OK) {
                if (st == KM_TLS_WANT_READ || st == KM_TLS_WANT_WRITE)
                    c->write_block = st;
                return done;
            }
            piece[i] += put, left[i] -= put, done += put;
            c->stats.bytes_out += put;
        }
    return done;
}

/* An idle connection writes at once rather than on the next loop iteration: one poll round less
 * per frame for a proxy's round trips.  Returns the bytes the socket (or OpenSSL) took (0 on
 * EAGAIN or an error, which the queued path then meets again and reports). */
static size_t write_through(km_net_conn *c, const uint8_t *prefix, size_t plen, const void *data, size_t len)
{
    if (c->state != NET_READY || c->queued || c->piped || c->cap || c->closing)
        return 0; /* (piped: spliced bytes still in the pipe go first) */
    if (c->tls)
        return tls_write_through(c, prefix, plen, data, len);
    struct iovec iov[2] = {{(void *)prefix, plen}, {(void *)data, len}};
    struct msghdr msg = {.msg_iov = plen ? iov : iov + 1, .msg_iovlen = plen ? 2 : 1};
    ssize_t put;
    do
        put = sendmsg(c->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    while (put < 0 && errno == EINTR);
    if (put <= 0)
        return 0;
    c->stats.bytes_out += (size_t)put;
    return (size_t)put;
}

int km_net__enqueue(km_net_conn *c, const uint8_t *prefix, size_t plen, const void *data, size_t len, km_err *err)
{
    if (c->state == NET_DEAD || c->closing)
        return km_fail(err, "send to %s: the connection is %s", c->peer, c->closing ? "shutting down" : "closed");
    size_t total = plen + len;
    if (total > c->opts.write_limit - c->queued)
        return km_fail(err, "send to %s: write queue full (%zu of %zu bytes queued, %zu more refused)", c->peer,
                       c->queued, c->opts.write_limit, total);
    if (total == 0)
        return 0;
    size_t done = write_through(c, prefix, plen, data, len), skip_prefix = done < plen ? done : plen;
    prefix += skip_prefix, plen -= skip_prefix;
    data = (const uint8_t *)data + (done - skip_prefix), len -= done - skip_prefix;
    total = plen + len;
    if (total == 0)
        return 0;
    net_chunk *k = malloc(sizeof *k + total);
    if (!k)
        return km_fail(err, "send to %s: out of memory queuing %zu bytes", c->peer, total);
    k->next = NULL;
    k->len = total;
    if (plen)
        memcpy(k->data, prefix, plen);
    if (len)
        memcpy(k->data + plen, data, len);
    if (c->tail)
        c->tail->next = k;
    else
        c->head = k;
    c->tail = k;
    c->queued += total;
    km_net__tap_out(c, k->data, total);
    if (c->depth == 0) /* inside a handler the handler's exit does this */
        km_net__update_watchers(c);
    return 0;
}

/* Queued pieces smaller than a TLS record are written as one record: gathered from the head, so
 * a retry after a WANT starts with the same bytes and is at least as long, as OpenSSL requires. */
static km_tls_status tls_write_queued(km_net_conn *c, size_t *n, km_err *err)
{
    const uint8_t *from = c->head->data + c->head_off;
    size_t len = c->head->len - c->head_off;
    uint8_t gathered[TLS_RECORD_MAX];
    if (len < sizeof gathered && c->head->next) {
        memcpy(gathered, from, len);
        for (net_chunk *k = c->head->next; k && len < sizeof gathered; k = k->next) {
            size_t take = k->len < sizeof gathered - len ? k->len : sizeof gathered - len;
            memcpy(gathered + len, k->data, take);
            len += take;
        }
        from = gathered;
    }
    return km_tls_write(c->tls, from, len, n, err);
}

static km_tls_status raw_write(km_net_conn *c, size_t *n, km_err *err)
{
    if (c->tls)
        return tls_write_queued(c, n, err);
    struct iovec iov[WRITEV_MAX];
    int cnt = 0;
    for (net_chunk *k = c->head; k && cnt < WRITEV_MAX; k = k->next, cnt++) {
        size_t skip = cnt == 0 ? c->head_off : 0;
        iov[cnt] = (struct iovec){k->data + skip, k->len - skip};
    }
    struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)cnt};
    for (;;) {
        ssize_t put = sendmsg(c->fd, &msg, MSG_NOSIGNAL);
        if (put >= 0) {
            *n = (size_t)put;
            return KM_TLS_OK;
        }
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return KM_TLS_WANT_WRITE;
        km_fail(err, "write to %s: %s", c->peer, strerror(errno));
        return KM_TLS_ERROR;
    }
}

static void advance(km_net_conn *c, size_t n)
{
    c->queued -= n;
    c->stats.bytes_out += n;
    while (n && c->head) {
        size_t left = c->head->len - c->head_off;
        if (n < left) {
            c->head_off += n;
            return;
        }
        n -= left;
        net_chunk *done = c->head;
        c->head = done->next;
        c->head_off = 0;
        free(done);
    }
    if (!c->head)
        c->tail = NULL;
}

void km_net__write_ready(km_net_conn *c)
{
    if (c->piped) { /* spliced bytes came before anything queued */
        km_err e = {{0}};
        int st = km_net__flush_pipe(c, &e);
        if (st < 0)
            km_net__fail(c, &e);
        if (st <= 0)
            return;
    }
    while (c->head) {
        km_err e = {{0}};
        size_t n = 0;
        km_tls_status st = raw_write(c, &n, &e);
        if (st == KM_TLS_WANT_READ || st == KM_TLS_WANT_WRITE) {
            c->write_block = st;
            return;
        }
        if (st == KM_TLS_CLOSED)
            km_fail(&e, "write to %s: the peer closed the TLS session", c->peer);
        if (st != KM_TLS_OK) {
            km_net__fail(c, &e);
            return;
        }
        advance(c, n);
    }
    c->write_block = KM_TLS_WANT_WRITE;
    km_net__forward_resume(c);
    km_net__enter(c);
    if (c->h.on_drain)
        c->h.on_drain(c, c->ud);
    km_net__leave(c);
}
