/* End to end: a `metadata gen` log -> image -> propagator -> simulated ZK-mode brokers.
 * After the log is consumed every broker's state equals the image; after leader changes, a topic
 * deletion, a reassignment and a new broker (follow mode) it converges again. */
#include "test_broker_rig.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GUARD 30.0 /* seconds: only a guard against hangs */

static brig R;

static void fini(void) { brig_free(&R); }

static void init(int brokers, const char *max_versions)
{
    brig_opts o = { .brokers = brokers, .topics = 6, .partitions = 4, .replication = 3, .leader_changes = 40,
                    .max_versions = max_versions };
    cr_assert(brig_init(&R, &o), "%s", R.why);
}

static void converge(const char *when)
{
    cr_assert(brig_run_until(&R, brig_converged, GUARD) && !R.failed, "%s: %s", when, R.why);
}

/* The i-th topic of the image (in its iteration order) and its partition p. */
static const km_topic *topic_at(int i)
{
    size_t it = 0;
    const km_topic *t = NULL;
    for (int k = 0; k <= i; k++)
        t = km_image_next_topic(R.img, &it);
    cr_assert(t);
    return t;
}

static void leader_change(const km_topic *t, int32_t p)
{
    km_partition x;
    cr_assert(km_topic_partition(t, p, &x));
    km_partition_change_record rec;
    km_partition_change_record_init(&rec);
    rec.topic_id = km_topic_id(t);
    rec.partition_id = p;
    for (int32_t i = 0; i < x.isr.n; i++)
        if (x.isr.v[i] != x.leader)
            rec.leader = x.isr.v[i];
    if (rec.leader < 0) { /* a lone ISR: an unclean election to another replica */
        for (int32_t i = 0; i < x.replicas.n; i++)
            if (x.replicas.v[i] != x.leader)
                rec.leader = x.replicas.v[i];
        rec.isr.count = 1;
        rec.isr.items = &rec.leader;
    }
    cr_assert(rec.leader >= 0, "no other replica");
    cr_assert(brig_append(&R, &km_partition_change_record_desc, &rec), "%s", R.why);
}

static void remove_topic(const km_topic *t) { cr_assert(brig_remove_topic(&R, t), "%s", R.why); }

static int32_t reassign(const km_topic *t, int32_t p, int32_t to)
{
    int32_t from = brig_reassign(&R, t, p, to);
    cr_assert(from >= 0, "%s", R.why);
    return from;
}

static long long lisr_by_type(int32_t broker, const char *type) { return brig_lisr_count(&R, broker, atoi(type)); }

static json_int_t stop_replicas_seen(int32_t broker)
{
    json_t *st = km_bsim_state_json(brig_sim(&R, broker));
    json_t *byv = json_object_get(json_object_get(st, "requests"), "STOP_REPLICA");
    json_int_t n = 0;
    const char *k;
    json_t *v;
    json_object_foreach(byv, k, v) n += json_integer_value(v);
    json_decref(st);
    return n;
}

Test(broker_e2e, converges_then_follows_changes, .fini = fini, .timeout = 120)
{
    init(5, NULL);
    cr_assert(brig_activate(&R), "%s", R.why);
    converge("after activation");

    const km_topic *t0 = topic_at(0), *t1 = topic_at(1), *t2 = topic_at(2);
    for (int32_t p = 0; p < 4; p++)
        leader_change(t0, p);
    char deleted[64];
    snprintf(deleted, sizeof deleted, "%s", km_topic_name(t1));
    remove_topic(t1);
    cr_assert(brig_add_broker(&R, 6, 1006, NULL), "%s", R.why);
    cr_assert(brig_run_until(&R, brig_converged, GUARD), "new broker: %s", R.why);
    int32_t from = reassign(t2, 0, 6);
    converge("after leader changes, a deletion, a new broker and a reassignment");

    cr_assert_null(km_image_topic_by_name(R.img, deleted));
    km_buf m;
    km_buf_init(&m);
    km_bprop_render_metrics(R.prop, &m);
    km_buf_put(&m, "", 1);
    cr_assert(strstr((char *)m.data, "kmproxy_broker_requests_acked_total{broker=\"6\",api=\"LeaderAndIsr\"}"),
              "%s", (char *)m.data);
    km_buf_free(&m);
    cr_assert(stop_replicas_seen(from) >= 1, "broker %d got no StopReplica for the replica moved away", from);
    /* the new broker got what MigrationPropagator gives a changed ZK broker: every partition's
     * metadata and an INCREMENTAL LeaderAndIsr of its own partitions, never a FULL one */
    km_bchan_stats s;
    km_bchan_get_stats(km_bprop_channel(R.prop, 6), &s);
    cr_assert_eq(s.full_syncs, 0);
    cr_assert_eq(lisr_by_type(6, "2"), 0, "broker 6 got a FULL LeaderAndIsr");
    cr_assert_geq(lisr_by_type(6, "1"), 1);
}

Test(broker_e2e, every_version_a_broker_may_advertise, .fini = fini, .timeout = 240)
{
    /* k covers LeaderAndIsr 0-7, UpdateMetadata 0-8 and StopReplica 0-4 */
    for (int k = 0; k <= 8; k++) {
        int l = k < 7 ? k : 7, u = k, s = k < 4 ? k : 4;
        char mv[96];
        snprintf(mv, sizeof mv, "LeaderAndIsr=%d,UpdateMetadata=%d,StopReplica=%d", l, u, s);
        brig_opts o = { .brokers = 4, .topics = 3, .partitions = 2, .replication = 3, .leader_changes = 5,
                        .max_versions = mv };
        cr_assert(brig_init(&R, &o), "%s", R.why);
        R.no_lisr_topic_ids = l < 5;
        R.no_umr_topic_ids = u < 7;
        R.no_umr_kraft = u < 8;
        cr_assert(brig_activate(&R), "%s", R.why);
        converge(mv);
        leader_change(topic_at(0), 0);
        remove_topic(topic_at(1));
        reassign(topic_at(2), 1, 4);
        converge(mv);
        for (int i = 0; i < R.nsims; i++) {
            json_t *st = km_bsim_state_json(R.sims[i]);
            json_t *req = json_object_get(st, "requests");
            char want[3][4];
            snprintf(want[0], 4, "%d", l);
            snprintf(want[1], 4, "%d", u);
            snprintf(want[2], 4, "%d", s);
            cr_assert(json_object_get(json_object_get(req, "LEADER_AND_ISR"), want[0]), "%s: LISR v%d", mv, l);
            cr_assert(json_object_get(json_object_get(req, "UPDATE_METADATA"), want[1]), "%s: UMR v%d", mv, u);
            cr_assert_eq(json_object_size(json_object_get(req, "LEADER_AND_ISR")), 1, "%s: one LISR version", mv);
            cr_assert_eq(json_object_size(json_object_get(req, "UPDATE_METADATA")), 1, "%s: one UMR version", mv);
            json_t *sr = json_object_get(req, "STOP_REPLICA");
            cr_assert(!sr || (json_object_size(sr) == 1 && json_object_get(sr, want[2])), "%s: SR v%d", mv, s);
            json_decref(st);
        }
        brig_free(&R);
        memset(&R, 0, sizeof R);
    }
}

static bool others_converged(brig *r) { return brig_converged(r); }

/* Broker 4's channel has been retried, whatever the machine's speed (its backoff is >= 25 ms). */
static bool dead_broker_retried(brig *r)
{
    km_bchan_stats s;
    km_bchan_get_stats(km_bprop_channel(r->prop, 4), &s);
    return s.connects >= 2;
}

Test(broker_e2e, a_dead_broker_never_blocks_the_others, .fini = fini, .timeout = 120)
{
    init(4, NULL);
    /* broker 4's simulator dies before we connect; it stays registered and unfenced */
    km_bsim_free(R.sims[3]);
    R.nsims = 3;
    cr_assert(brig_activate(&R), "%s", R.why);
    cr_assert(brig_run_until(&R, others_converged, GUARD), "%s", R.why);
    for (int32_t p = 0; p < 4; p++)
        leader_change(topic_at(0), p);
    remove_topic(topic_at(1));
    cr_assert(brig_run_until(&R, others_converged, GUARD), "%s", R.why);
    cr_assert(brig_run_until(&R, dead_broker_retried, GUARD), "broker 4 is retried with backoff");
    cr_assert(brig_converged(&R), "%s", R.why);
    km_bchan_stats s;
    km_bchan_get_stats(km_bprop_channel(R.prop, 4), &s);
    cr_assert(!s.ready);
}

/* Kafka's RequestSendThread resends the same request after a reconnect; a FULL LeaderAndIsr
 * (stray detection on 3.6.2+ brokers) is no remedy for a cut connection. */
Test(broker_e2e, reconnect_resends_and_never_full_syncs, .fini = fini, .timeout = 120)
{
    init(3, NULL);
    cr_assert(brig_activate(&R), "%s", R.why);
    converge("activation");
    cr_assert_eq(lisr_by_type(2, "2"), 1, "activation sends one full LeaderAndIsr");
    for (int i = 0; i < 5; i++) {
        km_bsim_drop_connections(brig_sim(&R, 2));
        leader_change(topic_at(0), i % 4);
        converge("after broker 2's connection dropped");
    }
    km_bchan_stats s;
    km_bchan_get_stats(km_bprop_channel(R.prop, 2), &s);
    cr_assert_eq(s.full_syncs, 0, "full syncs: %llu", (unsigned long long)s.full_syncs);
    cr_assert_geq(s.connects, 6);
    cr_assert_eq(lisr_by_type(2, "2"), 1, "a reconnect brought a FULL LeaderAndIsr");
}

static bool broker1_dropped_stale(brig *r)
{
    km_bchan *ch = km_bprop_channel(r->prop, 1);
    km_bchan_stats s;
    km_bchan_get_stats(ch, &s);
    return s.stale_broker_epoch >= 2 && !km_bchan_pending(ch);
}

/* Kafka drops a request answered STALE_BROKER_EPOCH; the queue behind it goes on, and the next
 * registration's requests carry the new epoch. */
Test(broker_e2e, stale_broker_epoch_drops_the_request, .fini = fini, .timeout = 120)
{
    init(3, NULL);
    cr_assert(brig_activate(&R), "%s", R.why);
    converge("activation");
    /* broker 1 restarted with a new registration that the image has not seen yet */
    km_bsim_set_kraft_broker_epoch(brig_sim(&R, 1), 2001);
    leader_change(topic_at(0), 0);
    leader_change(topic_at(0), 1);
    cr_assert(brig_run_until(&R, broker1_dropped_stale, GUARD), "broker 1's queue is held");
    cr_assert(!brig_converged(&R));
    /* now its registration arrives: broker 1 catches up under epoch 2001 */
    km_register_broker_record rec;
    km_register_broker_record_init(&rec);
    const km_broker *b1 = km_image_broker(R.img, 1);
    km_register_broker_record_broker_endpoint ep = { km_cstr("PLAINTEXT"), km_cstr("127.0.0.1"),
                                                     b1->endpoints[0].port, 0, { 0, 0 } };
    rec.broker_id = 1;
    rec.is_migrating_zk_broker = true;
    rec.broker_epoch = 2001;
    rec.incarnation_id.b[3] = 9;
    rec.end_points.count = 1;
    rec.end_points.items = &ep;
    rec.fenced = false;
    cr_assert(brig_append(&R, &km_register_broker_record_desc, &rec), "%s", R.why);
    converge("after the new registration");
    km_bchan_stats s;
    km_bchan_get_stats(km_bprop_channel(R.prop, 1), &s);
    cr_assert(s.stale_broker_epoch >= 1, "broker 1 never answered STALE_BROKER_EPOCH");
    cr_assert(s.error_by_code[77] >= 1);
    cr_assert(s.dropped >= 2);
}

static int fenced_calls;
static int32_t fenced_broker;

static void on_fenced(km_bprop *p, int32_t broker, void *ud)
{
    (void)p;
    (void)ud;
    fenced_calls++;
    fenced_broker = broker;
}

static bool is_fenced(brig *r) { return fenced_calls > 0 && km_bprop_fenced(r->prop); }

Test(broker_e2e, stale_controller_epoch_stops_everything, .fini = fini, .timeout = 120)
{
    init(3, NULL);
    cr_assert(brig_activate(&R), "%s", R.why);
    converge("activation");
    /* a second propagator with an older ZooKeeper controller epoch: the brokers refuse it */
    km_bprop_config pc = { .controller_id = BRIG_CONTROLLER, .listener = "PLAINTEXT", .request_timeout = 5,
                           .backoff_base = 0.01, .backoff_max = 0.1, .fenced = on_fenced };
    km_err err;
    km_bprop *old = R.prop;
    R.prop = km_bprop_new(R.loop, &pc, &err);
    cr_assert(R.prop, "%s", err.msg);
    km_bprop_free(old);
    R.zk_epoch = 6;
    cr_assert(brig_activate(&R), "%s", R.why);
    cr_assert(brig_run_until(&R, is_fenced, GUARD), "never fenced");
    cr_assert_eq(fenced_calls, 1);
    cr_assert(fenced_broker >= 1 && fenced_broker <= 3);
    /* everything stopped: nothing more goes out */
    leader_change(topic_at(0), 0);
    cr_assert(brig_pump(&R), "%s", R.why);
    cr_assert_eq(km_bprop_pending(R.prop), 0);
    for (int32_t b = 1; b <= 3; b++) {
        km_bchan_stats s;
        km_bchan_get_stats(km_bprop_channel(R.prop, b), &s);
        cr_assert(s.stopped, "broker %d's channel still runs", b);
    }
}

static json_int_t requests_seen(int32_t broker)
{
    json_t *st = km_bsim_state_json(brig_sim(&R, broker));
    json_int_t n = json_integer_value(json_object_get(st, "rejected"));
    const char *k, *k2;
    json_t *byv, *v;
    json_object_foreach(json_object_get(st, "requests"), k, byv) {
        if (json_is_integer(byv))
            n += json_integer_value(byv);
        else
            json_object_foreach(byv, k2, v) n += json_integer_value(v);
    }
    json_decref(st);
    return n;
}

Test(broker_e2e, only_unfenced_migrating_brokers_get_rpcs, .fini = fini, .timeout = 120)
{
    init(3, NULL);
    /* broker 8 is a KRaft broker: it is a live broker for the others, but gets no RPCs */
    cr_assert(brig_add_broker_ex(&R, 8, 1008, NULL, false), "%s", R.why);
    cr_assert(brig_activate(&R), "%s", R.why);
    converge("activation");
    cr_assert_eq(requests_seen(8), 0);
    cr_assert_null(km_bprop_channel(R.prop, 8));
    /* fencing ZK broker 3 closes its channel; the others learn it (LiveBrokers keeps every
     * registration, as Kafka 3.9 does) and nothing more goes to 3 */
    km_fence_broker_record f;
    km_fence_broker_record_init(&f);
    f.id = 3;
    f.epoch = 1003;
    cr_assert(brig_append(&R, &km_fence_broker_record_desc, &f), "%s", R.why);
    converge("after fencing broker 3");
    cr_assert_null(km_bprop_channel(R.prop, 3));
    json_int_t before = requests_seen(3);
    leader_change(topic_at(0), 0);
    converge("after a leader change");
    cr_assert_eq(requests_seen(3), before, "a fenced broker got RPCs");
    cr_assert_eq(requests_seen(8), 0, "a KRaft broker got RPCs");
}

/* ---- issue 9: what a real ZK-mode broker would keep or lose ------------------------------- */

static km_register_broker_record registration(int32_t id, int64_t epoch, km_register_broker_record_broker_endpoint *ep)
{
    km_register_broker_record rec;
    km_register_broker_record_init(&rec);
    const km_broker *b = km_image_broker(R.img, id);
    *ep = (km_register_broker_record_broker_endpoint){ km_cstr("PLAINTEXT"), km_cstr("127.0.0.1"),
                                                       b->endpoints[0].port, 0, { 0, 0 } };
    rec.broker_id = id;
    rec.is_migrating_zk_broker = true;
    rec.broker_epoch = epoch;
    rec.incarnation_id.b[5] = (uint8_t)epoch;
    rec.end_points.count = 1;
    rec.end_points.items = ep;
    rec.fenced = false;
    return rec;
}

/* A broker that restarted (new registration) in the same delta as a topic deletion still gets
 * the deletion's StopReplica: a 3.4 broker (no stray detection) would keep the log for good. */
Test(broker_e2e, a_changed_broker_still_gets_the_deltas_stops, .fini = fini, .timeout = 120)
{
    brig_opts o = { .brokers = 3, .topics = 3, .partitions = 4, .replication = 3, .kafka = KM_BSIM_KAFKA_IBP_3_4 };
    cr_assert(brig_init(&R, &o), "%s", R.why);
    cr_assert(brig_activate(&R), "%s", R.why);
    converge("activation");
    km_bsim_restart(brig_sim(&R, 2), 2002);
    km_register_broker_record_broker_endpoint ep;
    km_register_broker_record reg = registration(2, 2002, &ep);
    km_remove_topic_record rm;
    km_remove_topic_record_init(&rm);
    rm.topic_id = km_topic_id(topic_at(1));
    const km_message_desc *mds[] = { &km_register_broker_record_desc, &km_remove_topic_record_desc };
    const void *msgs[] = { &reg, &rm };
    cr_assert(brig_append_batch(&R, mds, msgs, 2), "%s", R.why);
    converge("after broker 2 restarted while a topic was deleted");
    cr_assert(brig_no_strays(&R), "%s", R.why);
    cr_assert_eq(lisr_by_type(2, "2"), 1, "the restarted broker got a FULL LeaderAndIsr");
    cr_assert_eq(km_bprop_pending_stops(R.prop, 2), 0);
}

/* A broker whose registration changed in the delta of a topic deletion (here a new broker epoch,
 * its metadata cache kept) still gets that delta's UpdateMetadata entries with leader -2
 * (LeaderDuringDelete): a catch-up lists only live partitions, and a 3.4-3.6.1 broker drops a deleted
 * topic from its cache only on such an entry. Kafka's MigrationPropagator sends them to the
 * unchanged brokers only (oldZkBrokers). */
Test(broker_e2e, a_changed_broker_still_learns_the_deltas_deletions, .fini = fini, .timeout = 120)
{
    brig_opts o = { .brokers = 3, .topics = 3, .partitions = 4, .replication = 3, .kafka = KM_BSIM_KAFKA_IBP_3_4 };
    cr_assert(brig_init(&R, &o), "%s", R.why);
    cr_assert(brig_activate(&R), "%s", R.why);
    converge("activation");
    km_register_broker_record_broker_endpoint ep;
    km_register_broker_record reg = registration(2, 2002, &ep);
    km_remove_topic_record rm;
    km_remove_topic_record_init(&rm);
    rm.topic_id = km_topic_id(topic_at(1));
    const km_message_desc *mds[] = { &km_register_broker_record_desc, &km_remove_topic_record_desc };
    const void *msgs[] = { &reg, &rm };
    cr_assert(brig_append_batch(&R, mds, msgs, 2), "%s", R.why);
    converge("after broker 2 registered again while a topic was deleted");
    cr_assert(brig_no_strays(&R), "%s", R.why);
}

/* Deleted and re-created under the same name in one delta: the brokers end with the new id,
 * and the old log's StopReplica comes before the new LeaderAndIsr (it names no topic id). */
Test(broker_e2e, a_topic_recreated_in_one_delta_gets_the_new_id, .fini = fini, .timeout = 120)
{
    init(4, NULL);
    cr_assert(brig_activate(&R), "%s", R.why);
    converge("activation");
    km_uuid new_id;
    cr_assert(brig_recreate_topic(&R, topic_at(0), &new_id), "%s", R.why);
    converge("after the topic was re-created");
    cr_assert(brig_no_strays(&R), "%s", R.why);
    cr_assert(km_image_topic_by_id(R.img, new_id), "the image lacks the new id");
}

static int32_t zk_epoch_now = 7;
static int32_t read_epoch(km_bprop *p, void *ud)
{
    (void)p;
    (void)ud;
    return zk_epoch_now;
}

static int stale_seen;
static void on_stale(km_bprop *p, int32_t broker, int32_t sent, void *ud)
{
    (void)p;
    (void)broker;
    (void)ud;
    cr_assert_eq(sent, 7);
    stale_seen++;
}

static bool stale_answered(brig *r) { (void)r; return stale_seen > 0 && !km_bprop_pending(r->prop); }

static km_bprop *hooked_prop(void)
{
    km_bprop_config pc = { .controller_id = BRIG_CONTROLLER, .listener = "PLAINTEXT", .request_timeout = 5,
                           .backoff_base = 0.01, .backoff_max = 0.1, .zk_controller_epoch = read_epoch,
                           .stale_controller_epoch = on_stale, .fenced = on_fenced };
    km_err err;
    km_bprop *p = km_bprop_new(R.loop, &pc, &err);
    cr_assert(p, "%s", err.msg);
    return p;
}

/* After a session expiry the bridge re-claims and bumps the ZooKeeper controller epoch: the
 * next requests carry the new one (read at each send, not fixed at activation). */
Test(broker_e2e, the_controller_epoch_is_read_at_each_send, .fini = fini, .timeout = 120)
{
    init(3, NULL);
    km_bprop_free(R.prop);
    R.prop = hooked_prop();
    zk_epoch_now = 7;
    cr_assert(brig_activate(&R), "%s", R.why);
    converge("activation");
    zk_epoch_now = R.zk_epoch = 8;
    leader_change(topic_at(0), 0);
    converge("after the epoch moved");
}

/* STALE_CONTROLLER_EPOCH is the owner's question to ZooKeeper, not a reason to stop by itself
 * (Kafka's controller logs it and goes on). */
Test(broker_e2e, stale_controller_epoch_asks_the_owner_and_goes_on, .fini = fini, .timeout = 120)
{
    init(3, NULL);
    km_bprop_free(R.prop);
    R.prop = hooked_prop();
    zk_epoch_now = R.zk_epoch = 9; /* someone reached the brokers with epoch 9 first */
    cr_assert(brig_activate(&R), "%s", R.why);
    converge("at epoch 9");
    zk_epoch_now = 7;
    stale_seen = fenced_calls = 0;
    leader_change(topic_at(0), 0);
    cr_assert(brig_run_until(&R, stale_answered, GUARD), "no STALE_CONTROLLER_EPOCH reached the owner");
    cr_assert(!km_bprop_fenced(R.prop));
    cr_assert_eq(fenced_calls, 0);
    zk_epoch_now = 9; /* ZooKeeper said it is ours after all (a bump we had not read yet) */
    leader_change(topic_at(0), 0); /* the dropped requests were about partition 0 */
    converge("the channels went on");
}

/* A topic of 3,000 partitions deleted at once: every replica's stop and every cache entry is kept
 * until answered (the pending sets' index grows through several sizes), and 3.4 brokers end clean. */
Test(broker_e2e, a_big_topic_deletion_reaches_every_replica, .fini = fini, .timeout = 120)
{
    brig_opts o = { .brokers = 3, .topics = 2, .partitions = 1500, .replication = 3,
                    .kafka = KM_BSIM_KAFKA_IBP_3_4 };
    cr_assert(brig_init(&R, &o), "%s", R.why);
    cr_assert(brig_activate(&R), "%s", R.why);
    converge("activation");
    remove_topic(topic_at(0));
    remove_topic(topic_at(1));
    converge("after deleting 3,000 partitions");
    cr_assert(brig_no_strays(&R), "%s", R.why);
    for (int32_t b = 1; b <= 3; b++)
        cr_assert_eq(km_bprop_pending_stops(R.prop, b), 0);
}
