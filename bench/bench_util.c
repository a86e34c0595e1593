/* Clocks and the plain read() baseline shared by the benchmarks. */
#include "bench_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

static double clock_s(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

double bench_cpu_s(void) { return clock_s(CLOCK_PROCESS_CPUTIME_ID); }
double bench_wall_s(void) { return clock_s(CLOCK_MONOTONIC); }

static size_t read_touching(const char *path, unsigned char *buf, size_t cap, unsigned *sum)
{
    size_t bytes = 0;
    int fd = open(path, O_RDONLY);
    ssize_t n;
    while (fd >= 0 && (n = read(fd, buf, cap)) > 0) {
        for (ssize_t i = 0; i < n; i += 64)
            *sum += buf[i];
        bytes += (size_t)n;
    }
    if (fd >= 0)
        close(fd);
    return bytes;
}

double bench_plain_read(const char *dir, size_t *bytes)
{
    static const size_t cap = 1u << 20;
    unsigned char *buf = malloc(cap);
    unsigned sum = 0;
    *bytes = 0;
    double t0 = bench_cpu_s();
    DIR *d = opendir(dir);
    for (struct dirent *e; buf && d && (e = readdir(d));) {
        if (!strstr(e->d_name, ".log"))
            continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        *bytes += read_touching(path, buf, cap, &sum);
    }
    if (d)
        closedir(d);
    double t = bench_cpu_s() - t0;
    free(buf);
    return sum == 0xdeadbeef ? t + 1e-9 : t; /* keeps the loop from being optimised away */
}

long bench_rss_bytes(void)
{
    long pages = 0, res = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &res) != 2)
            res = 0;
        fclose(f);
    }
    return res * sysconf(_SC_PAGESIZE);
}

void bench_die_with_parent(int parent)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) /* it died before the prctl */
        _exit(1);
}
