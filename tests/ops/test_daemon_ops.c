/* The daemon as an operator runs it: never silent while ZooKeeper is unreachable, /healthz and
 * /readyz scraped with curl, SIGTERM and SIGHUP. */
#include "km_testsupport.h"
#include "ops_util.h"

#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

typedef struct daemon_env {
    char *dir;
    char metadata[512], zk[64];
} daemon_env;

static void env_init(daemon_env *e, const char *zk_hosts)
{
    e->dir = km_test_tmpdir("ops-daemon");
    snprintf(e->metadata, sizeof e->metadata, "%s/log", e->dir);
    if (zk_hosts)
        snprintf(e->zk, sizeof e->zk, "%s", zk_hosts);
    else
        snprintf(e->zk, sizeof e->zk, "127.0.0.1:%d/kafka", ops_dead_port());
    char *gen[] = {(char *)km_test_binary(), "metadata", "gen", "--out", e->metadata, "--brokers", "3", "--topics", "2",
                   "--partitions", "1", NULL};
    cr_assert_eq(km_test_run(gen, NULL, 0, NULL, NULL, NULL), 0);
}

static void env_free(daemon_env *e)
{
    km_test_rmtree(e->dir);
    free(e->dir);
}

Test(daemon_ops, an_unreachable_zookeeper_is_reported_with_backoff_until_sigterm, .timeout = 120)
{
    daemon_env e;
    env_init(&e, NULL);
    char md[600], zk[100];
    snprintf(md, sizeof md, "metadata.dir=%s", e.metadata);
    snprintf(zk, sizeof zk, "zookeeper.connect=%s", e.zk);
    const char *args[] = {"run", "--set", md, "--set", zk, "--set", "brokers.enabled=false", NULL};
    ops_proc p;
    ops_spawn(&p, e.dir, "run", args);
    char said[128];
    snprintf(said, sizeof said, "no session with %s", e.zk);
    /* the first report, and the next one after the backoff */
    cr_assert(ops_wait_for(&p, p.err, said, 2, 60), "the daemon did not report '%s' twice", said);
    int status = ops_stop(&p, SIGTERM);
    char *err = ops_slurp(p.err);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %#x: %s", status, err);
    cr_expect(strstr(err, "check 1") && strstr(err, "check 2"), "%s", err);
    free(err);
    env_free(&e);
}
