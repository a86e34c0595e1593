/* test_kafka21062.c - KAFKA-21062 on real Kafka 3.9.2, without kmproxy (issue 26 part 1) and with it (part 2:
 * the fault on the controllers' link with one instance and with the runbook's HA pair, then on kmproxy's own
 * link), docs/kafka21062.md.
 *
 * The active KRaft controller reaches ZooKeeper through tests/realcluster/zkfault.py (rig.py --zk-fault), which
 * lets one multi writing /migration through to ZooKeeper, swallows its reply and closes the connection: the
 * write landed, the ack is lost, the client reconnects within its session and retries.  Kafka's
 * KRaftMigrationDriver keeps the zkVersion of /migration it had before the write, so every later write fails
 * with BADVERSION and is retried for ever: /migration stands still while the metadata log moves on, the
 * ZK-mode brokers hear nothing, and ZkWriteBehindLag reads near zero (the offset is recorded before the
 * failing /migration write). */
#include <criterion/criterion.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "km_testsupport.h"
#include "rc_rig.h"

#define DRIVER_FAILS "Encountered ZooKeeper error during event MetadataChangeEvent"
#define BADVERSION "BadVersion for /migration"
#define MBEAN_LAG "kafka.controller:type=KafkaController,name=ZkWriteBehindLag"
#define MBEAN_APPLIED "kafka.controller:type=KafkaController,name=LastAppliedRecordOffset"


/* A rig with the fault proxy: FOR "1", the controllers reach ZooKeeper through it; "kmproxy", they reach it
 * directly and the proxy's port (zkfault status) is for kmproxy. */
static rc_rig *start_with_fault_or_skip(const char *fault_for)
{
    if (!rc_cache_or_skip())
        return NULL;
    char why[16384];
    setenv("KM_RIG_ZK_FAULT", fault_for, 1);
    rc_rig *r = rc_rig_start(1, why, sizeof why);
    unsetenv("KM_RIG_ZK_FAULT");
    cr_assert(r, "%s", why);
    return r;
}

static rc_rig *start_faulty_or_skip(void) { return start_with_fault_or_skip("1"); }

static json_t *rig_json(rc_rig *r, const char *cmd)
{
    char *answer = rc_rig_cmd(r, "%s", cmd);
    json_error_t jerr;
    json_t *j = answer && !strncmp(answer, "ok ", 3) ? json_loads(answer + 3, 0, &jerr) : NULL;
    free(answer);
    return j;
}

/* /migration's kraft_metadata_offset, -1 when unreadable. */
static long migration_offset(rc_rig *r)
{
    json_t *mig = rig_json(r, "zk /migration");
    long off = mig ? (long)json_integer_value(json_object_get(mig, "kraft_metadata_offset")) : -1;
    json_decref(mig);
    return off;
}

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

static int controller_pid(rc_rig *r)
{
    json_t *c = json_array_get(json_object_get(r->ready, "controllers"), 0);
    return (int)json_integer_value(json_object_get(c, "pid"));
}

/* The controller's ZkWriteBehindLag and LastAppliedRecordOffset over JMX (RcJmx attaches by pid). */
static bool controller_metrics(rc_rig *r, long *lag, long *applied)
{
    char *out = NULL;
    int rc = rc_sh(r, &out, "$JAVA -cp \"$CP:$TOOLS\" RcJmx %d %s %s 2>&1", controller_pid(r), MBEAN_LAG,
                   MBEAN_APPLIED);
    const char *l = out ? strstr(out, MBEAN_LAG " ") : NULL, *a = out ? strstr(out, MBEAN_APPLIED " ") : NULL;
    bool ok = rc == 0 && l && a;
    if (ok) {
        *lag = atol(l + strlen(MBEAN_LAG " "));
        *applied = atol(a + strlen(MBEAN_APPLIED " "));
    }
    free(out);
    return ok;
}

static int admin(rc_rig *r, const char *ops)
{
    char *out = NULL;
    int rc = rc_sh(r, &out, "$JAVA -cp \"$CP:$TOOLS\" RcAdmin $BS %s 2>&1 | grep -v log4j; exit ${PIPESTATUS[0]}",
                   ops);
    if (rc)
        fprintf(stderr, "kafka21062: RcAdmin %s: exit %d: %.2000s\n", ops, rc, out ? out : "");
    free(out);
    return rc;
}

/* The driver's log holds `times` failed writes within timeout_s. */
static bool driver_fails(rc_rig *r, int times, int timeout_s)
{
    for (int i = 0; i < timeout_s * 2; i++) {
        char *log = rc_read_log(r, "controller", r->controllers[0].id);
        bool seen = count(log, DRIVER_FAILS) >= times && count(log, BADVERSION) >= times;
        free(log);
        if (seen)
            return true;
        usleep(500 * 1000);
    }
    return false;
}

/* Prints the driver's first failing write (its first three lines) to stderr: the proof in the test's output. */
static void print_first_failure(rc_rig *r)
{
    char *log = rc_read_log(r, "controller", r->controllers[0].id);
    const char *p = strstr(log, DRIVER_FAILS);
    while (p && p > log && p[-1] != '\n')
        p--;
    if (p) {
        const char *end = p;
        for (int i = 0; i < 3 && end && *end; i++)
            end = strchr(end, '\n') ? strchr(end, '\n') + 1 : NULL;
        fprintf(stderr, "kafka21062: the driver's log:\n%.*s", end ? (int)(end - p) : 600, p);
    }
    fprintf(stderr, "kafka21062: %d failed writes logged so far\n", count(log, DRIVER_FAILS));
    free(log);
}

/* What ZkWriteBehindLag hides, `kmproxy verify --zookeeper --watch-seconds` reports: /migration (read from
 * ZooKeeper directly, not through the fault proxy) behind the quorum's high watermark and unmoved: exit 1. */
static void verify_sees_the_wedge(rc_rig *r, long kafka_lag)
{
    char *out = NULL;
    struct timespec t0, t1; /* printed only: what this check adds to the suite */
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = rc_sh(r, &out, "%s verify --json --timeout 20 --bootstrap-server 127.0.0.1:%d --cluster-id %s "
                   "--zookeeper %s --watch-seconds 3 2>/dev/null", km_test_binary(), r->controllers[0].port,
                   r->cluster_id, r->zk);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    json_error_t jerr;
    json_t *rep = out ? json_loads(out, 0, &jerr) : NULL, *d = json_object_get(rep, "dual_write");
    long lag = (long)json_integer_value(json_object_get(d, "lag_records"));
    fprintf(stderr, "kafka21062: kmproxy verify: exit %d, dual-write lag %ld, driver_stalled %s; ZkWriteBehindLag %ld "
                    "(%.1f s)\n", rc, lag, json_is_true(json_object_get(d, "driver_stalled")) ? "true" : "false",
            kafka_lag, (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9);
    char *dual = d ? json_dumps(d, 0) : NULL;
    rc_assert(r, rc == 1 && json_is_true(json_object_get(d, "driver_stalled")) && lag > 0 && lag > kafka_lag &&
                     !strcmp(json_string_value(json_object_get(d, "high_watermark_source")), "quorum"),
              "kmproxy verify missed the wedge: exit %d: dual_write %s; %.2000s", rc, dual ? dual : "-",
              out ? out : "");
    free(dual);
    json_decref(rep);
    free(out);
}

TestSuite(kafka21062, .timeout = 1200);

/* One lost ack on a /migration multi wedges Kafka 3.9's driver: every later dual-write fails with BADVERSION,
 * /migration stands still while the log moves, a topic created afterwards never reaches ZooKeeper, and the
 * controller's ZkWriteBehindLag metric reads near zero all the while. */
Test(kafka21062, lost_migration_ack_wedges_kafkas_driver)
{
    rc_rig *r = start_faulty_or_skip();
    json_t *st = rig_json(r, "zkfault arm");
    rc_assert(r, st, "the rig has no fault proxy");
    json_decref(st);
    rc_assert(r, admin(r, "create-topic before-fault 1 3") == 0, "creating a topic failed");
    size_t drops = 0;
    for (int i = 0; i < 240 && drops == 0; i++, usleep(500 * 1000)) {
        st = rig_json(r, "zkfault status");
        drops = st ? json_array_size(json_object_get(st, "drops")) : 0;
        json_decref(st);
    }
    rc_assert(r, drops == 1, "the fault proxy saw no multi writing /migration");
    rc_assert(r, driver_fails(r, 3, 120), "Kafka's driver did not fail its writes with BADVERSION on /migration");
    long stuck = migration_offset(r), lag0 = -1, applied0 = -1, lag1 = -1, applied1 = -1;
    rc_assert(r, controller_metrics(r, &lag0, &applied0), "cannot read the controller's metrics over JMX");
    rc_assert(r, admin(r, "create-topic after-fault 1 3") == 0, "creating a topic failed");
    rc_assert(r, driver_fails(r, 10, 120), "the driver stopped failing");
    rc_assert(r, controller_metrics(r, &lag1, &applied1), "cannot read the controller's metrics over JMX");
    long later = migration_offset(r);
    char *topic = rc_rig_cmd(r, "zk /brokers/topics/after-fault");
    fprintf(stderr, "kafka21062: /migration offset %ld then %ld; the log's last applied offset %ld then %ld; "
                    "ZkWriteBehindLag %ld then %ld; /brokers/topics/after-fault: %s\n",
            stuck, later, applied0, applied1, lag0, lag1, topic ? topic : "?");
    print_first_failure(r);
    rc_assert(r, stuck > 0 && later == stuck, "/migration moved (%ld -> %ld): no wedge", stuck, later);
    rc_assert(r, applied1 > applied0 && applied0 > stuck, "the metadata log did not move past /migration");
    rc_assert(r, lag1 >= 0 && lag1 < applied1 - later,
              "ZkWriteBehindLag %ld is not below the true lag %ld", lag1, applied1 - later);
    rc_assert(r, topic && !strcmp(topic, "ok absent"), "the topic created after the fault reached ZooKeeper: %s",
              topic ? topic : "?");
    free(topic);
    verify_sees_the_wedge(r, lag1);
    rc_rig_stop(r, false);
}

/* The partition's leader as ZooKeeper's state znode names it, -1 when unreadable. */
static int zk_leader(rc_rig *r, const char *topic)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "zk /brokers/topics/%s/partitions/0/state", topic);
    json_t *st = rig_json(r, cmd);
    int leader = st ? (int)json_integer_value(json_object_get(st, "leader")) : -1;
    json_decref(st);
    return leader;
}

static bool wait_zk_leader(rc_rig *r, const char *topic, int leader, int timeout_s)
{
    for (int i = 0; i < timeout_s; i++, sleep(1))
        if (zk_leader(r, topic) == leader)
            return true;
    return false;
}

static long lines(rc_rig *r, const char *file)
{
    char *out = NULL;
    rc_sh(r, &out, "cat $DIR/%s 2>/dev/null | wc -l", file);
    long n = out ? atol(out) : 0;
    free(out);
    return n;
}

/* Waits until `file` has grown by `more` lines (the producers are progressing); false after timeout_s. */
static bool wait_lines(rc_rig *r, const char *file, long more, int timeout_s)
{
    long want = lines(r, file) + more;
    for (int i = 0; i < timeout_s; i++, sleep(1))
        if (lines(r, file) >= want)
            return true;
    return false;
}

/* Starts the two producers of the reproduction on t-0 (RcLoss: acks=all idempotent, acks=1) under one bash
 * forked here (not rc_sh: the producers outlive the call); each ends when $DIR/stop exists. */
static pid_t start_producers(rc_rig *r)
{
    setenv("CP", r->classpath, 1);
    setenv("TOOLS", r->tools, 1);
    setenv("BS", r->bootstrap, 1);
    setenv("DIR", r->dir, 1);
    setenv("JAVA", "java -Xmx128m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Dlog4j.configuration=file:/dev/null", 1);
    pid_t parent = getpid(), pid = fork();
    if (pid == 0) {
        km_test_die_with_parent(parent);
        execl("/bin/bash", "bash", "-c", "for a in all 1; do timeout 1200 $JAVA -cp \"$CP:$TOOLS\" RcLoss produce $BS t 0 $a "
              "$DIR/acked-$a $DIR/stop >$DIR/producer-$a.log 2>&1 & done; wait", (char *)NULL);
        _exit(127);
    }
    return pid;
}

static void stop_producers(rc_rig *r, pid_t producers)
{
    char *out = NULL;
    rc_sh(r, &out, "touch $DIR/stop");
    free(out);
    waitpid(producers, NULL, 0);
}

/* "acked-ACKS acknowledged N lost M" of RcLoss check. */
static bool loss_figures(const char *out, const char *acks, long *acked, long *lost)
{
    char key[64];
    snprintf(key, sizeof key, "acked-%s acknowledged ", acks);
    const char *p = out ? strstr(out, key) : NULL;
    return p && sscanf(p + strlen(key), "%ld lost %ld", acked, lost) == 2;
}

/* Reads t-0 back after convergence (RcLoss check) and prints and returns what was acknowledged and lost. */
static void count_loss(rc_rig *r, const char *what, long *acked_all, long *lost_all, long *acked_1, long *lost_1)
{
    char *out = NULL;
    int rc = rc_sh(r, &out, "$JAVA -cp \"$CP:$TOOLS\" RcLoss check $BS t 0 $DIR/acked-all $DIR/acked-1 2>&1 "
                            "| grep -v log4j; tail -n 2 $DIR/producer-*.log");
    *acked_all = *lost_all = *acked_1 = *lost_1 = -1;
    bool figures = loss_figures(out, "all", acked_all, lost_all) && loss_figures(out, "1", acked_1, lost_1);
    fprintf(stderr, "kafka21062: after convergence (check exit %d):\n%s\n", rc, out ? out : "");
    fprintf(stderr, "kafka21062: LOSS %s: acks=all acknowledged %ld lost %ld; acks=1 acknowledged %ld lost %ld\n",
            what, *acked_all, *lost_all, *acked_1, *lost_1);
    rc_assert(r, figures, "RcLoss check gave no figures: %s", out ? out : "");
    free(out);
}

/* The mixed cluster of the report: broker 2 restarted into KRaft mode, 0 and 1 still ZK-mode; topic t (one
 * partition, replicas 0,1,2) led by ZK-mode broker 0. */
static void mixed_cluster_with_t(rc_rig *r)
{
    char *ans = rc_rig_cmd(r, "kraft broker 2");
    rc_assert(r, ans && !strncmp(ans, "ok ", 3), "restarting broker 2 in KRaft mode failed: %s", ans ? ans : "");
    free(ans);
    rc_assert(r, admin(r, "create-topic t 1 3") == 0, "creating t failed");
    /* its preferred replica 0, elected (retried: the new topic may not be known to the brokers yet) */
    bool led_by_0 = wait_zk_leader(r, "t", 0, 30);
    for (int i = 0; i < 10 && !led_by_0; i++, sleep(2))
        led_by_0 = admin(r, "reassign t 0 0,1,2 \\; elect-preferred t 0") == 0 && wait_zk_leader(r, "t", 0, 60);
    rc_assert(r, led_by_0, "t-0 is not led by ZK-mode broker 0");
}

/* Both producers acknowledged, then one /migration ack lost on the controller's link (a topic created for the
 * write) and Kafka's driver failing its writes: the fault under traffic, shared by both traffic tests. */
static pid_t fault_under_traffic(rc_rig *r)
{
    pid_t producers = start_producers(r);
    rc_assert(r, wait_lines(r, "acked-1", 100, 300) && wait_lines(r, "acked-all", 100, 300),
              "the producers acknowledged nothing");
    json_decref(rig_json(r, "zkfault arm"));
    rc_assert(r, admin(r, "create-topic trigger 1 3") == 0, "creating a topic failed");
    rc_assert(r, driver_fails(r, 3, 120), "Kafka's driver did not fail its writes with BADVERSION on /migration");
    return producers;
}

/* ---- the daemon's continuous check beside Kafka's own driver (issue 26 part 3, docs/verify.md) ---- */

#define CHECK_INTERVAL_MS 500 /* the check-only kmproxy's verify.interval.ms, as test_verify_realcluster's */

/* The finding of CLS on BROKER for TOPIC-0 in /status (borrowed from st), NULL if none. */
static json_t *status_finding(json_t *st, int broker, const char *cls, const char *topic)
{
    size_t i;
    json_t *f;
    json_array_foreach(json_object_get(json_object_get(st, "verify"), "findings"), i, f)
        if (json_integer_value(json_object_get(f, "broker")) == broker && json_object_get(f, "class") &&
            !strcmp(json_string_value(json_object_get(f, "class")), cls) &&
            !strcmp(json_string_value(json_object_get(f, "topic")) ?: "", topic) &&
            json_integer_value(json_object_get(f, "partition")) == 0)
            return f;
    return NULL;
}

static bool status_consistent(json_t *st)
{
    json_t *v = json_object_get(st, "verify");
    return v && json_is_string(json_object_get(v, "verdict")) &&
           !strcmp(json_string_value(json_object_get(v, "verdict")), "consistent") &&
           json_array_size(json_object_get(v, "findings")) == 0;
}

/* Polls the checker's /status (every 200 ms, at most timeout_s) until `done` holds; the last status (or NULL). */
static json_t *poll_status(int port, int timeout_s, bool (*done)(json_t *))
{
    json_t *st = NULL;
    for (int i = 0; i < timeout_s * 5; i++, usleep(200 * 1000)) {
        json_decref(st);
        if ((st = rc_kmproxy_get(port, "/status", NULL)) && done(st))
            break;
    }
    return st;
}

static bool stale_leader_on_0(json_t *st) { return status_finding(st, 0, "stale_leader", "t") != NULL; }

static bool broker_unchecked(json_t *st, int broker)
{
    size_t i;
    json_t *u;
    json_array_foreach(json_object_get(json_object_get(st, "verify"), "unchecked"), i, u)
        if (json_integer_value(json_object_get(u, "broker")) == broker)
            return true;
    return false;
}

/* Lines of the checker's log "verify: cycle N: found ... on broker B," with from < N <= upto. */
static int found_on_broker(const char *log, int broker, long from, long upto)
{
    FILE *f = fopen(log, "r");
    char line[4096], on[32];
    int n = 0;
    long cycle;
    snprintf(on, sizeof on, " on broker %d,", broker);
    while (f && fgets(line, sizeof line, f)) {
        const char *at = strstr(line, "verify: cycle ");
        n += at && sscanf(at, "verify: cycle %ld: found", &cycle) == 1 && strstr(at, ": found ") && cycle > from &&
             cycle <= upto && strstr(at, on);
    }
    if (f)
        fclose(f);
    return n;
}

/* The checker flags t-0's stale leader (ZK-mode broker 0) within two checks of the move's commit (the check under
 * way at the commit may have copied the image before it; the next one copies it after): /status and /metrics.
 * KRaft broker 2, t-0's new leader, is checked and has no finding.  The cycle of the commit is `committed`. */
static void checker_flags_the_stale_leader(rc_rig *r, int port, long committed)
{
    json_t *st = poll_status(port, 60, stale_leader_on_0);
    json_t *sl = status_finding(st, 0, "stale_leader", "t");
    char *text = st ? json_dumps(json_object_get(st, "verify"), JSON_COMPACT) : NULL, *metrics = NULL;
    long first = sl ? (long)json_integer_value(json_object_get(sl, "first_cycle")) : -1;
    fprintf(stderr, "kafka21062: check-only kmproxy: stale_leader on broker 0 first found in check %ld; the move "
                    "was committed when %ld checks had finished\n", first, committed);
    rc_assert(r, sl, "the check-only kmproxy never flagged broker 0 as t-0's stale leader: %s", text ?: "-");
    rc_assert(r, first >= 1 && first <= committed + 2, "the stale leader was flagged in check %ld, more than two "
              "checks after the move's commit (%ld checks done then): %s", first, committed, text);
    char *unchecked = json_dumps(json_object_get(json_object_get(st, "verify"), "unchecked"), JSON_COMPACT);
    fprintf(stderr, "kafka21062: check-only kmproxy: not checked in that check: %s\n", unchecked ?: "-");
    rc_assert(r, !broker_unchecked(st, 2) && !status_finding(st, 2, "replica_stale", "t") &&
                     !status_finding(st, 2, "metadata_stale", "t"),
              "KRaft broker 2 not checked (%s) or not consistent: %s", unchecked ?: "-", text);
    free(unchecked);
    json_decref(rc_kmproxy_get(port, "/metrics", &metrics));
    rc_assert(r, metrics && strstr(metrics, "\nkmproxy_verify_last_verdict 1\n") &&
                     !strstr(metrics, "\nkmproxy_verify_findings{class=\"stale_leader\"} 0\n") &&
                     strstr(metrics, "\nkmproxy_verify_findings{class=\"stale_leader\"} "),
              "/metrics does not show the stale leader: %.3000s", metrics ?: "-");
    free(metrics);
    free(text);
    json_decref(st);
}

/* After the repair (the driver unwedged by a controller election) the checker's findings clear: consistent. */
static void checker_clears(rc_rig *r, int port, const char *log, long repaired)
{
    json_t *st = poll_status(port, 300, status_consistent);
    char *text = st ? json_dumps(json_object_get(st, "verify"), JSON_COMPACT) : NULL;
    long now = st ? (long)json_integer_value(json_object_get(json_object_get(st, "verify"), "cycles")) : -1;
    rc_streaks runs;
    rc_verify_streaks(log, 0, now, &runs);
    fprintf(stderr, "kafka21062: check-only kmproxy: consistent again at check %ld (%ld checks after ZooKeeper "
                    "named the new leader); the longest run of checks not consistent: %ld\n", now, now - repaired,
            runs.longest);
    rc_assert(r, status_consistent(st) && !broker_unchecked(st, 2),
              "after the repair the check-only kmproxy does not find the brokers consistent: %s\nits log: %s",
              text ?: "-", log);
    /* the wedge is no transient: it outlasts the window within which ordinary changes settle (docs/verify.md) */
    rc_assert(r, runs.longest > RC_VERIFY_TRANSIENT_CHECKS, "the wedge left the brokers inconsistent for %ld checks "
              "in a row only, within the transient window of %d", runs.longest, RC_VERIFY_TRANSIENT_CHECKS);
    free(text);
    json_decref(st);
}

/* The stale leader's exposure as one `kmproxy verify` reads it during the wedge, against Kafka's own reading of
 * broker 0's log: the bytes of the record batches from the truncation point to the log end that check saw (the
 * batches below it stay as they are while the producers append), acks=1 records past the high watermark
 * included, read with Fetch replica id -3 (docs/verify.md). */
static void exposure_matches_kafkas_reading(rc_rig *r)
{
    char *out = NULL;
    int rc = rc_sh(r, &out, "%s verify --json --timeout 20 --bootstrap-server 127.0.0.1:%d --cluster-id %s "
                   "2>/dev/null", km_test_binary(), r->controllers[0].port, r->cluster_id);
    json_error_t jerr;
    json_t *rep = out ? json_loads(out, 0, &jerr) : NULL, *st = json_pack("{s:O?}", "verify", rep);
    json_t *sl = status_finding(st, 0, "stale_leader", "t");
    rc_assert(r, rc == 1 && sl, "verify during the wedge: exit %d, no stale leader on broker 0: %.3000s", rc,
              out ? out : "");
    long trunc = (long)json_integer_value(json_object_get(sl, "truncation_offset")),
         hw = (long)json_integer_value(json_object_get(sl, "stale_offset")),
         to = (long)json_integer_value(json_object_get(sl, "exposed_bytes_to")),
         bytes = (long)json_integer_value(json_object_get(sl, "exposed_bytes"));
    rc_assert(r, json_is_integer(json_object_get(sl, "exposed_bytes")) && bytes > 0 &&
                     to == json_integer_value(json_object_get(sl, "stale_log_end")) && to > hw &&
                     json_is_false(json_object_get(sl, "exposed_bytes_capped")) &&
                     !json_object_get(sl, "exposed_bytes_past_high_watermark_unknown"),
              "the stale leader's exposure not read to its log end: %.3000s", out);
    int64_t kbytes, kend, batches;
    rc_assert(r, rc_dumped_log(r, 0, "t", trunc, to, &kbytes, &kend, &batches), "DumpLogSegments read nothing");
    fprintf(stderr, "kafka21062: the stale leader's exposure: truncation point %ld, high watermark %ld, log end %ld: "
                    "%ld bytes (Kafka's DumpLogSegments: %lld)\n", trunc, hw, to, bytes, (long long)kbytes);
    rc_assert(r, kbytes == bytes, "verify read %ld bytes from %ld to %ld, DumpLogSegments %lld", bytes, trunc, to,
              (long long)kbytes);
    json_decref(st);
    json_decref(rep);
    free(out);
}

/* The reproduction: a mixed cluster (broker 2 restarted into KRaft mode, 0 and 1 still ZK-mode), a producer
 * with acks=all and one with acks=1 on t-0 led by ZK-mode broker 0, one /migration ack lost (the driver
 * wedges), then the KRaft side moves t-0's leadership to broker 2 (a reassignment making it preferred and a
 * preferred election).  Broker 2 learns it from the log; broker 0 hears nothing and keeps acknowledging at its
 * stale epoch.  A controller election (the controller restarted) unwedges the driver; broker 0 learns the truth
 * and truncates.  The test asserts the wedge and that acknowledged acks=1 records are lost, and prints the
 * figures (docs/kafka21062.md records them per run).  Meanwhile a check-only kmproxy (no zookeeper.connect,
 * brokers.enabled=false: it writes no ZooKeeper and sends no broker RPC) checks every broker each second: it finds
 * the mixed cluster consistent before the fault, flags broker 0 as t-0's stale leader within two checks of the
 * move's commit while KRaft broker 2 stays consistent, and finds every broker consistent again after the repair. */
Test(kafka21062, leader_moved_while_wedged_loses_acknowledged_records)
{
    rc_rig *r = start_faulty_or_skip();
    mixed_cluster_with_t(r);
    char *ans, clog[700];
    pid_t checker = rc_kmproxy_check_only(r, "kmproxy-check", CHECK_INTERVAL_MS, clog, sizeof clog);
    int port = rc_kmproxy_metrics_port(clog, 120);
    rc_assert(r, port > 0, "the check-only kmproxy never served its metrics (log %s)", clog);
    json_t *st = poll_status(port, 120, status_consistent);
    rc_assert(r, status_consistent(st), "the check-only kmproxy does not find the mixed cluster consistent before "
              "the fault: %s", st ? json_dumps(json_object_get(st, "verify"), JSON_COMPACT) : "-");
    json_decref(st);
    pid_t producers = fault_under_traffic(r);
    long stuck = migration_offset(r), lag = -1, applied = -1;
    long acked1_before = lines(r, "acked-1"), ackedall_before = lines(r, "acked-all");
    rc_assert(r, admin(r, "reassign t 0 2,0,1 \\; elect-preferred t 0") == 0, "moving t-0 to broker 2 failed");
    /* both calls answer once their records are committed: the checks finished by now saw at most the move */
    long committed = rc_kmproxy_verify_cycles(port);
    checker_flags_the_stale_leader(r, port, committed);
    /* the exposure: broker 0 acknowledges at its stale epoch while the KRaft side names broker 2 */
    rc_assert(r, wait_lines(r, "acked-1", 300, 300), "the acks=1 producer stopped being acknowledged");
    rc_assert(r, controller_metrics(r, &lag, &applied), "cannot read the controller's metrics over JMX");
    long later = migration_offset(r);
    int zk_says = zk_leader(r, "t");
    long acked1_wedged = lines(r, "acked-1") - acked1_before, ackedall_wedged = lines(r, "acked-all") - ackedall_before;
    fprintf(stderr, "kafka21062: wedged: /migration offset %ld then %ld, last applied %ld, ZkWriteBehindLag %ld; "
                    "ZooKeeper names leader %d for t-0; acknowledged meanwhile: acks=1 %ld, acks=all %ld\n",
            stuck, later, applied, lag, zk_says, acked1_wedged, ackedall_wedged);
    print_first_failure(r);
    rc_assert(r, later == stuck && applied > later && lag < applied - later, "no wedge: /migration %ld -> %ld, "
              "applied %ld, lag %ld", stuck, later, applied, lag);
    exposure_matches_kafkas_reading(r);
    /* a controller election unwedges the driver: it reads /migration afresh and brings the brokers up to date */
    long wedged_checks = rc_kmproxy_verify_cycles(port);
    rc_assert(r, found_on_broker(clog, 2, committed, wedged_checks) == 0, "the checker found something on KRaft "
              "broker 2 after the move, while the driver was wedged (log %s)", clog);
    ans = rc_rig_cmd(r, "stop controller 3000");
    free(ans);
    ans = rc_rig_cmd(r, "start controller 3000");
    rc_assert(r, ans && !strncmp(ans, "ok ", 3), "restarting the controller failed: %s", ans ? ans : "");
    free(ans);
    rc_assert(r, wait_zk_leader(r, "t", 2, 300), "t-0's move to broker 2 never reached ZooKeeper");
    checker_clears(r, port, clog, rc_kmproxy_verify_cycles(port));
    rc_assert(r, wait_lines(r, "acked-all", 100, 300), "the acks=all producer never resumed");
    stop_producers(r, producers);
    long acked_all, lost_all, acked_1, lost_1;
    count_loss(r, "without kmproxy", &acked_all, &lost_all, &acked_1, &lost_1);
    rc_assert(r, lost_1 > 0, "no acknowledged acks=1 record was lost: KAFKA-21062 not reproduced");
    char *claim = rc_rig_cmd(r, "zk /kmproxy/active");
    rc_assert(r, claim && !strcmp(claim, "ok absent"), "the check-only kmproxy wrote ZooKeeper: /kmproxy/active %s",
              claim ?: "?");
    free(claim);
    int status = -1;
    kill(checker, SIGTERM);
    waitpid(checker, &status, 0);
    rc_assert(r, WIFEXITED(status) && WEXITSTATUS(status) == 0, "the check-only kmproxy did not stop cleanly: "
              "status %#x (log %s)", status, clog);
    rc_rig_stop(r, false);
}

/* ---- part 2: the same with kmproxy deployed as docs/runbook.md says ---- */

/* kmproxy run beside the controllers (metadata.source=quorum, brokers.enabled=true, ZooKeeper direct: the
 * fault is on the controllers' link); its pid, its log in $DIR/kmproxy-a.log. */
static pid_t kmproxy_start(rc_rig *r)
{
    char log[700];
    return rc_kmproxy_run(r, "kmproxy-a", NULL, log, sizeof log);
}

static bool kmproxy_ready(rc_rig *r, int timeout_s)
{
    for (int i = 0; i < timeout_s; i++, sleep(1)) {
        char *out = NULL;
        rc_sh(r, &out, "grep -c 'ready: active, ZooKeeper in sync' $DIR/kmproxy-a.log");
        bool ready = out && atoi(out) > 0;
        free(out);
        if (ready)
            return true;
    }
    return false;
}

/* Milliseconds from the KRaft side's commit of t-0's move to broker 2 (the controller's last replay of a change of
 * t-0 to leader 2, else KRaft broker 2 last becoming its leader) to ZK-mode broker 0 last becoming its follower:
 * the last lines, since t-0 may have moved between 0 and 2 while the test set it up.  LONG_MIN if a line is
 * missing.  Printed, never asserted. */
static long learn_ms(rc_rig *r, const char *what)
{
    char *out = NULL;
    rc_sh(r, &out, "python3 - $DIR <<'PY'\n"
                   "import re, sys, datetime\n"
                   "def match(path, pats, last=False):\n"
                   "    at = None\n"
                   "    for line in open(path, errors='replace'):\n"
                   "        if all(p in line for p in pats):\n"
                   "            at = datetime.datetime.strptime(line[1:24], '%%Y-%%m-%%d %%H:%%M:%%S,%%f')\n"
                   "            if not last:\n"
                   "                break\n"
                   "    return at\n"
                   "d = sys.argv[1]\n"
                   "commit = match(d + '/controller-3000/server.log', ['Replayed partition change', 'partitionId=0,', "
                   "'leader=2,', 'for topic t ('], last=True)\n"
                   "src = 'the controller replaying the PartitionChangeRecord'\n"
                   "if not commit:\n"
                   "    commit, src = match(d + '/broker-2/server.log', ['Leader t-0 ', 'starts at leader epoch'], True), "
                   "'KRaft broker 2 becoming leader'\n"
                   "learn = match(d + '/broker-0/server.log', ['Follower t-0 starts at leader epoch'], True)\n"
                   "print(int((learn - commit).total_seconds() * 1000) if commit and learn else 'never', 'ms, from', src)\n"
                   "PY");
    long ms = out && strncmp(out, "never", 5) ? atol(out) : LONG_MIN;
    fprintf(stderr, "kafka21062: %s: ZK-mode broker 0 became t-0's follower %s", what, out ? out : "?\n");
    free(out);
    return ms;
}

/* With kmproxy as ZooKeeper's writer the cluster is idle after the traffic: the active controller's NoOpRecords
 * alone move /migration (kmproxy records the log's position as Kafka's driver does), so `verify --zookeeper` sees
 * a writer making progress, not KAFKA-21062's stalled driver. */
static void verify_sees_kmproxy_writing(rc_rig *r)
{
    char *out = NULL;
    int rc = rc_sh(r, &out, "%s verify --json --timeout 20 --bootstrap-server 127.0.0.1:%d --cluster-id %s "
                   "--zookeeper %s --watch-seconds 3 2>/dev/null", km_test_binary(), r->controllers[0].port,
                   r->cluster_id, r->zk);
    json_error_t jerr;
    json_t *rep = out ? json_loads(out, 0, &jerr) : NULL, *d = json_object_get(rep, "dual_write");
    long first = (long)json_integer_value(json_object_get(d, "migration_offset"));
    long after = (long)json_integer_value(json_object_get(d, "migration_offset_after"));
    fprintf(stderr, "kafka21062: with kmproxy idle: verify exit %d, /migration at %ld then %ld over 3 s, lag %ld, "
                    "driver_stalled %s\n", rc, first, after, (long)json_integer_value(json_object_get(d, "lag_records")),
            json_is_true(json_object_get(d, "driver_stalled")) ? "true" : "false");
    rc_assert(r, d && json_is_false(json_object_get(d, "driver_stalled")) && after > first,
              "verify took kmproxy's writing for a stalled driver (exit %d): %.3000s", rc, out ? out : "");
    json_decref(rep);
    free(out);
}

/* Part 2's leader move on the KRaft side: t-0 to KRaft broker 2, through the Admin API. */
static void move_t0_to_kraft_broker_2(rc_rig *r)
{
    rc_assert(r, admin(r, "reassign t 0 2,0,1 \\; elect-preferred t 0") == 0, "moving t-0 to broker 2 failed");
}

/* The rest of part 2, whichever link lost the ack: after move_t0_to_kraft_broker_2 under the traffic, the move in
 * ZooKeeper and at broker 0 (the window printed), the loss counted, /migration moving while idle; kmproxy stopped,
 * nothing acknowledged with acks=all lost. */
static void moved_t0_under_kmproxy(rc_rig *r, pid_t kmp, pid_t producers, const char *what)
{
    rc_assert(r, wait_zk_leader(r, "t", 2, 300), "t-0's move to broker 2 never reached ZooKeeper");
    rc_assert(r, wait_lines(r, "acked-all", 200, 300) && wait_lines(r, "acked-1", 200, 300),
              "the producers stopped being acknowledged");
    stop_producers(r, producers);
    long ms = learn_ms(r, what);
    json_t *st = rig_json(r, "zkfault status");
    fprintf(stderr, "kafka21062: %s: the fault proxy dropped %zu replies\n", what,
            st ? json_array_size(json_object_get(st, "drops")) : 0);
    json_decref(st);
    long acked_all, lost_all, acked_1, lost_1;
    count_loss(r, what, &acked_all, &lost_all, &acked_1, &lost_1);
    verify_sees_kmproxy_writing(r);
    kill(kmp, SIGTERM);
    waitpid(kmp, NULL, 0);
    rc_assert(r, acked_all > 0 && lost_all == 0, "acks=all lost %ld of %ld %s", lost_all, acked_all, what);
    rc_assert(r, ms != LONG_MIN, "broker 0 never became t-0's follower (no log line)");
    rc_rig_stop(r, false);
}

/* Part 2: the same mixed cluster, the same lost /migration ack on the controller's link, the same traffic and
 * leader move, with one kmproxy instance deployed as the runbook says (it takes the KRaft leader's claim over;
 * Kafka's driver stays fenced).  Broker 0 learns the move from kmproxy, no controller election needed; nothing
 * acknowledged with acks=all is lost.  acks=1 records broker 0 acknowledged between the KRaft commit and its
 * LeaderAndIsr are lost as in any acks=1 leader change: the test prints that window and the loss. */
Test(kafka21062, kmproxy_deployed_the_leader_move_reaches_zk_brokers_and_acks_all_loses_nothing)
{
    rc_rig *r = start_faulty_or_skip();
    mixed_cluster_with_t(r);
    pid_t kmp = kmproxy_start(r);
    rc_assert(r, kmproxy_ready(r, 300), "kmproxy never became ready");
    pid_t producers = fault_under_traffic(r);
    move_t0_to_kraft_broker_2(r);
    moved_t0_under_kmproxy(r, kmp, producers, "with kmproxy");
}

/* ---- part 2 with the runbook's HA pair, losing its active instance under the fault ---- */

/* The index of the instance among NAMES (kmproxy-NAME.log) whose log holds `first` and, after it, `then`; -1
 * when none does within timeout_s. */
static int instance_logged(rc_rig *r, const char *const *names, int n, const char *first, const char *then,
                           int timeout_s)
{
    for (int t = 0; t < timeout_s * 2; t++, usleep(500 * 1000)) {
        for (int i = 0; i < n; i++) {
            char *out = NULL;
            rc_sh(r, &out, "sed -n '/%s/,$p' $DIR/kmproxy-%s.log | grep -c -F '%s'", first, names[i], then);
            bool seen = out && atoi(out) > 0;
            free(out);
            if (seen)
                return i;
        }
    }
    return -1;
}

/* Part 2 as docs/runbook.md deploys kmproxy: two instances (ha.enabled=true), the same fault on the controllers'
 * link and traffic.  While Kafka's driver is wedged the active instance is killed (SIGKILL: no hand-over); the
 * standby's ZooKeeper election makes it active once the dead one's session expires, it claims, syncs ZooKeeper
 * and carries t-0's move to broker 0.  Nothing acknowledged with acks=all is lost. */
Test(kafka21062, the_runbooks_ha_pair_loses_its_active_instance_under_the_fault_and_loses_nothing)
{
    rc_rig *r = start_faulty_or_skip();
    mixed_cluster_with_t(r);
    const char *names[] = {"a", "b"}, *ha = "ha.enabled=true\nzookeeper.session.timeout.ms=6000\n";
    char log[700];
    pid_t kmp[2] = {rc_kmproxy_run(r, "kmproxy-a", ha, log, sizeof log), rc_kmproxy_run(r, "kmproxy-b", ha, log,
                                                                                         sizeof log)};
    int active = instance_logged(r, names, 2, "ha: ", "ready: active, ZooKeeper in sync", 300);
    rc_assert(r, active >= 0, "neither kmproxy instance became active and ready");
    pid_t producers = fault_under_traffic(r);
    time_t killed = time(NULL);
    kill(kmp[active], SIGKILL);
    waitpid(kmp[active], NULL, 0);
    move_t0_to_kraft_broker_2(r); /* while no instance is active: the standby carries it once it takes over */
    const char *standby[] = {names[1 - active]};
    rc_assert(r, instance_logged(r, standby, 1, "is now the active one", "zk: in sync; sending to ZK-mode brokers",
                                 120) == 0, "the standby never took over");
    fprintf(stderr, "kafka21062: the HA pair: kmproxy-%s killed, kmproxy-%s active and in sync %ld s later\n",
            names[active], names[1 - active], (long)(time(NULL) - killed));
    moved_t0_under_kmproxy(r, kmp[1 - active], producers, "the HA pair");
}

/* ---- part 2 on the other link: a lost ack on kmproxy's own ZooKeeper connection ---- */

/* The fault proxy's replies dropped so far (-1: no answer). */
static long fault_drops(rc_rig *r)
{
    json_t *st = rig_json(r, "zkfault status");
    long n = st ? (long)json_array_size(json_object_get(st, "drops")) : -1;
    json_decref(st);
    return n;
}

/* The kmproxy log holds `needle` within timeout_s. */
static bool kmproxy_logged(rc_rig *r, const char *needle, int timeout_s)
{
    for (int i = 0; i < timeout_s * 2; i++, usleep(500 * 1000)) {
        char *out = NULL;
        rc_sh(r, &out, "grep -c -F '%s' $DIR/kmproxy-a.log", needle);
        bool seen = out && atoi(out) > 0;
        free(out);
        if (seen)
            return true;
    }
    return false;
}

/* KAFKA-21062's fault where kmproxy is the writer: the reply to one of kmproxy's own /migration multis is dropped
 * (the fault proxy between kmproxy and ZooKeeper; the controllers reach ZooKeeper directly), under the same
 * traffic, then the same leader move.  kmproxy reconnects within its session, finds that its write landed and
 * adopts the zkVersion (where Kafka's driver caches the stale one and wedges); the move reaches ZooKeeper and
 * broker 0, nothing acknowledged with acks=all is lost, and /migration keeps moving. */
Test(kafka21062, a_lost_ack_on_kmproxys_own_zookeeper_link_is_adopted_and_loses_nothing)
{
    rc_rig *r = start_with_fault_or_skip("kmproxy");
    mixed_cluster_with_t(r);
    json_t *st = rig_json(r, "zkfault status");
    char zk[64], log[700];
    snprintf(zk, sizeof zk, "127.0.0.1:%d", st ? (int)json_integer_value(json_object_get(st, "port")) : 0);
    json_decref(st);
    pid_t kmp = rc_kmproxy_run_via(r, "kmproxy-a", zk, NULL, log, sizeof log);
    rc_assert(r, kmproxy_ready(r, 300), "kmproxy never became ready");
    pid_t producers = start_producers(r);
    rc_assert(r, wait_lines(r, "acked-1", 100, 300) && wait_lines(r, "acked-all", 100, 300),
              "the producers acknowledged nothing");
    json_decref(rig_json(r, "zkfault arm")); /* kmproxy's next /migration multi: a NoOp batch's at the latest */
    long drops = 0;
    for (int i = 0; i < 120 && drops < 1; i++, usleep(500 * 1000))
        drops = fault_drops(r);
    rc_assert(r, drops == 1, "the fault proxy dropped %ld replies to kmproxy's /migration multis, not one", drops);
    rc_assert(r, kmproxy_logged(r, "had landed (lost ack)", 120), "kmproxy did not find its lost-ack write landed");
    char *out = NULL;
    rc_sh(r, &out, "grep -F 'had landed (lost ack)' $DIR/kmproxy-a.log | head -2");
    fprintf(stderr, "kafka21062: kmproxy's own link: %s", out ? out : "?\n");
    free(out);
    move_t0_to_kraft_broker_2(r);
    moved_t0_under_kmproxy(r, kmp, producers, "kmproxy's own link");
}
