/* km_image.h - the KRaft metadata image and its deltas: public face of protocol/image*.
 *
 * The image is what Kafka 3.9's MetadataImage holds, built by replaying
 * `__cluster_metadata` records exactly as MetadataDelta does:
 *   features (metadata.version and the others), ZkMigrationState, brokers
 *   and controllers (registrations), topics and their partitions, configs
 *   (by resource type + name), client quotas, SCRAM credentials, the
 *   producer-id block, ACLs, delegation tokens, the cluster id (set by the
 *   caller: Kafka keeps it in meta.properties, not in the log), the raft
 *   leader seen in LeaderChange control records, and the offset/epoch of the
 *   last record applied.
 *
 * Semantics that matter to consumers (all as in Kafka 3.9):
 *   - PartitionChangeRecord: a field at its default means "no change"
 *     (Leader -2, LeaderRecoveryState -1, null arrays).  The leader epoch is
 *     bumped by one iff Leader != -2 (PartitionRegistration.merge; the
 *     controller writes Leader = current leader to force a bump on ISR
 *     shrink / reassignment).  The partition epoch is bumped on every record.
 *     Directories (3.7.1+, KAFKA-16583): the record's when it has them, else
 *     the current ones; empty or all MIGRATING -> MIGRATING per new replica.
 *   - Fence/Unfence/BrokerRegistrationChange must name a registered broker
 *     at its current epoch; UnregisterBroker drops it unconditionally.
 *   - RemoveTopicRecord also deletes the topic's configs.
 *   - FeatureLevelRecord with level 0 removes a feature (not metadata.version).
 *   - Begin/EndTransactionRecord: records in between are buffered and applied
 *     at End; AbortTransaction drops them.  The image offset does not move
 *     past a Begin until the End/Abort.
 *   - A snapshot (records from a .checkpoint, SnapshotHeader..Footer)
 *     replaces the image; its delta is the difference between old and new.
 *   - An unknown record type or version, or a record that Kafka would reject
 *     on replay (unknown topic/partition/broker, epoch mismatch, bad enum
 *     value), is an error "<file>: offset N: <TYPE> v<V>: <reason>".  After a
 *     failed apply the image is poisoned: every later apply fails with the
 *     same error (it may hold half a batch; reload it).
 *
 * Memory: partitions are flat arrays per topic of a 48-byte struct; replica,
 * ISR, ELR and directory lists are interned (one refcounted copy of each
 * distinct list), topics are found by id and by name through hash tables.
 * Brokers, controllers, config resources, quotas, credentials, ACLs and
 * tokens are immutable refcounted objects replaced on change, so a delta can
 * keep the "before" state alive without copying.
 *
 * Threads: none.  An image and the deltas taken from it are used from one
 * thread.  No globals.
 */
#ifndef KM_IMAGE_H
#define KM_IMAGE_H

#include "km_codec.h"
#include "km_metalog.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct json_t;

/* ---- constants (Kafka's values) ----------------------------------------------- */

#define KM_NO_LEADER (-1)              /* LeaderConstants.NO_LEADER */
#define KM_NO_LEADER_CHANGE (-2)       /* LeaderConstants.NO_LEADER_CHANGE */
#define KM_LRS_RECOVERED 0             /* LeaderRecoveryState */
#define KM_LRS_RECOVERING 1
#define KM_MV_3_0_IV1 1                /* MetadataVersion.MINIMUM_KRAFT_VERSION */
#define KM_MV_3_9_IV0 21               /* metadata.version feature level of 3.9-IV0 */

/* Limits that keep hostile input from exhausting memory (errors name them). */
#define KM_IMAGE_MAX_PARTITION_ID 10000000        /* highest partition id accepted in a topic */
#define KM_IMAGE_TXN_MAX_BYTES (256u * 1024 * 1024) /* records buffered in one open transaction */

typedef enum km_zk_migration_state {   /* ZkMigrationState */
    KM_ZKM_NONE = 0, KM_ZKM_MIGRATION = 1, KM_ZKM_PRE_MIGRATION = 2,
    KM_ZKM_POST_MIGRATION = 3, KM_ZKM_ZK = 4
} km_zk_migration_state;
const char *km_zk_migration_state_name(int state);   /* "NONE", ... or NULL */

typedef enum km_config_resource {     /* ConfigResource.Type ids as ConfigRecord stores them */
    KM_CFG_TOPIC = 2, KM_CFG_BROKER = 4, KM_CFG_BROKER_LOGGER = 8, KM_CFG_CLIENT_METRICS = 16,
    KM_CFG_GROUP = 32
} km_config_resource;
const char *km_config_resource_name(int type);        /* "TOPIC", ... or NULL */

/* MetadataRecordType name of a record api key ("TOPIC_RECORD") or NULL. */
const char *km_metadata_record_type_name(int16_t type);

/* DirectoryId.MIGRATING (all zeros) / UNASSIGNED (0...1) / LOST (0...2). */
extern const km_uuid KM_DIR_UNASSIGNED, KM_DIR_LOST, KM_DIR_MIGRATING;

/* ---- read-only views of image entities ------------------------------------------ */

/* Every pointer in these structs belongs to the image (or to a delta, for
 * "before" states) and stays valid while that owner lives and, for image
 * entities, until the next apply that changes the entity. */

typedef struct km_i32_list { const int32_t *v; int32_t n; } km_i32_list;
typedef struct km_uuid_list { const km_uuid *v; int32_t n; } km_uuid_list;

typedef struct km_partition {          /* PartitionRegistration */
    int32_t id;
    int32_t leader;
    int32_t leader_epoch;
    int32_t partition_epoch;
    int8_t leader_recovery_state;      /* KM_LRS_* */
    km_i32_list replicas, isr, removing_replicas, adding_replicas, elr, last_known_elr;
    km_uuid_list directories;          /* same length as replicas */
} km_partition;

typedef struct km_topic km_topic;      /* opaque; see km_topic_* */
km_uuid km_topic_id(const km_topic *t);
const char *km_topic_name(const km_topic *t);
/* One more than the highest partition id (Kafka's partition ids are 0..n-1). */
int32_t km_topic_partition_count(const km_topic *t);
/* Fills *out with partition `id`; false if the topic has no such partition. */
bool km_topic_partition(const km_topic *t, int32_t id, km_partition *out);

typedef struct km_endpoint {
    const char *name;                  /* listener name */
    const char *host;
    uint16_t port;
    int16_t security_protocol;         /* SecurityProtocol id: 0 PLAINTEXT, 1 SSL, 2 SASL_PLAINTEXT, 3 SASL_SSL */
} km_endpoint;

typedef struct km_feature_range {
    const char *name;
    int16_t min_version, max_version;
} km_feature_range;

typedef struct km_broker {             /* BrokerRegistration */
    int32_t id;
    km_uuid incarnation_id;
    int64_t epoch;
    bool fenced;
    bool in_controlled_shutdown;
    bool is_migrating_zk_broker;
    const char *rack;                  /* NULL: none */
    int32_t n_endpoints;
    const km_endpoint *endpoints;
    int32_t n_features;
    const km_feature_range *features;
    km_uuid_list log_dirs;
} km_broker;

typedef struct km_controller {         /* ControllerRegistration */
    int32_t id;
    km_uuid incarnation_id;
    bool zk_migration_ready;
    int32_t n_endpoints;
    const km_endpoint *endpoints;
    int32_t n_features;
    const km_feature_range *features;
} km_controller;

typedef struct km_config_kv { const char *name, *value; } km_config_kv;
typedef struct km_config_res {         /* all configs of one resource, sorted by name */
    int8_t type;                       /* km_config_resource */
    const char *name;                  /* "" for the cluster default broker resource */
    int32_t n;
    const km_config_kv *kv;
} km_config_res;
/* The value of `name` in res, or NULL. */
const char *km_config_get(const km_config_res *res, const char *name);

typedef struct km_quota_entity_part { const char *type, *name; } km_quota_entity_part; /* name NULL: default */
typedef struct km_quota_kv { const char *key; double value; } km_quota_kv;
typedef struct km_client_quota {       /* one entity (user, client-id, ip, combination) */
    int32_t n_parts;                   /* sorted by type */
    const km_quota_entity_part *parts;
    int32_t n;                         /* sorted by key */
    const km_quota_kv *kv;
} km_client_quota;

typedef struct km_scram {              /* UserScramCredentialRecord */
    const char *user;
    int8_t mechanism;                  /* 1 SCRAM-SHA-256, 2 SCRAM-SHA-512 */
    km_bytes salt, stored_key, server_key;
    int32_t iterations;
} km_scram;

typedef struct km_acl {                /* StandardAcl, keyed by its record id */
    km_uuid id;
    int8_t resource_type;              /* AclResourceType id (2 TOPIC, 3 GROUP, 4 CLUSTER, ...) */
    const char *resource_name;
    int8_t pattern_type;               /* 3 LITERAL, 4 PREFIXED */
    const char *principal;
    const char *host;
    int8_t operation;                  /* AclOperation id */
    int8_t permission_type;            /* 2 DENY, 3 ALLOW */
} km_acl;

typedef struct km_token {              /* DelegationTokenRecord */
    const char *token_id;
    const char *owner, *requester;
    int32_t n_renewers;
    const char *const *renewers;
    int64_t issue_timestamp, max_timestamp, expiration_timestamp;
} km_token;

typedef struct km_producer_ids {       /* ProducerIdsImage + who took the block */
    int32_t broker_id;                 /* -1 when unknown (never taken, or loaded from a snapshot,
                                        * which Kafka writes with broker -1) */
    int64_t broker_epoch;
    int64_t next_producer_id;          /* -1 when none */
} km_producer_ids;

/* ---- the image ------------------------------------------------------------------- */

typedef struct km_image km_image;

km_image *km_image_new(void);
void km_image_free(km_image *img);     /* NULL is fine; free its deltas first */

/* A new image holding a copy of img's brokers, topics and partitions, offset, epoch, raft leader and cluster
 * id (no configs, features or other entities): its own memory, so that another thread may read it while img
 * moves on (the daemon's continuous verifier).  NULL + err on out of memory. */
km_image *km_image_copy_cluster(const km_image *img, km_err *err);

/* Cluster id: not in the log (Kafka keeps it in meta.properties).  NULL if unset. */
int km_image_set_cluster_id(km_image *img, const char *cluster_id, km_err *err);
const char *km_image_cluster_id(const km_image *img);
/* Reads `cluster.id` from <dir>/meta.properties or <dir>/../meta.properties
 * (the log dir holding __cluster_metadata-0); 1 found and set, 0 no file, -1 error. */
int km_image_load_meta_properties(km_image *img, const char *dir, km_err *err);

int64_t km_image_offset(const km_image *img);     /* offset of the last applied record, -1: none */
int32_t km_image_epoch(const km_image *img);      /* batch leader epoch of that record, -1: none */
int32_t km_image_raft_leader(const km_image *img);/* leaderId of the last LeaderChange, -1: unknown */
int32_t km_image_raft_leader_epoch(const km_image *img);
bool km_image_in_transaction(const km_image *img);
/* metadata.version level; 3.0-IV1 (level 1) when no FeatureLevelRecord set it
 * (logs of Kafka 3.0-3.2), as Kafka's FeaturesImage reads it.  Levels newer
 * than 3.9 knows (4.x logs) are accepted as they are. */
int16_t km_image_metadata_version(const km_image *img);
/* Finalized level of any feature as recorded (metadata.version too), 0 if absent. */
int16_t km_image_feature(const km_image *img, const char *name);
int km_image_zk_migration_state(const km_image *img);  /* KM_ZKM_*; KM_ZKM_NONE until a record sets it */
km_producer_ids km_image_producer_ids(const km_image *img);

size_t km_image_topic_count(const km_image *img);
size_t km_image_partition_count(const km_image *img);  /* over all topics */
size_t km_image_broker_count(const km_image *img);
const km_topic *km_image_topic_by_id(const km_image *img, km_uuid id);
const km_topic *km_image_topic_by_name(const km_image *img, const char *name);
const km_broker *km_image_broker(const km_image *img, int32_t id);
const km_controller *km_image_controller(const km_image *img, int32_t id);
const km_config_res *km_image_config(const km_image *img, int8_t type, const char *name);
const km_scram *km_image_scram(const km_image *img, const char *user, int8_t mechanism);
const km_acl *km_image_acl(const km_image *img, km_uuid id);
const km_token *km_image_token(const km_image *img, const char *token_id);

/* Full iteration.  `it` starts at 0 and is advanced by each call; each call
 * returns the next entity or NULL at the end.  Order is unspecified except
 * brokers/controllers (ascending id) and features (by name).
 *     size_t it = 0; const km_topic *t;
 *     while ((t = km_image_next_topic(img, &it))) ...
 * Do not apply records while iterating. */
const km_topic *km_image_next_topic(const km_image *img, size_t *it);
const km_broker *km_image_next_broker(const km_image *img, size_t *it);
const km_controller *km_image_next_controller(const km_image *img, size_t *it);
const km_config_res *km_image_next_config(const km_image *img, size_t *it);
const km_client_quota *km_image_next_quota(const km_image *img, size_t *it);
const km_scram *km_image_next_scram(const km_image *img, size_t *it);
const km_acl *km_image_next_acl(const km_image *img, size_t *it);
const km_token *km_image_next_token(const km_image *img, size_t *it);
/* Features: returns false at the end. */
bool km_image_next_feature(const km_image *img, size_t *it, const char **name, int16_t *level);

/* ---- deltas ---------------------------------------------------------------------- */

/* What changed between two points in an image's history: net changes, i.e. an
 * entity touched several times appears once with its state before the first
 * and after the last change; something created and deleted within the delta
 * does not appear.  A delta holds references to the "before" states (and the
 * "after" states), so it stays valid and unchanged while the image moves on.
 * Free every delta before the image it came from. */
typedef struct km_delta km_delta;

km_delta *km_delta_new(void);
void km_delta_free(km_delta *d);       /* NULL is fine */
void km_delta_clear(km_delta *d);      /* empty it for reuse */
bool km_delta_empty(const km_delta *d);
/* Offset/epoch of the image after the last record in the delta (-1 if none). */
int64_t km_delta_offset(const km_delta *d);
int32_t km_delta_epoch(const km_delta *d);
bool km_delta_is_snapshot(const km_delta *d); /* a snapshot replaced the image */

typedef enum km_change_op { KM_CREATED = 1, KM_DELETED = 2, KM_CHANGED = 3 } km_change_op;

typedef struct km_topic_change {
    km_change_op op;                   /* CHANGED: partitions were added */
    km_uuid id;
    const char *name;                  /* owned by the delta */
    int32_t old_partitions, new_partitions;  /* counts (0 when absent) */
} km_topic_change;

/* Bits of km_partition_change.what: which fields differ between old and new. */
enum {
    KM_PC_LEADER = 1u << 0, KM_PC_LEADER_EPOCH = 1u << 1, KM_PC_ISR = 1u << 2,
    KM_PC_REPLICAS = 1u << 3, KM_PC_ADDING = 1u << 4, KM_PC_REMOVING = 1u << 5,
    KM_PC_LRS = 1u << 6, KM_PC_ELR = 1u << 7, KM_PC_LAST_KNOWN_ELR = 1u << 8,
    KM_PC_DIRECTORIES = 1u << 9, KM_PC_PARTITION_EPOCH = 1u << 10
};

typedef struct km_partition_change {
    km_uuid topic_id;
    const char *topic_name;            /* owned by the delta */
    int32_t partition;
    bool has_old, has_new;             /* !has_old: created; !has_new: its topic was deleted */
    km_partition old, new;             /* valid when has_old / has_new; owned by the delta */
    uint32_t what;                     /* KM_PC_* bits (all set on create/delete) */
} km_partition_change;

/* Bits of km_broker_change.what. */
enum {
    KM_BC_REGISTERED = 1u << 0,        /* no registration before */
    KM_BC_UNREGISTERED = 1u << 1,      /* none after */
    KM_BC_REREGISTERED = 1u << 2,      /* a new RegisterBrokerRecord (epoch/incarnation) */
    KM_BC_FENCED = 1u << 3, KM_BC_UNFENCED = 1u << 4,
    KM_BC_SHUTDOWN_STARTED = 1u << 5,  /* in_controlled_shutdown false -> true */
    KM_BC_SHUTDOWN_ENDED = 1u << 6,
    KM_BC_ENDPOINTS = 1u << 7,         /* endpoints or rack differ */
    KM_BC_LOG_DIRS = 1u << 8,
    KM_BC_OTHER = 1u << 9              /* features / migrating flag */
};

typedef struct km_broker_change {
    int32_t id;
    const km_broker *old, *new;        /* NULL when absent; owned by the delta */
    uint32_t what;                     /* KM_BC_* */
} km_broker_change;

typedef struct km_controller_change { int32_t id; const km_controller *old, *new; } km_controller_change;
typedef struct km_config_change {      /* a resource whose configs changed */
    int8_t type;
    const char *name;
    const km_config_res *old, *new;    /* NULL when the resource had / has no config */
} km_config_change;
typedef struct km_quota_change { const km_client_quota *old, *new; } km_quota_change;
typedef struct km_scram_change { const km_scram *old, *new; } km_scram_change;
typedef struct km_acl_change { const km_acl *old, *new; } km_acl_change;       /* ACLs are added or removed */
typedef struct km_token_change { const km_token *old, *new; } km_token_change;
typedef struct km_feature_change { const char *name; int16_t old_level, new_level; } km_feature_change;

/* Iteration over a delta, same cursor convention as the image (`it` from 0);
 * each returns false at the end.  Order: the order in which entities were
 * first touched.  The structs filled point into the delta (valid until it is
 * cleared or freed). */
bool km_delta_next_topic(const km_delta *d, size_t *it, km_topic_change *out);
bool km_delta_next_partition(const km_delta *d, size_t *it, km_partition_change *out);
bool km_delta_next_broker(const km_delta *d, size_t *it, km_broker_change *out);
bool km_delta_next_controller(const km_delta *d, size_t *it, km_controller_change *out);
bool km_delta_next_config(const km_delta *d, size_t *it, km_config_change *out);
bool km_delta_next_quota(const km_delta *d, size_t *it, km_quota_change *out);
bool km_delta_next_scram(const km_delta *d, size_t *it, km_scram_change *out);
bool km_delta_next_acl(const km_delta *d, size_t *it, km_acl_change *out);
bool km_delta_next_token(const km_delta *d, size_t *it, km_token_change *out);
bool km_delta_next_feature(const km_delta *d, size_t *it, km_feature_change *out);
/* Producer ids / ZK migration state: true if they changed (old and new given). */
bool km_delta_producer_ids(const km_delta *d, km_producer_ids *old, km_producer_ids *new_);
bool km_delta_zk_migration_state(const km_delta *d, int *old, int *new_);
/* Raft leader (LeaderChange control record) moved. */
bool km_delta_raft_leader(const km_delta *d, int32_t *leader, int32_t *epoch);

/* ---- applying records --------------------------------------------------------------- */

/* Applies one record from km_metalog_next() (metadata or control).  Changes
 * are accumulated into `delta` (may be NULL: no tracking).  Snapshot records
 * are staged and replace the image at the SnapshotFooter; transaction records
 * are staged until End/Abort.  The caller applies every record of a batch
 * before looking at the image (km_image_follow does this for you).  -1 and
 * err on the errors listed at the top; the image is then poisoned. */
int km_image_apply_record(km_image *img, const km_metalog_record *rec, km_delta *delta, km_err *err);

/* Drops a snapshot whose records were being staged (its SnapshotHeader was applied, its
 * footer never will be: the download was refused or abandoned); the image stays as it was. */
void km_image_abort_snapshot(km_image *img);

/* Applies one decoded metadata record (type = KM_MDR_*, msg = its struct)
 * at `offset`/`epoch`, e.g. one built in memory.  `where` names the source in
 * errors (a file name; may be NULL). */
int km_image_apply(km_image *img, int16_t type, int16_t version, const void *msg, int64_t offset,
                   int32_t epoch, const char *where, km_delta *delta, km_err *err);

/* Applies every record of the file or `__cluster_metadata-0` directory at
 * `path` (km_metalog_open_dir for directories, open_file otherwise) to img.
 * Returns the number of records read, or -1. */
int64_t km_image_load(km_image *img, const char *path, km_delta *delta, km_err *err);

/* The difference between an empty image and img as a delta: every entity
 * appears as created.  Lets a consumer run its "full sync" through the same
 * code as its incremental path. */
int km_image_full_delta(const km_image *img, km_delta *delta, km_err *err);

/* ---- following a live log ------------------------------------------------------------- */

typedef struct km_image_follow km_image_follow;

/* Opens `path` (dir or file) with km_metalog follow mode, applying into img
 * (which must outlive the follower). */
km_image_follow *km_image_follow_open(km_image *img, const char *path, const km_metalog_opts *opts,
                                      km_err *err);
/* Reads what is available.  Each time a batch is complete it is applied and
 * its changes are in *delta: returns 1.  Call again until 0 (nothing more
 * for now: wait on km_image_follow_fd()).  The delta is cleared on entry
 * after a call that returned 1; a batch that leaves a transaction or a
 * snapshot open adds to it and is delivered with the batch that closes it.
 * -1: error (the follower and the image are failed). */
int km_image_follow_next(km_image_follow *f, km_delta *delta, km_err *err);
int km_image_follow_fd(const km_image_follow *f);   /* km_metalog_fd() */
void km_image_follow_close(km_image_follow *f);

/* ---- JSON ------------------------------------------------------------------------------- */

/* The image as one JSON object, keys in this order: clusterId, offset,
 * epoch, raftLeader {id, epoch}, metadataVersion, features {name: level},
 * zkMigrationState (name), producerIds, topicCount, partitionCount, brokers,
 * controllers, configs, clientQuotas, scramCredentials (no salts or keys),
 * acls, delegationTokens, topics (by name, each with its partitions).
 * Record field names as Kafka's JSON spells them.  New reference, or NULL. */
struct json_t *km_image_to_json(const km_image *img, km_err *err);
/* A partition as Kafka's PartitionRecord JSON names its fields. */
struct json_t *km_partition_to_json(const km_partition *p);
struct json_t *km_broker_to_json(const km_broker *b);

/* ---- synthetic cluster generator (`kmproxy metadata gen`) ------------------------------- */

typedef struct km_gen_opts {
    int32_t brokers;                   /* >= 1; ids 1..brokers */
    int32_t topics;                    /* >= 0; names "topic-<n>" */
    int32_t partitions;                /* per topic, >= 1 */
    int32_t replication;               /* <= brokers; 0: min(3, brokers) */
    int64_t leader_changes;            /* PartitionChangeRecords after creation */
    uint64_t seed;                     /* deterministic output for a seed */
    bool zk_migration;                 /* brokers are migrating ZK brokers; ZkMigrationState MIGRATION */
    int32_t controller_id;             /* raft leader stamped as epoch owner; 0: 3000 */
    int32_t records_per_batch;         /* 0: 1000 */
    uint64_t segment_bytes;            /* 0: metalog default */
    int64_t timestamp;                 /* batch timestamps in ms; 0: a fixed constant (reproducible) */
    const char *broker_host;           /* every broker's PLAINTEXT host; NULL: "broker<id>.kmproxy.test" */
    const uint16_t *broker_ports;      /* broker id i listens on broker_ports[i - 1]; NULL: 9092 each */
} km_gen_opts;

/* Writes a valid `__cluster_metadata-0` log of a synthetic cluster into dir
 * (created; must hold no segments): RegisterBroker (IsMigratingZkBroker
 * with zk_migration), UnfenceBroker, FeatureLevel metadata.version 3.9-IV0,
 * Topic + Partition records, topic/broker configs, ACLs, a client quota, a
 * SCRAM credential, a producer-id block, ZkMigrationState (with
 * zk_migration), then leader_changes PartitionChangeRecords.  If `img` is
 * not NULL the records are applied to it as they are written, so a caller
 * has the expected image.  Returns the number of records written, or -1. */
int64_t km_gen_write(const char *dir, const km_gen_opts *opts, km_image *img, km_err *err);

#endif
