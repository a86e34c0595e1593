/* Streaming a fetched snapshot into the image: each FetchSnapshot chunk's whole batches are
 * checked (framing, CRC32C, the snapshot's record order: header first, footer last) and
 * decoded in place from the response as it arrives, into the image's staged snapshot; a batch
 * cut by a chunk's end is carried over to the next.  The staged state replaces the image only
 * at the SnapshotFooter, so a refused or abandoned download leaves the image as it was.
 * Memory: the staged image, one chunk and one batch, instead of the whole snapshot besides. */
#include "quorum_internal.h"

#include <inttypes.h>
#include <stdio.h>

#define BATCH_LENGTH_END 12 /* baseOffset (int64) + batchLength (int32): what tells a batch's size */

bool q_stream_wanted(const km_quorum *q)
{
    return !q->cfg.snapshot_dir && !q->cfg.snapshot_hold_whole;
}

/* The size a batch announces; p holds at least BATCH_LENGTH_END bytes of it. */
static size_t announced_size(const uint8_t *p)
{
    uint32_t n = km_be32(p + 8);
    return BATCH_LENGTH_END + (size_t)n;
}

static int check_size(const km_quorum *q, size_t size, int64_t at, km_err *err)
{
    if (size <= KM_ML_MAX_BATCH_DEFAULT)
        return 0;
    return km_fail(err, "snapshot (%" PRId64 ", %d) byte %" PRId64 ": batch of %zu bytes (limit %u)", q->snap_end,
                   q->snap_epoch, at, size, KM_ML_MAX_BATCH_DEFAULT);
}

/* Hands whole batches to the reader and applies their records to the staged snapshot.  An
 * image that refuses a record of a snapshot whose batches hold is fatal, as a file would be. */
static int feed(km_quorum *q, const uint8_t *p, size_t len, bool last, km_err *err)
{
    bool image_failed = false;
    if (km_metalog_feed(q->snap_stream, p, len, last, err) < 0 ||
        q_apply_records(q, q->snap_stream, &image_failed, err) < 0) {
        if (image_failed)
            q_fatal(q, "loading snapshot (%" PRId64 ", %d): %s", q->snap_end, q->snap_epoch, err->msg);
        return -1;
    }
    q->snap_base += len;
    return 0;
}

/* Completes the carried batch from p[*pos..len): 1 when it is whole, 0 when the chunk ran out. */
static int fill_carry(km_quorum *q, const uint8_t *p, size_t len, size_t *pos, km_err *err)
{
    for (int step = 0; step < 2; step++) { /* its length field first, then the rest it announces */
        size_t need = BATCH_LENGTH_END;
        if (q->snap.len >= BATCH_LENGTH_END) {
            need = announced_size(q->snap.data);
            if (check_size(q, need, (int64_t)q->snap_base, err) < 0)
                return -1;
        }
        size_t take = need > q->snap.len ? need - q->snap.len : 0;
        if (take > len - *pos)
            take = len - *pos;
        km_buf_put(&q->snap, p + *pos, take);
        *pos += take;
        if (q->snap.oom)
            return km_fail(err, "quorum: out of memory carrying a %zu-byte snapshot batch", need);
        if (q->snap.len < need)
            return 0;
    }
    return 1;
}

static int open_stream(km_quorum *q, km_err *err)
{
    char name[128];
    snprintf(name, sizeof name, "quorum-snapshot/%020" PRId64 "-%010d.checkpoint", q->snap_end, q->snap_epoch);
    q->snap_stream = km_metalog_open_stream(name, KM_ML_FROM_SNAPSHOT, NULL, err);
    return q->snap_stream ? 0 : -1;
}

int q_stream_chunk(km_quorum *q, const uint8_t *p, size_t len, bool last, km_err *err)
{
    if (!q->snap_stream && open_stream(q, err) < 0)
        return -1;
    size_t pos = 0;
    if (q->snap.len) {
        int r = fill_carry(q, p, len, &pos, err);
        if (r < 0 || (r > 0 && feed(q, q->snap.data, q->snap.len, false, err) < 0))
            return -1;
        if (r > 0)
            km_buf_reset(&q->snap);
    }
    size_t start = pos;
    while (len - pos >= BATCH_LENGTH_END) { /* whole batches are read in place, from the response */
        size_t size = announced_size(p + pos);
        if (check_size(q, size, (int64_t)(q->snap_base + (pos - start)), err) < 0)
            return -1;
        if (size > len - pos)
            break;
        pos += size;
    }
    if (last && (q->snap.len || pos < len))
        return km_fail(err, "snapshot (%" PRId64 ", %d) ends inside a batch at byte %" PRIu64 " of %" PRId64,
                       q->snap_end, q->snap_epoch, q->snap_base + (pos - start), q->snap_size);
    if ((pos > start || last) && feed(q, p + start, pos - start, last, err) < 0)
        return -1;
    km_buf_put(&q->snap, p + pos, len - pos);
    return q->snap.oom ? km_fail(err, "quorum: out of memory carrying a snapshot batch") : 0;
}

void q_stream_abandon(km_quorum *q)
{
    if (!q->snap_stream)
        return;
    km_metalog_close(q->snap_stream);
    q->snap_stream = NULL;
    km_image_abort_snapshot(q->img); /* no-op once the footer replaced the image */
}
