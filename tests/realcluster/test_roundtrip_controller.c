/* test_roundtrip_controller.c - the round trip through a whole fresh KRaft controller (issue 25 item 4,
 * docs/realcluster.md "Round trip"): `kmproxy zk sync` writes an image into the empty ZooKeeper of a rig
 * (tests/realcluster/rig.py --before-kafka) before any Kafka process starts; then one real Kafka 3.9.2 KRaft
 * controller in migration mode and the real ZK-mode brokers the input's partitions name (the driver waits for each
 * to register) start on it; the controller's KRaftMigrationDriver migrates that ZooKeeper into its new metadata log
 * and reaches DUAL_WRITE, and RoundTrip.java --compare-log compares the image of the controller's own
 * __cluster_metadata-0 log, up to the migration's end, with the input's image.  test_roundtrip runs Kafka's
 * ZooKeeper reader alone over many inputs; this suite runs the whole migration on two: the log RoundTrip writes
 * with Kafka's writer (password configs encrypted by zk sync and decoded by the controller with its
 * password.encoder.secret, a quota, SCRAM, an ACL, a delegation token; one broker) and, with realkafka's kit,
 * gen-coverage's log (three brokers).  Skips saying why without Java or the jar cache (fails instead under CI or
 * KM_REQUIRE_REALKAFKA=1). */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "km_testsupport.h"
#include "rc_rig.h"
#include "realkafka_util.h"

#define SECRET "round-trip-secret"
#define LOG0 "00000000000000000000.log"

/* One input: the shell lines that write DIR/input/LOG0 (before Kafka starts; $KM_RIG_CP, $J set), the brokers its
 * partitions name (the migration driver waits for each to register), and what the comparison must have seen. */
typedef struct input {
    const char *name, *write, *broker_ids;
    int topics, passwords, brokers, quotas, scram, acls, tokens;
} input;

/* Before Kafka starts: the input, zk sync of it, then RoundTrip --as-zk-cluster makes sync's claim one a fresh
 * quorum migrates (/migration removed, /controller a KRaft claim of epoch 0). */
static char *before_kafka(const char *dir, const input *in)
{
    char *cmd = NULL;
    cr_assert(asprintf(&cmd,
                       "set -e; D='%s'; printf '" SECRET "\\n' >\"$D/secret\"; "
                       "J='java -Xmx128m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Dlog4j.configuration=file:/dev/null'; "
                       "%s; '%s' zk sync --force --zookeeper \"$KM_RIG_ZK\" --metadata \"$D/input/" LOG0 "\" "
                       "--password-encoder-secret-file \"$D/secret\" --cluster-id \"$KM_RIG_CLUSTER_ID\"; "
                       "$J -cp \"$KM_RIG_CP\" RoundTrip --as-zk-cluster \"$KM_RIG_ZK\"",
                       dir, in->write, km_test_binary()) > 0);
    return cmd;
}

static int summary_int(const char *sum, const char *key)
{
    int v = -1;
    char pat[64];
    snprintf(pat, sizeof pat, " %s=", key);
    const char *at = strstr(sum, pat);
    if (at)
        sscanf(at + strlen(pat), "%d", &v);
    return v;
}

/* The controller stopped cleanly first: the log read is its whole, flushed log, not one it is still appending to. */
static void compare(rc_rig *r, const char *dir, const input *in)
{
    int ctl = r->controllers[0].id;
    char *answer = rc_rig_cmd(r, "stop controller %d", ctl);
    rc_assert(r, answer && !strncmp(answer, "ok", 2), "stopping controller %d: %s", ctl, answer ? answer : "(rig gone)");
    free(answer);
    char *log = rc_read_log(r, "controller", ctl);
    /* Kafka's fault handlers log and carry on: a migration or publishing fault would not stop dual-write. */
    rc_assert(r, !strstr(log, "Encountered zk migration fault") && !strstr(log, "Encountered metadata publishing fault"),
              "controller %d logged a fault while migrating %s", ctl, in->name);
    free(log);
    char *out = NULL;
    int rc = rc_sh(r, &out, "$JAVA -Xmx256m -cp \"$TOOLS:$CP\" RoundTrip --compare-log '%s/input/" LOG0 "' "
                            "'%s/metadata/__cluster_metadata-0'", dir, r->controllers[0].dir);
    const char *sum = out ? strstr(out, "files=") : NULL;
    rc_assert(r, sum, "RoundTrip --compare-log gave no summary (exit %d): %.8000s", rc, out ? out : "");
    cr_log_info("%s through controller %d: %.*s", in->name, ctl, (int)strcspn(sum, "\n"), sum);
    for (const char *l = strstr(out, "NORMALISED "); l; l = strstr(l + 1, "\nNORMALISED "))
        cr_log_info("%.*s", (int)strcspn(l + (*l == '\n'), "\n"), l + (*l == '\n'));
    rc_assert(r, rc == 0, "%s: the controller's log differs from the source image (exit %d):\n%.8000s", in->name, rc, out);
    /* What was compared (the source's counts): each kind the input holds went through the controller. */
    const char *keys[] = {"topics", "password_config_keys", "controller_brokers", "quota_entities",
                          "scram_credentials", "acls", "delegation_tokens"};
    const int want[] = {in->topics, in->passwords, in->brokers, in->quotas, in->scram, in->acls, in->tokens};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
        int got = summary_int(sum, keys[i]);
        rc_assert(r, got == want[i] || (want[i] == 0 && got < 0), "%s: compared %s=%d, want %d: %.*s", in->name,
                  keys[i], got, want[i], (int)strcspn(sum, "\n"), sum);
    }
    free(out);
}

static void round_trip(const input *in)
{
    char *dir = km_test_tmpdir("roundtrip-ctl"), *cmd = before_kafka(dir, in), why[8192], ids[64];
    snprintf(ids, sizeof ids, "%s", in->broker_ids);
    /* The password configs are decoded with the brokers' secret; a cluster with delegation tokens has a key. */
    const char *extra[] = {"--broker-ids", ids, "--controller-prop", "password.encoder.secret=" SECRET,
                           "--controller-prop", "delegation.token.secret.key=round-trip-token-key",
                           "--before-kafka", cmd, NULL};
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    rc_rig *r = rc_rig_start_with(1, extra, why, sizeof why);
    cr_assert(r, "%s: the controller did not migrate the synced ZooKeeper to dual-write: %s", in->name, why);
    compare(r, dir, in);
    rc_rig_stop(r, false);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    cr_log_info("%s: round trip through a fresh controller in %.1f s", in->name,
                (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
    free(cmd);
    km_test_rmtree(dir);
    free(dir);
}

/* RoundTrip's password log (a topic, password and plain configs, producer ids, a client quota, a SCRAM credential,
 * an ACL, a delegation token), its partition on broker 1: every kind, without ../shared. */
Test(roundtrip_controller, a_fresh_kraft_controller_migrates_the_password_configs_zk_sync_wrote, .timeout = 900)
{
    rc_cache_or_skip();
    const input in = {"the password log", "$J -cp \"$KM_RIG_CP\" RoundTrip --write-password-log \"$D/input/" LOG0 "\" 1",
                      "1", 1, 3, 1, 1, 1, 1, 1};
    round_trip(&in);
}

/* gen-coverage's log (topics with a reassignment and an offline partition, quotas, SCRAM, ACLs, a delegation
 * token, producer ids) on brokers 1, 2 and 3: only with realkafka's kit (../shared), which a fresh clone lacks. */
Test(roundtrip_controller, a_fresh_kraft_controller_migrates_gen_coverages_image_zk_sync_wrote, .timeout = 900)
{
    rc_cache_or_skip();
    char why[1024], write[1400];
    const char *kit = rk_kit(why, sizeof why);
    if (!kit) {
        cr_log_info("gen-coverage's round trip through a controller left out: %s", why);
        return;
    }
    snprintf(write, sizeof write, "'%s/bin/gen-coverage' \"$D/gen\" >/dev/null; mkdir -p \"$D/input\"; "
             "cp \"$D/gen/" LOG0 "\" \"$D/input/\"", kit);
    const input in = {"gen-coverage's log", write, "1,2,3", 3, 0, 3, 4, 2, 2, 1};
    round_trip(&in);
}
