/* A standalone ZooKeeper for the demo: config file, fork/exec java, wait for `ruok`. */
#include "km_localzk.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define ZK_JARS "/usr/share/java/zookeeper.jar:/usr/share/java/zookeeper-jute.jar:" \
                "/usr/share/java/slf4j-api.jar:/usr/share/java/slf4j-simple.jar"

int km_free_loopback_ports(uint16_t *ports, int n, km_err *err)
{
    int fds[64];
    if (n > 64)
        return km_fail(err, "at most 64 ports at once");
    for (int i = 0; i < n; i++)
        fds[i] = -1;
    int rc = 0;
    for (int i = 0; !rc && i < n; i++) {
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t len = sizeof sa;
        fds[i] = socket(AF_INET, SOCK_STREAM, 0);
        if (fds[i] < 0 || bind(fds[i], (struct sockaddr *)&sa, sizeof sa) ||
            getsockname(fds[i], (struct sockaddr *)&sa, &len))
            rc = km_fail(err, "no free loopback port: %s", strerror(errno));
        ports[i] = ntohs(sa.sin_port);
    }
    for (int i = 0; i < n; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    return rc;
}

static int write_config(const char *dir, uint16_t port, char *cfg_path, size_t cap, km_err *err)
{
    snprintf(cfg_path, cap, "%s/zoo.cfg", dir);
    FILE *f = fopen(cfg_path, "w");
    if (!f)
        return km_fail(err, "%s: %s", cfg_path, strerror(errno));
    fprintf(f, "tickTime=500\ninitLimit=10\nsyncLimit=5\ndataDir=%s/data\nclientPort=%u\n"
               "clientPortAddress=127.0.0.1\nadmin.enableServer=false\n4lw.commands.whitelist=ruok,srvr\n",
            dir, port);
    return fclose(f) ? km_fail(err, "%s: %s", cfg_path, strerror(errno)) : 0;
}

static pid_t spawn_java(const char *cfg_path, const char *log_path)
{
    fflush(NULL);  /* a forked child must not flush our buffers a second time */
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    prctl(PR_SET_PDEATHSIG, SIGKILL);  /* never outlive the demo */
    int log = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (log >= 0) {
        dup2(log, 1);
        dup2(log, 2);
    }
    execlp("java", "java", "-Xmx256m", "-XX:+UseSerialGC", "-cp", ZK_JARS,
           "org.apache.zookeeper.server.ZooKeeperServerMain", cfg_path, (char *)NULL);
    _exit(127);
}

/* True once the server answers "imok" to ruok. */
static int answers_ruok(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    char buf[8] = {0};
    int ok = fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0 && write(fd, "ruok", 4) == 4 &&
             read(fd, buf, 4) == 4 && !memcmp(buf, "imok", 4);
    if (fd >= 0)
        close(fd);
    return ok;
}

int km_localzk_start(km_localzk *zk, const char *dir, double timeout_s, km_err *err)
{
    memset(zk, 0, sizeof *zk);
    char cfg[4096], log[4096], data[4096];
    snprintf(data, sizeof data, "%s/data", dir);
    snprintf(log, sizeof log, "%s/zookeeper.log", dir);
    if (access("/usr/share/java/zookeeper.jar", R_OK))
        return km_fail(err, "ZooKeeper is not installed (Debian package 'libzookeeper-java'; run deploy/install-deps.sh)");
    if (mkdir(data, 0755) && errno != EEXIST)
        return km_fail(err, "%s: %s", data, strerror(errno));
    if (km_free_loopback_ports(&zk->port, 1, err))
        return -1;
    if (write_config(dir, zk->port, cfg, sizeof cfg, err))
        return -1;
    zk->pid = spawn_java(cfg, log);
    if (zk->pid < 0)
        return km_fail(err, "fork: %s", strerror(errno));
    snprintf(zk->hosts, sizeof zk->hosts, "127.0.0.1:%u", zk->port);
    struct timespec nap = {0, 100 * 1000 * 1000};
    for (double waited = 0; waited < timeout_s; waited += 0.1) {
        if (answers_ruok(zk->port))
            return 0;
        if (waitpid(zk->pid, NULL, WNOHANG) == zk->pid) {
            zk->pid = 0;
            return km_fail(err, "ZooKeeper exited at start-up; see %s", log);
        }
        nanosleep(&nap, NULL);
    }
    km_localzk_stop(zk);
    return km_fail(err, "ZooKeeper did not serve on %s within %.0f s; see %s", zk->hosts, timeout_s, log);
}

void km_localzk_stop(km_localzk *zk)
{
    if (zk->pid > 0) {
        kill(zk->pid, SIGTERM);
        waitpid(zk->pid, NULL, 0);
    }
    zk->pid = 0;
}
