/* `kmproxy zk diff|sync` never report a result they did not compute: with ZooKeeper unreachable they
 * give up after --zookeeper-connect-timeout-ms (default: the session timeout) with exit 1 naming the
 * address, say on stderr what they are waiting for, and a signal ends them with 130/143 and
 * "interrupted", never a summary. */
#include "km_testsupport.h"
#include "faultproxy.h"
#include "ops_daemon.h"
#include "ops_util.h"

#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

typedef struct cli_env {
    env e;
    char hosts[64];   /* nothing listens there */
} cli_env;

static void cli_env_init(cli_env *c)
{
    env_init(&c->e);
    snprintf(c->hosts, sizeof c->hosts, "127.0.0.1:%d/kafka", ops_dead_port());
}

static void expect_unreachable(cli_env *e, const char *sub, const char *timeout_ms)
{
    char *argv[] = {(char *)km_test_binary(), "zk", (char *)sub, "--zookeeper", e->hosts, "--metadata", e->e.metadata,
                    timeout_ms ? "--zookeeper-connect-timeout-ms" : NULL, (char *)timeout_ms, NULL};
    char *out = NULL, *err = NULL;
    int rc = km_test_run(argv, NULL, 0, &out, NULL, &err);
    cr_expect_eq(rc, 1, "zk %s: exit %d; stderr: %s", sub, rc, err);
    char named[128];
    snprintf(named, sizeof named, "no ZooKeeper session with %s within %s ms", e->hosts, timeout_ms ? timeout_ms : "10000");
    cr_expect(strstr(err, named), "zk %s: stderr does not say '%s': %s", sub, named, err);
    cr_expect(strstr(err, "connecting to ZooKeeper at"), "zk %s: no progress line on stderr: %s", sub, err);
    cr_expect(!strstr(out, "zk diff:") && !strstr(out, "zk sync:"), "zk %s printed a summary: %s", sub, out);
    free(out);
    free(err);
}

Test(cli_zk, unreachable_zookeeper_exits_1_naming_the_address, .timeout = 120)
{
    cli_env e;
    cli_env_init(&e);
    expect_unreachable(&e, "diff", "3000");
    expect_unreachable(&e, "sync", "3000");
    env_free(&e.e);
}

Test(cli_zk, without_the_option_the_deadline_is_the_session_timeout, .timeout = 120)
{
    cli_env e;
    cli_env_init(&e);
    expect_unreachable(&e, "diff", NULL);
    env_free(&e.e);
}

/* Runs `zk <sub>` against the dead address, waits until it says it is connecting, sends sig. */
static void expect_interrupted(cli_env *e, const char *sub, int sig, int code, const char *signame)
{
    const char *args[] = {"zk", sub, "--zookeeper", e->hosts, "--metadata", e->e.metadata,
                          "--zookeeper-connect-timeout-ms", "600000", NULL};
    char tag[64];
    snprintf(tag, sizeof tag, "%s-%d", sub, sig);
    ops_proc p;
    ops_spawn(&p, e->e.dir, tag, args);
    /* the line is written after the signal handlers are armed */
    cr_assert(ops_wait_for(&p, p.err, "connecting to ZooKeeper at", 1, 60), "zk %s never said it was connecting", sub);
    int status = ops_stop(&p, sig);
    char *o = ops_slurp(p.out), *r = ops_slurp(p.err);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == code, "zk %s after %s: status %#x (want exit %d); %s", sub,
              signame, status, code, r);
    char said[64];
    snprintf(said, sizeof said, "interrupted by %s", signame);
    cr_expect(strstr(r, said), "zk %s: stderr does not say '%s': %s", sub, said, r);
    cr_expect(!strstr(o, "zk diff:") && !strstr(o, "zk sync:"), "zk %s printed a summary: %s", sub, o);
    free(o);
    free(r);
}

Test(cli_zk, a_signal_ends_the_run_with_130_or_143_and_no_summary, .timeout = 120)
{
    cli_env e;
    cli_env_init(&e);
    expect_interrupted(&e, "diff", SIGTERM, 143, "SIGTERM");
    expect_interrupted(&e, "diff", SIGINT, 130, "SIGINT");
    expect_interrupted(&e, "sync", SIGTERM, 143, "SIGTERM");
    expect_interrupted(&e, "sync", SIGINT, 130, "SIGINT");
    env_free(&e.e);
}

/* Against a ZooKeeper that stops answering writes (the session stays up): zk sync says every few
 * seconds how far the sync is, and a signal then ends it with 143 and no summary. */
Test(cli_zk, a_stalled_sync_shows_progress_and_a_signal_leaves_no_summary, .timeout = 120)
{
    cli_env e;
    cli_env_init(&e);
    km_zks *zs = ops_zk_start();
    char perr[256] = "";
    km_fp *fp = km_fp_start(km_zks_port(zs, 0), perr, sizeof perr);
    cr_assert(fp, "%s", perr);
    km_fp_arm(fp, KM_FP_MULTI_ANY, KM_FP_SWALLOW, NULL, 2); /* the claim's two multis go through */
    snprintf(e.hosts, sizeof e.hosts, "%s/stalled", km_fp_hosts(fp));
    const char *args[] = {"zk", "sync", "--zookeeper", e.hosts, "--metadata", e.e.metadata, NULL};
    ops_proc p;
    ops_spawn(&p, e.e.dir, "stalled", args);
    cr_assert(ops_wait_for(&p, p.err, "kmproxy zk sync: writing: 0/", 2, 60), "%s", ops_slurp(p.err));
    int status = ops_stop(&p, SIGTERM);
    char *o = ops_slurp(p.out), *r = ops_slurp(p.err);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 143, "status %#x: %s", status, r);
    cr_expect(strstr(r, "interrupted by SIGTERM while writing: no result"), "%s", r);
    cr_expect(!strstr(o, "zk sync:"), "a summary: %s", o);
    free(o);
    free(r);
    km_fp_stop(fp);
    km_zks_stop(zs);
    env_free(&e.e);
}
