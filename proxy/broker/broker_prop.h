/* broker_prop.h - shared by proxy/broker_prop*.c only; not part of km_broker's API. */
#ifndef KM_BROKER_PROP_H
#define KM_BROKER_PROP_H

#include "km_broker.h"

#include <ev.h>
#include <stdarg.h>

typedef struct prop_chan {
    struct km_bprop *p;
    km_bchan *ch;
    int32_t id;
    char *host;                        /* the endpoint it dials, to notice changes */
    uint16_t port;
} prop_chan;

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
};

/* broker_prop.c */
void km_bprop__log(const km_bprop *p, int level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
prop_chan *km_bprop__find(const km_bprop *p, int32_t id);
const km_endpoint *km_bprop__endpoint(const km_bprop *p, const km_broker *b);
int km_bprop__sync_channels(km_bprop *p, int32_t *fresh, size_t *nfresh, km_err *err);
int km_bprop__full_sync(km_bprop *p, prop_chan *pc, km_err *err);
km_i32_list km_bprop__offline(const km_bprop *p, km_i32_list replicas, km_arena *a);
km_bp_part km_bprop__part(const km_bprop *p, const char *topic, km_uuid id, const km_partition *x, km_arena *a);
const km_broker **km_bprop__brokers(const km_bprop *p, size_t *n, km_arena *a);
km_bp_ctl km_bprop__ctl(const km_bprop *p, int32_t broker_id, int8_t type);
/* broker_prop_delta.c: build at the channel's version and submit (dropped if not ready) */
int km_bprop__send_umr(km_bprop *p, prop_chan *pc, const km_bp_ctl *ctl, const km_bp_part *parts, size_t n,
                       const km_broker **brokers, size_t nb, km_err *err);
int km_bprop__send_lisr(km_bprop *p, prop_chan *pc, const km_bp_ctl *ctl, const km_bp_part *parts, size_t n,
                        const km_broker **brokers, size_t nb, km_err *err);
int km_bprop__send_stop(km_bprop *p, prop_chan *pc, const km_bp_ctl *ctl, const km_bp_stop *stops, size_t n,
                        km_err *err);

#endif
