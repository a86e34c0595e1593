/* test_quorum_stepdown.c - issue 27 item 1 with HA: a delta that arrives while the active instance's
 * step-down is pending must not stop the daemon.
 *
 * An active instance whose writer is fenced steps down from a timer (the bridge that reports the fence
 * is what the step-down frees), so a Fetch answer read in the same loop turn, after the fence, reaches
 * km_daemon_publish_delta with the bridge already STOPPED. The turn is made deterministic here: the
 * daemon (metadata.source=quorum, ha.enabled) runs in this process on the test's loop, beside a raft
 * simulator; a real ZooKeeper sits behind the fault proxy. Another instance of ours claims (moves
 * /controller_epoch); the daemon's next write fails its guard and its recovery reads /controller_epoch
 * and /migration, whose answers the proxy holds. The first is let through (the ZooKeeper client reads one
 * answer per wake-up); with the loop stopped, the simulator answers the parked Fetch with a record, then
 * the answer that fences is let through: both sockets are readable before the loop's next poll, the
 * quorum's first, so libev (pending fd events run last-queued first) runs the fence, then the Fetch
 * answer, in one turn. The instance must step down, rejoin the election, lead
 * again and mirror the record - never exit. */
#include "test_quorum_util.h"
#include "faultproxy.h"
#include "km_daemon.h"
#include "km_testsupport.h"
#include "zkserver.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>

typedef struct srig {
    km_zks *zks;
    km_fp *fp;
    char via_proxy[128], direct[128];
    char *tmp;
    struct ev_loop *loop;
    km_rsim *sim;
    km_daemon *d;
    int64_t want_offset;
} srig;

static srig *g_rig; /* for the predicates */

static void srig_start(srig *r)
{
    char err[512];
    r->zks = km_zks_start(1, NULL, 0, err, sizeof err);
    cr_assert(r->zks, "ZooKeeper: %s", err);
    r->fp = km_fp_start(km_zks_port(r->zks, 0), err, sizeof err);
    cr_assert(r->fp, "%s", err);
    snprintf(r->via_proxy, sizeof r->via_proxy, "%s/kafka", km_fp_hosts(r->fp));
    snprintf(r->direct, sizeof r->direct, "%s/kafka", km_zks_hosts(r->zks, 0));
    r->tmp = km_test_tmpdir("qstepdown");
    km_gen_opts g = {.brokers = 3, .topics = 2, .partitions = 2, .zk_migration = true, .seed = 27};
    size_t len;
    uint8_t *log = tq_gen_log(r->tmp, &g, &len);
    km_err e = {{0}};
    r->loop = ev_loop_new(0);
    tq_make_sims(r->loop, 1, NULL, &r->sim, NULL, 0);
    cr_assert_eq(km_rsim_append(r->sim, log, len, &e), 0, "%s", e.msg);
    free(log);
    km_rsim_set_leader(r->sim, 1, km_rsim_last_epoch(r->sim));

    km_config cfg;
    km_config_defaults(&cfg);
    char servers[64];
    snprintf(servers, sizeof servers, "127.0.0.1:%u", km_rsim_port(r->sim));
    const char *kv[] = {"metadata.source", "quorum", "controller.quorum.bootstrap.servers", servers,
                        "zookeeper.connect", r->via_proxy, "brokers.enabled", "false", "metrics.listen", "127.0.0.1:0",
                        "ha.enabled", "true",
                        /* the held answers must never cost the session */
                        "zookeeper.session.timeout.ms", "60000", NULL};
    for (int i = 0; kv[i]; i += 2)
        cr_assert_eq(km_config_set(&cfg, kv[i], kv[i + 1], "test", &e), 0, "%s: %s", kv[i], e.msg);
    r->d = km_daemon_new(r->loop, &cfg, &e);
    km_config_free(&cfg);
    cr_assert(r->d, "%s", e.msg);
    km_daemon_start(r->d);
    g_rig = r;
}

static void srig_stop(srig *r)
{
    km_daemon_free(r->d);
    km_rsim_free(r->sim);
    ev_loop_destroy(r->loop);
    km_fp_stop(r->fp);
    km_zks_stop(r->zks);
    km_test_rmtree(r->tmp);
    free(r->tmp);
}

static void wake_cb(struct ev_loop *loop, ev_timer *t, int revents) { (void)loop; (void)t; (void)revents; }

/* Runs the loop a turn at a time until pred holds (checked between turns, so that nothing runs after it
 * held); false after 60 s or when the daemon stopped. */
static bool run_until(srig *r, bool (*pred)(srig *r))
{
    ev_timer wake;
    ev_timer_init(&wake, wake_cb, 0.01, 0.01);
    ev_timer_start(r->loop, &wake);
    double deadline = ev_time() + 60;
    km_daemon_status st;
    bool ok;
    do {
        ev_run(r->loop, EVRUN_ONCE);
        km_daemon_get_status(r->d, &st);
        ok = pred(r);
    } while (!ok && !st.fatal && ev_time() < deadline);
    ev_timer_stop(r->loop, &wake);
    return ok;
}

static bool active_and_mirrored(srig *r)
{
    km_daemon_status st;
    km_daemon_get_status(r->d, &st);
    return st.active && st.zk_idle && st.zk_confirmed_offset == r->want_offset && st.image_offset == r->want_offset;
}

/* The delta before is applied, the proxy holds the answers to every read the recovery sent, and the
 * daemon's next Fetch waits in the simulator's purgatory. */
static bool recovery_held(srig *r)
{
    km_daemon_status st;
    km_daemon_get_status(r->d, &st);
    km_rsim_stats rs;
    km_rsim_get_stats(r->sim, &rs);
    return st.image_offset == r->want_offset && km_fp_fired(r->fp) == 1 && km_fp_hold_unanswered(r->fp) == 0 &&
           rs.parked == 1;
}

static bool fetch_parked(srig *r)
{
    km_rsim_stats rs;
    km_rsim_get_stats(r->sim, &rs);
    return rs.parked == 1;
}

/* Another instance of ours claimed: /controller_epoch moves and the claim record beside the election says
 * so (else the next claim would see a writer outside the election and rightly stop). */
static void sibling_claims(srig *r)
{
    km_zkc *c = km_zkc_open(r->direct, NULL, 10000);
    cr_assert(c, "no ZooKeeper client on %s", r->direct);
    char *data = NULL;
    struct Stat st;
    cr_assert_eq(km_zkc_get(c, "/controller_epoch", &data, NULL, &st), ZOK);
    int epoch = atoi(data) + 1;
    free(data);
    char text[256];
    snprintf(text, sizeof text, "%d", epoch);
    cr_assert_eq(km_zkc_set(c, "/controller_epoch", text, st.version, NULL), ZOK);
    snprintf(text, sizeof text, "{\"version\":1,\"instance\":\"a sibling kmproxy\",\"controller_epoch\":%d}", epoch);
    cr_assert_eq(km_zkc_set(c, "/kmproxy/active", text, -1, NULL), ZOK);
    km_zkc_close(c);
}

/* This process's socket whose own (or peer's) port is `port`: the daemon's end of a connection. */
static int own_socket(int port, bool by_peer)
{
    for (int fd = 3; fd < 4096; fd++) {
        struct stat sb;
        struct sockaddr_in a;
        socklen_t len = sizeof a;
        if (fstat(fd, &sb) || !S_ISSOCK(sb.st_mode))
            continue;
        int rc = by_peer ? getpeername(fd, (struct sockaddr *)&a, &len) : getsockname(fd, (struct sockaddr *)&a, &len);
        if (!rc && a.sin_family == AF_INET && ntohs(a.sin_port) == port)
            return fd;
    }
    return -1;
}

static void assert_readable(int fd, const char *what)
{
    cr_assert_geq(fd, 0, "no socket for %s", what);
    struct pollfd p = {.fd = fd, .events = POLLIN};
    cr_assert_eq(poll(&p, 1, 30000), 1, "%s never became readable", what);
}

static void append_config(srig *r, int64_t offset, const char *tag)
{
    km_buf b;
    km_buf_init(&b);
    tq_config_batch(&b, offset, km_rsim_last_epoch(r->sim), 1, tag);
    km_err e;
    cr_assert_eq(km_rsim_append(r->sim, b.data, b.len, &e), 0, "%s", e.msg);
    km_buf_free(&b);
}

Test(quorum_stepdown, a_delta_while_the_step_down_is_pending_does_not_stop_the_instance, .timeout = 240)
{
    srig r = {0};
    srig_start(&r);
    int64_t end = km_rsim_log_end(r.sim);
    r.want_offset = end - 1;
    cr_assert(run_until(&r, active_and_mirrored), "never active and mirrored at offset %lld", (long long)end - 1);

    km_daemon_status stx;
    km_fp_arm(r.fp, KM_FP_GETDATA_PATH, KM_FP_HOLD_REPLIES, "/kafka/controller_epoch", 0);
    sibling_claims(&r);
    append_config(&r, end, "before"); /* its write fails the /controller_epoch guard: the recovery reads */
    r.want_offset = end;
    cr_assert(run_until(&r, recovery_held), "the recovery's reads were never answered into the proxy's hold");
    /* The read of /controller_epoch is answered now (the ZooKeeper client reads one answer per wake-up);
     * the read of /migration, whose answer decides and fences, stays held. */
    int zk = own_socket(km_fp_hold_client_port(r.fp), false);
    km_fp_release_held(r.fp, 1);
    assert_readable(zk, "the daemon's ZooKeeper writer connection");
    do { /* then turns with nothing to read, so that no readiness is left over from before */
        cr_assert(run_until(&r, fetch_parked), "no Fetch parked at the simulator");
        for (int i = 0; i < 3; i++)
            ev_run(r.loop, EVRUN_NOWAIT);
    } while (!fetch_parked(&r)); /* a Fetch's MaxWaitMs ran out meanwhile: the next one parks */
    km_daemon_get_status(r.d, &stx);
    cr_assert(stx.active && !stx.fatal, "fenced before the last answer: %s", stx.fatal ? stx.fatal : "-");

    /* The loop is stopped: first the Fetch answer with the next record, then the answer that fences. */
    append_config(&r, end + 1, "during");
    assert_readable(own_socket(km_rsim_port(r.sim), true), "the daemon's Fetch connection");
    km_fp_release_held(r.fp, 0);
    assert_readable(zk, "the daemon's ZooKeeper writer connection");
    ev_run(r.loop, EVRUN_NOWAIT);

    km_daemon_status st;
    km_daemon_get_status(r.d, &st);
    cr_assert_null(st.fatal, "the daemon stopped on a delta that arrived while it stepped down: %s", st.fatal);
    cr_assert(!st.active && st.image_offset == end + 1,
              "one turn should have fenced the writer (step-down pending) and applied offset %lld: active %d, "
              "image at %lld", (long long)end + 1, st.active, (long long)st.image_offset);

    /* It steps down, leads again (the only instance), claims and mirrors the record. */
    km_fp_disarm(r.fp);
    r.want_offset = end + 1;
    bool back = run_until(&r, active_and_mirrored);
    km_daemon_get_status(r.d, &st);
    cr_assert(back, "never active and mirrored at offset %lld again (fatal: %s)", (long long)end + 1,
              st.fatal ? st.fatal : "none");
    srig_stop(&r);
}
