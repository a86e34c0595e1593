/* km_brokersim.h - a ZooKeeper-mode Kafka broker as far as its controller can see.
 *
 * It speaks ApiVersions, LeaderAndIsr, UpdateMetadata and StopReplica, decodes
 * every request strictly with the codec (no trailing bytes, only the versions it
 * advertises) and keeps the state Kafka 3.9's ZK-mode broker keeps for them:
 *  - the replica manager: hosted partitions with leader, leader/partition epochs,
 *    ISR, replicas, and the controller epoch (ReplicaManager.controllerEpoch);
 *  - the metadata cache: alive brokers, topic ids, partition states, controller id.
 * The epoch rules are Kafka's (KafkaApis + ReplicaManager + Partition + ZkMetadataCache):
 *  - BrokerEpoch -1 is never stale; otherwise a request from a KRaft controller is
 *    stale below the KRaft registration epoch, one from a ZK controller below the
 *    ZK epoch (ZkBrokerEpochManager) -> STALE_BROKER_EPOCH (77);
 *  - ControllerEpoch below the last seen -> STALE_CONTROLLER_EPOCH (11), all three APIs;
 *  - LeaderAndIsr per partition: a higher leader epoch wins; an equal one wins only from a
 *    KRaft controller; otherwise STALE_CONTROLLER_EPOCH per partition.  A lower partition
 *    epoch is skipped silently (Partition.makeLeader).  Not in the replicas:
 *    UNKNOWN_TOPIC_OR_PARTITION; topic id mismatch: INCONSISTENT_TOPIC_ID.
 *    Type=FULL from a KRaft controller first drops stray partitions;
 *  - StopReplica per partition: leader epoch -2, -1 or >= current is accepted, else
 *    FENCED_LEADER_EPOCH (74);
 *  - UpdateMetadata Type=FULL (v8, KRaft controller) deletes topics/partitions absent
 *    from it; leader -2 deletes a partition.
 * Anything it cannot decode closes the connection (as a broker does) and is counted.
 * Security, as a ZK-mode broker's listener and authorizer see it:
 *  - a TLS listener counts every connection whose first byte is not a TLS handshake record
 *    (plaintext sent to a TLS port) and closes it;
 *  - a SASL listener (SASL_PLAINTEXT / SASL_SSL) runs Kafka's SaslServerAuthenticator: before
 *    authentication only ApiVersions, SaslHandshake (v1) and SaslAuthenticate are served; any
 *    other request closes the connection unanswered and is counted; PLAIN and SCRAM-SHA-256/512
 *    check the users it was given (a failure is answered SASL_AUTHENTICATION_FAILED with Kafka's
 *    message, then the connection is closed);
 *  - with the authorizer on, LeaderAndIsr, UpdateMetadata and StopReplica need ClusterAction:
 *    only super users have it here (no ACLs), anyone else (User:ANONYMOUS without SASL) gets
 *    CLUSTER_AUTHORIZATION_FAILED (31) and the state is untouched (KafkaApis'
 *    authorizeClusterOperation(request, CLUSTER_ACTION)).
 *
 * Threads: a simulator runs on one libev loop; km_bsim_state_json and the setters lock,
 * so a test may run the loop in another thread (km_bsim_start_thread).
 */
#ifndef KM_BROKERSIM_H
#define KM_BROKERSIM_H

#include "km_codec.h"

#include <stdbool.h>
#include <stdint.h>

struct ev_loop;
struct json_t;
struct km_tls_ctx;

typedef struct km_bsim km_bsim;

/* Which ZK-mode broker's rules (ReplicaManager / ZkMetadataCache differ by release). */
typedef enum km_bsim_kafka {
    KM_BSIM_KAFKA_3_6_2 = 0,    /* 3.6.2 and later (3.9): stray detection on a FULL LeaderAndIsr from a
                                 * KRaft controller, an equal leader epoch from it wins, a FULL
                                 * UpdateMetadata drops topics it does not name */
    KM_BSIM_KAFKA_IBP_3_4,      /* a 3.4 broker (IBP 3.4, the first migration release): none of that
                                 * (Kafka 3.4.0's ReplicaManager and ZkMetadataCache); a lost
                                 * StopReplica leaves its log there for good */
} km_bsim_kafka;

#define KM_BSIM_APIS 7 /* api keys 0..6 cover LeaderAndIsr (4), StopReplica (5), UpdateMetadata (6) */

typedef struct km_bsim_config {
    int32_t broker_id;
    int64_t kraft_broker_epoch; /* epoch of its KRaft registration (BrokerLifecycleManager); -1: none */
    int64_t zk_broker_epoch;    /* czxid of its /brokers/ids znode; 0 if unused */
    const char *host;           /* listen address; NULL: 127.0.0.1 */
    uint16_t port;              /* 0: any free port */
    /* Highest version advertised per API (-1: the codec's maximum).  Indexed by api key. */
    int16_t max_version[KM_BSIM_APIS];
    int16_t max_api_versions;   /* highest ApiVersions version; -1: 3 (Kafka 3.9) */
    const char *state_dump;     /* if set, the state is rewritten there (atomically) after each request */
    struct km_tls_ctx *tls;     /* a km_tls server context: connections are TLS; NULL: plaintext */
    km_bsim_kafka kafka;        /* whose rules; default: 3.6.2+ */
    /* ZooKeeper ("host:port[/chroot]"): a new partition's log is created with the topic config
     * read from /config/topics/<topic> at that moment, as a ZK broker does
     * (LogManager.getOrCreateLog -> fetchLogConfig -> ZkConfigRepository).  NULL: not read. */
    const char *zk_connect;
    /* Fault injection: each control request is, with this probability, either lost (the
     * connection is cut before it is handled) or unanswered (handled, then cut): half each. */
    double cut_ratio;
    uint32_t cut_seed;
    unsigned sasl_mechanisms;   /* bits 1u << km_sasl_mech: a SASL listener; 0: none */
    const char *sasl_users;     /* "user:password,user2:password2" (copied) */
    /* Kafka's connections.max.reauth.ms: SaslAuthenticate answers carry it as the session's
     * lifetime; a connection whose session expired is closed on its next request unless it
     * re-authenticated (KIP-368; see km_sasl.h).  0: sessions never expire. */
    int64_t sasl_session_lifetime_ms;
    bool authorizer;            /* controller requests need ClusterAction (a super user) */
    const char *super_users;    /* Kafka's super.users: "User:alice;User:bob" (copied) */
} km_bsim_config;

void km_bsim_config_init(km_bsim_config *cfg);
/* Parses "LeaderAndIsr=3,UpdateMetadata=5,StopReplica=1" (names as in the spec, Kafka's
 * upper-snake names or numeric api keys; ApiVersions too) into cfg. */
int km_bsim_parse_max_versions(km_bsim_config *cfg, const char *spec, km_err *err);
/* "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512" (Kafka's sasl.enabled.mechanisms) into cfg. */
int km_bsim_parse_sasl_mechanisms(km_bsim_config *cfg, const char *list, km_err *err);

km_bsim *km_bsim_new(struct ev_loop *loop, const km_bsim_config *cfg, km_err *err);
void km_bsim_free(km_bsim *s);
uint16_t km_bsim_port(const km_bsim *s);
int32_t km_bsim_broker_id(const km_bsim *s);

/* Runs a simulator on its own loop in a new thread (for tests with blocking clients). */
km_bsim *km_bsim_start_thread(const km_bsim_config *cfg, km_err *err);
void km_bsim_stop_thread(km_bsim *s);

/* A broker restart with a new registration: later requests need at least this epoch. */
void km_bsim_set_kraft_broker_epoch(km_bsim *s, int64_t epoch);
/* A broker restart: connections dropped, the metadata cache and controller epoch forgotten
 * (memory), the hosted partitions kept (logs on disk), a new registration epoch.  Call it on
 * the simulator's loop thread. */
void km_bsim_restart(km_bsim *s, int64_t epoch);
/* Drops every open connection (simulates a network blip; the state is kept).  Call it on the
 * simulator's loop thread. */
void km_bsim_drop_connections(km_bsim *s);

/* While unreachable, every connection is closed as soon as it is accepted and the open ones are
 * dropped: a broker that is down or cut off by the network (its state is kept, as its logs are
 * on disk).  Call it on the simulator's loop thread. */
void km_bsim_set_unreachable(km_bsim *s, bool unreachable);

/* The whole state as JSON (new reference):
 * {"brokerId", "kraftBrokerEpoch", "controllerEpoch",
 *  "partitions": [{"topic","partition","topicId","leader","leaderEpoch","partitionEpoch",
 *                  "controllerEpoch","isr","replicas","addingReplicas","removingReplicas",
 *                  "leaderRecoveryState","stopped"}...] sorted by topic, partition,
 *  "metadata": {"controllerId","isKRaftController","brokers":[{"id","rack","endpoints":[...]}],
 *               "topics":[{"name","topicId","partitions":[{"partition","leader","leaderEpoch",
 *               "isr","zkVersion","replicas","offlineReplicas","controllerEpoch"}]}]},
 *  "requests": {"LEADER_AND_ISR": {"7": n}, ...}, "errors": {"77": n, ...} (by error code),
 *  "rejected": n (requests that closed the connection), "lastRejection": "...",
 *  "leaderAndIsrByType": {"0": n, "1": n, "2": n}, "strayLogsRemoved": n, "cuts": n,
 *  "logsCreated": [{"topic","partition","topicId","configRead","config"}...] in creation order:
 *  configRead false when no ZooKeeper is configured, config null when /config/topics/<t> was
 *  absent at that moment (the log got the broker's defaults)} */
struct json_t *km_bsim_state_json(km_bsim *s);
int km_bsim_dump(km_bsim *s, const char *path, km_err *err);
/* Requests handled so far (all APIs, including ApiVersions). */
uint64_t km_bsim_requests(km_bsim *s);
/* The next n control requests are handled but never answered (the connection stays open): the
 * controller's request times out.  Call it on the simulator's loop thread. */
void km_bsim_mute(km_bsim *s, int n);
/* Connections cut by cut_ratio so far. */
uint64_t km_bsim_cuts(km_bsim *s);

typedef struct km_bsim_security_stats {
    uint64_t plaintext_on_tls;         /* connections that sent plaintext to the TLS listener */
    uint64_t sasl_ok, sasl_failed;     /* authentications that succeeded / were refused */
    uint64_t sasl_reauth;              /* ... of them re-authentications that succeeded */
    uint64_t sasl_expired;             /* connections closed on a request after their session expired */
    uint64_t unauthenticated;          /* requests before authentication (connection closed) */
    uint64_t unauthorized;             /* controller requests answered CLUSTER_AUTHORIZATION_FAILED */
    uint64_t controller_requests;      /* LeaderAndIsr, UpdateMetadata, StopReplica applied */
    char last_principal[300];          /* of the last controller request applied ("" if none) */
    char last_client_id[64];           /* its request header's client.id */
} km_bsim_security_stats;
void km_bsim_get_security_stats(km_bsim *s, km_bsim_security_stats *out);
/* Changes a SASL user's password (later logins and re-authentications need the new one). */
int km_bsim_set_sasl_password(km_bsim *s, const char *user, const char *password, km_err *err);

#endif
