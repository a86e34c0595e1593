/* Helpers for the zkbridge suites (see test_zk_util.h). */
#include "test_zk_util.h"

#include <criterion/criterion.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void zkt_one_server_start(km_zks **zs_out, km_zkc **zc_out, int maxbuffer)
{
    char err[512] = "";
    km_zks *zs = km_zks_start(1, NULL, maxbuffer, err, sizeof err);
    *zs_out = zs;
    cr_assert(zs, "%s", err);
    km_zkc *zc = km_zkc_open(km_zks_hosts(zs, 0), NULL, 10000);
    *zc_out = zc;
    cr_assert(zc);
}

void zkt_one_server_stop(km_zks *zs, km_zkc *zc)
{
    km_zkc_close(zc);
    km_zks_stop(zs);
}

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void tick(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)loop; (void)t; (void)revents;
}

bool zkt_run_until(struct ev_loop *loop, bool (*pred)(void *), void *ctx, int guard_ms)
{
    ev_timer t;
    ev_timer_init(&t, tick, 0.02, 0.02); /* wakes the loop so pred is re-checked */
    ev_timer_start(loop, &t);
    int64_t deadline = mono_ms() + guard_ms;
    bool ok;
    while (!(ok = pred(ctx)) && mono_ms() < deadline)
        ev_run(loop, EVRUN_ONCE);
    ev_timer_stop(loop, &t);
    return ok;
}

static bool never(void *ctx) { (void)ctx; return false; }
void zkt_spin(struct ev_loop *loop, int ms) { zkt_run_until(loop, never, NULL, ms); }

static void on_event(km_zkw *w, km_zkw_event ev, void *ctx)
{
    (void)w;
    zkt_writer *t = ctx;
    switch (ev) {
    case KM_ZKW_EV_CLAIMED: t->claimed++; break;
    case KM_ZKW_EV_CONFIRMED: t->confirmed++; break;
    case KM_ZKW_EV_DRAINED: t->drained++; break;
    case KM_ZKW_EV_PROGRESS: break;
    case KM_ZKW_EV_RESYNC: t->resync++; break;
    case KM_ZKW_EV_FENCED: t->fenced++; break;
    case KM_ZKW_EV_REFUSED: t->refused++; break;
    case KM_ZKW_EV_SESSION_LOST: t->sessions_lost++; break;
    }
}

static void on_log(km_log_level lvl, const char *msg, void *ctx)
{
    zkt_writer *t = ctx;
    if (lvl == KM_LOG_ERROR) {
        t->errors_logged++;
        snprintf(t->last_error, sizeof t->last_error, "%s", msg);
    }
    if (lvl <= KM_LOG_WARN || getenv("KM_ZK_DEBUG"))
        fprintf(stderr, "[zkw %d] %s\n", (int)lvl, msg);
}

zkt_writer *zkt_writer_new(const char *hosts, int32_t id, int32_t epoch, const km_zkw_config *base)
{
    zkt_writer *t = calloc(1, sizeof *t);
    t->loop = ev_loop_new(EVFLAG_AUTO);
    km_zkw_config cfg = base ? *base : (km_zkw_config){0};
    cfg.hosts = hosts;
    if (!cfg.security) /* the suite's mode (KM_TEST_ZK_SECURE) unless the test chose its own */
        cfg.security = km_zksec_security();
    cfg.controller_id = id;
    cfg.controller_epoch = epoch;
    cfg.on_event = on_event;
    cfg.log = on_log;
    cfg.ctx = t;
    if (!cfg.session_timeout_ms)
        cfg.session_timeout_ms = 6000;
    km_err err = {{0}};
    t->w = km_zkw_new(t->loop, &cfg, &err);
    if (!t->w) {
        fprintf(stderr, "zkt_writer_new: %s\n", err.msg);
        ev_loop_destroy(t->loop);
        free(t);
        return NULL;
    }
    return t;
}

void zkt_writer_free(zkt_writer *t)
{
    if (!t)
        return;
    km_zkw_free(t->w);
    ev_loop_destroy(t->loop);
    free(t);
}

typedef struct state_wait {
    zkt_writer *t;
    km_zkw_state st;
} state_wait;

static bool state_is(void *ctx)
{
    state_wait *s = ctx;
    km_zkw_state now = km_zkw_get_state(s->t->w);
    return now == s->st || (s->st != KM_ZKW_FENCED && now == KM_ZKW_FENCED) ||
           (s->st != KM_ZKW_REFUSED && now == KM_ZKW_REFUSED);
}

bool zkt_wait_state(zkt_writer *t, km_zkw_state st, int guard_ms)
{
    state_wait s = {t, st};
    zkt_run_until(t->loop, state_is, &s, guard_ms);
    return km_zkw_get_state(t->w) == st;
}

static bool drained(void *ctx)
{
    zkt_writer *t = ctx;
    km_zkw_state st = km_zkw_get_state(t->w);
    return km_zkw_idle(t->w) || st == KM_ZKW_FENCED || st == KM_ZKW_REFUSED;
}

bool zkt_wait_drained(zkt_writer *t, int guard_ms)
{
    zkt_run_until(t->loop, drained, t, guard_ms);
    km_zkw_metrics m;
    km_zkw_get_metrics(t->w, &m);
    return km_zkw_idle(t->w) && m.write_behind_lag == 0;
}

char *zkt_get(km_zkc *c, const char *path, int *version)
{
    char *data = NULL;
    struct Stat st;
    if (km_zkc_get(c, path, &data, NULL, &st) != ZOK)
        return NULL;
    if (version)
        *version = st.version;
    return data;
}

/* ---- independent read-back of the mirror ---- */
#include <jansson.h>

#define WHY(...) (snprintf(why, whylen, __VA_ARGS__), false)

static void b64url(const uint8_t *b, char out[23])
{
    const char *a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    int bits = 0, o = 0;
    uint32_t acc = 0;
    for (int i = 0; i < 16; i++) {
        acc = acc << 8 | b[i];
        bits += 8;
        while (bits >= 6) {
            out[o++] = a[(acc >> (bits - 6)) & 63];
            bits -= 6;
        }
    }
    if (bits)
        out[o++] = a[(acc << (6 - bits)) & 63];
    out[o] = '\0';
}

static json_t *get_json(km_zkc *c, const char *path)
{
    char *d = zkt_get(c, path, NULL);
    json_error_t e;
    json_t *j = d ? json_loads(d, 0, &e) : NULL;
    free(d);
    return j;
}

static bool int_list_is(json_t *arr, km_i32_list l)
{
    if (!json_is_array(arr) || json_array_size(arr) != (size_t)l.n)
        return false;
    for (int32_t i = 0; i < l.n; i++)
        if (json_integer_value(json_array_get(arr, (size_t)i)) != l.v[i])
            return false;
    return true;
}

static bool check_state(km_zkc *c, const char *name, const km_partition *p, int32_t epoch, char *why, size_t whylen)
{
    char path[512];
    snprintf(path, sizeof path, "/brokers/topics/%s/partitions/%d/state", name, p->id);
    json_t *j = get_json(c, path);
    bool ok = j && json_integer_value(json_object_get(j, "version")) == 1 &&
              json_integer_value(json_object_get(j, "leader")) == p->leader &&
              json_integer_value(json_object_get(j, "leader_epoch")) == p->leader_epoch &&
              /* unchanged partitions keep the epoch of whoever wrote them (Kafka compares the
               * registration, not this field), so only an epoch from a past claim is required */
              json_is_integer(json_object_get(j, "controller_epoch")) &&
              json_integer_value(json_object_get(j, "controller_epoch")) <= epoch &&
              int_list_is(json_object_get(j, "isr"), p->isr) &&
              json_object_size(j) == (p->leader_recovery_state == 1 ? 6u : 5u);
    json_decref(j);
    return ok ? true : WHY("%s does not match partition %d of %s", path, p->id, name);
}

static bool check_config(km_zkc *c, const char *path, const km_config_res *res, char *why, size_t whylen)
{
    json_t *j = get_json(c, path), *cfg = j ? json_object_get(j, "config") : NULL;
    int32_t n = res ? res->n : 0;
    bool ok = j && json_integer_value(json_object_get(j, "version")) == 1 && json_is_object(cfg) &&
              json_object_size(cfg) == (size_t)n;
    for (int32_t i = 0; ok && i < n; i++) {
        const char *v = json_string_value(json_object_get(cfg, res->kv[i].name));
        ok = v && !strcmp(v, res->kv[i].value);
    }
    json_decref(j);
    return ok ? true : WHY("%s does not hold the image's %d configs", path, n);
}

static bool check_topic(km_zkc *c, const km_image *img, const km_topic *t, int32_t epoch, char *why, size_t whylen)
{
    const char *name = km_topic_name(t);
    char path[512], id[23];
    snprintf(path, sizeof path, "/brokers/topics/%s", name);
    json_t *j = get_json(c, path), *parts = j ? json_object_get(j, "partitions") : NULL;
    km_uuid uid = km_topic_id(t);
    b64url(uid.b, id);
    int32_t n = km_topic_partition_count(t);
    bool ok = j && json_integer_value(json_object_get(j, "version")) == 3 &&
              !strcmp(json_string_value(json_object_get(j, "topic_id")) ? json_string_value(json_object_get(j, "topic_id")) : "", id) &&
              json_is_object(json_object_get(j, "adding_replicas")) && json_is_object(json_object_get(j, "removing_replicas")) &&
              json_object_size(j) == 5 && json_object_size(parts) == (size_t)n;
    for (int32_t i = 0; ok && i < n; i++) {
        km_partition p;
        char key[16];
        snprintf(key, sizeof key, "%d", i);
        ok = km_topic_partition(t, i, &p) && int_list_is(json_object_get(parts, key), p.replicas);
        if (ok && !check_state(c, name, &p, epoch, why, whylen)) {
            json_decref(j);
            return false;
        }
    }
    json_decref(j);
    if (!ok)
        return WHY("%s does not match topic %s (%d partitions)", path, name, n);
    snprintf(path, sizeof path, "/config/topics/%s", name);
    return check_config(c, path, km_image_config(img, KM_CFG_TOPIC, name), why, whylen);
}

static bool check_topic_set(km_zkc *c, const km_image *img, char *why, size_t whylen)
{
    char **kids = NULL;
    int n = 0;
    if (km_zkc_children(c, "/brokers/topics", &kids, &n) != ZOK)
        return WHY("/brokers/topics is missing");
    bool ok = (size_t)n == km_image_topic_count(img);
    for (int i = 0; ok && i < n; i++)
        if (!km_image_topic_by_name(img, kids[i]))
            ok = WHY("/brokers/topics/%s is not in the image", kids[i]);
    if (ok || !why[0])
        snprintf(why, whylen, "/brokers/topics has %d topics, the image %zu", n, km_image_topic_count(img));
    km_zkc_free_strings(kids, n);
    return ok;
}

static bool check_acls(km_zkc *c, const km_image *img, char *why, size_t whylen)
{
    static const char *types[] = {NULL, NULL, "Topic", "Group", "Cluster", "TransactionalId", "DelegationToken", "User"};
    static const char *ops[] = {NULL, NULL, "All", "Read", "Write", "Create", "Delete", "Alter", "Describe",
                                "ClusterAction", "DescribeConfigs", "AlterConfigs", "IdempotentWrite"};
    size_t it = 0;
    const km_acl *a;
    char last[512] = "";
    json_t *j = NULL; /* the last path's znode: thousands of ACLs on one resource are read once */
    while ((a = km_image_next_acl(img, &it))) {
        if (a->resource_type < 2 || a->resource_type > 7 || a->operation < 2 || a->operation > 12)
            continue;
        char path[512];
        snprintf(path, sizeof path, a->pattern_type == 3 ? "/kafka-acl/%s/%s" : "/kafka-acl-extended/prefixed/%s/%s",
                 types[a->resource_type], a->resource_name);
        if (strcmp(path, last)) {
            json_decref(j);
            j = get_json(c, path);
            snprintf(last, sizeof last, "%s", path);
        }
        json_t *acls = j ? json_object_get(j, "acls") : NULL;
        bool found = false;
        for (size_t i = 0; i < json_array_size(acls) && !found; i++) {
            json_t *e = json_array_get(acls, i);
            found = !strcmp(json_string_value(json_object_get(e, "principal")), a->principal) &&
                    !strcmp(json_string_value(json_object_get(e, "host")), a->host) &&
                    !strcmp(json_string_value(json_object_get(e, "operation")), ops[a->operation]) &&
                    !strcmp(json_string_value(json_object_get(e, "permissionType")),
                            a->permission_type == 3 ? "Allow" : "Deny");
        }
        if (!found) {
            json_decref(j);
            return WHY("%s lacks the image's ACL %s %s", path, a->principal, ops[a->operation]);
        }
    }
    json_decref(j);
    return true;
}

/* A quota or SCRAM entity's znode name as Kafka's Sanitizer.sanitize makes it (java.net.URLEncoder,
 * UTF-8: letters, digits and ".-*_" stay, space becomes "+"; then "*" -> %2A, "+" -> %20); the default
 * entity (no name) is "<default>". Written here from the JDK's rules, not from the renderer. */
static const char *znode_name(const char *name, char *out, size_t cap)
{
    if (!name)
        return snprintf(out, cap, "<default>"), out;
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)name; *p && o + 4 < cap; p++) {
        if ((*p < 0x80 && isalnum(*p)) || (*p && strchr(".-_", *p)))
            out[o++] = (char)*p;
        else
            o += (size_t)snprintf(out + o, cap - o, "%%%02X", *p); /* '*' and ' ' included */
    }
    out[o] = '\0';
    return out;
}

/* Quota znodes: every value of the image, as a number ZK brokers parse back to the same double. */
static bool check_quotas(km_zkc *c, const km_image *img, char *why, size_t whylen)
{
    size_t it = 0;
    const km_client_quota *q;
    while ((q = km_image_next_quota(img, &it))) {
        const char *user = NULL, *client = NULL, *ip = NULL;
        char names[3][256];
        for (int32_t i = 0; i < q->n_parts; i++) {
            const char *type = q->parts[i].type, *name = q->parts[i].name;
            if (!strcmp(type, "user")) user = znode_name(name, names[0], sizeof names[0]);
            else if (!strcmp(type, "client-id")) client = znode_name(name, names[1], sizeof names[1]);
            else if (!strcmp(type, "ip")) ip = znode_name(name, names[2], sizeof names[2]);
        }
        char path[512];
        if (user && client) snprintf(path, sizeof path, "/config/users/%s/clients/%s", user, client);
        else if (user) snprintf(path, sizeof path, "/config/users/%s", user);
        else if (client) snprintf(path, sizeof path, "/config/clients/%s", client);
        else if (ip) snprintf(path, sizeof path, "/config/ips/%s", ip);
        else continue;
        json_t *j = get_json(c, path), *cfg = json_object_get(j, "config");
        for (int32_t i = 0; i < q->n; i++) {
            const char *v = json_string_value(json_object_get(cfg, q->kv[i].key));
            if (!v || strtod(v, NULL) != q->kv[i].value) {
                json_decref(j);
                return WHY("%s: %s is %s, the image has %g", path, q->kv[i].key, v ? v : "absent", q->kv[i].value);
            }
        }
        json_decref(j);
    }
    return true;
}

static bool check_rest(km_zkc *c, const km_image *img, char *why, size_t whylen)
{
    if (!check_quotas(c, img, why, whylen))
        return false;
    size_t it = 0;
    const km_config_res *res;
    while ((res = km_image_next_config(img, &it))) {
        if (res->type != KM_CFG_BROKER || res->n == 0)
            continue;
        char path[512];
        snprintf(path, sizeof path, "/config/brokers/%s", res->name[0] ? res->name : "<default>");
        if (!check_config(c, path, res, why, whylen))
            return false;
    }
    it = 0;
    const km_scram *s;
    while ((s = km_image_next_scram(img, &it))) {
        char path[512], name[256];
        snprintf(path, sizeof path, "/config/users/%s", znode_name(s->user, name, sizeof name));
        json_t *j = get_json(c, path);
        const char *v = json_string_value(json_object_get(json_object_get(j, "config"),
                                                          s->mechanism == 1 ? "SCRAM-SHA-256" : "SCRAM-SHA-512"));
        bool ok = v && strstr(v, "salt=") == v && strstr(v, ",iterations=");
        json_decref(j);
        if (!ok)
            return WHY("%s lacks the SCRAM credential of %s", path, s->user);
    }
    km_producer_ids pid = km_image_producer_ids(img);
    if (pid.next_producer_id >= 0) {
        json_t *j = get_json(c, "/latest_producer_id_block");
        char want[32];
        snprintf(want, sizeof want, "%lld", (long long)pid.next_producer_id);
        const char *start = json_string_value(json_object_get(j, "block_start"));
        bool ok = start && !strcmp(start, want);
        json_decref(j);
        if (!ok)
            return WHY("/latest_producer_id_block does not start at %s", want);
    }
    return check_acls(c, img, why, whylen);
}

bool zkt_zk_equals_image(km_zkc *c, const km_image *img, int32_t controller_epoch, char *why, size_t whylen)
{
    why[0] = '\0';
    if (!check_topic_set(c, img, why, whylen))
        return false;
    size_t it = 0;
    const km_topic *t;
    while ((t = km_image_next_topic(img, &it)))
        if (!check_topic(c, img, t, controller_epoch, why, whylen))
            return false;
    if (!check_rest(c, img, why, whylen))
        return false;
    json_t *m = get_json(c, "/migration");
    bool ok = m && json_integer_value(json_object_get(m, "kraft_metadata_offset")) == km_image_offset(img);
    json_decref(m);
    return ok ? true : WHY("/migration is not at the image's offset %lld", (long long)km_image_offset(img));
}

static void bridge_log(km_log_level lvl, const char *msg, void *ctx)
{
    zkt_bridge *t = ctx;
    if (lvl == KM_LOG_ERROR)
        t->errors++;
    if (lvl <= KM_LOG_WARN || getenv("KM_ZK_DEBUG"))
        fprintf(stderr, "[zkb %d] %s\n", (int)lvl, msg);
}

zkt_bridge *zkt_bridge_new(const char *hosts, const km_image *img, int32_t id, int32_t epoch, const km_zkb_config *base)
{
    zkt_bridge *t = calloc(1, sizeof *t);
    t->loop = ev_loop_new(EVFLAG_AUTO);
    km_zkb_config cfg = base ? *base : (km_zkb_config){0};
    cfg.zk.hosts = hosts;
    if (!cfg.zk.security) /* the suite's mode (KM_TEST_ZK_SECURE) unless the test chose its own */
        cfg.zk.security = km_zksec_security();
    cfg.zk.controller_id = id;
    cfg.zk.controller_epoch = epoch;
    cfg.zk.log = bridge_log;
    cfg.zk.ctx = t;
    if (!cfg.zk.session_timeout_ms)
        cfg.zk.session_timeout_ms = 6000;
    km_err err = {{0}};
    t->b = km_zkb_new(t->loop, img, &cfg, &err);
    if (!t->b) {
        fprintf(stderr, "zkt_bridge_new: %s\n", err.msg);
        ev_loop_destroy(t->loop);
        free(t);
        return NULL;
    }
    return t;
}

void zkt_bridge_free(zkt_bridge *t)
{
    if (!t)
        return;
    km_zkb_free(t->b);
    ev_loop_destroy(t->loop);
    free(t);
}

static bool bridge_settled(void *ctx)
{
    zkt_bridge *t = ctx;
    return km_zkb_idle(t->b) || km_zkb_get_phase(t->b) == KM_ZKB_STOPPED;
}

bool zkt_bridge_wait_idle(zkt_bridge *t, int guard_ms)
{
    zkt_run_until(t->loop, bridge_settled, t, guard_ms);
    return km_zkb_idle(t->b);
}

void zkt_fixture_open(zkt_fixture *f, const char *tag, int32_t topics, uint64_t seed)
{
    f->dir = km_test_tmpdir(tag);
    char log[512];
    snprintf(log, sizeof log, "%s/log", f->dir);
    f->img = km_image_new();
    km_gen_opts o = {.brokers = 3, .topics = topics, .partitions = 2, .seed = seed, .zk_migration = true};
    km_err err = {{0}};
    cr_assert_geq(km_gen_write(log, &o, f->img, &err), 0, "%s", err.msg);
    f->d = km_delta_new();
    f->off = km_image_offset(f->img);
}

void zkt_fixture_close(zkt_fixture *f)
{
    km_delta_free(f->d);
    km_image_free(f->img);
    km_test_rmtree(f->dir);
    free(f->dir);
}

void zkt_fixture_apply(zkt_fixture *f, int16_t type, const void *rec, bool delta)
{
    km_err err = {{0}};
    cr_assert_eq(km_image_apply(f->img, type, 0, rec, ++f->off, 1, "t", delta ? f->d : NULL, &err), 0, "%s",
                 err.msg);
}
