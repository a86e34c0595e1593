/* Several kmproxy instances on one real ZooKeeper (ha.enabled): exactly one is active; kill -9 of
 * the active one makes a standby take over, and ZooKeeper ends equal to the image every time; a
 * SIGSTOPped active instance that wakes after its session expired is fenced, steps down and rejoins
 * as a standby without writing. Simulated brokers are not part of these runs (brokers.enabled=false). */
#include "km_testsupport.h"
#include "ops_daemon.h"
#include "ops_util.h"
#include "zkserver.h"

#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define KILL_ROUNDS 20

static km_zks *zs;

static void start_zk(void)
{
    char err[512] = "";
    zs = km_zks_start(1, NULL, 0, err, sizeof err);
    cr_assert(zs, "%s", err);
}

static void stop_zk(void) { km_zks_stop(zs); }

TestSuite(ha, .init = start_zk, .fini = stop_zk, .timeout = 600);

static const char *const HA_SETTINGS[] = {"ha.enabled=true", "zookeeper.session.timeout.ms=2000",
                                          "brokers.enabled=false", NULL};

static bool says(inst *in, const char *needle)
{
    char *body = NULL;
    ops_curl(in->port, "/readyz", &body);
    bool yes = body && strstr(body, needle);
    free(body);
    return yes;
}

/* Waits until one of n instances is the ready active one; returns its index. */
static int wait_active(inst *in, int n, int timeout_s)
{
    for (int tries = 0; tries < timeout_s * 10; tries++) {
        for (int i = 0; i < n; i++)
            if (in[i].p.pid > 0 && says(&in[i], "\"ready\":true,\"role\":\"active\""))
                return i;
        usleep(100000);
    }
    return -1;
}

static int controller_epoch(km_zkc *c)
{
    char *data = NULL;
    int len = 0;
    cr_assert_eq(km_zkc_get(c, "/controller_epoch", &data, &len, NULL), ZOK);
    int v = atoi(data);
    free(data);
    return v;
}

/* `kmproxy zk diff` finds nothing: ZooKeeper equals the image. */
static void expect_zk_equals_image(env *e, const char *zk, int round)
{
    char *argv[] = {(char *)km_test_binary(), "zk", "diff", "--zookeeper", (char *)zk, "--metadata", e->metadata,
                    NULL};
    char *out = NULL, *err = NULL;
    km_test_run(argv, NULL, 0, &out, NULL, &err);
    cr_expect(strstr(out, "zk diff: 0 missing in ZooKeeper, 0 different, 0 only in ZooKeeper"),
              "round %d: ZooKeeper differs from the image: %s %s", round, out, err);
    free(out);
    free(err);
}

Test(ha, kill9_of_the_active_one_hands_over_to_a_standby_every_time)
{
    env e;
    env_init(&e);
    char zk[128], tag[32];
    snprintf(zk, sizeof zk, "%s/ha-kill", km_zks_hosts(zs, 0));
    inst in[2];
    start(&in[0], &e, "kill-a0", zk, HA_SETTINGS);
    start(&in[1], &e, "kill-b0", zk, HA_SETTINGS);
    int active = wait_active(in, 2, 60);
    cr_assert_geq(active, 0, "no instance became active");
    km_zkc *c = km_zkc_open(zk, NULL, 10000);
    cr_assert(c);
    int epoch = controller_epoch(c);
    for (int round = 1; round <= KILL_ROUNDS; round++) {
        int standby = 1 - active;
        free(scrape_until(&in[standby], "/readyz", 200, "\"role\":\"standby\"", 60));
        char value[32];
        snprintf(value, sizeof value, "%d", 1000 + round);
        append_record(e.metadata, value); /* records keep coming while the active one dies */
        ops_stop(&in[active].p, SIGKILL);
        cr_assert_eq(wait_active(in, 2, 60), standby, "round %d: the standby did not take over", round);
        free(scrape_until(&in[standby], "/readyz", 200, "\"lag_records\":0,", 60));
        int now = controller_epoch(c);
        cr_expect_gt(now, epoch, "round %d: the takeover did not claim with a higher epoch", round);
        epoch = now;
        expect_zk_equals_image(&e, zk, round);
        snprintf(tag, sizeof tag, "kill-%c%d", active ? 'b' : 'a', round);
        start(&in[active], &e, tag, zk, HA_SETTINGS); /* the dead one comes back as a standby */
        free(scrape_until(&in[active], "/readyz", 200, "\"role\":\"standby\"", 60));
        cr_expect(says(&in[standby], "\"role\":\"active\""), "round %d: two active or none", round);
        active = standby;
    }
    km_zkc_close(c);
    stop_cleanly(&in[0]);
    stop_cleanly(&in[1]);
    env_free(&e);
}

Test(ha, a_sigstopped_active_one_is_fenced_when_it_wakes_and_rejoins_as_standby)
{
    env e;
    env_init(&e);
    char zk[128];
    snprintf(zk, sizeof zk, "%s/ha-stop", km_zks_hosts(zs, 0));
    inst in[2];
    const char *const settings[] = {"ha.enabled=true", "zookeeper.session.timeout.ms=2000", "brokers.enabled=false",
                                    "kmproxy.election.path=/ops/elect", NULL};
    start(&in[0], &e, "stop-a", zk, settings);
    cr_assert_eq(wait_active(in, 1, 60), 0);
    start(&in[1], &e, "stop-b", zk, settings);
    free(scrape_until(&in[1], "/readyz", 200, "\"role\":\"standby\"", 60));
    km_zkc *c = km_zkc_open(zk, NULL, 10000);
    cr_assert(c);
    char **nodes = NULL;
    int n_nodes = 0;
    cr_assert_eq(km_zkc_children(c, "/ops/elect", &nodes, &n_nodes), ZOK, "kmproxy.election.path is not used");
    cr_expect_eq(n_nodes, 2);
    km_zkc_free_strings(nodes, n_nodes);
    int before = controller_epoch(c);
    kill(in[0].p.pid, SIGSTOP);
    cr_assert_eq(wait_active(&in[1], 1, 60), 0, "the standby did not take over from the stopped one");
    int taken = controller_epoch(c);
    cr_expect_gt(taken, before);
    append_record(e.metadata, "4242");
    free(scrape_until(&in[1], "/readyz", 200, "\"lag_records\":0,", 60));
    kill(in[0].p.pid, SIGCONT);
    cr_assert(ops_wait_for(&in[0].p, in[0].log_file, "ha: stepping down to standby", 1, 60), "%s",
              ops_slurp(in[0].log_file));
    free(scrape_until(&in[0], "/readyz", 200, "\"role\":\"standby\"", 60));
    cr_expect(says(&in[1], "\"ready\":true,\"role\":\"active\""), "the new active one lost its place");
    cr_expect_eq(controller_epoch(c), taken, "the woken instance claimed again");
    char *m = NULL;
    cr_assert_eq(ops_curl(in[1].port, "/metrics", &m), 200);
    cr_expect(metric(m, "kmproxy_ha_active") == 1 && metric(m, "kmproxy_ha_takeovers_total") == 1 &&
              metric(m, "kmproxy_ha_active_since_seconds") > 0, "%s", m);
    free(m);
    cr_assert_eq(ops_curl(in[0].port, "/metrics", &m), 200);
    cr_expect(metric(m, "kmproxy_ha_active") == 0 && metric(m, "kmproxy_ha_takeovers_total") == 1 &&
              metric(m, "kmproxy_ha_active_since_seconds") == 0, "%s", m);
    free(m);
    expect_zk_equals_image(&e, zk, 0);
    km_zkc_close(c);
    stop_cleanly(&in[0]);
    stop_cleanly(&in[1]);
    env_free(&e);
}
