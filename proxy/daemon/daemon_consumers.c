/* What the daemon feeds each image delta to: the ZooKeeper bridge and the broker propagator.
 *
 * Order follows Kafka 3.9's migration driver: claim ZooKeeper, full sync (SYNC_KRAFT_TO_ZK),
 * and only then talk to the brokers (KRAFT_CONTROLLER_TO_BROKER_COMM), with the ZooKeeper
 * controller epoch the claim produced.  Both start once the log has been read up to its end,
 * because the KRaft controller's id and epoch come from the log.  A new KRaft leader epoch
 * restarts both: the bridge re-claims with the higher epoch and re-syncs, the brokers get a
 * full sync under the new controller epoch. */
#include "daemon_internal.h"
#include "km_broker.h"
#include "km_tls.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RESUME_CHECK_SECONDS 0.01
#define ZK_WATCH_FIRST_SECONDS 1.0   /* the first report of a missing session, doubling up to ... */
#define ZK_WATCH_MAX_SECONDS 60.0

typedef struct km_daemon_consumers {
    km_zkb *zkb;
    km_bprop *bprop;
    km_tls_ctx *broker_tls;                   /* SSL / SASL_SSL: outlives bprop's channels */
    km_config_broker_security sec;            /* listener and SASL credentials bprop points to */
    int32_t controller_id, controller_epoch;  /* what the bridge claimed with */
    ev_timer resume;                          /* while reading is paused: is there room again? */
    ev_timer zk_watch;                        /* reports a missing ZooKeeper session, with backoff */
    ev_timer reclaim;                         /* a single instance fenced by a new KRaft leader's claim */
    int zk_attempts;                          /* reports since then */
    double stale_logged_at;                   /* the last "rejects our epoch" error (one a minute) */
    int stale_unlogged;                       /* such rejections since, not logged */
    bool caught_up_once;                      /* the log was read to its end once: start-up is over */
    int32_t brokers_zk_epoch;                 /* the controller epoch the brokers were last activated with */
    bool full_update_pending;                 /* the last activation's full update is not answered by every broker */
    km_daemon_listener listener;              /* broker.listener against the image's registrations */
    char listener_logged[KM_DAEMON_LISTENER_TEXT]; /* what was last logged about it */
} km_daemon_consumers;

static void bridge_log(km_log_level level, const char *msg, void *ctx)
{
    km_daemon_log(ctx, (int)level, "zk: %s", msg);
}

static void broker_log(int level, const char *msg, void *ud)
{
    km_daemon_log(ud, level, "brokers: %s", msg);
}

static void brokers_fenced(km_bprop *p, int32_t broker_id, void *ud)
{
    (void)p;
    char why[160];
    snprintf(why, sizeof why, "broker %d answered STALE_CONTROLLER_EPOCH: another controller owns the brokers",
             broker_id);
    if (!km_daemon_step_down(ud, why))
        km_daemon_fatal(ud, "%s", why);
}

/* What a refused pass would have deleted, one log line each (an operator decides from them). */
static void log_refused_deletes(km_daemon *d, const char *lines)
{
    for (const char *line = lines; *line;) {
        size_t len = strcspn(line, "\n");
        km_daemon_log(d, KM_LOG_ERROR, "zk: would delete %.*s", (int)len - 2, line + 2); /* past "- " */
        line += len + (line[len] == '\n');
    }
}

/* Brokers only hear from us once ZooKeeper holds our claim and the full sync is done; while the
 * bridge re-syncs (after a session loss) they are held, then released up to what ZooKeeper holds.
 * A re-claim (a session expiry) bumped /controller_epoch: every broker then gets the full update a
 * takeover sends (full UpdateMetadata and LeaderAndIsr at the new epoch), as Kafka's migration driver
 * does after it claims again; whatever was queued for the old epoch is dropped for it. */
static void release_brokers(km_daemon *d, km_daemon_consumers *c, km_zkb *b)
{
    km_bprop_zk_holds(c->bprop, km_zkw_confirmed_offset(km_zkb_writer(b)));
    int32_t zk_epoch = km_zkw_zk_controller_epoch(km_zkb_writer(b));
    bool again = km_bprop_active(c->bprop);
    if (again && zk_epoch == c->brokers_zk_epoch)
        return;
    km_err err = {{0}};
    if (again)
        km_daemon_log(d, KM_LOG_INFO, "zk: re-claimed (controller epoch %d, was %d) and re-synced; a full update "
                      "(UpdateMetadata and LeaderAndIsr of every partition) goes to every ZK-mode broker", zk_epoch,
                      c->brokers_zk_epoch);
    else
        km_daemon_log(d, KM_LOG_INFO, "zk: in sync; sending to ZK-mode brokers with controller epoch %d", zk_epoch);
    c->brokers_zk_epoch = zk_epoch;
    c->full_update_pending = true; /* ready once every broker answered it all (km_daemon_brokers_updating) */
    if (km_bprop_activate(c->bprop, d->img, zk_epoch, &err))
        km_daemon_fatal(d, "brokers: %s", err.msg);
}

bool km_daemon_brokers_updating(const km_daemon *d, int32_t *zk_epoch, size_t *pending)
{
    km_daemon_consumers *c = d->consumers;
    if (!c || !c->bprop || !c->full_update_pending)
        return false;
    *zk_epoch = c->brokers_zk_epoch;
    *pending = km_bprop_pending(c->bprop);
    if (*pending == 0 && km_bprop_ready(c->bprop) == km_bprop_channel_count(c->bprop))
        c->full_update_pending = false; /* every broker answered everything at the new epoch */
    return c->full_update_pending;
}

static bool reclaim_after_election(km_daemon *d, km_zkb *b);

static void bridge_phase(km_zkb *b, km_zkb_phase phase, void *ctx)
{
    km_daemon *d = ctx;
    km_daemon_consumers *c = d->consumers;
    if (phase == KM_ZKB_STOPPED && km_zkb_refused(b)) { /* bad input: no other instance would do better */
        log_refused_deletes(d, km_zkb_refused_deletes(b));
        km_daemon_fatal_input(d, "ZooKeeper mirror refused: %s", km_zkb_error(b));
        return;
    }
    /* A single instance refused by what ZooKeeper holds (someone else's claim at our KRaft epoch or a
     * newer one, a writer past the claim record): exit 2, so that systemd does not restart it into
     * the same refusal every few seconds; the operator decides (docs/runbook.md). */
    if (phase == KM_ZKB_STOPPED && !d->election && km_zkw_claim_refused(km_zkb_writer(b))) {
        km_daemon_fatal_input(d, "ZooKeeper claim refused: %s", km_zkb_error(b));
        return;
    }
    if (phase == KM_ZKB_STOPPED && km_zkw_fenced_by_foreign(km_zkb_writer(b))) { /* no standby may claim either */
        km_daemon_fatal(d, "ZooKeeper mirror stopped: %s", km_zkb_error(b));
        return;
    }
    if (phase == KM_ZKB_STOPPED && reclaim_after_election(d, b))
        return;
    if (phase == KM_ZKB_STOPPED) {
        char why[700];
        snprintf(why, sizeof why, "ZooKeeper mirror stopped: %s", km_zkb_error(b));
        if (!km_daemon_step_down(d, why))
            km_daemon_fatal(d, "%s", why);
        return;
    }
    if (phase == KM_ZKB_DUAL_WRITE)
        km_daemon_sync_done(d, b);
    if (phase == KM_ZKB_DUAL_WRITE && d->proxy) /* controller RPCs passing inline with an older one are stale */
        km_inline_set_controller_epoch(d->proxy, km_zkw_zk_controller_epoch(km_zkb_writer(b)));
    if (!c->bprop)
        return;
    km_bprop_hold(c->bprop, phase != KM_ZKB_DUAL_WRITE);
    if (phase == KM_ZKB_DUAL_WRITE)
        release_brokers(d, c, b);
}

static void reclaim_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)loop; (void)revents;
    km_daemon_stop_active(t->data); /* the next caught-up claims afresh, every guard first */
}

/* Beside Kafka's own controllers (docs/runbook.md) every KRaft election has the new leader's migration driver
 * claim ZooKeeper, which fences our writer (/controller_epoch moved) - often before our observer has heard of
 * the new leader. Following a live quorum, a single instance does not exit then: it drops the bridge and the
 * broker channels and claims again from nothing, with all the claim's rules: the new leader's own claim is
 * taken over once the log names that leader (a newer KRaft epoch than the log's is waited for, never written
 * over), and any other writer is refused as before. With HA the instance steps down and the election decides. */
static bool reclaim_after_election(km_daemon *d, km_zkb *b)
{
    km_zkw *w = km_zkb_writer(b);
    if (d->election || !km_daemon_quorum_mode(d) || km_zkw_get_state(w) != KM_ZKW_FENCED ||
        km_zkw_fenced_by_foreign(w) || d->stopping)
        return false;
    km_daemon_consumers *c = d->consumers;
    km_daemon_log(d, KM_LOG_WARN, "zk: fenced (%s): claiming again from nothing once the log names the KRaft leader",
                  km_zkb_error(b));
    ev_init(&c->reclaim, reclaim_cb);
    c->reclaim.data = d;
    ev_timer_set(&c->reclaim, 0., 0.); /* the bridge is freed outside its own callback */
    ev_timer_start(d->loop, &c->reclaim);
    return true;
}

/* KRaftMigrationDriver sends a delta's RPCs after its ZooKeeper writes: requests built for an
 * offset go once ZooKeeper has acknowledged it. */
static void bridge_confirmed(km_zkb *b, int64_t offset, void *ctx)
{
    km_daemon *d = ctx;
    (void)b;
    if (d->consumers->bprop)
        km_bprop_zk_holds(d->consumers->bprop, offset);
}

/* Read at each send: a re-claim after a session expiry bumps it. */
static int32_t zk_controller_epoch(km_bprop *p, void *ud)
{
    km_daemon *d = ud;
    (void)p;
    return km_zkw_zk_controller_epoch(km_zkb_writer(d->consumers->zkb));
}

typedef struct epoch_check { km_daemon *d; int32_t broker, sent; } epoch_check;

/* The broker has seen a newer controller epoch than ZooKeeper's /controller_epoch, which is ours: it
 * takes its controllers from another ZooKeeper ensemble or chroot (a typo in zookeeper.connect).
 * Nothing we send it lands; /readyz says so while it lasts. Logged once a minute, with a count. */
static void stale_but_ours(km_daemon *d, km_daemon_consumers *c, int32_t broker, int32_t sent)
{
    double now = ev_now(d->loop);
    if (c->stale_logged_at && now - c->stale_logged_at < 60) {
        c->stale_unlogged++;
        return;
    }
    km_daemon_log(d, KM_LOG_ERROR, "brokers: broker %d rejects controller epoch %d as stale, yet /controller_epoch "
                  "in %s is ours: the broker has seen a newer epoch from another ZooKeeper ensemble or chroot "
                  "(is zookeeper.connect the brokers' own?); it applies nothing we send (%d more such answers in "
                  "the last minute)", broker, sent, d->cfg.zk_connect, c->stale_unlogged);
    c->stale_logged_at = now;
    c->stale_unlogged = 0;
}

static void controller_epoch_read(int rc, int32_t epoch, void *ctx)
{
    epoch_check *ec = ctx;
    km_daemon *d = ec->d;
    km_daemon_consumers *c = d->consumers;
    if (rc != 0) /* ZOK */
        km_daemon_log(d, KM_LOG_WARN, "brokers: broker %d answered STALE_CONTROLLER_EPOCH; reading "
                      "/controller_epoch failed (ZooKeeper error %d): going on", ec->broker, rc);
    else if (c && c->bprop && c->zkb) {
        int32_t ours = km_zkw_zk_controller_epoch(km_zkb_writer(c->zkb));
        if (epoch != ours)
            km_bprop_fence(c->bprop, ec->broker);
        else
            stale_but_ours(d, c, ec->broker, ec->sent);
    }
    free(ec);
}

/* Kafka's controller only logs a broker's STALE_CONTROLLER_EPOCH; we ask ZooKeeper whether
 * another writer moved /controller_epoch, and stop only then. */
static void stale_controller_epoch(km_bprop *p, int32_t broker, int32_t sent, void *ud)
{
    km_daemon *d = ud;
    km_err err = {{0}};
    epoch_check *ec = malloc(sizeof *ec);
    (void)p;
    if (!ec) {
        km_daemon_log(d, KM_LOG_WARN, "brokers: broker %d: STALE_CONTROLLER_EPOCH; out of memory: going on", broker);
        return;
    }
    *ec = (epoch_check){ d, broker, sent };
    if (km_zkw_read_controller_epoch(km_zkb_writer(d->consumers->zkb), controller_epoch_read, ec, &err)) {
        free(ec);
        km_daemon_log(d, KM_LOG_WARN, "brokers: broker %d: STALE_CONTROLLER_EPOCH; %s: going on", broker, err.msg);
    }
}

static int controller_identity(km_daemon *d, int32_t *id, int32_t *epoch, km_err *err)
{
    *id = d->cfg.kraft_controller_id >= 0 ? d->cfg.kraft_controller_id : km_image_raft_leader(d->img);
    *epoch = km_image_raft_leader_epoch(d->img) >= 0 ? km_image_raft_leader_epoch(d->img) : km_image_epoch(d->img);
    km_quorum_stats qs;
    if (*id < 0 && d->quorum) { /* a snapshot drops the LeaderChange records: the raft client's leader, as
                                 * KRaftMigrationDriver.onControllerChange takes it */
        km_quorum_get_stats(d->quorum, &qs);
        *id = qs.leader_id;
        *epoch = qs.leader_id >= 0 ? qs.leader_epoch : *epoch;
    }
    if (*id < 0)
        return km_fail(err, "the log names no KRaft leader yet: set kraft.controller.id");
    if (*epoch < 0)
        return km_fail(err, "the metadata log is empty: no KRaft epoch to claim ZooKeeper with");
    return 0;
}

/* The ZooKeeper client reconnects on its own, silently: this says so, at growing intervals, for as
 * long as there is no session, and once more when one is back. */
static void zk_watch_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)revents;
    km_daemon *d = t->data;
    km_daemon_consumers *c = d->consumers;
    km_zkb *b = km_daemon_zkb(d); /* the claim's bridge, or the read-only pass before it */
    if (!b)
        return ev_timer_stop(loop, t); /* stepped down: nothing of ours is connecting */
    km_zkw *w = km_zkb_writer(b);
    if (km_zkw_connected(w)) { /* the writer logged its return at once, with how long it was gone */
        c->zk_attempts = 0;
        t->repeat = ZK_WATCH_FIRST_SECONDS;
    } else {
        c->zk_attempts++;
        double next = t->repeat * 2 < ZK_WATCH_MAX_SECONDS ? t->repeat * 2 : ZK_WATCH_MAX_SECONDS;
        km_daemon_log(d, KM_LOG_WARN, "zk: no %s with %s for %.1f s (check %d); the client keeps retrying, "
                      "next check in %.0f s", km_zkw_get_state(w) == KM_ZKW_CONNECTING ? "session" : "connection",
                      d->cfg.zk_connect, km_zkw_seconds_disconnected(w), c->zk_attempts, next);
        t->repeat = next;
    }
    ev_timer_again(loop, t);
}

bool km_daemon_zk_connected(const km_daemon *d)
{
    km_zkb *b = km_daemon_zkb(d);
    return b && km_zkw_connected(km_zkb_writer(b));
}

void km_daemon_watch_zk(km_daemon *d)
{
    km_daemon_consumers *c = d->consumers;
    if (!ev_is_active(&c->zk_watch)) {
        c->zk_watch.repeat = ZK_WATCH_FIRST_SECONDS;
        ev_timer_again(d->loop, &c->zk_watch);
    }
}

static void fill_bridge_config(km_daemon *d, km_daemon_consumers *c, km_zkb_config *out)
{
    km_zkb_config zc = {
        .zk = {.hosts = d->cfg.zk_connect, .session_timeout_ms = d->cfg.zk_session_timeout_ms,
               .jute_maxbuffer = (size_t)d->cfg.zk_jute_maxbuffer,
               .controller_id = c->controller_id, .controller_epoch = c->controller_epoch,
               .max_pending_ops = (size_t)d->cfg.zk_max_pending_records, .log = bridge_log, .ctx = d,
               .fence_on_expiry = d->election != NULL, .claim_record = d->claim_record,
               .claim_owner = d->instance, .single_instance = !d->election, .security = &d->zk_security.sec},
        .passwords = {.secret = d->cfg.password_encoder_secret,
                      .keyfactory_algorithm = d->cfg.password_encoder_keyfactory_algorithm,
                      .cipher_algorithm = d->cfg.password_encoder_cipher_algorithm,
                      .key_length = d->cfg.password_encoder_key_length,
                      .iterations = d->cfg.password_encoder_iterations},
        .guard = {.force = d->cfg.zk_force, .max_deletes_set = d->cfg.zk_max_deletes != KM_CONFIG_UNSET,
                  .max_deletes = d->cfg.zk_max_deletes, .wait_for_log = km_daemon_quorum_mode(d)},
        .on_phase = bridge_phase, .on_confirmed = bridge_confirmed, .ctx = d};
    *out = zc;
}

static int start_bridge(km_daemon *d, km_daemon_consumers *c, km_err *err)
{
    if (controller_identity(d, &c->controller_id, &c->controller_epoch, err))
        return -1;
    km_zkb_config zc;
    fill_bridge_config(d, c, &zc);
    km_daemon_log(d, KM_LOG_INFO, "zk: claiming %s as KRaft controller %d, epoch %d", d->cfg.zk_connect,
                  c->controller_id, c->controller_epoch);
    c->zkb = km_zkb_new(d->loop, d->img, &zc, err);
    if (c->zkb)
        km_daemon_watch_zk(d);
    return c->zkb ? 0 : -1;
}

/* broker.security.protocol: TLS (the broker's name verified unless switched off) and SASL. */
static int broker_security(km_daemon *d, km_daemon_consumers *c, km_err *err)
{
    if (km_config_check_files(&d->cfg, err) || km_config_resolve_broker_security(&d->cfg, &c->sec, err))
        return -1; /* the files first: a FIFO swapped in since the start must not block OpenSSL */
    if (c->sec.tls) {
        km_tls_config tc = {.ca_file = d->cfg.broker_tls_ca, .cert_file = d->cfg.broker_tls_cert,
                            .key_file = d->cfg.broker_tls_key, .no_name_check = !c->sec.verify_name};
        if (!(c->broker_tls = km_tls_client_ctx_new(&tc, err)))
            return -1;
    }
    km_daemon_log(d, KM_LOG_INFO, "brokers: %s to listener %s%s%s%s%s%s%s", c->sec.protocol, c->sec.listener,
                  c->sec.tls && !c->sec.verify_name ? " (host names not verified)" : "",
                  c->sec.mechanism ? ", SASL/" : "", c->sec.mechanism ? km_sasl_mech_name(c->sec.mechanism) : "",
                  c->sec.mechanism ? " as '" : "", c->sec.mechanism ? c->sec.username : "",
                  c->sec.mechanism ? "'" : "");
    return 0;
}

static int start_brokers(km_daemon *d, km_daemon_consumers *c, km_err *err)
{
    if (!d->cfg.brokers_enabled)
        return 0;
    if (broker_security(d, c, err))
        return -1;
    km_bprop_config bc = {
        .controller_id = c->controller_id, .listener = c->sec.listener, .net = {.tls = c->broker_tls},
        .sasl = {.mechanism = c->sec.mechanism, .username = c->sec.username, .password = c->sec.password},
        .request_timeout = d->cfg.broker_request_timeout_ms / 1000.0, .max_queue = (size_t)d->cfg.broker_max_queued,
        .capture = d->capture, .log = broker_log, .log_ud = d, .fenced = brokers_fenced,
        .zk_controller_epoch = zk_controller_epoch, .stale_controller_epoch = stale_controller_epoch,
        .zk_ordered = true, .ud = d};
    c->bprop = km_bprop_new(d->loop, &bc, err);
    return c->bprop ? 0 : -1;
}

/* The bridge goes last and with c->bprop cleared: closing its session answers pending reads. */
static void stop_all(km_daemon_consumers *c)
{
    km_bprop *p = c->bprop;
    c->bprop = NULL;
    km_bprop_free(p);
    km_tls_ctx_free(c->broker_tls);
    km_config_broker_security_clear(&c->sec);
    km_zkb_free(c->zkb);
    c->broker_tls = NULL;
    c->zkb = NULL;
}

/* First time the log is read to its end, or after a KRaft leader change: (re)start both. */
static int ensure_started(km_daemon *d)
{
    km_daemon_consumers *c = d->consumers;
    int32_t id, epoch;
    km_err err = {{0}};
    if (c->zkb && !controller_identity(d, &id, &epoch, &err) && epoch == c->controller_epoch &&
        id == c->controller_id)
        return 0;
    if (!c->zkb && !controller_identity(d, &c->controller_id, &c->controller_epoch, &err)) {
        km_zkb_config zc; /* a claim from nothing: every guard first, read only (daemon_precheck.c) */
        fill_bridge_config(d, c, &zc);
        if (!km_daemon_zk_prechecked(d, &zc))
            return 0;
    }
    if (c->zkb)
        km_daemon_log(d, KM_LOG_INFO, "KRaft controller is now %d (epoch %d): re-claiming ZooKeeper",
                      km_image_raft_leader(d->img), km_image_raft_leader_epoch(d->img));
    stop_all(c);
    if (start_bridge(d, c, &err) || start_brokers(d, c, &err)) {
        km_daemon_fatal(d, "%s", err.msg);
        return -1;
    }
    return 0;
}

static void resume_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)loop; (void)revents;
    km_daemon *d = t->data;
    if (km_daemon_consumers_ready(d)) {
        ev_timer_stop(d->loop, t);
        km_daemon_kick(d);
    }
}

int km_daemon_start_consumers(km_daemon *d, km_err *err)
{
    km_daemon_consumers *c = calloc(1, sizeof *c);
    if (!c)
        return km_fail(err, "out of memory");
    ev_timer_init(&c->resume, resume_cb, RESUME_CHECK_SECONDS, RESUME_CHECK_SECONDS);
    c->resume.data = d;
    ev_init(&c->zk_watch, zk_watch_cb);
    c->zk_watch.data = d;
    d->consumers = c;
    return 0;
}

void km_daemon_stop_consumers(km_daemon *d)
{
    if (!d->consumers)
        return;
    ev_timer_stop(d->loop, &d->consumers->resume);
    ev_timer_stop(d->loop, &d->consumers->zk_watch);
    ev_timer_stop(d->loop, &d->consumers->reclaim);
    stop_all(d->consumers);
    free(d->consumers);
    d->consumers = NULL;
}

bool km_daemon_consumers_ready(km_daemon *d)
{
    km_daemon_consumers *c = d->consumers;
    if (!c->zkb || km_zkb_can_accept(c->zkb))
        return true;
    if (!ev_is_active(&c->resume))
        ev_timer_start(d->loop, &c->resume);
    return false;
}

/* The endpoint the proxy forwards to: broker.listener's, else the first. */
static void proxy_broker(km_daemon *d, const km_broker *b)
{
    for (int32_t i = 0; i < b->n_endpoints; i++) {
        const km_endpoint *e = &b->endpoints[i];
        if (!d->cfg.broker_listener || !strcmp(e->name, d->cfg.broker_listener)) {
            km_inline_broker_registered(d->proxy, b->id, e->host, e->port);
            return;
        }
    }
}

/* Brokers registered in the log get their proxy routes (listeners) before clients hear of them. */
static void proxy_brokers(km_daemon *d, const km_delta *delta)
{
    km_broker_change bc;
    for (size_t it = 0; d->proxy && km_delta_next_broker(delta, &it, &bc);)
        if (bc.new && (bc.what & (KM_BC_REGISTERED | KM_BC_REREGISTERED | KM_BC_ENDPOINTS)))
            proxy_broker(d, bc.new);
}

void km_daemon_publish_delta(km_daemon *d, const km_delta *delta)
{
    proxy_brokers(d, delta);
    km_daemon_consumers *c = d->consumers;
    km_err err = {{0}};
    if (!km_daemon_is_active(d))
        return; /* stepping down (HA): the bridge and channels are about to go; the next active one syncs */
    if (c->zkb && km_zkb_delta(c->zkb, delta, &err)) {
        km_daemon_fatal(d, "zk: %s", err.msg);
        return;
    }
    if (c->bprop && km_bprop_active(c->bprop) && km_bprop_publish(c->bprop, delta, &err))
        km_daemon_fatal(d, "brokers: %s", err.msg);
}

/* "broker 1 has INTERNAL,EXTERNAL; " appended to out. */
static void describe_endpoints(const km_broker *b, char *out, size_t cap)
{
    size_t len = strlen(out);
    len += (size_t)snprintf(out + len, len < cap ? cap - len : 0, "broker %d has ", b->id);
    for (int32_t i = 0; i < b->n_endpoints && len < cap; i++)
        len += (size_t)snprintf(out + len, cap - len, "%s%s", i ? "," : "", b->endpoints[i].name);
    if (len < cap)
        snprintf(out + len, cap - len, "%s; ", b->n_endpoints ? "" : "no listener");
}

/* Which registered brokers lack broker.listener (Kafka's inter.broker.listener.name): no channel is
 * made to them, so they would hear nothing, silently. */
static void check_listener(km_daemon *d, km_daemon_listener *l)
{
    if (!l->name[0]) {
        km_config_broker_security sec;
        memset(&sec, 0, sizeof sec);
        km_err err = {{0}};
        if (!km_config_resolve_broker_security(&d->cfg, &sec, &err)) /* if not, starting the channels says why */
            snprintf(l->name, sizeof l->name, "%s", sec.listener);
        km_config_broker_security_clear(&sec);
        if (!l->name[0])
            return;
    }
    l->zk_brokers = l->n_missing = 0;
    l->missing[0] = '\0';
    size_t it = 0;
    for (const km_broker *b; (b = km_image_next_broker(d->img, &it));) {
        if (!b->is_migrating_zk_broker || b->fenced)
            continue;
        l->zk_brokers++;
        bool has = false;
        for (int32_t i = 0; i < b->n_endpoints && !has; i++)
            has = !strcmp(b->endpoints[i].name, l->name);
        if (!has) {
            l->n_missing++;
            describe_endpoints(b, l->missing, sizeof l->missing);
        }
    }
}

/* At start-up the image says whether broker.listener can work: when no broker registered it, that
 * is a configuration error (exit 2). Later a broker may register without it: a log line and a
 * readiness reason. */
static bool listener_usable(km_daemon *d, km_daemon_consumers *c)
{
    km_daemon_listener *l = &c->listener;
    if (!d->cfg.brokers_enabled)
        return true;
    check_listener(d, l);
    bool starting = !c->caught_up_once;
    c->caught_up_once = true;
    if (starting && l->n_missing && l->n_missing == l->zk_brokers) {
        km_daemon_fatal_input(d, "broker.listener: none of the %d migrating ZK-mode brokers in the metadata log "
                              "registered a listener named %s (%s): none would get any controller RPC; set "
                              "broker.listener (or broker.security.protocol) to one they register", l->zk_brokers,
                              l->name, l->missing);
        return false;
    }
    if (strcmp(l->missing, c->listener_logged)) {
        if (l->n_missing)
            km_daemon_log(d, KM_LOG_ERROR, "brokers: %d of %d migrating ZK-mode brokers registered no listener named "
                          "%s (%s): they get no controller RPC", l->n_missing, l->zk_brokers, l->name, l->missing);
        else
            km_daemon_log(d, KM_LOG_INFO, "brokers: every migrating ZK-mode broker registers listener %s again",
                          l->name);
        snprintf(c->listener_logged, sizeof c->listener_logged, "%s", l->missing);
    }
    return true;
}

const km_daemon_listener *km_daemon_listener_status(const km_daemon *d)
{
    const km_daemon_consumers *c = d->consumers;
    return c && c->caught_up_once && d->cfg.brokers_enabled && c->listener.name[0] ? &c->listener : NULL;
}


void km_daemon_caught_up(km_daemon *d)
{
    size_t it = 0;
    for (const km_broker *b; d->proxy && (b = km_image_next_broker(d->img, &it));) /* e.g. from a snapshot */
        proxy_broker(d, b);
    if (!listener_usable(d, d->consumers))
        return;
    if (d->cfg.zk_connect && km_image_offset(d->img) >= 0 && km_daemon_is_active(d))
        ensure_started(d);
}

void km_daemon_consumers_status(const km_daemon *d, km_daemon_status *st)
{
    const km_daemon_consumers *c = d->consumers;
    if (c && c->zkb) {
        km_zkw_metrics m;
        km_zkw_get_metrics(km_zkb_writer(c->zkb), &m);
        st->zk_confirmed_offset = km_zkw_confirmed_offset(km_zkb_writer(c->zkb));
        st->zk_write_behind_lag = m.write_behind_lag;
        st->zk_state = km_zkw_state_name(m.state);
        st->zk_idle = km_zkb_idle(c->zkb);
    }
    if (c && c->bprop) {
        st->brokers_total = (int)km_bprop_channel_count(c->bprop);
        st->brokers_in_sync = km_bprop_active(c->bprop) ? (int)km_bprop_ready(c->bprop) : 0;
        st->broker_requests_pending = km_bprop_pending(c->bprop);
    }
}

static void zk_hist(km_buf *out, const char *name, const char *help, const km_zkw_hist *h)
{
    km_metrics_histogram(out, name, help, NULL, true, h->bounds, h->counts, h->n, h->sum);
}

static void zk_metrics(const km_daemon *d, km_zkb *zkb, km_buf *out)
{
    km_zkw_metrics m;
    km_zkw_get_metrics(km_zkb_writer(zkb), &m);
    km_metrics_sample(out, "kmproxy_zk_write_behind_lag_records", "gauge",
                      "Last image offset minus the offset ZooKeeper is confirmed to hold (ZkWriteBehindLag).", NULL,
                      true, (double)m.write_behind_lag);
    km_metrics_sample(out, "kmproxy_zk_blocking_kraft_seconds_total", "counter",
                      "Time the log reader was held back by the write-behind bound.", NULL, true,
                      (double)m.blocking_kraft_ms / 1000);
    zk_hist(out, "kmproxy_zk_write_delta_seconds", "Delta batches written to ZooKeeper, submit to confirm "
            "(Kafka's ZkWriteDeltaTimeMs is the last one).", &m.write_delta);
    zk_hist(out, "kmproxy_zk_write_snapshot_seconds", "Full syncs into ZooKeeper, start to end "
            "(Kafka's ZkWriteSnapshotTimeMs is the last one).", &m.write_snapshot);
    km_metrics_sample(out, "kmproxy_zk_migration_state", "gauge",
                      "ZkMigrationState from the image: 0 NONE, 1 MIGRATION, 2 PRE_MIGRATION, 3 POST_MIGRATION.", NULL,
                      true, km_image_zk_migration_state(d->img));
    char labels[64];
    snprintf(labels, sizeof labels, "state=\"%s\"", km_zkw_state_name(m.state));
    km_metrics_sample(out, "kmproxy_zk_writer_state", "gauge", "The ZooKeeper writer's state (1 for the current one).",
                      labels, true, 1);
    km_metrics_sample(out, "kmproxy_zk_fenced", "gauge", "1 once another writer owns ZooKeeper.", NULL, true,
                      m.state == KM_ZKW_FENCED);
    km_metrics_sample(out, "kmproxy_zk_disconnects_total", "counter",
                      "Connections to ZooKeeper lost while the session lived (the client reconnects).", NULL, true,
                      (double)m.disconnects);
    km_metrics_sample(out, "kmproxy_zk_lost_acks_adopted_total", "counter",
                      "Writes whose ack was lost and that were found to have landed.", NULL, true,
                      (double)m.lost_acks_adopted);
}

void km_daemon_consumers_metrics(const km_daemon *d, km_buf *out)
{
    const km_daemon_consumers *c = d->consumers;
    if (c && c->zkb)
        zk_metrics(d, c->zkb, out);
    if (c && c->bprop)
        km_bprop_render_metrics(c->bprop, out);
}

km_zkb *km_daemon_zkb(const km_daemon *d)
{
    km_zkb *b = d->consumers ? d->consumers->zkb : NULL;
    return b ? b : km_daemon_zk_precheck_bridge(d);
}

void km_daemon_stop_active(km_daemon *d)
{
    km_daemon_consumers *c = d->consumers;
    if (c->zkb && d->election && !km_zkel_connected(d->election)) /* stepping down for a lost network */
        km_zkw_abandon(km_zkb_writer(c->zkb));
    ev_timer_stop(d->loop, &c->zk_watch);
    ev_timer_stop(d->loop, &c->resume);
    stop_all(c);
    c->zk_attempts = 0;
    km_daemon_kick(d); /* reading may have been held back by the bridge we just dropped */
}

/* The broker channels' security material (CA, certificate, key, SASL password file), read again and
 * checked before anything changes: a bad file leaves the channels as they are. */
static int read_broker_material(km_daemon *d, km_config_broker_security *sec, km_tls_ctx **fresh, km_err *err)
{
    memset(sec, 0, sizeof *sec);
    *fresh = NULL;
    int rc = km_config_check_files(&d->cfg, err) ? -1 : km_config_resolve_broker_security(&d->cfg, sec, err);
    if (!rc && sec->tls) {
        km_tls_config tc = {.ca_file = d->cfg.broker_tls_ca, .cert_file = d->cfg.broker_tls_cert,
                            .key_file = d->cfg.broker_tls_key, .no_name_check = !sec->verify_name};
        rc = (*fresh = km_tls_client_ctx_new(&tc, err)) ? 0 : -1;
    }
    if (rc)
        km_config_broker_security_clear(sec);
    return rc;
}

/* At start, standby included: a bad file is a configuration error now, not at failover. */
int km_daemon_check_broker_material(km_daemon *d, km_err *err)
{
    km_config_broker_security sec;
    km_tls_ctx *fresh;
    if (read_broker_material(d, &sec, &fresh, err))
        return -1;
    km_tls_ctx_free(fresh);
    km_config_broker_security_clear(&sec);
    return 0;
}

/* SIGHUP: rotated certificates or keys take effect. The channels are reconfigured in place, as
 * Kafka reconfigures its channel builder: each connects again with the material read again and
 * resends what it had in flight; pending StopReplicas, deletions and queues stay, and no broker
 * gets a full sync (a FULL LeaderAndIsr triggers stray-log detection on 3.6.2+). */
void km_daemon_reload_brokers(km_daemon *d)
{
    km_daemon_consumers *c = d->consumers;
    km_err err = {{0}};
    if (!c->bprop) {
        km_daemon_log(d, KM_LOG_INFO, "SIGHUP: no broker channels now (%s): their TLS material is read when they "
                      "start", !d->cfg.brokers_enabled ? "brokers.enabled=false" : "not active");
        return;
    }
    km_config_broker_security sec;
    km_tls_ctx *fresh;
    if (read_broker_material(d, &sec, &fresh, &err)) {
        km_daemon_log(d, KM_LOG_ERROR, "SIGHUP: broker TLS material: %s; the channels keep the material they had",
                      err.msg);
        return;
    }
    km_bchan_sasl sasl = {.mechanism = sec.mechanism, .username = sec.username, .password = sec.password};
    if (km_bprop_reconfigure(c->bprop, &(km_net_opts){.tls = fresh}, &sasl, &err)) {
        /* some channels may hold the new context already: none may outlive either */
        km_bprop_free(c->bprop);
        c->bprop = NULL;
        km_tls_ctx_free(fresh);
        km_config_broker_security_clear(&sec);
        km_daemon_fatal(d, "SIGHUP: brokers: %s", err.msg);
        return;
    }
    km_tls_ctx_free(c->broker_tls); /* no connection uses it any more */
    km_config_broker_security_clear(&c->sec);
    c->broker_tls = fresh;
    c->sec = sec;
    km_daemon_log(d, KM_LOG_INFO, "SIGHUP: broker channels reconfigured with their TLS material read again (each "
                  "connects again with it and resends what it had in flight; nothing pending is dropped)");
}

/* ---- for kmproxy status (daemon_status.c) ---- */

km_bprop *km_daemon_bprop(const km_daemon *d) { return d->consumers ? d->consumers->bprop : NULL; }

bool km_daemon_claimed_as(const km_daemon *d, int32_t *controller_id, int32_t *controller_epoch)
{
    if (!d->consumers || !d->consumers->zkb)
        return false;
    *controller_id = d->consumers->controller_id;
    *controller_epoch = d->consumers->controller_epoch;
    return true;
}
