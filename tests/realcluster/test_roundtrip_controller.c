/* test_roundtrip_controller.c - the round trip through a whole fresh KRaft controller (issue 25 item 4,
 * docs/realcluster.md "Round trip"): `kmproxy zk sync` writes an image into the empty ZooKeeper of a rig
 * (tests/realcluster/rig.py --before-kafka) before any Kafka process starts; then one real Kafka 3.9.2 KRaft
 * controller in migration mode and one real ZK-mode broker start on it, the controller's KRaftMigrationDriver
 * migrates that ZooKeeper into its new metadata log and reaches DUAL_WRITE, and RoundTrip.java --compare-log
 * compares the image of the controller's own __cluster_metadata-0 log with the input's image.
 * test_roundtrip compares Kafka's ZooKeeper reader alone over many inputs; this suite shows the whole migration
 * on one: the log RoundTrip writes with Kafka's writer holding password configs (encrypted by zk sync, decoded by
 * the controller with its password.encoder.secret), its partition on the one broker the rig starts (the driver
 * waits for every broker a partition names to register).  Skips saying why without Java or the jar cache (fails
 * instead under CI or KM_REQUIRE_REALKAFKA=1). */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "km_testsupport.h"
#include "rc_rig.h"

#define SECRET "round-trip-secret"

/* Before Kafka starts: the input (Kafka's writer), zk sync of it, then RoundTrip --as-zk-cluster takes away
 * sync's claim (/controller, /migration) so that ZooKeeper reads as a ZK-mode cluster's before its migration. */
static char *before_kafka(const char *dir)
{
    char *cmd = NULL;
    cr_assert(asprintf(&cmd,
                       "set -e; D='%s'; printf '" SECRET "\\n' >\"$D/secret\"; "
                       "J='java -Xmx128m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Dlog4j.configuration=file:/dev/null'; "
                       "$J -cp \"$KM_RIG_CP\" RoundTrip --write-password-log \"$D/input/00000000000000000000.log\" 1; "
                       "'%s' zk sync --force --zookeeper \"$KM_RIG_ZK\" --metadata \"$D/input/00000000000000000000.log\" "
                       "--password-encoder-secret-file \"$D/secret\" --cluster-id \"$KM_RIG_CLUSTER_ID\"; "
                       "$J -cp \"$KM_RIG_CP\" RoundTrip --as-zk-cluster \"$KM_RIG_ZK\"",
                       dir, km_test_binary()) > 0);
    return cmd;
}

Test(roundtrip_controller, a_fresh_kraft_controller_migrates_what_zk_sync_wrote_into_the_same_image, .timeout = 900)
{
    rc_cache_or_skip();
    char *dir = km_test_tmpdir("roundtrip-ctl"), *cmd = before_kafka(dir), why[8192];
    const char *extra[] = {"--broker-ids", "1", "--controller-prop", "password.encoder.secret=" SECRET,
                           "--before-kafka", cmd, NULL};
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    rc_rig *r = rc_rig_start_with(1, extra, why, sizeof why);
    cr_assert(r, "the controller did not migrate the synced ZooKeeper to dual-write: %s", why);
    int ctl = r->controllers[0].id;
    /* A clean stop first: the log read is the controller's whole, flushed log, not one it is still appending to. */
    char *answer = rc_rig_cmd(r, "stop controller %d", ctl);
    rc_assert(r, answer && !strncmp(answer, "ok", 2), "stopping controller %d: %s", ctl, answer ? answer : "(rig gone)");
    free(answer);
    char *out = NULL;
    int rc = rc_sh(r, &out, "java -Xmx256m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Dlog4j.configuration=file:/dev/null "
                            "-cp \"$TOOLS:$CP\" RoundTrip --compare-log '%s/input/00000000000000000000.log' "
                            "'%s/metadata/__cluster_metadata-0'", dir, r->controllers[0].dir);
    const char *sum = out ? strstr(out, "files=") : NULL;
    rc_assert(r, sum, "RoundTrip --compare-log gave no summary (exit %d): %.8000s", rc, out ? out : "");
    cr_log_info("round trip through controller %d: %.*s", ctl, (int)strcspn(sum, "\n"), sum);
    for (const char *l = strstr(out, "NORMALISED "); l; l = strstr(l + 1, "\nNORMALISED "))
        cr_log_info("%.*s", (int)strcspn(l + (*l == '\n'), "\n"), l + (*l == '\n'));
    rc_assert(r, rc == 0, "the controller's log differs from the source image (exit %d):\n%.8000s", rc, out);
    int topics = -1, passwords = -1, brokers = -1;
    const char *at;
    if ((at = strstr(sum, " topics=")))
        sscanf(at, " topics=%d", &topics);
    if ((at = strstr(sum, "password_config_keys=")))
        sscanf(at, "password_config_keys=%d", &passwords);
    if ((at = strstr(sum, "controller_brokers=")))
        sscanf(at, "controller_brokers=%d", &brokers);
    rc_assert(r, topics == 1 && passwords == 3 && brokers == 1,
              "compared %d topics, %d password configs, %d registered brokers; want 1, 3, 1: %.*s", topics, passwords,
              brokers, (int)strcspn(sum, "\n"), sum);
    rc_rig_stop(r, false);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    cr_log_info("round trip through a fresh controller: %.1f s", (double)(t1.tv_sec - t0.tv_sec) +
                                                                    (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
    free(out);
    free(cmd);
    km_test_rmtree(dir);
    free(dir);
}
