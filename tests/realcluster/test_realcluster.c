/* test_realcluster.c - a real Kafka 3.9 cluster in migration (rc_rig.h): the rig itself, what Kafka's own
 * KRaftMigrationDriver does beside another ZooKeeper writer, and kmproxy deployed as docs/runbook.md says. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "km_testsupport.h"
#include "rc_rig.h"

static rc_rig *start_or_skip(int controllers)
{
    if (!rc_cache_or_skip())
        return NULL;
    char why[16384];
    rc_rig *r = rc_rig_start(controllers, why, sizeof why);
    cr_assert(r, "%s", why);
    return r;
}


static json_t *zk_json(rc_rig *r, const char *path)
{
    char *answer = rc_rig_cmd(r, "zk %s", path);
    json_error_t jerr;
    json_t *j = answer && !strncmp(answer, "ok ", 3) ? json_loads(answer + 3, 0, &jerr) : NULL;
    free(answer);
    return j;
}

TestSuite(realcluster, .timeout = 1200);

/* The rig: one ZooKeeper, three ZK-mode brokers and a KRaft controller in migration mode reach dual-write, with
 * /migration recording the initial migration and /controller the KRaft leader's claim. */
Test(realcluster, rig_reaches_dual_write)
{
    rc_rig *r = start_or_skip(1);
    json_t *mig = zk_json(r, "/migration"), *ctrl = zk_json(r, "/controller");
    rc_assert(r, mig && json_integer_value(json_object_get(mig, "kraft_controller_id")) == 3000 &&
                     json_integer_value(json_object_get(mig, "kraft_metadata_offset")) > 0,
              "/migration does not record the initial migration by controller 3000");
    rc_assert(r, ctrl && json_integer_value(json_object_get(ctrl, "brokerid")) == 3000 &&
                     json_object_get(ctrl, "kraftControllerEpoch"),
              "/controller is not the KRaft controller's claim");
    char *log = rc_read_log(r, "controller", 3000);
    rc_assert(r, strstr(log, "Finished initial migration of ZK metadata to KRaft") &&
                     strstr(log, "transitioning from KRAFT_CONTROLLER_TO_BROKER_COMM to DUAL_WRITE state"),
              "the controller's log shows no completed migration");
    free(log);
    for (int i = 0; i < r->nbrokers; i++) {
        char *blog = rc_read_log(r, "broker", r->brokers[i].id);
        rc_assert(r, strstr(blog, "Starting up additional components for ZooKeeper migration"),
                  "broker %d did not start in migration", r->brokers[i].id);
        free(blog);
    }
    json_decref(mig);
    json_decref(ctrl);
    rc_rig_stop(r, false);
}

/* A failed test's logs outlive the run: rc_keep_logs copies every node's logs and configuration, not Kafka's or
 * ZooKeeper's data, out of the rig's dir (inside the run's TMPDIR, removed after the last test) to
 * $KM_RC_LOG_DIR/SUITE/TEST.  No cluster: a rig dir laid out as rig.py lays it out. */
Test(realcluster, a_failed_tests_logs_are_kept_outside_the_run_dir)
{
    char *rig = km_test_tmpdir("rcrig"), *kept_base = km_test_tmpdir("rckept"), *out = NULL;
    char sh[2048];
    snprintf(sh, sizeof sh,
             "cd '%s' && mkdir -p zookeeper-0/data broker-0/logs/t-0 controller-3000/metadata/__cluster_metadata-0 && "
             "echo zk > zookeeper-0/server.log && echo cfg > zookeeper-0/zoo.cfg && echo b > broker-0/server.log && "
             "echo p > broker-0/server.properties && echo seg > broker-0/logs/t-0/00000000000000000000.log && "
             "echo c > controller-3000/server.log && echo m > controller-3000/metadata/__cluster_metadata-0/0.log && "
             "echo snap > zookeeper-0/data/snapshot.0 && echo r > rig.log && echo k > kmproxy-a.log", rig);
    char *argv[] = {"/bin/sh", "-c", sh, NULL};
    cr_assert_eq(km_test_run(argv, NULL, 0, &out, NULL, NULL), 0, "%s", out);
    free(out);
    setenv("KM_RC_LOG_DIR", kept_base, 1);
    char kept[1200];
    cr_assert_eq(rc_keep_logs(rig, kept, sizeof kept), 0, "%s", kept);
    unsetenv("KM_RC_LOG_DIR");
    cr_assert(strstr(kept, "/realcluster/a_failed_tests_logs_are_kept_outside_the_run_dir"), "kept in %s", kept);
    const char *present[] = {"rig.log", "kmproxy-a.log", "zookeeper-0/server.log", "zookeeper-0/zoo.cfg",
                             "broker-0/server.log", "broker-0/server.properties", "controller-3000/server.log"};
    const char *absent[] = {"broker-0/logs", "controller-3000/metadata", "zookeeper-0/data"};
    char path[1400];
    for (size_t i = 0; i < sizeof present / sizeof *present; i++) {
        snprintf(path, sizeof path, "%s/%s", kept, present[i]);
        cr_expect_eq(access(path, R_OK), 0, "%s was not kept", present[i]);
    }
    for (size_t i = 0; i < sizeof absent / sizeof *absent; i++) {
        snprintf(path, sizeof path, "%s/%s", kept, absent[i]);
        cr_expect_neq(access(path, F_OK), 0, "%s (data, not logs) was copied", absent[i]);
    }
    km_test_rmtree(rig);
    km_test_rmtree(kept_base);
    free(rig);
    free(kept_base);
}

/* ---- kmproxy deployed as docs/runbook.md says, beside Kafka's own controllers ---- */

typedef struct kmp {
    pid_t pid;
    char log[600], config[600];
} kmp;

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return strdup("");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = calloc(1, (size_t)(n > 0 ? n : 0) + 1);
    if (s && n > 0 && fread(s, 1, (size_t)n, f) != (size_t)n)
        s[0] = '\0';
    fclose(f);
    return s ? s : strdup("");
}

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

/* kmproxy run: metadata.source=quorum (an observer of the real controllers), brokers.enabled=true. */
static void kmp_start(rc_rig *r, kmp *k, const char *tag, const char *extra)
{
    snprintf(k->log, sizeof k->log, "%s/kmproxy-%s.log", r->dir, tag);
    snprintf(k->config, sizeof k->config, "%s/kmproxy-%s.properties", r->dir, tag);
    FILE *f = fopen(k->config, "w");
    cr_assert(f);
    fprintf(f, "metadata.source=quorum\ncontroller.quorum.voters=%s\ncontroller.listener.names=CONTROLLER\n"
            "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT\nzookeeper.connect=%s\n"
            "brokers.enabled=true\nmetrics.listen=127.0.0.1:0\n%s", r->voters, r->zk, extra ? extra : "");
    fclose(f);
    pid_t parent = getpid();
    k->pid = fork();
    if (k->pid == 0) {
        km_test_die_with_parent(parent);
        int fd = open(k->log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        execl(km_test_binary(), "kmproxy", "run", "--config", k->config, (char *)NULL);
        _exit(127);
    }
}

static void kmp_kill(kmp *k, int sig)
{
    if (k->pid > 0) {
        kill(k->pid, sig);
        waitpid(k->pid, NULL, 0);
        k->pid = -1;
    }
}

/* Waits until kmproxy's log holds `needle` `times` times; false if it exits or the time is up. */
static bool kmp_wait_log(kmp *k, const char *needle, int times, int timeout_s)
{
    for (int i = 0; i < timeout_s * 5; i++) {
        char *log = slurp(k->log);
        bool found = count(log, needle) >= times;
        free(log);
        if (found)
            return true;
        if (k->pid > 0 && waitpid(k->pid, NULL, WNOHANG) == k->pid) {
            k->pid = -1;
            return false;
        }
        usleep(200 * 1000);
    }
    return false;
}

/* The KRaft leader's metadata log directory (ZooKeeper's /controller names it). */
static int leader_id(rc_rig *r)
{
    json_t *ctrl = zk_json(r, "/controller");
    int id = ctrl ? (int)json_integer_value(json_object_get(ctrl, "brokerid")) : -1;
    json_decref(ctrl);
    return id;
}

/* Every broker's own Metadata answer equals the image of the leader's log, and ZooKeeper equals it too
 * (`kmproxy zk diff`), within timeout_s; the last verdict in *out. */
static bool converged(rc_rig *r, int timeout_s, char **out)
{
    for (int i = 0; i < timeout_s / 2; i++) {
        free(*out);
        *out = NULL;
        int leader = leader_id(r);
        int rc = rc_sh(r, out,
                       "M=$DIR/controller-%d/metadata/__cluster_metadata-0; %s metadata image $M > $DIR/image.json "
                       "&& $JAVA -cp \"$CP:$TOOLS\" RcAdmin verify $DIR/image.json $BS 2>&1 | grep -v log4j "
                       "&& %s zk diff --zookeeper $ZK --metadata $M 2>&1 && echo CONVERGED",
                       leader, km_test_binary(), km_test_binary());
        if (rc == 0 && *out && strstr(*out, "CONVERGED"))
            return true;
        sleep(2);
    }
    return false;
}

/* Every ZK-mode broker's log dirs (DescribeLogDirs) hold exactly the replicas the image of the leader's log places
 * on it, with no reassignment under way, within timeout_s; the last verdict in *out. */
static bool log_dirs_match(rc_rig *r, int timeout_s, char **out)
{
    for (int i = 0; i < timeout_s / 2; i++) {
        free(*out);
        *out = NULL;
        int rc = rc_sh(r, out,
                       "M=$DIR/controller-%d/metadata/__cluster_metadata-0; %s metadata image $M > $DIR/image-dirs.json "
                       "&& $JAVA -cp \"$CP:$TOOLS\" RcAdmin logdirs $DIR/image-dirs.json $BS 2>&1 | grep -v log4j; "
                       "exit ${PIPESTATUS[0]}", leader_id(r), km_test_binary());
        if (rc == 0)
            return true;
        sleep(2);
    }
    return false;
}

/* `kmproxy verify --broker-config` with DIR/NAME.properties holding LINES (the daemon's broker.* keys) against the image
 * of the leader's log; its exit (-1: it never ran) and output in *out. */
static int verify_secured(rc_rig *r, const char *name, const char *lines, char **out)
{
    free(*out);
    *out = NULL;
    return rc_sh(r, out, "printf '%%s\\n' %s > $DIR/%s.properties && %s verify --metadata "
                 "$DIR/controller-%d/metadata/__cluster_metadata-0 --broker-config $DIR/%s.properties",
                 lines, name, km_test_binary(), leader_id(r), name);
}

/* Issue 26: the verifier on the brokers' secured listeners (the rig's --secure: SASL_PLAINTEXT and SASL_SSL), with
 * the daemon's broker.* keys: SCRAM-SHA-256 as alice, whose credentials the Admin API created on the KRaft side
 * (they reach the ZK-mode brokers through kmproxy's ZooKeeper writes), and PLAIN over TLS; both find every broker
 * consistent; a wrong password leaves every broker unchecked (exit 2), the broker's refusal named. */
static void verify_on_secured_listeners(rc_rig *r)
{
    const char *cert = json_string_value(json_object_get(r->ready, "tls_cert"));
    rc_assert(r, cert, "the rig has no secured listeners: %s", json_dumps(r->ready, 0));
    char *out = NULL, lines[1500];
    int rc = -1;
    time_t t0 = time(NULL);
    /* the credentials reach the brokers through ZooKeeper's change notifications: asked again while refused */
    for (int i = 0; i < 30 && (rc == -1 || (rc != 0 && strstr(out, "invalid credentials"))); i++, rc ? sleep(2) : 0)
        rc = verify_secured(r, "scram", "broker.security.protocol=SASL_PLAINTEXT broker.sasl.mechanism=SCRAM-SHA-256 "
                            "'broker.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule "
                            "required username=\"alice\" password=\"secret\";'", &out);
    char first[64]; /* the SASL_PLAINTEXT endpoint of the first broker: the one the report must name */
    snprintf(first, sizeof first, "%s", json_string_value(json_object_get(r->ready, "sasl_bootstrap")));
    first[strcspn(first, ",")] = 0;
    rc_assert(r, rc == 0 && strstr(out, first) && strstr(out, "verdict: consistent"),
              "verify over SASL_PLAINTEXT with SCRAM-SHA-256 (exit %d):\n%s", rc, out);
    fprintf(stderr, "realcluster: verify over SASL_PLAINTEXT, SCRAM-SHA-256:\n%s", out);
    snprintf(lines, sizeof lines, "broker.security.protocol=SASL_SSL broker.tls.ca.file=%s broker.sasl.mechanism=PLAIN "
             "'broker.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
             "username=\"alice\" password=\"plain-secret\";'", cert);
    rc = verify_secured(r, "tls", lines, &out);
    rc_assert(r, rc == 0 && strstr(out, "verdict: consistent"), "verify over SASL_SSL with PLAIN (exit %d):\n%s", rc,
              out);
    fprintf(stderr, "realcluster: verify over SASL_SSL, PLAIN:\n%s", out);
    rc = verify_secured(r, "wrong", "broker.security.protocol=SASL_PLAINTEXT broker.sasl.mechanism=SCRAM-SHA-256 "
                        "'broker.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule "
                        "required username=\"alice\" password=\"wrong\";'", &out);
    rc_assert(r, rc == 2 && strstr(out, "verdict: unchecked") &&
                     strstr(out, "could not check broker 0: broker 0 (127.0.0.1:") &&
                     strstr(out, "SASL/SCRAM-SHA-256 login as 'alice' failed: ") && strstr(out, "invalid credentials"),
              "verify with a wrong password (exit %d):\n%s", rc, out);
    fprintf(stderr, "realcluster: verify with a wrong password (exit 2):\n%s", out);
    fprintf(stderr, "realcluster: verify on the secured listeners took %ld s\n", (long)(time(NULL) - t0));
    free(out);
}

/* ---- a mixed cluster: one broker already restarted in KRaft mode, the others still ZK-mode ---- */

#define RC_KRAFT_BROKER 2
#define RC_KRAFT_BROKER_S "2"

/* The migration's next step, as operators take it once dual-write runs: broker 2 restarted in KRaft mode (rig.py
 * `kraft broker 2`: process.roles=broker, same node id, data and ports), brokers 0 and 1 stay ZK-mode. */
static void restart_in_kraft_mode(rc_rig *r)
{
    time_t t0 = time(NULL);
    char *ans = rc_rig_cmd(r, "kraft broker %d", RC_KRAFT_BROKER);
    rc_assert(r, ans && !strncmp(ans, "ok ", 3), "restarting broker %d in KRaft mode failed: %s", RC_KRAFT_BROKER,
              ans ? ans : "no answer");
    free(ans);
    fprintf(stderr, "realcluster: broker %d restarted in KRaft mode in %ld s\n", RC_KRAFT_BROKER,
            (long)(time(NULL) - t0));
}

/* A real producer (RcTraffic: idempotent, acks=all) writes into TOPIC (3 partitions) until 30 records are
 * acknowledged (DIR/acked-TOPIC), while its replicas are where they were created; they are read back after the
 * reassignments moved them (traffic_read_back). */
static void produce_briefly(rc_rig *r, const char *topic)
{
    char *out = NULL;
    int rc = rc_sh(r, &out, "A=$DIR/acked-%s; S=$DIR/stop-%s; touch $A; "
                   "$JAVA -cp \"$CP:$TOOLS\" RcTraffic produce $BS %s 3 $A $S > $DIR/producer-%s.log 2>&1 & "
                   "for i in $(seq 600); do [ $(wc -l < $A) -ge 30 ] && break; sleep 0.2; done; touch $S; wait; "
                   "wc -l < $A", topic, topic, topic, topic);
    rc_assert(r, rc == 0 && out && atoi(out) >= 30, "the producer into %s acknowledged too little: %s", topic,
              out ? out : "");
    free(out);
}

/* Every record acknowledged into TOPIC is read back once, in order per partition, from where it now lives. */
static void traffic_read_back(rc_rig *r, const char *topic)
{
    char *out = NULL;
    int rc = rc_sh(r, &out, "$JAVA -cp \"$CP:$TOOLS\" RcTraffic check $BS %s $DIR/acked-%s 2>&1 | grep -v log4j; "
                   "exit ${PIPESTATUS[0]}", topic, topic);
    rc_assert(r, rc == 0, "records acknowledged into %s before it moved are lost, duplicated or out of order: %s",
              topic, out ? out : "");
    fprintf(stderr, "realcluster: %s read back after its move: %s", topic, out ? out : "");
    free(out);
}

static int broker_port(const rc_rig *r, int id)
{
    for (int i = 0; i < r->nbrokers; i++)
        if (r->brokers[i].id == id)
            return r->brokers[i].port;
    return -1;
}

/* converged()'s VERDICT covered the KRaft-mode broker too: RcAdmin verify compared its own Metadata answer (it
 * learns from the KRaft log, the others from kmproxy) with the image, and the image (DIR/image.json, written by
 * converged) registers it as a KRaft broker while the others are migrating ZK-mode brokers. */
static void kraft_broker_verified(rc_rig *r, const char *verdict)
{
    char line[128], path[600];
    snprintf(line, sizeof line, "broker 127.0.0.1:%d: ", broker_port(r, RC_KRAFT_BROKER));
    const char *mine = strstr(verdict, line);
    rc_assert(r, mine && strstr(mine, " 0 differ"), "the KRaft-mode broker's Metadata was not compared: %s", verdict);
    snprintf(path, sizeof path, "%s/image.json", r->dir);
    json_error_t jerr;
    json_t *img = json_load_file(path, 0, &jerr), *b;
    size_t i;
    int kraft = 0, zk = 0;
    json_array_foreach(json_object_get(img, "brokers"), i, b) {
        bool migrating = json_is_true(json_object_get(b, "isMigratingZkBroker"));
        int id = (int)json_integer_value(json_object_get(b, "brokerId"));
        kraft += id == RC_KRAFT_BROKER && !migrating;
        zk += id != RC_KRAFT_BROKER && migrating;
    }
    json_decref(img);
    rc_assert(r, kraft == 1 && zk == r->nbrokers - 1, "the image does not show a mixed cluster (%d KRaft-mode broker "
              "%d, %d migrating ZK-mode brokers) in %s", kraft, RC_KRAFT_BROKER, zk, path);
}

/* A JSON array of ints as RcAdmin prints lists ("[2, 1, 0]") into out. */
static void int_list(json_t *arr, char *out, size_t cap)
{
    size_t len = (size_t)snprintf(out, cap, "["), n;
    json_t *id;
    json_array_foreach(arr, n, id)
        len += (size_t)snprintf(out + len, len < cap ? cap - len : 0, "%s%lld", n ? ", " : "", json_integer_value(id));
    snprintf(out + len, len < cap ? cap - len : 0, "]");
}

/* TOPIC-PARTITION's replicas, ISR (int_list) and leader in the image DIR/NAME; false when the image or the
 * partition is missing. */
static bool image_partition(rc_rig *r, const char *name, const char *topic, int partition, char *replicas,
                            char *isr, size_t cap, int *leader)
{
    char path[600];
    snprintf(path, sizeof path, "%s/%s", r->dir, name);
    json_error_t jerr;
    json_t *img = json_load_file(path, 0, &jerr), *t, *p;
    size_t i, j;
    bool found = false;
    json_array_foreach(json_object_get(img, "topics"), i, t) {
        const char *tname = json_string_value(json_object_get(t, "name"));
        if (!tname || strcmp(tname, topic))
            continue;
        json_array_foreach(json_object_get(t, "partitions"), j, p) {
            if (json_integer_value(json_object_get(p, "partitionId")) != partition)
                continue;
            int_list(json_object_get(p, "replicas"), replicas, cap);
            int_list(json_object_get(p, "isr"), isr, cap);
            *leader = (int)json_integer_value(json_object_get(p, "leader"));
            found = true;
        }
    }
    json_decref(img);
    return found;
}

/* After the reassignments (the image DIR/image-dirs.json of log_dirs_match): each of TOPIC's 3 partitions holds
 * the replicas `RcAdmin rotate` asked for (its lines "rcadmin: TOPIC-N [from] -> [to]" in MOVES), and those moves
 * include one from a ZK-mode broker onto the KRaft-mode one and one off it onto a ZK-mode broker; a-0's preferred
 * replica, the KRaft-mode broker, leads it, its ZK-mode followers still in its ISR (they follow it: they know its
 * endpoints from kmproxy's UpdateMetadata). */
static void moved_between_kinds(rc_rig *r, const char *topic, const char *moves)
{
    char want[32], got[64] = "", isr[64] = "", line[64];
    int leader = -1;
    for (int i = 0; i < 3; i++) {
        snprintf(line, sizeof line, "rcadmin: %s-%d [", topic, i);
        const char *m = strstr(moves, line), *to = m ? strstr(m, "-> ") : NULL;
        rc_assert(r, to && sscanf(to + 3, "%31[^\n]", want) == 1, "no move of %s-%d in: %s", topic, i, moves);
        bool found = image_partition(r, "image-dirs.json", topic, i, got, isr, sizeof got, &leader);
        rc_assert(r, found && !strcmp(got, want), "%s-%d has replicas %s in the image, the reassignment asked for %s",
                  topic, i, found ? got : "(none)", want);
    }
    rc_assert(r, strstr(moves, "] -> [" RC_KRAFT_BROKER_S "]") && strstr(moves, "[" RC_KRAFT_BROKER_S "] -> ["),
              "no replica of %s moved onto and off the KRaft-mode broker: %s", topic, moves);
    rc_assert(r, image_partition(r, "image-dirs.json", "a", 0, got, isr, sizeof got, &leader) &&
                     leader == RC_KRAFT_BROKER && strlen(isr) == strlen("[0, 1, 2]") &&
                     strchr(isr, '0') && strchr(isr, '1') && strchr(isr, '2'), /* in any order */
              "a-0 (replicas %s, ISR %s) is led by %d: not by its preferred replica, KRaft-mode broker %d, with both "
              "ZK-mode followers in its ISR", got, isr, leader, RC_KRAFT_BROKER);
}

/* RcAdmin with a SASL login (scram:USER:PASSWORD@ or token:FILE@, then the servers): its exit, output in *out. */
static int admin_as(rc_rig *r, const char *login, const char *servers, const char *ops, char **out)
{
    free(*out);
    *out = NULL;
    return rc_sh(r, out, "$JAVA -cp \"$CP:$TOOLS\" RcAdmin %s@%s %s 2>&1 | grep -v log4j; exit ${PIPESTATUS[0]}", login,
                 servers, ops);
}

/* /delegation_token/tokens/ID as ZooKeeper holds it ("absent" or the JSON; malloc'd). */
static char *token_znode(rc_rig *r, const char *id)
{
    char *answer = rc_rig_cmd(r, "zk /delegation_token/tokens/%s", id);
    return answer ? answer : strdup("no answer from the rig");
}

/* The token expired through the Admin API leaves ZooKeeper, and a login with it fails on the ZK-mode broker FIRST
 * and on the KRaft-mode broker KRAFT. */
static void expire_token(rc_rig *r, const char *first, const char *kraft, const char *id)
{
    char *out = NULL, *verdict = NULL;
    int rc = admin_as(r, "scram:alice:secret", first, "expire-token $DIR/token", &out);
    rc_assert(r, rc == 0, "expiring the token (exit %d):\n%s", rc, out);
    rc_assert(r, converged(r, 120, &verdict), "after the token expired, ZooKeeper or the brokers differ: %s", verdict);
    char *zn = token_znode(r, id);
    rc_assert(r, strstr(zn, "absent"), "the expired token is still in ZooKeeper: %s", zn);
    free(zn);
    const char *servers[] = {first, kraft};
    for (int s = 0; s < 2; s++) {
        int tries = 0;
        rc = 0; /* the broker drops it on ZooKeeper's change notification or the log: logged in again while accepted */
        for (; tries < 15 && rc == 0; tries++, rc ? 0 : sleep(2))
            rc = admin_as(r, "token:$DIR/token", servers[s], "list-topics", &out);
        rc_assert(r, rc != 0 && strstr(out, "Authentication failed"),
                  "the expired token still logs in on %s (exit %d):\n%s", servers[s], rc, out);
        fprintf(stderr, "realcluster: the expired token refused on %s at login %d\n", servers[s], tries);
    }
    free(out);
    free(verdict);
}

/* Logs in with the token on SERVER (SCRAM, tokenauth=true), retried while refused: the broker learns the token
 * from ZooKeeper's change notification (ZK-mode) or from the metadata log (KRaft-mode). */
static void token_logs_in(rc_rig *r, const char *server, const char *which)
{
    char *out = NULL;
    int rc = -1, tries = 0;
    for (; tries < 30 && rc != 0; tries++, rc ? sleep(2) : 0)
        rc = admin_as(r, "token:$DIR/token", server, "list-topics", &out);
    rc_assert(r, rc == 0 && strstr(out, "rcadmin: topics"), "logging in with the token on %s (exit %d):\n%s", which,
              rc, out);
    fprintf(stderr, "realcluster: logged in with the token on %s at login %d:\n%s", which, tries, out);
    free(out);
}

/* Issue 25 item 3: delegation tokens through the Admin API.  alice (SCRAM, on a ZK-mode broker's SASL_PLAINTEXT
 * listener) creates a token and renews it: the ZK-mode broker forwards both to the KRaft controller (migration),
 * kmproxy writes the token to ZooKeeper in Kafka's format (`zk diff` finds nothing), and a real client then logs in
 * with the token (SCRAM, tokenauth=true) on a ZK-mode broker, which knows it only from ZooKeeper, and on the
 * KRaft-mode broker, which knows it only from the KRaft log.  Expired, the token leaves ZooKeeper and the login
 * fails on both. */
static void delegation_tokens_through_the_admin_api(rc_rig *r)
{
    char servers[256], first[64], kraft[64], *out = NULL, *verdict = NULL, path[600], id[128] = "";
    snprintf(servers, sizeof servers, "%s", json_string_value(json_object_get(r->ready, "sasl_bootstrap")));
    snprintf(first, sizeof first, "%.*s", (int)strcspn(servers, ","), servers);
    const char *third = strrchr(servers, ','); /* brokers 0, 1, 2 in order: the last is the KRaft-mode one */
    snprintf(kraft, sizeof kraft, "%s", third ? third + 1 : "");
    time_t t0 = time(NULL);
    int rc = admin_as(r, "scram:alice:secret", first, "create-token $DIR/token", &out);
    rc_assert(r, rc == 0, "creating a delegation token as alice (exit %d):\n%s", rc, out);
    fprintf(stderr, "realcluster: delegation token through the Admin API:\n%s", out);
    /* Kafka's controller renews from its token cache, which its metadata publisher fills after the commit: a renew
     * right after the create may find no token (DelegationTokenNotFoundException) */
    for (int i = 0, again = 1; i < 15 && again; i++, again ? sleep(2) : 0) {
        rc = admin_as(r, "scram:alice:secret", first, "renew-token $DIR/token", &out);
        again = rc != 0 && strstr(out, "DelegationTokenNotFoundException");
    }
    rc_assert(r, rc == 0, "renewing the delegation token as alice (exit %d):\n%s", rc, out);
    snprintf(path, sizeof path, "%s/token", r->dir);
    FILE *f = fopen(path, "r");
    rc_assert(r, f && fscanf(f, "%127s", id) == 1, "no token id in %s:\n%s", path, out);
    fclose(f);
    fprintf(stderr, "%s", out);
    rc_assert(r, converged(r, 120, &verdict), "after the token, ZooKeeper or the brokers differ: %s", verdict);
    char *zn = token_znode(r, id);
    /* Kafka's format (DelegationTokenManagerZk): principals URL-encoded by Sanitizer */
    rc_assert(r, !strncmp(zn, "ok {", 4) && strstr(zn, "\"owner\":\"User%3Aalice\"") && strstr(zn, id),
              "/delegation_token/tokens/%s: %s", id, zn);
    fprintf(stderr, "realcluster: /delegation_token/tokens/%s: %s\n", id, zn);
    free(zn);
    token_logs_in(r, first, "ZK-mode broker 0");
    token_logs_in(r, kraft, "KRaft-mode broker " RC_KRAFT_BROKER_S);
    expire_token(r, first, kraft, id);
    fprintf(stderr, "realcluster: delegation tokens took %ld s\n", (long)(time(NULL) - t0));
    free(out);
    free(verdict);
}

/* Kafka 3.9's controller in migration mode beside kmproxy: kmproxy takes over the KRaft leader's own claim
 * (same node and epoch, a new /controller_epoch); Kafka's driver then fails its ZooKeeper writes and sends
 * nothing.  The cluster is then made mixed, as a migration in progress is: broker 2 restarted in KRaft mode, 0 and
 * 1 still ZK-mode.  Every change made through the Admin API reaches ZooKeeper and every ZK-mode broker through
 * kmproxy, and the KRaft-mode broker through the KRaft log: topics created, partitions added, a reassignment and a
 * preferred-leader election (a-0's leader moves to the KRaft-mode broker), topic and broker configs, a client
 * quota, SCRAM credentials, an ACL, a topic deleted (its logs gone from every broker).  Topic c (one replica a
 * partition, one on each broker, written by a real producer while broker 2 was still ZK-mode) is rotated: each
 * replica moves to the next broker, so one moves onto the KRaft-mode broker and one off it.  Each
 * broker's own Metadata (the KRaft-mode one's too) equals the image, its log dirs hold exactly the replicas the
 * image places on it, and every acknowledged record of c is read back from where it now lives. */
Test(realcluster, kmproxy_beside_kafka_carries_every_admin_change_to_zookeeper_and_brokers)
{
    setenv("KM_RIG_SECURE", "1", 1); /* verify_on_secured_listeners: this rig alone */
    rc_rig *r = start_or_skip(1);
    unsetenv("KM_RIG_SECURE");
    kmp k;
    kmp_start(r, &k, "a", NULL);
    rc_assert(r, kmp_wait_log(&k, "ready: active, ZooKeeper in sync", 1, 300), "kmproxy never became ready");
    char *log = slurp(k.log);
    rc_assert(r, strstr(log, "own claim at epoch") && strstr(log, "taking it over"),
              "kmproxy did not take over the KRaft leader's claim");
    free(log);
    rc_admin(r, "create-topic a 3 3 \\; create-topic b 2 3 \\; create-topic c 3 1");
    produce_briefly(r, "c");
    restart_in_kraft_mode(r);
    char *moves = NULL;
    int rc = rc_sh(r, &moves, "$JAVA -cp \"$CP:$TOOLS\" RcAdmin $BS add-partitions a 4 \\; "
                   "topic-config a retention.ms 3600000 \\; broker-config 0 message.max.bytes 2000000 \\; "
                   "quota alice producer_byte_rate 1024 \\; scram alice secret \\; acl User:bob a \\; "
                   "reassign a 0 2,1,0 \\; elect-preferred a 0 \\; rotate c 0,1,2 \\; delete-topic b 2>&1 | "
                   "grep -v log4j; exit ${PIPESTATUS[0]}");
    rc_assert(r, rc == 0, "Admin API calls in the mixed cluster failed (%d): %s", rc, moves ? moves : "");
    fprintf(stderr, "realcluster: Admin API calls in the mixed cluster:\n%s", moves);
    char *verdict = NULL;
    rc_assert(r, converged(r, 240, &verdict), "brokers or ZooKeeper differ from the image: %s", verdict);
    kraft_broker_verified(r, verdict);
    free(verdict);
    verify_on_secured_listeners(r);
    delegation_tokens_through_the_admin_api(r);
    char *out = NULL;
    bool gone = false;
    for (int i = 0; i < 60 && !gone; i++, sleep(2)) {
        free(out);
        out = NULL;
        gone = rc_sh(r, &out, "ls -d $DIR/broker-*/logs/b-* 2>/dev/null | wc -l") == 0 && out && atoi(out) == 0;
    }
    rc_assert(r, gone, "the deleted topic's logs are still on the brokers: %s", out);
    time_t dirs_t0 = time(NULL);
    rc_assert(r, log_dirs_match(r, 240, &out), "a broker's log dirs differ from the image: %s", out);
    rc_assert(r, strstr(out, "broker " RC_KRAFT_BROKER_S ": "), "the KRaft-mode broker's log dirs were not "
              "described: %s", out);
    fprintf(stderr, "realcluster: log dirs equal the image after %ld s:\n%s", (long)(time(NULL) - dirs_t0), out);
    free(out);
    moved_between_kinds(r, "c", moves);
    free(moves);
    traffic_read_back(r, "c");
    /* Kafka's own driver: fenced by kmproxy's /controller_epoch, it wrote nothing and sent nothing */
    char *clog = rc_read_log(r, "controller", 3000);
    rc_assert(r, count(clog, "Claimed ZK controller leadership") == 1 &&
                     (strstr(clog, "Encountered ZooKeeper error during event MetadataChangeEvent") ||
                      strstr(clog, "ControllerMovedException")),
              "Kafka's driver was not fenced by kmproxy's claim");
    free(clog);
    kmp_kill(&k, SIGTERM);
    rc_rig_stop(r, false);
}

/* ---- faults with traffic: a KRaft leader change, kmproxy HA failover, a ZK-mode broker restarted ---- */

static pid_t spawn_sh(rc_rig *r, const char *line)
{
    setenv("CP", r->classpath, 1);
    setenv("TOOLS", r->tools, 1);
    setenv("BS", r->bootstrap, 1);
    setenv("DIR", r->dir, 1);
    pid_t parent = getpid(), pid = fork();
    if (pid == 0) {
        km_test_die_with_parent(parent);
        execl("/bin/bash", "bash", "-c", line, (char *)NULL); /* `exec` in line: the JVM keeps the death signal */
        _exit(127);
    }
    return pid;
}

static int total_count(kmp *ks, int n, const char *needle)
{
    int total = 0;
    for (int i = 0; i < n; i++) {
        char *log = slurp(ks[i].log);
        total += count(log, needle);
        free(log);
    }
    return total;
}

/* The index of the instance that last became active (its log's latest "is now the active one"), -1: none. */
static int active_instance(kmp *ks, int n, int timeout_s)
{
    for (int t = 0; t < timeout_s * 2; t++, usleep(500 * 1000)) {
        for (int i = 0; i < n; i++) {
            if (ks[i].pid <= 0)
                continue;
            char *log = slurp(ks[i].log);
            const char *act = strstr(log, "is now the active one");
            bool synced = act && strstr(act, "zk: in sync; sending to ZK-mode brokers");
            free(log);
            if (synced)
                return i;
        }
    }
    return -1;
}

/* /controller's KRaft epoch (-1: none). */
static int kraft_epoch(rc_rig *r)
{
    json_t *ctrl = zk_json(r, "/controller");
    int e = ctrl ? (int)json_integer_value(json_object_get(ctrl, "kraftControllerEpoch")) : -1;
    json_decref(ctrl);
    return e;
}

/* After the KRaft leader was killed: kmproxy holds ZooKeeper for the new leader - /controller names another node at
 * a newer KRaft epoch and kmproxy finished a claim since (`claims` counted before the kill). Either kmproxy took
 * over the new leader's own claim ("taking it over"), or it claimed first and the new leader's driver then could
 * not ("Unable to claim leadership"): both leave kmproxy the only writer. */
static bool claimed_for_new_leader(rc_rig *r, kmp *ks, int n, int claims, int old_leader, int old_epoch)
{
    for (int t = 0; t < 600; t++, usleep(500 * 1000)) {
        int alive = 0;
        for (int i = 0; i < n; i++)
            if (ks[i].pid > 0 && waitpid(ks[i].pid, NULL, WNOHANG) == ks[i].pid)
                ks[i].pid = -1;
            else if (ks[i].pid > 0)
                alive++;
        if (!alive)
            return false;
        if (total_count(ks, n, "zk: in sync; sending to ZK-mode brokers") > claims && leader_id(r) != old_leader &&
            kraft_epoch(r) > old_epoch)
            return true;
    }
    return false;
}

/* A real producer (idempotent, acks=all) writes throughout; kmproxy runs as two HA instances beside three
 * KRaft controllers.  The active controller is killed (kmproxy claims for the new KRaft leader: it takes the
 * leader's own claim over, or claims first), the active kmproxy instance is killed with SIGKILL (the standby takes over), a ZK-mode broker is
 * restarted; after each, an Admin API change reaches ZooKeeper and every broker.  At the end a consumer reads
 * back every acknowledged record exactly once, in order per partition. */
Test(realcluster, leader_change_ha_failover_and_broker_restart_lose_nothing_acknowledged)
{
    rc_rig *r = start_or_skip(3);
    kmp ks[2];
    kmp_start(r, &ks[0], "ha0", "ha.enabled=true\nzookeeper.session.timeout.ms=6000\n");
    kmp_start(r, &ks[1], "ha1", "ha.enabled=true\nzookeeper.session.timeout.ms=6000\n");
    int a = active_instance(ks, 2, 300);
    rc_assert(r, a >= 0, "no kmproxy instance became active");
    rc_admin(r, "create-topic t 3 3");
    char *verdict = NULL;
    rc_assert(r, converged(r, 240, &verdict), "before the faults: %s", verdict);
    char line[2048];
    snprintf(line, sizeof line, "exec $JAVA -cp \"$CP:$TOOLS\" RcTraffic produce $BS t 3 $DIR/acked $DIR/stop "
             ">$DIR/producer.log 2>&1");
    pid_t producer = spawn_sh(r, line);

    /* a KRaft leader change: the new leader's driver claims ZooKeeper, kmproxy takes that claim over */
    int claims = total_count(ks, 2, "zk: in sync; sending to ZK-mode brokers");
    int old_leader = leader_id(r), old_epoch = kraft_epoch(r);
    free(rc_rig_cmd(r, "kill controller %d", old_leader));
    rc_assert(r, claimed_for_new_leader(r, ks, 2, claims, old_leader, old_epoch),
              "kmproxy holds no claim for the new KRaft leader after controller %d was killed", old_leader);
    rc_admin(r, "create-topic after-election 2 3");
    rc_assert(r, converged(r, 240, &verdict), "after the KRaft leader change: %s", verdict);

    /* kmproxy HA failover */
    a = active_instance(ks, 2, 60);
    rc_assert(r, a >= 0, "no active kmproxy instance before the failover");
    kmp_kill(&ks[a], SIGKILL);
    rc_assert(r, active_instance(ks, 2, 300) == 1 - a, "the standby did not take over");
    rc_admin(r, "create-topic after-failover 2 3");
    rc_assert(r, converged(r, 240, &verdict), "after the kmproxy failover: %s", verdict);

    /* a ZK-mode broker restarted */
    char *answer = rc_rig_cmd(r, "stop broker 1");
    free(answer);
    answer = rc_rig_cmd(r, "start broker 1");
    rc_assert(r, answer && !strncmp(answer, "ok", 2), "broker 1 did not start again: %s", answer);
    free(answer);
    rc_admin(r, "create-topic after-restart 2 3");
    rc_assert(r, converged(r, 300, &verdict), "after the broker restart: %s", verdict);
    free(verdict);

    /* the producer stops; everything acknowledged is read back once, in order */
    char *out = NULL;
    rc_sh(r, &out, "touch $DIR/stop");
    free(out);
    waitpid(producer, NULL, 0);
    out = NULL;
    int rc = rc_sh(r, &out, "$JAVA -cp \"$CP:$TOOLS\" RcTraffic check $BS t $DIR/acked 2>&1 | grep -v log4j; "
                   "exit ${PIPESTATUS[0]}");
    fprintf(stderr, "realcluster: traffic: %s", out ? out : "");
    rc_assert(r, rc == 0, "acknowledged records lost, duplicated or out of order: %s", out);
    free(out);
    for (int i = 0; i < 2; i++)
        kmp_kill(&ks[i], SIGTERM);
    rc_rig_stop(r, false);
}

/* One kmproxy instance (no HA) beside three controllers: every KRaft election has the new leader's driver claim
 * ZooKeeper, which fences kmproxy's writer, often before kmproxy's observer has heard of the new leader. kmproxy
 * must not exit then (before: `stopping: ZooKeeper mirror stopped: ... another controller claimed ZooKeeper`):
 * it claims again for the new leader, and changes keep reaching ZooKeeper and the brokers. */
Test(realcluster, a_single_instance_survives_kraft_elections)
{
    rc_rig *r = start_or_skip(3);
    kmp k;
    kmp_start(r, &k, "single", NULL);
    rc_assert(r, kmp_wait_log(&k, "ready: active, ZooKeeper in sync", 1, 300), "kmproxy never became ready");
    for (int round = 0; round < 2; round++) {
        int claims = total_count(&k, 1, "zk: in sync; sending to ZK-mode brokers");
        int old_leader = leader_id(r), old_epoch = kraft_epoch(r);
        free(rc_rig_cmd(r, "kill controller %d", old_leader));
        bool claimed = claimed_for_new_leader(r, &k, 1, claims, old_leader, old_epoch);
        rc_assert(r, k.pid > 0, "kmproxy exited at the KRaft election of round %d", round);
        rc_assert(r, claimed, "round %d: kmproxy holds no claim for the new KRaft leader", round);
        char topic[64], ops[128], *verdict = NULL;
        snprintf(topic, sizeof topic, "round-%d", round);
        snprintf(ops, sizeof ops, "create-topic %s 2 3", topic);
        rc_admin(r, ops);
        rc_assert(r, converged(r, 240, &verdict), "round %d: %s", round, verdict);
        free(verdict);
        free(rc_rig_cmd(r, "start controller %d", old_leader)); /* the quorum needs two of three next round */
    }
    kmp_kill(&k, SIGTERM);
    rc_rig_stop(r, false);
}
