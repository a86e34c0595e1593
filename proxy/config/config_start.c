/* What can be checked before the daemon does anything (issue 18): every file a key names is a
 * regular file we can open, and every host a key names can exist. A standby checks them too, so a
 * typo stops the start (exit 2, naming the key), never the failover hours later. */
#include "km_config.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

static const char *kind_of(mode_t m)
{
    return S_ISDIR(m) ? "a directory" : S_ISFIFO(m) ? "a FIFO" : S_ISSOCK(m) ? "a socket"
           : S_ISCHR(m) ? "a character device" : S_ISBLK(m) ? "a block device" : "not a regular file";
}

/* O_NONBLOCK: opening a FIFO for reading must not wait for a writer (it would hold the daemon
 * before its signal handlers are armed, or after, inside OpenSSL, past SIGTERM). */
int km_config_check_file(const char *key, const char *path, km_err *err)
{
    if (!path)
        return 0;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0)
        return km_fail(err, "%s=%s: cannot open: %s", key, path, strerror(errno));
    struct stat st;
    int rc = fstat(fd, &st);
    int saved = errno;
    close(fd);
    if (rc)
        return km_fail(err, "%s=%s: cannot stat: %s", key, path, strerror(saved));
    if (!S_ISREG(st.st_mode))
        return km_fail(err, "%s=%s: is %s, not a regular file", key, path, kind_of(st.st_mode));
    return 0;
}

int km_config_check_files(const km_config *c, km_err *err)
{
    const struct { const char *key, *path; } files[] = {
        {"broker.tls.ca.file", c->broker_tls_ca},
        {"broker.tls.cert.file", c->broker_tls_cert},
        {"broker.tls.key.file", c->broker_tls_key},
        {"broker.sasl.password.file", c->broker_sasl_password_file},
        {"metrics.post.token.file", c->metrics_post_token_file},
        {"ssl.truststore.location", c->ssl_truststore_location},
        {"ssl.keystore.location", c->ssl_keystore_location},
        {"proxy.client.ssl.certificate.location", c->proxy.client_ssl_cert},
        {"proxy.client.ssl.key.location", c->proxy.client_ssl_key},
        {"proxy.client.ssl.ca.location", c->proxy.client_ssl_ca},
        {"proxy.upstream.ssl.certificate.location", c->proxy.upstream_ssl_cert},
        {"proxy.upstream.ssl.key.location", c->proxy.upstream_ssl_key},
        {"proxy.upstream.ssl.ca.location", c->proxy.upstream_ssl_ca},
    };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
        if (km_config_check_file(files[i].key, files[i].path, err))
            return -1;
    return 0;
}

/* ---- hosts ------------------------------------------------------------------------------------ */

/* EAI_NONAME: the resolver answered that the name does not exist (NXDOMAIN, or no such entry with
 * no DNS configured); it will not appear by retrying. EAI_AGAIN and the rest: the resolver could
 * not answer now (DNS down); the connection retries resolve again. */
static int resolve(const char *key, const char *host, km_config_warn_fn warn, void *ud, km_err *err)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
    int rc = getaddrinfo(host, NULL, &hints, &res);
    if (res)
        freeaddrinfo(res);
    if (!rc)
        return 0;
    if (rc == EAI_NONAME)
        return km_fail(err, "%s: host '%s' does not exist (%s)", key, host, gai_strerror(rc));
    char msg[512];
    snprintf(msg, sizeof msg, "%s: host '%s' cannot be resolved now (%s): going on, the connection resolves it "
             "again", key, host, gai_strerror(rc));
    if (warn)
        warn(ud, msg);
    return 0;
}

/* One "[ID@]HOST[:PORT]" or "[ID@][V6]:PORT" token: the host part. */
static int host_of(const char *key, const char *tok, size_t n, char *host, size_t cap, km_err *err)
{
    const char *at = memchr(tok, '@', n);
    if (at) {
        n -= (size_t)(at + 1 - tok);
        tok = at + 1;
    }
    size_t len = n;
    if (n && tok[0] == '[') {
        const char *rb = memchr(tok, ']', n);
        if (!rb)
            return km_fail(err, "%s: '%.*s' opens '[' without ']'", key, (int)n, tok);
        tok++;
        len = (size_t)(rb - tok);
    } else {
        const char *colon = memchr(tok, ':', n);
        len = colon ? (size_t)(colon - tok) : n;
    }
    if (!len || len >= cap)
        return km_fail(err, "%s: '%.*s' has no host", key, (int)n, tok);
    memcpy(host, tok, len);
    host[len] = '\0';
    return 0;
}

/* Every host of a comma-separated list, up to `end` (the chroot's '/' for zookeeper.connect). */
static int resolve_list(const char *key, const char *list, size_t end, km_config_warn_fn warn, void *ud,
                        km_err *err)
{
    for (size_t i = 0; list && i < end;) {
        size_t n = strcspn(list + i, ",");
        if (n > end - i)
            n = end - i;
        char host[256];
        if (host_of(key, list + i, n, host, sizeof host, err) || resolve(key, host, warn, ud, err))
            return -1;
        i += n + 1;
    }
    return 0;
}

int km_config_check_hosts(const km_config *c, km_config_warn_fn warn, void *ud, km_err *err)
{
    const char *zk = c->zk_connect;
    size_t zk_end = zk ? strcspn(zk, "/") : 0;
    const char *qb = c->quorum_bootstrap_servers, *qv = c->quorum_voters;
    return resolve_list("zookeeper.connect", zk, zk_end, warn, ud, err) ||
           resolve_list("controller.quorum.bootstrap.servers", qb, qb ? strlen(qb) : 0, warn, ud, err) ||
           resolve_list("controller.quorum.voters", qv, qv ? strlen(qv) : 0, warn, ud, err) ? -1 : 0;
}
