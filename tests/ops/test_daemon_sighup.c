/* SIGHUP and a changed configuration file (issue 27 item 8): `kmproxy run --config FILE`, the file
 * edited, SIGHUP: the log names every changed key and says it needs a restart; a changed log.file
 * is applied (the log goes on at the new path); a file that no longer reads changes nothing and
 * says why. ZooKeeper is unreachable: the daemon need not be ready for any of it. */
#include "km_testsupport.h"
#include "ops_daemon.h"
#include "ops_util.h"

#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

TestSuite(daemon_sighup, .timeout = 240);

/* The daemon's configuration file: the keys every run needs, then `more` (lines, may be ""). */
static void write_config(const char *path, const env *e, int zk_port, int metrics_port, const char *log,
                         const char *more)
{
    FILE *f = fopen(path, "w");
    cr_assert(f, "%s", path);
    fprintf(f, "metadata.source=dir\nmetadata.dir=%s\nzookeeper.connect=127.0.0.1:%d/kafka\nbrokers.enabled=false\n"
               "metrics.listen=127.0.0.1:%d\nlog.file=%s\n%s", e->metadata, zk_port, metrics_port, log, more);
    fclose(f);
}

Test(daemon_sighup, changed_keys_are_named_as_needing_a_restart)
{
    env e;
    env_init(&e);
    char conf[600], log[600], moved[600];
    snprintf(conf, sizeof conf, "%s/kmproxy.properties", e.dir);
    snprintf(log, sizeof log, "%s/hup.log", e.dir);
    snprintf(moved, sizeof moved, "%s/hup-moved.log", e.dir);
    int zk = ops_dead_port(), port = ops_dead_port();
    write_config(conf, &e, zk, port, log, "health.max.lag.records=1000\n");
    ops_proc p;
    ops_spawn(&p, e.dir, "hup", (const char *const[]){"run", "--config", conf, "--set", "log.level=info", NULL});
    cr_assert(ops_wait_for(&p, log, "metrics on http://", 1, 60), "did not start: %s", ops_slurp(p.err));

    /* nothing changed: said so, nothing needs a restart */
    kill(p.pid, SIGHUP);
    cr_assert(ops_wait_for(&p, log, "SIGHUP: configuration read again: no key changed", 1, 60), "%s", ops_slurp(log));

    /* two keys changed, one added: each named, a restart needed; the running value stays */
    write_config(conf, &e, zk, port, log, "health.max.lag.records=5\nzookeeper.session.timeout.ms=30000\n");
    kill(p.pid, SIGHUP);
    cr_assert(ops_wait_for(&p, log, "need a restart", 1, 60), "%s", ops_slurp(log));
    char *text = ops_slurp(log);
    const char *line = strstr(text, "need a restart");
    cr_expect(strstr(line, "health.max.lag.records") && strstr(line, "zookeeper.session.timeout.ms") &&
              !strstr(line, "metadata.dir") && !strstr(line, "log.level"), "%s", line);
    free(text);

    /* log.file changed: applied; the line saying so is in the new file */
    write_config(conf, &e, zk, port, moved, "health.max.lag.records=5\nzookeeper.session.timeout.ms=30000\n");
    kill(p.pid, SIGHUP);
    cr_assert(ops_wait_for(&p, moved, "SIGHUP: log.file changed: logging to", 1, 60), "%s", ops_slurp(log));
    text = ops_slurp(moved); /* the others still differ from what runs: named again */
    cr_expect(strstr(text, "need a restart") && strstr(text, "health.max.lag.records"), "%s", text);
    free(text);

    /* a file that no longer reads: nothing changes, and the log says why */
    write_config(conf, &e, zk, port, moved, "health.max.lag.records=lots\n");
    kill(p.pid, SIGHUP);
    cr_assert(ops_wait_for(&p, moved, "the configuration does not read", 1, 60), "%s", ops_slurp(moved));
    text = ops_slurp(moved);
    cr_expect(strstr(text, "health.max.lag.records"), "%s", text);
    free(text);

    int status = ops_stop(&p, SIGTERM);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d: %s", status, ops_slurp(p.err));
    env_free(&e);
}
