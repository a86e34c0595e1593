/* rsim_internal.h - shared by the raft simulator's sources only. */
#ifndef KM_RSIM_INTERNAL_H
#define KM_RSIM_INTERNAL_H

#include "km_raftsim.h"
#include "km_net.h"

#include <ev.h>

/* Kafka's Errors codes the raft APIs use. */
enum {
    RSIM_E_NONE = 0, RSIM_E_UNKNOWN_TOPIC_OR_PARTITION = 3, RSIM_E_NOT_LEADER_OR_FOLLOWER = 6,
    RSIM_E_BROKER_NOT_AVAILABLE = 8, RSIM_E_CLUSTER_AUTHORIZATION_FAILED = 31, RSIM_E_UNSUPPORTED_VERSION = 35, RSIM_E_INVALID_REQUEST = 42,
    RSIM_E_FENCED_LEADER_EPOCH = 74, RSIM_E_UNKNOWN_LEADER_EPOCH = 75, RSIM_E_SNAPSHOT_NOT_FOUND = 98,
    RSIM_E_POSITION_OUT_OF_RANGE = 99, RSIM_E_INCONSISTENT_CLUSTER_ID = 104
};

typedef struct rsim_batch { int64_t base, last; int32_t epoch; size_t pos; uint32_t size; } rsim_batch;
typedef struct rsim_snapshot { int64_t end; int32_t epoch; uint8_t *bytes; size_t len; } rsim_snapshot;
typedef struct rsim_observer { int32_t id; int64_t fetch_offset; int64_t last_fetch_ms; } rsim_observer;

/* An offset and epoch, Kafka's OffsetAndEpoch. */
typedef struct rsim_oe { int64_t offset; int32_t epoch; } rsim_oe;
typedef enum rsim_valid { RSIM_VALID, RSIM_DIVERGING, RSIM_SNAPSHOT } rsim_valid;

typedef struct rsim_conn rsim_conn;

struct km_rsim {
    struct ev_loop *loop;
    km_rsim_config cfg;
    char cluster_id[64];
    km_net_listener *listener;
    rsim_conn *conns;
    km_rsim_voter voters[KM_RSIM_MAX_VOTERS];
    km_rsim_voter self;          /* its own endpoint */
    int n_voters;
    int32_t leader_id, epoch;
    uint8_t *log;                /* batches back to back; rsim_batch.pos indexes here */
    size_t log_len, log_cap;
    rsim_batch *batches;
    size_t n_batches, cap_batches, first; /* batches[first] is the first one at or above log_start */
    int64_t log_start, log_end;
    int64_t fixed_hw;            /* -1: the high watermark follows the log end */
    bool hw_unknown;             /* elected, nothing committed in its epoch yet: answers carry -1 */
    rsim_snapshot *snaps;
    size_t n_snaps;
    rsim_observer observers[16];
    int n_observers;
    bool silent;
    int corrupt_chunks;
    bool corrupt_records;
    int fail_positions;          /* FetchSnapshot answers at a position > 0 still to refuse POSITION_OUT_OF_RANGE */
    int64_t refused_position;    /* the position the last FetchSnapshot answer refused, or -1 */
    bool deny_cluster_action, deny_describe;
    char *sasl_users;            /* the config's "user:password,...", copied and cut into: */
    const char *user_names[16], *user_passwords[16];
    char *changed_passwords[16]; /* km_rsim_set_sasl_password's (owned); user_passwords point at them */
    int n_users;
    km_rsim_stats st;
};

/* rsim_log.c */
int64_t rsim_hw(const km_rsim *s);
rsim_valid rsim_validate(const km_rsim *s, int64_t offset, int32_t epoch, rsim_oe *out);
/* Records from fetch_offset (whole batches up to the byte limit, at least one, then the cut
 * head of the next one) into p and len (len 0: none). */
void rsim_read(const km_rsim *s, int64_t fetch_offset, const uint8_t **p, size_t *len);
const rsim_snapshot *rsim_find_snapshot(const km_rsim *s, int64_t end, int32_t epoch);
const rsim_snapshot *rsim_latest_snapshot(const km_rsim *s);
void rsim_note_observer(km_rsim *s, int32_t id, int64_t fetch_offset);
void rsim_log_free(km_rsim *s);

/* rsim_server.c: wakes parked fetches (log end, high watermark or leadership moved). */
void rsim_wake_fetches(km_rsim *s);

/* rsim_api.c: each fills out with a whole response frame, or returns -1 (connection closes). */
typedef struct rsim_req { int16_t api, version; int32_t correlation_id; const uint8_t *body; size_t len; } rsim_req;
/* ControllerApis' authorization of a raft request (km_rsim_set_denied): 1 answered with
 * CLUSTER_AUTHORIZATION_FAILED, 0 allowed. */
int rsim_deny(km_rsim *s, const rsim_req *rq, km_buf *out, km_err *err);
int rsim_serve_api_versions(km_rsim *s, const rsim_req *rq, km_buf *out, km_arena *a, km_err *err);
int rsim_serve_fetch_snapshot(km_rsim *s, const rsim_req *rq, km_buf *out, km_arena *a, km_err *err);
int rsim_serve_describe_quorum(km_rsim *s, const rsim_req *rq, km_buf *out, km_arena *a, km_err *err);
int rsim_serve_describe_cluster(km_rsim *s, const rsim_req *rq, km_buf *out, km_arena *a, km_err *err); /* rsim_cluster.c */
/* Fetch: decodes and validates into *fr; 1 = answer now (out filled), 0 = park it (nothing to
 * return yet and MaxWaitMs > 0), -1 = reject. */
typedef struct rsim_fetch {
    int16_t version;
    int32_t correlation_id, max_wait_ms, replica_id, current_epoch, last_fetched_epoch;
    int64_t fetch_offset;
} rsim_fetch;
int rsim_fetch_decode(km_rsim *s, const rsim_req *rq, rsim_fetch *fr, km_buf *out, km_arena *a, km_err *err);
/* Answers a decoded fetch with whatever the log holds now (parked or not). */
int rsim_fetch_answer(km_rsim *s, const rsim_fetch *fr, bool may_park, km_buf *out, km_arena *a, km_err *err);

/* rsim_api.c helpers shared with rsim_snap.c */
#define RSIM_METADATA_TOPIC "__cluster_metadata"
const km_struct_desc *rsim_sub(const km_struct_desc *sd, const char *field);
const km_rsim_voter *rsim_voter(const km_rsim *s, int32_t id);
int64_t rsim_now_ms(void);
int16_t rsim_leader_only_error(km_rsim *s, int32_t request_epoch);
bool rsim_cluster_id_ok(const km_rsim *s, km_str given);
int rsim_decode_body(const km_message_desc *md, const rsim_req *rq, void *obj, km_arena *a, km_err *err);
bool rsim_is_metadata_topic_id(km_uuid u);

#define RSIM_API_FETCH_MIN 12     /* KRaft fields (DivergingEpoch, SnapshotId...) start at v12 */
#define RSIM_API_FETCH_MAX 17
#define RSIM_API_FETCH_SNAPSHOT_MAX 1
#define RSIM_API_DESCRIBE_QUORUM_MAX 2
#define RSIM_API_VERSIONS_MAX 3

#endif
