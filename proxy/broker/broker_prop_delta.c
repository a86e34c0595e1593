/* km_bprop: what MigrationPropagator.sendRPCsToBrokersFromMetadataDelta sends for a delta,
 * and the metrics. */
#include "broker_prop.h"
#include "km_metrics.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REQ_ARENA_LIMIT (1024u * 1024u * 1024u)
#define SCRATCH_LIMIT (1024u * 1024u * 1024u)

/* ---- submit helpers ------------------------------------------------------------------------ */

typedef int (*build_fn)(int16_t v, const void *args, km_arena *a, void *out, km_err *err);

/* Builds at the channel's negotiated version into a fresh arena the channel takes over.
 * A channel never negotiated drops nothing of value: its first negotiation brings a catch-up
 * (and pending stops are kept apart).  With ZooKeeper first, the request waits until ZooKeeper
 * holds the image's offset (KRaftMigrationDriver sends RPCs only after its ZK writes). */
static int64_t submit(prop_chan *pc, int16_t api, size_t size, build_fn fn, const void *args, km_err *err)
{
    int16_t v = km_bchan_version(pc->ch, api);
    if (v < 0)
        return 0;
    km_arena a;
    km_arena_init(&a, REQ_ARENA_LIMIT);
    void *rq = km_arena_alloc(&a, size);
    int64_t gate = pc->p->cfg.zk_ordered ? km_image_offset(pc->p->img) : -1, seq = -1;
    if (!rq || fn(v, args, &a, rq, err) || (seq = km_bchan_submit_gated(pc->ch, api, rq, &a, gate, err)) < 0) {
        if (!rq)
            km_fail(err, "broker %d: out of memory for %s", pc->id, km_api_name(api));
        km_arena_free(&a);
        return -1;
    }
    return seq;
}

typedef struct req_args {
    const km_bp_ctl *ctl;
    const km_bp_part *parts;
    const km_bp_stop *stops;
    size_t n, nb;
    const km_broker **brokers;
    const char *listener;
} req_args;

static int build_umr(int16_t v, const void *args, km_arena *a, void *out, km_err *err)
{
    const req_args *r = args;
    return km_bp_update_metadata(v, r->ctl, r->parts, r->n, r->brokers, r->nb, a, out, err);
}

static int build_lisr(int16_t v, const void *args, km_arena *a, void *out, km_err *err)
{
    const req_args *r = args;
    return km_bp_leader_and_isr(v, r->ctl, r->parts, r->n, r->brokers, r->nb, r->listener, a, out, err);
}

static int build_stop(int16_t v, const void *args, km_arena *a, void *out, km_err *err)
{
    const req_args *r = args;
    return km_bp_stop_replica(v, r->ctl, r->stops, r->n, a, out, err);
}

/* A deleted partition's entry (leader -2) stays pending until the broker answers it. */
static int keep_uncached(km_bprop *p, prop_chan *pc, const km_bp_part *parts, size_t n, int64_t seq)
{
    for (size_t i = 0; i < n; i++) {
        km_bp_stop x = { parts[i].topic, parts[i].partition, KM_EPOCH_DURING_DELETE, true };
        if (parts[i].leader == KM_LEADER_DURING_DELETE && km_bprop__stops_add(p, &p->uncached, pc->id, &x, 1, seq))
            return -1;
    }
    return 0;
}

int km_bprop__send_umr(km_bprop *p, prop_chan *pc, const km_bp_ctl *ctl, const km_bp_part *parts, size_t n,
                       const km_broker **brokers, size_t nb, km_err *err)
{
    req_args r = { .ctl = ctl, .parts = parts, .n = n, .brokers = brokers, .nb = nb };
    int64_t seq = submit(pc, KM_API_UPDATE_METADATA, sizeof(km_update_metadata_request), build_umr, &r, err);
    if (seq >= 0 && keep_uncached(p, pc, parts, n, seq))
        return km_fail(err, "broker %d: out of memory keeping %zu partitions' metadata", pc->id, n);
    return seq < 0 ? -1 : 0;
}

int km_bprop__send_lisr(km_bprop *p, prop_chan *pc, const km_bp_ctl *ctl, const km_bp_part *parts, size_t n,
                        const km_broker **brokers, size_t nb, km_err *err)
{
    km_bprop__stops_superseded(p, pc->id, parts, n);
    req_args r = { .ctl = ctl, .parts = parts, .n = n, .brokers = brokers, .nb = nb, .listener = p->listener };
    if (!n)
        return 0;
    return submit(pc, KM_API_LEADER_AND_ISR, sizeof(km_leader_and_isr_request), build_lisr, &r, err) < 0 ? -1 : 0;
}

/* Every stop stays pending until the broker answers a request carrying it. */
int64_t km_bprop__send_stop(km_bprop *p, prop_chan *pc, const km_bp_ctl *ctl, const km_bp_stop *stops, size_t n,
                            km_err *err)
{
    req_args r = { .ctl = ctl, .stops = stops, .n = n };
    int64_t seq = n ? submit(pc, KM_API_STOP_REPLICA, sizeof(km_stop_replica_request), build_stop, &r, err) : 0;
    if (seq >= 0 && km_bprop__stops_add(p, &p->stops, pc->id, stops, n, seq))
        return km_fail(err, "broker %d: out of memory keeping %zu stops", pc->id, n);
    return seq;
}

/* ---- the delta ------------------------------------------------------------------------------ */

typedef struct delta_view {
    km_partition_change *pcs;
    size_t npc;
    km_bp_part *umr;                   /* UpdateMetadata partitions, shared by every target */
    size_t numr;
    int32_t *changed_zk;               /* ZK brokers whose registration changed: they catch up */
    size_t nchanged;
    bool brokers_changed;
    const km_broker **brokers;
    size_t nb;
} delta_view;

static bool has(const int32_t *v, size_t n, int32_t x)
{
    for (size_t i = 0; i < n; i++)
        if (v[i] == x)
            return true;
    return false;
}

static int collect_brokers(const km_delta *d, delta_view *dv, km_arena *a)
{
    size_t it = 0, cap = 16;
    km_broker_change bc;
    dv->changed_zk = km_arena_alloc(a, sizeof *dv->changed_zk * cap);
    while (dv->changed_zk && km_delta_next_broker(d, &it, &bc)) {
        dv->brokers_changed = true;
        if (!bc.new || !bc.new->is_migrating_zk_broker || bc.new->fenced)
            continue;
        if (dv->nchanged == cap) {
            int32_t *grown = km_arena_alloc(a, sizeof *grown * cap * 2);
            if (!grown)
                return -1;
            memcpy(grown, dv->changed_zk, sizeof *grown * cap);
            dv->changed_zk = grown;
            cap *= 2;
        }
        dv->changed_zk[dv->nchanged++] = bc.id;
    }
    return dv->changed_zk ? 0 : -1;
}

/* LeaderAndIsr.duringDelete: leader -2, epochs 0; ControllerEpoch is the ZK one here.  A topic
 * re-created under the same name in this delta lends its id: UpdateMetadata groups partitions
 * by name, and the broker must end with the image's id. */
static km_bp_part deleted_part(const km_bprop *p, const km_partition_change *c, km_arena *a)
{
    const km_topic *again = km_image_topic_by_name(p->img, c->topic_name);
    return (km_bp_part){ .topic = c->topic_name, .topic_id = again ? km_topic_id(again) : (km_uuid){ { 0 } },
                         .partition = c->partition, .controller_epoch = p->zk_epoch,
                         .leader = KM_LEADER_DURING_DELETE, .isr = c->old.isr, .replicas = c->old.replicas,
                         .offline = km_bprop__offline(p, c->old.replicas, a) };
}

/* A deleted partition whose name and index the image holds again (re-created in this delta):
 * the new partition's entry says it all, a -2 entry would delete it from the broker's cache. */
static bool recreated(const km_bprop *p, const km_partition_change *c)
{
    const km_topic *again = c->has_new ? NULL : km_image_topic_by_name(p->img, c->topic_name);
    return again && c->partition < km_topic_partition_count(again);
}

static int collect_partitions(const km_bprop *p, const km_delta *d, delta_view *dv, km_arena *a)
{
    size_t it = 0, cap = 64;
    km_partition_change c;
    dv->pcs = km_arena_alloc(a, sizeof *dv->pcs * cap);
    while (dv->pcs && km_delta_next_partition(d, &it, &c)) {
        if (dv->npc == cap) {
            km_partition_change *grown = km_arena_alloc(a, sizeof *grown * cap * 2);
            if (!grown)
                return -1;
            memcpy(grown, dv->pcs, sizeof *grown * cap);
            dv->pcs = grown;
            cap *= 2;
        }
        dv->pcs[dv->npc++] = c;
    }
    if (!dv->pcs || !(dv->umr = km_arena_alloc(a, sizeof *dv->umr * (dv->npc ? dv->npc : 1))))
        return -1;
    for (size_t i = 0; i < dv->npc; i++) {
        const km_partition_change *x = &dv->pcs[i];
        if (x->has_new)
            dv->umr[dv->numr++] = km_bprop__part(p, x->topic_name, x->topic_id, &x->new, a);
        else if (!recreated(p, x))
            dv->umr[dv->numr++] = deleted_part(p, x, a);
    }
    return 0;
}

/* One channel's stops in batch 2: to the replicas of a deleted topic (-2) and to those a
 * reassignment removed (the current leader epoch). */
static size_t channel_stops(const prop_chan *pc, const delta_view *dv, km_bp_stop *stops)
{
    size_t ns = 0;
    for (size_t i = 0; i < dv->npc; i++) {
        const km_partition_change *c = &dv->pcs[i];
        bool was = c->has_old && has(c->old.replicas.v, (size_t)c->old.replicas.n, pc->id);
        bool is = c->has_new && has(c->new.replicas.v, (size_t)c->new.replicas.n, pc->id);
        if (was && !is)
            stops[ns++] = (km_bp_stop){ c->topic_name, c->partition,
                                        c->has_new ? c->new.leader_epoch : KM_EPOCH_DURING_DELETE, true };
    }
    return ns;
}

/* A changed broker's catch-up lists the live partitions only: the delta's deleted ones (leader -2)
 * join its pending UpdateMetadata entries, which the catch-up sends (km_bprop__uncached_parts), or
 * its cache would keep them - for good on 3.4-3.6.1, whose caches drop a partition only so. Kafka's
 * MigrationPropagator.sendRPCsToBrokersFromMetadataDelta sends them to oldZkBrokers only. */
static int deletions_pending(km_bprop *p, prop_chan *pc, const delta_view *dv)
{
    for (size_t i = 0; i < dv->numr; i++) {
        km_bp_stop x = { dv->umr[i].topic, dv->umr[i].partition, KM_EPOCH_DURING_DELETE, true };
        if (dv->umr[i].leader == KM_LEADER_DURING_DELETE && km_bprop__stops_add(p, &p->uncached, pc->id, &x, 1, 0))
            return -1;
    }
    return 0;
}

/* One channel's share of batch 2.  Its stops go first (Kafka sends them last): StopReplica names
 * partitions without topic ids, so a topic deleted and re-created under the same name must be
 * stopped before its new LeaderAndIsr, or the stop deletes the new log.  A changed broker gets
 * its catch-up instead of the LeaderAndIsr and UpdateMetadata (which cover them). */
static int per_channel(km_bprop *p, prop_chan *pc, const delta_view *dv, bool changed, km_arena *a, km_err *err)
{
    km_bp_part *lisr = km_arena_alloc(a, sizeof *lisr * (dv->npc ? dv->npc : 1));
    km_bp_stop *stops = km_arena_alloc(a, sizeof *stops * (dv->npc ? dv->npc : 1));
    if (!lisr || !stops)
        return km_fail(err, "broker %d: out of memory for a delta of %zu partitions", pc->id, dv->npc);
    size_t ns = channel_stops(pc, dv, stops), nl = 0;
    km_bp_ctl ctl = km_bprop__ctl(p, pc->id, KM_CTL_TYPE_INCREMENTAL);
    if (changed) /* kept pending: the catch-up sends them before its LeaderAndIsr */
        return km_bprop__stops_add(p, &p->stops, pc->id, stops, ns, 0) || deletions_pending(p, pc, dv)
                   ? km_fail(err, "broker %d: out of memory keeping a delta's deletions", pc->id)
                   : km_bprop__catch_up(p, pc, err);
    if (km_bprop__send_stop(p, pc, &ctl, stops, ns, err) < 0)
        return -1;
    for (size_t i = 0; i < dv->npc; i++) {
        const km_partition_change *c = &dv->pcs[i];
        if (c->has_new && has(c->new.replicas.v, (size_t)c->new.replicas.n, pc->id))
            lisr[nl++] = km_bprop__part(p, c->topic_name, c->topic_id, &c->new, a);
    }
    if (km_bprop__send_lisr(p, pc, &ctl, lisr, nl, dv->brokers, dv->nb, err))
        return -1;
    return dv->numr ? km_bprop__send_umr(p, pc, &ctl, dv->umr, dv->numr, dv->brokers, dv->nb, err) : 0;
}

/* Batch 1: channels follow the registrations; the new LiveBrokers (Type 0, as Kafka leaves it)
 * to the unchanged ZK brokers.  A changed broker's UpdateMetadata is in its catch-up. */
static int broker_changes(km_bprop *p, const delta_view *dv, km_err *err)
{
    int rc = km_bprop__sync_channels(p, CATCH_UP_CHANGED, err);
    for (size_t i = 0; !rc && dv->brokers_changed && i < p->n; i++) {
        prop_chan *pc = p->chans[i];
        if (has(dv->changed_zk, dv->nchanged, pc->id))
            continue;
        km_bp_ctl ctl = km_bprop__ctl(p, pc->id, KM_CTL_TYPE_UNKNOWN);
        rc = km_bprop__send_umr(p, pc, &ctl, NULL, 0, dv->brokers, dv->nb, err);
    }
    return rc;
}

static int resync_all(km_bprop *p, km_err *err)
{
    if (km_bprop__sync_channels(p, CATCH_UP_FULL, err))
        return -1;
    for (size_t i = 0; i < p->n; i++)
        km_bchan_resync(p->chans[i]->ch);
    return 0;
}

int km_bprop_publish(km_bprop *p, const km_delta *d, km_err *err)
{
    if (!p->active || p->fenced || km_delta_empty(d))
        return 0;
    if (km_delta_is_snapshot(d))
        return resync_all(p, err);
    km_arena a;
    km_arena_init(&a, SCRATCH_LIMIT);
    delta_view dv = { 0 };
    int rc = -1;
    dv.brokers = km_bprop__brokers(p, &dv.nb, &a);
    if (!dv.brokers || collect_brokers(d, &dv, &a) || collect_partitions(p, d, &dv, &a)) {
        km_fail(err, "propagator: out of memory reading a delta");
        goto out;
    }
    if (broker_changes(p, &dv, err))
        goto out;
    for (size_t i = 0; i < p->n; i++) {
        bool changed = has(dv.changed_zk, dv.nchanged, p->chans[i]->id);
        if ((changed || dv.npc) && per_channel(p, p->chans[i], &dv, changed, &a, err))
            goto out;
    }
    rc = 0;
out:
    km_arena_free(&a);
    return rc;
}

/* ---- metrics ---------------------------------------------------------------------------------- */

static void chan_metrics(km_buf *out, const prop_chan *pc, bool first)
{
    static const char *const apis[3] = { "LeaderAndIsr", "StopReplica", "UpdateMetadata" };
    km_bchan_stats s;
    km_bchan_get_stats(pc->ch, &s);
    char l[128];
    snprintf(l, sizeof l, "broker=\"%d\"", pc->id);
    km_metrics_sample(out, "kmproxy_broker_ready", "gauge", "Channel to the ZK-mode broker is negotiated", l, first,
                      s.ready);
    for (int i = 0; i < 3; i++) {
        snprintf(l, sizeof l, "broker=\"%d\",api=\"%s\"", pc->id, apis[i]);
        km_metrics_sample(out, "kmproxy_broker_requests_sent_total", "counter", "Control requests sent", l,
                          first && !i, (double)s.sent[i]);
        km_metrics_sample(out, "kmproxy_broker_requests_acked_total", "counter", "Control requests answered", l,
                          first && !i, (double)s.acked[i]);
        km_metrics_sample(out, "kmproxy_broker_errors_total", "counter",
                          "Error codes in responses (top level and per partition)", l, first && !i,
                          (double)s.errors[i]);
    }
    for (int c = 0; c < 128; c++) {
        if (!s.error_by_code[c])
            continue;
        snprintf(l, sizeof l, "broker=\"%d\",error=\"%s\"", pc->id, km_broker_err_name((int16_t)(c ? c : -1)));
        km_metrics_sample(out, "kmproxy_broker_error_codes_total", "counter", "Responses' error codes by name", l,
                          false, (double)s.error_by_code[c]);
    }
    snprintf(l, sizeof l, "broker=\"%d\"", pc->id);
    km_metrics_sample(out, "kmproxy_broker_stale_broker_epoch_total", "counter", "STALE_BROKER_EPOCH answers", l,
                      first, (double)s.stale_broker_epoch);
    km_metrics_sample(out, "kmproxy_broker_timeouts_total", "counter", "Requests that timed out", l, first,
                      (double)s.timeouts);
    km_metrics_sample(out, "kmproxy_broker_reconnects_total", "counter", "Connection attempts", l, first,
                      (double)s.connects);
    km_metrics_sample(out, "kmproxy_broker_stale_controller_epoch_total", "counter",
                      "STALE_CONTROLLER_EPOCH answers (ZooKeeper is then asked whose epoch it is)", l, first,
                      (double)s.stale_controller_epoch);
    km_metrics_sample(out, "kmproxy_broker_resent_total", "counter",
                      "Requests sent again after a reconnect or a timeout", l, first, (double)s.resent);
    km_metrics_sample(out, "kmproxy_broker_full_syncs_total", "counter",
                      "Full syncs for what could not be resent (a dropped queue)", l, first, (double)s.full_syncs);
    km_metrics_sample(out, "kmproxy_broker_dropped_total", "counter",
                      "Requests dropped (queue overflow, STALE_BROKER_EPOCH, unencodable)", l, first,
                      (double)s.dropped);
    km_metrics_sample(out, "kmproxy_broker_pending_stops", "gauge",
                      "StopReplica partitions the broker has not answered yet", l, first,
                      (double)km_bprop_pending_stops(pc->p, pc->id));
    km_metrics_sample(out, "kmproxy_broker_auth_failures_total", "counter", "SASL authentications refused", l, first,
                      (double)s.auth_failures);
    km_metrics_sample(out, "kmproxy_broker_sasl_reauthentications_total", "counter",
                      "SASL sessions renewed on the same connection (connections.max.reauth.ms)", l, first,
                      (double)s.reauthentications);
}

void km_bprop_render_metrics(const km_bprop *p, km_buf *out)
{
    km_metrics_sample(out, "kmproxy_broker_channels", "gauge", "Channels to migrating ZK-mode brokers", NULL, true,
                      (double)p->n);
    km_metrics_sample(out, "kmproxy_broker_fenced", "gauge", "A broker answered STALE_CONTROLLER_EPOCH", NULL, true,
                      p->fenced);
    /* Error codes have samples only once a broker answered with one; the family is described anyway. */
    static const char CODES_HEAD[] =
        "# HELP kmproxy_broker_error_codes_total Responses' error codes, by broker and error name\n"
        "# TYPE kmproxy_broker_error_codes_total counter\n";
    if (p->n)
        km_buf_put(out, CODES_HEAD, sizeof CODES_HEAD - 1);
    for (size_t i = 0; i < p->n; i++)
        chan_metrics(out, p->chans[i], i == 0);
}
