/* The daemon's /healthz and /readyz, scraped with curl, against a real ZooKeeper: each reason it is
 * not ready (ZooKeeper disconnected, lag over health.max.lag.records, brokers unreachable), the
 * full sync's progress figures, SIGTERM (exit 0, in-flight writes finished) and SIGHUP (log.file
 * reopened). Under ASan the daemon's exit status also says nothing leaked. */
#include "km_codec.h"
#include "km_image.h"
#include "km_metalog.h"
#include "km_testsupport.h"
#include "ops_daemon.h"
#include "ops_util.h"
#include "faultproxy.h"
#include "zkserver.h"

#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

static km_zks *zs;

static void start_zk(void) { zs = ops_zk_start(); }

static void stop_zk(void) { km_zks_stop(zs); }

TestSuite(daemon_health, .init = start_zk, .fini = stop_zk, .timeout = 240);

/* kmproxy run at start-up with ZooKeeper unreachable: a report at each doubling interval, never silent. */
Test(daemon_health, an_unreachable_zookeeper_is_reported_with_backoff_until_sigterm)
{
    env e;
    env_init(&e);
    char zk[64], said[128];
    snprintf(zk, sizeof zk, "127.0.0.1:%d/kafka", ops_dead_port());
    inst a;
    start(&a, &e, "backoff", zk, (const char *const[]){"brokers.enabled=false", NULL});
    snprintf(said, sizeof said, "no session with %s", zk);
    /* the first report, and the next one after the backoff */
    cr_assert(ops_wait_for(&a.p, a.log_file, said, 2, 60), "the daemon did not report '%s' twice", said);
    char *log = ops_slurp(a.log_file);
    cr_expect(strstr(log, "(check 1)") && strstr(log, "(check 2)") && strstr(log, "next check in 4 s"), "%s", log);
    free(log);
    stop_cleanly(&a);
    env_free(&e);
}

Test(daemon_health, zookeeper_down_is_alive_but_not_ready)
{
    env e;
    env_init(&e);
    char zk[64];
    snprintf(zk, sizeof zk, "127.0.0.1:%d/kafka", ops_dead_port());
    inst a;
    start(&a, &e, "down", zk, (const char *const[]){"brokers.enabled=false", NULL});
    char *body = scrape_until(&a, "/healthz", 200, "\"alive\":true", 30);
    free(body);
    body = scrape_until(&a, "/readyz", 503, "zookeeper disconnected: no session with", 30);
    cr_expect(strstr(body, "\"ready\":false") && strstr(body, zk), "%s", body);
    free(body);
    stop_cleanly(&a);
    env_free(&e);
}

Test(daemon_health, ready_once_synced_with_the_sync_figures_and_a_clean_sigterm)
{
    env e;
    env_init(&e);
    char zk[128];
    snprintf(zk, sizeof zk, "%s/ready", km_zks_hosts(zs, 0));
    inst a;
    start(&a, &e, "ready", zk, (const char *const[]){"brokers.enabled=false", NULL});
    char *body = scrape_until(&a, "/readyz", 200, "\"ready\":true", 60);
    cr_expect(strstr(body, "\"reasons\":[]") && strstr(body, "\"role\":\"active\""), "%s", body);
    free(body);
    char *m = NULL;
    cr_assert_eq(ops_curl(a.port, "/metrics", &m), 200);
    cr_expect_eq(metric(m, "kmproxy_ready"), 1);
    cr_expect_eq(metric(m, "kmproxy_zk_sync_in_progress"), 0);
    double done = metric(m, "kmproxy_zk_sync_znodes_done"), total = metric(m, "kmproxy_zk_sync_znodes_planned");
    cr_expect(done > 0 && done == total, "sync figures: %g of %g", done, total);
    /* the full sync is one observation of its histogram, in seconds, and the threshold is exported */
    cr_expect_eq(metric(m, "kmproxy_zk_write_snapshot_seconds_count"), 1, "%s", m);
    cr_expect_eq(metric(m, "kmproxy_zk_write_snapshot_seconds_bucket{le=\"+Inf\"}"), 1, "%s", m);
    cr_expect_eq(metric(m, "kmproxy_config_health_max_lag_records"), 1000, "%s", m);
    free(m);
    char *log = ops_slurp(a.log_file);
    cr_expect(strstr(log, "zk sync: done: "), "%s", log);
    free(log);
    stop_cleanly(&a);
    env_free(&e);
}

Test(daemon_health, unreachable_brokers_keep_it_unready)
{
    env e;
    env_init(&e);
    char zk[128];
    snprintf(zk, sizeof zk, "%s/brokers", km_zks_hosts(zs, 0));
    inst a; /* the generated brokers are broker<N>.kmproxy.test: no such host */
    start(&a, &e, "brokers", zk, (const char *const[]){"brokers.enabled=true", "broker.request.timeout.ms=1000", NULL});
    char *body = scrape_until(&a, "/readyz", 503, "brokers unreachable: 3 of 3", 60);
    cr_expect(!strstr(body, "not caught up") && !strstr(body, "zookeeper disconnected"), "%s", body);
    free(body);
    stop_cleanly(&a);
    env_free(&e);
}

/* Two instances on their own chroots follow one log; ZooKeeper stops answering and the log grows:
 * both lag, only the one with health.max.lag.records=0 calls that a reason. The other one is then
 * stopped while its write cannot land: it abandons it and still exits 0. */
Test(daemon_health, lag_over_health_max_lag_records_is_a_reason)
{
    env e;
    env_init(&e);
    char zk_a[128], zk_b[128];
    snprintf(zk_a, sizeof zk_a, "%s/lag-a", km_zks_hosts(zs, 0));
    snprintf(zk_b, sizeof zk_b, "%s/lag-b", km_zks_hosts(zs, 0));
    inst a, b;
    start(&a, &e, "lag-a", zk_a, (const char *const[]){"brokers.enabled=false", "health.max.lag.records=0",
                                                        "zookeeper.session.timeout.ms=60000", NULL});
    start(&b, &e, "lag-b", zk_b, (const char *const[]){"brokers.enabled=false", "zookeeper.session.timeout.ms=60000",
                                                        NULL});
    free(scrape_until(&a, "/readyz", 200, "\"ready\":true", 60));
    free(scrape_until(&b, "/readyz", 200, "\"ready\":true", 60));
    cr_assert_eq(km_zks_pause(zs, 0, true), 0);
    append_record(e.metadata, "777");
    char *body = scrape_until(&a, "/readyz", 503, "lag: 1 records behind the log, over health.max.lag.records=0", 60);
    free(body);
    body = scrape_until(&b, "/readyz", 0, "\"lag_records\":1,", 60);
    cr_expect(!strstr(body, "lag:") && strstr(body, "\"max_lag_records\":1000"), "%s", body);
    free(body);
    /* SIGTERM while a write cannot land: abandoned after the grace period, exit 0 all the same */
    int status = ops_stop(&b.p, SIGTERM);
    char *log = ops_slurp(b.log_file);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %#x: %s", status, log);
    cr_expect(strstr(log, "stopped: abandoned "), "%s", log);
    free(log);
    cr_assert_eq(km_zks_pause(zs, 0, false), 0);
    free(scrape_until(&a, "/readyz", 200, "\"ready\":true", 60)); /* the write lands: lag 0 again */
    stop_cleanly(&a);
    log = ops_slurp(a.log_file);
    cr_expect(strstr(log, "stopped: no ZooKeeper write in flight"), "%s", log);
    free(log);
    env_free(&e);
}

Test(daemon_health, sighup_reopens_the_log_file)
{
    env e;
    env_init(&e);
    char zk[128];
    snprintf(zk, sizeof zk, "%s/hup", km_zks_hosts(zs, 0));
    inst a;
    start(&a, &e, "hup", zk, (const char *const[]){"brokers.enabled=false", NULL});
    char rotated[700];
    snprintf(rotated, sizeof rotated, "%s.1", a.log_file);
    cr_assert_eq(rename(a.log_file, rotated), 0); /* what logrotate does before it signals */
    kill(a.p.pid, SIGHUP);
    cr_assert(ops_wait_for(&a.p, a.log_file, "SIGHUP: reopened log.file", 1, 60), "%s", ops_slurp(rotated));
    char *old = ops_slurp(rotated);
    cr_expect(strstr(old, "metrics on http://") && !strstr(old, "SIGHUP"), "%s", old);
    free(old);
    stop_cleanly(&a);
    env_free(&e);
}

/* Type=notify: READY=1 once /readyz passes, STOPPING=1 on SIGTERM, over $NOTIFY_SOCKET. */
Test(daemon_health, systemd_hears_ready_then_stopping)
{
    env e;
    env_init(&e);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s/notify", e.dir);
    int fd = socket(AF_UNIX, SOCK_DGRAM, 0);
    cr_assert(fd >= 0 && !bind(fd, (struct sockaddr *)&sa, sizeof sa));
    setenv("NOTIFY_SOCKET", sa.sun_path, 1);
    char zk[128], got[4096] = "";
    snprintf(zk, sizeof zk, "%s/notify", km_zks_hosts(zs, 0));
    inst a;
    start(&a, &e, "notify", zk, (const char *const[]){"brokers.enabled=false", NULL});
    unsetenv("NOTIFY_SOCKET");
    cr_assert(ops_notified(fd, "READY=1", got, sizeof got, 60, NULL), "no READY=1: %s", got);
    char *body = NULL;
    cr_expect_eq(ops_curl(a.port, "/readyz", &body), 200, "READY=1 before /readyz passed: %s", body);
    free(body);
    kill(a.p.pid, SIGTERM);
    cr_assert(ops_notified(fd, "STOPPING=1", got, sizeof got, 60, NULL), "no STOPPING=1: %s", got);
    int status = ops_stop(&a.p, 0);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %#x", status);
    close(fd);
    env_free(&e);
}

/* A full sync that cannot finish (ZooKeeper stops answering writes, the session stays up): the log
 * gets a progress line every few seconds, the metrics the same figures, /readyz says why. */
Test(daemon_health, a_stalled_full_sync_reports_its_progress)
{
    env e;
    env_init(&e);
    char perr[256] = "", zk[128];
    km_fp *fp = km_fp_start(km_zks_port(zs, 0), perr, sizeof perr);
    cr_assert(fp, "%s", perr);
    km_fp_arm(fp, KM_FP_MULTI_ANY, KM_FP_SWALLOW, NULL, 2); /* the claim's two multis go through */
    snprintf(zk, sizeof zk, "%s/stalled", km_fp_hosts(fp));
    inst a;
    start(&a, &e, "stalled", zk, (const char *const[]){"brokers.enabled=false", NULL});
    cr_assert(ops_wait_for(&a.p, a.log_file, "zk sync: writing: 0/", 2, 60), "%s", ops_slurp(a.log_file));
    char *log = ops_slurp(a.log_file);
    cr_expect(strstr(log, " znodes, 0/s, ETA unknown"), "%s", log);
    free(log);
    char *m = NULL;
    cr_assert_eq(ops_curl(a.port, "/metrics", &m), 200);
    cr_expect(metric(m, "kmproxy_zk_sync_in_progress") == 1 && metric(m, "kmproxy_zk_sync_znodes_done") == 0 &&
              metric(m, "kmproxy_zk_sync_znodes_planned") > 0 && metric(m, "kmproxy_zk_sync_eta_seconds") == -1, "%s", m);
    free(m);
    free(scrape_until(&a, "/readyz", 503, "not caught up: the full sync into ZooKeeper is still running", 30));
    km_fp_disarm(fp);
    km_fp_cut_all(fp); /* the writer reconnects, finds out what landed and sends the rest */
    free(scrape_until(&a, "/readyz", 200, "\"ready\":true", 60));
    stop_cleanly(&a);
    km_fp_stop(fp);
    env_free(&e);
}
