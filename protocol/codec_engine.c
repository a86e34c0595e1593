/* The table-driven codec engine: one interpreter for every message and version.
 *
 * Error paths are built while unwinding (each level prepends its field name),
 * so the success path pays nothing for them. */
#include "codec_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_STRING_LEN 0x7fff /* Kafka refuses longer strings in every encoding */

/* ---- field access ---------------------------------------------------------- */

size_t km_type_size(km_type t, const km_struct_desc *sub)
{
    switch (t) {
    case KM_T_BOOL: return sizeof(bool);
    case KM_T_INT8: return 1;
    case KM_T_INT16: case KM_T_UINT16: return 2;
    case KM_T_INT32: case KM_T_UINT32: return 4;
    case KM_T_INT64: return 8;
    case KM_T_FLOAT64: return sizeof(double);
    case KM_T_UUID: return sizeof(km_uuid);
    case KM_T_STRING: return sizeof(km_str);
    case KM_T_BYTES: case KM_T_RECORDS: return sizeof(km_bytes);
    case KM_T_STRUCT: return sub->size;
    case KM_T_ARRAY: return sizeof(km_array_any);
    }
    return 0;
}

int64_t km_get_int(km_type t, const void *p)
{
    switch (t) {
    case KM_T_BOOL: return *(const bool *)p;
    case KM_T_INT8: return *(const int8_t *)p;
    case KM_T_INT16: return *(const int16_t *)p;
    case KM_T_UINT16: return *(const uint16_t *)p;
    case KM_T_INT32: return *(const int32_t *)p;
    case KM_T_UINT32: return *(const uint32_t *)p;
    case KM_T_INT64: return *(const int64_t *)p;
    default: return 0;
    }
}

void km_set_int(km_type t, void *p, int64_t v)
{
    switch (t) {
    case KM_T_BOOL: *(bool *)p = v != 0; break;
    case KM_T_INT8: *(int8_t *)p = (int8_t)v; break;
    case KM_T_INT16: *(int16_t *)p = (int16_t)v; break;
    case KM_T_UINT16: *(uint16_t *)p = (uint16_t)v; break;
    case KM_T_INT32: *(int32_t *)p = (int32_t)v; break;
    case KM_T_UINT32: *(uint32_t *)p = (uint32_t)v; break;
    case KM_T_INT64: *(int64_t *)p = v; break;
    default: break;
    }
}

bool km_is_int_type(km_type t) { return t <= KM_T_INT64; }

bool km_field_flexible(const km_field *f, int16_t version, bool msg_flexible)
{
    return f->has_flexible_override ? km_version_in(f->flexible, version) : msg_flexible;
}

void km_path_prepend(km_err *err, const char *fmt, const char *name, int32_t index)
{
    if (!err)
        return;
    char seg[160];
    if (name)
        snprintf(seg, sizeof seg, fmt, name);
    else
        snprintf(seg, sizeof seg, fmt, index);
    size_t sl = strlen(seg), ml = strlen(err->msg);
    if (sl + ml + 1 > sizeof err->msg)
        ml = sizeof err->msg - sl - 1;
    memmove(err->msg + sl, err->msg, ml);
    memcpy(err->msg, seg, sl);
    err->msg[sl + ml] = '\0';
}

/* ---- defaults ----------------------------------------------------------------- */

static void init_field(const km_field *f, void *p)
{
    switch (f->type) {
    case KM_T_FLOAT64: *(double *)p = f->default_float; break;
    case KM_T_UUID: memset(p, 0, sizeof(km_uuid)); break;
    case KM_T_STRING: {
        km_str s = f->default_null ? (km_str){NULL, -1} : km_cstr(f->default_str ? f->default_str : "");
        memcpy(p, &s, sizeof s);
        break;
    }
    case KM_T_BYTES: case KM_T_RECORDS: {
        km_bytes b = {NULL, f->default_null ? -1 : 0};
        memcpy(p, &b, sizeof b);
        break;
    }
    case KM_T_ARRAY: {
        km_array_any a = {f->default_null ? -1 : 0, NULL};
        memcpy(p, &a, sizeof a);
        break;
    }
    case KM_T_STRUCT:
        if (f->struct_by_pointer)
            memset(p, 0, sizeof(void *));
        else
            km_init(f->sub, p);
        break;
    default: km_set_int(f->type, p, f->default_int); break;
    }
}

void km_init(const km_struct_desc *sd, void *obj)
{
    memset(obj, 0, sd->size);
    for (uint16_t i = 0; i < sd->nfields; i++)
        init_field(&sd->fields[i], (char *)obj + sd->fields[i].offset);
}

static bool struct_is_default(const km_struct_desc *sd, const void *obj);

bool km_field_is_default(const km_field *f, const void *p)
{
    switch (f->type) {
    case KM_T_FLOAT64: return *(const double *)p == f->default_float;
    case KM_T_UUID: return km_uuid_is_zero(*(const km_uuid *)p);
    case KM_T_STRING: {
        km_str s;
        memcpy(&s, p, sizeof s);
        return f->default_null ? s.len < 0 : km_str_eq(s, f->default_str ? f->default_str : "");
    }
    case KM_T_BYTES: case KM_T_RECORDS: {
        km_bytes b;
        memcpy(&b, p, sizeof b);
        return f->default_null ? b.len < 0 : b.len == 0;
    }
    case KM_T_ARRAY: {
        km_array_any a;
        memcpy(&a, p, sizeof a);
        return f->default_null ? a.count < 0 : a.count == 0;
    }
    case KM_T_STRUCT: {
        if (!f->struct_by_pointer)
            return struct_is_default(f->sub, p);
        const void *sp;
        memcpy(&sp, p, sizeof sp);
        return sp == NULL || (!f->default_null && struct_is_default(f->sub, sp));
    }
    default: return km_get_int(f->type, p) == f->default_int;
    }
}

static bool struct_is_default(const km_struct_desc *sd, const void *obj)
{
    const km_raw_tags *unknown = (const km_raw_tags *)((const char *)obj + sd->unknown_tags_offset);
    if (unknown->count > 0)
        return false;
    for (uint16_t i = 0; i < sd->nfields; i++)
        if (!km_field_is_default(&sd->fields[i], (const char *)obj + sd->fields[i].offset))
            return false;
    return true;
}

/* ---- encoding ------------------------------------------------------------------ */

typedef struct enc {
    int16_t version;
    bool flexible;        /* the message is flexible at this version */
    km_buf *out;
    km_err *err;
} enc;

static int enc_struct(enc *e, const km_struct_desc *sd, const void *obj);

static int enc_length(enc *e, bool compact, int64_t len, bool wide)
{
    if (compact)
        km_buf_put_uvarint(e->out, (uint32_t)(len + 1));
    else if (wide)
        km_buf_put_i32(e->out, (int32_t)len);
    else
        km_buf_put_i16(e->out, (int16_t)len);
    return 0;
}

static int enc_array(enc *e, const km_field *f, const km_array_any *a, bool compact)
{
    if (a->count > 0 && !a->items)
        return km_fail(e->err, ": array has %d items but no storage", a->count);
    enc_length(e, compact, a->count < 0 ? -1 : a->count, true);
    size_t es = km_type_size(f->elem, f->sub);
    km_field elem = *f;  /* elements share the field's flexibility, never its nullability */
    elem.type = f->elem;
    elem.nullable = (km_versions){1, 0};
    elem.struct_by_pointer = false;
    for (int32_t i = 0; i < a->count; i++) {
        if (km_encode_value(e->version, e->flexible, &elem, (const char *)a->items + (size_t)i * es,
                            e->out, e->err)) {
            km_path_prepend(e->err, "[%d]", NULL, i);
            return -1;
        }
    }
    return 0;
}

static int enc_struct_value(enc *e, const km_field *f, const void *p, bool nullable)
{
    const void *sp = p;
    if (f->struct_by_pointer)
        memcpy(&sp, p, sizeof sp);
    if (nullable) {
        km_buf_put_i8(e->out, sp ? 1 : -1);
        return sp ? enc_struct(e, f->sub, sp) : 0;
    }
    if (sp)
        return enc_struct(e, f->sub, sp);
    void *tmp = malloc(f->sub->size);  /* absent where the version needs one: write its defaults */
    if (!tmp)
        return km_fail(e->err, ": out of memory");
    km_init(f->sub, tmp);
    int rc = enc_struct(e, f->sub, tmp);
    free(tmp);
    return rc;
}

int km_encode_value(int16_t version, bool msg_flexible, const km_field *f, const void *p, km_buf *out,
                    km_err *err)
{
    enc e = {version, msg_flexible, out, err};
    bool compact = km_field_flexible(f, version, msg_flexible);
    bool nullable = km_version_in(f->nullable, version);
    switch (f->type) {
    case KM_T_BOOL: km_buf_put_i8(out, *(const bool *)p ? 1 : 0); return 0;
    case KM_T_INT8: km_buf_put_i8(out, *(const int8_t *)p); return 0;
    case KM_T_INT16: case KM_T_UINT16: km_buf_put_i16(out, (int16_t)km_get_int(f->type, p)); return 0;
    case KM_T_INT32: case KM_T_UINT32: km_buf_put_i32(out, (int32_t)km_get_int(f->type, p)); return 0;
    case KM_T_INT64: km_buf_put_i64(out, *(const int64_t *)p); return 0;
    case KM_T_FLOAT64: {
        uint64_t bits;
        memcpy(&bits, p, 8);
        km_buf_put_i64(out, (int64_t)bits);
        return 0;
    }
    case KM_T_UUID: km_buf_put(out, p, 16); return 0;
    case KM_T_STRING: case KM_T_BYTES: case KM_T_RECORDS: {
        km_bytes b;  /* km_str and km_bytes share a layout */
        memcpy(&b, p, sizeof b);
        if (b.len < 0 && !nullable)
            return km_fail(err, ": is null, which version %d does not allow", version);
        if (f->type == KM_T_STRING && b.len > MAX_STRING_LEN)
            return km_fail(err, ": string of %d bytes is longer than %d", b.len, MAX_STRING_LEN);
        enc_length(&e, compact, b.len < 0 ? -1 : b.len, f->type != KM_T_STRING);
        if (b.len > 0)
            km_buf_put(out, b.ptr, (size_t)b.len);
        return 0;
    }
    case KM_T_ARRAY: {
        km_array_any a;
        memcpy(&a, p, sizeof a);
        if (a.count < 0 && !nullable)
            return km_fail(err, ": is null, which version %d does not allow", version);
        return enc_array(&e, f, &a, compact);
    }
    case KM_T_STRUCT: return enc_struct_value(&e, f, p, nullable);
    }
    return km_fail(err, ": unknown field type %d", (int)f->type);
}

/* One entry of a struct's tagged section: a known field or a preserved unknown tag. */
typedef struct tag_item {
    uint32_t tag;
    const km_field *field;     /* NULL for an unknown tag */
    const km_raw_tag *raw;
} tag_item;

static int cmp_tag_item(const void *a, const void *b)
{
    uint32_t x = ((const tag_item *)a)->tag, y = ((const tag_item *)b)->tag;
    return (x > y) - (x < y);
}

static int enc_tag_item(enc *e, const tag_item *it, const void *obj)
{
    km_buf_put_uvarint(e->out, it->tag);
    if (it->raw) {
        km_buf_put_uvarint(e->out, (uint32_t)it->raw->data.len);
        km_buf_put(e->out, it->raw->data.ptr, (size_t)it->raw->data.len);
        return 0;
    }
    km_buf scratch;  /* the size prefix needs the encoded length first */
    km_buf_init(&scratch);
    scratch.count_only = e->out->count_only;
    int rc = km_encode_value(e->version, e->flexible, it->field, (const char *)obj + it->field->offset,
                             &scratch, e->err);
    km_buf_put_uvarint(e->out, (uint32_t)scratch.len);
    km_buf_put(e->out, scratch.data, scratch.len);
    km_buf_free(&scratch);
    if (rc)
        km_path_prepend(e->err, ".%s", it->field->name, 0);
    return rc;
}

/* Tagged fields and unknown tags, merged in ascending tag order. */
static int enc_tagged(enc *e, const km_struct_desc *sd, const void *obj)
{
    const km_raw_tags *unknown = (const km_raw_tags *)((const char *)obj + sd->unknown_tags_offset);
    size_t n_unknown = unknown->count > 0 ? (size_t)unknown->count : 0;
    tag_item *items = malloc((sd->nfields + n_unknown + 1) * sizeof *items);
    if (!items)
        return km_fail(e->err, ": out of memory");
    size_t n = 0;
    for (uint16_t i = 0; i < sd->nfields; i++) {
        const km_field *f = &sd->fields[i];
        if (km_version_in(f->tagged, e->version) && !km_field_is_default(f, (const char *)obj + f->offset))
            items[n++] = (tag_item){(uint32_t)f->tag, f, NULL};
    }
    for (size_t i = 0; i < n_unknown; i++)
        items[n++] = (tag_item){unknown->items[i].tag, NULL, &unknown->items[i]};
    qsort(items, n, sizeof *items, cmp_tag_item);
    int rc = 0;
    for (size_t i = 1; i < n && !rc; i++)
        if (items[i].tag == items[i - 1].tag)
            rc = km_fail(e->err, ": tag %u is given twice (a known field and an unknown tag?)", items[i].tag);
    km_buf_put_uvarint(e->out, (uint32_t)n);
    for (size_t i = 0; i < n && !rc; i++)
        rc = enc_tag_item(e, &items[i], obj);
    free(items);
    return rc;
}

static int enc_struct(enc *e, const km_struct_desc *sd, const void *obj)
{
    for (uint16_t i = 0; i < sd->nfields; i++) {
        const km_field *f = &sd->fields[i];
        const void *p = (const char *)obj + f->offset;
        if (!km_version_in(f->versions, e->version)) {
            if (!f->ignorable && !km_field_is_default(f, p)) {
                km_fail(e->err, ": has a non-default value but version %d lacks it", e->version);
                km_path_prepend(e->err, ".%s", f->name, 0);
                return -1;
            }
            continue;
        }
        if (km_version_in(f->tagged, e->version))
            continue;
        if (km_encode_value(e->version, e->flexible, f, p, e->out, e->err)) {
            km_path_prepend(e->err, ".%s", f->name, 0);
            return -1;
        }
    }
    return e->flexible ? enc_tagged(e, sd, obj) : 0;
}

static int check_version(const km_message_desc *md, int16_t version, km_err *err)
{
    if (!km_version_in(md->valid, version))
        return km_fail(err, "%s: version %d is not valid (valid: %d-%d)", md->name, version, md->valid.lo,
                       md->valid.hi);
    return 0;
}

static int encode_into(const km_message_desc *md, int16_t version, const void *obj, km_buf *out, km_err *err)
{
    if (check_version(md, version, err))
        return -1;
    enc e = {version, km_version_in(md->flexible, version), out, err};
    if (enc_struct(&e, md->root, obj)) {
        char top[96];
        snprintf(top, sizeof top, "%s v%d", md->name, version);
        km_path_prepend(err, "%s", top, 0);
        return -1;
    }
    if (out->oom)
        return km_fail(err, "%s: out of memory while encoding", md->name);
    return 0;
}

int km_encode(const km_message_desc *md, int16_t version, const void *obj, km_buf *out, km_err *err)
{
    size_t start = out->len;
    int rc = encode_into(md, version, obj, out, err);
    if (rc)
        out->len = start;  /* never leave half a message behind */
    return rc;
}

int64_t km_encoded_size(const km_message_desc *md, int16_t version, const void *obj, km_err *err)
{
    km_buf counter;
    km_buf_init(&counter);
    counter.count_only = true;
    if (encode_into(md, version, obj, &counter, err))
        return -1;
    return (int64_t)counter.len;
}
