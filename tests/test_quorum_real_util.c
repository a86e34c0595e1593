/* Kafka's own KRaft leader for the observer suites (see test_quorum_real_util.h). */
#include "test_quorum_real_util.h"
#include "km_testsupport.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char g_kit[4200];

static bool java_runs(void)
{
    char *argv[] = { "/bin/sh", "-c", "java -version", NULL }; /* java from PATH, as the kit finds it */
    char *out = NULL, *err = NULL;
    int rc = km_test_run(argv, NULL, 0, &out, NULL, &err);
    free(out);
    free(err);
    return rc == 0;
}

const char *rk_kit_or_skip(void)
{
    snprintf(g_kit, sizeof g_kit, "%s/realkafka", km_test_shared_dir());
    char tool[4300];
    snprintf(tool, sizeof tool, "%s/bin/raft-leader", g_kit);
    if (access(tool, X_OK) != 0)
        cr_skip_test("Kafka's own leader is absent (%s): these scenarios ran against raftsim only", tool);
    if (!java_runs())
        cr_skip_test("java does not run (Debian: openjdk-17-jre-headless): skipping the raft-leader scenarios");
    if (access("/usr/share/java/zstd-jni.jar", R_OK) != 0)
        cr_skip_test("/usr/share/java/zstd-jni.jar is absent (Debian: libzstd-jni-java): skipping the raft-leader "
                     "scenarios");
    return g_kit;
}

const char *rk_seed_log(void)
{
    static char log[4400];
    char bin[4096], dir[4200], lock[4300];
    snprintf(bin, sizeof bin, "%s", km_test_binary());
    snprintf(dir, sizeof dir, "%s/tests/realkafka-seed", dirname(bin));
    snprintf(log, sizeof log, "%s/00000000000000000000.log", dir);
    snprintf(lock, sizeof lock, "%s.lock", dir);
    int fd = open(lock, O_CREAT | O_RDWR, 0644);
    cr_assert(fd >= 0 && flock(fd, LOCK_EX) == 0, "%s: %s", lock, strerror(errno));
    if (access(log, R_OK) != 0) {
        char tool[4400];
        snprintf(tool, sizeof tool, "%s/bin/gen-coverage", g_kit);
        char *argv[] = { tool, dir, "--bulk-topics", "250", "--bulk-partitions", "3", NULL };
        char *out = NULL, *err = NULL;
        int rc = km_test_run(argv, NULL, 0, &out, NULL, &err);
        cr_assert(rc == 0 && access(log, R_OK) == 0, "gen-coverage (rc %d): %s%s", rc, out, err);
        free(out);
        free(err);
    }
    close(fd);
    return log;
}

/* Reads the leader's stdout until its "ready" line (bounded: seeding a JVM on a busy machine). */
static void wait_ready(rk_leader *l, int fd)
{
    char buf[4096];
    size_t len = 0;
    time_t deadline = time(NULL) + 120;
    while (time(NULL) < deadline) {
        struct pollfd p = { .fd = fd, .events = POLLIN };
        if (poll(&p, 1, 500) <= 0)
            continue;
        ssize_t n = read(fd, buf + len, sizeof buf - 1 - len);
        cr_assert(n > 0, "raft-leader exited before it was ready (see %s/server.out)", l->dir);
        len += (size_t)n;
        buf[len] = 0;
        char *nl = strchr(buf, '\n'), *hw, *ep;
        if (nl && !strncmp(buf, "ready ", 6)) {
            *nl = 0;
            snprintf(l->ready_line, sizeof l->ready_line, "%.1000s", buf);
            cr_assert((hw = strstr(buf, " hw=")) && (ep = strstr(buf, "epoch=")), "ready line: %s", buf);
            l->hw = strtoll(hw + 4, NULL, 10);
            l->epoch = (int32_t)strtol(ep + 6, NULL, 10);
            return;
        }
        cr_assert(len < sizeof buf - 1, "raft-leader said: %s", buf);
    }
    cr_assert_fail("raft-leader not ready within 120 s (see %s)", l->dir);
}

void rk_leader_start(rk_leader *l, const char *tmp, const char *tag, const char *const *extra)
{
    memset(l, 0, sizeof *l);
    l->port = km_test_free_port_base(1) + 1; /* below the ephemeral range: the JVM binds it later */
    snprintf(l->dir, sizeof l->dir, "%s/%s", tmp, tag);
    snprintf(l->records, sizeof l->records, "%s/out/server-records.jsonl", l->dir);
    char tool[4400], port[16];
    snprintf(tool, sizeof tool, "%s/bin/raft-leader", g_kit);
    snprintf(port, sizeof port, "%d", l->port);
    const char *argv[32] = { tool, "--port", port, "--dir", l->dir, "--seed", rk_seed_log() };
    int n = 7;
    for (int i = 0; extra && extra[i] && n < 31; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    int out[2];
    cr_assert(pipe(out) == 0);
    pid_t parent = getpid();
    l->pid = fork();
    cr_assert(l->pid >= 0);
    if (l->pid == 0) {
        km_test_die_with_parent(parent);
        setenv("RUN_SECONDS", "180", 1); /* a JVM orphaned by a crashed test ends by itself after this */
        dup2(out[1], 1);
        close(out[0]);
        execv(tool, (char *const *)argv);
        _exit(127);
    }
    close(out[1]);
    wait_ready(l, out[0]);
    close(out[0]); /* the script writes nothing more */
}

void rk_leader_stop(rk_leader *l)
{
    if (l->pid <= 0)
        return;
    kill(l->pid, SIGTERM);
    for (int i = 0; i < 300; i++) {
        if (waitpid(l->pid, NULL, WNOHANG) == l->pid) {
            l->pid = 0;
            return;
        }
        usleep(50000);
    }
    kill(l->pid, SIGKILL);
    waitpid(l->pid, NULL, 0);
    l->pid = 0;
}

int rk_kmproxy(const char *const *args, char **out, char **err)
{
    const char *argv[32] = { km_test_binary() };
    int n = 1;
    for (int i = 0; args[i] && n < 31; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    return km_test_run((char *const *)argv, NULL, 0, out, NULL, err);
}

void rk_dump_equals_leader(const rk_leader *l, const char *path, int round, const char *const *extra)
{
    char server[64];
    snprintf(server, sizeof server, "127.0.0.1:%d", l->port);
    const char *args[16] = { "metadata", "dump", "--bootstrap-server", server };
    int n = 4;
    for (int i = 0; extra && extra[i] && n < 15; i++)
        args[n++] = extra[i];
    args[n] = NULL;
    char *out = NULL, *err = NULL;
    int rc = rk_kmproxy(args, &out, &err);
    cr_assert_eq(rc, 0, "round %d: metadata dump exited %d: %s", round, rc, err);
    FILE *f = fopen(path, "w");
    cr_assert(f && fputs(out, f) >= 0 && fclose(f) == 0);
    free(out);
    free(err);
    char tool[4400];
    snprintf(tool, sizeof tool, "%s/bin/compare-dump", g_kit);
    char *argv[] = { tool, (char *)path, (char *)l->records, NULL };
    rc = km_test_run(argv, NULL, 0, &out, NULL, &err);
    cr_assert(rc == 0 && strstr(out, " differences=0 notes=0"), "round %d against %s: compare-dump (rc %d): %s%s",
              round, l->ready_line, rc, out, err);
    free(out);
    free(err);
}
