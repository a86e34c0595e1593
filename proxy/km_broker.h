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

/* Each fills *out for `version` (all memory from arena, which must outlive *out).
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

#endif
