/* metalog_batch.c - record batch v2 header, records, control keys and the metadata record frame.
 *
 * Layouts follow Kafka's DefaultRecordBatch / DefaultRecord, ControlRecordType
 * and AbstractApiMessageSerde.  Everything here works on memory already in
 * hand and reports the reason only; metalog_read.c adds file and position.
 */
#include "metalog_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* km_fail that returns KM_ML_SCAN_BAD (km_fail has no va_list form, so format here). */
static int scan_fail(km_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int scan_fail(km_err *err, const char *fmt, ...)
{
    char msg[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    km_fail(err, "%s", msg);
    return KM_ML_SCAN_BAD;
}

static void fill_header(const uint8_t *p, uint32_t total, km_metalog_batch *b)
{
    memset(b, 0, sizeof *b);
    b->base_offset = (int64_t)km_ml_be64(p);
    b->size = total;
    b->leader_epoch = (int32_t)km_ml_be32(p + KM_ML_POS_EPOCH);
    b->crc = km_ml_be32(p + KM_ML_POS_CRC);
    b->attributes = km_ml_be16(p + KM_ML_POS_ATTRIBUTES);
    b->compression = (km_ml_compression)(b->attributes & KM_ML_ATTR_COMPRESSION);
    b->log_append_time = b->attributes & KM_ML_ATTR_LOG_APPEND_TIME;
    b->transactional = b->attributes & KM_ML_ATTR_TRANSACTIONAL;
    b->control = b->attributes & KM_ML_ATTR_CONTROL;
    b->has_delete_horizon = b->attributes & KM_ML_ATTR_DELETE_HORIZON;
    b->last_offset = b->base_offset + (int32_t)km_ml_be32(p + KM_ML_POS_LAST_DELTA);
    b->base_timestamp = (int64_t)km_ml_be64(p + KM_ML_POS_BASE_TS);
    b->max_timestamp = (int64_t)km_ml_be64(p + KM_ML_POS_MAX_TS);
    b->producer_id = (int64_t)km_ml_be64(p + KM_ML_POS_PRODUCER_ID);
    b->producer_epoch = (int16_t)km_ml_be16(p + KM_ML_POS_PRODUCER_EPOCH);
    b->base_sequence = (int32_t)km_ml_be32(p + KM_ML_POS_BASE_SEQ);
    b->record_count = (int32_t)km_ml_be32(p + KM_ML_POS_COUNT);
}

/* Checks the part of the header that decides whether and how much to read. */
static km_ml_scan check_prefix(const uint8_t *p, size_t max_batch, size_t *total, km_err *err)
{
    int8_t magic = (int8_t)p[KM_ML_POS_MAGIC];
    if (magic == 0 || magic == 1)
        return scan_fail(err, "message format v%d (magic %d) is not supported: only record batch v2 (magic 2)",
                         magic, magic);
    if (magic != 2)
        return scan_fail(err, "unknown magic byte %d (expected 2)", magic);
    int32_t len = (int32_t)km_ml_be32(p + KM_ML_POS_LENGTH);
    if (len < KM_ML_BATCH_OVERHEAD - KM_ML_LOG_OVERHEAD)
        return scan_fail(err, "batch length %d is below the %d-byte minimum", len,
                         KM_ML_BATCH_OVERHEAD - KM_ML_LOG_OVERHEAD);
    *total = (size_t)len + KM_ML_LOG_OVERHEAD;
    if (*total > max_batch)
        return scan_fail(err, "batch length %d exceeds the %zu-byte limit", len, max_batch);
    return KM_ML_SCAN_OK;
}

km_ml_scan km_ml_scan_batch(const uint8_t *p, size_t avail, size_t max_batch,
                            km_metalog_batch *b, size_t *need, km_err *err)
{
    size_t total = 0;
    if (avail < KM_ML_HEADER_UP_TO_MAGIC) {
        *need = KM_ML_HEADER_UP_TO_MAGIC;
        return KM_ML_SCAN_SHORT;
    }
    if (check_prefix(p, max_batch, &total, err) != KM_ML_SCAN_OK)
        return KM_ML_SCAN_BAD;
    if (avail < total) {
        *need = total;
        return KM_ML_SCAN_SHORT;
    }
    fill_header(p, (uint32_t)total, b);
    uint32_t crc = km_crc32c(0, p + KM_ML_POS_ATTRIBUTES, total - KM_ML_POS_ATTRIBUTES);
    if (crc != b->crc) {
        scan_fail(err, "CRC32C mismatch: batch says 0x%08x, bytes give 0x%08x", b->crc, crc);
        return KM_ML_SCAN_BAD_CRC;
    }
    if (b->base_offset < 0)
        return scan_fail(err, "negative base offset %lld", (long long)b->base_offset);
    if (b->last_offset < b->base_offset)
        return scan_fail(err, "negative lastOffsetDelta %lld", (long long)(b->last_offset - b->base_offset));
    if (b->record_count < 0)
        return scan_fail(err, "negative record count %d", b->record_count);
    if ((int)b->compression > KM_ML_ZSTD)
        return scan_fail(err, "unknown compression codec %d in attributes 0x%04x", (int)b->compression,
                         b->attributes);
    return KM_ML_SCAN_OK;
}

/* ---- records ------------------------------------------------------------------ */

/* Record headers are a handful of varints each, so they are decoded inline
 * here; anything unusual (too few bytes left, an over-long varint) falls
 * back to the codec's reader, which produces the error message. */
static inline bool fast_uvarint64(km_reader *r, int maxb, uint64_t *v)
{
    const uint8_t *p = r->p + r->pos;
    size_t left = r->len - r->pos;
    uint64_t x = 0;
    for (int i = 0; i < maxb && (size_t)i < left; i++) {
        x |= (uint64_t)(p[i] & 0x7f) << (7 * i);
        if (!(p[i] & 0x80)) {
            r->pos += (size_t)i + 1;
            *v = x;
            return true;
        }
    }
    return false;
}

static inline int rd_varint(km_reader *r, int32_t *v, const char *what, km_err *err)
{
    uint64_t u;
    if (!fast_uvarint64(r, 5, &u))
        return km_read_varint(r, v, what, err);
    uint32_t z = (uint32_t)u;
    *v = (int32_t)(z >> 1) ^ -(int32_t)(z & 1);
    return 0;
}

static inline int rd_varlong(km_reader *r, int64_t *v, const char *what, km_err *err)
{
    uint64_t u;
    if (!fast_uvarint64(r, 10, &u))
        return km_read_varlong(r, v, what, err);
    *v = (int64_t)(u >> 1) ^ -(int64_t)(u & 1);
    return 0;
}

static int read_bytes(km_reader *r, km_bytes *out, bool nullable, const char *what, km_err *err)
{
    int32_t n;
    if (rd_varint(r, &n, what, err) < 0)
        return -1;
    if (n < 0) {
        if (n == -1 && nullable) {
            *out = (km_bytes){NULL, -1};
            return 0;
        }
        return km_fail(err, "%s: invalid length %d at byte %zu", what, n, r->base + r->pos);
    }
    if ((size_t)n > r->len - r->pos)
        return km_fail(err, "%s: %d bytes at byte %zu overrun the record (%zu left)", what, n, r->base + r->pos,
                       r->len - r->pos);
    out->ptr = r->p + r->pos;
    out->len = n;
    r->pos += (size_t)n;
    return 0;
}

static int skip_headers(km_reader *r, int32_t count, km_err *err)
{
    for (int32_t i = 0; i < count; i++) {
        km_bytes k, v;
        if (read_bytes(r, &k, false, "record header key", err) < 0 ||
            read_bytes(r, &v, true, "record header value", err) < 0)
            return -1;
    }
    return 0;
}

int km_ml_parse_record(km_reader *r, km_ml_raw_record *out, km_err *err)
{
    int32_t len;
    size_t at = r->base + r->pos;
    if (rd_varint(r, &len, "record length", err) < 0)
        return -1;
    if (len < 0 || (size_t)len > r->len - r->pos)
        return km_fail(err, "record length %d at byte %zu does not fit the %zu bytes left", len, at,
                       r->len - r->pos);
    km_reader sub = {.p = r->p + r->pos, .len = (size_t)len, .pos = 0, .base = r->base + r->pos};
    r->pos += (size_t)len;
    if (sub.len < 1)
        return km_fail(err, "record at byte %zu is empty", at);
    out->attributes = (int8_t)sub.p[sub.pos++];
    if (rd_varlong(&sub, &out->timestamp_delta, "record timestampDelta", err) < 0 ||
        rd_varint(&sub, &out->offset_delta, "record offsetDelta", err) < 0 ||
        read_bytes(&sub, &out->key, true, "record key", err) < 0 ||
        read_bytes(&sub, &out->value, true, "record value", err) < 0 ||
        rd_varint(&sub, &out->header_count, "record header count", err) < 0)
        return -1;
    if (out->header_count < 0)
        return km_fail(err, "negative record header count %d in record at byte %zu", out->header_count, at);
    if (skip_headers(&sub, out->header_count, err) < 0)
        return -1;
    if (sub.pos != sub.len)
        return km_fail(err, "record at byte %zu has %zu bytes past its headers", at, sub.len - sub.pos);
    return 0;
}

/* ---- control records ---------------------------------------------------------- */

const char *km_ml_control_name(int16_t type)
{
    switch (type) {
    case KM_ML_CTRL_ABORT: return "Abort";
    case KM_ML_CTRL_COMMIT: return "Commit";
    case KM_ML_CTRL_LEADER_CHANGE: return "LeaderChange";
    case KM_ML_CTRL_SNAPSHOT_HEADER: return "SnapshotHeader";
    case KM_ML_CTRL_SNAPSHOT_FOOTER: return "SnapshotFooter";
    case KM_ML_CTRL_KRAFT_VERSION: return "KRaftVersion";
    case KM_ML_CTRL_VOTERS: return "KRaftVoters";
    default: return NULL;
    }
}

static const char *control_message_name(int16_t type)
{
    switch (type) {
    case KM_ML_CTRL_LEADER_CHANGE: return "LeaderChangeMessage";
    case KM_ML_CTRL_SNAPSHOT_HEADER: return "SnapshotHeaderRecord";
    case KM_ML_CTRL_SNAPSHOT_FOOTER: return "SnapshotFooterRecord";
    case KM_ML_CTRL_KRAFT_VERSION: return "KRaftVersionRecord";
    case KM_ML_CTRL_VOTERS: return "VotersRecord";
    default: return NULL;
    }
}

const km_message_desc *km_ml_control_desc(int16_t type)
{
    const char *name = control_message_name(type);
    return name ? km_find_message_by_name(name) : NULL;
}

int km_ml_parse_control_key(km_bytes key, int16_t *version, int16_t *type, km_err *err)
{
    if (key.len < 4)
        return km_fail(err, "control record key is %d bytes, needs 4 (version, type)", key.len);
    *version = (int16_t)km_ml_be16(key.ptr);
    *type = (int16_t)km_ml_be16(key.ptr + 2);
    /* Later key versions may only append fields, so any version >= 0 keeps type at bytes 2..3. */
    if (*version < 0)
        return km_fail(err, "control record key version %d is negative", *version);
    return 0;
}

int km_ml_decode_control(int16_t type, km_bytes value, const km_message_desc **desc, void **msg,
                         km_arena *arena, km_err *err)
{
    *desc = NULL;
    *msg = NULL;
    if (type == KM_ML_CTRL_ABORT || type == KM_ML_CTRL_COMMIT)
        return 0; /* transaction markers; the metadata log never carries them, and they hold no metadata */
    const char *name = control_message_name(type);
    if (!name)
        return km_fail(err, "unknown control record type %d", type);
    const km_message_desc *md = km_find_message_by_name(name);
    if (!md)
        return km_fail(err, "control record %s: the codec has no %s", km_ml_control_name(type), name);
    if (value.len < 0)
        return km_fail(err, "control record %s has a null value", km_ml_control_name(type));
    void *obj = km_arena_alloc(arena, md->root->size);
    if (!obj)
        return km_fail(err, "control record %s: decode arena limit reached", km_ml_control_name(type));
    /* Kafka's ControlRecordUtils reads every control value at version 0 and
     * ignores what follows, so newer writers' extra bytes are tolerated. */
    size_t used = 0;
    km_err inner;
    if (km_decode(md, 0, value.ptr, (size_t)value.len, obj, arena, &used, &inner) < 0)
        return km_fail(err, "control record %s: %s", name, inner.msg);
    *desc = md;
    *msg = obj;
    return 0;
}

/* ---- metadata record frame ---------------------------------------------------- */

static int read_short_uvarint(km_reader *r, int16_t *v, const char *what, km_err *err)
{
    uint32_t u;
    if (km_read_uvarint(r, &u, what, err) < 0)
        return -1;
    if (u > INT16_MAX)
        return km_fail(err, "metadata record %s %u is too large", what, u);
    *v = (int16_t)u;
    return 0;
}

static const km_message_desc *metadata_desc(km_ml_desc_cache *c, int16_t api_key)
{
    if (!c || api_key < 0 || api_key >= KM_ML_DESC_CACHE)
        return km_find_message(KM_K_METADATA, api_key);
    if (!c->looked[api_key]) {
        c->desc[api_key] = km_find_message(KM_K_METADATA, api_key);
        c->looked[api_key] = true;
    }
    return c->desc[api_key];
}

int km_ml_decode_frame(const uint8_t *p, size_t len, int16_t *api_key, int16_t *version,
                       const km_message_desc **desc, void **msg, km_arena *arena, km_err *err)
{
    return km_ml_decode_frame_cached(NULL, p, len, api_key, version, desc, msg, arena, err);
}

int km_ml_frame_header(const uint8_t *p, size_t len, int16_t *api_key, int16_t *version, size_t *body,
                       km_err *err)
{
    km_reader r;
    int16_t frame = -1;
    km_reader_init(&r, p, len);
    if (read_short_uvarint(&r, &frame, "frame version", err) < 0)
        return -1;
    if (frame == 0)
        return km_fail(err, "metadata record frame version 0 (the KRaft preview of Kafka 2.8) is not supported");
    if (frame != 1)
        return km_fail(err, "unknown metadata record frame version %d (only 1 exists)", frame);
    if (read_short_uvarint(&r, api_key, "type", err) < 0 || read_short_uvarint(&r, version, "version", err) < 0)
        return -1;
    *body = r.pos;
    return 0;
}

int km_ml_decode_frame_cached(km_ml_desc_cache *cache, const uint8_t *p, size_t len, int16_t *api_key,
                              int16_t *version, const km_message_desc **desc, void **msg, km_arena *arena,
                              km_err *err)
{
    size_t body;
    *desc = NULL;
    *msg = NULL;
    if (km_ml_frame_header(p, len, api_key, version, &body, err) < 0)
        return -1;
    const km_message_desc *md = metadata_desc(cache, *api_key);
    if (!md)
        return km_fail(err, "unknown metadata record type %d (version %d)", *api_key, *version);
    if (!km_version_in(md->valid, *version))
        return km_fail(err, "%s (type %d) version %d is not supported (known: %d-%d)", md->name, *api_key,
                       *version, md->valid.lo, md->valid.hi);
    void *obj = km_arena_alloc(arena, md->root->size);
    if (!obj)
        return km_fail(err, "%s: decode arena limit reached", md->name);
    km_err inner;
    if (km_decode(md, *version, p + body, len - body, obj, arena, NULL, &inner) < 0)
        return km_fail(err, "%s (type %d) v%d: %s", md->name, *api_key, *version, inner.msg);
    *desc = md;
    *msg = obj;
    return 0;
}

int km_ml_encode_frame(const km_message_desc *md, int16_t version, const void *msg, km_buf *out, km_err *err)
{
    if (!md || md->kind != KM_K_METADATA || md->api_key < 0)
        return km_fail(err, "%s is not a metadata record", md ? md->name : "(null)");
    km_buf_put_uvarint(out, 1);
    km_buf_put_uvarint(out, (uint32_t)md->api_key);
    km_buf_put_uvarint(out, (uint32_t)version);
    return km_encode(md, version, msg, out, err);
}

/* ---- small helpers -------------------------------------------------------------- */

int km_ml_set_int_field(const km_struct_desc *sd, void *obj, const char *name, int64_t v, km_err *err)
{
    for (uint16_t i = 0; i < sd->nfields; i++) {
        const km_field *f = &sd->fields[i];
        if (strcmp(f->name, name) != 0)
            continue;
        uint8_t *at = (uint8_t *)obj + f->offset;
        switch (f->type) {
        case KM_T_BOOL: { bool x = v != 0; memcpy(at, &x, sizeof x); return 0; }
        case KM_T_INT8: { int8_t x = (int8_t)v; memcpy(at, &x, sizeof x); return 0; }
        case KM_T_INT16: { int16_t x = (int16_t)v; memcpy(at, &x, sizeof x); return 0; }
        case KM_T_UINT16: { uint16_t x = (uint16_t)v; memcpy(at, &x, sizeof x); return 0; }
        case KM_T_INT32: { int32_t x = (int32_t)v; memcpy(at, &x, sizeof x); return 0; }
        case KM_T_UINT32: { uint32_t x = (uint32_t)v; memcpy(at, &x, sizeof x); return 0; }
        case KM_T_INT64: memcpy(at, &v, sizeof v); return 0;
        default: return km_fail(err, "%s.%s is not an integer field", sd->name, name);
        }
    }
    return km_fail(err, "%s has no field %s", sd->name, name);
}

int64_t km_ml_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int km_ml_peek_batch(const uint8_t *p, size_t avail, size_t max_batch, km_metalog_batch *b, km_err *err)
{
    size_t need = 0;
    km_ml_scan s = km_ml_scan_batch(p, avail, max_batch ? max_batch : KM_ML_MAX_BATCH_DEFAULT, b, &need, err);
    if (s == KM_ML_SCAN_SHORT)
        return 0;
    return s == KM_ML_SCAN_OK ? 1 : -1;
}
