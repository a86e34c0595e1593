/* The pipelined multi writer.
 *
 * A batch (one image delta, or one slice of the full sync) becomes one or more multis, sent without
 * waiting for each other. Each multi is [check /controller_epoch, check /migration V, data ops...];
 * the batch's last one sets /migration (V -> V+1) instead of checking it, so ZooKeeper holds the
 * batch's offset only once everything in it is there. ZooKeeper applies a session's requests in
 * order. We never resend blindly: after a lost connection (or a failed guard) we stop, let every
 * outstanding reply come back, sync() and re-read /controller_epoch and /migration: a moved epoch
 * or a /migration that is neither what we confirmed nor what one of our batches meant to write is a
 * second writer (FENCED). Then each multi whose reply was lost is judged on its own: a batch's last
 * one by /migration, the others by the zkVersion of their first conditional data op (versions only
 * grow, and the guards just proved nobody else writes). What landed is adopted, the rest resent.
 * So our own retried write is told apart from a genuine second writer, and nothing lands twice. */
#include "zk_writer.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void default_log(km_log_level lvl, const char *msg, void *ctx)
{
    (void)ctx;
    static const char *names[] = {"", "ERROR", "WARN", "INFO", "DEBUG"};
    if (lvl <= KM_LOG_WARN)
        fprintf(stderr, "kmproxy zk %s: %s\n", names[lvl], msg);
}

void zkw_log(km_zkw *w, km_log_level lvl, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    (w->cfg.log ? w->cfg.log : default_log)(lvl, msg, w->cfg.ctx);
}

void zkw_emit(km_zkw *w, km_zkw_event ev)
{
    if (w->cfg.on_event)
        w->cfg.on_event(w, ev, w->cfg.ctx);
}

/* Terminal: from here on nothing is sent. Loud, because a fenced mirror needs an operator. */
void zkw_fence(km_zkw *w, const char *fmt, ...)
{
    if (w->state == KM_ZKW_FENCED)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->fence_reason, sizeof w->fence_reason, fmt, ap);
    va_end(ap);
    w->state = KM_ZKW_FENCED;
    zkw_log(w, KM_LOG_ERROR, "FENCED, writing nothing more to ZooKeeper: %s", w->fence_reason);
    zkw_emit(w, KM_ZKW_EV_FENCED);
}

bool km_zkw_auth_refused(const km_zkw *w) { return w->state == KM_ZKW_REFUSED && w->sess.auth_failed; }

const char *km_zkw_state_name(km_zkw_state s)
{
    static const char *names[] = {"CONNECTING", "BECOME_CONTROLLER", "DUAL_WRITE", "RECOVERING",
                                  "FENCED", "REFUSED", "CLOSED"};
    return (unsigned)s < sizeof names / sizeof names[0] ? names[s] : "?";
}

void zkw_free_multi(zkw_multi *m)
{
    for (int i = 0; i < m->nops; i++) {
        free(m->ops[i].path);
        free(m->ops[i].data);
    }
    free(m->ops);
    free(m->zops);
    free(m->res);
    free(m->stats);
    free(m);
}

/* Forgets everything queued: used when the session died (the full re-sync after the new claim
 * rewrites whatever these would have written) and on free. */
void zkw_drop_pipeline(km_zkw *w)
{
    while (w->head) {
        zkw_multi *m = w->head;
        w->head = m->next;
        zkw_free_multi(m);
    }
    while (w->bhead) {
        zkw_batch *b = w->bhead;
        w->bhead = b->next;
        free(b);
    }
    w->tail = w->next_send = NULL;
    w->btail = NULL;
    w->inflight = 0;
    w->pending_ops = 0;
    zk_vcache_clear(&w->cache); /* predictions for dropped writes are void */
}

/* The client reconnects on its own and says nothing: a lost connection is logged here, because
 * until it is back nothing reaches ZooKeeper and the session may expire at any moment; and so is
 * its return, at once, with how long it was gone (measured from the loss, not from a later check). */
static void track_connection(km_zkw *w, int state)
{
    bool up = state == ZOO_CONNECTED_STATE;
    double gone = (double)(zk_now_ms() - w->down_since_ms) / 1000.0;
    if (w->connected && !up && state != ZOO_EXPIRED_SESSION_STATE) {
        w->m.disconnects++;
        zkw_log(w, KM_LOG_WARN, "lost the connection to ZooKeeper %s; the client reconnects, and the session "
                "expires if none is back within %d ms", w->hosts, w->cfg.session_timeout_ms);
    } else if (!w->connected && up && w->state == KM_ZKW_CONNECTING && w->m.sessions > 0) {
        zkw_log(w, KM_LOG_INFO, "new session with ZooKeeper %s established %.1f s after the connection was lost",
                w->hosts, gone);
    } else if (!w->connected && up && w->m.sessions > 0) {
        zkw_log(w, KM_LOG_INFO, "connection to ZooKeeper %s back after %.1f s, same session", w->hosts, gone);
    }
    if (w->connected && !up)
        w->down_since_ms = zk_now_ms();
    w->connected = up;
}

double km_zkw_seconds_disconnected(const km_zkw *w)
{
    return w->connected ? 0 : (double)(zk_now_ms() - w->down_since_ms) / 1000.0;
}

static void on_session(zk_session *s, int state)
{
    km_zkw *w = s->owner;
    track_connection(w, state);
    if (w->state == KM_ZKW_FENCED || w->state == KM_ZKW_REFUSED || w->state == KM_ZKW_CLOSED)
        return;
    if (state == ZOO_AUTH_FAILED_STATE) { /* configured security failed: never retried without it */
        w->state = KM_ZKW_REFUSED;
        snprintf(w->fence_reason, sizeof w->fence_reason, "%s", s->auth_error);
        zkw_log(w, KM_LOG_ERROR, "REFUSED: %s", w->fence_reason);
        zkw_emit(w, KM_ZKW_EV_REFUSED);
        return;
    }
    if (state == ZOO_EXPIRED_SESSION_STATE && w->cfg.fence_on_expiry) {
        w->state = KM_ZKW_FENCED;
        snprintf(w->fence_reason, sizeof w->fence_reason,
                 "zk session expired: another instance may have been elected meanwhile; stepping down");
        zkw_log(w, KM_LOG_WARN, "%s", w->fence_reason);
        zkw_emit(w, KM_ZKW_EV_FENCED);
        return;
    }
    if (state == ZOO_EXPIRED_SESSION_STATE) {
        zkw_log(w, KM_LOG_WARN, "zk session expired: new session, re-claim, full re-sync");
        w->state = KM_ZKW_CONNECTING;
        zk_session_restart(&w->sess);
        zkw_emit(w, KM_ZKW_EV_SESSION_LOST); /* the bridge stops submitting until the next CLAIMED */
        return;
    }
    if (state != ZOO_CONNECTED_STATE)
        return;
    if (w->state == KM_ZKW_CONNECTING) {
        w->m.sessions++;
        zkw_drop_pipeline(w);
        w->verify_running = w->recover_wanted = w->resync_wanted = false;
        zkw_claim_start(w); /* read only: its first read alone, for the guard (zk_claim.c's probed) */
    } else if (w->state == KM_ZKW_CLAIMING) {
        zkw_claim_resume(w);
    } else if (w->recover_wanted && w->inflight == 0) {
        zkw_recover_start(w);
    }
}

km_zkw *km_zkw_new(struct ev_loop *loop, const km_zkw_config *cfg, km_err *err)
{
    if (!cfg || !cfg->hosts || !*cfg->hosts)
        return km_fail(err, "zk writer: no ZooKeeper host list"), NULL;
    km_zkw *w = calloc(1, sizeof *w);
    if (!w || !(w->hosts = strdup(cfg->hosts))) {
        free(w);
        return km_fail(err, "zk writer: out of memory"), NULL;
    }
    w->cfg = *cfg;
    w->cfg.hosts = w->hosts;
    w->claim_record = cfg->claim_record ? strdup(cfg->claim_record) : NULL;
    w->claim_owner = strdup(cfg->claim_owner ? cfg->claim_owner : "");
    if ((cfg->claim_record && !w->claim_record) || !w->claim_owner) {
        km_zkw_free(w);
        return km_fail(err, "zk writer: out of memory"), NULL;
    }
    if (!w->cfg.session_timeout_ms) w->cfg.session_timeout_ms = 10000;
    if (!w->cfg.jute_maxbuffer) w->cfg.jute_maxbuffer = 0xfffff; /* ZooKeeper's own default */
    if (w->cfg.jute_maxbuffer < 2 * KM_ZKW_JUTE_HEADROOM) {
        km_zkw_free(w);
        return km_fail(err, "zk writer: jute.maxbuffer %zu is too small for any multi", cfg->jute_maxbuffer), NULL;
    }
    if (!w->cfg.max_multi_bytes) w->cfg.max_multi_bytes = 512 * 1024;
    if (w->cfg.max_multi_bytes > zkw_multi_limit(w)) w->cfg.max_multi_bytes = zkw_multi_limit(w);
    if (!w->cfg.max_multi_ops) w->cfg.max_multi_ops = 1000;
    if (!w->cfg.max_inflight) w->cfg.max_inflight = 64;
    if (!w->cfg.max_pending_ops) w->cfg.max_pending_ops = 100000;
    w->state = KM_ZKW_CONNECTING;
    w->log_offset = -1;
    w->confirmed_offset = -1;
    w->down_since_ms = zk_now_ms(); /* no connection yet */
    w->sess.hosts = w->hosts;
    w->sess.timeout_ms = w->cfg.session_timeout_ms;
    w->sess.security = cfg->security;
    w->sess.on_state = on_session;
    w->sess.owner = w;
    if (zk_session_start(&w->sess, loop, err)) {
        km_zkw_free(w);
        return NULL;
    }
    return w;
}

void km_zkw_free(km_zkw *w)
{
    if (!w)
        return;
    w->state = KM_ZKW_CLOSED;
    zkw_claim_wait_stop(w);
    zk_session_close(&w->sess); /* fires pending completions (ZCLOSING) while multis still exist */
    zkw_drop_pipeline(w);
    free(w->hosts);
    free(w->claim_record);
    free(w->claim_owner);
    free(w);
}

km_zkw_state km_zkw_get_state(const km_zkw *w)
{
    return w->state == KM_ZKW_READY && w->recover_wanted ? KM_ZKW_RECOVERING : w->state;
}
const char *km_zkw_fence_reason(const km_zkw *w) { return w->fence_reason; }
bool km_zkw_fenced_by_foreign(const km_zkw *w) { return w->foreign; }

bool km_zkw_claim_refused(const km_zkw *w) { return w->claim_refused; }
bool km_zkw_znode_too_large(const km_zkw *w) { return w->too_large; }
size_t zkw_multi_limit(const km_zkw *w) { return w->cfg.jute_maxbuffer - KM_ZKW_JUTE_HEADROOM; }

const char *zkw_outside(const km_zkw *w) { return w->cfg.single_instance ? "kmproxy" : "the election"; }
int64_t km_zkw_confirmed_offset(const km_zkw *w) { return w->confirmed_offset; }
int32_t km_zkw_confirmed_epoch(const km_zkw *w) { return w->confirmed_epoch; }
int km_zkw_migration_version(const km_zkw *w) { return w->mig_version; }
int32_t km_zkw_zk_controller_epoch(const km_zkw *w) { return w->zk_epoch; }
struct _zhandle *km_zkw_handle(km_zkw *w) { return w->sess.zh; }
bool km_zkw_connected(const km_zkw *w) { return w->connected; }
void km_zkw_abandon(km_zkw *w) { zk_session_abandon(&w->sess); }
size_t km_zkw_pending_ops(const km_zkw *w) { return w->pending_ops; }
bool km_zkw_idle(const km_zkw *w) { return km_zkw_get_state(w) == KM_ZKW_READY && !w->head; }
void km_zkw_cache_put(km_zkw *w, const char *path, int version) { zk_vcache_put(&w->cache, path, version); }
void km_zkw_cache_forget_all(km_zkw *w) { zk_vcache_clear(&w->cache); }
int km_zkw_cache_get(const km_zkw *w, const char *path) { return zk_vcache_get(&w->cache, path); }

/* Buckets for what a delta batch takes (a round trip or a few, up to a ZooKeeper that stalls) and what a
 * full sync takes (seconds for a small cluster, up to an hour for a large one). */
static const double DELTA_BOUNDS[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
static const double SNAPSHOT_BOUNDS[] = {0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600};
#define N_OF(a) (sizeof(a) / sizeof *(a))
_Static_assert(N_OF(DELTA_BOUNDS) <= KM_ZKW_HIST_MAX && N_OF(SNAPSHOT_BOUNDS) <= KM_ZKW_HIST_MAX, "histogram size");

static void hist_observe(km_zkw_hist *h, const double *bounds, size_t n, int64_t ms)
{
    double seconds = (double)ms / 1000;
    size_t i = 0;
    while (i < n && seconds > bounds[i])
        i++;
    h->counts[i]++;
    h->sum += seconds;
}

void zkw_note_delta_time(km_zkw *w, int64_t ms)
{
    w->m.write_delta_time_ms = ms;
    hist_observe(&w->m.write_delta, DELTA_BOUNDS, N_OF(DELTA_BOUNDS), ms);
}

void km_zkw_set_snapshot_time(km_zkw *w, int64_t ms)
{
    w->m.write_snapshot_time_ms = ms;
    hist_observe(&w->m.write_snapshot, SNAPSHOT_BOUNDS, N_OF(SNAPSHOT_BOUNDS), ms);
}

void km_zkw_note_log_offset(km_zkw *w, int64_t offset)
{
    if (offset > w->log_offset)
        w->log_offset = offset;
}

bool km_zkw_claim_waiting(const km_zkw *w) { return w->state == KM_ZKW_CLAIMING && w->claim_waits > 0; }

bool km_zkw_can_accept(km_zkw *w)
{
    bool full = w->pending_ops >= w->cfg.max_pending_ops;
    int64_t now = zk_now_ms();
    if (full && !w->blocked_since)
        w->blocked_since = now;
    if (!full && w->blocked_since) {
        w->blocked_total += now - w->blocked_since;
        w->blocked_since = 0;
    }
    return !full;
}

void km_zkw_get_metrics(const km_zkw *w, km_zkw_metrics *m)
{
    *m = w->m;
    int64_t lag = w->log_offset - w->confirmed_offset;
    m->write_behind_lag = w->log_offset < 0 || lag < 0 ? 0 : lag;
    m->blocking_kraft_ms = w->blocked_total + (w->blocked_since ? zk_now_ms() - w->blocked_since : 0);
    m->state = km_zkw_get_state(w);
    m->write_delta.bounds = DELTA_BOUNDS;
    m->write_delta.n = N_OF(DELTA_BOUNDS);
    m->write_snapshot.bounds = SNAPSHOT_BOUNDS;
    m->write_snapshot.n = N_OF(SNAPSHOT_BOUNDS);
}

char *km_zkw_metrics_json(const km_zkw *w)
{
    km_zkw_metrics m;
    km_zkw_get_metrics(w, &m);
    json_t *j = json_pack("{s:I,s:I,s:I,s:I,s:s,s:s,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}",
                          "zk_write_behind_lag", (json_int_t)m.write_behind_lag,
                          "zk_blocking_kraft_ms", (json_int_t)m.blocking_kraft_ms,
                          "zk_write_delta_time_ms", (json_int_t)m.write_delta_time_ms,
                          "zk_write_snapshot_time_ms", (json_int_t)m.write_snapshot_time_ms,
                          "zk_migration_state", km_zkw_state_name(m.state),
                          "zk_fence_reason", w->fence_reason,
                          "zk_multis_ok", (json_int_t)m.multis_ok, "zk_multis_resent", (json_int_t)m.multis_resent,
                          "zk_lost_acks_adopted", (json_int_t)m.lost_acks_adopted,
                          "zk_sessions", (json_int_t)m.sessions, "zk_claims", (json_int_t)m.claims,
                          "zk_znodes_created", (json_int_t)m.znodes_created,
                          "zk_znodes_updated", (json_int_t)m.znodes_updated,
                          "zk_znodes_deleted", (json_int_t)m.znodes_deleted);
    char *out = j ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(j);
    return out;
}

/* ---- /controller_epoch on demand ---- */

typedef struct epoch_read {
    void (*cb)(int rc, int32_t epoch, void *ctx);
    void *ctx;
} epoch_read;

static void on_epoch_read(int rc, const char *value, int len, const struct Stat *st, const void *data)
{
    (void)st;
    epoch_read *r = (epoch_read *)data;
    char buf[16] = "";
    if (rc == ZOK && value && len > 0)
        memcpy(buf, value, (size_t)len < sizeof buf - 1 ? (size_t)len : sizeof buf - 1);
    r->cb(rc, (int32_t)strtol(buf, NULL, 10), r->ctx);
    free(r);
}

int km_zkw_read_controller_epoch(km_zkw *w, void (*cb)(int rc, int32_t epoch, void *ctx), void *ctx, km_err *err)
{
    epoch_read *r = malloc(sizeof *r);
    if (!r)
        return km_fail(err, "zk: out of memory reading /controller_epoch");
    *r = (epoch_read){ cb, ctx };
    int rc = w->sess.zh ? zoo_aget(w->sess.zh, "/controller_epoch", 0, on_epoch_read, r) : ZINVALIDSTATE;
    if (rc != ZOK) {
        free(r);
        return km_fail(err, "zk: cannot read /controller_epoch: %s", zerror(rc));
    }
    return 0;
}
