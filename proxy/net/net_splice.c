/* km_net forwarding in the kernel: bytes a proxy passes on unchanged go from one plaintext socket
 * into a pipe and from the pipe into another socket with splice(2), never through user space.
 *
 * The pipe belongs to the destination, as the front of its write queue: spliced bytes that the
 * destination's socket could not take yet wait there, go out before anything queued later, and
 * still go out when the source has gone (a broker's last response before it closes).  It exists
 * only while a source is linked to that destination or bytes wait in it, so an idle or copying
 * connection holds no pipe descriptors.  A link outlives its forward ("parked") while the source
 * keeps reading without a pause, so the next frame of a busy stream reuses the pipe instead of
 * paying pipe2 + fcntl + 2 close again; the source's first drained read unlinks it.  The source splices in only once the pipe and the queue
 * are empty, so the pipe holds at most one step's bytes and its capacity bounds the memory. */
#include "net_private.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define PIPE_WANT (256u * 1024u) /* asked for per pipe; the 64 KiB default if refused */

static void close_pipe(km_net_conn *c)
{
    if (c->pipe[0] < 0)
        return;
    close(c->pipe[0]);
    close(c->pipe[1]);
    c->pipe[0] = c->pipe[1] = -1;
    c->piped = c->pipe_cap = 0;
}

/* Closed once nothing runs into it and nothing waits in it. */
static void close_pipe_if_idle(km_net_conn *c)
{
    if (!c->fwd_from && c->piped == 0)
        close_pipe(c);
}

static bool open_pipe(km_net_conn *c)
{
    if (c->pipe[0] >= 0)
        return true;
    if (pipe2(c->pipe, O_NONBLOCK | O_CLOEXEC) < 0) {
        c->pipe[0] = c->pipe[1] = -1;
        return false;
    }
    int cap = fcntl(c->pipe[1], F_SETPIPE_SZ, (int)PIPE_WANT); /* refused past the per-user pipe budget */
    if (cap < 0)
        cap = fcntl(c->pipe[1], F_GETPIPE_SZ);
    c->pipe_cap = cap > 0 ? (size_t)cap : 4096;
    return true;
}

/* A splice onto a socket the peer has reset raises SIGPIPE (it cannot take MSG_NOSIGNAL). */
static bool sigpipe_ignored(void)
{
    struct sigaction sa;
    return sigaction(SIGPIPE, NULL, &sa) == 0 && sa.sa_handler == SIG_IGN;
}

int km_net_forward(km_net_conn *from, km_net_conn *to, uint64_t nbytes, km_net_forward_fn progress)
{
    if (!from || !to || from == to || !progress || nbytes < KM_NET_FORWARD_MIN || !from->h.on_bytes)
        return -1;
    if (from->state != NET_READY || to->state != NET_READY || from->closing || to->closing)
        return -1;
    if (from->tls || to->tls || from->cap || to->cap || from->no_splice)
        return -1;
    if (from->fwd_to && (from->fwd_to != to || from->fwd_left)) /* another destination, or still busy */
        return -1;
    if (!from->fwd_to) {
        if ((to->fwd_from && to->fwd_from != from) || !sigpipe_ignored() || !open_pipe(to))
            return -1;
    }
    from->fwd_to = to;
    from->fwd_left = nbytes;
    from->fwd_progress = progress;
    from->fwd_wait = false;
    to->fwd_from = from;
    return 0;
}

void km_net__forward_end(km_net_conn *c)
{
    km_net_conn *to = c->fwd_to;
    if (!to)
        return;
    c->fwd_to = NULL;
    c->fwd_left = 0;
    c->fwd_wait = false;
    to->fwd_from = NULL;
    close_pipe_if_idle(to);
}

void km_net__forward_resume(km_net_conn *c)
{
    km_net_conn *src = c->fwd_from;
    if (!src || !src->fwd_wait)
        return;
    src->fwd_wait = false;
    ev_feed_event(src->loop, &src->rio, EV_READ);
    km_net__update_watchers(src);
}

void km_net__forward_unlink(km_net_conn *c)
{
    km_net__forward_end(c);       /* as a source */
    km_net_conn *src = c->fwd_from; /* as a destination: its source reads on, through on_bytes */
    if (src) {
        bool waiting = src->fwd_wait;
        km_net__forward_end(src);
        if (waiting) {
            ev_feed_event(src->loop, &src->rio, EV_READ);
            km_net__update_watchers(src);
        }
    }
    close_pipe(c);
}

int km_net__flush_pipe(km_net_conn *c, km_err *err)
{
    while (c->piped) {
        ssize_t put = splice(c->pipe[0], NULL, c->fd, NULL, c->piped, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
        if (put > 0) {
            c->piped -= (size_t)put;
            c->stats.bytes_out += (size_t)put;
            continue;
        }
        if (put < 0 && errno == EINTR)
            continue;
        if (put < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            c->write_block = KM_TLS_WANT_WRITE;
            km_net__update_watchers(c);
            return 0;
        }
        km_fail(err, "write to %s: %s", c->peer, put < 0 ? strerror(errno) : "the socket took nothing");
        return -1;
    }
    close_pipe_if_idle(c);
    return 1;
}

/* The destination still holds earlier bytes: they go first, and the source waits for them. */
static bool destination_busy(km_net_conn *c, km_net_conn *to)
{
    if (to->piped) {
        km_err ignored;
        if (km_net__flush_pipe(to, &ignored) < 0) /* fails in its own handler, not inside ours */
            ev_feed_event(to->loop, &to->wio, EV_WRITE);
    }
    if (!to->piped && !to->queued)
        return false;
    c->fwd_wait = true;
    return true;
}

/* Calls the owner's progress handler; false once c is dead. */
static bool report(km_net_conn *c, size_t n)
{
    km_net__enter(c);
    c->fwd_progress(c, n, c->ud);
    return km_net__leave(c);
}

net_pump km_net__pump(km_net_conn *c)
{
    km_net_conn *to = c->fwd_to;
    if (to->closing) { /* a closing destination refuses more: on_bytes says so */
        km_net__forward_end(c);
        return NET_PUMP_OFF;
    }
    if (destination_busy(c, to))
        return NET_PUMP_STOP;
    size_t want = c->fwd_left < to->pipe_cap ? (size_t)c->fwd_left : to->pipe_cap;
    ssize_t got = splice(c->fd, NULL, to->pipe[1], NULL, want, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
    if (got > 0) {
        size_t n = (size_t)got;
        c->fwd_left -= n;
        to->piped += n;
        c->stats.bytes_in += n;
        c->stats.bytes_spliced += n;
        km_err ignored;
        if (km_net__flush_pipe(to, &ignored) < 0)
            ev_feed_event(to->loop, &to->wio, EV_WRITE);
        if (!report(c, n))
            return NET_PUMP_DEAD;
        return c->fwd_left ? NET_PUMP_AGAIN : NET_PUMP_OFF; /* at 0 the link parks */
    }
    if (got == 0) { /* stream mode: the owner knows whether that was inside a frame */
        km_net__fail(c, NULL);
        return NET_PUMP_DEAD;
    }
    if (errno == EINTR)
        return NET_PUMP_AGAIN;
    if (errno == EAGAIN || errno == EWOULDBLOCK) { /* the pipe is empty here: the socket is */
        c->read_block = KM_TLS_WANT_READ;
        return NET_PUMP_STOP;
    }
    if (errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP) { /* no splice for this socket: copy */
        c->no_splice = true;
        km_net__forward_end(c);
        return NET_PUMP_OFF;
    }
    km_err e;
    km_fail(&e, "read from %s: %s", c->peer, strerror(errno));
    km_net__fail(c, &e);
    return NET_PUMP_DEAD;
}
