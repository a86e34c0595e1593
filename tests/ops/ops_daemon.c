/* Daemon instances for the operations tests (see ops_daemon.h). */
#include "ops_daemon.h"
#include "km_codec.h"
#include "km_image.h"
#include "km_metalog.h"
#include "km_testsupport.h"
#include "zksecmode.h"

#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

km_zks *ops_zk_start(void)
{
    char err[512] = "";
    km_zks *zs = km_zksec_start(1, err, sizeof err); /* KM_TEST_ZK_SECURE picks plain or SASL */
    cr_assert(zs, "ZooKeeper: %s", err);
    return zs;
}

void env_init(env *e)
{
    e->dir = km_test_tmpdir("ops-health");
    snprintf(e->metadata, sizeof e->metadata, "%s/log", e->dir);
    char *gen[] = {(char *)km_test_binary(), "metadata", "gen", "--out", e->metadata, "--brokers", "3", "--topics", "3",
                   "--partitions", "2", "--zk-migration", NULL};
    cr_assert_eq(km_test_run(gen, NULL, 0, NULL, NULL, NULL), 0);
}

void env_free(env *e)
{
    km_test_rmtree(e->dir);
    free(e->dir);
}

/* Starts `kmproxy run` with its metrics on a free port; extra: more key=value settings (NULL-ended).
 * On a secured ZooKeeper (KM_TEST_ZK_SECURE) it authenticates and sets Kafka's ACLs (zksecmode.h). */
void start(inst *in, env *e, const char *tag, const char *zk, const char *const *extra)
{
    static char sets[16][700];
    const char *args[40] = {"run"};
    int n = 1, k = 0;
    in->port = ops_dead_port();
    snprintf(in->log_file, sizeof in->log_file, "%s/%s.log", e->dir, tag);
    snprintf(sets[k++], sizeof sets[0], "metadata.source=dir");
    snprintf(sets[k++], sizeof sets[0], "metadata.dir=%s", e->metadata);
    if (zk) /* NULL: a check-only instance (docs/verify.md) */
        snprintf(sets[k++], sizeof sets[0], "zookeeper.connect=%s", zk);
    snprintf(sets[k++], sizeof sets[0], "metrics.listen=127.0.0.1:%d", in->port);
    snprintf(sets[k++], sizeof sets[0], "log.file=%s", in->log_file);
    /* the secured ZooKeeper's client settings first: a test's own (later) win */
    for (const char *const *sec = km_zksec_daemon_settings(e->dir); *sec; sec++)
        snprintf(sets[k++], sizeof sets[0], "%s", *sec);
    for (int i = 0; extra && extra[i]; i++)
        snprintf(sets[k++], sizeof sets[0], "%s", extra[i]);
    for (int i = 0; i < k; i++) {
        args[n++] = "--set";
        args[n++] = strdup(sets[i]);
    }
    args[n] = NULL;
    ops_spawn(&in->p, e->dir, tag, args);
    for (int i = 2; i < n; i += 2)
        free((char *)args[i]);
    cr_assert(ops_wait_for(&in->p, in->log_file, "metrics on http://", 1, 60), "%s did not start: %s", tag,
              ops_slurp(in->p.err));
}

/* Scrapes path until its body holds `needle` (and the status is `status`, when non-zero). */
char *scrape_until(inst *in, const char *path, int status, const char *needle, int timeout_s)
{
    char *body = NULL;
    for (int waited = 0; waited < timeout_s * 10; waited++) {
        free(body);
        int got = ops_curl(in->port, path, &body);
        if ((!status || got == status) && strstr(body, needle))
            return body;
        usleep(100000);
    }
    cr_assert_fail("%s never answered %d with '%s'; last: %s; log: %s", path, status, needle, body,
                   ops_slurp(in->log_file));
    return NULL;
}

void stop_cleanly(inst *in)
{
    int status = ops_stop(&in->p, SIGTERM);
    char *log = ops_slurp(in->log_file), *err = ops_slurp(in->p.err);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "SIGTERM: status %#x; log %s; stderr %s", status, log,
              err);
    cr_expect(strstr(log, "shutting down") && strstr(log, "stopped:"), "%s", log);
    free(log);
    free(err);
}

double metric(const char *text, const char *name)
{
    char key[128];
    snprintf(key, sizeof key, "\n%s ", name);
    const char *at = strstr(text, key);
    cr_assert(at, "no %s in %s", name, text);
    return atof(at + strlen(key));
}

/* One more batch at the end of the log: a topic config change. */
void append_record(const char *log, const char *value)
{
    km_err err = {{0}};
    km_metalog_writer *w = km_metalog_writer_open_dir(log, &(km_metalog_writer_opts){.leader_epoch = 1}, &err);
    cr_assert(w, "%s", err.msg);
    km_config_record cfg;
    km_config_record_init(&cfg);
    cfg.resource_type = KM_CFG_TOPIC;
    cfg.resource_name = km_cstr("topic-0");
    cfg.name = km_cstr("retention.ms");
    cfg.value = km_cstr(value);
    km_metalog_entry entry[1] = {{&km_config_record_desc, 0, &cfg, -1}};
    int64_t base = -1;
    cr_assert_eq(km_metalog_writer_append(w, entry, 1, &base, &err), 0, "%s", err.msg);
    cr_assert_eq(km_metalog_writer_finish(w, &err), 0, "%s", err.msg);
}

