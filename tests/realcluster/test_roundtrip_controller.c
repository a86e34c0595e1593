/* test_roundtrip_controller.c - the round trip through a whole fresh KRaft controller (issue 25 item 4,
 * docs/realcluster.md "Round trip"): `kmproxy zk sync` writes an image into the empty ZooKeeper of a rig
 * (tests/realcluster/rig.py --before-kafka) before any Kafka process starts; then one real Kafka 3.9.2 KRaft
 * controller in migration mode and the real ZK-mode brokers the input's partitions name (the driver waits for each
 * to register) start on it; the controller's KRaftMigrationDriver migrates that ZooKeeper into its new metadata log
 * and reaches DUAL_WRITE, and RoundTrip.java --compare-log compares the image of the controller's own
 * __cluster_metadata-0 log, up to the migration's end, with the input's image.  test_roundtrip runs Kafka's
 * ZooKeeper reader alone over many inputs; this suite runs the whole migration on: the log RoundTrip writes
 * with Kafka's writer (password configs encrypted by zk sync and decoded by the controller with its
 * password.encoder.secret, a quota, SCRAM, an ACL, a delegation token; one broker); with realkafka's kit,
 * gen-coverage's log (three brokers); with ../shared, three corpus files with a migration state, one per kind of
 * image (all 28 under `make roundtrip-corpus`, KM_ROUNDTRIP_CORPUS=all), each through its own fresh rig.  Skips
 * saying why without Java or the jar cache (fails instead under CI or KM_REQUIRE_REALKAFKA=1). */
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

/* One input: the input file (PATH; NULL: DIR/input/LOG0, which the shell lines WRITE make before Kafka starts;
 * $KM_RIG_CP, $J set), the brokers its partitions name (the migration driver waits for each to register), and what
 * the comparison must have seen (checked by round_trip; the corpus's files are checked for equality alone). */
typedef struct input {
    const char *name, *write, *path, *broker_ids;
    int topics, passwords, brokers, quotas, scram, acls, tokens;
} input;

/* What one round trip came to. verdict: 0 equal, 1 differences, 2 failed (no rig, no comparison, or a fault the
 * controller logged); the texts are malloc'd ("" when there is nothing to say). */
typedef struct outcome {
    int verdict;
    char *summary;    /* RoundTrip's `files=... differences=N` line */
    char *notes;      /* its NORMALISED lines */
    char *report;     /* for a failure: what went wrong, RoundTrip's output, where the logs are kept, their tails */
    double seconds;
} outcome;

/* Before Kafka starts: the input, zk sync of it, then RoundTrip --as-zk-cluster makes sync's claim one a fresh
 * quorum migrates (/migration removed, /controller a KRaft claim of epoch 0). */
static char *before_kafka(const char *dir, const input *in, const char *file)
{
    char *cmd = NULL;
    cr_assert(asprintf(&cmd,
                       "set -e; D='%s'; printf '" SECRET "\\n' >\"$D/secret\"; "
                       "J='java -Xmx128m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Dlog4j.configuration=file:/dev/null'; "
                       "%s; '%s' zk sync --force --zookeeper \"$KM_RIG_ZK\" --metadata '%s' "
                       "--password-encoder-secret-file \"$D/secret\" --cluster-id \"$KM_RIG_CLUSTER_ID\"; "
                       "$J -cp \"$KM_RIG_CP\" RoundTrip --as-zk-cluster \"$KM_RIG_ZK\"",
                       dir, in->write ? in->write : "true", km_test_binary(), file) > 0);
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

/* Every line of OUT that starts with PREFIX (malloc'd, newline-separated). */
static char *lines_starting(const char *out, const char *prefix)
{
    size_t cap = strlen(out) + 1, len = 0;
    char *got = calloc(1, cap);
    for (const char *l = out; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        if (!strncmp(l, prefix, strlen(prefix)))
            len += (size_t)snprintf(got + len, cap - len, "%.*s\n", (int)strcspn(l, "\n"), l);
    return got;
}

/* The controller stopped cleanly first: the log read is its whole, flushed log, not one it is still appending to.
 * Fills O's verdict, summary and notes, RoundTrip's output in *OUT; returns what went wrong, NULL when equal. */
static const char *compare(rc_rig *r, const char *file, outcome *o, char **out)
{
    int ctl = r->controllers[0].id;
    char *answer = rc_rig_cmd(r, "stop controller %d", ctl);
    bool stopped = answer && !strncmp(answer, "ok", 2);
    free(answer);
    o->verdict = 2;
    if (!stopped)
        return "the controller did not stop cleanly";
    char *log = rc_read_log(r, "controller", ctl);
    /* Kafka's fault handlers log and carry on: a migration or publishing fault would not stop dual-write. */
    bool fault = strstr(log, "Encountered zk migration fault") || strstr(log, "Encountered metadata publishing fault");
    free(log);
    int rc = rc_sh(r, out, "$JAVA -Xmx256m -cp \"$TOOLS:$CP\" RoundTrip --compare-log '%s' "
                           "'%s/metadata/__cluster_metadata-0'", file, r->controllers[0].dir);
    const char *sum = *out ? strstr(*out, "files=") : NULL;
    if (!sum)
        return "RoundTrip --compare-log gave no summary";
    o->summary = strndup(sum, strcspn(sum, "\n"));
    o->notes = lines_starting(*out, "NORMALISED ");
    if (fault)
        return "the controller logged a migration or publishing fault";
    if (rc != 0 && rc != 1)
        return "RoundTrip could not compare";
    o->verdict = rc;
    return rc ? "the controller's log differs from the source image" : NULL;
}

/* zk sync of IN into a fresh rig's empty ZooKeeper, a fresh controller and IN's brokers migrating it, the
 * comparison; the rig is gone on return, its logs kept (and said where in O's report) when the verdict is not 0. */
static void migrate(const input *in, outcome *o)
{
    char *dir = km_test_tmpdir("roundtrip-ctl"), file[4400], why[8192], ids[256], *out = NULL;
    snprintf(file, sizeof file, "%s%s", in->path ? in->path : dir, in->path ? "" : "/input/" LOG0);
    char *cmd = before_kafka(dir, in, file);
    snprintf(ids, sizeof ids, "%s", in->broker_ids);
    /* The password configs are decoded with the brokers' secret; a cluster with delegation tokens has a key. */
    const char *extra[] = {"--broker-ids", ids, "--controller-prop", "password.encoder.secret=" SECRET,
                           "--controller-prop", "delegation.token.secret.key=round-trip-token-key",
                           "--before-kafka", cmd, NULL};
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    *o = (outcome){.verdict = 2};
    rc_rig *r = rc_rig_start_with(1, extra, why, sizeof why);
    const char *problem = r ? compare(r, file, o, &out) : "the controller did not migrate the synced ZooKeeper";
    if (o->verdict == 0) {
        rc_rig_stop(r, false);
        o->report = strdup("");
    } else if (r) {
        char *tails = rc_rig_tails(r, 40), kept[1200];
        rc_rig_stop_kept(r, kept, sizeof kept);
        cr_assert(asprintf(&o->report, "%s (%s):\n%.8000s\nlogs kept in %s\n%s", problem, in->name, out ? out : "",
                           kept, tails ? tails : "") > 0);
        free(tails);
    } else {
        cr_assert(asprintf(&o->report, "%s (%s): %s", problem, in->name, why) > 0);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    o->seconds = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    if (!o->summary)
        o->summary = strdup("");
    if (!o->notes)
        o->notes = strdup("");
    free(out);
    free(cmd);
    km_test_rmtree(dir);
    free(dir);
}

static void outcome_free(outcome *o)
{
    free(o->summary);
    free(o->notes);
    free(o->report);
}

/* One input, asserted: equal, and every kind the input holds went through the controller (the source's counts). */
static void round_trip(const input *in)
{
    outcome o;
    migrate(in, &o);
    cr_assert(o.verdict == 0, "%s", o.report);
    cr_log_info("%s through a fresh controller in %.1f s: %s", in->name, o.seconds, o.summary);
    for (char *l = strtok(o.notes, "\n"); l; l = strtok(NULL, "\n"))
        cr_log_info("%s", l);
    const char *keys[] = {"topics", "password_config_keys", "controller_brokers", "quota_entities",
                          "scram_credentials", "acls", "delegation_tokens"};
    const int want[] = {in->topics, in->passwords, in->brokers, in->quotas, in->scram, in->acls, in->tokens};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
        int got = summary_int(o.summary, keys[i]);
        cr_assert(got == want[i] || (want[i] == 0 && got < 0), "%s: compared %s=%d, want %d: %s", in->name, keys[i],
                  got, want[i], o.summary);
    }
    outcome_free(&o);
}

/* RoundTrip's password log (a topic, password and plain configs, producer ids, a client quota, a SCRAM credential,
 * an ACL, a delegation token), its partition on broker 1: every kind, without ../shared. */
Test(roundtrip_controller, a_fresh_kraft_controller_migrates_the_password_configs_zk_sync_wrote, .timeout = 900)
{
    rc_cache_or_skip();
    const input in = {"the password log", "$J -cp \"$KM_RIG_CP\" RoundTrip --write-password-log \"$D/input/" LOG0 "\" 1",
                      NULL, "1", 1, 3, 1, 1, 1, 1, 1};
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
    const input in = {"gen-coverage's log", write, NULL, "1,2,3", 3, 0, 3, 4, 2, 2, 1};
    round_trip(&in);
}

/* The corpus's files with a migration state that CI runs, one per kind of image among the 28 (the rest by `make
 * roundtrip-corpus`): see docs/realcluster.md "The corpus through a fresh controller" for why these. */
static const char *const corpus_ci[] = {
    "kraft-log/pmatuan__spring-boot-3-base-project__00000000000000000000.log",
    "kraft-snapshot/ftmhxp__real-time-data-streaming-pipeline__00000000000000007268-0000000001.checkpoint",
    "kraft-log/1stapossum__otus_kafka__data___cluster_metadata-0_00000000000000000000.log",
};

static void add_id(int *ids, int *n, json_t *v)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return;
    for (int i = 0; i < *n; i++)
        if (ids[i] == (int)json_integer_value(v))
            return;
    if (*n < RC_MAX_NODES)
        ids[*n] = (int)json_integer_value(v);
    (*n)++;
}

/* The brokers FILE's partitions name (replicas, ISR, leader), comma-separated in IDS, from `kmproxy metadata image`:
 * the migration driver waits for each to register.  An image with no partition still needs one ZK-mode broker:
 * the driver waits until some broker registers ("No brokers are known to KRaft").  0, or -1 with why in IDS. */
static int broker_ids_of(const char *file, char *ids, size_t cap)
{
    char *argv[] = {(char *)km_test_binary(), "metadata", "image", (char *)file, NULL}, *out = NULL, *err = NULL;
    size_t n = 0;
    int rc = km_test_run(argv, NULL, 0, &out, &n, &err);
    json_t *image = rc == 0 && out ? json_loads(out, 0, NULL) : NULL;
    int found[RC_MAX_NODES], nfound = 0;
    size_t ti, pi, ki;
    json_t *topic, *part;
    json_array_foreach(json_object_get(image, "topics"), ti, topic) {
        json_array_foreach(json_object_get(topic, "partitions"), pi, part) {
            json_t *id;
            json_array_foreach(json_object_get(part, "replicas"), ki, id) add_id(found, &nfound, id);
            json_array_foreach(json_object_get(part, "isr"), ki, id) add_id(found, &nfound, id);
            add_id(found, &nfound, json_object_get(part, "leader"));
        }
    }
    if (!image)
        snprintf(ids, cap, "kmproxy metadata image exited %d: %.300s", rc, err ? err : "");
    else if (nfound > RC_MAX_NODES)
        snprintf(ids, cap, "its partitions name %d brokers, more than the rig's %d", nfound, RC_MAX_NODES);
    json_decref(image);
    free(out);
    free(err);
    if (!image || nfound > RC_MAX_NODES)
        return -1;
    size_t len = (size_t)snprintf(ids, cap, "%d", nfound ? found[0] : 1);
    for (int i = 1; i < nfound && len < cap; i++)
        len += (size_t)snprintf(ids + len, cap - len, ",%d", found[i]);
    return 0;
}

/* Key=value totals over the files' summaries (files=, topics=, partitions=, differences=, ...). */
typedef struct totals { char key[32][40]; long val[32]; int n; } totals;

static void add_summary(totals *t, const char *sum)
{
    char key[40];
    long v;
    int used;
    for (const char *p = sum; sscanf(p, " %39[a-z_]=%ld%n", key, &v, &used) == 2; p += used) {
        int i = 0;
        while (i < t->n && strcmp(t->key[i], key))
            i++;
        if (i == t->n && t->n < 32)
            snprintf(t->key[t->n++], sizeof t->key[0], "%s", key);
        if (i < t->n)
            t->val[i] += v;
    }
}

/* A failed file's logs go to their own folder under the usual place (rc_keep_logs), one per file. */
static void keep_logs_under(const char *base, int i)
{
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/roundtrip-corpus/%02d", base, i + 1);
    setenv("KM_RC_LOG_DIR", dir, 1);
}

/* One corpus file through a fresh controller, its line printed; its verdict (2 when its brokers cannot be named). */
static int corpus_file(const char *file, int i, int n, totals *t)
{
    const char *name = strstr(file, "/corpus/") ? strstr(file, "/corpus/") + 8 : file;
    char ids[512];
    if (broker_ids_of(file, ids, sizeof ids)) {
        fprintf(stderr, "roundtrip-corpus: [%d/%d] %s: FAILED, could not run: %s\n", i + 1, n, name, ids);
        return 2;
    }
    const input in = {name, NULL, file, ids, 0, 0, 0, 0, 0, 0, 0};
    outcome o;
    migrate(&in, &o);
    static const char *const verdicts[] = {"equal", "DIFFERENCES", "FAILED, could not run"};
    fprintf(stderr, "roundtrip-corpus: [%d/%d] %s (brokers %s): %s in %.1f s: %s\n", i + 1, n, name, ids,
            verdicts[o.verdict], o.seconds, *o.summary ? o.summary : "(no comparison)");
    for (char *l = strtok(o.notes, "\n"); l; l = strtok(NULL, "\n")) /* what Kafka itself changes, counted */
        fprintf(stderr, "    %s\n", l);
    if (o.verdict != 0) /* the DIFF lines or what failed, where the logs are kept, their tails */
        fprintf(stderr, "%.12000s\n", o.report);
    add_summary(t, o.summary);
    int verdict = o.verdict;
    outcome_free(&o);
    return verdict;
}

/* The corpus's files with a migration state (all, or the ones in ONLY), each through its own fresh rig; every file
 * is run and printed, then the test fails on any file that differs or could not run. */
static void corpus_round_trips(const char *const *only, size_t nonly)
{
    char **files = NULL, base[4096];
    int n = rk_corpus_migration_files(&files);
    /* make roundtrip-corpus asked for every file: without the corpus it has run none, a failure, not a pass. */
    cr_assert(n >= 0 || only, "%s/corpus/MANIFEST.tsv: cannot open (KM_SHARED_DIR names another ../shared)",
              km_test_shared_dir());
    if (n < 0) {
        cr_log_info("the corpus's round trips through a controller left out: %s/corpus/MANIFEST.tsv absent",
                    km_test_shared_dir());
        return;
    }
    const char *env = getenv("KM_RC_LOG_DIR");
    snprintf(base, sizeof base, "%s", env && *env ? env : KM_TEST_BUILD_DIR "/realcluster-logs");
    const char *chosen[128];
    int m = 0;
    for (int i = 0; i < n; i++) {
        bool take = !only;
        for (size_t k = 0; only && k < nonly && !take; k++)
            take = strstr(files[i], only[k]) != NULL;
        if (take && m < 128)
            chosen[m++] = files[i];
    }
    cr_assert_eq(m, only ? (int)nonly : n, "%d of the corpus's files chosen, want %d: the manifest changed?", m,
                 only ? (int)nonly : n);
    int count[3] = {0, 0, 0};
    totals t = {.n = 0};
    for (int i = 0; i < m; i++) {
        keep_logs_under(base, i);
        count[corpus_file(chosen[i], i, m, &t)]++;
    }
    if (env)
        setenv("KM_RC_LOG_DIR", env, 1);
    else
        unsetenv("KM_RC_LOG_DIR");
    char sum[2048] = "";
    size_t len = 0;
    for (int k = 0; k < t.n; k++)
        len += (size_t)snprintf(sum + len, sizeof sum - len, " %s=%ld", t.key[k], t.val[k]);
    bool ok = count[0] == m;
    fprintf(stderr, "roundtrip-corpus: %s: %d files: %d equal, %d with differences, %d could not run; totals:%s\n",
            ok ? "all equal" : "FAILED", m, count[0], count[1], count[2], sum);
    for (int i = 0; i < n; i++)
        free(files[i]);
    free(files);
    cr_assert(ok, "%d of %d corpus files differ after a fresh controller's migration, %d could not run (lines above)",
              count[1], m, count[2]);
}

/* CI: one corpus file of each kind (docs/realcluster.md); skipped, saying so, without ../shared. */
Test(roundtrip_controller, a_fresh_kraft_controller_migrates_corpus_images_of_each_kind, .timeout = 1200)
{
    rc_cache_or_skip();
    corpus_round_trips(corpus_ci, sizeof corpus_ci / sizeof *corpus_ci);
}

/* Every corpus file with a migration state: `make roundtrip-corpus` (KM_ROUNDTRIP_CORPUS=all), too long for CI. */
Test(roundtrip_controller, every_corpus_image_with_a_migration_state, .timeout = 14400)
{
    const char *all = getenv("KM_ROUNDTRIP_CORPUS");
    if (!all || strcmp(all, "all"))
        cr_skip_test("every corpus file through a fresh controller: `make roundtrip-corpus` runs it");
    rc_cache_or_skip();
    corpus_round_trips(NULL, 0);
}
