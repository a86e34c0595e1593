/* km_zkbridge.h - keeps ZooKeeper equal to the KRaft image for ZK-mode brokers (KIP-866 dual write).
 *
 * Layers:
 *  - km_zkw, the writer: one ZooKeeper session (single-threaded C client driven from a libev loop),
 *    the leadership claim on /controller + /controller_epoch, the /migration protocol and a pipelined
 *    multi writer over a neutral interface: "these znode ops, then /migration := (offset, epoch)".
 *    Every multi carries check(/controller_epoch) and check(/migration) (the batch's last one sets
 *    /migration instead). It is immune to KAFKA-21062 (a lost ack makes the resend fail BADVERSION:
 *    we re-read after sync() and adopt our own write) and KAFKA-16667 (a stale follower read of
 *    /migration: we learn its zkVersion by writing it, after sync()).
 *  - km_zkb, the bridge on top (full sync, delta dual-write, rendering in Kafka 3.9's formats).
 *
 * Nothing here blocks, prints (except through the log callback), aborts or uses globals. */
#ifndef KM_ZKBRIDGE_H
#define KM_ZKBRIDGE_H

#include "km_codec.h" /* km_err */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ev_loop;

/* ---- writer states (also the exported migration-driver state) ---- */
typedef enum km_zkw_state {
    KM_ZKW_CONNECTING,  /* no session yet (or a new one after expiry) */
    KM_ZKW_CLAIMING,    /* BECOME_CONTROLLER: claim multi, then learning /migration's zkVersion */
    KM_ZKW_READY,       /* claimed: writes flow */
    KM_ZKW_RECOVERING,  /* connection lost or a check failed: verifying what landed before resending */
    KM_ZKW_FENCED,      /* another writer owns ZooKeeper now: nothing more is written, ever */
    KM_ZKW_REFUSED,     /* the claim was refused: a higher KRaft epoch holds /controller */
    KM_ZKW_CLOSED,
} km_zkw_state;
const char *km_zkw_state_name(km_zkw_state s);

typedef enum km_zkw_event {
    KM_ZKW_EV_CLAIMED,      /* leadership held and /migration known: (re)do the full sync now */
    KM_ZKW_EV_CONFIRMED,    /* a batch's /migration write succeeded: confirmed offset advanced */
    KM_ZKW_EV_DRAINED,      /* nothing pending any more */
    KM_ZKW_EV_PROGRESS,     /* multis were acknowledged: pending ops went down (room to submit more) */
    KM_ZKW_EV_RESYNC,       /* ZooKeeper's data differed from what we predicted: redo the full sync */
    KM_ZKW_EV_FENCED,       /* terminal; km_zkw_fence_reason() says why */
    KM_ZKW_EV_REFUSED,      /* terminal */
    KM_ZKW_EV_SESSION_LOST, /* the session expired (no fence_on_expiry): a new one, a re-claim and a full
                             * re-sync follow (CLAIMED); nothing can be submitted until then */
} km_zkw_event;

typedef enum km_log_level { KM_LOG_ERROR = 1, KM_LOG_WARN, KM_LOG_INFO, KM_LOG_DEBUG } km_log_level;

typedef struct km_zkw km_zkw;

/* What ZooKeeper holds when a claim begins (read after sync(), before anything is written): the
 * guard decides from it whether this image may take the cluster over. */
typedef struct km_zk_found {
    bool has_cluster_id;            /* /cluster/id (ZK-mode brokers write it at their first start) */
    char cluster_id[128];           /* its "id", or its raw data when unreadable */
    bool has_controller;            /* /controller */
    bool has_controller_epoch;      /* /controller_epoch (a ZK-mode cluster's first controller made it) */
    bool controller_ephemeral;      /* held by a live session (a ZK-mode controller's registration) */
    int32_t controller_id;          /* its brokerid, -1 when unreadable */
    int32_t controller_kraft_epoch; /* its kraftControllerEpoch; -1: a ZK-mode controller */
    bool has_migration;             /* /migration */
    int64_t migration_offset;       /* kraft_metadata_offset; -1: no KRaft controller wrote ZooKeeper yet */
    int32_t migration_epoch;        /* kraft_metadata_epoch */
    int32_t brokers, topics;        /* children of /brokers/ids and /brokers/topics (0 when absent) */
} km_zk_found;

/* ---- a secured ZooKeeper (Kafka's zookeeper.* client keys; docs/zookeeper-security.md) ----
 * Whatever is configured here is required: a session that cannot authenticate or cannot complete
 * its TLS handshake is refused (the writer stops REFUSED, saying why), never downgraded. */
typedef struct km_zk_security {
    const char *sasl_mechanism;     /* NULL: no SASL; "DIGEST-MD5" or "GSSAPI" (Kerberos) */
    const char *sasl_username, *sasl_password;          /* DIGEST-MD5 */
    const char *sasl_keytab;        /* GSSAPI: the client keytab (NULL: the default credential cache) */
    const char *sasl_service;       /* zookeeper.sasl.client.username; NULL: "zookeeper" */
    const char *digest_auth;        /* "user:password" added with zoo_add_auth("digest"); NULL: none */
    bool tls;                       /* zookeeper.ssl.client.enable */
    const char *keystore_location, *keystore_password, *keystore_type;      /* type PEM or PKCS12 */
    const char *truststore_location, *truststore_password, *truststore_type;
    bool verify_host;               /* zookeeper.ssl.endpoint.identification.algorithm=HTTPS */
    bool set_acl;                   /* zookeeper.set.acl: create znodes with Kafka's ACLs */
} km_zk_security;

/* Reads the login section (`Client` unless named) of a JAAS file as ZooKeeper's Java client does
 * (java.security.auth.login.config): DigestLoginModule's username/password mean DIGEST-MD5,
 * Krb5LoginModule (useKeyTab, keyTab, principal, ...) GSSAPI.
 * Fills sec's SASL fields with strings owned by *owned (free with free()). */
int km_zk_security_from_jaas(km_zk_security *sec, const char *path, const char *section, char **owned,
                             km_err *err);
/* Checks a configuration before any session: files readable, types known, SASL complete. */
int km_zk_security_check(const km_zk_security *sec, km_err *err);

/* Kafka's ACL for a znode it creates (ZkData.defaultAcls): NULL without set_acl (world-all). */
struct ACL_vector;
const struct ACL_vector *km_zk_acl_for(const km_zk_security *sec, const char *path);
/* Kafka's ZkData.isSensitivePath */
bool km_zk_is_sensitive_path(const char *path);

typedef struct km_zkw_config {
    const char *hosts;              /* "h1:p1,h2:p2[/chroot]" */
    int session_timeout_ms;         /* 0: 10000 */
    int32_t controller_id;          /* our KRaft node id */
    int32_t controller_epoch;       /* our KRaft leader epoch */
    /* The ZooKeeper servers' jute.maxbuffer (zookeeper.jute.maxbuffer, as ZooKeeper's clients read it);
     * 0: ZooKeeper's default, 1 MiB - 1. No multi is larger than it less KM_ZKW_JUTE_HEADROOM. */
    size_t jute_maxbuffer;
    /* What ordinary multis are packed up to; 0: 512 KiB (less under a small jute_maxbuffer). A znode
     * too large to share one goes alone in its own multi (with both guards), as Kafka writes it. */
    size_t max_multi_bytes;
    int max_multi_ops;              /* 0: 1000 */
    int max_inflight;               /* multis outstanding at once; 0: 64 */
    size_t max_pending_ops;         /* write-behind bound in znode ops (records); 0: 100000 */
    bool fence_on_expiry;           /* HA: an expired session may mean another instance took over: FENCED,
                                     * never a re-claim of its own (the election decides who claims) */
    /* HA: a znode recording which /controller_epoch a kmproxy instance claimed last, written in the
     * claim's own multi (so no instant exists where the epoch moved and the record did not). A claim
     * that finds /controller_epoch past the record stops FENCED with km_zkw_fenced_by_foreign(): a
     * writer outside the election claimed since, and re-claiming would fight it. NULL: no record. */
    const char *claim_record;
    const char *claim_owner;        /* who we are, stored in the record */
    /* A single instance (no election) keeps the record too: it proves to the next process, after a
     * restart at the same KRaft epoch, that the /controller standing there is its own claim. The
     * same rule stops it when /controller_epoch moved past the record (only the wording differs). */
    bool single_instance;
    /* A live log follows the KRaft quorum: a /controller at a newer KRaft epoch than ours is a new leader's
     * own claim the log has not shown us yet; the claim waits (never writes over it) instead of refusing. */
    bool wait_for_newer_leader;
    bool read_only;                 /* diff: a session only - no claim, no writes (CLAIMED once the guard has
                                     * seen what a claim would find; its verdict is ignored) */
    /* Before each claim: negative refuses it for good (state REFUSED, fence reason = why); positive: not yet
     * (the log has not reached what /migration records): the claim starts over in half a second. NULL: none. */
    int (*guard)(km_zkw *w, const km_zk_found *found, char *why, size_t cap, void *ctx);
    void (*on_event)(km_zkw *w, km_zkw_event ev, void *ctx);
    void (*log)(km_log_level level, const char *msg, void *ctx); /* NULL: stderr, WARN and up */
    void *ctx;
    const km_zk_security *security; /* NULL: plain, unauthenticated, world-open ACLs */
} km_zkw_config;

km_zkw *km_zkw_new(struct ev_loop *loop, const km_zkw_config *cfg, km_err *err);
/* Closes the session (pending writes are dropped: they are behind the log, which still has them). */
void km_zkw_free(km_zkw *w);
km_zkw_state km_zkw_get_state(const km_zkw *w);
const char *km_zkw_fence_reason(const km_zkw *w);
/* REFUSED because ZooKeeper refused the configured authentication or TLS (a configuration error). */
bool km_zkw_auth_refused(const km_zkw *w);
/* Fenced because /controller_epoch moved past the claim record (claim_record): a foreign writer. */
bool km_zkw_fenced_by_foreign(const km_zkw *w);
/* The claim was refused by what ZooKeeper holds - Kafka's epoch rule on /controller, or a writer past
 * the claim record - not by a transient error: the next start meets the same ZooKeeper. */
bool km_zkw_claim_refused(const km_zkw *w);
/* The last submit was refused, nothing of it queued, because one of its znodes cannot fit one
 * multi under jute_maxbuffer: ZooKeeper cannot hold it, and retrying or re-syncing cannot help. */
bool km_zkw_znode_too_large(const km_zkw *w);
/* ZooKeeper's jute.maxbuffer is the whole request and the transaction it logs: the packet and
 * request headers, the two guards, ACLs and the transaction header take this much of it. */
#define KM_ZKW_JUTE_HEADROOM 1024

/* ---- the neutral write interface ---- */
typedef enum km_zop_kind {
    KM_ZOP_CREATE,     /* persistent; fails if present */
    KM_ZOP_CREATE_SEQ, /* persistent sequential (change notifications); must be joined to a versioned op */
    KM_ZOP_SET,        /* setData at the zkVersion the writer knows */
    KM_ZOP_DELETE,     /* delete at the zkVersion the writer knows */
} km_zop_kind;

typedef struct km_zop {
    km_zop_kind kind;
    const char *path;  /* absolute, below the chroot */
    const char *data;  /* may be NULL for empty */
    int len;
    bool join_next;    /* keep this op in the same multi as the next one (atomic unit) */
} km_zop;

/* Queues ops (copied) ending with /migration := (offset, epoch). Versions of SET/DELETE come from
 * the writer's version cache (filled by km_zkw_cache_put and by its own writes). Fails when not
 * READY, when a path's version is unknown, or when a unit cannot fit one multi. n may be 0
 * (only /migration moves, e.g. after NoOpRecords). */
int km_zkw_submit(km_zkw *w, const km_zop *ops, size_t n, int64_t offset, int32_t epoch, km_err *err);
/* Queues ops that ride on /migration's current zkVersion without moving it: the front of a batch
 * that a later km_zkw_submit ends (the full sync streams its plan this way, so that writing starts
 * before planning ends). The ending batch's /migration write waits until these are acknowledged.
 * n == 0 queues nothing. */
int km_zkw_submit_partial(km_zkw *w, const km_zop *ops, size_t n, km_err *err);
/* Write-behind bound: false while pending ops >= max_pending_ops (the caller stops reading the
 * log); the time spent refused is counted as blocking time. */
bool km_zkw_can_accept(km_zkw *w);
/* The claim waits for the log to move on (km_zkw_config.guard said "not yet"): keep reading it meanwhile. */
bool km_zkw_claim_waiting(const km_zkw *w);
size_t km_zkw_pending_ops(const km_zkw *w);
/* READY with no multi queued or outstanding. */
bool km_zkw_idle(const km_zkw *w);
/* The last offset the caller has seen in the log (for the lag metric). */
void km_zkw_note_log_offset(km_zkw *w, int64_t offset);

/* Version cache: the zkVersion of each znode the writer manages. */
void km_zkw_cache_put(km_zkw *w, const char *path, int version);
void km_zkw_cache_forget_all(km_zkw *w);
/* Returns the cached version or -1 when absent/unknown. */
int km_zkw_cache_get(const km_zkw *w, const char *path);

/* What /migration held when we claimed, then what we confirmed since. */
int64_t km_zkw_confirmed_offset(const km_zkw *w);
int32_t km_zkw_confirmed_epoch(const km_zkw *w);
int km_zkw_migration_version(const km_zkw *w);
/* The ZooKeeper controller epoch we hold (for RPCs to ZK-mode brokers). */
int32_t km_zkw_zk_controller_epoch(const km_zkw *w);
/* Reads /controller_epoch now (a broker said our epoch is stale: did another writer move it?).
 * cb runs once from the loop: rc is ZooKeeper's (0, ZOK: epoch is what the znode holds; closing
 * the writer answers ZCLOSING).  -1 without a session. */
int km_zkw_read_controller_epoch(km_zkw *w, void (*cb)(int rc, int32_t epoch, void *ctx), void *ctx, km_err *err);
/* The session's connection is up. False while the client reconnects (the session may still be
 * alive on the server, until its timeout) and before the first session. */
bool km_zkw_connected(const km_zkw *w);
/* Seconds since the connection was lost (or since the writer started, before its first one); 0
 * while connected. */
double km_zkw_seconds_disconnected(const km_zkw *w);
/* The network to ZooKeeper is gone (another session of ours lost its connection): cuts this one's, so
 * that freeing the writer does not block waiting for ZooKeeper to answer the close. */
void km_zkw_abandon(km_zkw *w);
/* The raw handle, for async reads by the bridge (never for writes); NULL without a session. */
struct _zhandle *km_zkw_handle(km_zkw *w);

/* A latency histogram (rendered by the daemon as a Prometheus histogram): counts[i] holds the observations
 * in bucket i, not cumulative (<= bounds[0], then up to bounds[i]), counts[n] those above the last bound. */
#define KM_ZKW_HIST_MAX 16
typedef struct km_zkw_hist {
    const double *bounds;           /* upper bounds in seconds, ascending */
    size_t n;
    uint64_t counts[KM_ZKW_HIST_MAX + 1];
    double sum;                     /* seconds */
} km_zkw_hist;

typedef struct km_zkw_metrics {
    int64_t write_behind_lag;       /* ZkWriteBehindLag: log offset - confirmed offset */
    int64_t blocking_kraft_ms;      /* total time the log reader was held back by the bound */
    int64_t write_delta_time_ms;    /* ZkWriteDeltaTimeMs: last delta batch, submit to confirm */
    int64_t write_snapshot_time_ms; /* ZkWriteSnapshotTimeMs: last full sync (set by the bridge) */
    km_zkw_hist write_delta;        /* every delta batch, submit to confirm */
    km_zkw_hist write_snapshot;     /* every full sync */
    km_zkw_state state;
    uint64_t multis_ok, multis_resent, lost_acks_adopted, sessions, claims;
    uint64_t disconnects;           /* connections lost while the session lived (the client reconnects) */
    uint64_t znodes_created, znodes_updated, znodes_deleted;
} km_zkw_metrics;
void km_zkw_get_metrics(const km_zkw *w, km_zkw_metrics *m);
void km_zkw_set_snapshot_time(km_zkw *w, int64_t ms);
/* Renders the metrics as a JSON object (caller frees with free()). */
char *km_zkw_metrics_json(const km_zkw *w);

/* One read of one znode with a session of its own, secured as sec says (NULL: plain), for a one-shot
 * command (`kmproxy verify --zookeeper`): at most timeout_s (<= 0: 10 s), blocking, no loop of the caller's.
 * A chroot in hosts is read under and never created.  Up to cap - 1 bytes of the data go to data (NUL
 * ended), its zkVersion to *version.  1 read, 0 no such znode, or -1 + err: no session in time, the
 * credentials or certificates refused (saying which), no answer, not authorized to read path. */
int km_zk_read_once(const char *hosts, const km_zk_security *sec, const char *path, double timeout_s, char *data,
                    size_t cap, int *version, km_err *err);

/* Kafka's /migration value (compact JSON, the field order Kafka's readers accept). */
int km_zk_migration_json(char *out, size_t cap, int32_t ctrl_id, int32_t ctrl_epoch, int64_t offset,
                         int32_t epoch);

/* ---- the bridge: the KRaft image mirrored into ZooKeeper ---- */
struct km_image;
struct km_delta;

typedef enum km_zkb_phase {
    KM_ZKB_WAITING,        /* no session / claim yet */
    KM_ZKB_SYNC,           /* SYNC_KRAFT_TO_ZK: reading ZooKeeper and writing the difference */
    KM_ZKB_DUAL_WRITE,     /* in sync; each delta becomes multis */
    KM_ZKB_STOPPED,        /* fenced, refused or failed: km_zkb_error() says why */
} km_zkb_phase;

typedef struct km_zkb km_zkb;

/* ---- Kafka's PasswordEncoder (password.encoder.*): how password-type configs are stored in
 * ZooKeeper. ZK-mode brokers decode them with their own password.encoder.secret, so the migration
 * writes them encrypted with the same secret (ZkConfigMigrationClient.writeConfigs). ---- */
typedef struct km_zk_password_config {
    const char *secret;               /* password.encoder.secret; NULL: stored as is (Kafka's NOOP encoder) */
    const char *keyfactory_algorithm; /* password.encoder.keyfactory.algorithm; NULL: Kafka's default */
    const char *cipher_algorithm;     /* password.encoder.cipher.algorithm; NULL: AES/CBC/PKCS5Padding */
    int key_length;                   /* password.encoder.key.length; 0: 128 */
    int iterations;                   /* password.encoder.iterations; 0: 4096 */
} km_zk_password_config;

typedef struct km_zk_pwenc km_zk_pwenc;
/* Checks the algorithms and lengths (an unsupported one is an error naming it). */
km_zk_pwenc *km_zk_pwenc_new(const km_zk_password_config *cfg, km_err *err);
void km_zk_pwenc_free(km_zk_pwenc *e);
/* True when a secret is set (otherwise encode and decode return their input). */
bool km_zk_pwenc_enabled(const km_zk_pwenc *e);
/* DynamicBrokerConfig.isPasswordConfig: is this config name stored encoded? */
bool km_zk_is_password_config(const char *name);
/* Kafka's encoded form ("encryptedPassword:...,salt:...,...") of plain, and back (malloc'd;
 * NULL + err naming what is wrong, e.g. a bad secret or a malformed field). */
char *km_zk_password_encode(const km_zk_pwenc *e, const char *plain, km_err *err);
char *km_zk_password_decode(const km_zk_pwenc *e, const char *encoded, km_err *err);

/* The guards against destroying a cluster (checked before each claim, and on each pass). */
typedef struct km_zk_guard {
    bool force;            /* --force / zk.force: take over despite the refusals an operator may knowingly
                            * override (never a cluster id mismatch, never an empty image) */
    bool max_deletes_set;  /* false: 0 on the first sync of a cluster ZK-mode brokers wrote (ZooKeeper holds
                            * a /cluster/id or brokers, and /migration records no offset), unlimited after */
    int64_t max_deletes;   /* with max_deletes_set: -1 unlimited, else the most znodes a pass may delete */
    bool wait_for_log;     /* a live log (metadata.source=quorum): an image behind /migration is not refused but
                            * waited for - Kafka's own driver moved /migration past what our observer has read
                            * yet (it writes /migration at every record it handles until kmproxy takes over) */
} km_zk_guard;


typedef struct km_zkb_config {
    km_zkw_config zk;      /* hosts, controller id/epoch, bounds, log (on_event and guard are the bridge's) */
    km_zk_guard guard;
    bool diff_only;        /* read and compare, never claim or write */
    size_t sync_chunk_ops; /* ops handed to the writer at a time while a pass streams; 0: 4 x max_multi_ops */
    km_zk_password_config passwords; /* how password-type configs are written */
    void (*on_phase)(km_zkb *b, km_zkb_phase phase, void *ctx);
    /* Optional: ZooKeeper now holds the image up to `offset` (a batch's /migration write was
     * acknowledged); what refers to it may be sent to the brokers. */
    void (*on_confirmed)(km_zkb *b, int64_t offset, void *ctx);
    void *ctx;
} km_zkb_config;

typedef struct km_zkb_summary {
    size_t created, updated, deleted;   /* znodes, summed over every sync and delta */
    size_t full_syncs, deltas;
    const char *diff;                   /* diff_only: "+ path" / "~ path" / "- path" lines, and "! path"
                                         * for an ACL that is not Kafka's (zookeeper.set.acl=true) */
    size_t acl_differences;             /* diff_only: those "! path" lines */
    bool acls_checked;                  /* diff_only: the ACLs were compared (set.acl, all read) */
} km_zkb_summary;

/* The image must outlive the bridge; the caller applies records to it and hands each delta over. */
km_zkb *km_zkb_new(struct ev_loop *loop, const struct km_image *img, const km_zkb_config *cfg, km_err *err);
void km_zkb_free(km_zkb *b);
km_zkb_phase km_zkb_get_phase(const km_zkb *b);
const char *km_zkb_error(const km_zkb *b);
/* Stopped by a guard (the image may not take this ZooKeeper over, or a pass would delete more than
 * the limit), or ZooKeeper refused the configured credentials: bad input rather than a runtime failure. */
bool km_zkb_refused(const km_zkb *b);
/* diff_only, once the diff is done: why a sync of this image would be refused, "" when it would not. */
const char *km_zkb_sync_verdict(const km_zkb *b);
/* The znodes a refused pass would have deleted, one "- path" line each ("" when none). */
const char *km_zkb_refused_deletes(const km_zkb *b);
/* The image moved by `d` (already applied). In DUAL_WRITE it becomes one batch; before that it is
 * folded into the pending full sync. -1 when the bridge is stopped or the batch was refused. */
int km_zkb_delta(km_zkb *b, const struct km_delta *d, km_err *err);
/* False while the write-behind bound is full, a full sync is running or the session is being
 * re-established and re-claimed: stop reading the log (the deltas wait in it; the re-sync that
 * follows the claim writes the image as it then is). True while the bridge waits for the image to
 * reach what /migration records (km_zkb_awaited_offset): the log must be read for that. */
bool km_zkb_can_accept(km_zkb *b);
/* After a claim, /migration recorded an offset (and epoch) ahead of the image: the full sync waits
 * until the image reaches it, so that /migration never moves backwards (Kafka's
 * SyncKRaftMetadataEvent). The offset waited for, or -1 when not waiting. */
int64_t km_zkb_awaited_offset(const km_zkb *b);
/* DUAL_WRITE, nothing pending, and ZooKeeper confirmed at the image's offset. */
bool km_zkb_idle(const km_zkb *b);
/* A pass over the image (full sync or catch-up) still has slices to plan; what it planned so far
 * is being written meanwhile. */
bool km_zkb_planning(const km_zkb *b);
void km_zkb_get_summary(const km_zkb *b, km_zkb_summary *s);
km_zkw *km_zkb_writer(km_zkb *b);

/* Where a full sync (or diff) stands, for progress lines and metrics. A pass plans while it writes,
 * so its write total grows until `planning` turns false; topics_planned/topics_total says how far
 * over the image the plan is, which lets a caller estimate the final total. */
typedef struct km_zkb_progress {
    km_zkb_phase phase;
    bool walking;                        /* reading ZooKeeper's mirrored namespace */
    size_t znodes_read;                  /* by the running (or last) read */
    bool planning;                       /* the running pass still has image to plan */
    size_t writes_planned;               /* znode writes the running pass has planned so far (diff: differences) */
    size_t writes_done;                  /* of them, acknowledged by ZooKeeper (diff: 0) */
    size_t topics_planned, topics_total; /* the plan's position over the image's topics */
} km_zkb_progress;
void km_zkb_get_progress(const km_zkb *b, km_zkb_progress *p);
/* The figures of a progress line: done and total (estimated from the plan's position while it
 * still plans), the rate since `prev` sampled `secs` earlier (NULL: 0) and the ETA (-1: unknown). */
typedef struct km_zkb_eta {
    const char *stage;   /* "connecting", "reading ZooKeeper", "writing", "comparing", "in sync", "stopped" */
    const char *unit;    /* "znodes" (reading, writing), "topics" (comparing); NULL outside a sync */
    size_t done, total;  /* total 0: unknown (reading) */
    bool estimated;      /* total is extrapolated: the plan has not seen the whole image yet */
    double rate;         /* znodes per second */
    double eta_seconds;
} km_zkb_eta;
void km_zkb_progress_eta(const km_zkb_progress *p, const km_zkb_progress *prev, double secs, bool diff,
                         km_zkb_eta *out);
/* "writing: 1200/~50000 znodes, 3000/s, ETA 16s" into out. */
void km_zkb_eta_format(const km_zkb_eta *e, char *out, size_t cap);

/* ---- leader election among kmproxy instances: each holds an ephemeral-sequential znode under
 * `path`; the lowest sequence leads, every other one watches its predecessor (no herd). An expired
 * session loses the lead at once and joins again at the back with a new node. ---- */
typedef struct km_zkel km_zkel;
typedef struct km_zkel_config {
    const char *hosts;              /* as for the writer, chroot included */
    int session_timeout_ms;         /* 0: 10000 */
    const char *path;               /* e.g. "/kmproxy/election" (created when missing) */
    const char *data;               /* what our node tells the others (instance name) */
    void (*on_change)(km_zkel *e, bool leader, void *ctx);
    void (*log)(km_log_level level, const char *msg, void *ctx);
    void *ctx;
    const km_zk_security *security; /* as for the writer */
    /* Optional: ZooKeeper refused the configured credentials or TLS; the election has stopped. */
    void (*on_refused)(km_zkel *e, const char *why, void *ctx);
} km_zkel_config;
km_zkel *km_zkel_new(struct ev_loop *loop, const km_zkel_config *cfg, km_err *err);
/* Closes the session: the node goes at once, so a standby takes over without waiting for expiry. */
void km_zkel_free(km_zkel *e);
bool km_zkel_leader(const km_zkel *e);
/* The session's connection is up. While it is not, km_zkel_leader is false (on_change says so):
 * the session may expire any moment and another instance take over. */
bool km_zkel_connected(const km_zkel *e);
const char *km_zkel_node(const km_zkel *e); /* our node's name; "" while we have none */
/* What the leading node says (`data`: the leading instance's name, ours when we lead); "" while unknown. */
const char *km_zkel_leader_data(const km_zkel *e);
/* Leaves the lead (if held) and joins again at the back: how a fenced leader steps down. */
void km_zkel_rejoin(km_zkel *e);

/* The ops a full sync of img onto an empty ZooKeeper writes, in order (benchmarks compare the
 * writer with the raw client on exactly these). Paths and data are owned by the array. */
int km_zk_full_sync_ops(const struct km_image *img, int32_t controller_epoch, km_zop **ops, size_t *n, km_err *err);
void km_zk_ops_free(km_zop *ops, size_t n);

#endif
