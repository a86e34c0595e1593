/* A ZooKeeper session expiry during dual-write (issue 27, items 1-3), end to end: the daemon with a
 * real ZooKeeper behind the fault proxy, simulated ZK-mode brokers, and a log that keeps growing
 * (a topic config change every 20 ms, as a busy KRaft leader's log does). The link to ZooKeeper goes
 * silent well past the session timeout, then comes back: the server has expired the session.
 *  - the daemon never stops: deltas that arrive while it re-claims (the claim's multi is held a
 *    second by the proxy, so that they surely do) wait, then the re-sync has them;
 *  - after the re-claim every broker gets a full update (Type=2 LeaderAndIsr) at the new controller
 *    epoch and ends equal to the image;
 *  - /readyz (km_daemon_ready, what it answers) is checked before every loop iteration blocks, from
 *    the moment the silence outlasted the session timeout: it is never 200 until the brokers hold
 *    the new epoch and the full update.
 * With ha.enabled the same holds: the expired instance is fenced, steps down, leads again (it is
 * alone) and claims anew; while it is a standby it may be ready (a standby is, when it can take
 * over: docs/health.md), so /readyz is checked while it is active. */
#include "test_broker_drig.h"

#include <criterion/criterion.h>
#include <ev.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SESSION_MS 2000
#define SILENCE_S 5.0 /* well past the session timeout: ZooKeeper expires the session */

static drig G;

/* the log keeps growing */
static ev_timer feeder;
static int fed;
/* /readyz across the fault */
static ev_prepare watch;
static double window_opens; /* ev_time() from which 200 is wrong until the brokers are updated */
static int32_t epoch_before;
static long long full_lisr_before[BRIG_MAX_SIMS];
static int ready_in_window;
static char ready_state[600];

static void fini(void)
{
    ev_timer_stop(G.r.loop, &feeder);
    ev_prepare_stop(G.r.loop, &watch);
    drig_stop(&G);
}

/* One delta: a config change of the first topic (a ZooKeeper write, no broker request). */
static void feed_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)loop; (void)t; (void)revents;
    size_t it = 0;
    const km_topic *topic = km_image_next_topic(G.r.img, &it);
    char value[32];
    snprintf(value, sizeof value, "%d", 1000 + fed++);
    km_config_record cr;
    km_config_record_init(&cr);
    cr.resource_type = 2; /* TOPIC */
    cr.resource_name = km_cstr(km_topic_name(topic));
    cr.name = km_cstr("retention.ms");
    cr.value = km_cstr(value);
    const km_message_desc *mds[] = { &km_config_record_desc };
    const void *msgs[] = { &cr };
    if (!brig_append_batch(&G.r, mds, msgs, 1))
        cr_log_error("appending a delta: %s", G.r.why);
}

/* Every broker holds a controller epoch past the old one and got a full LeaderAndIsr since. */
static bool brokers_updated(void)
{
    for (int i = 0; i < G.r.nsims; i++) {
        json_t *st = km_bsim_state_json(G.r.sims[i]);
        int32_t epoch = (int32_t)json_integer_value(json_object_get(st, "controllerEpoch"));
        json_decref(st);
        int32_t id = km_bsim_broker_id(G.r.sims[i]);
        if (epoch <= epoch_before || brig_lisr_count(&G.r, id, 2) <= full_lisr_before[i])
            return false;
    }
    return true;
}

static void watch_cb(struct ev_loop *loop, ev_prepare *w, int revents)
{
    (void)loop; (void)w; (void)revents;
    if (!window_opens || ev_time() < window_opens || !km_daemon_ready(G.d))
        return;
    km_daemon_status now;
    km_daemon_get_status(G.d, &now);
    if (!now.active)
        return; /* HA: a standby is ready while it can take over (docs/health.md); the active one is checked */
    if (brokers_updated()) { /* the fault is over: 200 is right from here on */
        window_opens = 0;
        return;
    }
    if (!ready_in_window++) {
        km_daemon_status st;
        km_daemon_get_status(G.d, &st);
        snprintf(ready_state, sizeof ready_state, "zk %s, confirmed %lld of %lld, brokers in sync %d/%d, %zu pending",
                 st.zk_state ? st.zk_state : "-", (long long)st.zk_confirmed_offset, (long long)st.image_offset,
                 st.brokers_in_sync, st.brokers_total, st.broker_requests_pending);
    }
}

static void start(const char *const *settings)
{
    drig_opts o = { .brokers = 3, .via_proxy = true, .session_timeout_ms = "2000", .settings = settings,
                    .kafka_odd = KM_BSIM_KAFKA_IBP_3_4 };
    drig_start(&G, &o);
    drig_converge(&G, "start-up");
    epoch_before = G.r.zk_epoch;
    for (int i = 0; i < G.r.nsims; i++)
        full_lisr_before[i] = brig_lisr_count(&G.r, km_bsim_broker_id(G.r.sims[i]), 2);
    ev_prepare_init(&watch, watch_cb);
    ev_prepare_start(G.r.loop, &watch);
}

static void feed(bool on)
{
    if (on) {
        ev_timer_init(&feeder, feed_cb, 0.02, 0.02);
        ev_timer_start(G.r.loop, &feeder);
    } else {
        ev_timer_stop(G.r.loop, &feeder);
    }
}

static bool claim_held(brig *r)
{
    drig *g = r->ud;
    return km_fp_fired(g->fp) >= 1;
}

/* The link goes silent (no reset, no FIN) past the session timeout, then carries traffic again.
 * With hold_claim, the new session's first multi (the claim) is swallowed for a second, then its
 * connection cut: the re-claim stays under way that long, whatever the machine's speed, and the
 * writer verifies its claim after the cut. */
static void silence_past_the_session_timeout(bool hold_claim)
{
    km_fp_pause(G.fp, true);
    window_opens = ev_time() + SESSION_MS / 1000.0;
    brig_run_until(&G.r, drig_never, SILENCE_S);
    if (hold_claim)
        km_fp_arm(G.fp, KM_FP_MULTI_ANY, KM_FP_SWALLOW, "/controller_epoch", 0);
    km_fp_pause(G.fp, false);
    if (!hold_claim)
        return;
    cr_assert(brig_run_until(&G.r, claim_held, DRIG_GUARD), "the claim's multi never came");
    brig_run_until(&G.r, drig_never, 1.0); /* deltas keep coming while the claim is held */
    drig_status(&G);
    km_fp_disarm(G.fp);
}

/* ZooKeeper itself (not through the proxy) holds a /controller_epoch past the old one. */
static bool reclaimed(brig *r)
{
    static double next_look;
    if (ev_time() < next_look)
        return false;
    next_look = ev_time() + 0.05;
    drig *g = r->ud;
    km_zkc *c = km_zkc_open(km_zks_hosts(g->zs, 0), NULL, 10000);
    char *data = NULL;
    int32_t epoch = c && km_zkc_get(c, "/controller_epoch", &data, NULL, NULL) == ZOK ? atoi(data) : 0;
    free(data);
    km_zkc_close(c);
    return epoch > epoch_before;
}

static void after_the_expiry(const char *what)
{
    cr_assert(brig_run_until(&G.r, reclaimed, DRIG_GUARD), "%s: /controller_epoch never moved past %d", what,
              epoch_before);
    G.r.zk_epoch = 0; /* read again once the daemon is idle: the brokers must hold the new one */
    drig_converge(&G, what);
    cr_assert_gt(G.r.zk_epoch, epoch_before, "%s: no re-claim: /controller_epoch is still %d", what, G.r.zk_epoch);
    for (int i = 0; i < G.r.nsims; i++) {
        int32_t id = km_bsim_broker_id(G.r.sims[i]);
        cr_assert_gt(brig_lisr_count(&G.r, id, 2), full_lisr_before[i],
                     "%s: broker %d got no full LeaderAndIsr after the re-claim", what, id);
    }
    cr_assert(brokers_updated(), "%s: a broker is not at the new controller epoch", what);
    cr_assert_eq(ready_in_window, 0, "%s: /readyz said 200 %d times between the expiry and the brokers' full update "
                 "(first: %s)", what, ready_in_window, ready_state);
    km_daemon_status st = drig_status(&G);
    cr_assert_eq(st.zk_confirmed_offset, st.image_offset);
}

/* Issue 27 item 1: the writer re-claims while deltas keep coming; before, the first delta after the
 * expiry ended the daemon ("zk submit: writer is CONNECTING, not DUAL_WRITE"). */
Test(broker_expiry, deltas_throughout_an_expiry_neither_stop_the_daemon_nor_leave_a_broker_behind, .fini = fini,
     .timeout = 300)
{
    start(NULL);
    feed(true);
    silence_past_the_session_timeout(true);
    brig_run_until(&G.r, drig_never, 1.0); /* deltas while the writer re-claims and re-syncs */
    drig_status(&G);
    feed(false);
    after_the_expiry("after the expiry, deltas throughout");
    cr_assert_gt(fed, 100, "only %d deltas were fed", fed);
}

/* Items 2 and 3 alone: nothing in the log moves, so only the re-claim can bring the brokers the new
 * epoch; /readyz must wait for that. */
Test(broker_expiry, a_quiet_log_still_gets_every_broker_the_full_update_at_the_new_epoch, .fini = fini,
     .timeout = 300)
{
    start(NULL);
    silence_past_the_session_timeout(false);
    after_the_expiry("after the expiry, no delta");
}

/* With HA: the expired writer is fenced, the instance steps down, leads again and claims; the
 * deltas meanwhile never stop it. */
Test(broker_expiry, with_ha_the_expired_instance_steps_down_leads_again_and_updates_every_broker, .fini = fini,
     .timeout = 300)
{
    static const char *const ha[] = { "ha.enabled=true", NULL };
    start(ha);
    feed(true);
    silence_past_the_session_timeout(false);
    brig_run_until(&G.r, drig_never, 1.0);
    drig_status(&G);
    feed(false);
    after_the_expiry("after the expiry, HA");
}
