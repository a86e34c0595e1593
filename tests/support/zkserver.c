/* Real ZooKeeper servers (standalone or quorum) for the zkbridge tests. */
#include "zkserver.h"
#include "km_testsupport.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

typedef struct km_zks_one {
    pid_t pid;
    int client_port, peer_port, elect_port;
    char *dir; /* holds zoo.cfg, data/, server.log */
} km_zks_one;

struct km_zks {
    int n;
    int maxbuffer;
    km_zks_options opt;  /* its strings belong to the caller and outlive the servers */
    char *root;
    km_zks_one s[KM_ZKS_MAX];
    char hosts[KM_ZKS_MAX + 1][64 * KM_ZKS_MAX];
};

static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || !errlen)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A port the kernel just handed out; another process could take it before the server binds, which
 * is rare enough on a test machine and shows up as a start failure, not as a wrong result. */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    int port = -1;
    if (!bind(fd, (struct sockaddr *)&a, sizeof a) && !getsockname(fd, (struct sockaddr *)&a, &len))
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}

/* Sends a four-letter word and returns the answer (NUL-terminated) or -1. */
static int four_letter(int port, const char *cmd, char *buf, size_t buflen)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    struct timeval tv = {.tv_sec = 2};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    size_t got = 0;
    if (connect(fd, (struct sockaddr *)&a, sizeof a) || write(fd, cmd, 4) != 4) {
        close(fd);
        return -1;
    }
    ssize_t r;
    while (got + 1 < buflen && (r = read(fd, buf + got, buflen - 1 - got)) > 0)
        got += (size_t)r;
    buf[got] = '\0';
    close(fd);
    return 0;
}

/* The same over TLS, presenting the harness's client certificate (a TLS-only server has no other port). */
static int four_letter_tls(const km_zks *zs, int port, const char *cmd, char *buf, size_t buflen)
{
    signal(SIGPIPE, SIG_IGN); /* a server closing while it starts must not kill the test */
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    SSL *ssl = NULL;
    int fd = -1, rc = -1;
    if (!ctx || SSL_CTX_load_verify_locations(ctx, zs->opt.tls_ca, NULL) != 1 ||
        SSL_CTX_use_certificate_chain_file(ctx, zs->opt.tls_client_cert) != 1 ||
        SSL_CTX_use_PrivateKey_file(ctx, zs->opt.tls_client_key, SSL_FILETYPE_PEM) != 1)
        goto out;
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    struct timeval tv = {.tv_sec = 2};
    if ((fd = socket(AF_INET, SOCK_STREAM, 0)) < 0)
        goto out;
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) || !(ssl = SSL_new(ctx)) || !SSL_set_fd(ssl, fd) ||
        SSL_connect(ssl) != 1 || SSL_write(ssl, cmd, 4) != 4)
        goto out;
    size_t got = 0;
    int r;
    while (got + 1 < buflen && (r = SSL_read(ssl, buf + got, (int)(buflen - 1 - got))) > 0)
        got += (size_t)r;
    buf[got] = '\0';
    rc = 0;
out:
    SSL_free(ssl);
    SSL_CTX_free(ctx);
    if (fd >= 0)
        close(fd);
    ERR_clear_error();
    return rc;
}

const char *km_zks_mode(const km_zks *zs, int idx, char *buf, size_t buflen)
{
    char answer[2048];
    int port = zs->s[idx].client_port;
    if (zs->opt.tls_cert ? four_letter_tls(zs, port, "srvr", answer, sizeof answer)
                         : four_letter(port, "srvr", answer, sizeof answer))
        return NULL;
    const char *m = strstr(answer, "Mode: ");
    if (!m)
        return NULL;
    m += 6;
    size_t len = strcspn(m, "\r\n");
    if (len + 1 > buflen)
        return NULL;
    memcpy(buf, m, len);
    buf[len] = '\0';
    return buf;
}

static int write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    int rc = fputs(text, f) < 0 ? -1 : 0;
    return fclose(f) ? -1 : rc;
}

static int copy_file(const char *from, const char *to)
{
    FILE *in = fopen(from, "rb"), *out = in ? fopen(to, "wb") : NULL;
    char buf[65536];
    size_t n;
    int rc = in && out ? 0 : -1;
    while (!rc && (n = fread(buf, 1, sizeof buf, in)) > 0)
        if (fwrite(buf, 1, n, out) != n)
            rc = -1;
    if (in)
        fclose(in);
    if (out && fclose(out))
        rc = -1;
    return rc;
}

/* zoo.cfg with a short tick so elections and session expiry happen quickly in tests. */
static int write_config(km_zks *zs, int idx)
{
    km_zks_one *o = &zs->s[idx];
    char path[1024], cfg[4096];
    int len = snprintf(cfg, sizeof cfg,
                       "tickTime=200\ninitLimit=50\nsyncLimit=10\ndataDir=%s/data\n%s=%d\n"
                       "%s=127.0.0.1\nadmin.enableServer=false\n4lw.commands.whitelist=*\n"
                       "maxClientCnxns=0\nminSessionTimeout=400\nmaxSessionTimeout=60000\n"
                       "snapCount=1000000\npreAllocSize=4096\nforceSync=no\n",
                       o->dir, zs->opt.tls_cert ? "secureClientPort" : "clientPort", o->client_port,
                       zs->opt.tls_cert ? "secureClientPortAddress" : "clientPortAddress");
    if (zs->opt.tls_cert) /* unknown zoo.cfg keys become zookeeper.* system properties */
        len += snprintf(cfg + len, sizeof cfg - (size_t)len,
                        "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory\n"
                        "ssl.keyStore.location=%s/server-keystore.pem\nssl.keyStore.type=PEM\n"
                        "ssl.trustStore.location=%s\nssl.trustStore.type=PEM\nssl.clientAuth=need\n"
                        "authProvider.x509=org.apache.zookeeper.server.auth.X509AuthenticationProvider\n",
                        zs->root, zs->opt.tls_ca);
    if (zs->opt.sasl_users || zs->opt.server_jaas)
        len += snprintf(cfg + len, sizeof cfg - (size_t)len,
                        "authProvider.sasl=org.apache.zookeeper.server.auth.SASLAuthenticationProvider\n");
    if (zs->opt.require_sasl)
        len += snprintf(cfg + len, sizeof cfg - (size_t)len,
                        "requireClientAuthScheme=sasl\nenforce.auth.enabled=true\nenforce.auth.schemes=sasl\n"
                        "sessionRequireClientSASLAuth=true\n");
    for (int i = 0; zs->n > 1 && i < zs->n; i++)
        len += snprintf(cfg + len, sizeof cfg - (size_t)len, "server.%d=127.0.0.1:%d:%d\n", i + 1,
                        zs->s[i].peer_port, zs->s[i].elect_port);
    snprintf(path, sizeof path, "%s/zoo.cfg", o->dir);
    if (write_file(path, cfg))
        return -1;
    char myid[16];
    snprintf(myid, sizeof myid, "%d\n", idx + 1);
    snprintf(path, sizeof path, "%s/data/myid", o->dir);
    return zs->n > 1 ? write_file(path, myid) : 0;
}

static void exec_server(km_zks *zs, int idx)
{
    km_zks_one *o = &zs->s[idx];
    char cfg[1024], log[1024], maxbuf[64], heap[64], jaas[1100], krb5[1100];
    snprintf(cfg, sizeof cfg, "%s/zoo.cfg", o->dir);
    snprintf(log, sizeof log, "%s/server.log", o->dir);
    snprintf(maxbuf, sizeof maxbuf, "-Djute.maxbuffer=%d", zs->maxbuffer > 0 ? zs->maxbuffer : 1048575);
    /* benchmarks hold far more znodes than tests: KM_ZK_XMX raises the heap */
    snprintf(heap, sizeof heap, "-Xmx%s", getenv("KM_ZK_XMX") ? getenv("KM_ZK_XMX") : "256m");
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
    }
    snprintf(jaas, sizeof jaas, "-Djava.security.auth.login.config=%s/jaas.conf", zs->root);
    snprintf(krb5, sizeof krb5, "-Djava.security.krb5.conf=%s", zs->opt.krb5_conf ? zs->opt.krb5_conf : "");
    const char *main_class = zs->n > 1 ? "org.apache.zookeeper.server.quorum.QuorumPeerMain"
                                       : "org.apache.zookeeper.server.ZooKeeperServerMain";
    char *argv[] = {"java", heap, "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto",
                    maxbuf, "-Dzookeeper.admin.enableServer=false", zs->opt.sasl_users || zs->opt.server_jaas ? jaas : "-Dkm.nojaas=1",
                    zs->opt.krb5_conf ? krb5 : "-Dkm.nokrb5=1",
                    "-cp",
                    "/usr/share/java/zookeeper.jar:/usr/share/java/zookeeper-jute.jar:"
                    "/usr/share/java/slf4j-api.jar:/usr/share/java/slf4j-simple.jar:"
                    /* the TLS port's Netty pipeline (Debian's libnetty-java, a zookeeper dependency) */
                    "/usr/share/java/netty-codec.jar:/usr/share/java/netty-handler.jar",
                    (char *)main_class, cfg, NULL};
    execvp("java", argv);
    _exit(127);
}

static int wait_serving(km_zks *zs, int idx, int timeout_ms)
{
    char mode[64];
    int64_t deadline = now_ms() + timeout_ms;
    while (now_ms() < deadline) {
        if (km_zks_mode(zs, idx, mode, sizeof mode) &&
            (!strcmp(mode, "leader") || !strcmp(mode, "follower") || !strcmp(mode, "standalone")))
            return 0;
        int status;
        if (waitpid(zs->s[idx].pid, &status, WNOHANG) == zs->s[idx].pid) {
            zs->s[idx].pid = 0;
            return -1;
        }
        usleep(50 * 1000);
    }
    return -1;
}

static int spawn(km_zks *zs, int idx)
{
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0)
        exec_server(zs, idx);
    zs->s[idx].pid = pid;
    return 0;
}

static int prepare_dirs(km_zks *zs, const char *snapshot, char *err, size_t errlen)
{
    for (int i = 0; i < zs->n; i++) {
        km_zks_one *o = &zs->s[i];
        char path[1024];
        if (asprintf(&o->dir, "%s/s%d", zs->root, i + 1) < 0)
            return -1;
        const char *subs[] = {"", "/data", "/data/version-2"};
        for (int k = 0; k < 3; k++) {
            snprintf(path, sizeof path, "%s%s", o->dir, subs[k]);
            if (mkdir(path, 0755))
                return set_err(err, errlen, "zkserver: cannot create %s: %s", path, strerror(errno)), -1;
        }
        if (snapshot) {
            const char *base = strrchr(snapshot, '/') ? strrchr(snapshot, '/') + 1 : snapshot;
            const char *dot = strstr(base, "snapshot.");
            snprintf(path, sizeof path, "%s/data/version-2/%s", o->dir, dot ? dot : "snapshot.0");
            if (copy_file(snapshot, path))
                return set_err(err, errlen, "zkserver: cannot copy snapshot %s", snapshot), -1;
        }
        o->client_port = free_port();
        o->peer_port = free_port();
        o->elect_port = free_port();
        if (o->client_port < 0 || o->peer_port < 0 || o->elect_port < 0)
            return set_err(err, errlen, "zkserver: no free port"), -1;
    }
    return 0;
}

/* The JAAS file of a SASL server, and the PEM keystore (key and certificate in one file, as
 * ZooKeeper's PEM keystore reads them) of a TLS one. */
static int write_security_files(km_zks *zs)
{
    char path[1024], text[4096];
    if (zs->opt.server_jaas) {
        snprintf(path, sizeof path, "%s/jaas.conf", zs->root);
        if (write_file(path, zs->opt.server_jaas))
            return -1;
    } else if (zs->opt.sasl_users) {
        snprintf(path, sizeof path, "%s/jaas.conf", zs->root);
        snprintf(text, sizeof text, "Server {\n  org.apache.zookeeper.server.auth.DigestLoginModule required\n"
                 "  %s;\n};\n", zs->opt.sasl_users);
        if (write_file(path, text))
            return -1;
    }
    if (zs->opt.tls_cert) {
        snprintf(path, sizeof path, "%s/server-keystore.pem", zs->root);
        if (copy_file(zs->opt.tls_key, path))
            return -1;
        FILE *out = fopen(path, "a"), *in = fopen(zs->opt.tls_cert, "r");
        size_t n = in ? fread(text, 1, sizeof text, in) : 0;
        bool ok = out && in && fwrite(text, 1, n, out) == n;
        if (in)
            fclose(in);
        if (out && fclose(out))
            ok = false;
        if (!ok)
            return -1;
    }
    return 0;
}

km_zks *km_zks_start(int n, const char *snapshot, int maxbuffer, char *err, size_t errlen)
{
    return km_zks_start_opts(n, &(km_zks_options){.snapshot = snapshot, .maxbuffer = maxbuffer}, err, errlen);
}

km_zks *km_zks_start_opts(int n, const km_zks_options *opt, char *err, size_t errlen)
{
    if (n < 1 || n > KM_ZKS_MAX || n == 2)
        return set_err(err, errlen, "zkserver: %d servers: want 1 or 3..%d", n, KM_ZKS_MAX), NULL;
    km_zks *zs = calloc(1, sizeof *zs);
    if (!zs)
        return NULL;
    zs->n = n;
    zs->opt = *opt;
    zs->maxbuffer = opt->maxbuffer;
    zs->root = km_test_tmpdir("zk");
    if (!zs->root || prepare_dirs(zs, opt->snapshot, err, errlen))
        goto fail;
    if (write_security_files(zs)) {
        set_err(err, errlen, "zkserver: cannot write the JAAS or keystore file under %s", zs->root);
        goto fail;
    }
    for (int i = 0; i < n; i++)
        if (write_config(zs, i) || spawn(zs, i))
            goto fail_msg;
    for (int i = 0; i < n; i++)
        if (wait_serving(zs, i, 60000))
            goto fail_msg;
    return zs;
fail_msg:
    set_err(err, errlen, "zkserver: servers under %s did not start (see s*/server.log)", zs->root);
fail:
    km_zks_stop(zs);
    return NULL;
}

int km_zks_kill_one(km_zks *zs, int idx)
{
    km_zks_one *o = &zs->s[idx];
    if (o->pid <= 0)
        return 0;
    kill(o->pid, SIGCONT);
    kill(o->pid, SIGKILL);
    waitpid(o->pid, NULL, 0);
    o->pid = 0;
    return 0;
}

int km_zks_start_one(km_zks *zs, int idx)
{
    if (zs->s[idx].pid > 0)
        return 0;
    /* The old process's port can linger in TIME_WAIT; ZooKeeper sets SO_REUSEADDR, so retry a few times. */
    for (int attempt = 0; attempt < 3; attempt++) {
        if (spawn(zs, idx))
            return -1;
        if (!wait_serving(zs, idx, 60000))
            return 0;
        km_zks_kill_one(zs, idx);
    }
    return -1;
}

int km_zks_restart(km_zks *zs, int idx)
{
    km_zks_kill_one(zs, idx);
    return km_zks_start_one(zs, idx);
}

int km_zks_pause(km_zks *zs, int idx, bool paused)
{
    return zs->s[idx].pid > 0 ? kill(zs->s[idx].pid, paused ? SIGSTOP : SIGCONT) : -1;
}

void km_zks_stop(km_zks *zs)
{
    if (!zs)
        return;
    for (int i = 0; i < zs->n; i++) {
        km_zks_kill_one(zs, i);
        free(zs->s[i].dir);
    }
    if (zs->root && !getenv("KM_KEEP_ZK"))
        km_test_rmtree(zs->root);
    free(zs->root);
    free(zs);
}

int km_zks_count(const km_zks *zs) { return zs->n; }
int km_zks_port(const km_zks *zs, int idx) { return zs->s[idx].client_port; }

const char *km_zks_hosts(km_zks *zs, int idx)
{
    char *out = zs->hosts[idx < 0 ? KM_ZKS_MAX : idx];
    size_t len = 0, cap = sizeof zs->hosts[0];
    out[0] = '\0';
    for (int i = 0; i < zs->n; i++)
        if (idx < 0 || i == idx)
            len += (size_t)snprintf(out + len, cap - len, "%s127.0.0.1:%d", len ? "," : "", zs->s[i].client_port);
    return out;
}

int km_zks_follower(const km_zks *zs)
{
    char mode[64];
    for (int i = 0; i < zs->n; i++)
        if (km_zks_mode(zs, i, mode, sizeof mode) && !strcmp(mode, "follower"))
            return i;
    return -1;
}

/* ---- blocking test client ---- */

/* The single-threaded client only talks to the server while it is driven, so a test that left
 * its client alone for a session timeout (a long sync under ASan on a busy machine) found the
 * session expired.  A keep-alive thread drives it between calls; a mutex keeps them apart. */
struct km_zkc {
    zhandle_t *zh;
    int state;
    const char *sasl_user;     /* the SASL callbacks' answers (owned below) */
    bool sasl_started;
    sasl_callback_t cbs[4];
    sasl_secret_t *secret;
    pthread_mutex_t lock;
    pthread_t keepalive;
    bool keepalive_running, stopping;
};

typedef struct zkc_call {
    bool done;
    int rc;
    char *data;
    int len;
    struct Stat st;
    char **names;
    int count;
} zkc_call;

static void zkc_watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
    (void)zh; (void)path;
    if (type == ZOO_SESSION_EVENT)
        ((km_zkc *)ctx)->state = state;
}

/* Drives the client until *done or the deadline; returns 0 or ZOPERATIONTIMEOUT. */
static int zkc_pump(km_zkc *c, const bool *done, int timeout_ms)
{
    int64_t deadline = now_ms() + timeout_ms;
    while (!*done) {
        int64_t left = deadline - now_ms();
        if (left <= 0)
            return ZOPERATIONTIMEOUT;
        int fd = -1, interest = 0;
        struct timeval tv = {0, 0};
        zookeeper_interest(c->zh, &fd, &interest, &tv);
        int64_t wait = (int64_t)tv.tv_sec * 1000 + tv.tv_usec / 1000;
        if (wait > left || wait <= 0)
            wait = wait <= 0 ? 1 : left;
        struct pollfd p = {fd, (short)(((interest & ZOOKEEPER_READ) ? POLLIN : 0) |
                                       ((interest & ZOOKEEPER_WRITE) ? POLLOUT : 0)), 0};
        poll(&p, fd >= 0 ? 1 : 0, (int)wait);
        int ev = ((p.revents & (POLLIN | POLLHUP | POLLERR)) ? ZOOKEEPER_READ : 0) |
                 ((p.revents & POLLOUT) ? ZOOKEEPER_WRITE : 0);
        zookeeper_process(c->zh, ev);
    }
    return 0;
}

static int zkc_wait(km_zkc *c, zkc_call *call, int rc)
{
    if (rc == ZOK)
        rc = zkc_pump(c, &call->done, 20000) ? ZOPERATIONTIMEOUT : call->rc;
    pthread_mutex_unlock(&c->lock); /* taken by ZKC_LOCKED, see below */
    return rc;
}

/* Each call runs with the keep-alive thread held off: ZKC_LOCKED(c, zoo_a...(...)) locks, issues
 * the request, and zkc_wait unlocks once it is answered. */
#define ZKC_LOCKED(c, issue) (pthread_mutex_lock(&(c)->lock), (issue))

static void *zkc_keepalive(void *arg)
{
    km_zkc *c = arg;
    for (;;) {
        pthread_mutex_lock(&c->lock);
        bool stop = c->stopping, never = false;
        if (!stop)
            zkc_pump(c, &never, 1); /* pings and whatever the server sent */
        pthread_mutex_unlock(&c->lock);
        if (stop)
            return NULL;
        usleep(50 * 1000);
    }
}

static km_zkc *zkc_connect(km_zkc *c)
{
    int64_t deadline = now_ms() + 20000;
    while (c->zh && c->state != ZOO_CONNECTED_STATE && c->state != ZOO_EXPIRED_SESSION_STATE &&
           now_ms() < deadline) {
        bool never = false;
        zkc_pump(c, &never, 50);
    }
    pthread_mutex_init(&c->lock, NULL);
    if (!c->zh || c->state != ZOO_CONNECTED_STATE) {
        km_zkc_close(c);
        return NULL;
    }
    c->keepalive_running = pthread_create(&c->keepalive, NULL, zkc_keepalive, c) == 0;
    return c;
}

km_zkc *km_zkc_open(const char *hosts, const clientid_t *id, int timeout_ms)
{
    km_zkc *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);
    c->zh = zookeeper_init(hosts, zkc_watcher, timeout_ms, id, c, 0);
    return zkc_connect(c);
}

static int zkc_sasl_name(void *ctx, int id, const char **result, unsigned *len)
{
    if (id != SASL_CB_USER && id != SASL_CB_AUTHNAME)
        return SASL_BADPARAM;
    *result = ((km_zkc *)ctx)->sasl_user ? ((km_zkc *)ctx)->sasl_user : "";
    if (len)
        *len = (unsigned)strlen(*result);
    return SASL_OK;
}

static int zkc_sasl_pass(sasl_conn_t *conn, void *ctx, int id, sasl_secret_t **out)
{
    (void)conn; (void)id;
    *out = ((km_zkc *)ctx)->secret;
    return SASL_OK;
}

typedef int (*zkc_sasl_fn)(void);

km_zkc *km_zkc_open_auth(const char *hosts, const km_zkc_auth *a, int timeout_ms)
{
    km_zkc *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);
    bool gssapi = a->sasl_mech && !strcmp(a->sasl_mech, "GSSAPI");
    zoo_sasl_params_t sasl = {"zookeeper", gssapi ? NULL : "zk-sasl-md5", gssapi ? "GSSAPI" : "DIGEST-MD5", c->cbs};
    if (a->sasl_user || gssapi) {
        c->sasl_started = true;
        sasl_client_init(NULL);
        size_t n = a->sasl_password ? strlen(a->sasl_password) : 0;
        c->sasl_user = gssapi ? NULL : a->sasl_user;
        c->secret = malloc(sizeof *c->secret + n);
        c->secret->len = n;
        memcpy(c->secret->data, a->sasl_password ? a->sasl_password : "", n);
        c->cbs[0] = (sasl_callback_t){SASL_CB_USER, (zkc_sasl_fn)(void (*)(void))zkc_sasl_name, c};
        c->cbs[1] = (sasl_callback_t){SASL_CB_AUTHNAME, (zkc_sasl_fn)(void (*)(void))zkc_sasl_name, c};
        c->cbs[2] = (sasl_callback_t){SASL_CB_PASS, (zkc_sasl_fn)(void (*)(void))zkc_sasl_pass, c};
        c->cbs[3] = (sasl_callback_t){SASL_CB_LIST_END, NULL, NULL};
    }
    c->zh = zookeeper_init_secure(hosts, a->tls_ca, a->tls_cert, a->tls_key, NULL, 0, zkc_watcher, timeout_ms,
                                  a->session, c, 0, NULL, c->sasl_started ? &sasl : NULL);
    if (c->zh && a->digest)
        zoo_add_auth(c->zh, "digest", a->digest, (int)strlen(a->digest), NULL, NULL);
    return zkc_connect(c);
}

void km_zkc_close(km_zkc *c)
{
    if (!c)
        return;
    if (c->keepalive_running) {
        pthread_mutex_lock(&c->lock);
        c->stopping = true;
        pthread_mutex_unlock(&c->lock);
        pthread_join(c->keepalive, NULL);
    }
    if (c->zh)
        zookeeper_close(c->zh);
    pthread_mutex_destroy(&c->lock);
    /* no sasl_client_done(): the plugins stay loaded for the process, as in zk_secure.c */
    free(c->secret);
    free(c);
}

zhandle_t *km_zkc_handle(km_zkc *c) { return c->zh; }

static void on_data(int rc, const char *value, int len, const struct Stat *st, const void *d)
{
    zkc_call *call = (zkc_call *)d;
    call->rc = rc;
    if (rc == ZOK) {
        call->len = len < 0 ? 0 : len;
        call->data = malloc((size_t)call->len + 1);
        if (call->data) {
            memcpy(call->data, value ? value : "", (size_t)call->len);
            call->data[call->len] = '\0';
        }
        call->st = *st;
    }
    call->done = true;
}

int km_zkc_get(km_zkc *c, const char *path, char **data, int *len, struct Stat *st)
{
    zkc_call call = {0};
    int rc = zkc_wait(c, &call, ZKC_LOCKED(c, zoo_aget(c->zh, path, 0, on_data, &call)));
    if (rc == ZOK) {
        if (data) *data = call.data; else free(call.data);
        if (len) *len = call.len;
        if (st) *st = call.st;
    }
    return rc;
}

static void on_stat(int rc, const struct Stat *st, const void *d)
{
    zkc_call *call = (zkc_call *)d;
    call->rc = rc;
    if (rc == ZOK && st)
        call->st = *st;
    call->done = true;
}

int km_zkc_set(km_zkc *c, const char *path, const char *data, int version, struct Stat *st)
{
    zkc_call call = {0};
    int rc = zkc_wait(c, &call, ZKC_LOCKED(c, zoo_aset(c->zh, path, data, data ? (int)strlen(data) : -1, version,
                                         on_stat, &call)));
    if (rc == ZOK && st)
        *st = call.st;
    return rc;
}

static void on_string(int rc, const char *value, const void *d)
{
    (void)value;
    zkc_call *call = (zkc_call *)d;
    call->rc = rc;
    call->done = true;
}

int km_zkc_create(km_zkc *c, const char *path, const char *data, int flags)
{
    zkc_call call = {0};
    return zkc_wait(c, &call, ZKC_LOCKED(c, zoo_acreate(c->zh, path, data, data ? (int)strlen(data) : -1,
                                          &ZOO_OPEN_ACL_UNSAFE, flags, on_string, &call)));
}

static void on_void(int rc, const void *d)
{
    zkc_call *call = (zkc_call *)d;
    call->rc = rc;
    call->done = true;
}

int km_zkc_delete(km_zkc *c, const char *path, int version)
{
    zkc_call call = {0};
    return zkc_wait(c, &call, ZKC_LOCKED(c, zoo_adelete(c->zh, path, version, on_void, &call)));
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void on_children(int rc, const struct String_vector *v, const void *d)
{
    zkc_call *call = (zkc_call *)d;
    call->rc = rc;
    if (rc == ZOK) {
        call->names = calloc((size_t)v->count + 1, sizeof *call->names);
        for (int i = 0; call->names && i < v->count; i++)
            call->names[i] = strdup(v->data[i]);
        call->count = call->names ? v->count : 0;
        if (call->names)
            qsort(call->names, (size_t)call->count, sizeof *call->names, cmp_str);
    }
    call->done = true;
}

int km_zkc_children(km_zkc *c, const char *path, char ***out, int *count)
{
    zkc_call call = {0};
    int rc = zkc_wait(c, &call, ZKC_LOCKED(c, zoo_aget_children(c->zh, path, 0, on_children, &call)));
    if (rc == ZOK) {
        *out = call.names;
        *count = call.count;
    }
    return rc;
}

void km_zkc_free_strings(char **v, int count)
{
    for (int i = 0; v && i < count; i++)
        free(v[i]);
    free(v);
}

int km_zkc_delete_tree(km_zkc *c, const char *path)
{
    char **kids = NULL;
    int n = 0, rc = km_zkc_children(c, path, &kids, &n);
    if (rc == ZNONODE)
        return ZOK;
    for (int i = 0; rc == ZOK && i < n; i++) {
        char child[1024];
        snprintf(child, sizeof child, "%s/%s", strcmp(path, "/") ? path : "", kids[i]);
        if (strcmp(child, "/zookeeper"))
            rc = km_zkc_delete_tree(c, child);
    }
    km_zkc_free_strings(kids, n);
    if (rc == ZOK && strcmp(path, "/")) {
        rc = km_zkc_delete(c, path, -1);
        rc = rc == ZNONODE ? ZOK : rc;
    }
    return rc;
}

int km_zkc_mkdirs(km_zkc *c, const char *path)
{
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || *p == '\0') {
            char saved = *p;
            *p = '\0';
            int rc = km_zkc_create(c, buf, NULL, 0);
            if (rc != ZOK && rc != ZNODEEXISTS)
                return rc;
            *p = saved;
            if (!saved)
                return ZOK;
        }
    }
}

static void on_acl(int rc, struct ACL_vector *acl, struct Stat *st, const void *d)
{
    (void)st;
    zkc_call *call = (zkc_call *)d;
    call->rc = rc;
    if (rc == ZOK) { /* the client frees its copy after we return: move the entries out */
        struct ACL_vector *out = (struct ACL_vector *)call->data;
        *out = *acl;
        acl->count = 0;
        acl->data = NULL;
    }
    call->done = true;
}

int km_zkc_get_acl(km_zkc *c, const char *path, struct ACL_vector *acl)
{
    zkc_call call = {.data = (char *)acl};
    acl->count = 0;
    acl->data = NULL;
    return zkc_wait(c, &call, ZKC_LOCKED(c, zoo_aget_acl(c->zh, path, on_acl, &call)));
}

static void on_created_acl(int rc, const char *value, const void *d)
{
    (void)value;
    zkc_call *call = (zkc_call *)d;
    call->rc = rc;
    call->done = true;
}

int km_zkc_create_acl(km_zkc *c, const char *path, const char *data, const struct ACL_vector *acl)
{
    zkc_call call = {0};
    return zkc_wait(c, &call, ZKC_LOCKED(c, zoo_acreate(c->zh, path, data, data ? (int)strlen(data) : -1, acl, 0,
                                                        on_created_acl, &call)));
}

int km_zks_expire_session(const char *hosts, const clientid_t *id)
{
    km_zkc *twin = km_zkc_open(hosts, id, 10000);
    if (!twin)
        return -1;
    km_zkc_close(twin); /* closing the shared session ends it for the owner too */
    return 0;
}
