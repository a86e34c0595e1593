/* test_kafka21062.c - KAFKA-21062 on real Kafka 3.9.2, without kmproxy (issue 26 part 1, docs/kafka21062.md).
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "km_testsupport.h"
#include "rc_rig.h"

#define DRIVER_FAILS "Encountered ZooKeeper error during event MetadataChangeEvent"
#define BADVERSION "BadVersion for /migration"
#define MBEAN_LAG "kafka.controller:type=KafkaController,name=ZkWriteBehindLag"
#define MBEAN_APPLIED "kafka.controller:type=KafkaController,name=LastAppliedRecordOffset"

/* Asserts with every log's tail in the message; the logs stay on disk. */
#define rc_assert(r, cond, ...)                                                                                   \
    do {                                                                                                          \
        if (!(cond)) {                                                                                            \
            char *tails_ = rc_rig_tails((r), 40);                                                                 \
            char msg_[2048];                                                                                      \
            snprintf(msg_, sizeof msg_, __VA_ARGS__);                                                             \
            rc_rig_stop((r), true);                                                                               \
            cr_assert_fail("%s\n%s", msg_, tails_ ? tails_ : "");                                                 \
        }                                                                                                         \
    } while (0)

/* A rig whose controllers reach ZooKeeper through the fault proxy. */
static rc_rig *start_faulty_or_skip(void)
{
    if (!rc_cache_or_skip())
        return NULL;
    char why[16384];
    setenv("KM_RIG_ZK_FAULT", "1", 1);
    rc_rig *r = rc_rig_start(1, why, sizeof why);
    unsetenv("KM_RIG_ZK_FAULT");
    cr_assert(r, "%s", why);
    return r;
}

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
    rc_rig_stop(r, false);
}
