/* test_quorum_health.c - /readyz, the metrics and the log of a daemon with metadata.source=quorum
 * while its quorum fails (issue 18 items 2 and 5), against a real ZooKeeper and raftsim on the
 * test's loop: a leader that stops answering, and a leader that sends a corrupt batch.  Each fault
 * must turn /readyz 503 with a truthful reason within the bound (MaxWaitMs + the request timeout,
 * plus the scrape), with a metric and one log line, and the daemon must recover once it is gone.
 * The same against Kafka's own leader, paused with SIGSTOP, is in test_quorum_real. */
#include "test_quorum_util.h"
#include "km_daemon.h"
#include "km_testsupport.h"
#include "zkserver.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define REQUEST_TIMEOUT_MS 1000
#define BOUND_S (0.5 + REQUEST_TIMEOUT_MS / 1000.0 + 3.0) /* MaxWaitMs + request timeout + scrape/poll slack */

typedef struct hrig {
    km_zks *zks;
    char hosts[128], *tmp, log_file[700];
    struct ev_loop *loop;
    km_rsim *sim;
    km_daemon *d;
    int64_t end;
} hrig;

static void hrig_start_with(hrig *r, const char *bound);
static void hrig_start(hrig *r) { hrig_start_with(r, "10000"); }

/* bound: zk.write.behind.max.records */
static void hrig_start_with(hrig *r, const char *bound)
{
    char err[512];
    r->zks = km_zks_start(1, NULL, 0, err, sizeof err);
    cr_assert(r->zks, "ZooKeeper: %s", err);
    snprintf(r->hosts, sizeof r->hosts, "%s/kafka", km_zks_hosts(r->zks, -1));
    r->tmp = km_test_tmpdir("qhealth");
    snprintf(r->log_file, sizeof r->log_file, "%s/daemon.log", r->tmp);
    char gendir[600];
    snprintf(gendir, sizeof gendir, "%s/gen", r->tmp);
    km_gen_opts g = {.brokers = 3, .topics = 3, .partitions = 2, .zk_migration = true, .seed = 5};
    km_err e = {{0}};
    cr_assert_geq(km_gen_write(gendir, &g, NULL, &e), 0, "%s", e.msg);
    r->loop = ev_loop_new(0);
    tq_make_sims(r->loop, 1, NULL, &r->sim, NULL, 0);
    cr_assert_eq(km_rsim_append_path(r->sim, gendir, &e), 0, "%s", e.msg);
    km_rsim_set_leader(r->sim, 1, km_rsim_last_epoch(r->sim));
    r->end = km_rsim_log_end(r->sim);
    char servers[64], timeout[16];
    snprintf(servers, sizeof servers, "127.0.0.1:%u", km_rsim_port(r->sim));
    snprintf(timeout, sizeof timeout, "%d", REQUEST_TIMEOUT_MS);
    const char *kv[][2] = { {"metadata.source", "quorum"}, {"controller.quorum.bootstrap.servers", servers},
                            {"controller.quorum.request.timeout.ms", timeout}, {"zookeeper.connect", r->hosts},
                            {"brokers.enabled", "false"}, {"metrics.listen", "127.0.0.1:0"},
                            {"log.file", r->log_file}, {"zk.write.behind.max.records", bound} };
    km_config cfg;
    km_config_defaults(&cfg);
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
        cr_assert_eq(km_config_set(&cfg, kv[i][0], kv[i][1], "test", &e), 0, "%s: %s", kv[i][0], e.msg);
    r->d = km_daemon_new(r->loop, &cfg, &e);
    km_config_free(&cfg);
    cr_assert(r->d, "%s", e.msg);
    km_daemon_start(r->d);
}

static void hrig_stop(hrig *r)
{
    km_daemon_free(r->d);
    km_rsim_free(r->sim);
    ev_loop_destroy(r->loop);
    km_zks_stop(r->zks);
    km_test_rmtree(r->tmp);
    free(r->tmp);
}

/* ---- GET from a thread while the test's loop serves it ---------------------------------- */

typedef struct get { uint16_t port; char path[32]; char body[65536]; atomic_bool done; } get;

static void *get_thread(void *arg)
{
    get *g = arg;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(g->port) };
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    size_t n = 0;
    char rq[96];
    snprintf(rq, sizeof rq, "GET %s HTTP/1.0\r\n\r\n", g->path);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0 && write(fd, rq, strlen(rq)) > 0)
        for (ssize_t k; n < sizeof g->body - 1 && (k = read(fd, g->body + n, sizeof g->body - 1 - n)) > 0;)
            n += (size_t)k;
    g->body[n] = 0;
    close(fd);
    atomic_store(&g->done, true);
    return NULL;
}

static void tick(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)revents;
    if (atomic_load(&((get *)t->data)->done))
        ev_break(loop, EVBREAK_ALL);
}

static void fetch_path(hrig *r, const char *path, get *g)
{
    memset(g, 0, sizeof *g);
    g->port = km_daemon_metrics_port(r->d);
    snprintf(g->path, sizeof g->path, "%s", path);
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, get_thread, g), 0);
    ev_timer w;
    ev_timer_init(&w, tick, 0.01, 0.01);
    w.data = g;
    ev_timer_start(r->loop, &w);
    ev_run(r->loop, 0);
    ev_timer_stop(r->loop, &w);
    pthread_join(t, NULL);
}

static void run_for(hrig *r, double s)
{
    ev_timer w;
    ev_timer_init(&w, tick, s, 0.);
    get g = { .done = true };
    w.data = &g;
    ev_timer_start(r->loop, &w);
    ev_run(r->loop, 0);
}

/* Scrapes /readyz every 100 ms until its status line is `status` and the body holds needle; the
 * seconds it took, or -1 after timeout_s. */
static double readyz_until(hrig *r, const char *status, const char *needle, double timeout_s, get *g)
{
    double t0 = ev_time();
    while (ev_time() - t0 < timeout_s) {
        fetch_path(r, "/readyz", g);
        if (strstr(g->body, status) && (!needle || strstr(g->body, needle)))
            return ev_time() - t0;
        run_for(r, 0.1);
    }
    return -1;
}

static int log_count_now(hrig *r, const char *needle)
{
    FILE *f = fopen(r->log_file, "r");
    int n = 0;
    char line[4096];
    while (f && fgets(line, sizeof line, f))
        n += strstr(line, needle) != NULL;
    if (f)
        fclose(f);
    return n;
}

/* The log line is written on the daemon's next poll (every 0.2 s): wait for it, bounded. */
static int log_count(hrig *r, const char *needle)
{
    for (int i = 0; i < 20 && log_count_now(r, needle) == 0; i++)
        run_for(r, 0.1);
    return log_count_now(r, needle);
}

static char *slurp(const char *path)
{
    size_t n = 0;
    char *s = NULL;
    FILE *f = fopen(path, "r");
    if (f && (s = malloc(1 << 20)))
        s[n = fread(s, 1, (1 << 20) - 1, f)] = 0;
    if (f)
        fclose(f);
    return s ? s : strdup("");
}

static void ready_at_the_log_end(hrig *r)
{
    get g;
    cr_assert_geq(readyz_until(r, " 200 ", NULL, 60, &g), 0, "never ready: %s", g.body);
    char off[64];
    snprintf(off, sizeof off, "\"image_offset\":%lld", (long long)r->end - 1);
    cr_assert(strstr(g.body, off), "ready before the leader's high watermark %lld: %s", (long long)r->end, g.body);
}

/* Issue 18 item 2: the leader stops answering (requests read, never answered, as a paused process). */
Test(quorum_health, leader_silent_turns_readyz_503_within_the_bound_then_back, .timeout = 120)
{
    hrig r = {0};
    hrig_start(&r);
    ready_at_the_log_end(&r);
    km_rsim_set_silent(r.sim, true);
    get g;
    double t = readyz_until(&r, " 503 ", "quorum unreachable", BOUND_S + 2, &g);
    cr_assert_geq(t, 0, "still not 503 'quorum unreachable' after %.1f s: %s", BOUND_S + 2, g.body);
    cr_log_info("leader silent: /readyz 503 after %.1f s", t);
    fetch_path(&r, "/metrics", &g);
    cr_assert(strstr(g.body, "\nkmproxy_quorum_reachable 0\n"), "%s", g.body);
    cr_assert_eq(log_count(&r, "quorum unreachable"), 1, "one WARN line for the fault:\n%s", slurp(r.log_file));
    km_rsim_set_silent(r.sim, false);
    km_rsim_drop_connections(r.sim);
    t = readyz_until(&r, " 200 ", NULL, 30, &g);
    cr_assert_geq(t, 0, "did not recover: %s", g.body);
    cr_log_info("leader back: /readyz 200 after %.1f s", t);
    fetch_path(&r, "/metrics", &g);
    cr_assert(strstr(g.body, "\nkmproxy_quorum_reachable 1\n"), "%s", g.body);
    cr_assert_eq(log_count(&r, "quorum: usable again"), 1);
    hrig_stop(&r);
}

/* Issue 18 item 5: a batch whose CRC fails.  Backed off (not ~27 Fetches a second), one log line,
 * and a reason that names the refusal; back to 200 once the leader sends good bytes. */
Test(quorum_health, corrupt_batch_backs_off_with_one_line_and_a_true_reason, .timeout = 120)
{
    hrig r = {0};
    hrig_start(&r);
    ready_at_the_log_end(&r);
    km_rsim_set_corrupt_records(r.sim, true);
    km_buf more;
    km_buf_init(&more);
    tq_config_batch(&more, r.end, km_rsim_last_epoch(r.sim), 3, "after");
    km_err e;
    cr_assert_eq(km_rsim_append(r.sim, more.data, more.len, &e), 0, "%s", e.msg);
    km_buf_free(&more);
    r.end += 3;
    km_rsim_stats before, after;
    km_rsim_get_stats(r.sim, &before);
    get g;
    double t = readyz_until(&r, " 503 ", "records kmproxy refuses", BOUND_S + 2, &g);
    cr_assert_geq(t, 0, "no 503 naming the refused records: %s", g.body);
    cr_log_info("corrupt batch: /readyz 503 after %.1f s", t);
    run_for(&r, 3);
    km_rsim_get_stats(r.sim, &after);
    double window = t + 3;
    cr_assert_lt((double)(after.fetches - before.fetches), 6 * window,
                 "%llu Fetches in %.1f s: no backoff", (unsigned long long)(after.fetches - before.fetches), window);
    cr_assert_leq(log_count(&r, "records kmproxy refuses"), 2, "the refusal is logged once a minute, not per retry");
    km_rsim_set_corrupt_records(r.sim, false);
    t = readyz_until(&r, " 200 ", NULL, 30, &g);
    cr_assert_geq(t, 0, "did not recover: %s", g.body);
    ready_at_the_log_end(&r);
    hrig_stop(&r);
}

/* Issue 17 item 4 in the daemon: the controller refuses CLUSTER_ACTION.  Not fatal (granting the ACL
 * must be enough), but /readyz says it plainly, and it recovers once granted. */
Test(quorum_health, not_authorized_says_so_then_recovers_when_granted, .timeout = 120)
{
    hrig r = {0};
    hrig_start(&r);
    ready_at_the_log_end(&r);
    km_rsim_set_denied(r.sim, true, false);
    km_buf more;
    km_buf_init(&more);
    tq_config_batch(&more, r.end, km_rsim_last_epoch(r.sim), 3, "after");
    km_err e;
    cr_assert_eq(km_rsim_append(r.sim, more.data, more.len, &e), 0, "%s", e.msg);
    km_buf_free(&more);
    r.end += 3;
    get g;
    double t = readyz_until(&r, " 503 ", "ALLOW CLUSTER_ACTION", BOUND_S + 2, &g);
    cr_assert_geq(t, 0, "no 503 naming the ACL: %s", g.body);
    cr_assert(strstr(g.body, "quorum: not authorized"), "%s", g.body);
    km_rsim_set_denied(r.sim, false, false);
    t = readyz_until(&r, " 200 ", NULL, 30, &g);
    cr_assert_geq(t, 0, "did not recover once granted: %s", g.body);
    ready_at_the_log_end(&r);
    hrig_stop(&r);
}

/* Issue 27 item 9: kmproxy pauses fetching itself while the ZooKeeper mirror cannot take more (here the
 * write-behind bound of one record is full while ZooKeeper is down). Past the bound the reason was
 * "quorum unreachable ... last: no failure yet", and a WARN line blamed the quorum: it must say that
 * the fetching is paused, and by whom, and log no quorum fault. */
Test(quorum_health, fetching_paused_by_the_mirror_is_not_called_an_unreachable_quorum, .timeout = 120)
{
    hrig r = {0};
    hrig_start_with(&r, "1");
    ready_at_the_log_end(&r);
    cr_assert_eq(km_zks_kill_one(r.zks, 0), 0);
    km_buf b;
    km_buf_init(&b);
    tq_config_batch(&b, r.end, km_rsim_last_epoch(r.sim), 3, "paused");
    km_err e = {{0}};
    cr_assert_eq(km_rsim_append(r.sim, b.data, b.len, &e), 0, "%s", e.msg);
    km_buf_free(&b);
    km_buf_init(&b);
    tq_config_batch(&b, r.end + 3, km_rsim_last_epoch(r.sim), 3, "paused");
    cr_assert_eq(km_rsim_append(r.sim, b.data, b.len, &e), 0, "%s", e.msg);
    km_buf_free(&b);
    get g;
    cr_assert_geq(readyz_until(&r, " 503 ", "quorum: fetching paused by kmproxy", 30, &g), 0, "%s", g.body);
    run_for(&r, BOUND_S + 1); /* past the bound a paused fetch used to be called an unreachable quorum */
    fetch_path(&r, "/readyz", &g);
    cr_assert(strstr(g.body, "quorum: fetching paused by kmproxy"), "%s", g.body);
    cr_assert(!strstr(g.body, "quorum unreachable"), "%s", g.body);
    cr_assert_eq(log_count(&r, "quorum unreachable"), 0, "a quorum fault logged:\n%s", slurp(r.log_file));
    cr_assert_eq(km_zks_start_one(r.zks, 0), 0);
    cr_assert_geq(readyz_until(&r, " 200 ", NULL, 60, &g), 0, "did not recover: %s", g.body);
    hrig_stop(&r);
}
