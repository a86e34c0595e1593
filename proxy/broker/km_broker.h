/* km_broker.h - ZK-mode broker channels and the migration propagator (KIP-866).
 *
 * ZK-mode brokers learn leadership and metadata only from controller RPCs.  During a
 * migration the KRaft controller sends them what Kafka 3.9's MigrationPropagator sends:
 * LeaderAndIsr, UpdateMetadata and StopReplica, with ControllerId = the KRaft controller,
 * isKRaftController = true, ControllerEpoch = the ZooKeeper controller epoch, BrokerEpoch =
 * the broker's KRaft registration epoch.  Three layers:
 *   - builders: pure functions from partition/broker states to request structs for one
 *     version (old versions get their old shapes);
 *   - km_bchan: one ordered, bounded, reconnecting channel per broker on a libev loop,
 *     negotiating versions with ApiVersions;
 *   - km_bprop: turns image deltas into requests for every channel.
 * Nothing here blocks, aborts or uses globals.
 */
#ifndef KM_BROKER_H
#define KM_BROKER_H

#include "km_codec.h"
#include "km_image.h"
#include "km_net.h"
#include "km_sasl.h"

struct km_capture;

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ev_loop;
struct json_t;

/* AbstractControlRequest.Type */
#define KM_CTL_TYPE_UNKNOWN 0
#define KM_CTL_TYPE_INCREMENTAL 1
#define KM_CTL_TYPE_FULL 2
/* LeaderAndIsr.LeaderDuringDelete / EpochDuringDelete / NoEpoch */
#define KM_LEADER_DURING_DELETE (-2)
#define KM_EPOCH_DURING_DELETE (-2)
#define KM_NO_EPOCH (-1)

/* ---- builders ----------------------------------------------------------------------- */

/* The request-level fields every control request carries. */
typedef struct km_bp_ctl {
    int32_t controller_id;             /* the KRaft controller's node id */
    int32_t controller_epoch;          /* the ZooKeeper controller epoch */
    int64_t broker_epoch;              /* the target broker's registration epoch */
    int8_t type;                       /* KM_CTL_TYPE_* (LeaderAndIsr v5+, UpdateMetadata v8+) */
    bool kraft;                        /* isKRaftController (LeaderAndIsr v7+, UpdateMetadata v8+, StopReplica v4+) */
} km_bp_ctl;

/* One partition as LeaderAndIsr and UpdateMetadata carry it. */
typedef struct km_bp_part {
    const char *topic;
    km_uuid topic_id;                  /* zero: none */
    int32_t partition;
    int32_t controller_epoch;          /* per partition: the KRaft log epoch (image epoch) */
    int32_t leader, leader_epoch, partition_epoch;
    int8_t leader_recovery_state;
    bool is_new;                       /* LeaderAndIsr only */
    km_i32_list isr, replicas, adding, removing;
    km_i32_list offline;               /* UpdateMetadata only */
} km_bp_part;

typedef struct km_bp_stop {
    const char *topic;
    int32_t partition;
    int32_t leader_epoch;              /* KM_EPOCH_DURING_DELETE for a deleted topic */
    bool delete_partition;
} km_bp_stop;

/* Each fills *out for `version`.  Everything *out points to, strings and lists included, is
 * copied into arena (which must outlive *out), so the inputs may change right after.
 * Partitions are grouped by topic in order of first appearance where the version groups them.
 * LeaderAndIsr's LiveLeaders are the registrations among `brokers` that lead a partition of
 * the request, at the endpoint named `listener`.  UpdateMetadata's LiveBrokers are all of
 * `brokers` (v0: the PLAINTEXT endpoint only; v1-2: only endpoints named after their
 * security protocol, as those versions cannot carry listener names). */
int km_bp_leader_and_isr(int16_t version, const km_bp_ctl *ctl, const km_bp_part *parts, size_t n,
                         const km_broker *const *brokers, size_t nb, const char *listener, km_arena *arena,
                         km_leader_and_isr_request *out, km_err *err);
int km_bp_update_metadata(int16_t version, const km_bp_ctl *ctl, const km_bp_part *parts, size_t n,
                          const km_broker *const *brokers, size_t nb, km_arena *arena,
                          km_update_metadata_request *out, km_err *err);
/* Before v3 the delete flag is per request: every stop must agree (the caller splits). */
int km_bp_stop_replica(int16_t version, const km_bp_ctl *ctl, const km_bp_stop *stops, size_t n, km_arena *arena,
                       km_stop_replica_request *out, km_err *err);

/* librdkafka's name for a Kafka error code ("STALE_BROKER_EPOCH", "STALE_CTRL_EPOCH"). */
const char *km_broker_err_name(int16_t code);

/* Log sink: level 1 error, 2 warn, 3 info, 4 debug (km_log_level's values). */
typedef void (*km_broker_log_fn)(int level, const char *msg, void *ud);

/* ---- km_bchan: one ZK-mode broker ------------------------------------------------------ */

/* Like Kafka's RequestSendThread: one request in flight, strictly in order, the same request
 * resent on STALE_BROKER_EPOCH with the re-read epoch.  Unlike it, the queue is bounded and a
 * broken connection drops everything: after every (re)connect and after an overflow the owner
 * is asked for a full sync (full UpdateMetadata + full LeaderAndIsr), which subsumes whatever
 * was lost.  So a dead broker costs nothing but its reconnect timer. */
typedef struct km_bchan km_bchan;

/* Kafka's socket.request.max.bytes default: the largest request a broker reads.  The channel's
 * write limit matches it, so whatever a broker accepts can be sent; a larger request is dropped
 * with a message naming the limit (the broker would close the connection on it). */
#define KM_BROKER_MAX_REQUEST_BYTES 104857600u

/* SASL on the channel (Kafka's SaslClientAuthenticator): after ApiVersions, SaslHandshake v1
 * names the mechanism, then SaslAuthenticate carries PLAIN's message or SCRAM's exchange.  A
 * refusal is logged once (with the broker's ErrorMessage) until an attempt succeeds again, and
 * retried after the reconnect backoff; no control request is sent before success. */
typedef struct km_bchan_sasl {
    km_sasl_mech mechanism;            /* KM_SASL_NONE: no SASL */
    const char *username, *password;   /* copied */
} km_bchan_sasl;

typedef struct km_bchan_config {
    int32_t broker_id;
    const char *host;                  /* its inter-broker endpoint (copied) */
    uint16_t port;
    km_net_opts net;                   /* TLS, frame cap, connect timeout; write limit 0:
                                        * KM_BROKER_MAX_REQUEST_BYTES plus the size prefix */
    km_bchan_sasl sasl;
    double request_timeout;            /* seconds; 0: 30 (controller.socket.timeout.ms) */
    double backoff_base, backoff_max;  /* reconnect backoff, seconds; 0: 0.05 and 5 */
    size_t max_queue;                  /* requests waiting behind the one in flight; 0: 1024 */
    const char *client_id;             /* NULL: "kmproxy"; km_bprop sends the controller's node id,
                                        * as Kafka's ControllerChannelManager does */
    struct km_capture *capture;        /* NULL: none.  Every frame both ways is captured. */
    km_broker_log_fn log;              /* NULL: stderr, warnings and errors */
    void *log_ud;
} km_bchan_config;

typedef struct km_bchan_hooks {
    /* Connected and negotiated, or the queue overflowed: queue a full sync now. */
    void (*need_full_sync)(km_bchan *ch, void *ud);
    /* The broker's current registration epoch (on STALE_BROKER_EPOCH); -1: unknown. */
    int64_t (*broker_epoch)(km_bchan *ch, void *ud);
    /* A request finished (answered, whatever its errors).  top: the top-level error code. */
    void (*done)(km_bchan *ch, int16_t api, uint64_t seq, int16_t top, void *ud);
    /* Top-level STALE_CONTROLLER_EPOCH: another controller owns the brokers.  The channel
     * has stopped; the owner should stop everything. */
    void (*fenced)(km_bchan *ch, void *ud);
    /* Optional: a topic's name for logs (LeaderAndIsr v5+ answers by topic id); NULL: unknown. */
    const char *(*topic_name)(km_bchan *ch, km_uuid id, void *ud);
    void *ud;
} km_bchan_hooks;

km_bchan *km_bchan_new(struct ev_loop *loop, const km_bchan_config *cfg, const km_bchan_hooks *hooks,
                       km_err *err);
void km_bchan_free(km_bchan *ch);      /* NULL is fine; no hook runs */
int32_t km_bchan_broker_id(const km_bchan *ch);
/* Negotiated: requests may be submitted. */
bool km_bchan_ready(const km_bchan *ch);
/* Version to build `api` at (highest both sides support), -1 when not ready. */
int16_t km_bchan_version(const km_bchan *ch, int16_t api);
/* Queues body (a request struct for api at km_bchan_version, allocated with everything it
 * points to from *arena).  The channel takes the arena over (*arena is left empty).
 * Returns the request's sequence number (> 0), or 0 if the request was dropped: not ready,
 * stopped, or queue full (a full sync follows).  Only -1 for a bad api or version. */
int64_t km_bchan_submit(km_bchan *ch, int16_t api, void *body, km_arena *arena, km_err *err);
/* Drop what is queued and ask for a full sync once nothing is in flight
 * (e.g. the broker re-registered). */
void km_bchan_resync(km_bchan *ch);
/* Stop for good: nothing more is sent (leadership lost). */
void km_bchan_stop(km_bchan *ch);
/* Requests queued or in flight. */
size_t km_bchan_pending(const km_bchan *ch);

typedef struct km_bchan_stats {
    uint64_t sent[3], acked[3];        /* by LeaderAndIsr, StopReplica, UpdateMetadata (api key - 4) */
    uint64_t errors[3];                /* top-level and per-partition error codes != 0 */
    uint64_t stale_broker_epoch, resent, dropped, overflows, timeouts, connects, disconnects, full_syncs;
    uint64_t auth_failures;            /* SASL handshakes or authentications the broker refused */
    uint64_t error_by_code[128];       /* all APIs, index = code (0: codes outside 1..127) */
    bool ready, stopped;
} km_bchan_stats;
void km_bchan_get_stats(const km_bchan *ch, km_bchan_stats *out);

/* ---- km_bprop: the migration propagator ------------------------------------------------- */

/* Kafka 3.9's MigrationPropagator over km_bchan.  Channels exist exactly for the unfenced
 * registrations with IsMigratingZkBroker, dialled at their `listener` endpoint.  Per delta:
 *   1. brokers changed: UpdateMetadata (no partitions, all registrations as LiveBrokers) to
 *      the ZK brokers whose registration did not change; a changed ZK broker gets a full sync;
 *   2. Type=INCREMENTAL: LeaderAndIsr (IsNew, as Kafka sets it) to the replicas of each
 *      changed or created partition, UpdateMetadata with those partitions to all, StopReplica
 *      (DeletePartition, leader epoch -2) to the replicas of a deleted topic with
 *      UpdateMetadata leader -2 for its partitions, StopReplica (DeletePartition, current
 *      leader epoch) to replicas a reassignment removed.
 * A full sync (on activation, on every (re)connect, after an overflow or a snapshot) is a
 * full UpdateMetadata (Type=2, every partition) then a full LeaderAndIsr (Type=2, every
 * partition the broker hosts).  Per-partition ControllerEpoch is the image's log epoch;
 * the request's is the ZooKeeper controller epoch.
 *
 * Where this knowingly differs from Kafka 3.9 (each is a superset of what Kafka sends, or a fix):
 *  - versions come from ApiVersions (highest common), not from metadata.version;
 *  - a full sync is UpdateMetadata(Type=2) then LeaderAndIsr(Type=2); Kafka's image path sends
 *    UpdateMetadata(Type=0, all partitions), LeaderAndIsr(Type=2), UpdateMetadata(Type=2), and its
 *    delta path gives a changed ZK broker Type=0/Type=1 requests instead of a full sync;
 *  - Kafka resends the same request after a reconnect; we full-sync (the brokers' state converges
 *    either way, and a bounded queue needs a way to forget);
 *  - OfflineReplicas of a deleted topic's partitions are its unregistered replicas (Kafka 3.9
 *    lists the registered ones there, a naming slip);
 *  - batch 1's UpdateMetadata to unchanged brokers carries no partitions (Kafka's shares the
 *    batch's partition map, so it repeats every partition when some ZK broker changed). */
typedef struct km_bprop km_bprop;

typedef struct km_bprop_config {
    int32_t controller_id;             /* ControllerId: the KRaft controller's node id */
    const char *listener;              /* inter-broker listener name (copied); NULL: "PLAINTEXT" */
    km_net_opts net;                   /* for every channel: TLS, limits */
    km_bchan_sasl sasl;                /* for every channel (its strings must outlive the propagator) */
    double request_timeout, backoff_base, backoff_max; /* 0: km_bchan's defaults */
    size_t max_queue;
    struct km_capture *capture;
    km_broker_log_fn log;
    void *log_ud;
    /* A broker answered STALE_CONTROLLER_EPOCH: leadership is lost; everything has stopped. */
    void (*fenced)(km_bprop *p, int32_t broker_id, void *ud);
    void *ud;
} km_bprop_config;

km_bprop *km_bprop_new(struct ev_loop *loop, const km_bprop_config *cfg, km_err *err);
void km_bprop_free(km_bprop *p);
/* Start propagating img (which must outlive the propagator, or until km_bprop_deactivate)
 * with the ZooKeeper controller epoch from the claim.  Every channel does a full sync.  Calling
 * it again (a new claim, a new epoch) resyncs every channel at the new epoch. */
int km_bprop_activate(km_bprop *p, const km_image *img, int32_t zk_controller_epoch, km_err *err);
/* img has just applied delta: send what it means.  Never blocks; unreachable brokers are
 * skipped (their next connect brings a full sync). */
int km_bprop_publish(km_bprop *p, const km_delta *delta, km_err *err);
/* Stop: every channel closes (leadership lost or shutting down). */
void km_bprop_deactivate(km_bprop *p);
bool km_bprop_active(const km_bprop *p);
bool km_bprop_fenced(const km_bprop *p);
/* Requests queued or in flight over all channels; 0 when every broker has acked everything. */
size_t km_bprop_pending(const km_bprop *p);
/* Channels that are connected, negotiated and not waiting for a full sync to be queued. */
size_t km_bprop_ready(const km_bprop *p);
size_t km_bprop_channel_count(const km_bprop *p);
km_bchan *km_bprop_channel(km_bprop *p, int32_t broker_id); /* NULL: none */
/* Prometheus samples: per broker requests/acks/errors and per error code (librdkafka names). */
void km_bprop_render_metrics(const km_bprop *p, km_buf *out);

#endif
