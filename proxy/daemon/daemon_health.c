/* /healthz, /readyz and the initial sync's progress.
 *
 * Alive: the loop answers. Ready: this instance does its job now - as the active one, ZooKeeper
 * holds our claim, the full sync is done, the write-behind lag is within health.max.lag.records
 * and every broker channel is up; as a standby (ha.enabled), it follows the log and is in the
 * election, ready to take over. An instance that cannot reach ZooKeeper is never ready (a lost
 * connection counts, not only a lost session), and brokers that get nothing from us - unreachable,
 * rejecting our controller epoch, or without broker.listener - are each a reason of their own.
 * The JSON body lists every reason it is not, so an operator reads the cause, not just a 503. */
#include "daemon_internal.h"
#include "km_broker.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define PROGRESS_LOG_SECONDS 5.0

static void add_reason(json_t *reasons, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add_reason(json_t *reasons, const char *fmt, ...)
{
    char msg[700];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    json_array_append_new(reasons, json_string(msg));
}

static void zk_reasons(km_daemon *d, km_zkb *zkb, json_t *reasons, json_t *body)
{
    if (!zkb) {
        add_reason(reasons, "not started: the metadata log has not been read to a KRaft leader yet");
        return;
    }
    km_zkw *w = km_zkb_writer(zkb);
    km_zkw_metrics m;
    km_zkw_get_metrics(w, &m);
    km_zkb_phase phase = km_zkb_get_phase(zkb);
    if (m.state == KM_ZKW_FENCED || m.state == KM_ZKW_REFUSED)
        add_reason(reasons, "fenced: %s", km_zkw_fence_reason(w));
    else if (phase == KM_ZKB_STOPPED)
        add_reason(reasons, "zookeeper mirror stopped: %s", km_zkb_error(zkb));
    else if (m.state == KM_ZKW_CONNECTING && m.sessions > 0) /* this writer had one: it expired */
        add_reason(reasons, "zookeeper session expired: opening a new session with %s, then a new claim and a full "
                   "re-sync (deltas wait in the log meanwhile)", d->cfg.zk_connect);
    else if (m.state == KM_ZKW_CONNECTING)
        add_reason(reasons, "zookeeper disconnected: no session with %s yet", d->cfg.zk_connect);
    else if (!km_zkw_connected(w)) /* nothing we write lands, and the session may expire any moment */
        add_reason(reasons, "zookeeper disconnected: lost the connection to %s; the client reconnects, the session "
                   "expires if none is back within %d ms", d->cfg.zk_connect, d->cfg.zk_session_timeout_ms);
    else if (m.state == KM_ZKW_CLAIMING)
        add_reason(reasons, "not caught up: claiming /controller and /controller_epoch in %s (the full sync follows)",
                   d->cfg.zk_connect);
    else if (km_zkb_awaited_offset(zkb) >= 0)
        add_reason(reasons, "not caught up: /migration records offset %lld, ahead of the image at %lld: the full sync "
                   "waits for the log to reach it", (long long)km_zkb_awaited_offset(zkb),
                   (long long)km_image_offset(d->img));
    else if (phase != KM_ZKB_DUAL_WRITE)
        add_reason(reasons, "not caught up: the full sync into ZooKeeper is still running");
    /* during a claim or a sync the lag is the sync's distance, not a write-behind: the reason above says it */
    if (phase == KM_ZKB_DUAL_WRITE && m.write_behind_lag > d->cfg.health_max_lag_records)
        add_reason(reasons, "lag: %lld records behind the log, over health.max.lag.records=%d",
                   (long long)m.write_behind_lag, d->cfg.health_max_lag_records);
    json_object_set_new(body, "zookeeper", json_pack("{s:s,s:s,s:I,s:i}", "address", d->cfg.zk_connect,
                                                     "state", km_zkw_state_name(m.state), "lag_records",
                                                     (json_int_t)m.write_behind_lag, "max_lag_records",
                                                     d->cfg.health_max_lag_records));
}

/* "1, 2, 3" (ids appended to out). */
static void add_id(char *out, size_t cap, int32_t id)
{
    size_t len = strlen(out);
    if (len < cap)
        snprintf(out + len, cap - len, "%s%d", len ? ", " : "", id);
}

/* Channels that are down (not connected) and channels whose broker rejects our controller epoch. */
typedef struct broker_faults {
    int down, rejecting;
    int32_t rejected_epoch;
    char down_ids[200], rejecting_ids[200];
} broker_faults;

static void find_broker_faults(const km_bprop *p, broker_faults *f)
{
    memset(f, 0, sizeof *f);
    km_bprop_chan_status cs;
    for (size_t i = 0; p && km_bprop_channel_status(p, i, &cs); i++) {
        if (cs.rejected_epoch >= 0) {
            f->rejecting++;
            f->rejected_epoch = cs.rejected_epoch;
            add_id(f->rejecting_ids, sizeof f->rejecting_ids, cs.broker_id);
        } else if (!cs.connected) {
            f->down++;
            add_id(f->down_ids, sizeof f->down_ids, cs.broker_id);
        }
    }
}

/* broker.listener names a listener some registered brokers lack: they get nothing (also on a standby:
 * it would send them nothing either once it takes over). */
static void listener_reason(km_daemon *d, json_t *reasons)
{
    const km_daemon_listener *l = km_daemon_listener_status(d);
    if (l && l->n_missing)
        add_reason(reasons, "brokers without broker.listener: %d of %d ZK-mode brokers registered no listener named "
                   "%s (%s): they get no controller RPC", l->n_missing, l->zk_brokers, l->name, l->missing);
}

static void broker_reasons(km_daemon *d, json_t *reasons, json_t *body)
{
    km_daemon_status st;
    km_daemon_get_status(d, &st);
    broker_faults f;
    find_broker_faults(km_daemon_bprop(d), &f);
    if (d->cfg.brokers_enabled && f.down)
        add_reason(reasons, "brokers unreachable: %d of %d ZK-mode brokers not connected (brokers %s); %d up to date",
                   f.down, st.brokers_total, f.down_ids, st.brokers_in_sync);
    if (d->cfg.brokers_enabled && f.rejecting)
        add_reason(reasons, "brokers reject our controller epoch: %d of %d ZK-mode brokers (brokers %s) answer "
                   "STALE_CONTROLLER_EPOCH to epoch %d: they have seen a newer one, from another ZooKeeper or chroot "
                   "than zookeeper.connect=%s", f.rejecting, st.brokers_total, f.rejecting_ids, f.rejected_epoch,
                   d->cfg.zk_connect);
    int32_t new_epoch;
    size_t pending;
    if (d->cfg.brokers_enabled && !f.down && !f.rejecting && st.brokers_in_sync < st.brokers_total)
        add_reason(reasons, "brokers not up to date: %d of %d ZK-mode brokers still getting their full sync",
                   st.brokers_total - st.brokers_in_sync, st.brokers_total);
    else if (d->cfg.brokers_enabled && km_daemon_brokers_updating(d, &new_epoch, &pending))
        add_reason(reasons, "brokers not up to date: the full update (UpdateMetadata and LeaderAndIsr) at controller "
                   "epoch %d is not answered by every broker yet (%zu requests pending)", new_epoch, pending);
    json_object_set_new(body, "brokers", json_pack("{s:b,s:i,s:i,s:i}", "enabled", d->cfg.brokers_enabled, "total",
                                                   st.brokers_total, "in_sync", st.brokers_in_sync, "rejecting",
                                                   f.rejecting));
}

/* with_brokers false: whether this instance does its job (systemd's READY=1), brokers aside - a broker
 * that is down is a reason on /readyz, not a reason to hold the service's start. */
static int readiness(km_daemon *d, km_buf *out, bool with_brokers)
{
    json_t *body = json_object(), *reasons = json_array();
    json_object_set_new(body, "ready", json_false()); /* first in the body: set for real below */
    json_object_set_new(body, "role", json_string(km_daemon_role(d)));
    json_object_set(body, "reasons", reasons);
    if (d->fatal[0])
        add_reason(reasons, "stopping: %s", d->fatal);
    if (d->stopping)
        add_reason(reasons, "shutting down");
    char quorum_why[700]; /* active or standby: an instance that cannot follow the quorum does not do its job */
    if (d->quorum && km_daemon_quorum_unready(d, quorum_why, sizeof quorum_why))
        add_reason(reasons, "%s", quorum_why);
    if (km_daemon_check_only(d)) { /* it writes nothing: it does its job once it has an image to check against */
        if (km_image_offset(d->img) < 0)
            add_reason(reasons, "not caught up: no metadata record read yet (check-only: nothing to check against)");
    } else if (km_daemon_is_active(d)) {
        zk_reasons(d, km_daemon_zkb(d), reasons, body);
        if (with_brokers)
            broker_reasons(d, reasons, body);
    } else if (!km_zkel_connected(d->election)) { /* a standby is ready while it follows and can take over */
        add_reason(reasons, "zookeeper disconnected: no election session with %s", d->cfg.zk_connect);
    }
    if (with_brokers)
        listener_reason(d, reasons);
    bool ready = json_array_size(reasons) == 0;
    json_object_set_new(body, "ready", json_boolean(ready));
    json_object_set_new(body, "image_offset", json_integer(km_image_offset(d->img)));
    if (d->election)
        json_object_set_new(body, "ha", json_pack("{s:s,s:s,s:I,s:I}", "instance", d->instance, "node",
                                                  km_zkel_node(d->election), "active_since",
                                                  (json_int_t)d->active_since, "takeovers",
                                                  (json_int_t)d->takeovers));
    json_decref(reasons);
    return km_daemon_json_reply(body, out, ready ? 200 : 503);
}

int km_daemon_json_reply(json_t *body, km_buf *out, int status)
{
    char *s = json_dumps(body, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(body);
    if (!s)
        return 500;
    km_buf_put(out, s, strlen(s));
    km_buf_put(out, "\n", 1);
    free(s);
    return status;
}

static int route(const char *path, km_buf *out, void *ud)
{
    km_daemon *d = ud;
    if (!strcmp(path, "/healthz")) {
        char s[160];
        int n = snprintf(s, sizeof s, "{\"alive\":true,\"role\":\"%s\",\"uptime_seconds\":%.0f}\n", km_daemon_role(d),
                         ev_now(d->loop) - d->started_at);
        km_buf_put(out, s, (size_t)n);
        return 200;
    }
    if (!strcmp(path, "/readyz"))
        return readiness(d, out, true);
    if (!strcmp(path, "/status"))
        return km_daemon_status_json(d, out);
    return 0;
}

/* ---- progress of a full sync: a log line every few seconds, the same figures as metrics ---- */

static void sample_progress(km_daemon *d, km_zkb *zkb, bool log_it)
{
    km_zkb_progress p;
    km_zkb_get_progress(zkb, &p);
    double now = ev_now(d->loop);
    km_zkb_progress_eta(&p, d->sync_have_last ? &d->sync_last : NULL, now - d->sync_last_at, false, &d->sync_eta);
    d->sync_last = p;
    d->sync_last_at = now;
    d->sync_have_last = true;
    if (!log_it)
        return;
    char line[256], status[300];
    km_zkb_eta_format(&d->sync_eta, line, sizeof line);
    km_daemon_log(d, KM_LOG_INFO, "zk sync: %s", line);
    snprintf(status, sizeof status, "STATUS=zk sync: %s", line);
    km_daemon_notify(d, status);
}

static void progress_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)loop; (void)revents;
    km_daemon *d = t->data;
    km_zkb *zkb = km_daemon_zkb(d);
    if (zkb && km_zkb_get_phase(zkb) == KM_ZKB_SYNC)
        sample_progress(d, zkb, true);
    else
        d->sync_have_last = false; /* the next sync's rate starts from its own beginning */
}

void km_daemon_sync_done(km_daemon *d, km_zkb *zkb)
{
    km_zkb_progress p;
    km_zkb_get_progress(zkb, &p);
    /* the pass ends only once ZooKeeper acknowledged all of it: done is the whole total */
    d->sync_eta = (km_zkb_eta){.stage = "in sync", .unit = "znodes", .done = p.writes_planned,
                               .total = p.writes_planned, .eta_seconds = 0};
    km_daemon_log(d, KM_LOG_INFO, "zk sync: done: %zu znodes written after reading %zu", p.writes_planned,
                  p.znodes_read);
}

static bool ready_as(const km_daemon *d, bool with_brokers)
{
    km_buf b;
    km_buf_init(&b);
    bool ok = readiness((km_daemon *)d, &b, with_brokers) == 200;
    km_buf_free(&b);
    return ok;
}

bool km_daemon_ready(const km_daemon *d) { return ready_as(d, true); }

struct json_t *km_daemon_readyz_reasons(km_daemon *d)
{
    km_buf b;
    km_buf_init(&b);
    readiness(d, &b, true);
    km_buf_put(&b, "", 1);
    json_t *body = json_loads((const char *)b.data, 0, NULL), *reasons = json_object_get(body, "reasons");
    json_t *copy = json_is_array(reasons) ? json_incref(reasons) : json_array();
    json_decref(body);
    km_buf_free(&b);
    return copy;
}

bool km_daemon_does_its_job(const km_daemon *d) { return ready_as(d, false); }

/* Every ZooKeeper session this instance needs has its connection: the election's (ha.enabled) and,
 * while active, the writer's. */
static bool zk_connected(const km_daemon *d)
{
    return (!d->election || km_zkel_connected(d->election)) && (!km_daemon_is_active(d) || km_daemon_zk_connected(d));
}

static void fault_metrics(const km_daemon *d, km_buf *out)
{
    km_metrics_sample(out, "kmproxy_zk_connected", "gauge",
                      "1 while the ZooKeeper sessions this instance needs are connected (the election's with "
                      "ha.enabled, the writer's while active).", NULL, true, zk_connected(d));
    km_daemon_status st;
    km_daemon_get_status(d, &st);
    broker_faults f;
    find_broker_faults(km_daemon_bprop(d), &f);
    const km_daemon_listener *l = km_daemon_listener_status(d);
    km_metrics_sample(out, "kmproxy_brokers_up_to_date", "gauge",
                      "ZK-mode brokers connected, synced and accepting our controller epoch.", NULL, true,
                      st.brokers_in_sync);
    km_metrics_sample(out, "kmproxy_brokers_unreachable", "gauge", "ZK-mode broker channels not connected.", NULL,
                      true, f.down);
    km_metrics_sample(out, "kmproxy_brokers_rejecting_epoch", "gauge",
                      "ZK-mode brokers whose last answer was STALE_CONTROLLER_EPOCH (they follow a newer controller "
                      "epoch than ours).", NULL, true, f.rejecting);
    km_metrics_sample(out, "kmproxy_brokers_without_listener", "gauge",
                      "Migrating ZK-mode brokers that registered no listener named broker.listener.", NULL, true,
                      l ? l->n_missing : 0);
}

void km_daemon_health_metrics(const km_daemon *d, km_buf *out)
{
    km_zkb *zkb = km_daemon_zkb(d);
    bool syncing = zkb && km_zkb_get_phase(zkb) == KM_ZKB_SYNC;
    km_metrics_sample(out, "kmproxy_zk_sync_in_progress", "gauge", "1 while a full sync into ZooKeeper runs.", NULL,
                      true, syncing);
    km_metrics_sample(out, "kmproxy_zk_sync_znodes_done", "gauge",
                      "Znode writes of the running (or last) full sync acknowledged by ZooKeeper.", NULL, true,
                      (double)d->sync_eta.done);
    km_metrics_sample(out, "kmproxy_zk_sync_znodes_planned", "gauge",
                      "Znode writes the running (or last) full sync needs (estimated while it still plans).", NULL,
                      true, (double)d->sync_eta.total);
    km_metrics_sample(out, "kmproxy_zk_sync_znodes_per_second", "gauge",
                      "Znodes per second over the last progress interval.", NULL, true, d->sync_eta.rate);
    km_metrics_sample(out, "kmproxy_zk_sync_eta_seconds", "gauge", "Seconds the running sync still needs (-1: unknown).",
                      NULL, true, d->sync_eta.eta_seconds);
    km_metrics_sample(out, "kmproxy_ready", "gauge", "1 while /readyz answers 200.", NULL, true, km_daemon_ready(d));
    /* the rules compare the lags with the threshold this instance really applies, not a copy of it */
    km_metrics_sample(out, "kmproxy_config_health_max_lag_records", "gauge",
                      "health.max.lag.records: /readyz fails while the ZooKeeper or quorum lag is above it.", NULL,
                      true, d->cfg.health_max_lag_records);
    fault_metrics(d, out);
}

void km_daemon_start_health(km_daemon *d)
{
    d->started_at = ev_now(d->loop);
    d->sync_eta = (km_zkb_eta){.stage = "connecting", .eta_seconds = -1};
    if (d->metrics)
        km_metrics_set_route(d->metrics, route);
    ev_timer_init(&d->progress, progress_cb, PROGRESS_LOG_SECONDS, PROGRESS_LOG_SECONDS);
    d->progress.data = d;
    ev_timer_start(d->loop, &d->progress);
}

void km_daemon_stop_health(km_daemon *d) { ev_timer_stop(d->loop, &d->progress); }
