/* One directory per test binary run, under $TMPDIR, made before the first test and removed after
 * the last (Criterion's PRE_ALL / POST_ALL report hooks, in the runner process): every
 * km_test_tmpdir of the run, and every temp file of a child that honours TMPDIR, lands inside it,
 * so a test that crashes or times out half way still leaves nothing in /tmp.
 *
 * Sanitizer reports of the run's processes - the test workers (forked after the hook) and every
 * child they start (kmproxy, simulators: they inherit the *SAN_OPTIONS set here) - are written
 * into the same directory instead of stderr. After the last test each one is printed and the
 * run fails: a leak or a UBSan report in a child that exited as expected no longer passes. */
#include "km_testsupport.h"

#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define KM_RUN_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KM_RUN_SANITIZED 1
#endif
#endif
#ifdef KM_RUN_SANITIZED
#include <sanitizer/common_interface_defs.h>
#endif

#define REPORT_PREFIX "sanitizer-report"

static char run_dir[512];

/* VAR=old:log_path=dir/sanitizer-report (a later key wins in sanitizer option strings). */
static void log_reports_into(const char *var)
{
    const char *old = getenv(var);
    char value[2048];
    snprintf(value, sizeof value, "%s%slog_path=%s/" REPORT_PREFIX, old ? old : "", old && *old ? ":" : "", run_dir);
    setenv(var, value, 1);
}

ReportHook(PRE_ALL)(struct criterion_test_set *tests)
{
    (void)tests;
    const char *base = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(run_dir, sizeof run_dir, "%s/km-run-XXXXXX", base);
    if (!mkdtemp(run_dir)) {
        run_dir[0] = '\0';
        return;
    }
    setenv("TMPDIR", run_dir, 1);
    log_reports_into("ASAN_OPTIONS");
    log_reports_into("LSAN_OPTIONS");
    log_reports_into("UBSAN_OPTIONS");
#ifdef KM_RUN_SANITIZED
    char path[600];
    snprintf(path, sizeof path, "%s/" REPORT_PREFIX, run_dir);
    __sanitizer_set_report_path(path); /* this process and the workers it forks */
#endif
}

/* A report file that holds a finding (ASan, LSan: "ERROR: ...Sanitizer"; UBSan: "runtime error:"),
 * not only the statistics of suppressions used: printed; true. */
static bool print_if_finding(const char *path, const char *name)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    char line[1024];
    bool finding = false;
    while (!finding && fgets(line, sizeof line, f))
        finding = strstr(line, "ERROR: ") || strstr(line, "runtime error:");
    if (finding) {
        rewind(f);
        fprintf(stderr, "==== sanitizer report %s ====\n", name);
        while (fgets(line, sizeof line, f))
            fputs(line, stderr);
    }
    fclose(f);
    return finding;
}

/* Prints every report with a finding; their number. */
static int print_reports(void)
{
    DIR *d = opendir(run_dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        if (strncmp(e->d_name, REPORT_PREFIX, sizeof REPORT_PREFIX - 1))
            continue;
        char path[1100];
        snprintf(path, sizeof path, "%s/%s", run_dir, e->d_name);
        n += print_if_finding(path, e->d_name);
    }
    if (d)
        closedir(d);
    return n;
}

ReportHook(POST_ALL)(struct criterion_global_stats *stats)
{
    (void)stats;
    if (!run_dir[0])
        return;
    int reports = print_reports();
#ifdef KM_RUN_SANITIZED
    __sanitizer_set_report_path("stderr"); /* this process's own report at exit: the dir is going */
#endif
    km_test_rmtree(run_dir);
    if (!reports)
        return;
    fprintf(stderr, "%d sanitizer report(s) above, from this run's tests or their child processes: the run "
            "fails\n", reports);
    fflush(NULL);
    _exit(1);
}
