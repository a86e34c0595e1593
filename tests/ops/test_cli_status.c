/* kmproxy status: a daemon (a real process) follows a KRaft quorum leader (the raft simulator,
 * serving a generated log), claims a real ZooKeeper and drives three simulated ZK-mode brokers,
 * with the inline proxy on; `kmproxy status --json` and the table show what it really does.
 * A URL where nothing answers, or where nothing answers in time, exits 1 and says so. */
#include "km_raftsim.h"
#include "km_testsupport.h"
#include "ops_daemon.h"
#include "ops_util.h"
#include "test_broker_rig.h"
#include "zkserver.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <ev.h>
#include <jansson.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static brig R;

static void slice_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)t; (void)revents;
    ev_break(loop, EVBREAK_ALL);
}

/* Serves the simulators (on R's loop) for a tenth of a second. */
static void serve_a_while(void)
{
    ev_timer t;
    ev_timer_init(&t, slice_cb, 0.1, 0);
    ev_timer_start(R.loop, &t);
    ev_run(R.loop, 0);
    ev_timer_stop(R.loop, &t);
}

/* `kmproxy status --url http://127.0.0.1:port [more]`: exit code, stdout and stderr (malloc'd). */
static int status_cmd(int port, const char *more, char **out, char **err)
{
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", port);
    char *argv[] = {(char *)km_test_binary(), "status", "--url", url, (char *)more, NULL};
    size_t n;
    return km_test_run(argv, NULL, 0, out, &n, err);
}

/* Serves until /status says ready with every broker channel ready and the proxy's client counted. */
static json_t *serve_until_settled(inst *d, int clients, int timeout_s)
{
    for (int i = 0; i < timeout_s * 10; i++) {
        serve_a_while();
        char *body = NULL;
        int code = ops_curl(d->port, "/status", &body);
        json_t *st = code == 200 ? json_loads(body, 0, NULL) : NULL;
        free(body);
        json_t *chans = json_object_get(json_object_get(st, "brokers"), "channels");
        bool all_ready = json_array_size(chans) == 3;
        size_t k;
        json_t *c;
        json_array_foreach(chans, k, c)
            all_ready = all_ready && !strcmp(json_string_value(json_object_get(c, "state")), "ready");
        json_int_t open = json_integer_value(json_object_get(json_object_get(st, "proxy"), "connections_open"));
        if (json_is_true(json_object_get(st, "ready")) && all_ready && open == clients)
            return st;
        json_decref(st);
    }
    cr_assert_fail("the daemon never settled; log: %s", ops_slurp(d->log_file));
    return NULL;
}

static void start_daemon(inst *d, const char *dir, uint16_t quorum_port, const char *zk, uint16_t broker_port)
{
    static char sets[7][700];
    d->port = ops_dead_port();
    snprintf(d->log_file, sizeof d->log_file, "%s/status.log", dir);
    snprintf(sets[0], sizeof sets[0], "metadata.source=quorum");
    snprintf(sets[1], sizeof sets[0], "controller.quorum.bootstrap.servers=127.0.0.1:%u", quorum_port);
    snprintf(sets[2], sizeof sets[0], "zookeeper.connect=%s", zk);
    snprintf(sets[3], sizeof sets[0], "metrics.listen=127.0.0.1:%d", d->port);
    snprintf(sets[4], sizeof sets[0], "log.file=%s", d->log_file);
    snprintf(sets[5], sizeof sets[0], "proxy.bootstrap.listen=127.0.0.1:0");
    snprintf(sets[6], sizeof sets[0], "proxy.bootstrap.upstream=127.0.0.1:%u", broker_port);
    const char *args[] = {"run", "--set", sets[0], "--set", sets[1], "--set", sets[2], "--set", sets[3],
                          "--set", sets[4], "--set", sets[5], "--set", sets[6], NULL};
    ops_spawn(&d->p, dir, "status", args);
    cr_assert(ops_wait_for(&d->p, d->log_file, "metrics on http://", 1, 60), "the daemon did not start: %s",
              ops_slurp(d->p.err));
}

static int connect_to(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert(fd >= 0 && !connect(fd, (struct sockaddr *)&a, sizeof a), "connect to %d", port);
    return fd;
}

/* What --json printed, checked against the simulators' own state. */
static void check_json(const char *out, int64_t hw, int32_t epoch)
{
    json_error_t jerr;
    json_t *st = json_loads(out, 0, &jerr);
    cr_assert(json_is_object(st), "--json printed no JSON object: %s: %s", jerr.text, out);
    cr_expect_str_eq(json_string_value(json_object_get(st, "role")), "active");
    cr_expect(json_is_true(json_object_get(st, "ready")));
    cr_expect(json_is_array(json_object_get(st, "reasons")) && !json_array_size(json_object_get(st, "reasons")), "%s",
              out);
    cr_expect_str_eq(json_string_value(json_object_get(json_object_get(st, "metadata"), "migration_state")),
                     "MIGRATION", "%s", out);
    json_t *q = json_object_get(st, "quorum"), *z = json_object_get(st, "zookeeper");
    cr_expect_eq(json_integer_value(json_object_get(q, "leader_id")), 1);
    cr_expect_eq(json_integer_value(json_object_get(q, "leader_epoch")), epoch);
    cr_expect_eq(json_integer_value(json_object_get(q, "high_watermark")), hw);
    cr_expect_eq(json_integer_value(json_object_get(q, "applied_offset")), hw - 1);
    cr_expect_str_eq(json_string_value(json_object_get(z, "session")), "DUAL_WRITE");
    cr_expect_str_eq(json_string_value(json_object_get(z, "phase")), "dual write");
    cr_expect_eq(json_integer_value(json_object_get(z, "write_behind_lag")), 0);
    cr_expect_eq(json_integer_value(json_object_get(z, "confirmed_offset")), hw - 1);
    json_t *claim = json_object_get(z, "claim");
    cr_expect_eq(json_integer_value(json_object_get(claim, "kraft_controller_epoch")), epoch, "%s", out);
    cr_expect_gt(json_integer_value(json_object_get(claim, "zk_controller_epoch")), 0, "%s", out);
    json_t *chans = json_object_get(json_object_get(st, "brokers"), "channels");
    cr_assert_eq(json_array_size(chans), 3, "%s", out);
    for (size_t i = 0; i < 3; i++) {
        json_t *c = json_array_get(chans, i), *v = json_object_get(c, "versions");
        int32_t id = (int32_t)json_integer_value(json_object_get(c, "id"));
        km_bsim *sim = brig_sim(&R, id);
        cr_assert(sim, "a channel to broker %d, which the rig does not run: %s", id, out);
        cr_expect_eq(json_integer_value(json_object_get(c, "port")), km_bsim_port(sim));
        cr_expect_str_eq(json_string_value(json_object_get(c, "state")), "ready");
        cr_expect_eq(json_integer_value(json_object_get(v, "LeaderAndIsr")), 7, "%s", out);  /* the codec's maxima */
        cr_expect_eq(json_integer_value(json_object_get(v, "UpdateMetadata")), 8, "%s", out);
        cr_expect_eq(json_integer_value(json_object_get(v, "StopReplica")), 4, "%s", out);
        cr_expect_eq(json_integer_value(json_object_get(c, "pending_stops")), 0);
    }
    cr_expect_eq(json_integer_value(json_object_get(json_object_get(st, "proxy"), "connections_open")), 1, "%s", out);
    cr_expect(json_is_null(json_object_get(st, "ha")), "%s", out);
    json_decref(st);
}

static void check_table(const char *out, int port, int64_t hw)
{
    char want[200];
    snprintf(want, sizeof want, "kmproxy at http://127.0.0.1:%d: active, ready", port);
    cr_expect(strstr(out, want), "%s", out);
    snprintf(want, sizeof want, "quorum     leader 1 (epoch ");
    cr_expect(strstr(out, want), "%s", out);
    snprintf(want, sizeof want, "high watermark %lld, applied offset %lld", (long long)hw, (long long)hw - 1);
    cr_expect(strstr(out, want), "%s", out);
    cr_expect(strstr(out, "session DUAL_WRITE, dual write, write-behind lag 0 records"), "%s", out);
    cr_expect(strstr(out, "claim: KRaft controller "), "%s", out);
    cr_expect(strstr(out, "brokers    3 channels, sending"), "%s", out);
    cr_expect_eq(ops_count(out, " ready "), 3, "%s", out);
    cr_expect_eq(ops_count(out, " v7 "), 3, "%s", out);
    cr_expect(strstr(out, "1 connections open"), "%s", out);
    cr_expect(strstr(out, "\nmigration  MIGRATION\n"), "%s", out);
    cr_expect(!strstr(out, "not ready:"), "%s", out);
}

/* Serves until /status says broker `id` has a last error and the daemon is not ready; returns the status. */
static json_t *serve_until_broker_fails(inst *d, int32_t id, int timeout_s)
{
    for (int i = 0; i < timeout_s * 10; i++) {
        serve_a_while();
        char *body = NULL;
        ops_curl(d->port, "/status", &body);
        json_t *st = body ? json_loads(body, 0, NULL) : NULL;
        free(body);
        size_t k;
        json_t *c;
        json_array_foreach(json_object_get(json_object_get(st, "brokers"), "channels"), k, c)
            if (json_integer_value(json_object_get(c, "id")) == id && json_is_string(json_object_get(c, "last_error")) &&
                json_is_false(json_object_get(st, "ready")))
                return st;
        json_decref(st);
    }
    cr_assert_fail("broker %d never showed a last error; log: %s", id, ops_slurp(d->log_file));
    return NULL;
}

/* A broker cut off: the table says NOT READY with /readyz's reasons and the broker's last error in its
 * row, and --check prints the reasons and exits 1. */
static void check_broker_down(inst *d)
{
    km_bsim *sim = R.sims[R.nsims - 1];
    int32_t id = km_bsim_broker_id(sim);
    km_bsim_set_unreachable(sim, true);
    json_t *st = serve_until_broker_fails(d, id, 90);
    const char *last = NULL;
    size_t k;
    json_t *c;
    json_array_foreach(json_object_get(json_object_get(st, "brokers"), "channels"), k, c)
        if (json_integer_value(json_object_get(c, "id")) == id)
            last = json_string_value(json_object_get(c, "last_error"));
    cr_assert(last && *last);
    char *out = NULL, *errs = NULL, want[300];
    cr_assert_eq(status_cmd(d->port, NULL, &out, &errs), 0, "%s", errs);
    cr_expect(strstr(out, ": active, NOT READY, up "), "%s", out);
    cr_expect(strstr(out, "\n  not ready: brokers unreachable: "), "%s", out);
    snprintf(want, sizeof want, "  %s\n", last); /* the last column of the broker's row */
    cr_expect(strstr(out, want), "no '%s' in %s", last, out);
    free(out);
    free(errs);
    cr_expect_eq(status_cmd(d->port, "--check", &out, &errs), 1, "%s%s", out, errs);
    cr_expect(strstr(out, ": active, not ready: ") && strstr(out, "brokers unreachable: "), "%s", out);
    free(out);
    free(errs);
    json_decref(st);
    km_bsim_set_unreachable(sim, false);
}

Test(cli_status, shows_a_running_daemon_as_json_and_as_a_table, .timeout = 240)
{
    brig_opts o = {.brokers = 3, .topics = 2, .partitions = 2, .replication = 2};
    cr_assert(brig_init(&R, &o), "%s", R.why);
    km_rsim_config rc;
    km_rsim_config_init(&rc);
    rc.node_id = 1;
    km_err err = {{0}};
    km_rsim *leader = km_rsim_new(R.loop, &rc, &err);
    cr_assert(leader, "%s", err.msg);
    km_rsim_voter self = {.id = 1, .host = "127.0.0.1", .port = km_rsim_port(leader)};
    char seg[600];
    snprintf(seg, sizeof seg, "%s/00000000000000000000.log", R.logdir);
    cr_assert_eq(km_rsim_set_voters(leader, &self, 1, &err), 0, "%s", err.msg);
    cr_assert_eq(km_rsim_append_path(leader, seg, &err), 0, "%s", err.msg);
    int32_t epoch = km_rsim_last_epoch(leader);
    int64_t hw = km_rsim_log_end(leader);
    km_rsim_set_leader(leader, 1, epoch);
    km_rsim_set_high_watermark(leader, hw);
    km_zks *zs = ops_zk_start();
    char zk[128];
    snprintf(zk, sizeof zk, "%s/status", km_zks_hosts(zs, 0));
    char *dir = km_test_tmpdir("ops-status");
    inst d;
    start_daemon(&d, dir, km_rsim_port(leader), zk, km_bsim_port(R.sims[0]));
    json_t *st = NULL;
    for (int i = 0; i < 600 && !st; i++) { /* the proxy's bootstrap port, once /status names it */
        serve_a_while();
        char *body = NULL;
        if (ops_curl(d.port, "/status", &body) == 200)
            st = json_loads(body, 0, NULL);
        free(body);
    }
    cr_assert(st, "no /status: %s", ops_slurp(d.log_file));
    int bootstrap = (int)json_integer_value(json_object_get(json_object_get(st, "proxy"), "bootstrap_port"));
    json_decref(st);
    cr_assert_gt(bootstrap, 0);
    int client = connect_to(bootstrap);
    json_decref(serve_until_settled(&d, 1, 90));

    char *out = NULL, *errs = NULL;
    cr_assert_eq(status_cmd(d.port, "--json", &out, &errs), 0, "%s", errs);
    check_json(out, hw, epoch);
    free(out);
    free(errs);
    cr_assert_eq(status_cmd(d.port, NULL, &out, &errs), 0, "%s", errs);
    check_table(out, d.port, hw);
    free(out);
    free(errs);
    cr_assert_eq(status_cmd(d.port, "--check", &out, &errs), 0, "%s%s", out, errs);
    snprintf(seg, sizeof seg, "kmproxy at http://127.0.0.1:%d: active, ready\n", d.port);
    cr_expect_str_eq(out, seg);
    free(out);
    free(errs);
    check_broker_down(&d);

    close(client);
    stop_cleanly(&d);
    km_rsim_free(leader);
    km_zks_stop(zs);
    brig_free(&R);
    km_test_rmtree(dir);
    free(dir);
}

/* A listening socket on 127.0.0.1 and a free port (in a); nothing accepts until the test does. */
static int listen_on_loopback(struct sockaddr_in *a)
{
    int l = socket(AF_INET, SOCK_STREAM, 0);
    *a = (struct sockaddr_in){.sin_family = AF_INET};
    a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof *a;
    cr_assert(!bind(l, (struct sockaddr *)a, sizeof *a) && !listen(l, 4) &&
              !getsockname(l, (struct sockaddr *)a, &len));
    return l;
}

Test(cli_status, an_unreachable_or_silent_url_exits_1_and_says_so, .timeout = 60)
{
    int dead = ops_dead_port();
    char *out = NULL, *errs = NULL, want[200];
    cr_assert_eq(status_cmd(dead, NULL, &out, &errs), 1, "%s", out);
    snprintf(want, sizeof want, "kmproxy status: cannot get http://127.0.0.1:%d/status: Connection refused", dead);
    cr_expect(strstr(errs, want), "%s", errs);
    cr_expect_str_eq(out, "");
    free(out);
    free(errs);

    /* a listener that never answers: the connection is queued, the request never read */
    struct sockaddr_in a;
    int l = listen_on_loopback(&a);
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", ntohs(a.sin_port));
    char *argv[] = {(char *)km_test_binary(), "status", "--url", url, "--json", "--timeout", "1", NULL};
    size_t n;
    cr_assert_eq(km_test_run(argv, NULL, 0, &out, &n, &errs), 1, "%s", out);
    cr_expect(strstr(errs, "no whole answer within 1 s"), "%s", errs);
    free(out);
    free(errs);
    close(l);

    cr_assert_eq(status_cmd(dead, "--check", &out, &errs), 2, "--check where nothing answers: %s", out);
    cr_expect(strstr(errs, "Connection refused"), "%s", errs);
    free(out);
    free(errs);
    cr_assert_eq(status_cmd(dead, "--bogus", &out, &errs), 2);
    free(out);
    free(errs);
}

/* One HTTP answer with `json` as the body, from a child process; returns the port. */
static int serve_once(const char *json, pid_t *pid)
{
    struct sockaddr_in a;
    int l = listen_on_loopback(&a);
    pid_t parent = getpid();
    *pid = fork();
    cr_assert(*pid >= 0);
    if (*pid == 0) {
        km_test_die_with_parent(parent);
        int c = accept(l, NULL, NULL);
        char req[4096];
        if (c < 0 || recv(c, req, sizeof req, 0) <= 0)
            _exit(1);
        dprintf(c, "HTTP/1.0 200 OK\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                strlen(json), json);
        close(c);
        _exit(0);
    }
    close(l);
    return ntohs(a.sin_port);
}

/* The table from a /status as a standby with brokers on real host names serves it: the names whole and
 * the columns aligned, each broker's last error, the migration state, the active instance. */
Test(cli_status, the_table_holds_long_host_names_last_errors_and_the_active_instance, .timeout = 60)
{
    static const char *const HOST = "kafka-broker-1.eu-west-1.compute.internal";
    char json[2048];
    snprintf(json, sizeof json,
             "{\"role\":\"standby\",\"ready\":true,\"reasons\":[],\"uptime_seconds\":5,"
             "\"metadata\":{\"source\":\"quorum\",\"migration_state\":\"MIGRATION\"},"
             "\"zookeeper\":{\"connect\":\"zk:2181\",\"session\":\"standby\"},"
             "\"brokers\":{\"enabled\":true,\"sending\":false,\"channels\":["
             "{\"id\":1,\"host\":\"%s\",\"port\":9092,\"state\":\"ready\",\"last_error\":null},"
             "{\"id\":2,\"host\":\"b2\",\"port\":9092,\"state\":\"connecting\","
             "\"last_error\":\"connect: Connection refused; reconnecting in 0.200 s\"}]},"
             "\"ha\":{\"instance\":\"host-b:12 metrics=0.0.0.0:9779\",\"node\":\"n_0000000001\","
             "\"election_session\":true,\"takeovers\":0,\"active_instance\":\"host-a:34 metrics=0.0.0.0:9779\"}}",
             HOST);
    pid_t pid;
    int port = serve_once(json, &pid);
    char *out = NULL, *errs = NULL;
    cr_assert_eq(status_cmd(port, NULL, &out, &errs), 0, "%s", errs);
    waitpid(pid, NULL, 0);
    cr_expect(strstr(out, "active instance: host-a:34 metrics=0.0.0.0:9779\n"), "%s", out);
    cr_expect(strstr(out, "\nmigration  MIGRATION\n"), "%s", out);
    char want[200];
    snprintf(want, sizeof want, " %s:9092 ", HOST);
    const char *row1 = strstr(out, want), *row2 = strstr(out, "\n  2 ");
    const char *head = strstr(out, "  BROKER ");
    cr_assert(row1 && row2 && head, "%s", out);
    /* aligned: STATE starts in the same column in the header and both rows */
    const char *line1 = row1;
    while (line1 > out && line1[-1] != '\n')
        line1--;
    long state_col = strstr(head, "STATE") - head, ready_col = strstr(line1, "ready") - line1;
    long connecting_col = strstr(row2 + 1, "connecting") - (row2 + 1);
    cr_expect(state_col == ready_col && ready_col == connecting_col, "columns %ld %ld %ld: %s", state_col, ready_col,
              connecting_col, out);
    cr_expect(strstr(row2, "  connect: Connection refused; reconnecting in 0.200 s\n"), "%s", out);
    free(out);
    free(errs);
}

static json_t *status_json_of(inst *in)
{
    char *body = NULL;
    cr_assert_eq(ops_curl(in->port, "/status", &body), 200, "%s", body);
    json_t *st = json_loads(body, 0, NULL);
    cr_assert(json_is_object(st), "%s", body);
    free(body);
    return st;
}

/* Run on a standby, status names the active instance (as the active one names itself), and --check says
 * the standby is ready (it follows and can take over). */
Test(cli_status, on_a_standby_names_the_active_instance, .timeout = 240)
{
    static const char *const HA[] = {"ha.enabled=true", "zookeeper.session.timeout.ms=2000",
                                     "brokers.enabled=false", NULL};
    km_zks *zs = ops_zk_start();
    env e;
    env_init(&e);
    char zk[128];
    snprintf(zk, sizeof zk, "%s/status-ha", km_zks_hosts(zs, 0));
    inst in[2];
    start(&in[0], &e, "status-ha-a", zk, HA);
    free(scrape_until(&in[0], "/readyz", 200, "\"role\":\"active\"", 60));
    start(&in[1], &e, "status-ha-b", zk, HA);
    free(scrape_until(&in[1], "/readyz", 200, "\"role\":\"standby\"", 60));
    free(scrape_until(&in[1], "/status", 200, "\"active_instance\":\"", 60));
    json_t *active = status_json_of(&in[0]), *standby = status_json_of(&in[1]);
    const char *name = json_string_value(json_object_get(json_object_get(active, "ha"), "instance"));
    cr_assert(name && *name);
    cr_expect_str_eq(json_string_value(json_object_get(json_object_get(active, "ha"), "active_instance")), name);
    cr_expect_str_eq(json_string_value(json_object_get(json_object_get(standby, "ha"), "active_instance")), name);
    char *out = NULL, *errs = NULL, want[400];
    cr_assert_eq(status_cmd(in[1].port, NULL, &out, &errs), 0, "%s", errs);
    snprintf(want, sizeof want, ": standby, ready, up ");
    cr_expect(strstr(out, want), "%s", out);
    snprintf(want, sizeof want, "active instance: %s\n", name);
    cr_expect(strstr(out, want), "%s", out);
    free(out);
    free(errs);
    cr_expect_eq(status_cmd(in[1].port, "--check", &out, &errs), 0, "%s%s", out, errs);
    free(out);
    free(errs);
    json_decref(active);
    json_decref(standby);
    stop_cleanly(&in[1]);
    stop_cleanly(&in[0]);
    env_free(&e);
    km_zks_stop(zs);
}
