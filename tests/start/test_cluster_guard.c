/* The cluster-id guard in quorum mode (issue 18 item 12): without cluster.id the daemon asks the
 * controllers (DescribeCluster, KIP-919) and makes no claim before it knows; so zk.force=true can
 * no longer depose another cluster's ZooKeeper controller: the claim is refused before any write,
 * /controller_epoch and /controller stay as they were, and the refusal never suggests --force.
 * Real ZooKeeper, raft simulators serving a generated migration log; and the simulators' DescribeCluster
 * answer itself, checked against a Kafka 3.9 controller's (raftsim_describe_cluster_answers_as_a_controller). */
#include "test_quorum_util.h"
#include "km_daemon.h"
#include "km_image.h"
#include "km_testsupport.h"
#include "zkserver.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define OTHER_CONTROLLER "{\"version\":1,\"brokerid\":1,\"timestamp\":\"1700000000000\"}"

typedef struct grig {
    km_zks *zks;
    km_zkc *zkc;
    char hosts[128], *tmp;
    struct ev_loop *loop;
    km_rsim *sims[2];
    km_daemon *d;
} grig;

static const char *g_cluster_id = "OtherClusterId000000";

/* Another cluster's ZooKeeper (or, with g_cluster_id set to ours, this cluster's before its first
 * sync, holding a topic the image does not have): its id, brokers, controller at epoch 7. */
static void seed_other_cluster(grig *r)
{
    char path[64];
    r->zkc = km_zkc_open(km_zks_hosts(r->zks, -1), NULL, 10000);
    cr_assert(r->zkc);
    cr_assert_eq(km_zkc_mkdirs(r->zkc, "/kafka/brokers/ids"), ZOK);
    cr_assert_eq(km_zkc_mkdirs(r->zkc, "/kafka/cluster"), ZOK);
    char id[128];
    snprintf(id, sizeof id, "{\"version\":\"1\",\"id\":\"%s\"}", g_cluster_id);
    cr_assert_eq(km_zkc_create(r->zkc, "/kafka/cluster/id", id, 0), ZOK);
    cr_assert_eq(km_zkc_mkdirs(r->zkc, "/kafka/brokers/topics/only-in-zookeeper"), ZOK);
    for (int id = 1; id <= 3; id++) {
        snprintf(path, sizeof path, "/kafka/brokers/ids/%d", id);
        cr_assert_eq(km_zkc_create(r->zkc, path, "{\"version\":5,\"host\":\"b\",\"port\":9092}", 0), ZOK);
    }
    cr_assert_eq(km_zkc_create(r->zkc, "/kafka/controller_epoch", "7", 0), ZOK);
    cr_assert_eq(km_zkc_create(r->zkc, "/kafka/controller", OTHER_CONTROLLER, 0), ZOK);
}

static void grig_start(grig *r, const km_rsim_config *base)
{
    char err[512];
    r->zks = km_zks_start(1, NULL, 0, err, sizeof err);
    cr_assert(r->zks, "ZooKeeper: %s", err);
    snprintf(r->hosts, sizeof r->hosts, "%s/kafka", km_zks_hosts(r->zks, -1));
    seed_other_cluster(r);
    r->tmp = km_test_tmpdir("clusterguard");
    km_gen_opts g = {.brokers = 3, .topics = 2, .partitions = 1, .zk_migration = true, .seed = 5};
    size_t len;
    uint8_t *log = tq_gen_log(r->tmp, &g, &len);
    km_err e = {{0}};
    r->loop = ev_loop_new(0);
    tq_make_sims(r->loop, 2, base, r->sims, NULL, 0);
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(km_rsim_append(r->sims[i], log, len, &e), 0, "%s", e.msg);
        km_rsim_set_leader(r->sims[i], 1, 1);
    }
    free(log);
    char servers[128];
    snprintf(servers, sizeof servers, "127.0.0.1:%u,127.0.0.1:%u", km_rsim_port(r->sims[0]), km_rsim_port(r->sims[1]));
    const char *kv[] = {"metadata.source", "quorum", "controller.quorum.bootstrap.servers", servers,
                        "zookeeper.connect", r->hosts, "brokers.enabled", "false", "zk.force", "true", NULL};
    km_config cfg;
    km_config_defaults(&cfg);
    for (int i = 0; kv[i]; i += 2)
        cr_assert_eq(km_config_set(&cfg, kv[i], kv[i + 1], "test", &e), 0, "%s", e.msg);
    r->d = km_daemon_new(r->loop, &cfg, &e);
    km_config_free(&cfg);
    cr_assert(r->d, "%s", e.msg);
    km_daemon_start(r->d);
}

static void grig_stop(grig *r)
{
    km_daemon_free(r->d);
    for (int i = 0; i < 2; i++)
        km_rsim_free(r->sims[i]);
    ev_loop_destroy(r->loop);
    km_zkc_close(r->zkc);
    km_zks_stop(r->zks);
    km_test_rmtree(r->tmp);
    free(r->tmp);
}

static void stop_loop(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)t, (void)revents;
    ev_break(loop, EVBREAK_ALL);
}

static void poll_fatal(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)revents;
    km_daemon_status st;
    km_daemon_get_status(t->data, &st);
    if (st.fatal)
        ev_break(loop, EVBREAK_ALL);
}

/* Runs the loop until the daemon stops or `seconds` pass (a bound, not a measure). */
static void run_for(grig *r, double seconds)
{
    ev_timer guard, poll;
    ev_timer_init(&guard, stop_loop, seconds, 0);
    ev_timer_init(&poll, poll_fatal, 0.05, 0.05);
    poll.data = r->d;
    ev_timer_start(r->loop, &guard);
    ev_timer_start(r->loop, &poll);
    ev_run(r->loop, 0);
    ev_timer_stop(r->loop, &guard);
    ev_timer_stop(r->loop, &poll);
}

/* ZooKeeper's controller is still the other cluster's: nothing was written. */
static void assert_not_deposed(grig *r)
{
    char *data = NULL;
    int len = 0;
    struct Stat st;
    cr_assert_eq(km_zkc_get(r->zkc, "/kafka/controller_epoch", &data, &len, &st), ZOK);
    cr_expect_str_eq(data, "7", "/controller_epoch moved");
    cr_expect_eq(st.version, 0, "/controller_epoch was written");
    free(data);
    cr_assert_eq(km_zkc_get(r->zkc, "/kafka/controller", &data, &len, &st), ZOK);
    cr_expect_str_eq(data, OTHER_CONTROLLER, "/controller was overwritten");
    free(data);
    cr_expect_eq(km_zkc_get(r->zkc, "/kafka/migration", &data, &len, &st), ZNONODE, "/migration was written");
}

Test(cluster_guard, zk_force_never_deposes_another_clusters_controller, .timeout = 180)
{
    grig r = {0};
    grig_start(&r, NULL);
    run_for(&r, 60);
    km_daemon_status st;
    km_daemon_get_status(r.d, &st);
    cr_assert(st.fatal, "the daemon went on against another cluster's ZooKeeper (zk state %s)",
              st.zk_state ? st.zk_state : "none");
    cr_expect(strstr(st.fatal, "kmproxy-raftsim-cluster") && strstr(st.fatal, "OtherClusterId000000"),
              "the refusal does not name both cluster ids: %s", st.fatal);
    cr_expect(!strstr(st.fatal, "force"), "a cluster-id mismatch must not suggest --force: %s", st.fatal);
    assert_not_deposed(&r);
    grig_stop(&r);
}

/* A controller before Kafka 3.7 cannot tell the cluster id: without cluster.id nothing is claimed. */
Test(cluster_guard, no_claim_while_the_cluster_id_is_unknown, .timeout = 180)
{
    km_rsim_config base;
    km_rsim_config_init(&base);
    base.no_describe_cluster = true;
    grig r = {0};
    grig_start(&r, &base);
    run_for(&r, 8); /* the log is read and the claim would be made within this bound */
    km_daemon_status st;
    km_daemon_get_status(r.d, &st);
    cr_expect(st.image_offset >= 0, "the log was not read (image offset %lld)", (long long)st.image_offset);
    cr_expect(!st.zk_state, "the ZooKeeper bridge started (%s) without a cluster id", st.zk_state);
    assert_not_deposed(&r);
    grig_stop(&r);
}

/* This cluster's ZooKeeper before its first sync, holding a topic the image has not: the first sync
 * may delete nothing (zk.max.deletes unset), and zk.force overrides the migration-state guard but not
 * that one. Every guard runs on a read-only pass first, so the refusal comes before the claim. */
Test(cluster_guard, the_delete_limit_refuses_before_the_claim, .timeout = 180)
{
    g_cluster_id = "kmproxy-raftsim-cluster";
    grig r = {0};
    grig_start(&r, NULL);
    run_for(&r, 60);
    km_daemon_status st;
    km_daemon_get_status(r.d, &st);
    cr_assert(st.fatal, "the daemon went on (zk state %s)", st.zk_state ? st.zk_state : "none");
    cr_expect(strstr(st.fatal, "before any write") && strstr(st.fatal, "zk.max.deletes"), "%s", st.fatal);
    assert_not_deposed(&r);
    grig_stop(&r);
}

/* ---- the simulator's DescribeCluster answers what a Kafka 3.9 controller answers ------------------------- */

static int connect_loopback(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert(fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0, "connect to the simulator");
    return fd;
}

/* One request to the simulator on loop, over a plain socket; the answer's body decoded into rs. */
static void sim_ask(struct ev_loop *loop, uint16_t port, int16_t v, const km_describe_cluster_request *rq,
                    km_describe_cluster_response *rs, km_arena *a)
{
    int fd = connect_loopback(port);
    km_buf b, in;
    km_buf_init(&b);
    km_buf_init(&in);
    km_err err;
    cr_assert_eq(km_frame_request(KM_API_DESCRIBE_CLUSTER, v, 5, "kmproxy-test", rq, &b, &err), 0, "%s", err.msg);
    cr_assert_eq(write(fd, b.data, b.len), (ssize_t)b.len);
    for (int i = 0; i < 1000 && (in.len < 4 || in.len < 4 + km_be32(in.data)); i++) {
        ev_run(loop, EVRUN_NOWAIT);
        struct pollfd p = {fd, POLLIN, 0};
        uint8_t chunk[4096];
        ssize_t n = poll(&p, 1, 10) > 0 ? read(fd, chunk, sizeof chunk) : 0;
        cr_assert(n >= 0 && (n > 0 || !(p.revents & POLLIN)), "DescribeCluster v%d: the simulator closed", v);
        km_buf_put(&in, chunk, (size_t)n);
    }
    cr_assert(in.len >= 4 && in.len == 4 + km_be32(in.data), "DescribeCluster v%d: no answer", v);
    km_reader r;
    km_reader_init(&r, in.data + 4, in.len - 4);
    int32_t corr;
    cr_assert_eq(km_parse_response_header(&r, KM_API_DESCRIBE_CLUSTER, v, &corr, &err), 0, "%s", err.msg);
    cr_assert_eq(km_decode(&km_describe_cluster_response_desc, v, r.p + r.pos, km_reader_left(&r), rs, a, NULL, &err),
                 0, "%s", err.msg);
    km_buf_free(&b);
    km_buf_free(&in);
    close(fd);
}

/* ControllerApis.handleDescribeCluster and AuthHelper.computeDescribeClusterResponse (Kafka 3.9): for
 * EndpointType CONTROLLER the cluster id, the controllers as Brokers and the raft leader as ControllerId
 * (-1 when it is not among them); otherwise only an error (UNSUPPORTED_ENDPOINT_TYPE, MISMATCHED_ENDPOINT_TYPE,
 * or INVALID_REQUEST at v0), the other fields left at their schema defaults. */
Test(cluster_guard, raftsim_describe_cluster_answers_as_a_controller)
{
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    km_rsim *sims[2];
    tq_make_sims(loop, 2, NULL, sims, NULL, 0);
    km_rsim_set_leader(sims[0], 2, 3);
    km_arena a;
    km_arena_init(&a, 0);
    km_describe_cluster_request rq;
    km_describe_cluster_request_init(&rq);
    km_describe_cluster_response rs;
    rq.endpoint_type = 2;
    sim_ask(loop, km_rsim_port(sims[0]), 1, &rq, &rs, &a);
    cr_assert_eq(rs.error_code, 0);
    cr_expect_eq(rs.endpoint_type, 2);
    cr_expect(km_str_eq(rs.cluster_id, "kmproxy-raftsim-cluster"));
    cr_expect_eq(rs.controller_id, 2);
    cr_expect_eq(rs.cluster_authorized_operations, INT32_MIN);
    cr_assert_eq(rs.brokers.count, 2, "the controllers are the Brokers of the answer");
    for (int i = 0; i < 2; i++) {
        cr_expect_eq(rs.brokers.items[i].broker_id, i + 1);
        cr_expect(km_str_eq(rs.brokers.items[i].host, "127.0.0.1"));
        cr_expect_eq(rs.brokers.items[i].port, km_rsim_port(sims[i]));
        cr_expect_lt(rs.brokers.items[i].rack.len, 0, "no rack: null");
    }
    km_rsim_set_leader(sims[0], 7, 4); /* a leader without a registration */
    sim_ask(loop, km_rsim_port(sims[0]), 1, &rq, &rs, &a);
    cr_expect_eq(rs.controller_id, -1);
    static const struct { int16_t v; int8_t type; int16_t code; } bad[] = {{1, 1, 114}, {1, 9, 113}, {0, 1, 42}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rq.endpoint_type = bad[i].type;
        sim_ask(loop, km_rsim_port(sims[0]), bad[i].v, &rq, &rs, &a);
        cr_expect_eq(rs.error_code, bad[i].code, "v%d type %d: error %d", bad[i].v, bad[i].type, rs.error_code);
        cr_expect(rs.cluster_id.len <= 0 && rs.brokers.count == 0 && rs.controller_id == -1);
        cr_expect(bad[i].v == 0 || rs.endpoint_type == 1, "an error answer keeps EndpointType's default (1)");
    }
    km_arena_free(&a);
    for (int i = 0; i < 2; i++)
        km_rsim_free(sims[i]);
    ev_loop_destroy(loop);
}

typedef struct asked { bool done; char id[128], why[600]; } asked;

static void on_asked(const char *cluster_id, const km_err *why, void *ud)
{
    asked *a = ud;
    a->done = true;
    snprintf(a->id, sizeof a->id, "%s", cluster_id ? cluster_id : "");
    snprintf(a->why, sizeof a->why, "%s", why ? why->msg : "");
}

/* The cluster-id question against controllers that refuse it before looking at it (handleDescribeCluster:
 * metadata.version, then ALTER on the CLUSTER): no id, and a reason that says what to do. */
static void ask_refused(int16_t code, const char *want, const char *want2)
{
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    km_rsim_config base;
    km_rsim_config_init(&base);
    base.describe_cluster_error = code;
    km_rsim *sims[2];
    char servers[128];
    tq_make_sims(loop, 2, &base, sims, servers, sizeof servers);
    asked a = {0};
    km_err err;
    km_quorum_ask *ask = km_quorum_ask_cluster_id(loop, servers, NULL, NULL, 10, on_asked, &a, &err);
    cr_assert(ask, "%s", err.msg);
    for (int i = 0; i < 2000 && !a.done; i++)
        ev_run(loop, EVRUN_ONCE);
    cr_assert(a.done, "no answer to the cluster-id question");
    cr_expect(!a.id[0], "a cluster id from a refusal: %s", a.id);
    cr_expect(strstr(a.why, want) && strstr(a.why, want2), "error %d: the reason does not say '%s' and '%s': %s",
              code, want, want2, a.why);
    for (int i = 0; i < 2; i++)
        km_rsim_free(sims[i]);
    ev_loop_destroy(loop);
}

Test(cluster_guard, describe_cluster_refusals_say_what_to_do)
{
    ask_refused(31, "not authorized: the principal needs ALTER on the CLUSTER", "set cluster.id");
    ask_refused(35, "metadata.version is older than 3.7-IV0", "set cluster.id");
}
