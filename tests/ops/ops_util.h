/* ops_util.h - running kmproxy as an operator does: a child process with stdout/stderr in files,
 * waited on by what it writes (never by time), signalled, reaped. */
#ifndef KM_OPS_UTIL_H
#define KM_OPS_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

typedef struct ops_proc {
    pid_t pid;
    char out[512], err[512];   /* the files stdout and stderr go to */
} ops_proc;

/* Starts km_test_binary() with args (NULL-terminated); tag names the output files under dir. */
void ops_spawn(ops_proc *p, const char *dir, const char *tag, const char *const *args);
/* The whole file (malloc'd, NUL-terminated; "" when absent). */
char *ops_slurp(const char *path);
/* Waits until the file holds `needle` `times` times (or the child exited): true when it does. */
bool ops_wait_for(ops_proc *p, const char *path, const char *needle, int times, int timeout_s);
/* Signals the child and reaps it; returns its wait status. */
int ops_stop(ops_proc *p, int sig);
/* Counts needle in hay. */
int ops_count(const char *hay, const char *needle);
/* A loopback port nothing listens on (bound, then released). */
int ops_dead_port(void);
/* GET http://127.0.0.1:port/path with curl: the HTTP status (0: no answer); *body malloc'd. */
int ops_curl(int port, const char *path, char **body);
/* Reads datagrams on fd (a $NOTIFY_SOCKET) until one holds `needle`, appending each to got (cap bytes)
 * followed by '|'; false after timeout_s. Between reads it waits with wait_step(0.1) when given (a
 * test that serves simulators while it waits), else in poll. */
bool ops_notified(int fd, const char *needle, char *got, size_t cap, int timeout_s, void (*wait_step)(double seconds));

#endif
