/* The inline proxy instance: routes (one per proxied broker, plus bootstrap),
 * their listeners, and the connection limits checked at accept. */
#include "inline_private.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <unistd.h>

void inl_log_sink_locked(km_inline *p, int level, const char *msg)
{
    if (p->log)
        p->log(p->log_ud, level, msg);
    else
        fprintf(stderr, "kmproxy proxy: %s\n", msg);
}

void inl_log(km_inline *p, int level, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&p->log_lock); /* workers log too: one line at a time reaches the sink */
    inl_log_sink_locked(p, level, msg);
    pthread_mutex_unlock(&p->log_lock);
}

/* "HOST:PORT" or "[V6]:PORT" into host (brackets dropped) and port. */
static int split_address(const char *s, char *host, size_t cap, uint16_t *port, km_err *err)
{
    const char *colon = strrchr(s, ':');
    if (!colon)
        return km_fail(err, "address '%s' is not HOST:PORT", s);
    const char *h = s;
    size_t n = (size_t)(colon - s);
    if (n >= 2 && h[0] == '[' && h[n - 1] == ']') {
        h++;
        n -= 2;
    }
    if (n >= cap)
        return km_fail(err, "address '%s': host too long", s);
    memcpy(host, h, n);
    host[n] = '\0';
    *port = (uint16_t)atoi(colon + 1);
    return 0;
}

const char *inl_route_name(const inl_route *r, char *buf)
{
    if (r->broker_id == INL_SNI_ROUTE)
        return strcpy(buf, "SNI listener");
    if (r->broker_id < 0)
        return strcpy(buf, "bootstrap listener");
    snprintf(buf, 48, "broker %d listener", r->broker_id);
    return buf;
}

static bool unspecified_host(const char *h)
{
    return !*h || !strcmp(h, "0.0.0.0") || !strcmp(h, "::");
}

/* ---- client limits ---------------------------------------------------------------- */

static inl_ip_count *ip_slot(km_inline *p, const char *ip, bool create)
{
    for (size_t i = 0; i < p->n_ips; i++)
        if (!strcmp(p->ips[i].ip, ip))
            return &p->ips[i];
    if (!create)
        return NULL;
    inl_ip_count *grown = realloc(p->ips, (p->n_ips + 1) * sizeof *grown);
    if (!grown)
        return NULL;
    p->ips = grown;
    inl_ip_count *slot = &grown[p->n_ips++];
    snprintf(slot->ip, sizeof slot->ip, "%s", ip);
    slot->n = 0;
    return slot;
}

void inl_ip_release(km_inline *p, const char *ip)
{
    inl_ip_count *slot = ip_slot(p, ip, false);
    if (slot && --slot->n == 0)
        *slot = p->ips[--p->n_ips]; /* order does not matter */
}

static void peer_ip(const char *peer, char *ip, size_t cap)
{
    snprintf(ip, cap, "%s", peer);
    char *colon = strrchr(ip, ':');
    if (colon)
        *colon = '\0';
}

static void on_accept(km_net_listener *l, int fd, const char *peer, void *ud)
{
    (void)l;
    inl_route *r = ud;
    km_inline *p = r->p;
    char ip[64];
    peer_ip(peer, ip, sizeof ip);
    pthread_mutex_lock(&p->lock); /* workers release their clients' counts */
    inl_ip_count *slot = ip_slot(p, ip, true);
    const char *why = __atomic_load_n(&p->open, __ATOMIC_RELAXED) >= p->max_conns ? "proxy.max.connections"
                      : !slot                                                    ? "out of memory"
                      : slot->n >= p->max_conns_per_ip ? "proxy.max.connections.per.ip"
                                                       : NULL;
    if (why && slot && slot->n == 0) /* made just now: drop it again */
        *slot = p->ips[--p->n_ips];
    else if (!why)
        slot->n++;
    pthread_mutex_unlock(&p->lock);
    if (why) {
        INL_ADD(p->main_stats.refused, 1);
        char rname[48];
        inl_log_conn(p, INL_LOG_REFUSED, "refused client %s on the %s: %s reached", peer, inl_route_name(r, rname),
                     why);
        close(fd);
        return;
    }
    inl_handoff(p, r, fd, peer, ip);
}

/* Listeners opened off the main loop (a worker rewriting a response) start accepting here. */
static void start_waiting_listeners(km_inline *p)
{
    pthread_mutex_lock(&p->lock);
    for (size_t i = 0; i < p->n_routes; i++)
        if (p->routes[i]->listener_waiting) {
            km_net_listener_start(p->routes[i]->listener, p->loop);
            p->routes[i]->listener_waiting = false;
        }
    pthread_mutex_unlock(&p->lock);
}

static void on_main_wake(struct ev_loop *loop, ev_async *a, int revents)
{
    (void)loop, (void)revents;
    km_inline *p = a->data;
    start_waiting_listeners(p);
    inl_inspect_drain(p);
    inl_log_limit_arm(p);
}

void inl_wake_main(km_inline *p)
{
    ev_async_send(p->loop, &p->wake);
}

/* Bound and listening at once, so that a client told the address finds it; a listener made
 * while the proxy runs (any thread) starts accepting when the main loop wakes. */
static int open_listener(inl_route *r, bool running, km_err *err)
{
    km_net_listener *l = km_net_listen_detached(r->listen_host[0] ? r->listen_host : NULL, r->listen_port,
                                                r->p->backlog, on_accept, r, err);
    if (!l)
        return -1;
    r->listener = l;
    r->listen_port = km_net_listener_port(l);
    if (!r->adv_port)
        r->adv_port = r->listen_port;
    INL_ADD(r->p->main_stats.listeners, 1);
    if (!running) {
        km_net_listener_start(l, r->p->loop);
    } else {
        r->listener_waiting = true;
        inl_wake_main(r->p);
    }
    return 0;
}

static inl_route *add_route(km_inline *p, int32_t id, bool is_static, km_err *err)
{
    inl_route **grown = realloc(p->routes, (p->n_routes + 1) * sizeof *grown);
    inl_route *r = calloc(1, sizeof *r);
    if (grown)
        p->routes = grown;
    if (!grown || !r) {
        free(r);
        return km_fail(err, "proxy: out of memory for a route"), NULL;
    }
    r->p = p;
    r->broker_id = id;
    r->is_static = is_static;
    p->routes[p->n_routes++] = r;
    return r;
}

/* A configured route: listen and upstream from HOST:PORT, advertised as
 * proxy.advertised.host (else the listen host) and the listen port. */
static inl_route *find_route(const km_inline *p, int32_t id);

/* SNI routing: broker id is told <prefix><id><suffix> at the SNI port. */
static void sni_advertise(km_inline *p, inl_route *r)
{
    if (!p->sni_route || r->broker_id < 0)
        return;
    snprintf(r->adv_host, sizeof r->adv_host, "%s%d%s", p->sni_prefix ? p->sni_prefix : "", r->broker_id,
             p->sni_suffix ? p->sni_suffix : "");
    r->adv_port = p->sni_route->listen_port;
}

static int add_static_route(km_inline *p, int32_t id, const char *listen, const char *upstream, km_err *err)
{
    inl_route *r = add_route(p, id, true, err);
    if (!r || split_address(upstream, r->up_host, sizeof r->up_host, &r->up_port, err))
        return -1;
    if (!listen) { /* reached through the SNI listener only */
        sni_advertise(p, r);
        return 0;
    }
    if (split_address(listen, r->listen_host, sizeof r->listen_host, &r->listen_port, err))
        return -1;
    snprintf(r->adv_host, sizeof r->adv_host, "%s", p->advertised_host ? p->advertised_host : r->listen_host);
    if (unspecified_host(r->adv_host))
        return km_fail(err, "proxy: %s listens on every address: set proxy.advertised.host so clients get a "
                       "host they can reach", listen);
    if (open_listener(r, false, err)) {
        km_err why = *err;
        return km_fail(err, "proxy: broker %d's listener %s: %s", id, listen, why.msg);
    }
    sni_advertise(p, r);
    return 0;
}

/* The SNI listener (a route of its own) and the bootstrap upstream it falls back to. */
static int add_sni_listener(km_inline *p, const km_inline_config *cfg, km_err *err)
{
    inl_route *r = add_route(p, INL_SNI_ROUTE, true, err);
    if (!r || split_address(cfg->sni_listen, r->listen_host, sizeof r->listen_host, &r->listen_port, err))
        return -1;
    if (open_listener(r, false, err)) {
        km_err why = *err;
        return km_fail(err, "proxy: the SNI listener %s: %s", cfg->sni_listen, why.msg);
    }
    p->sni_route = r;
    if ((cfg->sni_prefix && !(p->sni_prefix = strdup(cfg->sni_prefix))) ||
        (cfg->sni_suffix && !(p->sni_suffix = strdup(cfg->sni_suffix))))
        return km_fail(err, "proxy: out of memory");
    if (cfg->bootstrap_upstream && !cfg->bootstrap_listen) { /* bootstrap through SNI only */
        inl_route *b = add_route(p, -1, true, err);
        if (!b || split_address(cfg->bootstrap_upstream, b->up_host, sizeof b->up_host, &b->up_port, err))
            return -1;
    }
    return 0;
}

inl_route *inl_route_for_sni(km_inline *p, const char *name)
{
    size_t pre = p->sni_prefix ? strlen(p->sni_prefix) : 0, suf = p->sni_suffix ? strlen(p->sni_suffix) : 0;
    size_t n = name ? strlen(name) : 0;
    if (n > pre + suf && (!pre || !strncasecmp(name, p->sni_prefix, pre)) &&
        (!suf || !strcasecmp(name + n - suf, p->sni_suffix))) {
        size_t len = n - pre - suf;
        if (strspn(name + pre, "0123456789") >= len) { /* names a broker id: it must be one */
            int64_t id = 0;
            for (size_t i = 0; i < len && id <= INT32_MAX; i++)
                id = id * 10 + (name[pre + i] - '0');
            return id <= INT32_MAX ? find_route(p, (int32_t)id) : NULL; /* no wrap-around onto another broker */
        }
    }
    return find_route(p, -1);
}

static inl_route *find_route(const km_inline *p, int32_t id)
{
    for (size_t i = 0; i < p->n_routes; i++)
        if (p->routes[i]->broker_id == id)
            return p->routes[i];
    return NULL;
}

/* True the first time broker id turns out unservable: it is logged once, not per response. */
static bool first_unserved(km_inline *p, int32_t id)
{
    for (size_t i = 0; i < p->n_unserved; i++)
        if (p->unserved[i] == id)
            return false;
    int32_t *grown = realloc(p->unserved, (p->n_unserved + 1) * sizeof *grown);
    if (grown) {
        p->unserved = grown;
        grown[p->n_unserved++] = id;
    }
    return true;
}

/* SNI mode: a broker learned from a response is reached through the SNI listener. */
static inl_route *add_sni_route(km_inline *p, int32_t id, const char *host, int32_t port)
{
    km_err err = {{0}};
    inl_route *r = add_route(p, id, false, &err);
    if (!r) {
        inl_log(p, 0, "%s", err.msg);
        return NULL;
    }
    snprintf(r->up_host, sizeof r->up_host, "%s", host);
    r->up_port = (uint16_t)port;
    sni_advertise(p, r);
    inl_log(p, 2, "broker %d: reached as SNI name %s for upstream %s:%d", id, r->adv_host, host, port);
    return r;
}

static inl_route *add_dynamic_route(km_inline *p, int32_t id, const char *host, int32_t port)
{
    km_err err = {{0}};
    if (p->sni_route)
        return add_sni_route(p, id, host, port);
    if (p->port_base < 0 || (int64_t)p->port_base + id > 65535) {
        if (first_unserved(p, id))
            inl_log(p, 1, "broker %d (%s:%d) has no proxy listener: no proxy.broker.%d.* and %s; left out of "
                "responses", id, host, port, id, p->port_base < 0 ? "no proxy.port.base" : "port.base + id > 65535");
        return NULL;
    }
    inl_route *r = add_route(p, id, false, &err);
    if (!r) {
        inl_log(p, 0, "%s", err.msg);
        return NULL;
    }
    snprintf(r->listen_host, sizeof r->listen_host, "%s", p->listen_host ? p->listen_host : "");
    r->listen_port = r->adv_port = (uint16_t)(p->port_base + id);
    snprintf(r->adv_host, sizeof r->adv_host, "%s", p->advertised_host);
    snprintf(r->up_host, sizeof r->up_host, "%s", host);
    r->up_port = (uint16_t)port;
    if (open_listener(r, true, &err)) {
        inl_log(p, 0, "broker %d: cannot open its listener on port %u: %s; left out of responses", id,
                r->listen_port, err.msg);
        free(p->routes[--p->n_routes]); /* retried when the broker is named again */
        return NULL;
    }
    inl_log(p, 2, "broker %d: listening on %s:%u for upstream %s:%d", id, r->listen_host[0] ? r->listen_host : "*",
            r->listen_port, host, port);
    return r;
}

static inl_route *route_for_broker_locked(km_inline *p, int32_t id, const char *host, int32_t port)
{
    inl_route *r = find_route(p, id);
    if (r && !r->is_static && (strcmp(r->up_host, host) || r->up_port != port) && port > 0 && port <= 65535) {
        /* A restart onto a new host or listener: new connections follow, live ones stay. */
        inl_log(p, 2, "broker %d: upstream moved from %s:%u to %s:%d", id, r->up_host, r->up_port, host, port);
        snprintf(r->up_host, sizeof r->up_host, "%s", host);
        r->up_port = (uint16_t)port;
    }
    if (r || id < 0 || port <= 0 || port > 65535)
        return r;
    return add_dynamic_route(p, id, host, port);
}

/* A route, once published, keeps its id and advertised address for the proxy's life: callers
 * read those after the lock is let go.  Its upstream may move (read under the lock). */
inl_route *inl_route_for_broker(km_inline *p, int32_t id, const char *host, int32_t port)
{
    pthread_mutex_lock(&p->lock);
    inl_route *r = route_for_broker_locked(p, id, host, port);
    pthread_mutex_unlock(&p->lock);
    return r;
}

static int keep_tls_config(km_inline *p, const km_inline_config *c, km_err *err);

static int copy_settings(km_inline *p, const km_inline_config *cfg, km_err *err)
{
    p->port_base = cfg->port_base;
    p->max_frame = (size_t)cfg->max_frame_bytes;
    p->buffer_bytes = (size_t)cfg->buffer_bytes;
    p->max_conns = (uint32_t)cfg->max_connections;
    p->max_conns_per_ip = (uint32_t)cfg->max_connections_per_ip;
    p->idle_timeout = cfg->idle_timeout_ms / 1000.0;
    p->request_timeout = cfg->request_timeout_ms / 1000.0;
    p->upstream_hold = cfg->upstream_hold_ms / 1000.0;
    p->read_timeout = cfg->request_read_timeout_ms / 1000.0;
    p->backlog = cfg->listen_backlog;
    if ((cfg->listen_host && !(p->listen_host = strdup(cfg->listen_host))) ||
        (cfg->advertised_host && !(p->advertised_host = strdup(cfg->advertised_host))))
        return km_fail(err, "proxy: out of memory");
    return 0;
}

/* Every client holds two descriptors, its own and its upstream's; listeners and the rest of the
 * daemon a few more. Below that, accept(2) fails with EMFILE long before proxy.max.connections,
 * so the soft limit is raised as far as the hard one allows, and a shortfall is said at start. */
static void check_open_files(km_inline *p)
{
    struct rlimit rl;
    rlim_t need = 2 * (rlim_t)p->max_conns + 64;
    if (getrlimit(RLIMIT_NOFILE, &rl) || rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= need)
        return;
    rlim_t can = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= need ? need : rl.rlim_max;
    struct rlimit raised = {can, rl.rlim_max};
    if (can > rl.rlim_cur && !setrlimit(RLIMIT_NOFILE, &raised)) {
        inl_log(p, 2, "raised the open-file limit (RLIMIT_NOFILE) from %llu to %llu for proxy.max.connections=%u",
                (unsigned long long)rl.rlim_cur, (unsigned long long)can, p->max_conns);
        rl.rlim_cur = can;
    }
    if (rl.rlim_cur < need)
        inl_log(p, 1, "the open-file limit (RLIMIT_NOFILE) is %llu but proxy.max.connections=%u needs about %llu "
                "(two per client, its own and its upstream's): clients past the limit will be refused; raise "
                "LimitNOFILE= (systemd) or ulimit -n, or lower proxy.max.connections",
                (unsigned long long)rl.rlim_cur, p->max_conns, (unsigned long long)need);
}

km_inline *km_inline_new(struct ev_loop *loop, const km_inline_config *cfg, km_inline_log_fn log, void *log_ud,
                         km_err *err)
{
    if (km_inline_config_validate(cfg, err))
        return NULL;
    km_inline *p = calloc(1, sizeof *p);
    if (!p)
        return km_fail(err, "proxy: out of memory"), NULL;
    p->loop = loop;
    p->controller_epoch = -1;
    p->log = log;
    p->log_ud = log_ud;
    pthread_mutex_init(&p->lock, NULL);
    pthread_mutex_init(&p->log_lock, NULL);
    p->inspect_tail = &p->inspect_head;
    ev_async_init(&p->wake, on_main_wake);
    p->wake.data = p;
    ev_async_start(loop, &p->wake);
    inl_log_limit_init(p);
    int rc = copy_settings(p, cfg, err);
    if (!rc)
        check_open_files(p);
    if (!rc)
        rc = keep_tls_config(p, cfg, err);
    if (!rc && cfg->sni_listen)
        rc = add_sni_listener(p, cfg, err);
    if (!rc)
        rc = inl_capture_open(p, cfg, err);
    if (!rc && cfg->bootstrap_listen)
        rc = add_static_route(p, -1, cfg->bootstrap_listen, cfg->bootstrap_upstream, err);
    for (size_t i = 0; !rc && i < cfg->n_brokers; i++)
        rc = add_static_route(p, cfg->brokers[i].id, cfg->brokers[i].listen, cfg->brokers[i].upstream, err);
    if (!rc) /* before the loop runs: no client can be accepted with nowhere to go */
        rc = inl_workers_start(p, cfg->threads, err);
    if (rc) {
        km_inline_free(p);
        return NULL;
    }
    inl_discover_start(p, cfg);
    return p;
}

/* The workers end first (their sessions give back IP counts, TLS references, capture
 * connections), then what they shared. */
void km_inline_free(km_inline *p)
{
    if (!p)
        return;
    inl_discover_stop(p);
    inl_workers_stop(p);
    ev_async_stop(p->loop, &p->wake);
    inl_inspect_drain(p); /* what the workers sent last is still checked */
    inl_log_limit_stop(p);
    inl_capture_free(p);
    for (size_t i = 0; i < p->n_routes; i++) {
        if (p->routes[i]->listener)
            km_net_listener_free(p->routes[i]->listener);
        free(p->routes[i]);
    }
    free(p->routes);
    free(p->ips);
    free(p->unserved);
    inl_inspect_free(p);
    free(p->sni_prefix);
    free(p->sni_suffix);
    inl_tls_unref(p->client_tls);
    inl_tls_unref(p->up_tls);
    km_inline_config_free(&p->tls_cfg);
    free(p->listen_host);
    free(p->advertised_host);
    pthread_mutex_destroy(&p->lock);
    pthread_mutex_destroy(&p->log_lock);
    free(p);
}

uint16_t km_inline_listen_port(const km_inline *p, int32_t broker_id)
{
    pthread_mutex_lock((pthread_mutex_t *)&p->lock); /* a worker may be adding a route */
    const inl_route *r = find_route(p, broker_id);
    uint16_t port = r && r->listener ? r->listen_port : 0;
    pthread_mutex_unlock((pthread_mutex_t *)&p->lock);
    return port;
}

void km_inline_get_stats(const km_inline *p, km_inline_stats *out)
{
    inl_sum_stats(p, out);
}

/* ---- TLS contexts -------------------------------------------------------------------------- */

/* Referenced from any worker: the count is atomic. */
inl_tls *inl_tls_ref(inl_tls *t)
{
    if (t)
        __atomic_add_fetch(&t->refs, 1, __ATOMIC_RELAXED);
    return t;
}

void inl_tls_unref(inl_tls *t)
{
    if (t && __atomic_sub_fetch(&t->refs, 1, __ATOMIC_ACQ_REL) == 0) {
        km_tls_ctx_free(t->ctx);
        free(t);
    }
}

static inl_tls *tls_new(const km_tls_config *tc, bool server, km_err *err)
{
    km_tls_ctx *ctx = server ? km_tls_server_ctx_new(tc, err) : km_tls_client_ctx_new(tc, err);
    inl_tls *t = ctx ? calloc(1, sizeof *t) : NULL;
    if (!t) {
        if (ctx)
            km_fail(err, "proxy: out of memory");
        km_tls_ctx_free(ctx);
        return NULL;
    }
    t->ctx = ctx;
    t->refs = 1;
    return t;
}

/* Both contexts from the configured files, or neither (err names the file). */
static int tls_load(const km_inline_config *c, inl_tls **client, inl_tls **up, km_err *err)
{
    *client = *up = NULL;
    km_tls_config server = {.cert_file = c->client_ssl_cert, .key_file = c->client_ssl_key,
                            .ca_file = c->client_ssl_ca,
                            .require_client_cert = c->client_ssl_auth == KM_INLINE_AUTH_REQUIRED,
                            .request_client_cert = c->client_ssl_auth == KM_INLINE_AUTH_REQUESTED};
    km_tls_config upstream = {.cert_file = c->upstream_ssl_cert, .key_file = c->upstream_ssl_key,
                              .ca_file = c->upstream_ssl_ca};
    km_err why = {{0}};
    if (c->client_ssl_cert && !(*client = tls_new(&server, true, &why)))
        return km_fail(err, "proxy.client.ssl: %s", why.msg);
    if (c->upstream_ssl && !(*up = tls_new(&upstream, false, &why))) {
        inl_tls_unref(*client);
        *client = NULL;
        return km_fail(err, "proxy.upstream.ssl: %s", why.msg);
    }
    return 0;
}

static int keep_tls_config(km_inline *p, const km_inline_config *c, km_err *err)
{
    km_inline_config *k = &p->tls_cfg;
    km_inline_config_defaults(k);
    k->client_ssl_auth = c->client_ssl_auth;
    k->upstream_ssl = c->upstream_ssl;
    k->upstream_ssl_check_hostname = c->upstream_ssl_check_hostname;
    const char *const from[] = {c->client_ssl_cert, c->client_ssl_key, c->client_ssl_ca,
                                c->upstream_ssl_cert, c->upstream_ssl_key, c->upstream_ssl_ca};
    char **to[] = {&k->client_ssl_cert, &k->client_ssl_key, &k->client_ssl_ca,
                   &k->upstream_ssl_cert, &k->upstream_ssl_key, &k->upstream_ssl_ca};
    for (size_t i = 0; i < sizeof from / sizeof from[0]; i++)
        if (from[i] && !(*to[i] = strdup(from[i])))
            return km_fail(err, "proxy: out of memory");
    return tls_load(k, &p->client_tls, &p->up_tls, err);
}

int km_inline_reload_tls(km_inline *p, km_err *err)
{
    inl_tls *client, *up;
    if (tls_load(&p->tls_cfg, &client, &up, err))
        return -1;
    pthread_mutex_lock(&p->lock); /* workers take references at each new client */
    inl_tls *old_client = p->client_tls, *old_up = p->up_tls;
    p->client_tls = client;
    p->up_tls = up;
    pthread_mutex_unlock(&p->lock);
    inl_tls_unref(old_client);
    inl_tls_unref(old_up);
    inl_log(p, 2, "TLS certificates reloaded; live connections keep theirs");
    return 0;
}

void km_inline_broker_registered(km_inline *p, int32_t id, const char *host, uint16_t port)
{
    if (host && *host && port)
        inl_route_for_broker(p, id, host, port);
}
