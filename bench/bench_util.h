/* bench_util.h - what the benchmarks share: clocks and the plain read() baseline. */
#ifndef KM_BENCH_UTIL_H
#define KM_BENCH_UTIL_H

#include <stddef.h>

/* CPU time of this process: on a busy shared machine it skews both sides far less than wall time. */
double bench_cpu_s(void);
/* Monotonic wall time, for latencies. */
double bench_wall_s(void);
/* The baseline: read() every `.log` file of dir into a 1 MiB buffer, touching each cache line once.
 * Returns CPU seconds; *bytes receives what was read. */
double bench_plain_read(const char *dir, size_t *bytes);

/* In a forked server child, first thing: it dies with the bench (PR_SET_PDEATHSIG), so an
 * interrupted `make bench` leaves no server behind.  `parent`: getpid() before the fork. */
void bench_die_with_parent(int parent);

/* Resident memory of this process in bytes (/proc/self/statm). */
long bench_rss_bytes(void);

#endif
