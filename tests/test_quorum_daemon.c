/* test_quorum_daemon.c - the daemon with metadata.source=quorum against a real ZooKeeper and
 * raft simulators: ZooKeeper holds the committed image only, before and after a failover that
 * truncates an uncommitted suffix (checked with `kmproxy zk diff`), and a contradiction of
 * applied records stops the daemon naming offset and epoch. */
#include "test_quorum_util.h"
#include "km_daemon.h"
#include "km_zkbridge.h"
#include "km_testsupport.h"
#include "test_tls_certs.h"
#include "zkserver.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct drig {
    km_zks *zks;
    char hosts[128], *tmp;
    struct ev_loop *loop;
    km_rsim *sims[2];
    km_daemon *d;
    uint8_t *gen;               /* the generated log's bytes */
    size_t gen_len;
} drig;

/* `dir`/00000000000000000000.log holding bytes a then b. */
static void write_log(const char *dir, const uint8_t *a, size_t alen, const uint8_t *b, size_t blen)
{
    char path[600];
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/00000000000000000000.log", dir);
    FILE *f = fopen(path, "wb");
    cr_assert(f);
    cr_assert_eq(fwrite(a, 1, alen, f), alen);
    if (blen)
        cr_assert_eq(fwrite(b, 1, blen, f), blen);
    fclose(f);
}

static void drig_start_with(drig *r, const km_rsim_config *base)
{
    char err[512];
    r->zks = km_zks_start(1, NULL, 0, err, sizeof err);
    cr_assert(r->zks, "ZooKeeper: %s", err);
    snprintf(r->hosts, sizeof r->hosts, "%s/kafka", km_zks_hosts(r->zks, -1));
    r->tmp = km_test_tmpdir("qdaemon");
    km_gen_opts g = {.brokers = 3, .topics = 4, .partitions = 3, .zk_migration = true, .seed = 11};
    r->gen = tq_gen_log(r->tmp, &g, &r->gen_len);
    km_err e = {{0}};
    r->loop = ev_loop_new(0);
    tq_make_sims(r->loop, 2, base, r->sims, NULL, 0);
    for (int i = 0; i < 2; i++)
        cr_assert_eq(km_rsim_append(r->sims[i], r->gen, r->gen_len, &e), 0, "%s", e.msg);
}

static void drig_start(drig *r) { drig_start_with(r, NULL); }

/* With voters the quorum is named by controller.quorum.voters (id@host:port), else by
 * controller.quorum.bootstrap.servers. */
static void drig_daemon_with(drig *r, bool voters, const char *const *extra)
{
    km_err e = {{0}};
    char servers[128];
    if (voters)
        snprintf(servers, sizeof servers, "1@127.0.0.1:%u,2@127.0.0.1:%u", km_rsim_port(r->sims[0]),
                 km_rsim_port(r->sims[1]));
    else
        snprintf(servers, sizeof servers, "127.0.0.1:%u,127.0.0.1:%u", km_rsim_port(r->sims[0]),
                 km_rsim_port(r->sims[1]));
    km_config cfg;
    km_config_defaults(&cfg);
    cr_assert_eq(km_config_set(&cfg, "metadata.source", "quorum", "test", &e), 0, "%s", e.msg);
    const char *key = voters ? "controller.quorum.voters" : "controller.quorum.bootstrap.servers";
    cr_assert_eq(km_config_set(&cfg, key, servers, "test", &e), 0, "%s", e.msg);
    cr_assert_eq(km_config_set(&cfg, "zookeeper.connect", r->hosts, "test", &e), 0);
    cr_assert_eq(km_config_set(&cfg, "brokers.enabled", "false", "test", &e), 0);
    cr_assert_eq(km_config_set(&cfg, "metrics.listen", "127.0.0.1:0", "test", &e), 0);
    for (int i = 0; extra && extra[i]; i += 2)
        cr_assert_eq(km_config_set(&cfg, extra[i], extra[i + 1], "test", &e), 0, "%s", e.msg);
    r->d = km_daemon_new(r->loop, &cfg, &e);
    km_config_free(&cfg);
    cr_assert(r->d, "%s", e.msg);
    km_daemon_start(r->d);
}

static void drig_daemon(drig *r, bool voters) { drig_daemon_with(r, voters, NULL); }

static void drig_stop(drig *r)
{
    km_daemon_free(r->d);
    for (int i = 0; i < 2; i++)
        km_rsim_free(r->sims[i]);
    ev_loop_destroy(r->loop);
    km_zks_stop(r->zks);
    km_test_rmtree(r->tmp);
    free(r->tmp);
    free(r->gen);
}

static int64_t g_offset;
static bool mirrored_at(const km_daemon_status *st)
{
    return st->zk_idle && st->zk_confirmed_offset == st->image_offset && st->image_offset == g_offset;
}
static bool stopped(const km_daemon_status *st) { return st->fatal != NULL; }

typedef struct dwait { km_daemon *d; bool (*pred)(const km_daemon_status *); } dwait;

static void poll_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)revents;
    dwait *w = t->data;
    km_daemon_status st;
    km_daemon_get_status(w->d, &st);
    if (w->pred(&st) || st.fatal)
        ev_break(loop, EVBREAK_ALL);
}

static void guard_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)t;
    (void)revents;
    ev_break(loop, EVBREAK_ALL);
}

static bool run_until(drig *r, bool (*pred)(const km_daemon_status *))
{
    dwait w = { r->d, pred };
    ev_timer poll, guard;
    ev_timer_init(&poll, poll_cb, 0.02, 0.02);
    poll.data = &w;
    ev_timer_init(&guard, guard_cb, 60, 0);
    ev_timer_start(r->loop, &poll);
    ev_timer_start(r->loop, &guard);
    ev_run(r->loop, 0);
    ev_timer_stop(r->loop, &poll);
    ev_timer_stop(r->loop, &guard);
    km_daemon_status st;
    km_daemon_get_status(r->d, &st);
    return pred(&st);
}

/* `kmproxy zk diff` of ZooKeeper against the log in dir: no difference at all. */
static void assert_zk_equals(drig *r, const char *dir)
{
    char *argv[] = { (char *)km_test_binary(), "zk", "diff", "--zookeeper", r->hosts, "--metadata", (char *)dir, NULL };
    char *out = NULL, *err = NULL;
    size_t n;
    int rc = km_test_run(argv, NULL, 0, &out, &n, &err);
    cr_assert(rc == 0 && strstr(out, "zk diff: 0 missing in ZooKeeper, 0 different, 0 only in ZooKeeper"),
              "zk diff against %s (rc %d):\n%s\n%s", dir, rc, out, err);
    cr_assert(!strstr(out, "uncommitted"), "%s", out);
    free(out);
    free(err);
}

/* GET /metrics from a thread while the test's loop serves it. */
typedef struct scrape { uint16_t port; char body[65536]; atomic_bool done; } scrape;
static scrape *g_scrape;

static void *scrape_thread(void *arg)
{
    scrape *sc = arg;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(sc->port) };
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    size_t n = 0;
    if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0) {
        const char *rq = "GET /metrics HTTP/1.0\r\n\r\n";
        if (write(fd, rq, strlen(rq)) > 0)
            for (ssize_t k; n < sizeof sc->body - 1 && (k = read(fd, sc->body + n, sizeof sc->body - 1 - n)) > 0;)
                n += (size_t)k;
    }
    sc->body[n] = 0;
    close(fd);
    atomic_store(&sc->done, true);
    return NULL;
}

static bool scraped(const km_daemon_status *st)
{
    (void)st;
    return atomic_load(&g_scrape->done);
}

/* One GET /metrics of the rig's daemon into sc (its loop serves it meanwhile). */
static void scrape_metrics(drig *r, scrape *sc)
{
    memset(sc, 0, sizeof *sc);
    sc->port = km_daemon_metrics_port(r->d);
    g_scrape = sc;
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, scrape_thread, sc), 0);
    cr_assert(run_until(r, scraped));
    pthread_join(t, NULL);
}

static void assert_metric(const char *body, const char *line)
{
    cr_assert(strstr(body, line), "no '%s' in:\n%s", line, body);
}

Test(quorum_daemon, zookeeper_holds_the_committed_image_only_across_a_failover, .timeout = 240)
{
    drig r = {0};
    drig_start(&r);
    int32_t e = km_rsim_last_epoch(r.sims[0]);
    int64_t end = km_rsim_log_end(r.sims[0]);
    km_buf a, b;
    km_buf_init(&a);
    km_buf_init(&b);
    for (int i = 0; i < 4; i++)
        tq_config_batch(&a, end + i * 5, e, 5, "uncommitted");
    for (int i = 0; i < 6; i++)
        tq_config_batch(&b, end + i * 5, e + 1, 5, "committed");
    km_err err;
    cr_assert_eq(km_rsim_append(r.sims[0], a.data, a.len, &err), 0, "%s", err.msg);
    cr_assert_eq(km_rsim_append(r.sims[1], b.data, b.len, &err), 0, "%s", err.msg);
    km_rsim_set_high_watermark(r.sims[0], end); /* the suffix on node 1 never commits */
    for (int i = 0; i < 2; i++)
        km_rsim_set_leader(r.sims[i], 1, e);
    drig_daemon(&r, false);
    g_offset = end - 1;
    cr_assert(run_until(&r, mirrored_at), "never mirrored the committed prefix");
    char dir[700];
    snprintf(dir, sizeof dir, "%s/committed1", r.tmp);
    write_log(dir, r.gen, r.gen_len, NULL, 0);
    assert_zk_equals(&r, dir);
    for (int i = 0; i < 2; i++)
        km_rsim_set_leader(r.sims[i], 2, e + 1);
    g_offset = end + 29;
    cr_assert(run_until(&r, mirrored_at), "never mirrored the new leader's log");
    snprintf(dir, sizeof dir, "%s/committed2", r.tmp);
    write_log(dir, r.gen, r.gen_len, b.data, b.len);
    assert_zk_equals(&r, dir);
    /* The quorum's progress on /metrics. */
    static scrape sc;
    scrape_metrics(&r, &sc);
    char line[128];
    assert_metric(sc.body, "\nkmproxy_quorum_leader_id 2\n");
    snprintf(line, sizeof line, "\nkmproxy_quorum_leader_epoch %d\n", e + 1);
    assert_metric(sc.body, line);
    snprintf(line, sizeof line, "\nkmproxy_quorum_high_watermark %lld\n", (long long)end + 30);
    assert_metric(sc.body, line);
    snprintf(line, sizeof line, "\nkmproxy_fetched_offset %lld\n", (long long)end + 30);
    assert_metric(sc.body, line);
    snprintf(line, sizeof line, "\nkmproxy_applied_offset %lld\n", (long long)end + 29);
    assert_metric(sc.body, line);
    assert_metric(sc.body, "\nkmproxy_quorum_leader_changes_total 2\n");
    assert_metric(sc.body, "\nkmproxy_quorum_fetch_latency_seconds_count ");
    assert_metric(sc.body, "\nkmproxy_quorum_snapshot_loads_total 0\n");
    assert_metric(sc.body, "\nkmproxy_quorum_auth_failures_total 0\n");
    assert_metric(sc.body, "\nkmproxy_quorum_sasl_reauthentications_total 0\n");
    km_buf_free(&a);
    km_buf_free(&b);
    drig_stop(&r);
}

/* A rig whose simulators lead the generated log at its last epoch (*epoch) and a daemon that mirrored all of it
 * into ZooKeeper; the log's end. */
static int64_t drig_mirrored(drig *r, bool voters, int32_t *epoch)
{
    drig_start(r);
    *epoch = km_rsim_last_epoch(r->sims[0]);
    int64_t end = km_rsim_log_end(r->sims[0]);
    for (int i = 0; i < 2; i++)
        km_rsim_set_leader(r->sims[i], 1, *epoch);
    drig_daemon(r, voters);
    g_offset = end - 1;
    cr_assert(run_until(r, mirrored_at), "never mirrored the log");
    return end;
}

/* /migration's kraft_metadata_offset in ZooKeeper (-1: unreadable). */
static int64_t migration_offset(drig *r)
{
    char data[512];
    int version = -1;
    km_err e = {{0}};
    long long off = -1;
    if (km_zk_read_once(r->hosts, NULL, "/migration", 10, data, sizeof data, &version, &e) == 1) {
        const char *at = strstr(data, "\"kraft_metadata_offset\":");
        if (at)
            sscanf(at + strlen("\"kraft_metadata_offset\":"), "%lld", &off);
    }
    return off;
}

/* An idle active controller appends NoOpRecords only (metadata.max.idle.interval.ms): /migration follows the log's
 * position as Kafka's own driver records it, so `verify --zookeeper` does not take an idle cluster with kmproxy as
 * its writer for a stalled one; no znode but /migration changes. */
Test(quorum_daemon, noop_records_alone_move_migrations_offset, .timeout = 240)
{
    drig r = {0};
    int32_t e;
    int64_t end = drig_mirrored(&r, false, &e);
    cr_assert_eq(migration_offset(&r), end - 1);
    km_buf noops;
    km_buf_init(&noops);
    tq_noop_batch(&noops, end, e, 3);
    km_err err;
    for (int i = 0; i < 2; i++)
        cr_assert_eq(km_rsim_append(r.sims[i], noops.data, noops.len, &err), 0, "%s", err.msg);
    g_offset = end + 2;
    cr_assert(run_until(&r, mirrored_at), "NoOpRecords alone never moved what ZooKeeper confirms");
    cr_assert_eq(migration_offset(&r), end + 2, "/migration records %lld, the log is at %lld",
                 (long long)migration_offset(&r), (long long)end + 2);
    char dir[700];
    snprintf(dir, sizeof dir, "%s/noops", r.tmp);
    write_log(dir, r.gen, r.gen_len, noops.data, noops.len);
    assert_zk_equals(&r, dir);
    km_buf_free(&noops);
    drig_stop(&r);
}

Test(quorum_daemon, a_contradiction_of_applied_records_stops_the_daemon, .timeout = 240)
{
    drig r = {0};
    int32_t e;
    int64_t end = drig_mirrored(&r, true, &e);
    /* A "leader" whose log lost committed records and wrote others at a newer epoch. */
    km_rsim_truncate(r.sims[1], end - 10);
    km_buf b;
    km_buf_init(&b);
    int64_t from = km_rsim_log_end(r.sims[1]);
    tq_config_batch(&b, from, e + 1, 5, "rewritten");
    km_err err;
    cr_assert_eq(km_rsim_append(r.sims[1], b.data, b.len, &err), 0, "%s", err.msg);
    for (int i = 0; i < 2; i++)
        km_rsim_set_leader(r.sims[i], 2, e + 1);
    cr_assert(run_until(&r, stopped), "the daemon accepted a log contradicting applied records");
    km_daemon_status st;
    km_daemon_get_status(r.d, &st);
    char want[64];
    snprintf(want, sizeof want, "offset %lld", (long long)from);
    cr_assert(strstr(st.fatal, "metadata quorum") && strstr(st.fatal, want) && strstr(st.fatal, "epoch"), "%s",
              st.fatal);
    km_buf_free(&b);
    drig_stop(&r);
}

Test(quorum_daemon, quorum_config_errors_name_the_key)
{
    km_config cfg;
    km_err e = {{0}};
    km_config_defaults(&cfg);
    cr_assert_eq(km_config_set(&cfg, "zookeeper.connect", "127.0.0.1:1", "test", &e), 0);
    cr_assert_eq(km_config_set(&cfg, "metadata.source", "disk", "test", &e), 0);
    cr_assert_eq(km_config_validate(&cfg, &e), -1);
    cr_assert(strstr(e.msg, "metadata.source must be quorum or dir, not 'disk'"), "%s", e.msg);
    cr_assert_eq(km_config_set(&cfg, "metadata.source", "quorum", "test", &e), 0);
    cr_assert_eq(km_config_validate(&cfg, &e), -1);
    cr_assert(strstr(e.msg, "controller.quorum.bootstrap.servers"), "%s", e.msg);
    cr_assert_eq(km_config_set(&cfg, "controller.quorum.voters", "1@127.0.0.1:9093", "test", &e), 0);
    cr_assert_eq(km_config_set(&cfg, "metadata.quorum.snapshot.dir", "/nonexistent/spool", "test", &e), 0);
    struct ev_loop *l0 = ev_loop_new(0);
    cr_assert_null(km_daemon_new(l0, &cfg, &e));
    cr_assert(strstr(e.msg, "snapshot directory /nonexistent/spool"), "%s", e.msg);
    ev_loop_destroy(l0);
    km_config_free(&cfg);
    km_config_defaults(&cfg);
    cr_assert_eq(km_config_set(&cfg, "zookeeper.connect", "127.0.0.1:1", "test", &e), 0);
    cr_assert_eq(km_config_set(&cfg, "metadata.source", "quorum", "test", &e), 0);
    cr_assert_eq(km_config_set(&cfg, "controller.quorum.voters", "1@nohost", "test", &e), 0);
    struct ev_loop *loop = ev_loop_new(0);
    km_daemon *d = km_daemon_new(loop, &cfg, &e);
    cr_assert_null(d);
    cr_assert(strstr(e.msg, "nohost"), "%s", e.msg);
    ev_loop_destroy(loop);
    km_config_free(&cfg);
    km_config_defaults(&cfg);
    cr_assert_eq(km_config_set(&cfg, "controller.quorum.request.timeout.ms", "50", "test", &e), -1);
    cr_assert(strstr(e.msg, "controller.quorum.request.timeout.ms"), "%s", e.msg);
    km_config_free(&cfg);
}

/* A throwaway PKI and the controllers' TLS context from it. */
static km_tls_ctx *controller_tls(km_test_pki *pki)
{
    km_err err;
    cr_assert(!km_test_pki_make(pki));
    km_tls_config sc = { .cert_file = pki->server_cert, .key_file = pki->server_key };
    km_tls_ctx *server = km_tls_server_ctx_new(&sc, &err);
    cr_assert(server, "%s", err.msg);
    return server;
}

/* The rig's simulators (made from base), node 1 leading at the log's epoch. */
static void drig_start_led(drig *r, const km_rsim_config *base)
{
    drig_start_with(r, base);
    int32_t e = km_rsim_last_epoch(r->sims[0]);
    for (int i = 0; i < 2; i++)
        km_rsim_set_leader(r->sims[i], 1, e);
}

/* The daemon with extra keys mirrors the whole committed log: ZooKeeper equals it exactly. */
static void assert_mirrors_with(drig *r, const char *const *extra, const char *how)
{
    drig_daemon_with(r, false, extra);
    g_offset = km_rsim_log_end(r->sims[0]) - 1;
    cr_assert(run_until(r, mirrored_at), "never mirrored over %s", how);
    char dir[700];
    snprintf(dir, sizeof dir, "%s/committed", r->tmp);
    write_log(dir, r->gen, r->gen_len, NULL, 0);
    assert_zk_equals(r, dir);
}

/* An SSL controller listener named the Kafka way: controller.listener.names,
 * listener.security.protocol.map and a PEM truststore. */
Test(quorum_daemon, follows_an_ssl_controller_listener, .timeout = 240)
{
    km_test_pki pki;
    km_rsim_config c;
    km_rsim_config_init(&c);
    c.tls = controller_tls(&pki);
    drig r = {0};
    drig_start_led(&r, &c);
    const char *const extra[] = { "controller.listener.names", "CONTROLLER", "listener.security.protocol.map",
                                  "CONTROLLER:SSL,PLAINTEXT:PLAINTEXT", "ssl.truststore.type", "PEM",
                                  "ssl.truststore.location", pki.ca, NULL };
    assert_mirrors_with(&r, extra, "SSL");
    drig_stop(&r);
    km_tls_ctx_free(c.tls);
    km_test_pki_free(&pki);
}

static void assert_refused(const char *const *kv, const char *want)
{
    km_config cfg;
    km_err e = {{0}};
    km_config_defaults(&cfg);
    cr_assert_eq(km_config_set(&cfg, "zookeeper.connect", "127.0.0.1:1", "test", &e), 0);
    cr_assert_eq(km_config_set(&cfg, "metadata.source", "quorum", "test", &e), 0);
    cr_assert_eq(km_config_set(&cfg, "controller.quorum.bootstrap.servers", "127.0.0.1:9093", "test", &e), 0);
    for (int i = 0; kv[i]; i += 2)
        cr_assert_eq(km_config_set(&cfg, kv[i], kv[i + 1], "test", &e), 0, "%s", e.msg);
    cr_assert_eq(km_config_validate(&cfg, &e), -1, "accepted: %s", want);
    cr_assert(strstr(e.msg, want), "%s", e.msg);
    km_config_free(&cfg);
}

Test(quorum_daemon, controller_listener_security_errors_name_the_key)
{
    assert_refused((const char *const[]){ "controller.listener.names", "CONTROLLER", "listener.security.protocol.map",
                                          "CONTROLLER:TRACE", NULL }, "uses TRACE");
    assert_refused((const char *const[]){ "controller.listener.names", "CONTROLLER", "listener.security.protocol.map",
                                          "CONTROLLER:SSL", "ssl.truststore.location", "/nonexistent/ca.pem", NULL },
                   "ssl.truststore.location=/nonexistent/ca.pem: cannot read it");
    assert_refused((const char *const[]){ "ssl.truststore.type", "JKS", NULL }, "ssl.truststore.type=JKS");
    assert_refused((const char *const[]){ "ssl.truststore.location", "/etc/hostname", NULL }, "is PLAINTEXT");
    assert_refused((const char *const[]){ "listener.security.protocol.map", "CONTROLLER", NULL },
                   "is not NAME:PROTOCOL");
}

/* ---- SASL on the controller listener ------------------------------------------------------- */

#define PLAIN_JAAS(user, pass) \
    "org.apache.kafka.common.security.plain.PlainLoginModule required username=\"" user "\" password=\"" pass "\";"
#define SCRAM_JAAS(user, pass) \
    "org.apache.kafka.common.security.scram.ScramLoginModule required username=\"" user "\" password=\"" pass "\";"

/* Both simulators logged kmproxy in, and nothing came before a login. */
static void assert_logged_in(drig *r)
{
    uint64_t ok = 0;
    for (int i = 0; i < 2; i++) {
        km_rsim_stats st;
        km_rsim_get_stats(r->sims[i], &st);
        cr_assert_eq(st.unauthenticated, 0, "node %d saw %llu requests before a SASL login: %s", i + 1,
                     (unsigned long long)st.unauthenticated, st.last_rejection);
        cr_assert_eq(st.rejected, 0, "node %d: %s", i + 1, st.last_rejection);
        cr_assert_eq(st.sasl_failed, 0);
        ok += st.sasl_ok;
    }
    cr_assert_geq(ok, 1, "no SASL login at all");
}

static void sasl_sims(km_rsim_config *c, km_sasl_mech m, km_tls_ctx *tls)
{
    km_rsim_config_init(c);
    c->sasl_mechanisms = 1u << m;
    c->sasl_users = "kmproxy:kmproxy-secret,admin:admin-secret";
    c->tls = tls;
}

/* SASL_PLAINTEXT/PLAIN, the login from the listener-prefixed key as Kafka's
 * JaasContext.loadServerContext reads it for the controller listener. */
Test(quorum_daemon, follows_a_sasl_plaintext_controller_listener, .timeout = 240)
{
    km_rsim_config c;
    sasl_sims(&c, KM_SASL_PLAIN, NULL);
    drig r = {0};
    drig_start_led(&r, &c);
    const char *const extra[] = { "controller.listener.names", "CONTROLLER", "listener.security.protocol.map",
                                  "CONTROLLER:SASL_PLAINTEXT,PLAINTEXT:PLAINTEXT", "sasl.mechanism.controller.protocol",
                                  "PLAIN", "listener.name.controller.plain.sasl.jaas.config",
                                  PLAIN_JAAS("kmproxy", "kmproxy-secret"), NULL };
    assert_mirrors_with(&r, extra, "SASL_PLAINTEXT");
    assert_logged_in(&r);
    drig_stop(&r);
}

/* SASL_SSL/SCRAM-SHA-512: TLS first (the same ssl.* keys as SSL), then the SCRAM exchange;
 * the login from a bare sasl.jaas.config. */
Test(quorum_daemon, follows_a_sasl_ssl_scram_controller_listener, .timeout = 240)
{
    km_test_pki pki;
    km_rsim_config c;
    sasl_sims(&c, KM_SASL_SCRAM_SHA_512, controller_tls(&pki));
    drig r = {0};
    drig_start_led(&r, &c);
    const char *const extra[] = { "controller.listener.names", "CONTROLLER", "listener.security.protocol.map",
                                  "CONTROLLER:SASL_SSL", "ssl.truststore.type", "PEM", "ssl.truststore.location",
                                  pki.ca, "sasl.mechanism.controller.protocol", "SCRAM-SHA-512", "sasl.jaas.config",
                                  SCRAM_JAAS("admin", "admin-secret"), NULL };
    assert_mirrors_with(&r, extra, "SASL_SSL");
    assert_logged_in(&r);
    drig_stop(&r);
    km_tls_ctx_free(c.tls);
    km_test_pki_free(&pki);
}

static drig *g_sasl_rig;
static bool two_failed_logins(const km_daemon_status *st)
{
    (void)st;
    uint64_t failed = 0;
    for (int i = 0; i < 2; i++) {
        km_rsim_stats s;
        km_rsim_get_stats(g_sasl_rig->sims[i], &s);
        failed += s.sasl_failed;
    }
    return failed >= 6; /* the first failure, and retries after the backoff, 3 or more to one node */
}

/* A wrong password: the server's reason and the controller's address are logged, the login is
 * retried, and no Fetch ever reaches a controller. */
Test(quorum_daemon, a_wrong_controller_password_is_logged_and_nothing_is_fetched, .timeout = 240)
{
    km_rsim_config c;
    sasl_sims(&c, KM_SASL_SCRAM_SHA_256, NULL);
    drig r = {0};
    drig_start_led(&r, &c);
    g_sasl_rig = &r;
    char log[700];
    snprintf(log, sizeof log, "%s/kmproxy.log", r.tmp);
    const char *const extra[] = { "controller.listener.names", "CONTROLLER", "listener.security.protocol.map",
                                  "CONTROLLER:SASL_PLAINTEXT", "sasl.mechanism.controller.protocol", "SCRAM-SHA-256",
                                  "listener.name.controller.scram-sha-256.sasl.jaas.config",
                                  SCRAM_JAAS("kmproxy", "wrong"), "log.file", log, NULL };
    drig_daemon_with(&r, false, extra);
    cr_assert(run_until(&r, two_failed_logins), "the simulators never refused a login");
    for (int i = 0; i < 2; i++) {
        km_rsim_stats st;
        km_rsim_get_stats(r.sims[i], &st);
        cr_assert_eq(st.fetches + st.fetch_snapshots + st.describe_quorums, 0, "node %d answered a request", i + 1);
        cr_assert_eq(st.unauthenticated, 0, "node %d: %s", i + 1, st.last_rejection);
        cr_assert_eq(st.sasl_ok, 0);
    }
    static scrape sc;
    scrape_metrics(&r, &sc);
    const char *m = strstr(sc.body, "\nkmproxy_quorum_auth_failures_total ");
    /* the simulators saw a sixth login, so kmproxy had handled the first five refusals */
    cr_assert(m && atoi(m + strlen("\nkmproxy_quorum_auth_failures_total ")) >= 5, "%s", sc.body);
    km_daemon_free(r.d);
    r.d = NULL;
    size_t n;
    char *text = (char *)tq_read_file(log, &n);
    text = realloc(text, n + 1);
    text[n] = '\0';
    char want[200];
    snprintf(want, sizeof want, "SASL/SCRAM-SHA-256 authentication as 'kmproxy' to controller 127.0.0.1:%u",
             km_rsim_port(r.sims[0]));
    cr_assert(strstr(text, want), "no '%s' in the log:\n%s", want, text);
    cr_assert(strstr(text, "SASL_AUTHENTICATION_FAILED (58): Authentication failed"), "%s", text);
    for (int i = 0; i < 2; i++) { /* a failure that repeats is logged once a minute, not once a retry */
        snprintf(want, sizeof want, "authentication as 'kmproxy' to controller 127.0.0.1:%u", km_rsim_port(r.sims[i]));
        int lines = 0;
        for (const char *p = strstr(text, want); p; p = strstr(p + 1, want))
            lines++;
        cr_assert_leq(lines, 1, "node %d's refusal logged %d times:\n%s", i + 1, lines, text);
    }
    free(text);
    drig_stop(&r);
}

Test(quorum_daemon, controller_sasl_config_errors_name_the_key)
{
    /* Kafka's default mechanism is GSSAPI: unset, it is refused saying so. */
    assert_refused((const char *const[]){ "controller.listener.names", "CONTROLLER", "listener.security.protocol.map",
                                          "CONTROLLER:SASL_SSL", NULL },
                   "sasl.mechanism.controller.protocol is not set: Kafka's default, GSSAPI, is not supported");
    assert_refused((const char *const[]){ "controller.listener.names", "CONTROLLER", "listener.security.protocol.map",
                                          "CONTROLLER:SASL_PLAINTEXT", "sasl.mechanism.controller.protocol", "GSSAPI",
                                          NULL },
                   "sasl.mechanism.controller.protocol=GSSAPI: SASL mechanism 'GSSAPI' is not supported");
    assert_refused((const char *const[]){ "controller.listener.names", "CONTROLLER", "listener.security.protocol.map",
                                          "CONTROLLER:SASL_PLAINTEXT", "sasl.mechanism.controller.protocol",
                                          "OAUTHBEARER", NULL },
                   "'OAUTHBEARER' is not supported");
    /* No login at all. */
    assert_refused((const char *const[]){ "controller.listener.names", "CONTROLLER", "listener.security.protocol.map",
                                          "CONTROLLER:SASL_PLAINTEXT", "sasl.mechanism.controller.protocol", "PLAIN",
                                          NULL },
                   "needs listener.name.controller.plain.sasl.jaas.config (or sasl.jaas.config)");
    /* SASL keys without a SASL protocol, each by name. */
    assert_refused((const char *const[]){ "controller.listener.names", "CONTROLLER", "listener.security.protocol.map",
                                          "CONTROLLER:SSL", "sasl.mechanism.controller.protocol", "PLAIN", NULL },
                   "sasl.mechanism.controller.protocol is set but controller listener CONTROLLER is SSL");
    assert_refused((const char *const[]){ "sasl.jaas.config", PLAIN_JAAS("a", "b"), NULL },
                   "sasl.jaas.config is set but controller listener PLAINTEXT is PLAINTEXT");
    assert_refused((const char *const[]){ "listener.name.controller.plain.sasl.jaas.config", PLAIN_JAAS("a", "b"),
                                          NULL },
                   "listener.name.controller.plain.sasl.jaas.config is set but controller listener PLAINTEXT");
    /* A login for another listener or mechanism, or one shadowed: nothing would read it. */
    assert_refused((const char *const[]){ "controller.listener.names", "CONTROLLER", "listener.security.protocol.map",
                                          "CONTROLLER:SASL_PLAINTEXT", "sasl.mechanism.controller.protocol", "PLAIN",
                                          "listener.name.controller.scram-sha-256.sasl.jaas.config",
                                          SCRAM_JAAS("a", "b"), NULL },
                   "listener.name.controller.scram-sha-256.sasl.jaas.config is set but the controller's login is "
                   "read from listener.name.controller.plain.sasl.jaas.config");
    assert_refused((const char *const[]){ "controller.listener.names", "CONTROLLER", "listener.security.protocol.map",
                                          "CONTROLLER:SASL_PLAINTEXT", "sasl.mechanism.controller.protocol", "PLAIN",
                                          "listener.name.controller.plain.sasl.jaas.config", PLAIN_JAAS("a", "b"),
                                          "sasl.jaas.config", PLAIN_JAAS("c", "d"), NULL },
                   "sasl.jaas.config is set but listener.name.controller.plain.sasl.jaas.config is what");
    /* The JAAS line is km_sasl's: a module that does not fit the mechanism is named with its key. */
    assert_refused((const char *const[]){ "controller.listener.names", "CONTROLLER", "listener.security.protocol.map",
                                          "CONTROLLER:SASL_PLAINTEXT", "sasl.mechanism.controller.protocol",
                                          "SCRAM-SHA-512", "sasl.jaas.config", PLAIN_JAAS("a", "b"), NULL },
                   "sasl.jaas.config: sasl.jaas.config: login module");
}

/* metadata.source=dir reads no controller listener: its SASL keys are refused, not ignored. */
Test(quorum_daemon, controller_sasl_keys_are_refused_with_the_dir_source)
{
    km_config cfg;
    km_err e = {{0}};
    km_config_defaults(&cfg);
    cr_assert_eq(km_config_set(&cfg, "zookeeper.connect", "127.0.0.1:1", "test", &e), 0);
    cr_assert_eq(km_config_set(&cfg, "metadata.source", "dir", "test", &e), 0);
    cr_assert_eq(km_config_set(&cfg, "metadata.dir", "/tmp", "test", &e), 0);
    cr_assert_eq(km_config_set(&cfg, "listener.name.controller.plain.sasl.jaas.config", PLAIN_JAAS("a", "b"), "test",
                               &e), 0);
    cr_assert_eq(km_config_validate(&cfg, &e), -1);
    cr_assert(strstr(e.msg, "listener.name.controller.plain.sasl.jaas.config is read only with metadata.source=quorum"),
              "%s", e.msg);
    km_config_free(&cfg);
}

/* From a file: the listener-prefixed key is read like any other, and given twice it is refused. */
Test(quorum_daemon, a_controller_jaas_key_given_twice_in_a_file_is_refused)
{
    char *tmp = km_test_tmpdir("qsaslconf"), path[600];
    snprintf(path, sizeof path, "%s/kmproxy.properties", tmp);
    const char *line = "listener.name.controller.plain.sasl.jaas.config=" PLAIN_JAAS("a", "b") "\n";
    for (int twice = 0; twice < 2; twice++) {
        FILE *f = fopen(path, "w");
        cr_assert(f);
        fprintf(f, "zookeeper.connect=127.0.0.1:1\ncontroller.quorum.bootstrap.servers=127.0.0.1:9093\n"
                   "controller.listener.names=CONTROLLER\nlistener.security.protocol.map=CONTROLLER:SASL_PLAINTEXT\n"
                   "sasl.mechanism.controller.protocol=PLAIN\n%s%s", line, twice ? line : "");
        fclose(f);
        km_config cfg;
        km_err e = {{0}};
        km_config_defaults(&cfg);
        int rc = km_config_load(&cfg, path, &e);
        if (!twice) {
            cr_assert_eq(rc, 0, "%s", e.msg);
            cr_assert_eq(km_config_validate(&cfg, &e), 0, "%s", e.msg);
        } else {
            cr_assert_eq(rc, -1);
            cr_assert(strstr(e.msg, ":7: listener.name.controller.plain.sasl.jaas.config is given twice"), "%s", e.msg);
        }
        km_config_free(&cfg);
    }
    km_test_rmtree(tmp);
    free(tmp);
}
