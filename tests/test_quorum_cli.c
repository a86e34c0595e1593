/* test_quorum_cli.c - `kmproxy metadata quorum` and `kmproxy metadata dump --bootstrap-server`
 * against raft simulators running on a thread of this process. */
#include "test_quorum_util.h"
#include "km_testsupport.h"
#include "test_tls_certs.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct sim_thread {
    struct ev_loop *loop;
    km_rsim *sims[3];
    int n;
    ev_async stop;
    pthread_t thread;
    bool running;
    char servers[256];
} sim_thread;

static void on_stop(struct ev_loop *loop, ev_async *w, int revents)
{
    (void)w;
    (void)revents;
    ev_break(loop, EVBREAK_ALL);
}

static void *run(void *arg)
{
    sim_thread *t = arg;
    ev_run(t->loop, 0);
    return NULL;
}

/* n voters; the caller fills their logs before sim_start (nothing else touches them after). */
static void sim_init_with(sim_thread *t, int n, const km_rsim_config *base)
{
    memset(t, 0, sizeof *t);
    t->loop = ev_loop_new(EVFLAG_AUTO);
    t->n = n;
    tq_make_sims(t->loop, n, base, t->sims, t->servers, sizeof t->servers);
}

static void sim_init(sim_thread *t, int n) { sim_init_with(t, n, NULL); }

static void sim_start(sim_thread *t)
{
    ev_async_init(&t->stop, on_stop);
    ev_async_start(t->loop, &t->stop);
    cr_assert_eq(pthread_create(&t->thread, NULL, run, t), 0);
    t->running = true;
}

/* The simulators' thread ends; they stay for km_rsim_get_stats until sim_stop. */
static void sim_join(sim_thread *t)
{
    ev_async_send(t->loop, &t->stop);
    pthread_join(t->thread, NULL);
    t->running = false;
}

static void sim_stop(sim_thread *t)
{
    if (t->running)
        sim_join(t);
    for (int i = 0; i < t->n; i++)
        km_rsim_free(t->sims[i]);
    ev_loop_destroy(t->loop);
}

static int run_kmproxy(char **out, char **err_out, const char *a1, const char *a2, const char *a3, const char *a4)
{
    char *argv[] = { (char *)km_test_binary(), "metadata", (char *)a1, (char *)a2, (char *)a3, (char *)a4, NULL };
    size_t len;
    return km_test_run(argv, NULL, 0, out, &len, err_out);
}

Test(quorum_cli, metadata_quorum_prints_the_leaders_status)
{
    sim_thread t;
    sim_init(&t, 3);
    km_buf log;
    km_buf_init(&log);
    for (int b = 0; b < 4; b++)
        tq_config_batch(&log, b * 5, 5, 5, "q");
    km_err err;
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(km_rsim_append(t.sims[i], log.data, log.len, &err), 0, "%s", err.msg);
        km_rsim_set_leader(t.sims[i], 2, 5);
    }
    km_rsim_set_high_watermark(t.sims[1], 15);
    sim_start(&t);
    char *out = NULL, *errs = NULL;
    int rc = run_kmproxy(&out, &errs, "quorum", "--bootstrap-server", t.servers, NULL);
    sim_stop(&t);
    cr_assert_eq(rc, 0, "%s", errs);
    cr_assert(strstr(out, "LeaderId:               2\n"), "%s", out);
    cr_assert(strstr(out, "LeaderEpoch:            5\n"), "%s", out);
    cr_assert(strstr(out, "HighWatermark:          15\n"), "%s", out);
    cr_assert(strstr(out, "CurrentVoters:          [1,2,3]\n"), "%s", out);
    free(out);
    free(errs);
    km_buf_free(&log);
}

/* Issue 17 item 5: only a non-leader is named.  Kafka 3.9's non-leader answers DescribeQuorum with
 * NOT_LEADER_OR_FOLLOWER naming no leader; the CLI learns the leader from a Fetch (FENCED_LEADER_EPOCH
 * with CurrentLeader and the v17 endpoint) and asks it. */
Test(quorum_cli, metadata_quorum_finds_the_leader_through_a_non_leader)
{
    sim_thread t;
    sim_init(&t, 3);
    km_buf log;
    km_buf_init(&log);
    tq_config_batch(&log, 0, 5, 5, "q");
    km_err err;
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(km_rsim_append(t.sims[i], log.data, log.len, &err), 0, "%s", err.msg);
        km_rsim_set_leader(t.sims[i], 2, 5);
    }
    char only[64];
    snprintf(only, sizeof only, "127.0.0.1:%u", km_rsim_port(t.sims[2]));
    sim_start(&t);
    char *out = NULL, *errs = NULL;
    int rc = run_kmproxy(&out, &errs, "quorum", "--bootstrap-server", only, NULL);
    sim_stop(&t);
    cr_assert_eq(rc, 0, "%s", errs);
    cr_assert(strstr(out, "LeaderId:               2\n"), "%s", out);
    cr_assert(strstr(out, "CurrentVoters:          [1,2,3]\n"), "%s", out);
    free(out);
    free(errs);
    km_buf_free(&log);
}

/* Issue 17 item 4: a controller whose authorizer refuses says CLUSTER_AUTHORIZATION_FAILED; the CLI
 * names the missing ACL and stops at once (Kafka's raft client treats it as fatal), for
 * DescribeQuorum (DESCRIBE) and for the dump's Fetch (CLUSTER_ACTION). */
Test(quorum_cli, not_authorized_says_which_acl_and_stops)
{
    sim_thread t;
    sim_init(&t, 1);
    km_buf log;
    km_buf_init(&log);
    tq_config_batch(&log, 0, 1, 5, "q");
    km_err err;
    cr_assert_eq(km_rsim_append(t.sims[0], log.data, log.len, &err), 0, "%s", err.msg);
    km_rsim_set_leader(t.sims[0], 1, 1);
    km_rsim_set_denied(t.sims[0], true, true);
    sim_start(&t);
    char *out = NULL, *errs = NULL;
    int rc = run_kmproxy(&out, &errs, "quorum", "--bootstrap-server", t.servers, NULL);
    cr_assert(rc == 1 && strstr(errs, "CLUSTER_AUTHORIZATION_FAILED") && strstr(errs, "ALLOW DESCRIBE") &&
              !strstr(errs, "not the leader"), "rc %d: %s", rc, errs);
    free(out);
    free(errs);
    rc = run_kmproxy(&out, &errs, "dump", "--bootstrap-server", t.servers, "--timeout=60");
    sim_stop(&t);
    cr_assert(rc == 1 && strstr(errs, "CLUSTER_AUTHORIZATION_FAILED") && strstr(errs, "ALLOW CLUSTER_ACTION") &&
              !*out, "rc %d: %s", rc, errs);
    free(out);
    free(errs);
    km_buf_free(&log);
}

/* The refusal is one every controller gives: `metadata quorum` asks no other (quorum_oneshot.c's give-up). */
Test(quorum_cli, not_authorized_asks_no_other_controller)
{
    sim_thread t;
    sim_init(&t, 2);
    for (int i = 0; i < 2; i++) {
        km_rsim_set_leader(t.sims[i], 1, 1);
        km_rsim_set_denied(t.sims[i], false, true);
    }
    sim_start(&t);
    char *out = NULL, *errs = NULL;
    int rc = run_kmproxy(&out, &errs, "quorum", "--bootstrap-server", t.servers, NULL);
    sim_join(&t);
    km_rsim_stats first, second;
    km_rsim_get_stats(t.sims[0], &first);
    km_rsim_get_stats(t.sims[1], &second);
    sim_stop(&t);
    cr_assert(rc == 1 && strstr(errs, "ALLOW DESCRIBE"), "rc %d: %s", rc, errs);
    cr_assert(first.denied == 1 && second.api_versions == 0, "denied by the first %llu; the second asked %llu times",
              (unsigned long long)first.denied, (unsigned long long)second.api_versions);
    free(out);
    free(errs);
}

Test(quorum_cli, metadata_dump_over_the_network_prints_the_committed_log_only)
{
    char *dir = km_test_tmpdir("tqcli");
    km_gen_opts g = { .brokers = 3, .topics = 5, .partitions = 4, .leader_changes = 100, .seed = 3,
                      .records_per_batch = 20 };
    km_err err;
    cr_assert(km_gen_write(dir, &g, NULL, &err) > 0, "%s", err.msg);
    sim_thread t;
    sim_init(&t, 1);
    cr_assert_eq(km_rsim_append_path(t.sims[0], dir, &err), 0, "%s", err.msg);
    km_rsim_set_leader(t.sims[0], 1, km_rsim_last_epoch(t.sims[0]));
    int64_t end = km_rsim_log_end(t.sims[0]);
    sim_start(&t);
    char *net = NULL, *file = NULL, *e1 = NULL, *e2 = NULL;
    int rc = run_kmproxy(&net, &e1, "dump", "--bootstrap-server", t.servers, NULL);
    cr_assert_eq(rc, 0, "%s", e1);
    char *argv[] = { (char *)km_test_binary(), "metadata", "dump", dir, NULL };
    size_t len;
    cr_assert_eq(km_test_run(argv, NULL, 0, &file, &len, &e2), 0, "%s", e2);
    cr_assert_str_eq(net, file, "the network dump differs from the file dump");
    sim_stop(&t);
    cr_assert_gt(end, 100);
    free(net);
    free(file);
    free(e1);
    free(e2);
    km_test_rmtree(dir);
    free(dir);
}

Test(quorum_cli, metadata_dump_stops_at_the_high_watermark)
{
    sim_thread t;
    sim_init(&t, 1);
    km_buf log;
    km_buf_init(&log);
    for (int b = 0; b < 10; b++)
        tq_config_batch(&log, b * 5, 1, 5, "hw");
    km_err err;
    cr_assert_eq(km_rsim_append(t.sims[0], log.data, log.len, &err), 0, "%s", err.msg);
    km_rsim_set_leader(t.sims[0], 1, 1);
    km_rsim_set_high_watermark(t.sims[0], 23); /* batches 0..19 are committed, 20..24 is not whole */
    sim_start(&t);
    char *out = NULL, *errs = NULL;
    cr_assert_eq(run_kmproxy(&out, &errs, "dump", "--bootstrap-server", t.servers, NULL), 0, "%s", errs);
    sim_stop(&t);
    int lines = 0;
    for (char *p = out; (p = strchr(p, '\n')); p++)
        lines++;
    cr_assert_eq(lines, 20, "%s", out);
    cr_assert(strstr(out, "\"offset\":19,") && !strstr(out, "\"offset\":20,"), "%s", out);
    free(out);
    free(errs);
    km_buf_free(&log);
}

Test(quorum_cli, bad_usage_exits_2)
{
    char *out = NULL, *errs = NULL;
    cr_assert_eq(run_kmproxy(&out, &errs, "quorum", NULL, NULL, NULL), 2);
    cr_assert(strstr(errs, "--bootstrap-server"), "%s", errs);
    free(out);
    free(errs);
    cr_assert_eq(run_kmproxy(&out, &errs, "quorum", "--bootstrap-server", "nohostport", NULL), 1);
    cr_assert(strstr(errs, "nohostport"), "%s", errs);
    free(out);
    free(errs);
}

/* `make demo` runs this: the daemon as an observer of kmproxy-raftsim serving the demo's log. */
Test(quorum_cli, demo_converges_in_quorum_mode, .timeout = 240)
{
    char *argv[] = { (char *)km_test_binary(), "demo", "--quorum", "--brokers", "3", "--topics", "6", "--partitions",
                     "4", "--leader-changes", "8", NULL };
    char *out, *err;
    size_t n;
    int rc = km_test_run(argv, NULL, 0, &out, &n, &err);
    cr_assert_eq(rc, 0, "demo failed:\n%s\n%s", out, err);
    cr_assert(strstr(out, "an observer of the KRaft quorum"), "%s", out);
    const char *p = out;
    int diffs = 0;
    while ((p = strstr(p, "zk diff: 0 missing in ZooKeeper, 0 different, 0 only in ZooKeeper"))) {
        diffs++;
        p++;
    }
    cr_assert_eq(diffs, 2, "%s", out);
    cr_assert(strstr(out, "converged on the KRaft image, twice"), "%s", out);
    free(out);
    free(err);
}

/* argv (naming conf as --command-config) exits 2 with `want` once conf holds `content`. */
static void assert_command_config_refused(char **argv, const char *conf, const char *content, const char *want)
{
    FILE *f = fopen(conf, "w");
    cr_assert(f);
    fputs(content, f);
    fclose(f);
    char *out = NULL, *errs = NULL;
    size_t n;
    cr_assert_eq(km_test_run(argv, NULL, 0, &out, &n, &errs), 2, "%s", content);
    cr_assert(strstr(errs, want), "%s", errs);
    free(out);
    free(errs);
}

/* An SSL controller listener: --command-config with security.protocol=SSL and a PEM truststore. */
Test(quorum_cli, command_config_reaches_an_ssl_listener)
{
    km_test_pki pki;
    cr_assert(!km_test_pki_make(&pki));
    km_err err;
    km_tls_config sc = { .cert_file = pki.server_cert, .key_file = pki.server_key };
    km_tls_ctx *server = km_tls_server_ctx_new(&sc, &err);
    cr_assert(server, "%s", err.msg);
    km_rsim_config c;
    km_rsim_config_init(&c);
    c.tls = server;
    sim_thread t;
    sim_init_with(&t, 1, &c);
    km_buf log;
    km_buf_init(&log);
    for (int b = 0; b < 3; b++)
        tq_config_batch(&log, b * 2, 1, 2, "ssl");
    cr_assert_eq(km_rsim_append(t.sims[0], log.data, log.len, &err), 0, "%s", err.msg);
    km_rsim_set_leader(t.sims[0], 1, 1);
    sim_start(&t);
    char conf[1200];
    snprintf(conf, sizeof conf, "%s/client.properties", pki.dir);
    FILE *f = fopen(conf, "w");
    cr_assert(f);
    fprintf(f, "# as for kafka-metadata-quorum\nsecurity.protocol=SSL\nssl.truststore.type=PEM\n"
               "ssl.truststore.location=%s\n", pki.ca);
    fclose(f);
    char *out = NULL, *errs = NULL;
    char *q[] = { (char *)km_test_binary(), "metadata", "quorum", "--bootstrap-server", t.servers,
                  "--command-config", conf, NULL };
    size_t n;
    int rc = km_test_run(q, NULL, 0, &out, &n, &errs);
    cr_assert_eq(rc, 0, "%s", errs);
    cr_assert(strstr(out, "HighWatermark:          6\n"), "%s", out);
    free(out);
    free(errs);
    char *d[] = { (char *)km_test_binary(), "metadata", "dump", "--bootstrap-server", t.servers,
                  "--command-config", conf, NULL };
    rc = km_test_run(d, NULL, 0, &out, &n, &errs);
    cr_assert_eq(rc, 0, "%s", errs);
    cr_assert(strstr(out, "\"offset\":5,"), "%s", out);
    free(out);
    free(errs);
    char *plain[] = { (char *)km_test_binary(), "metadata", "quorum", "--bootstrap-server", t.servers,
                      "--timeout", "3", NULL };
    cr_assert_eq(km_test_run(plain, NULL, 0, &out, &n, &errs), 1, "PLAINTEXT reached an SSL listener");
    free(out);
    free(errs);
    assert_command_config_refused(q, conf, "security.protocol=SASL_SSL\n",
                                  "needs sasl.mechanism: Kafka's default, GSSAPI, is not supported");
    assert_command_config_refused(q, conf, "security.protocol=TRACE\n", "PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL");
    sim_stop(&t);
    km_buf_free(&log);
    km_tls_ctx_free(server);
    km_test_pki_free(&pki);
}

/* A SASL_PLAINTEXT controller listener: --command-config with Kafka's client keys
 * (security.protocol, sasl.mechanism, sasl.jaas.config); a wrong password exits 1 naming the
 * server's reason. */
Test(quorum_cli, command_config_logs_in_to_a_sasl_listener)
{
    km_rsim_config c;
    km_rsim_config_init(&c);
    c.sasl_mechanisms = 1u << KM_SASL_SCRAM_SHA_256;
    c.sasl_users = "tool:tool-secret";
    sim_thread t;
    sim_init_with(&t, 1, &c);
    km_buf log;
    km_err err;
    km_buf_init(&log);
    for (int b = 0; b < 3; b++)
        tq_config_batch(&log, b * 2, 1, 2, "sasl");
    cr_assert_eq(km_rsim_append(t.sims[0], log.data, log.len, &err), 0, "%s", err.msg);
    km_rsim_set_leader(t.sims[0], 1, 1);
    sim_start(&t);
    char *dir = km_test_tmpdir("qclisasl"), conf[1200];
    snprintf(conf, sizeof conf, "%s/client.properties", dir);
    const char *jaas = "org.apache.kafka.common.security.scram.ScramLoginModule required username=\"tool\" password=";
    FILE *f = fopen(conf, "w");
    cr_assert(f);
    fprintf(f, "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\nsasl.jaas.config=%s\"tool-secret\";\n",
            jaas);
    fclose(f);
    char *out = NULL, *errs = NULL;
    size_t n;
    char *q[] = { (char *)km_test_binary(), "metadata", "quorum", "--bootstrap-server", t.servers,
                  "--command-config", conf, "--timeout", "10", NULL };
    cr_assert_eq(km_test_run(q, NULL, 0, &out, &n, &errs), 0, "%s", errs);
    cr_assert(strstr(out, "HighWatermark:          6\n"), "%s", out);
    free(out);
    free(errs);
    char *d[] = { (char *)km_test_binary(), "metadata", "dump", "--bootstrap-server", t.servers,
                  "--command-config", conf, "--timeout", "10", NULL };
    cr_assert_eq(km_test_run(d, NULL, 0, &out, &n, &errs), 0, "%s", errs);
    cr_assert(strstr(out, "\"offset\":5,"), "%s", out);
    free(out);
    free(errs);
    f = fopen(conf, "w");
    fprintf(f, "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\nsasl.jaas.config=%s\"wrong\";\n", jaas);
    fclose(f);
    char *q3[] = { (char *)km_test_binary(), "metadata", "quorum", "--bootstrap-server", t.servers,
                   "--command-config", conf, "--timeout", "3", NULL };
    cr_assert_eq(km_test_run(q3, NULL, 0, &out, &n, &errs), 1, "%s", out);
    cr_assert(strstr(errs, "SASL/SCRAM-SHA-256 authentication as 'tool' failed: SASL_AUTHENTICATION_FAILED (58)"), "%s",
              errs);
    free(out);
    free(errs);
    sim_stop(&t);
    km_buf_free(&log);
    km_test_rmtree(dir);
    free(dir);
}
