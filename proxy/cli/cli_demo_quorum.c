/* The demo's KRaft quorum (`kmproxy demo --quorum`): a kmproxy-raftsim process, built next to
 * kmproxy, leading a one-voter quorum and serving the demo's log as it grows (--follow), so the
 * daemon runs with metadata.source=quorum exactly as against real controllers. */
#include "cli_demo.h"

#include <errno.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int read_port(const char *path, uint16_t *port)
{
    FILE *f = fopen(path, "r");
    unsigned p = 0;
    int ok = f && fscanf(f, "%u", &p) == 1 && p > 0 && p < 65536;
    if (f)
        fclose(f);
    *port = (uint16_t)p;
    return ok ? 0 : -1;
}

int demo_start_quorum(demo_quorum *q, const char *logdir, const char *workdir, km_err *err)
{
    char self[PATH_MAX], path[PATH_MAX], portfile[PATH_MAX], out[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n < 0)
        return km_fail(err, "readlink /proc/self/exe: %s", strerror(errno));
    self[n] = 0;
    snprintf(path, sizeof path, "%s/kmproxy-raftsim", dirname(self));
    snprintf(portfile, sizeof portfile, "%s/raftsim.port", workdir);
    snprintf(out, sizeof out, "%s/raftsim.log", workdir);
    q->pid = fork();
    if (q->pid < 0)
        return km_fail(err, "fork: %s", strerror(errno));
    if (q->pid == 0) {
        if (!freopen(out, "w", stdout) || !freopen(out, "a", stderr))
            _exit(127);
        execl(path, path, "--node-id", "3000", "--follow", logdir, "--port-file", portfile, (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 200; i++) { /* up to 20 s for it to listen */
        if (read_port(portfile, &q->port) == 0)
            return 0;
        if (waitpid(q->pid, NULL, WNOHANG) == q->pid) {
            q->pid = 0;
            return km_fail(err, "%s exited at start (see %s)", path, out);
        }
        nanosleep(&(struct timespec){ .tv_nsec = 100000000 }, NULL);
    }
    return km_fail(err, "%s did not start listening (see %s)", path, out);
}

void demo_stop_quorum(demo_quorum *q)
{
    if (q->pid > 0) {
        kill(q->pid, SIGTERM);
        waitpid(q->pid, NULL, 0);
        q->pid = 0;
    }
}
