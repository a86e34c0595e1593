/* Control-request builders: what AbstractControllerBrokerRequestBatch and the request
 * Builders of Kafka 3.9 put on the wire, for every version a ZK-mode broker may speak. */
#include "km_broker.h"

#include <librdkafka/rdkafka.h>
#include <stddef.h>
#include <string.h>

const char *km_broker_err_name(int16_t code)
{
    /* librdkafka's positive codes are Kafka's; -1 is UNKNOWN in both */
    return rd_kafka_err2name((rd_kafka_resp_err_t)code);
}

/* Requests outlive the image entities they describe (they wait in a channel queue while
 * the image moves on), so every list and string is copied into the request's arena.
 * A failed copy leaves a null string / empty list and sets *oom. */
static km_str copy_str(km_arena *a, const char *s, bool *oom)
{
    if (!s)
        return km_cstr(NULL);
    size_t n = strlen(s);
    char *p = km_arena_alloc(a, n + 1);
    if (!p) {
        *oom = true;
        return km_cstr("");
    }
    memcpy(p, s, n + 1);
    return (km_str){ p, (int32_t)n };
}

static int32_t *copy_ints(km_arena *a, km_i32_list l, bool *oom)
{
    if (l.n <= 0)
        return NULL;
    int32_t *p = km_arena_alloc(a, sizeof *p * (size_t)l.n);
    if (p)
        memcpy(p, l.v, sizeof *p * (size_t)l.n);
    else
        *oom = true;
    return p;
}

#define SET_INTS(dst, list) ((dst).items = copy_ints(a, (list), oom), (dst).count = (dst).items ? (list).n : 0)

/* The last topic name copied, so partitions of one topic share one copy. */
typedef struct name_cache { const char *src; km_str copy; } name_cache;

static km_str topic_name(km_arena *a, name_cache *nc, const char *t, bool *oom)
{
    if (nc->src != t && (!nc->src || strcmp(nc->src, t))) {
        nc->src = t;
        nc->copy = copy_str(a, t, oom);
    }
    return nc->copy;
}

/* Topic of each part as a group index (first appearance order); returns the group count. */
static size_t group_topics(const km_bp_part *parts, const km_bp_stop *stops, size_t n, size_t *group,
                           size_t *first)
{
    size_t ng = 0;
    for (size_t i = 0; i < n; i++) {
        const char *t = parts ? parts[i].topic : stops[i].topic;
        size_t g = ng;
        /* partitions of a topic usually come together: try the last group first */
        if (ng && !strcmp(t, parts ? parts[first[ng - 1]].topic : stops[first[ng - 1]].topic))
            g = ng - 1;
        for (size_t k = 0; g == ng && k < ng; k++)
            if (!strcmp(t, parts ? parts[first[k]].topic : stops[first[k]].topic))
                g = k;
        if (g == ng)
            first[ng++] = i;
        group[i] = g;
    }
    return ng;
}

static int scratch(km_arena *a, size_t n, size_t **group, size_t **first, size_t **count)
{
    size_t m = n ? n : 1;
    *group = km_arena_alloc(a, sizeof **group * m);
    *first = km_arena_alloc(a, sizeof **first * m);
    *count = km_arena_alloc(a, sizeof **count * m);
    return *group && *first && *count ? 0 : -1;
}

static void count_groups(const size_t *group, size_t n, size_t *count)
{
    memset(count, 0, sizeof *count * (n ? n : 1));
    for (size_t i = 0; i < n; i++)
        count[group[i]]++;
}

/* ---- LeaderAndIsr ----------------------------------------------------------------------- */

static void lisr_state(int16_t v, const km_bp_part *p, km_leader_and_isr_request_partition_state *ps, km_arena *a,
                       name_cache *nc, bool *oom)
{
    memset(ps, 0, sizeof *ps);
    ps->topic_name = topic_name(a, nc, p->topic, oom);
    ps->partition_index = p->partition;
    ps->controller_epoch = p->controller_epoch;
    ps->leader = p->leader;
    ps->leader_epoch = p->leader_epoch;
    ps->partition_epoch = p->partition_epoch;
    SET_INTS(ps->isr, p->isr);
    SET_INTS(ps->replicas, p->replicas);
    SET_INTS(ps->adding_replicas, p->adding);
    SET_INTS(ps->removing_replicas, p->removing);
    ps->is_new = p->is_new;
    /* not ignorable: Kafka sets it only where the version has it (metadata.version 3.2+) */
    ps->leader_recovery_state = v >= 6 ? p->leader_recovery_state : 0;
}

/* Where the grouping below finds its fields in the two requests' generated structs (their
 * partition arrays share km_array_any's layout, so one function serves both). */
typedef struct group_layout {
    size_t ts_size, ts_name, ts_id, ts_parts;   /* the topic state struct */
    size_t ps_size, ps_name;                    /* the partition state struct */
} group_layout;

/* Groups ps[0..n) (one per parts[i]) under one topic state per topic, in order of first
 * appearance, into the request's topic-state array at `out` (km_array_any's layout). */
static int group_by_topic(const km_bp_part *parts, size_t n, const void *ps, const group_layout *L, km_arena *a,
                          void *out)
{
    size_t *group, *first, *count;
    if (scratch(a, n, &group, &first, &count))
        return -1;
    size_t ng = group_topics(parts, NULL, n, group, first);
    char *ts = km_arena_alloc(a, L->ts_size * (ng ? ng : 1));  /* zeroed */
    if (!ts)
        return -1;
    count_groups(group, n, count);
    for (size_t g = 0; g < ng; g++) {
        char *t = ts + g * L->ts_size;
        km_array_any items = {0, km_arena_alloc(a, L->ps_size * count[g])};
        if (!items.items)
            return -1;
        memcpy(t + L->ts_name, (const char *)ps + first[g] * L->ps_size + L->ps_name, sizeof(km_str));
        memcpy(t + L->ts_id, &parts[first[g]].topic_id, sizeof(km_uuid));
        memcpy(t + L->ts_parts, &items, sizeof items);
    }
    for (size_t i = 0; i < n; i++) {
        km_array_any items;
        char *t = ts + group[i] * L->ts_size;
        memcpy(&items, t + L->ts_parts, sizeof items);
        memcpy((char *)items.items + (size_t)items.count++ * L->ps_size, (const char *)ps + i * L->ps_size,
               L->ps_size);
        memcpy(t + L->ts_parts, &items, sizeof items);
    }
    km_array_any topics = {(int32_t)ng, ts};
    memcpy(out, &topics, sizeof topics);  /* memcpy, not a cast: keeps the aliasing rules */
    return 0;
}

static int lisr_group(const km_bp_part *parts, size_t n, km_leader_and_isr_request_partition_state *ps,
                      km_arena *a, km_leader_and_isr_request *out)
{
    static const group_layout L = {
        sizeof(km_leader_and_isr_request_topic_state), offsetof(km_leader_and_isr_request_topic_state, topic_name),
        offsetof(km_leader_and_isr_request_topic_state, topic_id),
        offsetof(km_leader_and_isr_request_topic_state, partition_states),
        sizeof(km_leader_and_isr_request_partition_state),
        offsetof(km_leader_and_isr_request_partition_state, topic_name)};
    return group_by_topic(parts, n, ps, &L, a, &out->topic_states);
}

static const km_endpoint *endpoint_named(const km_broker *b, const char *listener)
{
    for (int32_t e = 0; e < b->n_endpoints; e++)
        if (!strcmp(b->endpoints[e].name, listener))
            return &b->endpoints[e];
    return NULL;
}

static bool leads_any(const km_bp_part *parts, size_t n, int32_t id)
{
    for (size_t i = 0; i < n; i++)
        if (parts[i].leader == id)
            return true;
    return false;
}

static int live_leaders(const km_bp_part *parts, size_t n, const km_broker *const *brokers, size_t nb,
                        const char *listener, km_arena *a, km_leader_and_isr_request *out, bool *oom)
{
    km_leader_and_isr_request_live_leader *ll = km_arena_alloc(a, sizeof *ll * (nb ? nb : 1));
    if (!ll)
        return -1;
    int32_t k = 0;
    for (size_t i = 0; i < nb; i++) {
        const km_endpoint *ep = leads_any(parts, n, brokers[i]->id) ? endpoint_named(brokers[i], listener) : NULL;
        if (!ep)
            continue; /* Kafka's Broker.node() would throw: such a leader is unreachable anyway */
        memset(&ll[k], 0, sizeof ll[k]);
        ll[k].broker_id = brokers[i]->id;
        ll[k].host_name = copy_str(a, ep->host, oom);
        ll[k].port = ep->port;
        k++;
    }
    out->live_leaders.count = k;
    out->live_leaders.items = ll;
    return 0;
}

int km_bp_leader_and_isr(int16_t v, const km_bp_ctl *ctl, const km_bp_part *parts, size_t n,
                         const km_broker *const *brokers, size_t nb, const char *listener, km_arena *a,
                         km_leader_and_isr_request *out, km_err *err)
{
    if (!km_version_in(km_leader_and_isr_request_desc.valid, v))
        return km_fail(err, "LeaderAndIsr: no version %d", v);
    km_leader_and_isr_request_init(out);
    out->controller_id = ctl->controller_id;
    out->is_kraft_controller = v >= 7 && ctl->kraft;
    out->controller_epoch = ctl->controller_epoch;
    out->broker_epoch = ctl->broker_epoch;
    out->type = v >= 5 ? ctl->type : 0;
    km_leader_and_isr_request_partition_state *ps = km_arena_alloc(a, sizeof *ps * (n ? n : 1));
    if (!ps)
        return km_fail(err, "LeaderAndIsr v%d: out of memory for %zu partitions", v, n);
    bool oom = false;
    name_cache nc = { NULL, { NULL, -1 } };
    for (size_t i = 0; i < n; i++)
        lisr_state(v, &parts[i], &ps[i], a, &nc, &oom);
    if (v < 2) {
        out->ungrouped_partition_states.count = (int32_t)n;
        out->ungrouped_partition_states.items = ps;
    } else if (lisr_group(parts, n, ps, a, out)) {
        return km_fail(err, "LeaderAndIsr v%d: out of memory grouping %zu partitions", v, n);
    }
    if (live_leaders(parts, n, brokers, nb, listener, a, out, &oom) || oom)
        return km_fail(err, "LeaderAndIsr v%d: out of memory for live leaders", v);
    return 0;
}

/* ---- UpdateMetadata ------------------------------------------------------------------------- */

static void umr_state(const km_bp_part *p, km_update_metadata_request_partition_state *ps, km_arena *a,
                      name_cache *nc, bool *oom)
{
    memset(ps, 0, sizeof *ps);
    ps->topic_name = topic_name(a, nc, p->topic, oom);
    ps->partition_index = p->partition;
    ps->controller_epoch = p->controller_epoch;
    ps->leader = p->leader;
    ps->leader_epoch = p->leader_epoch;
    SET_INTS(ps->isr, p->isr);
    ps->zk_version = p->partition_epoch; /* Kafka puts the partition epoch in ZkVersion */
    SET_INTS(ps->replicas, p->replicas);
    SET_INTS(ps->offline_replicas, p->offline);
}

static int umr_group(const km_bp_part *parts, size_t n, km_update_metadata_request_partition_state *ps,
                     km_arena *a, km_update_metadata_request *out)
{
    static const group_layout L = {
        sizeof(km_update_metadata_request_topic_state), offsetof(km_update_metadata_request_topic_state, topic_name),
        offsetof(km_update_metadata_request_topic_state, topic_id),
        offsetof(km_update_metadata_request_topic_state, partition_states),
        sizeof(km_update_metadata_request_partition_state),
        offsetof(km_update_metadata_request_partition_state, topic_name)};
    return group_by_topic(parts, n, ps, &L, a, &out->topic_states);
}

static const char *protocol_name(int16_t sp)
{
    static const char *const names[] = { "PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL" };
    return sp >= 0 && sp < 4 ? names[sp] : "";
}

/* v0 carries one PLAINTEXT host:port; v1-2 cannot name listeners, so only endpoints
 * whose listener is named after its protocol fit (Kafka's builder throws otherwise). */
static int umr_broker(int16_t v, const km_broker *b, km_update_metadata_request_broker *ub, km_arena *a,
                      bool *oom)
{
    memset(ub, 0, sizeof *ub);
    ub->id = b->id;
    ub->rack = v >= 2 ? copy_str(a, b->rack, oom) : km_cstr(NULL);
    ub->v0_host = km_cstr("");
    ub->endpoints.items = km_arena_alloc(a, sizeof *ub->endpoints.items * (size_t)(b->n_endpoints + 1));
    if (!ub->endpoints.items)
        return -1;
    for (int32_t e = 0; e < b->n_endpoints; e++) {
        const km_endpoint *ep = &b->endpoints[e];
        bool std_name = !strcmp(ep->name, protocol_name(ep->security_protocol));
        if (v == 0 && std_name && ep->security_protocol == 0) {
            ub->v0_host = copy_str(a, ep->host, oom);
            ub->v0_port = ep->port;
            return 1;
        }
        if (v == 0 || (v < 3 && !std_name))
            continue;
        km_update_metadata_request_endpoint *ue = &ub->endpoints.items[ub->endpoints.count++];
        memset(ue, 0, sizeof *ue);
        ue->port = ep->port;
        ue->host = copy_str(a, ep->host, oom);
        ue->listener = copy_str(a, ep->name, oom);
        ue->security_protocol = ep->security_protocol;
    }
    return v == 0 ? 0 : 1;
}

static int umr_brokers(int16_t v, const km_broker *const *brokers, size_t nb, km_arena *a,
                       km_update_metadata_request *out, bool *oom)
{
    km_update_metadata_request_broker *ub = km_arena_alloc(a, sizeof *ub * (nb ? nb : 1));
    if (!ub)
        return -1;
    int32_t k = 0;
    for (size_t i = 0; i < nb; i++) {
        int rc = umr_broker(v, brokers[i], &ub[k], a, oom);
        if (rc < 0)
            return -1;
        k += rc; /* 0: no PLAINTEXT endpoint for v0; the broker cannot be described */
    }
    out->live_brokers.count = k;
    out->live_brokers.items = ub;
    return 0;
}

int km_bp_update_metadata(int16_t v, const km_bp_ctl *ctl, const km_bp_part *parts, size_t n,
                          const km_broker *const *brokers, size_t nb, km_arena *a,
                          km_update_metadata_request *out, km_err *err)
{
    if (!km_version_in(km_update_metadata_request_desc.valid, v))
        return km_fail(err, "UpdateMetadata: no version %d", v);
    km_update_metadata_request_init(out);
    out->controller_id = ctl->controller_id;
    out->is_kraft_controller = v >= 8 && ctl->kraft;
    out->type = v >= 8 ? ctl->type : 0;
    out->controller_epoch = ctl->controller_epoch;
    out->broker_epoch = ctl->broker_epoch;
    km_update_metadata_request_partition_state *ps = km_arena_alloc(a, sizeof *ps * (n ? n : 1));
    if (!ps)
        return km_fail(err, "UpdateMetadata v%d: out of memory for %zu partitions", v, n);
    bool oom = false;
    name_cache nc = { NULL, { NULL, -1 } };
    for (size_t i = 0; i < n; i++)
        umr_state(&parts[i], &ps[i], a, &nc, &oom);
    if (v < 5) {
        out->ungrouped_partition_states.count = (int32_t)n;
        out->ungrouped_partition_states.items = ps;
    } else if (umr_group(parts, n, ps, a, out)) {
        return km_fail(err, "UpdateMetadata v%d: out of memory grouping %zu partitions", v, n);
    }
    if (umr_brokers(v, brokers, nb, a, out, &oom) || oom)
        return km_fail(err, "UpdateMetadata v%d: out of memory for %zu live brokers", v, nb);
    return 0;
}

/* ---- StopReplica ----------------------------------------------------------------------------- */

static int sr_grouped(int16_t v, const km_bp_stop *stops, size_t n, km_arena *a, km_stop_replica_request *out)
{
    bool oom = false;
    size_t *group, *first, *count;
    if (scratch(a, n, &group, &first, &count))
        return -1;
    size_t ng = group_topics(NULL, stops, n, group, first);
    km_stop_replica_request_topic_v1 *t1 = km_arena_alloc(a, sizeof *t1 * (ng ? ng : 1));
    km_stop_replica_request_topic_state *t3 = km_arena_alloc(a, sizeof *t3 * (ng ? ng : 1));
    if (!t1 || !t3)
        return -1;
    count_groups(group, n, count);
    for (size_t g = 0; g < ng; g++) {
        memset(&t1[g], 0, sizeof t1[g]);
        memset(&t3[g], 0, sizeof t3[g]);
        t1[g].name = t3[g].topic_name = copy_str(a, stops[first[g]].topic, &oom);
        t1[g].partition_indexes.items = km_arena_alloc(a, sizeof(int32_t) * count[g]);
        t3[g].partition_states.items = km_arena_alloc(a, sizeof *t3[g].partition_states.items * count[g]);
        if (!t1[g].partition_indexes.items || !t3[g].partition_states.items)
            return -1;
    }
    for (size_t i = 0; i < n; i++) {
        km_stop_replica_request_topic_v1 *a1 = &t1[group[i]];
        a1->partition_indexes.items[a1->partition_indexes.count++] = stops[i].partition;
        km_stop_replica_request_topic_state *a3 = &t3[group[i]];
        km_stop_replica_request_partition_state *ps = &a3->partition_states.items[a3->partition_states.count++];
        memset(ps, 0, sizeof *ps);
        ps->partition_index = stops[i].partition;
        ps->leader_epoch = stops[i].leader_epoch;
        ps->delete_partition = stops[i].delete_partition;
    }
    if (oom)
        return -1;
    if (v >= 3) {
        out->topic_states.count = (int32_t)ng;
        out->topic_states.items = t3;
    } else {
        out->topics.count = (int32_t)ng;
        out->topics.items = t1;
    }
    return 0;
}

static int sr_ungrouped(const km_bp_stop *stops, size_t n, km_arena *a, km_stop_replica_request *out)
{
    km_stop_replica_request_partition_v0 *p = km_arena_alloc(a, sizeof *p * (n ? n : 1));
    if (!p)
        return -1;
    bool oom = false;
    name_cache nc = { NULL, { NULL, -1 } };
    for (size_t i = 0; i < n; i++) {
        memset(&p[i], 0, sizeof p[i]);
        p[i].topic_name = topic_name(a, &nc, stops[i].topic, &oom);
        p[i].partition_index = stops[i].partition;
    }
    if (oom)
        return -1;
    out->ungrouped_partitions.count = (int32_t)n;
    out->ungrouped_partitions.items = p;
    return 0;
}

int km_bp_stop_replica(int16_t v, const km_bp_ctl *ctl, const km_bp_stop *stops, size_t n, km_arena *a,
                       km_stop_replica_request *out, km_err *err)
{
    if (!km_version_in(km_stop_replica_request_desc.valid, v))
        return km_fail(err, "StopReplica: no version %d", v);
    km_stop_replica_request_init(out);
    out->controller_id = ctl->controller_id;
    out->is_kraft_controller = v >= 4 && ctl->kraft;
    out->controller_epoch = ctl->controller_epoch;
    out->broker_epoch = ctl->broker_epoch;
    if (v < 3) {
        for (size_t i = 1; i < n; i++)
            if (stops[i].delete_partition != stops[0].delete_partition)
                return km_fail(err, "StopReplica v%d: partitions %s-%d and %s-%d disagree on DeletePartition; "
                                    "before v3 it is one flag per request", v, stops[0].topic, stops[0].partition,
                               stops[i].topic, stops[i].partition);
        out->delete_partitions = n ? stops[0].delete_partition : false;
    }
    if ((v == 0 ? sr_ungrouped(stops, n, a, out) : sr_grouped(v, stops, n, a, out)))
        return km_fail(err, "StopReplica v%d: out of memory for %zu partitions", v, n);
    return 0;
}
