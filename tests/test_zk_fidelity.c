/* ZooKeeper written exactly as Kafka 3.9's KRaftMigrationZkWriter writes it, against a real
 * ZooKeeper: quota and SCRAM znode names sanitized (ZkConfigMigrationClient), a user's znode that
 * still holds per-client quotas emptied rather than deleted, no /admin/delete_topics markers (and
 * the ZK controller's old ones cleared by the full sync), no config notification for a deleted
 * topic's config (ZkTopicMigrationClient.deleteTopic). */
#include "test_zk_util.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ZK_EMPTY_CONFIG_TEXT "{\"version\":1,\"config\":{}}"

static km_zks *zs;
static km_zkc *zc;

static void start_zk(void) { zkt_one_server_start(&zs, &zc, 4 * 1024 * 1024); }
static void stop_zk(void) { zkt_one_server_stop(zs, zc); }

TestSuite(zk_fidelity, .init = start_zk, .fini = stop_zk, .timeout = 240);

/* What a ZK-mode cluster left: the pre-populated znodes these tests start from are Kafka's, so the
 * guards' overrides are on (they are tested in test_zk_guard.c). */
static const km_zkb_config FORCED = {.guard = {.force = true, .max_deletes_set = true, .max_deletes = -1}};

typedef zkt_fixture fixture;

static void fixture_open(fixture *f, int topics) { zkt_fixture_open(f, "zkfid", topics, 11); }
static void fixture_close(fixture *f) { zkt_fixture_close(f); }
static void apply(fixture *f, int16_t type, const void *rec, bool delta) { zkt_fixture_apply(f, type, rec, delta); }

/* A quota of the entity {user} or, with a client, {user, client-id}. */
static void quota(fixture *f, bool delta, const char *user, const char *client, const char *key, double value)
{
    km_client_quota_record q;
    km_client_quota_record_init(&q);
    km_client_quota_record_entity_data e[2] = {{km_cstr("user"), km_cstr(user), {0, NULL}},
                                               {km_cstr("client-id"), km_cstr(client ? client : ""), {0, NULL}}};
    q.entity.count = client ? 2 : 1;
    q.entity.items = e;
    q.key = km_cstr(key);
    q.value = value;
    apply(f, KM_MDR_CLIENT_QUOTA_RECORD, &q, delta);
}

/* Removes a quota key of {user} or {user, client}; a NULL user is the default entity. */
static void unquota(fixture *f, const char *user, const char *client, const char *key)
{
    km_client_quota_record q;
    km_client_quota_record_init(&q);
    km_client_quota_record_entity_data e[2] = {{km_cstr("user"), km_cstr(user), {0, NULL}},
                                               {km_cstr("client-id"), km_cstr(client ? client : ""), {0, NULL}}};
    q.entity.count = client ? 2 : 1;
    q.entity.items = e;
    q.key = km_cstr(key);
    q.remove = true;
    apply(f, KM_MDR_CLIENT_QUOTA_RECORD, &q, true);
}

static void scram(fixture *f, bool delta, const char *user)
{
    static uint8_t salt[16] = {1, 2, 3}, key[32] = {4, 5, 6};
    km_user_scram_credential_record r;
    km_user_scram_credential_record_init(&r);
    r.name = km_cstr(user);
    r.mechanism = 1;
    r.salt = (km_bytes){salt, sizeof salt};
    r.stored_key = (km_bytes){key, sizeof key};
    r.server_key = (km_bytes){key, sizeof key};
    r.iterations = 4096;
    apply(f, KM_MDR_USER_SCRAM_CREDENTIAL_RECORD, &r, delta);
}

static void unscram(fixture *f, const char *user)
{
    km_remove_user_scram_credential_record r;
    km_remove_user_scram_credential_record_init(&r);
    r.name = km_cstr(user);
    r.mechanism = 1;
    apply(f, KM_MDR_REMOVE_USER_SCRAM_CREDENTIAL_RECORD, &r, true);
}

static zkt_bridge *synced(fixture *f, int32_t epoch)
{
    zkt_bridge *t = zkt_bridge_new(km_zks_hosts(zs, 0), f->img, 3000, epoch, &FORCED);
    cr_assert(t);
    cr_assert(zkt_bridge_wait_idle(t, 60000), "%s", km_zkb_error(t->b));
    return t;
}

static void send_delta(fixture *f, zkt_bridge *t)
{
    km_err err = {{0}};
    cr_assert_eq(km_zkb_delta(t->b, f->d, &err), 0, "%s", err.msg);
    cr_assert(zkt_bridge_wait_idle(t, 60000), "the delta failed: %s", km_zkb_error(t->b));
    km_delta_clear(f->d);
}

/* How many config change notifications name entity_path. */
static int notifications(const char *entity_path)
{
    char **kids = NULL, path[512], want[512];
    int n = 0, found = 0;
    snprintf(want, sizeof want, "{\"version\":2,\"entity_path\":\"%s\"}", entity_path);
    cr_assert_eq(km_zkc_children(zc, "/config/changes", &kids, &n), ZOK);
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "/config/changes/%s", kids[i]);
        char *data = zkt_get(zc, path, NULL);
        found += data && !strcmp(data, want);
        free(data);
    }
    km_zkc_free_strings(kids, n);
    return found;
}

static bool exists(const char *path)
{
    char *data = NULL;
    int len = 0;
    int rc = km_zkc_get(zc, path, &data, &len, NULL);
    free(data);
    return rc == ZOK;
}

static void check_image(fixture *f, int32_t epoch)
{
    char why[512];
    cr_assert(zkt_zk_equals_image(zc, f->img, epoch, why, sizeof why), "%s", why);
}

/* Item 3: ZkConfigMigrationClient.getSanitizedClientQuotaZNodeName. Kafka's own znode for
 * alice@EXAMPLE.COM (as ZK-mode brokers wrote it) is the one kept and updated, never deleted, and no
 * raw-named twin appears beside it; SCRAM users share the sanitized name. */
Test(zk_fidelity, quota_and_scram_znodes_are_named_as_kafka_sanitizes_them)
{
    fixture f;
    fixture_open(&f, 1);
    const char *kafka_node = "/config/users/alice%40EXAMPLE.COM";
    cr_assert_eq(km_zkc_mkdirs(zc, "/config/users"), ZOK);
    cr_assert_eq(km_zkc_create(zc, kafka_node, "{\"version\":1,\"config\":{\"request_percentage\":\"12.5\"}}", 0),
                 ZOK);
    /* what an older kmproxy wrote for bob: a raw name, which brokers desanitize to the same user */
    cr_assert_eq(km_zkc_create(zc, "/config/users/bob@EXAMPLE.COM",
                               "{\"version\":1,\"config\":{\"SCRAM-SHA-256\":\"salt=AQ==,stored_key=AQ==,"
                               "server_key=AQ==,iterations=4096\"}}", 0), ZOK);
    quota(&f, false, "alice@EXAMPLE.COM", NULL, "request_percentage", 12.5);
    quota(&f, false, "CN=svc,O=Acme", "app 1*", "producer_byte_rate", 1024);
    scram(&f, false, "bob@EXAMPLE.COM");
    zkt_bridge *t = synced(&f, 1);
    int version = -1;
    char *s = zkt_get(zc, kafka_node, &version);
    cr_assert_not_null(s, "the full sync deleted Kafka's %s", kafka_node);
    cr_assert_eq(version, 0, "an equal config is left alone: %s", s);
    free(s);
    cr_assert(!exists("/config/users/alice@EXAMPLE.COM"), "a raw-named twin was written");
    s = zkt_get(zc, "/config/users/CN%3Dsvc%2CO%3DAcme/clients/app%201%2A", NULL);
    cr_assert_str_eq(s ? s : "(absent)", "{\"version\":1,\"config\":{\"producer_byte_rate\":\"1024\"}}");
    free(s);
    s = zkt_get(zc, "/config/users/bob%40EXAMPLE.COM", NULL);
    cr_assert(s && strstr(s, "\"SCRAM-SHA-256\":\"salt="), "%s", s ? s : "(absent)");
    free(s);
    cr_assert(!exists("/config/users/bob@EXAMPLE.COM"), "the raw-named znode stays");
    /* its deletion notifies bob's znode as Kafka names it (created first, then re-read): a notice
     * naming the deleted raw znode would make the brokers drop bob's credentials */
    cr_assert_eq(notifications("users/bob@EXAMPLE.COM"), 0);
    cr_assert_eq(notifications("users/bob%40EXAMPLE.COM"), 2);
    check_image(&f, 1);

    quota(&f, true, "alice@EXAMPLE.COM", NULL, "request_percentage", 25); /* dual write */
    send_delta(&f, t);
    s = zkt_get(zc, kafka_node, NULL);
    cr_assert_str_eq(s ? s : "(absent)", "{\"version\":1,\"config\":{\"request_percentage\":\"25.0\"}}");
    free(s);
    cr_assert_eq(notifications("users/alice%40EXAMPLE.COM"), 1);
    cr_assert(!exists("/config/users/alice@EXAMPLE.COM"));
    check_image(&f, 1);
    zkt_bridge_free(t);
    fixture_close(&f);
}

/* Runs a read-only diff of the image against ZooKeeper; returns its lines (caller frees). */
static char *diff_lines(fixture *f)
{
    km_zkb_config cfg = FORCED;
    cfg.diff_only = true;
    zkt_bridge *t = zkt_bridge_new(km_zks_hosts(zs, 0), f->img, 3000, 1, &cfg);
    cr_assert(t);
    for (int i = 0; i < 3000 && km_zkb_get_phase(t->b) != KM_ZKB_DUAL_WRITE; i++)
        zkt_spin(t->loop, 20);
    cr_assert_eq(km_zkb_get_phase(t->b), KM_ZKB_DUAL_WRITE, "diff: %s", km_zkb_error(t->b));
    km_zkb_summary sum;
    km_zkb_get_summary(t->b, &sum);
    char *lines = strdup(sum.diff ? sum.diff : "");
    zkt_bridge_free(t);
    return lines;
}

/* Item 4: carol's last SCRAM credential goes while she has a per-client quota. Kafka
 * (handleClientQuotasDelta -> writeClientQuotas with empty maps) writes an empty config plus a
 * change notification: the brokers drop the credential, the client quota stays. A znode left
 * holding the credential is a difference for `zk diff` and the full sync rewrites it. */
Test(zk_fidelity, removing_a_users_last_credential_keeps_its_client_quotas)
{
    fixture f;
    fixture_open(&f, 1);
    scram(&f, false, "carol");
    quota(&f, false, "carol", "app", "request_percentage", 50);
    zkt_bridge *t = synced(&f, 1);
    char *with_scram = zkt_get(zc, "/config/users/carol", NULL);
    cr_assert(with_scram && strstr(with_scram, "SCRAM-SHA-256"), "%s", with_scram ? with_scram : "(absent)");
    int before = notifications("users/carol");

    unscram(&f, "carol");
    send_delta(&f, t);
    char *s = zkt_get(zc, "/config/users/carol", NULL);
    cr_assert_str_eq(s ? s : "(absent)", "{\"version\":1,\"config\":{}}");
    free(s);
    cr_assert_eq(notifications("users/carol"), before + 1, "the brokers must hear that carol's config changed");
    s = zkt_get(zc, "/config/users/carol/clients/app", NULL);
    cr_assert_str_eq(s ? s : "(absent)", "{\"version\":1,\"config\":{\"request_percentage\":\"50.0\"}}");
    free(s);
    check_image(&f, 1);
    zkt_bridge_free(t);

    /* what an earlier writer left: the credential still in carol's znode */
    cr_assert_eq(km_zkc_set(zc, "/config/users/carol", with_scram, -1, NULL), ZOK);
    char *diff = diff_lines(&f);
    cr_assert(strstr(diff, "~ /config/users/carol\n"), "zk diff must show carol's znode: [%s]", diff);
    free(diff);
    t = synced(&f, 2);
    s = zkt_get(zc, "/config/users/carol", NULL);
    cr_assert_str_eq(s ? s : "(absent)", "{\"version\":1,\"config\":{}}", "the full sync left the credential");
    free(s);
    cr_assert(exists("/config/users/carol/clients/app"));
    zkt_bridge_free(t);
    free(with_scram);
    fixture_close(&f);
}

static void remove_topic(fixture *f, const char *name)
{
    const km_topic *victim = km_image_topic_by_name(f->img, name);
    cr_assert(victim, "%s", name);
    km_remove_topic_record rm;
    km_remove_topic_record_init(&rm);
    rm.topic_id = km_topic_id(victim);
    apply(f, KM_MDR_REMOVE_TOPIC_RECORD, &rm, true);
}

static void create_topic(fixture *f, const char *name, uint8_t id_byte)
{
    km_topic_record tr;
    km_topic_record_init(&tr);
    tr.name = km_cstr(name);
    tr.topic_id.b[0] = id_byte;
    tr.topic_id.b[15] = 1;
    apply(f, KM_MDR_TOPIC_RECORD, &tr, true);
    int32_t replicas[1] = {1};
    km_partition_record pr;
    km_partition_record_init(&pr);
    pr.partition_id = 0;
    pr.topic_id = tr.topic_id;
    pr.replicas.count = pr.isr.count = 1;
    pr.replicas.items = pr.isr.items = replicas;
    pr.leader = 1;
    apply(f, KM_MDR_PARTITION_RECORD, &pr, true);
}

/* Item 5: the ZK controller's pending-deletion markers go at the full sync
 * (handleTopicsSnapshot -> clearPendingTopicDeletions) and deletions write none (deleteTopic), so a
 * topic deleted and re-created in one delta carries none: a rollback to a ZK controller would
 * otherwise delete that live topic. */
Test(zk_fidelity, topic_deletions_leave_no_pending_deletion_markers)
{
    fixture f;
    fixture_open(&f, 3);
    cr_assert_eq(km_zkc_mkdirs(zc, "/admin/delete_topics"), ZOK);
    cr_assert_eq(km_zkc_create(zc, "/admin/delete_topics/old-topic", "", 0), ZOK);
    cr_assert_eq(km_zkc_create(zc, "/admin/delete_topics/topic-0", "", 0), ZOK);
    zkt_bridge *t = synced(&f, 1);
    cr_assert(!exists("/admin/delete_topics/old-topic"), "the full sync keeps a ZK controller's marker");
    cr_assert(!exists("/admin/delete_topics/topic-0"), "the full sync keeps a marker on a live topic");
    check_image(&f, 1);

    remove_topic(&f, "topic-1");
    send_delta(&f, t);
    cr_assert(!exists("/brokers/topics/topic-1") && !exists("/config/topics/topic-1"));
    cr_assert(!exists("/admin/delete_topics/topic-1"), "dual write wrote a pending-deletion marker");

    remove_topic(&f, "topic-2");
    create_topic(&f, "topic-2", 0x77);
    send_delta(&f, t);
    char *s = zkt_get(zc, "/brokers/topics/topic-2", NULL);
    cr_assert(s && strstr(s, "\"partitions\":{\"0\":[1]}"), "%s", s ? s : "(absent)");
    free(s);
    cr_assert(!exists("/admin/delete_topics/topic-2"), "a marker sits on the live re-created topic-2");
    check_image(&f, 1);
    zkt_bridge_free(t);
    fixture_close(&f);
}

/* Item 6: a deleted topic's config znode goes with it without a change notification, as
 * ZkTopicMigrationClient.deleteTopic deletes it (and the deleteConfigs after it finds no znode):
 * at the full sync (a topic only ZooKeeper has) and in a delta. */
Test(zk_fidelity, a_deleted_topics_config_goes_without_a_notification)
{
    fixture f;
    fixture_open(&f, 2);
    cr_assert_eq(km_zkc_mkdirs(zc, "/brokers/topics/gone/partitions/0"), ZOK);
    cr_assert_eq(km_zkc_mkdirs(zc, "/config/topics"), ZOK);
    cr_assert_eq(km_zkc_create(zc, "/config/topics/gone", "{\"version\":1,\"config\":{}}", 0), ZOK);
    zkt_bridge *t = synced(&f, 1);
    cr_assert(!exists("/brokers/topics/gone") && !exists("/config/topics/gone"));
    cr_assert_eq(notifications("topics/gone"), 0, "a notification for the deleted topic's config");
    int created = notifications("topics/topic-1");
    cr_assert_eq(created, 1, "the topic's creation notifies");
    remove_topic(&f, "topic-1");
    send_delta(&f, t);
    cr_assert(!exists("/config/topics/topic-1"));
    cr_assert_eq(notifications("topics/topic-1"), created, "a notification for the deleted topic's config");
    check_image(&f, 1);
    zkt_bridge_free(t);
    fixture_close(&f);
}

/* Issue 27 item 6. Kafka 3.9 deletes no client quota or SCRAM znode: for an entity the image no
 * longer has, KRaftMigrationZkWriter (handleClientQuotasDelta, handleClientQuotasSnapshot) calls
 * ZkConfigMigrationClient.writeClientQuotas with empty maps, an empty config plus a change
 * notification. dave's credential and his last client quota go in one delta: both znodes emptied,
 * in that delta (no NOTEMPTY on /config/users/dave, no re-sync meanwhile). */
static int full_syncs(zkt_bridge *t)
{
    km_zkb_summary s;
    km_zkb_get_summary(t->b, &s);
    return (int)s.full_syncs;
}

static void assert_config(const char *path, const char *want)
{
    char *s = zkt_get(zc, path, NULL);
    cr_assert_str_eq(s ? s : "(absent)", want, "%s", path);
    free(s);
}

Test(zk_fidelity, a_users_credential_and_last_client_quota_removed_together_are_emptied)
{
    fixture f;
    fixture_open(&f, 1);
    scram(&f, false, "dave");
    quota(&f, false, "dave", "app", "request_percentage", 40);
    zkt_bridge *t = synced(&f, 1);
    int syncs = full_syncs(t), user_notes = notifications("users/dave");
    int client_notes = notifications("users/dave/clients/app");
    unscram(&f, "dave");
    unquota(&f, "dave", "app", "request_percentage");
    send_delta(&f, t);
    cr_assert_eq(full_syncs(t), syncs, "the delta failed and a full re-sync ran");
    assert_config("/config/users/dave", ZK_EMPTY_CONFIG_TEXT);
    assert_config("/config/users/dave/clients/app", ZK_EMPTY_CONFIG_TEXT);
    cr_assert(exists("/config/users/dave/clients"));
    cr_assert_eq(notifications("users/dave"), user_notes + 1);
    cr_assert_eq(notifications("users/dave/clients/app"), client_notes + 1);
    check_image(&f, 1);
    zkt_bridge_free(t);
    fixture_close(&f);
}

/* erin's last client quota goes alone: its znode is emptied (with a notification), and it, its
 * clients/ parent and erin's znode stay, as Kafka leaves them. A full sync finds frank's quota
 * znodes, which the image does not have: emptied the same way, nothing deleted (a first sync with
 * zk.max.deletes=0 goes through). */
Test(zk_fidelity, a_last_client_quota_removed_alone_is_emptied_as_kafka_does)
{
    fixture f;
    fixture_open(&f, 1);
    quota(&f, false, "erin", "app", "producer_byte_rate", 2048);
    zkt_bridge *t = synced(&f, 1);
    int notes = notifications("users/erin/clients/app");
    unquota(&f, "erin", "app", "producer_byte_rate");
    send_delta(&f, t);
    assert_config("/config/users/erin/clients/app", ZK_EMPTY_CONFIG_TEXT);
    cr_assert(exists("/config/users/erin/clients") && exists("/config/users/erin"));
    cr_assert_eq(notifications("users/erin/clients/app"), notes + 1);
    zkt_bridge_free(t);

    cr_assert_eq(km_zkc_create(zc, "/config/users/frank", "{\"version\":1,\"config\":{\"producer_byte_rate\":\"10\"}}", 0),
                 ZOK);
    cr_assert_eq(km_zkc_mkdirs(zc, "/config/users/frank/clients"), ZOK);
    cr_assert_eq(km_zkc_create(zc, "/config/users/frank/clients/x",
                               "{\"version\":1,\"config\":{\"consumer_byte_rate\":\"20\"}}", 0), ZOK);
    km_zkb_config cfg = FORCED;
    cfg.guard.max_deletes = 0;
    t = zkt_bridge_new(km_zks_hosts(zs, 0), f.img, 3000, 2, &cfg);
    cr_assert(t);
    cr_assert(zkt_bridge_wait_idle(t, 60000), "%s", km_zkb_error(t->b));
    assert_config("/config/users/frank", ZK_EMPTY_CONFIG_TEXT);
    assert_config("/config/users/frank/clients/x", ZK_EMPTY_CONFIG_TEXT);
    assert_config("/config/users/erin/clients/app", ZK_EMPTY_CONFIG_TEXT);
    check_image(&f, 2);
    zkt_bridge_free(t);
    fixture_close(&f);
}

/* A user literally named "<default>" (Kafka's %3Cdefault%3E znode) with a quota and a SCRAM
 * credential, beside the default user entity's quota (<default>): one znode each, the first
 * holding both its quota and its credential. */
Test(zk_fidelity, a_user_named_default_keeps_its_quota_and_credential_in_one_znode)
{
    fixture f;
    fixture_open(&f, 1);
    quota(&f, false, "<default>", NULL, "producer_byte_rate", 4096);
    scram(&f, false, "<default>");
    km_client_quota_record q;
    km_client_quota_record_init(&q);
    km_client_quota_record_entity_data e[1] = {{km_cstr("user"), km_cstr(NULL), {0, NULL}}};
    q.entity.count = 1;
    q.entity.items = e;
    q.key = km_cstr("consumer_byte_rate");
    q.value = 1024;
    apply(&f, KM_MDR_CLIENT_QUOTA_RECORD, &q, false);
    zkt_bridge *t = synced(&f, 1);
    char *s = zkt_get(zc, "/config/users/%3Cdefault%3E", NULL);
    cr_assert(s && strstr(s, "\"producer_byte_rate\":\"4096\"") && strstr(s, "\"SCRAM-SHA-256\":\"salt="), "%s",
              s ? s : "(absent)");
    free(s);
    assert_config("/config/users/<default>", "{\"version\":1,\"config\":{\"consumer_byte_rate\":\"1024\"}}");
    check_image(&f, 1);
    zkt_bridge_free(t);
    fixture_close(&f);
}
