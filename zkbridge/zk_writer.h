/* zk_writer.h - internals of the session and the writer (zkbridge only). */
#ifndef KM_ZK_WRITER_H
#define KM_ZK_WRITER_H

#include "zk_internal.h"

#include <ev.h>
#include <zookeeper/zookeeper.h>

/* zk_secure.c: TLS files, SASL callbacks and the handle built from them */
typedef struct zk_secure zk_secure;
zk_secure *zk_secure_new(const km_zk_security *sec, km_err *err); /* sec NULL: plain */
zhandle_t *zk_secure_init(zk_secure *z, const char *hosts, watcher_fn fn, int timeout_ms, void *ctx);
void zk_secure_free(zk_secure *z);

typedef struct zk_session zk_session;
struct zk_session {
    struct ev_loop *loop;
    zhandle_t *zh;
    const char *hosts;
    int timeout_ms;
    unsigned generation; /* bumps with every new handle, so stale completions can be told apart */
    bool in_process, restart_pending;
    bool chroot_ready;   /* the chroot in `hosts` exists (or there is none) */
    int chroot_pending;  /* creates of the chroot's path still unanswered */
    ev_io io;
    ev_timer timer;
    ev_prepare prepare;
    void (*on_state)(zk_session *s, int state);
    void *owner;
    const km_zk_security *security; /* NULL: plain */
    zk_secure *secure;              /* built at the first open, kept across new handles */
    bool auth_failed;               /* terminal: on_state got ZOO_AUTH_FAILED_STATE, auth_error says why */
    char auth_error[400];
};

int zk_session_start(zk_session *s, struct ev_loop *loop, km_err *err);
int zk_session_open(zk_session *s, km_err *err);
void zk_session_restart(zk_session *s); /* deferred: safe from inside callbacks */
void zk_session_restart_now(zk_session *s);
void zk_session_close(zk_session *s);
void zk_session_abandon(zk_session *s); /* the network is gone: closing must not wait for an answer */
/* ACL for a create at path (Kafka's defaultAcls when zookeeper.set.acl=true) */
/* Who counts as "us" in a claim record's messages: the election's instances, or kmproxy alone. */
const char *zkw_outside(const km_zkw *w);
const struct ACL_vector *zk_session_acl(const zk_session *s, const char *path);

typedef enum zkw_mstate { M_QUEUED, M_SENT, M_ACKED, M_UNKNOWN } zkw_mstate;

typedef struct zkw_op {
    km_zop_kind kind;
    char *path;
    char *data;
    int len;
    int version;         /* expected zkVersion for SET/DELETE, predicted when queued */
} zkw_op;

typedef struct zkw_batch zkw_batch;

typedef struct zkw_multi {
    struct zkw_multi *next;
    zkw_batch *batch;
    zkw_op *ops;
    int nops;
    bool is_last;        /* sets /migration */
    bool resent;         /* a previous attempt's outcome is unknown */
    size_t bytes;        /* its estimated size on the wire, guards and framing included */
    zkw_mstate st;
    unsigned generation; /* session generation it was sent on */
    /* live while sent: */
    zoo_op_t *zops;
    zoo_op_result_t *res;
    struct Stat mig_stat;
    struct Stat *stats;
    struct km_zkw *w;
} zkw_multi;

struct zkw_batch {
    struct zkw_batch *next;
    int64_t offset;
    int32_t epoch;
    bool bumps;           /* ends with /migration := mig (false: a partial batch, checks only) */
    char mig[256];        /* the /migration value this batch ends with */
    int mig_len;
    int check_version;    /* /migration zkVersion its multis check; -1 until the first is sent */
    size_t ops;
    int multis_left;
    int64_t submitted_ms;
};

typedef enum zkw_claim_step {
    CL_SYNC, CL_READ, CL_CLAIM, CL_VERIFY_CLAIM, CL_MIG_READ, CL_MIG_CREATE, CL_MIG_WRITE,
    CL_MIG_VERIFY, CL_DONE,
} zkw_claim_step;

struct km_zkw {
    km_zkw_config cfg;
    char *hosts;
    zk_session sess;
    km_zkw_state state;
    char fence_reason[512];
    bool foreign;                          /* fenced by a writer outside the election (claim_record) */
    bool claim_refused;                    /* km_zkw_claim_refused */
    bool too_large;                        /* km_zkw_znode_too_large */
    int big_losses;                        /* connections lost in a row with a multi above max_multi_bytes out */
    char *claim_record, *claim_owner;      /* owned copies of the config's strings */
    int record_version;                    /* claim_record's zkVersion as the claim read it; -1: absent */
    zk_vcache cache;
    /* the claim */
    zkw_claim_step step;
    int ctrl_version, ctrl_epoch_version; /* zkVersions of /controller and /controller_epoch */
    int32_t zk_epoch;                      /* /controller_epoch value we hold */
    bool ctrl_exists, epoch_exists;
    char ctrl_json[256];
    int claim_attempts;
    ev_timer claim_wait;                   /* the guard said "not yet" (the log is behind /migration) */
    int claim_waits;                       /* consecutive waits, for the log's rate */
    /* /migration */
    int mig_version;                       /* confirmed zkVersion */
    char mig[256];                         /* confirmed content */
    int mig_len;
    int64_t confirmed_offset;
    int32_t confirmed_epoch;
    int next_check;                        /* predicted version for the next batch sent */
    /* the pipeline */
    zkw_multi *head, *tail, *next_send;
    zkw_batch *bhead, *btail;
    int inflight;
    size_t pending_ops;
    bool recover_wanted;                   /* stop sending; verify once everything is back */
    bool connected;                        /* the session's connection is up (not just the session alive) */
    int64_t down_since_ms;                 /* zk_now_ms() when it went down (or the writer started) */
    bool verify_running;
    int probes_pending;                    /* recovery: existence checks outstanding */
    bool probe_failed;
    bool resync_wanted;
    /* metrics */
    int64_t log_offset;
    int64_t blocked_since, blocked_total;
    km_zkw_metrics m;
};

void zkw_log(km_zkw *w, km_log_level lvl, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void zkw_fence(km_zkw *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void zkw_emit(km_zkw *w, km_zkw_event ev);
/* A delta batch confirmed ms after its submit: the last figure and the histogram. */
void zkw_note_delta_time(km_zkw *w, int64_t ms);
/* zk_claim.c */
void zkw_claim_start(km_zkw *w);
void zkw_claim_resume(km_zkw *w);
void zkw_claim_wait_stop(km_zkw *w);
int zkw_failed_op(const zoo_op_result_t *res, int n);
/* zk_guard.c: what the claim read, into the guard's facts */
void zk_found_cluster_id(km_zk_found *f, const char *data);
void zk_found_controller(km_zk_found *f, const char *data, int64_t ephemeral_owner);
void zk_found_migration(km_zk_found *f, const char *data);
/* zk_writer.c */
void zkw_pump(km_zkw *w);
void zkw_recover_start(km_zkw *w);
void zkw_drop_pipeline(km_zkw *w);
size_t zkw_multi_limit(const km_zkw *w); /* the largest multi ZooKeeper takes, in bytes */
void zkw_free_multi(zkw_multi *m);
void zkw_ack(km_zkw *w, zkw_multi *m, bool adopted, int mig_version);
typedef struct zkw_popped {
    bool any;       /* multis were freed: pending ops went down */
    bool confirmed; /* among them a batch's /migration write */
} zkw_popped;
void zkw_pop_acked(km_zkw *w);
zkw_popped zkw_pop_acked_quiet(km_zkw *w);
void zkw_emit_progress(km_zkw *w, zkw_popped p);

#endif
