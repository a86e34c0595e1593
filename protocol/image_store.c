/* image_store.c - the containers behind the image: an interning pool for
 * replica/ISR/directory lists, a byte-keyed hash map and a sorted id vector.
 *
 * Interning is what keeps a million partitions small: a cluster has few
 * distinct replica sets, so each partition holds 32-bit ids instead of
 * arrays of its own.
 */
#include "image_internal.h"

#include <stdint.h>

uint8_t km_map_tomb_;

/* 8 bytes at a time (keys are replica lists, uuids and short names), then a
 * final mix so the low bits used as bucket index are good. */
uint64_t km_im_hash(const void *p, size_t n)
{
    const uint8_t *b = p;
    uint64_t h = 0x9e3779b97f4a7c15ull ^ n;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, b, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdull;
        h ^= h >> 29;
        b += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, b, n);
    h = (h ^ w) * 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
}

/* ---- pool ------------------------------------------------------------------------------- */

void km_pool_init(km_pool *p)
{
    memset(p, 0, sizeof *p);
}

void km_pool_free(km_pool *p)
{
    for (uint32_t i = 1; i < p->n_ents; i++)
        free(p->ents[i].data);
    free(p->ents);
    free(p->buckets);
    memset(p, 0, sizeof *p);
}

static int pool_rehash(km_pool *p, uint32_t nb)
{
    uint32_t *b = calloc(nb, sizeof *b);
    if (!b)
        return -1;
    for (uint32_t i = 1; i < p->n_ents; i++) {
        km_pool_ent *e = &p->ents[i];
        if (!e->data)
            continue;
        e->next = b[e->hash & (nb - 1)];
        b[e->hash & (nb - 1)] = i;
    }
    free(p->buckets);
    p->buckets = b;
    p->n_buckets = nb;
    return 0;
}

static uint32_t pool_slot(km_pool *p)
{
    if (p->free_head) {
        uint32_t id = p->free_head;
        p->free_head = p->ents[id].next;
        return id;
    }
    if (p->n_ents == 0)
        p->n_ents = 1;           /* id 0 is the empty list */
    if (p->n_ents >= p->cap_ents) {
        uint32_t nc = p->cap_ents ? p->cap_ents * 2 : 64;
        km_pool_ent *ne = realloc(p->ents, (size_t)nc * sizeof *ne);
        if (!ne)
            return 0;
        p->ents = ne;
        p->cap_ents = nc;
    }
    return p->n_ents++;
}

uint32_t km_pool_intern(km_pool *p, const void *data, size_t len)
{
    if (len == 0)
        return 0;
    if (len > UINT32_MAX / 2)
        return UINT32_MAX;
    uint32_t h = (uint32_t)km_im_hash(data, len);
    if (p->n_buckets) {
        for (uint32_t id = p->buckets[h & (p->n_buckets - 1)]; id; id = p->ents[id].next) {
            km_pool_ent *e = &p->ents[id];
            if (e->hash == h && e->len == len && !memcmp(e->data, data, len)) {
                e->refs++;
                return id;
            }
        }
    }
    if (p->live + 1 > p->n_buckets / 2 && pool_rehash(p, p->n_buckets ? p->n_buckets * 2 : 256) < 0)
        return UINT32_MAX;
    uint8_t *copy = malloc(len);
    uint32_t id = copy ? pool_slot(p) : 0;
    if (!id) {
        free(copy);
        return UINT32_MAX;
    }
    memcpy(copy, data, len);
    p->ents[id] = (km_pool_ent){.data = copy, .len = (uint32_t)len, .refs = 1, .hash = h,
                                .next = p->buckets[h & (p->n_buckets - 1)]};
    p->buckets[h & (p->n_buckets - 1)] = id;
    p->live++;
    return id;
}

void km_pool_ref(km_pool *p, uint32_t id)
{
    if (id)
        p->ents[id].refs++;
}

static void pool_unlink(km_pool *p, uint32_t id)
{
    uint32_t *at = &p->buckets[p->ents[id].hash & (p->n_buckets - 1)];
    while (*at != id)
        at = &p->ents[*at].next;
    *at = p->ents[id].next;
}

void km_pool_unref(km_pool *p, uint32_t id)
{
    if (!id || --p->ents[id].refs)
        return;
    pool_unlink(p, id);
    free(p->ents[id].data);
    p->ents[id].data = NULL;
    p->ents[id].next = p->free_head;
    p->free_head = id;
    p->live--;
}

const void *km_pool_data(const km_pool *p, uint32_t id, uint32_t *len)
{
    if (!id) {
        *len = 0;
        return NULL;
    }
    *len = p->ents[id].len;
    return p->ents[id].data;
}

/* ---- map ----------------------------------------------------------------------------------- */

void km_map_init(km_map *m)
{
    memset(m, 0, sizeof *m);
}

void km_map_free(km_map *m)
{
    for (size_t i = 0; i < m->cap; i++)
        if (m->slots[i].key && m->slots[i].key != KM_MAP_TOMB)
            free(m->slots[i].key);
    free(m->slots);
    memset(m, 0, sizeof *m);
}

/* Index of key's slot, or of the first free/tombstone slot it would go to (*found false). */
static size_t map_find(const km_map *m, const void *key, size_t klen, uint64_t h, bool *found)
{
    size_t mask = m->cap - 1, i = h & mask, tomb = SIZE_MAX;
    for (;;) {
        const km_map_slot *s = &m->slots[i];
        if (!s->key) {
            *found = false;
            return tomb != SIZE_MAX ? tomb : i;
        }
        if (s->key == KM_MAP_TOMB) {
            if (tomb == SIZE_MAX)
                tomb = i;
        } else if (s->hash == h && s->klen == klen && !memcmp(s->key, key, klen)) {
            *found = true;
            return i;
        }
        i = (i + 1) & mask;
    }
}

static int map_grow(km_map *m)
{
    size_t nc = m->cap ? (m->n * 4 > m->cap ? m->cap * 2 : m->cap) : 16;
    km_map_slot *ns = calloc(nc, sizeof *ns), *old = m->slots;
    if (!ns)
        return -1;
    size_t oc = m->cap;
    m->slots = ns;
    m->cap = nc;
    m->used = m->n;
    for (size_t i = 0; i < oc; i++) {
        if (!old[i].key || old[i].key == KM_MAP_TOMB)
            continue;
        bool found;
        ns[map_find(m, old[i].key, old[i].klen, old[i].hash, &found)] = old[i];
    }
    free(old);
    return 0;
}

void *km_map_get(const km_map *m, const void *key, size_t klen)
{
    if (!m->n)
        return NULL;
    bool found;
    size_t i = map_find(m, key, klen, km_im_hash(key, klen), &found);
    return found ? m->slots[i].val : NULL;
}

int km_map_put(km_map *m, const void *key, size_t klen, void *val, void **old)
{
    *old = NULL;
    if ((m->used + 1) * 4 > m->cap * 3 && map_grow(m) < 0)
        return -1;
    uint64_t h = km_im_hash(key, klen);
    bool found;
    size_t i = map_find(m, key, klen, h, &found);
    km_map_slot *s = &m->slots[i];
    if (found) {
        *old = s->val;
        s->val = val;
        return 0;
    }
    uint8_t *k = malloc(klen ? klen : 1);
    if (!k)
        return -1;
    memcpy(k, key, klen);
    if (!s->key)
        m->used++;
    *s = (km_map_slot){.key = k, .klen = (uint32_t)klen, .hash = h, .val = val};
    m->n++;
    return 0;
}

void *km_map_del(km_map *m, const void *key, size_t klen)
{
    if (!m->n)
        return NULL;
    bool found;
    size_t i = map_find(m, key, klen, km_im_hash(key, klen), &found);
    if (!found)
        return NULL;
    void *v = m->slots[i].val;
    free(m->slots[i].key);
    m->slots[i].key = KM_MAP_TOMB;
    m->n--;
    return v;
}

km_map_slot *km_map_next(const km_map *m, size_t *it)
{
    for (size_t i = *it; i < m->cap; i++) {
        if (m->slots[i].key && m->slots[i].key != KM_MAP_TOMB) {
            *it = i + 1;
            return &m->slots[i];
        }
    }
    *it = m->cap;
    return NULL;
}

/* ---- sorted id vector ------------------------------------------------------------------------- */

static size_t idvec_lower(const km_id_vec *v, int32_t id)
{
    size_t lo = 0, hi = v->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (v->v[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

const void *km_idvec_get(const km_id_vec *v, int32_t id)
{
    size_t i = idvec_lower(v, id);
    return i < v->n && v->v[i].id == id ? v->v[i].obj : NULL;
}

const void *km_idvec_set(km_id_vec *v, int32_t id, const void *obj, bool *oom)
{
    *oom = false;
    size_t i = idvec_lower(v, id);
    if (i < v->n && v->v[i].id == id) {
        const void *old = v->v[i].obj;
        if (obj) {
            v->v[i].obj = obj;
        } else {
            memmove(&v->v[i], &v->v[i + 1], (v->n - i - 1) * sizeof v->v[0]);
            v->n--;
        }
        return old;
    }
    if (!obj)
        return NULL;
    if (v->n == v->cap) {
        size_t nc = v->cap ? v->cap * 2 : 8;
        km_id_obj *nv = realloc(v->v, nc * sizeof *nv);
        if (!nv) {
            *oom = true;
            return NULL;
        }
        v->v = nv;
        v->cap = nc;
    }
    memmove(&v->v[i + 1], &v->v[i], (v->n - i) * sizeof v->v[0]);
    v->v[i] = (km_id_obj){id, obj};
    v->n++;
    return NULL;
}
