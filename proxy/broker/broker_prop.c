/* km_bprop: channels follow the image's migrating ZK brokers; full syncs; life cycle.
 * The per-delta requests are in broker_prop_delta.c. */
#include "broker_prop.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SCRATCH_LIMIT (1024u * 1024u * 1024u)
#define E_STALE_CONTROLLER_EPOCH 11

prop_chan *km_bprop__find(const km_bprop *p, int32_t id)
{
    for (size_t i = 0; i < p->n; i++)
        if (p->chans[i]->id == id)
            return p->chans[i];
    return NULL;
}

const km_endpoint *km_bprop__endpoint(const km_bprop *p, const km_broker *b)
{
    for (int32_t e = 0; e < b->n_endpoints; e++)
        if (!strcmp(b->endpoints[e].name, p->listener))
            return &b->endpoints[e];
    return NULL;
}

/* ---- channel hooks ---------------------------------------------------------------------- */

/* The first negotiation brings what the channel was created for; later calls are remedies
 * for a dropped queue: a full sync. */
static void on_need_full_sync(km_bchan *ch, bool first, void *ud)
{
    (void)ch;
    prop_chan *pc = ud;
    km_err err;
    bool catch_up = first && pc->first == CATCH_UP_CHANGED;
    if (catch_up ? km_bprop__catch_up(pc->p, pc, &err) : km_bprop__full_sync(pc->p, pc, &err))
        km_bprop__log(pc->p, 1, "broker %d: %s: %s", pc->id, catch_up ? "catch-up" : "full sync", err.msg);
}

static int32_t on_controller_epoch(km_bchan *ch, void *ud)
{
    (void)ch;
    prop_chan *pc = ud;
    km_bprop *p = pc->p;
    return p->cfg.zk_controller_epoch ? p->cfg.zk_controller_epoch(p, p->cfg.ud) : p->zk_epoch;
}

static void on_done(km_bchan *ch, int16_t api, uint64_t seq, int16_t top, void *ud)
{
    (void)ch;
    prop_chan *pc = ud;
    if (api == KM_API_STOP_REPLICA && top == 0)
        km_bprop__stops_answered(&pc->p->stops, pc->id, (int64_t)seq);
    if (api == KM_API_UPDATE_METADATA && top == 0)
        km_bprop__stops_answered(&pc->p->uncached, pc->id, (int64_t)seq);
    pc->answered = true;
    if (top != E_STALE_CONTROLLER_EPOCH)
        pc->rejected_epoch = -1; /* answered at our epoch (whatever else it said): it follows us again */
}

/* Kafka's controller logs STALE_CONTROLLER_EPOCH and goes on; ZooKeeper says whether another
 * controller really took over (the owner reads /controller_epoch and calls km_bprop_fence). */
static void on_stale_controller_epoch(km_bchan *ch, int32_t sent_epoch, void *ud)
{
    (void)ch;
    prop_chan *pc = ud;
    km_bprop *p = pc->p;
    if (pc->rejected_epoch != sent_epoch) /* once per epoch, not once per request */
        km_bprop__log(p, 2, "broker %d: STALE_CONTROLLER_EPOCH for controller epoch %d; asking ZooKeeper", pc->id,
                      sent_epoch);
    pc->rejected_epoch = sent_epoch;
    p->cfg.stale_controller_epoch(p, pc->id, sent_epoch, p->cfg.ud);
}

static const char *on_topic_name(km_bchan *ch, km_uuid id, void *ud)
{
    (void)ch;
    prop_chan *pc = ud;
    const km_topic *t = pc->p->img ? km_image_topic_by_id(pc->p->img, id) : NULL;
    return t ? km_topic_name(t) : NULL;
}

static void on_fenced_timer(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    km_bprop *p = w->data;
    if (p->cfg.fenced)
        p->cfg.fenced(p, p->fenced_by, p->cfg.ud);
}

/* Runs inside a channel's frame callback: stop (never free) channels, and tell the owner
 * from a fresh loop iteration so it may tear everything down. */
static void on_fenced(km_bchan *ch, void *ud)
{
    prop_chan *pc = ud;
    (void)ch;
    km_bprop_fence(pc->p, pc->id);
}

void km_bprop_fence(km_bprop *p, int32_t broker_id)
{
    if (p->fenced)
        return;
    p->fenced = true;
    p->fenced_by = broker_id;
    for (size_t i = 0; i < p->n; i++)
        km_bchan_stop(p->chans[i]->ch);
    ev_timer_start(p->loop, &p->fenced_timer);
}

/* ---- channel set ----------------------------------------------------------------------------- */

static int add_chan(km_bprop *p, const km_broker *b, const km_endpoint *ep, prop_catch_up first, km_err *err)
{
    static const km_bchan_hooks proto = { .need_full_sync = on_need_full_sync,
                                          .controller_epoch = on_controller_epoch, .done = on_done,
                                          .fenced = on_fenced, .topic_name = on_topic_name };
    prop_chan *pc = calloc(1, sizeof *pc);
    if (!pc || !(pc->host = strdup(ep->host)))
        return free(pc), km_fail(err, "broker %d: out of memory", b->id);
    pc->p = p;
    pc->id = b->id;
    pc->port = ep->port;
    pc->first = first;
    pc->rejected_epoch = -1;
    km_bchan_hooks h = proto;
    h.ud = pc;
    if (p->cfg.stale_controller_epoch)
        h.stale_controller_epoch = on_stale_controller_epoch;
    char client_id[16]; /* ControllerChannelManager: NetworkClient(..., config.brokerId.toString, ...) */
    snprintf(client_id, sizeof client_id, "%d", p->cfg.controller_id);
    km_bchan_config cfg = { .broker_id = b->id, .host = ep->host, .port = ep->port, .net = p->cfg.net,
                            .sasl = p->cfg.sasl, .client_id = client_id,
                            .request_timeout = p->cfg.request_timeout, .backoff_base = p->cfg.backoff_base,
                            .backoff_max = p->cfg.backoff_max, .max_queue = p->cfg.max_queue,
                            .capture = p->cfg.capture, .log = p->cfg.log, .log_ud = p->cfg.log_ud };
    if (p->n == p->cap) {
        size_t ncap = p->cap ? p->cap * 2 : 8;
        prop_chan **grown = realloc(p->chans, ncap * sizeof *grown);
        if (!grown)
            return free(pc->host), free(pc), km_fail(err, "broker %d: out of memory", b->id);
        p->chans = grown;
        p->cap = ncap;
    }
    if (!(pc->ch = km_bchan_new(p->loop, &cfg, &h, err)))
        return free(pc->host), free(pc), -1;
    p->chans[p->n++] = pc;
    if (p->cfg.zk_ordered) {
        km_bchan_hold(pc->ch, p->holding);
        km_bchan_release(pc->ch, p->zk_holds);
    }
    km_bprop__log(p, 3, "broker %d: channel to %s:%u", b->id, ep->host, ep->port);
    return 0;
}

static void remove_chan(km_bprop *p, size_t i)
{
    prop_chan *pc = p->chans[i];
    km_bprop__log(p, 3, "broker %d: channel closed", pc->id);
    km_bchan_free(pc->ch);
    km_bprop__stops_forget_seqs(&p->stops, pc->id);
    km_bprop__stops_forget_seqs(&p->uncached, pc->id);
    free(pc->host);
    free(pc);
    p->chans[i] = p->chans[--p->n];
}

static bool wanted(const km_bprop *p, const km_broker *b, const prop_chan *pc)
{
    const km_endpoint *ep = b ? km_bprop__endpoint(p, b) : NULL;
    if (!b || !b->is_migrating_zk_broker || b->fenced || !ep)
        return false;
    return !pc || (!strcmp(pc->host, ep->host) && pc->port == ep->port);
}

/* MigrationPropagator.publishMetadata: a channel per unfenced migrating ZK broker; an endpoint
 * change means a new channel (Kafka's Broker equality covers endpoints). */
int km_bprop__sync_channels(km_bprop *p, prop_catch_up first, km_err *err)
{
    for (size_t i = 0; i < p->n;) {
        if (wanted(p, km_image_broker(p->img, p->chans[i]->id), p->chans[i]))
            i++;
        else
            remove_chan(p, i);
    }
    size_t it = 0;
    const km_broker *b;
    while ((b = km_image_next_broker(p->img, &it))) {
        if (!km_bprop__find(p, b->id) && wanted(p, b, NULL) && add_chan(p, b, km_bprop__endpoint(p, b), first, err))
            return -1;
    }
    return 0;
}

/* ---- full sync ---------------------------------------------------------------------------------- */

/* Replicas with no registration at all (MigrationControllerChannelContext.isReplicaOnline). */
km_i32_list km_bprop__offline(const km_bprop *p, km_i32_list replicas, km_arena *a)
{
    int32_t *v = km_arena_alloc(a, sizeof *v * (size_t)(replicas.n > 0 ? replicas.n : 1));
    int32_t n = 0;
    for (int32_t i = 0; v && i < replicas.n; i++)
        if (!km_image_broker(p->img, replicas.v[i]))
            v[n++] = replicas.v[i];
    return (km_i32_list){ v, n };
}

km_bp_part km_bprop__part(const km_bprop *p, const char *topic, km_uuid id, const km_partition *x, km_arena *a)
{
    return (km_bp_part){ .topic = topic, .topic_id = id, .partition = x->id,
                         .controller_epoch = km_image_epoch(p->img), .leader = x->leader,
                         .leader_epoch = x->leader_epoch, .partition_epoch = x->partition_epoch,
                         .leader_recovery_state = x->leader_recovery_state, .is_new = true, .isr = x->isr,
                         .replicas = x->replicas, .adding = x->adding_replicas, .removing = x->removing_replicas,
                         .offline = km_bprop__offline(p, x->replicas, a) };
}

/* Every registration: LiveBrokers carries ZK and KRaft brokers alike (and, as in Kafka 3.9's
 * liveOrShuttingDownBrokers, fenced ones too). */
const km_broker **km_bprop__brokers(const km_bprop *p, size_t *n, km_arena *a)
{
    size_t count = km_image_broker_count(p->img), it = 0, k = 0;
    const km_broker **v = km_arena_alloc(a, sizeof *v * (count ? count : 1));
    const km_broker *b;
    while (v && k < count && (b = km_image_next_broker(p->img, &it)))
        v[k++] = b;
    *n = k;
    return v;
}

/* Every partition of the image, with room for `extra` more after them. */
static km_bp_part *all_parts(const km_bprop *p, size_t *n, size_t extra, km_arena *a)
{
    size_t total = km_image_partition_count(p->img), it = 0, k = 0;
    km_bp_part *v = km_arena_alloc(a, sizeof *v * (total + extra + 1));
    const km_topic *t;
    while (v && (t = km_image_next_topic(p->img, &it))) {
        int32_t np = km_topic_partition_count(t);
        for (int32_t i = 0; i < np && k < total; i++) {
            km_partition x;
            if (km_topic_partition(t, i, &x))
                v[k++] = km_bprop__part(p, km_topic_name(t), km_topic_id(t), &x, a);
        }
    }
    *n = k;
    return v;
}

km_bp_ctl km_bprop__ctl(const km_bprop *p, int32_t broker_id, int8_t type)
{
    const km_broker *b = km_image_broker(p->img, broker_id);
    return (km_bp_ctl){ .controller_id = p->cfg.controller_id, .controller_epoch = p->zk_epoch,
                        .broker_epoch = b ? b->epoch : -1, .type = type, .kraft = true };
}

/* The image to one broker: UpdateMetadata with every partition (and leader -2 for deleted ones
 * it has not acknowledged), pending stops, LeaderAndIsr of its partitions at `type` (FULL: a
 * full sync; INCREMENTAL: a changed broker's catch-up). */
static int send_image(km_bprop *p, prop_chan *pc, int8_t type, km_err *err)
{
    if (!p->active || p->fenced || km_bchan_version(pc->ch, KM_API_UPDATE_METADATA) < 0)
        return 0;
    km_arena scratch;
    km_arena_init(&scratch, SCRATCH_LIMIT);
    size_t np = 0, nb = 0, nh = 0;
    km_bp_part *parts = all_parts(p, &np, km_bprop__uncached_count(p, pc->id), &scratch);
    const km_broker **brokers = km_bprop__brokers(p, &nb, &scratch);
    km_bp_part *hosted = km_arena_alloc(&scratch, sizeof *hosted * (np ? np : 1));
    int rc = -1;
    if (!parts || !brokers || !hosted) {
        km_fail(err, "out of memory building a full sync of %zu partitions", np);
        goto out;
    }
    for (size_t i = 0; i < np; i++)
        for (int32_t r = 0; r < parts[i].replicas.n; r++)
            if (parts[i].replicas.v[r] == pc->id)
                hosted[nh++] = parts[i];
    km_bp_ctl ctl = km_bprop__ctl(p, pc->id, type == KM_CTL_TYPE_FULL ? KM_CTL_TYPE_FULL : KM_CTL_TYPE_UNKNOWN);
    km_bp_ctl lctl = km_bprop__ctl(p, pc->id, type);
    km_bprop__stops_superseded(p, pc->id, hosted, nh); /* it hosts them again: no stop before */
    size_t nu = np + km_bprop__uncached_parts(p, pc->id, parts + np); /* deletions it may still cache */
    if (km_bprop__send_umr(p, pc, &ctl, parts, nu, brokers, nb, err) || km_bprop__stops_resend(p, pc, err) ||
        km_bprop__send_lisr(p, pc, &lctl, hosted, nh, brokers, nb, err))
        goto out;
    km_bprop__log(p, 3, "broker %d: %s queued (%zu partitions, %zu hosted)", pc->id,
                  type == KM_CTL_TYPE_FULL ? "full sync" : "catch-up", np, nh);
    rc = 0;
out:
    km_arena_free(&scratch);
    return rc;
}

/* A full sync: UpdateMetadata(Type=FULL) with every partition, the broker's pending stops,
 * LeaderAndIsr(Type=FULL) with its partitions. */
int km_bprop__full_sync(km_bprop *p, prop_chan *pc, km_err *err)
{
    return send_image(p, pc, KM_CTL_TYPE_FULL, err);
}

/* MigrationPropagator.sendRPCsToBrokersFromMetadataDelta for a changed ZK broker: batch 1's
 * UpdateMetadata with every partition (Type 0), then batch 2's INCREMENTAL LeaderAndIsr of its
 * partitions with isNew=true.  Its pending stops go in between: they may name a partition of a
 * topic re-created under the same name, whose LeaderAndIsr must come after. */
int km_bprop__catch_up(km_bprop *p, prop_chan *pc, km_err *err)
{
    return send_image(p, pc, KM_CTL_TYPE_INCREMENTAL, err);
}

/* ---- life cycle ------------------------------------------------------------------------------------ */

void km_bprop__log(const km_bprop *p, int level, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (p->cfg.log)
        p->cfg.log(level, msg, p->cfg.log_ud);
    else if (level <= 2)
        fprintf(stderr, "kmproxy: %s\n", msg);
}

km_bprop *km_bprop_new(struct ev_loop *loop, const km_bprop_config *cfg, km_err *err)
{
    km_bprop *p = calloc(1, sizeof *p);
    if (!p)
        return km_fail(err, "propagator: out of memory"), NULL;
    p->loop = loop;
    p->cfg = *cfg;
    p->listener = strdup(cfg->listener ? cfg->listener : "PLAINTEXT");
    if (!p->listener) {
        free(p);
        return km_fail(err, "propagator: out of memory"), NULL;
    }
    p->cfg.listener = p->listener;
    p->zk_holds = -1;
    p->holding = cfg->zk_ordered; /* until the owner says what ZooKeeper holds */
    ev_timer_init(&p->fenced_timer, on_fenced_timer, 0, 0);
    p->fenced_timer.data = p;
    return p;
}

void km_bprop_deactivate(km_bprop *p)
{
    while (p->n)
        remove_chan(p, p->n - 1);
    p->active = false;
    p->img = NULL;
}

void km_bprop_free(km_bprop *p)
{
    if (!p)
        return;
    km_bprop_deactivate(p);
    km_bprop__stops_free(&p->stops);
    km_bprop__stops_free(&p->uncached);
    ev_timer_stop(p->loop, &p->fenced_timer);
    free(p->chans);
    free(p->listener);
    free(p);
}

int km_bprop_activate(km_bprop *p, const km_image *img, int32_t zk_controller_epoch, km_err *err)
{
    if (p->fenced)
        return km_fail(err, "propagator: fenced by broker %d (STALE_CONTROLLER_EPOCH); make a new one",
                       p->fenced_by);
    p->img = img;
    p->zk_epoch = zk_controller_epoch;
    p->active = true;
    /* channels that survive from an earlier activation resync; new ones sync once connected */
    for (size_t i = 0; i < p->n; i++)
        km_bchan_resync(p->chans[i]->ch);
    return km_bprop__sync_channels(p, CATCH_UP_FULL, err);
}

int km_bprop_reconfigure(km_bprop *p, const km_net_opts *net, const km_bchan_sasl *sasl, km_err *err)
{
    for (size_t i = 0; i < p->n; i++)
        if (km_bchan_reconfigure(p->chans[i]->ch, net, sasl, err))
            return -1;
    p->cfg.net.tls = net->tls;
    p->cfg.net.tls_name = net->tls_name;
    p->cfg.sasl = *sasl;
    km_bprop__log(p, 3, "%zu broker channels reconfigured", p->n);
    return 0;
}

void km_bprop_zk_holds(km_bprop *p, int64_t offset)
{
    if (offset <= p->zk_holds)
        return;
    p->zk_holds = offset;
    for (size_t i = 0; i < p->n; i++)
        km_bchan_release(p->chans[i]->ch, offset);
}

void km_bprop_hold(km_bprop *p, bool hold)
{
    p->holding = hold;
    for (size_t i = 0; i < p->n; i++)
        km_bchan_hold(p->chans[i]->ch, hold);
}

bool km_bprop_active(const km_bprop *p) { return p->active; }
bool km_bprop_fenced(const km_bprop *p) { return p->fenced; }
size_t km_bprop_channel_count(const km_bprop *p) { return p->n; }

km_bchan *km_bprop_channel(km_bprop *p, int32_t broker_id)
{
    prop_chan *pc = km_bprop__find(p, broker_id);
    return pc ? pc->ch : NULL;
}

size_t km_bprop_pending(const km_bprop *p)
{
    size_t n = 0;
    for (size_t i = 0; i < p->n; i++)
        n += km_bchan_pending(p->chans[i]->ch);
    return n;
}

size_t km_bprop_ready(const km_bprop *p)
{
    size_t n = 0;
    for (size_t i = 0; i < p->n; i++)
        n += km_bchan_ready(p->chans[i]->ch) && p->chans[i]->answered && p->chans[i]->rejected_epoch < 0;
    return n;
}

bool km_bprop_channel_status(const km_bprop *p, size_t i, km_bprop_chan_status *out)
{
    if (i >= p->n)
        return false;
    const prop_chan *pc = p->chans[i];
    *out = (km_bprop_chan_status){.broker_id = pc->id, .connected = km_bchan_ready(pc->ch),
                                  .rejected_epoch = pc->rejected_epoch};
    return true;
}

km_bchan *km_bprop_channel_at(km_bprop *p, size_t i, const char **host, uint16_t *port)
{
    if (i >= p->n)
        return NULL;
    if (host)
        *host = p->chans[i]->host;
    if (port)
        *port = p->chans[i]->port;
    return p->chans[i]->ch;
}
