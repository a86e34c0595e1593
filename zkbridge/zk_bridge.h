/* zk_bridge.h - internals of the image -> ZooKeeper layer (rendering, planning, walking). */
#ifndef KM_ZK_BRIDGE_H
#define KM_ZK_BRIDGE_H

#include "km_image.h"
#include "zk_writer.h"

#include <stdarg.h>

typedef struct zstr {
    char *p;
    size_t len, cap;
    bool oom;
} zstr;
void zs_init(zstr *s);
void zs_free(zstr *s);
void zs_add(zstr *s, const char *p);
/* The string built (the caller frees it; "" when nothing was added), or NULL when building ran out
 * of memory (freed). s is spent either way. */
char *zs_take(zstr *s);
void zs_addn(zstr *s, const char *p, size_t n);
void zs_fmt(zstr *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void zs_json_str(zstr *s, const char *v);
void zs_base64(zstr *s, const uint8_t *p, int32_t n);
void zs_sanitized(zstr *s, const char *v);

/* zk_render.c: Kafka 3.9 formats */
void zk_uuid_b64url(km_uuid id, char out[23]);
void zk_render_topic(zstr *s, const km_topic *t);
void zk_render_state(zstr *s, const km_partition *p, int32_t controller_epoch);
/* pw encodes password-type values as Kafka stores them (NULL: as they are); s->oom when it fails. */
void zk_render_config_notify(zstr *s, const char *entity_path);
void zk_render_config_kv(zstr *s, const km_config_kv *kv, int32_t n, const km_zk_pwenc *pw);
void zk_java_double(char *out, size_t cap, double v);
void zk_quota_value(char *out, size_t cap, const char *key, double v);
void zk_scram_string(zstr *s, const km_scram *c);
void zk_render_producer_ids(zstr *s, int64_t next);
void zk_render_token(zstr *s, const km_token *t);
const char *zk_acl_resource_name(int8_t t);
const char *zk_acl_resource_enum(int8_t t);
const char *zk_acl_operation_name(int8_t op);
const char *zk_acl_permission_name(int8_t p);
void zk_render_acl_entry(zstr *s, const km_acl *a);

/* ---- the desired tree: znodes keyed by path ---- */
typedef enum zk_nkind {
    ZN_DIR,       /* structural parent: must exist, data never compared, never deleted */
    ZN_DATA,      /* compared semantically (JSON) */
    ZN_STATE,     /* partition state: compared ignoring controller_epoch */
    ZN_ACLS,      /* ACL list: compared as a set */
    ZN_RAW,       /* compared byte for byte (/controller_epoch-like plain values) */
    ZN_CONFIG,    /* a config entity: compared as JSON with password values decoded (fresh salts and IVs) */
    ZN_CONFIG_PARENT, /* a user's config znode holding only per-client quotas below it: its config must be
                       * empty; null data (created as a parent) is as good; created with null data */
} zk_nkind;

/* ConfigEntityZNode.encode of no properties. */
#define ZK_EMPTY_CONFIG "{\"version\":1,\"config\":{}}"

/* What kind of change notification a write to this znode needs (written in the same multi). */
typedef enum zk_notify {
    NOTIFY_NONE, NOTIFY_CONFIG, NOTIFY_ACL_LITERAL, NOTIFY_ACL_EXTENDED, NOTIFY_TOKEN,
} zk_notify;

typedef struct zk_node {
    char *path;
    char *data;          /* NULL for ZN_DIR (created with null data, like Kafka's createRecursive) */
    zk_nkind kind;
    zk_notify notify;
    char *notify_data;   /* the notification's payload */
    int version;         /* zkVersion, for nodes read from ZooKeeper */
} zk_node;

typedef struct zk_tree {
    zk_node *v;
    size_t n, cap;
    bool oom;
} zk_tree;

void zk_tree_free(zk_tree *t);
/* Takes ownership of data/notify_data (malloc'd); path is copied. */
void zk_tree_add(zk_tree *t, const char *path, char *data, zk_nkind kind, zk_notify notify, char *notify_data);
void zk_tree_sort(zk_tree *t);
const zk_node *zk_tree_find(const zk_tree *t, const char *path); /* after sort */

/* zk_desired.c: the whole image as znodes (sorted); controller_epoch goes into partition states. */
int zk_render_image(const km_image *img, int32_t controller_epoch, const km_zk_pwenc *pw, zk_tree *out,
                    km_err *err);
/* Its parts (unsorted), for the sliced full sync: the type directories, every broker config,
 * tokens and the producer-id block. */
void zk_render_roots(zk_tree *out);
/* The payload of a config change notification for entity_path ("topics/foo"), malloc'd or NULL. */
char *zk_config_notify(const char *entity_path);
void zk_render_broker_configs(const km_image *img, const km_zk_pwenc *pw, zk_tree *out);
void zk_render_tokens_and_pids(const km_image *img, zk_tree *out);
/* The znodes of one entity, for deltas. `paths` receives every path the entity may own
 * (present or not), `out` the ones that exist in the image now. */
void zk_render_topic_nodes(const km_image *img, const km_topic *t, int32_t controller_epoch, const km_zk_pwenc *pw,
                           zk_tree *out);
void zk_topic_paths(const char *name, int32_t partitions, zk_tree *paths);
void zk_render_broker_config(const km_config_res *res, const km_zk_pwenc *pw, zk_tree *out);
/* /config/topics/<name>, which exists as long as the topic does, configs or not. */
void zk_render_topic_config(const km_image *img, const char *name, const km_zk_pwenc *pw, zk_tree *out);
void zk_render_token_node(const km_token *tok, zk_tree *out);
/* zk_quota_acl.c: quotas+SCRAM (per entity) and ACLs (per pattern). A non-NULL filter limits
 * rendering to one entity path / one ACL pattern path (for deltas). */
void zk_render_quotas(const km_image *img, const char *only_path, zk_tree *out);
void zk_render_acls(const km_image *img, const char *only_path, zk_tree *out);
/* The znode path of a quota entity / an ACL pattern (malloc'd), NULL when not mirrored. */
char *zk_quota_path(const km_client_quota *q);
char *zk_scram_user_path(const char *user);
char *zk_acl_path(const km_acl *a);

/* zk_walk.c: reads the mirrored namespace into a tree (data + zkVersion), in no particular order. */
typedef struct zk_walk zk_walk;
struct zk_walk {
    zhandle_t *zh;
    zk_tree *out;
    struct walk_req *queue;
    size_t qn, qcap;
    int inflight;
    int rc;
    char failed_path[512];  /* where rc (the first failure) came from; "" when no znode names it */
    bool finished;
    void (*done)(zk_walk *wk, int rc, void *ctx);
    void *ctx;
};
int zk_walk_start(zk_walk *wk, zhandle_t *zh, zk_tree *out, void (*done)(zk_walk *, int, void *), void *ctx);
void zk_walk_free(zk_walk *wk);

/* zk_acl.c: zk diff's check of the ACLs of what was read (with zookeeper.set.acl=true): one
 * "! path: ACL ...; Kafka writes ..." line into out per znode not shaped as ZkData.defaultAcls. */
typedef struct zk_acl_diff zk_acl_diff;
struct zk_acl_diff {
    zhandle_t *zh;
    char **paths;
    size_t n, next, differ;
    int inflight, rc;
    bool finished;
    zstr *out;
    void (*done)(zk_acl_diff *d, void *ctx);
    void *ctx;
};
void zk_acl_diff_start(zk_acl_diff *d, zhandle_t *zh, const zk_tree *read, zstr *out,
                       void (*done)(zk_acl_diff *, void *), void *ctx);
void zk_acl_diff_free(zk_acl_diff *d);

/* zk_reconcile.c */
typedef struct zk_ops {
    km_zop *v;          /* paths/data owned */
    size_t n, cap;
    bool oom;
    size_t created, updated, deleted;
    zstr *diff;         /* when set: one "+ path" / "~ path" / "- path" line per difference */
} zk_ops;
void zk_ops_free(zk_ops *o);
/* known: our model of ZooKeeper (path -> data); cands: every path that may need deleting (sorted);
 * want: what should exist (sorted). Appends ops and updates known to the outcome. */
void zk_reconcile(zk_vcache *known, const zk_tree *cands, const zk_tree *want, const km_zk_pwenc *pw,
                  zk_ops *o);
/* Its parts, for a pass over the whole image in slices (zk_plan.c): the writes of one sorted slice,
 * marking each wanted path's entry in known with `pass`; whether a znode is ours to delete; the
 * delete of one (with its change notification). */
void zk_reconcile_writes(zk_vcache *known, const zk_tree *want, int pass, const km_zk_pwenc *pw, zk_ops *o);
bool zk_deletable(const char *path);
void zk_reconcile_delete(zk_vcache *known, const char *path, zk_ops *o);
/* A client quota or SCRAM znode Kafka keeps when its entity goes: emptied (an empty config plus a
 * change notification), never deleted (zk_reconcile.c, kafka_keeps). */
bool zk_emptied_not_deleted(const char *path);
void zk_reconcile_empty(zk_vcache *known, const char *path, int mark, zk_ops *o);
int zk_path_depth(const char *path);

/* zk_plan.c: a pass over the whole image (the full sync's plan, or a catch-up from our model),
 * a slice at a time, so that writing starts at once and the loop never stalls for long. */
typedef enum zk_plan_stage {
    PLAN_LOAD, PLAN_ROOTS, PLAN_TOPICS, PLAN_BROKER_CONFIGS, PLAN_QUOTAS, PLAN_ACLS, PLAN_TOKENS, PLAN_SCAN,
    PLAN_DELETES, PLAN_DONE,
} zk_plan_stage;
typedef struct zk_plan {
    const km_image *img;
    int32_t controller_epoch;
    const km_zk_pwenc *pw;
    zk_vcache *known;     /* our model of ZooKeeper; its vals mark the pass that wanted each path */
    zk_vcache *versions;  /* the writer's zkVersion cache, filled by PLAN_LOAD */
    int pass;
    zk_tree cands;        /* deletion candidates, any order (owned) */
    zk_plan_stage stage;
    size_t it;            /* the image iterator (topics), or the position in cands / doomed */
    const char **doomed;  /* the candidates found unwanted, deepest first once the scan is done */
    size_t n_doomed, cap_doomed;
    bool image_moved;     /* set by the owner: the image changed while the pass rendered it */
} zk_plan;
/* Takes over *cands (left empty). With `versions`, cands is what was just read from ZooKeeper
 * (data and zkVersions), loaded into known and versions first; without, the pass is a catch-up
 * against known as it stands. pass must differ from every mark already in known. */
void zk_plan_start(zk_plan *p, const km_image *img, int32_t controller_epoch, const km_zk_pwenc *pw,
                   zk_vcache *known, zk_vcache *versions, int pass, zk_tree *cands);
/* Appends the next slice's ops to o (o->oom on failure); true once the pass is complete. */
bool zk_plan_step(zk_plan *p, zk_ops *o);
void zk_plan_free(zk_plan *p);

/* zk_delta.c: the znodes a delta touches: cands = every path it may own, want = what exists now. */
void zk_delta_render(const km_image *img, const km_delta *d, int32_t controller_epoch, const km_zk_pwenc *pw,
                     zk_tree *want, zk_tree *cands);

/* zk_guard.c */
/* The checks Kafka 3.9's KRaftMigrationDriver makes before a migration may start (and more): 0 when
 * img may take over what ZooKeeper holds; -1 with the reason in why (one line), *forceable telling
 * whether g->force may override it. Overridden refusals are returned too (0, why set, for a warning). */
/* The image is older than what /migration records (OffsetAndEpoch order). */
bool km_zk_image_behind(const km_image *img, const km_zk_found *f);
int km_zk_guard_check(const km_image *img, const km_zk_found *f, const km_zk_guard *g, bool *forceable,
                      char *why, size_t cap);
/* ZooKeeper holds a cluster ZK-mode brokers run or ran: a /cluster/id, or registered brokers. */
bool km_zk_holds_cluster(const km_zk_found *f);
/* The first sync of a cluster ZK-mode brokers wrote: ZooKeeper holds a cluster and no KRaft
 * controller has recorded an offset in /migration (absent, or kraft_metadata_offset < 0). */
bool km_zk_first_sync(const km_zk_found *f);

/* semantic comparison of a znode's ZooKeeper data with our rendering (pw decodes ZN_CONFIG passwords) */
bool zk_same_data(zk_nkind kind, const char *have, int have_len, const char *want, const km_zk_pwenc *pw);

#endif
