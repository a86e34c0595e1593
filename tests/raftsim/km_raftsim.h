/* km_raftsim.h - a KRaft controller of `__cluster_metadata-0` as far as a fetching
 * observer can see: it serves a real log and real snapshots with Fetch, FetchSnapshot,
 * DescribeQuorum and ApiVersions.  There is no real KRaft controller on these machines,
 * so the tests of kmproxy's observer (proxy/quorum) run against this.
 *
 * The rules are Kafka 3.9's raft module (raft/src/main/java/org/apache/kafka/raft/):
 *  - KafkaRaftClient.handleFetchRequest: INCONSISTENT_CLUSTER_ID when a cluster id is
 *    given and differs; INVALID_REQUEST unless exactly __cluster_metadata-0 is asked for,
 *    and when maxWaitMs < 0, fetchOffset < 0, lastFetchedEpoch < 0 or lastFetchedEpoch >
 *    currentLeaderEpoch; then tryCompleteFetchRequest -> validateLeaderOnlyRequest:
 *    epoch below ours FENCED_LEADER_EPOCH, above ours UNKNOWN_LEADER_EPOCH, equal but not
 *    the leader NOT_LEADER_OR_FOLLOWER; every partition response carries CurrentLeader
 *    (buildFetchResponse) and, from v17, the leader's NodeEndpoints (RaftUtil.fetchResponse);
 *  - ReplicatedLog.validateOffsetAndEpoch: (0, any) on a log starting at 0 is valid; a
 *    fetch below the log start offset, at it with another epoch than the snapshot's, or
 *    with an epoch below the snapshot's gets SnapshotId = the latest snapshot; otherwise
 *    endOffsetForEpoch(lastFetchedEpoch) decides: another epoch, or an end offset below
 *    the fetch offset, is DivergingEpoch = that (end offset, epoch); else the records from
 *    fetchOffset (uncommitted too: Isolation.UNCOMMITTED) and the high watermark;
 *  - tryCompleteFetchRequest: a fetch at offset 0 gets the latest snapshot's id when there is one
 *    (not the bootstrap snapshot 0-0), whatever the log holds;
 *  - a fetch with nothing to return waits up to MaxWaitMs (the fetch purgatory), completed early
 *    only when the log grows; at MaxWaitMs it gets the answer built on its arrival (handleFetchRequest),
 *    so a high watermark moved meanwhile shows in the next fetch;
 *  - handleFetchSnapshotRequest: SNAPSHOT_NOT_FOUND for an unknown id,
 *    POSITION_OUT_OF_RANGE unless 0 <= position < size, else at most min(MaxBytes, chunk
 *    limit) bytes from position, with Size and Position;
 *  - handleDescribeQuorumRequest: UNKNOWN_TOPIC_OR_PARTITION (partition level) for another
 *    partition, NOT_LEADER_OR_FOLLOWER (partition level, naming no leader:
 *    DescribeQuorumResponse.singletonErrorResponse) from a non-leader, else leader, epoch, high
 *    watermark, voters and observers (with their fetch offsets), and from v2 the nodes;
 *  - ControllerApis before the raft client: ApiVersions v3+ must pass ApiVersionsRequest.isValid
 *    (ClientSoftwareName/Version non-empty, [a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?), else
 *    INVALID_REQUEST (counted as a rejection too); with km_rsim_set_denied, Fetch and FetchSnapshot
 *    (CLUSTER_ACTION on the cluster, handleRaftRequest) and DescribeQuorum (DESCRIBE,
 *    handleDescribeQuorum) get the request's getErrorResponse: a top-level
 *    CLUSTER_AUTHORIZATION_FAILED and no partitions.
 * Every request is decoded strictly (only advertised versions, no trailing bytes, sessions
 * unused as KRaft never uses them); anything it cannot accept closes the connection and is
 * counted as a rejection, so a test can assert there were none.
 *
 * One simulator is one voter.  Three on one loop, sharing their view of who leads, make a
 * quorum whose leadership a test moves (km_rsim_set_leader) to exercise failover.
 * Threads: none; everything runs on the loop given (tests run it, or kmproxy-raftsim).
 */
#ifndef KM_RAFTSIM_H
#define KM_RAFTSIM_H

#include "km_codec.h"

#include <stdbool.h>
#include <stdint.h>

struct ev_loop;
struct json_t;
struct km_tls_ctx;

typedef struct km_rsim km_rsim;

#define KM_RSIM_MAX_VOTERS 8

typedef struct km_rsim_voter { int32_t id; char host[64]; uint16_t port; } km_rsim_voter;

typedef struct km_rsim_config {
    int32_t node_id;
    const char *host;            /* listen address; NULL: 127.0.0.1 */
    uint16_t port;               /* 0: any free port */
    const char *cluster_id;      /* NULL: "kmproxy-raftsim-cluster" (22 chars) */
    int32_t fetch_max_bytes;     /* bytes of records per Fetch answer (whole batches, plus a cut one
                                  * as Kafka's FileRecords slice may give); 0: 8 MiB */
    int32_t snapshot_chunk_bytes;/* bytes per FetchSnapshot answer at most; 0: 1 MiB */
    struct km_tls_ctx *tls;      /* a km_tls server context: an SSL listener; NULL: PLAINTEXT */
    int16_t fetch_max_version;   /* highest Fetch advertised (12-17); 0: 17.  Below 16 answers carry no
                                  * NodeEndpoints, as an older controller's */
    /* A SASL_PLAINTEXT listener (SASL_SSL with tls): a bit (1u << km_sasl_mech) per mechanism
     * enabled (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512); 0: no SASL.  Every connection then
     * authenticates as Kafka's SaslServerAuthenticator demands: ApiVersions may come first,
     * then SaslHandshake v1 and SaslAuthenticate; any other request before that closes the
     * connection and is counted (unauthenticated); a bad login is answered
     * SASL_AUTHENTICATION_FAILED with the reason, then closed (sasl_failed). */
    unsigned sasl_mechanisms;
    const char *sasl_users;      /* "user:password,..." (copied) */
    /* Kafka's connections.max.reauth.ms: SaslAuthenticate answers carry it as the session's
     * lifetime; a connection whose session expired is closed on its next request (counted in
     * sasl_expired and rejected) unless it re-authenticated (KIP-368, see km_sasl.h).  0: never. */
    int64_t sasl_session_lifetime_ms;
    /* After km_rsim_set_leader makes this node the leader of a newer epoch, its high watermark is
     * unknown (-1 in answers) until the next append or km_rsim_set_high_watermark, as a Kafka leader's
     * is until it commits in its own epoch.  Off: it stays at the log end (older tests). */
    bool unknown_hw_after_election;
    bool no_describe_cluster;    /* as a controller before Kafka 3.7 (KIP-919): no DescribeCluster */
    /* Non-zero: DescribeCluster is answered with this error alone, as ControllerApis.handleDescribeCluster's
     * checks answer before anything else: 35 UNSUPPORTED_VERSION (metadata.version before 3.7-IV0, not
     * isControllerRegistrationSupported), 31 CLUSTER_AUTHORIZATION_FAILED (no ALTER on the CLUSTER). */
    int16_t describe_cluster_error;
} km_rsim_config;

void km_rsim_config_init(km_rsim_config *cfg);

km_rsim *km_rsim_new(struct ev_loop *loop, const km_rsim_config *cfg, km_err *err);
void km_rsim_free(km_rsim *s);
uint16_t km_rsim_port(const km_rsim *s);
int32_t km_rsim_node_id(const km_rsim *s);

/* The quorum as this node sees it: voters (with endpoints, for NodeEndpoints and
 * DescribeQuorum) and the leader of `epoch` (-1: none known). */
int km_rsim_set_voters(km_rsim *s, const km_rsim_voter *v, int n, km_err *err);
void km_rsim_set_leader(km_rsim *s, int32_t leader_id, int32_t epoch);
int32_t km_rsim_epoch(const km_rsim *s);

/* ---- the log ------------------------------------------------------------------------ */

/* Appends whole v2 batches (checked: CRC, dense offsets from the log end offset).  The
 * leader stamps its epoch on batches in Kafka; here the bytes keep whatever epoch they
 * carry, so a real log keeps its history. */
int km_rsim_append(km_rsim *s, const uint8_t *batches, size_t len, km_err *err);
/* Appends every batch of a segment file, or of a `__cluster_metadata-0` directory's segments. */
int km_rsim_append_path(km_rsim *s, const char *path, km_err *err);
/* Adds a snapshot (the bytes of a .checkpoint file) with id (end_offset, epoch); it becomes
 * the latest.  With set_log_start the log start moves to end_offset (segments below it are
 * dropped, as Kafka's deleteBeforeSnapshot does). */
int km_rsim_add_snapshot(km_rsim *s, const uint8_t *bytes, size_t len, int64_t end_offset, int32_t epoch,
                         bool set_log_start, km_err *err);
/* Same, from a file whose name is `<end>-<epoch>.checkpoint`. */
int km_rsim_add_snapshot_file(km_rsim *s, const char *path, bool set_log_start, km_err *err);
/* Drops every batch at or above offset (a new leader's log without an uncommitted suffix). */
void km_rsim_truncate(km_rsim *s, int64_t offset);
/* High watermark: fixed (>= 0, clamped to the log end) or -1 to follow the log end. */
void km_rsim_set_high_watermark(km_rsim *s, int64_t hw);
int64_t km_rsim_high_watermark(const km_rsim *s);
int64_t km_rsim_log_end(const km_rsim *s);
int64_t km_rsim_log_start(const km_rsim *s);
/* The epoch of the last batch held (or of the latest snapshot; 0: none): a leader's epoch is
 * never below it, and Kafka refuses a LastFetchedEpoch above the leader's epoch. */
int32_t km_rsim_last_epoch(const km_rsim *s);

/* ---- faults ------------------------------------------------------------------------- */

/* Silent: requests are read and never answered (a hung controller). */
void km_rsim_set_silent(km_rsim *s, bool silent);
/* Closes every open connection now. */
void km_rsim_drop_connections(km_rsim *s);
/* The next n FetchSnapshot answers carry one flipped byte in their chunk. */
void km_rsim_corrupt_snapshot_chunks(km_rsim *s, int n);
/* The next n FetchSnapshot requests at a position > 0 are refused POSITION_OUT_OF_RANGE (a leader whose
 * snapshot of that id is not the one being downloaded). */
void km_rsim_fail_snapshot_positions(km_rsim *s, int n);
/* Fetch answers with records carry one flipped byte in their first batch (its CRC fails) while on. */
void km_rsim_set_corrupt_records(km_rsim *s, bool on);
/* The authorizer's refusals: no CLUSTER_ACTION (Fetch, FetchSnapshot) / no DESCRIBE (DescribeQuorum). */
void km_rsim_set_denied(km_rsim *s, bool cluster_action, bool describe);

/* ---- what happened ------------------------------------------------------------------ */

typedef struct km_rsim_stats {
    uint64_t fetches, fetch_snapshots, describe_quorums, api_versions;
    uint64_t snapshot_ids_sent, diverging_sent, not_leader_sent, fenced_sent, unknown_epoch_sent;
    uint64_t rejected;           /* requests that closed the connection, or invalid ApiVersions */
    uint64_t denied;             /* requests refused CLUSTER_AUTHORIZATION_FAILED */
    uint64_t refused_position_asked_again; /* FetchSnapshot at the very position refused just before */
    uint64_t sasl_ok, sasl_failed, unauthenticated; /* logins; other requests before one (also rejected) */
    uint64_t sasl_reauth;        /* logins that renewed a session (also in sasl_ok) */
    uint64_t sasl_expired;       /* requests after a session expired (the connection closed; also rejected) */
    char last_rejection[256];
    int64_t last_fetch_offset;   /* of the last valid Fetch */
    uint64_t parked;             /* Fetches waiting in the purgatory now */
} km_rsim_stats;
void km_rsim_get_stats(const km_rsim *s, km_rsim_stats *out);
/* Changes a SASL user's password: later logins and re-authentications need the new one. */
int km_rsim_set_sasl_password(km_rsim *s, const char *user, const char *password, km_err *err);

#endif
