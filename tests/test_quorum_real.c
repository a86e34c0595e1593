/* test_quorum_real.c - the observer scenarios against Kafka 3.9's own KRaft leader
 * (../shared/realkafka bin/raft-leader), the same ones test_quorum_cli/_fetch/_faults run against
 * raftsim: `metadata dump --bootstrap-server` without a snapshot, with the leader's snapshot at
 * several points and after a resignation, a wrong cluster id, and `metadata quorum`.  Each runs
 * RK_ROUNDS times in a row and every dump must equal what the leader holds record for record
 * (bin/compare-dump).  Skips, saying why, without the kit or Java. */
#include "test_quorum_real_util.h"
#include "km_testsupport.h"

#include <criterion/criterion.h>
#include <inttypes.h>
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
