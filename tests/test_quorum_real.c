/* test_quorum_real.c - the observer scenarios against Kafka 3.9's own KRaft leader
 * (../shared/realkafka bin/raft-leader), the same ones test_quorum_cli/_fetch/_faults run against
 * raftsim: `metadata dump --bootstrap-server` without a snapshot, with the leader's snapshot at
 * several points and after a resignation, a wrong cluster id, `metadata quorum`, and the daemon's
 * readiness (never before the leader's high watermark; 503 while the leader is paused); and the dumps
 * against raftsim serving the same log and snapshot Kafka's writers made.  Each runs
 * RK_ROUNDS times in a row and every dump must equal what the leader holds record for record
 * (bin/compare-dump).  Skips, saying why, without the kit or Java. */
#include "test_quorum_real_util.h"
#include "test_quorum_util.h"
#include "km_testsupport.h"
#include "ops_util.h"
#include "zkserver.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <ev.h>
#include <pthread.h>
#include <inttypes.h>
#include <signal.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct rk_case { char *tmp; rk_leader l; } rk_case;

static void case_start(rk_case *c, const char *tag, const char *const *leader_args)
{
    rk_kit_or_skip();
    c->tmp = km_test_tmpdir(tag);
    cr_assert(c->tmp);
    rk_leader_start(&c->l, c->tmp, "leader", leader_args);
}

static void case_stop(rk_case *c)
{
    rk_leader_stop(&c->l);
    km_test_rmtree(c->tmp);
    free(c->tmp);
}

static void dumps_equal_leader(const char *tag, const char *const *leader_args)
{
    rk_case c;
    case_start(&c, tag, leader_args);
    char path[700];
    snprintf(path, sizeof path, "%s/dump.jsonl", c.tmp);
    for (int round = 1; round <= RK_ROUNDS; round++)
        rk_dump_equals_leader(&c.l, path, round, NULL);
    case_stop(&c);
}

TestSuite(quorum_real, .timeout = 240);

Test(quorum_real, dump_without_snapshot) { dumps_equal_leader("rk-plain", NULL); }

/* Issue 17 item 2: with the leader's snapshot early, halfway and late, a dump fetched the snapshot
 * and stopped there (exit 0) in most runs; it must go on to the leader's high watermark. */
Test(quorum_real, dump_with_snapshot_early)
{
    const char *a[] = { "--snapshot-at", "0.1", NULL };
    dumps_equal_leader("rk-snap1", a);
}

Test(quorum_real, dump_with_snapshot_halfway)
{
    const char *a[] = { "--snapshot-at", "0.5", NULL };
    dumps_equal_leader("rk-snap5", a);
}

Test(quorum_real, dump_with_snapshot_late)
{
    const char *a[] = { "--snapshot-at", "0.8", NULL };
    dumps_equal_leader("rk-snap9", a);
}

/* The leader resigned (a new epoch, a LeaderChangeMessage in the log) after its snapshot. */
Test(quorum_real, dump_after_resignation)
{
    const char *a[] = { "--snapshot-at", "0.3", "--resign-at", "0.6", NULL };
    rk_case c;
    case_start(&c, "rk-resign", a);
    cr_assert_gt(c.l.epoch, 1, "the leader did not resign: %s", c.l.ready_line);
    char path[700];
    snprintf(path, sizeof path, "%s/dump.jsonl", c.tmp);
    for (int round = 1; round <= RK_ROUNDS; round++)
        rk_dump_equals_leader(&c.l, path, round, NULL);
    case_stop(&c);
}

/* A controller of another cluster answers INCONSISTENT_CLUSTER_ID: the dump fails saying so,
 * having printed nothing. */
Test(quorum_real, dump_wrong_cluster_id)
{
    rk_case c;
    case_start(&c, "rk-cid", NULL);
    char server[64];
    snprintf(server, sizeof server, "127.0.0.1:%d", c.l.port);
    const char *args[] = { "metadata", "dump", "--bootstrap-server", server, "--cluster-id", "AAAAAAAAAAAAAAAAAAAAAA",
                           "--timeout", "20", NULL };
    for (int round = 1; round <= RK_ROUNDS; round++) {
        char *out = NULL, *err = NULL;
        int rc = rk_kmproxy(args, &out, &err);
        cr_assert(rc == 1 && strstr(err, "INCONSISTENT_CLUSTER_ID") && !*out, "round %d: rc %d, stderr %s, stdout %.200s",
                  round, rc, err, out);
        free(out);
        free(err);
    }
    case_stop(&c);
}

/* Issue 17 item 1: a real controller refuses ApiVersions without ClientSoftwareName/Version;
 * `metadata quorum` must get its answer and print the leader's figures. */
Test(quorum_real, metadata_quorum)
{
    const char *a[] = { "--snapshot-at", "0.5", NULL };
    rk_case c;
    case_start(&c, "rk-quorum", a);
    char server[64], want_hw[64], want_epoch[64];
    snprintf(server, sizeof server, "127.0.0.1:%d", c.l.port);
    snprintf(want_hw, sizeof want_hw, "HighWatermark:          %" PRId64 "\n", c.l.hw);
    snprintf(want_epoch, sizeof want_epoch, "LeaderEpoch:            %d\n", c.l.epoch);
    const char *args[] = { "metadata", "quorum", "--bootstrap-server", server, "--timeout", "20", NULL };
    for (int round = 1; round <= RK_ROUNDS; round++) {
        char *out = NULL, *err = NULL;
        int rc = rk_kmproxy(args, &out, &err);
        cr_assert(rc == 0 && strstr(out, "LeaderId:               1\n") && strstr(out, want_hw) &&
                  strstr(out, want_epoch) && strstr(out, "CurrentVoters:          [1]\n"),
                  "round %d: rc %d (%s):\n%s%s", round, rc, c.l.ready_line, out, err);
        free(out);
        free(err);
    }
    case_stop(&c);
}

/* ---- the daemon (kmproxy run, metadata.source=quorum) against Kafka's leader ------------------- */

typedef struct rk_daemon { ops_proc p; int port; char log[700]; } rk_daemon;

static void daemon_start(rk_daemon *dm, const rk_case *c, const char *zk, int round)
{
    char sets[7][760], tag[32];
    dm->port = ops_dead_port();
    snprintf(tag, sizeof tag, "daemon%d", round);
    snprintf(dm->log, sizeof dm->log, "%s/%s.log", c->tmp, tag);
    snprintf(sets[0], sizeof sets[0], "metadata.source=quorum");
    snprintf(sets[1], sizeof sets[1], "controller.quorum.bootstrap.servers=127.0.0.1:%d", c->l.port);
    snprintf(sets[2], sizeof sets[2], "zookeeper.connect=%s/kafka%d", zk, round); /* a fresh chroot per run */
    snprintf(sets[3], sizeof sets[3], "brokers.enabled=false");
    snprintf(sets[4], sizeof sets[4], "metrics.listen=127.0.0.1:%d", dm->port);
    snprintf(sets[5], sizeof sets[5], "log.file=%s", dm->log);
    /* The kit's leader serves the raft APIs only, no DescribeCluster (as a controller before 3.7):
     * the operator then names the cluster, here raft-leader's default --cluster-id. */
    snprintf(sets[6], sizeof sets[6], "cluster.id=9n1nt1m7QYiQG4R4Ls2OAw");
    const char *args[20] = { "run" };
    int n = 1;
    for (int i = 0; i < 7; i++) {
        args[n++] = "--set";
        args[n++] = sets[i];
    }
    args[n] = NULL;
    ops_spawn(&dm->p, c->tmp, tag, args);
    cr_assert(ops_wait_for(&dm->p, dm->log, "metrics on http://", 1, 60), "daemon did not start: %s",
              ops_slurp(dm->p.err));
}

/* Polls /readyz every 50 ms until `status`, with needle in the body; the body (malloc'd) or NULL. */
static char *readyz_until(const rk_daemon *dm, int status, const char *needle, double timeout_s, double *took)
{
    double t0 = ev_time();
    while (ev_time() - t0 < timeout_s) {
        char *body = NULL;
        int st = ops_curl(dm->port, "/readyz", &body);
        if (st == status && (!needle || strstr(body, needle))) {
            *took = ev_time() - t0;
            return body;
        }
        free(body);
        usleep(50000);
    }
    return NULL;
}

/* Issue 17 item 2 for the daemon: readiness uses the same "caught up"; with the leader's snapshot
 * halfway, /readyz is never 200 before the image reached the leader's high watermark. */
Test(quorum_real, daemon_ready_only_at_the_leaders_high_watermark)
{
    const char *a[] = { "--snapshot-at", "0.5", NULL };
    rk_case c;
    case_start(&c, "rk-daemon", a);
    char err[256];
    km_zks *zk = km_zks_start(1, NULL, 0, err, sizeof err);
    cr_assert(zk, "ZooKeeper: %s", err);
    char want[64];
    snprintf(want, sizeof want, "\"image_offset\":%" PRId64 "}", c.l.hw - 1);
    for (int round = 1; round <= RK_ROUNDS; round++) {
        rk_daemon dm;
        daemon_start(&dm, &c, km_zks_hosts(zk, -1), round);
        double t0 = ev_time(), took;
        char *body = NULL;
        int st = 0;
        while (st != 200 && ev_time() - t0 < 60) { /* every answer until the first 200 */
            free(body);
            st = ops_curl(dm.port, "/readyz", &body);
            cr_assert(st != 200 || strstr(body, want), "round %d: ready before the leader's high watermark %" PRId64
                      ": %s", round, c.l.hw, body);
            if (st != 200)
                usleep(20000);
        }
        cr_assert_eq(st, 200, "round %d: never ready: %s", round, body);
        (void)took;
        free(body);
        cr_assert_eq(ops_stop(&dm.p, SIGTERM), 0, "round %d: the daemon did not stop cleanly", round);
    }
    km_zks_stop(zk);
    case_stop(&c);
}

/* The java process behind the raft-leader script (its only child). */
static pid_t leader_jvm(const rk_leader *l)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)l->pid, (int)l->pid);
    FILE *f = fopen(path, "r");
    int pid = 0;
    cr_assert(f && fscanf(f, "%d", &pid) == 1, "no JVM under raft-leader %d", (int)l->pid);
    fclose(f);
    return pid;
}

/* Issue 18 item 2 against Kafka's leader: SIGSTOP it (a paused controller); /readyz must say 503
 * "quorum unreachable" within MaxWaitMs + the request timeout (0.5 + 2 s, plus the poll), with the
 * metric and one log line; SIGCONT brings it back to 200. */
Test(quorum_real, daemon_leader_paused_then_resumed)
{
    rk_case c;
    case_start(&c, "rk-pause", NULL);
    char err[256];
    km_zks *zk = km_zks_start(1, NULL, 0, err, sizeof err);
    cr_assert(zk, "ZooKeeper: %s", err);
    rk_daemon dm;
    daemon_start(&dm, &c, km_zks_hosts(zk, -1), 0);
    double took;
    char *body = readyz_until(&dm, 200, NULL, 60, &took);
    cr_assert(body, "never ready");
    free(body);
    pid_t jvm = leader_jvm(&c.l);
    cr_assert_eq(kill(jvm, SIGSTOP), 0);
    body = readyz_until(&dm, 503, "quorum unreachable", 0.5 + 2.0 + 3.0, &took);
    /* while it is still stopped: the log line (written on the daemon's next 0.2 s poll) and the metric */
    bool logged = body && ops_wait_for(&dm.p, dm.log, "quorum unreachable", 1, 5);
    char *metrics = NULL;
    ops_curl(dm.port, "/metrics", &metrics);
    kill(jvm, SIGCONT); /* before any assertion: a failed test must not leave it stopped */
    cr_assert(body, "/readyz not 503 'quorum unreachable' within the bound");
    cr_log_info("raft-leader paused: /readyz 503 after %.1f s: %s", took, body);
    free(body);
    cr_assert(logged, "no log line for the pause");
    cr_assert(metrics && strstr(metrics, "\nkmproxy_quorum_reachable 0\n"), "%s", metrics);
    free(metrics);
    body = readyz_until(&dm, 200, NULL, 30, &took);
    cr_assert(body, "did not recover after SIGCONT");
    cr_log_info("raft-leader resumed: /readyz 200 after %.1f s", took);
    free(body);
    cr_assert(ops_wait_for(&dm.p, dm.log, "quorum: usable again", 1, 10));
    char *log = ops_slurp(dm.log);
    cr_assert_eq(ops_count(log, "quorum unreachable"), 1, "one WARN line for the pause:\n%s", log);
    free(log);
    cr_assert_eq(ops_stop(&dm.p, SIGTERM), 0);
    km_zks_stop(zk);
    case_stop(&c);
}

/* ---- the same dump scenarios against raftsim, on the same log Kafka's writers made --------------- */

typedef struct sim_thread { struct ev_loop *loop; km_rsim *sim; ev_async stop; pthread_t thread; int port; } sim_thread;

static void sim_on_stop(struct ev_loop *loop, ev_async *w, int revents)
{
    (void)w;
    (void)revents;
    ev_break(loop, EVBREAK_ALL);
}

static void *sim_run(void *arg)
{
    ev_run(((sim_thread *)arg)->loop, 0);
    return NULL;
}

/* raftsim serving the seed log, and with snapshot (not NULL) that checkpoint too (its id is in its name). */
static void sim_start(sim_thread *t, const char *snapshot)
{
    memset(t, 0, sizeof *t);
    t->loop = ev_loop_new(EVFLAG_AUTO);
    km_rsim *sims[1];
    tq_make_sims(t->loop, 1, NULL, sims, NULL, 0);
    t->sim = sims[0];
    km_err err;
    cr_assert_eq(km_rsim_append_path(t->sim, rk_seed_log(), &err), 0, "%s", err.msg);
    if (snapshot)
        cr_assert_eq(km_rsim_add_snapshot_file(t->sim, snapshot, false, &err), 0, "%s", err.msg);
    km_rsim_set_leader(t->sim, 1, km_rsim_last_epoch(t->sim));
    t->port = km_rsim_port(t->sim);
    ev_async_init(&t->stop, sim_on_stop);
    ev_async_start(t->loop, &t->stop);
    cr_assert_eq(pthread_create(&t->thread, NULL, sim_run, t), 0);
}

static void sim_stop(sim_thread *t)
{
    ev_async_send(t->loop, &t->stop);
    pthread_join(t->thread, NULL);
    km_rsim_stats st;
    km_rsim_get_stats(t->sim, &st);
    km_rsim_free(t->sim);
    ev_loop_destroy(t->loop);
    cr_assert_eq(st.rejected, 0, "raftsim rejected a request: %s", st.last_rejection);
}

/* RK_ROUNDS dumps over the network from raftsim, each equal to kmproxy's offline dump of `file`. */
static void sim_dumps_equal(const sim_thread *t, const char *file)
{
    const char *offline[] = { "metadata", "dump", file, NULL };
    char *want = NULL, *err = NULL;
    cr_assert_eq(rk_kmproxy(offline, &want, &err), 0, "metadata dump %s: %s", file, err);
    free(err);
    char server[64];
    snprintf(server, sizeof server, "127.0.0.1:%d", t->port);
    const char *net[] = { "metadata", "dump", "--bootstrap-server", server, "--timeout", "30", NULL };
    for (int round = 1; round <= RK_ROUNDS; round++) {
        char *out = NULL;
        int rc = rk_kmproxy(net, &out, &err);
        cr_assert(rc == 0 && !strcmp(out, want), "round %d: rc %d, %zu bytes where the file's dump has %zu: %s",
                  round, rc, strlen(out), strlen(want), err);
        free(out);
        free(err);
    }
    free(want);
}

Test(quorum_real, raftsim_dump_without_snapshot)
{
    rk_kit_or_skip();
    sim_thread t;
    sim_start(&t, NULL);
    sim_dumps_equal(&t, rk_seed_log());
    sim_stop(&t);
}

/* raftsim holds gen-coverage's snapshot at the log's end: a fetch at offset 0 gets its id (Kafka's
 * rule), so the dump is the snapshot's records. */
Test(quorum_real, raftsim_dump_with_snapshot)
{
    rk_kit_or_skip();
    char dir[4000], snap[4400] = "";
    snprintf(dir, sizeof dir, "%s", rk_seed_log());
    *strrchr(dir, '/') = 0;
    DIR *d = opendir(dir);
    cr_assert(d);
    for (struct dirent *e; (e = readdir(d));)
        if (strstr(e->d_name, ".checkpoint"))
            snprintf(snap, sizeof snap, "%s/%.300s", dir, e->d_name);
    closedir(d);
    cr_assert(snap[0], "gen-coverage wrote no snapshot in %s", dir);
    sim_thread t;
    sim_start(&t, snap);
    sim_dumps_equal(&t, snap);
    sim_stop(&t);
}
