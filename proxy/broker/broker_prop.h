/* broker_prop.h - shared by proxy/broker_prop*.c only; not part of km_broker's API. */
#ifndef KM_BROKER_PROP_H
#define KM_BROKER_PROP_H

#include "km_broker.h"

#include <ev.h>
#include <stdarg.h>

typedef enum prop_catch_up {
    CATCH_UP_FULL,                     /* activation: the whole image (Type=FULL) */
    CATCH_UP_CHANGED,                  /* a changed broker: all metadata, its own partitions (INCREMENTAL) */
} prop_catch_up;

typedef struct prop_chan {
    struct km_bprop *p;
    km_bchan *ch;
    int32_t id;
    char *host;                        /* the endpoint it dials, to notice changes */
    uint16_t port;
    prop_catch_up first;               /* what its first negotiation brings */
    int32_t rejected_epoch;            /* its last answer was STALE_CONTROLLER_EPOCH to this epoch; -1: not */
    bool answered;                     /* it answered a request: connected is not yet up to date */
} prop_chan;

/* A StopReplica the broker has not answered yet (partition, deletePartition, epoch). */
typedef struct pstop {
    char *topic;
    int32_t partition, epoch;
    bool del;
    int64_t seq;                       /* the channel's request carrying it last; 0: none in flight */
} pstop;

typedef struct pstop_set {
    int32_t broker;
    pstop *v;
    size_t n, cap;
    uint64_t evicted;                  /* oldest ones forgotten at the bound */
    uint32_t *slots;                   /* open-addressing index of v by (topic, partition): i + 1, 0 free */
    size_t nslots;
    bool stale;                        /* entries moved or went: rebuilt before the next lookup */
} pstop_set;

typedef struct pstop_sets {
    pstop_set *v;                      /* by broker id */
    size_t n, cap;
} pstop_sets;

#define BPROP_MAX_PENDING_STOPS 100000 /* per broker and kind */

struct km_bprop {
    struct ev_loop *loop;
    km_bprop_config cfg;
    char *listener;
    const km_image *img;
    int32_t zk_epoch;
    bool active, fenced;
    int32_t fenced_by;
    ev_timer fenced_timer;
    prop_chan **chans;
    size_t n, cap;
    /* Both survive channels, reconnects and full syncs.  stops: StopReplica not answered yet;
     * uncached: a deleted partition's UpdateMetadata entry (leader -2) not answered yet (a 3.4
     * broker's cache drops it only so: a FULL UpdateMetadata does not there). */
    pstop_sets stops, uncached;
    int64_t zk_holds;                  /* zk_ordered: the offset ZooKeeper is confirmed to hold */
    bool holding;                      /* zk_ordered: ZooKeeper is re-syncing */
};

/* broker_prop.c */
void km_bprop__log(const km_bprop *p, int level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
prop_chan *km_bprop__find(const km_bprop *p, int32_t id);
const km_endpoint *km_bprop__endpoint(const km_bprop *p, const km_broker *b);
/* New channels get `first` as their first catch-up. */
int km_bprop__sync_channels(km_bprop *p, prop_catch_up first, km_err *err);
int km_bprop__full_sync(km_bprop *p, prop_chan *pc, km_err *err);
/* A changed broker (MigrationPropagator's changedZkBrokers): UpdateMetadata with every
 * partition, its pending stops, an INCREMENTAL LeaderAndIsr of its own partitions. */
int km_bprop__catch_up(km_bprop *p, prop_chan *pc, km_err *err);
/* broker_prop_stops.c */
int km_bprop__stops_add(km_bprop *p, pstop_sets *ss, int32_t broker, const km_bp_stop *s, size_t n, int64_t seq);
void km_bprop__stops_answered(pstop_sets *ss, int32_t broker, int64_t seq);
void km_bprop__stops_forget_seqs(pstop_sets *ss, int32_t broker);
void km_bprop__stops_superseded(km_bprop *p, int32_t broker, const km_bp_part *parts, size_t n);
int km_bprop__stops_resend(km_bprop *p, prop_chan *pc, km_err *err);
/* The deleted partitions broker may still cache and the image does not hold again, as
 * UpdateMetadata entries (leader -2), appended to parts (room for km_bprop__uncached_count). */
size_t km_bprop__uncached_count(const km_bprop *p, int32_t broker);
size_t km_bprop__uncached_parts(const km_bprop *p, int32_t broker, km_bp_part *parts);
void km_bprop__stops_free(pstop_sets *ss);
km_i32_list km_bprop__offline(const km_bprop *p, km_i32_list replicas, km_arena *a);
km_bp_part km_bprop__part(const km_bprop *p, const char *topic, km_uuid id, const km_partition *x, km_arena *a);
const km_broker **km_bprop__brokers(const km_bprop *p, size_t *n, km_arena *a);
km_bp_ctl km_bprop__ctl(const km_bprop *p, int32_t broker_id, int8_t type);
/* broker_prop_delta.c: build at the channel's version and submit (dropped if not ready) */
int km_bprop__send_umr(km_bprop *p, prop_chan *pc, const km_bp_ctl *ctl, const km_bp_part *parts, size_t n,
                       const km_broker **brokers, size_t nb, km_err *err);
int km_bprop__send_lisr(km_bprop *p, prop_chan *pc, const km_bp_ctl *ctl, const km_bp_part *parts, size_t n,
                        const km_broker **brokers, size_t nb, km_err *err);
/* Returns the request's sequence number, 0 when the channel dropped it, -1 on an error. */
int64_t km_bprop__send_stop(km_bprop *p, prop_chan *pc, const km_bp_ctl *ctl, const km_bp_stop *stops, size_t n,
                            km_err *err);

#endif
