/* The broker-state verifier (km_verify.h): ask, then compare with the image. */
#include "verify_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char *v_error_name(int16_t e)
{
    switch (e) {
    case E_NONE: return "NONE";
    case E_OFFSET_OUT_OF_RANGE: return "OFFSET_OUT_OF_RANGE";
    case E_TOPIC_AUTHORIZATION_FAILED: return "TOPIC_AUTHORIZATION_FAILED";
    case E_UNKNOWN_TOPIC_OR_PARTITION: return "UNKNOWN_TOPIC_OR_PARTITION";
    case E_NOT_LEADER_OR_FOLLOWER: return "NOT_LEADER_OR_FOLLOWER";
    case E_FENCED_LEADER_EPOCH: return "FENCED_LEADER_EPOCH";
    case E_UNKNOWN_LEADER_EPOCH: return "UNKNOWN_LEADER_EPOCH";
    default: return "ERROR";
    }
}

v_broker *v_broker_by_id(v_run *r, int32_t id)
{
    for (int i = 0; i < r->nb; i++)
        if (r->b[i].id == id)
            return &r->b[i];
    return NULL;
}

static void unchecked(v_run *r, int32_t broker, const char *why)
{
    json_array_append_new(r->unchecked, json_pack("{s:i,s:s}", "broker", broker, "why", why));
}

static json_t *i32_json(const int32_t *v, int32_t n)
{
    json_t *a = json_array();
    for (int32_t i = 0; i < n; i++)
        json_array_append_new(a, json_integer(v[i]));
    return a;
}

const char *km_verify_class_name(km_verify_class c)
{
    static const char *const NAMES[KM_VERIFY_N_CLASSES] = {
        [KM_VERIFY_METADATA_STALE] = "metadata_stale", [KM_VERIFY_REPLICA_STALE] = "replica_stale",
        [KM_VERIFY_STALE_LEADER] = "stale_leader", [KM_VERIFY_STRAY_LOG] = "stray_log",
        [KM_VERIFY_ISR_DIFFERS] = "isr_differs"};
    return (unsigned)c < KM_VERIFY_N_CLASSES ? NAMES[c] : NULL;
}

json_t *v_finding(v_run *r, v_broker *b, const char *topic, int32_t part, km_verify_class cls, const char *detail)
{
    /* one check sees a finding at one moment: its first and last seen (the daemon keeps the first across checks) */
    json_int_t now = (json_int_t)time(NULL);
    json_t *f = json_pack("{s:i,s:s,s:i,s:s,s:s,s:I,s:I}", "broker", b->id, "topic", topic, "partition", part,
                          "class", km_verify_class_name(cls), "detail", detail, "first_seen", now, "last_seen", now);
    json_array_append_new(r->findings, f);
    b->findings++;
    return f;
}

/* The brokers the image registers, with the endpoint of the listener asked for. */
static int collect_brokers(v_run *r, km_err *err)
{
    size_t n = km_image_broker_count(r->img), it = 0;
    if (!(r->b = calloc(n ? n : 1, sizeof *r->b)))
        return km_fail(err, "out of memory");
    for (const km_broker *kb; (kb = km_image_next_broker(r->img, &it)) && r->nb < (int)n;) {
        v_broker *b = &r->b[r->nb++];
        *b = (v_broker){ .id = kb->id, .zk = kb->is_migrating_zk_broker, .fenced = kb->fenced, .c = { .fd = -1 } };
        for (int32_t e = 0; e < kb->n_endpoints && !b->host; e++)
            if (!r->o->listener || !strcmp(kb->endpoints[e].name, r->o->listener)) {
                b->host = kb->endpoints[e].host;
                b->port = kb->endpoints[e].port;
            }
    }
    return 0;
}

/* Connects and asks for the broker's whole metadata cache (every topic). */
/* Every topic the broker caches for a slice from the start (a topic the image lacks is found only so), else the
 * slice's topics by name (never created: allow_auto_topic_creation off). */
static int metadata_request(v_run *r, km_metadata_request *rq)
{
    km_metadata_request_init(rq);
    rq->allow_auto_topic_creation = false;
    if (r->from_start) {
        rq->topics.count = -1;
        return 0;
    }
    if (!(rq->topics.items = km_arena_alloc(&r->arena, (size_t)(r->nsel ? r->nsel : 1) * sizeof *rq->topics.items)))
        return -1;
    for (int i = 0; i < r->nsel; i++)
        rq->topics.items[i] = (km_metadata_request_request_topic){ .name = km_cstr(km_topic_name(r->sel[i].t)) };
    rq->topics.count = r->nsel;
    return 0;
}

static void ask_metadata(v_run *r, v_broker *b)
{
    char why[700];
    km_err err;
    if (!b->host) {
        snprintf(why, sizeof why, "broker %d registers no %s endpoint", b->id,
                 r->o->listener ? r->o->listener : "");
        return unchecked(r, b->id, why);
    }
    if (v_conn_open(&b->c, b->id, b->host, b->port, r->o, &err) < 0) {
        snprintf(why, sizeof why, "%s%s", err.msg, b->fenced ? " (fenced in the image)" : "");
        return unchecked(r, b->id, why);
    }
    km_metadata_request rq;
    if (metadata_request(r, &rq) < 0)
        return unchecked(r, b->id, "out of memory");
    void *rs;
    if (v_conn_call(&b->c, KM_API_METADATA, V_METADATA_V, &rq, &r->arena, &rs, &err) < 0)
        return unchecked(r, b->id, err.msg);
    b->md = rs;
    b->reachable = true;
    b->by_topic = json_object();
    for (int32_t i = 0; i < b->md->topics.count; i++) {
        const km_metadata_response_response_topic *t = &b->md->topics.items[i];
        if (t->name.len > 0 && t->error_code == E_NONE)
            json_object_set_new(b->by_topic, t->name.ptr, json_integer(i));
    }
}

static const km_metadata_response_response_partition *cached(const v_broker *b, const char *topic, int32_t part)
{
    json_t *i = json_object_get(b->by_topic, topic);
    if (!i)
        return NULL;
    const km_metadata_response_response_topic *t = &b->md->topics.items[json_integer_value(i)];
    for (int32_t p = 0; p < t->partitions.count; p++)
        if (t->partitions.items[p].partition_index == part)
            return &t->partitions.items[p];
    return NULL;
}

static bool same_set(const int32_t *a, int32_t na, const int32_t *b, int32_t nb)
{
    if (na != nb)
        return false;
    for (int32_t i = 0; i < na; i++) {
        bool found = false;
        for (int32_t j = 0; j < nb && !found; j++)
            found = a[i] == b[j];
        if (!found)
            return false;
    }
    return true;
}

static void put_views(json_t *f, const km_partition *p, const km_metadata_response_response_partition *m)
{
    json_object_set_new(f, "image", json_pack("{s:i,s:i,s:o,s:o}", "leader", p->leader, "leader_epoch",
                                              p->leader_epoch, "replicas", i32_json(p->replicas.v, p->replicas.n),
                                              "isr", i32_json(p->isr.v, p->isr.n)));
    if (m)
        json_object_set_new(f, "broker_view",
                            json_pack("{s:i,s:i,s:o,s:o}", "leader", m->leader_id, "leader_epoch", m->leader_epoch,
                                      "replicas", i32_json(m->replica_nodes.items, m->replica_nodes.count), "isr",
                                      i32_json(m->isr_nodes.items, m->isr_nodes.count)));
}

/* One partition of the broker's metadata cache against the image. */
static void compare_partition(v_run *r, v_broker *b, const char *topic, const km_partition *p)
{
    const km_metadata_response_response_partition *m = cached(b, topic, p->id);
    char d[300];
    km_verify_class cls = KM_VERIFY_N_CLASSES; /* none */
    if (!m || m->error_code != E_NONE) {
        cls = KM_VERIFY_METADATA_STALE;
        snprintf(d, sizeof d, "the broker's metadata cache %s", m ? v_error_name(m->error_code) : "lacks the partition");
    } else if (m->leader_epoch > p->leader_epoch) {
        r->image_behind = true;
        snprintf(d, sizeof d, "broker %d caches leader epoch %d of %s-%d, the image %d: the image is behind", b->id,
                 m->leader_epoch, topic, p->id, p->leader_epoch);
        return unchecked(r, b->id, d);
    } else if (m->leader_epoch < p->leader_epoch || m->leader_id != p->leader) {
        cls = KM_VERIFY_METADATA_STALE;
        snprintf(d, sizeof d, "the broker caches leader %d at epoch %d, the image %d at %d", m->leader_id,
                 m->leader_epoch, p->leader, p->leader_epoch);
    } else if (!same_set(p->replicas.v, p->replicas.n, m->replica_nodes.items, m->replica_nodes.count) ||
               !same_set(p->isr.v, p->isr.n, m->isr_nodes.items, m->isr_nodes.count)) {
        cls = KM_VERIFY_ISR_DIFFERS;
        snprintf(d, sizeof d, "same leader epoch %d, another replica set or ISR (hybrid mode need not bump epochs)",
                 p->leader_epoch);
    }
    if (cls != KM_VERIFY_N_CLASSES)
        put_views(v_finding(r, b, topic, p->id, cls, d), p, m);
}

static void compare_metadata(v_run *r, v_broker *b)
{
    for (int i = 0; i < r->nsel; i++) {
        for (int32_t id = r->sel[i].lo; id < r->sel[i].hi; id++) {
            km_partition p;
            if (km_topic_partition(r->sel[i].t, id, &p))
                compare_partition(r, b, km_topic_name(r->sel[i].t), &p);
        }
    }
    for (int32_t i = 0; r->from_start && i < b->md->topics.count; i++) {
        const km_metadata_response_response_topic *t = &b->md->topics.items[i];
        if (t->error_code == E_NONE && t->name.len > 0 && !km_image_topic_by_name(r->img, t->name.ptr))
            v_finding(r, b, t->name.ptr, -1, KM_VERIFY_METADATA_STALE, "the broker caches a topic the image does not have");
    }
}

/* Whether the broker's own cache claims the leadership the image gives another broker.  At an epoch newer
 * than the image's the image is behind, not the broker (compare_partition reports that). */
static bool claims(const v_broker *b, const char *topic, const km_partition *p)
{
    const km_metadata_response_response_partition *m = cached(b, topic, p->id);
    return p->leader != b->id && m && m->error_code == E_NONE && m->leader_id == b->id &&
           m->leader_epoch <= p->leader_epoch;
}

/* One topic's partitions to ask b about: those the image has it lead (at the image's epoch) and those it
 * claims itself (no epoch: does it act as leader at all?). */
static int32_t offsets_topic(v_run *r, v_broker *b, const v_sel *sel, km_list_offsets_request_topic *out)
{
    const km_topic *t = sel->t;
    int32_t n = sel->hi - sel->lo, k = 0;
    out->name = km_cstr(km_topic_name(t));
    if (!(out->partitions.items = km_arena_alloc(&r->arena, (size_t)(n ? n : 1) * sizeof *out->partitions.items)))
        return -1;
    for (int32_t id = sel->lo; id < sel->hi; id++) {
        km_partition p;
        if (!km_topic_partition(t, id, &p) || (p.leader != b->id && !claims(b, km_topic_name(t), &p)))
            continue;
        km_list_offsets_request_partition *q = &out->partitions.items[k++];
        *q = (km_list_offsets_request_partition){ .partition_index = id, .timestamp = -1, .max_num_offsets = 1,
                                                  .current_leader_epoch = p.leader == b->id ? p.leader_epoch : -1 };
    }
    return out->partitions.count = k;
}

static int ask_offsets(v_run *r, v_broker *b, km_list_offsets_response **rs, km_err *err)
{
    km_list_offsets_request rq;
    km_list_offsets_request_init(&rq);
    rq.replica_id = -1;
    if (!(rq.topics.items = km_arena_alloc(&r->arena, (size_t)(r->nsel ? r->nsel : 1) * sizeof *rq.topics.items)))
        return km_fail(err, "out of memory");
    rq.topics.count = 0;
    for (int i = 0; i < r->nsel; i++) {
        int32_t k = offsets_topic(r, b, &r->sel[i], &rq.topics.items[rq.topics.count]);
        if (k < 0)
            return km_fail(err, "out of memory");
        rq.topics.count += k > 0;
    }
    *rs = NULL;
    if (!rq.topics.count)
        return 0;
    void *answer;
    if (v_conn_call(&b->c, KM_API_LIST_OFFSETS, V_LIST_OFFSETS_V, &rq, &r->arena, &answer, err) < 0)
        return -1;
    *rs = answer;
    return 0;
}

/* A replica's log end offset (ListOffsets latest with replica id -2: any replica answers, leader or not). */
static int log_end(v_run *r, v_broker *b, const char *topic, int32_t part, int64_t *end, km_err *err)
{
    km_list_offsets_request_partition qp = { .partition_index = part, .current_leader_epoch = -1, .timestamp = -1,
                                             .max_num_offsets = 1 };
    km_list_offsets_request_topic qt = { .name = km_cstr(topic) };
    qt.partitions.count = 1;
    qt.partitions.items = &qp;
    km_list_offsets_request rq;
    km_list_offsets_request_init(&rq);
    rq.replica_id = -2;
    rq.topics.count = 1;
    rq.topics.items = &qt;
    void *answer;
    if (v_conn_call(&b->c, KM_API_LIST_OFFSETS, V_LIST_OFFSETS_V, &rq, &r->arena, &answer, err) < 0)
        return -1;
    const km_list_offsets_response *rs = answer;
    if (rs->topics.count != 1 || rs->topics.items[0].partitions.count != 1)
        return km_fail(err, "broker %d: ListOffsets answered another partition", b->id);
    const km_list_offsets_response_partition_response *a = &rs->topics.items[0].partitions.items[0];
    if (a->error_code != E_NONE)
        return km_fail(err, "broker %d: ListOffsets (replica id -2): %s", b->id, v_error_name(a->error_code));
    *end = a->offset;
    return 0;
}

/* Where the image's leader ends the stale leader's epoch: the stale leader's records past it are truncated
 * once it learns the truth.  Kafka 3.9 answers OffsetForLeaderEpoch only as leader (replica id -2 or not), so
 * while the image's leader has not taken over its log end stands in: where it would truncate if it did now. */
/* The end offset of `epoch` on broker l (OffsetForLeaderEpoch); *code its error code.  0, or -1 + err. */
static int epoch_end(v_run *r, v_broker *l, const char *topic, int32_t part, int32_t epoch, int64_t *end,
                     int16_t *code, km_err *err)
{
    km_offset_for_leader_epoch_request_offset_for_leader_partition qp = { .partition = part,
                                                                          .current_leader_epoch = -1,
                                                                          .leader_epoch = epoch };
    km_offset_for_leader_epoch_request_offset_for_leader_topic qt = { .topic = km_cstr(topic) };
    qt.partitions.count = 1;
    qt.partitions.items = &qp;
    km_offset_for_leader_epoch_request rq;
    km_offset_for_leader_epoch_request_init(&rq);
    rq.replica_id = -2;
    rq.topics.count = 1;
    rq.topics.items = &qt;
    void *answer;
    if (v_conn_call(&l->c, KM_API_OFFSET_FOR_LEADER_EPOCH, V_EPOCH_V, &rq, &r->arena, &answer, err) < 0)
        return -1;
    const km_offset_for_leader_epoch_response *rs = answer;
    if (rs->topics.count != 1 || rs->topics.items[0].partitions.count != 1)
        return km_fail(err, "broker %d: OffsetForLeaderEpoch answered another partition", l->id);
    *end = rs->topics.items[0].partitions.items[0].end_offset;
    *code = rs->topics.items[0].partitions.items[0].error_code;
    return 0;
}

static void exposure(v_run *r, json_t *f, const char *topic, int32_t part, int32_t epoch, int64_t stale_offset,
                     int32_t leader)
{
    v_broker *l = v_broker_by_id(r, leader);
    int64_t end = -1;
    int16_t code = E_NONE;
    const char *basis = "offset_for_leader_epoch";
    km_err err;
    if (!l || !l->reachable || l->c.fd < 0)
        km_fail(&err, "the image's leader was not reachable");
    else if (epoch_end(r, l, topic, part, epoch, &end, &code, &err) == 0 && code == E_NOT_LEADER_OR_FOLLOWER) {
        /* not taken over yet: it truncates the stale leader at its own log end when it does */
        basis = "new_leader_log_end";
        code = log_end(r, l, topic, part, &end, &err) < 0 ? -1 : E_NONE;
    } else if (code != E_NONE) {
        km_fail(&err, "OffsetForLeaderEpoch: %s", v_error_name(code));
    }
    if (end < 0 || code != E_NONE) {
        json_object_set_new(f, "truncation_unknown", json_string(err.msg));
        return;
    }
    json_object_set_new(f, "truncation_offset", json_integer(end));
    json_object_set_new(f, "truncation_basis", json_string(basis));
    json_object_set_new(f, "exposed_offsets", json_integer(stale_offset > end ? stale_offset - end : 0));
}

/* The image's leader answered for its own partition at the image's epoch. */
static void leader_answer(v_run *r, v_broker *b, const char *topic, const km_partition *p,
                          const km_list_offsets_response_partition_response *a)
{
    char d[300];
    /* OFFSET_NOT_AVAILABLE: Kafka checked the epoch and leadership first; only its high watermark is short of
     * its epoch's start, its followers not caught up (stale followers are reported on their own) */
    if (a->error_code == E_NONE || a->error_code == E_OFFSET_NOT_AVAILABLE)
        return;
    if (a->error_code == E_FENCED_LEADER_EPOCH) {
        r->image_behind = true;
        snprintf(d, sizeof d, "broker %d: %s-%d at a leader epoch newer than the image's %d (FENCED_LEADER_EPOCH)",
                 b->id, topic, p->id, p->leader_epoch);
        return unchecked(r, b->id, d);
    }
    if (a->error_code != E_UNKNOWN_LEADER_EPOCH && a->error_code != E_NOT_LEADER_OR_FOLLOWER &&
        a->error_code != E_UNKNOWN_TOPIC_OR_PARTITION) {
        snprintf(d, sizeof d, "broker %d: ListOffsets for %s-%d answered error %d", b->id, topic, p->id,
                 a->error_code);
        return unchecked(r, b->id, d);
    }
    snprintf(d, sizeof d, "the image's leader does not act as leader at epoch %d: %s", p->leader_epoch,
             v_error_name(a->error_code));
    put_views(v_finding(r, b, topic, p->id, KM_VERIFY_REPLICA_STALE, d), p, cached(b, topic, p->id));
}

/* The stale leader's log end: what it wrote past its high watermark (acks=1 producers were acknowledged for it)
 * is lost too when it truncates; no consumer can read it (v_exposed_bytes reads it otherwise). */
static void past_high_watermark(v_run *r, json_t *f, v_broker *stale, const char *topic, int32_t part,
                                int64_t high_watermark, int64_t truncation)
{
    int64_t end;
    km_err err;
    if (log_end(r, stale, topic, part, &end, &err) < 0) {
        json_object_set_new(f, "stale_log_end_unknown", json_string(err.msg));
        return;
    }
    int64_t from = high_watermark > truncation ? high_watermark : truncation;
    json_object_set_new(f, "stale_log_end", json_integer(end));
    json_object_set_new(f, "offsets_past_high_watermark", json_integer(end > from ? end - from : 0));
}

/* A broker the image does not name leader answered as leader: it accepts writes. */
static void claimant_answer(v_run *r, v_broker *b, const char *topic, const km_partition *p,
                            const km_list_offsets_response_partition_response *a)
{
    if (a->error_code != E_NONE)
        return; /* it does not act as leader; its metadata cache was reported already */
    const km_metadata_response_response_partition *m = cached(b, topic, p->id);
    char d[300];
    snprintf(d, sizeof d, "acts as leader at epoch %d while the image names broker %d at epoch %d: it accepts "
             "writes the image's leader will truncate", m->leader_epoch, p->leader, p->leader_epoch);
    json_t *f = v_finding(r, b, topic, p->id, KM_VERIFY_STALE_LEADER, d);
    put_views(f, p, m);
    json_object_set_new(f, "stale_offset", json_integer(a->offset));
    exposure(r, f, topic, p->id, m->leader_epoch, a->offset, p->leader);
    v_producers(r, f, b, topic, p->id, p->leader);
    const json_t *t = json_object_get(f, "truncation_offset");
    if (!t)
        return; /* nothing to measure from; truncation_unknown says why */
    past_high_watermark(r, f, b, topic, p->id, a->offset, json_integer_value(t));
    const json_t *end = json_object_get(f, "stale_log_end");
    v_exposed_bytes(r, f, b, topic, p->id, m->leader_epoch, json_integer_value(t), a->offset,
                    end ? json_integer_value(end) : -1);
}

static void compare_offsets(v_run *r, v_broker *b, const km_list_offsets_response *rs)
{
    for (int32_t i = 0; rs && i < rs->topics.count; i++) {
        const km_list_offsets_response_topic_response *t = &rs->topics.items[i];
        const km_topic *kt = t->name.len > 0 ? km_image_topic_by_name(r->img, t->name.ptr) : NULL;
        for (int32_t j = 0; kt && j < t->partitions.count; j++) {
            km_partition p;
            const km_list_offsets_response_partition_response *a = &t->partitions.items[j];
            if (!km_topic_partition(kt, a->partition_index, &p))
                continue;
            if (p.leader == b->id)
                leader_answer(r, b, t->name.ptr, &p, a);
            else
                claimant_answer(r, b, t->name.ptr, &p, a);
        }
    }
}

static void check_broker(v_run *r, v_broker *b)
{
    km_list_offsets_response *rs = NULL;
    km_err err;
    compare_metadata(r, b);
    if (ask_offsets(r, b, &rs, &err) < 0)
        return unchecked(r, b->id, err.msg);
    compare_offsets(r, b, rs);
    if (b->findings)
        v_stray_logs(r, b); /* on a mismatch only: every log the broker keeps, one answer */
}

static json_t *broker_json(const v_run *r, const v_broker *b)
{
    char ep[300];
    snprintf(ep, sizeof ep, "%s:%u", b->host ? b->host : "-", b->port);
    int unch = 0;
    size_t i;
    json_t *u;
    json_array_foreach(r->unchecked, i, u)
        unch += json_integer_value(json_object_get(u, "broker")) == b->id;
    return json_pack("{s:i,s:s,s:s,s:b,s:b,s:i,s:i,s:I,s:I,s:I}", "id", b->id, "endpoint", ep, "mode",
                     b->zk ? "zk" : "kraft", "fenced_in_image", b->fenced, "reachable", b->reachable, "findings",
                     b->findings, "unchecked", unch, "requests", (json_int_t)b->c.requests, "bytes_out",
                     (json_int_t)b->c.bytes_out, "bytes_in", (json_int_t)b->c.bytes_in);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* What the check cost: requests and bytes over every connection, and the wall time. */
static json_t *cost_json(const v_run *r, double seconds)
{
    json_int_t rq = 0, out = 0, in = 0;
    for (int i = 0; i < r->nb; i++) {
        rq += r->b[i].c.requests;
        out += r->b[i].c.bytes_out;
        in += r->b[i].c.bytes_in;
    }
    return json_pack("{s:I,s:I,s:I,s:I,s:f}", "connections", (json_int_t)r->nb, "requests", rq, "bytes_out", out,
                     "bytes_in", in, "seconds", seconds);
}

static json_t *make_report(v_run *r, double started)
{
    int verdict = json_array_size(r->findings)    ? KM_VERIFY_INCONSISTENT
                  : json_array_size(r->unchecked) ? KM_VERIFY_UNCHECKED
                                                  : KM_VERIFY_CONSISTENT;
    static const char *const names[] = { "consistent", "inconsistent", "unchecked" };
    json_t *brokers = json_array();
    for (int i = 0; i < r->nb; i++)
        json_array_append_new(brokers, broker_json(r, &r->b[i]));
    return json_pack("{s:s,s:i,s:{s:I,s:i,s:i},s:o,s:o,s:O,s:O,s:b,s:o}", "verdict", names[verdict], "exit", verdict,
                     "image", "offset", (json_int_t)km_image_offset(r->img), "epoch", km_image_epoch(r->img),
                     "partitions", (int)km_image_partition_count(r->img), "slice", v_slice_json(r), "brokers", brokers,
                     "findings",
                     r->findings, "unchecked", r->unchecked, "image_behind", r->image_behind, "cost",
                     cost_json(r, now_s() - started));
}

int km_verify_run(const km_image *img, const km_verify_opts *o, json_t **report, km_err *err)
{
    km_verify_opts dflt = *o;
    dflt.timeout_s = o->timeout_s > 0 ? o->timeout_s : 10.0;
    dflt.client_id = o->client_id ? o->client_id : "kmproxy-verify";
    v_run r = { .img = img, .o = &dflt, .findings = json_array(), .unchecked = json_array() };
    double started = now_s();
    km_arena_init(&r.arena, 0);
    int rc = collect_brokers(&r, err);
    if (rc == 0)
        rc = v_slice_build(&r, err);
    if (rc == 0 && r.nb == 0)
        unchecked(&r, -1, "the image registers no broker");
    for (int i = 0; rc == 0 && i < r.nb; i++)
        ask_metadata(&r, &r.b[i]);
    for (int i = 0; rc == 0 && i < r.nb; i++)
        if (r.b[i].reachable)
            check_broker(&r, &r.b[i]);
    *report = rc == 0 ? make_report(&r, started) : NULL;
    if (rc == 0 && !*report)
        rc = km_fail(err, "out of memory");
    for (int i = 0; i < r.nb; i++) {
        v_conn_close(&r.b[i].c);
        json_decref(r.b[i].by_topic);
    }
    free(r.b);
    v_slice_free(&r);
    json_decref(r.findings);
    json_decref(r.unchecked);
    km_arena_free(&r.arena);
    return rc < 0 ? -1 : (int)json_integer_value(json_object_get(*report, "exit"));
}

/* The exposure's bytes and what lies past the stale leader's high watermark, when they were measured. */
static void print_exposure(FILE *to, const json_t *f)
{
    const json_t *bytes = json_object_get(f, "exposed_bytes");
    const json_t *past = json_object_get(f, "offsets_past_high_watermark");
    const json_t *beyond = json_object_get(f, "exposed_bytes_past_high_watermark_unknown");
    if (bytes)
        fprintf(to, ", %s%lld bytes exposed up to offset %lld",
                json_is_true(json_object_get(f, "exposed_bytes_capped")) ? "at least " : "",
                (long long)json_integer_value(bytes),
                (long long)json_integer_value(json_object_get(f, "exposed_bytes_to")));
    if (bytes && beyond)
        fprintf(to, " (past the high watermark unknown: %s)", json_string_value(beyond));
    else if (json_object_get(f, "exposed_bytes_unknown"))
        fprintf(to, ", bytes exposed unknown: %s", json_string_value(json_object_get(f, "exposed_bytes_unknown")));
    if (json_integer_value(past) > 0)
        fprintf(to, ", %lld more offsets past its high watermark (log end %lld: acks=1 writes no consumer reads)",
                (long long)json_integer_value(past),
                (long long)json_integer_value(json_object_get(f, "stale_log_end")));
}

static void print_finding(FILE *to, const json_t *f)
{
    char where[300];
    int part = (int)json_integer_value(json_object_get(f, "partition"));
    const char *topic = json_string_value(json_object_get(f, "topic"));
    if (part >= 0)
        snprintf(where, sizeof where, "%s-%d", topic, part);
    else
        snprintf(where, sizeof where, "%s", topic);
    fprintf(to, "  broker %-5d %-15s %s: %s", (int)json_integer_value(json_object_get(f, "broker")),
            json_string_value(json_object_get(f, "class")), where, json_string_value(json_object_get(f, "detail")));
    json_t *t = json_object_get(f, "truncation_offset");
    if (t)
        fprintf(to, "; truncation point %lld, %lld offsets exposed (stale leader at %lld)",
                (long long)json_integer_value(t),
                (long long)json_integer_value(json_object_get(f, "exposed_offsets")),
                (long long)json_integer_value(json_object_get(f, "stale_offset")));
    else if (json_object_get(f, "truncation_unknown"))
        fprintf(to, "; truncation point unknown: %s", json_string_value(json_object_get(f, "truncation_unknown")));
    print_exposure(to, f);
    json_t *sp = json_object_get(json_object_get(f, "producers"), "stale_leader");
    size_t i;
    json_t *x;
    if (json_array_size(sp))
        fprintf(to, "; producers on it:");
    json_array_foreach(sp, i, x)
        fprintf(to, " %lld", (long long)json_integer_value(json_object_get(x, "producer_id")));
    fputc('\n', to);
}

static long long jint(const json_t *o, const char *key)
{
    return (long long)json_integer_value(json_object_get(o, key));
}

static void print_dual_write(FILE *to, const json_t *d)
{
    if (!d)
        return;
    fprintf(to, "dual write: high watermark %lld (%s), /migration at %lld (zkVersion %lld), lag %lld records",
            jint(d, "high_watermark"), json_string_value(json_object_get(d, "high_watermark_source")),
            jint(d, "migration_offset"), jint(d, "migration_zk_version"), jint(d, "lag_records"));
    if (json_object_get(d, "lag_exceeded"))
        fprintf(to, "%s", json_is_true(json_object_get(d, "lag_exceeded")) ? " (BEYOND --max-lag)" : "");
    if (json_object_get(d, "driver_stalled"))
        fprintf(to, "\n            after %.1f s: high watermark %lld, /migration at %lld (zkVersion %lld): %s",
                json_real_value(json_object_get(d, "watch_seconds")), jint(d, "high_watermark_after"),
                jint(d, "migration_offset_after"), jint(d, "migration_zk_version_after"),
                json_is_true(json_object_get(d, "driver_stalled")) ? "DRIVER STALLED (the log moved, /migration did not)"
                                                                   : "not stalled");
    fputc('\n', to);
}

void km_verify_print(FILE *to, const json_t *report)
{
    size_t i;
    json_t *x;
    const json_t *img = json_object_get(report, "image");
    fprintf(to, "image at offset %lld (epoch %lld), %lld partitions\n\n%-7s %-22s %-6s %-9s %-9s %s\n",
            (long long)json_integer_value(json_object_get(img, "offset")),
            (long long)json_integer_value(json_object_get(img, "epoch")),
            (long long)json_integer_value(json_object_get(img, "partitions")), "BROKER", "ENDPOINT", "MODE",
            "REACHABLE", "FINDINGS", "UNCHECKED");
    json_array_foreach(json_object_get(report, "brokers"), i, x)
        fprintf(to, "%-7lld %-22s %-6s %-9s %-9lld %lld\n", (long long)json_integer_value(json_object_get(x, "id")),
                json_string_value(json_object_get(x, "endpoint")), json_string_value(json_object_get(x, "mode")),
                json_is_true(json_object_get(x, "reachable")) ? "yes" : "NO",
                (long long)json_integer_value(json_object_get(x, "findings")),
                (long long)json_integer_value(json_object_get(x, "unchecked")));
    if (json_array_size(json_object_get(report, "findings")))
        fprintf(to, "\nfindings:\n");
    json_array_foreach(json_object_get(report, "findings"), i, x)
        print_finding(to, x);
    if (json_array_size(json_object_get(report, "unchecked")))
        fprintf(to, "\nnot checked:\n");
    json_array_foreach(json_object_get(report, "unchecked"), i, x)
        fprintf(to, "  broker %lld: %s\n", (long long)json_integer_value(json_object_get(x, "broker")),
                json_string_value(json_object_get(x, "why")));
    const json_t *cost = json_object_get(report, "cost");
    fprintf(to, "\ncost: %lld connections, %lld requests, %lld bytes out, %lld bytes in, %.3f s\n",
            (long long)json_integer_value(json_object_get(cost, "connections")),
            (long long)json_integer_value(json_object_get(cost, "requests")),
            (long long)json_integer_value(json_object_get(cost, "bytes_out")),
            (long long)json_integer_value(json_object_get(cost, "bytes_in")),
            json_real_value(json_object_get(cost, "seconds")));
    print_dual_write(to, json_object_get(report, "dual_write"));
    fprintf(to, "verdict: %s\n", json_string_value(json_object_get(report, "verdict")));
}
