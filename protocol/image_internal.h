/* image_internal.h - shared between protocol/image*.c only; not a public header. */
#ifndef KM_IMAGE_INTERNAL_H
#define KM_IMAGE_INTERNAL_H

#include "km_image.h"

#include <stdlib.h>
#include <string.h>

/* ---- hashing ------------------------------------------------------------------------ */

uint64_t km_im_hash(const void *p, size_t n);

/* ---- interned lists ----------------------------------------------------------------- */

/* A refcounted set of distinct byte strings (int32 and uuid lists), named by
 * a 32-bit id.  Id 0 is the empty list and is never stored.  Data pointers
 * stay put while an id is referenced, so views can point into them. */
typedef struct km_pool_ent {
    uint8_t *data;           /* NULL: free slot */
    uint32_t len;            /* bytes */
    uint32_t refs;
    uint32_t next;           /* hash chain (id), 0 ends */
    uint32_t hash;
} km_pool_ent;

typedef struct km_pool {
    km_pool_ent *ents;       /* ents[0] unused */
    uint32_t n_ents, cap_ents;
    uint32_t free_head;      /* chain of free ids through .next */
    uint32_t *buckets;
    uint32_t n_buckets;      /* power of two */
    uint32_t live;
} km_pool;

void km_pool_init(km_pool *p);
void km_pool_free(km_pool *p);
/* Returns a referenced id for data[0..len) (0 for len 0), or UINT32_MAX on OOM. */
uint32_t km_pool_intern(km_pool *p, const void *data, size_t len);
void km_pool_ref(km_pool *p, uint32_t id);
void km_pool_unref(km_pool *p, uint32_t id);
const void *km_pool_data(const km_pool *p, uint32_t id, uint32_t *len);

/* ---- hash map: byte-string key -> pointer ------------------------------------------------ */

typedef struct km_map_slot {
    uint8_t *key;            /* NULL: empty; KM_MAP_TOMB: deleted */
    uint32_t klen;
    uint64_t hash;
    void *val;
} km_map_slot;

typedef struct km_map {
    km_map_slot *slots;
    size_t cap, n, used;     /* used counts tombstones too */
} km_map;

extern uint8_t km_map_tomb_;
#define KM_MAP_TOMB (&km_map_tomb_)

void km_map_init(km_map *m);
void km_map_free(km_map *m);              /* values are the caller's */
void *km_map_get(const km_map *m, const void *key, size_t klen);
/* Sets key -> val; *old receives the previous value (NULL if new).  -1 on OOM. */
int km_map_put(km_map *m, const void *key, size_t klen, void *val, void **old);
void *km_map_del(km_map *m, const void *key, size_t klen);  /* the removed value or NULL */
/* Next occupied slot at or after *it; advances *it past it. */
km_map_slot *km_map_next(const km_map *m, size_t *it);

/* ---- refcounted immutable objects -------------------------------------------------------- */

typedef enum km_obj_kind {
    KM_OBJ_BROKER, KM_OBJ_CONTROLLER, KM_OBJ_CONFIG, KM_OBJ_QUOTA, KM_OBJ_SCRAM, KM_OBJ_ACL,
    KM_OBJ_TOKEN, KM_OBJ_N
} km_obj_kind;

/* Allocates a zeroed object of `size` with a hidden header holding refs = 1.
 * Its strings/arrays are separate allocations freed by km_obj_unref. */
void *km_obj_new(km_obj_kind kind, size_t size);
const void *km_obj_ref(const void *obj);  /* NULL-safe; returns obj */
void km_obj_unref(const void *obj);       /* NULL-safe */
km_obj_kind km_obj_kind_of(const void *obj);
bool km_obj_equal(const void *a, const void *b);  /* same kind and content */

char *km_im_strdup(km_str s);             /* NULL for the null string; NULL+errno on OOM is not distinguished */
char *km_im_cstrdup(const char *s);

/* A broker's log dirs in the order Kafka's BrokerRegistration keeps them (Uuid.compareTo: signed halves). */
void km_im_sort_log_dirs(km_uuid *dirs, int32_t n);
km_broker *km_broker_from_record(const km_register_broker_record *r);
km_broker *km_broker_clone(const km_broker *b);
km_controller *km_controller_from_record(const km_register_controller_record *r);
/* A copy of res (may be NULL: a new empty one) with `name` set to value (NULL: removed).
 * Returns NULL on OOM; *empty tells if no config is left. */
km_config_res *km_config_with(const km_config_res *res, int8_t type, const char *rname,
                              const char *name, const char *value);
km_client_quota *km_quota_with(const km_client_quota *q, const km_client_quota_record *r);
/* Canonical key of a quota entity: "type\0name\0" per part sorted by type (name "\1" for default). */
int km_quota_key(const km_client_quota_record *r, km_buf *out);
km_scram *km_scram_from_record(const km_user_scram_credential_record *r);
km_acl *km_acl_from_record(const km_access_control_entry_record *r);
km_token *km_token_from_record(const km_delegation_token_record *r);

/* ---- partitions and topics ---------------------------------------------------------------- */

typedef struct km_part {     /* 44 bytes: lists are pool ids */
    uint32_t replicas, isr, removing, adding, elr, lkelr, dirs;
    int32_t leader, leader_epoch, partition_epoch;
    int8_t lrs;
    bool present;
} km_part;

struct km_topic {
    km_uuid id;
    char *name;
    km_part *parts;          /* index = partition id */
    int32_t n_parts, cap_parts;
    int32_t n_present;
    const km_pool *pool;
};

void km_part_release(km_pool *p, km_part *pt);          /* drops its list refs */
void km_part_retain(km_pool *p, const km_part *pt);     /* takes refs on its lists */
void km_part_view(const km_pool *p, const km_part *pt, int32_t id, km_partition *out);
bool km_part_same(const km_part *a, const km_part *b);  /* same content (same pool) */
uint32_t km_part_diff(const km_part *a, const km_part *b); /* KM_PC_* bits */

/* ---- image state ------------------------------------------------------------------------ */

typedef struct km_id_obj { int32_t id; const void *obj; } km_id_obj;
typedef struct km_id_vec { km_id_obj *v; size_t n, cap; } km_id_vec;  /* sorted by id */

const void *km_idvec_get(const km_id_vec *v, int32_t id);
/* Sets id -> obj (NULL removes); returns the previous object (the caller unrefs it). -1 on OOM via *oom. */
const void *km_idvec_set(km_id_vec *v, int32_t id, const void *obj, bool *oom);

typedef struct km_feature { char *name; int16_t level; } km_feature;

typedef struct km_istate {
    km_map topics_by_id;     /* uuid -> km_topic* (owner) */
    km_map topics_by_name;   /* name -> km_topic* */
    size_t n_partitions;
    km_id_vec brokers, controllers;
    km_map configs;          /* [type][name] -> km_config_res* */
    km_map quotas;           /* km_quota_key -> km_client_quota* */
    km_map scram;            /* [mechanism][user] -> km_scram* */
    km_map acls;             /* uuid -> km_acl* */
    km_map tokens;           /* token id -> km_token* */
    km_feature *features;    /* sorted by name; metadata.version included */
    size_t n_features, cap_features;
    km_producer_ids pids;
    int zk_state;
} km_istate;

km_istate *km_istate_new(void);
void km_istate_free(km_pool *pool, km_istate *s);
int16_t km_istate_feature(const km_istate *s, const char *name);

typedef struct km_txn_rec {  /* a buffered record inside a transaction */
    int64_t offset;
    int32_t epoch;
    uint32_t len;
    uint8_t *frame;          /* metadata record frame, as in the log */
} km_txn_rec;

struct km_image {
    km_pool pool;
    km_istate *st;
    km_istate *staging;      /* snapshot being read; replaces st at its footer */
    char *cluster_id;
    int64_t offset;
    int32_t epoch;
    int32_t raft_leader, raft_leader_epoch;
    bool in_txn;
    km_txn_rec *txn;
    size_t n_txn, cap_txn, txn_bytes;
    bool failed;
    km_err failure;
};

/* Keys: */
void km_config_key(int8_t type, const char *name, km_buf *out);
void km_scram_key(int8_t mech, const char *user, km_buf *out);

/* ---- delta tracking (image_delta.c) ------------------------------------------------------ */

/* Records that topic `t` (id/name) existed with old_n partitions (had) at
 * the delta's start, if first seen, and now has new_n (has). */
int km_delta_note_topic(km_delta *d, km_uuid id, const char *name, bool had, int32_t old_n, bool has,
                        int32_t new_n);
/* Records a partition going from old (NULL: absent) to new (NULL: absent). */
int km_delta_note_part(km_delta *d, km_pool *pool, km_uuid tid, const char *tname, int32_t pid,
                       const km_part *old, const km_part *new_);
int km_delta_note_obj(km_delta *d, km_obj_kind kind, const void *key, size_t klen, int32_t id,
                      const void *old, const void *new_);
int km_delta_note_feature(km_delta *d, const char *name, int16_t old, int16_t new_);
void km_delta_note_pids(km_delta *d, km_producer_ids old, km_producer_ids new_);
void km_delta_note_zk(km_delta *d, int old, int new_);
void km_delta_note_leader(km_delta *d, int32_t leader, int32_t epoch);
void km_delta_note_pos(km_delta *d, int64_t offset, int32_t epoch);
void km_delta_mark_snapshot(km_delta *d);

/* Adds the difference between states a (may be empty) and b to d. */
int km_im_diff(km_pool *pool, const km_istate *a, const km_istate *b, km_delta *d, km_err *err);

/* ---- replay (image_apply.c) -------------------------------------------------------------- */

typedef struct km_apply_ctx {
    km_image *img;
    km_istate *st;           /* where records go (st or staging) */
    km_delta *delta;         /* NULL: not tracked */
    int64_t offset;
    int16_t type, version;
    const km_message_desc *desc;  /* the record's descriptor when known (saves a lookup) */
    const char *where;
    km_err *err;
} km_apply_ctx;

/* Fails with "<where>: offset N: <TYPE> v<V>: <reason>". */
int km_apply_fail(const km_apply_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int km_apply_msg(km_apply_ctx *c, const void *msg);
int km_apply_topic_record(km_apply_ctx *c, const void *msg);
int km_apply_partition_record(km_apply_ctx *c, const void *msg);
int km_apply_partition_change(km_apply_ctx *c, const void *msg);
int km_apply_remove_topic(km_apply_ctx *c, const void *msg);

#endif
