/* What ZooKeeper should hold vs what it holds (or, in dual write, what we last made it hold):
 * the ops that close the gap. Deletes go first, deepest first; then creates and updates in path
 * order, so parents exist before their children. Each write that ZK-mode brokers only notice
 * through a change notification carries that notification in the same multi. */
#include "zk_bridge.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void zk_ops_free(zk_ops *o)
{
    for (size_t i = 0; i < o->n; i++) {
        free((char *)o->v[i].path);
        free((char *)o->v[i].data);
    }
    free(o->v);
    o->v = NULL;
    o->n = o->cap = 0;
}

static void ops_add(zk_ops *o, km_zop_kind kind, const char *path, const char *data, bool join_next)
{
    if (o->n == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 1024;
        km_zop *grown = realloc(o->v, cap * sizeof *grown);
        if (!grown) {
            o->oom = true;
            return;
        }
        o->v = grown;
        o->cap = cap;
    }
    char *p = strdup(path), *d = data ? strdup(data) : NULL;
    if (!p || (data && !d)) {
        free(p);
        free(d);
        o->oom = true;
        return;
    }
    o->v[o->n++] = (km_zop){kind, p, d, d ? (int)strlen(d) : -1, join_next};
}

int zk_path_depth(const char *path)
{
    int n = 0;
    for (; *path; path++)
        n += *path == '/';
    return n;
}

static bool starts(const char *s, const char *prefix) { return !strncmp(s, prefix, strlen(prefix)); }

static bool kafka_keeps(const char *path);

/* Only entity znodes are ours to delete; type directories and anything else stay. So do the
 * client quota and SCRAM znodes Kafka keeps (kafka_keeps): they are emptied instead. */
bool zk_deletable(const char *path)
{
    int d = zk_path_depth(path);
    if (starts(path, "/brokers/topics/")) return d >= 3;
    if (starts(path, "/config/users/")) return d >= 3 && d <= 5 && !kafka_keeps(path);
    if (starts(path, "/config/clients/") || starts(path, "/config/ips/"))
        return d == 3 && !kafka_keeps(path);
    if (starts(path, "/config/topics/") || starts(path, "/config/brokers/"))
        return d == 3;
    if (starts(path, "/kafka-acl/")) return d == 3;
    if (starts(path, "/kafka-acl-extended/prefixed/")) return d == 4;
    if (starts(path, "/delegation_token/tokens/")) return d == 3;
    /* Pending-deletion markers a ZK controller left: the full sync clears them all, as
     * KRaftMigrationZkWriter.handleTopicsSnapshot does (clearPendingTopicDeletions). Deltas never
     * name them (zk_topic_paths). */
    if (starts(path, "/admin/delete_topics/")) return d == 3;
    return false;
}

static const char *notify_path(zk_notify n)
{
    switch (n) {
    case NOTIFY_CONFIG: return "/config/changes/config_change_";
    case NOTIFY_ACL_LITERAL: return "/kafka-acl-changes/acl_changes_";
    case NOTIFY_ACL_EXTENDED: return "/kafka-acl-extended-changes/acl_changes_";
    case NOTIFY_TOKEN: return "/delegation_token/token_changes/token_change_";
    default: return NULL;
    }
}

/* A topic config deleted while its topic's znode is still there goes with the topic: deletes run
 * children first and, at one depth, in reverse path order, so /config/topics/<t> goes before
 * /brokers/topics/<t>, the order of ZkTopicMigrationClient.deleteTopic. */
static bool goes_with_its_topic(const zk_vcache *known, const char *path)
{
    if (!starts(path, "/config/topics/") || zk_path_depth(path) != 3)
        return false;
    char topic[1024];
    int n = snprintf(topic, sizeof topic, "/brokers/topics/%s", path + strlen("/config/topics/"));
    return n > 0 && (size_t)n < sizeof topic && zk_vcache_slot(known, topic) != ZK_VCACHE_NONE;
}

static int hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* One znode name as Kafka names it: Sanitizer.sanitize(Sanitizer.desanitize(name)) (URLDecoder:
 * %XX and '+' for a space), "<default>" as it is. */
static void add_canonical_name(zstr *s, const char *name, size_t len)
{
    if (len == 9 && !strncmp(name, "<default>", 9)) {
        zs_addn(s, name, len);
        return;
    }
    char *plain = malloc(len + 1);
    if (!plain) {
        s->oom = true;
        return;
    }
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        int hi = i + 2 < len && name[i] == '%' ? hex_value(name[i + 1]) : -1;
        int lo = hi >= 0 ? hex_value(name[i + 2]) : -1;
        if (hi >= 0 && lo >= 0) {
            plain[n++] = (char)(hi * 16 + lo);
            i += 2;
        } else {
            plain[n++] = name[i] == '+' ? ' ' : name[i];
        }
    }
    plain[n] = '\0';
    zs_sanitized(s, plain);
    free(plain);
}

/* The entity path of a quota znode (users/<u>[/clients/<c>], clients/<c>, ips/<ip>) with every name
 * in Kafka's form. A znode an older writer named raw (/config/users/alice@X) is the same entity to
 * ZK-mode brokers (UserConfigHandler desanitizes the name for SCRAM), so the notification of its
 * deletion names the znode that holds the entity's config now: a raw name there would make the
 * brokers read the deleted znode and drop alice@X's credentials. Other entity paths are as they are. */
static void canonical_entity(zstr *s, const char *entity)
{
    bool quota = starts(entity, "users/") || starts(entity, "clients/") || starts(entity, "ips/");
    if (!quota) {
        zs_add(s, entity);
        return;
    }
    const char *type_end = strchr(entity, '/');
    zs_addn(s, entity, (size_t)(type_end - entity + 1));
    const char *name = type_end + 1, *slash = strchr(name, '/');
    add_canonical_name(s, name, slash ? (size_t)(slash - name) : strlen(name));
    if (slash && starts(slash, "/clients/")) {
        zs_add(s, "/clients/");
        add_canonical_name(s, slash + 9, strlen(slash + 9));
    }
}

/* A client quota or SCRAM entity's znode under Kafka's own name for it. */
static bool kafka_quota_znode(const char *path)
{
    int d = zk_path_depth(path);
    bool users = starts(path, "/config/users/") &&
                 (d == 3 || (d == 5 && strstr(path + 14, "/clients/") && !strchr(strstr(path + 14, "/clients/") + 9, '/')));
    if (!users && !((starts(path, "/config/clients/") || starts(path, "/config/ips/")) && d == 3))
        return false;
    zstr canon;
    zs_init(&canon);
    canonical_entity(&canon, path + strlen("/config/"));
    bool same = canon.p && !strcmp(canon.p, path + strlen("/config/"));
    zs_free(&canon);
    return same;
}

/* Kafka 3.9 never deletes a client quota or SCRAM znode: for an entity the image no longer has,
 * KRaftMigrationZkWriter (handleClientQuotasDelta, handleClientQuotasSnapshot) calls
 * ZkConfigMigrationClient.writeClientQuotas with empty maps, which writes an empty config and a
 * change notification. So /config/users/<u>, its clients/ directory and /config/users/<u>/clients/<c>
 * stay, emptied: deleting the user's znode while a client's znode is left below it fails NOTEMPTY.
 * A znode an older writer named raw is not Kafka's name for the entity and goes. */
static bool kafka_keeps(const char *path)
{
    if (starts(path, "/config/users/") && zk_path_depth(path) == 4) {
        const char *dir = strrchr(path, '/');
        if (strcmp(dir, "/clients"))
            return false;
        char *user = strndup(path, (size_t)(dir - path));
        bool kept = user && kafka_quota_znode(user);
        free(user);
        return kept;
    }
    return kafka_quota_znode(path);
}

bool zk_emptied_not_deleted(const char *path) { return zk_path_depth(path) != 4 && kafka_keeps(path); }

/* The notification for deleting `path` (the deleted entity is no longer rendered). None for a
 * deleted topic's config: ZkTopicMigrationClient.deleteTopic writes none, and the deleteConfigs
 * that follows finds no znode (NONODE) and so writes none either. */
static zk_notify delete_notify(const zk_vcache *known, const char *path, zstr *payload)
{
    int d = zk_path_depth(path);
    if (goes_with_its_topic(known, path))
        return NOTIFY_NONE;
    if (starts(path, "/config/") && !starts(path, "/config/changes") && d >= 3 &&
        !(starts(path, "/config/users/") && d == 4)) {
        zstr entity;
        zs_init(&entity);
        canonical_entity(&entity, path + strlen("/config/"));
        zk_render_config_notify(payload, entity.p ? entity.p : "");
        zs_free(&entity);
        return NOTIFY_CONFIG;
    }
    if (starts(path, "/delegation_token/tokens/") && d == 3) {
        zs_add(payload, path + 25);
        return NOTIFY_TOKEN;
    }
    const char *camel[] = {"Topic", "Group", "Cluster", "TransactionalId", "DelegationToken", "User"};
    const char *upper[] = {"TOPIC", "GROUP", "CLUSTER", "TRANSACTIONAL_ID", "DELEGATION_TOKEN", "USER"};
    bool literal = starts(path, "/kafka-acl/") && d == 3;
    bool prefixed = starts(path, "/kafka-acl-extended/prefixed/") && d == 4;
    if (!literal && !prefixed)
        return NOTIFY_NONE;
    const char *type = path + (literal ? 11 : 29), *name = strchr(type, '/');
    for (int i = 0; name && i < 6; i++)
        if ((size_t)(name - type) == strlen(camel[i]) && !strncmp(type, camel[i], strlen(camel[i]))) {
            if (literal) {
                zs_fmt(payload, "%s:", upper[i]);
                zs_add(payload, name + 1);
                return NOTIFY_ACL_LITERAL;
            }
            zs_fmt(payload, "{\"version\":1,\"resourceType\":\"%s\",\"name\":", upper[i]);
            zs_json_str(payload, name + 1);
            zs_add(payload, ",\"patternType\":\"PREFIXED\"}");
            return NOTIFY_ACL_EXTENDED;
        }
    return NOTIFY_NONE;
}

static void add_with_notify(zk_ops *o, km_zop_kind kind, const char *path, const char *data, zk_notify n,
                            const char *payload)
{
    const char *np = notify_path(n);
    ops_add(o, kind, path, data, np != NULL);
    if (np)
        ops_add(o, KM_ZOP_CREATE_SEQ, np, payload ? payload : "", false);
}

static void diff_line(zk_ops *o, char mark, const char *path)
{
    if (o->diff) {
        zs_fmt(o->diff, "%c ", mark);
        zs_add(o->diff, path);
        zs_add(o->diff, "\n");
    }
}

void zk_reconcile_delete(zk_vcache *known, const char *path, zk_ops *o)
{
    zstr payload;
    zs_init(&payload);
    zk_notify n = delete_notify(known, path, &payload);
    add_with_notify(o, KM_ZOP_DELETE, path, NULL, n, payload.p);
    zs_free(&payload);
    diff_line(o, '-', path);
    o->deleted++;
    zk_vcache_del(known, path);
}

void zk_reconcile_empty(zk_vcache *known, const char *path, int mark, zk_ops *o)
{
    const char *kdata = NULL;
    if (zk_vcache_get_data(known, path, &kdata) < 0 ||
        zk_same_data(ZN_CONFIG_PARENT, kdata, kdata ? (int)strlen(kdata) : 0, ZK_EMPTY_CONFIG, NULL))
        return; /* already empty (or null, as a parent is created): Kafka finds nothing to write */
    zstr payload;
    zs_init(&payload);
    zk_render_config_notify(&payload, path + strlen("/config/"));
    add_with_notify(o, KM_ZOP_SET, path, ZK_EMPTY_CONFIG, NOTIFY_CONFIG, payload.p);
    zs_free(&payload);
    diff_line(o, '~', path);
    o->updated++;
    char *data = strdup(ZK_EMPTY_CONFIG);
    if (!data || zk_vcache_put_data(known, path, mark, data))
        o->oom = true;
}

static void reconcile_deletes(zk_vcache *known, const zk_tree *cands, const zk_tree *want, zk_ops *o)
{
    for (size_t i = cands->n; i-- > 0;) {
        const char *p = cands->v[i].path, *kdata;
        if (zk_tree_find(want, p) || zk_vcache_get_data(known, p, &kdata) < 0)
            continue;
        if (zk_deletable(p))
            zk_reconcile_delete(known, p, o);
        else if (zk_emptied_not_deleted(p))
            zk_reconcile_empty(known, p, 0, o);
    }
}

/* Type directories (depth <= 2: /config/changes, /kafka-acl/Topic, ...) come first: notifications
 * and entities of every type need them, whatever their place in path order. Each wanted path's
 * entry in known gets `mark`. */
static void reconcile_writes(zk_vcache *known, const zk_tree *want, const km_zk_pwenc *pw, zk_ops *o, bool roots,
                             int mark)
{
    for (size_t i = 0; i < want->n; i++) {
        const zk_node *w = &want->v[i];
        if ((w->kind == ZN_DIR && zk_path_depth(w->path) <= 2) != roots)
            continue;
        size_t slot = zk_vcache_slot(known, w->path);
        bool present = slot != ZK_VCACHE_NONE;
        if (present) {
            const char *kdata = known->datas[slot];
            known->vals[slot] = mark;
            if (w->kind == ZN_DIR || zk_same_data(w->kind, kdata, kdata ? (int)strlen(kdata) : 0, w->data, pw))
                continue;
        }
        /* A new user parent is created as ZkConfigMigrationClient's createRecursive does: null data,
         * no notification (brokers read nothing there, as from an empty config). */
        bool bare = !present && w->kind == ZN_CONFIG_PARENT;
        const char *data = bare ? NULL : w->data;
        add_with_notify(o, present ? KM_ZOP_SET : KM_ZOP_CREATE, w->path, data, bare ? NOTIFY_NONE : w->notify,
                        w->notify_data);
        diff_line(o, present ? '~' : '+', w->path);
        if (present) o->updated++; else o->created++;
        if (zk_vcache_put_data(known, w->path, mark, data ? strdup(data) : NULL))
            o->oom = true;
    }
}

void zk_reconcile_writes(zk_vcache *known, const zk_tree *want, int pass, const km_zk_pwenc *pw, zk_ops *o)
{
    reconcile_writes(known, want, pw, o, true, pass);
    reconcile_writes(known, want, pw, o, false, pass);
}

void zk_reconcile(zk_vcache *known, const zk_tree *cands, const zk_tree *want, const km_zk_pwenc *pw, zk_ops *o)
{
    reconcile_deletes(known, cands, want, o);
    zk_reconcile_writes(known, want, 0, pw, o);
}
