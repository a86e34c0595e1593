/* The fault suite (issue 18): each fault an operator meets is injected against a real ZooKeeper and
 * simulated ZK-mode brokers, /readyz must say 503 with the right reason within a bound (ZooKeeper:
 * the session timeout; brokers: their request timeout), with a metric and a log line; then the fault
 * is removed and the daemon must be ready again. Each test prints its time to 503 and time to
 * recover ("fault figures:" lines); only the bounds are asserted, never the figures. */
#include "km_testsupport.h"
#include "test_broker_rig.h"
#include "test_tls_certs.h"
#include "ops_daemon.h"
#include "ops_util.h"
#include "faultproxy.h"
#include "zkserver.h"

#include <criterion/criterion.h>
#include <ev.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SESSION_MS 4000      /* zookeeper.session.timeout.ms: the bound for ZooKeeper faults */
#define REQUEST_MS 3000      /* broker.request.timeout.ms: the bound for broker faults */
#define SLACK_S 2.0          /* polling and a loaded machine on top of a bound */
#define RECOVER_S 90.0       /* a guard against hangs while recovering, not a figure */

static km_zks *zs;

static void start_zk(void) { zs = ops_zk_start(); }

static void stop_zk(void) { km_zks_stop(zs); }

TestSuite(faults, .init = start_zk, .fini = stop_zk, .timeout = 300);

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void figures(const char *fault, double to_503, double to_recover)
{
    printf("fault figures: %s: 503 after %.1f s, ready again %.1f s after the fault was removed\n", fault, to_503,
           to_recover);
    fflush(stdout);
}

/* ---- the simulated brokers live on R's loop, in this process ---- */

static brig R;
static bool serving;

static void slice_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)t; (void)revents;
    ev_break(loop, EVBREAK_ALL);
}

/* Waits `seconds`, serving the simulators meanwhile when there are any. */
static void pause_for(double seconds)
{
    if (!serving) {
        usleep((useconds_t)(seconds * 1e6));
        return;
    }
    ev_timer t;
    ev_timer_init(&t, slice_cb, seconds, 0);
    ev_timer_start(R.loop, &t);
    ev_run(R.loop, 0);
    ev_timer_stop(R.loop, &t);
}

/* Polls /readyz until it answers `status` with needle; the seconds that took (asserts within bound_s). */
static double readyz_until(inst *in, int status, const char *needle, double bound_s)
{
    double t0 = now_s();
    char *body = NULL;
    while (now_s() - t0 < bound_s) {
        free(body);
        body = NULL;
        if (ops_curl(in->port, "/readyz", &body) == status && strstr(body, needle)) {
            free(body);
            return now_s() - t0;
        }
        pause_for(0.05);
    }
    cr_assert_fail("/readyz did not answer %d with '%s' within %.1f s; last: %s; log: %s", status, needle, bound_s,
                   body, ops_slurp(in->log_file));
    return -1;
}

static double metric_of(inst *in, const char *name)
{
    char *m = NULL;
    cr_assert_eq(ops_curl(in->port, "/metrics", &m), 200);
    double v = metric(m, name);
    free(m);
    return v;
}

static void expect_logged(inst *in, const char *needle)
{
    char *log = ops_slurp(in->log_file);
    cr_expect(strstr(log, needle), "the log does not say '%s': %s", needle, log);
    free(log);
}

static const char *session_setting(void)
{
    static char s[64];
    snprintf(s, sizeof s, "zookeeper.session.timeout.ms=%d", SESSION_MS);
    return s;
}

/* ---- item 1: ZooKeeper out of reach ---- */

/* ZooKeeper stopped under a running instance: not ready (the connection is gone, whatever the
 * session), said in the log and the metrics; ready again once ZooKeeper is back. */
Test(faults, zookeeper_stopped_makes_the_instance_unready_until_it_is_back)
{
    env e;
    env_init(&e);
    char zk[128];
    snprintf(zk, sizeof zk, "%s/stopped", km_zks_hosts(zs, 0));
    inst a;
    start(&a, &e, "zk-stopped", zk, (const char *const[]){"brokers.enabled=false", session_setting(), NULL});
    readyz_until(&a, 200, "\"ready\":true", 60);
    cr_assert_eq(metric_of(&a, "kmproxy_zk_connected"), 1);
    cr_assert_eq(km_zks_kill_one(zs, 0), 0);
    double down = readyz_until(&a, 503, "zookeeper disconnected: ", SESSION_MS / 1000.0 + SLACK_S);
    cr_expect_eq(metric_of(&a, "kmproxy_zk_connected"), 0);
    cr_expect_eq(metric_of(&a, "kmproxy_ready"), 0);
    expect_logged(&a, "zk: lost the connection to ZooKeeper ");
    cr_assert_eq(km_zks_start_one(zs, 0), 0);
    double back = readyz_until(&a, 200, "\"ready\":true", RECOVER_S);
    cr_expect_eq(metric_of(&a, "kmproxy_zk_connected"), 1);
    figures("ZooKeeper stopped (one instance)", down, back);
    stop_cleanly(&a);
    env_free(&e);
}

/* The network to ZooKeeper silently drops everything (no reset): the client notices after two thirds
 * of the session timeout; /readyz must say so before the session could expire. */
/* One instance (no brokers) on a fresh env, reaching ZooKeeper (chroot /tag) through a fault proxy,
 * ready: the proxy is returned. */
static km_fp *ready_behind_a_proxy(env *e, inst *a, const char *tag)
{
    char perr[256] = "", zk[128];
    env_init(e);
    km_fp *fp = km_fp_start(km_zks_port(zs, 0), perr, sizeof perr);
    cr_assert(fp, "%s", perr);
    snprintf(zk, sizeof zk, "%s/%s", km_fp_hosts(fp), tag);
    start(a, e, tag, zk, (const char *const[]){"brokers.enabled=false", session_setting(), NULL});
    readyz_until(a, 200, "\"ready\":true", 60);
    return fp;
}

Test(faults, a_silent_network_to_zookeeper_is_unready_within_the_session_timeout)
{
    env e;
    inst a;
    km_fp *fp = ready_behind_a_proxy(&e, &a, "zk-silent");
    km_fp_pause(fp, true);
    double down = readyz_until(&a, 503, "zookeeper disconnected: ", SESSION_MS / 1000.0 + SLACK_S);
    cr_expect_eq(metric_of(&a, "kmproxy_zk_connected"), 0);
    expect_logged(&a, "zk: lost the connection to ZooKeeper ");
    km_fp_pause(fp, false);
    double back = readyz_until(&a, 200, "\"ready\":true", RECOVER_S);
    figures("network to ZooKeeper silent (one instance)", down, back);
    stop_cleanly(&a);
    km_fp_stop(fp);
    env_free(&e);
}

/* The last occurrence of needle in hay, or NULL. */
static const char *last_of(const char *hay, const char *needle)
{
    const char *last = NULL;
    for (const char *at = strstr(hay, needle); at; at = strstr(at + 1, needle))
        last = at;
    return last;
}

/* A 200 after the expiry is right only once the log says the re-claim and its full re-sync are done. */
static void check_ready_after_resync(inst *in)
{
    char *log = ops_slurp(in->log_file);
    const char *claim = last_of(log, "zk claim: /controller_epoch is now 2 ");
    cr_assert(claim, "/readyz said 200 after the expiry before the re-claim; log: %s", log);
    cr_assert(strstr(claim, "zk sync: done"), "/readyz said 200 after the re-claim, before its full re-sync; log: %s",
              log);
    free(log);
}

/* Issue 27 items 1, 3 and 9 as an operator sees them: the network to ZooKeeper goes silent past the
 * session timeout while the log keeps growing. The process never exits; /readyz, polled without a
 * break from the moment the link is back, never says 200 before the new claim's full re-sync and
 * never gives a false reason (no "no session" while it has one, no write-behind "lag" that is the
 * sync's distance); the log says when the new session came, measured from the loss. */
Test(faults, a_session_expiry_while_the_log_grows_is_survived_with_true_reasons)
{
    env e;
    inst a;
    char value[32];
    km_fp *fp = ready_behind_a_proxy(&e, &a, "zk-expiry");
    km_fp_pause(fp, true);
    double t0 = now_s();
    int appended = 0;
    while (now_s() - t0 < SESSION_MS / 1000.0 + 2.0) { /* past the timeout: ZooKeeper expires the session */
        snprintf(value, sizeof value, "%d", 5000 + appended++);
        append_record(e.metadata, value);
        pause_for(0.1);
    }
    km_fp_pause(fp, false);
    int polls = 0, unready = 0;
    for (double t1 = now_s(); now_s() - t1 < RECOVER_S; polls++) {
        char *body = NULL;
        int st = ops_curl(a.port, "/readyz", &body);
        cr_assert(st == 200 || st == 503, "/readyz answered %d (the process exited?); log: %s", st,
                  ops_slurp(a.log_file));
        if (st == 200 && strstr(body, "\"ready\":true")) {
            free(body);
            check_ready_after_resync(&a);
            break;
        }
        unready++;
        cr_assert(!strstr(body, "lag: ") && !strstr(body, "no session with") && !strstr(body, "quorum unreachable"),
                  "a false reason after the expiry: %s", body);
        free(body);
        if (polls % 5 == 0) { /* the log keeps growing */
            snprintf(value, sizeof value, "%d", 5000 + appended++);
            append_record(e.metadata, value);
        }
    }
    char *log = ops_slurp(a.log_file);
    cr_assert(!strstr(log, "stopping:"), "the daemon stopped: %s", log);
    const char *lost = strstr(log, "zk session expired: new session, re-claim, full re-sync");
    const char *back = lost ? strstr(lost, "new session with ZooKeeper ") : NULL;
    const char *claim = strstr(log, "zk claim: /controller_epoch is now 2 ");
    cr_assert(lost && back && claim && back < claim, "the expiry, the new session and the re-claim, in that order: %s",
              log);
    const char *figure = strstr(back, " established ");
    double gone = figure ? strtod(figure + strlen(" established "), NULL) : -1;
    /* the client notices the silence after two thirds of the timeout: at least 2 s of it followed */
    cr_assert_geq(gone, 2.0, "the new session's line gives %.1f s without a connection: %.200s", gone, back);
    free(log);
    printf("fault figures: session expiry: %d polls of /readyz, %d of them 503, %d records appended\n", polls,
           unready, appended);
    readyz_until(&a, 200, "\"ready\":true", RECOVER_S);
    stop_cleanly(&a);
    km_fp_stop(fp);
    env_free(&e);
}

static void rig_start(env *e, const char *tag)
{
    brig_opts o = {.brokers = 3, .topics = 2, .partitions = 2, .replication = 3};
    cr_assert(brig_init(&R, &o), "%s", R.why);
    serving = true;
    e->dir = km_test_tmpdir(tag);
    snprintf(e->metadata, sizeof e->metadata, "%s", R.logdir);
}

static void rig_stop(env *e)
{
    serving = false;
    brig_free(&R);
    km_test_rmtree(e->dir);
    free(e->dir);
}

static const char *request_setting(void)
{
    static char s[64];
    snprintf(s, sizeof s, "broker.request.timeout.ms=%d", REQUEST_MS);
    return s;
}

/* The readyz of one instance, as (ready, active). */
static void role_of(inst *in, bool *ready, bool *active)
{
    char *body = NULL;
    int st = ops_curl(in->port, "/readyz", &body);
    *ready = st == 200;
    *active = body && strstr(body, "\"role\":\"active\"");
    free(body);
}

/* No simulated broker ever answered STALE_CONTROLLER_EPOCH: the instance that stepped down sent
 * nothing after the new one's claim reached them. */
static void expect_no_stale_answers(void)
{
    for (int i = 0; i < R.nsims; i++) {
        json_t *st = km_bsim_state_json(R.sims[i]);
        json_t *stale = json_object_get(json_object_get(st, "errors"), "11");
        cr_expect(!stale || !json_integer_value(stale), "broker %d answered STALE_CONTROLLER_EPOCH %lld times",
                  km_bsim_broker_id(R.sims[i]), (long long)json_integer_value(stale));
        json_decref(st);
    }
}

/* HA: the active instance's network to ZooKeeper goes silent. It must step down before its session
 * can expire - that is when the standby takes over - so that no two instances are ever active and
 * ready at once; once the network is back it stands by, ready. With brokers, none of them may hear
 * from both. */
static void ha_silent(bool brokers)
{
    env e;
    if (brokers)
        rig_start(&e, "faults-ha-brokers");
    else
        env_init(&e);
    char perr[256] = "", zk_cut[128], zk_direct[128];
    km_fp *fp = km_fp_start(km_zks_port(zs, 0), perr, sizeof perr);
    cr_assert(fp, "%s", perr);
    snprintf(zk_cut, sizeof zk_cut, "%s/ha-silent", km_fp_hosts(fp));
    snprintf(zk_direct, sizeof zk_direct, "%s/ha-silent", km_zks_hosts(zs, 0));
    const char *const settings[] = {"ha.enabled=true", brokers ? "brokers.enabled=true" : "brokers.enabled=false",
                                    session_setting(), request_setting(), NULL};
    inst in[2];
    start(&in[0], &e, "ha-silent-a", zk_cut, settings);
    readyz_until(&in[0], 200, "\"ready\":true,\"role\":\"active\"", 60);
    start(&in[1], &e, "ha-silent-b", zk_direct, settings);
    readyz_until(&in[1], 200, "\"ready\":true,\"role\":\"standby\"", 60);
    km_fp_pause(fp, true);
    double t0 = now_s(), a_down = -1, b_up = -1;
    while (b_up < 0 && now_s() - t0 < SESSION_MS / 1000.0 * 3 + SLACK_S) {
        bool a_ready, a_active, b_ready, b_active;
        role_of(&in[0], &a_ready, &a_active);
        role_of(&in[1], &b_ready, &b_active);
        cr_assert(!(a_ready && a_active && b_ready && b_active), "both instances active and ready after %.1f s",
                  now_s() - t0);
        if (a_down < 0 && !(a_ready && a_active))
            a_down = now_s() - t0;
        if (b_ready && b_active)
            b_up = now_s() - t0;
        pause_for(0.02);
    }
    cr_assert(a_down >= 0 && a_down <= SESSION_MS / 1000.0 + SLACK_S, "the cut-off one did not step down in time "
              "(%.1f s): %s", a_down, ops_slurp(in[0].log_file));
    cr_assert(b_up >= 0, "the standby did not take over: %s", ops_slurp(in[1].log_file));
    cr_expect(a_down < b_up, "the takeover (%.1f s) came before the step-down (%.1f s)", b_up, a_down);
    cr_expect_eq(metric_of(&in[0], "kmproxy_zk_connected"), 0);
    cr_expect_eq(metric_of(&in[0], "kmproxy_ha_active"), 0);
    expect_logged(&in[0], "ha: stepping down to standby: lost the connection to ZooKeeper");
    km_fp_pause(fp, false);
    double t1 = now_s();
    readyz_until(&in[0], 200, "\"ready\":true,\"role\":\"standby\"", RECOVER_S);
    double back = now_s() - t1;
    readyz_until(&in[1], 200, "\"ready\":true,\"role\":\"active\"", 10);
    if (brokers)
        expect_no_stale_answers();
    printf("fault figures: HA%s, active one's network to ZooKeeper silent: it stepped down after %.1f s, the "
           "standby was active and ready after %.1f s\n", brokers ? " with brokers" : "", a_down, b_up);
    figures(brokers ? "HA with brokers, active one's network to ZooKeeper silent (the old active one)"
                    : "HA, active one's network to ZooKeeper silent (the old active one)", a_down, back);
    stop_cleanly(&in[0]);
    stop_cleanly(&in[1]);
    km_fp_stop(fp);
    if (brokers)
        rig_stop(&e);
    else
        env_free(&e);
}

Test(faults, ha_the_active_one_cut_from_zookeeper_steps_down_before_the_takeover) { ha_silent(false); }

Test(faults, ha_with_brokers_the_active_one_cut_from_zookeeper_steps_down_before_the_takeover) { ha_silent(true); }

/* ---- brokers (items 3, 4, 6, 11) ---- */

/* Item 11: one broker down from the start does not hold systemd (READY=1 comes), it is a reason on
 * /readyz. Item 6: the reason counts right and names the broker. Then it comes back, goes down
 * again while running, and comes back again. */
Test(faults, a_broker_down_is_a_readiness_reason_not_a_reason_to_hold_systemd)
{
    env e;
    rig_start(&e, "faults-broker-down");
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s/notify", e.dir);
    int fd = socket(AF_UNIX, SOCK_DGRAM, 0);
    cr_assert(fd >= 0 && !bind(fd, (struct sockaddr *)&sa, sizeof sa));
    km_bsim_set_unreachable(brig_sim(&R, 2), true);
    char zk[128], got[4096] = "";
    snprintf(zk, sizeof zk, "%s/broker-down", km_zks_hosts(zs, 0));
    setenv("NOTIFY_SOCKET", sa.sun_path, 1);
    inst a;
    start(&a, &e, "broker-down", zk, (const char *const[]){"brokers.enabled=true", request_setting(), NULL});
    unsetenv("NOTIFY_SOCKET");
    cr_assert(ops_notified(fd, "READY=1", got, sizeof got, 60, pause_for),
              "no READY=1 with one broker down: %s; log: %s", got, ops_slurp(a.log_file));
    cr_expect(strstr(got, "not every ZK-mode broker is up to date"), "%s", got);
    readyz_until(&a, 503, "brokers unreachable: 1 of 3 ZK-mode brokers not connected (brokers 2); 2 up to date",
                 REQUEST_MS / 1000.0 + SLACK_S);
    cr_expect_eq(metric_of(&a, "kmproxy_brokers_unreachable"), 1);
    cr_expect_eq(metric_of(&a, "kmproxy_brokers_up_to_date"), 2);
    expect_logged(&a, "ready: active, ZooKeeper in sync; not every ZK-mode broker is up to date yet");
    expect_logged(&a, "brokers: broker 2");
    km_bsim_set_unreachable(brig_sim(&R, 2), false);
    double back = readyz_until(&a, 200, "\"ready\":true", RECOVER_S);
    figures("a broker down at start (systemd READY=1 sent meanwhile)", 0, back);
    km_bsim_set_unreachable(brig_sim(&R, 2), true);
    double down = readyz_until(&a, 503, "brokers unreachable: 1 of 3 ZK-mode brokers not connected (brokers 2)",
                               REQUEST_MS / 1000.0 + SLACK_S);
    cr_expect_eq(metric_of(&a, "kmproxy_brokers_unreachable"), 1);
    km_bsim_set_unreachable(brig_sim(&R, 2), false);
    back = readyz_until(&a, 200, "\"ready\":true", RECOVER_S);
    figures("a broker going down while running", down, back);
    stop_cleanly(&a);
    close(fd);
    rig_stop(&e);
}

/* The brokers learn controller epoch 7 from their ZooKeeper at /kafka (here: from the rig's own
 * propagator, as the ZK controller would send it). */
static void brokers_at_epoch_7(void)
{
    cr_assert(brig_activate(&R), "%s", R.why);
    cr_assert(brig_run_until(&R, brig_converged, 60), "%s", R.why);
    km_bprop_deactivate(R.prop); /* the rig's channels go: only the daemon talks to the brokers now */
    km_zkc *c = km_zkc_open(km_zks_hosts(zs, 0), NULL, 10000);
    cr_assert(c);
    cr_assert_eq(km_zkc_mkdirs(c, "/kafka"), ZOK);
    cr_assert_eq(km_zkc_create(c, "/kafka/controller_epoch", "7", 0), ZOK);
    km_zkc_close(c);
}

/* Item 4: zookeeper.connect's chroot has a typo. Our claim there is epoch 1; every broker has seen
 * 7 and answers STALE_CONTROLLER_EPOCH, while /controller_epoch under the typo is ours. Not ready,
 * with the reason; fixed (restarted on the brokers' chroot) it is ready. */
Test(faults, a_chroot_typo_is_unready_with_brokers_rejecting_our_epoch)
{
    env e;
    rig_start(&e, "faults-chroot");
    brokers_at_epoch_7();
    char typo[128], right[128];
    snprintf(typo, sizeof typo, "%s/kafak", km_zks_hosts(zs, 0));
    snprintf(right, sizeof right, "%s/kafka", km_zks_hosts(zs, 0));
    inst a;
    const char *const settings[] = {"brokers.enabled=true", request_setting(), NULL};
    start(&a, &e, "chroot-typo", typo, settings);
    double t0 = now_s();
    readyz_until(&a, 503, "brokers reject our controller epoch: 3 of 3 ZK-mode brokers (brokers ", 60);
    double down = now_s() - t0;
    char *body = NULL;
    ops_curl(a.port, "/readyz", &body);
    cr_expect(strstr(body, "STALE_CONTROLLER_EPOCH to epoch 1: ") && strstr(body, typo) &&
              strstr(body, "\"in_sync\":0"), "%s", body);
    free(body);
    cr_expect_eq(metric_of(&a, "kmproxy_brokers_rejecting_epoch"), 3);
    cr_expect_eq(metric_of(&a, "kmproxy_brokers_up_to_date"), 0);
    pause_for(1); /* a later answer must not make it look ready */
    readyz_until(&a, 503, "brokers reject our controller epoch: 3 of 3", 1);
    expect_logged(&a, "rejects controller epoch 1 as stale, yet /controller_epoch in ");
    char *log = ops_slurp(a.log_file);
    cr_expect(!strstr(log, "going on"), "%s", log);
    free(log);
    stop_cleanly(&a);
    double t1 = now_s();
    start(&a, &e, "chroot-right", right, settings);
    readyz_until(&a, 200, "\"ready\":true", RECOVER_S);
    figures("a chroot typo (recovered by a restart on the right chroot)", down, now_s() - t1);
    stop_cleanly(&a);
    rig_stop(&e);
}

/* Waits for the instance to exit on its own; its wait status (-1: still running, then killed). */
static int exit_status(inst *in, int timeout_s)
{
    int status = -1;
    for (int tries = 0; tries < timeout_s * 10; tries++, usleep(100000))
        if (waitpid(in->p.pid, &status, WNOHANG) == in->p.pid) {
            in->p.pid = -1;
            return status;
        }
    ops_stop(&in->p, SIGKILL);
    return -1;
}

static void refused_at_start(env *e, const char *tag, const char *zk, const char *const *settings, const char *said)
{
    inst a;
    start(&a, e, tag, zk, settings);
    int status = exit_status(&a, 60);
    char *log = ops_slurp(a.log_file);
    cr_expect(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 2, "%s: status %d: %s", tag, status, log);
    cr_expect(strstr(log, said), "%s: the log does not say '%s': %s", tag, said, log);
    free(log);
}

/* Item 3 at start: broker.listener names a listener no broker registered, or SSL (whose default
 * listener is SSL) where every broker registers PLAINTEXT only: a configuration error, exit 2. */
Test(faults, a_broker_listener_nobody_registered_is_a_config_error_at_start)
{
    env e;
    rig_start(&e, "faults-listener-start");
    char zk[128], ca[4200];
    snprintf(zk, sizeof zk, "%s/listener", km_zks_hosts(zs, 0));
    refused_at_start(&e, "listener-internal", zk,
                     (const char *const[]){"brokers.enabled=true", "broker.listener=INTERNAL", NULL},
                     "broker.listener: none of the 3 migrating ZK-mode brokers in the metadata log registered a "
                     "listener named INTERNAL (broker ");
    km_test_pki pki;
    cr_assert_eq(km_test_pki_make(&pki), 0);
    snprintf(ca, sizeof ca, "broker.tls.ca.file=%s", pki.ca);
    refused_at_start(&e, "listener-ssl", zk,
                     (const char *const[]){"brokers.enabled=true", "broker.security.protocol=SSL", ca, NULL},
                     "registered a listener named SSL (broker 1 has PLAINTEXT; ");
    km_test_pki_free(&pki);
    rig_stop(&e);
}

/* Re-registers broker 3 (a restart with new listeners): its endpoint named `listener`. */
static void reregister_broker_3(const char *listener, int64_t epoch)
{
    km_register_broker_record rec;
    km_register_broker_record_broker_endpoint ep;
    km_register_broker_record_broker_feature ft;
    brig_registration(3, epoch, km_bsim_port(brig_sim(&R, 3)), true, &rec, &ep, &ft);
    ep.name = km_cstr(listener);
    cr_assert(brig_append(&R, &km_register_broker_record_desc, &rec), "%s", R.why);
}

/* Item 3 at run time: a broker registers again without broker.listener: it would get nothing. A
 * reason, a metric and a log line; registered with it again, ready. */
Test(faults, a_broker_registering_without_broker_listener_is_a_readiness_reason)
{
    env e;
    rig_start(&e, "faults-listener-run");
    char zk[128];
    snprintf(zk, sizeof zk, "%s/listener-run", km_zks_hosts(zs, 0));
    inst a;
    start(&a, &e, "listener-run", zk, (const char *const[]){"brokers.enabled=true", request_setting(), NULL});
    readyz_until(&a, 200, "\"ready\":true", 60);
    reregister_broker_3("INTERNAL", 2003);
    double down = readyz_until(&a, 503, "brokers without broker.listener: 1 of 3 ZK-mode brokers registered no "
                               "listener named PLAINTEXT (broker 3 has INTERNAL; )", REQUEST_MS / 1000.0 + SLACK_S);
    cr_expect_eq(metric_of(&a, "kmproxy_brokers_without_listener"), 1);
    expect_logged(&a, "brokers: 1 of 3 migrating ZK-mode brokers registered no listener named PLAINTEXT");
    reregister_broker_3("PLAINTEXT", 2004);
    double t1 = now_s();
    readyz_until(&a, 200, "\"ready\":true", RECOVER_S);
    figures("a broker registered without broker.listener", down, now_s() - t1);
    cr_expect_eq(metric_of(&a, "kmproxy_brokers_without_listener"), 0);
    expect_logged(&a, "brokers: every migrating ZK-mode broker registers listener PLAINTEXT again");
    stop_cleanly(&a);
    rig_stop(&e);
}
