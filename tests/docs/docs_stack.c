/* A daemon and a proxy to scrape (see docs_stack.h). */
#include "docs_stack.h"
#include "km_testsupport.h"
#include "ops_daemon.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <libgen.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

/* kmproxy-raftsim (built beside kmproxy) following the generated log; returns its port. */
static int start_raftsim(pid_t *pid, const char *dir, const char *log)
{
    char bin[600], portfile[600], out[600], self[600];
    snprintf(self, sizeof self, "%s", km_test_binary());
    snprintf(bin, sizeof bin, "%s/kmproxy-raftsim", dirname(self));
    snprintf(portfile, sizeof portfile, "%s/raftsim.port", dir);
    snprintf(out, sizeof out, "%s/raftsim.out", dir);
    pid_t parent = getpid();
    *pid = fork();
    cr_assert(*pid >= 0);
    if (*pid == 0) {
        km_test_die_with_parent(parent);
        if (!freopen(out, "w", stdout) || !freopen(out, "a", stderr))
            _exit(127);
        execl(bin, bin, "--node-id", "3000", "--follow", log, "--port-file", portfile, (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 300; i++) {
        FILE *f = fopen(portfile, "r");
        int port = 0;
        if (f && fscanf(f, "%d", &port) == 1 && port > 0) {
            fclose(f);
            return port;
        }
        if (f)
            fclose(f);
        cr_assert_neq(waitpid(*pid, NULL, WNOHANG), *pid, "%s exited: %s", bin, ops_slurp(out));
        usleep(100000);
    }
    cr_assert_fail("%s did not listen: %s", bin, ops_slurp(out));
    return -1;
}

/* `kmproxy <cmd> --set ...` with its output in dir; sets is NULL-ended. */
static void spawn_with_sets(ops_proc *p, const char *dir, const char *cmd, char *const *sets)
{
    const char *args[30] = {cmd};
    int n = 1;
    for (int i = 0; sets[i] && n < 28; i++) {
        args[n++] = "--set";
        args[n++] = sets[i];
    }
    args[n] = NULL;
    ops_spawn(p, dir, cmd, args);
}

static int write_all(int fd, const void *buf, size_t n)
{
    for (const char *p = buf; n;) {
        ssize_t w = write(fd, p, n);
        if (w <= 0)
            return -1;
        p += w, n -= (size_t)w;
    }
    return 0;
}

/* One ApiVersions v0 request through a proxy listener; true once its whole answer came back. */
static bool api_versions_through(int port)
{
    static const unsigned char REQ[] = {0, 0, 0, 14, 0, 18, 0, 0, 0, 0, 0, 1, 0, 4, 'd', 'o', 'c', 's'};
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    struct timeval tv = {.tv_sec = 10};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    bool ok = fd >= 0 && !connect(fd, (struct sockaddr *)&a, sizeof a) && !write_all(fd, REQ, sizeof REQ);
    unsigned char head[4];
    ok = ok && recv(fd, head, 4, MSG_WAITALL) == 4;
    size_t size = ok ? (size_t)head[0] << 24 | (size_t)head[1] << 16 | (size_t)head[2] << 8 | head[3] : 0;
    char *body = malloc(size + 1);
    ok = ok && size > 0 && size < 65536 && recv(fd, body, size, MSG_WAITALL) == (ssize_t)size;
    free(body);
    if (fd >= 0)
        close(fd);
    return ok;
}

static char *scrape_port(int port, const char *needle, const char *log)
{
    inst in = {.port = port};
    snprintf(in.log_file, sizeof in.log_file, "%.500s", log);
    return scrape_until(&in, "/metrics", 200, needle, 60);
}

void docs_scrape_daemon_and_proxy(docs_scrapes *out)
{
    km_zks *zk = ops_zk_start();
    env e;
    env_init(&e);
    pid_t raftsim;
    int rport = start_raftsim(&raftsim, e.dir, e.metadata);
    int dmetrics = ops_dead_port(), dproxy = ops_dead_port(), pmetrics = ops_dead_port(), pproxy = ops_dead_port();
    char s[8][600];
    snprintf(s[0], sizeof s[0], "controller.quorum.bootstrap.servers=127.0.0.1:%d", rport);
    snprintf(s[1], sizeof s[1], "zookeeper.connect=%s", km_zks_hosts(zk, -1));
    snprintf(s[2], sizeof s[2], "metrics.listen=127.0.0.1:%d", dmetrics);
    snprintf(s[3], sizeof s[3], "log.file=%s/daemon.log", e.dir);
    snprintf(s[4], sizeof s[4], "proxy.bootstrap.listen=127.0.0.1:%d", dproxy);
    snprintf(s[5], sizeof s[5], "proxy.bootstrap.upstream=127.0.0.1:%d", rport);
    char *dsets[] = {s[0], s[1], s[2], s[3], s[4], s[5], NULL};
    ops_proc daemon, proxy;
    spawn_with_sets(&daemon, e.dir, "run", dsets);
    char p[3][600];
    snprintf(p[0], sizeof p[0], "metrics.listen=127.0.0.1:%d", pmetrics);
    snprintf(p[1], sizeof p[1], "proxy.bootstrap.listen=127.0.0.1:%d", pproxy);
    snprintf(p[2], sizeof p[2], "proxy.bootstrap.upstream=127.0.0.1:%d", rport);
    char *psets[] = {p[0], p[1], p[2], NULL};
    spawn_with_sets(&proxy, e.dir, "proxy", psets);
    char dlog[560];
    snprintf(dlog, sizeof dlog, "%s/daemon.log", e.dir);
    /* Complete: the observer has a leader and the broker channels exist. */
    free(scrape_port(dmetrics, "kmproxy_broker_ready{", dlog));
    free(scrape_port(dmetrics, "kmproxy_quorum_leader_id 3000", dlog));
    free(scrape_port(pmetrics, "kmproxy_inline_listeners 1", proxy.err));
    cr_assert(api_versions_through(dproxy), "ApiVersions through the daemon's proxy: %s", ops_slurp(dlog));
    cr_assert(api_versions_through(pproxy), "ApiVersions through kmproxy proxy: %s", ops_slurp(proxy.err));
    out->daemon = scrape_port(dmetrics, "kmproxy_inline_upstream_latency_seconds_count{", dlog);
    out->proxy = scrape_port(pmetrics, "kmproxy_inline_upstream_latency_seconds_count{", proxy.err);
    int ds = ops_stop(&daemon, SIGTERM), ps = ops_stop(&proxy, SIGTERM);
    cr_expect(WIFEXITED(ds) && !WEXITSTATUS(ds), "daemon: status %#x: %s", ds, ops_slurp(dlog));
    cr_expect(WIFEXITED(ps) && !WEXITSTATUS(ps), "proxy: status %#x: %s", ps, ops_slurp(proxy.err));
    kill(raftsim, SIGTERM);
    waitpid(raftsim, NULL, 0);
    env_free(&e);
    km_zks_stop(zk);
}

void docs_scrapes_free(docs_scrapes *s)
{
    free(s->daemon);
    free(s->proxy);
}
