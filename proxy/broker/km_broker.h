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

/* Like Kafka's RequestSendThread: one request in flight, strictly in order, each request
 * delivered at least once: a broken connection or a timed-out request is followed by a
 * reconnect and the same request is sent again, then the rest of the queue
 * (ControllerChannelManager.RequestSendThread.doWork).  A request the broker answers with
 * STALE_BROKER_EPOCH is dropped (counted), as Kafka drops it: the next registration's requests
 * carry the new epoch.  Unlike Kafka the queue is bounded: an overflow drops it and the owner is
 * asked for a full sync (counted), the one remedy for what cannot be resent.  Before the first
 * negotiation nothing is queued (the versions to build at are unknown): the owner is asked for
 * a catch-up once negotiated.  Requests may be gated on an offset the owner releases
 * (ZooKeeper first, then the brokers). */
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
    /* Negotiated for the first time (nothing was queued before), the queue overflowed, or the
     * versions changed on a reconnect: queue what the broker needs now.  first: the former. */
    void (*need_full_sync)(km_bchan *ch, bool first, void *ud);
    /* The ZooKeeper controller epoch to send with, read at each send; NULL or -1: as built. */
    int32_t (*controller_epoch)(km_bchan *ch, void *ud);
    /* A request finished (answered, whatever its errors, or dropped on STALE_BROKER_EPOCH).
     * top: the top-level error code. */
    void (*done)(km_bchan *ch, int16_t api, uint64_t seq, int16_t top, void *ud);
    /* Top-level STALE_CONTROLLER_EPOCH to a request sent with `sent_epoch`.  With this hook the
     * request is dropped and the channel goes on (the owner checks ZooKeeper and decides);
     * without it the channel stops and `fenced` runs. */
    void (*stale_controller_epoch)(km_bchan *ch, int32_t sent_epoch, void *ud);
    /* The channel has stopped for STALE_CONTROLLER_EPOCH; the owner should stop everything. */
    void (*fenced)(km_bchan *ch, void *ud);
    /* Optional: a topic's name for logs (LeaderAndIsr v5+ answers by topic id); NULL: unknown. */
    const char *(*topic_name)(km_bchan *ch, km_uuid id, void *ud);
    void *ud;
} km_bchan_hooks;

km_bchan *km_bchan_new(struct ev_loop *loop, const km_bchan_config *cfg, const km_bchan_hooks *hooks,
                       km_err *err);
void km_bchan_free(km_bchan *ch);      /* NULL is fine; no hook runs */
int32_t km_bchan_broker_id(const km_bchan *ch);
/* New security material (TLS context, SASL mechanism and credentials, copied): the connection it
 * has or is making is made again with it at once; the request in flight is resent as it was, the
 * queue kept. Afterwards no connection of the channel uses the old TLS context. -1 (channel
 * unchanged) on a bad SASL setting or out of memory. */
int km_bchan_reconfigure(km_bchan *ch, const km_net_opts *net, const km_bchan_sasl *sasl, km_err *err);

/* Connected, negotiated, and no full sync waiting to be queued. */
bool km_bchan_ready(const km_bchan *ch);
/* Version to build `api` at (highest both sides support, as last negotiated: requests queue
 * while the channel reconnects), -1 before the first negotiation or once stopped. */
int16_t km_bchan_version(const km_bchan *ch, int16_t api);
/* Queues body (a request struct for api at km_bchan_version, allocated with everything it
 * points to from *arena).  The channel takes the arena over (*arena is left empty).
 * Returns the request's sequence number (> 0), or 0 if the request was dropped: never
 * negotiated yet (a catch-up follows), stopped, or queue full (a full sync follows).
 * Only -1 for a bad api or version. */
int64_t km_bchan_submit(km_bchan *ch, int16_t api, void *body, km_arena *arena, km_err *err);
/* The same, sent only once km_bchan_release has released `gate` (an offset; -1: at once). */
int64_t km_bchan_submit_gated(km_bchan *ch, int16_t api, void *body, km_arena *arena, int64_t gate,
                              km_err *err);
/* Requests gated at or below offset may go now. */
void km_bchan_release(km_bchan *ch, int64_t offset);
/* While held nothing new is sent (the one in flight is still answered). */
void km_bchan_hold(km_bchan *ch, bool hold);
/* Drop what is queued and ask for a full sync once nothing is in flight. */
void km_bchan_resync(km_bchan *ch);
/* Stop for good: nothing more is sent (leadership lost). */
void km_bchan_stop(km_bchan *ch);
/* Requests queued (held ones too) or in flight. */
size_t km_bchan_pending(const km_bchan *ch);
/* Where the channel is, for people (kmproxy status): "backoff" (before reconnecting), "connecting",
 * "negotiating" (ApiVersions), "authenticating", "reauthenticating", "syncing" (a full sync to be
 * queued), "ready" or "stopped". */
const char *km_bchan_state_name(const km_bchan *ch);

typedef struct km_bchan_stats {
    uint64_t sent[3], acked[3];        /* by LeaderAndIsr, StopReplica, UpdateMetadata (api key - 4) */
    uint64_t errors[3];                /* top-level and per-partition error codes != 0 */
    /* resent: sent again after a reconnect; dropped: overflow, STALE_BROKER_EPOCH, unencodable,
     * or submitted before the first negotiation; full_syncs: remedies for a dropped queue (the
     * first catch-up after a channel's first negotiation is not counted) */
    uint64_t stale_broker_epoch, stale_controller_epoch, resent, dropped, overflows, timeouts, connects,
        disconnects, full_syncs;
    uint64_t auth_failures;            /* SASL handshakes or authentications the broker refused */
    uint64_t reauthentications;        /* SASL sessions renewed on the same connection (KIP-368) */
    uint64_t error_by_code[128];       /* all APIs, index = code (0: codes outside 1..127) */
    char last_error[256];              /* the last error or warning logged for this broker ("" none yet) */
    bool ready, stopped;
} km_bchan_stats;
void km_bchan_get_stats(const km_bchan *ch, km_bchan_stats *out);

/* ---- km_bprop: the migration propagator ------------------------------------------------- */

/* Kafka 3.9's MigrationPropagator over km_bchan.  Channels exist exactly for the unfenced
 * registrations with IsMigratingZkBroker, dialled at their `listener` endpoint.  Per delta:
 *   1. brokers changed: UpdateMetadata (no partitions, all registrations as LiveBrokers) to
 *      the ZK brokers whose registration did not change; a changed ZK broker (registered,
 *      re-registered, unfenced, moved) gets UpdateMetadata with every partition (Type 0), its
 *      pending stops and an INCREMENTAL LeaderAndIsr of its own partitions (isNew=true);
 *   2. Type=INCREMENTAL, per unchanged broker: StopReplica (DeletePartition, leader epoch -2)
 *      to the replicas of a deleted topic and (current leader epoch) to replicas a reassignment
 *      removed; LeaderAndIsr (IsNew, as Kafka sets it) to the replicas of each changed or
 *      created partition; UpdateMetadata with those partitions to all, leader -2 for a deleted
 *      topic's partitions.
 * Every StopReplica stays pending per broker until the broker answers a request carrying it;
 * pending stops are sent again with every catch-up and full sync, and so are the leader -2
 * UpdateMetadata entries of deleted partitions the broker has not acknowledged (a 3.4 broker
 * ignores a FULL UpdateMetadata's omissions).  A full sync (on activation,
 * after a queue overflow or a snapshot) is a full UpdateMetadata (Type=2, every partition), the
 * pending stops, then a full LeaderAndIsr (Type=2, every partition the broker hosts).
 * Per-partition ControllerEpoch is the image's log epoch; the request's is the ZooKeeper
 * controller epoch, read at each send.  With zk_ordered, a request built for image offset N
 * goes out only once the owner has said ZooKeeper holds N (km_bprop_zk_holds), and nothing
 * goes out while the owner holds the brokers (km_bprop_hold: ZooKeeper re-syncing).
 *
 * Where this knowingly differs from Kafka 3.9 (each is a superset of what Kafka sends, or a fix):
 *  - versions come from ApiVersions (highest common), not from metadata.version;
 *  - a full sync is UpdateMetadata(Type=2) then LeaderAndIsr(Type=2); Kafka's image path sends
 *    UpdateMetadata(Type=0, all partitions), LeaderAndIsr(Type=2);
 *  - the request queue is bounded: an overflow drops it for a full sync (counted in
 *    kmproxy_broker_full_syncs_total); Kafka's queue grows without bound;
 *  - StopReplica, and a deleted partition's UpdateMetadata entry, are delivered at least once
 *    across dropped queues, channel removal and STALE_BROKER_EPOCH (Kafka loses them with the
 *    queue or the dropped request); a full sync's UpdateMetadata repeats such entries;
 *  - a broker's stops of a delta go before its LeaderAndIsr (Kafka: LeaderAndIsr, UpdateMetadata,
 *    StopReplica): StopReplica names partitions without ids, so a topic deleted and re-created
 *    under the same name in one delta would otherwise lose its new log; such a partition's
 *    UpdateMetadata entry is the new one with the new id (Kafka's map keeps one of the two);
 *  - on STALE_CONTROLLER_EPOCH, ZooKeeper's /controller_epoch decides: another writer moved it
 *    -> everything stops (fenced); otherwise logged and dropped, as Kafka does;
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
    /* Optional: the ZooKeeper controller epoch now (read at each send); NULL: activate's. */
    int32_t (*zk_controller_epoch)(km_bprop *p, void *ud);
    /* Optional: a broker answered STALE_CONTROLLER_EPOCH to `sent_epoch`; the owner checks
     * ZooKeeper's /controller_epoch and calls km_bprop_fence if another writer moved it.
     * NULL: every STALE_CONTROLLER_EPOCH fences. */
    void (*stale_controller_epoch)(km_bprop *p, int32_t broker_id, int32_t sent_epoch, void *ud);
    bool zk_ordered;                   /* requests wait for km_bprop_zk_holds (and start held) */
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
/* SIGHUP: every channel, and each made later, takes the new material (km_bchan_reconfigure; the
 * strings of sasl must outlive the propagator). Pending stops, deletions and queues are kept; no
 * full sync. Once it returns 0 the old TLS context is no longer used. */
int km_bprop_reconfigure(km_bprop *p, const km_net_opts *net, const km_bchan_sasl *sasl, km_err *err);

/* zk_ordered: ZooKeeper is confirmed to hold the image up to `offset`: requests built for it
 * may go. */
void km_bprop_zk_holds(km_bprop *p, int64_t offset);
/* zk_ordered: hold every request back (ZooKeeper is re-syncing) or let them go again. */
void km_bprop_hold(km_bprop *p, bool hold);
/* Another controller owns the brokers: stop every channel; `fenced` runs from the loop. */
void km_bprop_fence(km_bprop *p, int32_t broker_id);
/* StopReplica partitions broker_id has not answered yet.  (A deleted partition's UpdateMetadata
 * entry is kept the same way, and goes again in every full sync and catch-up.) */
size_t km_bprop_pending_stops(const km_bprop *p, int32_t broker_id);
bool km_bprop_active(const km_bprop *p);
bool km_bprop_fenced(const km_bprop *p);
/* Requests queued or in flight over all channels; 0 when every broker has acked everything. */
size_t km_bprop_pending(const km_bprop *p);
/* Channels that are connected, negotiated and not waiting for a full sync to be queued, whose
 * broker has answered a request and did not answer the last one STALE_CONTROLLER_EPOCH. */
size_t km_bprop_ready(const km_bprop *p);
size_t km_bprop_channel_count(const km_bprop *p);
/* Channel i (0 .. km_bprop_channel_count - 1), for health reports; false past the last. */
typedef struct km_bprop_chan_status {
    int32_t broker_id;
    bool connected;                    /* connected, negotiated, no full sync waiting (km_bchan_ready) */
    int32_t rejected_epoch;            /* its last answer: STALE_CONTROLLER_EPOCH to this epoch; -1: none
                                        * (the broker has seen a newer controller epoch than ours) */
} km_bprop_chan_status;
bool km_bprop_channel_status(const km_bprop *p, size_t i, km_bprop_chan_status *out);
km_bchan *km_bprop_channel(km_bprop *p, int32_t broker_id); /* NULL: none */
/* The i-th channel (i < km_bprop_channel_count; else NULL) and the endpoint it dials (host, port: optional). */
km_bchan *km_bprop_channel_at(km_bprop *p, size_t i, const char **host, uint16_t *port);
/* Prometheus samples: per broker requests/acks/errors and per error code (librdkafka names). */
void km_bprop_render_metrics(const km_bprop *p, km_buf *out);

#endif
