/* The log as the observer holds it: applied records (in the image) and fetched batches
 * waiting for the high watermark, with the epoch history Kafka's truncation needs. */
#include "quorum_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int64_t q_fetch_offset(const km_quorum *q)
{
    return q->n_batches > q->first_batch ? q->batches[q->n_batches - 1].last + 1 : q->applied_next;
}

/* ReplicatedLog.lastFetchedEpoch: the epoch of the last record held (0 for an empty log). */
int32_t q_last_fetched_epoch(const km_quorum *q)
{
    return q->n_batches > q->first_batch ? q->batches[q->n_batches - 1].epoch : q->applied_epoch;
}

void q_reset_epochs(km_quorum *q, int32_t epoch, int64_t start)
{
    q->n_epochs = 0;
    if (epoch < 0)
        return;
    if (!q->cap_epochs) {
        q->epochs = malloc(16 * sizeof *q->epochs);
        q->cap_epochs = q->epochs ? 16 : 0;
    }
    if (q->cap_epochs)
        q->epochs[q->n_epochs++] = (q_epoch_start){ epoch, start };
}

static int note_epoch(km_quorum *q, int32_t epoch, int64_t start, km_err *err)
{
    if (q->n_epochs && q->epochs[q->n_epochs - 1].epoch >= epoch)
        return 0;
    if (q->n_epochs == q->cap_epochs) {
        size_t n = q->cap_epochs ? q->cap_epochs * 2 : 16;
        q_epoch_start *e = realloc(q->epochs, n * sizeof *e);
        if (!e)
            return km_fail(err, "quorum: out of memory for the epoch history");
        q->epochs = e;
        q->cap_epochs = n;
    }
    q->epochs[q->n_epochs++] = (q_epoch_start){ epoch, start };
    return 0;
}

static int add_batch(km_quorum *q, const km_metalog_batch *b, km_err *err)
{
    if (q->n_batches == q->cap_batches) {
        size_t n = q->cap_batches ? q->cap_batches * 2 : 256;
        q_batch *nb = realloc(q->batches, n * sizeof *nb);
        if (!nb)
            return km_fail(err, "quorum: out of memory for %zu batches", n);
        q->batches = nb;
        q->cap_batches = n;
    }
    q->batches[q->n_batches++] = (q_batch){ b->base_offset, b->last_offset, b->leader_epoch, q->buf.len, b->size };
    return note_epoch(q, b->leader_epoch, b->base_offset, err);
}

/* Appends the whole batches of a Fetch answer (a cut last one is left for the next fetch, as
 * Kafka's follower does).  Each batch must continue the held log and carry a CRC that holds;
 * epochs never go back.  Returns the batches taken, or -1. */
int q_buffer_records(km_quorum *q, const uint8_t *p, size_t len, km_err *err)
{
    size_t pos = 0;
    int taken = 0;
    while (pos < len) {
        km_metalog_batch b;
        km_err why;
        int r = km_ml_peek_batch(p + pos, len - pos, 0, &b, &why);
        if (r == 0)
            break;
        if (r < 0)
            return km_fail(err, "fetched records, byte %zu (offset %" PRId64 "): %s", pos, q_fetch_offset(q), why.msg);
        if (b.base_offset != q_fetch_offset(q))
            return km_fail(err, "fetched batch at offset %" PRId64 " where %" PRId64 " was asked for",
                           b.base_offset, q_fetch_offset(q));
        if (b.leader_epoch < q_last_fetched_epoch(q))
            return km_fail(err, "fetched batch at offset %" PRId64 " has epoch %d below the log's %d", b.base_offset,
                           b.leader_epoch, q_last_fetched_epoch(q));
        if (q->buf.len - q->buf_head + b.size > q->cfg.buffer_max_bytes && q->n_batches > q->first_batch)
            break; /* full: the rest waits until the high watermark frees room */
        if (add_batch(q, &b, err) < 0) /* records the batch at the buffer's current end */
            return -1;
        km_buf_put(&q->buf, p + pos, b.size);
        if (q->buf.oom)
            return km_fail(err, "quorum: out of memory buffering %u bytes", b.size);
        pos += b.size;
        taken++;
    }
    q->st.buffered_bytes = q->buf.len - q->buf_head;
    return taken;
}

void q_clear_buffer(km_quorum *q)
{
    km_buf_reset(&q->buf);
    q->buf_head = 0;
    q->n_batches = q->first_batch = 0;
    q->st.buffered_bytes = 0;
}

/* Drops the applied prefix; compacts once the dead head outweighs what is left. */
static void consume(km_quorum *q, size_t upto_batch)
{
    q_batch *last = &q->batches[upto_batch - 1];
    q->buf_head = last->pos + last->size;
    q->first_batch = upto_batch;
    if (q->first_batch == q->n_batches) {
        q_clear_buffer(q);
        return;
    }
    if (q->buf_head > q->buf.len / 2) {
        size_t rest = q->buf.len - q->buf_head;
        memmove(q->buf.data, q->buf.data + q->buf_head, rest);
        q->buf.len = rest;
        size_t n = q->n_batches - q->first_batch;
        memmove(q->batches, q->batches + q->first_batch, n * sizeof *q->batches);
        for (size_t i = 0; i < n; i++)
            q->batches[i].pos -= q->buf_head;
        q->n_batches = n;
        q->first_batch = 0;
        q->buf_head = 0;
    }
    q->st.buffered_bytes = q->buf.len - q->buf_head;
}

int q_apply_log(km_quorum *q, km_metalog *log, km_err *err)
{
    km_metalog_record rec;
    int r;
    while ((r = km_metalog_next(log, &rec, err)) > 0) {
        if (q->h.on_record)
            q->h.on_record(q, &rec, q->ud);
        if (km_image_apply_record(q->img, &rec, q->delta, err) < 0) {
            r = -1;
            break;
        }
    }
    km_metalog_close(log);
    return r;
}

int q_apply_bytes(km_quorum *q, const char *name, const uint8_t *p, size_t len, km_ml_source source, km_err *err)
{
    km_metalog *log = km_metalog_open_mem(name, p, len, source, NULL, err);
    return log ? q_apply_log(q, log, err) : -1;
}

/* Applies every buffered batch wholly below the high watermark, in one pass. */
int q_apply_committed(km_quorum *q, km_err *err)
{
    size_t upto = q->first_batch;
    while (upto < q->n_batches && q->batches[upto].last < q->hw)
        upto++;
    if (upto == q->first_batch)
        return 0;
    const q_batch *from = &q->batches[q->first_batch], *to = &q->batches[upto - 1];
    char name[300];
    snprintf(name, sizeof name, "quorum:%s:%u", q->target.host, q->target.port);
    if (q_apply_bytes(q, name, q->buf.data + from->pos, to->pos + to->size - from->pos, KM_ML_FROM_LOG, err) < 0)
        return -1;
    q->applied_next = to->last + 1;
    q->applied_epoch = to->epoch;
    consume(q, upto);
    return 1;
}

/* LeaderEpochFileCache.endOffsetFor over what is held: the largest epoch <= epoch, and where
 * it ends (the next epoch's start, or the end of the log). */
static void end_offset_for_epoch(const km_quorum *q, int32_t epoch, int64_t *end, int32_t *found)
{
    *found = -1;
    for (size_t i = 0; i < q->n_epochs; i++) {
        if (q->epochs[i].epoch > epoch) {
            if (*found >= 0) {
                *end = q->epochs[i].start;
                return;
            }
            break;
        }
        *found = q->epochs[i].epoch;
    }
    if (*found >= 0)
        *end = q_fetch_offset(q);
    else /* every epoch held is newer than the leader's: nothing held is known to it */
        *end = q->n_epochs ? q->epochs[0].start : q->applied_next;
}

static void truncate_to(km_quorum *q, int64_t offset)
{
    size_t i = q->first_batch;
    while (i < q->n_batches && q->batches[i].last < offset)
        i++;
    if (i < q->n_batches) {
        q->buf.len = q->batches[i].pos;
        q->n_batches = i;
    }
    while (q->n_epochs > 1 && q->epochs[q->n_epochs - 1].start >= q_fetch_offset(q))
        q->n_epochs--;
    if (q->n_batches == q->first_batch)
        q_clear_buffer(q);
    q->st.buffered_bytes = q->buf.len - q->buf_head;
}

/* ReplicatedLog.truncateToEndOffset, refusing to cut into applied (committed) records. */
int q_truncate_diverging(km_quorum *q, int64_t end_offset, int32_t epoch, km_err *err)
{
    int64_t leo = q_fetch_offset(q), to;
    if (epoch == 0) {
        to = end_offset < leo ? end_offset : leo;
    } else {
        int64_t local_end;
        int32_t local_epoch;
        end_offset_for_epoch(q, epoch, &local_end, &local_epoch);
        if (local_epoch == epoch)
            to = local_end < end_offset ? local_end : end_offset;
        else
            to = local_end;
    }
    if (to < q->applied_next)
        return km_fail(err, "leader %d (epoch %d) diverges from applied records: DivergingEpoch (end offset %" PRId64
                       ", epoch %d) truncates to offset %" PRId64 ", below the applied offset %" PRId64
                       " (epoch %d); committed metadata was contradicted",
                       q->leader_id, q->epoch, end_offset, epoch, to, q->applied_next - 1, q->applied_epoch);
    if (to < leo) {
        q_log(q, "truncated uncommitted records %" PRId64 "..%" PRId64 " (DivergingEpoch end offset %" PRId64
              ", epoch %d from leader %d)", to, leo - 1, end_offset, epoch, q->leader_id);
        q->st.truncations++;
    }
    truncate_to(q, to);
    return 0;
}

void q_log_free(km_quorum *q)
{
    q_spool_discard(q);
    km_buf_free(&q->buf);
    km_buf_free(&q->snap);
    free(q->batches);
    free(q->epochs);
}
