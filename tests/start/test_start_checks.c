/* Start-up checks (issue 18 items 7-9): `kmproxy run`, a standby included, exits 2 at start naming
 * the key when a file it will need is missing, not a regular file (a FIFO must never block it) or
 * not PEM, when a host cannot exist, or when the chroot breaks ZooKeeper's path rules. Each run is
 * bounded by timeout(1): before these checks the daemon ran on, so the bound is what fails. */
#include "km_config.h"
#include "km_testsupport.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define RUN_BOUND "60" /* seconds: a start-up check answers at once; the daemon would run on */

static char *dir;

static void setup(void) { dir = km_test_tmpdir("startchk"); }
static void teardown(void)
{
    km_test_rmtree(dir);
    free(dir);
}

static char *path_in(const char *name)
{
    char *p = NULL;
    cr_assert(asprintf(&p, "%s/%s", dir, name) > 0);
    return p;
}

static char *write_in(const char *name, const char *text)
{
    char *p = path_in(name);
    FILE *f = fopen(p, "w");
    cr_assert(f);
    fputs(text, f);
    fclose(f);
    return p;
}

/* A standby-to-be (ha.enabled) with nothing reachable: it would wait for ZooKeeper forever.
 * extra may replace the zookeeper.connect or controller.quorum.* line. */
static char *config_text(const char *extra)
{
    char *text = NULL;
    cr_assert(asprintf(&text, "ha.enabled=true\n%s%s%s", extra,
                       strstr(extra, "zookeeper.connect=") ? "" : "zookeeper.connect=127.0.0.1:1/kafka\n",
                       strstr(extra, "controller.quorum.") ? "" : "controller.quorum.bootstrap.servers=127.0.0.1:1\n")
              > 0);
    return text;
}

/* Runs `kmproxy run --config` with that text; expects exit 2 with `named` on stderr. */
static void expect_start_refused(const char *extra, const char *named)
{
    char *text = config_text(extra);
    char *conf = write_in("kmproxy.properties", text);
    char *argv[] = {"/usr/bin/timeout", "-s", "KILL", RUN_BOUND, (char *)km_test_binary(), "run", "--config", conf,
                    NULL};
    char *out = NULL, *err = NULL;
    int rc = km_test_run(argv, NULL, 0, &out, NULL, &err);
    cr_expect_eq(rc, 2, "exit %d (137: still running after %s s) for:\n%s\nstderr: %s", rc, RUN_BOUND, extra, err);
    cr_expect(strstr(err, named), "stderr does not name '%s': %s", named, err);
    free(out), free(err), free(conf), free(text);
}

Test(start_checks, a_missing_or_bad_broker_tls_file_stops_a_standby_at_start, .init = setup, .fini = teardown)
{
    expect_start_refused("broker.security.protocol=SSL\nbroker.tls.ca.file=/nonexistent/ca.pem\n",
                         "broker.tls.ca.file=/nonexistent/ca.pem: cannot open");
    char *junk = write_in("junk.pem", "not a certificate\n"), *extra = NULL;
    cr_assert(asprintf(&extra, "broker.security.protocol=SSL\nbroker.tls.ca.file=%s\n", junk) > 0);
    expect_start_refused(extra, junk);
    free(extra), free(junk);
}

Test(start_checks, a_fifo_never_blocks_the_start, .init = setup, .fini = teardown)
{
    char *fifo = path_in("fifo");
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    static const char *const FORMS[][2] = {
        {"broker.security.protocol=SSL\nbroker.tls.ca.file=%s\n", "broker.tls.ca.file"},
        {"broker.security.protocol=SASL_PLAINTEXT\nbroker.sasl.mechanism=PLAIN\nbroker.sasl.username=a\n"
         "broker.sasl.password.file=%s\n", "broker.sasl.password.file"},
        {"listener.security.protocol.map=CONTROLLER:SSL\ncontroller.listener.names=CONTROLLER\n"
         "ssl.truststore.location=%s\n", "ssl.truststore.location"},
    };
    for (size_t i = 0; i < sizeof FORMS / sizeof FORMS[0]; i++) {
        char *extra = NULL, *named = NULL;
        cr_assert(asprintf(&extra, FORMS[i][0], fifo) > 0);
        cr_assert(asprintf(&named, "%s=%s: is a FIFO, not a regular file", FORMS[i][1], fifo) > 0);
        expect_start_refused(extra, named);
        free(extra), free(named);
    }
    free(fifo);
}

/* Names under .invalid cannot exist (RFC 6761); the resolver says so (EAI_NONAME) with or without
 * DNS. A resolver that cannot answer (EAI_AGAIN) gives a warning only; not injected here. */
Test(start_checks, a_host_that_cannot_exist_stops_the_start, .init = setup, .fini = teardown)
{
    expect_start_refused("zookeeper.connect=127.0.0.1:1,zk-typo.invalid:2181/kafka\n",
                         "zookeeper.connect: host 'zk-typo.invalid' does not exist");
    expect_start_refused("controller.quorum.bootstrap.servers=127.0.0.1:1,ctl-typo.invalid:9093\n",
                         "controller.quorum.bootstrap.servers: host 'ctl-typo.invalid' does not exist");
    expect_start_refused("controller.quorum.voters=1@[::1]:1,2@ctl-typo.invalid:9093\n",
                         "controller.quorum.voters: host 'ctl-typo.invalid'");
}

Test(start_checks, a_trailing_slash_chroot_is_refused, .init = setup, .fini = teardown)
{
    expect_start_refused("zookeeper.connect=127.0.0.1:1/kafka/\n",
                         "zookeeper.connect=127.0.0.1:1/kafka/: the chroot '/kafka/' must not end with '/'");
}

static int validate_connect(const char *connect, km_err *err)
{
    km_config c;
    km_config_defaults(&c);
    km_config_set(&c, "controller.quorum.bootstrap.servers", "127.0.0.1:1", "test", err);
    km_config_set(&c, "zookeeper.connect", connect, "test", err);
    int rc = km_config_validate(&c, err);
    km_config_free(&c);
    return rc;
}

/* ZooKeeper's ConnectStringParser and PathUtils.validatePath decide what a chroot may be. */
Test(start_checks, chroots_follow_zookeepers_path_rules)
{
    static const char *const GOOD[] = {"h:1", "h:1/", "h:1/kafka", "h:1/a/b.c/..d/e..", "h1:1,h2:2/k_1"};
    static const char *const BAD[][2] = {
        {"h:1/kafka/", "must not end with '/'"}, {"h:1//kafka", "empty node name"},
        {"h:1/a//b", "empty node name"},          {"h:1/a/./b", "'.' as a node name"},
        {"h:1/a/..", "'..' as a node name"},      {"h:1/a/\x1b[0m", "control character"},
    };
    km_err err = {{0}};
    for (size_t i = 0; i < sizeof GOOD / sizeof GOOD[0]; i++)
        cr_expect_eq(validate_connect(GOOD[i], &err), 0, "%s: %s", GOOD[i], err.msg);
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        cr_expect_eq(validate_connect(BAD[i][0], &err), -1, "%s accepted", BAD[i][0]);
        cr_expect(strstr(err.msg, BAD[i][1]) && strstr(err.msg, "zookeeper.connect="), "%s: %s", BAD[i][0],
                  err.msg);
    }
}

/* kmproxy proxy alone: its TLS files are checked the same way. */
Test(start_checks, the_proxy_refuses_a_fifo_as_its_certificate, .init = setup, .fini = teardown)
{
    char *fifo = path_in("fifo"), *set = NULL;
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    cr_assert(asprintf(&set, "proxy.client.ssl.certificate.location=%s", fifo) > 0);
    char *argv[] = {"/usr/bin/timeout", "-s", "KILL", RUN_BOUND, (char *)km_test_binary(), "proxy", "--set",
                    "proxy.bootstrap.listen=127.0.0.1:0", "--set", "proxy.bootstrap.upstream=127.0.0.1:1", "--set",
                    set, "--set", "proxy.client.ssl.key.location=/nonexistent/key.pem", NULL};
    char *out = NULL, *err = NULL;
    int rc = km_test_run(argv, NULL, 0, &out, NULL, &err);
    cr_expect_eq(rc, 2, "exit %d: %s", rc, err);
    cr_expect(strstr(err, "proxy.client.ssl.certificate.location=") && strstr(err, "is a FIFO"), "%s", err);
    free(out), free(err), free(set), free(fifo);
}
