/* Fetch: building the observer's request and handling the answer
 * (KafkaRaftClient.buildFetchRequest / handleFetchResponse). */
#include "quorum_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define Q_FETCH_ARENA (256u * 1024u * 1024u)

void q_fetch_request_init(km_fetch_request *rq, km_fetch_request_topic *topic, km_fetch_request_partition *part,
                          int16_t v)
{
    km_fetch_request_init(rq);
    const km_struct_desc *tsd = q_sub(km_fetch_request_desc.root, "Topics");
    km_init(tsd, topic);
    km_init(q_sub(tsd, "Partitions"), part);
    if (v >= 13)
        topic->topic_id.b[15] = 1; /* Uuid.METADATA_TOPIC_ID */
    else
        topic->topic = km_cstr(Q_METADATA_TOPIC);
    part->partition = 0;
    topic->partitions.count = 1;
    topic->partitions.items = part;
    rq->topics.count = 1;
    rq->topics.items = topic;
}

int q_send_fetch(km_quorum *q, km_err *err)
{
    km_fetch_request rq;
    km_fetch_request_partition part;
    km_fetch_request_topic topic;
    q_fetch_request_init(&rq, &topic, &part, q->fetch_v);
    rq.cluster_id = km_cstr(q->cfg.cluster_id);
    if (q->fetch_v >= 15)
        rq.replica_state.replica_id = q->cfg.node_id;
    else
        rq.replica_id = q->cfg.node_id;
    rq.max_wait_ms = q->cfg.fetch_max_wait_ms;
    rq.min_bytes = 0;
    part.current_leader_epoch = q->epoch;
    part.fetch_offset = q_fetch_offset(q);
    part.last_fetched_epoch = q_last_fetched_epoch(q);
    part.partition_max_bytes = 8 << 20;
    q->phase = Q_FETCH;
    return q_send(q, KM_API_FETCH, q->fetch_v, &rq, err);
}

static const km_fetch_response_partition_data *only_partition(const km_fetch_response *rs, int16_t v)
{
    if (rs->responses.count != 1 || rs->responses.items[0].partitions.count != 1)
        return NULL;
    const km_fetch_response_able_topic_response *t = &rs->responses.items[0];
    km_uuid metadata_topic_id = { .b = { [15] = 1 } };
    bool ours = v >= 13 ? !memcmp(&t->topic_id, &metadata_topic_id, sizeof metadata_topic_id)
                        : km_str_eq(t->topic, Q_METADATA_TOPIC);
    const km_fetch_response_partition_data *p = &t->partitions.items[0];
    return ours && p->partition_index == 0 ? p : NULL;
}

/* The answer's records: buffer them, learn the high watermark, apply what it commits. */
static void take_records(km_quorum *q, const km_fetch_response_partition_data *p)
{
    km_err err;
    if (p->records.len > 0 && q_buffer_records(q, p->records.ptr, (size_t)p->records.len, &err) < 0) {
        char why[1200]; /* e.g. a corrupt batch: backed off (q_healthy not called), logged once a minute */
        snprintf(why, sizeof why, "leader %d at %s:%u sent records kmproxy refuses: %s", q->leader_id, q->target.host,
                 q->target.port, err.msg);
        return q_retry(q, false, why);
    }
    q_healthy(q);
    if (p->high_watermark >= 0 && p->high_watermark > q->hw)
        q->hw = p->high_watermark; /* updateFollowerHighWatermark: it never goes back */
    q->st.high_watermark = q->hw;
    int r = q_apply_committed(q, &err);
    if (r < 0)
        return q_fatal(q, "applying committed records below high watermark %" PRId64 ": %s", q->hw, err.msg);
    if (r > 0)
        q_deliver(q);
    if (q->buf.len - q->buf_head >= q->cfg.buffer_max_bytes) {
        /* Full of uncommitted records: ask again only after a pause, so a slow high
         * watermark costs one fetch per pause instead of a busy loop. */
        ev_timer_set(&q->pause_timer, q->cfg.retry_backoff_ms / 1000.0, 0.);
        ev_timer_start(q->loop, &q->pause_timer);
        return;
    }
    q_next_request(q);
}

static void on_snapshot_id(km_quorum *q, const km_fetch_response_partition_data *p)
{
    km_err err;
    if (p->snapshot_id.epoch < 0 || p->snapshot_id.end_offset < 0) {
        char why[1200];
        snprintf(why, sizeof why, "leader sent an invalid SnapshotId (%" PRId64 ", %d)", p->snapshot_id.end_offset,
                 p->snapshot_id.epoch);
        return q_retry(q, false, why);
    }
    if (p->snapshot_id.end_offset < q->applied_next)
        return q_fatal(q, "leader %d (epoch %d) sent snapshot (%" PRId64 ", %d) that ends below the applied offset %"
                       PRId64 " (epoch %d): committed metadata was contradicted", q->leader_id, q->epoch,
                       p->snapshot_id.end_offset, p->snapshot_id.epoch, q->applied_next - 1, q->applied_epoch);
    if (q_snapshot_begin(q, p->snapshot_id.end_offset, p->snapshot_id.epoch, &err) < 0)
        return q_fatal(q, "%s", err.msg);
    q_healthy(q);
    q_next_request(q);
}

static void on_partition(km_quorum *q, const km_fetch_response_partition_data *p)
{
    if (p->error_code == QE_INVALID_REQUEST) /* maybeHandleCommonResponse: Kafka throws here too */
        return q_fatal(q, "%s:%u (leader %d, epoch %d) answered INVALID_REQUEST to Fetch offset %" PRId64
                       " last fetched epoch %d", q->target.host, q->target.port, q->leader_id, q->epoch,
                       q_fetch_offset(q), q_last_fetched_epoch(q));
    if (p->error_code != QE_NONE) {
        char why[1200];
        snprintf(why, sizeof why, "Fetch from %s:%u: error %d", q->target.host, q->target.port, p->error_code);
        return q_retry(q, false, why);
    }
    /* Every answer without error carries the leader's high watermark (KafkaRaftClient.buildFetchResponse),
     * a SnapshotId or DivergingEpoch answer too: "caught up" is measured against it. */
    if (p->high_watermark > q->leader_hw)
        q->leader_hw = p->high_watermark;
    if (p->diverging_epoch.epoch >= 0) {
        km_err err;
        if (q_truncate_diverging(q, p->diverging_epoch.end_offset, p->diverging_epoch.epoch, &err) < 0)
            return q_fatal(q, "%s", err.msg);
        q_healthy(q);
        return q_next_request(q);
    }
    if (p->snapshot_id.epoch >= 0 || p->snapshot_id.end_offset >= 0)
        return on_snapshot_id(q, p);
    take_records(q, p);
}

static void learn_endpoints(km_quorum *q, const km_fetch_response *rs)
{
    for (int32_t i = 0; i < rs->node_endpoints.count; i++) {
        const km_fetch_response_node_endpoint *e = &rs->node_endpoints.items[i];
        q_learn_endpoint(q, e->node_id, e->host.len > 0 ? e->host.ptr : NULL, e->port);
    }
}

void q_on_fetch_response(km_quorum *q, const uint8_t *body, size_t len)
{
    km_arena a;
    km_arena_init(&a, Q_FETCH_ARENA);
    km_fetch_response rs;
    km_err err;
    double latency = q_now(q) - q->sent_at;
    if (km_decode_borrowing(&km_fetch_response_desc, q->fetch_v, body, len, &rs, &a, &err) < 0) {
        char why[1200];
        snprintf(why, sizeof why, "Fetch v%d response from %s:%u: %s", q->fetch_v, q->target.host, q->target.port,
                 err.msg);
        km_arena_free(&a);
        return q_retry(q, false, why);
    }
    q->st.fetches++;
    q->st.fetch_latency_sum += latency;
    q_observe_fetch_latency(q, latency);
    learn_endpoints(q, &rs);
    const km_fetch_response_partition_data *p = only_partition(&rs, q->fetch_v);
    if (q_top_level_ok(q, "Fetch", rs.error_code, p != NULL) &&
        q_common_response(q, p->error_code, p->current_leader.leader_id, p->current_leader.leader_epoch) == 0)
        on_partition(q, p);
    km_arena_free(&a);
}
