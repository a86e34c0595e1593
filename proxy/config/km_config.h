/* km_config.h - the daemon's configuration: a Kafka-style .properties file.
 *
 * Every key is known and typed; an unknown key, a bad value or a missing
 * required key is an error naming the file, the line and the key, so a typo
 * never silently falls back to a default. */
#ifndef KM_CONFIG_H
#define KM_CONFIG_H

#include "km_codec.h" /* km_err */
#include "km_inline.h" /* the proxy.* keys */

#include <stdbool.h>
#include <stdint.h>

typedef struct km_config {
    char *metadata_dir;              /* metadata.dir: the __cluster_metadata-0 directory (required) */
    char *cluster_id;                /* cluster.id: overrides meta.properties */
    int32_t kraft_controller_id;     /* kraft.controller.id: -1 = the raft leader the log names */
    char *zk_connect;                /* zookeeper.connect: HOST:PORT[,HOST:PORT][/chroot] (required) */
    int32_t zk_session_timeout_ms;   /* zookeeper.session.timeout.ms */
    int32_t zk_max_pending_records;  /* zk.write.behind.max.records */
    bool brokers_enabled;            /* brokers.enabled: send controller RPCs to ZK-mode brokers */
    char *broker_listener;           /* broker.listener: listener name; NULL = the first endpoint */
    int32_t broker_request_timeout_ms;
    int32_t broker_max_queued;       /* broker.queue.max.requests */
    bool broker_tls;                 /* broker.tls.enabled */
    char *broker_tls_ca, *broker_tls_cert, *broker_tls_key;
    char *metrics_listen;            /* metrics.listen: HOST:PORT for Prometheus text; NULL = off */
    char *capture_pcapng, *capture_jsonl;
    char *log_level;                 /* log.level: error, warn, info, debug */
    /* Kafka's password.encoder.*: how password-type configs are written into ZooKeeper; the same
     * values as the KRaft controllers' (and the ZK-mode brokers') own. No secret: stored as is. */
    char *password_encoder_secret;
    char *password_encoder_keyfactory_algorithm; /* NULL: PBKDF2WithHmacSHA512 */
    char *password_encoder_cipher_algorithm;     /* NULL: AES/CBC/PKCS5Padding */
    int32_t password_encoder_key_length;
    int32_t password_encoder_iterations;
    km_inline_config proxy;          /* every proxy.* key, parsed strictly by km_inline */
} km_config;

void km_config_defaults(km_config *c);
/* Parses `path` over the defaults in c.  -1 + err "FILE:LINE: ..." on any problem. */
int km_config_load(km_config *c, const char *path, km_err *err);
/* Applies one "key=value" (the same rules as a file line; `where` names it in errors). */
int km_config_set(km_config *c, const char *key, const char *value, const char *where, km_err *err);
/* Checks what a whole configuration needs (required keys, pairs that go together). */
int km_config_validate(const km_config *c, km_err *err);
void km_config_free(km_config *c);

#endif
