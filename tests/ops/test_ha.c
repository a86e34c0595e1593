/* Several kmproxy instances on one real ZooKeeper (ha.enabled): exactly one is active; kill -9 of
 * the active one makes a standby take over, and ZooKeeper ends equal to the image every time; a
 * SIGSTOPped active instance that wakes after its session expired is fenced, steps down and rejoins
 * as a standby without writing. With three instances and simulated ZK-mode brokers, every takeover
 * ends with the brokers equal to the image at the new controller epoch and none of them ever
 * rejecting a request. The suite runs twice: on a plain ZooKeeper (test_ha) and on one that requires
 * SASL, every instance on zookeeper.set.acl=true (test_ha_sasl; KM_TEST_ZK_SECURE, zksecmode.h). */
#include "km_testsupport.h"
#include "test_broker_rig.h"
#include "ops_daemon.h"
#include "ops_util.h"
#include "faultproxy.h"
#include "zkserver.h"
#include "zksecmode.h"

#include <criterion/criterion.h>
#include <ev.h>
#include <jansson.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define KILL_ROUNDS 20

static km_zks *zs;

static void start_zk(void) { zs = ops_zk_start(); }

static void stop_zk(void) { km_zks_stop(zs); }

TestSuite(ha, .init = start_zk, .fini = stop_zk, .timeout = 600);

static const char *const HA_SETTINGS[] = {"ha.enabled=true", "zookeeper.session.timeout.ms=2000",
                                          "brokers.enabled=false", NULL};

static bool says(inst *in, const char *needle)
{
    char *body = NULL;
    ops_curl(in->port, "/readyz", &body);
    bool yes = body && strstr(body, needle);
    free(body);
    return yes;
}

/* Waits until one of n instances is the ready active one; returns its index. */
static int wait_active(inst *in, int n, int timeout_s)
{
    for (int tries = 0; tries < timeout_s * 10; tries++) {
        for (int i = 0; i < n; i++)
            if (in[i].p.pid > 0 && says(&in[i], "\"ready\":true,\"role\":\"active\""))
                return i;
        usleep(100000);
    }
    return -1;
}

static int controller_epoch(km_zkc *c)
{
    char *data = NULL;
    int len = 0;
    cr_assert_eq(km_zkc_get(c, "/controller_epoch", &data, &len, NULL), ZOK);
    int v = atoi(data);
    free(data);
    return v;
}

/* `kmproxy zk diff` finds nothing: ZooKeeper equals the image, and on a secured ZooKeeper every
 * znode it owns carries Kafka's ACLs (it authenticates with the instances' settings). */
static void expect_zk_equals_image(env *e, const char *zk, int round)
{
    const char *props = km_zksec_zk_config(e->dir);
    char *argv[] = {(char *)km_test_binary(), "zk", "diff", "--zookeeper", (char *)zk, "--metadata", e->metadata,
                    props ? "--zk-config" : NULL, (char *)props, NULL};
    char *out = NULL, *err = NULL;
    int rc = km_test_run(argv, NULL, 0, &out, NULL, &err);
    cr_expect_eq(rc, 0, "round %d: zk diff exit %d: %s %s", round, rc, out, err);
    cr_expect(strstr(out, "zk diff: 0 missing in ZooKeeper, 0 different, 0 only in ZooKeeper"),
              "round %d: ZooKeeper differs from the image: %s %s", round, out, err);
    cr_expect(!props || strstr(out, "zk diff: 0 znodes with ACLs other than Kafka's"), "round %d: %s", round, out);
    free(out);
    free(err);
}

/* On a secured ZooKeeper: every znode under the instances' chroot (the election, the claim record
 * and the mirror) carries the ACL Kafka gives it, created by the instances' SASL user. */
static void expect_kafka_acls(km_zkc *c)
{
    char why[512] = "";
    if (km_zksec_on())
        cr_expect(km_zksec_acls_are_kafkas(c, why, sizeof why), "%s", why);
}

Test(ha, kill9_of_the_active_one_hands_over_to_a_standby_every_time)
{
    env e;
    env_init(&e);
    char zk[128], tag[32];
    snprintf(zk, sizeof zk, "%s/ha-kill", km_zks_hosts(zs, 0));
    inst in[2];
    start(&in[0], &e, "kill-a0", zk, HA_SETTINGS);
    start(&in[1], &e, "kill-b0", zk, HA_SETTINGS);
    int active = wait_active(in, 2, 60);
    cr_assert_geq(active, 0, "no instance became active");
    km_zkc *c = km_zksec_open(zk, 10000);
    cr_assert(c);
    int epoch = controller_epoch(c);
    for (int round = 1; round <= KILL_ROUNDS; round++) {
        int standby = 1 - active;
        free(scrape_until(&in[standby], "/readyz", 200, "\"role\":\"standby\"", 60));
        char value[32];
        snprintf(value, sizeof value, "%d", 1000 + round);
        append_record(e.metadata, value); /* records keep coming while the active one dies */
        ops_stop(&in[active].p, SIGKILL);
        cr_assert_eq(wait_active(in, 2, 60), standby, "round %d: the standby did not take over", round);
        free(scrape_until(&in[standby], "/readyz", 200, "\"lag_records\":0,", 60));
        int now = controller_epoch(c);
        cr_expect_gt(now, epoch, "round %d: the takeover did not claim with a higher epoch", round);
        epoch = now;
        expect_zk_equals_image(&e, zk, round);
        snprintf(tag, sizeof tag, "kill-%c%d", active ? 'b' : 'a', round);
        start(&in[active], &e, tag, zk, HA_SETTINGS); /* the dead one comes back as a standby */
        free(scrape_until(&in[active], "/readyz", 200, "\"role\":\"standby\"", 60));
        cr_expect(says(&in[standby], "\"role\":\"active\""), "round %d: two active or none", round);
        active = standby;
    }
    expect_kafka_acls(c);
    km_zkc_close(c);
    stop_cleanly(&in[0]);
    stop_cleanly(&in[1]);
    env_free(&e);
}

/* SIGTERM of the active one: exit 0 with its election node already gone (released with its session,
 * not left to expire), so the standby takes over without waiting out the session timeout. The
 * session timeout is long here so that an expiry could not be what hands over. */
Test(ha, sigterm_of_the_active_one_releases_its_election_node)
{
    static const char *const LONG_SESSION[] = {"ha.enabled=true", "zookeeper.session.timeout.ms=60000",
                                               "brokers.enabled=false", NULL};
    env e;
    env_init(&e);
    char zk[128];
    snprintf(zk, sizeof zk, "%s/ha-term", km_zks_hosts(zs, 0));
    inst in[2];
    start(&in[0], &e, "term-a", zk, LONG_SESSION);
    start(&in[1], &e, "term-b", zk, LONG_SESSION);
    int active = wait_active(in, 2, 60);
    cr_assert_geq(active, 0, "no instance became active");
    int standby = 1 - active;
    free(scrape_until(&in[standby], "/readyz", 200, "\"role\":\"standby\"", 60));
    km_zkc *c = km_zksec_open(zk, 10000);
    cr_assert(c);
    char **kids = NULL;
    int n = 0;
    cr_assert_eq(km_zkc_children(c, "/kmproxy/election", &kids, &n), ZOK);
    km_zkc_free_strings(kids, n);
    cr_assert_eq(n, 2, "both instances in the election");
    stop_cleanly(&in[active]);
    cr_assert_eq(km_zkc_children(c, "/kmproxy/election", &kids, &n), ZOK);
    km_zkc_free_strings(kids, n);
    cr_expect_eq(n, 1, "the stopped instance's election node is still there (%d nodes)", n);
    cr_expect_eq(wait_active(in, 2, 60), standby, "the standby did not take over");
    km_zkc_close(c);
    stop_cleanly(&in[standby]);
    env_free(&e);
}

Test(ha, a_sigstopped_active_one_is_fenced_when_it_wakes_and_rejoins_as_standby)
{
    env e;
    env_init(&e);
    char zk[128];
    snprintf(zk, sizeof zk, "%s/ha-stop", km_zks_hosts(zs, 0));
    inst in[2];
    const char *const settings[] = {"ha.enabled=true", "zookeeper.session.timeout.ms=2000", "brokers.enabled=false",
                                    "kmproxy.election.path=/ops/elect", NULL};
    start(&in[0], &e, "stop-a", zk, settings);
    cr_assert_eq(wait_active(in, 1, 60), 0);
    start(&in[1], &e, "stop-b", zk, settings);
    free(scrape_until(&in[1], "/readyz", 200, "\"role\":\"standby\"", 60));
    km_zkc *c = km_zksec_open(zk, 10000);
    cr_assert(c);
    char **nodes = NULL;
    int n_nodes = 0;
    cr_assert_eq(km_zkc_children(c, "/ops/elect", &nodes, &n_nodes), ZOK, "kmproxy.election.path is not used");
    cr_expect_eq(n_nodes, 2);
    km_zkc_free_strings(nodes, n_nodes);
    int before = controller_epoch(c);
    kill(in[0].p.pid, SIGSTOP);
    cr_assert_eq(wait_active(&in[1], 1, 60), 0, "the standby did not take over from the stopped one");
    int taken = controller_epoch(c);
    cr_expect_gt(taken, before);
    append_record(e.metadata, "4242");
    free(scrape_until(&in[1], "/readyz", 200, "\"lag_records\":0,", 60));
    kill(in[0].p.pid, SIGCONT);
    cr_assert(ops_wait_for(&in[0].p, in[0].log_file, "ha: stepping down to standby", 1, 60), "%s",
              ops_slurp(in[0].log_file));
    free(scrape_until(&in[0], "/readyz", 200, "\"role\":\"standby\"", 60));
    cr_expect(says(&in[1], "\"ready\":true,\"role\":\"active\""), "the new active one lost its place");
    cr_expect_eq(controller_epoch(c), taken, "the woken instance claimed again");
    char *m = NULL;
    cr_assert_eq(ops_curl(in[1].port, "/metrics", &m), 200);
    cr_expect(metric(m, "kmproxy_ha_active") == 1 && metric(m, "kmproxy_ha_takeovers_total") == 1 &&
              metric(m, "kmproxy_ha_active_since_seconds") > 0, "%s", m);
    free(m);
    cr_assert_eq(ops_curl(in[0].port, "/metrics", &m), 200);
    cr_expect(metric(m, "kmproxy_ha_active") == 0 && metric(m, "kmproxy_ha_takeovers_total") == 1 &&
              metric(m, "kmproxy_ha_active_since_seconds") == 0, "%s", m);
    free(m);
    expect_zk_equals_image(&e, zk, 0);
    km_zkc_close(c);
    stop_cleanly(&in[0]);
    stop_cleanly(&in[1]);
    env_free(&e);
}

/* ---- with simulated ZK-mode brokers (in this process, on the rig's loop) ------------------------ */

static brig R;

static void slice_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)t; (void)revents;
    ev_break(loop, EVBREAK_ALL);
}

/* Serves the simulators for a moment (they live on R's loop). */
static void serve(double seconds)
{
    ev_timer t;
    ev_timer_init(&t, slice_cb, seconds, 0);
    ev_timer_start(R.loop, &t);
    ev_run(R.loop, 0);
    ev_timer_stop(R.loop, &t);
}

static int active_of(inst *in, int n)
{
    for (int i = 0; i < n; i++)
        if (in[i].p.pid > 0 && says(&in[i], "\"ready\":true,\"role\":\"active\""))
            return i;
    return -1;
}

static bool isr_equal(json_t *got, const km_i32_list *want)
{
    if (!json_is_array(got) || json_array_size(got) != (size_t)want->n)
        return false;
    for (int32_t i = 0; i < want->n; i++)
        if (json_integer_value(json_array_get(got, (size_t)i)) != want->v[i])
            return false;
    return true;
}

/* Every simulator holds the image's leaders, leader epochs and ISRs at ControllerEpoch `epoch`, and none
 * ever rejected a request (a second active instance would have been answered STALE_CONTROLLER_EPOCH). */
static bool brokers_equal_image(const char *logdir, int32_t epoch, bool rejections_ok, char *why, size_t cap)
{
    km_image *img = km_image_new();
    km_err err = {{0}};
    bool ok = km_image_load(img, logdir, NULL, &err) >= 0;
    for (int i = 0; ok && i < R.nsims; i++) {
        json_t *st = km_bsim_state_json(R.sims[i]), *p;
        int32_t b = km_bsim_broker_id(R.sims[i]);
        if ((!rejections_ok && json_integer_value(json_object_get(st, "rejected"))) ||
            json_integer_value(json_object_get(st, "controllerEpoch")) != epoch) {
            snprintf(why, cap, "broker %d: controller epoch %lld (want %d), rejected %lld: %s", b,
                     (long long)json_integer_value(json_object_get(st, "controllerEpoch")), epoch,
                     (long long)json_integer_value(json_object_get(st, "rejected")),
                     json_string_value(json_object_get(st, "lastRejection")));
            ok = false;
        }
        size_t k;
        json_array_foreach(json_object_get(st, "partitions"), k, p) {
            const char *topic = json_string_value(json_object_get(p, "topic"));
            const km_topic *t = topic ? km_image_topic_by_name(img, topic) : NULL;
            km_partition want;
            if (!ok || json_is_true(json_object_get(p, "stopped")))
                continue;
            if (!t || !km_topic_partition(t, (int32_t)json_integer_value(json_object_get(p, "partition")), &want) ||
                json_integer_value(json_object_get(p, "leader")) != want.leader ||
                json_integer_value(json_object_get(p, "leaderEpoch")) != want.leader_epoch ||
                !isr_equal(json_object_get(p, "isr"), &want.isr)) {
                snprintf(why, cap, "broker %d: %s-%lld differs from the image", b, topic,
                         (long long)json_integer_value(json_object_get(p, "partition")));
                ok = false;
            }
        }
        json_decref(st);
    }
    km_image_free(img);
    return ok;
}

/* A leader election of one partition, as the KRaft controller would append it. */
static void elect(int round)
{
    km_partition_change_record pc;
    km_partition_change_record_init(&pc);
    pc.topic_id = brig_topic_id(&R, "topic-0");
    pc.partition_id = 0;
    pc.leader = 1 + round % 2;
    int32_t isr[2] = {pc.leader, 3};
    pc.isr.count = 2;
    pc.isr.items = isr;
    cr_assert(brig_append(&R, &km_partition_change_record_desc, &pc), "%s", R.why);
}

/* ZooKeeper's history of claims, seen by the test's own session. Every claim is one multi that sets
 * /controller_epoch (its zkVersion counts claims, so a poll cannot miss one unseen), recreates
 * /controller and writes the claim record: one transaction, one zxid. */
typedef struct claims {
    int version, epoch, count;  /* /controller_epoch's zkVersion and value last seen; claims seen */
    int32_t broker_epoch[8];    /* the highest controller epoch each simulator has seen */
    bool stale_expected;        /* a woken old active one's requests are rejected: that is the fence */
    char bad[600];              /* the first violation */
} claims;

static void violation(claims *h, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void violation(claims *h, const char *fmt, ...)
{
    if (h->bad[0])
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(h->bad, sizeof h->bad, fmt, ap);
    va_end(ap);
}

/* One claim found: exactly one more than the last (no instance claimed twice or beside another),
 * made in one transaction with /controller and the record, by a live instance that is not `dead`. */
static void check_claim(claims *h, const struct Stat *es, int epoch, const struct Stat *cs, const char *record,
                        const struct Stat *rs, inst *in, int n, pid_t dead)
{
    if (h->version >= 0 && (es->version != h->version + 1 || epoch != h->epoch + 1))
        violation(h, "/controller_epoch went from %d (zkVersion %d) to %d (zkVersion %d): not one claim", h->epoch,
                  h->version, epoch, es->version);
    if (cs->czxid != es->mzxid || rs->mzxid != es->mzxid)
        violation(h, "claim of epoch %d: /controller, /controller_epoch and the record not in one transaction", epoch);
    json_t *rec = json_loads(record, 0, NULL);
    const char *who = json_string_value(json_object_get(rec, "instance"));
    int claimant = -1;
    for (int i = 0; who && i < n; i++) {
        char pid[32];
        snprintf(pid, sizeof pid, ":%d ", (int)in[i].p.pid);
        if (in[i].p.pid > 0 && in[i].p.pid != dead && strstr(who, pid))
            claimant = i;
    }
    if (json_integer_value(json_object_get(rec, "controller_epoch")) != epoch || claimant < 0)
        violation(h, "epoch %d was not claimed by a live instance (record %s)", epoch, record);
    json_decref(rec);
    h->version = es->version;
    h->epoch = epoch;
    h->count++;
}

/* Polls ZooKeeper's claims (consistent reads only: /controller_epoch unchanged around the others). */
static void observe_zk(km_zkc *c, claims *h, inst *in, int n, pid_t dead)
{
    char *e = NULL, *ctl = NULL, *rec = NULL;
    int len;
    struct Stat es, cs, rs, again;
    if (km_zkc_get(c, "/controller_epoch", &e, &len, &es) == ZOK && es.version != h->version &&
        km_zkc_get(c, "/controller", &ctl, &len, &cs) == ZOK &&
        km_zkc_get(c, "/kmproxy/active", &rec, &len, &rs) == ZOK &&
        km_zkc_get(c, "/controller_epoch", NULL, &len, &again) == ZOK && again.version == es.version)
        check_claim(h, &es, atoi(e), &cs, rec, &rs, in, n, dead);
    free(e);
    free(ctl);
    free(rec);
}

/* The brokers' view: no simulator's controller epoch ever goes backwards, none rejects a request. */
static void observe_brokers(claims *h)
{
    for (int i = 0; i < R.nsims && i < 8; i++) {
        json_t *st = km_bsim_state_json(R.sims[i]);
        int32_t ep = (int32_t)json_integer_value(json_object_get(st, "controllerEpoch"));
        if (ep < h->broker_epoch[i])
            violation(h, "broker %d: controller epoch went back from %d to %d", km_bsim_broker_id(R.sims[i]),
                      h->broker_epoch[i], ep);
        if (!h->stale_expected && json_integer_value(json_object_get(st, "rejected")))
            violation(h, "broker %d rejected a request: %s", km_bsim_broker_id(R.sims[i]),
                      json_string_value(json_object_get(st, "lastRejection")));
        h->broker_epoch[i] = ep > h->broker_epoch[i] ? ep : h->broker_epoch[i];
        json_decref(st);
    }
}

/* Serves the brokers for 0.1 s while the KRaft side keeps appending (one election every 0.3 s),
 * and watches ZooKeeper's and the brokers' view of who is the controller. */
static void serve_and_watch(km_zkc *c, claims *h, inst *in, int n, pid_t dead, bool appending, int *tick)
{
    if (appending && ++*tick % 3 == 0)
        elect(*tick);
    serve(0.1);
    observe_zk(c, h, in, n, dead);
    observe_brokers(h);
}

Test(ha, three_instances_and_simulated_brokers_survive_kill9_of_the_active_one)
{
    brig_opts o = {.brokers = 3, .topics = 3, .partitions = 2, .replication = 3, .leader_changes = 5};
    cr_assert(brig_init(&R, &o), "%s", R.why);
    env e = {.dir = km_test_tmpdir("ops-ha-brokers")};
    snprintf(e.metadata, sizeof e.metadata, "%s", R.logdir);
    char zk[128], tag[32];
    snprintf(zk, sizeof zk, "%s/ha-brokers", km_zks_hosts(zs, 0));
    const char *const settings[] = {"ha.enabled=true", "zookeeper.session.timeout.ms=2000", "brokers.enabled=true",
                                    "broker.request.timeout.ms=5000", NULL};
    inst in[3];
    for (int i = 0; i < 3; i++) {
        snprintf(tag, sizeof tag, "brk-%d-0", i);
        start(&in[i], &e, tag, zk, settings);
    }
    km_zkc *c = km_zksec_open(zk, 10000);
    cr_assert(c);
    int active = -1, epoch = 0, tick = 0;
    char why[512] = "";
    claims h = {.version = -1};
    for (int waited = 0; waited < 600 && active < 0; waited++, serve_and_watch(c, &h, in, 3, 0, false, &tick))
        active = active_of(in, 3);
    cr_assert_geq(active, 0, "no instance became active with the brokers in sync");
    for (int round = 1; round <= KILL_ROUNDS; round++) {
        pid_t dead = in[active].p.pid;
        for (int i = 0; i < 3; i++) /* records keep coming before, during and after the kill */
            serve_and_watch(c, &h, in, 3, 0, true, &tick);
        ops_stop(&in[active].p, SIGKILL);
        int next = -1;
        for (int waited = 0; waited < 600 && next < 0; waited++, serve_and_watch(c, &h, in, 3, dead, true, &tick))
            next = active_of(in, 3);
        cr_assert_geq(next, 0, "round %d: no standby took over with the brokers in sync", round);
        int now = controller_epoch(c);
        cr_expect_gt(now, epoch, "round %d: the takeover did not claim with a higher epoch", round);
        epoch = now;
        bool equal = false; /* the appends pause so that the image holds still to compare with */
        for (int waited = 0; waited < 600 && !(equal = brokers_equal_image(R.logdir, epoch, false, why, sizeof why));
             waited++)
            serve_and_watch(c, &h, in, 3, dead, false, &tick);
        cr_assert(equal, "round %d: %s", round, why);
        cr_assert(!h.bad[0], "round %d: %s", round, h.bad);
        cr_expect_eq(h.count, round + 1, "round %d: %d claims seen in ZooKeeper, want one per takeover", round,
                     h.count);
        expect_zk_equals_image(&e, zk, round);
        snprintf(tag, sizeof tag, "brk-%d-%d", active, round);
        start(&in[active], &e, tag, zk, settings); /* back as a standby */
        int actives = 0;
        for (int i = 0; i < 3; i++)
            actives += says(&in[i], "\"role\":\"active\"");
        cr_expect_eq(actives, 1, "round %d: %d instances say they are active", round, actives);
        active = next;
    }
    expect_kafka_acls(c);
    km_zkc_close(c);
    for (int i = 0; i < 3; i++)
        stop_cleanly(&in[i]);
    brig_free(&R);
    km_test_rmtree(e.dir);
    free(e.dir);
}

static bool logged(inst *in, const char *needle)
{
    char *log = ops_slurp(in->log_file);
    bool yes = strstr(log, needle) != NULL;
    free(log);
    return yes;
}

/* The SIGSTOP case with brokers: the paused active one's session expires, the standby claims and
 * brings the brokers to the image at its epoch; the woken one must not claim again, and whatever it
 * still sends the brokers is refused (their controller epoch never goes back). */
Test(ha, a_sigstopped_active_one_with_brokers_is_fenced_and_the_brokers_stay_with_the_new_one)
{
    brig_opts o = {.brokers = 3, .topics = 3, .partitions = 2, .replication = 3, .leader_changes = 5};
    cr_assert(brig_init(&R, &o), "%s", R.why);
    env e = {.dir = km_test_tmpdir("ops-ha-stop-brokers")};
    snprintf(e.metadata, sizeof e.metadata, "%s", R.logdir);
    char zk[128], why[512] = "";
    snprintf(zk, sizeof zk, "%s/ha-stop-brokers", km_zks_hosts(zs, 0));
    const char *const settings[] = {"ha.enabled=true", "zookeeper.session.timeout.ms=2000", "brokers.enabled=true",
                                    "broker.request.timeout.ms=5000", NULL};
    inst in[2];
    km_zkc *c = km_zksec_open(zk, 10000);
    cr_assert(c);
    claims h = {.version = -1, .stale_expected = true};
    int tick = 0, active = -1;
    start(&in[0], &e, "stopb-a", zk, settings);
    for (int waited = 0; waited < 600 && active < 0; waited++, serve_and_watch(c, &h, in, 1, 0, false, &tick))
        active = active_of(in, 1);
    cr_assert_eq(active, 0, "the first instance did not become active with the brokers in sync");
    start(&in[1], &e, "stopb-b", zk, settings);
    for (int waited = 0; waited < 600 && !says(&in[1], "\"role\":\"standby\""); waited++)
        serve_and_watch(c, &h, in, 2, 0, true, &tick);
    kill(in[0].p.pid, SIGSTOP);
    for (int waited = 0; waited < 600 && active_of(&in[1], 1) != 0; waited++)
        serve_and_watch(c, &h, in, 2, in[0].p.pid, true, &tick);
    cr_assert_eq(active_of(&in[1], 1), 0, "the standby did not take over from the stopped one");
    kill(in[0].p.pid, SIGCONT);
    for (int waited = 0; waited < 600 && !logged(&in[0], "ha: stepping down"); waited++)
        serve_and_watch(c, &h, in, 2, in[0].p.pid, true, &tick);
    cr_assert(logged(&in[0], "ha: stepping down"), "the woken one did not step down: %s", ops_slurp(in[0].log_file));
    int epoch = controller_epoch(c);
    bool equal = false;
    for (int waited = 0; waited < 600 && !(equal = brokers_equal_image(R.logdir, epoch, true, why, sizeof why)); waited++)
        serve_and_watch(c, &h, in, 2, in[0].p.pid, false, &tick);
    cr_assert(equal, "%s", why);
    cr_expect(!h.bad[0], "%s", h.bad);
    cr_expect_eq(h.count, 2, "%d claims seen in ZooKeeper: the woken one claimed again", h.count);
    cr_expect(says(&in[0], "\"role\":\"standby\"") && says(&in[1], "\"ready\":true,\"role\":\"active\""),
              "the roles are not woken=standby, taker=active");
    km_zkc_close(c);
    stop_cleanly(&in[0]);
    stop_cleanly(&in[1]);
    brig_free(&R);
    km_test_rmtree(e.dir);
    free(e.dir);
}

/* A network cut between the active instance and ZooKeeper (its connections go through a proxy that
 * then refuses everything): its session expires, the standby takes over; when the cut heals the old
 * one finds its session expired, steps down and stands by. */
Test(ha, an_active_one_cut_from_zookeeper_loses_the_lead_and_stands_by_when_it_heals)
{
    env e;
    env_init(&e);
    char perr[256] = "", zk_direct[128], zk_cut[128];
    km_fp *fp = km_fp_start(km_zks_port(zs, 0), perr, sizeof perr);
    cr_assert(fp, "%s", perr);
    snprintf(zk_direct, sizeof zk_direct, "%s/ha-cut", km_zks_hosts(zs, 0));
    snprintf(zk_cut, sizeof zk_cut, "%s/ha-cut", km_fp_hosts(fp));
    inst in[2];
    start(&in[0], &e, "cut-a", zk_cut, HA_SETTINGS);
    cr_assert_eq(wait_active(in, 1, 60), 0);
    start(&in[1], &e, "cut-b", zk_direct, HA_SETTINGS);
    free(scrape_until(&in[1], "/readyz", 200, "\"role\":\"standby\"", 60));
    km_fp_refuse(fp, true);
    km_fp_cut_all(fp);
    cr_assert_eq(wait_active(&in[1], 1, 60), 0, "the standby did not take over from the cut-off one");
    km_fp_refuse(fp, false);
    cr_assert(ops_wait_for(&in[0].p, in[0].log_file, "ha: stepping down to standby", 1, 60), "%s",
              ops_slurp(in[0].log_file));
    free(scrape_until(&in[0], "/readyz", 200, "\"role\":\"standby\"", 60));
    cr_expect(says(&in[1], "\"ready\":true,\"role\":\"active\""), "the new active one lost its place");
    expect_zk_equals_image(&e, zk_direct, 0);
    stop_cleanly(&in[0]);
    stop_cleanly(&in[1]);
    km_fp_stop(fp);
    env_free(&e);
}

/* ---- a writer outside the election (a KRaft controller's own migration driver, an operator's tool) ---- */

/* Waits for the instance to exit on its own; returns its wait status (-1: still running). */
static int wait_exit(inst *in, int timeout_s)
{
    int status = -1;
    for (int tries = 0; tries < timeout_s * 10; tries++, usleep(100000))
        if (waitpid(in->p.pid, &status, WNOHANG) == in->p.pid) {
            in->p.pid = -1;
            return status;
        }
    return -1;
}

/* n HA instances; a genuine second writer claims /controller_epoch and moves /migration (as
 * test_daemon's mirrors_under_a_new_chroot_then_fences_on_a_second_writer does to one instance).
 * That is no takeover by one of us: every instance must stop (exit 1, naming the foreign epoch)
 * and none may claim over it - before, the fenced one rejoined, won again and re-claimed.
 * migration_only: the writer moves /migration alone, leaving /controller_epoch ours; no instance
 * of ours does that either (a takeover claims first), and before, the standby claimed over it. */
static void foreign_writer_stops_every_instance(int n, const char *chroot, bool migration_only)
{
    env e;
    env_init(&e);
    char zk[128], tag[32];
    snprintf(zk, sizeof zk, "%s/%s", km_zks_hosts(zs, 0), chroot);
    inst in[2];
    for (int i = 0; i < n; i++) {
        snprintf(tag, sizeof tag, "%s-%d", chroot, i);
        start(&in[i], &e, tag, zk, HA_SETTINGS);
        if (i == 0)
            cr_assert_eq(wait_active(in, 1, 60), 0, "no instance became active");
        else
            free(scrape_until(&in[i], "/readyz", 200, "\"role\":\"standby\"", 60));
    }
    km_zkc *c = km_zksec_open(zk, 10000);
    cr_assert(c);
    char *data = NULL, bumped[32];
    int len = 0;
    struct Stat st;
    cr_assert_eq(km_zkc_get(c, "/kmproxy/active", &data, &len, &st), ZOK, "no claim record beside the election");
    cr_expect(data && strstr(data, "\"controller_epoch\":"), "%s", data);
    free(data);
    cr_assert_eq(km_zkc_get(c, "/controller_epoch", &data, &len, &st), ZOK);
    snprintf(bumped, sizeof bumped, "%d", atoi(data) + (migration_only ? 0 : 5));
    free(data);
    if (!migration_only)
        cr_assert_eq(km_zkc_set(c, "/controller_epoch", bumped, st.version, &st), ZOK);
    /* Behind our image (a driver replaying the same log): the roll-back guard has nothing to refuse. */
    const char *foreign = "{\"version\":0,\"kraft_controller_id\":9,\"kraft_controller_epoch\":99,"
                          "\"kraft_metadata_offset\":1,\"kraft_metadata_epoch\":1}";
    cr_assert_eq(km_zkc_set(c, "/migration", foreign, -1, &st), ZOK);
    append_record(e.metadata, "777"); /* the active one's next write meets the foreign epoch */
    for (int i = 0; i < n; i++) {
        int status = wait_exit(&in[i], 60);
        char *log = ops_slurp(in[i].log_file);
        cr_expect(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 1,
                  "instance %d did not exit 1 (status %d): %s", i, status, log);
        if (migration_only) /* the active one read it in /migration, the standby in the marked record */
            cr_expect(strstr(log, "a writer outside the election owns ZooKeeper:") &&
                          strstr(log, "\"kraft_controller_epoch\":99"),
                      "instance %d does not name the foreign /migration: %s", i, log);
        else
            cr_expect(strstr(log, "a writer outside the election owns ZooKeeper: /controller_epoch is") &&
                          strstr(log, bumped), "instance %d does not name the foreign epoch %s: %s", i, bumped, log);
        free(log);
        ops_stop(&in[i].p, SIGKILL); /* only when it is still running */
    }
    cr_assert_eq(km_zkc_get(c, "/controller_epoch", &data, &len, NULL), ZOK);
    cr_expect_str_eq(data, bumped, "an instance claimed over the foreign writer");
    free(data);
    cr_assert_eq(km_zkc_get(c, "/migration", &data, &len, NULL), ZOK);
    cr_expect_str_eq(data, foreign, "an instance wrote /migration after the foreign writer");
    free(data);
    km_zkc_close(c);
    env_free(&e);
}

Test(ha, one_instance_fenced_by_a_foreign_writer_exits_1_and_never_reclaims)
{
    foreign_writer_stops_every_instance(1, "ha-foreign1", false);
}

Test(ha, two_instances_fenced_by_a_foreign_writer_both_exit_1_and_neither_reclaims)
{
    foreign_writer_stops_every_instance(2, "ha-foreign2", false);
}

Test(ha, a_foreign_writer_moving_only_migration_stops_both_instances)
{
    foreign_writer_stops_every_instance(2, "ha-foreign-mig", true);
}

/* A configured ZooKeeper authentication that fails stops the daemon at once, exit 2 (bad
 * configuration: systemd does not restart it), naming the user ZooKeeper refused. It never
 * retries without SASL, so nothing was written. */
Test(ha, a_wrong_zookeeper_password_stops_the_daemon_with_exit_2)
{
    char err[512] = "";
    km_zks *sec = km_zks_start_opts(1, &(km_zks_options){.sasl_users = "user_kafka=\"kafka-secret\""}, err,
                                    sizeof err);
    cr_assert(sec, "%s", err);
    env e;
    env_init(&e);
    char jaas[600], jaas_key[700];
    snprintf(jaas, sizeof jaas, "%s/jaas.conf", e.dir);
    FILE *f = fopen(jaas, "w");
    cr_assert(f);
    fputs("Client { org.apache.zookeeper.server.auth.DigestLoginModule required "
          "username=\"kafka\" password=\"wrong\"; };\n", f);
    fclose(f);
    snprintf(jaas_key, sizeof jaas_key, "java.security.auth.login.config=%s", jaas);
    const char *single[] = {"brokers.enabled=false", jaas_key, "zookeeper.set.acl=true", NULL};
    const char *ha[] = {"ha.enabled=true", "brokers.enabled=false", jaas_key, "zookeeper.set.acl=true", NULL};
    for (int i = 0; i < 2; i++) { /* alone (the writer is refused) and in HA (the election is) */
        inst in;
        start(&in, &e, i ? "wrong-pw-ha" : "wrong-pw", km_zks_hosts(sec, 0), i ? ha : single);
        int status = wait_exit(&in, 60);
        char *log = ops_slurp(in.log_file);
        cr_expect(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 2, "%d: status %d: %s", i, status, log);
        cr_expect(strstr(log, "zookeeper refused the authentication of kafka"), "%s", log);
        free(log);
    }
    km_zkc *c = km_zkc_open(km_zks_hosts(sec, 0), NULL, 10000);
    cr_assert(c);
    char *data = NULL;
    int len = 0;
    cr_expect_eq(km_zkc_get(c, "/controller", &data, &len, NULL), ZNONODE, "something was claimed without SASL");
    free(data);
    km_zkc_close(c);
    env_free(&e);
    km_zks_stop(sec);
}
