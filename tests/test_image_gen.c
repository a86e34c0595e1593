/* test_image_gen.c - the generator, snapshots replacing the image, follow mode and `kmproxy metadata`. */
#include "km_image.h"
#include "km_testsupport.h"
#include "test_image_util.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static km_gen_opts small_opts(bool zk)
{
    return (km_gen_opts){.brokers = 4, .topics = 5, .partitions = 6, .replication = 3, .leader_changes = 40,
                         .seed = 7, .zk_migration = zk, .records_per_batch = 16};
}

static json_t *image_json(const km_image *img)
{
    km_err err;
    json_t *j = km_image_to_json(img, &err);
    cr_assert(j, "%s", err.msg);
    return j;
}

static void assert_same_image(const km_image *a, const km_image *b)
{
    json_t *ja = image_json(a), *jb = image_json(b);
    char *sa = json_dumps(ja, JSON_SORT_KEYS), *sb = json_dumps(jb, JSON_SORT_KEYS);
    cr_assert(json_equal(ja, jb), "generated: %.500s\nread:      %.500s", sa, sb);
    free(sa);
    free(sb);
    json_decref(ja);
    json_decref(jb);
}

static void round_trip(bool zk)
{
    char *dir = km_test_tmpdir("imggen");
    km_gen_opts o = small_opts(zk);
    km_image *gen = km_image_new(), *read = km_image_new();
    km_err err = {{0}};
    int64_t n = km_gen_write(dir, &o, gen, &err);
    cr_assert_gt(n, 0, "%s", err.msg);
    cr_assert_eq(km_image_load(read, dir, NULL, &err), n, "%s", err.msg);
    assert_same_image(gen, read);
    cr_assert_eq(km_image_topic_count(read), 5);
    cr_assert_eq(km_image_partition_count(read), 30);
    cr_assert_eq(km_image_broker_count(read), 4);
    cr_assert_eq(km_image_metadata_version(read), KM_MV_3_9_IV0);
    cr_assert_eq(km_image_zk_migration_state(read), zk ? KM_ZKM_MIGRATION : KM_ZKM_NONE);
    const km_broker *b = km_image_broker(read, 2);
    cr_assert(b && !b->fenced);
    cr_assert_eq(b->is_migrating_zk_broker, zk);
    cr_assert_eq(km_image_offset(read), n - 1);
    km_image_free(gen);
    km_image_free(read);
    km_test_rmtree(dir);
    free(dir);
}

Test(image_gen, round_trip_kraft) { round_trip(false); }
Test(image_gen, round_trip_zk_migration) { round_trip(true); }

/* km_image_copy_cluster (the daemon's continuous verifier reads it in another thread): the same brokers,
 * topics, partitions and position, in memory of its own (the original freed first, then the copy read). */
Test(image_gen, copy_cluster_has_the_brokers_and_partitions)
{
    char *dir = km_test_tmpdir("imgcopy");
    km_gen_opts o = small_opts(true);
    km_image *gen = km_image_new();
    km_err err = {{0}};
    cr_assert_gt(km_gen_write(dir, &o, gen, &err), 0, "%s", err.msg);
    cr_assert_eq(km_image_set_cluster_id(gen, "Xy1zCopyClusterId0000w", &err), 0, "%s", err.msg);
    km_image *copy = km_image_copy_cluster(gen, &err);
    cr_assert(copy, "%s", err.msg);
    json_t *jg = image_json(gen), *jc = image_json(copy);
    const char *same[] = {"clusterId", "offset", "epoch", "raftLeader", "topicCount", "partitionCount", "brokers",
                          "topics"};
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) {
        char *sg = json_dumps(json_object_get(jg, same[i]), JSON_SORT_KEYS | JSON_ENCODE_ANY);
        cr_assert(json_equal(json_object_get(jg, same[i]), json_object_get(jc, same[i])), "%s differs: %.300s",
                  same[i], sg);
        free(sg);
    }
    json_decref(jg);
    km_image_free(gen);
    cr_assert_eq(km_image_partition_count(copy), 30);
    const km_topic *t = km_image_topic_by_name(copy, "topic-0");
    km_partition p;
    cr_assert(t && km_topic_partition(t, 5, &p) && p.replicas.n == 3 && p.isr.n >= 1);
    json_decref(jc);
    km_image_free(copy);
    km_test_rmtree(dir);
    free(dir);
}

Test(image_gen, same_seed_same_log)
{
    char *d1 = km_test_tmpdir("imggen"), *d2 = km_test_tmpdir("imggen");
    km_gen_opts o = small_opts(true);
    km_err err;
    cr_assert_gt(km_gen_write(d1, &o, NULL, &err), 0, "%s", err.msg);
    cr_assert_gt(km_gen_write(d2, &o, NULL, &err), 0, "%s", err.msg);
    char cmd[2 * PATH_MAX];
    snprintf(cmd, sizeof cmd, "cmp -s %s/00000000000000000000.log %s/00000000000000000000.log", d1, d2);
    cr_assert_eq(system(cmd), 0, "byte-identical logs for one seed");
    cr_assert_eq(km_gen_write(d1, &o, NULL, &err), -1, "a directory that holds a log is refused");
    km_test_rmtree(d1);
    km_test_rmtree(d2);
    free(d1);
    free(d2);
}

/* Kafka's snapshot layout: header, records, footer, named <end offset>-<epoch>. */
static char *write_snapshot(const char *dir)
{
    char name[48], *path = malloc(PATH_MAX);
    km_ml_snapshot_name(100, 2, name);
    snprintf(path, PATH_MAX, "%s/%s", dir, name);
    km_metalog_writer_opts wo = {.leader_epoch = 2, .timestamp = 1};
    km_err err;
    km_metalog_writer *w = km_metalog_writer_open_snapshot(path, 1, &wo, &err);
    cr_assert(w, "%s", err.msg);
    km_feature_level_record f;
    km_feature_level_record_init(&f);
    f.name = km_cstr("metadata.version");
    f.feature_level = 20;
    km_topic_record t;
    km_topic_record_init(&t);
    t.name = km_cstr("only");
    t.topic_id = ti_uuid(77);
    km_partition_record p;
    km_partition_record_init(&p);
    int32_t reps[] = {1};
    p.topic_id = t.topic_id;
    p.partition_id = 0;
    p.replicas.count = p.isr.count = 1;
    p.replicas.items = p.isr.items = reps;
    p.removing_replicas.count = p.adding_replicas.count = p.directories.count = 0;
    p.leader = 1;
    km_metalog_entry e[] = {{&km_feature_level_record_desc, 0, &f, -1},
                            {&km_topic_record_desc, 0, &t, -1},
                            {&km_partition_record_desc, 1, &p, -1}};
    cr_assert_eq(km_metalog_writer_append(w, e, 3, NULL, &err), 0, "%s", err.msg);
    cr_assert_eq(km_metalog_writer_finish(w, &err), 0, "%s", err.msg);
    return path;
}

Test(image_gen, snapshot_replaces_the_image)
{
    char *dir = km_test_tmpdir("imggen"), *sdir = km_test_tmpdir("imgsnap");
    km_gen_opts o = small_opts(false);
    km_image *img = km_image_new();
    km_err err = {{0}};
    cr_assert_gt(km_gen_write(dir, &o, img, &err), 0, "%s", err.msg);
    char *snap = write_snapshot(sdir);
    km_delta *d = km_delta_new();
    cr_assert_gt(km_image_load(img, snap, d, &err), 0, "%s", err.msg);
    cr_assert(km_delta_is_snapshot(d));
    cr_assert_eq(km_image_topic_count(img), 1);
    cr_assert_eq(km_image_broker_count(img), 0);
    cr_assert_eq(km_image_metadata_version(img), 20);
    cr_assert_eq(km_image_offset(img), 99);
    cr_assert_eq(km_image_epoch(img), 2);
    cr_assert_null(km_image_config(img, KM_CFG_TOPIC, "topic-0"));
    size_t it = 0;
    int created = 0, deleted = 0, unregistered = 0;
    km_topic_change tc;
    while (km_delta_next_topic(d, &it, &tc))
        tc.op == KM_CREATED ? created++ : tc.op == KM_DELETED ? deleted++ : 0;
    km_broker_change bc;
    it = 0;
    while (km_delta_next_broker(d, &it, &bc))
        unregistered += bc.what == KM_BC_UNREGISTERED;
    cr_assert_eq(created, 1);
    cr_assert_eq(deleted, 5);
    cr_assert_eq(unregistered, 4);
    km_feature_change fc;
    it = 0;
    cr_assert(km_delta_next_feature(d, &it, &fc));
    cr_assert_eq(fc.old_level, 21);
    cr_assert_eq(fc.new_level, 20);
    km_delta_free(d);
    km_image_free(img);
    km_test_rmtree(dir);
    km_test_rmtree(sdir);
    free(dir);
    free(sdir);
    free(snap);
}

/* Appends one PartitionChangeRecord moving topic-0/0's leader to `leader`. */
static void append_change(const char *dir, const km_image *img, int32_t leader)
{
    km_metalog_writer_opts wo = {.leader_epoch = 1, .timestamp = 1};
    km_err err;
    km_metalog_writer *w = km_metalog_writer_open_dir(dir, &wo, &err);
    cr_assert(w, "%s", err.msg);
    km_partition_change_record r;
    ti_change_init(&r, km_topic_id(km_image_topic_by_name(img, "topic-0")), 0);
    r.leader = leader;
    km_metalog_entry e = {&km_partition_change_record_desc, 1, &r, -1};
    cr_assert_eq(km_metalog_writer_append(w, &e, 1, NULL, &err), 0, "%s", err.msg);
    cr_assert_eq(km_metalog_writer_finish(w, &err), 0, "%s", err.msg);
}

Test(image_gen, follow_delivers_one_delta_per_batch)
{
    char *dir = km_test_tmpdir("imgfollow");
    km_gen_opts o = small_opts(true);
    km_image *expect = km_image_new(), *img = km_image_new();
    km_err err = {{0}};
    cr_assert_gt(km_gen_write(dir, &o, expect, &err), 0, "%s", err.msg);
    km_image_follow *f = km_image_follow_open(img, dir, NULL, &err);
    cr_assert(f, "%s", err.msg);
    km_delta *d = km_delta_new();
    int rc, batches = 0;
    while ((rc = km_image_follow_next(f, d, &err)) == 1)
        batches++;
    cr_assert_eq(rc, 0, "%s", err.msg);
    cr_assert_gt(batches, 5);
    assert_same_image(expect, img);

    km_partition before;
    cr_assert(km_topic_partition(km_image_topic_by_name(img, "topic-0"), 0, &before));
    int32_t leader = before.replicas.v[before.replicas.v[0] == before.leader ? 1 : 0];
    append_change(dir, img, leader);
    cr_assert_eq(km_image_follow_next(f, d, &err), 1, "%s", err.msg);
    size_t it = 0;
    km_partition_change pc;
    cr_assert(km_delta_next_partition(d, &it, &pc));
    cr_assert_str_eq(pc.topic_name, "topic-0");
    cr_assert_eq(pc.old.leader, before.leader);
    cr_assert_eq(pc.new.leader, leader);
    cr_assert_eq(pc.new.leader_epoch, before.leader_epoch + 1);
    cr_assert_not(km_delta_next_partition(d, &it, &pc));
    cr_assert_eq(km_image_follow_next(f, d, &err), 0, "%s", err.msg);
    km_delta_free(d);
    km_image_follow_close(f);
    km_image_free(img);
    km_image_free(expect);
    km_test_rmtree(dir);
    free(dir);
}

Test(image_gen, cluster_id_from_meta_properties)
{
    char *base = km_test_tmpdir("imgmeta"), log[PATH_MAX], props[PATH_MAX];
    snprintf(log, sizeof log, "%s/__cluster_metadata-0", base);
    snprintf(props, sizeof props, "%s/meta.properties", base);
    FILE *f = fopen(props, "w");
    cr_assert(f);
    fputs("#\nnode.id=1\nversion=1\ncluster.id=MkU3OEVBNTcwNTJENDM2Qg\n", f);
    fclose(f);
    km_gen_opts o = small_opts(false);
    km_err err = {{0}};
    cr_assert_gt(km_gen_write(log, &o, NULL, &err), 0, "%s", err.msg);
    km_image *img = km_image_new();
    cr_assert_gt(km_image_load(img, log, NULL, &err), 0, "%s", err.msg);
    cr_assert_str_eq(km_image_cluster_id(img), "MkU3OEVBNTcwNTJENDM2Qg");
    cr_assert_eq(km_image_set_cluster_id(img, "other", &err), 0);
    cr_assert_str_eq(km_image_cluster_id(img), "other");
    km_image_free(img);
    km_test_rmtree(base);
    free(base);
}

/* A transaction over three batches is delivered once, with the batch holding its End. */
Test(image_gen, follow_transaction_across_batches)
{
    char *dir = km_test_tmpdir("imgfollow");
    km_gen_opts o = small_opts(false);
    km_image *img = km_image_new();
    km_err err = {{0}};
    cr_assert_gt(km_gen_write(dir, &o, NULL, &err), 0, "%s", err.msg);
    km_image_follow *f = km_image_follow_open(img, dir, NULL, &err);
    cr_assert(f, "%s", err.msg);
    km_delta *d = km_delta_new();
    while (km_image_follow_next(f, d, &err) == 1)
        ;
    int64_t before = km_image_offset(img);
    km_metalog_writer_opts wo = {.leader_epoch = 1, .timestamp = 1};
    km_metalog_writer *w = km_metalog_writer_open_dir(dir, &wo, &err);
    cr_assert(w, "%s", err.msg);
    km_begin_transaction_record b;
    km_begin_transaction_record_init(&b);
    km_topic_record t;
    km_topic_record_init(&t);
    t.name = km_cstr("txn-topic");
    t.topic_id = ti_uuid(200);
    km_end_transaction_record e;
    km_end_transaction_record_init(&e);
    km_metalog_entry eb = {&km_begin_transaction_record_desc, 0, &b, -1}, et = {&km_topic_record_desc, 0, &t, -1},
                     ee = {&km_end_transaction_record_desc, 0, &e, -1};
    cr_assert_eq(km_metalog_writer_append(w, &eb, 1, NULL, &err), 0, "%s", err.msg);
    cr_assert_eq(km_metalog_writer_append(w, &et, 1, NULL, &err), 0, "%s", err.msg);
    cr_assert_eq(km_image_follow_next(f, d, &err), 0, "open transaction: nothing to deliver yet");
    cr_assert_null(km_image_topic_by_name(img, "txn-topic"));
    cr_assert_eq(km_image_offset(img), before);
    cr_assert_eq(km_metalog_writer_append(w, &ee, 1, NULL, &err), 0, "%s", err.msg);
    cr_assert_eq(km_metalog_writer_finish(w, &err), 0, "%s", err.msg);
    cr_assert_eq(km_image_follow_next(f, d, &err), 1, "%s", err.msg);
    size_t it = 0;
    km_topic_change tc;
    cr_assert(km_delta_next_topic(d, &it, &tc));
    cr_assert_eq(tc.op, KM_CREATED);
    cr_assert_str_eq(tc.name, "txn-topic");
    cr_assert_eq(km_delta_offset(d), before + 3);
    km_delta_free(d);
    km_image_follow_close(f);
    km_image_free(img);
    km_test_rmtree(dir);
    free(dir);
}

/* ---- the CLI ----------------------------------------------------------------------------- */

static int run(char **out, char **errout, const char *a1, const char *a2, const char *a3)
{
    char *argv[] = {(char *)km_test_binary(), "metadata", (char *)a1, (char *)a2, (char *)a3, NULL};
    size_t n;
    return km_test_run(argv, NULL, 0, out, &n, errout);
}

static char *gen_cli(const char *flags)
{
    char *dir = km_test_tmpdir("imgcli"), cmd[PATH_MAX * 2];
    snprintf(cmd, sizeof cmd, "%s metadata gen --out %s/log %s >/dev/null", km_test_binary(), dir, flags);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    return dir;
}

static size_t count_lines(const char *s, const char *needle)
{
    size_t n = 0;
    for (const char *l = s; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        if (!needle || (strstr(l, needle) && strstr(l, needle) < (strchr(l, '\n') ? strchr(l, '\n') : l + strlen(l))))
            n++;
    return n;
}

Test(image_cli, gen_dump_image)
{
    char *dir = gen_cli("--brokers 3 --topics 4 --partitions 5 --replication 2 --leader-changes 12 --seed 3 --zk-migration");
    char log[PATH_MAX], *out, *err;
    snprintf(log, sizeof log, "%s/log", dir);
    cr_assert_eq(run(&out, &err, "dump", log, NULL), 0, "%s", err);
    cr_assert_eq(count_lines(out, "\"type\":\"PARTITION_RECORD\""), 20);
    cr_assert_eq(count_lines(out, "\"type\":\"PARTITION_CHANGE_RECORD\""), 12);
    cr_assert_eq(count_lines(out, "\"type\":\"LEADER_CHANGE\""), 1);
    cr_assert(strstr(out, "{\"offset\":0,\"epoch\":1,\"type\":\"LEADER_CHANGE\",\"version\":0,\"data\":{"), "%.300s", out);
    cr_assert(strstr(out, "\"type\":\"ZK_MIGRATION_STATE_RECORD\",\"version\":0,\"data\":{\"zkMigrationState\":1}"));
    cr_assert(strstr(out, "\"type\":\"REGISTER_BROKER_RECORD\",\"version\":3,\"data\":{\"brokerId\":1,\"isMigratingZkBroker\":true"));
    cr_assert(strstr(out, "\"featureLevel\":21"));
    free(out);
    free(err);

    cr_assert_eq(run(&out, &err, "image", log, NULL), 0, "%s", err);
    json_error_t je;
    json_t *j = json_loads(out, 0, &je);
    cr_assert(j, "%s", je.text);
    cr_assert_eq(json_integer_value(json_object_get(j, "partitionCount")), 20);
    cr_assert_eq(json_integer_value(json_object_get(j, "metadataVersion")), 21);
    cr_assert_str_eq(json_string_value(json_object_get(j, "zkMigrationState")), "MIGRATION");
    cr_assert_eq(json_array_size(json_object_get(j, "brokers")), 3);
    json_t *t0 = json_array_get(json_object_get(j, "topics"), 0);
    cr_assert_str_eq(json_string_value(json_object_get(t0, "name")), "topic-0");
    cr_assert_eq(json_array_size(json_object_get(t0, "partitions")), 5);
    json_decref(j);
    free(out);
    free(err);
    km_test_rmtree(dir);
    free(dir);
}

/* Copies src to dst, flipping one byte at `at` (or truncating to `at` bytes when truncate). */
static void damaged_copy(const char *src, const char *dst, long at, bool truncate)
{
    FILE *in = fopen(src, "rb"), *out = fopen(dst, "wb");
    cr_assert(in && out);
    int c;
    for (long i = 0; (c = fgetc(in)) != EOF; i++) {
        if (truncate && i == at)
            break;
        fputc(i == at ? c ^ 0x5a : c, out);
    }
    fclose(in);
    fclose(out);
}

static void assert_bad_input(const char *cmd, const char *path, const char *reason)
{
    char *out, *err;
    cr_assert_eq(run(&out, &err, cmd, path, NULL), 2, "%s %s: %s", cmd, path, err);
    cr_assert(strstr(err, path), "names the file: %s", err);
    cr_assert(strstr(err, reason), "says why (%s): %s", reason, err);
    cr_assert_eq(count_lines(err, NULL), 1, "one line: %s", err);
    free(out);
    free(err);
}

Test(image_cli, corrupt_and_truncated_inputs)
{
    char *dir = gen_cli("--brokers 2 --topics 3 --partitions 4 --leader-changes 5");
    char seg[PATH_MAX], bad[PATH_MAX];
    snprintf(seg, sizeof seg, "%s/log/00000000000000000000.log", dir);
    struct stat st;
    cr_assert_eq(stat(seg, &st), 0);
    snprintf(bad, sizeof bad, "%s/flipped.log", dir);
    damaged_copy(seg, bad, (long)st.st_size / 2, false);
    assert_bad_input("dump", bad, "offset");
    assert_bad_input("image", bad, "offset");
    snprintf(bad, sizeof bad, "%s/torn.log", dir);
    damaged_copy(seg, bad, (long)st.st_size - 7, true);
    assert_bad_input("image", bad, "byte");
    snprintf(bad, sizeof bad, "%s/missing.log", dir);
    assert_bad_input("dump", bad, "No such file");
    km_test_rmtree(dir);
    free(dir);
}

Test(image_cli, later_segment_alone_names_the_record)
{
    char rel[] = "kraft-log/ArthurArutunyan04__Backend_labs__00000000000000005151.log", p[PATH_MAX];
    snprintf(p, sizeof p, "%s/corpus/%s", km_test_shared_dir(), rel);
    if (access(p, R_OK) != 0)
        cr_skip_test("corpus file %s absent", p);
    assert_bad_input("image", p, "offset 5170: PARTITION_CHANGE_RECORD v2: unknown topic id");
}

Test(image_cli, usage_errors_exit_2)
{
    char *out, *err;
    cr_assert_eq(run(&out, &err, "frobnicate", NULL, NULL), 2);
    free(out);
    free(err);
    cr_assert_eq(run(&out, &err, "gen", "--brokers", "x"), 2);
    free(out);
    free(err);
    cr_assert_eq(run(&out, &err, "dump", NULL, NULL), 2);
    free(out);
    free(err);
}

Test(image_cli, dump_snapshot_prints_control_records)
{
    char *dir = km_test_tmpdir("imgsnapcli");
    char *snap = write_snapshot(dir), *out, *err;
    cr_assert_eq(run(&out, &err, "dump", snap, NULL), 0, "%s", err);
    cr_assert_eq(count_lines(out, NULL), 5, "header, three records, footer: %s", out);
    const char *first = "{\"offset\":0,\"epoch\":2,\"type\":\"SNAPSHOT_HEADER\",\"version\":0,\"data\":{\"version\":0,"
                        "\"lastContainedLogTimestamp\":1},\"control\":true}\n";
    cr_assert(!strncmp(out, first, strlen(first)), "%s", out);
    cr_assert(strstr(out, "\"type\":\"SNAPSHOT_FOOTER\""), "%s", out);
    cr_assert(strstr(out, "\"type\":\"TOPIC_RECORD\",\"version\":0,\"data\":{\"name\":\"only\""), "%s", out);
    free(out);
    free(err);
    cr_assert_eq(run(&out, &err, "image", dir, NULL), 0, "%s", err);
    cr_assert(strstr(out, "\"offset\": 99"), "%.300s", out);
    free(out);
    free(err);
    km_test_rmtree(dir);
    free(dir);
    free(snap);
}

Test(image_cli, image_cluster_id_option)
{
    char *dir = gen_cli("--brokers 1 --topics 1 --partitions 1");
    char log[PATH_MAX], *out, *err;
    snprintf(log, sizeof log, "%s/log", dir);
    char *argv[] = {(char *)km_test_binary(), "metadata", "image", "--cluster-id", "abcDEF", log, NULL};
    size_t n;
    cr_assert_eq(km_test_run(argv, NULL, 0, &out, &n, &err), 0, "%s", err);
    cr_assert(strstr(out, "\"clusterId\": \"abcDEF\""), "%.200s", out);
    free(out);
    free(err);
    km_test_rmtree(dir);
    free(dir);
}

/* An empty directory (a wrong metadata.dir, most likely) is an error, never an empty image. */
Test(image_cli, empty_directory_is_an_error)
{
    char *dir = km_test_tmpdir("img-empty");
    assert_bad_input("dump", dir, "no records");
    assert_bad_input("image", dir, "no records");
    km_test_rmtree(dir);
    free(dir);
}
