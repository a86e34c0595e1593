/* Child processes and scrapes for the operations tests (see ops_util.h). */
#include "ops_util.h"
#include "km_testsupport.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

void ops_spawn(ops_proc *p, const char *dir, const char *tag, const char *const *args)
{
    snprintf(p->out, sizeof p->out, "%s/%s.out", dir, tag);
    snprintf(p->err, sizeof p->err, "%s/%s.err", dir, tag);
    unlink(p->out);
    unlink(p->err);
    char *argv[32] = {(char *)km_test_binary()};
    for (int i = 0; args[i] && i < 30; i++)
        argv[i + 1] = (char *)args[i];
    pid_t parent = getpid();
    p->pid = fork();
    if (p->pid == 0) {
        km_test_die_with_parent(parent); /* a test that fails half way leaves no daemon behind */
        int o = open(p->out, O_WRONLY | O_CREAT | O_TRUNC, 0600), e = open(p->err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(o, 1);
        dup2(e, 2);
        execv(argv[0], argv);
        _exit(127);
    }
}

char *ops_slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    size_t cap = 1 << 20, n = 0;
    char *buf = calloc(1, cap + 1);
    if (f) {
        n = fread(buf, 1, cap, f);
        fclose(f);
    }
    buf[n] = '\0';
    return buf;
}

int ops_count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *s = hay; (s = strstr(s, needle)); s += strlen(needle))
        n++;
    return n;
}

bool ops_wait_for(ops_proc *p, const char *path, const char *needle, int times, int timeout_s)
{
    for (time_t end = time(NULL) + timeout_s; time(NULL) < end;) {
        char *s = ops_slurp(path);
        bool got = ops_count(s, needle) >= times;
        free(s);
        if (got)
            return true;
        if (waitpid(p->pid, NULL, WNOHANG) == p->pid) {
            p->pid = -1;
            s = ops_slurp(path);
            got = ops_count(s, needle) >= times;
            free(s);
            return got;
        }
        usleep(20000);
    }
    return false;
}

int ops_stop(ops_proc *p, int sig)
{
    int status = -1;
    if (p->pid <= 0)
        return status;
    kill(p->pid, sig);
    waitpid(p->pid, &status, 0);
    p->pid = -1;
    return status;
}

int ops_dead_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    int port = -1;
    if (fd >= 0 && !bind(fd, (struct sockaddr *)&a, sizeof a) && !getsockname(fd, (struct sockaddr *)&a, &len))
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

int ops_curl(int port, const char *path, char **body)
{
    char url[128], *out = NULL;
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, path);
    char *argv[] = {"/usr/bin/curl", "-s", "-m", "10", "-w", "\n%{http_code}", url, NULL};
    km_test_run(argv, NULL, 0, &out, NULL, NULL);
    char *nl = out ? strrchr(out, '\n') : NULL;
    int code = nl ? atoi(nl + 1) : 0;
    if (nl)
        *nl = '\0';
    *body = out;
    return code;
}

bool ops_notified(int fd, const char *needle, char *got, size_t cap, int timeout_s, void (*wait_step)(double seconds))
{
    for (int waited = 0; waited < timeout_s * 10; waited++) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, wait_step ? 0 : 100) <= 0) {
            if (wait_step)
                wait_step(0.1);
            continue;
        }
        char buf[1024];
        ssize_t n = recv(fd, buf, sizeof buf - 1, 0);
        if (n <= 0)
            continue;
        buf[n] = '\0';
        strncat(got, buf, cap - strlen(got) - 2);
        strcat(got, "|");
        if (strstr(buf, needle))
            return true;
    }
    return false;
}
