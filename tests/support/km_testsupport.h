/* km_testsupport.h - helpers shared by the Criterion suites (paths, servers, simulators). */
#ifndef KM_TESTSUPPORT_H
#define KM_TESTSUPPORT_H

#include <stdbool.h>
#include <stddef.h>

/* KM_TEST_UNDER_ASAN: built with AddressSanitizer (gcc says __SANITIZE_ADDRESS__, clang
 * __has_feature), for suites that do less work, or skip a measurement, under it. */
#if defined(__SANITIZE_ADDRESS__)
#define KM_TEST_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KM_TEST_UNDER_ASAN 1
#endif
#endif

/* ../shared next to the checkout; corpus tests skip when it is absent. */
const char *km_test_shared_dir(void);
/* Path of the built kmproxy binary. */
const char *km_test_binary(void);
/* The source tree root. */
const char *km_test_source_dir(void);
/* A fresh empty directory under $TMPDIR (removed by km_test_rmtree). */
char *km_test_tmpdir(const char *tag);
void km_test_rmtree(const char *path);
/* The inline suites run twice, with 1 worker thread and with several (tests/inline.cmake sets
 * KM_TEST_PROXY_THREADS): the "proxy.threads=N" to apply, written into buf; NULL when unset. */
const char *km_test_proxy_threads(char *buf, size_t cap);
/* In a forked child, first thing: the child is killed when the forking thread of `parent`
 * dies, so a test that times out or crashes half way leaves no process behind (Criterion
 * kills a timed-out test's worker outright).  Exits at once if the parent is already gone. */
void km_test_die_with_parent(int parent);
/* Runs argv with stdin from `in` (may be NULL); captures stdout/stderr (malloc'd, NUL-terminated).
 * Returns the exit status, or -1 if it could not run. */
int km_test_run(char *const argv[], const void *in, size_t in_len,
                char **out, size_t *out_len, char **err_out);

/* A port p such that p+1..p+n are all free now, drawn at random below the kernel's ephemeral range (ports.c):
 * for a listener a JVM or kmproxy binds later, which no outgoing connection can take meanwhile. */
int km_test_free_port_base(int n);

#endif
