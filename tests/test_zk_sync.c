/* Full sync and dual write against a real ZooKeeper: `metadata gen` images, the corpus images
 * (one after the other on the same server, so each sync also deletes what the previous image
 * left), deltas including a topic deletion, and the CLI. ZooKeeper is read back and checked
 * against the image in Kafka's formats by test_zk_util.c's independent parser. */
#include "test_zk_util.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static km_zks *zs;
static km_zkc *zc;

static void start_zk(void) { zkt_one_server_start(&zs, &zc, 4 * 1024 * 1024); }
static void stop_zk(void) { zkt_one_server_stop(zs, zc); }

TestSuite(zk_sync, .init = start_zk, .fini = stop_zk, .timeout = 300);

/* The tests' own client keeps its session while a test leaves it alone for longer than the
 * session timeout (before, a long full sync on a loaded machine found zc expired and reported
 * /brokers/topics "missing"). */
Test(zk_sync, the_test_client_keeps_its_session_while_idle)
{
    km_zkc *c = km_zkc_open(km_zks_hosts(zs, 0), NULL, 1000);
    cr_assert(c);
    sleep(3);
    char *data = NULL;
    int len = 0;
    cr_assert_eq(km_zkc_get(c, "/zookeeper", &data, &len, NULL), ZOK, "the session did not survive 3 idle seconds");
    free(data);
    km_zkc_close(c);
}

static km_image *gen_image(const char *dir, int topics, int partitions, int leader_changes)
{
    km_image *img = km_image_new();
    km_gen_opts o = {.brokers = 3, .topics = topics, .partitions = partitions, .leader_changes = leader_changes,
                     .seed = 7, .zk_migration = true};
    km_err err = {{0}};
    cr_assert_geq(km_gen_write(dir, &o, img, &err), 0, "%s", err.msg);
    return img;
}

/* Follows log into img, which holds its first batch on return. */
static km_image_follow *follow_first_batch(const char *log, km_image *img, km_delta *d)
{
    km_err err = {{0}};
    km_metalog_opts opts = {0};
    km_image_follow *f = km_image_follow_open(img, log, &opts, &err);
    cr_assert(f, "%s", err.msg);
    cr_assert_eq(km_image_follow_next(f, d, &err), 1, "%s", err.msg);
    return f;
}

/* These tests sync unrelated images one after the other on purpose (each must delete what the one
 * before left): past the guards that refuse exactly that (test_zk_guard.c). */
static const km_zkb_config FORCED = {.guard = {.force = true, .max_deletes_set = true, .max_deletes = -1}};

static void sync_and_check(const km_image *img, int32_t epoch)
{
    zkt_bridge *t = zkt_bridge_new(km_zks_hosts(zs, 0), img, 3000, epoch, &FORCED);
    cr_assert(t);
    cr_assert(zkt_bridge_wait_idle(t, 60000), "bridge %d: %s", (int)km_zkb_get_phase(t->b), km_zkb_error(t->b));
    char why[512];
    cr_assert(zkt_zk_equals_image(zc, img, epoch, why, sizeof why), "%s", why);
    km_zkw_metrics m;
    km_zkw_get_metrics(km_zkb_writer(t->b), &m);
    cr_assert_eq(m.write_behind_lag, 0);
    zkt_bridge_free(t);
}

Test(zk_sync, generated_image_round_trips_and_second_sync_writes_nothing)
{
    char *dir = km_test_tmpdir("zkgen");
    char log[512];
    snprintf(log, sizeof log, "%s/log", dir);
    km_image *img = gen_image(log, 12, 8, 50);
    sync_and_check(img, 4);
    /* same image, new epoch: partition states differ only in controller_epoch, which brokers
     * ignore, so nothing but /migration is written */
    zkt_bridge *t = zkt_bridge_new(km_zks_hosts(zs, 0), img, 3000, 5, NULL);
    cr_assert(zkt_bridge_wait_idle(t, 60000));
    km_zkb_summary s;
    km_zkb_get_summary(t->b, &s);
    cr_assert_eq(s.created + s.updated + s.deleted, 0, "%zu/%zu/%zu", s.created, s.updated, s.deleted);
    zkt_bridge_free(t);
    /* the notifications ZK brokers' watchers need are there */
    char **kids = NULL;
    int n = 0;
    cr_assert_eq(km_zkc_children(zc, "/config/changes", &kids, &n), ZOK);
    cr_assert_gt(n, 0);
    char path[256];
    snprintf(path, sizeof path, "/config/changes/%s", kids[0]);
    char *note = zkt_get(zc, path, NULL);
    cr_assert(!strncmp(kids[0], "config_change_", 14) && strlen(kids[0]) == 24, "%s", kids[0]);
    cr_assert(note && !strncmp(note, "{\"version\":2,\"entity_path\":\"", 28), "%s", note);
    free(note);
    km_zkc_free_strings(kids, n);
    km_image_free(img);
    km_test_rmtree(dir);
    free(dir);
}

static km_image *load(const char *path)
{
    km_image *img = km_image_new();
    km_err err = {{0}};
    if (km_image_load(img, path, NULL, &err) < 0) {
        km_image_free(img);
        return NULL;
    }
    return img;
}

/* Each corpus snapshot onto the same ZooKeeper: what the previous one left is deleted. */
Test(zk_sync, corpus_images, .timeout = 600)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/corpus/kraft-snapshot", km_test_shared_dir());
    DIR *d = opendir(dir);
    if (!d)
        cr_skip_test("corpus not available at %s", dir);
    struct dirent *e;
    int synced = 0, epoch = 1;
    while ((e = readdir(d)) && synced < 40) {
        if (!strstr(e->d_name, ".checkpoint"))
            continue;
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        km_image *img = load(path);
        if (!img || km_image_offset(img) < 0) { /* an empty image over a cluster is refused, even forced */
            km_image_free(img);
            continue; /* the image's own tests cover unreadable files */
        }
        cr_log_info("syncing %s (%zu topics, %zu partitions)", e->d_name, km_image_topic_count(img),
                    km_image_partition_count(img));
        sync_and_check(img, ++epoch);
        km_image_free(img);
        synced++;
    }
    closedir(d);
    cr_assert_gt(synced, 0, "no corpus checkpoint could be loaded");
}

/* Deltas one batch at a time: a generated log followed batch by batch, then a topic deletion
 * and a config change applied in memory. */
Test(zk_sync, dual_write_follows_deltas)
{
    char *dir = km_test_tmpdir("zkdw");
    char log[512];
    snprintf(log, sizeof log, "%s/log", dir);
    km_image *expect = gen_image(log, 6, 5, 300);
    km_image *img = km_image_new();
    km_err err = {{0}};
    km_delta *d = km_delta_new();
    km_image_follow *f = follow_first_batch(log, img, d);
    zkt_bridge *t = zkt_bridge_new(km_zks_hosts(zs, 0), img, 3000, 3, &(km_zkb_config){.zk.max_multi_ops = 10});
    cr_assert(zkt_bridge_wait_idle(t, 60000), "%s", km_zkb_error(t->b));
    int r, deltas = 0;
    while ((r = km_image_follow_next(f, d, &err)) == 1) {
        cr_assert_eq(km_zkb_delta(t->b, d, &err), 0, "%s", err.msg);
        deltas++;
    }
    cr_assert_eq(r, 0, "%s", err.msg);
    cr_assert_gt(deltas, 0);
    cr_assert(zkt_bridge_wait_idle(t, 60000), "%s", km_zkb_error(t->b));
    char why[512];
    cr_assert(zkt_zk_equals_image(zc, img, 3, why, sizeof why), "%s", why);
    cr_assert_eq(km_image_offset(img), km_image_offset(expect));

    /* delete topic-1 and change a topic config, as the controller would */
    const km_topic *victim = km_image_topic_by_name(img, "topic-1");
    cr_assert(victim);
    km_remove_topic_record rm;
    km_remove_topic_record_init(&rm);
    rm.topic_id = km_topic_id(victim);
    int64_t off = km_image_offset(img) + 1;
    km_delta_clear(d);
    cr_assert_eq(km_image_apply(img, KM_MDR_REMOVE_TOPIC_RECORD, 0, &rm, off, 9, "test", d, &err), 0, "%s", err.msg);
    km_config_record cfg;
    km_config_record_init(&cfg);
    cfg.resource_type = KM_CFG_TOPIC;
    cfg.resource_name = km_cstr("topic-2");
    cfg.name = km_cstr("retention.ms");
    cfg.value = km_cstr("1234");
    cr_assert_eq(km_image_apply(img, KM_MDR_CONFIG_RECORD, 0, &cfg, off + 1, 9, "test", d, &err), 0, "%s", err.msg);
    cr_assert_eq(km_zkb_delta(t->b, d, &err), 0, "%s", err.msg);
    cr_assert(zkt_bridge_wait_idle(t, 60000), "%s", km_zkb_error(t->b));
    cr_assert(zkt_zk_equals_image(zc, img, 3, why, sizeof why), "%s", why);
    cr_assert_null(zkt_get(zc, "/brokers/topics/topic-1", NULL));
    cr_assert_null(zkt_get(zc, "/config/topics/topic-1", NULL));
    cr_assert_null(zkt_get(zc, "/admin/delete_topics/topic-1", NULL),
                   "ZkTopicMigrationClient.deleteTopic writes no pending-deletion marker");

    km_delta_free(d);
    km_image_follow_close(f);
    zkt_bridge_free(t);
    km_image_free(img);
    km_image_free(expect);
    km_test_rmtree(dir);
    free(dir);
}

Test(zk_sync, cli_sync_then_diff)
{
    char *dir = km_test_tmpdir("zkcli");
    char log[512];
    snprintf(log, sizeof log, "%s/log", dir);
    km_image *img = gen_image(log, 3, 2, 5);
    char *hosts = strdup(km_zks_hosts(zs, 0));
    char *argv[] = {(char *)km_test_binary(), "zk", "sync", "--zookeeper", hosts, "--metadata", log, NULL};
    char *out = NULL, *errs = NULL;
    cr_assert_eq(km_test_run(argv, NULL, 0, &out, NULL, &errs), 0, "%s", errs);
    cr_assert(strstr(out, "zk sync: ") && strstr(out, "znodes created"), "%s", out);
    free(out); free(errs);
    char why[512];
    cr_assert(zkt_zk_equals_image(zc, img, km_image_raft_leader_epoch(img) > 0 ? km_image_raft_leader_epoch(img) : 1,
                                  why, sizeof why), "%s", why);
    cr_assert_eq(km_zkc_set(zc, "/config/topics/topic-0", "{\"version\":1,\"config\":{\"x\":\"y\"}}", -1, NULL), ZOK);
    char *dargv[] = {(char *)km_test_binary(), "zk", "diff", "--zookeeper", hosts, "--metadata", log, NULL};
    cr_assert_eq(km_test_run(dargv, NULL, 0, &out, NULL, &errs), 1, "a difference exits 1, as diff(1): %s", errs);
    cr_assert(strstr(out, "~ /config/topics/topic-0\n"), "%s", out);
    cr_assert(strstr(out, "0 missing in ZooKeeper, 1 different, 0 only in ZooKeeper"), "%s", out);
    free(out); free(errs);
    char *bad[] = {(char *)km_test_binary(), "zk", "sync", "--metadata", log, NULL};
    cr_assert_eq(km_test_run(bad, NULL, 0, NULL, NULL, NULL), 2, "missing --zookeeper is a usage error");
    char *des[] = {(char *)km_test_binary(), "zk", "sync", "--zookeeper", hosts, "--metadata", log,
                   "--password-encoder-cipher-algorithm", "DES/CBC/PKCS5Padding", NULL};
    cr_assert_eq(km_test_run(des, NULL, 0, NULL, NULL, &errs), 2);
    cr_assert(strstr(errs, "'DES/CBC/PKCS5Padding' is not supported"), "%s", errs);
    free(errs);
    free(hosts);
    km_image_free(img);
    km_test_rmtree(dir);
    free(dir);
}

/* Real Kafka ZooKeeper trees (the corpus' ZK snapshots), guards overridden: syncing an image over what real brokers
 * and controllers wrote leaves ZooKeeper equal to the image and the brokers' own znodes alone. */
Test(zk_sync, over_real_kafka_zookeeper_snapshots, .timeout = 300)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/corpus/zk-snapshot", km_test_shared_dir());
    DIR *d = opendir(dir);
    if (!d)
        cr_skip_test("corpus not available at %s", dir);
    char *gdir = km_test_tmpdir("zksnap"), log[512];
    snprintf(log, sizeof log, "%s/log", gdir);
    km_image *img = gen_image(log, 4, 3, 10);
    struct dirent *e;
    int done = 0;
    while ((e = readdir(d)) && done < 4) {
        if (!strstr(e->d_name, "snapshot.") || strstr(e->d_name, "snapshot.0"))
            continue; /* snapshot.0 files are empty trees */
        char path[2048], err[512] = "";
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        km_zks *real = km_zks_start(1, path, 0, err, sizeof err);
        if (!real)
            continue;
        km_zkc *c = km_zkc_open(km_zks_hosts(real, 0), NULL, 10000);
        cr_assert(c);
        char **ids = NULL;
        int nids = 0, rc_ids = km_zkc_children(c, "/brokers/ids", &ids, &nids);
        zkt_bridge *t = zkt_bridge_new(km_zks_hosts(real, 0), img, 3000, 1, &FORCED);
        cr_assert(zkt_bridge_wait_idle(t, 60000), "%s: %s", e->d_name, km_zkb_error(t->b));
        char why[512];
        cr_assert(zkt_zk_equals_image(c, img, 1, why, sizeof why), "%s: %s", e->d_name, why);
        char **after = NULL;
        int nafter = 0;
        if (rc_ids == ZOK) {
            cr_assert_eq(km_zkc_children(c, "/brokers/ids", &after, &nafter), ZOK);
            cr_assert_eq(nafter, nids, "%s: /brokers/ids is the brokers' own", e->d_name);
        }
        km_zkc_free_strings(ids, nids);
        km_zkc_free_strings(after, nafter);
        cr_log_info("synced over %s", e->d_name);
        zkt_bridge_free(t);
        km_zkc_close(c);
        km_zks_stop(real);
        done++;
    }
    closedir(d);
    km_image_free(img);
    km_test_rmtree(gdir);
    free(gdir);
}

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct poll_ctx {
    const km_image *img;
    char why[512];
} poll_ctx;

static bool zk_matches(km_zkc *c, poll_ctx *p, int guard_ms)
{
    for (int waited = 0; waited < guard_ms; waited += 100) {
        if (zkt_zk_equals_image(c, p->img, 1000, p->why, sizeof p->why))
            return true;
        usleep(100 * 1000);
    }
    return false;
}

/* Appends a config change and a topic deletion to the log as one batch, and to the expected image. */
static void append_changes(const char *log, km_image *expect)
{
    km_err err = {{0}};
    km_metalog_writer *w = km_metalog_writer_open_dir(log, &(km_metalog_writer_opts){.leader_epoch = 1}, &err);
    cr_assert(w, "%s", err.msg);
    km_config_record cfg;
    km_config_record_init(&cfg);
    cfg.resource_type = KM_CFG_TOPIC;
    cfg.resource_name = km_cstr("topic-0");
    cfg.name = km_cstr("retention.ms");
    cfg.value = km_cstr("777");
    km_remove_topic_record rm;
    km_remove_topic_record_init(&rm);
    rm.topic_id = km_topic_id(km_image_topic_by_name(expect, "topic-2"));
    km_metalog_entry e[2] = {{&km_config_record_desc, 0, &cfg, -1}, {&km_remove_topic_record_desc, 0, &rm, -1}};
    int64_t base = -1;
    cr_assert_eq(km_metalog_writer_append(w, e, 2, &base, &err), 0, "%s", err.msg);
    cr_assert_eq(km_metalog_writer_finish(w, &err), 0, "%s", err.msg);
    cr_assert_eq(km_image_apply(expect, KM_MDR_CONFIG_RECORD, 0, &cfg, base, 1, "test", NULL, &err), 0, "%s", err.msg);
    cr_assert_eq(km_image_apply(expect, KM_MDR_REMOVE_TOPIC_RECORD, 0, &rm, base + 1, 1, "test", NULL, &err), 0,
                 "%s", err.msg);
}

Test(zk_sync, cli_follow_dual_writes_appended_records)
{
    char *dir = km_test_tmpdir("zkfollow"), log[512], out[600];
    snprintf(log, sizeof log, "%s/log", dir);
    snprintf(out, sizeof out, "%s/stdout", dir);
    km_image *expect = gen_image(log, 4, 3, 10);
    char *hosts = strdup(km_zks_hosts(zs, 0));
    pid_t parent = getpid(), pid = fork();
    if (pid == 0) {
        km_test_die_with_parent(parent);
        FILE *f = freopen(out, "w", stdout);
        (void)f;
        execl(km_test_binary(), km_test_binary(), "zk", "sync", "--follow", "--zookeeper", hosts, "--metadata", log,
              (char *)NULL);
        _exit(127);
    }
    poll_ctx p = {.img = expect};
    cr_assert(zk_matches(zc, &p, 30000), "initial sync: %s", p.why);
    append_changes(log, expect);
    cr_assert(zk_matches(zc, &p, 30000), "after the appended batch: %s", p.why);
    cr_assert_null(zkt_get(zc, "/brokers/topics/topic-2", NULL));
    char *cfg = zkt_get(zc, "/config/topics/topic-0", NULL);
    cr_assert(cfg && strstr(cfg, "\"retention.ms\":\"777\""), "%s", cfg);
    free(cfg);
    kill(pid, SIGTERM);
    int status = 0;
    waitpid(pid, &status, 0);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d", status);
    free(hosts);
    km_image_free(expect);
    km_test_rmtree(dir);
    free(dir);
}

typedef struct stream_watch {
    zkt_bridge *t;
    bool acked_while_planning;
    size_t max_pending;
    int64_t max_lag_syncing;
} stream_watch;

static bool stream_settled(void *ctx)
{
    stream_watch *s = ctx;
    km_zkw *w = km_zkb_writer(s->t->b);
    km_zkw_metrics m;
    km_zkw_get_metrics(w, &m);
    s->acked_while_planning |= km_zkb_planning(s->t->b) && m.multis_ok > 0;
    if (km_zkw_pending_ops(w) > s->max_pending)
        s->max_pending = km_zkw_pending_ops(w);
    if (km_zkb_get_phase(s->t->b) == KM_ZKB_SYNC && m.write_behind_lag > s->max_lag_syncing)
        s->max_lag_syncing = m.write_behind_lag;
    return km_zkb_idle(s->t->b) || km_zkb_get_phase(s->t->b) == KM_ZKB_STOPPED;
}

/* The full sync does not plan everything before writing: slices go to ZooKeeper while the next
 * ones are planned, and planning waits at the write-behind bound (40,000 znodes through a bound
 * of 2,000 ops). */
Test(zk_sync, full_sync_streams_its_plan_within_the_write_behind_bound, .timeout = 300)
{
    char *dir = km_test_tmpdir("zkstream"), log[512];
    snprintf(log, sizeof log, "%s/log", dir);
    km_image *img = gen_image(log, 100, 200, 0);
    zkt_bridge *t = zkt_bridge_new(km_zks_hosts(zs, 0), img, 3000, 2,
                                   &(km_zkb_config){.zk = {.max_multi_ops = 200, .max_pending_ops = 2000},
                                                    .sync_chunk_ops = 400});
    stream_watch w = {t, false, 0, 0};
    zkt_run_until(t->loop, stream_settled, &w, 240000);
    cr_assert(km_zkb_idle(t->b), "%s", km_zkb_error(t->b));
    cr_assert(w.acked_while_planning, "nothing was acknowledged before the plan was complete");
    cr_assert_eq(w.max_lag_syncing, km_image_offset(img) + 1, "while ZooKeeper was still empty of the image, the "
                 "lag must show it (KAFKA-21062 read zero): %lld", (long long)w.max_lag_syncing);
    km_zkw_metrics m;
    km_zkw_get_metrics(km_zkb_writer(t->b), &m);
    cr_assert_eq(m.write_behind_lag, 0);
    /* the bound plus what one hand-over adds (400 ops and the slice that reached them) */
    cr_assert_leq(w.max_pending, 2000 + 400 + 2 * 1024, "pending ops peaked at %zu", w.max_pending);
    char why[512];
    cr_assert(zkt_zk_equals_image(zc, img, 2, why, sizeof why), "%s", why);
    zkt_bridge_free(t);
    km_image_free(img);
    km_test_rmtree(dir);
    free(dir);
}

static bool sync_writing(void *ctx)
{
    zkt_bridge *t = ctx;
    km_zkw_metrics m;
    km_zkw_get_metrics(km_zkb_writer(t->b), &m);
    return km_zkb_get_phase(t->b) == KM_ZKB_SYNC && m.multis_ok >= 2;
}

/* A generated log followed only part way: the rest arrives as deltas while a pass runs. */
typedef struct moving_log {
    char *dir;
    km_image *img, *expect;
    km_image_follow *f;
    km_delta *d;
} moving_log;

static void moving_log_open(moving_log *m, const char *tag, int topics, int partitions, int leader_changes,
                            size_t start_topics, size_t start_partitions)
{
    char log[512];
    km_err err = {{0}};
    m->dir = km_test_tmpdir(tag);
    snprintf(log, sizeof log, "%s/log", m->dir);
    m->expect = gen_image(log, topics, partitions, leader_changes);
    m->img = km_image_new();
    km_metalog_opts opts = {0};
    m->f = km_image_follow_open(m->img, log, &opts, &err);
    cr_assert(m->f, "%s", err.msg);
    m->d = km_delta_new();
    while (km_image_topic_count(m->img) < start_topics || km_image_partition_count(m->img) < start_partitions)
        cr_assert_eq(km_image_follow_next(m->f, m->d, &err), 1, "%s", err.msg);
}

/* Applies the rest of the log to the image, handing each delta to the bridge. */
static void moving_log_feed(moving_log *m, km_zkb *b)
{
    km_err err = {{0}};
    int r;
    while ((r = km_image_follow_next(m->f, m->d, &err)) == 1)
        cr_assert_eq(km_zkb_delta(b, m->d, &err), 0, "%s", err.msg);
    cr_assert_eq(r, 0, "%s", err.msg);
}

static void moving_log_close(moving_log *m)
{
    km_delta_free(m->d);
    km_image_follow_close(m->f);
    km_image_free(m->img);
    km_image_free(m->expect);
    km_test_rmtree(m->dir);
    free(m->dir);
}

/* Deltas that arrive while the full sync runs are folded in: one catch-up pass against our model
 * of ZooKeeper when it ends, no second read of ZooKeeper, then dual write. */
Test(zk_sync, deltas_during_the_full_sync_are_caught_up)
{
    moving_log m;
    moving_log_open(&m, "zkcatch", 8, 6, 200, 0, 48); /* start from the image with every partition */
    zkt_bridge *t = zkt_bridge_new(km_zks_hosts(zs, 0), m.img, 3000, 3,
                                   &(km_zkb_config){.zk = {.max_multi_ops = 10, .max_inflight = 2}});
    cr_assert(zkt_run_until(t->loop, sync_writing, t, 60000), "the full sync never started writing");
    moving_log_feed(&m, t->b);
    cr_assert_eq(km_zkb_get_phase(t->b), KM_ZKB_SYNC, "the deltas must arrive mid-sync");
    cr_assert(zkt_bridge_wait_idle(t, 60000), "%s", km_zkb_error(t->b));
    char why[512];
    cr_assert(zkt_zk_equals_image(zc, m.img, 3, why, sizeof why), "%s", why);
    km_zkb_summary s;
    km_zkb_get_summary(t->b, &s);
    cr_assert_eq(s.full_syncs, 1, "one read of ZooKeeper, then the catch-up from the model");
    zkt_bridge_free(t);
    moving_log_close(&m);
}

static bool pass_planning(void *ctx) { return km_zkb_planning(((zkt_bridge *)ctx)->b); }

/* The image grows while a re-sync is still rendering topics (its topic table doubles under the
 * pass's iterator). Whatever the iteration saw, no live topic may be deleted: the pass leaves
 * deletions to the catch-up pass that renders the moved image whole. */
Test(zk_sync, image_moving_mid_pass_never_deletes_a_live_topic, .timeout = 300)
{
    moving_log m;
    moving_log_open(&m, "zkmoving", 1200, 2, 0, 600, 0);
    sync_and_check(m.img, 2); /* ZooKeeper holds the first 600 topics */
    /* half way through the generated log the image is still PRE_MIGRATION: past the guard */
    zkt_bridge *t = zkt_bridge_new(km_zks_hosts(zs, 0), m.img, 3000, 3, &FORCED);
    cr_assert(zkt_run_until(t->loop, pass_planning, t, 60000), "the re-sync never started planning");
    for (int i = 0; i < 3; i++) /* one slice each: the model's load, the type directories, ~150 topics */
        ev_run(t->loop, EVRUN_NOWAIT);
    cr_assert(km_zkb_planning(t->b), "the pass must still be rendering topics");
    moving_log_feed(&m, t->b);
    cr_assert_eq(km_image_topic_count(m.img), 1200);
    cr_assert(zkt_bridge_wait_idle(t, 120000), "%s", km_zkb_error(t->b));
    km_zkb_summary s;
    km_zkb_get_summary(t->b, &s);
    cr_assert_eq(s.deleted, 0, "%zu znodes of live topics were deleted", s.deleted);
    char why[512];
    cr_assert(zkt_zk_equals_image(zc, m.img, 3, why, sizeof why), "%s", why);
    zkt_bridge_free(t);
    moving_log_close(&m);
}

/* Is there a change notification `prefix<seq>` under dir holding exactly `want`? */
static bool has_notification(const char *dir, const char *prefix, const char *want)
{
    char **kids = NULL, path[512];
    int n = 0;
    bool found = false;
    if (km_zkc_children(zc, dir, &kids, &n) == ZOK)
        for (int i = 0; i < n && !found; i++) {
            snprintf(path, sizeof path, "%s/%s", dir, kids[i]);
            char *data = zkt_get(zc, path, NULL);
            found = !strncmp(kids[i], prefix, strlen(prefix)) && strlen(kids[i]) == strlen(prefix) + 10 && data &&
                    !strcmp(data, want);
            free(data);
        }
    km_zkc_free_strings(kids, n);
    return found;
}

/* Exact bytes of the formats the generator does not produce: delegation tokens (sanitized
 * principals), prefixed ACLs and their extended change event, and quota values through
 * Java's Double.toString. */
Test(zk_sync, tokens_prefixed_acls_and_quota_numbers_in_kafka_formats)
{
    char *dir = km_test_tmpdir("zkfmt"), log[512];
    snprintf(log, sizeof log, "%s/log", dir);
    km_image *img = gen_image(log, 1, 1, 0);
    km_err err = {{0}};
    int64_t off = km_image_offset(img);
    km_delegation_token_record tok;
    km_delegation_token_record_init(&tok);
    tok.owner = km_cstr("User:alice smith");
    tok.requester = km_cstr("User:bob");
    km_str renewers[1] = {km_cstr("User:carol")};
    tok.renewers.count = 1;
    tok.renewers.items = renewers;
    tok.issue_timestamp = 1;
    tok.expiration_timestamp = 2;
    tok.max_timestamp = 3;
    tok.token_id = km_cstr("tok1");
    cr_assert_eq(km_image_apply(img, KM_MDR_DELEGATION_TOKEN_RECORD, 0, &tok, ++off, 1, "t", NULL, &err), 0, "%s", err.msg);
    km_access_control_entry_record acl;
    km_access_control_entry_record_init(&acl);
    acl.id.b[0] = 0x42;
    acl.resource_type = 2;
    acl.resource_name = km_cstr("pay");
    acl.pattern_type = 4;
    acl.principal = km_cstr("User:alice");
    acl.host = km_cstr("*");
    acl.operation = 3;
    acl.permission_type = 3;
    cr_assert_eq(km_image_apply(img, KM_MDR_ACCESS_CONTROL_ENTRY_RECORD, 0, &acl, ++off, 1, "t", NULL, &err), 0, "%s", err.msg);
    const char *types[2] = {"user", "client-id"}, *names[2] = {"quser", "cli"}, *keys[2] = {"request_percentage", "controller_mutation_rate"};
    double values[2] = {12.5, 1e7};
    for (int i = 0; i < 2; i++) {
        km_client_quota_record q;
        km_client_quota_record_init(&q);
        km_client_quota_record_entity_data e = {km_cstr(types[i]), km_cstr(names[i]), {0, NULL}};
        q.entity.count = 1;
        q.entity.items = &e;
        q.key = km_cstr(keys[i]);
        q.value = values[i];
        cr_assert_eq(km_image_apply(img, KM_MDR_CLIENT_QUOTA_RECORD, 0, &q, ++off, 1, "t", NULL, &err), 0, "%s", err.msg);
    }
    zkt_bridge *t = zkt_bridge_new(km_zks_hosts(zs, 0), img, 3000, 1, NULL);
    cr_assert(zkt_bridge_wait_idle(t, 60000), "%s", km_zkb_error(t->b));
    char *s = zkt_get(zc, "/delegation_token/tokens/tok1", NULL);
    cr_assert_str_eq(s, "{\"version\":3,\"owner\":\"User%3Aalice%20smith\",\"tokenRequester\":\"User%3Abob\","
                        "\"renewers\":[\"User%3Acarol\"],\"issueTimestamp\":1,\"maxTimestamp\":3,"
                        "\"expiryTimestamp\":2,\"tokenId\":\"tok1\"}");
    free(s);
    cr_assert(has_notification("/delegation_token/token_changes", "token_change_", "tok1"));
    s = zkt_get(zc, "/kafka-acl-extended/prefixed/Topic/pay", NULL);
    cr_assert_str_eq(s, "{\"version\":1,\"acls\":[{\"principal\":\"User:alice\",\"permissionType\":\"Allow\","
                        "\"operation\":\"Read\",\"host\":\"*\"}]}");
    free(s);
    cr_assert(has_notification("/kafka-acl-extended-changes", "acl_changes_",
                               "{\"version\":1,\"resourceType\":\"TOPIC\",\"name\":\"pay\",\"patternType\":\"PREFIXED\"}"));
    cr_assert(has_notification("/config/changes", "config_change_", "{\"version\":2,\"entity_path\":\"clients/cli\"}"));
    s = zkt_get(zc, "/config/users/quser", NULL);
    cr_assert_str_eq(s, "{\"version\":1,\"config\":{\"request_percentage\":\"12.5\"}}");
    free(s);
    s = zkt_get(zc, "/config/clients/cli", NULL);
    cr_assert_str_eq(s, "{\"version\":1,\"config\":{\"controller_mutation_rate\":\"1.0E7\"}}");
    free(s);
    char why[512];
    cr_assert(zkt_zk_equals_image(zc, img, 1, why, sizeof why), "%s", why);
    zkt_bridge_free(t);
    km_image_free(img);
    km_test_rmtree(dir);
    free(dir);
}

/* A second writer moves /migration while we dual-write: the next delta fences the bridge, and the
 * reason is in the metrics. */
Test(zk_sync, second_writer_stops_the_bridge)
{
    char *dir = km_test_tmpdir("zk2w"), log[512];
    snprintf(log, sizeof log, "%s/log", dir);
    km_image *img = gen_image(log, 2, 2, 0);
    zkt_bridge *t = zkt_bridge_new(km_zks_hosts(zs, 0), img, 3000, 1, NULL);
    cr_assert(zkt_bridge_wait_idle(t, 60000), "%s", km_zkb_error(t->b));
    cr_assert_eq(km_zkc_set(zc, "/migration", "{\"version\":0,\"kraft_controller_id\":7,\"kraft_controller_epoch\":9,"
                                              "\"kraft_metadata_offset\":1,\"kraft_metadata_epoch\":1}", -1, NULL), ZOK);
    km_config_record cfg;
    km_config_record_init(&cfg);
    cfg.resource_type = KM_CFG_TOPIC;
    cfg.resource_name = km_cstr("topic-0");
    cfg.name = km_cstr("retention.ms");
    cfg.value = km_cstr("5");
    km_delta *d = km_delta_new();
    km_err err = {{0}};
    cr_assert_eq(km_image_apply(img, KM_MDR_CONFIG_RECORD, 0, &cfg, km_image_offset(img) + 1, 1, "t", d, &err), 0,
                 "%s", err.msg);
    cr_assert_eq(km_zkb_delta(t->b, d, &err), 0, "%s", err.msg);
    zkt_bridge_wait_idle(t, 20000);
    cr_assert_eq(km_zkb_get_phase(t->b), KM_ZKB_STOPPED);
    cr_assert(strstr(km_zkb_error(t->b), "second writer"), "%s", km_zkb_error(t->b));
    char *cfgdata = zkt_get(zc, "/config/topics/topic-0", NULL);
    cr_assert(cfgdata && !strstr(cfgdata, "\"retention.ms\":\"5\""), "a fenced bridge wrote %s", cfgdata);
    free(cfgdata);
    char *m = km_zkw_metrics_json(km_zkb_writer(t->b));
    cr_assert(strstr(m, "\"zk_migration_state\":\"FENCED\"") && strstr(m, "second writer"), "%s", m);
    free(m);
    cr_assert_eq(km_zkb_delta(t->b, d, &err), -1, "a stopped bridge refuses deltas");
    km_delta_free(d);
    zkt_bridge_free(t);
    km_image_free(img);
    km_test_rmtree(dir);
    free(dir);
}

/* ---- password-type configs (ZkConfigMigrationClient: PasswordEncoder on write, decode on read) ---- */

static void apply_config(km_image *img, int8_t type, const char *res, const char *name, const char *value)
{
    km_config_record cfg;
    km_config_record_init(&cfg);
    cfg.resource_type = type;
    cfg.resource_name = km_cstr(res);
    cfg.name = km_cstr(name);
    cfg.value = km_cstr(value);
    km_err err = {{0}};
    int64_t at = km_image_offset(img) + 1;
    cr_assert_eq(km_image_apply(img, KM_MDR_CONFIG_RECORD, 0, &cfg, at, 1, "test", NULL, &err), 0, "%s", err.msg);
}

/* The value of config `key` in the config znode at path (caller frees), or NULL. */
static char *zk_config_value(const char *path, const char *key)
{
    char *data = zkt_get(zc, path, NULL);
    json_error_t e;
    json_t *j = data ? json_loads(data, 0, &e) : NULL;
    const char *v = json_string_value(json_object_get(json_object_get(j, "config"), key));
    char *out = v ? strdup(v) : NULL;
    json_decref(j);
    free(data);
    return out;
}

static km_zkb_summary sync_with_secret(const km_image *img, int32_t epoch, const char *secret)
{
    km_zkb_config cfg = {.passwords = {.secret = secret}};
    zkt_bridge *t = zkt_bridge_new(km_zks_hosts(zs, 0), img, 3000, epoch, &cfg);
    cr_assert(t);
    cr_assert(zkt_bridge_wait_idle(t, 60000), "%s", km_zkb_error(t->b));
    km_zkb_summary s;
    km_zkb_get_summary(t->b, &s);
    zkt_bridge_free(t);
    return s;
}

static char *decoded(const char *secret, const char *encoded)
{
    km_err err = {{0}};
    km_zk_pwenc *e = km_zk_pwenc_new(&(km_zk_password_config){.secret = secret}, &err);
    cr_assert(e, "%s", err.msg);
    char *plain = km_zk_password_decode(e, encoded, &err);
    km_zk_pwenc_free(e);
    return plain;
}

/* Passwords reach ZooKeeper encoded with the configured secret, the other values as they are; a
 * re-sync compares the decoded values (every encoding has a fresh IV, Kafka's a fresh salt), so
 * it writes nothing; a password stored in the clear is rewritten encoded. */
Test(zk_sync, password_configs_are_written_encoded_and_compared_decoded)
{
    char *dir = km_test_tmpdir("zkpw"), log[512];
    snprintf(log, sizeof log, "%s/log", dir);
    km_image *img = gen_image(log, 2, 2, 0);
    const char *key = "listener.name.internal.ssl.keystore.password", *plain = "k\xc3\xa9ystore-pass";
    apply_config(img, KM_CFG_BROKER, "1", key, plain);
    apply_config(img, KM_CFG_BROKER, "1", "log.cleaner.threads", "2");
    apply_config(img, KM_CFG_TOPIC, "topic-0", "sasl.jaas.config", "jaas-secret");
    for (int id = 10; id < 30; id++) { /* several slices' worth: each costs the planner a PBKDF2 */
        char name[16], value[32];
        snprintf(name, sizeof name, "%d", id);
        snprintf(value, sizeof value, "pass-%d", id);
        apply_config(img, KM_CFG_BROKER, name, "ssl.key.password", value);
    }
    km_zkb_summary s = sync_with_secret(img, 2, "encoder-secret");
    for (int id = 10; id < 30; id++) {
        char path[64], want[32];
        snprintf(path, sizeof path, "/config/brokers/%d", id);
        snprintf(want, sizeof want, "pass-%d", id);
        char *enc = zk_config_value(path, "ssl.key.password"), *dec = decoded("encoder-secret", enc);
        cr_assert_str_eq(dec, want, "%s: %s", path, enc);
        free(enc);
        free(dec);
    }
    cr_assert_gt(s.created, 0);
    char *stored = zk_config_value("/config/brokers/1", key), *topic = zk_config_value("/config/topics/topic-0",
                                                                                        "sasl.jaas.config");
    char *threads = zk_config_value("/config/brokers/1", "log.cleaner.threads");
    cr_assert_str_eq(threads, "2", "non-password values stay as they are");
    cr_assert(stored && strstr(stored, "encryptedPassword:") && !strstr(stored, "ystore-pass"), "%s", stored);
    char *back = decoded("encoder-secret", stored), *tback = decoded("encoder-secret", topic);
    cr_assert_str_eq(back, plain);
    cr_assert_str_eq(tback, "jaas-secret");
    cr_assert_null(decoded("another-secret", stored), "a wrong secret must not decode");
    /* a new process: new salt and IVs, same plain values */
    s = sync_with_secret(img, 3, "encoder-secret");
    cr_assert_eq(s.created + s.updated + s.deleted, 0, "%zu/%zu/%zu", s.created, s.updated, s.deleted);
    /* stored in the clear (a controller without a secret wrote it): rewritten, encoded */
    cr_assert_eq(km_zkc_set(zc, "/config/brokers/1",
                            "{\"version\":1,\"config\":{\"listener.name.internal.ssl.keystore.password\":"
                            "\"k\xc3\xa9ystore-pass\",\"log.cleaner.threads\":\"2\"}}", -1, NULL), ZOK);
    s = sync_with_secret(img, 4, "encoder-secret");
    cr_assert_eq(s.updated, 1, "%zu/%zu/%zu", s.created, s.updated, s.deleted);
    char *again = zk_config_value("/config/brokers/1", key), *aback = decoded("encoder-secret", again);
    cr_assert_str_eq(aback, plain);
    /* no secret: Kafka's NOOP encoder, the value goes as it is */
    s = sync_with_secret(img, 5, NULL);
    cr_assert_eq(s.updated, 22, "every password config rewritten in the clear: %zu", s.updated);
    char *clear = zk_config_value("/config/brokers/1", key);
    cr_assert_str_eq(clear, plain);
    free(stored); free(topic); free(threads); free(back); free(tback); free(again); free(aback); free(clear);
    km_image_free(img);
    km_test_rmtree(dir);
    free(dir);
}

static bool claimed_and_decided(void *ctx)
{
    zkt_bridge *t = ctx;
    return km_zkw_get_state(km_zkb_writer(t->b)) == KM_ZKW_READY &&
           (km_zkb_awaited_offset(t->b) >= 0 || km_zkb_get_phase(t->b) != KM_ZKB_WAITING);
}

static int64_t migration_offset(km_zkc *c)
{
    char *mig = zkt_get(c, "/migration", NULL);
    cr_assert(mig, "no /migration");
    json_t *j = json_loads(mig, 0, NULL);
    int64_t off = json_integer_value(json_object_get(j, "kraft_metadata_offset"));
    json_decref(j);
    free(mig);
    return off;
}

static bool claim_multi_dropped(void *ctx) { return km_fp_fired(ctx) >= 1; }

/* Issue 27 item 4: between the claim's first read (the guard's, which saw /migration within the image)
 * and its read of /migration after the claim, /migration moved ahead of the image - as when the last
 * batch of the instance that wrote before lands (its multi checked the old /controller_epoch). The
 * fault proxy lets the claim's multi commit and drops its reply; while the writer has not heard back,
 * the test moves /migration ahead. As Kafka's SyncKRaftMetadataEvent does, the full sync must wait
 * until the image reaches that offset: /migration never moves backwards, and the log keeps being read
 * meanwhile. */
static void claim_behind_migration(bool hand_deltas)
{
    char *dir = km_test_tmpdir("zkahead");
    char log[512], direct[256], proxied[256], perr[256] = "";
    snprintf(log, sizeof log, "%s/log", dir);
    km_image *ahead = gen_image(log, 4, 3, 40); /* the whole log: where the other writer got */
    km_fp *fp = km_fp_start(km_zks_port(zs, 0), perr, sizeof perr);
    cr_assert(fp, "%s", perr);
    snprintf(direct, sizeof direct, "%s/migration-ahead", km_zks_hosts(zs, 0));
    snprintf(proxied, sizeof proxied, "%s/migration-ahead", km_fp_hosts(fp));

    km_image *img = km_image_new(); /* this process's image: the log's first batch */
    km_err err = {{0}};
    km_delta *d = km_delta_new();
    km_image_follow *f = follow_first_batch(log, img, d);
    int64_t recorded = km_image_offset(ahead);
    cr_assert_lt(km_image_offset(img), recorded);

    km_fp_arm(fp, KM_FP_MULTI_ANY, KM_FP_DROP_REPLY, "", 0); /* the session's first multi: the claim */
    zkt_bridge *t = zkt_bridge_new(proxied, img, 3000, 3, NULL);
    cr_assert(zkt_run_until(t->loop, claim_multi_dropped, fp, 60000), "the claim's multi never came");
    km_zkc *c = km_zksec_open(direct, 10000);
    cr_assert(c);
    char mig[256];
    cr_assert_gt(km_zk_migration_json(mig, sizeof mig, 3000, 3, recorded, km_image_epoch(ahead)), 0);
    int rc = km_zkc_create(c, "/migration", mig, 0);
    if (rc == ZNODEEXISTS)
        rc = km_zkc_set(c, "/migration", mig, -1, NULL);
    cr_assert_eq(rc, ZOK, "writing /migration: %s", zerror(rc));
    km_fp_disarm(fp);

    cr_assert(zkt_run_until(t->loop, claimed_and_decided, t, 60000), "never claimed: %s", km_zkb_error(t->b));
    cr_assert_eq(km_zkb_awaited_offset(t->b), recorded, "the sync did not wait for the image (phase %d)",
                 (int)km_zkb_get_phase(t->b));
    cr_assert(km_zkb_can_accept(t->b), "the log must be read while the sync waits for it");
    zkt_spin(t->loop, 200);
    cr_assert_eq(migration_offset(c), recorded, "/migration moved backwards");
    int r;
    while ((r = km_image_follow_next(f, d, &err)) == 1) {
        if (hand_deltas)
            cr_assert_eq(km_zkb_delta(t->b, d, &err), 0, "%s", err.msg);
        cr_assert_geq(migration_offset(c), recorded, "/migration moved backwards at image offset %lld",
                      (long long)km_image_offset(img));
    }
    cr_assert_eq(r, 0, "%s", err.msg);
    cr_assert(zkt_bridge_wait_idle(t, 60000), "the sync never started once the image reached /migration (%s)",
              km_zkb_error(t->b));
    cr_assert_eq(migration_offset(c), km_image_offset(img));
    char why[512];
    cr_assert(zkt_zk_equals_image(c, img, 3, why, sizeof why), "%s", why);

    km_zkc_close(c);
    km_delta_free(d);
    km_image_follow_close(f);
    zkt_bridge_free(t);
    km_fp_stop(fp);
    km_image_free(img);
    km_image_free(ahead);
    km_test_rmtree(dir);
    free(dir);
}

Test(zk_sync, a_claim_behind_migration_waits_for_the_image_before_syncing)
{
    claim_behind_migration(true);
}

/* The KRaft observer hands over no delta for batches that change nothing (the leader's NoOpRecords every
 * 500 ms): the image moves past /migration without a delta, and the waiting sync must still start. Seen on
 * the real cluster: the claim waited for good and the log reader stayed paused behind it. */
Test(zk_sync, a_claim_behind_migration_syncs_when_the_image_moves_without_a_delta)
{
    claim_behind_migration(false);
}
