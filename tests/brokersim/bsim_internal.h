/* bsim_internal.h - shared by the broker simulator's sources only. */
#ifndef KM_BSIM_INTERNAL_H
#define KM_BSIM_INTERNAL_H

#include "km_brokersim.h"
#include "km_net.h"
#include "km_sasl.h"

#include <pthread.h>

typedef struct bsim_ivec { int32_t n; int32_t *v; } bsim_ivec;

/* A partition the replica manager hosts (kafka.cluster.Partition, the parts we model). */
typedef struct bsim_part {
    char *topic;
    int32_t partition;
    km_uuid topic_id;                 /* zero: none known */
    int32_t leader, leader_epoch, partition_epoch, controller_epoch;
    int8_t lrs;
    bsim_ivec isr, replicas, adding, removing;
    bool stopped;                     /* StopReplica without delete */
} bsim_part;

/* A partition in the metadata cache (UpdateMetadataPartitionState). */
typedef struct bsim_mpart {
    char *topic;
    int32_t partition;
    int32_t controller_epoch, leader, leader_epoch, zk_version;
    bsim_ivec isr, replicas, offline;
} bsim_mpart;

typedef struct bsim_topic_id { char *name; km_uuid id; } bsim_topic_id;

/* A log the replica manager created, with the topic config it read from ZooKeeper then. */
typedef struct bsim_log {
    char *topic;
    int32_t partition;
    km_uuid topic_id;
    bool config_read;                  /* ZooKeeper was asked */
    char *config;                      /* /config/topics/<t> then; NULL: absent (defaults) */
} bsim_log;

struct bsim_zk;

typedef struct bsim_ep { char *listener, *host; int32_t port; int16_t security_protocol; } bsim_ep;
typedef struct bsim_broker { int32_t id; char *rack; int32_t n_eps; bsim_ep *eps; } bsim_broker;

#define BSIM_MAX_ERRCODE 128

typedef struct bsim_state {
    int32_t broker_id;
    int64_t kraft_epoch, zk_epoch;
    int32_t controller_epoch;          /* ReplicaManager.controllerEpoch; starts at 0 as in Kafka */
    size_t n_parts, cap_parts;
    bsim_part **parts;
    size_t n_mparts, cap_mparts;
    bsim_mpart **mparts;
    size_t n_tids, cap_tids;
    bsim_topic_id *tids;
    size_t n_brokers;
    bsim_broker *brokers;
    int32_t md_controller_id;          /* -1: none */
    bool md_kraft_controller;
    uint64_t req_count[KM_BSIM_APIS][16];
    uint64_t api_versions_count;
    uint64_t err_count[BSIM_MAX_ERRCODE];
    uint64_t rejected, total;
    char last_rejection[512];
    km_bsim_kafka kafka;
    uint64_t lisr_by_type[3], strays, cuts;
    size_t n_logs, cap_logs;
    bsim_log *logs;
    struct bsim_zk *zk;                /* NULL: configs are not read */
    km_bsim_security_stats sec;
} bsim_state;

struct km_bsim {
    struct ev_loop *loop;
    bool own_loop;
    km_net_listener *listener;
    pthread_mutex_t mu;
    pthread_t thread;
    bool threaded;
    struct ev_async *stop_async;
    km_bsim_config cfg;
    char *dump_path;
    struct bsim_conn *conns;           /* open connections (doubly linked) */
    uint64_t rng;                      /* cut_ratio's draws */
    int muted;                         /* control requests still to leave unanswered */
    bool unreachable;                  /* every connection is closed at once */
    struct bsim_peek *peeks;           /* accepted TLS connections not yet past their first byte */
    struct bsim_user *users;           /* SASL users (cfg.sasl_users parsed) */
    size_t n_users;
    char *super_users;                 /* cfg.super_users copied */
    bsim_state st;
};

typedef struct bsim_user { char *name, *password; } bsim_user;

/* One connection's authentication (Kafka's SaslServerAuthenticator / principal). */
typedef struct bsim_auth {
    km_sasl_server *sasl;              /* km_sasl's exchange (no mechanisms: not a SASL listener) */
    char principal[300];               /* "User:ANONYMOUS" until authenticated */
} bsim_auth;

/* bsim_auth.c (called with s->mu held) */
int bsim_auth_config(km_bsim *s, const km_bsim_config *cfg, km_err *err);
void bsim_auth_free_config(km_bsim *s);
int bsim_auth_init(km_bsim *s, bsim_auth *a, km_err *err);
void bsim_auth_free(bsim_auth *a);
/* What the SASL layer does with a request: 1 answered in out (*close_after: then close),
 * 0 not its business (on to KafkaApis), -1 close the connection unanswered (err says why). */
int bsim_auth_serve(km_bsim *s, bsim_auth *a, const km_request_header_view *h, km_reader *r, km_buf *out,
                    km_arena *arena, bool *close_after, km_err *err);
/* bsim_errresp.c: rs (the response struct for api) answers rq (decoded at v) with `code`
 * everywhere, as Kafka's getErrorResponse does. */
int bsim_error_response(int16_t api, int16_t v, const void *rq, int16_t code, void *rs, km_arena *a);
/* KafkaApis' ClusterAction check for controller requests. */
bool bsim_auth_cluster_action(const km_bsim *s, const bsim_auth *a);

/* bsim_state.c: state handlers.  Each decodes nothing: it gets the decoded request
 * and fills the response struct (allocating from arena). */
void bsim_state_init(bsim_state *st, const km_bsim_config *cfg);
void bsim_state_free(bsim_state *st);
int bsim_leader_and_isr(bsim_state *st, int16_t v, const km_leader_and_isr_request *rq,
                        km_leader_and_isr_response *rs, km_arena *a, km_err *err);
int bsim_update_metadata(bsim_state *st, int16_t v, const km_update_metadata_request *rq,
                         km_update_metadata_response *rs, km_arena *a, km_err *err);
int bsim_stop_replica(bsim_state *st, int16_t v, const km_stop_replica_request *rq,
                      km_stop_replica_response *rs, km_arena *a, km_err *err);
void bsim_count_error(bsim_state *st, int16_t code);
void bsim_forget_metadata(bsim_state *st);

/* bsim_api.c: writes the dump with s->mu held. */
int km_bsim_dump_locked(km_bsim *s, const char *path, km_err *err);

/* bsim_json.c */
struct json_t *bsim_state_to_json(const bsim_state *st);

/* bsim_zk.c: a blocking reader of /config/topics/<t> (a broker reads ZooKeeper synchronously too) */
struct bsim_zk *bsim_zk_open(const char *hosts);
void bsim_zk_close(struct bsim_zk *z);
/* Records a new log and the config ZooKeeper holds for its topic now. */
int bsim_note_log(bsim_state *st, const char *topic, int32_t partition, km_uuid topic_id);
void bsim_logs_free(bsim_state *st);

/* bsim_util.c */
char *bsim_strdup(km_str s);
int bsim_ivec_set(bsim_ivec *dst, const int32_t *v, int32_t n);
void bsim_ivec_free(bsim_ivec *v);
bool bsim_ivec_has(const int32_t *v, int32_t n, int32_t x);
bsim_part *bsim_find_part(const bsim_state *st, const char *topic, int32_t partition, size_t *idx);
bsim_mpart *bsim_find_mpart(const bsim_state *st, const char *topic, int32_t partition, size_t *idx);
void bsim_remove_part(bsim_state *st, size_t idx);
void bsim_remove_mpart(bsim_state *st, size_t idx);
int bsim_push(void ***arr, size_t *n, size_t *cap, void *item);

#endif
