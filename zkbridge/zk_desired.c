/* The image as the set of znodes ZK-mode brokers expect (paths and renderings), whole or per
 * entity. Sorted by path, a parent always precedes its children, so creating in order works. */
#include "zk_bridge.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void zk_tree_free(zk_tree *t)
{
    for (size_t i = 0; i < t->n; i++) {
        free(t->v[i].path);
        free(t->v[i].data);
        free(t->v[i].notify_data);
    }
    free(t->v);
    memset(t, 0, sizeof *t);
}

void zk_tree_add(zk_tree *t, const char *path, char *data, zk_nkind kind, zk_notify notify, char *notify_data)
{
    if (kind != ZN_DIR && !data) { /* its rendering failed: never write it empty */
        t->oom = true;
        free(notify_data);
        return;
    }
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 256;
        zk_node *grown = realloc(t->v, cap * sizeof *grown);
        if (!grown) {
            t->oom = true;
            free(data);
            free(notify_data);
            return;
        }
        t->v = grown;
        t->cap = cap;
    }
    char *p = strdup(path);
    if (!p) {
        t->oom = true;
        free(data);
        free(notify_data);
        return;
    }
    t->v[t->n++] = (zk_node){p, data, kind, notify, notify_data, -1};
}

static int parent_rank(zk_nkind k) { return k == ZN_DIR ? 2 : k == ZN_CONFIG_PARENT ? 1 : 0; }

static int cmp_node(const void *a, const void *b)
{
    const zk_node *x = a, *y = b;
    int c = strcmp(x->path, y->path);
    /* duplicates: a real node wins over a parent added for a sibling (an entity parent over a plain one) */
    return c ? c : parent_rank(x->kind) - parent_rank(y->kind);
}

void zk_tree_sort(zk_tree *t)
{
    if (t->n > 1)
        qsort(t->v, t->n, sizeof *t->v, cmp_node);
    size_t o = 0;
    for (size_t i = 0; i < t->n; i++) {
        if (o && !strcmp(t->v[o - 1].path, t->v[i].path)) {
            free(t->v[i].path);
            free(t->v[i].data);
            free(t->v[i].notify_data);
            continue;
        }
        t->v[o++] = t->v[i];
    }
    t->n = o;
}

const zk_node *zk_tree_find(const zk_tree *t, const char *path)
{
    size_t lo = 0, hi = t->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = strcmp(t->v[mid].path, path);
        if (!c)
            return &t->v[mid];
        if (c < 0) lo = mid + 1; else hi = mid;
    }
    return NULL;
}

static char *fmt_path(const char *fmt, const char *a, const char *b)
{
    char *p = NULL;
    if (asprintf(&p, fmt, a, b) < 0)
        return NULL;
    return p;
}

static void add_dir(zk_tree *t, const char *path) { zk_tree_add(t, path, NULL, ZN_DIR, NOTIFY_NONE, NULL); }

/* Every parent ZK-mode brokers and our writes need (Kafka creates them at broker start-up). */
void zk_render_roots(zk_tree *t)
{
    static const char *const dirs[] = {
        "/admin", "/admin/delete_topics", "/brokers", "/brokers/topics", "/config", "/config/brokers",
        "/config/changes", "/config/clients", "/config/ips", "/config/topics", "/config/users", "/delegation_token",
        "/delegation_token/token_changes", "/delegation_token/tokens", "/kafka-acl", "/kafka-acl-changes",
        "/kafka-acl-extended", "/kafka-acl-extended-changes", "/kafka-acl-extended/prefixed"};
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++)
        add_dir(t, dirs[i]);
}

char *zk_config_notify(const char *entity_path)
{
    zstr s;
    zs_init(&s);
    zk_render_config_notify(&s, entity_path);
    return zs_take(&s);
}

static void add_config_node(zk_tree *t, const char *type, const char *name, char *data)
{
    char *path = fmt_path("/config/%s/%s", type, name), *entity = fmt_path("%s/%s", type, name);
    if (path && entity)
        zk_tree_add(t, path, data, ZN_CONFIG, NOTIFY_CONFIG, zk_config_notify(entity));
    else
        free(data), t->oom = true;
    free(path);
    free(entity);
}

void zk_topic_paths(const char *name, int32_t partitions, zk_tree *paths)
{
    char buf[1024];
    snprintf(buf, sizeof buf, "/brokers/topics/%s", name);
    add_dir(paths, buf);
    snprintf(buf, sizeof buf, "/brokers/topics/%s/partitions", name);
    add_dir(paths, buf);
    for (int32_t i = 0; i < partitions; i++) {
        snprintf(buf, sizeof buf, "/brokers/topics/%s/partitions/%d", name, i);
        add_dir(paths, buf);
        snprintf(buf, sizeof buf, "/brokers/topics/%s/partitions/%d/state", name, i);
        add_dir(paths, buf);
    }
    snprintf(buf, sizeof buf, "/config/topics/%s", name);
    add_dir(paths, buf);
}

/* A topic: its assignment, partition dirs and states, and its config znode (ZkTopicMigrationClient
 * creates /config/topics/<t> with the topic, so it exists even without configs). */
void zk_render_topic_nodes(const km_image *img, const km_topic *t, int32_t controller_epoch, const km_zk_pwenc *pw,
                           zk_tree *out)
{
    const char *name = km_topic_name(t);
    char buf[1024];
    zstr s;
    zs_init(&s);
    zk_render_topic(&s, t);
    snprintf(buf, sizeof buf, "/brokers/topics/%s", name);
    zk_tree_add(out, buf, zs_take(&s), ZN_DATA, NOTIFY_NONE, NULL);
    snprintf(buf, sizeof buf, "/brokers/topics/%s/partitions", name);
    add_dir(out, buf);
    int32_t n = km_topic_partition_count(t);
    for (int32_t i = 0; i < n; i++) {
        km_partition p;
        if (!km_topic_partition(t, i, &p))
            continue;
        snprintf(buf, sizeof buf, "/brokers/topics/%s/partitions/%d", name, i);
        add_dir(out, buf);
        snprintf(buf, sizeof buf, "/brokers/topics/%s/partitions/%d/state", name, i);
        zs_init(&s);
        zk_render_state(&s, &p, controller_epoch);
        zk_tree_add(out, buf, zs_take(&s), ZN_STATE, NOTIFY_NONE, NULL);
    }
    zk_render_topic_config(img, name, pw, out);
}

void zk_render_topic_config(const km_image *img, const char *name, const km_zk_pwenc *pw, zk_tree *out)
{
    const km_config_res *cfg = km_image_config(img, KM_CFG_TOPIC, name);
    zstr s;
    zs_init(&s);
    zk_render_config_kv(&s, cfg ? cfg->kv : NULL, cfg ? cfg->n : 0, pw);
    add_config_node(out, "topics", name, zs_take(&s));
}

void zk_render_broker_config(const km_config_res *res, const km_zk_pwenc *pw, zk_tree *out)
{
    if (!res || res->n == 0)
        return;
    zstr s;
    zs_init(&s);
    zk_render_config_kv(&s, res->kv, res->n, pw);
    add_config_node(out, "brokers", res->name[0] ? res->name : "<default>", zs_take(&s));
}

void zk_render_broker_configs(const km_image *img, const km_zk_pwenc *pw, zk_tree *out)
{
    size_t it = 0;
    const km_config_res *res;
    while ((res = km_image_next_config(img, &it)))
        if (res->type == KM_CFG_BROKER)
            zk_render_broker_config(res, pw, out);
}

void zk_render_tokens_and_pids(const km_image *img, zk_tree *out)
{
    size_t it = 0;
    const km_token *tok;
    while ((tok = km_image_next_token(img, &it)))
        zk_render_token_node(tok, out);
    km_producer_ids pid = km_image_producer_ids(img);
    if (pid.next_producer_id >= 0) {
        zstr s;
        zs_init(&s);
        zk_render_producer_ids(&s, pid.next_producer_id);
        zk_tree_add(out, "/latest_producer_id_block", zs_take(&s), ZN_DATA, NOTIFY_NONE, NULL);
    }
}

void zk_render_token_node(const km_token *tok, zk_tree *out)
{
    char buf[1024];
    zstr s;
    zs_init(&s);
    zk_render_token(&s, tok);
    snprintf(buf, sizeof buf, "/delegation_token/tokens/%s", tok->token_id);
    zk_tree_add(out, buf, zs_take(&s), ZN_DATA, NOTIFY_TOKEN, strdup(tok->token_id));
}

int zk_render_image(const km_image *img, int32_t controller_epoch, const km_zk_pwenc *pw, zk_tree *out,
                    km_err *err)
{
    zk_render_roots(out);
    size_t it = 0;
    const km_topic *t;
    while ((t = km_image_next_topic(img, &it)))
        zk_render_topic_nodes(img, t, controller_epoch, pw, out);
    zk_render_broker_configs(img, pw, out);
    zk_render_quotas(img, NULL, out);
    zk_render_acls(img, NULL, out);
    zk_render_tokens_and_pids(img, out);
    if (out->oom)
        return km_fail(err, "zk render: out of memory rendering %zu znodes", out->n);
    zk_tree_sort(out);
    return 0;
}
