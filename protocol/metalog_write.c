/* metalog_write.c - building v2 record batches and appending them to segments and snapshots.
 *
 * Batches look like the ones KRaft's controller writes: producer id/epoch and
 * base sequence -1, every record with timestampDelta 0 and dense offset
 * deltas, metadata records with a null key, control records keyed
 * (version 0, type) with a version-0 value (ControlRecordUtils' versions).
 */
#include "metalog_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define ML_SEGMENT_BYTES_DEFAULT (1024ull * 1024ull * 1024ull)

/* ---- batches ------------------------------------------------------------------------ */

static int encode_value(const km_metalog_entry *e, km_buf *val, km_err *err)
{
    if (!e->desc || !e->msg)
        return km_fail(err, "entry has no message");
    if (e->control_type < 0)
        return km_ml_encode_frame(e->desc, e->version, e->msg, val, err);
    if (!km_ml_control_name(e->control_type))
        return km_fail(err, "unknown control record type %d", e->control_type);
    return km_encode(e->desc, 0, e->msg, val, err);
}

/* Appends one DefaultRecord: [length varint][attributes][tsDelta][offsetDelta][key][value][headers]. */
static int encode_record(const km_metalog_entry *e, int32_t offset_delta, km_buf *val, km_buf *body,
                         km_buf *recs, km_err *err)
{
    km_buf_reset(val);
    km_buf_reset(body);
    if (encode_value(e, val, err) < 0)
        return -1;
    if (val->len > INT32_MAX)
        return km_fail(err, "record value of %zu bytes is too large", val->len);
    km_buf_put_i8(body, 0);
    km_buf_put_varlong(body, 0);
    km_buf_put_varint(body, offset_delta);
    if (e->control_type >= 0) {
        km_buf_put_varint(body, 4);
        km_buf_put_i16(body, 0);
        km_buf_put_i16(body, e->control_type);
    } else {
        km_buf_put_varint(body, -1);
    }
    km_buf_put_varint(body, (int32_t)val->len);
    km_buf_put(body, val->data, val->len);
    km_buf_put_varint(body, 0);
    km_buf_put_varint(recs, (int32_t)body->len);
    km_buf_put(recs, body->data, body->len);
    return body->oom || recs->oom ? km_fail(err, "out of memory encoding a record") : 0;
}

static int encode_records(const km_metalog_entry *e, size_t n, km_buf *recs, km_err *err)
{
    km_buf val, body;
    km_buf_init(&val);
    km_buf_init(&body);
    int rc = 0;
    km_err inner;
    bool control = e[0].control_type >= 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        if ((e[i].control_type >= 0) != control)
            rc = km_fail(err, "entry %zu: a batch holds only control or only metadata records", i);
        else if (encode_record(&e[i], (int32_t)i, &val, &body, recs, &inner) < 0)
            rc = km_fail(err, "entry %zu (%s): %s", i, e[i].desc ? e[i].desc->name : "?", inner.msg);
    }
    km_buf_free(&val);
    km_buf_free(&body);
    return rc;
}

static void put_header(const km_metalog_batch_params *p, size_t n, bool control, int64_t ts, km_buf *out)
{
    uint16_t attrs = (uint16_t)p->compression;
    if (p->transactional)
        attrs |= KM_ML_ATTR_TRANSACTIONAL;
    if (control)
        attrs |= KM_ML_ATTR_CONTROL;
    km_buf_put_i64(out, p->base_offset);
    km_buf_put_i32(out, 0);                  /* batchLength, patched */
    km_buf_put_i32(out, p->leader_epoch);
    km_buf_put_i8(out, 2);                   /* magic */
    km_buf_put_i32(out, 0);                  /* crc, patched */
    km_buf_put_i16(out, (int16_t)attrs);
    km_buf_put_i32(out, (int32_t)(n - 1));   /* lastOffsetDelta */
    km_buf_put_i64(out, ts);                 /* baseTimestamp */
    km_buf_put_i64(out, ts);                 /* maxTimestamp */
    km_buf_put_i64(out, -1);                 /* producerId */
    km_buf_put_i16(out, -1);                 /* producerEpoch */
    km_buf_put_i32(out, -1);                 /* baseSequence */
    km_buf_put_i32(out, (int32_t)n);
}

int km_ml_encode_batch(const km_metalog_batch_params *p, const km_metalog_entry *e, size_t n,
                       km_buf *out, km_err *err)
{
    if (n < 1 || n > INT32_MAX)
        return km_fail(err, "a batch needs 1..%d records, not %zu", INT32_MAX, n);
    if ((int)p->compression < KM_ML_NONE || (int)p->compression > KM_ML_ZSTD)
        return km_fail(err, "unknown compression codec %d", (int)p->compression);
    if (out->count_only) /* the CRC and compression need the bytes themselves */
        return km_fail(err, "a record batch cannot be built into a counting-only buffer");
    km_buf recs, packed;
    km_buf_init(&recs);
    km_buf_init(&packed);
    int rc = encode_records(e, n, &recs, err);
    km_buf *section = &recs;
    if (rc == 0 && p->compression != KM_ML_NONE) {
        rc = km_ml_deflate(p->compression, recs.data, recs.len, &packed, err);
        section = &packed;
    }
    size_t start = out->len;
    if (rc == 0) {
        put_header(p, n, e[0].control_type >= 0, p->timestamp ? p->timestamp : km_ml_now_ms(), out);
        km_buf_put(out, section->data, section->len);
        size_t total = out->len - start;
        if (out->oom || total > INT32_MAX)
            rc = km_fail(err, "batch of %zu bytes cannot be built", total);
    }
    if (rc == 0) {
        km_buf_patch_i32(out, start + KM_ML_POS_LENGTH, (int32_t)(out->len - start - KM_ML_LOG_OVERHEAD));
        uint32_t crc = km_crc32c(0, out->data + start + KM_ML_POS_ATTRIBUTES, out->len - start - KM_ML_POS_ATTRIBUTES);
        km_buf_patch_i32(out, start + KM_ML_POS_CRC, (int32_t)crc);
    } else if (out->len > start) {
        out->len = start;
    }
    km_buf_free(&recs);
    km_buf_free(&packed);
    return rc;
}

/* ---- files ------------------------------------------------------------------------------ */

struct km_metalog_writer {
    km_metalog_writer_opts o;
    char *dir;               /* segment writer */
    char *path, *part;       /* snapshot writer: final name and the `.part` being written */
    int fd;
    bool broken;             /* a write failed part-way: appending more would bury a torn batch */
    uint64_t size;           /* bytes in the current file */
    int64_t next_offset;
    km_buf buf;
};

static int write_all(km_metalog_writer *w, const uint8_t *p, size_t n, km_err *err)
{
    const char *file = w->part ? w->part : w->path;
    uint64_t at = w->size;
    while (n > 0) {
        ssize_t k = write(w->fd, p, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return km_fail(err, "%s: byte %" PRIu64 ": write failed: %s", file, w->size, strerror(errno));
        p += k;
        n -= (size_t)k;
        w->size += (uint64_t)k;
    }
    if (w->o.fsync && fsync(w->fd) < 0)
        return km_fail(err, "%s: byte %" PRIu64 ": fsync failed: %s", file, at, strerror(errno));
    return 0;
}

static km_metalog_writer *new_writer(const km_metalog_writer_opts *opts)
{
    km_metalog_writer *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    if (opts)
        w->o = *opts;
    if (!w->o.segment_bytes)
        w->o.segment_bytes = ML_SEGMENT_BYTES_DEFAULT;
    w->fd = -1;
    km_buf_init(&w->buf);
    return w;
}

static void free_writer(km_metalog_writer *w)
{
    if (w->fd >= 0)
        close(w->fd);
    km_buf_free(&w->buf);
    free(w->dir);
    free(w->path);
    free(w->part);
    free(w);
}

void km_metalog_writer_abort(km_metalog_writer *w)
{
    if (!w)
        return;
    if (w->part)
        unlink(w->part);
    free_writer(w);
}

int64_t km_metalog_writer_next_offset(const km_metalog_writer *w) { return w->next_offset; }

static int encode_into(km_metalog_writer *w, const km_metalog_entry *e, size_t n, km_err *err)
{
    km_metalog_batch_params p = {
        .base_offset = w->next_offset,
        .leader_epoch = w->o.leader_epoch,
        .timestamp = w->o.timestamp,
        .compression = w->o.compression,
    };
    km_buf_reset(&w->buf);
    return km_ml_encode_batch(&p, e, n, &w->buf, err);
}

static int open_segment(km_metalog_writer *w, int64_t base, bool create, km_err *err)
{
    char name[32];
    snprintf(name, sizeof name, "%020" PRId64 ".log", base);
    free(w->path);
    if (asprintf(&w->path, "%s/%s", w->dir, name) < 0) {
        w->path = NULL;
        return km_fail(err, "%s: out of memory", w->dir);
    }
    if (w->fd >= 0)
        close(w->fd);
    int flags = O_WRONLY | O_APPEND | O_CLOEXEC | (create ? O_CREAT | O_EXCL : 0);
    w->fd = open(w->path, flags, 0644);
    if (w->fd < 0)
        return km_fail(err, "%s: %s", w->path, strerror(errno));
    struct stat st;
    if (fstat(w->fd, &st) < 0)
        return km_fail(err, "%s: fstat: %s", w->path, strerror(errno));
    w->size = (uint64_t)st.st_size;
    return 0;
}

/* Where an existing segment ends: reads it whole (CRCs checked) so a torn tail is refused, not extended. */
static int segment_end(const char *path, int64_t base, int64_t *next, km_err *err)
{
    km_metalog_opts o = {.raw = true};
    km_metalog *r = km_metalog_open_file(path, &o, err);
    if (!r)
        return -1;
    km_metalog_record rec;
    int rc;
    *next = base;
    while ((rc = km_metalog_next(r, &rec, err)) == 1)
        *next = rec.batch->last_offset + 1;
    km_metalog_close(r);
    return rc;
}

/* Last segment base and latest snapshot end in dir (-1 when absent). */
static int scan_dir(const char *dir, int64_t *last_base, int64_t *snap_end, km_err *err)
{
    DIR *d = opendir(dir);
    if (!d)
        return km_fail(err, "%s: %s", dir, strerror(errno));
    *last_base = *snap_end = -1;
    struct dirent *e;
    while ((e = readdir(d))) {
        int64_t b = km_ml_segment_base(e->d_name), end;
        int32_t epoch;
        if (b > *last_base)
            *last_base = b;
        if (km_ml_snapshot_parse(e->d_name, &end, &epoch) && end > *snap_end)
            *snap_end = end;
    }
    closedir(d);
    return 0;
}

km_metalog_writer *km_metalog_writer_open_dir(const char *dir, const km_metalog_writer_opts *opts, km_err *err)
{
    int64_t last = -1, snap_end = -1;
    km_metalog_writer *w = new_writer(opts);
    if (!w || !(w->dir = strdup(dir))) {
        km_fail(err, "%s: out of memory", dir);
        goto fail;
    }
    if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
        km_fail(err, "%s: mkdir: %s", dir, strerror(errno));
        goto fail;
    }
    if (scan_dir(dir, &last, &snap_end, err) < 0)
        goto fail;
    if (last < 0) { /* a fresh log continues after the latest snapshot, if any */
        w->next_offset = snap_end > 0 ? snap_end : 0;
        if (open_segment(w, w->next_offset, true, err) < 0)
            goto fail;
        return w;
    }
    if (open_segment(w, last, false, err) < 0 || segment_end(w->path, last, &w->next_offset, err) < 0)
        goto fail;
    return w;
fail:
    if (w)
        free_writer(w);
    return NULL;
}

static int roll_if_full(km_metalog_writer *w, size_t batch, km_err *err)
{
    if (!w->dir || w->size == 0 || w->size + batch <= w->o.segment_bytes)
        return 0;
    if (fsync(w->fd) < 0)
        return km_fail(err, "%s: fsync before roll: %s", w->path, strerror(errno));
    return open_segment(w, w->next_offset, true, err);
}

int km_metalog_writer_append(km_metalog_writer *w, const km_metalog_entry *e, size_t n,
                             int64_t *base_offset, km_err *err)
{
    if (w->broken)
        return km_fail(err, "%s: an earlier write failed; the writer accepts nothing more", w->part ? w->part : w->path);
    if (encode_into(w, e, n, err) < 0)
        return -1;
    if (roll_if_full(w, w->buf.len, err) < 0 || write_all(w, w->buf.data, w->buf.len, err) < 0) {
        w->broken = true;
        return -1;
    }
    if (base_offset)
        *base_offset = w->next_offset;
    w->next_offset += (int64_t)n;
    return 0;
}

/* ---- snapshots ---------------------------------------------------------------------------- */

/* Writes one control batch holding a header or footer record. */
static int append_marker(km_metalog_writer *w, int16_t type, int64_t last_ts, km_err *err)
{
    const km_message_desc *md = km_ml_control_desc(type);
    if (!md)
        return km_fail(err, "the codec has no message for control type %s", km_ml_control_name(type));
    void *obj = calloc(1, md->root->size);
    if (!obj)
        return km_fail(err, "out of memory");
    km_init(md->root, obj);
    int rc = km_ml_set_int_field(md->root, obj, "Version", 0, err);
    if (rc == 0 && type == KM_ML_CTRL_SNAPSHOT_HEADER)
        rc = km_ml_set_int_field(md->root, obj, "LastContainedLogTimestamp", last_ts, err);
    km_metalog_entry e = {.desc = md, .msg = obj, .control_type = type};
    if (rc == 0)
        rc = km_metalog_writer_append(w, &e, 1, NULL, err);
    free(obj);
    return rc;
}

km_metalog_writer *km_metalog_writer_open_snapshot(const char *path, int64_t last_contained_log_timestamp,
                                                   const km_metalog_writer_opts *opts, km_err *err)
{
    km_metalog_writer *w = new_writer(opts);
    if (!w || !(w->path = strdup(path)) || asprintf(&w->part, "%s.part", path) < 0) {
        if (w)
            w->part = NULL;
        km_fail(err, "%s: out of memory", path);
        goto fail;
    }
    w->fd = open(w->part, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (w->fd < 0) {
        km_fail(err, "%s: %s", w->part, strerror(errno));
        goto fail;
    }
    if (append_marker(w, KM_ML_CTRL_SNAPSHOT_HEADER, last_contained_log_timestamp, err) < 0)
        goto fail;
    return w;
fail:
    km_metalog_writer_abort(w);
    return NULL;
}

/* Makes a rename durable: the directory entry itself must reach the disk. */
static void sync_parent(const char *path)
{
    char *copy = strdup(path);
    if (!copy)
        return;
    char *slash = strrchr(copy, '/');
    const char *dir = slash ? (slash == copy ? "/" : (*slash = '\0', copy)) : ".";
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    free(copy);
}

int km_metalog_writer_finish(km_metalog_writer *w, km_err *err)
{
    int rc = 0;
    if (w->broken)
        rc = km_fail(err, "%s: an earlier write failed", w->part ? w->part : w->path);
    if (rc == 0 && w->part && append_marker(w, KM_ML_CTRL_SNAPSHOT_FOOTER, 0, err) < 0)
        rc = -1;
    if (rc == 0 && fsync(w->fd) < 0)
        rc = km_fail(err, "%s: fsync: %s", w->part ? w->part : w->path, strerror(errno));
    if (rc == 0 && close(w->fd) < 0)
        rc = km_fail(err, "%s: close: %s", w->part ? w->part : w->path, strerror(errno));
    w->fd = -1;
    if (rc == 0 && w->part) {
        if (rename(w->part, w->path) < 0)
            rc = km_fail(err, "%s: rename to %s: %s", w->part, w->path, strerror(errno));
        else
            sync_parent(w->path);
    }
    if (rc < 0) {
        km_metalog_writer_abort(w);
        return -1;
    }
    free(w->part);
    w->part = NULL;
    free_writer(w);
    return 0;
}
