/* image_delta.c - net change sets between two points of an image's history.
 *
 * Each entity gets one entry the first time it is touched, holding its
 * "before" state, and the entry's "after" state is replaced on every later
 * touch.  Before/after partitions hold pool references and objects hold
 * object references, so the delta is unaffected by later changes to the
 * image.
 */
#include "image_internal.h"

typedef struct dtopic {
    km_uuid id;
    char *name;
    bool had, has;
    int32_t old_n, new_n;    /* -1: not a structural change (touched for a partition only) */
} dtopic;

typedef struct dpart {
    uint32_t topic;          /* index into topics */
    int32_t pid;
    bool has_old, has_new;
    km_part old, new_;
} dpart;

typedef struct dobj {
    uint8_t *key;
    uint32_t klen;
    int32_t id;
    const void *old, *new_;
} dobj;

typedef struct dobjs {
    dobj *v;
    size_t n, cap;
    km_map idx;              /* key -> index + 1 */
} dobjs;

typedef struct dfeat {
    char *name;
    int16_t old, new_;
} dfeat;

struct km_delta {
    km_pool *pool;
    dtopic *topics;
    size_t n_topics, cap_topics;
    km_map topic_idx;        /* uuid -> index + 1 */
    dpart *parts;
    size_t n_parts, cap_parts;
    km_map part_idx;         /* uuid + pid -> index + 1 */
    dobjs objs[KM_OBJ_N];
    dfeat *feats;
    size_t n_feats, cap_feats;
    bool pids_changed, zk_changed, leader_changed, snapshot;
    km_producer_ids pids_old, pids_new;
    int zk_old, zk_new;
    int32_t leader, leader_epoch;
    int64_t offset;
    int32_t epoch;
};

km_delta *km_delta_new(void)
{
    km_delta *d = calloc(1, sizeof *d);
    if (d) {
        d->offset = -1;
        d->epoch = -1;
    }
    return d;
}

void km_delta_clear(km_delta *d)
{
    for (size_t i = 0; i < d->n_topics; i++)
        free(d->topics[i].name);
    free(d->topics);
    km_map_free(&d->topic_idx);
    for (size_t i = 0; i < d->n_parts; i++) {
        if (d->parts[i].has_old)
            km_part_release(d->pool, &d->parts[i].old);
        if (d->parts[i].has_new)
            km_part_release(d->pool, &d->parts[i].new_);
    }
    free(d->parts);
    km_map_free(&d->part_idx);
    for (int k = 0; k < KM_OBJ_N; k++) {
        for (size_t i = 0; i < d->objs[k].n; i++) {
            free(d->objs[k].v[i].key);
            km_obj_unref(d->objs[k].v[i].old);
            km_obj_unref(d->objs[k].v[i].new_);
        }
        free(d->objs[k].v);
        km_map_free(&d->objs[k].idx);
    }
    for (size_t i = 0; i < d->n_feats; i++)
        free(d->feats[i].name);
    free(d->feats);
    km_pool *pool = d->pool;
    memset(d, 0, sizeof *d);
    d->pool = pool;
    d->offset = -1;
    d->epoch = -1;
}

void km_delta_free(km_delta *d)
{
    if (!d)
        return;
    km_delta_clear(d);
    free(d);
}

/* Grows a vector of `elem`-sized items to hold one more. */
static bool grow(void **v, size_t *cap, size_t n, size_t elem)
{
    if (n < *cap)
        return true;
    size_t nc = *cap ? *cap * 2 : 16;
    void *nv = realloc(*v, nc * elem);
    if (!nv)
        return false;
    *v = nv;
    *cap = nc;
    return true;
}

static size_t idx_get(const km_map *m, const void *key, size_t klen)
{
    return (size_t)(uintptr_t)km_map_get(m, key, klen);   /* 0: absent */
}

static int idx_put(km_map *m, const void *key, size_t klen, size_t idx)
{
    void *old;
    return km_map_put(m, key, klen, (void *)(uintptr_t)(idx + 1), &old);
}

/* Index of the topic entry for id, created with the given "before" state. */
static ssize_t topic_entry(km_delta *d, km_uuid id, const char *name, bool had, int32_t old_n)
{
    size_t i = idx_get(&d->topic_idx, id.b, 16);
    if (i)
        return (ssize_t)(i - 1);
    if (!grow((void **)&d->topics, &d->cap_topics, d->n_topics, sizeof *d->topics))
        return -1;
    char *n = km_im_cstrdup(name);
    if (!n || idx_put(&d->topic_idx, id.b, 16, d->n_topics) < 0) {
        free(n);
        return -1;
    }
    d->topics[d->n_topics] = (dtopic){.id = id, .name = n, .had = had, .has = had, .old_n = old_n, .new_n = old_n};
    return (ssize_t)d->n_topics++;
}

int km_delta_note_topic(km_delta *d, km_uuid id, const char *name, bool had, int32_t old_n, bool has,
                        int32_t new_n)
{
    ssize_t i = topic_entry(d, id, name, had, old_n);
    if (i < 0)
        return -1;
    dtopic *t = &d->topics[i];
    if (t->old_n < 0)        /* first seen through a partition change: now we know the count */
        t->old_n = old_n;
    t->has = has;
    t->new_n = new_n;
    return 0;
}

int km_delta_note_part(km_delta *d, km_pool *pool, km_uuid tid, const char *tname, int32_t pid,
                       const km_part *old, const km_part *new_)
{
    d->pool = pool;
    uint8_t key[20];
    memcpy(key, tid.b, 16);
    memcpy(key + 16, &pid, 4);
    size_t i = idx_get(&d->part_idx, key, sizeof key);
    if (!i) {
        ssize_t ti = topic_entry(d, tid, tname, true, -1);
        if (ti < 0 || !grow((void **)&d->parts, &d->cap_parts, d->n_parts, sizeof *d->parts) ||
            idx_put(&d->part_idx, key, sizeof key, d->n_parts) < 0)
            return -1;
        dpart *p = &d->parts[d->n_parts];
        *p = (dpart){.topic = (uint32_t)ti, .pid = pid, .has_old = old != NULL};
        if (old) {
            p->old = *old;
            km_part_retain(pool, old);
        }
        i = ++d->n_parts;
    }
    dpart *p = &d->parts[i - 1];
    if (p->has_new)
        km_part_release(pool, &p->new_);
    p->has_new = new_ != NULL;
    if (new_) {
        p->new_ = *new_;
        km_part_retain(pool, new_);
    }
    return 0;
}

int km_delta_note_obj(km_delta *d, km_obj_kind kind, const void *key, size_t klen, int32_t id,
                      const void *old, const void *new_)
{
    dobjs *o = &d->objs[kind];
    size_t i = idx_get(&o->idx, key, klen);
    if (!i) {
        if (!grow((void **)&o->v, &o->cap, o->n, sizeof *o->v))
            return -1;
        uint8_t *k = malloc(klen ? klen : 1);
        if (!k || idx_put(&o->idx, key, klen, o->n) < 0) {
            free(k);
            return -1;
        }
        memcpy(k, key, klen);
        o->v[o->n] = (dobj){.key = k, .klen = (uint32_t)klen, .id = id, .old = km_obj_ref(old)};
        i = ++o->n;
    }
    dobj *e = &o->v[i - 1];
    km_obj_unref(e->new_);
    e->new_ = km_obj_ref(new_);
    return 0;
}

int km_delta_note_feature(km_delta *d, const char *name, int16_t old, int16_t new_)
{
    for (size_t i = 0; i < d->n_feats; i++) {
        if (!strcmp(d->feats[i].name, name)) {
            d->feats[i].new_ = new_;
            return 0;
        }
    }
    if (!grow((void **)&d->feats, &d->cap_feats, d->n_feats, sizeof *d->feats))
        return -1;
    char *n = km_im_cstrdup(name);
    if (!n)
        return -1;
    d->feats[d->n_feats++] = (dfeat){n, old, new_};
    return 0;
}

void km_delta_note_pids(km_delta *d, km_producer_ids old, km_producer_ids new_)
{
    if (!d->pids_changed)
        d->pids_old = old;
    d->pids_changed = true;
    d->pids_new = new_;
}

void km_delta_note_zk(km_delta *d, int old, int new_)
{
    if (!d->zk_changed)
        d->zk_old = old;
    d->zk_changed = true;
    d->zk_new = new_;
}

void km_delta_note_leader(km_delta *d, int32_t leader, int32_t epoch)
{
    d->leader_changed = true;
    d->leader = leader;
    d->leader_epoch = epoch;
}

void km_delta_note_pos(km_delta *d, int64_t offset, int32_t epoch)
{
    d->offset = offset;
    d->epoch = epoch;
}

void km_delta_mark_snapshot(km_delta *d)
{
    d->snapshot = true;
}

int64_t km_delta_offset(const km_delta *d) { return d->offset; }
int32_t km_delta_epoch(const km_delta *d) { return d->epoch; }
bool km_delta_is_snapshot(const km_delta *d) { return d->snapshot; }

/* ---- iteration -------------------------------------------------------------------------------- */

bool km_delta_next_topic(const km_delta *d, size_t *it, km_topic_change *out)
{
    for (; *it < d->n_topics; (*it)++) {
        const dtopic *t = &d->topics[*it];
        if ((!t->had && !t->has) || (t->had && t->has && t->old_n == t->new_n))
            continue;
        out->op = !t->had ? KM_CREATED : !t->has ? KM_DELETED : KM_CHANGED;
        out->id = t->id;
        out->name = t->name;
        out->old_partitions = t->had && t->old_n > 0 ? t->old_n : 0;
        out->new_partitions = t->has && t->new_n > 0 ? t->new_n : 0;
        (*it)++;
        return true;
    }
    return false;
}

bool km_delta_next_partition(const km_delta *d, size_t *it, km_partition_change *out)
{
    for (; *it < d->n_parts; (*it)++) {
        const dpart *p = &d->parts[*it];
        uint32_t what = p->has_old && p->has_new ? km_part_diff(&p->old, &p->new_) : 0x7ffu;
        if ((!p->has_old && !p->has_new) || !what)
            continue;
        const dtopic *t = &d->topics[p->topic];
        out->topic_id = t->id;
        out->topic_name = t->name;
        out->partition = p->pid;
        out->has_old = p->has_old;
        out->has_new = p->has_new;
        out->what = what;
        memset(&out->old, 0, sizeof out->old);
        memset(&out->new, 0, sizeof out->new);
        if (p->has_old)
            km_part_view(d->pool, &p->old, p->pid, &out->old);
        if (p->has_new)
            km_part_view(d->pool, &p->new_, p->pid, &out->new);
        (*it)++;
        return true;
    }
    return false;
}

static const dobj *next_obj(const km_delta *d, km_obj_kind k, size_t *it)
{
    const dobjs *o = &d->objs[k];
    for (; *it < o->n; (*it)++)
        if (o->v[*it].old != o->v[*it].new_)
            return &o->v[(*it)++];
    return NULL;
}

static bool eps_eq(const km_broker *a, const km_broker *b)
{
    if (a->n_endpoints != b->n_endpoints || (!a->rack) != (!b->rack) || (a->rack && strcmp(a->rack, b->rack)))
        return false;
    for (int32_t i = 0; i < a->n_endpoints; i++) {
        const km_endpoint *x = &a->endpoints[i], *y = &b->endpoints[i];
        if (strcmp(x->name, y->name) || strcmp(x->host, y->host) || x->port != y->port ||
            x->security_protocol != y->security_protocol)
            return false;
    }
    return true;
}

static uint32_t broker_what(const km_broker *o, const km_broker *n)
{
    if (!o)
        return KM_BC_REGISTERED;
    if (!n)
        return KM_BC_UNREGISTERED;
    uint32_t w = 0;
    if (o->epoch != n->epoch || memcmp(&o->incarnation_id, &n->incarnation_id, 16))
        w |= KM_BC_REREGISTERED;
    if (o->fenced != n->fenced)
        w |= n->fenced ? KM_BC_FENCED : KM_BC_UNFENCED;
    if (o->in_controlled_shutdown != n->in_controlled_shutdown)
        w |= n->in_controlled_shutdown ? KM_BC_SHUTDOWN_STARTED : KM_BC_SHUTDOWN_ENDED;
    if (!eps_eq(o, n))
        w |= KM_BC_ENDPOINTS;
    if (o->log_dirs.n != n->log_dirs.n || (o->log_dirs.n && memcmp(o->log_dirs.v, n->log_dirs.v, 16u * (size_t)o->log_dirs.n)))
        w |= KM_BC_LOG_DIRS;
    if (!w || o->is_migrating_zk_broker != n->is_migrating_zk_broker || o->n_features != n->n_features)
        w |= KM_BC_OTHER;
    return w;
}

bool km_delta_next_broker(const km_delta *d, size_t *it, km_broker_change *out)
{
    const dobj *e = next_obj(d, KM_OBJ_BROKER, it);
    if (!e)
        return false;
    *out = (km_broker_change){.id = e->id, .old = e->old, .new = e->new_, .what = broker_what(e->old, e->new_)};
    return true;
}

bool km_delta_next_controller(const km_delta *d, size_t *it, km_controller_change *out)
{
    const dobj *e = next_obj(d, KM_OBJ_CONTROLLER, it);
    if (e)
        *out = (km_controller_change){e->id, e->old, e->new_};
    return e != NULL;
}

bool km_delta_next_config(const km_delta *d, size_t *it, km_config_change *out)
{
    const dobj *e = next_obj(d, KM_OBJ_CONFIG, it);
    if (!e)
        return false;
    const km_config_res *any = e->new_ ? e->new_ : e->old;
    *out = (km_config_change){.type = any->type, .name = any->name, .old = e->old, .new = e->new_};
    return true;
}

#define SIMPLE_NEXT(fn, kind, T)                                 \
    bool fn(const km_delta *d, size_t *it, T *out)               \
    {                                                            \
        const dobj *e = next_obj(d, kind, it);                   \
        if (e) {                                                 \
            out->old = e->old;                                   \
            out->new = e->new_;                                  \
        }                                                        \
        return e != NULL;                                        \
    }
SIMPLE_NEXT(km_delta_next_quota, KM_OBJ_QUOTA, km_quota_change)
SIMPLE_NEXT(km_delta_next_scram, KM_OBJ_SCRAM, km_scram_change)
SIMPLE_NEXT(km_delta_next_acl, KM_OBJ_ACL, km_acl_change)
SIMPLE_NEXT(km_delta_next_token, KM_OBJ_TOKEN, km_token_change)

bool km_delta_next_feature(const km_delta *d, size_t *it, km_feature_change *out)
{
    for (; *it < d->n_feats; (*it)++) {
        const dfeat *f = &d->feats[*it];
        if (f->old == f->new_)
            continue;
        *out = (km_feature_change){f->name, f->old, f->new_};
        (*it)++;
        return true;
    }
    return false;
}

bool km_delta_producer_ids(const km_delta *d, km_producer_ids *old, km_producer_ids *new_)
{
    if (old)
        *old = d->pids_old;
    if (new_)
        *new_ = d->pids_new;
    return d->pids_changed;
}

bool km_delta_zk_migration_state(const km_delta *d, int *old, int *new_)
{
    if (old)
        *old = d->zk_old;
    if (new_)
        *new_ = d->zk_new;
    return d->zk_changed && d->zk_old != d->zk_new;
}

bool km_delta_raft_leader(const km_delta *d, int32_t *leader, int32_t *epoch)
{
    if (leader)
        *leader = d->leader;
    if (epoch)
        *epoch = d->leader_epoch;
    return d->leader_changed;
}

bool km_delta_empty(const km_delta *d)
{
    size_t it = 0;
    km_topic_change tc;
    km_partition_change pc;
    km_feature_change fc;
    if (km_delta_next_topic(d, &it, &tc) || (it = 0, km_delta_next_partition(d, &it, &pc)) ||
        (it = 0, km_delta_next_feature(d, &it, &fc)))
        return false;
    for (int k = 0; k < KM_OBJ_N; k++) {
        it = 0;
        if (next_obj(d, (km_obj_kind)k, &it))
            return false;
    }
    return !d->pids_changed && !(d->zk_changed && d->zk_old != d->zk_new) && !d->leader_changed;
}
