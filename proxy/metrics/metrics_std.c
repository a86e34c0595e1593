/* The families every Prometheus exporter is expected to have, whatever the program: the build it runs
 * (kmproxy_build_info) and the process_* set of the official client libraries, read from /proc the way
 * they read it, so that dashboards and alerts written for any exporter work on kmproxy too. */
#include "km_build_info.h"
#include "km_metrics.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* Fields 14-15 (utime, stime, in clock ticks), 22 (starttime, ticks after boot), 23 (vsize, bytes) and
 * 24 (rss, pages) of /proc/self/stat; the command name (field 2) may hold spaces, so parsing starts after
 * its closing parenthesis.  -1 when /proc is not there. */
typedef struct proc_stat {
    unsigned long long utime, stime, starttime, vsize;
    long long rss_pages;
} proc_stat;

static int read_proc_stat(proc_stat *st)
{
    char buf[1024];
    FILE *f = fopen("/proc/self/stat", "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')');
    if (!p)
        return -1;
    /* after ")": state(3) ... utime(14) stime(15) ... starttime(22) vsize(23) rss(24) */
    int got = sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d %*d %*d %*d %*d %llu %llu "
                            "%lld", &st->utime, &st->stime, &st->starttime, &st->vsize, &st->rss_pages);
    return got == 5 ? 0 : -1;
}

/* The boot time (btime of /proc/stat, Unix seconds), for the start time; 0 when unknown. */
static double boot_time(void)
{
    char line[256];
    double btime = 0;
    FILE *f = fopen("/proc/stat", "r");
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "btime %lf", &btime) == 1)
            break;
    if (f)
        fclose(f);
    return btime;
}

static int open_fds(void)
{
    DIR *dir = opendir("/proc/self/fd");
    if (!dir)
        return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(dir));)
        n += e->d_name[0] != '.';
    closedir(dir);
    return n - 1; /* the directory's own descriptor */
}

static void process_families(km_buf *out)
{
    proc_stat st;
    if (read_proc_stat(&st))
        return;
    double tick = (double)sysconf(_SC_CLK_TCK), page = (double)sysconf(_SC_PAGESIZE);
    km_metrics_sample(out, "process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.",
                      NULL, true, (double)(st.utime + st.stime) / tick);
    km_metrics_sample(out, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.", NULL, true,
                      (double)st.rss_pages * page);
    km_metrics_sample(out, "process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.", NULL, true,
                      (double)st.vsize);
    km_metrics_sample(out, "process_start_time_seconds", "gauge",
                      "Start time of the process since unix epoch in seconds.", NULL, true,
                      boot_time() + (double)st.starttime / tick);
    int fds = open_fds();
    if (fds >= 0)
        km_metrics_sample(out, "process_open_fds", "gauge", "Number of open file descriptors.", NULL, true, fds);
    struct rlimit lim;
    if (!getrlimit(RLIMIT_NOFILE, &lim))
        km_metrics_sample(out, "process_max_fds", "gauge", "Maximum number of open file descriptors.", NULL, true,
                          lim.rlim_cur == RLIM_INFINITY ? -1 : (double)lim.rlim_cur);
}

void km_metrics_render_standard(km_buf *out)
{
    km_metrics_sample(out, "kmproxy_build_info", "gauge",
                      "The kmproxy build running: its version and git commit as labels, value 1.",
                      "version=\"" KM_VERSION "\",commit=\"" KM_GIT_COMMIT "\"", true, 1);
    process_families(out);
}

void km_metrics_histogram(km_buf *out, const char *name, const char *help, const char *labels, bool first,
                          const double *bounds, const uint64_t *counts, size_t n, double sum)
{
    char line[512];
    int len;
    if (!labels || first) {
        len = snprintf(line, sizeof line, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
        km_buf_put(out, line, (size_t)len);
    }
    const char *sep = labels && *labels ? "," : "";
    labels = labels ? labels : "";
    uint64_t total = 0;
    for (size_t i = 0; i <= n; i++) {
        total += counts[i];
        char le[32];
        if (i < n)
            snprintf(le, sizeof le, "%g", bounds[i]);
        else
            snprintf(le, sizeof le, "+Inf");
        len = snprintf(line, sizeof line, "%s_bucket{%s%sle=\"%s\"} %llu\n", name, labels, sep, le,
                       (unsigned long long)total);
        km_buf_put(out, line, (size_t)(len < (int)sizeof line ? len : (int)sizeof line - 1));
    }
    len = *labels ? snprintf(line, sizeof line, "%s_sum{%s} %.17g\n%s_count{%s} %llu\n", name, labels, sum, name,
                             labels, (unsigned long long)total)
                  : snprintf(line, sizeof line, "%s_sum %.17g\n%s_count %llu\n", name, sum, name,
                             (unsigned long long)total);
    km_buf_put(out, line, (size_t)(len < (int)sizeof line ? len : (int)sizeof line - 1));
}

void km_metrics_observe(const double *bounds, uint64_t *counts, size_t n, double value)
{
    size_t i = 0;
    while (i < n && value > bounds[i])
        i++;
    counts[i]++;
}
