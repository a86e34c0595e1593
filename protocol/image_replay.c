/* image_replay.c - records into the image: transactions, snapshots, control
 * records, positions, and the poisoned state after a failure.
 */
#include "image_internal.h"

#include <inttypes.h>
#include <stdio.h>

static int poison(km_image *img, km_err *err)
{
    img->failed = true;
    if (err)
        img->failure = *err;
    return -1;
}

static int failed(const km_image *img, km_err *err)
{
    if (err)
        *err = img->failure;
    return -1;
}

static void set_pos(km_image *img, km_delta *delta, int64_t offset, int32_t epoch)
{
    img->offset = offset;
    img->epoch = epoch;
    if (delta)
        km_delta_note_pos(delta, offset, epoch);
}

static int buffer_frame(km_image *img, const uint8_t *p, size_t len, int64_t offset, int32_t epoch, km_err *err)
{
    if (img->txn_bytes + len > KM_IMAGE_TXN_MAX_BYTES)
        return km_fail(err, "image: offset %" PRId64 ": transaction larger than %u MiB", offset,
                       KM_IMAGE_TXN_MAX_BYTES >> 20);
    if (img->n_txn == img->cap_txn) {
        size_t nc = img->cap_txn ? img->cap_txn * 2 : 64;
        km_txn_rec *nt = realloc(img->txn, nc * sizeof *nt);
        if (!nt)
            return km_fail(err, "image: offset %" PRId64 ": out of memory buffering a transaction", offset);
        img->txn = nt;
        img->cap_txn = nc;
    }
    uint8_t *c = malloc(len ? len : 1);
    if (!c)
        return km_fail(err, "image: offset %" PRId64 ": out of memory buffering a transaction", offset);
    memcpy(c, p, len);
    img->txn[img->n_txn++] = (km_txn_rec){offset, epoch, (uint32_t)len, c};
    img->txn_bytes += len;
    return 0;
}

static void drop_txn(km_image *img)
{
    for (size_t i = 0; i < img->n_txn; i++)
        free(img->txn[i].frame);
    img->n_txn = 0;
    img->txn_bytes = 0;
    img->in_txn = false;
}

static int apply_now(km_image *img, const km_message_desc *md, int16_t type, int16_t version, const void *msg,
                     int64_t offset, const char *where, km_delta *delta, km_err *err)
{
    km_apply_ctx c = {.img = img, .st = img->staging ? img->staging : img->st,
                      .delta = img->staging ? NULL : delta, .offset = offset, .type = type,
                      .version = version, .desc = md, .where = where, .err = err};
    return km_apply_msg(&c, msg);
}

/* EndTransaction: the buffered records go in now, in order. */
static int commit_txn(km_image *img, const char *where, km_delta *delta, km_err *err)
{
    km_arena arena;
    km_arena_init(&arena, 0);
    int rc = 0;
    for (size_t i = 0; i < img->n_txn && rc == 0; i++) {
        km_txn_rec *t = &img->txn[i];
        int16_t type, ver;
        const km_message_desc *md;
        void *msg;
        km_err e2;
        if (km_ml_decode_frame(t->frame, t->len, &type, &ver, &md, &msg, &arena, &e2) < 0)
            rc = km_fail(err, "%s: offset %" PRId64 ": %s", where ? where : "image", t->offset, e2.msg);
        else
            rc = apply_now(img, md, type, ver, msg, t->offset, where, delta, err);
        km_arena_free(&arena);
    }
    km_arena_free(&arena);
    drop_txn(img);
    return rc;
}

/* Begin/End/Abort as MetadataBatchLoader checks them. */
static int txn_marker(km_image *img, int16_t type, int64_t offset, int32_t epoch, const char *where,
                      km_delta *delta, km_err *err)
{
    const char *name = km_metadata_record_type_name(type);
    const char *w = where ? where : "image";
    if (type == KM_MDR_BEGIN_TRANSACTION_RECORD) {
        if (img->in_txn)
            return km_fail(err, "%s: offset %" PRId64 ": %s v0: already in a transaction", w, offset, name);
        img->in_txn = true;
        return 0;
    }
    if (!img->in_txn)
        return km_fail(err, "%s: offset %" PRId64 ": %s v0: no BeginTransactionRecord before it", w, offset, name);
    if (type == KM_MDR_END_TRANSACTION_RECORD) {
        if (commit_txn(img, where, delta, err) < 0)
            return -1;
    } else {
        drop_txn(img);
    }
    if (!img->staging)
        set_pos(img, delta, offset, epoch);
    return 0;
}

static bool is_txn_marker(int16_t type)
{
    return type == KM_MDR_BEGIN_TRANSACTION_RECORD || type == KM_MDR_END_TRANSACTION_RECORD ||
           type == KM_MDR_ABORT_TRANSACTION_RECORD;
}

/* One metadata record; frame/len is its encoded form when the caller has it
 * (saves re-encoding a record that has to wait for its transaction's end). */
static int apply_metadata(km_image *img, const km_message_desc *md, int16_t type, int16_t version, const void *msg,
                          const uint8_t *frame,
                          size_t len, int64_t offset, int32_t epoch, const char *where, km_delta *delta,
                          km_err *err)
{
    if (is_txn_marker(type))
        return txn_marker(img, type, offset, epoch, where, delta, err);
    if (img->in_txn && frame)
        return buffer_frame(img, frame, len, offset, epoch, err);
    if (img->in_txn) {
        md = md ? md : km_find_message(KM_K_METADATA, type);
        km_buf b;
        km_buf_init(&b);
        int rc = md ? km_ml_encode_frame(md, version, msg, &b, err)
                    : km_fail(err, "%s: offset %" PRId64 ": unknown record type %d", where ? where : "image", offset, type);
        if (rc == 0)
            rc = buffer_frame(img, b.data, b.len, offset, epoch, err);
        km_buf_free(&b);
        return rc;
    }
    if (apply_now(img, md, type, version, msg, offset, where, delta, err) < 0)
        return -1;
    if (!img->staging)
        set_pos(img, delta, offset, epoch);
    return 0;
}

int km_image_apply(km_image *img, int16_t type, int16_t version, const void *msg, int64_t offset, int32_t epoch,
                   const char *where, km_delta *delta, km_err *err)
{
    if (img->failed)
        return failed(img, err);
    if (apply_metadata(img, NULL, type, version, msg, NULL, 0, offset, epoch, where, delta, err) < 0)
        return poison(img, err);
    return 0;
}

/* ---- snapshots ------------------------------------------------------------------------------ */

/* The snapshot's end offset and epoch from a name ending in
 * `<20 digits>-<10 digits>.checkpoint` (copies may carry a prefix). */
static bool snapshot_id(const char *path, int64_t *end, int32_t *epoch)
{
    size_t n = strlen(path);
    if (n < 42)
        return false;
    const char *b = path + n - 42;
    if (strcmp(b + 31, ".checkpoint") || b[20] != '-')
        return false;
    for (int i = 0; i < 31; i++)
        if (i != 20 && (b[i] < '0' || b[i] > '9'))
            return false;
    *end = strtoll(b, NULL, 10);
    *epoch = (int32_t)strtol(b + 21, NULL, 10);
    return true;
}

static int snapshot_begin(km_image *img, km_err *err)
{
    km_istate_free(&img->pool, img->staging);
    drop_txn(img);
    img->staging = km_istate_new();
    return img->staging ? 0 : km_fail(err, "image: out of memory starting a snapshot");
}

void km_image_abort_snapshot(km_image *img)
{
    km_istate_free(&img->pool, img->staging);
    img->staging = NULL;
}

/* The snapshot is complete: it becomes the image, and the delta is the difference. */
static int snapshot_end(km_image *img, const km_metalog_record *rec, km_delta *delta, km_err *err)
{
    if (!img->staging)
        return km_fail(err, "%s: offset %" PRId64 ": SnapshotFooter without SnapshotHeader", rec->batch->file,
                       rec->offset);
    if (delta && km_im_diff(&img->pool, img->st, img->staging, delta, err) < 0)
        return -1;
    km_istate_free(&img->pool, img->st);
    img->st = img->staging;
    img->staging = NULL;
    int64_t end = 0;
    int32_t epoch = rec->batch->leader_epoch;
    if (!snapshot_id(rec->batch->file, &end, &epoch))
        end = 0;             /* bootstrap.checkpoint: Kafka's BOOTSTRAP_SNAPSHOT_ID is (0, 0) */
    set_pos(img, delta, end - 1, epoch);
    if (delta)
        km_delta_mark_snapshot(delta);
    return 0;
}

static int apply_control(km_image *img, const km_metalog_record *rec, km_delta *delta, km_err *err)
{
    bool in_snap = rec->batch->source == KM_ML_FROM_SNAPSHOT;
    switch (rec->type) {
    case KM_ML_CTRL_SNAPSHOT_HEADER:
        return snapshot_begin(img, err);
    case KM_ML_CTRL_SNAPSHOT_FOOTER:
        return snapshot_end(img, rec, delta, err);
    case KM_ML_CTRL_LEADER_CHANGE:
        if (rec->msg) {
            const km_leader_change_message *m = rec->msg;
            img->raft_leader = m->leader_id;
            img->raft_leader_epoch = rec->batch->leader_epoch;
            if (delta)
                km_delta_note_leader(delta, m->leader_id, rec->batch->leader_epoch);
        }
        break;
    default:                 /* commit/abort markers, KRaftVersion, Voters: not image state */
        break;
    }
    if (!in_snap && !img->in_txn && !img->staging)
        set_pos(img, delta, rec->offset, rec->batch->leader_epoch);
    return 0;
}

int km_image_apply_record(km_image *img, const km_metalog_record *rec, km_delta *delta, km_err *err)
{
    if (img->failed)
        return failed(img, err);
    int rc;
    if (rec->control) {
        rc = apply_control(img, rec, delta, err);
    } else if (!rec->msg) {
        rc = km_fail(err, "%s: offset %" PRId64 ": record type %d v%d was not decoded (raw reader?)",
                     rec->batch->file, rec->offset, rec->type, rec->version);
    } else {
        rc = apply_metadata(img, rec->desc, rec->type, rec->version, rec->msg, rec->value.ptr,
                            rec->value.len > 0 ? (size_t)rec->value.len : 0, rec->offset, rec->batch->leader_epoch,
                            rec->batch->file, delta, err);
    }
    return rc < 0 ? poison(img, err) : 0;
}
