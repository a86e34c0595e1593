/* Issue 9's defects through the daemon (km_daemon with a real ZooKeeper and simulated ZK-mode
 * brokers), each where the rig-level suites (test_broker_e2e, test_broker_chan) show it on the
 * propagator alone:
 *  3. a StopReplica survives an unreachable broker, a queue overflow and a re-registration in
 *     the deletion's own delta (IBP 3.4 brokers: no stray detection, a lost stop keeps the log);
 *  5. reconnects, timeouts, unfence and re-registration bring no FULL LeaderAndIsr; only an
 *     overflow does, and kmproxy_broker_full_syncs_total counts it;
 *  7. STALE_BROKER_EPOCH drops the request (counted), the queue goes on, the new registration
 *     brings the broker level with the image;
 *  8. a topic deleted and re-created under its name in one batch: the new id everywhere;
 *  9. client.id is the controller's node id; broker.listener unset dials the listener named
 *     after the protocol, not the first endpoint. */
#include "test_broker_drig.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <jansson.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static drig G;

static void fini(void) { drig_stop(&G); }

static void start(km_bsim_kafka kafka, const char *const *settings)
{
    drig_opts o = { .brokers = 3, .kafka = kafka, .settings = settings };
    drig_start(&G, &o);
    drig_converge(&G, "start-up");
}

/* The i-th topic of the image (in its iteration order). */
static const km_topic *topic_at(int i)
{
    size_t it = 0;
    const km_topic *t = NULL;
    for (int k = 0; k <= i; k++)
        t = km_image_next_topic(G.r.img, &it);
    cr_assert(t);
    return t;
}

/* n leader changes on topic t, one batch each: the same leader at a new leader epoch. */
static void bump_leader_epochs(const km_topic *t, int n)
{
    for (int i = 0; i < n; i++)
        cr_assert(brig_bump_leader_epoch(&G.r, t, i % km_topic_partition_count(t)), "%s", G.r.why);
}

static long long full_lisrs(int32_t broker) { return brig_lisr_count(&G.r, broker, KM_CTL_TYPE_FULL); }
static long long incremental_lisrs(int32_t broker) { return brig_lisr_count(&G.r, broker, KM_CTL_TYPE_INCREMENTAL); }

static long long stop_replicas_seen(int32_t broker)
{
    json_t *st = km_bsim_state_json(brig_sim(&G.r, broker));
    long long n = 0;
    const char *k;
    json_t *v;
    json_object_foreach(json_object_get(json_object_get(st, "requests"), "STOP_REPLICA"), k, v)
        n += json_integer_value(v);
    json_decref(st);
    return n;
}

static double broker_metric(const char *name, int32_t broker) { return drig_broker_metric(&G, name, broker); }

/* A FULL LeaderAndIsr only at activation and for each counted full sync (Kafka sends one at
 * activation only; ours adds the remedy for a dropped queue). */
static void full_lisrs_only_from_full_syncs(void)
{
    for (int32_t b = 1; b <= 3; b++) {
        double syncs = broker_metric("kmproxy_broker_full_syncs_total", b);
        cr_assert_geq(syncs, 0, "broker %d has no kmproxy_broker_full_syncs_total", b);
        cr_assert_eq(full_lisrs(b), 1 + (long long)syncs, "broker %d: %lld FULL LeaderAndIsr, %g full syncs", b,
                     full_lisrs(b), syncs);
    }
}

static void no_pending_stops(void)
{
    for (int32_t b = 1; b <= 3; b++)
        cr_assert_eq(broker_metric("kmproxy_broker_pending_stops", b), 0, "broker %d", b);
}

/* ---- 3 and 5: StopReplica is delivered at least once; FULL only after an overflow ---------- */

static double reconnects_before;
static bool broker1_retried_with_the_deletion(brig *r)
{
    drig *g = r->ud;
    km_daemon_status st;
    km_daemon_get_status(g->d, &st);
    return drig_image_caught_up(r) && st.zk_idle &&
           broker_metric("kmproxy_broker_reconnects_total", 1) >= reconnects_before + 2;
}

/* Broker 1 is unreachable while a topic it hosts is deleted (ZooKeeper has the deletion, the
 * daemon has dialled it again since): once back it gets the very StopReplica (resent, no full
 * sync), and its log is gone. */
Test(broker_daemon_rpcs, a_topic_deleted_while_a_broker_is_unreachable_is_stopped_there, .fini = fini,
     .timeout = 240)
{
    start(KM_BSIM_KAFKA_IBP_3_4, NULL);
    km_bsim_set_unreachable(brig_sim(&G.r, 1), true);
    reconnects_before = broker_metric("kmproxy_broker_reconnects_total", 1);
    cr_assert(brig_remove_topic(&G.r, topic_at(0)), "%s", G.r.why);
    cr_assert(brig_run_until(&G.r, broker1_retried_with_the_deletion, DRIG_GUARD), "%s", G.r.why);
    cr_assert_eq(km_image_topic_count(G.r.img), 3);
    km_bsim_set_unreachable(brig_sim(&G.r, 1), false);
    drig_converge(&G, "after broker 1 came back");
    cr_assert_gt(stop_replicas_seen(1), 0);
    cr_assert_eq(broker_metric("kmproxy_broker_full_syncs_total", 1), 0);
    cr_assert_eq(full_lisrs(1), 1, "a reconnect brought a FULL LeaderAndIsr");
    no_pending_stops();
}

/* Issue 19 item 9: SIGHUP (security material read again) while broker 1 still owes the answer to a
 * deletion. The channels are reconfigured in place, as Kafka reconfigures its channel builder: each
 * reconnects with the material and resends what it had in flight, so broker 1 still gets its
 * StopReplica and the deletion's UpdateMetadata entry (a 3.4 broker's cache keeps the topic
 * otherwise), and no broker gets a FULL LeaderAndIsr (stray-log detection on 3.6.2+). */
Test(broker_daemon_rpcs, sighup_keeps_pending_deletions_and_sends_no_full_leader_and_isr, .fini = fini,
     .timeout = 240)
{
    start(KM_BSIM_KAFKA_IBP_3_4, NULL);
    km_bsim_set_unreachable(brig_sim(&G.r, 1), true);
    reconnects_before = broker_metric("kmproxy_broker_reconnects_total", 1);
    cr_assert(brig_remove_topic(&G.r, topic_at(0)), "%s", G.r.why);
    cr_assert(brig_run_until(&G.r, broker1_retried_with_the_deletion, DRIG_GUARD), "%s", G.r.why);
    cr_assert_gt(broker_metric("kmproxy_broker_pending_stops", 1), 0);
    reconnects_before = broker_metric("kmproxy_broker_reconnects_total", 2);
    cr_assert_eq(raise(SIGHUP), 0);
    brig_run_until(&G.r, drig_never, 2.0); /* the signal is handled on the loop */
    cr_assert_gt(broker_metric("kmproxy_broker_pending_stops", 1), 0, "SIGHUP dropped broker 1's pending stops");
    km_bsim_set_unreachable(brig_sim(&G.r, 1), false);
    drig_converge(&G, "after SIGHUP and broker 1 came back");
    cr_assert_gt(stop_replicas_seen(1), 0);
    cr_assert_gt(broker_metric("kmproxy_broker_reconnects_total", 2), reconnects_before,
                 "broker 2's channel did not reconnect with the material read again");
    for (int32_t b = 1; b <= 3; b++) {
        cr_assert_eq(full_lisrs(b), 1, "SIGHUP brought broker %d a FULL LeaderAndIsr", b);
        cr_assert_eq(broker_metric("kmproxy_broker_full_syncs_total", b), 0, "broker %d", b);
    }
    no_pending_stops();
}

/* Broker 2 restarted (a new registration) in the same batch as a deletion: it still gets the
 * deletion's StopReplica, with the catch-up a changed broker gets (every partition's metadata and
 * an INCREMENTAL LeaderAndIsr, MigrationPropagator's), and no FULL LeaderAndIsr. */
Test(broker_daemon_rpcs, a_broker_registered_again_in_the_deletions_batch_still_gets_its_stop, .fini = fini,
     .timeout = 240)
{
    start(KM_BSIM_KAFKA_IBP_3_4, NULL);
    long long incremental = incremental_lisrs(2);
    km_bsim_restart(brig_sim(&G.r, 2), 2002);
    km_register_broker_record reg;
    km_register_broker_record_broker_endpoint ep;
    km_register_broker_record_broker_feature ft;
    brig_registration(2, 2002, km_bsim_port(brig_sim(&G.r, 2)), true, &reg, &ep, &ft);
    km_remove_topic_record rm;
    km_remove_topic_record_init(&rm);
    rm.topic_id = km_topic_id(topic_at(1));
    const km_message_desc *mds[] = { &km_register_broker_record_desc, &km_remove_topic_record_desc };
    const void *msgs[] = { &reg, &rm };
    cr_assert(brig_append_batch(&G.r, mds, msgs, 2), "%s", G.r.why);
    drig_converge(&G, "after the re-registration and the deletion");
    cr_assert_eq(full_lisrs(2), 1, "the re-registration brought a FULL LeaderAndIsr");
    cr_assert_gt(incremental_lisrs(2), incremental);
    full_lisrs_only_from_full_syncs();
    no_pending_stops();
}

static bool broker1_overflowed(brig *r)
{
    (void)r;
    return broker_metric("kmproxy_broker_dropped_total", 1) >= 1;
}

/* Broker 1 leaves a request unanswered while a deletion and a dozen leader changes arrive: its
 * queue of 4 overflows and is dropped.  The full sync that follows is counted, and the deletion's
 * stop goes with it; no broker gets a FULL LeaderAndIsr but for activation and a counted sync. */
Test(broker_daemon_rpcs, an_overflow_is_the_one_full_sync_and_keeps_the_deletion, .fini = fini, .timeout = 240)
{
    start(KM_BSIM_KAFKA_IBP_3_4,
          (const char *const[]){ "broker.queue.max.requests=4", "broker.request.timeout.ms=500", NULL });
    km_bsim_mute(brig_sim(&G.r, 1), 1 << 30);
    cr_assert(brig_remove_topic(&G.r, topic_at(0)), "%s", G.r.why);
    bump_leader_epochs(topic_at(1), 12);
    cr_assert(brig_run_until(&G.r, broker1_overflowed, DRIG_GUARD), "broker 1's queue never overflowed");
    km_bsim_mute(brig_sim(&G.r, 1), 0);
    drig_converge(&G, "after the overflow");
    cr_assert_geq(broker_metric("kmproxy_broker_full_syncs_total", 1), 1);
    full_lisrs_only_from_full_syncs();
    no_pending_stops();
}

static bool broker1_timed_out(brig *r)
{
    (void)r;
    return broker_metric("kmproxy_broker_timeouts_total", 1) >= 1;
}

/* A request broker 1 leaves unanswered times out and is sent again as it was (an INCREMENTAL
 * LeaderAndIsr, twice), not replaced by a full sync (RequestSendThread). */
Test(broker_daemon_rpcs, a_timed_out_request_is_resent_as_it_was, .fini = fini, .timeout = 240)
{
    start(KM_BSIM_KAFKA_3_6_2, (const char *const[]){ "broker.request.timeout.ms=1000", NULL });
    long long incr1 = incremental_lisrs(1), incr2 = incremental_lisrs(2);
    km_bsim_mute(brig_sim(&G.r, 1), 1);
    bump_leader_epochs(topic_at(0), 1);
    cr_assert(brig_run_until(&G.r, broker1_timed_out, DRIG_GUARD), "broker 1's request never timed out");
    drig_converge(&G, "after the timeout");
    cr_assert_geq(broker_metric("kmproxy_broker_resent_total", 1), 1);
    cr_assert_eq(broker_metric("kmproxy_broker_full_syncs_total", 1), 0);
    cr_assert_eq(incremental_lisrs(2) - incr2, 1);
    cr_assert_geq(incremental_lisrs(1) - incr1, 2, "the LeaderAndIsr was not sent again");
    full_lisrs_only_from_full_syncs();
}

static void append_fencing(int32_t broker, int64_t epoch, bool fenced)
{
    if (fenced) {
        km_fence_broker_record f;
        km_fence_broker_record_init(&f);
        f.id = broker;
        f.epoch = epoch;
        cr_assert(brig_append(&G.r, &km_fence_broker_record_desc, &f), "%s", G.r.why);
        return;
    }
    km_unfence_broker_record u;
    km_unfence_broker_record_init(&u);
    u.id = broker;
    u.epoch = epoch;
    cr_assert(brig_append(&G.r, &km_unfence_broker_record_desc, &u), "%s", G.r.why);
}

/* Broker 2 is fenced while a topic is created and leaders move; unfenced, it catches up with
 * every partition's metadata and an INCREMENTAL LeaderAndIsr.  Broker 3's connections drop under
 * later changes: resent, never a full sync. */
Test(broker_daemon_rpcs, unfence_and_reconnects_bring_no_full_leader_and_isr, .fini = fini, .timeout = 240)
{
    start(KM_BSIM_KAFKA_3_6_2, NULL);
    long long incremental = incremental_lisrs(2);
    append_fencing(2, 1002, true);
    drig_converge(&G, "after fencing broker 2");
    cr_assert_eq(drig_status(&G).brokers_total, 2);
    drig_create_topic(&G, "made-while-2-was-fenced", 5, 4, 3);
    bump_leader_epochs(topic_at(0), 4);
    drig_converge(&G, "changes while broker 2 was fenced");
    append_fencing(2, 1002, false);
    drig_converge(&G, "after unfencing broker 2");
    cr_assert_gt(incremental_lisrs(2), incremental);
    for (int i = 0; i < 3; i++) {
        km_bsim_drop_connections(brig_sim(&G.r, 3));
        bump_leader_epochs(topic_at(1), 1);
        drig_converge(&G, "after broker 3's connections dropped");
    }
    cr_assert_geq(broker_metric("kmproxy_broker_reconnects_total", 3), 4);
    for (int32_t b = 1; b <= 3; b++)
        cr_assert_eq(full_lisrs(b), 1, "broker %d got a FULL LeaderAndIsr after activation", b);
    full_lisrs_only_from_full_syncs();
}

/* ---- 7: STALE_BROKER_EPOCH ------------------------------------------------------------------ */

static bool broker1_dropped_stale_and_idle(brig *r)
{
    drig *g = r->ud;
    km_daemon_status st;
    km_daemon_get_status(g->d, &st);
    return drig_image_caught_up(r) && !st.broker_requests_pending &&
           broker_metric("kmproxy_broker_stale_broker_epoch_total", 1) >= 2;
}

static long long stale_broker_epochs_seen(int32_t broker)
{
    json_t *st = km_bsim_state_json(brig_sim(&G.r, broker));
    long long n = json_integer_value(json_object_get(json_object_get(st, "errors"), "77"));
    json_decref(st);
    return n;
}

/* Broker 1 restarted with a registration the log does not have yet: it answers
 * STALE_BROKER_EPOCH.  The daemon drops each such request (counted) and sends the next - its queue
 * empties; once the registration arrives broker 1 ends equal to the image. */
Test(broker_daemon_rpcs, stale_broker_epoch_drops_the_request_and_the_new_registration_catches_up, .fini = fini,
     .timeout = 240)
{
    start(KM_BSIM_KAFKA_3_6_2, NULL);
    km_bsim_set_kraft_broker_epoch(brig_sim(&G.r, 1), 2001);
    bump_leader_epochs(topic_at(0), 2);
    drig_create_topic(&G, "made-after-the-restart", 7, 2, 3);
    cr_assert(brig_run_until(&G.r, broker1_dropped_stale_and_idle, DRIG_GUARD), "broker 1's queue is held: %s",
              G.r.why);
    double stale = broker_metric("kmproxy_broker_stale_broker_epoch_total", 1);
    cr_assert_eq(stale, (double)stale_broker_epochs_seen(1), "each refused request was sent once");
    cr_assert_geq(broker_metric("kmproxy_broker_dropped_total", 1), stale);
    cr_assert(!brig_converged(&G.r), "broker 1 cannot have the new topic yet");
    cr_assert(brig_register(&G.r, 1, 2001, km_bsim_port(brig_sim(&G.r, 1)), true), "%s", G.r.why);
    drig_converge(&G, "after broker 1's new registration");
    cr_assert_eq(broker_metric("kmproxy_broker_stale_broker_epoch_total", 1), stale);
    full_lisrs_only_from_full_syncs();
}

/* ---- 8: a topic deleted and re-created under its name in one batch ----------------------- */

/* The base64 topic id ZooKeeper's /brokers/topics/<name> holds (malloc'd). */
static char *zk_topic_id(const char *name)
{
    char path[300], *data = NULL;
    snprintf(path, sizeof path, "/brokers/topics/%s", name);
    km_zkc *c = km_zkc_open(km_zks_hosts(G.zs, 0), NULL, 10000);
    cr_assert(c);
    cr_assert_eq(km_zkc_get(c, path, &data, NULL, NULL), ZOK, "%s", path);
    km_zkc_close(c);
    json_t *j = json_loads(data, 0, NULL);
    cr_assert(j, "%s: %s", path, data);
    const char *id = json_string_value(json_object_get(j, "topic_id"));
    char *copy = strdup(id ? id : "");
    json_decref(j);
    free(data);
    return copy;
}

/* Each broker (3.6.2+ and IBP 3.4 alike) ends with the new topic id in its cache and its logs:
 * the stop for the old topic went before the new LeaderAndIsr (StopReplica names no id), and
 * UpdateMetadata carried the new id.  ZooKeeper holds the new id too. */
Test(broker_daemon_rpcs, a_topic_recreated_in_one_batch_has_its_new_id_everywhere, .fini = fini, .timeout = 240)
{
    drig_opts o = { .brokers = 3, .kafka_odd = KM_BSIM_KAFKA_IBP_3_4 };
    drig_start(&G, &o);
    drig_converge(&G, "start-up");
    const km_topic *t = topic_at(2);
    char name[128];
    snprintf(name, sizeof name, "%s", km_topic_name(t));
    km_uuid new_id;
    cr_assert(brig_recreate_topic(&G.r, t, &new_id), "%s", G.r.why);
    drig_converge(&G, "after the topic was re-created"); /* ids checked in caches and logs */
    char want[23];
    km_uuid_to_base64(new_id, want);
    cr_assert(!memcmp(brig_topic_id(&G.r, name).b, new_id.b, 16));
    char *in_zk = zk_topic_id(name);
    cr_assert_str_eq(in_zk, want, "ZooKeeper's /brokers/topics/%s holds another topic id", name);
    free(in_zk);
    no_pending_stops();
}

/* ---- 9: client.id and the default listener ---------------------------------------------------- */

/* A port nothing answers on (bound, never listening): a channel dialled there never gets ready. */
static int dead_port(uint16_t *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = { .sin_family = AF_INET };
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof sa;
    cr_assert(fd >= 0 && !bind(fd, (struct sockaddr *)&sa, sizeof sa) &&
              !getsockname(fd, (struct sockaddr *)&sa, &len));
    *port = ntohs(sa.sin_port);
    return fd;
}

static int dead_fd = -1;

/* Every broker registers again with an INTERNAL endpoint first (nobody there) and PLAINTEXT
 * second (its simulator): "the first endpoint" would dial the wrong one. */
static void register_two_listeners(brig *r)
{
    uint16_t dead;
    dead_fd = dead_port(&dead);
    for (int32_t id = 1; id <= 3; id++) {
        km_register_broker_record rec;
        km_register_broker_record_broker_endpoint ep[2];
        km_register_broker_record_broker_feature ft;
        brig_registration(id, 1100 + id, km_bsim_port(brig_sim(r, id)), true, &rec, &ep[1], &ft);
        ep[0] = ep[1];
        ep[0].name = km_cstr("INTERNAL");
        ep[0].port = dead;
        rec.end_points.count = 2;
        rec.end_points.items = ep;
        cr_assert(brig_append(r, &km_register_broker_record_desc, &rec), "%s", r->why);
        km_bsim_set_kraft_broker_epoch(brig_sim(r, id), 1100 + id);
    }
}

/* broker.listener unset with broker.security.protocol PLAINTEXT (the default): the daemon dials
 * each broker's PLAINTEXT endpoint (Kafka's inter.broker.listener.name default), and every
 * request's client.id is the KRaft controller's node id (ControllerChannelManager's NetworkClient
 * uses config.brokerId.toString). */
Test(broker_daemon_rpcs, client_id_is_the_controller_id_and_the_listener_is_named_after_the_protocol,
     .fini = fini, .timeout = 240)
{
    drig_opts o = { .brokers = 3, .default_listener = true, .before_daemon = register_two_listeners };
    drig_start(&G, &o);
    drig_converge(&G, "start-up");
    close(dead_fd);
    char want[16];
    snprintf(want, sizeof want, "%d", BRIG_CONTROLLER);
    for (int32_t b = 1; b <= 3; b++) {
        km_bsim_security_stats s;
        km_bsim_get_security_stats(brig_sim(&G.r, b), &s);
        cr_assert_str_eq(s.last_client_id, want, "broker %d", b);
        cr_assert_gt(s.controller_requests, 0);
    }
}
