/* One proxied client: its connection, its upstream connection, and the two
 * parsers that follow frame boundaries while bytes stream through.
 *
 * Requests: the size and a header prefix are held (at most 64 KiB), then the
 * rest streams.  Responses: size + correlation id are held; the response is
 * paired with the oldest request in flight (a broker answers in order), then
 * streams, unless it carries broker addresses and is held whole to rewrite. */
#include "inline_private.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define WHOLE_KEEP (1u << 20) /* a rewrite buffer larger than this is given back after use */

static size_t min_size(size_t a, uint64_t b)
{
    return b < a ? (size_t)b : a;
}

/* ---- lifecycle ------------------------------------------------------------------ */

void inl_session_free(inl_session *s)
{
    km_inline *p = s->p;
    inl_worker *w = s->w;
    if (s->prev)
        s->prev->next = s->next;
    else
        w->sessions = s->next;
    if (s->next)
        s->next->prev = s->prev;
    __atomic_sub_fetch(&w->assigned, 1, __ATOMIC_RELAXED);
    __atomic_sub_fetch(&p->open, 1, __ATOMIC_RELAXED);
    pthread_mutex_lock(&p->lock);
    inl_ip_release(p, s->ip);
    pthread_mutex_unlock(&p->lock);
    ev_timer_stop(w->loop, &s->timer);
    ev_timer_stop(w->loop, &s->up_retry);
    km_net_close(s->client);
    km_net_close(s->up);
    inl_capture_close(s);
    inl_tls_unref(s->client_tls);
    inl_tls_unref(s->up_tls);
    km_buf_free(&s->rs.whole);
    free(s->rq.prefix);
    free(s->ring);
    free(s);
    inl_memory_session_ended(w);
}

/* Ends the session for a fault: one log line naming the client and why. */
static void cut(inl_session *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void cut(inl_session *s, const char *fmt, ...)
{
    char why[700];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    char rname[48];
    INL_ADD(s->w->stats.cut, 1);
    inl_count_cut(s->w, s->route->broker_id);
    inl_log_conn(s->p, INL_LOG_CUT, "cut client %s (%s): %s", s->peer, inl_route_name(s->route, rname), why);
    inl_session_free(s);
}

/* ---- back-pressure ----------------------------------------------------------------- */

static void pause_client(inl_session *s)
{
    bool paused = s->client_bp || s->client_full || !s->up_ready; /* held while its broker is dialled */
    if (!paused && s->req_paused && s->req_started) /* the time we held it back is not the client's */
        s->req_started = ev_now(s->w->loop);
    s->req_paused = paused;
    if (s->client)
        km_net_pause(s->client, paused);
}

static void note_high_water(inl_session *s)
{
    uint64_t held = s->rs.whole.len + s->rq.have;
    if (s->client)
        held += km_net_queued(s->client);
    if (s->up)
        held += km_net_queued(s->up);
    INL_MAX(s->w->stats.buffered_high_water, held);
}

/* Queues bytes (a head, may be empty, then d) towards one side; pauses the other side once
 * that side holds more than the per-connection bound.  -1 after cutting the session. */
static int send_now(inl_session *s, bool upward, const uint8_t *head, size_t hlen, const uint8_t *d, size_t n)
{
    km_net_conn *to = upward ? s->up : s->client;
    km_err e = {{0}};
    if (!to)
        return 0; /* that side is gone and the session is ending: drop */
    if (hlen ? km_net_send_pair(to, head, hlen, d, n, &e) : km_net_send(to, d, n, &e)) {
        cut(s, "%s", e.msg);
        return -1;
    }
    note_high_water(s);
    n += hlen;
    if (upward) {
        INL_ADD(s->w->stats.bytes_up, n);
        if (!s->client_bp && km_net_queued(to) > s->p->buffer_bytes) {
            s->client_bp = true;
            pause_client(s);
        }
    } else {
        INL_ADD(s->w->stats.bytes_down, n);
        if (!s->up_bp && km_net_queued(to) > s->p->buffer_bytes && s->up) {
            s->up_bp = true;
            km_net_pause(s->up, true);
        }
    }
    return 0;
}

/* Sends the bytes gathered from the current read (see emit), after a held head if any. */
static int flush(inl_session *s, bool upward)
{
    inl_span *sp = &s->span[upward];
    size_t hlen = sp->head_len, n = sp->len;
    sp->head_len = sp->len = 0;
    return hlen || n ? send_now(s, upward, sp->head, hlen, sp->ptr, n) : 0;
}

/* A frame head gathered in one of our buffers (it straddled two reads): held so that it goes
 * out in one write with the bytes after it, rather than a send of its own.  The buffer must
 * stay untouched until the flush: see flush_before_copy. */
static int hold_head(inl_session *s, bool upward, const uint8_t *head, size_t n)
{
    if (flush(s, upward))
        return -1;
    s->span[upward].head = head;
    s->span[upward].head_len = n;
    return 0;
}

/* Before the next frame head is copied over a held one. */
static int flush_before_copy(inl_session *s, bool upward)
{
    return s->span[upward].head_len ? flush(s, upward) : 0;
}

/* Bytes that pass unchanged straight out of the read buffer: consecutive ones go out in one
 * send when the read is done, rather than one per frame piece. */
static int emit(inl_session *s, bool upward, const uint8_t *d, size_t n)
{
    inl_span *sp = &s->span[upward];
    if (sp->len && sp->ptr + sp->len == d) {
        sp->len += n;
        return 0;
    }
    if (!sp->len && sp->head_len) { /* the bytes after a held head */
        sp->ptr = d;
        sp->len = n;
        return 0;
    }
    if (flush(s, upward))
        return -1;
    sp->ptr = d;
    sp->len = n;
    return 0;
}

/* Bytes from our own buffers: what was gathered before goes first. */
static int forward(inl_session *s, bool upward, const uint8_t *d, size_t n)
{
    return flush(s, upward) ? -1 : send_now(s, upward, NULL, 0, d, n);
}

static void connect_upstream(inl_session *s);
static void offer_splice(inl_session *s, bool upward);

/* ---- timers ------------------------------------------------------------------------ */

/* The oldest request's deadline: what it allows the broker, then proxy.request.timeout.ms. */
static ev_tstamp request_due(const inl_session *s)
{
    const inl_inflight *q = &s->ring[s->ring_head];
    return q->started + q->allowance + s->p->request_timeout;
}

/* A request the client started and has not finished (its clock stops while we hold it back). */
static bool reading_late(const inl_session *s, ev_tstamp now)
{
    return s->req_started && !s->req_paused && now - s->req_started >= s->p->read_timeout;
}

static void arm_timer(inl_session *s)
{
    km_inline *p = s->p;
    ev_tstamp due = s->ring_count ? request_due(s) : s->last_activity + p->idle_timeout;
    if (s->req_started && !s->req_paused && s->req_started + p->read_timeout < due)
        due = s->req_started + p->read_timeout;
    ev_tstamp in = due - ev_now(s->w->loop);
    s->timer_due = due;
    ev_timer_stop(s->w->loop, &s->timer);
    ev_timer_set(&s->timer, in > 0.001 ? in : 0.001, 0.);
    ev_timer_start(s->w->loop, &s->timer);
}

static void on_timer(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)revents;
    inl_session *s = w->data;
    km_inline *p = s->p;
    ev_tstamp now = ev_now(loop);
    if (reading_late(s, now)) {
        cut(s, "the client sent part of a request but not the rest within proxy.request.read.timeout.ms=%.0f",
            p->read_timeout * 1000);
    } else if (s->ring_count && now >= request_due(s)) {
        const inl_inflight *q = &s->ring[s->ring_head];
        const char *api = km_api_name(q->api_key);
        char allowed[96] = "";
        if (q->allowance > 0)
            snprintf(allowed, sizeof allowed, " the %.0f ms the request allows plus", q->allowance * 1000);
        cut(s, "upstream %s:%u did not answer %s v%d (correlation id %d) within%s proxy.request.timeout.ms=%.0f",
            s->up_host, s->up_port, api ? api : "an unknown API", q->api_version, q->correlation_id,
            allowed, p->request_timeout * 1000);
    } else if (!s->ring_count && now - s->last_activity >= p->idle_timeout) {
        char rname[48];
        inl_log(p, 2, "closed client %s (%s): idle for proxy.idle.timeout.ms=%.0f", s->peer,
                inl_route_name(s->route, rname), p->idle_timeout * 1000);
        inl_session_free(s);
    } else {
        arm_timer(s);
    }
}

/* ---- requests in flight ---------------------------------------------------------------- */

static int push_inflight(inl_session *s, const inl_inflight *q)
{
    if (s->ring_count == s->ring_cap) {
        size_t cap = s->ring_cap ? s->ring_cap * 2 : 16;
        inl_inflight *grown = malloc(cap * sizeof *grown);
        if (!grown)
            return -1;
        for (size_t i = 0; i < s->ring_count; i++)
            grown[i] = s->ring[(s->ring_head + i) % s->ring_cap];
        free(s->ring);
        s->ring = grown;
        s->ring_cap = cap;
        s->ring_head = 0;
    }
    s->ring[(s->ring_head + s->ring_count++) % s->ring_cap] = *q;
    if (s->ring_count == 1)
        arm_timer(s); /* the request deadline may come before the idle one */
    if (s->ring_count >= INL_INFLIGHT_MAX) {
        s->client_full = true;
        pause_client(s);
    }
    return 0;
}

static bool pop_inflight(inl_session *s, inl_inflight *out)
{
    if (!s->ring_count)
        return false;
    *out = s->ring[s->ring_head];
    s->ring_head = (s->ring_head + 1) % s->ring_cap;
    s->ring_count--;
    if (s->ring_count) { /* a broker works on one request of a connection at a time: the next starts now */
        inl_inflight *next = &s->ring[s->ring_head];
        ev_tstamp now = ev_now(s->w->loop);
        if (next->started < now)
            next->started = now;
        if (request_due(s) < s->timer_due)
            arm_timer(s);
    }
    if (s->client_full && s->ring_count < INL_INFLIGHT_MAX) {
        s->client_full = false;
        pause_client(s);
    }
    return true;
}

/* ---- request header ------------------------------------------------------------------ */

static int skip_string(km_reader *r, bool compact, const char *what, km_err *err)
{
    int64_t len;
    if (compact) {
        uint32_t n;
        if (km_read_uvarint(r, &n, what, err))
            return -1;
        len = (int64_t)n - 1;
    } else {
        int16_t n;
        if (km_read_i16(r, &n, what, err))
            return -1;
        len = n;
    }
    const uint8_t *ignored;
    return len <= 0 ? 0 : km_read_raw(r, (size_t)len, &ignored, what, err);
}

/* Positions r after the request header (api key, version and correlation id already read). */
static int skip_header_rest(km_reader *r, int16_t key, int16_t ver, km_err *err)
{
    int16_t hv = km_request_header_version(key, ver);
    if (hv >= 1 && skip_string(r, false, "client id", err))
        return -1;
    if (hv < 2)
        return 0;
    uint32_t ntags;
    if (km_read_uvarint(r, &ntags, "header tagged field count", err))
        return -1;
    for (uint32_t i = 0; i < ntags; i++) {
        uint32_t tag, size;
        const uint8_t *ignored;
        if (km_read_uvarint(r, &tag, "header tag", err) || km_read_uvarint(r, &size, "header tag size", err) ||
            km_read_raw(r, size, &ignored, "header tag data", err))
            return -1;
    }
    return 0;
}

/* Produce's acks: after the transactional id from v3 (compact from v9). */
static int produce_acks(km_reader *r, int16_t ver, int16_t *acks, km_err *err)
{
    if (ver >= 3 && skip_string(r, ver >= 9, "transactional id", err))
        return -1;
    return km_read_i16(r, acks, "acks", err);
}

/* Token round trips after a SaslHandshake v0 for mechanisms whose exchange
 * has a known length; 0: follow the rest of the connection unparsed.
 * Kafka's SaslServerAuthenticator answers every client token with one
 * size-prefixed token (empty for PLAIN). */
static int sasl_rounds(km_str mechanism)
{
    if (km_str_eq(mechanism, "PLAIN") || km_str_eq(mechanism, "OAUTHBEARER"))
        return 1;
    if (km_str_eq(mechanism, "SCRAM-SHA-256") || km_str_eq(mechanism, "SCRAM-SHA-512"))
        return 2;
    return 0;
}

static void note_sasl_handshake(inl_session *s, km_reader *r)
{
    km_arena arena;
    km_arena_init(&arena, 1u << 20);
    km_sasl_handshake_request req;
    km_err ignored;
    s->sasl_raw_pending = true;
    s->sasl_rounds_on_ok = 0;
    if (!km_decode_from(&km_sasl_handshake_request_desc, 0, r, &req, &arena, &ignored))
        s->sasl_rounds_on_ok = sasl_rounds(req.mechanism);
    km_arena_free(&arena);
}

/* Grows the prefix to hold more of the request (up to INL_REQ_PREFIX_MAX); false when it cannot. */
static bool grow_prefix(inl_session *s, uint32_t size)
{
    inl_req_parser *q = &s->rq;
    size_t plen = q->want - 4, limit = size < INL_REQ_PREFIX_MAX ? size : INL_REQ_PREFIX_MAX;
    if (plen >= limit)
        return false;
    size_t want = plen * 8 < limit ? plen * 8 : limit;
    uint8_t *grown = realloc(q->prefix, 4 + want);
    if (!grown)
        return false;
    q->prefix = grown;
    q->want = 4 + want;
    return true;
}

/* A request gathered whole for the capture and/or the inspection of controller RPCs. */
static void request_gathered(inl_session *s)
{
    if (s->req_inspect && !s->cap_req.oom)
        inl_inspect_post(s->p, s->req_api, s->req_version, s->cap_req.data, s->cap_req.len);
    if (s->req_capture) {
        inl_capture_frame(s, KM_CAPTURE_C2S, &s->cap_req); /* resets it */
    } else {
        if (s->cap_req.cap > INL_CAPTURE_FRAME_MAX / 4)
            km_buf_free(&s->cap_req);
        km_buf_reset(&s->cap_req);
    }
    s->cap_req_on = false;
}

/* Notes one request from its first 4 + plen bytes (size included): pairs it for its response,
 * sets up the streaming of the rest.  0, -1 after cutting the session, or 1 when the header (or
 * Produce's acks) runs past the bytes given and the copied prefix has grown to gather more. */
static int note_request(inl_session *s, const uint8_t *frame, size_t plen, bool can_grow)
{
    uint32_t size = km_be32(frame);
    km_reader r;
    km_reader_init(&r, frame + 4, plen);
    int16_t key, ver, acks = -1;
    int32_t corr;
    km_err e = {{0}};
    km_read_i16(&r, &key, "api key", &e), km_read_i16(&r, &ver, "api version", &e), km_read_i32(&r, &corr, "", &e);
    const km_message_desc *md = km_find_message(KM_K_REQUEST, key);
    bool known = md && km_version_in(md->valid, ver);
    if (ver < 0) {
        cut(s, "request with api key %d, correlation id %d: api version %d is negative", key, corr, ver);
        return -1;
    }
    bool bad = known && (skip_header_rest(&r, key, ver, &e) || (key == KM_API_PRODUCE && produce_acks(&r, ver, &acks, &e)));
    if (bad && can_grow && grow_prefix(s, size))
        return 1;
    if (bad) {
        cut(s, "bad %s v%d request (correlation id %d)%s: %s", km_api_name(key), ver, corr,
            plen < size ? " within its first 64 KiB" : "", e.msg);
        return -1;
    }
    int32_t hold_ms = 0;
    if (known && inl_request_allowance(&r, key, ver, acks, &hold_ms, &e)) {
        if (can_grow && grow_prefix(s, size))
            return 1;
        hold_ms = 0; /* malformed, or its timeout lies past the first 64 KiB: the broker decides */
    }
    if (known && key == KM_API_JOIN_GROUP)
        s->rebalance_ms = hold_ms;
    else if (known && key == KM_API_SYNC_GROUP) /* followers wait for the leader's assignment, */
        hold_ms = s->rebalance_ms;                /* up to the group's rebalance timeout */
    if (!known)
        INL_ADD(s->w->stats.unknown_api, 1); /* forwarded untouched: the broker decides */
    else if (key == KM_API_SASL_HANDSHAKE && ver == 0)
        note_sasl_handshake(s, &r);
    inl_inflight in = {corr, key, ver, ev_now(s->w->loop),
                       !s->opaque && inl_capture_wanted(s->p, s->route->broker_id, key, size),
                       ev_now(s->w->loop), hold_ms > 0 ? hold_ms / 1000. : 0};
    s->req_capture = in.capture;
    s->req_inspect = known && inl_inspect_wanted(s->p, key);
    s->req_api = key, s->req_version = ver;
    if (s->req_capture || s->req_inspect) {
        s->cap_req_on = true;
        km_buf_put(&s->cap_req, frame + 4, plen);
    }
    if (known && key == KM_API_PRODUCE && acks == 0) { /* the broker never answers */
        s->acks0[s->acks0_next % INL_ACKS0_REMEMBERED] = corr;
        s->acks0_version[s->acks0_next++ % INL_ACKS0_REMEMBERED] = ver;
    } else if (push_inflight(s, &in)) {
        cut(s, "out of memory tracking requests in flight");
        return -1;
    }
    INL_ADD(s->w->stats.requests, 1);
    inl_count_request(s->w, s->route->broker_id, key, size + 4u);
    INL_MAX(s->w->stats.largest_frame, size + 4u);
    s->rq.left = size - plen;
    s->rq.have = 0;
    s->rq.want = 0;
    if (s->cap_req_on && !s->rq.left)
        request_gathered(s);
    return 0;
}

/* The copied prefix is complete. */
static int request_ready(inl_session *s)
{
    size_t plen = s->rq.want - 4;
    int rc = note_request(s, s->rq.prefix, plen, true);
    return rc ? (rc > 0 ? 0 : -1) : hold_head(s, true, s->rq.prefix, 4 + plen);
}

/* ---- the request direction ------------------------------------------------------------- */

/* -1 after cutting the session for a size no request may have. */
static int check_request_size(inl_session *s, const uint8_t *p)
{
    uint32_t size = km_be32(p);
    const char *why = size > INT32_MAX             ? "is negative"
                      : size > s->p->max_frame     ? "exceeds proxy.max.frame.bytes"
                      : !s->sasl_raw_rounds && size < 8 ? "is too short for a request header"
                                                   : NULL;
    if (!why)
        return 0;
    bool tls = p[0] == 0x16 && p[1] == 0x03;
    cut(s, "frame size %d %s (limit %zu)%s", (int32_t)size, why, s->p->max_frame,
        tls ? ": the client is speaking TLS to a plaintext listener" : "");
    return -1;
}

static int request_size_ready(inl_session *s)
{
    inl_req_parser *q = &s->rq;
    uint32_t size = km_be32(q->prefix);
    if (check_request_size(s, q->prefix))
        return -1;
    if (s->sasl_raw_rounds) { /* a raw SASL token: no header to read */
        q->left = size;
        q->have = 0;
        return forward(s, true, q->prefix, 4);
    }
    q->want = 4 + (size < INL_REQ_PREFIX_FIRST ? size : INL_REQ_PREFIX_FIRST);
    return 0;
}

/* A request whose whole prefix is in d: read in place, no copy; its bytes join the span.
 * The bytes taken, 0 to use the copying path, -1 once the session is gone. */
static long request_in_place(inl_session *s, const uint8_t *d, size_t n)
{
    if (n < 4 || s->sasl_raw_rounds)
        return 0;
    uint32_t size = km_be32(d);
    if (check_request_size(s, d))
        return -1;
    size_t full = 4 + (size < INL_REQ_PREFIX_MAX ? size : INL_REQ_PREFIX_MAX);
    if (n < full)
        return 0;
    if (note_request(s, d, full - 4, false))
        return -1;
    return emit(s, true, d, full) ? -1 : (long)full;
}

/* Takes what it can of d; the count taken, or -1 once the session is gone. */
static long request_step(inl_session *s, const uint8_t *d, size_t n)
{
    inl_req_parser *q = &s->rq;
    if (s->opaque || q->left) {
        size_t k = s->opaque ? n : min_size(n, q->left);
        if (emit(s, true, d, k))
            return -1;
        if (!s->opaque)
            q->left -= k;
        if (s->cap_req_on) {
            km_buf_put(&s->cap_req, d, k);
            if (!q->left)
                request_gathered(s);
        }
        return (long)k;
    }
    if (q->have == 0) {
        long k = request_in_place(s, d, n);
        if (k)
            return k;
    }
    if (flush_before_copy(s, true))
        return -1;
    size_t goal = q->have < 4 ? 4 : q->want, k = min_size(n, goal - q->have);
    memcpy(q->prefix + q->have, d, k);
    q->have += k;
    if (q->have == 4 && goal == 4)
        return request_size_ready(s) ? -1 : (long)k;
    if (q->have == q->want && q->have > 4)
        return request_ready(s) ? -1 : (long)k;
    return (long)k;
}

/* The read deadline: from a request's first byte to its last (proxy.request.read.timeout.ms). */
static void track_request_read(inl_session *s)
{
    bool inside = s->rq.have || s->rq.left;
    if (!inside) {
        s->req_started = 0;
    } else if (!s->req_started) {
        s->req_started = ev_now(s->w->loop);
        arm_timer(s);
    }
}

static size_t client_bytes(inl_session *s, const uint8_t *d, size_t len)
{
    s->last_activity = ev_now(s->w->loop);
    size_t off = 0;
    while (off < len && !s->client_bp && !s->client_full) {
        long k = request_step(s, d + off, len - off);
        if (k < 0)
            return len; /* s and c are gone: the count is not used */
        off += (size_t)k;
    }
    track_request_read(s);
    if (flush(s, true))
        return len;
    if (off == len)
        offer_splice(s, true);
    return off;
}

static size_t on_client_bytes(km_net_conn *c, const uint8_t *d, size_t len, void *ud)
{
    (void)c;
    inl_worker *w = ((inl_session *)ud)->w; /* the session may end inside */
    ev_tstamp t0 = ev_time();
    size_t took = client_bytes(ud, d, len);
    inl_count_proxy_time(w, ev_time() - t0);
    return took;
}

/* ---- the response direction --------------------------------------------------------------- */

static void response_done(inl_session *s)
{
    if (s->cap_resp_on) {
        inl_capture_frame(s, KM_CAPTURE_S2C, &s->cap_resp);
        s->cap_resp_on = false;
    }
    INL_ADD(s->w->stats.responses, 1);
    if (s->rs.whole.cap > WHOLE_KEEP)
        km_buf_free(&s->rs.whole);
    km_buf_reset(&s->rs.whole);
    s->rs.collecting = false;
    s->rs.have = 0;
}

/* SaslHandshake v0 succeeded: raw tokens follow (Kafka's SaslServerAuthenticator). */
static void note_sasl_response(inl_session *s, const uint8_t *payload, size_t len)
{
    s->sasl_raw_pending = false;
    if (len < 6 || payload[4] || payload[5]) /* header v0 (correlation id) then error_code */
        return;
    if (s->sasl_rounds_on_ok)
        s->sasl_raw_rounds = s->sasl_rounds_on_ok;
    else {
        s->opaque = true;
        inl_log(s->p, 2, "client %s: SASL after SaslHandshake v0 with a mechanism of unknown length; "
                "the rest of the connection passes unparsed", s->peer);
    }
}

static int whole_response_ready(inl_session *s)
{
    inl_resp_parser *rs = &s->rs;
    const uint8_t *payload = rs->whole.data + 4;
    size_t len = rs->whole.len - 4;
    inl_count_response_error(s->w, s->route->broker_id, rs->req.api_key, rs->req.api_version, payload + 4, len - 4);
    if (rs->req.capture && rs->req.api_key == KM_API_SASL_HANDSHAKE)
        inl_capture_bytes(s, KM_CAPTURE_S2C, payload, len);
    if (rs->req.api_key == KM_API_SASL_HANDSHAKE) {
        note_sasl_response(s, payload, len);
        int rc = forward(s, false, rs->whole.data, rs->whole.len);
        if (!rc)
            response_done(s);
        return rc;
    }
    km_buf out;
    km_buf_init(&out);
    km_err e = {{0}};
    int rc = inl_rewrite_response(s->w, rs->req.api_key, rs->req.api_version, payload, len, &out, &e);
    if (rc < 0) {
        km_buf_free(&out);
        cut(s, "cannot rewrite the addresses in upstream %s:%u's %s v%d response: %s", s->up_host,
            s->up_port, km_api_name(rs->req.api_key), rs->req.api_version, e.msg);
        return -1;
    }
    if (rc == 1)
        INL_ADD(s->w->stats.rewritten, 1);
    if (rs->req.capture) /* what the client gets: the rewritten frame */
        inl_capture_bytes(s, KM_CAPTURE_S2C, rc == 1 ? out.data + 4 : payload, rc == 1 ? out.len - 4 : len);
    rc = rc == 1 ? forward(s, false, out.data, out.len) : forward(s, false, rs->whole.data, rs->whole.len);
    km_buf_free(&out);
    if (!rc)
        response_done(s);
    return rc;
}

/* Kafka never answers a Produce with acks=0 (KafkaApis.handleProduceRequest sends no
 * response), but some brokers do (librdkafka's mock cluster).  Such an answer is passed on
 * untouched, as the client's own library expects to see and drop it. */
static bool acks0_answer(inl_session *s, int32_t corr, inl_inflight *out)
{
    if (s->ring_count && s->ring[s->ring_head].correlation_id == corr)
        return false;
    size_t n = s->acks0_next < INL_ACKS0_REMEMBERED ? s->acks0_next : INL_ACKS0_REMEMBERED;
    for (size_t i = 0; i < n; i++)
        if (s->acks0[i] == corr) {
            *out = (inl_inflight){corr, KM_API_PRODUCE, s->acks0_version[i], 0, false, 0, 0};
            return true;
        }
    return false;
}

/* Size + correlation id are in (head: 8 bytes, in the read buffer or copied): pair, then
 * stream or collect. */
static int response_head_ready(inl_session *s, const uint8_t *head, bool in_place)
{
    inl_resp_parser *rs = &s->rs;
    uint32_t size = km_be32(head);
    int32_t corr = (int32_t)km_be32(head + 4);
    if (size < 4 || size > INT32_MAX) {
        cut(s, "upstream %s:%u sent a response frame of size %d", s->up_host, s->up_port,
            (int32_t)size);
        return -1;
    }
    if (!acks0_answer(s, corr, &rs->req) && (!pop_inflight(s, &rs->req) || rs->req.correlation_id != corr)) {
        cut(s, "upstream %s:%u answered correlation id %d, but %s", s->up_host, s->up_port, corr,
            s->ring_count || rs->req.api_key ? "responses must come in request order" : "no request was in flight");
        return -1;
    }
    INL_MAX(s->w->stats.largest_frame, size + 4u);
    inl_count_response(s->w, s->route->broker_id, rs->req.api_key, size + 4u,
                       rs->req.sent > 0 ? ev_now(s->w->loop) - rs->req.sent : 0);
    bool hold = inl_api_needs_rewrite(rs->req.api_key) || (rs->req.api_key == KM_API_SASL_HANDSHAKE && s->sasl_raw_pending);
    if (hold && size > s->p->max_frame) {
        cut(s, "upstream %s:%u's %s response of %u bytes exceeds proxy.max.frame.bytes", s->up_host,
            s->up_port, km_api_name(rs->req.api_key), size);
        return -1;
    }
    if (hold) {
        rs->collecting = true;
        rs->whole_want = 4 + (size_t)size;
        km_buf_put(&rs->whole, head, 8);
        if (rs->whole.oom) {
            cut(s, "out of memory holding a %u byte response", size);
            return -1;
        }
        return rs->whole.len == rs->whole_want ? whole_response_ready(s) : 0;
    }
    rs->left = size - 4;
    if (in_place ? emit(s, false, head, 8) : hold_head(s, false, head, 8))
        return -1;
    s->cap_resp_on = rs->req.capture && size <= INL_CAPTURE_FRAME_MAX;
    if (s->cap_resp_on)
        km_buf_put(&s->cap_resp, head + 4, 4);
    if (!rs->left)
        response_done(s);
    return 0;
}

/* A raw SASL token from the server (after SaslHandshake v0): size only. */
static int token_head_ready(inl_session *s)
{
    uint32_t size = km_be32(s->rs.prefix);
    if (size > s->p->max_frame) {
        cut(s, "upstream %s:%u sent a SASL token of size %d", s->up_host, s->up_port, (int32_t)size);
        return -1;
    }
    s->rs.left = size;
    s->rs.have = 0;
    if (forward(s, false, s->rs.prefix, 4))
        return -1;
    if (!size)
        s->sasl_raw_rounds--;
    return 0;
}

static long response_step(inl_session *s, const uint8_t *d, size_t n)
{
    inl_resp_parser *rs = &s->rs;
    if (s->opaque)
        return emit(s, false, d, n) ? -1 : (long)n;
    if (rs->collecting) {
        size_t k = min_size(n, rs->whole_want - rs->whole.len);
        km_buf_put(&rs->whole, d, k);
        note_high_water(s);
        if (rs->whole.oom) {
            cut(s, "out of memory holding a %zu byte response", rs->whole_want);
            return -1;
        }
        return rs->whole.len == rs->whole_want && whole_response_ready(s) ? -1 : (long)k;
    }
    if (rs->left) {
        size_t k = min_size(n, rs->left);
        if (emit(s, false, d, k))
            return -1;
        rs->left -= k;
        if (s->cap_resp_on)
            km_buf_put(&s->cap_resp, d, k);
        if (!rs->left && s->sasl_raw_rounds)
            s->sasl_raw_rounds--; /* a token done; at 0 Kafka frames resume */
        else if (!rs->left)
            response_done(s);
        return (long)k;
    }
    if (rs->have == 0 && n >= 8 && !s->sasl_raw_rounds) {
        if (response_head_ready(s, d, true))
            return -1;
        if (!rs->collecting) /* held ones are counted whole */
            inl_count_response_error(s->w, s->route->broker_id, rs->req.api_key, rs->req.api_version, d + 8,
                                     min_size(n - 8, rs->left));
        return 8;
    }
    if (flush_before_copy(s, false))
        return -1;
    size_t goal = s->sasl_raw_rounds ? 4 : 8, k = min_size(n, goal - rs->have);
    memcpy(rs->prefix + rs->have, d, k);
    rs->have += k;
    if (rs->have == goal)
        return (s->sasl_raw_rounds ? token_head_ready(s) : response_head_ready(s, rs->prefix, false)) ? -1 : (long)k;
    return (long)k;
}

/* ---- splice hook ------------------------------------------------------------------------ */

/* km_net moved n more bytes of the frame body being streamed (the read deadline, the idle
 * clock and the byte counters see them as if on_bytes had). */
static void on_spliced(km_net_conn *from, size_t n, void *ud)
{
    inl_session *s = ud;
    s->last_activity = ev_now(s->w->loop);
    if (from == s->client) {
        s->rq.left -= n;
        INL_ADD(s->w->stats.bytes_up, n);
        track_request_read(s);
        return;
    }
    s->rs.left -= n;
    INL_ADD(s->w->stats.bytes_down, n);
    if (!s->rs.left && s->sasl_raw_rounds)
        s->sasl_raw_rounds--;
    else if (!s->rs.left)
        response_done(s);
}

/* After a read that ends inside a frame body passing unchanged (nothing to capture, inspect or
 * rewrite), the rest may skip user space: km_net splices it when both sides allow (plaintext,
 * nothing queued ahead; see km_net_forward) and otherwise on_bytes goes on as before. */
static void offer_splice(inl_session *s, bool upward)
{
    km_net_conn *from = upward ? s->client : s->up, *to = upward ? s->up : s->client;
    uint64_t left = upward ? s->rq.left : s->rs.left;
    bool plain = !s->opaque && (upward ? !s->cap_req_on : !s->cap_resp_on && !s->rs.collecting);
    if (from && to && left && plain)
        km_net_forward(from, to, left, on_spliced);
}

static size_t up_bytes(inl_session *s, const uint8_t *d, size_t len);

static size_t on_up_bytes(km_net_conn *c, const uint8_t *d, size_t len, void *ud)
{
    (void)c;
    inl_worker *w = ((inl_session *)ud)->w;
    ev_tstamp t0 = ev_time();
    size_t took = up_bytes(ud, d, len);
    inl_count_proxy_time(w, ev_time() - t0);
    return took;
}

static size_t up_bytes(inl_session *s, const uint8_t *d, size_t len)
{
    s->last_activity = ev_now(s->w->loop);
    size_t off = 0;
    while (off < len && !s->up_bp) {
        long k = response_step(s, d + off, len - off);
        if (k < 0)
            return len;
        off += (size_t)k;
    }
    if (flush(s, false))
        return len;
    if (off == len)
        offer_splice(s, false);
    return off;
}

/* ---- connection events --------------------------------------------------------------------- */

static void on_client_drain(km_net_conn *c, void *ud)
{
    (void)c;
    inl_session *s = ud;
    if (s->up_bp && s->up) {
        s->up_bp = false;
        km_net_pause(s->up, false);
    }
}

static void on_up_drain(km_net_conn *c, void *ud)
{
    (void)c;
    inl_session *s = ud;
    if (s->client_bp) {
        s->client_bp = false;
        pause_client(s);
    }
}

/* On the SNI listener the handshake's server name picks the broker, then the upstream is dialled. */
static void on_client_ready(km_net_conn *c, void *ud)
{
    inl_session *s = ud;
    s->client_ready = true;
    if (s->route->broker_id != INL_SNI_ROUTE)
        return;
    const char *name = km_net_tls_server_name(c);
    pthread_mutex_lock(&s->p->lock);
    inl_route *r = inl_route_for_sni(s->p, name);
    pthread_mutex_unlock(&s->p->lock);
    if (!r) {
        cut(s, "SNI name '%s' names no broker this proxy serves (names are %s<id>%s; other names go to the "
            "bootstrap upstream, if set)",
            name ? name : "(none)", s->p->sni_prefix ? s->p->sni_prefix : "", s->p->sni_suffix ? s->p->sni_suffix : "");
        return;
    }
    s->route = r;
    connect_upstream(s);
}

static void on_client_close(km_net_conn *c, const km_err *why, void *ud)
{
    (void)c;
    inl_session *s = ud;
    char rname[48];
    s->client = NULL;
    if (!s->client_ready && s->client_tls) {
        INL_ADD(s->w->stats.tls_failures, 1);
        inl_log_conn(s->p, INL_LOG_TLS, "client %s (%s): TLS handshake failed: %s", s->peer, inl_route_name(s->route, rname),
                why ? why->msg : "the client closed the connection");
    } else if (s->rq.have || s->rq.left) {
        INL_ADD(s->w->stats.cut, 1);
        inl_log_conn(s->p, INL_LOG_LEFT, "client %s (%s) left inside a request frame (%s); its upstream "
                "connection is closed", s->peer, inl_route_name(s->route, rname), s->rq.have ? "in its header" : "in its body");
    } else if (why) {
        inl_log(s->p, 2, "client %s (%s): %s", s->peer, inl_route_name(s->route, rname), why->msg);
    }
    inl_session_free(s);
}

static void on_up_ready(km_net_conn *c, void *ud)
{
    (void)c;
    inl_session *s = ud;
    s->up_ready = true;
    pause_client(s);
}

/* The broker could not be dialled.  Closing a client right after accepting it makes clients treat
 * the proxy as broken (kafkajs restarts its consumer each time); held instead, with its requests
 * unread, a client sees a slow connection that works once the broker is back, as long as that is
 * within proxy.upstream.hold.ms, which is below the clients' own request timeouts. */
static void upstream_unreachable(inl_session *s, const char *why)
{
    km_inline *p = s->p;
    ev_tstamp now = ev_now(s->w->loop), held = now - s->up_first_try;
    if (held + s->up_backoff >= p->upstream_hold) {
        cut(s, "cannot reach upstream %s:%u (broker %d)%s: %s", s->up_host, s->up_port,
            s->route->broker_id, p->upstream_hold > 0 ? " within proxy.upstream.hold.ms" : "", why);
        return;
    }
    if (s->up_backoff == 0) {
        char rname[48];
        /* one line per client, rate-limited: a broker down under hundreds of clients must not flood the log */
        inl_log_conn(p, INL_LOG_UPSTREAM, "client %s (%s): upstream %s:%u unreachable (%s); holding the client "
                     "for up to proxy.upstream.hold.ms=%.0f while dialling again", s->peer,
                     inl_route_name(s->route, rname), s->up_host, s->up_port, why, p->upstream_hold * 1000);
    }
    s->up_backoff = s->up_backoff ? s->up_backoff * 2 : 0.05;
    if (s->up_backoff > 1)
        s->up_backoff = 1;
    ev_timer_set(&s->up_retry, s->up_backoff, 0.);
    ev_timer_start(s->w->loop, &s->up_retry);
}

static void on_up_retry(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop, (void)revents;
    connect_upstream(w->data);
}

static void on_up_close(km_net_conn *c, const km_err *why, void *ud)
{
    (void)c;
    inl_session *s = ud;
    s->up = NULL;
    if (why)
        INL_ADD(s->w->stats.upstream_failures, 1);
    if (!s->up_ready && s->client) {
        upstream_unreachable(s, why ? why->msg : "closed while connecting");
        return;
    }
    if (why)
        inl_log_conn(s->p, INL_LOG_UPSTREAM, "client %s: upstream %s:%u (broker %d): %s; closing the client", s->peer,
                s->up_host, s->up_port, s->route->broker_id, why->msg);
    if (s->client)
        km_net_shutdown(s->client); /* what the broker sent still reaches the client */
    else
        inl_session_free(s);
}

/* Gives back what the acceptor counted for a client that never became a session. */
static void start_failed(inl_worker *w, int fd, const char *peer, const char *ip)
{
    inl_log(w->p, 0, "client %s: out of memory", peer);
    close(fd);
    __atomic_sub_fetch(&w->assigned, 1, __ATOMIC_RELAXED);
    __atomic_sub_fetch(&w->p->open, 1, __ATOMIC_RELAXED);
    pthread_mutex_lock(&w->p->lock);
    inl_ip_release(w->p, ip);
    pthread_mutex_unlock(&w->p->lock);
}

void inl_session_start(inl_worker *w, inl_route *r, int fd, const char *peer, const char *ip)
{
    km_inline *p = r->p;
    inl_session *s = calloc(1, sizeof *s);
    km_err err = {{0}};
    if (!s) {
        start_failed(w, fd, peer, ip);
        return;
    }
    s->p = p;
    s->w = w;
    s->route = r;
    snprintf(s->peer, sizeof s->peer, "%s", peer);
    snprintf(s->ip, sizeof s->ip, "%s", ip);
    km_buf_init(&s->rs.whole);
    km_buf_init(&s->cap_req);
    km_buf_init(&s->cap_resp);
    s->rq.prefix = malloc(4 + INL_REQ_PREFIX_FIRST);
    if (!s->rq.prefix) {
        start_failed(w, fd, peer, ip);
        free(s);
        return;
    }
    s->next = w->sessions;
    if (s->next)
        s->next->prev = s;
    w->sessions = s;
    INL_ADD(w->stats.accepted, 1);
    ev_timer_init(&s->timer, on_timer, 1., 0.);
    s->timer.data = s;
    ev_timer_init(&s->up_retry, on_up_retry, 1., 0.);
    s->up_retry.data = s;
    s->last_activity = ev_now(w->loop);
    /* Generous queue limit: pausing at buffer_bytes is what bounds memory; the
     * limit only has to admit one rewritten response on top. */
    pthread_mutex_lock(&p->lock); /* a reload may be swapping them */
    s->client_tls = inl_tls_ref(p->client_tls);
    s->up_tls = inl_tls_ref(p->up_tls);
    pthread_mutex_unlock(&p->lock);
    km_net_opts opts = {.max_frame = p->max_frame, .write_limit = 2 * p->max_frame + 4 * p->buffer_bytes,
                        .tls = s->client_tls ? s->client_tls->ctx : NULL};
    km_net_handlers hc = {.on_ready = on_client_ready, .on_bytes = on_client_bytes, .on_drain = on_client_drain,
                          .on_close = on_client_close};
    s->client = km_net_accept(w->loop, fd, peer, &opts, &hc, s, &err);
    if (!s->client) {
        inl_log(p, 0, "client %s: %s", peer, err.msg);
        inl_session_free(s);
        return;
    }
    arm_timer(s);
    pause_client(s); /* until the upstream is connected */
    if (r->broker_id != INL_SNI_ROUTE) /* else once the handshake names the broker */
        connect_upstream(s);
}

static void connect_upstream(inl_session *s)
{
    km_inline *p = s->p;
    inl_route *r = s->route;
    km_err err = {{0}};
    km_net_opts opts = {.max_frame = p->max_frame, .write_limit = 2 * p->max_frame + 4 * p->buffer_bytes,
                        .tls = s->up_tls ? s->up_tls->ctx : NULL,
                        .tls_name = s->up_tls && !p->tls_cfg.upstream_ssl_check_hostname ? "" : NULL};
    km_net_handlers hu = {.on_ready = on_up_ready, .on_bytes = on_up_bytes, .on_drain = on_up_drain,
                          .on_close = on_up_close};
    if (!s->up_first_try)
        s->up_first_try = ev_now(s->w->loop);
    pthread_mutex_lock(&p->lock); /* discovery may be moving the route */
    snprintf(s->up_host, sizeof s->up_host, "%s", r->up_host);
    s->up_port = r->up_port;
    pthread_mutex_unlock(&p->lock);
    s->up = km_net_connect(s->w->loop, s->up_host, s->up_port, &opts, &hu, s, &err); /* tls_name "": chain only */
    if (!s->up)
        upstream_unreachable(s, err.msg);
}
