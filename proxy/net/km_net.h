/* km_net.h - Kafka connections on a libev loop: connect/accept, optional TLS,
 * size-prefixed frames in, a bounded write queue out.
 *
 * Used by the broker channels (client side) and by the broker simulator and
 * the inline proxy (server side).  Everything runs on the loop's thread; no
 * call blocks except name resolution in km_net_connect (getaddrinfo), which is
 * instant for IP literals and /etc/hosts names.
 *
 * Lifetime: a connection ends exactly one of two ways.  Either the owner calls
 * km_net_close (no callback follows), or the connection fails, the peer
 * closes or a km_net_shutdown completes, and on_close runs once.  Either way
 * the km_net_conn is freed and must not be used afterwards.  Every call here
 * is safe from inside any callback; none may be made from another thread
 * (hop onto the loop with an ev_async first).
 *
 * SIGPIPE: writes use MSG_NOSIGNAL (plain) or km_tls' socket I/O (TLS), so a
 * vanished peer is an error return, never a signal.
 */
#ifndef KM_NET_H
#define KM_NET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "km_capture.h"
#include "km_codec.h" /* km_err, KM_MAX_FRAME_DEFAULT */
#include "km_tls.h"

struct ev_loop;

#define KM_NET_WRITE_LIMIT_DEFAULT (64u * 1024u * 1024u)
#define KM_NET_CONNECT_TIMEOUT_DEFAULT 10.0

typedef struct km_net_conn km_net_conn;
typedef struct km_net_listener km_net_listener;

typedef struct km_net_opts {
    size_t max_frame;       /* largest payload accepted; 0: KM_MAX_FRAME_DEFAULT */
    size_t write_limit;     /* bytes the write queue may hold; 0: KM_NET_WRITE_LIMIT_DEFAULT */
    double connect_timeout; /* seconds for TCP connect plus TLS handshake (also for accepted
                             * TLS handshakes); 0: KM_NET_CONNECT_TIMEOUT_DEFAULT */
    km_tls_ctx *tls;        /* NULL: plaintext.  A client ctx for connect, a server ctx for accept. */
    const char *tls_name;   /* connect: name to verify; NULL: the host dialled */
} km_net_opts;

typedef struct km_net_handlers {
    /* Connected (and TLS established).  Frames sent earlier are flushed now. */
    void (*on_ready)(km_net_conn *c, void *ud);
    /* One whole frame: the payload after the 4-byte size, valid only during the call. */
    void (*on_frame)(km_net_conn *c, const uint8_t *payload, size_t len, void *ud);
    /* The write queue has just become empty: callers waiting for room resume here. */
    void (*on_drain)(km_net_conn *c, void *ud);
    /* The end: why is NULL when the peer closed cleanly between frames (or our
     * km_net_shutdown completed), else the reason (refused, timed out,
     * oversized frame, EOF mid-frame, TLS failure...). */
    void (*on_close)(km_net_conn *c, const km_err *why, void *ud);
    /* Stream mode (set instead of on_frame): every byte is offered as it is read,
     * with no framing and no frame limit, so a proxy can pass huge frames on
     * without holding them.  Returns the bytes taken; the rest is offered again
     * with the next read.  It must take everything unless it paused c (the read
     * buffer does not grow in stream mode). */
    size_t (*on_bytes)(km_net_conn *c, const uint8_t *data, size_t len, void *ud);
} km_net_handlers;

/* Starts a non-blocking connect to host:port, trying each resolved address in
 * turn.  Failures after this returns arrive through on_close.  NULL + err only
 * for bad arguments, resolution failure or resource exhaustion. */
km_net_conn *km_net_connect(struct ev_loop *loop, const char *host, uint16_t port, const km_net_opts *opts,
                            const km_net_handlers *h, void *ud, km_err *err);
/* Wraps an accepted fd (ownership passes in, also on failure).  With opts->tls
 * (a server ctx) the TLS handshake runs first; on_ready follows either way. */
km_net_conn *km_net_accept(struct ev_loop *loop, int fd, const char *peer, const km_net_opts *opts,
                           const km_net_handlers *h, void *ud, km_err *err);

/* Queue bytes that are already framed (e.g. km_frame_request output). */
int km_net_send(km_net_conn *c, const void *data, size_t len, km_err *err);
/* Queue a payload; the 4-byte big-endian size is prepended. */
int km_net_send_frame(km_net_conn *c, const void *payload, size_t len, km_err *err);
/* Queue two pieces as one write, `first` before `then` (a copied frame head and the bytes that
 * follow it in a read buffer): one syscall where two sends would take two. */
int km_net_send_pair(km_net_conn *c, const void *first, size_t flen, const void *then, size_t len, km_err *err);
/* All three fail without queuing anything when the bytes would pass write_limit
 * (back-pressure: wait for on_drain) or the connection is closing. */
size_t km_net_queued(const km_net_conn *c);
size_t km_net_room(const km_net_conn *c);

/* ---- forwarding in the kernel (plaintext) ------------------------------------------ */

/* Called on from's userdata as forwarded bytes leave from's socket (they are then committed to `to`). */
typedef void (*km_net_forward_fn)(km_net_conn *from, size_t n, void *ud);

/* Stream mode: the next nbytes of from's stream, after the bytes the current on_bytes call takes,
 * pass unchanged to `to`: km_net moves them socket -> pipe -> socket with splice(2), so they never
 * enter user space, and reports each piece through progress.  Made from inside on_bytes, which
 * must then take everything it was offered (otherwise the forward is dropped).  Bytes queued for
 * `to` go out first; `to` gets a pipe (one per destination, only while forwarding or holding
 * spliced bytes); from stops reading while `to` cannot take more.  Either side ending stops the
 * forward: what is left arrives through on_bytes again, so progress is the only count to keep.
 * Returns 0, or -1 (nothing changes, use on_bytes) when it does not apply: TLS or capture on
 * either side, a side not ready or shutting down, `to` taking another forward, nbytes below
 * KM_NET_FORWARD_MIN, splice refused before, no pipe to be had, or SIGPIPE not ignored (a splice
 * onto a reset socket raises it; kmproxy ignores it, a library user may not). */
#define KM_NET_FORWARD_MIN (64u * 1024u) /* below one read's worth, the extra syscalls cost more than the copies */
int km_net_forward(km_net_conn *from, km_net_conn *to, uint64_t nbytes, km_net_forward_fn progress);

/* Stops (or resumes) delivering frames, e.g. while a downstream queue is full. */
void km_net_pause(km_net_conn *c, bool paused);
/* Closes now, dropping anything queued; on_close is not called. */
void km_net_close(km_net_conn *c);
/* Graceful close: stops delivering frames, refuses new sends, flushes the
 * queue (once connected), sends TLS close_notify and closes.  on_close then
 * runs with why NULL, or with the reason if the flush failed or took longer
 * than connect_timeout (a peer that stops reading cannot pin us forever). */
void km_net_shutdown(km_net_conn *c);

/* Mirrors every frame this connection receives or sends into cap (which must
 * outlive c): received frames as they are delivered, sent ones as they are
 * queued, with the socket's real addresses.  Frames we send are requests on a
 * connection we dialled and responses on an accepted one.  Call before or
 * after ready; frames queued before it are captured once connected. */
void km_net_capture(km_net_conn *c, km_capture *cap);

typedef struct km_net_stats {
    uint64_t frames_in, bytes_in;  /* delivered frames; bytes read (after TLS), spliced ones included */
    uint64_t bytes_out;            /* bytes written to the socket (before TLS), spliced ones included */
    uint64_t bytes_spliced;        /* of bytes_in: moved on by km_net_forward without entering user space */
} km_net_stats;
void km_net_get_stats(const km_net_conn *c, km_net_stats *out);

bool km_net_is_ready(const km_net_conn *c);
/* An accepted TLS connection, once ready: the SNI host name the client asked for, or NULL. */
const char *km_net_tls_server_name(const km_net_conn *c);
const char *km_net_peer(const km_net_conn *c); /* "host:port" */
int km_net_fd(const km_net_conn *c);
void km_net_set_userdata(km_net_conn *c, void *ud);

/* ---- listener ------------------------------------------------------------------ */

/* Gets each accepted fd (non-blocking, close-on-exec) and its "ip:port";
 * usually hands both to km_net_accept. */
typedef void (*km_net_accept_fn)(km_net_listener *l, int fd, const char *peer, void *ud);

/* Listens on host:port (host NULL: every local address; port 0: any free
 * port, see km_net_listener_port). */
km_net_listener *km_net_listen(struct ev_loop *loop, const char *host, uint16_t port, km_net_accept_fn fn,
                               void *ud, km_err *err);
/* The same with listen(2)'s backlog (km_net_listen: 128). */
km_net_listener *km_net_listen_backlog(struct ev_loop *loop, const char *host, uint16_t port, int backlog,
                                       km_net_accept_fn fn, void *ud, km_err *err);
/* Bound and listening (clients queue in the backlog) but accepting on no loop yet: for a
 * listener opened on one thread and served by another thread's loop, which calls
 * km_net_listener_start on itself.  km_net_listener_free works either way. */
km_net_listener *km_net_listen_detached(const char *host, uint16_t port, int backlog, km_net_accept_fn fn, void *ud,
                                        km_err *err);
void km_net_listener_start(km_net_listener *l, struct ev_loop *loop);
uint16_t km_net_listener_port(const km_net_listener *l);
/* Stops listening and frees l; safe from inside its accept callback. */
void km_net_listener_free(km_net_listener *l);

/* ---- reconnect backoff ------------------------------------------------------------ */

/* Exponential backoff with "equal jitter": attempt n waits a uniformly random
 * time in [d/2, d] where d = min(max, base * 2^n).  The jitter keeps a fleet of
 * channels from reconnecting in lockstep; the d/2 floor keeps it from retrying
 * immediately.  The generator state lives in the struct (no globals). */
typedef struct km_backoff {
    double base, max;       /* seconds */
    unsigned attempt;
    uint64_t rng;
} km_backoff;

void km_backoff_init(km_backoff *b, double base, double max, uint64_t seed);
double km_backoff_next(km_backoff *b); /* seconds to wait before the next attempt */
void km_backoff_reset(km_backoff *b);  /* after a connection proved healthy */

#endif
