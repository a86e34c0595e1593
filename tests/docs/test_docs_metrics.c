/* What /metrics really exports, from a running daemon and a running proxy: every family has # HELP and
 * # TYPE, docs/metrics.md is generated from it and current (regenerate: make docs), and every metric the
 * Grafana dashboard and the Prometheus rules name is one of them. */
#include "docs_metrics.h"
#include "docs_stack.h"
#include "docs_util.h"
#include "km_testsupport.h"

#include <criterion/criterion.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *const SOURCES[] = {"daemon", "proxy"};

static docs_families *scrape_families(void)
{
    docs_scrapes s;
    docs_scrape_daemon_and_proxy(&s);
    docs_families *fs = calloc(1, sizeof *fs);
    docs_families_add(fs, s.daemon, 0);
    docs_families_add(fs, s.proxy, 1);
    docs_scrapes_free(&s);
    return fs;
}

/* `make docs` copies this file over docs/metrics.md. */
static void write_generated(const char *md)
{
    char dir[700], path[800], bin[600];
    snprintf(bin, sizeof bin, "%s", km_test_binary());
    snprintf(dir, sizeof dir, "%s/generated-docs", dirname(bin));
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/metrics.md", dir);
    FILE *f = fopen(path, "w");
    cr_assert(f, "cannot write %s", path);
    fputs(md, f);
    fclose(f);
}

Test(docs_metrics, metrics_md_is_what_daemon_and_proxy_export, .timeout = 240)
{
    docs_families *fs = scrape_families();
    cr_expect_str_empty(fs->problems, "/metrics: %s", fs->problems);
    char *md = docs_metrics_markdown(fs, SOURCES, 2);
    write_generated(md);
    char path[1024];
    snprintf(path, sizeof path, "%s/docs/metrics.md", km_test_source_dir());
    char *committed = docs_slurp(path);
    docs_assert_same(committed, md, "docs/metrics.md", "make docs");
    free(committed);
    free(md);
    free(fs);
}

/* tests/docs/metric_names.py [--labels]: the metric names of every expression, one per line; or each
 * label an expression uses followed by its metrics. */
static char *names_in(const char *file, bool labels)
{
    char script[1024], target[1024];
    snprintf(script, sizeof script, "%s/tests/docs/metric_names.py", km_test_source_dir());
    snprintf(target, sizeof target, "%s/%s", km_test_source_dir(), file);
    char *argv[] = {"/usr/bin/python3", script, labels ? "--labels" : target, target, NULL}, *out = NULL, *err = NULL;
    if (!labels)
        argv[3] = NULL;
    cr_assert_eq(km_test_run(argv, NULL, 0, &out, NULL, &err), 0, "metric_names.py %s: %s", file, err);
    free(err);
    return out;
}

static void assert_exported(const docs_families *fs, const char *file, int at_least)
{
    char *names = names_in(file, false), *save = NULL;
    int n = 0;
    for (char *name = strtok_r(names, "\n", &save); name; name = strtok_r(NULL, "\n", &save), n++)
        cr_expect(!strcmp(name, "up") || /* Prometheus's own, per target */
                  docs_families_has_series(fs, name), "%s names %s, which neither the daemon nor the proxy exports",
                  file, name);
    cr_expect_geq(n, at_least, "%s: only %d metric names found", file, n);
    free(names);
}

/* A label an expression groups by, matches or shows is on one of its metrics (job and instance are
 * the target's, added by Prometheus). */
static void assert_labels_exist(const docs_families *fs, const char *file)
{
    char *lines = names_in(file, true), *save = NULL;
    for (char *line = strtok_r(lines, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *rest = NULL, *label = strtok_r(line, " ", &rest);
        if (!strcmp(label, "job") || !strcmp(label, "instance"))
            continue;
        bool found = false;
        for (char *m = strtok_r(NULL, " ", &rest); m && !found; m = strtok_r(NULL, " ", &rest))
            found = docs_families_has_label(fs, m, label);
        cr_expect(found, "%s uses label %s on metrics that do not carry it", file, label);
    }
    free(lines);
}

/* `promtool check metrics` reads one scrape on stdin: exit 0 and nothing said means every family is named
 * as Prometheus names them (prefix, base units, _total on counters only, HELP and TYPE). */
static void assert_promtool_clean(const char *scrape, const char *who)
{
    char *argv[] = {"/usr/bin/env", "promtool", "check", "metrics", NULL}, *out = NULL, *err = NULL;
    int rc = km_test_run(argv, scrape, strlen(scrape), &out, NULL, &err);
    cr_expect(rc == 0 && !*out && !*err, "promtool check metrics on the %s's /metrics: exit %d\n%s%s", who, rc,
              out ? out : "", err ? err : "");
    free(out);
    free(err);
}

/* Names the Prometheus conventions ask for beyond what promtool checks: every family is kmproxy's own
 * (kmproxy_) or a standard one (process_*), and the build and process families are there. */
static void assert_conventional_names(const char *scrape, const char *who)
{
    docs_families *fs = calloc(1, sizeof *fs);
    docs_families_add(fs, scrape, 0);
    for (size_t i = 0; i < fs->n; i++)
        cr_expect(!strncmp(fs->f[i].name, "kmproxy_", 8) || !strncmp(fs->f[i].name, "process_", 8),
                  "%s exports %s: neither kmproxy_ nor a standard process_ family", who, fs->f[i].name);
    static const char *const REQUIRED[] = {"kmproxy_build_info", "process_cpu_seconds_total",
                                           "process_resident_memory_bytes", "process_virtual_memory_bytes",
                                           "process_open_fds", "process_max_fds", "process_start_time_seconds"};
    for (size_t i = 0; i < sizeof REQUIRED / sizeof *REQUIRED; i++)
        cr_expect(docs_families_has_series(fs, REQUIRED[i]), "%s does not export %s", who, REQUIRED[i]);
    cr_expect(strstr(scrape, "kmproxy_build_info{version=\"") && strstr(scrape, ",commit=\""),
              "%s: kmproxy_build_info without version and commit labels", who);
    free(fs);
}

Test(docs_metrics, live_scrapes_pass_promtool_check_metrics, .timeout = 240)
{
    docs_scrapes s;
    docs_scrape_daemon_and_proxy(&s);
    assert_promtool_clean(s.daemon, "daemon");
    assert_promtool_clean(s.proxy, "proxy");
    assert_conventional_names(s.daemon, "daemon");
    assert_conventional_names(s.proxy, "proxy");
    docs_scrapes_free(&s);
}

Test(docs_metrics, dashboard_and_rules_name_only_exported_metrics, .timeout = 240)
{
    docs_families *fs = scrape_families();
    assert_exported(fs, "deploy/grafana/kmproxy-dashboard.json", 30);
    assert_exported(fs, "deploy/prometheus/kmproxy-rules.yml", 8);
    assert_labels_exist(fs, "deploy/grafana/kmproxy-dashboard.json");
    assert_labels_exist(fs, "deploy/prometheus/kmproxy-rules.yml");
    free(fs);
}
