/* km_net connections: connect (with fallback over resolved addresses), TLS
 * handshake, watcher bookkeeping and the one-way-out lifecycle. */
#include "net_private.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>


static void on_io(struct ev_loop *loop, ev_io *w, int revents);
static void on_timeout(struct ev_loop *loop, ev_timer *w, int revents);

static void set_active(km_net_conn *c, ev_io *w, bool on)
{
    if (on && !ev_is_active(w))
        ev_io_start(c->loop, w);
    else if (!on && ev_is_active(w))
        ev_io_stop(c->loop, w);
}

void km_net__update_watchers(km_net_conn *c)
{
    bool r = false, w = false;
    switch (c->state) {
    case NET_CONNECTING:
        w = c->fd >= 0;
        break;
    case NET_HANDSHAKE:
        r = c->hs_want == KM_TLS_WANT_READ;
        w = !r;
        break;
    case NET_READY:
        r = (!c->paused && !c->fwd_wait && c->read_block == KM_TLS_WANT_READ) ||
            (c->queued && c->write_block == KM_TLS_WANT_READ);
        w = ((c->queued || c->piped) && c->write_block == KM_TLS_WANT_WRITE) ||
            (!c->paused && c->read_block == KM_TLS_WANT_WRITE);
        break;
    case NET_DEAD:
        break;
    }
    set_active(c, &c->rio, r);
    set_active(c, &c->wio, w);
}

/* Stops everything and releases the fd; the struct itself stays until destroy. */
static void shut(km_net_conn *c)
{
    km_net__tap_close(c);
    km_net__forward_unlink(c);
    set_active(c, &c->rio, false);
    set_active(c, &c->wio, false);
    ev_clear_pending(c->loop, &c->rio); /* fed events must not outlive us */
    ev_clear_pending(c->loop, &c->wio);
    ev_timer_stop(c->loop, &c->timer);
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    c->state = NET_DEAD;
}

static void destroy(km_net_conn *c)
{
    shut(c);
    km_tls_stream_free(c->tls);
    if (c->addrs)
        freeaddrinfo(c->addrs);
    km_net__free_buffers(c);
    free(c);
}

bool km_net__enter(km_net_conn *c)
{
    c->depth++;
    return true;
}

bool km_net__leave(km_net_conn *c)
{
    if (--c->depth == 0 && c->state == NET_DEAD) {
        destroy(c);
        return false;
    }
    return c->state != NET_DEAD;
}

void km_net__fail(km_net_conn *c, const km_err *why)
{
    if (c->state == NET_DEAD)
        return;
    shut(c);
    km_net__enter(c);
    if (c->h.on_close)
        c->h.on_close(c, why, c->ud);
    km_net__leave(c);
}

static void fill_opts(km_net_opts *o, const km_net_opts *in)
{
    *o = in ? *in : (km_net_opts){0};
    if (!o->max_frame)
        o->max_frame = KM_MAX_FRAME_DEFAULT;
    if (!o->write_limit)
        o->write_limit = KM_NET_WRITE_LIMIT_DEFAULT;
    if (!(o->connect_timeout > 0))
        o->connect_timeout = KM_NET_CONNECT_TIMEOUT_DEFAULT;
    o->tls_name = NULL;
}

static km_net_conn *conn_new(struct ev_loop *loop, const km_net_opts *opts, const km_net_handlers *h, void *ud,
                             km_err *err)
{
    km_net_conn *c = calloc(1, sizeof *c); /* the receive buffer comes with the first read (net_io.c) */
    if (!c)
        return km_fail(err, "net: out of memory for a connection"), NULL;
    c->loop = loop;
    c->fd = -1;
    c->pipe[0] = c->pipe[1] = -1;
    fill_opts(&c->opts, opts);
    if (h)
        c->h = *h;
    c->ud = ud;
    ev_io_init(&c->rio, on_io, -1, EV_READ);
    ev_io_init(&c->wio, on_io, -1, EV_WRITE);
    c->rio.data = c->wio.data = c;
    ev_timer_init(&c->timer, on_timeout, c->opts.connect_timeout, 0.);
    c->timer.data = c;
    return c;
}

static void use_fd(km_net_conn *c, int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one); /* fails harmlessly on non-TCP fds */
    c->fd = fd;
    ev_io_set(&c->rio, fd, EV_READ);
    ev_io_set(&c->wio, fd, EV_WRITE);
}

/* Deadlines count from now, not from the loop's cached time, which may be
 * stale after the caller did slow work outside the loop. */
static void arm_deadline(km_net_conn *c)
{
    ev_now_update(c->loop);
    ev_timer_stop(c->loop, &c->timer);
    ev_timer_set(&c->timer, c->opts.connect_timeout, 0.);
    ev_timer_start(c->loop, &c->timer);
}

static void become_ready(km_net_conn *c)
{
    ev_timer_stop(c->loop, &c->timer);
    if (c->closing)
        arm_deadline(c);
    c->state = NET_READY;
    km_net__tap_ready(c);
    c->read_block = KM_TLS_WANT_READ;
    c->write_block = KM_TLS_WANT_WRITE;
    /* TLS may already hold application data that arrived with the handshake. */
    ev_feed_event(c->loop, &c->rio, EV_READ);
    if (c->h.on_ready)
        c->h.on_ready(c, c->ud);
}

static void step_handshake(km_net_conn *c)
{
    km_err e = {{0}};
    km_tls_status st = km_tls_handshake(c->tls, &e);
    if (st == KM_TLS_OK)
        become_ready(c);
    else if (st == KM_TLS_WANT_READ || st == KM_TLS_WANT_WRITE)
        c->hs_want = st;
    else
        km_net__fail(c, &e);
}

static void start_session(km_net_conn *c, const char *tls_name)
{
    if (!c->opts.tls) {
        become_ready(c);
        return;
    }
    km_err e = {{0}};
    c->tls = km_tls_stream_new(c->opts.tls, c->fd, tls_name, &e);
    if (!c->tls) {
        km_net__fail(c, &e);
        return;
    }
    c->state = NET_HANDSHAKE;
    step_handshake(c);
}

static void addr_str(const struct addrinfo *ai, char *out, size_t cap)
{
    char host[INET6_ADDRSTRLEN] = "?", serv[8] = "?";
    getnameinfo(ai->ai_addr, ai->ai_addrlen, host, sizeof host, serv, sizeof serv, NI_NUMERICHOST | NI_NUMERICSERV);
    snprintf(out, cap, ai->ai_family == AF_INET6 ? "[%s]:%s" : "%s:%s", host, serv);
}

/* Starts connecting to the next candidate address; false when none is left
 * (c->last_err then says why the last one failed). */
static bool start_next_addr(km_net_conn *c)
{
    while (c->next_addr) {
        struct addrinfo *ai = c->next_addr;
        c->next_addr = ai->ai_next;
        addr_str(ai, c->addr, sizeof c->addr);
        int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) {
            km_fail(&c->last_err, "connect to %s (%s): socket: %s", c->peer, c->addr, strerror(errno));
            continue;
        }
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 || errno == EINPROGRESS) {
            use_fd(c, fd);
            return true;
        }
        km_fail(&c->last_err, "connect to %s (%s): %s", c->peer, c->addr, strerror(errno));
        close(fd);
    }
    return false;
}

static void finish_connect(km_net_conn *c)
{
    int soerr = 0;
    socklen_t len = sizeof soerr;
    if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &soerr, &len) < 0)
        soerr = errno;
    if (soerr == EINPROGRESS || soerr == EINTR)
        return;
    if (soerr) {
        km_fail(&c->last_err, "connect to %s (%s): %s", c->peer, c->addr, strerror(soerr));
        set_active(c, &c->wio, false);
        close(c->fd);
        c->fd = -1;
        if (!start_next_addr(c))
            km_net__fail(c, &c->last_err);
        return;
    }
    if (c->addrs)
        freeaddrinfo(c->addrs);
    c->addrs = c->next_addr = NULL;
    start_session(c, c->tls_name[0] ? c->tls_name : NULL);
}

static void finish_shutdown(km_net_conn *c)
{
    if (c->tls) {
        km_err ignored;
        km_tls_shutdown(c->tls, &ignored); /* best effort close_notify; never waits */
    }
    km_net__fail(c, NULL);
}

static void on_io(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)loop;
    (void)revents;
    km_net_conn *c = w->data;
    km_net__enter(c);
    switch (c->state) {
    case NET_CONNECTING:
        finish_connect(c);
        break;
    case NET_HANDSHAKE:
        step_handshake(c);
        break;
    case NET_READY:
        /* Both directions are tried on either event: TLS can need the other one. */
        if (c->queued || c->piped)
            km_net__write_ready(c);
        if (c->state == NET_READY && c->closing && !c->queued && !c->piped)
            finish_shutdown(c);
        else if (c->state == NET_READY)
            km_net__read_ready(c);
        break;
    case NET_DEAD:
        break;
    }
    if (km_net__leave(c))
        km_net__update_watchers(c);
}

static void on_timeout(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    km_net_conn *c = w->data;
    km_err e = {{0}};
    km_net__enter(c);
    if (c->closing && c->state == NET_READY)
        km_fail(&e, "shutdown of %s: flush timed out after %.3g s with %zu bytes unsent", c->peer,
                c->opts.connect_timeout, c->queued + c->piped); /* piped: spliced bytes still in its pipe */
    else if (c->fd < 0) /* every address failed at once; reported here so it is always asynchronous */
        e = c->last_err;
    else if (c->state == NET_CONNECTING)
        km_fail(&e, "connect to %s (%s): timed out after %.3g s", c->peer, c->addr, c->opts.connect_timeout);
    else
        km_fail(&e, "TLS handshake with %s: timed out after %.3g s", c->peer, c->opts.connect_timeout);
    km_net__fail(c, &e);
    km_net__leave(c);
}

km_net_conn *km_net_connect(struct ev_loop *loop, const char *host, uint16_t port, const km_net_opts *opts,
                            const km_net_handlers *h, void *ud, km_err *err)
{
    if (!host || !*host || port == 0)
        return km_fail(err, "connect: need a host and a non-zero port (got %s:%u)", host ? host : "(null)", port), NULL;
    if (opts && opts->tls && km_tls_ctx_is_server(opts->tls))
        return km_fail(err, "connect to %s:%u: opts.tls is a server context", host, port), NULL;
    char service[8];
    snprintf(service, sizeof service, "%u", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int rc = getaddrinfo(host, service, &hints, &res);
    if (rc)
        return km_fail(err, "connect to %s:%u: cannot resolve: %s", host, port, gai_strerror(rc)), NULL;
    km_net_conn *c = conn_new(loop, opts, h, ud, err);
    if (!c) {
        freeaddrinfo(res);
        return NULL;
    }
    snprintf(c->peer, sizeof c->peer, strchr(host, ':') ? "[%s]:%u" : "%s:%u", host, port);
    snprintf(c->tls_name, sizeof c->tls_name, "%s", opts && opts->tls_name ? opts->tls_name : host);
    c->addrs = c->next_addr = res;
    c->we_dialled = true;
    c->state = NET_CONNECTING;
    if (start_next_addr(c))
        arm_deadline(c);
    else { /* every address failed at once: report it from the loop, as always */
        ev_timer_set(&c->timer, 0., 0.);
        ev_timer_start(loop, &c->timer);
    }
    km_net__update_watchers(c);
    return c;
}

km_net_conn *km_net_accept(struct ev_loop *loop, int fd, const char *peer, const km_net_opts *opts,
                           const km_net_handlers *h, void *ud, km_err *err)
{
    if (opts && opts->tls && !km_tls_ctx_is_server(opts->tls)) {
        close(fd);
        return km_fail(err, "accept from %s: opts.tls is a client context", peer ? peer : "?"), NULL;
    }
    km_net_conn *c = conn_new(loop, opts, h, ud, err);
    if (!c) {
        close(fd);
        return NULL;
    }
    snprintf(c->peer, sizeof c->peer, "%s", peer ? peer : "(accepted)");
    snprintf(c->tls_name, sizeof c->tls_name, "%s", c->peer); /* servers: a label for messages */
    use_fd(c, fd);
    /* Handled like a connect that already succeeded: the first writable event
     * starts the session on the loop, so on_ready never runs inside the caller. */
    c->state = NET_CONNECTING;
    arm_deadline(c);
    km_net__update_watchers(c);
    return c;
}

int km_net_send(km_net_conn *c, const void *data, size_t len, km_err *err)
{
    return km_net__enqueue(c, NULL, 0, data, len, err);
}

int km_net_send_frame(km_net_conn *c, const void *payload, size_t len, km_err *err)
{
    if (len > INT32_MAX)
        return km_fail(err, "send to %s: a %zu byte payload does not fit a Kafka frame", c->peer, len);
    uint8_t size[4] = {(uint8_t)(len >> 24), (uint8_t)(len >> 16), (uint8_t)(len >> 8), (uint8_t)len};
    return km_net__enqueue(c, size, 4, payload, len, err);
}

int km_net_send_pair(km_net_conn *c, const void *first, size_t flen, const void *then, size_t len, km_err *err)
{
    return km_net__enqueue(c, first, flen, then, len, err);
}

size_t km_net_queued(const km_net_conn *c) { return c->queued + c->piped; }
void km_net_get_stats(const km_net_conn *c, km_net_stats *out) { *out = c->stats; }
size_t km_net_room(const km_net_conn *c) { return c->opts.write_limit - c->queued; }
bool km_net_is_ready(const km_net_conn *c) { return c->state == NET_READY; }
const char *km_net_tls_server_name(const km_net_conn *c) { return c->tls ? km_tls_server_name(c->tls) : NULL; }
const char *km_net_peer(const km_net_conn *c) { return c->peer; }
int km_net_fd(const km_net_conn *c) { return c->fd; }
void km_net_set_userdata(km_net_conn *c, void *ud) { c->ud = ud; }

void km_net_pause(km_net_conn *c, bool paused)
{
    if (c->state == NET_DEAD || c->paused == paused)
        return;
    c->paused = paused;
    if (!paused && c->state == NET_READY) /* frames may be waiting in rbuf or inside TLS */
        ev_feed_event(c->loop, &c->rio, EV_READ);
    km_net__update_watchers(c);
}

void km_net_shutdown(km_net_conn *c)
{
    if (c->state == NET_DEAD || c->closing)
        return;
    c->closing = true;
    c->paused = true; /* no more frames for a caller that is done with us */
    if (c->state == NET_READY) {
        arm_deadline(c);
        ev_feed_event(c->loop, &c->wio, EV_WRITE); /* finishes on the loop, even with nothing queued */
    }
    km_net__update_watchers(c);
}

void km_net_close(km_net_conn *c)
{
    if (!c || c->state == NET_DEAD) /* also: closing from inside on_close */
        return;
    if (c->tls && c->state == NET_READY) {
        km_err ignored;
        km_tls_shutdown(c->tls, &ignored); /* best effort close_notify; never waits */
    }
    shut(c);
    if (c->depth == 0)
        destroy(c);
}
