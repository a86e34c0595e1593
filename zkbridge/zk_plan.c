/* A pass over the whole image, a slice at a time. Rendering and comparing 100,000 partitions takes
 * about a second: done in one go it would stall the loop (session pings, broker RPCs, metrics) and
 * leave ZooKeeper idle until the last znode was planned. So each step renders about a thousand
 * znodes (a run of topics, or one of the smaller kinds whole), reconciles them against our model of
 * ZooKeeper and hands the ops on, and the writer sends them while the next slice is planned.
 * Deletions come last: a path may go only once no slice of the pass has wanted it. What ZooKeeper
 * held is loaded into our model a slice at a time too, before anything is planned. */
#include "zk_bridge.h"

#include <stdlib.h>
#include <string.h>

/* Znodes rendered per step: a few ms of work, small against the writer's in-flight window. */
#define PLAN_SLICE_ZNODES 1024

void zk_plan_start(zk_plan *p, const km_image *img, int32_t controller_epoch, const km_zk_pwenc *pw,
                   zk_vcache *known, zk_vcache *versions, int pass, zk_tree *cands)
{
    zk_plan_free(p);
    p->img = img;
    p->controller_epoch = controller_epoch;
    p->pw = pw;
    p->known = known;
    p->versions = versions;
    p->pass = pass;
    p->cands = *cands;
    memset(cands, 0, sizeof *cands);
    p->stage = versions ? PLAN_LOAD : PLAN_ROOTS;
    p->it = 0;
}

void zk_plan_free(zk_plan *p)
{
    zk_tree_free(&p->cands);
    free(p->doomed);
    memset(p, 0, sizeof *p);
    p->stage = PLAN_DONE;
}

/* Where a step that goes through `per` more of n items from p->it ends. */
static size_t slice_end(const zk_plan *p, size_t per, size_t n) { return p->it + per < n ? p->it + per : n; }

/* What ZooKeeper holds becomes our model of it: the data moves into known, the zkVersions into
 * the writer's cache (every setData and delete needs one). Returns -1 when out of memory. */
static int load_slice(zk_plan *p)
{
    size_t end = slice_end(p, PLAN_SLICE_ZNODES * 4, p->cands.n);
    for (; p->it < end; p->it++) {
        zk_node *n = &p->cands.v[p->it];
        char *data = n->data;
        n->data = NULL; /* known owns it now, even when the put fails */
        if (zk_vcache_put_data(p->known, n->path, 0, data) || zk_vcache_put(p->versions, n->path, n->version))
            return -1;
    }
    if (p->it == p->cands.n) {
        p->stage = PLAN_ROOTS;
        p->it = 0;
    }
    return 0;
}

/* The candidates no slice of this pass wanted, and ours to delete (or, quota znodes Kafka keeps,
 * to empty at once: no deletion). Returns -1 when out of memory. */
static int scan_slice(zk_plan *p, zk_ops *o)
{
    size_t end = slice_end(p, PLAN_SLICE_ZNODES * 4, p->cands.n);
    for (; p->it < end; p->it++) {
        const char *path = p->cands.v[p->it].path;
        size_t slot = zk_vcache_slot(p->known, path);
        if (slot == ZK_VCACHE_NONE || p->known->vals[slot] == p->pass)
            continue;
        if (zk_emptied_not_deleted(path))
            zk_reconcile_empty(p->known, path, p->pass, o);
        if (!zk_deletable(path))
            continue;
        if (p->n_doomed == p->cap_doomed) {
            size_t cap = p->cap_doomed ? p->cap_doomed * 2 : 256;
            const char **grown = realloc(p->doomed, cap * sizeof *grown);
            if (!grown)
                return -1;
            p->doomed = grown;
            p->cap_doomed = cap;
        }
        p->doomed[p->n_doomed++] = path;
    }
    return 0;
}

static int deepest_first(const void *a, const void *b)
{
    const char *x = *(const char *const *)a, *y = *(const char *const *)b;
    int dx = zk_path_depth(x), dy = zk_path_depth(y);
    /* at one depth in reverse path order, as zk_reconcile's delta deletes go (see goes_with_its_topic) */
    return dx != dy ? (dx < dy) - (dx > dy) : strcmp(y, x);
}

/* A password someone else encoded costs a PBKDF2 run to compare (its own salt): as much as a
 * hundred znodes, so a slice holds a handful. */
#define PASSWORD_COST 128

static size_t password_count(const km_config_res *res)
{
    size_t n = 0;
    for (int32_t i = 0; i < res->n; i++)
        n += km_zk_is_password_config(res->kv[i].name);
    return n;
}

/* Broker configs until the slice's budget is spent; true when there are no more. */
static bool render_broker_configs(zk_plan *p, zk_tree *want)
{
    size_t cost = 0;
    const km_config_res *res;
    while (cost < PLAN_SLICE_ZNODES && (res = km_image_next_config(p->img, &p->it)))
        if (res->type == KM_CFG_BROKER) {
            zk_render_broker_config(res, p->pw, want);
            cost += 1 + password_count(res) * PASSWORD_COST;
        }
    return cost < PLAN_SLICE_ZNODES;
}

/* Renders the current stage's next slice into want; moves on to the next stage when it is done. */
static void render_slice(zk_plan *p, zk_tree *want)
{
    const km_topic *t;
    bool stage_done = true;
    switch (p->stage) {
    case PLAN_ROOTS:
        zk_render_roots(want);
        break;
    case PLAN_TOPICS:
        while (want->n < PLAN_SLICE_ZNODES && (t = km_image_next_topic(p->img, &p->it)))
            zk_render_topic_nodes(p->img, t, p->controller_epoch, p->pw, want);
        stage_done = want->n < PLAN_SLICE_ZNODES;
        break;
    case PLAN_BROKER_CONFIGS:
        stage_done = render_broker_configs(p, want);
        break;
    case PLAN_QUOTAS: /* grouped per entity path, like the ACLs below: rendered whole */
        zk_render_quotas(p->img, NULL, want);
        break;
    case PLAN_ACLS:
        zk_render_acls(p->img, NULL, want);
        break;
    case PLAN_TOKENS:
        zk_render_tokens_and_pids(p->img, want);
        break;
    default:
        return;
    }
    if (stage_done) {
        p->stage++;
        p->it = 0;
    }
}

/* The slice's deletes: children before their parents, so each delete finds its znode empty. */
static void delete_slice(zk_plan *p, zk_ops *o)
{
    if (p->it == 0 && p->n_doomed > 1)
        qsort(p->doomed, p->n_doomed, sizeof *p->doomed, deepest_first);
    size_t end = slice_end(p, PLAN_SLICE_ZNODES, p->n_doomed);
    for (; p->it < end; p->it++)
        zk_reconcile_delete(p->known, p->doomed[p->it], o);
    if (p->it == p->n_doomed)
        p->stage = PLAN_DONE;
}

bool zk_plan_step(zk_plan *p, zk_ops *o)
{
    switch (p->stage) {
    case PLAN_LOAD:
        if (load_slice(p))
            o->oom = true;
        return false;
    case PLAN_SCAN:
        /* An image that changed under the render (records applied between slices) may have
         * moved topics past the iterator: what was not rendered is not proven unwanted. The
         * catch-up pass that follows renders the image whole again and deletes then. */
        if (p->it == 0 && p->image_moved) {
            p->stage = PLAN_DONE;
            return true;
        }
        if (scan_slice(p, o))
            o->oom = true;
        if (p->it == p->cands.n) {
            p->stage = PLAN_DELETES;
            p->it = 0;
        }
        return false;
    case PLAN_DELETES:
        delete_slice(p, o);
        return p->stage == PLAN_DONE;
    case PLAN_DONE:
        return true;
    default:
        break;
    }
    zk_tree want = {0};
    render_slice(p, &want);
    if (want.oom)
        o->oom = true;
    zk_tree_sort(&want);
    zk_reconcile_writes(p->known, &want, p->pass, p->pw, o);
    zk_tree_free(&want);
    return false;
}
