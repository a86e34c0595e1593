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
#include <pthread.h>
#include <stdio.h>

struct km_daemon {
    struct ev_loop *loop;
    km_config cfg;
    km_config_zk_security zk_security; /* every ZooKeeper session's TLS/SASL/digest and ACLs */
    int log_level;
    km_image *img;
    km_image_follow *follow;     /* metadata.source=dir */
    km_quorum *quorum;           /* metadata.source=quorum */
    km_tls_ctx *quorum_tls;      /* its SSL controller listener's client context, or NULL */
    bool quorum_unusable;        /* the quorum's /readyz reason was logged (once each way) */
    km_delta *delta;             /* reused for each batch */
    ev_io follow_io;             /* inotify fd of the follower (fd -1: none) */
    ev_timer follow_poll;
    bool reading_paused;
    bool started;                /* watchers armed (km_daemon_start) */
    int64_t batches_applied;
    ev_signal sigint, sigterm, sighup;
    ev_signal sigusr1;           /* the inline proxy's capture switch (SIGHUP also reloads its TLS) */
    bool stopping;               /* SIGTERM/SIGINT: no more log reading, in-flight writes finishing */
    ev_timer drain;              /* while stopping: are the in-flight ZooKeeper writes done? */
    double stop_deadline;        /* ev_now past which they are abandoned */
    FILE *log_fp;                /* log.file (reopened on SIGHUP); NULL: stderr */
    km_daemon_reread_fn reread;  /* SIGHUP: the configuration read again, to name the changed keys */
    void *reread_ud;
    pthread_mutex_t log_lock;    /* the inline proxy's worker threads log too: a reopen must not close
                                  * the file under one of their lines */
    double started_at;
    ev_timer progress;           /* a full sync's progress line every few seconds */
    km_zkb_progress sync_last;   /* the previous sample, for the rate */
    double sync_last_at;
    bool sync_have_last;
    km_zkb_eta sync_eta;         /* the figures the progress line and the metrics show */
    ev_timer ready_check;        /* until the first READY=1 */
    km_zkel *election;           /* ha.enabled: our place in the election; NULL: one instance, always active */
    bool active;                 /* the election's leader: claims, writes ZooKeeper, sends RPCs */
    int64_t active_since;        /* unix time of that; 0 while standby */
    int64_t takeovers;           /* times this instance became active */
    int64_t started_wall;        /* unix time the daemon started */
    char claim_record[600];      /* ha.enabled: beside the election, which /controller_epoch kmproxy claimed last */
    char instance[200];          /* host:pid and metrics address, the election node's data */
    ev_timer step_down;          /* deferred: the callers are the parts it frees */
    bool rejoin_after_step_down;
    bool notify_failed;          /* NOTIFY_SOCKET unusable: said once */
    km_metrics_server *metrics;
    struct km_capture *capture;  /* capture.pcapng / capture.jsonl: the broker channels' traffic; NULL: off */
    struct km_daemon_consumers *consumers;  /* daemon_consumers.c: ZooKeeper and brokers */
    km_inline *proxy;            /* the inline proxy, when proxy.* keys ask for one */
    km_zkb *zk_precheck;         /* daemon_precheck.c: the read-only pass before a claim */
    ev_timer zk_precheck_end;
    int zk_precheck_outcome;
    bool zk_prechecked;          /* it passed: the next claim from nothing may go ahead */
    double zk_precheck_retry_at;
    char zk_precheck_why[700];
    km_quorum_ask *cluster_id_ask; /* quorum mode without cluster.id: DescribeCluster in flight */
    double cluster_id_next_try;  /* and when to ask the controllers again */
    int64_t cluster_id_failures;
    struct km_daemon_verify *verify; /* daemon_verify.c: the continuous broker check; NULL: off */
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

#define KM_DAEMON_LISTENER_TEXT 400
/* broker.listener against the image's unfenced migrating ZK-mode brokers (daemon_consumers.c) */
typedef struct km_daemon_listener {
    char name[256];              /* the listener the channels dial; "" until resolved */
    int zk_brokers;              /* unfenced migrating ZK-mode brokers in the image */
    int n_missing;               /* of them, with no endpoint of that name: they get no RPC */
    char missing[KM_DAEMON_LISTENER_TEXT]; /* "broker 1 has INTERNAL,EXTERNAL; ..." */
} km_daemon_listener;

/* daemon_consumers.c */
int km_daemon_start_consumers(km_daemon *d, km_err *err);
void km_daemon_stop_consumers(km_daemon *d);
bool km_daemon_consumers_ready(km_daemon *d);
void km_daemon_publish_delta(km_daemon *d, const km_delta *delta);
/* The log has been read to its current end: start (or restart, on a new KRaft epoch) the bridge. */
void km_daemon_caught_up(km_daemon *d);
void km_daemon_consumers_status(const km_daemon *d, km_daemon_status *st);
/* The ZooKeeper bridge has a session (false before it starts). */
bool km_daemon_zk_connected(const km_daemon *d);
void km_daemon_consumers_metrics(const km_daemon *d, km_buf *out);
/* The full update of the last activation (a claim, a re-claim, a takeover; at *zk_epoch) is not yet answered by
 * every broker: *pending requests left. */
bool km_daemon_brokers_updating(const km_daemon *d, int32_t *zk_epoch, size_t *pending);
/* NULL before the log was read to its end or with brokers.enabled=false. */
const km_daemon_listener *km_daemon_listener_status(const km_daemon *d);

/* The bridge (NULL before the log names a KRaft leader). */
km_zkb *km_daemon_zkb(const km_daemon *d);

/* daemon_health.c: /healthz, /readyz (on the metrics listener) and the full sync's progress */
void km_daemon_start_health(km_daemon *d);
struct json_t;
/* An HTTP answer of body as one line of compact JSON (body is released); status, or 500 if it
 * cannot be written.  /readyz, /healthz and /status share it. */
int km_daemon_json_reply(struct json_t *body, km_buf *out, int status);
void km_daemon_stop_health(km_daemon *d);
const char *km_daemon_role(const km_daemon *d);
bool km_daemon_ready(const km_daemon *d);
/* What /readyz lists as the reasons it is not ready (an empty array when ready); the caller releases it. */
struct json_t *km_daemon_readyz_reasons(km_daemon *d);
/* Ready except, perhaps, for the brokers (systemd's READY=1: a broker that is down does not hold start-up). */
bool km_daemon_does_its_job(const km_daemon *d);
/* A full sync has just finished: its final figures. */
void km_daemon_sync_done(km_daemon *d, km_zkb *zkb);
void km_daemon_health_metrics(const km_daemon *d, km_buf *out);

/* daemon_notify.c: systemd's notify protocol ($NOTIFY_SOCKET; nothing without it) */
void km_daemon_notify(km_daemon *d, const char *state);
void km_daemon_start_notify(km_daemon *d);
void km_daemon_stop_notify(km_daemon *d);

/* daemon_ha.c: the election among instances (ha.enabled) */
int km_daemon_start_ha(km_daemon *d, km_err *err);
void km_daemon_stop_ha(km_daemon *d);
bool km_daemon_is_active(const km_daemon *d);
/* No zookeeper.connect: a check-only instance (brokers.enabled=false, the broker check on) that writes nothing. */
bool km_daemon_check_only(const km_daemon *d);
/* Lost the right to write (fenced, election lost): back to standby. False without HA (then fatal). */
bool km_daemon_step_down(km_daemon *d, const char *why);
void km_daemon_ha_metrics(const km_daemon *d, km_buf *out);
/* daemon_consumers.c: drop the bridge and the broker channels (stepping down). */
void km_daemon_stop_active(km_daemon *d);
/* SIGHUP: rebuild the broker channels with their TLS material (and SASL password file) read again. */
void km_daemon_reload_brokers(km_daemon *d);
/* daemon_reload.c. SIGHUP, before the log reopens: the configuration read again (a changed
 * log.file applied); the line to log after the reopen, malloc'd, or NULL without a reader. */
char *km_daemon_reread_config(km_daemon *d, int *level);
/* The broker channels' files and TLS material read and checked as a start would (daemon_consumers.c). */
int km_daemon_check_broker_material(km_daemon *d, km_err *err);
/* daemon_cluster_id.c: the image has a cluster id, from cluster.id or from the controllers; false:
 * not yet (asked in the background, again every few seconds), and no claim may be made. */
bool km_daemon_cluster_id_known(km_daemon *d);
void km_daemon_cluster_id_stop(km_daemon *d);
/* daemon_precheck.c: before a claim from nothing, every guard - the delete limit included - runs on a
 * read-only pass over ZooKeeper (zc: the claim's bridge config), so that no write, the claim
 * included, happens before all have passed. true: passed (for this claim); false: not yet, or
 * refused (the daemon then stops, exit 2). */
bool km_daemon_zk_prechecked(km_daemon *d, const km_zkb_config *zc);
void km_daemon_zk_precheck_stop(km_daemon *d);
/* The read-only pass while it runs (its session and progress are what health reports then), else NULL. */
km_zkb *km_daemon_zk_precheck_bridge(const km_daemon *d);
/* daemon_consumers.c: reports a missing ZooKeeper session, with backoff, while a bridge waits for one. */
void km_daemon_watch_zk(km_daemon *d);
/* daemon_start.c: every file, the broker TLS material and every host, before anything starts. */
int km_daemon_check_start(km_daemon *d, km_err *err);

/* daemon_quorum.c: metadata.source=quorum */
bool km_daemon_quorum_mode(const km_daemon *d);
int km_daemon_open_quorum(km_daemon *d, km_err *err);
void km_daemon_quorum_step(km_daemon *d);
void km_daemon_quorum_metrics(const km_daemon *d, km_buf *out);
/* Why this instance cannot follow the quorum now (its /readyz reason), or false. */
bool km_daemon_quorum_unready(const km_daemon *d, char *why, size_t cap);

/* daemon_consumers.c: the broker propagator (NULL while standby, before the claim or with
 * brokers.enabled=false), and
 * the KRaft controller id and epoch the bridge claimed ZooKeeper with (false: no bridge). */
struct km_bprop;
struct km_bprop *km_daemon_bprop(const km_daemon *d);
bool km_daemon_claimed_as(const km_daemon *d, int32_t *controller_id, int32_t *controller_epoch);
/* daemon_status.c: GET /status, the whole migration at a glance (kmproxy status). The HTTP status. */
int km_daemon_status_json(km_daemon *d, km_buf *out);

/* daemon_verify.c: the continuous broker check (verify.interval.ms; nothing when 0) */
int km_daemon_start_verify(km_daemon *d, km_err *err);
void km_daemon_stop_verify(km_daemon *d);
void km_daemon_verify_metrics(const km_daemon *d, km_buf *out);
/* Its last verdict and findings (first_seen, last_seen) for /status. */
struct json_t *km_daemon_verify_json(const km_daemon *d);

/* daemon_metrics.c */
int km_daemon_start_metrics(km_daemon *d, km_err *err);
void km_daemon_stop_metrics(km_daemon *d);

#endif
