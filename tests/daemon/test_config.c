/* The daemon's .properties: defaults, every kind of value, and errors that name file, line and key. */
#include "km_config.h"
#include "km_testsupport.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *write_file(const char *text)
{
    char *dir = km_test_tmpdir("config"), *path = NULL;
    cr_assert(asprintf(&path, "%s/kmproxy.properties", dir) > 0);
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
    free(dir);
    return path;
}

static int load(const char *text, km_config *c, km_err *err)
{
    char *path = write_file(text);
    km_config_defaults(c);
    /* These cases are about the file format and dir mode; the default source is tested on its own. */
    km_config_set(c, "metadata.source", "dir", "test", err);
    int rc = km_config_load(c, path, err);
    free(path);
    return rc;
}

Test(config, parses_every_kind_and_keeps_defaults)
{
    km_config c;
    km_err err = {{0}};
    cr_assert_eq(load("# comment\n! also a comment\n\nmetadata.dir = /var/lib/kafka/__cluster_metadata-0\n"
                      "zookeeper.connect=127.0.0.1:2181/kafka\nbroker.tls.enabled: true\n"
                      "broker.tls.ca.file=/etc/ca.pem\nzk.write.behind.max.records=500\r\n",
                      &c, &err), 0, "%s", err.msg);
    cr_assert_str_eq(c.metadata_dir, "/var/lib/kafka/__cluster_metadata-0");
    cr_assert_str_eq(c.zk_connect, "127.0.0.1:2181/kafka");
    cr_assert(c.broker_tls);
    cr_assert_eq(c.zk_max_pending_records, 500);
    cr_assert_eq(c.zk_session_timeout_ms, 18000);
    cr_assert_eq(c.kraft_controller_id, -1);
    cr_assert_str_eq(c.log_level, "info");
    cr_assert_eq(km_config_validate(&c, &err), 0, "%s", err.msg);
    km_config_free(&c);
}

Test(config, errors_name_file_line_and_key)
{
    km_config c;
    km_err err = {{0}};
    cr_assert_eq(load("metadata.dir=/x\nzk.write.behind.max.record=5\n", &c, &err), -1);
    cr_assert(strstr(err.msg, "kmproxy.properties:2: unknown key 'zk.write.behind.max.record'"), "%s", err.msg);
    km_config_free(&c);
    cr_assert_eq(load("zk.write.behind.max.records=0\n", &c, &err), -1);
    cr_assert(strstr(err.msg, ":1: zk.write.behind.max.records must be an integer in [1, 10000000], not '0'"), "%s",
              err.msg);
    km_config_free(&c);
    cr_assert_eq(load("brokers.enabled=yes\n", &c, &err), -1);
    cr_assert(strstr(err.msg, "brokers.enabled must be true or false"), "%s", err.msg);
    km_config_free(&c);
    cr_assert_eq(load("just words\n", &c, &err), -1);
    cr_assert(strstr(err.msg, ":1: expected key=value"), "%s", err.msg);
    km_config_free(&c);
    cr_assert_eq(load("log.level=loud\n", &c, &err), -1);
    cr_assert(strstr(err.msg, "log.level must be error, warn, info or debug"), "%s", err.msg);
    km_config_free(&c);
}

/* No zookeeper.connect: a check-only instance (docs/verify.md), valid only when nothing asks it to write: broker
 * RPCs off, the check on, no HA, no ZooKeeper writer's key. */
Test(config, a_check_only_instance_has_no_zookeeper_connect)
{
    km_config c;
    km_err err = {{0}};
    cr_assert_eq(load("metadata.dir=/x\nbrokers.enabled=false\nverify.interval.ms=500\n", &c, &err), 0, "%s", err.msg);
    cr_assert_eq(km_config_validate(&c, &err), 0, "%s", err.msg);
    km_config_free(&c);
    static const struct { const char *extra, *why; } refused[] = {
        {"brokers.enabled=true\nverify.interval.ms=500\n", "zookeeper.connect is required"},
        {"brokers.enabled=false\nverify.interval.ms=0\n", "verify.interval.ms=0 without zookeeper.connect"},
        {"brokers.enabled=false\nverify.interval.ms=500\nha.enabled=true\n", "ha.enabled needs zookeeper.connect"},
        {"brokers.enabled=false\nverify.interval.ms=500\nzookeeper.session.timeout.ms=6000\n",
         "zookeeper.session.timeout.ms is read only with zookeeper.connect"},
        {"brokers.enabled=false\nverify.interval.ms=500\npassword.encoder.secret=s\n",
         "password.encoder.secret is read only with zookeeper.connect"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        char text[300];
        snprintf(text, sizeof text, "metadata.dir=/x\n%s", refused[i].extra);
        cr_assert_eq(load(text, &c, &err), 0, "%s", err.msg);
        cr_assert_eq(km_config_validate(&c, &err), -1, "%s accepted", refused[i].extra);
        cr_assert(strstr(err.msg, refused[i].why), "%s: %s", refused[i].extra, err.msg);
        km_config_free(&c);
    }
}

Test(config, validation_of_the_whole)
{
    km_config c;
    km_err err = {{0}};
    cr_assert_eq(load("zookeeper.connect=127.0.0.1:2181\n", &c, &err), 0);
    cr_assert_eq(km_config_validate(&c, &err), -1);
    cr_assert(strstr(err.msg, "metadata.dir is required"), "%s", err.msg);
    km_config_free(&c);
    cr_assert_eq(load("metadata.dir=/x\n", &c, &err), 0);
    cr_assert_eq(km_config_validate(&c, &err), -1);
    cr_assert(strstr(err.msg, "zookeeper.connect is required"), "%s", err.msg);
    km_config_free(&c);
    cr_assert_eq(load("metadata.dir=/x\nbroker.tls.enabled=true\n", &c, &err), 0);
    cr_assert_eq(km_config_validate(&c, &err), -1);
    cr_assert(strstr(err.msg, "broker.tls.ca.file"), "%s", err.msg);
    km_config_free(&c);
    cr_assert_eq(load("metadata.dir=/x\nbroker.tls.cert.file=/c.pem\n", &c, &err), 0);
    cr_assert_eq(km_config_validate(&c, &err), -1);
    cr_assert(strstr(err.msg, "go together"), "%s", err.msg);
    km_config_free(&c);
}

Test(config, the_default_source_is_the_quorum_and_unread_keys_are_refused)
{
    km_config c;
    km_err err = {{0}};
    km_config_defaults(&c);
    cr_assert_str_eq(c.metadata_source, "quorum");
    cr_assert_eq(km_config_set(&c, "zookeeper.connect", "h:1", "test", &err), 0);
    cr_assert_eq(km_config_validate(&c, &err), -1);
    cr_assert(strstr(err.msg, "controller.quorum.bootstrap.servers"), "%s", err.msg);
    cr_assert_eq(km_config_set(&c, "controller.quorum.bootstrap.servers", "h:9093", "test", &err), 0);
    cr_assert_eq(km_config_validate(&c, &err), 0, "%s", err.msg);
    cr_assert_eq(km_config_set(&c, "metadata.dir", "/x", "test", &err), 0);
    cr_assert_eq(km_config_validate(&c, &err), -1, "metadata.dir would be ignored in quorum mode");
    cr_assert(strstr(err.msg, "set metadata.source=dir"), "%s", err.msg);
    cr_assert_eq(km_config_set(&c, "metadata.source", "dir", "test", &err), 0);
    cr_assert_eq(km_config_validate(&c, &err), -1, "controller.quorum.* would be ignored in dir mode");
    cr_assert(strstr(err.msg, "controller.quorum.* is read only with metadata.source=quorum"), "%s", err.msg);
    km_config_free(&c);
}

/* metadata.source=dir dials no controller: every key that only reaches the controllers is refused
 * by name, never silently ignored (before, ssl.*, the listener keys and the spool were). */
Test(config, keys_that_reach_the_controllers_are_refused_with_the_dir_source)
{
    const char *keys[][2] = {{"metadata.quorum.snapshot.dir", "/tmp"}, {"controller.listener.names", "CONTROLLER"},
                             {"listener.security.protocol.map", "CONTROLLER:SSL"},
                             {"ssl.truststore.location", "/etc/hostname"}, {"ssl.truststore.type", "PEM"},
                             {"ssl.keystore.location", "/etc/hostname"}, {"ssl.keystore.type", "PEM"},
                             {"ssl.endpoint.identification.algorithm", "https"}};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        km_config c;
        km_err err = {{0}};
        km_config_defaults(&c);
        cr_assert_eq(km_config_set(&c, "zookeeper.connect", "h:1", "test", &err), 0);
        cr_assert_eq(km_config_set(&c, "metadata.source", "dir", "test", &err), 0);
        cr_assert_eq(km_config_set(&c, "metadata.dir", "/x", "test", &err), 0);
        cr_assert_eq(km_config_validate(&c, &err), 0, "%s", err.msg);
        cr_assert_eq(km_config_set(&c, keys[i][0], keys[i][1], "test", &err), 0, "%s", err.msg);
        cr_assert_eq(km_config_validate(&c, &err), -1, "%s would be ignored in dir mode", keys[i][0]);
        char want[128];
        snprintf(want, sizeof want, "%s is read only with metadata.source=quorum", keys[i][0]);
        cr_assert(strstr(err.msg, want), "%s", err.msg);
        km_config_free(&c);
    }
}

Test(config, missing_file)
{
    km_config c;
    km_err err = {{0}};
    km_config_defaults(&c);
    cr_assert_eq(km_config_load(&c, "/nonexistent/kmproxy.properties", &err), -1);
    cr_assert(strstr(err.msg, "/nonexistent/kmproxy.properties: cannot open"), "%s", err.msg);
    km_config_free(&c);
}

Test(config, shipped_example_is_valid)
{
    km_config c;
    km_err err = {{0}};
    char path[4096];
    snprintf(path, sizeof path, "%s/deploy/kmproxy.properties.example", km_test_source_dir());
    km_config_defaults(&c);
    cr_assert_eq(km_config_load(&c, path, &err), 0, "%s", err.msg);
    cr_assert_eq(km_config_validate(&c, &err), 0, "%s", err.msg);
    cr_assert_str_eq(c.metrics_listen, "127.0.0.1:9779");
    km_config_free(&c);
}

Test(config, password_encoder_keys)
{
    km_config c;
    km_err err = {{0}};
    cr_assert_eq(load("metadata.dir=/x\nzookeeper.connect=h:1\n", &c, &err), 0, "%s", err.msg);
    cr_assert_null(c.password_encoder_secret, "no secret: Kafka's NOOP encoder");
    cr_assert_null(c.password_encoder_keyfactory_algorithm);
    cr_assert_null(c.password_encoder_cipher_algorithm);
    cr_assert_eq(c.password_encoder_key_length, 128);
    cr_assert_eq(c.password_encoder_iterations, 4096);
    km_config_free(&c);
    cr_assert_eq(load("metadata.dir=/x\nzookeeper.connect=h:1\npassword.encoder.secret=s3cr=t:x\n"
                      "password.encoder.keyfactory.algorithm=PBKDF2WithHmacSHA1\n"
                      "password.encoder.cipher.algorithm=AES/GCM/NoPadding\npassword.encoder.key.length=256\n"
                      "password.encoder.iterations=8192\n", &c, &err), 0, "%s", err.msg);
    cr_assert_str_eq(c.password_encoder_secret, "s3cr=t:x");
    cr_assert_str_eq(c.password_encoder_keyfactory_algorithm, "PBKDF2WithHmacSHA1");
    cr_assert_str_eq(c.password_encoder_cipher_algorithm, "AES/GCM/NoPadding");
    cr_assert_eq(c.password_encoder_key_length, 256);
    cr_assert_eq(c.password_encoder_iterations, 8192);
    cr_assert_eq(km_config_validate(&c, &err), 0, "%s", err.msg);
    km_config_free(&c);
}

Test(config, password_encoder_errors)
{
    static const struct {
        const char *line, *want;
        bool at_validate; /* the line parses; the combination fails km_config_validate */
    } bad[] = {
        {"password.encoder.key.length=abc", ":3: password.encoder.key.length must be an integer in [8, ", false},
        {"password.encoder.key.length=4", "password.encoder.key.length must be an integer in [8, ", false},
        {"password.encoder.iterations=100", ":3: password.encoder.iterations must be an integer in [1024, ", false},
        {"password.encoder.secret=", ":3: password.encoder.secret is empty", false},
        {"password.encoder.key.length=100", "password.encoder.key.length 100 is not an AES key length", true},
        {"password.encoder.cipher.algorithm=DES/CBC/PKCS5Padding",
         "password.encoder.cipher.algorithm 'DES/CBC/PKCS5Padding' is not supported", true},
        {"password.encoder.keyfactory.algorithm=PBKDF2WithHmacMD5",
         "password.encoder.keyfactory.algorithm 'PBKDF2WithHmacMD5' is not supported", true},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        km_config c;
        km_err err = {{0}};
        char *text = NULL;
        cr_assert(asprintf(&text, "metadata.dir=/x\nzookeeper.connect=h:1\n%s\n", bad[i].line) > 0);
        int rc = load(text, &c, &err);
        if (bad[i].at_validate) {
            cr_assert_eq(rc, 0, "%s: %s", bad[i].line, err.msg);
            rc = km_config_validate(&c, &err);
        }
        cr_assert_eq(rc, -1, "%s accepted", bad[i].line);
        cr_assert(strstr(err.msg, bad[i].want), "%s: %s", bad[i].line, err.msg);
        km_config_free(&c);
        free(text);
    }
}

/* A key given twice used to take the last value silently. */
Test(config, a_key_given_twice_names_the_file_and_both_lines)
{
    km_config c;
    km_err err = {{0}};
    cr_assert_eq(load("metadata.dir=/x\nzookeeper.connect=a:1\n# again\nzookeeper.connect = b:2\n", &c, &err), -1);
    cr_assert(strstr(err.msg, "kmproxy.properties:4: zookeeper.connect is given twice, at lines 2 and 4"), "%s",
              err.msg);
    km_config_free(&c);
}

Test(config, zookeeper_guard_keys)
{
    km_config c;
    km_err err = {{0}};
    cr_assert_eq(load("metadata.dir=/x\n", &c, &err), 0, "%s", err.msg);
    cr_assert_eq(c.zk_max_deletes, KM_CONFIG_UNSET, "unset: 0 on a first sync, no limit after");
    cr_assert(!c.zk_force);
    km_config_free(&c);
    cr_assert_eq(load("zk.max.deletes=-1\nzk.force=true\n", &c, &err), 0, "%s", err.msg);
    cr_assert_eq(c.zk_max_deletes, -1);
    cr_assert(c.zk_force);
    km_config_free(&c);
    cr_assert_eq(load("zk.max.deletes=-2\n", &c, &err), -1);
    cr_assert(strstr(err.msg, "zk.max.deletes must be an integer in [-1, "), "%s", err.msg);
    km_config_free(&c);
}

static void resolve_ok(const char *text, km_config_broker_security *sec)
{
    km_config c;
    km_err err = {{0}};
    char *all = NULL;
    cr_assert(asprintf(&all, "metadata.dir=/x\nzookeeper.connect=h:1\n%s", text) > 0);
    cr_assert_eq(load(all, &c, &err), 0, "%s", err.msg);
    cr_assert_eq(km_config_validate(&c, &err), 0, "%s: %s", text, err.msg);
    cr_assert_eq(km_config_resolve_broker_security(&c, sec, &err), 0, "%s", err.msg);
    km_config_free(&c);
    free(all);
}

Test(config, broker_security_with_kafkas_names)
{
    km_config_broker_security sec;
    resolve_ok("", &sec);
    cr_assert_str_eq(sec.protocol, "PLAINTEXT");
    cr_assert_str_eq(sec.listener, "PLAINTEXT", "the default listener is named after the protocol");
    cr_assert(!sec.tls);
    cr_assert_eq(sec.mechanism, KM_SASL_NONE);
    resolve_ok("broker.tls.enabled=true\nbroker.tls.ca.file=/ca.pem\n", &sec);
    cr_assert_str_eq(sec.protocol, "SSL");
    cr_assert_str_eq(sec.listener, "SSL");
    cr_assert(sec.tls && sec.verify_name);
    resolve_ok("broker.security.protocol=SSL\nbroker.tls.ca.file=/ca.pem\nbroker.tls.endpoint.identification=false\n"
               "broker.listener=REPLICATION\n", &sec);
    cr_assert(sec.tls && !sec.verify_name);
    cr_assert_str_eq(sec.listener, "REPLICATION");
    resolve_ok("broker.security.protocol=SASL_SSL\nbroker.tls.ca.file=/ca.pem\nbroker.sasl.mechanism=SCRAM-SHA-512\n"
               "broker.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
               "username=\"kmproxy\" password=\"s=cr:t\";\n", &sec);
    cr_assert(sec.tls);
    cr_assert_str_eq(sec.listener, "SASL_SSL");
    cr_assert_eq(sec.mechanism, KM_SASL_SCRAM_SHA_512);
    cr_assert_str_eq(sec.username, "kmproxy");
    cr_assert_str_eq(sec.password, "s=cr:t");
    char *dir = km_test_tmpdir("pwfile"), path[600], *text = NULL;
    snprintf(path, sizeof path, "%s/pw", dir);
    FILE *f = fopen(path, "w");
    cr_assert(f);
    fputs("from-a-file\r\nsecond line ignored\n", f);
    fclose(f);
    cr_assert(asprintf(&text, "broker.security.protocol=SASL_PLAINTEXT\nbroker.sasl.mechanism=PLAIN\n"
                              "broker.sasl.username=admin\nbroker.sasl.password.file=%s\n", path) > 0);
    resolve_ok(text, &sec);
    cr_assert(!sec.tls);
    cr_assert_eq(sec.mechanism, KM_SASL_PLAIN);
    cr_assert_str_eq(sec.username, "admin");
    cr_assert_str_eq(sec.password, "from-a-file");
    km_config_broker_security_clear(&sec);
    cr_assert_eq(sec.password[0], '\0');
    free(text);
    km_test_rmtree(dir);
    free(dir);
}

Test(config, broker_security_contradictions_are_refused)
{
    static const struct { const char *text, *want; } bad[] = {
        {"broker.tls.enabled=true\nbroker.tls.ca.file=/ca\nbroker.security.protocol=PLAINTEXT\n",
         "broker.tls.enabled=true contradicts broker.security.protocol=PLAINTEXT"},
        {"broker.tls.enabled=true\nbroker.tls.ca.file=/ca\nbroker.security.protocol=SASL_PLAINTEXT\n",
         "contradicts broker.security.protocol=SASL_PLAINTEXT"},
        {"broker.security.protocol=TLS\n", "must be PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL, not 'TLS'"},
        {"broker.security.protocol=SSL\n", "broker.security.protocol=SSL needs broker.tls.ca.file"},
        {"broker.tls.ca.file=/ca\n", "broker.tls.ca.file is set but broker.security.protocol is PLAINTEXT"},
        {"broker.tls.endpoint.identification=false\n", "broker.tls.endpoint.identification is set but"},
        {"broker.security.protocol=SSL\nbroker.tls.ca.file=/ca\nbroker.tls.endpoint.identification=https\n",
         "broker.tls.endpoint.identification must be true or false"},
        {"broker.sasl.mechanism=PLAIN\n", "broker.sasl.mechanism is set but broker.security.protocol is PLAINTEXT"},
        {"broker.security.protocol=SASL_PLAINTEXT\n", "needs broker.sasl.mechanism"},
        {"broker.security.protocol=SASL_PLAINTEXT\nbroker.sasl.mechanism=GSSAPI\n", "'GSSAPI' is not supported"},
        {"broker.security.protocol=SASL_PLAINTEXT\nbroker.sasl.mechanism=PLAIN\n",
         "needs broker.sasl.jaas.config, or broker.sasl.username and broker.sasl.password.file"},
        {"broker.security.protocol=SASL_PLAINTEXT\nbroker.sasl.mechanism=PLAIN\nbroker.sasl.username=a\n"
         "broker.sasl.password.file=/nonexistent/pw\n", "broker.sasl.password.file=/nonexistent/pw: cannot open"},
        {"broker.security.protocol=SASL_PLAINTEXT\nbroker.sasl.mechanism=PLAIN\nbroker.sasl.username=a\n"
         "broker.sasl.jaas.config=x\n", "exclude each other"},
        {"broker.security.protocol=SASL_PLAINTEXT\nbroker.sasl.mechanism=SCRAM-SHA-256\nbroker.sasl.jaas.config="
         "org.apache.kafka.common.security.plain.PlainLoginModule required username=\"a\" password=\"b\";\n",
         "does not fit mechanism SCRAM-SHA-256"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        km_config c;
        km_err err = {{0}};
        char *text = NULL;
        cr_assert(asprintf(&text, "metadata.dir=/x\nzookeeper.connect=h:1\n%s", bad[i].text) > 0);
        cr_assert_eq(load(text, &c, &err), 0, "%s", err.msg);
        cr_assert_eq(km_config_validate(&c, &err), -1, "accepted: %s", bad[i].text);
        cr_assert(strstr(err.msg, bad[i].want), "%s -> %s", bad[i].text, err.msg);
        km_config_free(&c);
        free(text);
    }
}
