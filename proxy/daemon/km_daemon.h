/* km_daemon.h - the kmproxy daemon: follows the KRaft metadata log and drives the ZooKeeper
 * mirror and the ZK-mode broker channels from one libev loop.
 *
 * The daemon context is the program's one piece of global state: everything else hangs off it.
 * Start-up problems (bad config, unreadable log) are returned before anything runs; once
 * running, a fatal condition (fenced in ZooKeeper, lost controller epoch, corrupt log) stops the
 * loop and km_daemon_run returns 1 (2 for a corrupt log or a refused image) with the reason logged. */
#ifndef KM_DAEMON_H
#define KM_DAEMON_H

#include "km_codec.h"
#include "km_config.h"

#include <stdint.h>

struct ev_loop;

typedef struct km_daemon km_daemon;

/* Takes ownership of cfg's strings (cfg is cleared).  NULL + err on a problem with the config,
 * the metadata log, ZooKeeper connection set-up or the metrics listener. */
km_daemon *km_daemon_new(struct ev_loop *loop, km_config *cfg, km_err *err);
/* Arms the daemon's watchers on its loop and reads what the log has; the caller runs the loop
 * (the demo and tests do; km_daemon_run does it for the daemon). */
void km_daemon_start(km_daemon *d);
/* Starts, then runs the loop until SIGINT/SIGTERM (0), km_daemon_stop (0) or a fatal error: 1, or 2
 * for bad input (a corrupt metadata log, an image the ZooKeeper guards refuse). */
int km_daemon_run(km_daemon *d);
void km_daemon_stop(km_daemon *d);
void km_daemon_free(km_daemon *d);

/* For tests and the demo: what the daemon has done so far. */
typedef struct km_daemon_status {
    int64_t image_offset;          /* last record applied to the image */
    int64_t batches_applied;
    int64_t zk_confirmed_offset;   /* -1 without ZooKeeper */
    int64_t zk_write_behind_lag;
    const char *zk_state;          /* NULL before the bridge starts */
    bool zk_idle;                  /* dual-writing, nothing pending, confirmed at the image's offset */
    int brokers_total, brokers_in_sync;
    size_t broker_requests_pending;  /* queued or in flight over all brokers */
    bool reading_paused;           /* held back by the write-behind bound */
    const char *fatal;             /* NULL while healthy */
    bool active;                   /* writes ZooKeeper and talks to brokers (always without ha.enabled) */
} km_daemon_status;
void km_daemon_get_status(const km_daemon *d, km_daemon_status *st);

/* SIGHUP reads the configuration again through fn (kmproxy run: the same --config and --set) and
 * logs every key whose value changed: log.file is applied (the log goes to the new path); every
 * other changed key is named as needing a restart (the running value stays). Without fn, or when
 * the configuration no longer reads, SIGHUP only reopens the log and reloads TLS material. */
typedef int (*km_daemon_reread_fn)(km_config *out, void *ud, km_err *err);
void km_daemon_on_sighup_reread(km_daemon *d, km_daemon_reread_fn fn, void *ud);
uint16_t km_daemon_metrics_port(const km_daemon *d);
/* What /readyz answers now: true for 200 (the instance does its job), false for 503. */
bool km_daemon_ready(const km_daemon *d);

#endif
