/* Decoding half of the table-driven engine.  Every length is checked against
 * what is left before anything is allocated, and all memory comes from the
 * caller's bounded arena. */
#include "codec_internal.h"

#include <stdio.h>
#include <string.h>

typedef struct dec {
    int16_t version;
    bool flexible;
    km_reader *r;
    km_arena *arena;
    km_err *err;
    bool borrow_records;     /* km_decode_borrowing: records fields point into the input */
} dec;

static int dec_struct(dec *d, const km_struct_desc *sd, void *obj);
static int dec_value(dec *d, const km_field *f, void *p);

static size_t here(const dec *d) { return d->r->base + d->r->pos; }

/* A reader error ("int32 at offset 9: needs 4 bytes, 2 left") becomes the tail of a field path. */
static int colon(km_err *err)
{
    km_path_prepend(err, "%s", ": ", 0);
    return -1;
}

bool km_utf8_valid(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned c = p[i];
        size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!len || i + len > n)
            return false;
        uint32_t cp = len == 1 ? c : (c & (0x7f >> len));
        for (size_t k = 1; k < len; k++) {
            if ((p[i + k] & 0xc0) != 0x80)
                return false;
            cp = (cp << 6) | (p[i + k] & 0x3f);
        }
        static const uint32_t min_cp[] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min_cp[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        i += len;
    }
    return true;
}

/* Reads a length: compact (uvarint N+1, 0 = null) or int16/int32 (-1 = null). */
static int dec_length(dec *d, bool compact, bool wide, int64_t *len)
{
    if (compact) {
        uint32_t v;
        if (km_read_uvarint(d->r, &v, "length", d->err))
            return colon(d->err);
        *len = (int64_t)v - 1;
        return 0;
    }
    if (wide) {
        int32_t v;
        if (km_read_i32(d->r, &v, "length", d->err))
            return colon(d->err);
        *len = v;
    } else {
        int16_t v;
        if (km_read_i16(d->r, &v, "length", d->err))
            return colon(d->err);
        *len = v;
    }
    if (*len < -1)
        return km_fail(d->err, ": negative length %lld at offset %zu", (long long)*len, here(d) - (wide ? 4 : 2));
    return 0;
}

static int dec_blob(dec *d, const km_field *f, void *p, bool compact, bool nullable)
{
    size_t at = here(d);
    int64_t len;
    if (dec_length(d, compact, f->type != KM_T_STRING, &len))
        return -1;
    if (len < 0) {
        if (!nullable)
            return km_fail(d->err, ": null at offset %zu, which version %d does not allow", at, d->version);
        km_bytes nul = {NULL, -1};
        memcpy(p, &nul, sizeof nul);
        return 0;
    }
    if ((uint64_t)len > km_reader_left(d->r))
        return km_fail(d->err, ": length %lld at offset %zu runs past the end (%zu bytes left)", (long long)len,
                       at, km_reader_left(d->r));
    const uint8_t *src = d->r->p + d->r->pos;
    if (f->type == KM_T_RECORDS && d->borrow_records) {
        km_bytes b = {src, (int32_t)len};
        d->r->pos += (size_t)len;
        memcpy(p, &b, sizeof b);
        return 0;
    }
    if (f->type == KM_T_STRING && !km_utf8_valid((const char *)src, (size_t)len))
        return km_fail(d->err, ": string at offset %zu is not valid UTF-8", at);
    uint8_t *copy = km_arena_alloc(d->arena, (size_t)len + 1);  /* +1 keeps strings NUL-terminated */
    if (!copy)
        return km_fail(d->err, ": %lld bytes at offset %zu exceed the memory limit", (long long)len, at);
    memcpy(copy, src, (size_t)len);
    d->r->pos += (size_t)len;
    km_bytes b = {copy, (int32_t)len};
    memcpy(p, &b, sizeof b);
    return 0;
}

static int dec_array(dec *d, const km_field *f, void *p, bool compact, bool nullable)
{
    size_t at = here(d);
    int64_t count;
    if (dec_length(d, compact, true, &count))
        return -1;
    km_array_any a = {(int32_t)count, NULL};
    if (count < 0 && !nullable)
        return km_fail(d->err, ": null array at offset %zu, which version %d does not allow", at, d->version);
    size_t es = km_type_size(f->elem, f->sub);
    /* Fixed-size elements: the count must fit in what is left before we allocate. */
    if (count > 0 && f->elem != KM_T_STRUCT && (uint64_t)count > km_reader_left(d->r))
        return km_fail(d->err, ": %lld elements at offset %zu cannot fit in %zu bytes", (long long)count, at,
                       km_reader_left(d->r));
    if (count > 0) {
        a.items = km_arena_alloc(d->arena, (size_t)count * es);
        if (!a.items)
            return km_fail(d->err, ": %lld elements at offset %zu exceed the memory limit", (long long)count, at);
    }
    km_field elem = *f;
    elem.type = f->elem;
    elem.nullable = (km_versions){1, 0};
    elem.struct_by_pointer = false;
    for (int64_t i = 0; i < count; i++) {
        if (dec_value(d, &elem, (char *)a.items + (size_t)i * es)) {
            km_path_prepend(d->err, "[%d]", NULL, (int32_t)i);
            return -1;
        }
    }
    memcpy(p, &a, sizeof a);
    return 0;
}

static int dec_struct_value(dec *d, const km_field *f, void *p, bool nullable)
{
    void *sp = p;
    if (nullable) {
        size_t at = here(d);
        int8_t marker;
        if (km_read_i8(d->r, &marker, "presence byte", d->err))
            return colon(d->err);
        if (marker != 1 && marker != -1)
            return km_fail(d->err, ": presence byte %d at offset %zu is neither -1 nor 1", marker, at);
        if (marker < 0) {
            memset(p, 0, sizeof(void *));
            return 0;
        }
    }
    if (f->struct_by_pointer) {
        sp = km_arena_alloc(d->arena, f->sub->size);
        if (!sp)
            return km_fail(d->err, ": struct at offset %zu exceeds the memory limit", here(d));
        memcpy(p, &sp, sizeof sp);
    }
    return dec_struct(d, f->sub, sp);
}

static int dec_value(dec *d, const km_field *f, void *p)
{
    bool compact = km_field_flexible(f, d->version, d->flexible);
    bool nullable = km_version_in(f->nullable, d->version);
    km_err *err = d->err;
    switch (f->type) {
    case KM_T_BOOL: {
        size_t at = here(d);
        int8_t v;
        if (km_read_i8(d->r, &v, "bool", err)) return colon(err);
        if (v != 0 && v != 1) return km_fail(err, ": bool at offset %zu is %d, not 0 or 1", at, v);
        *(bool *)p = v;
        return 0;
    }
    case KM_T_INT8: return km_read_i8(d->r, p, "int8", err) ? colon(err) : 0;
    case KM_T_INT16: case KM_T_UINT16:
        return km_read_i16(d->r, p, "int16", err) ? colon(err) : 0;
    case KM_T_INT32: case KM_T_UINT32:
        return km_read_i32(d->r, p, "int32", err) ? colon(err) : 0;
    case KM_T_INT64: case KM_T_FLOAT64:
        return km_read_i64(d->r, p, "int64", err) ? colon(err) : 0;
    case KM_T_UUID: {
        const uint8_t *raw;
        if (km_read_raw(d->r, 16, &raw, "uuid", err)) return colon(err);
        memcpy(p, raw, 16);
        return 0;
    }
    case KM_T_STRING: case KM_T_BYTES: case KM_T_RECORDS: return dec_blob(d, f, p, compact, nullable);
    case KM_T_ARRAY: return dec_array(d, f, p, compact, nullable);
    case KM_T_STRUCT: return dec_struct_value(d, f, p, nullable);
    }
    return km_fail(err, ": unknown field type %d", (int)f->type);
}

static const km_field *find_tagged(const km_struct_desc *sd, uint32_t tag, int16_t version)
{
    for (uint16_t i = 0; i < sd->nfields; i++)
        if (sd->fields[i].tag == (int64_t)tag && km_version_in(sd->fields[i].tagged, version))
            return &sd->fields[i];
    return NULL;
}

/* A known tag's value must fill its size prefix exactly. */
static int dec_known_tag(dec *d, const km_field *f, void *obj, size_t size)
{
    km_reader sub = {d->r->p + d->r->pos, size, 0, here(d)};
    dec sd = *d;
    sd.r = &sub;
    if (dec_value(&sd, f, (char *)obj + f->offset)) {
        km_path_prepend(d->err, ".%s", f->name, 0);
        return -1;
    }
    if (sub.pos != size)
        return km_fail(d->err, ".%s: tagged value at offset %zu uses %zu of its %zu bytes", f->name, sub.base,
                       sub.pos, size);
    d->r->pos += size;
    return 0;
}

static int dec_tagged(dec *d, const km_struct_desc *sd, void *obj)
{
    km_err *err = d->err;
    size_t count_at = here(d);
    uint32_t n;
    if (km_read_uvarint(d->r, &n, "tagged field count", err))
        return colon(err);
    if (n > km_reader_left(d->r) / 2)
        return km_fail(err, ": %u tagged fields at offset %zu cannot fit in %zu bytes", n, count_at,
                       km_reader_left(d->r));
    km_raw_tags *unknown = (km_raw_tags *)((char *)obj + sd->unknown_tags_offset);
    int64_t prev = -1;
    for (uint32_t i = 0; i < n; i++) {
        size_t at = here(d);
        uint32_t tag, size;
        if (km_read_uvarint(d->r, &tag, "tag", err) || km_read_uvarint(d->r, &size, "tag size", err))
            return colon(err);
        if ((int64_t)tag <= prev)
            return km_fail(err, ": tag %u at offset %zu is not above the previous tag %lld", tag, at,
                           (long long)prev);
        prev = tag;
        if (size > km_reader_left(d->r))
            return km_fail(err, ": tag %u at offset %zu has size %u but %zu bytes are left", tag, at, size,
                           km_reader_left(d->r));
        const km_field *f = find_tagged(sd, tag, d->version);
        if (f) {
            if (dec_known_tag(d, f, obj, size))
                return -1;
            continue;
        }
        if (!unknown->items) {
            unknown->items = km_arena_alloc(d->arena, n * sizeof(km_raw_tag));
            if (!unknown->items)
                return km_fail(err, ": tagged fields exceed the memory limit");
        }
        km_raw_tag *t = &unknown->items[unknown->count++];
        t->tag = tag;
        uint8_t *copy = km_arena_alloc(d->arena, size);
        if (!copy)
            return km_fail(err, ": tag %u exceeds the memory limit", tag);
        memcpy(copy, d->r->p + d->r->pos, size);
        t->data = (km_bytes){copy, (int32_t)size};
        d->r->pos += size;
    }
    return 0;
}

static int dec_struct(dec *d, const km_struct_desc *sd, void *obj)
{
    km_init(sd, obj);
    for (uint16_t i = 0; i < sd->nfields; i++) {
        const km_field *f = &sd->fields[i];
        if (!km_version_in(f->versions, d->version) || km_version_in(f->tagged, d->version))
            continue;
        if (dec_value(d, f, (char *)obj + f->offset)) {
            km_path_prepend(d->err, ".%s", f->name, 0);
            return -1;
        }
    }
    return d->flexible ? dec_tagged(d, sd, obj) : 0;
}

static int decode_from(const km_message_desc *md, int16_t version, km_reader *r, void *obj, km_arena *arena,
                       bool borrow_records, km_err *err)
{
    if (!km_version_in(md->valid, version))
        return km_fail(err, "%s: version %d is not valid (valid: %d-%d)", md->name, version, md->valid.lo,
                       md->valid.hi);
    dec d = {version, km_version_in(md->flexible, version), r, arena, err, borrow_records};
    if (dec_struct(&d, md->root, obj)) {
        char top[96];
        snprintf(top, sizeof top, "%s v%d", md->name, version);
        km_path_prepend(err, "%s", top, 0);
        return -1;
    }
    return 0;
}

int km_decode_from(const km_message_desc *md, int16_t version, km_reader *r, void *obj, km_arena *arena,
                   km_err *err)
{
    return decode_from(md, version, r, obj, arena, false, err);
}

static int decode_all(const km_message_desc *md, int16_t version, const uint8_t *data, size_t len, void *obj,
                      km_arena *arena, bool borrow_records, size_t *consumed, km_err *err)
{
    km_reader r;
    km_reader_init(&r, data, len);
    if (decode_from(md, version, &r, obj, arena, borrow_records, err))
        return -1;
    if (consumed) {
        *consumed = r.pos;
        return 0;
    }
    if (r.pos != len)
        return km_fail(err, "%s v%d: %zu trailing bytes after the message at offset %zu", md->name, version,
                       len - r.pos, r.pos);
    return 0;
}

int km_decode(const km_message_desc *md, int16_t version, const uint8_t *data, size_t len, void *obj,
              km_arena *arena, size_t *consumed, km_err *err)
{
    return decode_all(md, version, data, len, obj, arena, false, consumed, err);
}

int km_decode_borrowing(const km_message_desc *md, int16_t version, const uint8_t *data, size_t len, void *obj,
                        km_arena *arena, km_err *err)
{
    return decode_all(md, version, data, len, obj, arena, true, NULL, err);
}
