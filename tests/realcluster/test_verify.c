/* test_verify.c - `kmproxy verify` (issue 26 part 3) against a real Kafka 3.9 cluster in migration (rc_rig.h):
 * kmproxy deployed beside Kafka's controllers keeps the ZK-mode brokers in step, and the verifier finds every
 * broker consistent; with kmproxy stopped (SIGSTOP: it keeps its claim, so Kafka's own driver stays fenced) a
 * leader moved on the KRaft side leaves the old leader acting as leader, which the verifier reports as a stale
 * leader, and the report clears once kmproxy runs again; a broker that cannot be reached gives exit 2. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "km_testsupport.h"
#include "rc_rig.h"


/* kmproxy run beside the controllers, as test_realcluster.c deploys it, with its continuous check every
 * CHECK_INTERVAL_MS; its log in DIR/kmproxy-verify.log. */
#define CHECK_INTERVAL_MS 500
static pid_t kmproxy_start(rc_rig *r, char *log, size_t cap)
{
    char extra[200];
    snprintf(extra, sizeof extra, "zookeeper.session.timeout.ms=60000\nverify.interval.ms=%d\n", CHECK_INTERVAL_MS);
    return rc_kmproxy_run(r, "kmproxy-verify", extra, log, cap);
}

/* ---- the daemon's own check (verify.interval.ms) beside the one-shot one ---- */

static bool daemon_consistent(json_t *st)
{
    json_t *v = json_object_get(st, "verify");
    return v && json_is_string(json_object_get(v, "verdict")) &&
           !strcmp(json_string_value(json_object_get(v, "verdict")), "consistent") &&
           json_array_size(json_object_get(v, "findings")) == 0;
}

/* Waits (at most timeout_s) until the daemon's last check found every broker consistent; its cycle count then, or
 * -1 (the status in *text, malloc'd). */
static long daemon_consistent_at(int port, int timeout_s, char **text)
{
    for (int i = 0; i < timeout_s * 5; i++, usleep(200 * 1000)) {
        free(*text);
        json_t *st = rc_kmproxy_get(port, "/status", text);
        long cycles = daemon_consistent(st) ? (long)json_integer_value(json_object_get(json_object_get(st, "verify"),
                                                                                       "cycles")) : -1;
        json_decref(st);
        if (cycles >= 0)
            return cycles;
    }
    return -1;
}

/* Waits until the daemon has finished `more` checks after `from`; the count then (-1 after timeout_s). */
static long daemon_checks_after(int port, long from, long more, int timeout_s)
{
    for (int i = 0; i < timeout_s * 5; i++, usleep(200 * 1000)) {
        long now = rc_kmproxy_verify_cycles(port);
        if (now >= from + more)
            return now;
    }
    return -1;
}

/* Prints the daemon's log lines of findings found and cleared in checks (from, to]: the transients' record. */
static void print_transients(const char *log, long from, long to)
{
    FILE *f = fopen(log, "r");
    char line[4096];
    long cycle;
    while (f && fgets(line, sizeof line, f)) {
        const char *at = strstr(line, "verify: cycle ");
        if (at && sscanf(at, "verify: cycle %ld:", &cycle) == 1 && cycle > from && cycle <= to)
            fprintf(stderr, "verify: daemon: %s", at);
    }
    if (f)
        fclose(f);
}

static bool log_has(const char *path, const char *needle, int timeout_s)
{
    for (int i = 0; i < timeout_s * 5; i++, usleep(200 * 1000)) {
        char *out = NULL;
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        char line[4096];
        bool found = false;
        while (!found && fgets(line, sizeof line, f))
            found = strstr(line, needle) != NULL;
        fclose(f);
        free(out);
        if (found)
            return true;
    }
    return false;
}

/* `kmproxy verify --json` of the controller's own log: the exit status, the report (NULL if none). */
static int verify(rc_rig *r, json_t **report, char **out)
{
    json_decref(*report);
    free(*out);
    *out = NULL;
    int rc = rc_sh(r, out, "%s verify --timeout 20 --json --metadata $DIR/controller-3000/metadata/__cluster_metadata-0"
                   " 2>$DIR/verify.err; rc=$?; cat $DIR/verify.err >&2; exit $rc", km_test_binary());
    json_error_t jerr;
    *report = *out ? json_loads(*out, JSON_DISABLE_EOF_CHECK, &jerr) : NULL;
    return rc;
}

/* Runs verify until it exits `want` (an image still catching up, a change still on its way), at most timeout_s. */
static int verify_until(rc_rig *r, int want, int timeout_s, json_t **report, char **out)
{
    int rc = -1;
    for (int i = 0; i < timeout_s / 2; i++) {
        if ((rc = verify(r, report, out)) == want)
            return rc;
        sleep(2);
    }
    return rc;
}

/* The independent oracle: Kafka's own client reads each broker's Metadata v12 and compares it with the image. */
static bool oracle_converged(rc_rig *r, int timeout_s, char **out)
{
    for (int i = 0; i < timeout_s / 2; i++, sleep(2)) {
        free(*out);
        *out = NULL;
        if (rc_sh(r, out, "M=$DIR/controller-3000/metadata/__cluster_metadata-0; %s metadata image $M > "
                  "$DIR/image.json && $JAVA -cp \"$CP:$TOOLS\" RcAdmin verify $DIR/image.json $BS 2>&1 | "
                  "grep -v log4j; exit ${PIPESTATUS[0]}", km_test_binary()) == 0)
            return true;
    }
    return false;
}

/* The finding of `cls` for broker/topic/partition in the report, NULL if none. */
static json_t *find(json_t *report, int broker, const char *cls, const char *topic, int part)
{
    size_t i;
    json_t *f;
    json_array_foreach(json_object_get(report, "findings"), i, f)
        if (json_integer_value(json_object_get(f, "broker")) == broker &&
            !strcmp(json_string_value(json_object_get(f, "class")), cls) &&
            !strcmp(json_string_value(json_object_get(f, "topic")), topic) &&
            json_integer_value(json_object_get(f, "partition")) == part)
            return f;
    return NULL;
}

/* The stale leader's exposure in bytes against Kafka's own reading of its log: exactly the batches from the
 * truncation point to its log end (read past its high watermark), the log end, and the offsets past the high
 * watermark. */
static void assert_exposed_bytes(rc_rig *r, int broker, json_t *sl, const char *out)
{
    int64_t trunc = json_integer_value(json_object_get(sl, "truncation_offset")),
            hw = json_integer_value(json_object_get(sl, "stale_offset")),
            got_end = json_integer_value(json_object_get(sl, "stale_log_end")), bytes, end, batches;
    rc_assert(r, json_is_integer(json_object_get(sl, "exposed_bytes")) &&
                     json_is_false(json_object_get(sl, "exposed_bytes_capped")) &&
                     json_is_integer(json_object_get(sl, "stale_log_end")) &&
                     json_integer_value(json_object_get(sl, "exposed_bytes_to")) == got_end &&
                     !json_object_get(sl, "exposed_bytes_past_high_watermark_unknown"),
              "no exposure in bytes to the log end in the stale leader's finding: %s", out);
    rc_assert(r, rc_dumped_log(r, broker, "v", trunc, got_end, &bytes, &end, &batches),
              "DumpLogSegments read no batch of the stale leader's log");
    int64_t got = json_integer_value(json_object_get(sl, "exposed_bytes"));
    rc_assert(r, got == bytes && got_end == end &&
                     json_integer_value(json_object_get(sl, "offsets_past_high_watermark")) ==
                         end - (hw > trunc ? hw : trunc),
              "verify: %lld bytes exposed, log end %lld; Kafka's DumpLogSegments: %lld bytes, log end %lld: %s",
              (long long)got, (long long)got_end, (long long)bytes, (long long)end, out);
    rc_assert(r, (got > 0) == (end > trunc), "%lld bytes for %lld offsets exposed", (long long)got,
              (long long)(end - trunc));
}

/* Partition 0's leader and replicas in the image (`kmproxy metadata image`). */
static void image_partition(rc_rig *r, const char *topic, int *leader, int *replicas, int *n)
{
    char *out = NULL;
    rc_sh(r, &out, "%s metadata image $DIR/controller-3000/metadata/__cluster_metadata-0", km_test_binary());
    json_error_t jerr;
    json_t *img = out ? json_loads(out, 0, &jerr) : NULL;
    free(out);
    *n = 0;
    size_t i, j;
    json_t *t, *p;
    json_array_foreach(json_object_get(img, "topics"), i, t) {
        if (strcmp(json_string_value(json_object_get(t, "name")) ?: "", topic))
            continue;
        json_array_foreach(json_object_get(t, "partitions"), j, p)
            if (json_integer_value(json_object_get(p, "partitionId")) == 0 &&
                (*leader = (int)json_integer_value(json_object_get(p, "leader"))) >= -1)
                for (size_t k = 0; k < json_array_size(json_object_get(p, "replicas")) && *n < 8; k++)
                    replicas[(*n)++] = (int)json_integer_value(json_array_get(json_object_get(p, "replicas"), k));
    }
    json_decref(img);
}

static bool says_consistent(const char *out)
{
    return out && (strstr(out, "\"consistent\"") || strstr(out, "verdict: consistent"));
}

/* A reassignment through the Admin API with kmproxy running: replicas[0] leaves v-0 (its leadership moves, its
 * replica is deleted), comes back (it catches up, the ISR grows) and is elected preferred leader again, as before. */
static void ordinary_reassignment(rc_rig *r, const int *replicas)
{
    char ops[256]; /* the removal completes at once (the others are in the ISR): one JVM for both */
    snprintf(ops, sizeof ops, "reassign v 0 %d,%d \\; reassign v 0 %d,%d,%d", replicas[1], replicas[2], replicas[0],
             replicas[1], replicas[2]);
    rc_admin(r, ops);
    char *out = NULL;
    int rc = 1; /* until replicas[0] is back in the ISR: PREFERRED_LEADER_NOT_AVAILABLE before */
    for (int i = 0; i < 60 && rc; i++) {
        free(out);
        out = NULL;
        if ((rc = rc_sh(r, &out, "$JAVA -cp \"$CP:$TOOLS\" RcAdmin $BS elect-preferred v 0 2>&1 | grep -v log4j; "
                        "exit ${PIPESTATUS[0]}")))
            sleep(1);
    }
    rc_assert(r, rc == 0, "electing broker %d v-0's preferred leader again failed: %s", replicas[0], out);
    free(out);
    int leader = -1, now[8], n = 0;
    image_partition(r, "v", &leader, now, &n);
    rc_assert(r, leader == replicas[0] && n == 3, "after the reassignment v-0 is led by %d with %d replicas", leader, n);
}

TestSuite(verify_realcluster, .timeout = 1800);

/* Steady state: exit 0, every broker reachable and consistent.  kmproxy stopped (SIGSTOP: it keeps its claim, so
 * Kafka's own driver stays fenced and nobody tells the ZK-mode brokers), then a leader moved on the KRaft side
 * (replica order changed, preferred election): the old leader still acts as leader at the old epoch: exit 1,
 * stale_leader on it with the truncation point and the producer that wrote to it, replica_stale on the image's
 * new leader, metadata_stale on the third; a topic deleted meanwhile stays in every broker's cache (metadata_stale) and on its disk (stray_log).
 * kmproxy running again repairs the brokers: exit 0.  A broker killed: exit 2, naming it, and nothing
 * that reads like success. */
Test(verify_realcluster, steady_state_stale_leader_repair_and_unreachable_broker)
{
    if (!rc_cache_or_skip())
        return;
    char why[16384], klog[600];
    rc_rig *r = rc_rig_start(1, why, sizeof why);
    cr_assert(r, "%s", why);
    pid_t kmp = kmproxy_start(r, klog, sizeof klog);
    rc_assert(r, log_has(klog, "ready: active, ZooKeeper in sync", 300), "kmproxy never became ready");
    int port = rc_kmproxy_metrics_port(klog, 60);
    rc_assert(r, port > 0, "kmproxy serves no metrics (log %s)", klog);
    rc_admin(r, "create-topic v 1 3 \\; create-topic gone 1 3");
    char *out = NULL;
    rc_assert(r, oracle_converged(r, 240, &out), "the brokers never matched the image (Kafka's oracle): %s", out);

    json_t *rep = NULL;
    int rc = verify(r, &rep, &out);
    rc_assert(r, rc == 0 && rep && !strcmp(json_string_value(json_object_get(rep, "verdict")), "consistent"),
              "steady state: verify exited %d: %s", rc, out);
    rc_assert(r, json_array_size(json_object_get(rep, "brokers")) == 3, "verify did not check 3 brokers: %s", out);
    char *cost = json_dumps(json_object_get(rep, "cost"), JSON_COMPACT);
    fprintf(stderr, "verify: steady state, %lld partitions: cost %s\n",
            (long long)json_integer_value(json_object_get(json_object_get(rep, "image"), "partitions")), cost);
    free(cost);
    size_t i;
    json_t *b;
    json_array_foreach(json_object_get(rep, "brokers"), i, b)
        rc_assert(r, json_is_true(json_object_get(b, "reachable")) &&
                         !strcmp(json_string_value(json_object_get(b, "mode")), "zk"),
                  "broker not reached or not ZK-mode: %s", out);

    /* the same with the image fetched from the controller as an observer */
    char *qout = NULL;
    rc = rc_sh(r, &qout, "%s verify --timeout 20 --bootstrap-server 127.0.0.1:%d --cluster-id %s 2>&1",
               km_test_binary(), r->controllers[0].port, r->cluster_id);
    rc_assert(r, rc == 0 && qout && strstr(qout, "verdict: consistent"), "verify --bootstrap-server: exit %d: %s",
              rc, qout);
    free(qout);

    /* steady state: the daemon's own check finds nothing at all, not even for one check */
    char *dst = NULL;
    rc_streaks runs;
    long steady_from = rc_kmproxy_verify_cycles(port), steady_to = daemon_checks_after(port, steady_from, 8, 120);
    rc_verify_streaks(klog, steady_from, steady_to, &runs);
    fprintf(stderr, "verify: daemon: steady state, checks %ld to %ld: %d check(s) not consistent\n", steady_from + 1,
            steady_to, (int)runs.longest);
    rc_assert(r, steady_from >= 1 && steady_to > steady_from && runs.streaks == 0,
              "the daemon's check in steady state (checks %ld to %ld): %d run(s) not consistent, the longest %ld "
              "check(s) (log %s)", steady_from + 1, steady_to, runs.streaks, runs.longest, klog);

    int old_leader = -1, replicas[8], n = 0;
    image_partition(r, "v", &old_leader, replicas, &n);
    rc_assert(r, n == 3 && old_leader == replicas[0], "v-0 in the image: leader %d, %d replicas", old_leader, n);
    kill(kmp, SIGSTOP);
    char ops[256];
    snprintf(ops, sizeof ops, "reassign v 0 %d,%d,%d \\; elect-preferred v 0 \\; delete-topic gone", replicas[1],
             replicas[0], replicas[2]);
    rc_admin(r, ops);
    /* a producer (idempotent, acks=all) that reads the brokers' stale metadata writes to the stale leader */
    char *prod = NULL;
    rc = rc_sh(r, &prod, "(sleep 10; touch $DIR/stop-v) & $JAVA -cp \"$CP:$TOOLS\" RcTraffic produce $BS v 1 "
               "$DIR/acked-v $DIR/stop-v 2>&1 | grep -v log4j | tail -3; wc -l < $DIR/acked-v");
    fprintf(stderr, "verify: producer to the stale leader: %s", prod ? prod : "");
    free(prod);
    rc = verify_until(r, 1, 120, &rep, &out);
    rc_assert(r, rc == 1 && find(rep, old_leader, "stale_leader", "v", 0),
              "no stale leader on broker %d after the KRaft-side election (exit %d): %s", old_leader, rc, out);
    rc_assert(r, find(rep, replicas[1], "replica_stale", "v", 0) && find(rep, replicas[2], "metadata_stale", "v", 0),
              "the new leader %d or the follower %d not reported stale: %s", replicas[1], replicas[2], out);
    json_t *sl = find(rep, old_leader, "stale_leader", "v", 0);
    rc_assert(r, json_is_integer(json_object_get(sl, "truncation_offset")) &&
                     json_is_integer(json_object_get(sl, "exposed_offsets")),
              "no truncation point or exposure in the stale leader's finding: %s", out);
    json_t *sp = json_object_get(json_object_get(sl, "producers"), "stale_leader");
    rc_assert(r, json_is_array(sp) && json_array_size(sp) >= 1 &&
                     json_integer_value(json_object_get(sl, "stale_offset")) > 0,
              "the stale leader's producers or offset not reported: %s", out);
    for (int k = 0; k < 3; k++)
        rc_assert(r, find(rep, k, "stray_log", "gone", 0) && find(rep, k, "metadata_stale", "gone", -1),
                  "broker %d: the deleted topic's log and cache entry not reported: %s", k, out);
    assert_exposed_bytes(r, old_leader, sl, out);
    char *slj = json_dumps(sl, JSON_COMPACT);
    fprintf(stderr, "verify: the stale leader: %s\n", slj);
    free(slj);
    rc_assert(r, !oracle_converged(r, 2, &out), "Kafka's oracle finds the brokers consistent while verify does not");

    kill(kmp, SIGCONT);
    rc = verify_until(r, 0, 240, &rep, &out);
    rc_assert(r, rc == 0, "after kmproxy ran again, verify still exits %d: %s", rc, out);
    long moves_from = daemon_consistent_at(port, 60, &dst);
    rc_assert(r, moves_from >= 0, "after the repair the daemon's check is not consistent: %s", dst);

    /* a copy of the image as it is now, to verify against once it is old */
    char *cp = NULL;
    rc = rc_sh(r, &cp, "for i in 1 2 3 4 5; do rm -rf $DIR/old-image; cp -r $DIR/controller-3000/metadata/"
               "__cluster_metadata-0 $DIR/old-image && %s metadata image $DIR/old-image >/dev/null && exit 0; "
               "sleep 1; done; exit 1", km_test_binary());
    rc_assert(r, rc == 0, "no readable copy of the controller's log: %s", cp);
    free(cp);

    /* an ordinary leader move with kmproxy running: findings at most while it propagates, then exit 0 again */
    snprintf(ops, sizeof ops, "reassign v 0 %d,%d,%d \\; elect-preferred v 0", replicas[0], replicas[1],
             replicas[2]);
    rc_admin(r, ops);
    int transient = 0;
    for (rc = verify(r, &rep, &out); rc != 0 && transient < 60; rc = verify(r, &rep, &out), transient++)
        sleep(1);
    fprintf(stderr, "verify: an ordinary leader move with kmproxy running: %d check(s) before exit 0\n", transient);
    rc_assert(r, rc == 0, "after an ordinary leader move verify still exits %d: %s", rc, out);
    int leader_now = -1, now_replicas[8];
    image_partition(r, "v", &leader_now, now_replicas, &n);
    rc_assert(r, leader_now == replicas[0], "the leader move did not happen: leader %d", leader_now);
    ordinary_reassignment(r, replicas);
    long moves_to = daemon_checks_after(port, daemon_consistent_at(port, 120, &dst), 2, 60);
    rc_verify_streaks(klog, moves_from, moves_to, &runs);
    print_transients(klog, moves_from, moves_to);
    fprintf(stderr, "verify: daemon: checks %ld to %ld across the leader moves: %d transient run(s) not consistent, "
                    "the longest %ld check(s) (allowed: %d)\n", moves_from + 1, moves_to, runs.streaks, runs.longest,
            RC_VERIFY_TRANSIENT_CHECKS);
    rc_assert(r, moves_to > moves_from && !runs.open && runs.longest <= RC_VERIFY_TRANSIENT_CHECKS,
              "the daemon's check across ordinary leader moves (checks %ld to %ld): the longest run not consistent "
              "%ld check(s), beyond the transient window of %d%s (log %s): %s", moves_from + 1, moves_to,
              runs.longest, RC_VERIFY_TRANSIENT_CHECKS, runs.open ? ", still not consistent" : "", klog, dst);
    free(dst);

    /* the brokers are ahead of the old image: it cannot judge them (exit 2, the image behind), never "stale" */
    rc = rc_sh(r, &cp, "%s verify --json --metadata $DIR/old-image 2>&1", km_test_binary());
    rc_assert(r, rc == 2 && cp && strstr(cp, "\"image_behind\": true") && strstr(cp, "the image is behind") &&
                     !strstr(cp, "stale_leader"),
              "verify against an old image: exit %d: %s", rc, cp);
    free(cp);

    free(rc_rig_cmd(r, "kill broker %d", replicas[2]));
    rc = verify(r, &rep, &out);
    char *err = NULL, name[64];
    rc_sh(r, &err, "cat $DIR/verify.err");
    snprintf(name, sizeof name, "could not check broker %d", replicas[2]);
    rc_assert(r, rc == 2 && !says_consistent(out) && err && strstr(err, name),
              "a killed broker: exit %d, stdout %s, stderr %s", rc, out, err);
    free(err);
    json_decref(rep);
    free(out);
    kill(kmp, SIGTERM);
    waitpid(kmp, NULL, 0);
    rc_rig_stop(r, false);
}
