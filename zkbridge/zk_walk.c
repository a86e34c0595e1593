/* Reads the part of ZooKeeper the mirror owns (pipelined getData/getChildren, bounded in flight),
 * and compares znode data semantically with our renderings. */
#include "zk_bridge.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Roots and how deep below them the mirror owns znodes. */
static const struct { const char *path; int depth; } ROOTS[] = {
    {"/brokers", 0}, {"/brokers/topics", 4}, {"/config", 0}, {"/config/changes", 0}, {"/config/topics", 1},
    {"/config/brokers", 1}, {"/config/users", 3}, {"/config/clients", 1}, {"/config/ips", 1}, {"/admin", 0},
    {"/admin/delete_topics", 1}, {"/kafka-acl", 2}, {"/kafka-acl-changes", 0}, {"/kafka-acl-extended", 0},
    {"/kafka-acl-extended/prefixed", 2}, {"/kafka-acl-extended-changes", 0}, {"/delegation_token", 0},
    {"/delegation_token/tokens", 1}, {"/delegation_token/token_changes", 0}, {"/latest_producer_id_block", 0},
};

#define WALK_MAX_INFLIGHT 512

typedef struct walk_req {
    zk_walk *wk;
    char *path;
    int depth_left;
    bool is_children;
} walk_req;

static void walk_pump(zk_walk *wk);

static void walk_finish_one(zk_walk *wk, walk_req *r)
{
    free(r->path);
    free(r);
    wk->inflight--;
    walk_pump(wk);
}

static void note_rc(zk_walk *wk, int rc, const char *path)
{
    if (rc != ZOK && rc != ZNONODE && wk->rc == ZOK) {
        wk->rc = rc;
        snprintf(wk->failed_path, sizeof wk->failed_path, "%s", path);
    }
}

static void push(zk_walk *wk, char *path, int depth_left)
{
    if (wk->qn == wk->qcap) {
        size_t cap = wk->qcap ? wk->qcap * 2 : 1024;
        walk_req *grown = realloc(wk->queue, cap * sizeof *grown);
        if (!grown) {
            free(path);
            wk->rc = ZSYSTEMERROR;
            return;
        }
        wk->queue = grown;
        wk->qcap = cap;
    }
    wk->queue[wk->qn++] = (walk_req){wk, path, depth_left, false};
}

/* A znode read, with the zkVersion its setData or delete will need. Takes data. */
static void add_read(zk_walk *wk, const char *path, char *data, zk_nkind kind, int version)
{
    size_t before = wk->out->n;
    zk_tree_add(wk->out, path, data, kind, NOTIFY_NONE, NULL);
    if (wk->out->n > before)
        wk->out->v[before].version = version;
}

static void push_children(zk_walk *wk, const walk_req *r, const struct String_vector *v)
{
    for (int i = 0; wk->rc == ZOK && i < v->count; i++) {
        char *child = NULL;
        if (asprintf(&child, "%s/%s", r->path, v->data[i]) >= 0)
            push(wk, child, r->depth_left - 1);
        else
            wk->rc = ZSYSTEMERROR;
    }
}

static void on_children(int rc, const struct String_vector *v, const void *data)
{
    walk_req *r = (walk_req *)data;
    zk_walk *wk = r->wk;
    note_rc(wk, rc, r->path);
    if (rc == ZOK)
        push_children(wk, r, v);
    walk_finish_one(wk, r);
}

/* A directory whose data nobody reads: getChildren2 gives its children and its own Stat at once. */
static void on_dir(int rc, const struct String_vector *v, const struct Stat *st, const void *data)
{
    walk_req *r = (walk_req *)data;
    zk_walk *wk = r->wk;
    note_rc(wk, rc, r->path);
    if (rc == ZOK && wk->rc == ZOK) {
        add_read(wk, r->path, NULL, ZN_DIR, st->version);
        push_children(wk, r, v);
    }
    walk_finish_one(wk, r);
}

/* .../partitions and .../partitions/<n> below /brokers/topics: Kafka writes no data there, and
 * they are most of the tree, so listing them alone saves a third of the reads. */
static bool data_free_dir(const char *path)
{
    if (strncmp(path, "/brokers/topics/", 16))
        return false;
    int depth = zk_path_depth(path);
    const char *last = strrchr(path, '/');
    if (depth == 4)
        return !strcmp(last, "/partitions");
    return depth == 5 && last - path >= 11 && !strncmp(last - 11, "/partitions", 11);
}

static void on_data(int rc, const char *value, int len, const struct Stat *st, const void *data)
{
    walk_req *r = (walk_req *)data;
    zk_walk *wk = r->wk;
    note_rc(wk, rc, r->path);
    if (rc == ZOK && wk->rc == ZOK) {
        char *copy = NULL;
        if (value && len >= 0 && (copy = malloc((size_t)len + 1))) {
            memcpy(copy, value, (size_t)len);
            copy[len] = '\0';
        }
        add_read(wk, r->path, copy, value ? ZN_DATA : ZN_DIR, st->version);
        if (r->depth_left > 0) {
            walk_req *c = malloc(sizeof *c);
            if (c && (c->path = strdup(r->path))) {
                *c = (walk_req){wk, c->path, r->depth_left, true};
                if (zoo_aget_children(wk->zh, c->path, 0, on_children, c) == ZOK)
                    wk->inflight++;
                else
                    note_rc(wk, ZCONNECTIONLOSS, c->path), free(c->path), free(c);
            } else {
                free(c);
                note_rc(wk, ZSYSTEMERROR, r->path);
            }
        }
    }
    walk_finish_one(wk, r);
}

static void walk_pump(zk_walk *wk)
{
    while (wk->rc == ZOK && wk->qn && wk->inflight < WALK_MAX_INFLIGHT) {
        walk_req *r = malloc(sizeof *r);
        if (!r) {
            wk->rc = ZSYSTEMERROR;
            break;
        }
        *r = wk->queue[--wk->qn];
        int rc = r->depth_left > 0 && data_free_dir(r->path) ? zoo_aget_children2(wk->zh, r->path, 0, on_dir, r)
                                                             : zoo_aget(wk->zh, r->path, 0, on_data, r);
        if (rc != ZOK) {
            free(r->path);
            free(r);
            wk->rc = ZCONNECTIONLOSS;
            break;
        }
        wk->inflight++;
    }
    if (wk->inflight == 0 && (wk->qn == 0 || wk->rc != ZOK) && !wk->finished) {
        wk->finished = true;
        if (wk->out->oom && wk->rc == ZOK) /* a znode that could not be copied is not "absent" */
            wk->rc = ZSYSTEMERROR;
        while (wk->qn)
            free(wk->queue[--wk->qn].path);
        wk->done(wk, wk->rc, wk->ctx);
    }
}

int zk_walk_start(zk_walk *wk, zhandle_t *zh, zk_tree *out, void (*done)(zk_walk *, int, void *), void *ctx)
{
    memset(wk, 0, sizeof *wk);
    wk->zh = zh;
    wk->out = out;
    wk->done = done;
    wk->ctx = ctx;
    for (size_t i = 0; i < sizeof ROOTS / sizeof ROOTS[0]; i++)
        push(wk, strdup(ROOTS[i].path), ROOTS[i].depth);
    walk_pump(wk);
    return 0;
}

void zk_walk_free(zk_walk *wk)
{
    while (wk->qn)
        free(wk->queue[--wk->qn].path);
    free(wk->queue);
    wk->queue = NULL;
}

/* ---- semantic comparison ---- */

static int cmp_cstr(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Replaces the "acls" array with its entries' canonical dumps, sorted: ACLs are a set. */
static void canonical_acls(json_t *root)
{
    json_t *acls = json_object_get(root, "acls");
    size_t n = json_is_array(acls) ? json_array_size(acls) : 0;
    char **dumps = n ? calloc(n, sizeof *dumps) : NULL;
    if (!dumps)
        return;
    for (size_t i = 0; i < n; i++)
        dumps[i] = json_dumps(json_array_get(acls, i), JSON_SORT_KEYS | JSON_COMPACT);
    for (size_t i = 0; i < n; i++)
        if (!dumps[i])
            dumps[i] = strdup("");
    qsort(dumps, n, sizeof *dumps, cmp_cstr);
    json_t *sorted = json_array();
    for (size_t i = 0; i < n; i++) {
        if (!i || strcmp(dumps[i], dumps[i - 1]))
            json_array_append_new(sorted, json_string(dumps[i]));
        free(dumps[i]);
    }
    free(dumps);
    json_object_set_new(root, "acls", sorted);
}

/* A config entity's password values, decoded in place: every write encodes with a fresh IV (and
 * Kafka's with a fresh salt), so only the plain values say whether two configs hold the same.
 * False when one does not decode (a wrong secret, or stored in the clear): that znode differs
 * from anything we would write, and is rewritten. */
static bool decode_passwords(json_t *root, const km_zk_pwenc *pw)
{
    json_t *cfg = json_object_get(root, "config"), *v;
    const char *key;
    bool ok = true;
    json_object_foreach(cfg, key, v) {
        if (!km_zk_is_password_config(key) || !json_is_string(v))
            continue;
        km_err err = {{0}};
        char *plain = km_zk_password_decode(pw, json_string_value(v), &err);
        ok &= plain && json_string_set(v, plain) == 0;
        free(plain);
    }
    return ok;
}

bool zk_same_data(zk_nkind kind, const char *have, int have_len, const char *want, const km_zk_pwenc *pw)
{
    if (kind == ZN_DIR)
        return true;
    if (kind == ZN_CONFIG_PARENT && (!have || have_len == 0))
        return true; /* created as a parent (null data): brokers read no config there, as from an empty one */
    if (!have || !want)
        return !have && !want;
    if (kind == ZN_RAW)
        return (size_t)have_len == strlen(want) && !memcmp(have, want, (size_t)have_len);
    json_error_t e;
    json_t *a = json_loadb(have, (size_t)have_len, 0, &e), *b = json_loads(want, 0, &e);
    bool same;
    if (!a || !b) {
        same = (size_t)have_len == strlen(want) && !memcmp(have, want, (size_t)have_len);
    } else {
        if (kind == ZN_STATE) { /* our epoch moves on every claim; brokers do not care */
            json_object_del(a, "controller_epoch");
            json_object_del(b, "controller_epoch");
        }
        if (kind == ZN_ACLS) {
            canonical_acls(a);
            canonical_acls(b);
        }
        bool decoded = true;
        if (kind == ZN_CONFIG) { /* both sides decoded, even when the first fails */
            bool decoded_a = decode_passwords(a, pw), decoded_b = decode_passwords(b, pw);
            decoded = decoded_a && decoded_b;
        }
        same = decoded && json_equal(a, b);
    }
    json_decref(a);
    json_decref(b);
    return same;
}
