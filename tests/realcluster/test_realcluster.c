/* test_realcluster.c - a real Kafka 3.9 cluster in migration (rc_rig.h): the rig itself, what Kafka's own
 * KRaftMigrationDriver does beside another ZooKeeper writer, and kmproxy deployed as docs/runbook.md says. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* Asserts with every log's tail in the message; the logs stay on disk. */
#define rc_assert(r, cond, ...)                                                                                   \
    do {                                                                                                          \
        if (!(cond)) {                                                                                            \
            char *tails_ = rc_rig_tails((r), 40);                                                                 \
            char msg_[2048];                                                                                      \
            snprintf(msg_, sizeof msg_, __VA_ARGS__);                                                             \
            rc_rig_stop((r), true);                                                                               \
            cr_assert_fail("%s\n%s", msg_, tails_ ? tails_ : "");                                                       \
        }                                                                                                         \
    } while (0)

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
