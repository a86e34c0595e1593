/* Leader election on ZooKeeper (the recipe of the ZooKeeper documentation): an ephemeral-sequential
 * node per instance under the election path; the lowest leads; each other one watches only the node
 * just before its own, so a departure wakes one instance, not all. Leadership ends with our session:
 * on expiry we say so before anything else and join again with a new node, at the back. A lost
 * connection suspends the lead at once: the client notices it only after two thirds of the session
 * timeout without a word from the server, so the session may expire - and the next instance take
 * over - within the last third. Our node stays; if the connection is back in time and it is still
 * the lowest, we lead again. */
#include "zk_writer.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct km_zkel {
    km_zkel_config cfg;
    char *hosts, *path, *data;
    zk_session sess;
    char node[128];       /* our node's name below path; "" while we have none */
    char leader_data[128]; /* what the leading node says (its instance name); "" while unknown */
    bool joining;         /* a create is on its way */
    bool leader, connected, closing;
};

static void el_log(km_zkel *e, km_log_level lvl, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void el_log(km_zkel *e, km_log_level lvl, const char *fmt, ...)
{
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (e->cfg.log)
        e->cfg.log(lvl, msg, e->cfg.ctx);
}

static void set_leader(km_zkel *e, bool leader)
{
    if (e->leader == leader)
        return;
    e->leader = leader;
    if (e->cfg.on_change)
        e->cfg.on_change(e, leader, e->cfg.ctx);
}

static bool gone(km_zkel *e, int rc)
{
    return e->closing || rc == ZCLOSING || rc == ZSESSIONEXPIRED || rc == ZINVALIDSTATE;
}

static void check(km_zkel *e);
static void join(km_zkel *e);

static void on_pred_watch(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
    (void)zh; (void)state; (void)path;
    km_zkel *e = ctx;
    if (!e->closing && type == ZOO_DELETED_EVENT)
        check(e);
}

static void on_pred_exists(int rc, const struct Stat *st, const void *data)
{
    (void)st;
    km_zkel *e = (km_zkel *)data;
    if (gone(e, rc))
        return;
    if (rc == ZNONODE)
        return check(e); /* gone between the listing and the watch: look again */
    if (rc != ZOK)
        el_log(e, KM_LOG_WARN, "election: watching our predecessor failed: %s", zerror(rc));
}

static int by_sequence(const void *a, const void *b)
{
    const char *x = *(const char *const *)a, *y = *(const char *const *)b;
    const char *sx = strrchr(x, '_'), *sy = strrchr(y, '_');
    return strcmp(sx ? sx : x, sy ? sy : y);
}

/* The leading node changed or went: list again, which also learns the new leader. */
static void on_leader_watch(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
    (void)zh; (void)state; (void)path;
    km_zkel *e = ctx;
    if (!e->closing && (type == ZOO_DELETED_EVENT || type == ZOO_CHANGED_EVENT))
        check(e);
}

static void on_leader_data(int rc, const char *value, int len, const struct Stat *st, const void *data)
{
    (void)st;
    km_zkel *e = (km_zkel *)data;
    if (gone(e, rc))
        return;
    if (rc == ZNONODE)
        return check(e);
    if (rc == ZOK && value && len >= 0)
        snprintf(e->leader_data, sizeof e->leader_data, "%.*s", len, value);
}

/* A standby learns who leads (the lowest node's data) and hears when that changes, for status pages. */
static void learn_leader(km_zkel *e, const char *lowest)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", e->path, lowest);
    e->leader_data[0] = '\0';
    zoo_awget(e->sess.zh, path, on_leader_watch, e, on_leader_data, e);
}

static void on_children(int rc, const struct String_vector *v, const void *data)
{
    km_zkel *e = (km_zkel *)data;
    if (gone(e, rc) || !e->node[0])
        return;
    if (rc != ZOK) {
        el_log(e, KM_LOG_WARN, "election: listing %s failed: %s", e->path, zerror(rc));
        return;
    }
    qsort(v->data, (size_t)v->count, sizeof v->data[0], by_sequence);
    int mine = -1;
    for (int i = 0; i < v->count; i++)
        if (!strcmp(v->data[i], e->node))
            mine = i;
    if (mine < 0) { /* our node is gone (deleted by hand?): we cannot lead without one */
        el_log(e, KM_LOG_WARN, "election: our node %s/%s disappeared; joining again", e->path, e->node);
        set_leader(e, false);
        e->node[0] = '\0';
        return join(e);
    }
    if (mine == 0) {
        snprintf(e->leader_data, sizeof e->leader_data, "%s", e->data);
        if (!e->leader)
            el_log(e, KM_LOG_INFO, "election: %s/%s is the lowest of %d: leading", e->path, e->node, v->count);
        return set_leader(e, true);
    }
    char pred[512];
    snprintf(pred, sizeof pred, "%s/%s", e->path, v->data[mine - 1]);
    el_log(e, KM_LOG_INFO, "election: %s/%s is number %d of %d: standing by behind %s", e->path, e->node, mine + 1,
           v->count, v->data[mine - 1]);
    set_leader(e, false);
    learn_leader(e, v->data[0]);
    zoo_awexists(e->sess.zh, pred, on_pred_watch, e, on_pred_exists, e);
}

static void check(km_zkel *e)
{
    if (e->sess.zh && zoo_aget_children(e->sess.zh, e->path, 0, on_children, e) != ZOK)
        el_log(e, KM_LOG_WARN, "election: cannot list %s now; waiting for the connection", e->path);
}

static void on_created(int rc, const char *name, const void *data)
{
    km_zkel *e = (km_zkel *)data;
    e->joining = false;
    if (gone(e, rc))
        return;
    if (rc != ZOK) {
        el_log(e, KM_LOG_WARN, "election: creating our node under %s failed: %s", e->path, zerror(rc));
        return;
    }
    const char *base = strrchr(name, '/');
    snprintf(e->node, sizeof e->node, "%s", base ? base + 1 : name);
    check(e);
}

static void on_parent(int rc, const char *name, const void *data)
{
    (void)rc; (void)name; (void)data; /* ZNODEEXISTS is the usual answer; the node's create says the rest */
}

/* Creates the path's missing parents, then our node: one session answers in order. */
static void join(km_zkel *e)
{
    if (e->joining || e->node[0] || !e->sess.zh)
        return;
    e->leader_data[0] = '\0'; /* known again once our node is listed */
    for (size_t i = 1; e->path[i - 1]; i++) {
        if (e->path[i] != '/' && e->path[i])
            continue;
        char prefix[512];
        snprintf(prefix, sizeof prefix, "%.*s", (int)i, e->path);
        zoo_acreate(e->sess.zh, prefix, NULL, -1, zk_session_acl(&e->sess, prefix), 0, on_parent, e);
    }
    char node[600];
    snprintf(node, sizeof node, "%s/n_", e->path);
    e->joining = zoo_acreate(e->sess.zh, node, e->data, (int)strlen(e->data), zk_session_acl(&e->sess, node),
                             ZOO_EPHEMERAL | ZOO_SEQUENCE, on_created, e) == ZOK;
}

static void on_session(zk_session *s, int state)
{
    km_zkel *e = s->owner;
    if (e->closing)
        return;
    if (state == ZOO_AUTH_FAILED_STATE) { /* never retried without the configured security */
        el_log(e, KM_LOG_ERROR, "election: %s; not taking part", s->auth_error);
        e->connected = false;
        set_leader(e, false);
        if (e->cfg.on_refused)
            e->cfg.on_refused(e, s->auth_error, e->cfg.ctx);
        return;
    }
    if (state == ZOO_EXPIRED_SESSION_STATE) {
        el_log(e, KM_LOG_WARN, "election: session expired: %s; joining again with a new node",
               e->leader ? "no longer leading" : "standing by");
        e->connected = false;
        e->node[0] = '\0';
        e->joining = false;
        set_leader(e, false);
        zk_session_restart(&e->sess);
        return;
    }
    bool was = e->connected;
    e->connected = state == ZOO_CONNECTED_STATE;
    if (was && !e->connected) {
        el_log(e, KM_LOG_WARN, "election: lost the connection to ZooKeeper; %s until it is back (the session "
               "expires if it is not back within %d ms)", e->leader ? "not leading" : "standing by",
               e->sess.timeout_ms);
        set_leader(e, false);
    } else if (!was && e->connected && e->node[0]) {
        el_log(e, KM_LOG_INFO, "election: connection to ZooKeeper back, same session");
    }
    if (e->connected)
        e->node[0] ? check(e) : join(e);
}

static void on_deleted(int rc, const void *data)
{
    km_zkel *e = (km_zkel *)data;
    if (!gone(e, rc))
        join(e);
}

void km_zkel_rejoin(km_zkel *e)
{
    set_leader(e, false);
    if (!e->node[0] || !e->sess.zh)
        return;
    char node[600];
    snprintf(node, sizeof node, "%s/%s", e->path, e->node);
    el_log(e, KM_LOG_INFO, "election: leaving %s to join again at the back", node);
    e->node[0] = '\0';
    if (zoo_adelete(e->sess.zh, node, -1, on_deleted, e) != ZOK)
        zk_session_restart(&e->sess); /* not connected: a new session drops the old node with the old one */
}

km_zkel *km_zkel_new(struct ev_loop *loop, const km_zkel_config *cfg, km_err *err)
{
    km_zkel *e = calloc(1, sizeof *e);
    if (!e || !cfg->hosts || !cfg->path || cfg->path[0] != '/' || cfg->path[strlen(cfg->path) - 1] == '/') {
        free(e);
        return km_fail(err, "election: need ZooKeeper hosts and an absolute path (got '%s')",
                       cfg->path ? cfg->path : ""), NULL;
    }
    e->cfg = *cfg;
    e->hosts = strdup(cfg->hosts);
    e->path = strdup(cfg->path);
    e->data = strdup(cfg->data ? cfg->data : "");
    if (!e->hosts || !e->path || !e->data) {
        km_zkel_free(e);
        return km_fail(err, "election: out of memory"), NULL;
    }
    e->sess.hosts = e->hosts;
    e->sess.timeout_ms = cfg->session_timeout_ms ? cfg->session_timeout_ms : 10000;
    e->sess.security = cfg->security;
    e->sess.on_state = on_session;
    e->sess.owner = e;
    if (zk_session_start(&e->sess, loop, err)) {
        km_zkel_free(e);
        return NULL;
    }
    return e;
}

void km_zkel_free(km_zkel *e)
{
    if (!e)
        return;
    e->closing = true;
    zk_session_close(&e->sess);
    free(e->hosts);
    free(e->path);
    free(e->data);
    free(e);
}

bool km_zkel_leader(const km_zkel *e) { return e->leader; }
bool km_zkel_connected(const km_zkel *e) { return e->connected; }
const char *km_zkel_leader_data(const km_zkel *e) { return e->leader_data; }
const char *km_zkel_node(const km_zkel *e) { return e->node; }
