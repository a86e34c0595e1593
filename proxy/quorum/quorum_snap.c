/* FetchSnapshot: downloading the leader's snapshot in chunks, verifying it whole and loading it
 * as the new image (KafkaRaftClient.handleFetchSnapshotResponse, KIP-630). */
#include "quorum_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define Q_SNAP_ARENA (256u * 1024u * 1024u)

int q_snapshot_begin(km_quorum *q, int64_t end, int32_t epoch, km_err *err)
{
    q_clear_buffer(q); /* the leader's snapshot supersedes everything uncommitted held */
    km_buf_reset(&q->snap);
    q->snap_checked = 0;
    q->snap_base = 0;
    q->snap_received = 0;
    q->snap_last_control = false;
    q->snap_active = true;
    q->snap_end = end;
    q->snap_epoch = epoch;
    q->snap_size = -1;
    q->snap_started = q_now(q);
    q->phase = Q_SNAPSHOT;
    q_log(q, "fetching snapshot (end offset %" PRId64 ", epoch %d) from leader %d", end, epoch, q->leader_id);
    return q_spool_open(q, err);
}

void q_snapshot_abandon(km_quorum *q)
{
    q_spool_discard(q);
    q_stream_abandon(q);
    q->snap_active = false;
    km_buf_free(&q->snap);
    km_buf_init(&q->snap);
    q->phase = Q_FETCH;
}

int q_send_fetch_snapshot(km_quorum *q, km_err *err)
{
    km_fetch_snapshot_request rq;
    km_fetch_snapshot_request_topic_snapshot t;
    km_fetch_snapshot_request_partition_snapshot p;
    km_fetch_snapshot_request_init(&rq);
    const km_struct_desc *tsd = q_sub(km_fetch_snapshot_request_desc.root, "Topics");
    km_init(tsd, &t);
    km_init(q_sub(tsd, "Partitions"), &p);
    rq.cluster_id = km_cstr(q->cfg.cluster_id);
    rq.replica_id = q->cfg.node_id;
    rq.max_bytes = q->cfg.snapshot_chunk_bytes;
    t.name = km_cstr(Q_METADATA_TOPIC);
    p.partition = 0;
    p.current_leader_epoch = q->epoch;
    p.snapshot_id.end_offset = q->snap_end;
    p.snapshot_id.epoch = q->snap_epoch;
    p.position = q->snap_received;
    t.partitions.count = 1;
    t.partitions.items = &p;
    rq.topics.count = 1;
    rq.topics.items = &t;
    q->phase = Q_SNAPSHOT;
    return q_send(q, KM_API_FETCH_SNAPSHOT, q->snap_v, &rq, err);
}

/* Checks the batches that are whole so far, as the chunks arrive (so a corrupt chunk is refused
 * at once and the check overlaps the transfer): framing and CRC32C of each, and that the snapshot
 * opens with a control batch (SnapshotHeader).  The image is not touched. */
static int check_batches(km_quorum *q, km_err *err)
{
    while (q->snap_checked < q->snap.len) {
        km_metalog_batch b;
        km_err why;
        int r = km_ml_peek_batch(q->snap.data + q->snap_checked, q->snap.len - q->snap_checked, 0, &b, &why);
        if (r == 0)
            return 0;
        if (r < 0)
            return km_fail(err, "snapshot (%" PRId64 ", %d) byte %" PRIu64 ": %s", q->snap_end, q->snap_epoch,
                           q->snap_base + q->snap_checked, why.msg);
        if (q->snap_base + q->snap_checked == 0 && !b.control)
            return km_fail(err, "snapshot (%" PRId64 ", %d) does not open with a control batch (SnapshotHeader)",
                           q->snap_end, q->snap_epoch);
        q->snap_last_control = b.control;
        q->snap_checked += b.size;
    }
    return 0;
}

/* The whole snapshot arrived: nothing left unchecked, and it closes with a control batch (the
 * SnapshotFooter; the reader checks the records' order when it is applied). */
static int check_complete(km_quorum *q, km_err *err)
{
    if (check_batches(q, err) < 0)
        return -1;
    if (q->snap_checked != q->snap.len)
        return km_fail(err, "snapshot (%" PRId64 ", %d) ends inside a batch at byte %zu of %zu", q->snap_end,
                       q->snap_epoch, q->snap_checked, q->snap.len);
    if (!q->snap_last_control)
        return km_fail(err, "snapshot (%" PRId64 ", %d) does not close with a control batch (SnapshotFooter)",
                       q->snap_end, q->snap_epoch);
    return 0;
}

static void refuse(km_quorum *q, const km_err *why)
{
    q->st.snapshot_refused++;
    q_snapshot_abandon(q); /* the next Fetch names the snapshot again: fetched from position 0 */
    char msg[1200];
    snprintf(msg, sizeof msg, "refused snapshot from leader %d: %s", q->leader_id, why->msg);
    q_retry(q, false, msg);
}

/* The snapshot replaced the image: check where it left it, then go on fetching after it. */
static void loaded(km_quorum *q)
{
    char name[128];
    snprintf(name, sizeof name, "quorum-snapshot/%020" PRId64 "-%010d.checkpoint", q->snap_end, q->snap_epoch);
    if (km_image_offset(q->img) != q->snap_end - 1)
        return q_fatal(q, "snapshot %s left the image at offset %" PRId64 ", not its end offset %" PRId64 " - 1",
                       name, km_image_offset(q->img), q->snap_end);
    q->applied_next = q->snap_end;
    q->applied_epoch = q->snap_epoch;
    q_reset_epochs(q, q->snap_epoch, q->snap_end);
    if (q->hw < q->snap_end)
        q->hw = q->snap_end; /* truncateToLatestSnapshot: the high watermark is at least its end */
    q->st.snapshot_loads++;
    q_log(q, "loaded snapshot (end offset %" PRId64 ", epoch %d): %" PRId64 " bytes in %.3f s from leader %d",
          q->snap_end, q->snap_epoch, q->snap_size, q_now(q) - q->snap_started, q->leader_id);
    q_snapshot_abandon(q); /* done with the bytes */
    q_deliver(q);
    q_next_request(q);
}

/* The last chunk arrived (held whole or spooled): verify, then replace the image. */
static void load_snapshot(km_quorum *q)
{
    char name[128];
    km_err err;
    snprintf(name, sizeof name, "quorum-snapshot/%020" PRId64 "-%010d.checkpoint", q->snap_end, q->snap_epoch);
    if (check_complete(q, &err) < 0)
        return refuse(q, &err);
    int rc = q->spool_fd >= 0 ? q_spool_apply(q, &err)
                              : q_apply_bytes(q, name, q->snap.data, q->snap.len, KM_ML_FROM_SNAPSHOT, &err);
    if (rc < 0)
        return q_fatal(q, "loading verified snapshot %s: %s", name, err.msg);
    loaded(q);
}

/* One chunk: same id, position = bytes received, one size throughout, within the bound. */
static int check_chunk(km_quorum *q, const km_fetch_snapshot_response_partition_snapshot *p, km_err *err)
{
    if (p->snapshot_id.end_offset != q->snap_end || p->snapshot_id.epoch != q->snap_epoch)
        return km_fail(err, "FetchSnapshot answered snapshot (%" PRId64 ", %d) for (%" PRId64 ", %d)",
                       p->snapshot_id.end_offset, p->snapshot_id.epoch, q->snap_end, q->snap_epoch);
    int64_t held = q->snap_received;
    if (p->position != held)
        return km_fail(err, "FetchSnapshot chunk at position %" PRId64 " where %" PRId64 " was asked for",
                       p->position, held);
    if (p->size <= 0 || (q->snap_size >= 0 && p->size != q->snap_size) || (uint64_t)p->size > q->cfg.snapshot_max_bytes)
        return km_fail(err, "FetchSnapshot size %" PRId64 " (before: %" PRId64 ", limit %zu)", p->size, q->snap_size,
                       q->cfg.snapshot_max_bytes);
    if (p->unaligned_records.len <= 0 || held + p->unaligned_records.len > p->size)
        return km_fail(err, "FetchSnapshot chunk of %d bytes at %" PRId64 " overruns size %" PRId64 " or is empty",
                       p->unaligned_records.len, held, p->size);
    return 0;
}

/* Held whole in memory (or spooled): the chunk is kept for the checks and the load at the end. */
static int hold_chunk(km_quorum *q, const km_fetch_snapshot_response_partition_snapshot *p, km_err *err)
{
    if (q->snap_size < 0 && q->spool_fd < 0 && !km_buf_reserve(&q->snap, (size_t)p->size)) /* no regrowth copies */
        return km_fail(err, "quorum: out of memory holding a %" PRId64 "-byte snapshot", p->size);
    q->snap_size = p->size;
    q->snap_received += p->unaligned_records.len;
    km_buf_put(&q->snap, p->unaligned_records.ptr, (size_t)p->unaligned_records.len);
    return q->snap.oom ? km_fail(err, "quorum: out of memory holding a %" PRId64 "-byte snapshot", p->size) : 0;
}

/* Streamed: the next chunk is asked for first, so it travels while this one is decoded. */
static void stream_chunk(km_quorum *q, const km_fetch_snapshot_response_partition_snapshot *p)
{
    km_err err;
    int64_t len = p->unaligned_records.len;
    q->snap_size = p->size;
    q->snap_received += len;
    bool last = q->snap_received == q->snap_size;
    if (!last)
        q_next_request(q);
    if (q_stream_chunk(q, (const uint8_t *)p->unaligned_records.ptr, (size_t)len, last, &err) < 0) {
        if (!q->fatal)
            refuse(q, &err);
        return;
    }
    q_healthy(q); /* only a chunk taken: a corrupt one keeps backing off */
    if (last)
        loaded(q);
}

static void on_partition(km_quorum *q, const km_fetch_snapshot_response_partition_snapshot *p)
{
    km_err err;
    if (p->error_code == QE_SNAPSHOT_NOT_FOUND || p->snapshot_id.end_offset < 0 || p->snapshot_id.epoch < 0) {
        q_log(q, "leader %d no longer has snapshot (%" PRId64 ", %d); fetching again", q->leader_id, q->snap_end,
              q->snap_epoch);
        q_snapshot_abandon(q);
        return q_next_request(q);
    }
    if (p->error_code != QE_NONE) {
        char why[1200];
        snprintf(why, sizeof why, "FetchSnapshot (%" PRId64 ", %d) at position %" PRId64 " from %s:%u: error %d (%s)",
                 q->snap_end, q->snap_epoch, q->snap_received, q->target.host, q->target.port, p->error_code,
                 q_error_name(p->error_code));
        /* POSITION_OUT_OF_RANGE (or any refusal of this download): asking for the same position again
         * would be refused again; start over from a Fetch, which names the snapshot anew, at position 0. */
        q_snapshot_abandon(q);
        return q_retry(q, false, why);
    }
    if (check_chunk(q, p, &err) < 0) {
        q_snapshot_abandon(q);
        return q_retry(q, false, err.msg);
    }
    if (q_stream_wanted(q))
        return stream_chunk(q, p);
    if (hold_chunk(q, p, &err) < 0) {
        q_snapshot_abandon(q);
        return q_retry(q, false, err.msg);
    }
    if (check_batches(q, &err) < 0)
        return refuse(q, &err);
    q_healthy(q);
    if (q_spool_flush(q, &err) < 0)
        return q_fatal(q, "%s", err.msg);
    if ((int64_t)(q->snap_base + q->snap.len) == q->snap_size)
        return load_snapshot(q);
    q_next_request(q);
}

void q_on_fetch_snapshot_response(km_quorum *q, const uint8_t *body, size_t len)
{
    km_arena a;
    km_arena_init(&a, Q_SNAP_ARENA);
    km_fetch_snapshot_response rs;
    km_err err;
    if (km_decode_borrowing(&km_fetch_snapshot_response_desc, q->snap_v, body, len, &rs, &a, &err) < 0) {
        char why[1200];
        snprintf(why, sizeof why, "FetchSnapshot response from %s:%u: %s", q->target.host, q->target.port, err.msg);
        km_arena_free(&a);
        return q_retry(q, false, why);
    }
    for (int32_t i = 0; i < rs.node_endpoints.count; i++) {
        const km_fetch_snapshot_response_node_endpoint *e = &rs.node_endpoints.items[i];
        q_learn_endpoint(q, e->node_id, e->host.len > 0 ? e->host.ptr : NULL, e->port);
    }
    const km_fetch_snapshot_response_partition_snapshot *p = NULL;
    if (rs.topics.count == 1 && rs.topics.items[0].partitions.count == 1 &&
        km_str_eq(rs.topics.items[0].name, Q_METADATA_TOPIC) && rs.topics.items[0].partitions.items[0].index == 0)
        p = &rs.topics.items[0].partitions.items[0];
    if (q_top_level_ok(q, "FetchSnapshot", rs.error_code, p != NULL) &&
        q_common_response(q, p->error_code, p->current_leader.leader_id, p->current_leader.leader_epoch) == 0)
        on_partition(q, p);
    km_arena_free(&a);
}

