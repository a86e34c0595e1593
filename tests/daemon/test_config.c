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
