/* Several instances, one active (ha.enabled): each joins the election under kmproxy.election.path;
 * the leader is the active one - it alone claims /controller, writes ZooKeeper and sends controller
 * RPCs. The others follow the log (their image stays warm) and serve metrics and health.
 *
 * A takeover needs no hand-shake: the new active one claims, which bumps /controller_epoch, so the
 * old one's next multi fails its epoch check and brokers answer its RPCs STALE_CONTROLLER_EPOCH.
 * Whatever tells an active instance it lost (the election's session expired, its writer was fenced
 * or its own writer session expired, a broker fenced it) makes it step down: drop the bridge and the
 * broker channels, join the election again at the back, keep following as a standby. A lost
 * connection to ZooKeeper steps down too, at once: the election session may expire before it is
 * back, and then a standby claims; if it is back in time, this instance leads and claims again.
 *
 * Except a fence by a writer that is not one of us (a KRaft controller's migration driver, an
 * operator's tool): every claim writes, in its own multi, which /controller_epoch it took to
 * `<parent of the election path>/active`; a claim that finds /controller_epoch past that record
 * was beaten by a foreign writer and ends the daemon (exit 1) instead of claiming over it. The
 * fenced instance rejoins, and whichever of us leads next reads the record and stops the same way,
 * so none re-claims: the operator decides. A single instance keeps the same record (its restart
 * continues its own claim at the same KRaft epoch) and stops the same way, with exit 2. */
#include "daemon_internal.h"

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void ha_log(km_log_level level, const char *msg, void *ctx) { km_daemon_log(ctx, (int)level, "ha: %s", msg); }

static void become_active(km_daemon *d)
{
    if (ev_is_active(&d->step_down)) { /* a step-down still due belongs to the term that ended */
        ev_timer_stop(d->loop, &d->step_down);
        km_daemon_stop_active(d);
    }
    d->active = true;
    d->active_since = time(NULL);
    d->takeovers++;
    km_daemon_log(d, KM_LOG_INFO, "ha: this instance (%s, node %s) is now the active one (term %lld): claiming "
                  "ZooKeeper once the log is read", d->instance, km_zkel_node(d->election), (long long)d->takeovers);
    km_daemon_read_log(d); /* caught up: the bridge starts and claims */
}

/* From a timer: the bridge or the broker channels may be the ones calling km_daemon_step_down. */
static void step_down_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)loop; (void)revents;
    km_daemon *d = t->data;
    if (d->active)
        return;
    km_daemon_stop_active(d);
    if (d->rejoin_after_step_down && !d->stopping)
        km_zkel_rejoin(d->election);
}

bool km_daemon_step_down(km_daemon *d, const char *why)
{
    if (!d->election)
        return false; /* one instance: losing ZooKeeper or the brokers is fatal, as it always was */
    if (!d->active)
        return true;
    d->active = false;
    d->active_since = 0;
    km_daemon_log(d, KM_LOG_WARN, "ha: stepping down to standby: %s", why);
    d->rejoin_after_step_down = km_zkel_leader(d->election); /* an expired election session rejoins itself */
    ev_timer_set(&d->step_down, 0, 0);
    ev_timer_start(d->loop, &d->step_down);
    return true;
}

static void on_election(km_zkel *e, bool leader, void *ctx)
{
    km_daemon *d = ctx;
    if (leader && !d->stopping)
        become_active(d);
    else if (!leader && d->active && !km_zkel_connected(e)) /* before its session can expire and a standby claim */
        km_daemon_step_down(d, "lost the connection to ZooKeeper: the election session may expire and another "
                            "instance take over");
    else if (!leader && d->active)
        km_daemon_step_down(d, "no longer the leader of the election");
}

/* The election's session was refused its credentials: a configuration error, as for the writer. */
static void on_election_refused(km_zkel *e, const char *why, void *ctx)
{
    (void)e;
    km_daemon_fatal_input(ctx, "ZooKeeper election refused: %s", why);
}

int km_daemon_start_ha(km_daemon *d, km_err *err)
{
    ev_init(&d->step_down, step_down_cb);
    d->step_down.data = d;
    char host[128] = "?";
    gethostname(host, sizeof host - 1);
    snprintf(d->instance, sizeof d->instance, "%s:%d metrics=%s", host, (int)getpid(),
             d->cfg.metrics_listen ? d->cfg.metrics_listen : "-");
    /* The claim record, with or without HA: a single instance's next start reads it to know the
     * /controller standing at its KRaft epoch is its own (see km_zkw_config.single_instance). */
    const char *slash = strrchr(d->cfg.election_path, '/'); /* the path is absolute: the config checks it */
    snprintf(d->claim_record, sizeof d->claim_record, "%.*s/active",
             slash ? (int)(slash - d->cfg.election_path) : 0, d->cfg.election_path);
    if (!d->cfg.ha_enabled)
        return 0;
    km_zkel_config ec = {.hosts = d->cfg.zk_connect, .session_timeout_ms = d->cfg.zk_session_timeout_ms,
                         .path = d->cfg.election_path, .data = d->instance, .on_change = on_election, .log = ha_log,
                         .ctx = d, .security = &d->zk_security.sec, .on_refused = on_election_refused};
    d->election = km_zkel_new(d->loop, &ec, err);
    if (!d->election)
        return -1;
    km_daemon_log(d, KM_LOG_INFO, "ha: joining the election under %s as %s", d->cfg.election_path, d->instance);
    return 0;
}

void km_daemon_stop_ha(km_daemon *d)
{
    ev_timer_stop(d->loop, &d->step_down);
    km_zkel_free(d->election); /* our node goes with the session: a standby takes over at once */
    d->election = NULL;
}

bool km_daemon_is_active(const km_daemon *d) { return !d->election || d->active; }

bool km_daemon_check_only(const km_daemon *d) { return !d->cfg.zk_connect; }

const char *km_daemon_role(const km_daemon *d)
{
    return km_daemon_check_only(d) ? "checker" : km_daemon_is_active(d) ? "active" : "standby";
}

void km_daemon_ha_metrics(const km_daemon *d, km_buf *out)
{
    km_metrics_sample(out, "kmproxy_ha_active", "gauge",
                      "1 while this instance is the active one (always 1 without ha.enabled; 0 on a check-only "
                      "instance, which writes nothing).", NULL, true,
                      km_daemon_is_active(d) && !km_daemon_check_only(d));
    km_metrics_sample(out, "kmproxy_ha_active_since_seconds", "gauge",
                      "Unix time this instance became active (0: standby).", NULL, true,
                      d->election ? (double)d->active_since : (double)d->started_wall);
    km_metrics_sample(out, "kmproxy_ha_takeovers_total", "counter", "Times this instance became the active one.",
                      NULL, true, (double)(d->election ? d->takeovers : 1));
}
