/* Real Kafka files from ../shared/corpus: everything decodes, and a few are checked by hand.
 *
 * The hand-checked facts below were read from the bytes with xxd (batch
 * headers, FeatureLevelRecord bodies) before this reader existed, so the
 * test does not merely restate the implementation.
 */
#include "test_metalog.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char *corpus(const char *sub)
{
    char *p = tm_path(km_test_shared_dir(), sub);
    if (access(p, R_OK) != 0) {
        free(p);
        cr_skip_test("no corpus at %s/%s", km_test_shared_dir(), sub);
    }
    return p;
}

/* The file in corpus dir `sub` whose name starts with prefix and ends with suffix. */
static char *corpus_file(const char *sub, const char *prefix, const char *suffix)
{
    char *dir = corpus(sub);
    DIR *d = opendir(dir);
    cr_assert(d);
    char *found = NULL;
    struct dirent *e;
    while ((e = readdir(d)) && !found) {
        size_t n = strlen(e->d_name), s = strlen(suffix);
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0 && n >= s && strcmp(e->d_name + n - s, suffix) == 0)
            found = tm_path(dir, e->d_name);
    }
    closedir(d);
    free(dir);
    if (!found)
        cr_skip_test("corpus file %s*%s absent", prefix, suffix);
    return found;
}

static void decode_all_in(const char *sub, const char *suffix)
{
    char *dir = corpus(sub);
    DIR *d = opendir(dir);
    cr_assert(d);
    struct dirent *e;
    int files = 0;
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (n < strlen(suffix) || strcmp(e->d_name + n - strlen(suffix), suffix) != 0)
            continue;
        char *path = tm_path(dir, e->d_name);
        for (int raw = 1; raw >= 0; raw--) {
            km_metalog_opts o = {.raw = raw};
            km_err err;
            km_metalog *m = km_metalog_open_file(path, &o, &err);
            cr_assert(m, "%s", err.msg);
            long recs = 0;
            int64_t last = -1;
            int rc = tm_drain(m, &recs, &last, &err);
            cr_assert_eq(rc, 1, "%s", err.msg);
            cr_assert_gt(recs, 0, "%s: no records", path);
            km_metalog_close(m);
        }
        free(path);
        files++;
    }
    closedir(d);
    free(dir);
    cr_assert_gt(files, 0);
}

Test(metalog_corpus, every_log_segment_decodes, .timeout = 120) { decode_all_in("corpus/kraft-log", ".log"); }
Test(metalog_corpus, every_checkpoint_decodes, .timeout = 120) { decode_all_in("corpus/kraft-snapshot", ".checkpoint"); }

typedef struct facts {
    long records, control, topics;
    int64_t last;
    int metadata_version;
    bool saw_topic;
} facts;

static void gather(const char *path_or_dir, bool dir, const char *topic, facts *f, int16_t *types, int max_types)
{
    km_err err;
    km_metalog *m = dir ? km_metalog_open_dir(path_or_dir, NULL, &err) : km_metalog_open_file(path_or_dir, NULL, &err);
    cr_assert(m, "%s", err.msg);
    km_metalog_record r;
    int rc;
    memset(f, 0, sizeof *f);
    f->metadata_version = -1;
    while ((rc = km_metalog_next(m, &r, &err)) == 1) {
        if (f->records < max_types)
            types[f->records] = (int16_t)(r.control ? 1000 + r.type : r.type);
        f->records++;
        f->last = r.offset;
        f->control += r.control;
        if (!r.control && r.type == KM_MDR_TOPIC_RECORD) {
            f->topics++;
            f->saw_topic |= topic && km_str_eq(((const km_topic_record *)r.msg)->name, topic);
        }
        if (!r.control && r.type == KM_MDR_FEATURE_LEVEL_RECORD &&
            km_str_eq(((const km_feature_level_record *)r.msg)->name, "metadata.version"))
            f->metadata_version = ((const km_feature_level_record *)r.msg)->feature_level;
    }
    cr_assert_eq(rc, 0, "%s", err.msg);
    km_metalog_close(m);
}

Test(metalog_corpus, otus_kafka_log_by_hand)
{
    /* 236 bytes: a LeaderChange control batch (epoch 1, leader 1), then one
     * 4-record bootstrap transaction written by Kafka 3.8 (metadata.version 20). */
    char *p = corpus_file("corpus/kraft-log", "1stapossum__otus_kafka", ".log");
    facts f;
    int16_t types[8];
    gather(p, false, NULL, &f, types, 8);
    cr_assert_eq(f.records, 5);
    cr_assert_eq(f.control, 1);
    cr_assert_eq(f.last, 4);
    cr_assert_eq(f.metadata_version, 20);
    const int16_t want[5] = {1000 + KM_ML_CTRL_LEADER_CHANGE, KM_MDR_BEGIN_TRANSACTION_RECORD, KM_MDR_FEATURE_LEVEL_RECORD,
                             KM_MDR_ZK_MIGRATION_STATE_RECORD, KM_MDR_END_TRANSACTION_RECORD};
    for (int i = 0; i < 5; i++)
        cr_assert_eq(types[i], want[i], "record %d", i);
    km_err err;
    km_metalog *m = km_metalog_open_file(p, NULL, &err);
    km_metalog_record r;
    cr_assert_eq(km_metalog_next(m, &r, &err), 1);
    const km_leader_change_message *lc = r.msg;
    cr_assert_eq(lc->leader_id, 1);
    cr_assert_eq(lc->voters.count, 1);
    cr_assert_eq(r.batch->leader_epoch, 1);
    cr_assert_eq(km_metalog_next(m, &r, &err), 1);
    cr_assert(km_str_eq(((const km_begin_transaction_record *)r.msg)->name, "Bootstrap records"));
    cr_assert(r.batch->base_offset == 1 && r.batch->last_offset == 4 && r.batch->record_count == 4);
    km_metalog_close(m);
    /* raw mode still says what each record is, without decoding bodies */
    km_metalog_opts raw = {.raw = true};
    m = km_metalog_open_file(p, &raw, &err);
    for (int i = 0; i < 5; i++) {
        cr_assert_eq(km_metalog_next(m, &r, &err), 1, "%s", err.msg);
        cr_assert_eq(r.control ? 1000 + r.type : r.type, want[i], "record %d", i);
        cr_assert_null(r.msg);
    }
    km_metalog_close(m);
    free(p);
}

Test(metalog_corpus, otus_kafka_bootstrap_checkpoint_by_hand)
{
    char *p = corpus_file("corpus/kraft-snapshot", "1stapossum__otus_kafka", "bootstrap.checkpoint");
    facts f;
    int16_t types[4];
    gather(p, false, NULL, &f, types, 4);
    cr_assert_eq(f.records, 3);
    cr_assert_eq(types[0], 1000 + KM_ML_CTRL_SNAPSHOT_HEADER);
    cr_assert_eq(types[1], KM_MDR_FEATURE_LEVEL_RECORD);
    cr_assert_eq(types[2], 1000 + KM_ML_CTRL_SNAPSHOT_FOOTER);
    cr_assert_eq(f.metadata_version, 20);
    free(p);
}

Test(metalog_corpus, stream_pipeline_snapshot_by_hand)
{
    /* 6913 bytes, epoch 1, end offset 7255: nine topics, metadata.version 27 (0x001b in the bytes). */
    char *p = corpus_file("corpus/kraft-snapshot", "Rishab-Bo__Stream-MA-Prediction-Pipeline", "7255-0000000001.checkpoint");
    facts f;
    int16_t types[1];
    gather(p, false, "__consumer_offsets", &f, types, 1);
    cr_assert_eq(f.records, 95);
    cr_assert_eq(f.control, 2);
    cr_assert_eq(f.topics, 9);
    cr_assert(f.saw_topic);
    cr_assert_eq(f.metadata_version, 27);
    gather(p, false, "ma_sentiment_stream", &f, types, 1);
    cr_assert(f.saw_topic);
    free(p);
}

Test(metalog_corpus, two_segment_directory)
{
    /* devandref's log has two segments; the second's name says it starts at 14667. */
    char *a = corpus_file("corpus/kraft-log", "devandref__apache-kafka-eda-study__", "00000000000000000000.log");
    char *b = corpus_file("corpus/kraft-log", "devandref__apache-kafka-eda-study__", "00000000000000014667.log");
    char *dir = km_test_tmpdir("ml-corpus-dir");
    char *la = tm_path(dir, "00000000000000000000.log"), *lb = tm_path(dir, "00000000000000014667.log");
    cr_assert_eq(symlink(a, la), 0);
    cr_assert_eq(symlink(b, lb), 0);
    facts f;
    int16_t types[1];
    gather(dir, true, "product-created-events-topic", &f, types, 1);
    cr_assert_eq(f.records, 23767);
    cr_assert_eq(f.last, 23766);
    cr_assert(f.saw_topic);
    km_test_rmtree(dir);
    free(a); free(b); free(la); free(lb); free(dir);
}

/* Kafka 4.x writes RegisterBrokerRecord v4: version 3's fields plus tagged field 1, which is kept. */
Test(metalog_corpus, register_broker_v4_keeps_its_new_tag)
{
    char *p = corpus_file("corpus/kraft-snapshot", "KS9602__KASYNO__", "12997-0000000019.checkpoint");
    km_err err;
    km_metalog *m = km_metalog_open_file(p, NULL, &err);
    cr_assert(m, "%s", err.msg);
    km_metalog_record rec;
    int rc, seen = 0;
    while ((rc = km_metalog_next(m, &rec, &err)) == 1) {
        if (rec.control || rec.type != KM_MDR_REGISTER_BROKER_RECORD)
            continue;
        const km_register_broker_record *r = rec.msg;
        cr_assert_eq(rec.version, 4);
        cr_assert_eq(r->broker_id, 1);
        cr_assert_eq(r->unknown_tags.count, 1);
        cr_assert_eq(r->unknown_tags.items[0].tag, 1);
        seen++;
    }
    cr_assert_eq(rc, 0, "%s", err.msg);
    cr_assert_eq(seen, 1);
    km_metalog_close(m);
    free(p);
}
