/* net_private.h - shared by the proxy/net*.c sources only; not part of km_net's API. */
#ifndef KM_NET_PRIVATE_H
#define KM_NET_PRIVATE_H

#include <ev.h>
#include <netdb.h>

#include "km_capture.h"
#include "km_net.h"

typedef struct net_chunk {
    struct net_chunk *next;
    size_t len;
    uint8_t data[];
} net_chunk;

typedef enum net_state { NET_CONNECTING, NET_HANDSHAKE, NET_READY, NET_DEAD } net_state;

struct km_net_conn {
    struct ev_loop *loop;
    ev_io rio, wio;
    ev_timer timer;            /* connect + handshake deadline */
    int fd;
    net_state state;
    km_tls_stream *tls;
    km_net_opts opts;          /* defaults filled in; tls_name not kept */
    km_net_handlers h;
    void *ud;
    char peer[300];
    char tls_name[300];        /* connect: the name the server certificate must carry */
    km_err last_err;           /* connect: why the previous address failed */
    char addr[64];             /* connect: the address being tried, "ip:port" */
    struct addrinfo *addrs, *next_addr; /* remaining connect candidates */
    km_tls_status hs_want;     /* handshake: which readiness it waits for */
    /* reading */
    uint8_t *rbuf;
    size_t rlen, rcap;
    uint64_t rx_offset;        /* stream bytes before rbuf[0], for error messages */
    bool paused;
    bool closing;              /* km_net_shutdown: flush, then close */
    km_tls_status read_block;  /* what the last read waited for */
    km_tls_status tls_held;    /* what ended gathering TLS records (net_io.c tls_read), due next read */
    km_err tls_held_err;
    /* writing */
    net_chunk *head, *tail;
    size_t head_off, queued;
    km_tls_status write_block;
    km_net_stats stats;
    /* splice forwarding (net_splice.c) */
    km_net_conn *fwd_to;       /* as a source: where the next fwd_left stream bytes go, in the kernel
                                * (fwd_left 0: parked, see net_splice.c) */
    uint64_t fwd_left;
    km_net_forward_fn fwd_progress;
    bool fwd_wait;             /* as a source: not reading until fwd_to has sent what it holds */
    bool no_splice;            /* splice refused this socket once (EINVAL/ENOSYS): never again */
    km_net_conn *fwd_from;     /* as a destination: the source splicing into our pipe */
    int pipe[2];               /* as a destination: spliced bytes on their way out; -1 when none */
    size_t piped, pipe_cap;    /* bytes in the pipe (they go out before the queue), its capacity */
    /* capture tap (net_capture.c) */
    bool we_dialled;           /* connect (client side) rather than accept */
    km_capture *cap;
    km_capture_conn *cap_conn; /* opened once the socket is connected */
    /* callbacks may close us: free only once the outermost handler returns */
    int depth;
};

/* net_io.c */
void km_net__read_ready(km_net_conn *c);
void km_net__write_ready(km_net_conn *c);
void km_net__free_buffers(km_net_conn *c);
/* Queues prefix (may be empty) then data as one unit, or fails leaving the queue as it was. */
int km_net__enqueue(km_net_conn *c, const uint8_t *prefix, size_t plen, const void *data, size_t len, km_err *err);
/* net_splice.c */
typedef enum net_pump { NET_PUMP_AGAIN, NET_PUMP_STOP, NET_PUMP_OFF, NET_PUMP_DEAD } net_pump;
/* One splice step of a source with fwd_left bytes to go and an empty read buffer: AGAIN after progress, STOP when it must wait
 * (socket empty, destination busy), OFF once the forward ended (read normally), DEAD once c is dead. */
net_pump km_net__pump(km_net_conn *c);
/* Sends what the pipe holds: 1 when empty, 0 when the socket is full (write_block set), -1 + err. */
int km_net__flush_pipe(km_net_conn *c, km_err *err);
/* The destination sent everything it held: a source waiting for it reads on. */
void km_net__forward_resume(km_net_conn *c);
/* Unlinks the source from its destination (closing the destination's pipe once empty). */
void km_net__forward_end(km_net_conn *c);
/* c is shutting: undo every forward link through it, close its pipe. */
void km_net__forward_unlink(km_net_conn *c);
/* net_capture.c: no-ops unless km_net_capture was called */
void km_net__tap_ready(km_net_conn *c);
void km_net__tap_in(km_net_conn *c, const uint8_t *payload, size_t len);
void km_net__tap_out(km_net_conn *c, const uint8_t *framed, size_t len);
void km_net__tap_close(km_net_conn *c);
/* net_conn.c */
void km_net__fail(km_net_conn *c, const km_err *why);
void km_net__update_watchers(km_net_conn *c);
bool km_net__enter(km_net_conn *c);
bool km_net__leave(km_net_conn *c);   /* false: c was freed */

#endif
