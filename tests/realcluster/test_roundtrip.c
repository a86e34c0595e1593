/* test_roundtrip.c - the round trip of an image through ZooKeeper and Kafka 3.9.2's own ZooKeeper reader (issue 25
 * item 4, docs/realcluster.md "Round trip"): `kmproxy zk sync` writes each input into its own chroot of one empty
 * real ZooKeeper, then tests/realcluster/java/RoundTrip.java (one JVM for all inputs) reads each chroot with
 * ZkMigrationClient.readAllMetadata and compares the image those records make with the input's image as Kafka's
 * own classes read it.  Inputs: the log and snapshot of realkafka's bin/gen-coverage (plain and with bulk topics),
 * a log RoundTrip writes with Kafka's writer holding password configs, and every corpus file whose log carries a
 * ZkMigrationState record.  A DIFF line is allowed only when roundtrip.expected lists it (known differences).
 * Skips saying why without Java or the jar cache (fails instead under CI or KM_REQUIRE_REALKAFKA=1); without ../shared
 * it runs on the password log alone and logs the inputs it left out.  A second test checks RoundTrip's cut of a
 * controller's log at the migration's end, which test_roundtrip_controller relies on. */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "km_testsupport.h"
#include "rc_rig.h"
#include "realkafka_util.h"
#include "zkserver.h"

#define MAX_INPUTS 128

typedef struct inputs { char *v[MAX_INPUTS]; int n; } inputs;

/* Runs a shell command line with $CP (the jar cache's jars), $K (realkafka's kit), $D (the test's dir) set. */
static int sh(const char *cache, const char *kit, const char *dir, char **out, const char *cmd)
{
    char *full = NULL;
    cr_assert(asprintf(&full, "CP=$(ls '%s'/lib/*.jar | tr '\\n' :) K='%s' D='%s'; %s 2>&1", cache, kit ? kit : "", dir,
                       cmd) > 0);
    char *argv[] = {"/bin/sh", "-c", full, NULL};
    size_t n = 0;
    int rc = km_test_run(argv, NULL, 0, out, &n, NULL);
    free(full);
    return rc;
}

static void add(inputs *in, const char *path)
{
    cr_assert(in->n < MAX_INPUTS);
    in->v[in->n++] = strdup(path);
}

/* gen-coverage's log and snapshot, plain and with bulk topics (one compression: it does not reach ZooKeeper). */
static void generated(const char *cache, const char *kit, const char *dir, inputs *in)
{
    char *out = NULL;
    int rc = sh(cache, kit, dir, &out,
                "\"$K/bin/gen-coverage\" \"$D/gen\" >/dev/null && \"$K/bin/gen-coverage\" \"$D/bulk\" --bulk-topics 40 "
                "--bulk-partitions 5 >/dev/null && ls \"$D\"/gen/* \"$D\"/bulk/*");
    cr_assert(rc == 0 && out, "gen-coverage failed (%d): %.2000s", rc, out ? out : "");
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n"))
        if (strstr(line, ".log") || strstr(line, ".checkpoint"))
            add(in, line);
    free(out);
    cr_assert_eq(in->n, 4, "gen-coverage wrote %d files, not two logs and two snapshots", in->n);
}

/* Corpus KRaft files whose log carries a ZkMigrationState record (realkafka_util.c). */
static void corpus(inputs *in)
{
    char **files = NULL;
    int n = rk_corpus_migration_files(&files);
    cr_assert_geq(n, 0, "%s/corpus/MANIFEST.tsv: cannot open", km_test_shared_dir());
    for (int i = 0; i < n; i++) {
        add(in, files[i]);
        free(files[i]);
    }
    free(files);
}

/* zk sync of one input into HOSTS/rtN; --force: the corpus's images never asked for a migration, and what is
 * compared here is what lands in ZooKeeper, not sync's guards (tests/test_zk_sync.c has those). */
static void sync_one(const char *hosts, int i, const char *file, const char *secret)
{
    char zk[512];
    snprintf(zk, sizeof zk, "%s/rt%d", hosts, i);
    char *argv[] = {(char *)km_test_binary(), "zk", "sync", "--force", "--zookeeper", zk, "--metadata", (char *)file,
                    "--password-encoder-secret-file", (char *)secret, NULL};
    char *out = NULL, *err = NULL;
    size_t n = 0;
    int rc = km_test_run(argv, NULL, 0, &out, &n, &err);
    cr_assert_eq(rc, 0, "zk sync of %s: exit %d: %s %s", file, rc, out ? out : "", err ? err : "");
    free(out);
    free(err);
}

/* Every DIFF line of the tool's output is listed (as a substring) in roundtrip.expected; the unlisted ones. */
static char *unexpected(const char *output)
{
    char path[4096], known[64][512];
    int nknown = 0;
    snprintf(path, sizeof path, "%s/tests/realcluster/roundtrip.expected", km_test_source_dir());
    FILE *f = fopen(path, "r");
    cr_assert(f, "%s: cannot open", path);
    while (nknown < 64 && fgets(known[nknown], sizeof known[0], f)) {
        known[nknown][strcspn(known[nknown], "\n")] = 0;
        if (known[nknown][0] && known[nknown][0] != '#')
            nknown++;
    }
    fclose(f);
    size_t cap = strlen(output) + 1, len = 0;
    char *bad = calloc(1, cap), *copy = strdup(output);
    for (char *line = strtok(copy, "\n"); line; line = strtok(NULL, "\n")) {
        if (strncmp(line, "DIFF ", 5))
            continue;
        bool listed = false;
        for (int k = 0; k < nknown && !listed; k++)
            listed = strstr(line, known[k]) != NULL;
        if (!listed)
            len += (size_t)snprintf(bad + len, cap - len, "%s\n", line);
    }
    free(copy);
    return bad;
}

Test(roundtrip, kafkas_zookeeper_reader_reads_back_the_image_kmproxy_synced, .timeout = 600)
{
    const char *cache = rc_cache_or_skip();
    char why[1024];
    /* ../shared is reference material a fresh clone may not have: without it the round trip still runs on the
     * log RoundTrip writes with Kafka's own writer (Maven's jars only) and says which inputs it left out. */
    const char *kit = rk_kit(why, sizeof why);
    if (!kit)
        cr_log_info("round trip without gen-coverage's logs: %s", why);
    char manifest[4096];
    snprintf(manifest, sizeof manifest, "%s/corpus/MANIFEST.tsv", km_test_shared_dir());
    bool have_corpus = access(manifest, R_OK) == 0;
    if (!have_corpus)
        cr_log_info("round trip without the corpus's logs: %s absent", manifest);

    char *dir = km_test_tmpdir("roundtrip"), *out = NULL, cmdline[8192];
    snprintf(cmdline, sizeof cmdline,
             "mkdir \"$D/classes\" && javac -nowarn -d \"$D/classes\" -cp \"$CP\" '%s/tests/realcluster/java/RoundTrip.java'"
             " && printf 'round-trip-secret\\n' >\"$D/secret\" && java -cp \"$D/classes:$CP\" RoundTrip "
             "--write-password-log \"$D/passwords/00000000000000000000.log\"", km_test_source_dir());
    int rc = sh(cache, kit, dir, &out, cmdline);
    cr_assert_eq(rc, 0, "compiling RoundTrip or writing its password log: %.4000s", out ? out : "");
    free(out);
    inputs in = {.n = 0};
    if (kit)
        generated(cache, kit, dir, &in);
    char pwlog[4300];
    snprintf(pwlog, sizeof pwlog, "%s/passwords/00000000000000000000.log", dir);
    add(&in, pwlog);
    if (have_corpus)
        corpus(&in);
    cr_assert_gt(in.n, have_corpus ? 5 : 0, "only %d inputs", in.n);

    char err[512] = "";
    km_zks *zs = km_zks_start(1, NULL, 0, err, sizeof err);
    cr_assert(zs, "ZooKeeper: %s", err);
    const char *hosts = km_zks_hosts(zs, 0);
    char secret[4300];
    snprintf(secret, sizeof secret, "%s/secret", dir);
    size_t cap = 64 + (size_t)in.n * 4400;
    char *cmd = malloc(cap);
    size_t len = (size_t)snprintf(cmd, cap, "java -Xmx256m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC "
                                  "-Dlog4j.configuration=file:/dev/null -cp \"$D/classes:$CP\" RoundTrip \"$D/secret\" %s",
                                  hosts);
    for (int i = 0; i < in.n; i++) {
        sync_one(hosts, i, in.v[i], secret);
        len += (size_t)snprintf(cmd + len, cap - len, " '%s' /rt%d", in.v[i], i);
    }
    rc = sh(cache, kit, dir, &out, cmd);
    km_zks_stop(zs);
    cr_assert(out);
    const char *sum = strstr(out, "files=");
    cr_assert(sum, "RoundTrip gave no summary (exit %d): %.8000s", rc, out);
    cr_log_info("round trip: %.*s", (int)strcspn(sum, "\n"), sum);
    for (const char *l = strstr(out, "NORMALISED "); l; l = strstr(l + 1, "\nNORMALISED "))
        cr_log_info("%.*s", (int)strcspn(l + (*l == '\n'), "\n"), l + (*l == '\n'));
    cr_assert(rc == 0 || rc == 1, "RoundTrip could not compare (exit %d): %.8000s", rc, out);
    int files = -1, passwords = -1;
    sscanf(sum, "files=%d", &files);
    const char *pw = strstr(sum, "password_config_keys=");
    if (pw)
        sscanf(pw, "password_config_keys=%d", &passwords);
    cr_assert_eq(files, in.n, "RoundTrip compared %d of %d inputs", files, in.n);
    cr_assert_gt(passwords, 0, "no password config went through the encoder: %.*s", (int)strcspn(sum, "\n"), sum);
    char *bad = unexpected(out);
    cr_assert(!*bad, "differences roundtrip.expected does not list:\n%.8000s", bad);
    free(bad);
    free(out);
    free(cmd);
    for (int i = 0; i < in.n; i++)
        free(in.v[i]);
    km_test_rmtree(dir);
    free(dir);
}

/* test_roundtrip_controller compares a fresh controller's log with its input up to the migration's end; a broker
 * unfenced while the migration driver writes gets its offline partitions elected inside the migration's transaction
 * (CI, 2 cores: cov-t2-0 and __consumer_offsets led by the new broker).  RoundTrip's cut, on a log of that shape
 * written with Kafka's writer: the election is left out and said, the image equals the source. */
Test(roundtrip, the_controller_log_cut_leaves_out_elections_inside_the_migration_transaction, .timeout = 300)
{
    const char *cache = rc_cache_or_skip();
    char *dir = km_test_tmpdir("roundtrip-cut"), *out = NULL, cmdline[4096];
    snprintf(cmdline, sizeof cmdline,
             "mkdir \"$D/classes\" && javac -nowarn -d \"$D/classes\" -cp \"$CP\" '%s/tests/realcluster/java/RoundTrip.java'"
             " && java -Dlog4j.configuration=file:/dev/null -cp \"$D/classes:$CP\" RoundTrip --check-migration-cut \"$D/cut\"",
             km_test_source_dir());
    int rc = sh(cache, NULL, dir, &out, cmdline);
    cr_assert(out);
    cr_assert_eq(rc, 0, "RoundTrip's cut kept the controller's own election (exit %d):\n%.6000s", rc, out);
    cr_assert(strstr(out, "NORMALISED partition changes inside the migration transaction left out") &&
              strstr(out, "(1)"), "the election was not counted as left out:\n%.6000s", out);
    cr_assert(strstr(out, "1 later records are the live cluster's own changes"), "%.6000s", out);
    cr_assert(strstr(out, "differences=0"), "%.6000s", out);
    free(out);
    km_test_rmtree(dir);
    free(dir);
}
