/* A secured ZooKeeper (issue 19, items 1 and 2): real servers that require SASL DIGEST-MD5, that
 * speak TLS only and ask for client certificates, and a tree pre-populated with the ACLs Kafka's
 * brokers write (zookeeper.set.acl=true). The mirror syncs into each; getAcl shows Kafka's ACLs
 * (kafka.zk.ZkData.defaultAcls, restated here from Kafka 3.9's source as the oracle), existing
 * znodes keep theirs, an unauthenticated client reads no secret, and a configured authentication
 * that fails is refused, never retried without it. */
#include "test_tls_certs.h"
#include "test_zk_util.h"
#include "km_config.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define KAFKA_USERS "user_kafka=\"kafka-secret\" user_other=\"other-secret\""

/* A generated cluster's image; its log stays under *dir (caller removes) when dir is not NULL. */
static km_image *gen_image_in(char **dir)
{
    char *tmp = km_test_tmpdir("zksec"), log[600];
    snprintf(log, sizeof log, "%s/log", tmp);
    km_image *img = km_image_new();
    km_gen_opts o = {.brokers = 3, .topics = 2, .partitions = 2, .seed = 7, .zk_migration = true};
    km_err err = {{0}};
    cr_assert_geq(km_gen_write(log, &o, img, &err), 0, "%s", err.msg);
    if (dir)
        return *dir = tmp, img;
    km_test_rmtree(tmp);
    free(tmp);
    return img;
}

static km_image *gen_image(void) { return gen_image_in(NULL); }

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    cr_assert(f && fputs(text, f) >= 0 && fclose(f) == 0, "writing %s", path);
}

/* `kmproxy zk diff --zk-config` as an operator runs it: the daemon's keys, the JAAS Client section
 * as Kafka's brokers have it; lists the one znode whose ACL is not Kafka's. */
static void cli_diff_lists_foreign_acl(const char *dir, const char *hosts)
{
    char jaas[700], props[700], log[700], cfg[2000];
    snprintf(jaas, sizeof jaas, "%s/jaas.conf", dir);
    snprintf(props, sizeof props, "%s/zk.properties", dir);
    snprintf(log, sizeof log, "%s/log", dir);
    write_text(jaas, "// as kafka_server_jaas.conf\nKafkaServer {\n  org.apache.kafka.common.security.plain.PlainLoginModule "
                     "required username=\"a\" password=\"b\";\n};\nClient {\n"
                     "  org.apache.zookeeper.server.auth.DigestLoginModule required\n"
                     "  username=\"kafka\"\n  password=\"kafka-secret\";\n};\n");
    snprintf(cfg, sizeof cfg, "java.security.auth.login.config=%s\nzookeeper.set.acl=true\n", jaas);
    write_text(props, cfg);
    char *argv[] = {(char *)km_test_binary(), "zk", "diff", "--zookeeper", (char *)hosts, "--metadata", log,
                    "--zk-config", props, NULL};
    char *out = NULL, *errs = NULL;
    int rc = km_test_run(argv, NULL, 0, &out, NULL, &errs);
    cr_assert_eq(rc, 1, "an ACL difference exits 1: %s %s", out, errs);
    cr_assert(strstr(out, "! /config/topics/topic-0: ACL sasl:kafka=31,sasl:ops=1; Kafka writes creator-all plus "
                          "world:anyone=READ\n"), "%s", out);
    cr_assert(strstr(out, "zk diff: 0 missing in ZooKeeper, 0 different, 0 only in ZooKeeper\n"), "%s", out);
    cr_assert(strstr(out, "zk diff: 1 znodes with ACLs other than Kafka's"), "%s", out);
    free(out);
    free(errs);
}

/* "scheme:id=perms,..." in the server's order. */
static char *acl_text(km_zkc *c, const char *path, char *out, size_t cap)
{
    struct ACL_vector acl;
    int rc = km_zkc_get_acl(c, path, &acl);
    size_t len = 0;
    out[0] = '\0';
    if (rc != ZOK)
        len = (size_t)snprintf(out, cap, "rc=%d", rc);
    for (int i = 0; rc == ZOK && i < acl.count; i++)
        len += (size_t)snprintf(out + len, cap - len, "%s%s:%s=%d", i ? "," : "", acl.data[i].id.scheme,
                                acl.data[i].id.id, acl.data[i].perms);
    deallocate_ACL_vector(&acl);
    return out;
}

/* Kafka 3.9's ZkData.SensitiveRootPaths, matched with startsWith as ZkData.sensitivePath does. */
static bool kafka_sensitive(const char *path)
{
    return !strncmp(path, "/config/users", 13) || !strncmp(path, "/config/brokers", 15) ||
           !strncmp(path, "/delegation_token/tokens", 24);
}

/* What ZkData.defaultAcls(isSecure=true, path) gives for a creator known as `who`. */
static void kafka_acl(const char *who, const char *path, char *out, size_t cap)
{
    if (!strcmp(path, "/consumers"))
        snprintf(out, cap, "world:anyone=31");
    else
        snprintf(out, cap, kafka_sensitive(path) ? "%s=31" : "%s=31,world:anyone=1", who);
}

/* As a ZK-mode broker with zookeeper.set.acl=true leaves ZooKeeper before any migration: its
 * persistent paths (ZkData.PersistentZkPaths and their parents), each with defaultAcls. */
static const char *const BROKER_PATHS[] = {
    "/consumers", "/brokers", "/brokers/ids", "/brokers/topics", "/brokers/seqid", "/config", "/config/changes",
    "/config/topics", "/config/clients", "/config/users", "/config/brokers", "/config/ips", "/admin",
    "/admin/delete_topics", "/isr_change_notification", "/latest_producer_id_block", "/log_dir_event_notification",
};

static void populate_as_kafka(km_zkc *kafka, const char *who)
{
    enum { ALL = 0x1f, READ = 1 };
    char expect[256];
    for (size_t i = 0; i < sizeof BROKER_PATHS / sizeof BROKER_PATHS[0]; i++) {
        const char *p = BROKER_PATHS[i];
        kafka_acl(who, p, expect, sizeof expect);
        struct ACL open[] = {{ALL, {"world", "anyone"}}};
        struct ACL creator_read[] = {{ALL, {"auth", ""}}, {READ, {"world", "anyone"}}};
        struct ACL creator[] = {{ALL, {"auth", ""}}};
        struct ACL_vector v = !strcmp(p, "/consumers") ? (struct ACL_vector){1, open}
                            : kafka_sensitive(p) ? (struct ACL_vector){1, creator} : (struct ACL_vector){2, creator_read};
        cr_assert_eq(km_zkc_create_acl(kafka, p, NULL, &v), ZOK, "creating %s", p);
    }
    /* An operator's own ACL on a znode the mirror will update: it must survive the update. */
    struct ACL custom[] = {{ALL, {"auth", ""}}, {READ, {"sasl", "ops"}}};
    cr_assert_eq(km_zkc_create_acl(kafka, "/config/topics/topic-0", "{\"version\":1,\"config\":{}}",
                                   &(struct ACL_vector){2, custom}), ZOK);
}

/* Every znode under path (itself included) into the callback. */
static void walk(km_zkc *c, const char *path, void (*fn)(km_zkc *, const char *, void *), void *ctx)
{
    if (!strcmp(path, "/zookeeper"))
        return;
    fn(c, path, ctx);
    char **kids = NULL;
    int n = 0;
    if (km_zkc_children(c, path, &kids, &n) != ZOK)
        return;
    for (int i = 0; i < n; i++) {
        char child[1024];
        snprintf(child, sizeof child, "%s/%s", strcmp(path, "/") ? path : "", kids[i]);
        walk(c, child, fn, ctx);
    }
    km_zkc_free_strings(kids, n);
}

typedef struct acl_check {
    const char *who;
    int checked, sensitive;
    char first_bad[1200];
} acl_check;

static void check_kafka_acl(km_zkc *c, const char *path, void *ctx)
{
    acl_check *k = ctx;
    if (!strcmp(path, "/") || !strcmp(path, "/config/topics/topic-0") || k->first_bad[0])
        return;
    char got[512], want[256];
    acl_text(c, path, got, sizeof got);
    kafka_acl(k->who, path, want, sizeof want);
    k->checked++;
    k->sensitive += kafka_sensitive(path);
    if (strcmp(got, want))
        snprintf(k->first_bad, sizeof k->first_bad, "%s: getAcl %s, Kafka writes %s", path, got, want);
}

/* Every znode of the mirror carries Kafka's ACL; the operator's custom one was kept. */
static void assert_kafka_acls(km_zkc *kafka, const char *who)
{
    acl_check k = {.who = who};
    walk(kafka, "/", check_kafka_acl, &k);
    cr_assert_str_empty(k.first_bad, "%s", k.first_bad);
    cr_assert_gt(k.sensitive, 3, "too few sensitive znodes checked (%d of %d)", k.sensitive, k.checked);
    char got[256], want[256];
    snprintf(want, sizeof want, "%s=31,sasl:ops=1", who);
    cr_assert_str_eq(acl_text(kafka, "/config/topics/topic-0", got, sizeof got), want,
                     "an existing znode's ACL was not preserved");
    char *data = zkt_get(kafka, "/config/topics/topic-0", NULL);
    cr_assert(data && strstr(data, "cleanup.policy"), "the mirror did not update /config/topics/topic-0: %s", data);
    free(data);
}

typedef struct secret_check {
    km_zkc *stranger;
    int denied, readable;
    char leaked[512];
} secret_check;

/* Walked with an authenticated client (a stranger cannot even list a sensitive parent's children);
 * each znode is then read as the stranger. */
static void try_read(km_zkc *owner, const char *path, void *ctx)
{
    (void)owner;
    secret_check *s = ctx;
    km_zkc *c = s->stranger;
    char *data = NULL;
    int len = 0;
    int rc = km_zkc_get(c, path, &data, &len, NULL);
    free(data);
    if (kafka_sensitive(path) && strcmp(path, "/config/users") && strcmp(path, "/config/brokers") &&
        strcmp(path, "/delegation_token/tokens")) {
        if (rc == ZNOAUTH)
            s->denied++;
        else if (!s->leaked[0])
            snprintf(s->leaked, sizeof s->leaked, "%s: rc %d for an unauthenticated client", path, rc);
    } else if (rc == ZOK) {
        s->readable++;
    }
}

static void sync_secured(const char *hosts, const km_image *img, const km_zk_security *sec)
{
    km_zkb_config cfg = {.zk = {.security = sec}};
    zkt_bridge *t = zkt_bridge_new(hosts, img, 3000, 1, &cfg);
    cr_assert(t);
    cr_assert(zkt_bridge_wait_idle(t, 60000), "bridge %d: %s", (int)km_zkb_get_phase(t->b), km_zkb_error(t->b));
    zkt_bridge_free(t);
}

static const km_zk_security KAFKA_SASL = {.sasl_mechanism = "DIGEST-MD5", .sasl_username = "kafka",
                                          .sasl_password = "kafka-secret", .set_acl = true};

/* A server with SASL enabled (not required) for KAFKA_USERS, and a session on it as kafka. */
static km_zks *start_sasl_server(km_zkc **kafka)
{
    char err[512] = "";
    km_zks *zs = km_zks_start_opts(1, &(km_zks_options){.sasl_users = KAFKA_USERS}, err, sizeof err);
    cr_assert(zs, "%s", err);
    *kafka = km_zkc_open_auth(km_zks_hosts(zs, 0),
                              &(km_zkc_auth){.sasl_user = "kafka", .sasl_password = "kafka-secret"}, 10000);
    cr_assert(*kafka, "SASL session as kafka");
    return zs;
}

/* SASL enabled, not required: the brokers' tree, the mirror's sync, and what a stranger sees. */
Test(zk_secure, sasl_sync_writes_kafka_acls_and_an_unauthenticated_client_reads_no_secret, .timeout = 240)
{
    km_zkc *kafka = NULL;
    km_zks *zs = start_sasl_server(&kafka);
    const char *hosts = km_zks_hosts(zs, 0);
    populate_as_kafka(kafka, "sasl:kafka");
    char *dir = NULL;
    km_image *img = gen_image_in(&dir);
    sync_secured(hosts, img, &KAFKA_SASL);
    char why[512];
    cr_assert(zkt_zk_equals_image(kafka, img, 1, why, sizeof why), "%s", why);
    assert_kafka_acls(kafka, "sasl:kafka");
    cli_diff_lists_foreign_acl(dir, hosts);
    km_test_rmtree(dir);
    free(dir);

    km_zkc *stranger = km_zkc_open(hosts, NULL, 10000);
    cr_assert(stranger);
    secret_check s = {.stranger = stranger};
    walk(kafka, "/", try_read, &s);
    cr_assert_str_empty(s.leaked, "%s", s.leaked);
    cr_assert_geq(s.denied, 3, "SCRAM credentials, user quotas and broker configs must be unreadable");
    cr_assert_gt(s.readable, 10, "ordinary znodes stay world-readable, as Kafka leaves them");
    km_zkc_close(stranger);
    km_zkc_close(kafka);
    km_image_free(img);
    km_zks_stop(zs);
}

/* `kmproxy zk diff` authenticated as a user ZooKeeper's ACL denies reading one znode: exit 2 naming
 * it, never "reading ZooKeeper failed (not authenticated); retrying" for ever (`timeout` ends a loop). */
Test(zk_secure, diff_without_read_rights_names_the_znode_and_exits_2, .timeout = 240)
{
    km_zkc *kafka = NULL;
    km_zks *zs = start_sasl_server(&kafka);
    const char *hosts = km_zks_hosts(zs, 0);
    char *dir = NULL;
    km_image *img = gen_image_in(&dir);
    sync_secured(hosts, img, &(km_zk_security){.sasl_mechanism = "DIGEST-MD5", .sasl_username = "kafka",
                                               .sasl_password = "kafka-secret"});
    enum { ALL = 0x1f };
    struct ACL kafka_only[] = {{ALL, {"sasl", "kafka"}}};
    cr_assert_eq(km_zkc_delete(kafka, "/config/topics/topic-1", -1), ZOK);
    cr_assert_eq(km_zkc_create_acl(kafka, "/config/topics/topic-1", "{\"version\":1,\"config\":{}}",
                                   &(struct ACL_vector){1, kafka_only}), ZOK);
    char jaas[700], props[700], log[700], cfg[1000];
    snprintf(jaas, sizeof jaas, "%s/jaas.conf", dir);
    snprintf(props, sizeof props, "%s/zk.properties", dir);
    snprintf(log, sizeof log, "%s/log", dir);
    write_text(jaas, "Client {\n  org.apache.zookeeper.server.auth.DigestLoginModule required\n"
                     "  username=\"other\"\n  password=\"other-secret\";\n};\n");
    snprintf(cfg, sizeof cfg, "java.security.auth.login.config=%s\n", jaas);
    write_text(props, cfg);
    char *argv[] = {"/usr/bin/timeout", "60", (char *)km_test_binary(), "zk", "diff", "--zookeeper", (char *)hosts,
                    "--metadata", log, "--zk-config", props, NULL};
    char *out = NULL, *errs = NULL;
    int rc = km_test_run(argv, NULL, 0, &out, NULL, &errs);
    cr_assert_neq(rc, 124, "zk diff was still running after 60 s: %s", errs);
    cr_assert_eq(rc, 2, "exit %d: %s %s", rc, out, errs);
    cr_assert(strstr(errs, "not authorized to read /config/topics/topic-1"), "%s", errs);
    cr_assert_null(strstr(errs, "retrying"), "%s", errs);
    cr_assert_null(strstr(out, "zk diff: "), "no result it did not compute: %s", out);
    free(out);
    free(errs);
    km_test_rmtree(dir);
    free(dir);
    km_zkc_close(kafka);
    km_image_free(img);
    km_zks_stop(zs);
}

static bool writer_stopped(void *ctx)
{
    km_zkw_state st = km_zkw_get_state(((zkt_writer *)ctx)->w);
    return st == KM_ZKW_REFUSED || st == KM_ZKW_READY;
}

/* requireClientAuthScheme=sasl: the mirror syncs as kafka; a client without SASL gets nothing; a
 * wrong password is refused, with the reason, and never retried without SASL. */
Test(zk_secure, required_sasl_syncs_and_a_wrong_password_is_refused, .timeout = 240)
{
    char err[512] = "";
    km_zks *zs = km_zks_start_opts(1, &(km_zks_options){.sasl_users = KAFKA_USERS, .require_sasl = true}, err,
                                   sizeof err);
    cr_assert(zs, "%s", err);
    const char *hosts = km_zks_hosts(zs, 0);
    km_image *img = gen_image();
    sync_secured(hosts, img, &KAFKA_SASL);
    km_zkc *kafka = km_zkc_open_auth(hosts, &(km_zkc_auth){.sasl_user = "kafka", .sasl_password = "kafka-secret"},
                                     10000);
    cr_assert(kafka);
    char why[512];
    cr_assert(zkt_zk_equals_image(kafka, img, 1, why, sizeof why), "%s", why);
    km_zkc_close(kafka);

    km_zkc *plain = km_zkc_open(hosts, NULL, 10000);
    char *data = NULL;
    int len = 0;
    cr_assert(!plain || km_zkc_get(plain, "/brokers/topics", &data, &len, NULL) != ZOK,
              "a session without SASL read /brokers/topics from a server requiring SASL");
    free(data);
    km_zkc_close(plain);

    km_zk_security wrong = KAFKA_SASL;
    wrong.sasl_password = "not-the-secret";
    zkt_writer *t = zkt_writer_new(hosts, 3000, 2, &(km_zkw_config){.security = &wrong});
    cr_assert(t);
    zkt_run_until(t->loop, writer_stopped, t, 30000);
    cr_assert_eq(km_zkw_get_state(t->w), KM_ZKW_REFUSED, "state %s", km_zkw_state_name(km_zkw_get_state(t->w)));
    cr_assert(strstr(km_zkw_fence_reason(t->w), "refused the authentication of kafka"), "%s",
              km_zkw_fence_reason(t->w));
    cr_assert_eq(t->claimed, 0);
    zkt_writer_free(t);
    km_image_free(img);
    km_zks_stop(zs);
}

/* Digest auth (zoo_add_auth "digest"): the creator is digest:user:hash; the stranger reads no secret. */
Test(zk_secure, digest_auth_sync_writes_kafka_acls, .timeout = 240)
{
    char err[512] = "";
    km_zks *zs = km_zks_start(1, NULL, 0, err, sizeof err);
    cr_assert(zs, "%s", err);
    const char *hosts = km_zks_hosts(zs, 0);
    km_image *img = gen_image();
    km_zk_security sec = {.digest_auth = "kafka:kafka-secret", .set_acl = true};
    sync_secured(hosts, img, &sec);
    km_zkc *stranger = km_zkc_open(hosts, NULL, 10000);
    km_zkc *kafka = km_zkc_open_auth(hosts, &(km_zkc_auth){.digest = "kafka:kafka-secret"}, 10000);
    cr_assert(stranger && kafka);
    char got[512];
    acl_text(kafka, "/config/users/alice", got, sizeof got);
    cr_assert(!strncmp(got, "digest:kafka:", 13) && strstr(got, "=31") && !strstr(got, "world"), "%s", got);
    acl_text(kafka, "/brokers/topics/topic-1", got, sizeof got);
    cr_assert(!strncmp(got, "digest:kafka:", 13) && strstr(got, "=31,world:anyone=1"), "%s", got);
    secret_check s = {.stranger = stranger};
    walk(kafka, "/", try_read, &s);
    cr_assert_str_empty(s.leaked, "%s", s.leaked);
    cr_assert_geq(s.denied, 3);
    km_zkc_close(kafka);
    km_zkc_close(stranger);
    km_image_free(img);
    km_zks_stop(zs);
}

/* set.acl without any authentication would create znodes nobody can own: refused up front. */
Test(zk_secure, set_acl_without_authentication_is_refused)
{
    km_err err = {{0}};
    cr_assert_eq(km_zk_security_check(&(km_zk_security){.set_acl = true}, &err), -1);
    cr_assert(strstr(err.msg, "zookeeper.set.acl=true needs an authenticated session"), "%s", err.msg);
    cr_assert_eq(km_zk_security_check(&(km_zk_security){.sasl_mechanism = "PLAIN", .sasl_username = "k",
                                                        .sasl_password = "p"}, &err), -1);
    cr_assert(strstr(err.msg, "PLAIN is not supported (DIGEST-MD5 or GSSAPI)"), "%s", err.msg);
}

/* ---- TLS: a secureClientPort only, client certificates required (ssl.clientAuth=need) ---- */

/* A PEM keystore as ZooKeeper's PEMFileLoader and Kafka read it: the key and the chain in one file. */
static void pem_keystore(const char *key, const char *cert, const char *out)
{
    char cmd[3 * PATH_MAX + 32];
    snprintf(cmd, sizeof cmd, "cat '%s' '%s' > '%s'", key, cert, out);
    cr_assert_eq(system(cmd), 0);
}

static km_zks *start_tls(const km_test_pki *p, const char *cert, const char *key, const char *client_cert,
                         const char *client_key)
{
    char err[512] = "";
    km_zks *zs = km_zks_start_opts(1, &(km_zks_options){.tls_ca = p->ca, .tls_cert = cert, .tls_key = key,
                                                        .tls_client_cert = client_cert, .tls_client_key = client_key},
                                   err, sizeof err);
    cr_assert(zs, "%s", err);
    return zs;
}

static void wait_refused(zkt_writer *t, const char *why)
{
    zkt_run_until(t->loop, writer_stopped, t, 30000);
    cr_assert_eq(km_zkw_get_state(t->w), KM_ZKW_REFUSED, "state %s", km_zkw_state_name(km_zkw_get_state(t->w)));
    cr_assert(strstr(km_zkw_fence_reason(t->w), why), "%s", km_zkw_fence_reason(t->w));
}

Test(zk_secure, tls_only_server_with_client_certificates_pem_and_pkcs12_stores, .timeout = 240)
{
    km_test_pki p;
    cr_assert_eq(km_test_pki_make(&p), 0);
    km_zks *zs = start_tls(&p, p.server_cert, p.server_key, p.client_cert, p.client_key);
    const char *hosts = km_zks_hosts(zs, 0);
    char ks[PATH_MAX + 16], p12[PATH_MAX + 16], t12[PATH_MAX + 16], cmd[6 * PATH_MAX];
    snprintf(ks, sizeof ks, "%s/client-keystore.pem", p.dir);
    pem_keystore(p.client_key, p.client_cert, ks);
    km_zk_security sec = {.tls = true, .keystore_location = ks, .truststore_location = p.ca, .verify_host = true,
                          .set_acl = true};
    km_image *img = gen_image();
    sync_secured(hosts, img, &sec);

    km_zkc *tls = km_zkc_open_auth(hosts, &(km_zkc_auth){.tls_ca = p.ca, .tls_cert = p.client_cert,
                                                        .tls_key = p.client_key}, 10000);
    cr_assert(tls, "TLS test client");
    char why[512], got[512];
    cr_assert(zkt_zk_equals_image(tls, img, 1, why, sizeof why), "%s", why);
    /* The x509 identity is the client certificate's: the session really was TLS with it. */
    cr_assert_str_eq(acl_text(tls, "/config/users/alice", got, sizeof got), "x509:CN=km-test-client=31");
    cr_assert_str_eq(acl_text(tls, "/brokers/topics/topic-0", got, sizeof got),
                     "x509:CN=km-test-client=31,world:anyone=1");

    /* Kafka's other store type: PKCS12 keystore and truststore, password protected. */
    snprintf(p12, sizeof p12, "%s/client.p12", p.dir);
    snprintf(t12, sizeof t12, "%s/trust.p12", p.dir);
    snprintf(cmd, sizeof cmd, "openssl pkcs12 -export -in '%s' -inkey '%s' -out '%s' -passout pass:ks-pass && "
             "openssl pkcs12 -export -nokeys -in '%s' -out '%s' -passout pass:ts-pass", p.client_cert, p.client_key,
             p12, p.ca, t12);
    cr_assert_eq(system(cmd), 0);
    km_zk_security p12sec = {.tls = true, .keystore_location = p12, .keystore_password = "ks-pass",
                             .keystore_type = "PKCS12", .truststore_location = t12, .truststore_password = "ts-pass",
                             .truststore_type = "PKCS12", .verify_host = true, .set_acl = true};
    zkt_writer *t = zkt_writer_new(hosts, 3000, 2, &(km_zkw_config){.security = &p12sec});
    cr_assert(t);
    cr_assert(zkt_wait_state(t, KM_ZKW_READY, 30000), "PKCS12 stores: %s", km_zkw_fence_reason(t->w));
    zkt_writer_free(t);

    /* A truststore that does not hold the server's CA: refused, saying so, never plaintext. */
    km_zk_security wrong = sec;
    wrong.truststore_location = p.other_ca;
    t = zkt_writer_new(hosts, 3000, 3, &(km_zkw_config){.security = &wrong});
    cr_assert(t);
    wait_refused(t, "the server's certificate was refused");
    zkt_writer_free(t);

    /* A client certificate the servers do not accept (expired): refused by them, and said so. */
    char expired[PATH_MAX + 16];
    snprintf(expired, sizeof expired, "%s/expired-keystore.pem", p.dir);
    pem_keystore(p.expired_key, p.expired_cert, expired);
    km_zk_security theirs = sec;
    theirs.keystore_location = expired;
    t = zkt_writer_new(hosts, 3000, 3, &(km_zkw_config){.security = &theirs});
    cr_assert(t);
    wait_refused(t, "the server refused our certificate");
    zkt_writer_free(t);

    km_err err = {{0}};
    km_zk_security bad_pass = p12sec;
    bad_pass.keystore_password = "nope";
    cr_assert_eq(km_zk_security_check(&bad_pass, &err), -1);
    cr_assert(strstr(err.msg, "cannot read") && strstr(err.msg, "client.p12"), "%s", err.msg);
    km_zk_security jks = sec;
    jks.keystore_type = "JKS";
    cr_assert_eq(km_zk_security_check(&jks, &err), -1);
    cr_assert(strstr(err.msg, "keytool -importkeystore"), "%s", err.msg);
    km_zkc_close(tls);
    km_image_free(img);
    km_zks_stop(zs);
    km_test_pki_free(&p);
}

/* Host name verification (zookeeper.ssl.endpoint.identification.algorithm=HTTPS): a server whose
 * certificate names neither 127.0.0.1 nor what it resolves back to is refused; with the check
 * switched off (the algorithm set empty) the same server is accepted. */
Test(zk_secure, tls_host_name_verification, .timeout = 240)
{
    km_test_pki p;
    cr_assert_eq(km_test_pki_make(&p), 0);
    /* the CA's "km-test-client" certificate as the server's, and the server's as the client's */
    km_zks *zs = start_tls(&p, p.client_cert, p.client_key, p.server_cert, p.server_key);
    const char *hosts = km_zks_hosts(zs, 0);
    char ks[PATH_MAX + 16];
    snprintf(ks, sizeof ks, "%s/keystore.pem", p.dir);
    pem_keystore(p.server_key, p.server_cert, ks);
    km_zk_security sec = {.tls = true, .keystore_location = ks, .truststore_location = p.ca, .verify_host = true};
    zkt_writer *t = zkt_writer_new(hosts, 3000, 1, &(km_zkw_config){.security = &sec});
    cr_assert(t);
    wait_refused(t, "hostname mismatch");
    zkt_writer_free(t);
    sec.verify_host = false;
    t = zkt_writer_new(hosts, 3000, 1, &(km_zkw_config){.security = &sec});
    cr_assert(zkt_wait_state(t, KM_ZKW_READY, 30000), "%s", km_zkw_fence_reason(t->w));
    zkt_writer_free(t);
    km_zks_stop(zs);
    km_test_pki_free(&p);
}

/* ---- the daemon's keys, as Kafka's brokers spell them ---- */

static int resolve(const char *const *kv, km_config_zk_security *zs, km_err *err)
{
    km_config c;
    km_config_defaults(&c);
    int rc = 0;
    for (int i = 0; kv[i] && !rc; i += 2)
        rc = km_config_set(&c, kv[i], kv[i + 1], "test", err);
    if (!rc)
        rc = km_config_resolve_zk_security(&c, zs, err);
    if (!rc)
        rc = km_zk_security_check(&zs->sec, err);
    km_config_zk_security_clear(zs);
    km_config_free(&c);
    return rc;
}

Test(zk_secure, config_keys_are_refused_clearly_when_they_cannot_be_honoured)
{
    char *dir = km_test_tmpdir("zkseccfg"), krb[600], other[600], named[600];
    snprintf(krb, sizeof krb, "%s/krb.conf", dir);
    snprintf(other, sizeof other, "%s/other.conf", dir);
    snprintf(named, sizeof named, "%s/named.conf", dir);
    write_text(krb, "Client { com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true "
                    "keyTab=\"/k.keytab\" principal=\"kafka/h@R\"; };\n");
    write_text(other, "KafkaServer { org.apache.zookeeper.server.auth.DigestLoginModule required "
                      "username=\"u\" password=\"p\"; };\n");
    write_text(named, "ZkClient { org.apache.zookeeper.server.auth.DigestLoginModule required "
                      "username=\"u\" password=\"p\"; };\n");
    km_config_zk_security zs;
    km_err err = {{0}};
    cr_assert_eq(resolve((const char *[]){"java.security.auth.login.config", krb, NULL}, &zs, &err), -1);
    cr_assert(strstr(err.msg, "GSSAPI: cannot read the keytab /k.keytab"), "%s", err.msg);
    cr_assert_eq(resolve((const char *[]){"java.security.auth.login.config", other, NULL}, &zs, &err), -1);
    cr_assert(strstr(err.msg, "no 'Client' section"), "%s", err.msg);
    cr_assert_eq(resolve((const char *[]){"java.security.auth.login.config", named,
                                          "zookeeper.sasl.clientconfig", "ZkClient", NULL}, &zs, &err), 0, "%s", err.msg);
    /* zookeeper.sasl.client=false: the JAAS file is not used for ZooKeeper (ZooKeeper's own switch) */
    cr_assert_eq(resolve((const char *[]){"java.security.auth.login.config", krb, "zookeeper.sasl.client", "false",
                                          NULL}, &zs, &err), 0, "%s", err.msg);
    cr_assert_eq(resolve((const char *[]){"zookeeper.ssl.client.enable", "true", "zookeeper.clientCnxnSocket",
                                          "org.apache.zookeeper.ClientCnxnSocketNIO", NULL}, &zs, &err), -1);
    cr_assert(strstr(err.msg, "ClientCnxnSocketNetty"), "%s", err.msg);
    cr_assert_eq(resolve((const char *[]){"zookeeper.ssl.client.enable", "true", NULL}, &zs, &err), -1);
    cr_assert(strstr(err.msg, "zookeeper.ssl.keystore.location"), "%s", err.msg);
    cr_assert_eq(resolve((const char *[]){"zookeeper.set.acl", "true", NULL}, &zs, &err), -1);
    cr_assert(strstr(err.msg, "needs an authenticated session"), "%s", err.msg);
    cr_assert_eq(resolve((const char *[]){"zookeeper.ssl.enabled.protocols", "TLSv1.2", NULL}, &zs, &err), -1,
                 "a Kafka key kmproxy does not honour is an error, not silently ignored");
    km_test_rmtree(dir);
    free(dir);
}

/* ---- Kerberos (GSSAPI): a real MIT KDC on 127.0.0.1, principals and keytabs made for the test ---- */

typedef struct kdc {
    char *dir;
    char conf[700], kdc_conf[700], zk_keytab[700], kafka_keytab[700];
    pid_t pid;
} kdc;

static int free_tcp_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    int port = !bind(fd, (struct sockaddr *)&a, sizeof a) && !getsockname(fd, (struct sockaddr *)&a, &len)
                   ? ntohs(a.sin_port) : -1;
    close(fd);
    return port;
}

static void kdc_run(const kdc *k, const char *what)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "KRB5_CONFIG='%s' KRB5_KDC_PROFILE='%s' %s >>'%s/setup.log' 2>&1", k->conf,
             k->kdc_conf, what, k->dir);
    cr_assert_eq(system(cmd), 0, "%s (see %s/setup.log)", what, k->dir);
}

/* Realm KM.TEST: zookeeper/localhost (the servers) and kafka (the brokers' and our principal). TCP
 * only (udp_preference_limit=1), so one port; rdns stays on so 127.0.0.1 canonicalizes to localhost. */
static void kdc_start(kdc *k)
{
    k->dir = km_test_tmpdir("kdc");
    int port = free_tcp_port();
    cr_assert_gt(port, 0);
    snprintf(k->conf, sizeof k->conf, "%s/krb5.conf", k->dir);
    snprintf(k->kdc_conf, sizeof k->kdc_conf, "%s/kdc.conf", k->dir);
    snprintf(k->zk_keytab, sizeof k->zk_keytab, "%s/zk.keytab", k->dir);
    snprintf(k->kafka_keytab, sizeof k->kafka_keytab, "%s/kafka.keytab", k->dir);
    char text[2048];
    snprintf(text, sizeof text, "[libdefaults]\n default_realm = KM.TEST\n dns_lookup_realm = false\n"
             " dns_lookup_kdc = false\n udp_preference_limit = 1\n[realms]\n KM.TEST = {\n  kdc = 127.0.0.1:%d\n }\n"
             "[domain_realm]\n localhost = KM.TEST\n", port);
    write_text(k->conf, text);
    snprintf(text, sizeof text, "[kdcdefaults]\n kdc_ports = %d\n kdc_tcp_ports = %d\n[realms]\n KM.TEST = {\n"
             "  database_name = %s/principal\n  key_stash_file = %s/stash\n  acl_file = %s/kadm5.acl\n }\n",
             port, port, k->dir, k->dir, k->dir);
    write_text(k->kdc_conf, text);
    kdc_run(k, "kdb5_util -r KM.TEST create -s -P km-master");
    kdc_run(k, "kadmin.local -r KM.TEST -q 'addprinc -randkey zookeeper/localhost@KM.TEST'");
    kdc_run(k, "kadmin.local -r KM.TEST -q 'addprinc -randkey kafka@KM.TEST'");
    snprintf(text, sizeof text, "kadmin.local -r KM.TEST -q 'ktadd -k %s zookeeper/localhost@KM.TEST'", k->zk_keytab);
    kdc_run(k, text);
    snprintf(text, sizeof text, "kadmin.local -r KM.TEST -q 'ktadd -k %s kafka@KM.TEST'", k->kafka_keytab);
    kdc_run(k, text);
    pid_t parent = getpid();
    k->pid = fork();
    cr_assert_geq(k->pid, 0);
    if (k->pid == 0) {
        km_test_die_with_parent(parent);
        setenv("KRB5_CONFIG", k->conf, 1);
        setenv("KRB5_KDC_PROFILE", k->kdc_conf, 1);
        char log[800];
        snprintf(log, sizeof log, "%s/kdc.log", k->dir);
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execlp("krb5kdc", "krb5kdc", "-n", "-r", "KM.TEST", (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 100; i++) { /* listening? */
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        bool up = !connect(fd, (struct sockaddr *)&a, sizeof a);
        close(fd);
        if (up)
            return;
        usleep(100000);
    }
    cr_assert_fail("krb5kdc did not listen on %d", port);
}

static void kdc_stop(kdc *k)
{
    if (k->pid > 0) {
        kill(k->pid, SIGKILL);
        waitpid(k->pid, NULL, 0);
    }
    km_test_rmtree(k->dir);
    free(k->dir);
}

/* SASL GSSAPI with the JAAS Client section Kafka's brokers use (Krb5LoginModule, keytab) on a server
 * requiring SASL: the sync lands and the creator in the ACLs is the Kerberos principal. */
Test(zk_secure, kerberos_gssapi_sync_with_a_keytab_from_the_jaas_client_section, .timeout = 240)
{
    if (access("/usr/lib/x86_64-linux-gnu/sasl2/libgssapiv2.so.2", F_OK) && access("/usr/lib/sasl2/libgssapiv2.so.2", F_OK))
        cr_skip_test("Cyrus SASL's GSSAPI plugin (libsasl2-modules-gssapi-mit) is not installed");
    if (access("/usr/sbin/krb5kdc", X_OK) || access("/usr/sbin/kadmin.local", X_OK))
        cr_skip_test("no MIT KDC (krb5-kdc, krb5-admin-server) to run");
    kdc k;
    kdc_start(&k);
    setenv("KRB5_CONFIG", k.conf, 1); /* what the JVM's java.security.krb5.conf is for Kafka */
    char jaas[4096], client[1500], path[800];
    snprintf(jaas, sizeof jaas, "Server {\n  com.sun.security.auth.module.Krb5LoginModule required\n  useKeyTab=true\n"
             "  keyTab=\"%s\"\n  storeKey=true\n  useTicketCache=false\n  principal=\"zookeeper/localhost@KM.TEST\";\n};\n",
             k.zk_keytab);
    char err[512] = "";
    km_zks *zs = km_zks_start_opts(1, &(km_zks_options){.server_jaas = jaas, .krb5_conf = k.conf, .require_sasl = true},
                                   err, sizeof err);
    cr_assert(zs, "%s", err);
    const char *hosts = km_zks_hosts(zs, 0);
    snprintf(path, sizeof path, "%s/client-jaas.conf", k.dir);
    snprintf(client, sizeof client, "Client {\n  com.sun.security.auth.module.Krb5LoginModule required\n"
             "  useKeyTab=true\n  keyTab=\"%s\"\n  storeKey=true\n  useTicketCache=false\n"
             "  principal=\"kafka@KM.TEST\";\n};\n", k.kafka_keytab);
    write_text(path, client);
    km_zk_security sec = {.set_acl = true};
    char *owned[3] = {0};
    km_err kerr = {{0}};
    cr_assert_eq(km_zk_security_from_jaas(&sec, path, NULL, owned, &kerr), 0, "%s", kerr.msg);
    cr_assert_str_eq(sec.sasl_mechanism, "GSSAPI");
    km_image *img = gen_image();
    sync_secured(hosts, img, &sec);
    km_zkc *c = km_zkc_open_auth(hosts, &(km_zkc_auth){.sasl_mech = "GSSAPI"}, 10000);
    cr_assert(c, "a GSSAPI test session");
    char why[512], got[256];
    cr_assert(zkt_zk_equals_image(c, img, 1, why, sizeof why), "%s", why);
    cr_assert_str_eq(acl_text(c, "/config/users/alice", got, sizeof got), "sasl:kafka@KM.TEST=31");
    cr_assert_str_eq(acl_text(c, "/brokers/topics/topic-1", got, sizeof got), "sasl:kafka@KM.TEST=31,world:anyone=1");
    km_zkc_close(c);
    for (int i = 0; i < 3; i++)
        free(owned[i]);
    km_image_free(img);
    km_zks_stop(zs);
    unsetenv("KRB5_CONFIG");
    kdc_stop(&k);
}

typedef struct ticks {
    int n;
} ticks;

static void on_tick(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)loop; (void)revents;
    ((ticks *)t->data)->n++;
}

/* A server that accepts TCP and never answers the TLS handshake: the client's handshake blocks
 * the event loop at most a session timeout at a time (upstream waited forever), so the daemon's
 * other work goes on and the writer keeps trying, never connected, never plaintext. */
Test(zk_secure, a_stalled_tls_handshake_does_not_block_the_loop_for_good, .timeout = 120)
{
    km_test_pki p;
    cr_assert_eq(km_test_pki_make(&p), 0);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    cr_assert(!bind(fd, (struct sockaddr *)&a, sizeof a) && !listen(fd, 16) &&
              !getsockname(fd, (struct sockaddr *)&a, &len));
    char hosts[64], ks[PATH_MAX + 16];
    snprintf(hosts, sizeof hosts, "127.0.0.1:%d", ntohs(a.sin_port));
    snprintf(ks, sizeof ks, "%s/keystore.pem", p.dir);
    pem_keystore(p.client_key, p.client_cert, ks);
    km_zk_security sec = {.tls = true, .keystore_location = ks, .truststore_location = p.ca, .verify_host = true};
    zkt_writer *t = zkt_writer_new(hosts, 3000, 1, &(km_zkw_config){.security = &sec, .session_timeout_ms = 1500});
    cr_assert(t);
    ticks k = {0};
    ev_timer tick;
    ev_timer_init(&tick, on_tick, 0.5, 0.5);
    tick.data = &k;
    ev_timer_start(t->loop, &tick);
    zkt_spin(t->loop, 8000);
    ev_timer_stop(t->loop, &tick);
    cr_assert_geq(k.n, 3, "the loop ran its timers only %d times in 8 s", k.n);
    cr_assert_eq(km_zkw_get_state(t->w), KM_ZKW_CONNECTING);
    zkt_writer_free(t);
    close(fd);
    km_test_pki_free(&p);
}
