/* test_image_corpus.c - real Kafka metadata logs and snapshots into images.
 *
 * Files are read in place through km_test_shared_dir(); a later segment is
 * read after its predecessors (a directory of symlinks named as Kafka named
 * them, per MANIFEST.tsv), since on its own it refers to topics it never
 * created.  The literal expectations below were worked out by reading the
 * files independently (kafka-dump-log style dumps and `strings`), not by
 * running the image.
 */
#include "km_image.h"
#include "km_testsupport.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct mf_row {
    char file[512];          /* corpus-relative, e.g. kraft-log/x.log */
    char group[512];         /* repo + original directory */
    char name[128];          /* original file name */
} mf_row;

/* The kraft-* rows of MANIFEST.tsv; NULL (and a skip) without a corpus. */
static mf_row *manifest(size_t *n)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/corpus/MANIFEST.tsv", km_test_shared_dir());
    FILE *f = fopen(path, "r");
    if (!f)
        cr_skip_test("no corpus at %s", path);
    mf_row *rows = calloc(1024, sizeof *rows);
    cr_assert(rows);
    char line[4096];
    *n = 0;
    while (fgets(line, sizeof line, f) && *n < 1024) {
        char *file = strtok(line, "\t"), *repo = strtok(NULL, "\t"), *commit = strtok(NULL, "\t");
        char *orig = strtok(NULL, "\t");
        if (!file || !repo || !commit || !orig || strncmp(file, "kraft-", 6))
            continue;
        mf_row *r = &rows[(*n)++];
        snprintf(r->file, sizeof r->file, "%s", file);
        char *slash = strrchr(orig, '/');
        snprintf(r->name, sizeof r->name, "%s", slash ? slash + 1 : orig);
        if (slash)
            *slash = 0;
        snprintf(r->group, sizeof r->group, "%s|%s", repo, slash ? orig : "");
    }
    fclose(f);
    return rows;
}

static char *corpus_path(const char *rel)
{
    char *p = malloc(PATH_MAX);
    snprintf(p, PATH_MAX, "%s/corpus/%s", km_test_shared_dir(), rel);
    return p;
}

static bool is_first_or_snapshot(const mf_row *r)
{
    return strstr(r->name, ".checkpoint") || !strcmp(r->name, "00000000000000000000.log");
}

Test(image_corpus, every_snapshot_and_first_segment_loads)
{
    size_t n, loaded = 0;
    mf_row *rows = manifest(&n);
    for (size_t i = 0; i < n; i++) {
        if (!is_first_or_snapshot(&rows[i]))
            continue;
        char *p = corpus_path(rows[i].file);
        km_image *img = km_image_new();
        km_err err = {{0}};
        int64_t rc = km_image_load(img, p, NULL, &err);
        cr_assert_geq(rc, 1, "%s: %s", rows[i].file, err.msg);
        loaded++;
        km_image_free(img);
        free(p);
    }
    cr_assert_geq(loaded, 100, "the corpus has 130 such files");
    free(rows);
}

/* A directory of symlinks for one group: its segments, and its snapshots if asked. */
static char *group_dir(const mf_row *rows, size_t n, const char *group, bool snapshots)
{
    char *dir = km_test_tmpdir("imgcorpus");
    for (size_t i = 0; i < n; i++) {
        if (strcmp(rows[i].group, group) || (!snapshots && strstr(rows[i].name, ".checkpoint")) ||
            !strcmp(rows[i].name, "bootstrap.checkpoint"))
            continue;
        char link[PATH_MAX], *target = corpus_path(rows[i].file);
        snprintf(link, sizeof link, "%s/%s", dir, rows[i].name);
        cr_assert_eq(symlink(target, link), 0);
        free(target);
    }
    return dir;
}

Test(image_corpus, later_segments_load_after_their_predecessors)
{
    size_t n, checked = 0;
    mf_row *rows = manifest(&n);
    for (size_t i = 0; i < n; i++) {
        if (is_first_or_snapshot(&rows[i]))
            continue;
        char *dir = group_dir(rows, n, rows[i].group, false);
        km_image *img = km_image_new();
        km_err err = {{0}};
        cr_assert_geq(km_image_load(img, dir, NULL, &err), 1, "%s: %s", rows[i].file, err.msg);
        km_image_free(img);
        km_test_rmtree(dir);
        free(dir);
        checked++;
    }
    cr_assert_geq(checked, 3);
    free(rows);
}

/* The parts of the image a snapshot carries: not the raft leader (a control
 * record) nor who took the producer-id block (snapshots write -1 there). */
static json_t *comparable(km_image *img)
{
    km_err err;
    json_t *j = km_image_to_json(img, &err);
    cr_assert(j, "%s", err.msg);
    json_object_del(j, "raftLeader");
    json_t *p = json_object_get(j, "producerIds");
    json_object_del(p, "brokerId");
    json_object_del(p, "brokerEpoch");
    return j;
}

static json_t *load_json(const char *dir)
{
    km_image *img = km_image_new();
    km_err err = {{0}};
    cr_assert_geq(km_image_load(img, dir, NULL, &err), 1, "%s: %s", dir, err.msg);
    json_t *j = comparable(img);
    km_image_free(img);
    return j;
}

/* Kafka's own snapshots against our replay of the log they summarize. */
Test(image_corpus, snapshot_plus_tail_equals_full_replay)
{
    static const char *const groups[] = {
        "TienHien4/PetManagement|kafka-data/__cluster_metadata-0",
        "Eb-raheeem/Real-Time-Stock-Market-Analysis|kafka-data/__cluster_metadata-0",
        "renoagilsaputra/kafka|data/__cluster_metadata-0",
    };
    size_t n;
    mf_row *rows = manifest(&n);
    for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++) {
        char *full = group_dir(rows, n, groups[g], false), *snap = group_dir(rows, n, groups[g], true);
        json_t *a = load_json(full), *b = load_json(snap);
        char *sa = json_dumps(a, JSON_SORT_KEYS), *sb = json_dumps(b, JSON_SORT_KEYS);
        cr_assert(json_equal(a, b), "%s:\nlog:      %.600s\nsnapshot: %.600s", groups[g], sa, sb);
        free(sa);
        free(sb);
        json_decref(a);
        json_decref(b);
        km_test_rmtree(full);
        km_test_rmtree(snap);
        free(full);
        free(snap);
    }
    free(rows);
}

static km_image *load_file(const char *rel)
{
    char *p = corpus_path(rel);
    if (access(p, R_OK) != 0)
        cr_skip_test("corpus file %s absent", p);
    km_image *img = km_image_new();
    km_err err = {{0}};
    cr_assert_geq(km_image_load(img, p, NULL, &err), 1, "%s", err.msg);
    free(p);
    return img;
}

static int32_t partitions_of(const km_image *img, const char *topic)
{
    const km_topic *t = km_image_topic_by_name(img, topic);
    cr_assert(t, "topic %s", topic);
    return km_topic_partition_count(t);
}

/* Kafka 3.9 (metadata.version 21) single-node cluster: `first_topic` was created
 * and deleted (RemoveTopicRecord at offset 327); the broker was re-registered 13
 * times and last fenced at offset 9799 (BrokerRegistrationChange fenced=1). */
Test(image_corpus, ichwansh03_kafka_3_9_log)
{
    km_image *img = load_file("kraft-log/ichwansh03__kafka-migration-log4j2__data___cluster_metadata-0_"
                              "00000000000000000000.log");
    cr_assert_eq(km_image_metadata_version(img), 21);
    cr_assert_eq(km_image_zk_migration_state(img), KM_ZKM_NONE);
    cr_assert_eq(km_image_topic_count(img), 2);
    cr_assert_eq(partitions_of(img, "__consumer_offsets"), 50);
    cr_assert_eq(partitions_of(img, "learn-kafka"), 1);
    cr_assert_null(km_image_topic_by_name(img, "first_topic"));
    cr_assert_eq(km_image_partition_count(img), 51);
    cr_assert_eq(km_image_broker_count(img), 1);
    const km_broker *b = km_image_broker(img, 1);
    cr_assert(b && b->fenced && b->in_controlled_shutdown);
    cr_assert_eq(b->epoch, 9690);
    cr_assert_str_eq(b->endpoints[0].host, "localhost");
    cr_assert_eq(km_image_offset(img), 9800);
    cr_assert_eq(km_image_epoch(img), 13);
    km_image_free(img);
}

/* Kafka 4.x (metadata.version 29): the connect topics were deleted and made
 * again; docker-connect-offsets came back with 25 partitions. */
Test(image_corpus, gani_guru_recreated_topics)
{
    km_image *img = load_file("kraft-log/gani-guru__belajar-data-streaming__00000000000000000000.log");
    cr_assert_eq(km_image_metadata_version(img), 29);
    cr_assert_eq(km_image_feature(img, "transaction.version"), 2);
    cr_assert_eq(km_image_feature(img, "share.version"), 1);
    cr_assert_eq(km_image_topic_count(img), 4);
    cr_assert_eq(partitions_of(img, "__consumer_offsets"), 50);
    cr_assert_eq(partitions_of(img, "docker-connect-configs"), 1);
    cr_assert_eq(partitions_of(img, "docker-connect-offsets"), 25);
    cr_assert_eq(partitions_of(img, "docker-connect-status"), 1);
    cr_assert_eq(km_image_partition_count(img), 77);
    km_image_free(img);
}

/* A snapshot with nine topics (74 PartitionRecords) and four features. */
Test(image_corpus, rishab_bo_snapshot)
{
    km_image *img = load_file("kraft-snapshot/Rishab-Bo__Stream-MA-Prediction-Pipeline__kafka-data___cluster_"
                              "metadata-0_00000000000000007255-0000000001.checkpoint");
    cr_assert_eq(km_image_metadata_version(img), 27);
    cr_assert_eq(km_image_feature(img, "group.version"), 1);
    cr_assert_eq(km_image_feature(img, "eligible.leader.replicas.version"), 1);
    cr_assert_eq(km_image_topic_count(img), 9);
    cr_assert_eq(partitions_of(img, "__consumer_offsets"), 50);
    static const char *const three[] = {"drift_alerts", "ma_financial_stream", "ma_labels", "ma_prediction_stream",
                                        "ma_sentiment_stream", "ma_text_stream", "ma_volatility_stream",
                                        "retrain_events"};
    for (size_t i = 0; i < 8; i++)
        cr_assert_eq(partitions_of(img, three[i]), 3, "%s", three[i]);
    cr_assert_eq(km_image_partition_count(img), 74);
    cr_assert_eq(km_image_offset(img), 7254, "end offset 7255 from the name, minus one");
    cr_assert_eq(km_image_epoch(img), 1);
    km_image_free(img);
}

/* A Kafka 3.8 snapshot (metadata.version 20): one topic, one partition, a producer-id block. */
Test(image_corpus, tienhien4_snapshot)
{
    km_image *img = load_file("kraft-snapshot/TienHien4__PetManagement__kafka-data___cluster_metadata-0_"
                              "00000000000000021513-0000000001.checkpoint");
    cr_assert_eq(km_image_metadata_version(img), 20);
    cr_assert_eq(km_image_topic_count(img), 1);
    cr_assert_eq(partitions_of(img, "appointment-email-events"), 1);
    cr_assert_eq(km_image_broker_count(img), 1);
    cr_assert_geq(km_image_producer_ids(img).next_producer_id, 0);
    km_image_free(img);
}

/* The bootstrap transaction only: metadata.version 20 inside Begin/End. */
Test(image_corpus, bootstrap_transaction_log)
{
    km_image *img = load_file("kraft-log/1stapossum__otus_kafka__data___cluster_metadata-0_00000000000000000000.log");
    cr_assert_eq(km_image_metadata_version(img), 20);
    cr_assert_eq(km_image_topic_count(img), 0);
    cr_assert(!km_image_in_transaction(img));
    cr_assert_eq(km_image_offset(img), 4);
    cr_assert_eq(km_image_raft_leader(img), 1);
    km_image_free(img);
}
