/* km_quorum.h - kmproxy as a KRaft observer: follows `__cluster_metadata-0` over the network
 * with Fetch and FetchSnapshot, as Kafka 3.9's KafkaRaftClient expects from an observer
 * (KIP-595 Fetch, KIP-630 snapshots, KIP-853 bootstrap servers), and applies committed
 * records only to a km_image.
 *
 * What it does, and the Kafka code each rule follows (raft/src/main/java/org/apache/kafka/raft/):
 *  - Finding the leader: it asks any bootstrap server (controller.quorum.bootstrap.servers)
 *    or voter (controller.quorum.voters) with a Fetch at its current epoch; the answer names
 *    the leader and epoch (CurrentLeader, and from Fetch v17 the leader's NodeEndpoints:
 *    RaftUtil.fetchResponse).  It starts at a random bootstrap server; bootstrap servers, when
 *    given, replace the voters for discovery (KIP-853, QuorumConfig).  A DescribeQuorum at a
 *    non-leader names no leader (3.9): km_quorum_describe then learns it with a Fetch.
 *    KafkaRaftClient.maybeHandleCommonResponse: an older epoch or UNKNOWN_LEADER_EPOCH is
 *    retried; a newer epoch, FENCED_LEADER_EPOCH or NOT_LEADER_OR_FOLLOWER moves to the
 *    leader named (maybeTransition) and asks it at once, without backoff; the leader of our own
 *    epoch, once learned, is used at once.  CLUSTER_AUTHORIZATION_FAILED: see unauthorized_fatal.
 *  - Fetching (handleFetchResponse): FetchOffset = end of what it holds, LastFetchedEpoch =
 *    the epoch of its last batch, CurrentLeaderEpoch = its epoch, sessionless.  Records are
 *    appended to a bounded buffer; a record is applied to the image only once the high
 *    watermark is past its whole batch (a KRaft broker never acts on uncommitted metadata).
 *  - DivergingEpoch: the buffer is truncated as ReplicatedLog.truncateToEndOffset computes;
 *    a truncation below what was applied is a contradiction of committed data: the
 *    observer stops (on_fatal) naming the offset and epoch (Kafka throws the same way when
 *    the leader asks to truncate below the high watermark).
 *  - SnapshotId (fetch offset below the leader's log start): the snapshot is fetched with
 *    FetchSnapshot in chunks (position = bytes received, same id, same size every chunk:
 *    handleFetchSnapshotResponse) and checked as the chunks arrive: every batch's framing
 *    and CRC32C, a control batch first (SnapshotHeader) and last (SnapshotFooter), the
 *    size; after loading, the image must end at the id's end offset.  By default each
 *    chunk's whole batches are decoded in place into the image's staged snapshot while the
 *    next chunk is already requested (a batch cut by a chunk is carried over), and the
 *    staged state replaces the image only at the footer; a bad snapshot is refused, the
 *    staged state dropped, and it is fetched again from position 0 (on_record may then
 *    have seen records of it).  With snapshot_dir or snapshot_hold_whole it is spooled to a
 *    file or held whole (snapshot_max_bytes bounds it) and loaded once verified.
 *  - Losing the leader (connection closed, refused, or no answer within the request
 *    timeout): it forgets the leader, backs off with jitter and asks the bootstrap servers
 *    again, going on from what it holds; applied records are never applied twice.
 * Threads: none; everything runs on the libev loop given.
 */
#ifndef KM_QUORUM_H
#define KM_QUORUM_H

#include "km_codec.h"
#include "km_image.h"
#include "km_metalog.h"
#include "km_sasl.h"
#include "km_tls.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ev_loop;

typedef struct km_quorum km_quorum;

/* A SASL login on the controller listener (mechanism KM_SASL_NONE: none). */
typedef struct km_quorum_login {
    km_sasl_mech mechanism;
    const char *username, *password;
} km_quorum_login;

typedef struct km_quorum_config {
    const char *bootstrap_servers; /* "host:port,..." (controller.quorum.bootstrap.servers) */
    const char *voters;            /* "id@host:port,..." (controller.quorum.voters); one of the two */
    const char *cluster_id;        /* sent in requests and checked by the quorum; NULL: not sent */
    int32_t node_id;               /* the observer's replica id; -1: none (no voter has it; Kafka's brokers,
                                    * observers too, send their node.id) */
    km_tls_ctx *tls;               /* SSL listener: a client context; NULL: PLAINTEXT */
    const char *tls_name;          /* name to verify; NULL: the host dialled */
    /* SASL_PLAINTEXT / SASL_SSL listener: after ApiVersions every connection authenticates
     * (SaslHandshake v1, SaslAuthenticate) before its first Fetch, as KafkaRaftClient's
     * NetworkClient does through SaslClientAuthenticator; a failure is logged with the
     * server's message and retried after the backoff.  KM_SASL_NONE: no SASL. */
    km_quorum_login sasl;          /* strings copied (the password wiped at free) */
    int32_t fetch_max_wait_ms;     /* MaxWaitMs of each Fetch; 0: 500 (KafkaRaftClient's) */
    int32_t request_timeout_ms;    /* beyond MaxWaitMs; 0: 2000 (controller.quorum.request.timeout.ms) */
    int32_t retry_backoff_ms;      /* backoff base; 0: 20 (controller.quorum.retry.backoff.ms) */
    int32_t retry_backoff_max_ms;  /* backoff cap; 0: 1000 */
    size_t buffer_max_bytes;       /* uncommitted records held at most; 0: 64 MiB */
    size_t snapshot_max_bytes;     /* largest snapshot accepted; 0: 4 GiB */
    int32_t snapshot_chunk_bytes;  /* FetchSnapshot MaxBytes; 0: 1 MiB - 16 KiB (see quorum_internal.h) */
    const char *snapshot_dir;      /* a fetched snapshot is spooled here (one chunk in memory) and
                                    * removed once loaded; NULL: decoded as it arrives (streamed) */
    bool snapshot_hold_whole;      /* hold a fetched snapshot whole (snapshot_max_bytes) and verify it
                                    * before any record of it reaches on_record or the image (a dump
                                    * must not print a snapshot refused later); default: streamed */
    bool quiet;                    /* no log lines on stderr */
    /* CLUSTER_AUTHORIZATION_FAILED (the principal lacks CLUSTER_ACTION on the cluster: ControllerApis
     * authorizes Fetch and FetchSnapshot so): true stops the observer (on_fatal), as KafkaRaftClient's
     * handleTopLevelError throws ClusterAuthorizationException; false (the daemon) backs off at
     * retry_backoff_max_ms, logging it once a minute, until the ACL is granted (stats.unauthorized). */
    bool unauthorized_fatal;
} km_quorum_config;

void km_quorum_config_init(km_quorum_config *cfg);

typedef struct km_quorum_handlers {
    /* Committed records were applied (or a snapshot replaced the image: km_delta_is_snapshot);
     * the delta holds the net change and is cleared after the call.  It may be empty (NoOpRecords
     * only): its position (km_delta_offset) still moved. */
    void (*on_applied)(km_quorum *q, km_delta *delta, void *ud);
    /* Optional: each committed record, just before it is applied. */
    void (*on_record)(km_quorum *q, const km_metalog_record *rec, void *ud);
    /* The observer stopped for good: a contradiction of applied records, an image that
     * refuses a committed record, a cluster id mismatch.  Free it afterwards (not inside). */
    void (*on_fatal)(km_quorum *q, const km_err *why, void *ud);
    /* Optional: a log line (leader changes, snapshot loads with size and time, truncations,
     * retries); without it lines go to stderr unless cfg.quiet. */
    void (*on_log)(km_quorum *q, const char *line, void *ud);
} km_quorum_handlers;

/* img must outlive q; records are applied to it.  A non-empty image (offset >= 0) is
 * resumed from: fetching starts after its offset at its epoch. */
km_quorum *km_quorum_new(struct ev_loop *loop, const km_quorum_config *cfg, km_image *img,
                         const km_quorum_handlers *h, void *ud, km_err *err);
void km_quorum_free(km_quorum *q);

/* Holds the next request back (the one in flight still completes) while a consumer is full. */
void km_quorum_set_paused(km_quorum *q, bool paused);

#define KM_QUORUM_LATENCY_BUCKETS 14
typedef struct km_quorum_stats {
    int32_t leader_id, leader_epoch;   /* -1: no leader known */
    int64_t high_watermark;            /* -1: none learned yet */
    int64_t fetched_offset;            /* the next offset to fetch (end of what is held) */
    int64_t applied_offset;            /* the image's offset: last applied record, -1 none */
    size_t buffered_bytes;             /* fetched, waiting for the high watermark */
    uint64_t fetches, fetch_errors, snapshot_loads, snapshot_refused, leader_changes, truncations;
    uint64_t auth_failures;            /* SASL exchanges refused or failed */
    uint64_t reauthentications;        /* SASL sessions renewed on the same connection (KIP-368) */
    double fetch_latency_sum;          /* seconds, over `fetches` answered fetches */
    /* Fetch to its answer, as a histogram: fetch_latency_counts[i] answers in bucket i (not cumulative), up to
     * fetch_latency_bounds[i] seconds; the last count is above every bound. */
    const double *fetch_latency_bounds;
    size_t fetch_latency_n;
    uint64_t fetch_latency_counts[KM_QUORUM_LATENCY_BUCKETS + 1];
    bool caught_up;                    /* applied every batch wholly below the leader's latest high watermark */
    bool failed;
    bool unauthorized;                 /* the last answer was CLUSTER_AUTHORIZATION_FAILED (see docs/quorum.md) */
    double since_answer;               /* seconds since the last answer taken whole (records, a snapshot chunk, an
                                        * empty wait); -1 before the first.  A leader paused, unreachable or sending
                                        * what is refused (a corrupt batch) lets it grow past answer_bound */
    double answer_bound;               /* seconds a healthy leader takes at most: MaxWaitMs + the request timeout */
    char last_error[256];              /* why the last exchange failed ("" once one succeeds again) */
} km_quorum_stats;
void km_quorum_get_stats(const km_quorum *q, km_quorum_stats *out);

/* ---- one-shot DescribeQuorum (kmproxy metadata quorum) ------------------------------------ */

typedef struct km_quorum_replica { int32_t id; int64_t log_end_offset, last_fetch_ms, last_caught_up_ms; } km_quorum_replica;

typedef struct km_quorum_description {
    int32_t leader_id, leader_epoch;
    int64_t high_watermark;
    int n_voters, n_observers;
    km_quorum_replica voters[32], observers[64];
    int32_t max_follower_lag;          /* voters' lag behind the leader's log end, as the tool prints */
    char leader_host[256];
    uint16_t leader_port;
} km_quorum_description;

/* Connects to each bootstrap server in turn, finds the leader (following the answers of
 * non-leaders) and asks it DescribeQuorum, after the SASL login when there is one (NULL: none).
 * Blocks up to timeout_s on a private loop. */
int km_quorum_describe(const char *bootstrap_servers, km_tls_ctx *tls, const km_quorum_login *login,
                       double timeout_s, km_quorum_description *out, km_err *err);

/* The cluster id of the controllers at `servers` ("host:port,..." or "id@host:port,..."), asked with
 * DescribeCluster v1 on the controller listener (KIP-919, Kafka 3.7+; quorum_cluster.c), after the
 * SASL login when there is one (copied), on `loop`. cb runs once, from the loop, within timeout_s:
 * with the id, or NULL and why; the ask is freed then (forget it). km_quorum_ask_free cancels. */
typedef struct km_quorum_ask km_quorum_ask;
typedef void (*km_quorum_cluster_id_cb)(const char *cluster_id, const km_err *why, void *ud);
km_quorum_ask *km_quorum_ask_cluster_id(struct ev_loop *loop, const char *servers, km_tls_ctx *tls,
                                        const km_quorum_login *login, double timeout_s, km_quorum_cluster_id_cb cb,
                                        void *ud, km_err *err);
void km_quorum_ask_free(km_quorum_ask *a);

/* Parses "host:port" (IPv6 as [addr]:port). */
int km_quorum_parse_hostport(const char *s, char *host, size_t host_len, uint16_t *port, km_err *err);

#endif
