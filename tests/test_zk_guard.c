/* The guards against destroying a cluster, on a real ZooKeeper holding a ZK-mode cluster: the tree
 * ZK-mode brokers write (/cluster/id, /brokers/ids, /brokers/topics with partition states, a live
 * ephemeral /controller held by another session, /controller_epoch), written here, and a real
 * snapshot of one from the corpus. `kmproxy zk sync` and `kmproxy run` must refuse (exit 2, one line
 * saying why, nothing written) a foreign, empty, not-migrating or older image, and a live ZK-mode
 * controller that has not handed over (Kafka 3.9's KRaftMigrationDriver rules, see zk_guard.c);
 * zk.max.deletes stops a sync that would delete more, listing the znodes. */
#include "test_zk_util.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define ZK_CLUSTER_ID "zKmOdEcLuStEr00000000w"
#define LEGACY_TOPICS 5
/* each: the topic, partitions/, partitions/0/, its state, /config/topics/<topic> */
#define LEGACY_ZNODES (LEGACY_TOPICS * 5)

static km_zks *zs;
static km_zkc *zc;     /* the test's own reads and writes */
static km_zkc *owner;  /* the ZK-mode brokers' session: holds /controller and /brokers/ids/N */
static char *tmp;

static void start_zk(void)
{
    char err[512] = "";
    zs = km_zks_start(1, NULL, 0, err, sizeof err);
    cr_assert(zs, "%s", err);
    zc = km_zkc_open(km_zks_hosts(zs, 0), NULL, 10000);
    owner = km_zkc_open(km_zks_hosts(zs, 0), NULL, 30000);
    cr_assert(zc && owner);
    tmp = km_test_tmpdir("zkguard");
}

static void stop_zk(void)
{
    km_zkc_close(owner);
    km_zkc_close(zc);
    km_zks_stop(zs);
    km_test_rmtree(tmp);
    free(tmp);
}

TestSuite(zk_guard, .init = start_zk, .fini = stop_zk, .timeout = 240);

/* ---- the ZK-mode cluster's tree, as Kafka 3.x brokers write it ---- */

static void create(km_zkc *c, const char *path, const char *data, int flags)
{
    cr_assert_eq(km_zkc_create(c, path, data, flags), ZOK, "create %s", path);
}

/* controller_broker: the broker whose live session holds /controller (-1: no /controller). */
static void write_zk_mode_cluster(int controller_broker)
{
    create(zc, "/cluster", NULL, 0);
    create(zc, "/cluster/id", "{\"version\":\"1\",\"id\":\"" ZK_CLUSTER_ID "\"}", 0);
    create(zc, "/controller_epoch", "6", 0);
    cr_assert_eq(km_zkc_mkdirs(zc, "/brokers/ids"), ZOK);
    cr_assert_eq(km_zkc_mkdirs(zc, "/brokers/topics"), ZOK);
    cr_assert_eq(km_zkc_mkdirs(zc, "/config/topics"), ZOK);
    char path[256], data[512];
    for (int id = 1; id <= 3; id++) {
        snprintf(path, sizeof path, "/brokers/ids/%d", id);
        snprintf(data, sizeof data, "{\"features\":{},\"listener_security_protocol_map\":{\"PLAINTEXT\":\"PLAINTEXT\"},"
                 "\"endpoints\":[\"PLAINTEXT://kafka%d:9092\"],\"jmx_port\":-1,\"port\":9092,\"host\":\"kafka%d\","
                 "\"version\":5,\"timestamp\":\"1709623253004\"}", id, id);
        create(owner, path, data, ZOO_EPHEMERAL);
    }
    for (int t = 0; t < LEGACY_TOPICS; t++) {
        snprintf(path, sizeof path, "/brokers/topics/legacy-%d", t);
        create(zc, path, "{\"partitions\":{\"0\":[1,2]},\"topic_id\":\"bWYLvkNSQeWdKhhr3n0vNw\",\"adding_replicas\":{},"
               "\"removing_replicas\":{},\"version\":3}", 0);
        snprintf(path, sizeof path, "/brokers/topics/legacy-%d/partitions/0", t);
        cr_assert_eq(km_zkc_mkdirs(zc, path), ZOK);
        snprintf(path, sizeof path, "/brokers/topics/legacy-%d/partitions/0/state", t);
        create(zc, path, "{\"controller_epoch\":6,\"leader\":1,\"version\":1,\"leader_epoch\":11,\"isr\":[1,2]}", 0);
        snprintf(path, sizeof path, "/config/topics/legacy-%d", t);
        create(zc, path, "{\"version\":1,\"config\":{}}", 0);
    }
    if (controller_broker >= 0) {
        snprintf(data, sizeof data, "{\"version\":2,\"brokerid\":%d,\"timestamp\":\"1709623253323\","
                 "\"kraftControllerEpoch\":-1}", controller_broker);
        create(owner, "/controller", data, ZOO_EPHEMERAL);
    }
}

/* /migration as a KRaft controller that migrated the cluster leaves it. */
static void write_migration(int64_t offset, int32_t epoch)
{
    char data[256];
    cr_assert_gt(km_zk_migration_json(data, sizeof data, 3000, 1, offset, epoch), 0);
    create(zc, "/migration", data, 0);
}

/* What the guards protect, as it stands: compared before and after a refused run. */
typedef struct zk_state {
    int topics;
    char *controller, *migration;
    int64_t controller_owner;
    int controller_epoch_version;
} zk_state;

static void zk_state_read(zk_state *s)
{
    char **kids = NULL;
    cr_assert_eq(km_zkc_children(zc, "/brokers/topics", &kids, &s->topics), ZOK);
    km_zkc_free_strings(kids, s->topics);
    struct Stat st = {0};
    s->controller = NULL;
    s->controller_owner = km_zkc_get(zc, "/controller", &s->controller, NULL, &st) == ZOK ? st.ephemeralOwner : -1;
    s->migration = zkt_get(zc, "/migration", NULL);
    s->controller_epoch_version = -1; /* absent */
    free(zkt_get(zc, "/controller_epoch", &s->controller_epoch_version));
}

static void zk_state_free(zk_state *s)
{
    free(s->controller);
    free(s->migration);
}

static void assert_untouched(const zk_state *before)
{
    zk_state now;
    zk_state_read(&now);
    cr_assert_eq(now.topics, before->topics, "topics: %d, were %d", now.topics, before->topics);
    cr_assert_eq(!now.controller, !before->controller);
    if (before->controller)
        cr_assert_str_eq(now.controller, before->controller);
    cr_assert_eq(now.controller_owner, before->controller_owner, "/controller changed hands");
    cr_assert_eq(!now.migration, !before->migration, "/migration %s", now.migration ? now.migration : "(absent)");
    if (before->migration)
        cr_assert_str_eq(now.migration, before->migration);
    cr_assert_eq(now.controller_epoch_version, before->controller_epoch_version, "/controller_epoch was written");
    zk_state_free(&now);
}

/* ---- images ---- */

/* A generated log under tmp/<name>, with meta.properties naming cluster_id (NULL: none). */
static char *gen_log(const char *name, const char *cluster_id, bool zk_migration)
{
    char *log = malloc(1024);
    snprintf(log, 1024, "%s/%s", tmp, name);
    km_gen_opts o = {.brokers = 3, .topics = 3, .partitions = 2, .seed = 7, .zk_migration = zk_migration};
    km_image *img = km_image_new();
    km_err err = {{0}};
    cr_assert_geq(km_gen_write(log, &o, img, &err), 0, "%s", err.msg);
    km_image_free(img);
    if (cluster_id) {
        char props[1200];
        snprintf(props, sizeof props, "%s/meta.properties", log);
        FILE *f = fopen(props, "w");
        cr_assert(f);
        fprintf(f, "version=1\ncluster.id=%s\nnode.id=3000\n", cluster_id);
        fclose(f);
    }
    return log;
}

static int64_t log_end_offset(const char *log)
{
    km_image *img = km_image_new();
    km_err err = {{0}};
    cr_assert_geq(km_image_load(img, log, NULL, &err), 0, "%s", err.msg);
    int64_t off = km_image_offset(img);
    km_image_free(img);
    return off;
}

/* ---- running kmproxy ---- */

typedef struct run_out {
    int code;
    char *out, *err;
} run_out;

static run_out run_kmproxy(const char *first, ...)
{
    char *argv[32] = {(char *)km_test_binary()};
    int n = 1;
    va_list ap;
    va_start(ap, first);
    for (const char *a = first; a && n < 31; a = va_arg(ap, const char *))
        argv[n++] = (char *)a;
    va_end(ap);
    argv[n] = NULL;
    run_out r = {0};
    r.code = km_test_run(argv, NULL, 0, &r.out, NULL, &r.err);
    return r;
}

static void run_free(run_out *r)
{
    free(r->out);
    free(r->err);
}

/* Lines of s, warnings (an overridden guard says so) and progress lines ("kmproxy zk sync: connecting
 * to ZooKeeper at ...", "kmproxy zk diff: reading ZooKeeper: ...") aside. */
static int lines_but_warnings(const char *s)
{
    int n = 0;
    for (const char *line = s; line && *line;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        bool progress = !strncmp(line, "kmproxy zk sync: ", 17) || !strncmp(line, "kmproxy zk diff: ", 17);
        n += !memmem(line, len, " WARN: ", 7) && !progress;
        line += len + (end != NULL);
    }
    return n;
}

/* Exit 2 with exactly one line on stderr (besides warnings), holding `why`. */
static void assert_refused(run_out *r, const char *why)
{
    cr_assert_eq(r->code, 2, "exit %d; stderr: %s", r->code, r->err);
    cr_assert(strstr(r->err, why), "want '%s' in: %s", why, r->err);
    cr_assert_eq(lines_but_warnings(r->err), 1, "one line saying why: %s", r->err);
}

static run_out zk_sync(const char *log, const char *extra1, const char *extra2)
{
    return run_kmproxy("zk", "sync", "--zookeeper", km_zks_hosts(zs, 0), "--metadata", log, extra1, extra2, NULL);
}

/* ---- the refusals ---- */

/* zk sync of log (with one option, or NULL) is refused for `why` and ZooKeeper is left as it was. */
static void refused_untouched(const char *log, const char *opt, const char *why)
{
    zk_state before;
    zk_state_read(&before);
    run_out r = zk_sync(log, opt, NULL);
    assert_refused(&r, why);
    run_free(&r);
    assert_untouched(&before);
    zk_state_free(&before);
}

Test(zk_guard, another_clusters_log_is_refused_even_with_force)
{
    write_zk_mode_cluster(1);
    char *log = gen_log("foreign", "AnotherClusterId000000w", true);
    for (int forced = 0; forced < 2; forced++)
        refused_untouched(log, forced ? "--force" : NULL,
                          "cluster id AnotherClusterId000000w is not ZooKeeper's /cluster/id " ZK_CLUSTER_ID
                          ": another cluster's log");
    free(log);
}

Test(zk_guard, an_empty_image_is_refused_even_with_force)
{
    write_zk_mode_cluster(1);
    char empty[1024];
    snprintf(empty, sizeof empty, "%s/empty", tmp);
    cr_assert_eq(mkdir(empty, 0700), 0);
    for (int forced = 0; forced < 2; forced++)
        refused_untouched(empty, forced ? "--force" : NULL,
                          "the image is empty (no records) while ZooKeeper holds a cluster (3 brokers, 5 topics): "
                          "syncing it would delete the cluster");
}

/* ZkMigrationState NONE: Kafka's driver goes INACTIVE ("this cluster should not be migrated"). With
 * --force the sync goes on, and then the first-sync delete limit (0) stops it, listing the
 * ZK-mode brokers' topics; --max-deletes -1 finally lets it replace them. */
Test(zk_guard, not_migrating_image_needs_force_then_the_first_sync_delete_limit)
{
    write_zk_mode_cluster(-1);
    char *log = gen_log("kraft-native", ZK_CLUSTER_ID, false);
    refused_untouched(log, NULL, "the image's ZkMigrationState is NONE (its cluster was never migrated from ZooKeeper) "
                                 "while ZooKeeper holds a cluster (3 brokers, 5 topics) (--force overrides this)");

    run_out r = zk_sync(log, "--force", NULL);
    char refusal[128];
    /* refused before any write now: the read-only pass first (proxy/daemon/daemon_precheck.c) */
    snprintf(refusal, sizeof refusal, "delete %d znodes, more than zk.max.deletes=0", LEGACY_ZNODES);
    assert_refused(&r, refusal);
    for (int t = 0; t < LEGACY_TOPICS; t++) {
        char want[128];
        snprintf(want, sizeof want, "- /brokers/topics/legacy-%d\n", t);
        cr_assert(strstr(r.out, want), "the refused deletions are listed: %s", r.out);
    }
    run_free(&r);
    char *state = zkt_get(zc, "/brokers/topics/legacy-0/partitions/0/state", NULL);
    cr_assert(state, "nothing was deleted");
    free(state);
    char *topic = zkt_get(zc, "/brokers/topics/topic-0", NULL);
    cr_assert_null(topic, "nothing of the pass was written before its deletions were counted");

    /* zk diff lists the deletions, and says what a sync would run into */
    r = run_kmproxy("zk", "diff", "--zookeeper", km_zks_hosts(zs, 0), "--metadata", log, NULL);
    cr_assert_eq(r.code, 1, "%s", r.err);
    cr_assert(strstr(r.out, "- /brokers/topics/legacy-3\n"), "%s", r.out);
    cr_assert(strstr(r.out, "zk diff: a sync would refuse: the image's ZkMigrationState is NONE"), "%s", r.out);
    run_free(&r);
    r = run_kmproxy("zk", "diff", "--zookeeper", km_zks_hosts(zs, 0), "--metadata", log, "--force", NULL);
    cr_assert_eq(r.code, 1, "%s", r.err);
    snprintf(refusal, sizeof refusal, "zk diff: a sync would refuse: it would delete %d znodes, more than "
             "zk.max.deletes=0 (the default for the first sync", LEGACY_ZNODES);
    cr_assert(strstr(r.out, "- /brokers/topics/legacy-3\n") && strstr(r.out, refusal), "%s", r.out);
    run_free(&r);

    /* the refused pass had claimed /controller at the log's epoch: the next claim needs a newer one
     * (KafkaZkClient.tryRegisterKRaftControllerAsActiveController) */
    r = run_kmproxy("zk", "sync", "--zookeeper", km_zks_hosts(zs, 0), "--metadata", log, "--force", "--max-deletes=-1",
                    "--controller-epoch", "2", NULL);
    cr_assert_eq(r.code, 0, "%s", r.err);
    run_free(&r);
    cr_assert_null(zkt_get(zc, "/brokers/topics/legacy-0", NULL));
    free(log);
}

/* ZkMigrationState MIGRATION but no /migration: "KRaft controller indicates an active migration, but
 * the ZK state does not" (WaitForControllerQuorumEvent). */
Test(zk_guard, migration_without_a_recorded_initial_migration_is_refused)
{
    write_zk_mode_cluster(-1);
    char *log = gen_log("migrating", ZK_CLUSTER_ID, true);
    refused_untouched(log, NULL, "the image says a migration is under way but ZooKeeper (no /migration) records no "
                                 "initial migration into KRaft");
    free(log);
}

/* An older copy of the log: /migration records more than the image holds. */
Test(zk_guard, an_image_behind_migration_is_refused)
{
    write_zk_mode_cluster(-1);
    char *log = gen_log("older", ZK_CLUSTER_ID, true);
    int64_t end = log_end_offset(log);
    write_migration(end + 100, 1);
    char want[256];
    snprintf(want, sizeof want, "the image (offset %lld epoch 1) is behind what /migration records (offset %lld epoch 1)",
             (long long)end, (long long)end + 100);
    refused_untouched(log, NULL, want);
    free(log);
}

/* KafkaZkClient.tryRegisterKRaftControllerAsActiveController fails when /controller_epoch is missing
 * (a new one would restart the epochs the brokers have seen); --force creates it. */
Test(zk_guard, a_cluster_without_controller_epoch_is_refused)
{
    write_zk_mode_cluster(-1);
    char *log = gen_log("no-epoch", ZK_CLUSTER_ID, true);
    write_migration(5, 1);
    cr_assert_eq(km_zkc_delete(zc, "/controller_epoch", -1), ZOK);
    refused_untouched(log, NULL, "/controller_epoch is missing while ZooKeeper holds a cluster (/cluster/id is set): "
                                 "Kafka's KRaft controller cannot register as the active controller without it");
    cr_assert_null(zkt_get(zc, "/controller_epoch", NULL), "the refused claim created /controller_epoch");
    run_out r = zk_sync(log, "--force", NULL);
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_assert(strstr(r.err, "/controller_epoch is missing") && strstr(r.err, "(overridden by --force)"), "%s", r.err);
    run_free(&r);
    char *epoch = zkt_get(zc, "/controller_epoch", NULL);
    cr_assert_str_eq(epoch ? epoch : "(absent)", "1");
    free(epoch);
    free(log);
}

/* A live ZK-mode controller (ephemeral /controller, kraftControllerEpoch -1) whose broker is not
 * registered with KRaft as a migrating ZK broker has not handed over; one that is, has. */
Test(zk_guard, a_live_zk_controller_that_has_not_handed_over_is_refused)
{
    write_zk_mode_cluster(7);
    char *log = gen_log("takeover", ZK_CLUSTER_ID, true);
    write_migration(5, 1);
    refused_untouched(log, NULL, "/controller is held by the live ZK-mode controller, broker 7, which has not handed over");

    /* broker 2 is in the image as a migrating ZK broker: it runs in migration mode and yields */
    cr_assert_eq(km_zkc_delete(owner, "/controller", -1), ZOK);
    create(owner, "/controller", "{\"version\":2,\"brokerid\":2,\"timestamp\":\"1\",\"kraftControllerEpoch\":-1}",
           ZOO_EPHEMERAL);
    run_out r = zk_sync(log, NULL, NULL);
    cr_assert_eq(r.code, 0, "%s", r.err);
    run_free(&r);
    char *ctrl = zkt_get(zc, "/controller", NULL);
    cr_assert(ctrl && strstr(ctrl, "\"kraftControllerEpoch\":") && !strstr(ctrl, ":-1}"), "%s", ctrl);
    free(ctrl);
    free(log);
}

Test(zk_guard, diff_exits_0_when_equal_1_when_different_2_on_bad_input)
{
    char *log = gen_log("diff", NULL, true);
    run_out r = zk_sync(log, NULL, NULL);
    cr_assert_eq(r.code, 0, "%s", r.err);
    run_free(&r);
    r = run_kmproxy("zk", "diff", "--zookeeper", km_zks_hosts(zs, 0), "--metadata", log, NULL);
    cr_assert_eq(r.code, 0, "in sync: %s%s", r.out, r.err);
    run_free(&r);
    create(zc, "/brokers/topics/stray", "{\"partitions\":{},\"version\":3}", 0);
    r = run_kmproxy("zk", "diff", "--zookeeper", km_zks_hosts(zs, 0), "--metadata", log, NULL);
    cr_assert_eq(r.code, 1, "%s", r.err);
    cr_assert(strstr(r.out, "- /brokers/topics/stray\n"), "%s", r.out);
    run_free(&r);
    r = run_kmproxy("zk", "diff", "--zookeeper", km_zks_hosts(zs, 0), "--metadata", "/nonexistent/log", NULL);
    cr_assert_eq(r.code, 2, "%s", r.err);
    run_free(&r);
    free(log);
}

/* ---- the same through the daemon ---- */

static char *daemon_set(const char *key, const char *value)
{
    char *kv = malloc(2048);
    snprintf(kv, 2048, "%s=%s", key, value);
    return kv;
}

static run_out run_daemon(const char *log, const char *extra)
{
    char *md = daemon_set("metadata.dir", log), *zk = daemon_set("zookeeper.connect", km_zks_hosts(zs, 0));
    run_out r = run_kmproxy("run", "--set", "metadata.source=dir", "--set", md, "--set", zk, "--set", "brokers.enabled=false", "--set",
                            "log.level=warn", extra ? "--set" : NULL, extra, NULL);
    free(md);
    free(zk);
    return r;
}

Test(zk_guard, daemon_refuses_another_clusters_log_with_exit_2)
{
    write_zk_mode_cluster(1);
    char *log = gen_log("daemon-foreign", "AnotherClusterId000000w", true);
    zk_state before;
    zk_state_read(&before);
    run_out r = run_daemon(log, "zk.force=true");
    cr_assert_eq(r.code, 2, "%s", r.err);
    cr_assert(strstr(r.err, "is not ZooKeeper's /cluster/id " ZK_CLUSTER_ID), "%s", r.err);
    run_free(&r);
    assert_untouched(&before);
    zk_state_free(&before);
    free(log);
}

Test(zk_guard, daemon_stops_before_deleting_more_than_zk_max_deletes)
{
    write_zk_mode_cluster(-1);
    char *log = gen_log("daemon-deletes", ZK_CLUSTER_ID, false);
    run_out r = run_daemon(log, "zk.force=true");
    cr_assert_eq(r.code, 2, "%s", r.err);
    char refusal[128];
    /* refused before any write now: the read-only pass first (proxy/daemon/daemon_precheck.c) */
    snprintf(refusal, sizeof refusal, "delete %d znodes, more than zk.max.deletes=0", LEGACY_ZNODES);
    cr_assert(strstr(r.err, refusal), "%s", r.err);
    cr_assert(strstr(r.err, "/brokers/topics/legacy-4"), "the daemon logs what it would delete: %s", r.err);
    run_free(&r);
    char *state = zkt_get(zc, "/brokers/topics/legacy-0/partitions/0/state", NULL);
    cr_assert(state, "nothing was deleted");
    free(state);
    free(log);
}

/* ---- a real ZK-mode cluster's tree (the corpus) ---- */

/* The chroot ("" or "/name") under which the served snapshot holds /cluster/id, or NULL. */
static char *find_cluster_root(km_zkc *c)
{
    char *id = zkt_get(c, "/cluster/id", NULL);
    if (id) {
        free(id);
        return strdup("");
    }
    char **kids = NULL, path[512], *root = NULL;
    int n = 0;
    if (km_zkc_children(c, "/", &kids, &n) != ZOK)
        return NULL;
    for (int i = 0; i < n && !root; i++) {
        snprintf(path, sizeof path, "/%s/cluster/id", kids[i]);
        if ((id = zkt_get(c, path, NULL))) {
            snprintf(path, sizeof path, "/%s", kids[i]);
            root = strdup(path);
            free(id);
        }
    }
    km_zkc_free_strings(kids, n);
    return root;
}

/* The largest snapshot holding a cluster (the most topics to lose). */
static bool pick_snapshot(char *out, size_t cap)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/corpus/zk-snapshot", km_test_shared_dir());
    DIR *d = opendir(dir);
    if (!d)
        return false;
    off_t best = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        char path[2048];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (strstr(e->d_name, "snapshot.") && !stat(path, &st) && st.st_size > best) {
            best = st.st_size;
            snprintf(out, cap, "%s", path);
        }
    }
    closedir(d);
    return best > 0;
}

Test(zk_guard, real_zk_mode_snapshot_is_protected, .timeout = 300)
{
    char snap[2048];
    if (!pick_snapshot(snap, sizeof snap))
        cr_skip_test("corpus not available under %s", km_test_shared_dir());
    char err[512] = "";
    km_zks *real = km_zks_start(1, snap, 0, err, sizeof err);
    cr_assert(real, "%s", err);
    km_zkc *c = km_zkc_open(km_zks_hosts(real, 0), NULL, 10000);
    cr_assert(c);
    char *root = find_cluster_root(c);
    cr_assert(root, "%s holds no /cluster/id", snap);
    char hosts[1024], topics[600], **kids = NULL;
    snprintf(hosts, sizeof hosts, "%s%s", km_zks_hosts(real, 0), root);
    snprintf(topics, sizeof topics, "%s/brokers/topics", root);
    int n_before = 0, n_after = 0;
    cr_assert_eq(km_zkc_children(c, topics, &kids, &n_before), ZOK);
    km_zkc_free_strings(kids, n_before);
    cr_assert_gt(n_before, 0);
    char empty[1024];
    snprintf(empty, sizeof empty, "%s/empty-real", tmp);
    cr_assert_eq(mkdir(empty, 0700), 0);
    char *foreign = gen_log("real-foreign", "AnotherClusterId000000w", true);
    char *native = gen_log("real-native", NULL, false);
    char idpath[600], *idjson;
    snprintf(idpath, sizeof idpath, "%s/cluster/id", root);
    idjson = zkt_get(c, idpath, NULL);
    const char *id_at = strstr(idjson, "\"id\":\"");
    cr_assert(id_at, "%s", idjson);
    char real_id[64];
    snprintf(real_id, sizeof real_id, "%.*s", (int)strcspn(id_at + 6, "\""), id_at + 6);
    struct { const char *log, *opt, *opt_arg, *why; } cases[] = {
        {foreign, "--force", NULL, "is not ZooKeeper's /cluster/id"},
        {empty, "--force", NULL, "the image is empty (no records) while ZooKeeper holds a cluster"},
        {native, "--cluster-id", real_id, "the image's ZkMigrationState is NONE"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        run_out r = run_kmproxy("zk", "sync", "--zookeeper", hosts, "--metadata", cases[i].log, cases[i].opt,
                                cases[i].opt_arg, NULL);
        assert_refused(&r, cases[i].why);
        run_free(&r);
        cr_assert_eq(km_zkc_children(c, topics, &kids, &n_after), ZOK);
        km_zkc_free_strings(kids, n_after);
        cr_assert_eq(n_after, n_before, "%s: topics deleted", cases[i].log);
    }
    free(idjson);
    free(foreign);
    free(native);
    free(root);
    km_zkc_close(c);
    km_zks_stop(real);
}
