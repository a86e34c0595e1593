/* The writer's zkVersion cache: every conditional write needs the version it expects, and a
 * resent multi whose version no longer matches is how we recognise our own landed write. */
#include "zk_internal.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TOMBSTONE ((char *)1)

int64_t zk_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t zk_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static uint64_t hash(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    while (*s)
        h = (h ^ (unsigned char)*s++) * 1099511628211ull;
    return h;
}

/* Slot holding path, or the first free slot for it when absent (free_slot may be NULL). */
static size_t find(const zk_vcache *c, const char *path, size_t *free_slot, int *found)
{
    size_t mask = c->cap - 1, i = hash(path) & mask;
    *found = 0;
    if (free_slot)
        *free_slot = (size_t)-1;
    for (size_t probes = 0; probes < c->cap; probes++, i = (i + 1) & mask) {
        char *k = c->keys[i];
        if (!k) {
            if (free_slot && *free_slot == (size_t)-1)
                *free_slot = i;
            return i;
        }
        if (k == TOMBSTONE) {
            if (free_slot && *free_slot == (size_t)-1)
                *free_slot = i;
        } else if (!strcmp(k, path)) {
            *found = 1;
            return i;
        }
    }
    return (size_t)-1;
}

static int grow_to(zk_vcache *c, size_t cap)
{
    zk_vcache next = {0};
    next.cap = cap;
    next.keys = calloc(next.cap, sizeof *next.keys);
    next.vals = calloc(next.cap, sizeof *next.vals);
    next.datas = calloc(next.cap, sizeof *next.datas);
    if (!next.keys || !next.vals || !next.datas) {
        free(next.keys);
        free(next.vals);
        free(next.datas);
        return -1;
    }
    for (size_t i = 0; i < c->cap; i++) {
        if (!c->keys[i] || c->keys[i] == TOMBSTONE)
            continue;
        size_t slot;
        int found;
        find(&next, c->keys[i], &slot, &found);
        next.keys[slot] = c->keys[i];
        next.vals[slot] = c->vals[i];
        next.datas[slot] = c->datas[i];
        next.used++;
    }
    free(c->keys);
    free(c->vals);
    free(c->datas);
    *c = next;
    return 0;
}

static int grow(zk_vcache *c) { return grow_to(c, c->cap ? c->cap * 2 : 1024); }

int zk_vcache_reserve(zk_vcache *c, size_t n)
{
    size_t cap = c->cap ? c->cap : 1024;
    while ((c->used + n + 1) * 2 > cap)
        cap *= 2;
    return cap == c->cap ? 0 : grow_to(c, cap);
}

int zk_vcache_put_data(zk_vcache *c, const char *path, int version, char *data)
{
    if ((c->used + 1) * 2 > c->cap && grow(c)) {
        free(data);
        return -1;
    }
    size_t slot;
    int found;
    size_t i = find(c, path, &slot, &found);
    if (found) {
        c->vals[i] = version;
        free(c->datas[i]);
        c->datas[i] = data;
        return 0;
    }
    char *k = strdup(path);
    if (!k) {
        free(data);
        return -1;
    }
    c->keys[slot] = k;
    c->vals[slot] = version;
    c->datas[slot] = data;
    c->used++;
    return 0;
}

int zk_vcache_put(zk_vcache *c, const char *path, int version)
{
    return zk_vcache_put_data(c, path, version, NULL);
}

size_t zk_vcache_slot(const zk_vcache *c, const char *path)
{
    if (!c->cap)
        return ZK_VCACHE_NONE;
    int found;
    size_t i = find(c, path, NULL, &found);
    return found ? i : ZK_VCACHE_NONE;
}

int zk_vcache_get_data(const zk_vcache *c, const char *path, const char **data)
{
    size_t i = zk_vcache_slot(c, path);
    *data = i == ZK_VCACHE_NONE ? NULL : c->datas[i];
    return i == ZK_VCACHE_NONE ? -1 : c->vals[i];
}

int zk_vcache_get(const zk_vcache *c, const char *path)
{
    size_t i = zk_vcache_slot(c, path);
    return i == ZK_VCACHE_NONE ? -1 : c->vals[i];
}

void zk_vcache_del(zk_vcache *c, const char *path)
{
    size_t i = zk_vcache_slot(c, path);
    if (i != ZK_VCACHE_NONE) {
        free(c->keys[i]);
        free(c->datas[i]);
        c->datas[i] = NULL;
        c->keys[i] = TOMBSTONE; /* used stays: tombstones count against the load factor */
    }
}

void zk_vcache_clear(zk_vcache *c)
{
    for (size_t i = 0; i < c->cap; i++) {
        if (c->keys[i] && c->keys[i] != TOMBSTONE)
            free(c->keys[i]);
        if (c->datas)
            free(c->datas[i]);
    }
    free(c->keys);
    free(c->vals);
    free(c->datas);
    memset(c, 0, sizeof *c);
}

const char *zk_vcache_key_at(const zk_vcache *c, size_t i)
{
    return i < c->cap && c->keys[i] != TOMBSTONE ? c->keys[i] : NULL;
}
