/* bench_metalog: records/s through km_metalog (CRC32C + record parse + full decode)
 * against a plain read() of the same files, measured in the same run.
 *
 * It writes a ~200k-record log (TopicRecord + PartitionRecords, batches of
 * 100, like a controller under load, segments of 16 MiB) into $TMPDIR, warms
 * the page cache, then alternates the two readers and keeps each one's best
 * of five so both see the same cache and CPU state.  Times are this
 * process's CPU time (user + system, so read()'s kernel copy counts), which
 * a shared, busy machine skews far less than wall-clock time.
 */
#include "bench_util.h"
#include "km_metalog.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { BATCHES = 2000, PER_BATCH = 100, ROUNDS = 5 };


static int write_log(const char *dir, km_ml_compression c)
{
    km_err err;
    km_metalog_writer_opts o = {.leader_epoch = 1, .compression = c, .segment_bytes = 16u << 20, .timestamp = 1};
    km_metalog_writer *w = km_metalog_writer_open_dir(dir, &o, &err);
    if (!w)
        return fprintf(stderr, "%s\n", err.msg), -1;
    km_partition_record parts[PER_BATCH];
    km_topic_record topic;
    km_metalog_entry e[PER_BATCH];
    int32_t replicas[3] = {1, 2, 3};
    char name[32];
    for (int b = 0; b < BATCHES; b++) {
        snprintf(name, sizeof name, "bench-topic-%d", b);
        km_topic_record_init(&topic);
        topic.name = km_cstr(name);
        memcpy(topic.topic_id.b, &b, sizeof b);
        e[0] = (km_metalog_entry){&km_topic_record_desc, 0, &topic, -1};
        for (int i = 1; i < PER_BATCH; i++) {
            km_partition_record_init(&parts[i]);
            parts[i].partition_id = i - 1;
            parts[i].topic_id = topic.topic_id;
            parts[i].replicas.count = parts[i].isr.count = 3;
            parts[i].replicas.items = parts[i].isr.items = replicas;
            parts[i].leader = 1 + i % 3;
            e[i] = (km_metalog_entry){&km_partition_record_desc, 0, &parts[i], -1};
        }
        if (km_metalog_writer_append(w, e, PER_BATCH, NULL, &err) < 0)
            return fprintf(stderr, "%s\n", err.msg), km_metalog_writer_abort(w), -1;
    }
    return km_metalog_writer_finish(w, &err) < 0 ? (fprintf(stderr, "%s\n", err.msg), -1) : 0;
}


static double metalog_read(const char *dir, bool raw, long *records)
{
    km_err err;
    km_metalog_opts o = {.raw = raw};
    double t0 = bench_cpu_s();
    km_metalog *m = km_metalog_open_dir(dir, &o, &err);
    km_metalog_record r;
    int rc = m ? 0 : -1;
    *records = 0;
    while (m && (rc = km_metalog_next(m, &r, &err)) == 1)
        (*records)++;
    double t = bench_cpu_s() - t0;
    if (rc < 0)
        fprintf(stderr, "bench_metalog: %s\n", err.msg);
    km_metalog_close(m);
    return rc < 0 ? -1 : t;
}

static int run(km_ml_compression c, const char *label)
{
    char tmpl[4096];
    snprintf(tmpl, sizeof tmpl, "%s/km-bench-metalog-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    char *dir = mkdtemp(tmpl);
    if (!dir || write_log(dir, c) < 0)
        return -1;
    size_t bytes = 0;
    long recs = 0;
    double best_plain = 1e9, best_full = 1e9, best_raw = 1e9;
    bench_plain_read(dir, &bytes); /* warm the page cache */
    for (int i = 0; i < ROUNDS; i++) {
        double p = bench_plain_read(dir, &bytes), f = metalog_read(dir, false, &recs), r = metalog_read(dir, true, &recs);
        if (f < 0 || r < 0)
            return -1;
        best_plain = p < best_plain ? p : best_plain;
        best_full = f < best_full ? f : best_full;
        best_raw = r < best_raw ? r : best_raw;
    }
    printf("metalog %-6s %ld records, %.1f MiB: decoded %.0f rec/s, batch layer only %.0f rec/s, "
           "plain read() %.0f rec/s-equivalent (%.0f MiB/s)\n",
           label, recs, (double)bytes / (1 << 20), recs / best_full, recs / best_raw, recs / best_plain,
           (double)bytes / (1 << 20) / best_plain);
    printf("metalog %-6s ratio decoded/read() = %.3f, batch-layer/read() = %.3f\n", label,
           best_plain / best_full, best_plain / best_raw);
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
    if (run(KM_ML_NONE, "none") < 0 || run(KM_ML_LZ4, "lz4") < 0)
        return 1;
    return 0;
}
