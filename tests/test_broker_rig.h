/* test_broker_rig.h - a `metadata gen` log, simulated ZK-mode brokers and a propagator on one
 * libev loop, for the end-to-end tests and the benchmark.  The brokers are re-registered in the
 * log at their simulators' loopback ports (as a restarted ZK broker would register again). */
#ifndef KM_TEST_BROKER_RIG_H
#define KM_TEST_BROKER_RIG_H

#include "km_broker.h"
#include "km_brokersim.h"
#include "km_image.h"
#include "km_metalog.h"

#include <stdbool.h>

#define BRIG_MAX_SIMS 8
#define BRIG_CONTROLLER 3000

typedef struct brig_opts {
    int brokers, topics, partitions, replication;
    int64_t leader_changes;
    const char *max_versions;          /* for every simulator ("" or NULL: the codec's maxima) */
    struct km_capture *capture;
    int32_t zk_epoch;                  /* ControllerEpoch; 0: 7 */
    double request_timeout;            /* 0: 10 s */
    size_t max_queue;                  /* 0: km_bchan's default */
    struct km_tls_ctx *tls_server, *tls_client; /* both or neither: every broker connection is TLS */
    km_bsim_kafka kafka;               /* every simulator's rules */
    km_bsim_kafka kafka_odd;           /* odd broker ids' rules instead, when not the default */
    const char *sim_zk;                /* simulators read topic configs from this ZooKeeper */
    double cut_ratio;                  /* simulators cut this share of control requests */
} brig_opts;

typedef struct brig {
    struct ev_loop *loop;
    brig_opts o;
    char *tmp, logdir[512];
    km_image *img;
    km_image_follow *follow;
    km_delta *delta;
    km_metalog_writer *w;
    km_bsim *sims[BRIG_MAX_SIMS];
    int nsims;
    km_bprop *prop;
    int32_t zk_epoch;                  /* what the brokers must hold as ControllerEpoch */
    int32_t controller_id;             /* ... and as the controller id (BRIG_CONTROLLER) */
    uint64_t deltas;
    char why[1024];                    /* the last mismatch or failure */
    bool failed;                       /* a rig operation failed (why says which) */
    /* what old versions cannot carry, so the check does not expect it */
    bool no_lisr_topic_ids, no_umr_topic_ids, no_umr_kraft;
    /* Set when something else (the daemon) propagates: nothing is queued or in flight to any
     * broker.  brig_converged then asks it instead of r->prop's channels. */
    bool (*external_idle)(struct brig *r);
    void *ud;
} brig;

/* Generates the log, starts the simulators, re-registers the brokers, loads the image and
 * creates (not activates) the propagator.  false + r->why on failure. */
bool brig_init(brig *r, const brig_opts *o);
void brig_free(brig *r);
/* Adds a simulator for a new broker id and registers it (unfenced, migrating). */
bool brig_add_broker(brig *r, int32_t id, int64_t epoch, const char *max_versions);
/* Same; migrating false registers a KRaft broker (it must get no RPCs, only appear in LiveBrokers). */
bool brig_add_broker_ex(brig *r, int32_t id, int64_t epoch, const char *max_versions, bool migrating);
/* Registers broker id at 127.0.0.1:port without a simulator (e.g. a black hole). */
bool brig_register(brig *r, int32_t id, int64_t epoch, uint16_t port, bool migrating);
/* Fills a registration of broker id at 127.0.0.1:port (one PLAINTEXT endpoint in *ep, the
 * metadata.version feature in *ft), e.g. to append it in one batch with other records. */
void brig_registration(int32_t id, int64_t epoch, uint16_t port, bool migrating, km_register_broker_record *rec,
                       km_register_broker_record_broker_endpoint *ep, km_register_broker_record_broker_feature *ft);
bool brig_activate(brig *r);
/* Appends one metadata record (at the codec's highest version) as its own batch. */
bool brig_append(brig *r, const km_message_desc *md, const void *msg);
/* Appends n records as one batch (one delta). */
bool brig_append_batch(brig *r, const km_message_desc *const *mds, const void *const *msgs, size_t n);
/* Moves the first follower of t-p to `to` (a completed reassignment: replicas and ISR set, the
 * leader kept so the leader epoch moves on, as Kafka's controller does).  -1: failed, else the
 * broker moved away from. */
int32_t brig_reassign(brig *r, const km_topic *t, int32_t p, int32_t to);
bool brig_remove_topic(brig *r, const km_topic *t);
/* A new leader epoch for t-p, the same leader (one batch). */
bool brig_bump_leader_epoch(brig *r, const km_topic *t, int32_t p);
/* Deletes t and creates it again under its name in one batch (one delta): a new id (in *new_id),
 * the same replicas, ISR and leaders at epoch 0 (its first 8 partitions). */
bool brig_recreate_topic(brig *r, const km_topic *t, km_uuid *new_id);
/* LeaderAndIsr requests of Type `type` (0, 1, 2) a simulator applied. */
long long brig_lisr_count(brig *r, int32_t broker, int type);
/* Reads what the log has and publishes each delta. */
bool brig_pump(brig *r);
/* Runs the loop (pumping the log) until pred holds or `seconds` pass (a guard against hangs,
 * not an assertion about speed). */
bool brig_run_until(brig *r, bool (*pred)(brig *r), double seconds);
/* Every simulator's state equals the image (and nothing is in flight).  Sets r->why if not. */
bool brig_converged(brig *r);
/* No simulator hosts a partition (log) the image does not give it.  Sets r->why if not. */
bool brig_no_strays(brig *r);
km_bsim *brig_sim(brig *r, int32_t id);
/* A topic's id by name (zero if absent). */
km_uuid brig_topic_id(brig *r, const char *name);

#endif
