/* km_config.h - the daemon's configuration: a Kafka-style .properties file.
 *
 * Every key is known and typed; an unknown key, a bad value or a missing
 * required key is an error naming the file, the line and the key, so a typo
 * never silently falls back to a default. */
#ifndef KM_CONFIG_H
#define KM_CONFIG_H

#include "km_codec.h" /* km_err */
#include "km_inline.h" /* the proxy.* keys */
#include "km_sasl.h"  /* km_sasl_mech, KM_SASL_NAME_MAX */
#include "km_zkbridge.h" /* km_zk_security */

#include <stdbool.h>
#include <stdint.h>

#define KM_CONFIG_UNSET (-2)
#define KM_CONFIG_LISTENER_JAAS_MAX 8

typedef struct km_config {
    char *metadata_source;           /* metadata.source: "dir" (read metadata.dir) or "quorum" (fetch as an observer) */
    char *metadata_dir;              /* metadata.dir: the __cluster_metadata-0 directory (required for dir) */
    char *quorum_bootstrap_servers;  /* controller.quorum.bootstrap.servers: HOST:PORT,... (quorum) */
    char *quorum_voters;             /* controller.quorum.voters: ID@HOST:PORT,... (quorum) */
    int32_t quorum_request_timeout_ms; /* controller.quorum.request.timeout.ms */
    char *quorum_snapshot_dir;       /* metadata.quorum.snapshot.dir: fetched snapshots spooled here; NULL: memory */
    /* How the quorum's controller listener is reached (metadata.source=quorum), Kafka's names:
     * controller.listener.names, listener.security.protocol.map (PLAINTEXT or SSL), and PEM
     * ssl.truststore.* / ssl.keystore.* with ssl.endpoint.identification.algorithm=https. */
    char *controller_listener_names, *listener_security_protocol_map;
    char *ssl_truststore_location, *ssl_truststore_type, *ssl_keystore_location, *ssl_keystore_type;
    char *ssl_endpoint_identification_algorithm;
    /* SASL_PLAINTEXT / SASL_SSL controller listener (Kafka's names): the mechanism, and the JAAS
     * line from listener.name.<listener>.<mechanism>.sasl.jaas.config (lower case), else
     * sasl.jaas.config.  The listener-prefixed keys are held as given (any listener, any
     * mechanism) so that one nothing would use is refused by name. */
    char *sasl_mechanism_controller_protocol, *sasl_jaas_config;
    char *listener_jaas_keys[KM_CONFIG_LISTENER_JAAS_MAX], *listener_jaas_values[KM_CONFIG_LISTENER_JAAS_MAX];
    int n_listener_jaas;
    char *cluster_id;                /* cluster.id: overrides meta.properties */
    int32_t kraft_controller_id;     /* kraft.controller.id: -1 = the raft leader the log names */
    char *zk_connect;                /* zookeeper.connect: HOST:PORT[,HOST:PORT][/chroot] (required) */
    int32_t zk_session_timeout_ms;   /* zookeeper.session.timeout.ms */
    int32_t zk_jute_maxbuffer;       /* zookeeper.jute.maxbuffer: the servers' jute.maxbuffer */
    int32_t zk_max_pending_records;  /* zk.write.behind.max.records */
    bool zk_force;                   /* zk.force: override the guards an operator may knowingly override */
    int64_t zk_max_deletes;          /* zk.max.deletes: -1 no limit; KM_CONFIG_UNSET: 0 on a first sync, none after */
    bool brokers_enabled;            /* brokers.enabled: send controller RPCs to ZK-mode brokers */
    char *broker_listener;           /* broker.listener: listener name; NULL = named after the protocol */
    int32_t broker_request_timeout_ms;
    int32_t broker_max_queued;       /* broker.queue.max.requests */
    bool broker_tls;                 /* broker.tls.enabled (the same as broker.security.protocol=SSL) */
    char *broker_tls_ca, *broker_tls_cert, *broker_tls_key;
    char *broker_tls_endpoint_identification; /* "true" (NULL) or "false" */
    char *broker_security_protocol;  /* PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL; NULL: from broker.tls.enabled */
    char *broker_sasl_mechanism;     /* PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 */
    char *broker_sasl_jaas_config;   /* Kafka's PlainLoginModule / ScramLoginModule line */
    char *broker_sasl_username, *broker_sasl_password_file; /* instead of the JAAS line */
    char *metrics_listen;            /* metrics.listen: HOST:PORT for Prometheus text; NULL = off */
    bool metrics_post_enabled;       /* metrics.post.enabled: POST (run-time switches) allowed on that port */
    char *metrics_post_token_file;   /* metrics.post.token.file: POST needs this bearer token (enables POST) */
    char *capture_pcapng, *capture_jsonl;
    char *log_level;                 /* log.level: error, warn, info, debug */
    char *log_file;                  /* log.file: append the log here (reopened on SIGHUP); NULL = stderr */
    int32_t health_max_lag_records;  /* health.max.lag.records: /readyz fails above this write-behind lag */
    int32_t verify_interval_ms;      /* verify.interval.ms: the continuous broker check; 0 = off */
    int32_t verify_jitter_percent;
    int32_t verify_timeout_ms;
    int32_t verify_partitions_per_cycle; /* verify.partitions.per.cycle: 0 = every partition every cycle */
    bool ha_enabled;                 /* ha.enabled: elect one active instance among several */
    char *election_path;             /* kmproxy.election.path: where they elect (inside the chroot) */
    /* Kafka's password.encoder.*: how password-type configs are written into ZooKeeper; the same
     * values as the KRaft controllers' (and the ZK-mode brokers') own. No secret: stored as is. */
    char *password_encoder_secret;
    char *password_encoder_keyfactory_algorithm; /* NULL: PBKDF2WithHmacSHA512 */
    char *password_encoder_cipher_algorithm;     /* NULL: AES/CBC/PKCS5Padding */
    int32_t password_encoder_key_length;
    int32_t password_encoder_iterations;
    km_inline_config proxy;          /* every proxy.* key, parsed strictly by km_inline */
    /* Every key given (file, --set), with its last value, in the order first given: what SIGHUP
     * compares to name the keys that changed (km_config_each_change). */
    char **given_keys, **given_values;
    int n_given;
    /* A secured ZooKeeper, with the keys Kafka's brokers use (config_zk.c, docs/zookeeper-security.md) */
    bool zk_set_acl;                 /* zookeeper.set.acl */
    bool zk_ssl_client_enable;       /* zookeeper.ssl.client.enable */
    char *zk_client_cnxn_socket;     /* zookeeper.clientCnxnSocket: with TLS, ClientCnxnSocketNetty (or unset) */
    char *zk_ssl_keystore_location, *zk_ssl_keystore_password, *zk_ssl_keystore_type;
    char *zk_ssl_truststore_location, *zk_ssl_truststore_password, *zk_ssl_truststore_type;
    char *zk_ssl_endpoint_identification_algorithm; /* HTTPS (NULL) or empty: host name verification */
    char *zk_jaas_file;              /* java.security.auth.login.config: JAAS file with the Client section */
    char *zk_sasl_clientconfig;      /* zookeeper.sasl.clientconfig: its section name (NULL: Client) */
    bool zk_sasl_client;             /* zookeeper.sasl.client: use SASL when the JAAS file has the section */
    char *zk_sasl_client_username;   /* zookeeper.sasl.client.username: the server's service name */
    char *zk_auth_digest_file;       /* zookeeper.auth.digest.file: "user:password" for the digest scheme */
} km_config;

void km_config_defaults(km_config *c);
/* Parses `path` over the defaults in c.  -1 + err "FILE:LINE: ..." on any problem. */
int km_config_load(km_config *c, const char *path, km_err *err);
/* Applies one "key=value" (the same rules as a file line; `where` names it in errors). */
int km_config_set(km_config *c, const char *key, const char *value, const char *where, km_err *err);
/* Checks what a whole configuration needs (required keys, pairs that go together). */
int km_config_validate(const km_config *c, km_err *err);
void km_config_free(km_config *c);
/* Calls fn with every key given to a or b whose value differs (set in one only, or changed), in
 * the order a gave them, then b's new ones. Values are not passed on: some are secrets. */
typedef void (*km_config_change_fn)(const char *key, void *ud);
void km_config_each_change(const km_config *a, const km_config *b, km_config_change_fn fn, void *ud);

/* The key registry's documentation (docs/configuration.md is `kmproxy config docs`): fn gets every
 * key the daemon itself accepts (patterns such as listener.name.<listener>.<mechanism>.sasl.jaas.config
 * included; proxy.* keys: km_inline_config_each_key) in the registry's order, with its type, its
 * default as text ("" when unset) and its meaning. */
typedef void (*km_config_key_fn)(const char *key, const char *type, const char *def, const char *doc, void *ud);
void km_config_each_key(km_config_key_fn fn, void *ud);

/* Start-up checks (config_start.c), run by the daemon before it does anything, standby included:
 * `path` (when set) opens, without blocking, as a regular file; -1 + err naming key and path. */
int km_config_check_file(const char *key, const char *path, km_err *err);
/* Every file key that is set (broker.tls.*, broker.sasl.password.file, ssl.*.location, proxy.*.ssl.*). */
int km_config_check_files(const km_config *c, km_err *err);
/* Every host of zookeeper.connect and controller.quorum.*: -1 when one cannot exist (the resolver
 * says no such name); a resolver that cannot answer now (DNS down) is a warning and no error. */
typedef void (*km_config_warn_fn)(void *ud, const char *msg);
int km_config_check_hosts(const km_config *c, km_config_warn_fn warn, void *ud, km_err *err);

/* How the daemon reaches the KRaft controllers (config_quorum.c). */
typedef struct km_config_quorum_security {
    char listener[128];              /* the first of controller.listener.names ("" when unset) */
    bool tls;                        /* its protocol in listener.security.protocol.map is SSL or SASL_SSL */
    const char *ca_file, *cert_file; /* ssl.truststore.location / ssl.keystore.location (PEM) */
    km_sasl_mech mechanism;          /* SASL_*: sasl.mechanism.controller.protocol; else KM_SASL_NONE */
    char username[KM_SASL_NAME_MAX], password[KM_SASL_NAME_MAX]; /* from the JAAS line */
} km_config_quorum_security;
int km_config_resolve_quorum_security(const km_config *c, km_config_quorum_security *out, km_err *err);
/* Wipes the password. */
void km_config_quorum_security_clear(km_config_quorum_security *s);
/* metadata.source=dir: the keys that reach the controllers (snapshot spool, listener, ssl.*, SASL)
 * would be unused; -1 naming the first set. */
int km_config_refuse_quorum_keys(const km_config *c, km_err *err);

/* How the daemon authenticates to ZooKeeper and which ACLs it writes (config_zk.c): the JAAS and
 * digest files are read here. */
typedef struct km_config_zk_security {
    km_zk_security sec;              /* what zkbridge is given; its strings live in c or below */
    char *owned[3];                  /* JAAS username, password; digest "user:password" */
} km_config_zk_security;
int km_config_resolve_zk_security(const km_config *c, km_config_zk_security *out, km_err *err);
/* Wipes the secrets. */
void km_config_zk_security_clear(km_config_zk_security *s);

/* How the daemon reaches the ZK-mode brokers, resolved from broker.security.protocol,
 * broker.tls.*, broker.sasl.* and broker.listener (the password file is read here). */
typedef struct km_config_broker_security {
    const char *protocol;            /* "PLAINTEXT", "SSL", "SASL_PLAINTEXT" or "SASL_SSL" */
    char listener[256];              /* broker.listener, else the listener named after the protocol
                                      * (Kafka's inter.broker.listener.name default) */
    bool tls, verify_name;
    km_sasl_mech mechanism;          /* KM_SASL_NONE: no SASL */
    char username[KM_SASL_NAME_MAX], password[KM_SASL_NAME_MAX];
} km_config_broker_security;
int km_config_resolve_broker_security(const km_config *c, km_config_broker_security *out, km_err *err);
/* Wipes the password. */
void km_config_broker_security_clear(km_config_broker_security *s);

#endif
