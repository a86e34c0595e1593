/* test_realkafka_oracles.c - `kmproxy metadata image` and `kmproxy metadata dump` against Kafka 3.9's own reading
 * of the same files (realkafka's bin/image-oracle and bin/record-oracle: MetadataLoader's image, RecordsIterator and
 * MetadataRecordSerde), for every KRaft log and snapshot of ../shared/corpus (corpus/MANIFEST.tsv) and for every
 * log and snapshot Kafka's own writers produce with bin/gen-coverage (each compression, plain and bulk).  A verdict
 * other than SAME is allowed only where the tools say it is not a mismatch: a file of Kafka 4.x that 3.9 cannot
 * read (NEWER-THAN-3.9, KAFKA-REJECT in the dump), or a segment that neither can read alone (BOTH-REJECT: a later
 * segment naming topics and brokers of an earlier one).  Skips, saying why, when the kit or Java is absent.
 * Under the sanitizers the record oracle (one JVM per file) reads every fourth corpus file only. */
#include "km_testsupport.h"
#include "realkafka_util.h"

#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_FILES 512

typedef struct files { char *v[MAX_FILES]; int n; } files;

static const char *g_kit;

static void need_kit(void)
{
    static char why[1024];
    if (!(g_kit = rk_kit(why, sizeof why)))
        cr_skip_test("%s", why);
}

static void files_free(files *f)
{
    for (int i = 0; i < f->n; i++)
        free(f->v[i]);
    f->n = 0;
}

/* The KRaft files the corpus manifest lists (ZooKeeper snapshots are not metadata logs). */
static void corpus_files(files *out, int every)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/corpus/MANIFEST.tsv", km_test_shared_dir());
    FILE *m = fopen(path, "r");
    cr_assert(m, "%s: cannot open", path);
    char line[8192];
    int row = 0;
    out->n = 0;
    while (fgets(line, sizeof line, m)) {
        line[strcspn(line, "\t\n")] = 0;
        if (strncmp(line, "kraft-log/", 10) && strncmp(line, "kraft-snapshot/", 15))
            continue;
        if (row++ % every)
            continue;
        cr_assert(out->n < MAX_FILES);
        cr_assert(asprintf(&out->v[out->n++], "%s/corpus/%s", km_test_shared_dir(), line) > 0);
    }
    fclose(m);
    cr_assert(out->n > 0, "%s lists no KRaft file", path);
}

/* Runs bin/<tool> KMPROXY FILES...; asserts no mismatch and that every file got a verdict; returns the summary. */
static void oracle(const char *tool, const files *f, const char *what, char *summary, size_t cap)
{
    char bin[4200];
    snprintf(bin, sizeof bin, "%s/bin/%s", g_kit, tool);
    /* One JVM per file in record-oracle and gen-coverage: C1 only and the serial collector start a third faster. */
    setenv("JDK_JAVA_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC", 1);
    char **argv = calloc((size_t)f->n + 3, sizeof *argv);
    cr_assert(argv);
    argv[0] = bin;
    argv[1] = (char *)km_test_binary();
    for (int i = 0; i < f->n; i++)
        argv[2 + i] = f->v[i];
    char *out = NULL, *err = NULL;
    size_t n = 0;
    int rc = km_test_run(argv, NULL, 0, &out, &n, &err);
    free(argv);
    cr_assert(out);
    const char *sum = strstr(out, "files=");
    cr_assert(sum, "%s gave no summary (rc %d): %.2000s %.2000s", tool, rc, out, err ? err : "");
    snprintf(summary, cap, "%.*s", (int)strcspn(sum, "\n"), sum);
    int files = -1, mismatches = -1;
    sscanf(sum, "files=%d", &files);
    const char *mm = strstr(sum, "mismatches=");
    if (mm)
        sscanf(mm, "mismatches=%d", &mismatches);
    if (rc != 0 || mismatches != 0) {
        /* every verdict that is not a pass, with its details, for the failure message */
        char *bad = strstr(out, "DIFF");
        char *kmrej = strstr(out, "KM-REJECT");
        char *first = !bad || (kmrej && kmrej < bad) ? kmrej : bad;
        cr_assert_fail("%s on %s: kmproxy and Kafka 3.9 disagree (rc %d, %s):\n%.4000s", tool, what, rc, summary,
                       first ? first : out);
    }
    cr_assert_eq(files, f->n, "%s: %d verdicts for %d files", tool, files, f->n);
    cr_log_info("%s on %s: %s", tool, what, summary);
    if (getenv("RK_VERBOSE"))
        fprintf(stderr, "%s on %s: %s\n", tool, what, summary);
    free(out);
    free(err);
}

static int count_of(const char *summary, const char *key)
{
    const char *p = strstr(summary, key);
    int v = -1;
    if (p)
        sscanf(p + strlen(key), "%d", &v);
    return v;
}

Test(realkafka_oracles, image_of_every_corpus_file, .timeout = 600)
{
    need_kit();
    files f;
    corpus_files(&f, 1);
    char sum[512];
    oracle("image-oracle", &f, "the corpus", sum, sizeof sum);
    /* Not a verdict a mismatch could hide behind: the both-reject files are named in the header comment. */
    cr_expect_leq(count_of(sum, "both-reject="), 2, "%s", sum);
    files_free(&f);
}

Test(realkafka_oracles, records_of_every_corpus_file, .timeout = 900)
{
    need_kit();
    files f;
#ifdef KM_TEST_SANITIZED
    corpus_files(&f, 4);
#else
    corpus_files(&f, 1);
#endif
    char sum[512];
    oracle("record-oracle", &f, "the corpus", sum, sizeof sum);
    files_free(&f);
}

/* gen-coverage OUT/<name> for each compression, plain and with bulk topics; the log and snapshot of each. */
static void generate(const char *dir, files *out)
{
    static const char *const comps[] = {"none", "gzip", "snappy", "lz4", "zstd"};
    out->n = 0;
    for (int bulk = 0; bulk <= 1; bulk++)
        for (size_t c = 0; c < sizeof comps / sizeof comps[0]; c++) {
            char cmd[8192], *o = NULL;
            snprintf(cmd, sizeof cmd,
                     "d='%s/%s%s' && \"$K/bin/gen-coverage\" \"$d\" --compression %s %s >/dev/null && ls \"$d\"/*", dir,
                     bulk ? "bulk-" : "", comps[c], comps[c], bulk ? "--bulk-topics 40 --bulk-partitions 5" : "");
            int rc = rk_sh(g_kit, cmd, &o);
            cr_assert(rc == 0 && o, "gen-coverage --compression %s%s failed (%d): %.2000s", comps[c],
                      bulk ? " (bulk)" : "", rc, o ? o : "");
            int got = 0;
            for (char *line = strtok(o, "\n"); line; line = strtok(NULL, "\n"))
                if (strstr(line, ".log") || strstr(line, ".checkpoint")) {
                    cr_assert(out->n < MAX_FILES);
                    out->v[out->n++] = strdup(line);
                    got++;
                }
            cr_assert_eq(got, 2, "gen-coverage %s: %d files, not a log and a snapshot", comps[c], got);
            free(o);
        }
}

Test(realkafka_oracles, image_and_records_of_kafkas_own_writers, .timeout = 600)
{
    need_kit();
    setenv("JDK_JAVA_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC", 1);
    char *dir = km_test_tmpdir("rk-gen");
    cr_assert(dir);
    files f;
    generate(dir, &f);
    char sum[512];
    oracle("image-oracle", &f, "gen-coverage", sum, sizeof sum);
    cr_assert_eq(count_of(sum, "same="), f.n, "every file Kafka wrote itself reads the same: %s", sum);
    oracle("record-oracle", &f, "gen-coverage", sum, sizeof sum);
    cr_assert_eq(count_of(sum, "same="), f.n, "every file Kafka wrote itself reads the same: %s", sum);
    files_free(&f);
    km_test_rmtree(dir);
    free(dir);
}
