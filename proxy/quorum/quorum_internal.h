/* quorum_internal.h - shared by the sources of proxy/quorum only. */
#ifndef KM_QUORUM_INTERNAL_H
#define KM_QUORUM_INTERNAL_H

#include "km_quorum.h"
#include "km_net.h"

#include <ev.h>

enum {
    QE_NONE = 0, QE_UNKNOWN_TOPIC_OR_PARTITION = 3, QE_NOT_LEADER_OR_FOLLOWER = 6, QE_BROKER_NOT_AVAILABLE = 8,
    QE_TOPIC_AUTHORIZATION_FAILED = 29, QE_CLUSTER_AUTHORIZATION_FAILED = 31, QE_UNSUPPORTED_VERSION = 35,
    QE_INVALID_REQUEST = 42, QE_FENCED_LEADER_EPOCH = 74, QE_UNKNOWN_LEADER_EPOCH = 75,
    QE_SNAPSHOT_NOT_FOUND = 98, QE_POSITION_OUT_OF_RANGE = 99, QE_INCONSISTENT_CLUSTER_ID = 104
};
/* Kafka's name of an error code the quorum APIs answer (org.apache.kafka.common.protocol.Errors), or "error". */
const char *q_error_name(int16_t code);

#define Q_MAX_NODES 32
#define Q_METADATA_TOPIC "__cluster_metadata"
/* FetchSnapshot MaxBytes: a chunk's frame stays under the 1 MiB receive buffer km_net keeps
 * between frames; larger frames regrow it from 64 KiB and give it back after each one, which
 * measured (bench_quorum, perf) as page faults and copies worth ~10% of a streamed load. */
#define Q_SNAPSHOT_CHUNK_DEFAULT ((1 << 20) - (16 << 10))

typedef struct q_node { int32_t id; char host[128]; uint16_t port; } q_node;
typedef struct q_batch { int64_t base, last; int32_t epoch; size_t pos; uint32_t size; } q_batch;
typedef struct q_epoch_start { int32_t epoch; int64_t start; } q_epoch_start;

typedef enum q_phase { Q_IDLE, Q_CONNECTING, Q_VERSIONS, Q_AUTH, Q_FETCH, Q_SNAPSHOT, Q_FAILED } q_phase;

struct km_quorum {
    struct ev_loop *loop;
    km_quorum_config cfg;
    char *cfg_strings;                 /* owned copies behind cfg's strings */
    km_image *img;
    km_delta *delta;
    km_quorum_handlers h;
    void *ud;
    q_node bootstrap[Q_MAX_NODES];     /* id -1 for bootstrap servers */
    int n_bootstrap, next_bootstrap;
    q_node known[Q_MAX_NODES];         /* voters' endpoints by id, from config and responses */
    int n_known;
    /* who leads */
    int32_t leader_id, epoch;
    /* the connection and its one request in flight */
    km_net_conn *conn;
    q_node target;                     /* what conn dials: a leader (id) or a bootstrap server (-1) */
    q_phase phase;
    int16_t fetch_v, snap_v;
    int32_t next_correlation, inflight_correlation;
    int16_t inflight_api, inflight_version;
    double sent_at;
    ev_timer request_timer, backoff_timer, pause_timer;
    km_backoff backoff;
    /* retry lines logged lately: a failure that repeats (a wrong password, a controller down) is
     * logged once a minute with a count, not once a backoff; forgotten once a request succeeds */
    struct q_retry_note { char line[256]; double logged_at; unsigned repeats; } retry_notes[4];
    /* the log as held: applied (image) + buffered (fetched, above the high watermark) */
    int64_t applied_next;              /* first offset not applied */
    int32_t applied_epoch;             /* epoch of the last applied batch (or snapshot) */
    int64_t hw;                        /* what may be applied: the leader's high watermark or a snapshot's end */
    int64_t leader_hw;                 /* the highest high watermark a leader reported (-1: none yet); "caught
                                        * up" means applied to here, never to a snapshot's end alone */
    km_buf buf;                        /* buffered batches, back to back from buf_head */
    size_t buf_head;
    q_batch *batches;
    size_t n_batches, cap_batches, first_batch;
    q_epoch_start *epochs;             /* epoch start offsets of applied + buffered records */
    size_t n_epochs, cap_epochs;
    /* a snapshot being fetched */
    bool snap_active;
    int64_t snap_end;
    int32_t snap_epoch;
    int64_t snap_size;
    size_t snap_checked;               /* bytes of snap (from its start) whose batches' CRC32C held */
    uint64_t snap_base;                /* spooling: bytes already written to the file before snap */
    int spool_fd;                      /* cfg.snapshot_dir: the `.part` file being written, or -1 */
    char spool_path[4200];             /* its final name; `.part` appended while written */
    bool snap_last_control;            /* the last whole batch was a control batch (the footer's) */
    km_buf snap;                       /* held whole (spooling: the unwritten rest); streamed: a cut batch */
    int64_t snap_received;             /* bytes of the snapshot received: the next chunk's position */
    km_metalog *snap_stream;           /* streamed: decodes each chunk's whole batches into the image's staging */
    double snap_started;
    /* SASL: the credentials (cfg's pointers are not kept) and the exchange of this connection */
    char sasl_user[KM_SASL_NAME_MAX], sasl_pass[KM_SASL_NAME_MAX];
    km_sasl_client *sasl;              /* kept once authenticated, to renew the session */
    ev_timer reauth_timer;             /* the session's renewal point (KIP-368) ... */
    ev_tstamp reauth_at;               /* ... on the loop's clock (0: none) */
    bool reauth_due;                   /* ... passed: renew before the next Fetch/FetchSnapshot */
    bool reauthenticating;             /* the exchange in progress renews a session */
    km_quorum_stats st;
    double answered_at;                /* loop time of the last answer taken whole (0: none yet) */
    bool fatal;
    bool paused, request_held;       /* km_quorum_set_paused; a request waits for the resume */
};

/* quorum.c */
/* ApiVersions v3 as every kmproxy quorum connection sends it: a controller refuses an empty
 * ClientSoftwareName/Version with INVALID_REQUEST (ApiVersionsRequest.isValid, ControllerApis). */
#define Q_API_VERSIONS_V 3
void q_api_versions_request(km_api_versions_request *rq);
void q_log(const km_quorum *q, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
double q_now(const km_quorum *q);
void q_fatal(km_quorum *q, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Sends body as a request on the connection; the answer comes to q_on_fetch_response etc. */
int q_send(km_quorum *q, int16_t api, int16_t version, const void *body, km_err *err);
/* A failed exchange: drop the connection, back off with jitter, then find the leader again
 * (forget_leader) or go back to the same one. */
void q_retry(km_quorum *q, bool forget_leader, const char *why);
/* An answer was taken whole: backoff and the retry lines start afresh.  Not before: an answer
 * refused (a corrupt batch) must keep backing off and stay rate-limited in the log. */
void q_healthy(km_quorum *q);
/* One Fetch answered after `seconds`: into the latency histogram of the stats. */
void q_observe_fetch_latency(km_quorum *q, double seconds);
/* Kafka's maybeHandleCommonResponse for Fetch/FetchSnapshot answers: 1 handled (a request
 * was re-issued or a retry scheduled), 0 go on with the answer. */
int q_common_response(km_quorum *q, int16_t error, int32_t leader_id, int32_t epoch);
/* A Fetch/FetchSnapshot answer's top-level error and partition: false when handled here
 * (INCONSISTENT_CLUSTER_ID is fatal; anything else is retried). */
bool q_top_level_ok(km_quorum *q, const char *api, int16_t error, bool has_partition);
void q_learn_endpoint(km_quorum *q, int32_t id, const char *host, int32_t port);
/* Issues the next request for the phase: a Fetch, or the next FetchSnapshot chunk. */
void q_next_request(km_quorum *q);
void q_deliver(km_quorum *q);

/* quorum_log.c: the held log */
int64_t q_fetch_offset(const km_quorum *q);
int32_t q_last_fetched_epoch(const km_quorum *q);
int q_buffer_records(km_quorum *q, const uint8_t *p, size_t len, km_err *err);
int q_apply_committed(km_quorum *q, km_err *err);
/* Applies every record of whole batches p[0..len) to the image (`name` in errors; a snapshot's
 * names its id), calling on_record first. */
int q_apply_bytes(km_quorum *q, const char *name, const uint8_t *p, size_t len, km_ml_source source, km_err *err);
/* Applies every record the reader gives (closing it), calling on_record first. */
int q_apply_log(km_quorum *q, km_metalog *log, km_err *err);
/* The same without closing the reader, until it has no more for now: 0; -1 with *image_failed
 * telling the image's refusal (fatal) from the reader's (bad input). */
int q_apply_records(km_quorum *q, km_metalog *log, bool *image_failed, km_err *err);

/* quorum_spool.c: with cfg.snapshot_dir a fetched snapshot goes to a file as its batches are
 * checked, so only one chunk is in memory; without it every call is a no-op. */
int q_spool_open(km_quorum *q, km_err *err);
int q_spool_flush(km_quorum *q, km_err *err);   /* writes the checked batches, keeps the rest */
void q_spool_discard(km_quorum *q);
int q_spool_apply(km_quorum *q, km_err *err);   /* renames into place, applies, removes the file */
/* quorum_stream.c: unless spooled or held whole (cfg), a fetched snapshot is
 * decoded chunk by chunk into the image's staged snapshot as it arrives (a batch cut between
 * chunks is carried over), and replaces the image at its footer. */
bool q_stream_wanted(const km_quorum *q);
/* One chunk's bytes; last: the snapshot is complete with them.  -1 and err: refuse the
 * snapshot (q->fatal set when the image itself failed). */
int q_stream_chunk(km_quorum *q, const uint8_t *p, size_t len, bool last, km_err *err);
void q_stream_abandon(km_quorum *q);

/* DivergingEpoch: truncateToEndOffset; -1 (fatal) when it would cut applied records. */
int q_truncate_diverging(km_quorum *q, int64_t end_offset, int32_t epoch, km_err *err);
void q_clear_buffer(km_quorum *q);
void q_reset_epochs(km_quorum *q, int32_t epoch, int64_t start);
void q_log_free(km_quorum *q);

/* quorum_sasl.c: the exchange on a SASL listener after ApiVersions; on success the phase's
 * first request follows; a failure is logged and retried. */
void q_sasl_begin(km_quorum *q, const km_api_versions_response *rs);
void q_on_sasl_response(km_quorum *q, const uint8_t *body, size_t len);
void q_sasl_drop(km_quorum *q);
void q_sasl_init_timer(km_quorum *q);
/* A renewal is due and nothing is in flight: begins it (true) and the next request waits for it. */
bool q_sasl_maybe_reauthenticate(km_quorum *q);

/* quorum_fetch.c */
int q_send_fetch(km_quorum *q, km_err *err);
/* A Fetch of __cluster_metadata partition 0 at version v, every field at its default: the topic named
 * as v wants it (its id from v13), rq -> topic -> part linked.  The caller fills in the rest. */
void q_fetch_request_init(km_fetch_request *rq, km_fetch_request_topic *topic, km_fetch_request_partition *part,
                          int16_t v);
void q_on_fetch_response(km_quorum *q, const uint8_t *body, size_t len);

/* quorum_snap.c */
int q_snapshot_begin(km_quorum *q, int64_t end, int32_t epoch, km_err *err);
int q_send_fetch_snapshot(km_quorum *q, km_err *err);
void q_on_fetch_snapshot_response(km_quorum *q, const uint8_t *body, size_t len);
void q_snapshot_abandon(km_quorum *q);

/* The struct descriptor of a field (by spec name), to km_init nested array items. */
const km_struct_desc *q_sub(const km_struct_desc *sd, const char *field);

#endif
