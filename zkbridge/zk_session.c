/* The ZooKeeper session on libev: the single-threaded C client tells us which fd and events it
 * wants and by when (zookeeper_interest); we wake it on those (zookeeper_process). An ev_prepare
 * re-reads its interest before every loop iteration, so requests queued from any callback are
 * flushed without the caller having to poke the loop. */
#include "zk_writer.h"

#include <ev.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* Terminal: the credentials or certificates were refused. The owner stops (REFUSED), saying why;
 * retrying the same credentials, or dropping them, is never done. */
__attribute__((format(printf, 2, 0)))
static void auth_failed(zk_session *s, const char *fmt, const char *detail)
{
    if (s->auth_failed)
        return;
    s->auth_failed = true;
    s->restart_pending = true; /* closes the handle at the next loop turn; none is opened again */
    snprintf(s->auth_error, sizeof s->auth_error, fmt, detail);
    if (s->on_state)
        s->on_state(s, ZOO_AUTH_FAILED_STATE);
}

/* The client retries a failed TLS handshake forever; a refused certificate (theirs or ours) will
 * not change by retrying, so it ends the session like a failed authentication. A failed SASL exchange moves
 * the handle to ZOO_AUTH_FAILED_STATE without any watcher event, so it is read here too. */
static void check_security(zk_session *s)
{
    int verify_failed = 0;
    const char *why = s->zh ? zoo_ssl_error(s->zh, &verify_failed) : "";
    if (verify_failed == 1)
        auth_failed(s, "zookeeper TLS handshake failed: the server's certificate was refused: %s "
                    "(zookeeper.ssl.truststore.*, zookeeper.ssl.endpoint.identification.algorithm)", why);
    else if (verify_failed == 2)
        auth_failed(s, "zookeeper TLS: the server refused our certificate: %s (zookeeper.ssl.keystore.*, "
                    "the servers' ssl.trustStore)", why);
    else if (s->zh && zoo_state(s->zh) == ZOO_AUTH_FAILED_STATE)
        auth_failed(s, "zookeeper refused the authentication of %s (SASL or digest credentials wrong or unknown "
                    "to the server)", s->security && s->security->sasl_username ? s->security->sasl_username
                    : "this client");
}

static void zk_process(zk_session *s, int events)
{
    if (!s->zh)
        return;
    s->in_process = true;
    zookeeper_process(s->zh, events);
    s->in_process = false;
    check_security(s);
}

const struct ACL_vector *zk_session_acl(const zk_session *s, const char *path)
{
    return km_zk_acl_for(s->security, path);
}

static void on_io(struct ev_loop *loop, ev_io *io, int revents)
{
    (void)loop;
    zk_session *s = io->data;
    zk_process(s, ((revents & EV_READ) ? ZOOKEEPER_READ : 0) | ((revents & EV_WRITE) ? ZOOKEEPER_WRITE : 0));
}

static void on_timer(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)loop; (void)revents;
    zk_process(t->data, 0);
}

/* Re-arms the io and timer watchers from the client's current interest. */
static void on_prepare(struct ev_loop *loop, ev_prepare *p, int revents)
{
    (void)revents;
    zk_session *s = p->data;
    if (s->restart_pending)
        zk_session_restart_now(s);
    if (!s->zh)
        return;
    int fd = -1, interest = 0;
    struct timeval tv = {0, 0};
    zookeeper_interest(s->zh, &fd, &interest, &tv); /* runs the TLS handshake, if any */
    check_security(s);
    if (!s->zh)
        return;
    int events = ((interest & ZOOKEEPER_READ) ? EV_READ : 0) | ((interest & ZOOKEEPER_WRITE) ? EV_WRITE : 0);
    if (fd != s->io.fd || events != (s->io.events & (EV_READ | EV_WRITE)) || !ev_is_active(&s->io)) {
        ev_io_stop(loop, &s->io);
        if (fd >= 0 && events) {
            ev_io_set(&s->io, fd, events);
            ev_io_start(loop, &s->io);
        }
    }
    double after = (double)tv.tv_sec + (double)tv.tv_usec / 1e6;
    ev_timer_stop(loop, &s->timer);
    ev_timer_set(&s->timer, after > 0 ? after : 0.001, 0.);
    ev_timer_start(loop, &s->timer);
}

static void on_watch(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
    (void)zh; (void)path;
    zk_session *s = ctx;
    if (type == ZOO_SESSION_EVENT && state == ZOO_AUTH_FAILED_STATE)
        check_security(s);
    else if (type == ZOO_SESSION_EVENT && s->on_state)
        s->on_state(s, state);
}

static void on_digest_auth(int rc, const void *data)
{
    zk_session *s = (zk_session *)data;
    if (rc == ZAUTHFAILED)
        auth_failed(s, "zookeeper refused digest authentication (zookeeper digest credentials for %s)", s->hosts);
}

/* A new handle, secured as configured; digest credentials go with it before any request. */
static zhandle_t *open_handle(zk_session *s, const char *hosts, watcher_fn fn, km_err *err)
{
    if (!s->secure && !(s->secure = zk_secure_new(s->security, err)))
        return NULL;
    zhandle_t *zh = zk_secure_init(s->secure, hosts, fn, s->timeout_ms, s);
    if (!zh) {
        km_fail(err, "zk session: cannot open a ZooKeeper handle for %s (bad host list?)", hosts);
        return NULL;
    }
    const char *digest = s->security ? s->security->digest_auth : NULL;
    if (digest && zoo_add_auth(zh, "digest", digest, (int)strlen(digest), on_digest_auth, s) != ZOK) {
        zookeeper_close(zh);
        km_fail(err, "zk session: cannot add digest authentication for %s", hosts);
        return NULL;
    }
    return zh;
}

/* ---- the chroot: ZK-mode brokers create it when missing, and so do we ---- */

static void on_chroot_created(int rc, const char *value, const void *data)
{
    (void)value;
    zk_session *s = (zk_session *)data;
    if (rc != ZOK && rc != ZNODEEXISTS)
        s->chroot_pending = -1;  /* try again with the next handle */
    else if (s->chroot_pending > 0)
        s->chroot_pending--;
    if (s->chroot_pending <= 0) {
        s->chroot_ready = s->chroot_pending == 0;
        zk_session_restart(s);   /* the root handle's job is done: open the chrooted one */
    }
}

/* On the root handle: create every prefix of the chroot in order ("/a", then "/a/b"). */
static void on_root_watch(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
    zk_session *s = ctx;
    if (type == ZOO_SESSION_EVENT && state == ZOO_AUTH_FAILED_STATE)
        return on_watch(zh, type, state, path, ctx);
    if (type != ZOO_SESSION_EVENT || state != ZOO_CONNECTED_STATE || s->chroot_pending)
        return;
    const char *chroot = strchr(s->hosts, '/');
    char prefix[1024];
    for (size_t i = 1; chroot[i - 1] && i < sizeof prefix; i++) {
        if (chroot[i] != '/' && chroot[i])
            continue;
        memcpy(prefix, chroot, i);
        prefix[i] = '\0';
        if (zoo_acreate(zh, prefix, NULL, -1, zk_session_acl(s, prefix), 0, on_chroot_created, s) == ZOK)
            s->chroot_pending++;
    }
}

int zk_session_open(zk_session *s, km_err *err)
{
    zoo_set_debug_level((ZooLogLevel)0); /* quiet: our own log says what matters */
    if (s->auth_failed)
        return km_fail(err, "%s", s->auth_error);
    const char *chroot = strchr(s->hosts, '/');
    if (chroot && chroot[1] && !s->chroot_ready) {
        char root[1024];
        snprintf(root, sizeof root, "%.*s", (int)(chroot - s->hosts), s->hosts);
        s->chroot_pending = 0;
        s->zh = open_handle(s, root, on_root_watch, err);
    } else {
        s->zh = open_handle(s, s->hosts, on_watch, err);
    }
    if (!s->zh)
        return -1;
    /* By default the client re-resolves the host list every time it is asked for its interest,
     * i.e. on every loop iteration: a netlink round trip per batch of replies. Once every 10 s
     * still follows DNS changes (and it always re-resolves after a lost connection). */
    zoo_set_servers_resolution_delay(s->zh, 10000);
    s->generation++;
    return 0;
}

int zk_session_start(zk_session *s, struct ev_loop *loop, km_err *err)
{
    s->loop = loop;
    ev_io_init(&s->io, on_io, -1, 0);
    s->io.data = s;
    ev_timer_init(&s->timer, on_timer, 0., 0.);
    s->timer.data = s;
    ev_prepare_init(&s->prepare, on_prepare);
    s->prepare.data = s;
    ev_prepare_start(loop, &s->prepare);
    return zk_session_open(s, err);
}

/* Closing fires every pending completion (ZCLOSING) before it returns, which is why it must never
 * run inside zookeeper_process: we defer it to the next ev_prepare. */
void zk_session_restart(zk_session *s)
{
    s->restart_pending = true;
}

void zk_session_restart_now(zk_session *s)
{
    s->restart_pending = false;
    ev_io_stop(s->loop, &s->io);
    ev_timer_stop(s->loop, &s->timer);
    if (s->zh)
        zookeeper_close(s->zh);
    s->zh = NULL;
    km_err err = {{0}};
    if (!s->auth_failed && zk_session_open(s, &err) && s->on_state)
        s->on_state(s, ZOO_EXPIRED_SESSION_STATE);
}

/* zookeeper_close on a handle the client still thinks connected sends the close request and waits
 * for its answer - seconds of a blocked loop when the network is gone. Shutting the socket first
 * makes it fail at once; the server then ends the session by its timeout. */
void zk_session_abandon(zk_session *s)
{
    int fd = -1, interest = 0;
    struct timeval tv = {0, 0};
    if (s->zh && zookeeper_interest(s->zh, &fd, &interest, &tv) == ZOK && fd >= 0)
        shutdown(fd, SHUT_RDWR);
}

void zk_session_close(zk_session *s)
{
    if (s->loop) {
        ev_io_stop(s->loop, &s->io);
        ev_timer_stop(s->loop, &s->timer);
        ev_prepare_stop(s->loop, &s->prepare);
    }
    if (s->zh)
        zookeeper_close(s->zh);
    s->zh = NULL;
    zk_secure_free(s->secure);
    s->secure = NULL;
}
