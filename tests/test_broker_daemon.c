/* The daemon end to end with a real ZooKeeper and simulated ZK-mode brokers (issue 9):
 *  - ZooKeeper first: a broker creates a partition's log with the topic config it reads from
 *    ZooKeeper at that moment, so no request may reach it before ZooKeeper holds its delta;
 *  - 5 brokers behind TLS under random cuts (lost requests and lost answers, >= 200 cut
 *    connections) while topics are created, deleted and reassigned: every broker ends equal to the
 *    image, hosts no deleted partition, created no log before its topic config was in ZooKeeper,
 *    and saw no plaintext byte on its TLS listener. */
#include "test_broker_drig.h"

#include <criterion/criterion.h>
#include <ev.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GUARD DRIG_GUARD

static drig G;

static void fini(void) { drig_stop(&G); }

static void start(int brokers, double cut_ratio, bool via_proxy, const drig_opts *more)
{
    drig_opts o = more ? *more : (drig_opts){ 0 };
    o.brokers = brokers;
    o.cut_ratio = cut_ratio;
    o.via_proxy = via_proxy;
    o.kafka_odd = KM_BSIM_KAFKA_IBP_3_4;
    drig_start(&G, &o);
}

static void converge(const char *when) { drig_converge(&G, when); }

/* ---- records ------------------------------------------------------------------------------- */

static void create_topic(const char *name, unsigned salt, int np, int nbrokers)
{
    drig_create_topic(&G, name, salt, np, nbrokers);
}

static void delete_topic(const km_topic *t) { cr_assert(brig_remove_topic(&G.r, t), "%s", G.r.why); }

/* Moves a follower of t-p to the first broker not hosting it (the leader epoch moves on). */
static void reassign(const km_topic *t, int32_t p, int nbrokers)
{
    km_partition x;
    cr_assert(km_topic_partition(t, p, &x));
    int32_t to = -1;
    for (int32_t b = 1; b <= nbrokers && to < 0; b++) {
        bool in = false;
        for (int32_t i = 0; i < x.replicas.n; i++)
            in |= x.replicas.v[i] == b;
        if (!in)
            to = b;
    }
    if (to > 0)
        cr_assert(brig_reassign(&G.r, t, p, to) >= 0, "%s", G.r.why);
}

/* ---- checks -------------------------------------------------------------------------------- */

/* Every log every broker created was created with its topic's config znode present; the topics
 * this test created carry their min.insync.replicas.  One exception, Kafka's too: a LeaderAndIsr
 * still queued (or resent after a cut) when a later delta deleted the topic from ZooKeeper
 * creates a log with the defaults, which that deletion's StopReplica then removes - allowed only
 * for a topic the image no longer has (and converge() checked no broker hosts it). */
static void logs_had_their_config(void)
{
    size_t logs = 0, after_delete = 0;
    for (int i = 0; i < G.r.nsims; i++) {
        json_t *st = km_bsim_state_json(G.r.sims[i]);
        size_t k;
        json_t *l;
        json_array_foreach(json_object_get(st, "logsCreated"), k, l) {
            const char *topic = json_string_value(json_object_get(l, "topic"));
            json_t *config = json_object_get(l, "config");
            cr_assert(json_is_true(json_object_get(l, "configRead")));
            if (!json_is_string(config) && !km_image_topic_by_name(G.r.img, topic)) {
                after_delete++;
                continue;
            }
            cr_assert(json_is_string(config), "broker %d created %s-%d before /config/topics/%s existed",
                      km_bsim_broker_id(G.r.sims[i]), topic, (int)json_integer_value(json_object_get(l, "partition")),
                      topic);
            if (!strncmp(topic, "made-", 5))
                cr_assert(strstr(json_string_value(config), "min.insync.replicas"), "%s: %s", topic,
                          json_string_value(config));
            logs++;
        }
        json_decref(st);
    }
    cr_assert_gt(logs, 0);
    cr_log_info("%zu logs created with their topic config, %zu by requests that outran a deletion", logs,
                after_delete);
}

static size_t logs_of(const char *topic)
{
    size_t n = 0;
    for (int i = 0; i < G.r.nsims; i++) {
        json_t *st = km_bsim_state_json(G.r.sims[i]);
        size_t k;
        json_t *l;
        json_array_foreach(json_object_get(st, "logsCreated"), k, l)
            n += !strcmp(json_string_value(json_object_get(l, "topic")), topic);
        json_decref(st);
    }
    return n;
}

/* ---- tests --------------------------------------------------------------------------------- */

/* ZooKeeper is unreachable while a topic is created: the daemon has the delta, but no broker
 * hears of the topic until ZooKeeper holds it (and so its config) - then every log has it. */
Test(broker_daemon, requests_wait_for_zookeeper, .fini = fini, .timeout = 240)
{
    start(3, 0, true, NULL);
    converge("start-up");
    logs_had_their_config();
    km_fp_refuse(G.fp, true);
    km_fp_cut_all(G.fp);
    create_topic("made-while-zk-away", 1, 4, 3);
    cr_assert(brig_run_until(&G.r, drig_image_caught_up, GUARD), "the daemon never read the new topic");
    brig_run_until(&G.r, drig_never, 1.0); /* time for requests to go out, were they not held */
    cr_assert_eq(logs_of("made-while-zk-away"), 0, "a broker created a log before ZooKeeper had the topic");
    km_fp_refuse(G.fp, false);
    converge("after ZooKeeper came back");
    cr_assert_eq(logs_of("made-while-zk-away"), 12);
    logs_had_their_config();
}

/* The session expires while ZooKeeper is away: the bridge re-claims (a new /controller_epoch)
 * and re-syncs; the brokers hear nothing meanwhile, then everything under the new epoch. */
Test(broker_daemon, a_session_loss_holds_the_brokers_then_the_new_epoch_goes_out, .fini = fini, .timeout = 240)
{
    start(3, 0, true, &(drig_opts){ .session_timeout_ms = "2000" });
    converge("start-up");
    int32_t before = G.r.zk_epoch;
    km_fp_refuse(G.fp, true);
    km_fp_cut_all(G.fp);
    create_topic("made-during-session-loss", 2, 4, 3);
    cr_assert(brig_run_until(&G.r, drig_image_caught_up, GUARD), "the daemon never read the new topic");
    brig_run_until(&G.r, drig_never, 5.0); /* well past the 2 s session timeout: ZooKeeper expires the session */
    cr_assert_eq(logs_of("made-during-session-loss"), 0, "a broker heard of the topic before ZooKeeper had it");
    km_fp_refuse(G.fp, false);
    G.r.zk_epoch = 0; /* read again once the daemon is idle */
    converge("after the re-claim");
    cr_assert_gt(G.r.zk_epoch, before, "the re-claim did not bump /controller_epoch");
    cr_assert_eq(logs_of("made-during-session-loss"), 12);
    logs_had_their_config();
}

static long long stale_controller_epochs(void) { return drig_sum_over_sims(&G, "errors", "11"); }

static bool refused_often(brig *r) { (void)r; return stale_controller_epochs() >= 6; }

/* The brokers obey a higher controller epoch than ZooKeeper's /controller_epoch (which the
 * daemon claimed): they answer STALE_CONTROLLER_EPOCH, ZooKeeper says nobody moved it, and the
 * daemon logs it and goes on, as Kafka's controller does; it does not stop. */
Test(broker_daemon, stale_controller_epoch_with_zookeeper_unmoved_goes_on, .fini = fini, .timeout = 240)
{
    start(3, 0, false, &(drig_opts){ .prime_epoch = 99 });
    cr_assert(brig_run_until(&G.r, refused_often, GUARD), "the brokers never refused the daemon");
    create_topic("made-after-refusals", 3, 2, 3);
    cr_assert(brig_run_until(&G.r, drig_image_caught_up, GUARD), "%s", G.r.why);
    brig_run_until(&G.r, drig_never, 0.5);
    km_daemon_status st;
    km_daemon_get_status(G.d, &st);
    cr_assert_null(st.fatal, "the daemon stopped: %s", st.fatal);
}

static uint64_t cuts(void)
{
    uint64_t n = 0;
    for (int i = 0; i < G.r.nsims; i++)
        n += km_bsim_cuts(G.r.sims[i]);
    return n;
}

/* One random change: create (with a config), delete, reassign or move a leader. */
static void random_change(unsigned *seed, int step, int nbrokers)
{
    size_t count = km_image_topic_count(G.r.img), it = 0;
    int pick = (int)(rand_r(seed) % 4);
    if (count < 3)
        pick = 0;
    if (pick == 0) {
        char name[64];
        snprintf(name, sizeof name, "made-%d", step);
        create_topic(name, (unsigned)step, 1 + (int)(rand_r(seed) % 4), nbrokers);
        return;
    }
    const km_topic *t = NULL;
    for (size_t k = 0, at = (size_t)rand_r(seed) % count; k <= at; k++)
        t = km_image_next_topic(G.r.img, &it);
    if (pick == 1)
        delete_topic(t);
    else
        reassign(t, (int32_t)((unsigned)rand_r(seed) % (unsigned)km_topic_partition_count(t)), nbrokers);
}

static long long plaintext_on_tls(void) { return drig_sum_over_sims(&G, "security", "plaintextOnTls"); }

/* Issue 9's "done": 5 brokers behind TLS, >= 200 cut connections (lost requests and lost answers)
 * while topics are created, deleted and reassigned. */
Test(broker_daemon, five_brokers_under_random_cuts_end_equal_to_the_image, .fini = fini, .timeout = 600)
{
    start(5, 0.15, false, &(drig_opts){ .tls = true });
    converge("start-up");
    unsigned seed = 9;
    int step = 0;
    while (cuts() < 200 && step < 3000) {
        random_change(&seed, step++, 5);
        cr_assert(brig_pump(&G.r), "%s", G.r.why);
        brig_run_until(&G.r, drig_never, 0.005);
    }
    cr_assert_geq(cuts(), 200, "only %llu connections were cut in %d changes", (unsigned long long)cuts(), step);
    converge("after the changes");
    logs_had_their_config();
    cr_assert_eq(plaintext_on_tls(), 0, "a request went out in plaintext to a TLS listener");
    cr_log_info("%d changes, %llu cut connections", step, (unsigned long long)cuts());
}

static bool daemon_stopped(void)
{
    km_daemon_status st;
    km_daemon_get_status(G.d, &st);
    return st.fatal != NULL;
}

static void on_guard_tick(struct ev_loop *loop, ev_timer *w, int revents) { (void)loop, (void)w, (void)revents; }

/* The CI failure of five_brokers_under_random_cuts... ("topic made-516 missing from its cache",
 * the daemon idle): the loop's topic ids repeated every 256 steps, so made-516 took the id of a
 * live made-260.  The image replaced made-260 while its delta (keyed by id) kept the old name with
 * the new partitions: no broker ever heard of made-516.  Such a record is refused now: the daemon
 * stops naming both topics instead of silently diverging from its image. */
Test(broker_daemon, a_topic_record_reusing_a_live_topics_id_stops_the_daemon, .fini = fini, .timeout = 240)
{
    start(3, 0, false, NULL);
    converge("start-up");
    create_topic("made-4", 4, 2, 3);
    converge("made-4");
    create_topic("made-260", 4, 2, 3); /* the same salt: the same id */
    cr_assert(!brig_pump(&G.r), "the rig's image took a second name for made-4's id");
    cr_assert(strstr(G.r.why, "already belongs to topic \"made-4\""), "%s", G.r.why);
    ev_timer tick; /* the rig's follower stopped at the record: only the daemon runs */
    ev_timer_init(&tick, on_guard_tick, 0.01, 0.01);
    ev_timer_start(G.r.loop, &tick);
    for (ev_tstamp end = ev_time() + GUARD; !daemon_stopped() && ev_time() < end;)
        ev_run(G.r.loop, EVRUN_ONCE);
    ev_timer_stop(G.r.loop, &tick);
    km_daemon_status st;
    km_daemon_get_status(G.d, &st);
    cr_assert(st.fatal, "the daemon took made-260 under made-4's id");
    cr_assert(strstr(st.fatal, "\"made-260\"") && strstr(st.fatal, "\"made-4\""), "%s", st.fatal);
}
