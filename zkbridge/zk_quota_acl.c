/* Client quotas + SCRAM credentials (/config/users|clients|ips) and ACLs (/kafka-acl*), rendered
 * as ZkConfigMigrationClient and ZkAclMigrationClient write them. A user's quotas and SCRAM
 * credentials share one znode, /config/users/<user>. */
#include "zk_bridge.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *part(const km_client_quota *q, const char *type, bool *present)
{
    for (int32_t i = 0; i < q->n_parts; i++)
        if (!strcmp(q->parts[i].type, type)) {
            *present = true;
            return q->parts[i].name ? q->parts[i].name : "<default>";
        }
    *present = false;
    return NULL;
}

/* A quota entity's component as a znode name: ZkConfigMigrationClient.getSanitizedClientQuotaZNodeName
 * (Kafka 3.9) writes the default entity (a null name) as "<default>" and every other name through
 * Sanitizer.sanitize, so "alice@EXAMPLE.COM" lives at /config/users/alice%40EXAMPLE.COM, where ZK-mode
 * brokers (ZkAdminManager, the quota managers) look for it. A user literally named "<default>" is
 * %3Cdefault%3E there. */
static void add_znode_name(zstr *s, const km_client_quota *q, const char *type)
{
    for (int32_t i = 0; i < q->n_parts; i++)
        if (!strcmp(q->parts[i].type, type)) {
            if (q->parts[i].name)
                zs_sanitized(s, q->parts[i].name);
            else
                zs_add(s, "<default>");
            return;
        }
}

char *zk_quota_path(const km_client_quota *q)
{
    bool has_u, has_c, has_ip;
    part(q, "user", &has_u);
    part(q, "client-id", &has_c);
    part(q, "ip", &has_ip);
    zstr s;
    zs_init(&s);
    if (has_u && !has_ip) {
        zs_add(&s, "/config/users/");
        add_znode_name(&s, q, "user");
        if (has_c) {
            zs_add(&s, "/clients/");
            add_znode_name(&s, q, "client-id");
        }
    } else if (has_c && !has_ip) {
        zs_add(&s, "/config/clients/");
        add_znode_name(&s, q, "client-id");
    } else if (has_ip && !has_u && !has_c) {
        zs_add(&s, "/config/ips/");
        add_znode_name(&s, q, "ip");
    } else {
        zs_free(&s);
        return NULL;
    }
    return zs_take(&s);
}

/* KRaftMigrationZkWriter writes a user's SCRAM credentials through writeClientQuotas with the
 * entity {user: name}: the same sanitized znode name as the user's quotas. */
char *zk_scram_user_path(const char *user)
{
    zstr s;
    zs_init(&s);
    zs_add(&s, "/config/users/");
    if (user && *user)
        zs_sanitized(&s, user);
    else
        zs_add(&s, "<default>");
    return zs_take(&s);
}

typedef struct kv_list {
    km_config_kv *v;
    char **owned;
    int32_t n;
} kv_list;

static int cmp_kv(const void *a, const void *b)
{
    return strcmp(((const km_config_kv *)a)->name, ((const km_config_kv *)b)->name);
}

static void kv_push(kv_list *l, const char *name, char *value_owned)
{
    km_config_kv *v = realloc(l->v, ((size_t)l->n + 1) * sizeof *v);
    char **o = realloc(l->owned, ((size_t)l->n + 1) * sizeof *o);
    if (v) l->v = v;
    if (o) l->owned = o;
    if (!v || !o || !value_owned) {
        free(value_owned);
        return;
    }
    l->v[l->n] = (km_config_kv){name, value_owned};
    l->owned[l->n++] = value_owned;
}

static void kv_free(kv_list *l)
{
    for (int32_t i = 0; i < l->n; i++)
        free(l->owned[i]);
    free(l->v);
    free(l->owned);
}

static void add_quota_values(kv_list *l, const km_client_quota *q)
{
    for (int32_t i = 0; q && i < q->n; i++) {
        char buf[64];
        zk_quota_value(buf, sizeof buf, q->kv[i].key, q->kv[i].value);
        kv_push(l, q->kv[i].key, strdup(buf));
    }
}

static void add_config(zk_tree *out, const char *path, kv_list *l)
{
    qsort(l->v, (size_t)l->n, sizeof *l->v, cmp_kv);
    zstr s;
    zs_init(&s);
    zk_render_config_kv(&s, l->v, l->n, NULL); /* quotas and SCRAM credentials are never password-encoded */
    zk_tree_add(out, path, zs_take(&s), ZN_DATA, NOTIFY_CONFIG, zk_config_notify(path + strlen("/config/")));
}

/* The user znode above a per-client quota's path (malloc'd), or NULL when it is not one. */
static char *user_of_client_quota(const char *path)
{
    if (strncmp(path, "/config/users/", 14))
        return NULL;
    const char *clients = strstr(path + 14, "/clients/");
    return clients ? strndup(path, (size_t)(clients - path)) : NULL;
}

/* The user's znode above per-client quotas, and its /clients parent. The user's znode is an entity
 * in its own right: Kafka creates it with null data (createRecursive, in writeClientQuotas), and
 * when the user's own quotas and SCRAM credentials are all gone, writes it an empty config plus a
 * change notification (KRaftMigrationZkWriter.handleClientQuotasDelta calls writeClientQuotas
 * with empty maps) instead of deleting it - which its children would forbid. render_user adds
 * the real config when there is one; it wins over this in zk_tree_sort. Rendering one client's
 * quota alone (a delta), the user's znode is only a parent: the user's own config is not rendered
 * then, and must not look unwanted. */
static void add_user_client_dirs(zk_tree *out, const char *path, bool user_entity)
{
    char *user = user_of_client_quota(path), *dir = NULL;
    if (!user)
        return; /* /config/clients/<c>, /config/ips/<ip>: their type directory is a root */
    if (asprintf(&dir, "%s/clients", user) >= 0) {
        if (user_entity)
            zk_tree_add(out, user, strdup(ZK_EMPTY_CONFIG), ZN_CONFIG_PARENT, NOTIFY_CONFIG,
                        zk_config_notify(user + strlen("/config/")));
        else
            zk_tree_add(out, user, NULL, ZN_DIR, NOTIFY_NONE, NULL);
        zk_tree_add(out, dir, NULL, ZN_DIR, NOTIFY_NONE, NULL);
    } else {
        out->oom = true;
    }
    free(user);
    free(dir);
}

static const km_client_quota *user_quota(const km_image *img, const char *user_path)
{
    size_t it = 0;
    const km_client_quota *q;
    while ((q = km_image_next_quota(img, &it))) {
        char *p = zk_quota_path(q);
        bool same = p && !strcmp(p, user_path);
        free(p);
        if (same)
            return q;
    }
    return NULL;
}

/* One user's znode: quotas of the entity {user} plus its SCRAM credentials. */
static void render_user(const km_image *img, const char *user, const char *path, zk_tree *out)
{
    kv_list l = {0};
    add_quota_values(&l, user_quota(img, path));
    static const char *const mech[] = {NULL, "SCRAM-SHA-256", "SCRAM-SHA-512"};
    for (int8_t m = 1; m <= 2; m++) {
        const km_scram *c = km_image_scram(img, user, m);
        if (!c)
            continue;
        zstr s;
        zs_init(&s);
        zk_scram_string(&s, c);
        kv_push(&l, mech[m], zs_take(&s));
    }
    if (l.n)
        add_config(out, path, &l);
    kv_free(&l);
}

static bool is_user_only(const km_client_quota *q)
{
    bool u, c, ip;
    part(q, "user", &u);
    part(q, "client-id", &c);
    part(q, "ip", &ip);
    return u && !c && !ip;
}

/* The user a quota entity names as KRaft names it: "" for the default entity (a null name), so a
 * user literally called "<default>" keeps its own name (and its SCRAM credentials). */
static const char *kraft_user(const km_client_quota *q)
{
    for (int32_t i = 0; i < q->n_parts; i++)
        if (!strcmp(q->parts[i].type, "user"))
            return q->parts[i].name ? q->parts[i].name : "";
    return "";
}

static void render_users(const km_image *img, const char *only_path, zk_tree *out)
{
    size_t it = 0;
    const km_client_quota *q;
    while ((q = km_image_next_quota(img, &it))) {
        char *p = is_user_only(q) ? zk_quota_path(q) : NULL;
        if (p && (!only_path || !strcmp(p, only_path)))
            render_user(img, kraft_user(q), p, out);
        free(p);
    }
    it = 0;
    const km_scram *c;
    while ((c = km_image_next_scram(img, &it))) {
        char *p = zk_scram_user_path(c->user);
        if (p && (!only_path || !strcmp(p, only_path)))
            render_user(img, c->user, p, out); /* duplicates collapse in zk_tree_sort */
        free(p);
    }
}

void zk_render_quotas(const km_image *img, const char *only_path, zk_tree *out)
{
    size_t it = 0;
    const km_client_quota *q;
    while ((q = km_image_next_quota(img, &it))) {
        if (is_user_only(q))
            continue;
        char *p = zk_quota_path(q);
        if (p && (!only_path || !strcmp(p, only_path)) && q->n > 0) {
            kv_list l = {0};
            add_quota_values(&l, q);
            add_config(out, p, &l);
            kv_free(&l);
            add_user_client_dirs(out, p, !only_path);
        } else if (p && q->n > 0) { /* rendering only its user's znode: which still holds this one */
            char *user = user_of_client_quota(p);
            if (user && !strcmp(user, only_path))
                add_user_client_dirs(out, p, true);
            free(user);
        }
        free(p);
    }
    render_users(img, only_path, out);
}

char *zk_acl_path(const km_acl *a)
{
    const char *type = zk_acl_resource_name(a->resource_type);
    char *p = NULL;
    if (!type || !zk_acl_operation_name(a->operation) || !zk_acl_permission_name(a->permission_type))
        return NULL;
    if (a->pattern_type == 3 && asprintf(&p, "/kafka-acl/%s/%s", type, a->resource_name) >= 0)
        return p;
    if (a->pattern_type == 4 && asprintf(&p, "/kafka-acl-extended/prefixed/%s/%s", type, a->resource_name) >= 0)
        return p;
    return NULL;
}

typedef struct acl_ref {
    char *path;
    char *entry;
    const km_acl *acl;
} acl_ref;

static int cmp_acl(const void *a, const void *b)
{
    const acl_ref *x = a, *y = b;
    int c = strcmp(x->path, y->path);
    return c ? c : strcmp(x->entry, y->entry);
}

/* The change notification ZK brokers' authorizers watch (LiteralAclChangeStore: "TYPE:name";
 * ExtendedAclChangeStore: a JSON event). */
static char *acl_notify(const km_acl *a)
{
    zstr s;
    zs_init(&s);
    if (a->pattern_type == 3) {
        zs_fmt(&s, "%s:", zk_acl_resource_enum(a->resource_type));
        zs_add(&s, a->resource_name);
    } else {
        zs_fmt(&s, "{\"version\":1,\"resourceType\":\"%s\",\"name\":", zk_acl_resource_enum(a->resource_type));
        zs_json_str(&s, a->resource_name);
        zs_add(&s, ",\"patternType\":\"PREFIXED\"}");
    }
    return zs_take(&s);
}

static void emit_acl_group(zk_tree *out, acl_ref *g, size_t n)
{
    zstr s;
    zs_init(&s);
    zs_add(&s, "{\"version\":1,\"acls\":[");
    for (size_t i = 0; i < n; i++) {
        if (i && !strcmp(g[i].entry, g[i - 1].entry))
            continue; /* the same entry under two record ids is one ZK entry (a set) */
        zs_add(&s, s.p[s.len - 1] == '[' ? "" : ",");
        zs_add(&s, g[i].entry);
    }
    zs_add(&s, "]}");
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", g[0].path);
    *strrchr(dir, '/') = '\0';
    zk_tree_add(out, dir, NULL, ZN_DIR, NOTIFY_NONE, NULL);
    zk_tree_add(out, g[0].path, zs_take(&s), ZN_ACLS,
                g[0].acl->pattern_type == 3 ? NOTIFY_ACL_LITERAL : NOTIFY_ACL_EXTENDED, acl_notify(g[0].acl));
}

void zk_render_acls(const km_image *img, const char *only_path, zk_tree *out)
{
    size_t it = 0, n = 0, cap = 0;
    acl_ref *refs = NULL;
    const km_acl *a;
    while ((a = km_image_next_acl(img, &it))) {
        char *p = zk_acl_path(a);
        if (!p || (only_path && strcmp(p, only_path))) {
            free(p);
            continue;
        }
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 64;
            acl_ref *grown = realloc(refs, ncap * sizeof *grown);
            if (!grown) {
                free(p);
                out->oom = true;
                break;
            }
            refs = grown;
            cap = ncap;
        }
        zstr e;
        zs_init(&e);
        zk_render_acl_entry(&e, a);
        refs[n++] = (acl_ref){p, e.p, a};
    }
    if (n)
        qsort(refs, n, sizeof *refs, cmp_acl);
    for (size_t i = 0, j; i < n; i = j) {
        for (j = i + 1; j < n && !strcmp(refs[j].path, refs[i].path); j++)
            ;
        emit_acl_group(out, refs + i, j - i);
    }
    for (size_t i = 0; i < n; i++) {
        free(refs[i].path);
        free(refs[i].entry);
    }
    free(refs);
}
