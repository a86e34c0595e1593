/* A single (non-HA) daemon restarted by its operator - systemctl restart, an upgrade, a reboot, a
 * crash - while the KRaft leader epoch has not changed. /controller is persistent in KRaft mode, so
 * the new process finds its predecessor's claim at its own KRaft epoch. Kafka's epoch rule
 * (KafkaZkClient.tryRegisterKRaftControllerAsActiveController) refuses a same-epoch /controller;
 * the claim record beside the election path (`/kmproxy/active`, written in the claim's own multi)
 * proves that one is kmproxy's, so the restart claims again (a new /controller_epoch). A
 * same-epoch /controller that kmproxy did not write, or a /controller_epoch moved past the record,
 * is still refused: exit 2 (systemd does not restart it) with one plain log line. Real ZooKeeper. */
#include "ops_daemon.h"
#include "km_testsupport.h"

#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static km_zks *zs;

static void start_zk(void) { zs = ops_zk_start(); }

static void stop_zk(void) { km_zks_stop(zs); }

TestSuite(daemon_restart, .init = start_zk, .fini = stop_zk, .timeout = 300);

static const char *const SETTINGS[] = {"brokers.enabled=false", NULL};

static char *get(km_zkc *c, const char *path, struct Stat *st)
{
    char *data = NULL;
    int len = 0;
    cr_assert_eq(km_zkc_get(c, path, &data, &len, st), ZOK, "no %s", path);
    return data;
}

static int get_int(km_zkc *c, const char *path)
{
    char *data = get(c, path, NULL);
    int v = atoi(data);
    free(data);
    return v;
}

/* Waits for the instance to exit on its own; its wait status (-1: still running after timeout_s). */
static int wait_exit(inst *in, int timeout_s)
{
    int status = -1;
    for (int tries = 0; tries < timeout_s * 10; tries++, usleep(100000))
        if (waitpid(in->p.pid, &status, WNOHANG) == in->p.pid) {
            in->p.pid = -1;
            return status;
        }
    return -1;
}

static void run_until_ready(inst *in, env *e, const char *tag, const char *zk)
{
    start(in, e, tag, zk, SETTINGS);
    free(scrape_until(in, "/readyz", 200, "\"ready\":true", 60));
}

/* Runs, stops with sig, starts again on the same log: the second one claims over its
 * predecessor's standing claim (same KRaft epoch) and becomes ready. */
static void restart_claims_again(int sig, const char *chroot)
{
    env e;
    env_init(&e);
    char zk[160];
    snprintf(zk, sizeof zk, "%s/%s", km_zks_hosts(zs, 0), chroot);
    inst a, b;
    run_until_ready(&a, &e, "first", zk);
    km_zkc *c = km_zkc_open(zk, NULL, 10000);
    cr_assert(c);
    int epoch = get_int(c, "/controller_epoch");
    char *ctrl = get(c, "/controller", NULL);
    if (sig == SIGTERM)
        stop_cleanly(&a);
    else
        ops_stop(&a.p, sig);

    run_until_ready(&b, &e, "second", zk);
    char *log = ops_slurp(b.log_file);
    cr_expect(!strstr(log, "refused"), "the restart was refused: %s", log);
    free(log);
    cr_expect_eq(get_int(c, "/controller_epoch"), epoch + 1, "the restart did not claim again");
    char *now = get(c, "/controller", NULL), *record = get(c, "/kmproxy/active", NULL);
    char want[64];
    snprintf(want, sizeof want, "\"controller_epoch\":%d,", epoch + 1);
    cr_expect(strstr(record, want), "the claim record does not say epoch %d: %s", epoch + 1, record);
    const char *ke = strstr(ctrl, "\"kraftControllerEpoch\"");
    cr_assert(ke, "%s", ctrl);
    cr_expect(strstr(now, ke), "the KRaft epoch changed: %s then %s", ctrl, now);
    free(now);
    free(record);
    free(ctrl);
    stop_cleanly(&b);
    km_zkc_close(c);
    env_free(&e);
}

Test(daemon_restart, a_restart_after_sigterm_claims_again_at_the_same_kraft_epoch)
{
    restart_claims_again(SIGTERM, "restart-term");
}

Test(daemon_restart, a_restart_after_kill9_claims_again_at_the_same_kraft_epoch)
{
    restart_claims_again(SIGKILL, "restart-kill");
}

/* Starts on zk and expects exit 2, the log naming `needle`, and ZooKeeper's claim untouched. */
static void expect_refused(env *e, const char *tag, const char *zk, km_zkc *c, const char *needle)
{
    struct Stat before, after;
    char *ctrl = get(c, "/controller", &before);
    inst in;
    start(&in, e, tag, zk, SETTINGS);
    int status = wait_exit(&in, 60);
    char *log = ops_slurp(in.log_file);
    cr_expect(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 2, "%s: status %#x, not exit 2: %s", tag,
              status, log);
    cr_expect(strstr(log, "stopping: ZooKeeper claim refused: ") && strstr(log, needle),
              "%s: no plain refusal naming '%s': %s", tag, needle, log);
    free(log);
    if (in.p.pid > 0)
        ops_stop(&in.p, SIGKILL);
    char *now = get(c, "/controller", &after);
    cr_expect_str_eq(now, ctrl, "%s: /controller was claimed over", tag);
    cr_expect_eq(after.mzxid, before.mzxid, "%s: /controller was rewritten", tag);
    free(now);
    free(ctrl);
}

/* Someone else's claim at our KRaft epoch (no claim record: kmproxy never claimed this cluster),
 * and a /controller_epoch moved past the record of kmproxy's last claim: both refused. */
Test(daemon_restart, a_same_epoch_claim_kmproxy_did_not_make_is_still_refused)
{
    env e;
    env_init(&e);
    char zk[160], zk2[160];
    snprintf(zk, sizeof zk, "%s/restart-learn", km_zks_hosts(zs, 0));
    snprintf(zk2, sizeof zk2, "%s/restart-foreign", km_zks_hosts(zs, 0));
    inst a;
    run_until_ready(&a, &e, "learn", zk); /* what our claim looks like: node id and KRaft epoch */
    stop_cleanly(&a);
    km_zkc *c = km_zkc_open(zk, NULL, 10000);
    cr_assert(c);
    char *ours = get(c, "/controller", NULL);
    const char *ke = strstr(ours, "\"brokerid\"");
    cr_assert(ke, "%s", ours);
    char theirs[256];
    snprintf(theirs, sizeof theirs, "{\"version\":2,\"timestamp\":\"1\",%s", ke); /* same node and epoch */

    /* a cluster kmproxy never claimed: no record */
    km_zkc *root = km_zkc_open(km_zks_hosts(zs, 0), NULL, 10000);
    cr_assert(root);
    cr_assert_eq(km_zkc_mkdirs(root, "/restart-foreign"), ZOK);
    cr_assert_eq(km_zkc_create(root, "/restart-foreign/controller_epoch", "3", 0), ZOK);
    cr_assert_eq(km_zkc_create(root, "/restart-foreign/controller", theirs, 0), ZOK);
    km_zkc_close(root);
    km_zkc *c2 = km_zkc_open(zk2, NULL, 10000);
    cr_assert(c2);
    expect_refused(&e, "foreign", zk2, c2, "/controller is held by KRaft controller");
    cr_expect_eq(get_int(c2, "/controller_epoch"), 3);
    /* the runbook's way out once the operator knows that claim is kmproxy's (an upgrade from a
     * version that kept no record): a record for the current /controller_epoch */
    cr_assert_eq(km_zkc_mkdirs(c2, "/kmproxy"), ZOK);
    cr_assert_eq(km_zkc_create(c2, "/kmproxy/active", "{\"version\":1,\"instance\":\"manual\",\"controller_epoch\":3}",
                               0), ZOK);
    inst m;
    run_until_ready(&m, &e, "manual", zk2);
    stop_cleanly(&m);
    cr_expect_eq(get_int(c2, "/controller_epoch"), 4);
    km_zkc_close(c2);

    /* a cluster kmproxy claimed, then another writer claimed at our KRaft epoch (record left behind) */
    struct Stat st;
    int epoch = get_int(c, "/controller_epoch");
    char bumped[16];
    snprintf(bumped, sizeof bumped, "%d", epoch + 1);
    free(get(c, "/controller_epoch", &st));
    cr_assert_eq(km_zkc_set(c, "/controller_epoch", bumped, st.version, NULL), ZOK);
    cr_assert_eq(km_zkc_set(c, "/controller", theirs, -1, NULL), ZOK);
    expect_refused(&e, "past-record", zk, c, "a writer outside kmproxy owns ZooKeeper: /controller_epoch is");
    cr_expect_eq(get_int(c, "/controller_epoch"), epoch + 1);
    free(ours);
    km_zkc_close(c);
    env_free(&e);
}
