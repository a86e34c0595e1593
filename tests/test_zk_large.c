/* Znodes past 512 KiB against a real ZooKeeper (issue 27 item 5): a topic of 40,000 partitions and
 * 6,000 ACLs on one resource are written, in a full sync and as deltas, each large znode alone in a
 * multi of its own as Kafka writes it; a znode larger than the server's jute.maxbuffer allows is
 * refused naming it (path, size, the limit and the key to raise), and the bridge stops instead of
 * re-syncing into the same refusal. */
#include "test_zk_util.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static km_zks *zs;
static km_zkc *zc;

/* ZooKeeper's default jute.maxbuffer (1 MiB - 1): what the znodes below fit in, as kmproxy's default. */
static void start_zk(void) { zkt_one_server_start(&zs, &zc, 0); }
static void stop_zk(void) { zkt_one_server_stop(zs, zc); }

TestSuite(zk_large, .init = start_zk, .fini = stop_zk, .timeout = 900);

static const km_zkb_config FORCED = {.guard = {.force = true, .max_deletes_set = true, .max_deletes = -1}};

enum { BIG_PARTITIONS = 40000, BIG_ACLS = 6000 };
#define BIG_TOPIC "huge"
#define ACL_RESOURCE "payments"
#define ACL_ZNODE "/kafka-acl/Topic/" ACL_RESOURCE

typedef zkt_fixture fixture;

static void fixture_open(fixture *f) { zkt_fixture_open(f, "zklarge", 2, 27); }
static void fixture_close(fixture *f) { zkt_fixture_close(f); }
static void apply(fixture *f, int16_t type, const void *rec, bool delta) { zkt_fixture_apply(f, type, rec, delta); }

/* A topic whose assignment znode (/brokers/topics/<name>) is ~700 KB. */
static void big_topic(fixture *f, bool delta)
{
    km_topic_record t;
    km_topic_record_init(&t);
    t.name = km_cstr(BIG_TOPIC);
    memset(t.topic_id.b, 0x27, sizeof t.topic_id.b);
    apply(f, KM_MDR_TOPIC_RECORD, &t, delta);
    for (int32_t p = 0; p < BIG_PARTITIONS; p++) {
        int32_t reps[3] = {p % 3 + 1, (p + 1) % 3 + 1, (p + 2) % 3 + 1};
        km_partition_record r;
        km_partition_record_init(&r);
        r.partition_id = p;
        r.topic_id = t.topic_id;
        r.replicas.count = r.isr.count = 3;
        r.replicas.items = r.isr.items = reps;
        r.removing_replicas.count = r.adding_replicas.count = 0;
        r.directories.count = 0;
        r.leader = reps[0];
        apply(f, KM_MDR_PARTITION_RECORD, &r, delta);
    }
}

/* BIG_ACLS literal ACLs on one topic: ~700 KB in /kafka-acl/Topic/<resource>. */
static void big_acls(fixture *f, bool delta)
{
    for (int i = 0; i < BIG_ACLS; i++) {
        char principal[96];
        snprintf(principal, sizeof principal, "User:CN=service-account-%05d,OU=kafka,O=example", i);
        km_access_control_entry_record a;
        km_access_control_entry_record_init(&a);
        memset(a.id.b, 0x61, sizeof a.id.b);
        memcpy(a.id.b, &i, sizeof i);
        a.resource_type = 2; /* TOPIC */
        a.resource_name = km_cstr(ACL_RESOURCE);
        a.pattern_type = 3;  /* LITERAL */
        a.principal = km_cstr(principal);
        a.host = km_cstr("*");
        a.operation = 3;     /* READ */
        a.permission_type = 3;
        apply(f, KM_MDR_ACCESS_CONTROL_ENTRY_RECORD, &a, delta);
    }
}

static size_t znode_size(const char *path)
{
    char *data = NULL;
    int len = 0;
    int rc = km_zkc_get(zc, path, &data, &len, NULL);
    free(data);
    cr_assert_eq(rc, ZOK, "%s: %s", path, zerror(rc));
    return (size_t)len;
}

static void check_written(fixture *f, int32_t epoch)
{
    size_t topic = znode_size("/brokers/topics/" BIG_TOPIC), acls = znode_size(ACL_ZNODE);
    cr_assert_gt(topic, 512 * 1024, "the topic znode is only %zu bytes: not a test of the limit", topic);
    cr_assert_gt(acls, 512 * 1024, "the ACL znode is only %zu bytes: not a test of the limit", acls);
    char why[512];
    cr_assert(zkt_zk_equals_image(zc, f->img, epoch, why, sizeof why), "%s", why);
}

static zkt_bridge *bridge_on(const char *hosts, fixture *f, int32_t epoch, size_t jute_maxbuffer)
{
    km_zkb_config cfg = FORCED;
    cfg.zk.jute_maxbuffer = jute_maxbuffer;
    zkt_bridge *t = zkt_bridge_new(hosts, f->img, 3000, epoch, &cfg);
    cr_assert(t);
    return t;
}

static void wipe(void)
{
    char **kids = NULL;
    int n = 0;
    if (km_zkc_children(zc, "/", &kids, &n) != ZOK)
        return;
    for (int i = 0; i < n; i++) {
        char path[256];
        snprintf(path, sizeof path, "/%s", kids[i]);
        if (strcmp(kids[i], "zookeeper"))
            km_zkc_delete_tree(zc, path);
    }
    km_zkc_free_strings(kids, n);
}

Test(zk_large, a_huge_topic_and_acl_resource_in_a_full_sync)
{
    wipe();
    fixture f;
    fixture_open(&f);
    big_topic(&f, false);
    big_acls(&f, false);
    zkt_bridge *t = bridge_on(km_zks_hosts(zs, 0), &f, 1, 0);
    cr_assert(zkt_bridge_wait_idle(t, 600000), "the full sync did not finish: %s", km_zkb_error(t->b));
    check_written(&f, 1);
    zkt_bridge_free(t);
    fixture_close(&f);
}

Test(zk_large, a_huge_topic_and_acl_resource_as_deltas)
{
    wipe();
    fixture f;
    fixture_open(&f);
    zkt_bridge *t = bridge_on(km_zks_hosts(zs, 0), &f, 1, 0);
    cr_assert(zkt_bridge_wait_idle(t, 120000), "%s", km_zkb_error(t->b));
    km_err err = {{0}};
    big_topic(&f, true);
    cr_assert_eq(km_zkb_delta(t->b, f.d, &err), 0, "%s", err.msg);
    cr_assert(zkt_bridge_wait_idle(t, 600000), "the topic's delta failed: %s", km_zkb_error(t->b));
    km_delta_clear(f.d);
    big_acls(&f, true);
    cr_assert_eq(km_zkb_delta(t->b, f.d, &err), 0, "%s", err.msg);
    cr_assert(zkt_bridge_wait_idle(t, 600000), "the ACLs' delta failed: %s", km_zkb_error(t->b));
    km_delta_clear(f.d);
    check_written(&f, 1);
    zkt_bridge_free(t);
    fixture_close(&f);
}

/* The bridge stopped, refused (bad input: exit 2 in the daemon), naming the znode, its size, the
 * limit and the key; no multi was ever resent and no re-sync ran. */
static void assert_refused_naming(zkt_bridge *t, const char *why, size_t limit)
{
    cr_assert_eq(km_zkb_get_phase(t->b), KM_ZKB_STOPPED, "not stopped: %s", km_zkb_error(t->b));
    cr_assert(km_zkb_refused(t->b), "stopped, but not as refused input: %s", km_zkb_error(t->b));
    const char *e = why ? why : km_zkb_error(t->b);
    fprintf(stderr, "refused as expected: %s\n", e);
    char key[64];
    snprintf(key, sizeof key, "zookeeper.jute.maxbuffer=%zu", limit);
    cr_assert(strstr(e, ACL_ZNODE " is ") && strstr(e, " bytes") && strstr(e, key), "unclear refusal: %s", e);
    km_zkw_metrics m;
    km_zkw_get_metrics(km_zkb_writer(t->b), &m);
    cr_assert_eq(m.multis_resent, 0);
}

/* The server's jute.maxbuffer (and kmproxy's key, set to it) smaller than the ACL znode. */
Test(zk_large, a_znode_past_the_servers_limit_is_refused_naming_it)
{
    enum { SMALL = 256 * 1024 };
    char msg[512] = "";
    km_zks *small = km_zks_start(1, NULL, SMALL, msg, sizeof msg);
    cr_assert(small, "%s", msg);
    fixture f;
    fixture_open(&f);
    big_acls(&f, false);
    zkt_bridge *t = bridge_on(km_zks_hosts(small, 0), &f, 1, SMALL);
    cr_assert_not(zkt_bridge_wait_idle(t, 120000), "a %d-byte server took the ACL znode", SMALL);
    assert_refused_naming(t, NULL, SMALL);
    km_zkb_summary s;
    km_zkb_get_summary(t->b, &s);
    cr_assert_eq(s.full_syncs, 0);
    zkt_bridge_free(t);
    fixture_close(&f);

    /* the same znode arriving as a delta: refused at once, the delta's error naming it */
    fixture_open(&f);
    t = bridge_on(km_zks_hosts(small, 0), &f, 2, SMALL);
    cr_assert(zkt_bridge_wait_idle(t, 120000), "%s", km_zkb_error(t->b));
    big_acls(&f, true);
    km_err err = {{0}};
    cr_assert_eq(km_zkb_delta(t->b, f.d, &err), -1);
    assert_refused_naming(t, err.msg, SMALL);
    zkt_spin(t->loop, 500);
    assert_refused_naming(t, NULL, SMALL);
    zkt_bridge_free(t);
    fixture_close(&f);

    /* zookeeper.jute.maxbuffer left at its default: the server closes the connection on the request
     * each time; after a few such losses the mirror stops, refused, saying which key to set */
    fixture_open(&f);
    big_acls(&f, false);
    t = bridge_on(km_zks_hosts(small, 0), &f, 3, 0);
    cr_assert_not(zkt_bridge_wait_idle(t, 180000), "a %d-byte server took the ACL znode", SMALL);
    const char *e = km_zkb_error(t->b);
    fprintf(stderr, "stopped as expected: %s\n", e);
    cr_assert_eq(km_zkb_get_phase(t->b), KM_ZKB_STOPPED, "not stopped: %s", e);
    cr_assert(km_zkb_refused(t->b), "stopped, but not as refused input: %s", e);
    cr_assert(strstr(e, "znode " ACL_ZNODE " (") && strstr(e, "zookeeper.jute.maxbuffer=1048575"), "unclear: %s", e);
    zkt_bridge_free(t);
    fixture_close(&f);
    km_zks_stop(small);
}

/* As an operator meets it: `kmproxy zk sync` of a generated log with a 40,000-partition topic
 * against a server whose jute.maxbuffer (and zookeeper.jute.maxbuffer in --zk-config) is 256 KiB:
 * exit 2, one line naming the topic's znode and the key, instead of five re-syncs and exit 1. */
Test(zk_large, cli_sync_of_a_topic_the_server_cannot_hold_exits_2)
{
    enum { SMALL = 256 * 1024 };
    char msg[512] = "";
    km_zks *small = km_zks_start(1, NULL, SMALL, msg, sizeof msg);
    cr_assert(small, "%s", msg);
    char *dir = km_test_tmpdir("zklargecli"), log[600], props[600];
    snprintf(log, sizeof log, "%s/log", dir);
    snprintf(props, sizeof props, "%s/zk.properties", dir);
    km_gen_opts o = {.brokers = 3, .topics = 1, .partitions = BIG_PARTITIONS, .seed = 5, .zk_migration = true};
    km_err err = {{0}};
    cr_assert_geq(km_gen_write(log, &o, NULL, &err), 0, "%s", err.msg);
    FILE *f = fopen(props, "w");
    cr_assert(f && fprintf(f, "zookeeper.jute.maxbuffer=%d\n", SMALL) > 0 && fclose(f) == 0);
    char *argv[] = {"/usr/bin/timeout", "300", (char *)km_test_binary(), "zk", "sync", "--zookeeper",
                    (char *)km_zks_hosts(small, 0), "--metadata", log, "--zk-config", props, NULL};
    char *out = NULL, *errs = NULL;
    int rc = km_test_run(argv, NULL, 0, &out, NULL, &errs);
    cr_assert_eq(rc, 2, "exit %d: %s", rc, errs);
    cr_assert(strstr(errs, "kmproxy zk: refused: zk sync: znode /brokers/topics/topic-0 is ") &&
              strstr(errs, "zookeeper.jute.maxbuffer=262144"), "%s", errs);
    cr_assert_null(strstr(errs, "full syncs in a row"), "%s", errs);
    free(out);
    free(errs);
    km_test_rmtree(dir);
    free(dir);
    km_zks_stop(small);
}
