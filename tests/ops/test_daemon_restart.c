/* A single (non-HA) daemon restarted by its operator - systemctl restart, an upgrade, a reboot, a
 * crash - while the KRaft leader epoch has not changed. /controller is persistent in KRaft mode, so
 * the new process finds its predecessor's claim at its own KRaft epoch. Kafka's epoch rule
 * (KafkaZkClient.tryRegisterKRaftControllerAsActiveController) refuses a same-epoch /controller;
 * the claim record beside the election path (`/kmproxy/active`, written in the claim's own multi)
 * proves that one is kmproxy's, so the restart claims again (a new /controller_epoch). The KRaft
 * leader's own claim of its leadership (its migration driver's) is taken over; a second claim at our
 * KRaft epoch after ours, or a /controller_epoch moved past the record otherwise, is still refused:
 * exit 2 (systemd does not restart it) with one plain log line. Real ZooKeeper. */
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

/* Runs once on zk to learn what our claim looks like (node id and KRaft epoch); returns the /controller a KRaft
 * leader's own migration driver writes for that leadership (KafkaZkClient.tryRegisterKRaftControllerAsActive-
 * Controller: the same node and epoch, its own timestamp). */
static void learn_leader_claim(env *e, const char *zk, char *theirs, size_t cap)
{
    inst a;
    run_until_ready(&a, e, "learn", zk);
    stop_cleanly(&a);
    km_zkc *c = km_zkc_open(zk, NULL, 10000);
    cr_assert(c);
    char *ours = get(c, "/controller", NULL);
    const char *ke = strstr(ours, "\"brokerid\"");
    cr_assert(ke, "%s", ours);
    snprintf(theirs, cap, "{\"version\":2,\"timestamp\":\"1\",%s", ke);
    free(ours);
    km_zkc_close(c);
}

/* The deployment beside Kafka's own driver (docs/runbook.md): the KRaft leader's migration driver claimed
 * ZooKeeper for its leadership (/controller: the leader's node and epoch, /controller_epoch moved) and kmproxy
 * never claimed at that epoch - no record at all, or a record of an older KRaft epoch (the claim before the
 * election). kmproxy takes that claim over with a new /controller_epoch, so the driver's writes fail their
 * /controller_epoch check and it sends nothing (shown on a real cluster by test_realcluster). Before: refused. */
Test(daemon_restart, the_kraft_leaders_own_claim_is_taken_over)
{
    env e;
    env_init(&e);
    char zk[160], zk2[160], theirs[256];
    snprintf(zk, sizeof zk, "%s/restart-learn", km_zks_hosts(zs, 0));
    snprintf(zk2, sizeof zk2, "%s/restart-leader", km_zks_hosts(zs, 0));
    learn_leader_claim(&e, zk, theirs, sizeof theirs);
    km_zkc *root = km_zkc_open(km_zks_hosts(zs, 0), NULL, 10000);
    cr_assert(root);
    cr_assert_eq(km_zkc_mkdirs(root, "/restart-leader"), ZOK);
    cr_assert_eq(km_zkc_create(root, "/restart-leader/controller_epoch", "3", 0), ZOK);
    cr_assert_eq(km_zkc_create(root, "/restart-leader/controller", theirs, 0), ZOK);
    km_zkc_close(root);
    km_zkc *c2 = km_zkc_open(zk2, NULL, 10000);
    cr_assert(c2);
    inst m;
    run_until_ready(&m, &e, "leader", zk2);
    char *log = ops_slurp(m.log_file);
    cr_expect(strstr(log, "own claim at epoch") && strstr(log, "taking it over"), "no takeover said: %s", log);
    free(log);
    stop_cleanly(&m);
    cr_expect_eq(get_int(c2, "/controller_epoch"), 4);
    char *record = get(c2, "/kmproxy/active", NULL);
    cr_expect(strstr(record, "\"controller_epoch\":4,") && strstr(record, "\"kraft_controller_epoch\":"),
              "the record does not name our claim and its KRaft epoch: %s", record);
    free(record);

    /* a record of an older KRaft epoch (ours, before an election), then the new leader's own claim */
    struct Stat st;
    char *rec = get(c2, "/kmproxy/active", &st), older[512];
    const char *ke = strstr(rec, "\"kraft_controller_epoch\":");
    cr_assert(ke, "%s", rec);
    snprintf(older, sizeof older, "%.*s\"kraft_controller_epoch\":-1%s", (int)(ke - rec), rec, strchr(ke, ','));
    cr_assert_eq(km_zkc_set(c2, "/kmproxy/active", older, st.version, NULL), ZOK);
    free(rec);
    free(get(c2, "/controller_epoch", &st));
    cr_assert_eq(km_zkc_set(c2, "/controller_epoch", "9", st.version, NULL), ZOK);
    cr_assert_eq(km_zkc_set(c2, "/controller", theirs, -1, NULL), ZOK);
    run_until_ready(&m, &e, "leader-again", zk2);
    stop_cleanly(&m);
    cr_expect_eq(get_int(c2, "/controller_epoch"), 10);
    km_zkc_close(c2);
    env_free(&e);
}

/* A cluster kmproxy claimed at this KRaft epoch, then another writer claimed at that same epoch (a second
 * kmproxy cluster, a tool): that is no KRaft leader's first claim of its leadership. Refused, untouched. */
Test(daemon_restart, a_second_claim_at_our_kraft_epoch_after_ours_is_refused)
{
    env e;
    env_init(&e);
    char zk[160], theirs[256];
    snprintf(zk, sizeof zk, "%s/restart-foreign", km_zks_hosts(zs, 0));
    learn_leader_claim(&e, zk, theirs, sizeof theirs);
    km_zkc *c = km_zkc_open(zk, NULL, 10000);
    cr_assert(c);
    struct Stat st;
    int epoch = get_int(c, "/controller_epoch");
    char bumped[16];
    snprintf(bumped, sizeof bumped, "%d", epoch + 1);
    free(get(c, "/controller_epoch", &st));
    cr_assert_eq(km_zkc_set(c, "/controller_epoch", bumped, st.version, NULL), ZOK);
    cr_assert_eq(km_zkc_set(c, "/controller", theirs, -1, NULL), ZOK);
    expect_refused(&e, "past-record", zk, c, "a writer outside kmproxy owns ZooKeeper: /controller_epoch is");
    cr_expect_eq(get_int(c, "/controller_epoch"), epoch + 1);
    km_zkc_close(c);
    env_free(&e);
}
