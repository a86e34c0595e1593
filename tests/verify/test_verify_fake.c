/* test_verify_fake.c - `kmproxy verify` when brokers cannot be checked: what a real broker does not do on demand
 * (answer malformed bytes, accept and never answer) from a few lines of fake server here, and a port nobody
 * listens on.  Every case exits 2, names the broker and why on stderr, and prints nothing that reads like
 * success.  And a broker answering from the image but with one partition's ISR changed at the same leader epoch
 * (what hybrid mode may leave, KAFKA-16121): exactly one isr_differs.  The real cluster's cases are in
 * tests/realcluster/test_verify.c. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "km_codec.h"
#include "km_image.h"
#include "km_testsupport.h"
#include "km_verify.h"
#include "test_tls_certs.h"
#include "verify_fakebroker.h"
#include "zkserver.h"

static int listen_any(uint16_t *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t len = sizeof a;
    cr_assert(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && listen(fd, 8) == 0 &&
              getsockname(fd, (struct sockaddr *)&a, &len) == 0);
    *port = ntohs(a.sin_port);
    return fd;
}

/* Answers every request on a connection with its correlation id and bytes no Kafka answer starts with. */
static void answer_garbage(int c)
{
    uint8_t buf[65536];
    ssize_t n = read(c, buf, sizeof buf);
    if (n >= 12) {
        uint8_t rs[12] = { 0, 0, 0, 8, buf[8], buf[9], buf[10], buf[11], 0xff, 0xff, 0xff, 0xff };
        if (write(c, rs, sizeof rs) != (ssize_t)sizeof rs)
            _exit(1);
    }
}

/* A child serving both fakes until the test ends: `garbage` answers malformed, `silent` accepts and never
 * answers. */
static pid_t serve(int garbage, int silent)
{
    pid_t parent = getpid(), pid = fork();
    if (pid)
        return pid;
    km_test_die_with_parent(parent);
    struct pollfd p[2] = { { .fd = garbage, .events = POLLIN }, { .fd = silent, .events = POLLIN } };
    for (;;) {
        if (poll(p, 2, -1) <= 0)
            continue;
        if (p[0].revents) {
            int c = accept(garbage, NULL, NULL);
            answer_garbage(c);
            close(c);
        }
        if (p[1].revents)
            (void)accept(silent, NULL, NULL); /* kept open, never answered */
    }
}

TestSuite(verify_fake, .timeout = 120);

Test(verify_fake, unreachable_malformed_and_silent_brokers_exit_2_naming_each)
{
    uint16_t ports[3];
    int garbage = listen_any(&ports[0]), silent = listen_any(&ports[1]), closed = listen_any(&ports[2]);
    close(closed); /* nobody listens on ports[2] */
    pid_t server = serve(garbage, silent);
    char *dir = km_test_tmpdir("verify-fake");
    km_gen_opts o = { .brokers = 3, .topics = 2, .partitions = 3, .zk_migration = true, .seed = 26,
                      .broker_host = "127.0.0.1", .broker_ports = ports };
    km_err err;
    cr_assert(km_gen_write(dir, &o, NULL, &err) > 0, "%s", err.msg);
    char *argv[] = { (char *)km_test_binary(), "verify", "--metadata", dir, "--timeout", "2", NULL };
    char *out = NULL, *errs = NULL;
    int rc = km_test_run(argv, NULL, 0, &out, NULL, &errs);
    kill(server, SIGKILL);
    waitpid(server, NULL, 0);
    cr_assert_eq(rc, 2, "exit %d\nstdout: %s\nstderr: %s", rc, out, errs);
    cr_assert(!strstr(out, "consistent\n") && strstr(out, "verdict: unchecked"), "stdout: %s", out);
    cr_assert(strstr(errs, "could not check broker 1: broker 1 (127.0.0.1:") && strstr(errs, "malformed METADATA"),
              "the malformed answer is not named: %s", errs);
    cr_assert(strstr(errs, "could not check broker 2: broker 2 (127.0.0.1:") && strstr(errs, "no answer within 2.0 s"),
              "the silent broker is not named: %s", errs);
    cr_assert(strstr(errs, "could not check broker 3: broker 3 (127.0.0.1:") && strstr(errs, "connect"),
              "the unreachable broker is not named: %s", errs);
    free(out);
    free(errs);
    km_test_rmtree(dir);
    free(dir);
    close(garbage);
    close(silent);
}

/* --json: the same verdict, machine-readable, and the same exit status. */
Test(verify_fake, json_report_of_an_unreachable_broker)
{
    uint16_t ports[1];
    close(listen_any(&ports[0]));
    char *dir = km_test_tmpdir("verify-fake-json");
    km_gen_opts o = { .brokers = 1, .topics = 1, .partitions = 1, .zk_migration = true, .seed = 1,
                      .broker_host = "127.0.0.1", .broker_ports = ports };
    km_err err;
    cr_assert(km_gen_write(dir, &o, NULL, &err) > 0, "%s", err.msg);
    char *argv[] = { (char *)km_test_binary(), "verify", "--json", "--metadata", dir, NULL };
    char *out = NULL, *errs = NULL;
    int rc = km_test_run(argv, NULL, 0, &out, NULL, &errs);
    cr_assert_eq(rc, 2, "exit %d: %s %s", rc, out, errs);
    json_error_t jerr;
    json_t *rep = json_loads(out, 0, &jerr);
    cr_assert(rep, "not JSON: %s", out);
    cr_assert_str_eq(json_string_value(json_object_get(rep, "verdict")), "unchecked");
    cr_assert_eq(json_array_size(json_object_get(rep, "unchecked")), 1);
    cr_assert(json_is_false(json_object_get(json_array_get(json_object_get(rep, "brokers"), 0), "reachable")));
    json_decref(rep);
    free(out);
    free(errs);
    km_test_rmtree(dir);
    free(dir);
}

/* Bad usage is exit 2 with the usage, not a check. */
static void assert_usage(char *const argv[])
{
    char *out = NULL, *errs = NULL;
    cr_assert_eq(km_test_run(argv, NULL, 0, &out, NULL, &errs), 2);
    cr_assert(strstr(errs, "usage: kmproxy verify"), "%s", errs);
    free(out);
    free(errs);
}

Test(verify_fake, no_metadata_is_bad_usage)
{
    char *argv[] = { (char *)km_test_binary(), "verify", NULL };
    assert_usage(argv);
}

/* The image comes from one place: a log on disk or the controllers, not both. */
Test(verify_fake, metadata_and_bootstrap_server_together_is_bad_usage)
{
    char *argv[] = { (char *)km_test_binary(), "verify", "--metadata", "/nonexistent", "--bootstrap-server",
                     "127.0.0.1:1", NULL };
    assert_usage(argv);
}

/* Controllers that cannot be reached: exit 2 naming them, no report. */
Test(verify_fake, unreachable_controllers_exit_2)
{
    uint16_t port;
    close(listen_any(&port));
    char servers[64];
    snprintf(servers, sizeof servers, "127.0.0.1:%u", port);
    char *argv[] = { (char *)km_test_binary(), "verify", "--bootstrap-server", servers, "--timeout", "1", NULL };
    char *out = NULL, *errs = NULL;
    int rc = km_test_run(argv, NULL, 0, &out, NULL, &errs);
    cr_assert_eq(rc, 2, "exit %d: %s %s", rc, out, errs);
    cr_assert(strstr(errs, "could not check") && strstr(errs, servers) && !strstr(out, "verdict"), "%s / %s", out,
              errs);
    free(out);
    free(errs);
}

/* ---- a broker answering from an image, with one partition's ISR changed: isr_differs ---- */

/* A child answering every connection on lfd from img, as tweak says, until the test ends. */
static pid_t serve_image(int lfd, const km_image *img, uint16_t port, vf_tweak tweak)
{
    pid_t parent = getpid(), server = fork();
    if (server == 0) {
        km_test_die_with_parent(parent);
        for (;;) {
            int c = accept(lfd, NULL, NULL);
            while (c >= 0 && vf_answer_one(c, img, port, tweak))
                ;
            close(c);
        }
    }
    return server;
}

Test(verify_fake, same_epoch_other_isr_is_isr_differs)
{
    uint16_t port;
    int lfd = listen_any(&port);
    char *dir = km_test_tmpdir("verify-fake-isr");
    km_image *img = km_image_new();
    km_gen_opts o = { .brokers = 1, .topics = 2, .partitions = 2, .zk_migration = true, .seed = 3,
                      .broker_host = "127.0.0.1", .broker_ports = &port };
    km_err err;
    cr_assert(km_gen_write(dir, &o, img, &err) > 0, "%s", err.msg);
    pid_t server = serve_image(lfd, img, port, VF_ISR_DIFFERS);
    char *argv[] = { (char *)km_test_binary(), "verify", "--json", "--metadata", dir, "--timeout", "5", NULL };
    char *out = NULL, *errs = NULL;
    int rc = km_test_run(argv, NULL, 0, &out, NULL, &errs);
    kill(server, SIGKILL);
    waitpid(server, NULL, 0);
    cr_assert_eq(rc, 1, "exit %d\nstdout: %s\nstderr: %s", rc, out, errs);
    json_error_t jerr;
    json_t *rep = json_loads(out, 0, &jerr), *f = json_array_get(json_object_get(rep, "findings"), 0);
    cr_assert(json_array_size(json_object_get(rep, "findings")) == 1 &&
                  !strcmp(json_string_value(json_object_get(f, "class")), km_verify_class_name(KM_VERIFY_ISR_DIFFERS)) &&
                  !strcmp(json_string_value(json_object_get(f, "topic")), "topic-0") &&
                  json_integer_value(json_object_get(f, "partition")) == 0,
              "want exactly one isr_differs on topic-0-0: %s", out);
    json_decref(rep);
    free(out);
    free(errs);
    km_image_free(img);
    km_test_rmtree(dir);
    free(dir);
    close(lfd);
}

/* ---- the dual-write lag: /migration in a real ZooKeeper against the metadata file's last offset ---- */

static void set_migration(km_zkc *zc, int64_t offset)
{
    char mig[200];
    snprintf(mig, sizeof mig, "{\"version\":0,\"kraft_controller_id\":3000,\"kraft_controller_epoch\":1,"
             "\"kraft_metadata_offset\":%lld,\"kraft_metadata_epoch\":1}", (long long)offset);
    if (km_zkc_set(zc, "/migration", mig, -1, NULL) == ZNONODE)
        cr_assert_eq(km_zkc_create(zc, "/migration", mig, 0), ZOK);
}

/* `kmproxy verify --json --metadata dir --zookeeper hosts` + extra: its exit and its dual_write (owned by *rep). */
static int verify_dual(const char *dir, const char *hosts, const char *extra1, const char *extra2, json_t **rep,
                       json_t **dual)
{
    char *argv[] = { (char *)km_test_binary(), "verify", "--json", "--metadata", (char *)dir, "--timeout", "5",
                     "--zookeeper", (char *)hosts, (char *)extra1, (char *)extra2, NULL };
    char *out = NULL, *errs = NULL;
    int rc = km_test_run(argv, NULL, 0, &out, NULL, &errs);
    json_error_t jerr;
    *rep = json_loads(out ? out : "", 0, &jerr);
    *dual = json_object_get(*rep, "dual_write");
    cr_assert(*dual || rc == 2, "exit %d\nstdout: %s\nstderr: %s", rc, out, errs);
    free(out);
    free(errs);
    return rc;
}

static int64_t jget(const json_t *o, const char *key)
{
    return (int64_t)json_integer_value(json_object_get(o, key));
}

Test(verify_fake, dual_write_lag_and_a_stalled_driver_from_migration_in_zookeeper)
{
    char zerr[512];
    km_zks *zs = km_zks_start(1, NULL, 0, zerr, sizeof zerr);
    cr_assert(zs, "%s", zerr);
    const char *hosts = km_zks_hosts(zs, -1);
    km_zkc *zc = km_zkc_open(hosts, NULL, 10000);
    uint16_t port;
    int lfd = listen_any(&port);
    char *dir = km_test_tmpdir("verify-fake-dual");
    km_image *img = km_image_new();
    km_gen_opts o = { .brokers = 1, .topics = 2, .partitions = 2, .zk_migration = true, .seed = 3,
                      .broker_host = "127.0.0.1", .broker_ports = &port };
    km_err err;
    cr_assert(zc && km_gen_write(dir, &o, img, &err) > 0, "%s", err.msg);
    int64_t last = km_image_offset(img);
    pid_t server = serve_image(lfd, img, port, VF_EXACT);
    json_t *rep, *d;

    /* no /migration: nothing to compare, could not check */
    cr_assert_eq(verify_dual(dir, hosts, NULL, NULL, &rep, &d), 2);
    json_decref(rep);

    /* 5 records behind, read once: the lag, no claim about the driver, the brokers' verdict stands */
    set_migration(zc, last - 5);
    cr_assert_eq(verify_dual(dir, hosts, NULL, NULL, &rep, &d), 0);
    cr_assert(jget(d, "high_watermark") == last && jget(d, "migration_offset") == last - 5 &&
              jget(d, "lag_records") == 5 && jget(d, "migration_epoch") == 1 &&
              !strcmp(json_string_value(json_object_get(d, "high_watermark_source")), "metadata_file") &&
              !json_object_get(d, "driver_stalled"), "%s", json_dumps(d, 0));
    json_decref(rep);

    /* --max-lag below it: inconsistent */
    cr_assert_eq(verify_dual(dir, hosts, "--max-lag", "4", &rep, &d), 1);
    cr_assert(json_is_true(json_object_get(d, "lag_exceeded")) &&
              !strcmp(json_string_value(json_object_get(rep, "verdict")), "inconsistent"));
    json_decref(rep);

    /* watched: the log is past /migration's offset and /migration does not move: the driver stalled */
    cr_assert_eq(verify_dual(dir, hosts, "--watch-seconds", "1", &rep, &d), 1);
    cr_assert(json_is_true(json_object_get(d, "driver_stalled")) && jget(d, "lag_records") == 5 &&
              jget(d, "migration_zk_version") == jget(d, "migration_zk_version_after"), "%s", json_dumps(d, 0));
    json_decref(rep);

    /* caught up: /migration at the log's last offset is no stall even if it does not move */
    set_migration(zc, last);
    cr_assert_eq(verify_dual(dir, hosts, "--watch-seconds", "1", &rep, &d), 0);
    cr_assert(json_is_false(json_object_get(d, "driver_stalled")) && jget(d, "lag_records") == 0);
    json_decref(rep);

    /* the arithmetic when /migration moved between the readings: not stalled, the lag at the second reading */
    json_t *r = json_pack("{s:s,s:i}", "verdict", "consistent", "exit", 0);
    km_verify_dual dw = { .high_watermark = 100, .source = "quorum", .first = { 90, 1, 4 }, .watched = true,
                          .watch_seconds = 2, .high_watermark_after = 120, .after = { 118, 1, 9 }, .max_lag = -1 };
    cr_assert_eq(km_verify_dual_write(r, &dw), 0);
    d = json_object_get(r, "dual_write");
    cr_assert(json_is_false(json_object_get(d, "driver_stalled")) && jget(d, "lag_records") == 2);
    dw.after = (km_verify_migration){ 90, 1, 5 }; /* rewritten at the same offset (zkVersion 4 -> 5): no progress */
    cr_assert_eq(km_verify_dual_write(r, &dw), 1);
    cr_assert(json_is_true(json_object_get(json_object_get(r, "dual_write"), "driver_stalled")));
    dw.after = dw.first; /* /migration did not move while the log went from 100 to 120 */
    cr_assert_eq(km_verify_dual_write(r, &dw), 1);
    cr_assert(json_is_true(json_object_get(json_object_get(r, "dual_write"), "driver_stalled")) &&
              jget(json_object_get(r, "dual_write"), "lag_records") == 30);
    json_decref(r);

    kill(server, SIGKILL);
    waitpid(server, NULL, 0);
    km_zkc_close(zc);
    km_zks_stop(zs);
    km_image_free(img);
    km_test_rmtree(dir);
    free(dir);
    close(lfd);
}

/* ---- --config: the daemon's own kmproxy.properties, against a ZooKeeper that requires SASL ---- */

/* dir/NAME: the daemon's settings for metadata dir, the ZooKeeper at hosts and a JAAS Client section with
 * password; the file's path (static storage). */
static const char *daemon_config(const char *dir, const char *name, const char *hosts, const char *password)
{
    static char path[1200];
    char jaas[1100];
    snprintf(jaas, sizeof jaas, "%s/%s.jaas", dir, name);
    FILE *f = fopen(jaas, "w");
    cr_assert(f);
    fprintf(f, "Client {\n  org.apache.zookeeper.server.auth.DigestLoginModule required\n"
               "  username=\"kafka\" password=\"%s\";\n};\n", password);
    fclose(f);
    snprintf(path, sizeof path, "%s/%s.properties", dir, name);
    cr_assert((f = fopen(path, "w")));
    fprintf(f, "metadata.source=dir\nmetadata.dir=%s\nzookeeper.connect=%s\nzookeeper.set.acl=true\n"
               "java.security.auth.login.config=%s\nverify.timeout.ms=5000\nverify.interval.ms=30000\n",
            dir, hosts, jaas);
    fclose(f);
    return path;
}

/* `kmproxy verify --json --config config` + extra exits want_rc, its stderr holding want_err (when set); its
 * report (new reference, NULL when none). */
static json_t *verify_config(const char *config, const char *extra1, const char *extra2, int want_rc,
                             const char *want_err)
{
    char *argv[] = { (char *)km_test_binary(), "verify", "--json", "--config", (char *)config, (char *)extra1,
                     (char *)extra2, NULL };
    char *out = NULL, *errs = NULL;
    int rc = km_test_run(argv, NULL, 0, &out, NULL, &errs);
    cr_assert(rc == want_rc && (!want_err || strstr(errs, want_err)), "exit %d, stderr: %s", rc, errs);
    json_error_t jerr;
    json_t *rep = json_loads(out ? out : "", 0, &jerr);
    free(out);
    free(errs);
    return rep;
}

/* A ZooKeeper the test started (and its client), the fake broker serving a generated log in dir. */
typedef struct zk_rig {
    km_zks *zs;
    km_zkc *zc;
    uint16_t port;
    int lfd;
    char *dir;
    km_image *img;
    pid_t server;
} zk_rig;

static void zk_rig_up(zk_rig *z, const char *tag)
{
    cr_assert(z->zs && z->zc);
    z->lfd = listen_any(&z->port);
    z->dir = km_test_tmpdir(tag);
    z->img = km_image_new();
    km_gen_opts o = { .brokers = 1, .topics = 1, .partitions = 2, .zk_migration = true, .seed = 3,
                      .broker_host = "127.0.0.1", .broker_ports = &z->port };
    km_err err;
    cr_assert(km_gen_write(z->dir, &o, z->img, &err) > 0, "%s", err.msg);
    z->server = serve_image(z->lfd, z->img, z->port, VF_EXACT);
}

static void zk_rig_down(zk_rig *z)
{
    kill(z->server, SIGKILL);
    waitpid(z->server, NULL, 0);
    km_zkc_close(z->zc);
    km_zks_stop(z->zs);
    km_image_free(z->img);
    km_test_rmtree(z->dir);
    free(z->dir);
    close(z->lfd);
}

Test(verify_fake, config_file_reads_migration_through_a_sasl_zookeeper_and_a_wrong_password_exits_2)
{
    char zerr[512];
    zk_rig z = { 0 };
    km_zks_options zo = { .sasl_users = "user_kafka=\"kafka-secret\"", .require_sasl = true };
    cr_assert((z.zs = km_zks_start_opts(1, &zo, zerr, sizeof zerr)), "%s", zerr);
    const char *hosts = km_zks_hosts(z.zs, -1);
    z.zc = km_zkc_open_auth(hosts, &(km_zkc_auth){ .sasl_user = "kafka", .sasl_password = "kafka-secret" }, 10000);
    zk_rig_up(&z, "verify-fake-config");
    /* readable by the SASL user kafka only: an unauthenticated read could not see it */
    struct ACL only_kafka = { .perms = ZOO_PERM_ALL, .id = { .scheme = "sasl", .id = "kafka" } };
    struct ACL_vector acl = { 1, &only_kafka };
    int64_t last = km_image_offset(z.img);
    char mig[200];
    snprintf(mig, sizeof mig, "{\"version\":0,\"kraft_controller_id\":3000,\"kraft_controller_epoch\":1,"
             "\"kraft_metadata_offset\":%lld,\"kraft_metadata_epoch\":1}", (long long)(last - 3));
    cr_assert_eq(km_zkc_create_acl(z.zc, "/migration", mig, &acl), ZOK);

    /* the daemon's file alone: the image of metadata.dir, /migration read as the SASL user */
    json_t *rep = verify_config(daemon_config(z.dir, "good", hosts, "kafka-secret"), NULL, NULL, 0, NULL);
    json_t *d = json_object_get(rep, "dual_write");
    cr_assert(jget(d, "migration_offset") == last - 3 && jget(d, "lag_records") == 3, "%s", json_dumps(d, 0));
    json_decref(rep);

    /* an option overrides the file: another chroot, where there is no /migration */
    char other[600];
    snprintf(other, sizeof other, "%s/elsewhere", hosts);
    json_decref(verify_config(daemon_config(z.dir, "good", hosts, "kafka-secret"), "--zookeeper", other, 2,
                              "no /migration"));
    /* a wrong password: could not check, saying the authentication was refused */
    json_decref(verify_config(daemon_config(z.dir, "bad", hosts, "not-the-secret"), NULL, NULL, 2,
                              "refused the authentication of kafka"));
    zk_rig_down(&z);
}

/* The class names are the verifier's to export (the daemon's metrics label them): one each, distinct. */
Test(verify_fake, every_finding_class_has_one_exported_name)
{
    const char *want[] = { "metadata_stale", "replica_stale", "stale_leader", "stray_log", "isr_differs" };
    cr_assert_eq(KM_VERIFY_N_CLASSES, sizeof want / sizeof want[0]);
    for (int c = 0; c < KM_VERIFY_N_CLASSES; c++)
        cr_assert_str_eq(km_verify_class_name((km_verify_class)c), want[c]);
    cr_assert_null(km_verify_class_name(KM_VERIFY_N_CLASSES));
    cr_assert_null(km_verify_class_name((km_verify_class)-1));
}

/* The same through a TLS-only ZooKeeper that wants a client certificate (zookeeper.ssl.* as Kafka's brokers name
 * them): /migration read; a truststore without the server's CA: exit 2, saying the certificate was refused. */
static const char *tls_config(const char *dir, const char *name, const char *hosts, const char *keystore,
                              const char *truststore)
{
    static char path[1200];
    snprintf(path, sizeof path, "%s/%s.properties", dir, name);
    FILE *f = fopen(path, "w");
    cr_assert(f);
    fprintf(f, "metadata.source=dir\nmetadata.dir=%s\nzookeeper.connect=%s\nzookeeper.ssl.client.enable=true\n"
               "zookeeper.clientCnxnSocket=org.apache.zookeeper.ClientCnxnSocketNetty\n"
               "zookeeper.ssl.keystore.location=%s\nzookeeper.ssl.keystore.type=PEM\n"
               "zookeeper.ssl.truststore.location=%s\nzookeeper.ssl.truststore.type=PEM\nverify.timeout.ms=5000\n",
            dir, hosts, keystore, truststore);
    fclose(f);
    return path;
}

Test(verify_fake, config_file_reads_migration_through_a_tls_zookeeper_and_a_wrong_truststore_exits_2)
{
    km_test_pki pki;
    cr_assert_eq(km_test_pki_make(&pki), 0);
    char zerr[512], ks[PATH_MAX + 32], cmd[4 * PATH_MAX + 64];
    zk_rig z = { 0 };
    km_zks_options zo = { .tls_ca = pki.ca, .tls_cert = pki.server_cert, .tls_key = pki.server_key,
                          .tls_client_cert = pki.client_cert, .tls_client_key = pki.client_key };
    cr_assert((z.zs = km_zks_start_opts(1, &zo, zerr, sizeof zerr)), "%s", zerr);
    const char *hosts = km_zks_hosts(z.zs, 0);
    z.zc = km_zkc_open_auth(hosts, &(km_zkc_auth){ .tls_ca = pki.ca, .tls_cert = pki.client_cert,
                                                  .tls_key = pki.client_key }, 10000);
    zk_rig_up(&z, "verify-fake-tls");
    snprintf(ks, sizeof ks, "%s/client-keystore.pem", pki.dir);
    snprintf(cmd, sizeof cmd, "cat '%s' '%s' > '%s'", pki.client_key, pki.client_cert, ks);
    cr_assert_eq(system(cmd), 0);
    set_migration(z.zc, km_image_offset(z.img) - 2);

    json_t *rep = verify_config(tls_config(z.dir, "tls", hosts, ks, pki.ca), NULL, NULL, 0, NULL);
    cr_assert_eq(jget(json_object_get(rep, "dual_write"), "lag_records"), 2);
    json_decref(rep);
    json_decref(verify_config(tls_config(z.dir, "other-ca", hosts, ks, pki.other_ca), NULL, NULL, 2,
                              "certificate was refused"));
    zk_rig_down(&z);
    km_test_pki_free(&pki);
}

/* metadata.source=quorum in the daemon's file: the image fetched from controller.quorum.bootstrap.servers (here
 * nobody listens: exit 2 naming them); a controller listener the file secures needs --command-config. */
Test(verify_fake, config_file_with_a_quorum_source_asks_its_controllers)
{
    uint16_t port;
    close(listen_any(&port));
    char *dir = km_test_tmpdir("verify-fake-quorum"), servers[64], path[700];
    snprintf(servers, sizeof servers, "127.0.0.1:%u", port);
    snprintf(path, sizeof path, "%s/plain.properties", dir);
    FILE *f = fopen(path, "w");
    cr_assert(f);
    fprintf(f, "metadata.source=quorum\ncontroller.quorum.bootstrap.servers=%s\nverify.timeout.ms=300\n", servers);
    fclose(f);
    json_t *rep = verify_config(path, NULL, NULL, 2, servers);
    cr_assert_null(json_object_get(rep, "verdict"));
    json_decref(rep);

    snprintf(path, sizeof path, "%s/sasl.properties", dir);
    cr_assert((f = fopen(path, "w")));
    fprintf(f, "metadata.source=quorum\ncontroller.quorum.bootstrap.servers=%s\ncontroller.listener.names=CONTROLLER\n"
               "listener.security.protocol.map=CONTROLLER:SASL_PLAINTEXT\nsasl.mechanism.controller.protocol=PLAIN\n"
               "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username=\"u\" "
               "password=\"p\";\n", servers);
    fclose(f);
    json_decref(verify_config(path, NULL, NULL, 2, "give its client settings with --command-config"));
    km_test_rmtree(dir);
    free(dir);
}

/* --config's broker.* security keys reach the brokers as the daemon's channels would: SASL_PLAINTEXT against the
 * fake (which serves no SASL) leaves its broker unchecked with the failed login named, where a check that ignored
 * them would talk plaintext and find it consistent; --broker-config overrides them (here: plaintext again). */
Test(verify_fake, config_file_broker_keys_secure_the_check_and_broker_config_overrides_them)
{
    uint16_t port;
    int lfd = listen_any(&port);
    char *dir = km_test_tmpdir("verify-fake-broker-keys"), sasl[700], plain[700];
    km_image *img = km_image_new();
    km_gen_opts o = { .brokers = 1, .topics = 1, .partitions = 2, .seed = 5, .broker_host = "127.0.0.1",
                      .broker_ports = &port };
    km_err err;
    cr_assert(km_gen_write(dir, &o, img, &err) > 0, "%s", err.msg);
    pid_t server = serve_image(lfd, img, port, VF_EXACT);
    snprintf(sasl, sizeof sasl, "%s/sasl.properties", dir);
    FILE *f = fopen(sasl, "w");
    cr_assert(f);
    fprintf(f, "metadata.source=dir\nmetadata.dir=%s\nverify.timeout.ms=5000\nbroker.listener=PLAINTEXT\n"
               "broker.security.protocol=SASL_PLAINTEXT\nbroker.sasl.mechanism=PLAIN\n"
               "broker.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
               "username=\"kmverify\" password=\"secret\";\n", dir);
    fclose(f);
    snprintf(plain, sizeof plain, "%s/plain.properties", dir);
    cr_assert((f = fopen(plain, "w")));
    fprintf(f, "broker.listener=PLAINTEXT\n");
    fclose(f);

    json_decref(verify_config(sasl, NULL, NULL, 2, "SASL/PLAIN login as 'kmverify' failed"));
    json_t *rep = verify_config(sasl, "--broker-config", plain, 0, NULL);
    cr_assert_str_eq(json_string_value(json_object_get(rep, "verdict")), "consistent", "%s", json_dumps(rep, 0));
    json_decref(rep);

    kill(server, SIGKILL);
    waitpid(server, NULL, 0);
    close(lfd);
    km_image_free(img);
    km_test_rmtree(dir);
    free(dir);
}

/* ---- a stale leader's exposure in bytes: its log past the truncation point, read with Fetch ---- */

/* Two brokers from a generated image, each on a port of its own served by a child playing it as st says; the
 * report of km_verify_run with max_exposure_bytes cap. */
static json_t *verify_stale(vf_stale st, int64_t cap, char **text)
{
    uint16_t ports[2];
    int lfd[2] = { listen_any(&ports[0]), listen_any(&ports[1]) };
    char *dir = km_test_tmpdir("verify-fake-bytes");
    km_image *img = km_image_new();
    km_gen_opts o = { .brokers = 2, .topics = 1, .partitions = 2, .zk_migration = true, .seed = 5,
                      .broker_host = "127.0.0.1", .broker_ports = ports };
    km_err err;
    cr_assert(km_gen_write(dir, &o, img, &err) > 0, "%s", err.msg);
    km_partition p;
    cr_assert(km_topic_partition(km_image_topic_by_name(img, "topic-0"), 0, &p) && (p.leader == 1 || p.leader == 2));
    st.stale = p.leader == 1 ? 2 : 1;
    pid_t kids[2];
    for (int i = 0; i < 2; i++)
        kids[i] = vf_serve_stale(lfd[i], img, ports[i], st, i + 1);
    km_verify_opts vo = { .timeout_s = 5, .max_exposure_bytes = cap, .after_partition = -1 };
    json_t *rep = NULL;
    int rc = km_verify_run(img, &vo, &rep, &err);
    for (int i = 0; i < 2; i++) {
        kill(kids[i], SIGKILL);
        waitpid(kids[i], NULL, 0);
        close(lfd[i]);
    }
    cr_assert(rep, "no report: %s", err.msg);
    char *dump = json_dumps(rep, JSON_COMPACT);
    cr_assert_eq(rc, KM_VERIFY_INCONSISTENT, "exit %d: %s", rc, dump);
    free(dump);
    size_t len;
    FILE *f = open_memstream(text, &len);
    km_verify_print(f, rep);
    fclose(f);
    km_image_free(img);
    km_test_rmtree(dir);
    free(dir);
    return rep;
}

/* The stale_leader finding of the report (owned by it). */
static json_t *stale_finding(json_t *rep)
{
    size_t i;
    json_t *f;
    json_array_foreach(json_object_get(rep, "findings"), i, f)
        if (!strcmp(json_string_value(json_object_get(f, "class")), "stale_leader"))
            return f;
    char *dump = json_dumps(rep, JSON_COMPACT);
    cr_assert_fail("no stale_leader finding: %s", dump);
    return NULL;
}

/* The stale leader holds batches [0-2] [3-5] [6] [7-9] [10-12]; the image's leader ends its epoch at 4 (inside
 * [3-5], which truncation removes whole), the stale leader's high watermark is 10 and its log ends at 13.  The
 * bytes exposed are exactly [3-5] + [6] + [7-9] + [10-12], to the log end (Fetch with replica id -3, over several
 * answers, each cut after two batches); offsets 10-12 are past the high watermark.  With a cap of one batch: "at
 * least" the first.  A broker that serves no further than its high watermark: [3-5] + [6] + [7-9] read as a
 * consumer, the rest said unknown. */
Test(verify_fake, a_stale_leaders_exposed_bytes_are_its_batches_past_the_truncation_point)
{
    km_buf log;
    km_buf_init(&log);
    size_t sz[5];
    int64_t bases[5] = { 0, 3, 6, 7, 10 };
    int counts[5] = { 3, 3, 1, 3, 3 };
    for (int i = 0; i < 5; i++)
        sz[i] = vf_add_batch(&log, bases[i], counts[i]);
    vf_stale st = { .high_watermark = 10, .truncation = 4, .log = log.data, .log_len = log.len, .max_batches = 2 };
    char *text = NULL;
    json_t *rep = verify_stale(st, 0, &text), *f = stale_finding(rep);
    char *dump = json_dumps(f, JSON_COMPACT);
    cr_assert(jget(f, "truncation_offset") == 4 && jget(f, "stale_offset") == 10 && jget(f, "exposed_offsets") == 6,
              "%s", dump);
    size_t all = sz[1] + sz[2] + sz[3] + sz[4];
    cr_assert(json_is_integer(json_object_get(f, "exposed_bytes")) && jget(f, "exposed_bytes") == (int64_t)all &&
                  json_is_false(json_object_get(f, "exposed_bytes_capped")) && jget(f, "exposed_bytes_to") == 13 &&
                  !json_object_get(f, "exposed_bytes_past_high_watermark_unknown"),
              "want %zu exposed bytes to offset 13: %s", all, dump);
    cr_assert(jget(f, "stale_log_end") == 13 && jget(f, "offsets_past_high_watermark") == 3, "%s", dump);
    cr_assert(jget(f, "first_seen") > 1700000000 && jget(f, "first_seen") == jget(f, "last_seen"), "%s", dump);
    char want[200];
    snprintf(want, sizeof want, ", %zu bytes exposed up to offset 13, 3 more offsets past its high watermark (log "
             "end 13", all);
    cr_assert(strstr(text, want), "the text report lacks '%s':\n%s", want, text);
    free(dump);
    free(text);
    json_decref(rep);

    /* a cap of the first batch past the truncation point: the check stops there and says "at least" */
    rep = verify_stale(st, (int64_t)sz[1], &text);
    f = stale_finding(rep);
    dump = json_dumps(f, JSON_COMPACT);
    cr_assert(jget(f, "exposed_bytes") == (int64_t)sz[1] && json_is_true(json_object_get(f, "exposed_bytes_capped")),
              "capped at %zu: %s", sz[1], dump);
    snprintf(want, sizeof want, ", at least %zu bytes exposed", sz[1]);
    cr_assert(strstr(text, want), "the text report lacks '%s':\n%s", want, text);
    free(dump);
    free(text);
    json_decref(rep);

    /* a broker that refuses the read to the log end: the bytes below the high watermark, the rest unknown */
    st.consumer_fetch_only = true;
    rep = verify_stale(st, 0, &text);
    f = stale_finding(rep);
    dump = json_dumps(f, JSON_COMPACT);
    const char *why = json_string_value(json_object_get(f, "exposed_bytes_past_high_watermark_unknown"));
    cr_assert(jget(f, "exposed_bytes") == (int64_t)(sz[1] + sz[2] + sz[3]) && jget(f, "exposed_bytes_to") == 10 &&
                  why && strstr(why, "error -1"), "%s", dump);
    snprintf(want, sizeof want, ", %zu bytes exposed up to offset 10 (past the high watermark unknown: ",
             sz[1] + sz[2] + sz[3]);
    cr_assert(strstr(text, want), "the text report lacks '%s':\n%s", want, text);
    free(dump);
    free(text);
    json_decref(rep);
    km_buf_free(&log);
}

/* A Fetch answer whose records are no record batch: the bytes are unknown, saying why and where; the finding and
 * its truncation point stand. */
Test(verify_fake, a_malformed_fetch_answer_leaves_the_bytes_unknown_naming_it)
{
    km_buf log;
    km_buf_init(&log);
    vf_add_batch(&log, 0, 3);
    vf_add_batch(&log, 3, 3);
    vf_stale st = { .high_watermark = 6, .truncation = 2, .log = log.data, .log_len = log.len, .max_batches = 2,
                    .malformed_fetch = true };
    char *text = NULL;
    json_t *rep = verify_stale(st, 0, &text), *f = stale_finding(rep);
    char *dump = json_dumps(f, JSON_COMPACT);
    const char *why = json_string_value(json_object_get(f, "exposed_bytes_unknown"));
    cr_assert(why && !json_object_get(f, "exposed_bytes") && jget(f, "truncation_offset") == 2, "%s", dump);
    cr_assert(strstr(why, "record batch at byte 0 of the Fetch answer") && strstr(why, "magic"), "%s", why);
    cr_assert(strstr(text, "bytes exposed unknown: "), "%s", text);
    free(dump);
    free(text);
    json_decref(rep);
    km_buf_free(&log);
}
