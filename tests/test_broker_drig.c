/* The daemon over the broker rig, with a real ZooKeeper (see test_broker_drig.h). */
#include "test_broker_drig.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <ev.h>
#include <jansson.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* brig_converged's question to the daemon: everything applied, ZooKeeper idle, every channel in
 * sync with nothing pending; and, once, the /controller_epoch the claim made (the brokers must
 * hold it). */
static bool daemon_idle(brig *r)
{
    drig *g = r->ud;
    km_daemon_status st;
    km_daemon_get_status(g->d, &st);
    if (st.fatal)
        return snprintf(r->why, sizeof r->why, "the daemon stopped: %s", st.fatal), r->failed = true, false;
    if (!st.zk_idle || st.image_offset != km_image_offset(r->img) || !st.brokers_total ||
        st.brokers_in_sync != st.brokers_total || st.broker_requests_pending)
        return snprintf(r->why, sizeof r->why, "daemon busy: zk idle %d, offset %lld/%lld, brokers %d/%d, %zu pending",
                        st.zk_idle, (long long)st.image_offset, (long long)km_image_offset(r->img),
                        st.brokers_in_sync, st.brokers_total, st.broker_requests_pending), false;
    if (!r->zk_epoch) {
        km_zkc *c = km_zkc_open(km_zks_hosts(g->zs, 0), NULL, 10000);
        char *data = NULL;
        if (c && km_zkc_get(c, "/controller_epoch", &data, NULL, NULL) == ZOK)
            r->zk_epoch = atoi(data);
        free(data);
        km_zkc_close(c);
    }
    return true;
}

/* Brokers that already obey controller epoch `epoch` (another era reached them first). */
static void prime(brig *r, int32_t epoch)
{
    r->external_idle = NULL;
    r->zk_epoch = epoch;
    cr_assert(brig_activate(r), "%s", r->why);
    cr_assert(brig_run_until(r, brig_converged, DRIG_GUARD), "priming: %s", r->why);
    km_bprop_deactivate(r->prop);
}

static void make_tls(drig *g, brig_opts *o)
{
    km_err te;
    cr_assert(!km_test_pki_make(&g->pki));
    km_tls_config sc = { .cert_file = g->pki.server_cert, .key_file = g->pki.server_key };
    cr_assert((g->server_tls = km_tls_server_ctx_new(&sc, &te)), "%s", te.msg);
    o->tls_server = g->server_tls;
}

static void set(km_config *cfg, const char *key, const char *value)
{
    km_err e = { { 0 } };
    cr_assert(!km_config_set(cfg, key, value, "test", &e), "%s=%s: %s", key, value, e.msg);
}

static void start_daemon(drig *g, const drig_opts *o)
{
    km_config cfg;
    km_config_defaults(&cfg);
    set(&cfg, "metadata.source", "dir");
    set(&cfg, "metadata.dir", g->r.logdir);
    set(&cfg, "zookeeper.connect", o->via_proxy ? km_fp_hosts(g->fp) : km_zks_hosts(g->zs, 0));
    set(&cfg, "brokers.enabled", "true");
    set(&cfg, "metrics.listen", "127.0.0.1:0");
    if (!o->default_listener)
        set(&cfg, "broker.listener", "PLAINTEXT");
    set(&cfg, "zookeeper.session.timeout.ms", o->session_timeout_ms ? o->session_timeout_ms : "18000");
    if (g->tls) {
        set(&cfg, "broker.security.protocol", "SSL");
        set(&cfg, "broker.tls.ca.file", g->pki.ca);
    }
    for (const char *const *s = o->settings; s && *s; s++) {
        char key[128];
        const char *eq = strchr(*s, '=');
        cr_assert(eq, "setting %s", *s);
        snprintf(key, sizeof key, "%.*s", (int)(eq - *s), *s);
        set(&cfg, key, eq + 1);
    }
    km_err e = { { 0 } };
    g->d = km_daemon_new(g->r.loop, &cfg, &e);
    km_config_free(&cfg);
    cr_assert(g->d, "%s", e.msg);
    km_daemon_start(g->d);
}

void drig_start(drig *g, const drig_opts *o)
{
    char err[512] = "";
    memset(g, 0, sizeof *g);
    g->zs = km_zks_start(1, NULL, 0, err, sizeof err);
    cr_assert(g->zs, "ZooKeeper: %s", err);
    if (o->via_proxy)
        cr_assert((g->fp = km_fp_start(km_zks_port(g->zs, 0), err, sizeof err)), "faultproxy: %s", err);
    brig_opts bo = { .brokers = o->brokers, .topics = 4, .partitions = 4, .replication = 3, .leader_changes = 10,
                     .sim_zk = km_zks_hosts(g->zs, 0), .cut_ratio = o->cut_ratio, .kafka = o->kafka,
                     .kafka_odd = o->kafka_odd };
    g->tls = o->tls;
    if (g->tls) /* the simulators' listeners (still named PLAINTEXT in the registrations) speak TLS */
        make_tls(g, &bo);
    cr_assert(brig_init(&g->r, &bo), "%s", g->r.why);
    g->r.ud = g;
    if (o->prime_epoch)
        prime(&g->r, o->prime_epoch);
    if (o->before_daemon) {
        o->before_daemon(&g->r);
        cr_assert(brig_pump(&g->r), "%s", g->r.why);
    }
    g->r.zk_epoch = 0; /* read from ZooKeeper once the daemon is idle */
    g->r.external_idle = daemon_idle;
    start_daemon(g, o);
}

void drig_stop(drig *g)
{
    km_daemon_free(g->d);
    g->d = NULL;
    brig_free(&g->r);
    if (g->tls) {
        km_tls_ctx_free(g->server_tls);
        km_test_pki_free(&g->pki);
    }
    km_fp_stop(g->fp);
    km_zks_stop(g->zs);
    memset(g, 0, sizeof *g);
}

void drig_converge(drig *g, const char *when)
{
    cr_assert(brig_run_until(&g->r, brig_converged, DRIG_GUARD) && !g->r.failed, "%s: %s", when, g->r.why);
    cr_assert(brig_no_strays(&g->r), "%s: %s", when, g->r.why);
}

bool drig_image_caught_up(brig *r)
{
    drig *g = r->ud;
    km_daemon_status st;
    km_daemon_get_status(g->d, &st);
    return st.image_offset == km_image_offset(r->img) &&
           km_image_offset(r->img) + 1 == km_metalog_writer_next_offset(r->w);
}

bool drig_never(brig *r)
{
    (void)r;
    return false;
}

void drig_create_topic(drig *g, const char *name, unsigned salt, int np, int nbrokers)
{
    km_topic_record tr;
    km_topic_record_init(&tr);
    tr.name = km_cstr(name);
    for (int i = 0; i < 16; i++)
        tr.topic_id.b[i] = (uint8_t)(salt * 31 + (unsigned)i * 7 + 1);
    /* the salt's higher bytes too: ids from salts 256 apart must differ (the image refuses a
     * second name for a live topic's id, as Kafka's controller never writes one) */
    tr.topic_id.b[14] ^= (uint8_t)(salt >> 8);
    tr.topic_id.b[15] ^= (uint8_t)(salt >> 16);
    km_config_record cr;
    km_config_record_init(&cr);
    cr.resource_type = 2; /* TOPIC */
    cr.resource_name = km_cstr(name);
    cr.name = km_cstr("min.insync.replicas");
    cr.value = km_cstr("2");
    km_partition_record pr[8];
    int32_t reps[8][3];
    const km_message_desc *mds[10] = { &km_topic_record_desc, &km_config_record_desc };
    const void *msgs[10] = { &tr, &cr };
    for (int p = 0; p < np && p < 8; p++) {
        for (int k = 0; k < 3; k++)
            reps[p][k] = (int32_t)(((unsigned)(p + k) + salt) % (unsigned)nbrokers) + 1;
        km_partition_record_init(&pr[p]);
        pr[p].partition_id = p;
        pr[p].topic_id = tr.topic_id;
        pr[p].replicas.count = pr[p].isr.count = 3;
        pr[p].replicas.items = pr[p].isr.items = reps[p];
        pr[p].leader = reps[p][0];
        pr[p].leader_epoch = pr[p].partition_epoch = 0;
        mds[2 + p] = &km_partition_record_desc;
        msgs[2 + p] = &pr[p];
    }
    cr_assert(brig_append_batch(&g->r, mds, msgs, (size_t)(2 + (np < 8 ? np : 8))), "%s", g->r.why);
}

long long drig_sum_over_sims(drig *g, const char *object, const char *key)
{
    long long n = 0;
    for (int i = 0; i < g->r.nsims; i++) {
        json_t *st = km_bsim_state_json(g->r.sims[i]);
        n += json_integer_value(json_object_get(json_object_get(st, object), key));
        json_decref(st);
    }
    return n;
}

km_daemon_status drig_status(drig *g)
{
    km_daemon_status st;
    km_daemon_get_status(g->d, &st);
    cr_assert_null(st.fatal, "the daemon stopped: %s", st.fatal);
    return st;
}

/* ---- /metrics ---------------------------------------------------------------------------- */

typedef struct http_get {
    uint16_t port;
    char *body;
    size_t len, cap;
    atomic_bool done;
} http_get;

/* A plain blocking HTTP/1.0 client on its own thread: the daemon serves it from the test's loop. */
static void *http_get_main(void *arg)
{
    http_get *h = arg;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(h->port) };
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    static const char req[] = "GET /metrics HTTP/1.0\r\n\r\n";
    if (fd >= 0 && !connect(fd, (struct sockaddr *)&sa, sizeof sa) &&
        send(fd, req, sizeof req - 1, MSG_NOSIGNAL) == (ssize_t)(sizeof req - 1)) {
        for (ssize_t n = 1; n > 0 && h->len + 1 < h->cap; h->len += (size_t)(n > 0 ? n : 0))
            n = recv(fd, h->body + h->len, h->cap - 1 - h->len, 0);
    }
    h->body[h->len] = '\0';
    if (fd >= 0)
        close(fd);
    atomic_store(&h->done, true);
    return NULL;
}

static void poll_done(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)revents;
    if (atomic_load(&((http_get *)t->data)->done))
        ev_break(loop, EVBREAK_ONE);
}

static char *fetch_metrics(drig *g)
{
    http_get h = { .port = km_daemon_metrics_port(g->d), .cap = 1 << 20 };
    cr_assert(h.port, "the daemon serves no metrics");
    cr_assert((h.body = malloc(h.cap)));
    pthread_t th;
    cr_assert(!pthread_create(&th, NULL, http_get_main, &h));
    ev_timer poll;
    ev_timer_init(&poll, poll_done, 0.005, 0.005);
    poll.data = &h;
    ev_timer_start(g->r.loop, &poll);
    ev_tstamp end = ev_time() + DRIG_GUARD;
    while (!atomic_load(&h.done) && ev_time() < end)
        ev_run(g->r.loop, EVRUN_ONCE);
    ev_timer_stop(g->r.loop, &poll);
    cr_assert(atomic_load(&h.done), "/metrics never answered");
    pthread_join(th, NULL);
    cr_assert(strstr(h.body, " 200 "), "/metrics: %s", h.body);
    return h.body;
}

double drig_metric(drig *g, const char *name, const char *labels)
{
    char *body = fetch_metrics(g), want[256];
    snprintf(want, sizeof want, "\n%s%s%s%s ", name, labels ? "{" : "", labels ? labels : "", labels ? "}" : "");
    const char *at = strstr(body, want);
    double v = at ? strtod(at + strlen(want), NULL) : -1;
    free(body);
    return v;
}

double drig_broker_metric(drig *g, const char *name, int32_t broker)
{
    char labels[32];
    snprintf(labels, sizeof labels, "broker=\"%d\"", broker);
    return drig_metric(g, name, labels);
}
