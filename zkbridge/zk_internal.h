/* zk_internal.h - shared by the zkbridge .c files only. */
#ifndef KM_ZK_INTERNAL_H
#define KM_ZK_INTERNAL_H

#include "km_zkbridge.h"

#include <stddef.h>
#include <stdint.h>

/* path -> zkVersion, open addressing. Grows by doubling; memory is bounded by the managed tree. */
typedef struct zk_vcache {
    char **keys;
    int *vals;
    char **datas;        /* optional payload per key (owned), used by the bridge's model */
    size_t cap, used;
} zk_vcache;

int zk_vcache_put(zk_vcache *c, const char *path, int version); /* -1 on OOM */
int zk_vcache_get(const zk_vcache *c, const char *path);        /* -1 when absent */
void zk_vcache_del(zk_vcache *c, const char *path);
void zk_vcache_clear(zk_vcache *c);
/* Sizes the table for n more keys at once (a full sync knows how many), sparing the rehashes. */
int zk_vcache_reserve(zk_vcache *c, size_t n);
/* With a payload (owned by the cache from now on; NULL allowed). get returns -1 when absent. */
int zk_vcache_put_data(zk_vcache *c, const char *path, int version, char *data);
int zk_vcache_get_data(const zk_vcache *c, const char *path, const char **data);
/* The slot holding path (its vals[] and datas[] may be read and changed in place until the next
 * put), or ZK_VCACHE_NONE. */
#define ZK_VCACHE_NONE ((size_t)-1)
size_t zk_vcache_slot(const zk_vcache *c, const char *path);
/* Slot i's key (0 <= i < c->cap), or NULL for a free slot: iterates every key. */
const char *zk_vcache_key_at(const zk_vcache *c, size_t i);

int64_t zk_now_ms(void);  /* monotonic */
int64_t zk_wall_ms(void); /* epoch ms, for /controller's timestamp */

#endif
