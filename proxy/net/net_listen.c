/* km_net listener: accepts on the loop and hands fds to the owner. */
#include "net_private.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define ACCEPT_BURST 64          /* per event, so a connect storm cannot starve open connections */
#define FD_EXHAUSTED_PAUSE 0.5   /* seconds: EMFILE would otherwise spin the loop */

struct km_net_listener {
    struct ev_loop *loop;
    ev_io io;
    ev_timer retry;
    int fd;
    uint16_t port;
    km_net_accept_fn fn;
    void *ud;
    bool in_callback, freed;   /* km_net_listener_free from inside fn is deferred */
};

static void peer_name(const struct sockaddr_storage *ss, char *out, size_t cap)
{
    char host[INET6_ADDRSTRLEN] = "?";
    unsigned port = 0;
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)ss;
        inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
        port = ntohs(in->sin_port);
    } else if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)ss;
        inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
        port = ntohs(in6->sin6_port);
    }
    snprintf(out, cap, ss->ss_family == AF_INET6 ? "[%s]:%u" : "%s:%u", host, port);
}

static void on_accept(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)revents;
    km_net_listener *l = w->data;
    for (int i = 0; i < ACCEPT_BURST; i++) {
        struct sockaddr_storage ss;
        socklen_t len = sizeof ss;
        int fd = accept4(l->fd, (struct sockaddr *)&ss, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                ev_io_stop(loop, &l->io);
                ev_timer_start(loop, &l->retry);
            }
            return; /* EAGAIN, or a connection that died while queued: nothing to do */
        }
        char peer[INET6_ADDRSTRLEN + 16];
        peer_name(&ss, peer, sizeof peer);
        l->in_callback = true;
        l->fn(l, fd, peer, l->ud);
        l->in_callback = false;
        if (l->freed) {
            free(l);
            return;
        }
    }
}

static void on_retry(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)revents;
    km_net_listener *l = w->data;
    ev_io_start(loop, &l->io);
}

/* host NULL: every local address (AI_PASSIVE). */
static int bind_listen(km_net_listener *l, const char *host, uint16_t port, int backlog, km_err *err)
{
    const char *shown = host ? host : "*";
    char service[8];
    snprintf(service, sizeof service, "%u", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *res;
    int rc = getaddrinfo(host, service, &hints, &res);
    if (rc)
        return km_fail(err, "listen on %s:%u: cannot resolve: %s", shown, port, gai_strerror(rc));
    l->fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    if (l->fd < 0 || setsockopt(l->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
        bind(l->fd, res->ai_addr, res->ai_addrlen) || listen(l->fd, backlog)) {
        rc = km_fail(err, "listen on %s:%u: %s", shown, port, strerror(errno));
        freeaddrinfo(res);
        return rc;
    }
    freeaddrinfo(res);
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    if (getsockname(l->fd, (struct sockaddr *)&ss, &len))
        return km_fail(err, "listen on %s:%u: getsockname: %s", shown, port, strerror(errno));
    l->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                              : ((struct sockaddr_in *)&ss)->sin_port);
    return 0;
}

km_net_listener *km_net_listen(struct ev_loop *loop, const char *host, uint16_t port, km_net_accept_fn fn,
                               void *ud, km_err *err)
{
    return km_net_listen_backlog(loop, host, port, 128, fn, ud, err);
}

km_net_listener *km_net_listen_detached(const char *host, uint16_t port, int backlog, km_net_accept_fn fn, void *ud,
                                        km_err *err)
{
    if (!fn)
        return km_fail(err, "listen on %s:%u: no accept callback", host ? host : "*", port), NULL;
    km_net_listener *l = calloc(1, sizeof *l);
    if (!l)
        return km_fail(err, "listen: out of memory"), NULL;
    l->fd = -1;
    l->fn = fn;
    l->ud = ud;
    if (bind_listen(l, host, port, backlog, err)) {
        km_net_listener_free(l);
        return NULL;
    }
    ev_io_init(&l->io, on_accept, l->fd, EV_READ);
    ev_timer_init(&l->retry, on_retry, FD_EXHAUSTED_PAUSE, 0.);
    l->io.data = l->retry.data = l;
    return l;
}

void km_net_listener_start(km_net_listener *l, struct ev_loop *loop)
{
    if (l->loop || l->fd < 0)
        return;
    l->loop = loop;
    ev_io_start(loop, &l->io);
}

km_net_listener *km_net_listen_backlog(struct ev_loop *loop, const char *host, uint16_t port, int backlog,
                                       km_net_accept_fn fn, void *ud, km_err *err)
{
    km_net_listener *l = km_net_listen_detached(host, port, backlog, fn, ud, err);
    if (l)
        km_net_listener_start(l, loop);
    return l;
}

uint16_t km_net_listener_port(const km_net_listener *l) { return l->port; }

void km_net_listener_free(km_net_listener *l)
{
    if (!l || l->freed)
        return;
    if (l->fd >= 0) {
        if (l->loop) {
            ev_io_stop(l->loop, &l->io);
            ev_timer_stop(l->loop, &l->retry);
        }
        close(l->fd);
        l->fd = -1;
    }
    l->freed = true;
    if (!l->in_callback)
        free(l);
}
