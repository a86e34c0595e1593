/* Raft simulator: FetchSnapshot (KafkaRaftClient.handleFetchSnapshotRequest) and
 * DescribeQuorum (handleDescribeQuorumRequest). */
#include "rsim_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct snap_ctx {
    km_fetch_snapshot_response rs;
    km_fetch_snapshot_response_partition_snapshot *p;
} snap_ctx;

static int snap_top_error(const rsim_req *rq, int16_t code, km_buf *out, km_err *err)
{
    km_fetch_snapshot_response rs;
    km_fetch_snapshot_response_init(&rs);
    rs.error_code = code;
    return km_frame_response(KM_API_FETCH_SNAPSHOT, rq->version, rq->correlation_id, &rs, out, err);
}

static int snap_endpoints(km_rsim *s, km_fetch_snapshot_response *rs, km_arena *a, km_err *err)
{
    const km_rsim_voter *l = rsim_voter(s, s->leader_id);
    if (!l)
        return 0;
    km_fetch_snapshot_response_node_endpoint *e = km_arena_alloc(a, sizeof *e);
    if (!e)
        return km_fail(err, "raftsim: out of memory");
    km_init(rsim_sub(km_fetch_snapshot_response_desc.root, "NodeEndpoints"), e);
    e->node_id = l->id;
    e->host = km_cstr(l->host);
    e->port = l->port;
    rs->node_endpoints.count = 1;
    rs->node_endpoints.items = e;
    return 0;
}

/* FetchSnapshotResponse.singleton with addQuorumLeader: one partition naming the leader. */
static int snap_response(km_rsim *s, const rsim_req *rq, const char *topic, int32_t partition, snap_ctx *c,
                         km_arena *a, km_err *err)
{
    km_fetch_snapshot_response_init(&c->rs);
    const km_struct_desc *tsd = rsim_sub(km_fetch_snapshot_response_desc.root, "Topics");
    km_fetch_snapshot_response_topic_snapshot *t = km_arena_alloc(a, sizeof *t);
    c->p = km_arena_alloc(a, sizeof *c->p);
    if (!t || !c->p)
        return km_fail(err, "raftsim: out of memory");
    km_init(tsd, t);
    km_init(rsim_sub(tsd, "Partitions"), c->p);
    t->name = km_cstr(topic);
    t->partitions.count = 1;
    t->partitions.items = c->p;
    c->rs.topics.count = 1;
    c->rs.topics.items = t;
    c->p->index = partition;
    c->p->current_leader.leader_id = s->leader_id;
    c->p->current_leader.leader_epoch = s->epoch;
    c->p->unaligned_records = (km_bytes){ (const uint8_t *)"", 0 };
    return rq->version >= 1 ? snap_endpoints(s, &c->rs, a, err) : 0;
}

static int snap_send(const rsim_req *rq, snap_ctx *c, km_buf *out, km_err *err)
{
    return km_frame_response(KM_API_FETCH_SNAPSHOT, rq->version, rq->correlation_id, &c->rs, out, err);
}

/* The chunk from position: at most min(MaxBytes, chunk limit), clamped to the snapshot's end
 * (UnalignedFileRecords' slice).  A test may ask for a flipped byte in it. */
static int snap_chunk(km_rsim *s, const rsim_snapshot *sn, int64_t position, int32_t max_bytes, snap_ctx *c,
                      km_arena *a, km_err *err)
{
    size_t n = sn->len - (size_t)position;
    if (max_bytes > 0 && (size_t)max_bytes < n)
        n = (size_t)max_bytes;
    if ((size_t)s->cfg.snapshot_chunk_bytes < n)
        n = (size_t)s->cfg.snapshot_chunk_bytes;
    const uint8_t *chunk = sn->bytes + position;
    if (s->corrupt_chunks > 0) {
        uint8_t *copy = km_arena_alloc(a, n);
        if (!copy)
            return km_fail(err, "raftsim: out of memory");
        memcpy(copy, chunk, n);
        copy[n / 2] ^= 0x5a;
        chunk = copy;
        s->corrupt_chunks--;
    }
    c->p->snapshot_id.end_offset = sn->end;
    c->p->snapshot_id.epoch = sn->epoch;
    c->p->size = (int64_t)sn->len;
    c->p->position = position;
    c->p->unaligned_records = (km_bytes){ chunk, (int32_t)n };
    return 0;
}

int rsim_serve_fetch_snapshot(km_rsim *s, const rsim_req *rq, km_buf *out, km_arena *a, km_err *err)
{
    if (rq->version < 0 || rq->version > RSIM_API_FETCH_SNAPSHOT_MAX)
        return km_fail(err, "FetchSnapshot v%d is not advertised", rq->version);
    km_fetch_snapshot_request q;
    if (rsim_decode_body(&km_fetch_snapshot_request_desc, rq, &q, a, err) < 0)
        return -1;
    s->st.fetch_snapshots++;
    if (!rsim_cluster_id_ok(s, q.cluster_id))
        return snap_top_error(rq, RSIM_E_INCONSISTENT_CLUSTER_ID, out, err);
    if (q.topics.count != 1 || q.topics.items[0].partitions.count != 1)
        return snap_top_error(rq, RSIM_E_INVALID_REQUEST, out, err);
    const km_fetch_snapshot_request_topic_snapshot *t = &q.topics.items[0];
    const km_fetch_snapshot_request_partition_snapshot *ps = &t->partitions.items[0];
    snap_ctx c;
    if (!km_str_eq(t->name, RSIM_METADATA_TOPIC) || ps->partition != 0) {
        if (snap_response(s, rq, t->name.len >= 0 ? t->name.ptr : "", ps->partition, &c, a, err) < 0)
            return -1;
        c.p->error_code = RSIM_E_UNKNOWN_TOPIC_OR_PARTITION;
        return snap_send(rq, &c, out, err);
    }
    if (snap_response(s, rq, RSIM_METADATA_TOPIC, 0, &c, a, err) < 0)
        return -1;
    int16_t code = rsim_leader_only_error(s, ps->current_leader_epoch);
    const rsim_snapshot *sn = NULL;
    if (code == RSIM_E_NONE && !(sn = rsim_find_snapshot(s, ps->snapshot_id.end_offset, ps->snapshot_id.epoch)))
        code = RSIM_E_SNAPSHOT_NOT_FOUND;
    if (code == RSIM_E_NONE && (ps->position < 0 || ps->position >= (int64_t)sn->len ||
                                (ps->position > 0 && s->fail_positions > 0 && s->fail_positions--)))
        code = RSIM_E_POSITION_OUT_OF_RANGE;
    if (s->refused_position >= 0 && ps->position == s->refused_position)
        s->st.refused_position_asked_again++;
    s->refused_position = code == RSIM_E_POSITION_OUT_OF_RANGE ? ps->position : -1;
    if (code == RSIM_E_NONE && snap_chunk(s, sn, ps->position, q.max_bytes, &c, a, err) < 0)
        return -1;
    c.p->error_code = code;
    return snap_send(rq, &c, out, err);
}

/* ---- DescribeQuorum --------------------------------------------------------------------------- */

static int dq_voters(km_rsim *s, int16_t v, km_describe_quorum_response_partition_data *p, km_arena *a, km_err *err)
{
    const km_struct_desc *rsd = rsim_sub(rsim_sub(rsim_sub(km_describe_quorum_response_desc.root, "Topics"),
                                                  "Partitions"), "CurrentVoters");
    p->current_voters.items = km_arena_alloc(a, sizeof *p->current_voters.items * (size_t)(s->n_voters + 1));
    p->observers.items = km_arena_alloc(a, sizeof *p->observers.items * (size_t)(s->n_observers + 1));
    if (!p->current_voters.items || !p->observers.items)
        return km_fail(err, "raftsim: out of memory");
    int64_t now = rsim_now_ms();
    for (int i = 0; i < s->n_voters; i++) { /* the simulated voters keep up with the leader */
        km_describe_quorum_response_replica_state *r = &p->current_voters.items[i];
        km_init(rsd, r);
        r->replica_id = s->voters[i].id;
        r->log_end_offset = s->log_end;
        r->last_fetch_timestamp = v >= 1 ? now : -1;
        r->last_caught_up_timestamp = v >= 1 ? now : -1;
    }
    p->current_voters.count = s->n_voters;
    for (int i = 0; i < s->n_observers; i++) {
        km_describe_quorum_response_replica_state *r = &p->observers.items[i];
        km_init(rsd, r);
        r->replica_id = s->observers[i].id;
        r->log_end_offset = s->observers[i].fetch_offset;
        r->last_fetch_timestamp = v >= 1 ? s->observers[i].last_fetch_ms : -1;
        r->last_caught_up_timestamp = -1;
    }
    p->observers.count = s->n_observers;
    return 0;
}

static int dq_nodes(km_rsim *s, km_describe_quorum_response *rs, km_arena *a, km_err *err)
{
    const km_struct_desc *nsd = rsim_sub(km_describe_quorum_response_desc.root, "Nodes");
    rs->nodes.items = km_arena_alloc(a, sizeof *rs->nodes.items * (size_t)(s->n_voters + 1));
    km_describe_quorum_response_listener *ls = km_arena_alloc(a, sizeof *ls * (size_t)(s->n_voters + 1));
    if (!rs->nodes.items || !ls)
        return km_fail(err, "raftsim: out of memory");
    for (int i = 0; i < s->n_voters; i++) {
        km_describe_quorum_response_node *n = &rs->nodes.items[i];
        km_init(nsd, n);
        km_init(rsim_sub(nsd, "Listeners"), &ls[i]);
        n->node_id = s->voters[i].id;
        ls[i].name = km_cstr("CONTROLLER");
        ls[i].host = km_cstr(s->voters[i].host);
        ls[i].port = s->voters[i].port;
        n->listeners.count = 1;
        n->listeners.items = &ls[i];
    }
    rs->nodes.count = s->n_voters;
    return 0;
}

static int dq_partition(km_rsim *s, const rsim_req *rq, const km_describe_quorum_request *q,
                        km_describe_quorum_response *rs, km_arena *a, km_err *err)
{
    const km_struct_desc *tsd = rsim_sub(km_describe_quorum_response_desc.root, "Topics");
    km_describe_quorum_response_topic_data *t = km_arena_alloc(a, sizeof *t);
    km_describe_quorum_response_partition_data *p = km_arena_alloc(a, sizeof *p);
    if (!t || !p)
        return km_fail(err, "raftsim: out of memory");
    km_init(tsd, t);
    km_init(rsim_sub(tsd, "Partitions"), p);
    const km_describe_quorum_request_topic_data *qt = q->topics.count > 0 ? &q->topics.items[0] : NULL;
    t->topic_name = qt ? qt->topic_name : km_cstr(RSIM_METADATA_TOPIC);
    t->partitions.count = 1;
    t->partitions.items = p;
    rs->topics.count = 1;
    rs->topics.items = t;
    p->partition_index = qt && qt->partitions.count > 0 ? qt->partitions.items[0].partition_index : 0;
    bool ours = q->topics.count == 1 && km_str_eq(qt->topic_name, RSIM_METADATA_TOPIC) &&
                qt->partitions.count == 1 && p->partition_index == 0;
    if (!ours) { /* DescribeQuorumRequest.getPartitionLevelErrorResponse */
        p->error_code = RSIM_E_UNKNOWN_TOPIC_OR_PARTITION;
        return 0;
    }
    if (s->leader_id != s->cfg.node_id) { /* singletonErrorResponse: the partition's error, no leader named */
        p->error_code = RSIM_E_NOT_LEADER_OR_FOLLOWER;
        p->leader_id = -1;
        p->leader_epoch = -1;
        p->high_watermark = -1;
        return 0;
    }
    p->leader_id = s->leader_id;
    p->leader_epoch = s->epoch;
    p->high_watermark = rsim_hw(s);
    if (dq_voters(s, rq->version, p, a, err) < 0)
        return -1;
    return rq->version >= 2 ? dq_nodes(s, rs, a, err) : 0;
}

int rsim_serve_describe_quorum(km_rsim *s, const rsim_req *rq, km_buf *out, km_arena *a, km_err *err)
{
    if (rq->version < 0 || rq->version > RSIM_API_DESCRIBE_QUORUM_MAX)
        return km_fail(err, "DescribeQuorum v%d is not advertised", rq->version);
    km_describe_quorum_request q;
    if (rsim_decode_body(&km_describe_quorum_request_desc, rq, &q, a, err) < 0)
        return -1;
    s->st.describe_quorums++;
    km_describe_quorum_response rs;
    km_describe_quorum_response_init(&rs);
    if (dq_partition(s, rq, &q, &rs, a, err) < 0)
        return -1;
    return km_frame_response(KM_API_DESCRIBE_QUORUM, rq->version, rq->correlation_id, &rs, out, err);
}
