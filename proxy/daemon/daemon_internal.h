/* Private to proxy/daemon*.c: the daemon context and the seams between its parts. */
#ifndef KM_DAEMON_INTERNAL_H
#define KM_DAEMON_INTERNAL_H

#include "km_daemon.h"
#include "km_inline.h"
#include "km_image.h"
#include "km_metrics.h"
#include "km_quorum.h"
#include "km_zkbridge.h"

#include <ev.h>

struct km_daemon {
    struct ev_loop *loop;
    km_config cfg;
    int log_level;
    km_image *img;
    km_image_follow *follow;     /* metadata.source=dir */
    km_quorum *quorum;           /* metadata.source=quorum */
    km_tls_ctx *quorum_tls;      /* its SSL controller listener's client context, or NULL */
    km_delta *delta;             /* reused for each batch */
    ev_io follow_io;             /* inotify fd of the follower (fd -1: none) */
    ev_timer follow_poll;
    bool reading_paused;
    bool started;                /* watchers armed (km_daemon_start) */
    int64_t batches_applied;
    ev_signal sigint, sigterm, sighup, sigusr1; /* HUP, USR1: the inline proxy's TLS reload, capture switch */
    km_metrics_server *metrics;
    struct km_capture *capture;  /* capture.pcapng / capture.jsonl: the broker channels' traffic; NULL: off */
    struct km_daemon_consumers *consumers;  /* daemon_consumers.c: ZooKeeper and brokers */
    km_inline *proxy;            /* the inline proxy, when proxy.* keys ask for one */
    char fatal[512];
    int exit_code;               /* with fatal: 1 a runtime failure, 2 bad input (a corrupt log, a refused image) */
};

void km_daemon_log(km_daemon *d, int level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Records the first fatal reason and stops the loop (exit 1). */
void km_daemon_fatal(km_daemon *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The same for bad input: a corrupt log, an image the guards refuse (exit 2). */
void km_daemon_fatal_input(km_daemon *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Reads and applies what the log has; pauses itself while consumers are full. */
void km_daemon_read_log(km_daemon *d);
/* A consumer has room again: resume reading if paused. */
void km_daemon_kick(km_daemon *d);

/* daemon_consumers.c */
int km_daemon_start_consumers(km_daemon *d, km_err *err);
void km_daemon_stop_consumers(km_daemon *d);
bool km_daemon_consumers_ready(km_daemon *d);
void km_daemon_publish_delta(km_daemon *d, const km_delta *delta);
/* The log has been read to its current end: start (or restart, on a new KRaft epoch) the bridge. */
void km_daemon_caught_up(km_daemon *d);
void km_daemon_consumers_status(const km_daemon *d, km_daemon_status *st);
void km_daemon_consumers_metrics(const km_daemon *d, km_buf *out);

/* daemon_quorum.c: metadata.source=quorum */
bool km_daemon_quorum_mode(const km_daemon *d);
int km_daemon_open_quorum(km_daemon *d, km_err *err);
void km_daemon_quorum_step(km_daemon *d);
void km_daemon_quorum_metrics(const km_daemon *d, km_buf *out);

/* daemon_metrics.c */
int km_daemon_start_metrics(km_daemon *d, km_err *err);
void km_daemon_stop_metrics(km_daemon *d);

#endif
