/* JSON form of every message, after Kafka's generated JsonConverter: lower-camel keys,
 * uuid as base64url, bytes and records as base64, tagged fields as plain keys.
 * Unknown tagged fields ride under "_unknownTaggedFields" so nothing is lost. */
#include "codec_internal.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define UNKNOWN_TAGS_KEY "_unknownTaggedFields"

typedef struct jctx {
    int16_t version;
    bool flexible;
    km_arena *arena;
    km_err *err;
} jctx;

/* ---- to JSON ---- */

static json_t *struct_to_json(jctx *c, const km_struct_desc *sd, const void *obj);

static json_t *base64_json(const uint8_t *p, size_t n, bool url)
{
    char *s = malloc(4 * ((n + 2) / 3) + 1);
    if (!s)
        return NULL;
    km_base64_encode(p, n, s, url);
    json_t *j = json_string(s);
    free(s);
    return j;
}

static json_t *value_to_json(jctx *c, km_type t, const km_field *f, const void *p)
{
    switch (t) {
    case KM_T_BOOL: return json_boolean(*(const bool *)p);
    case KM_T_FLOAT64: return json_real(*(const double *)p);
    case KM_T_UUID: return base64_json(((const km_uuid *)p)->b, 16, true);
    case KM_T_STRING: {
        km_str s;
        memcpy(&s, p, sizeof s);
        return s.len < 0 ? json_null() : json_stringn(s.ptr ? s.ptr : "", (size_t)s.len);
    }
    case KM_T_BYTES: case KM_T_RECORDS: {
        km_bytes b;
        memcpy(&b, p, sizeof b);
        return b.len < 0 ? json_null() : base64_json(b.ptr, (size_t)b.len, false);
    }
    case KM_T_STRUCT: {
        const void *sp = p;
        if (f->struct_by_pointer && t == f->type)
            memcpy(&sp, p, sizeof sp);
        return sp ? struct_to_json(c, f->sub, sp) : json_null();
    }
    case KM_T_ARRAY: {
        km_array_any a;
        memcpy(&a, p, sizeof a);
        if (a.count < 0)
            return json_null();
        json_t *arr = json_array();
        size_t es = km_type_size(f->elem, f->sub);
        for (int32_t i = 0; i < a.count; i++) {
            json_t *v = value_to_json(c, f->elem, f, (const char *)a.items + (size_t)i * es);
            if (!v || json_array_append_new(arr, v)) {
                json_decref(arr);
                return NULL;
            }
        }
        return arr;
    }
    default: return json_integer((json_int_t)km_get_int(t, p));
    }
}

static json_t *unknown_tags_json(const km_raw_tags *tags)
{
    json_t *arr = json_array();
    for (int32_t i = 0; i < tags->count; i++)
        json_array_append_new(arr, json_pack("{s:I,s:o}", "tag", (json_int_t)tags->items[i].tag, "data",
                                             base64_json(tags->items[i].data.ptr,
                                                         (size_t)tags->items[i].data.len, false)));
    return arr;
}

static json_t *struct_to_json(jctx *c, const km_struct_desc *sd, const void *obj)
{
    json_t *o = json_object();
    for (uint16_t i = 0; i < sd->nfields && o; i++) {
        const km_field *f = &sd->fields[i];
        const void *p = (const char *)obj + f->offset;
        if (!km_version_in(f->versions, c->version)) {
            if (!f->ignorable && !km_field_is_default(f, p)) {
                km_fail(c->err, ".%s: has a non-default value but version %d lacks it", f->name, c->version);
                json_decref(o);
                return NULL;
            }
            continue;
        }
        if (km_version_in(f->tagged, c->version) && km_field_is_default(f, p))
            continue;
        json_t *v = value_to_json(c, f->type, f, p);
        if (!v) {
            json_decref(o);
            return NULL;
        }
        json_object_set_new(o, f->json_name, v);
    }
    const km_raw_tags *unknown = (const km_raw_tags *)((const char *)obj + sd->unknown_tags_offset);
    if (o && unknown->count > 0)
        json_object_set_new(o, UNKNOWN_TAGS_KEY, unknown_tags_json(unknown));
    return o;
}

json_t *km_to_json(const km_message_desc *md, int16_t version, const void *obj, km_err *err)
{
    if (!km_version_in(md->valid, version)) {
        km_fail(err, "%s: version %d is not valid (valid: %d-%d)", md->name, version, md->valid.lo, md->valid.hi);
        return NULL;
    }
    jctx c = {version, km_version_in(md->flexible, version), NULL, err};
    if (err)
        err->msg[0] = '\0';
    json_t *j = struct_to_json(&c, md->root, obj);
    if (!j && err)
        km_path_prepend(err, "%s", md->name, 0);
    return j;
}

/* ---- from JSON ---- */

static int struct_from_json(jctx *c, const km_struct_desc *sd, const json_t *j, void *obj);

static int int_from_json(jctx *c, km_type t, const json_t *j, void *p)
{
    static const int64_t lo[] = {0, INT8_MIN, INT16_MIN, 0, INT32_MIN, 0, INT64_MIN};
    static const int64_t hi[] = {1, INT8_MAX, INT16_MAX, UINT16_MAX, INT32_MAX, UINT32_MAX, INT64_MAX};
    if (t == KM_T_BOOL) {
        if (!json_is_boolean(j))
            return km_fail(c->err, ": expected true or false");
        *(bool *)p = json_is_true(j);
        return 0;
    }
    if (!json_is_integer(j))
        return km_fail(c->err, ": expected an integer");
    json_int_t v = json_integer_value(j);
    if (v < lo[t] || v > hi[t])
        return km_fail(c->err, ": %lld is out of range [%lld, %lld]", (long long)v, (long long)lo[t],
                       (long long)hi[t]);
    km_set_int(t, p, v);
    return 0;
}

static int blob_from_json(jctx *c, km_type t, const json_t *j, void *p)
{
    km_bytes b = {NULL, -1};
    if (!json_is_null(j)) {
        if (!json_is_string(j))
            return km_fail(c->err, ": expected a string or null");
        size_t n = json_string_length(j);
        const char *s = json_string_value(j);
        uint8_t *copy = km_arena_alloc(c->arena, n + 1);
        if (!copy || n > INT32_MAX)
            return km_fail(c->err, ": value exceeds the memory limit");
        if (t == KM_T_STRING) {
            memcpy(copy, s, n);
            b.len = (int32_t)n;
        } else {
            int64_t len = km_base64_decode(s, n, copy);
            if (len < 0)
                return km_fail(c->err, ": not valid base64");
            b.len = (int32_t)len;
        }
        b.ptr = copy;
    }
    memcpy(p, &b, sizeof b);
    return 0;
}

static int value_from_json(jctx *c, km_type t, const km_field *f, const json_t *j, void *p);

static int array_from_json(jctx *c, const km_field *f, const json_t *j, void *p)
{
    km_array_any a = {-1, NULL};
    if (!json_is_null(j)) {
        if (!json_is_array(j))
            return km_fail(c->err, ": expected an array or null");
        size_t n = json_array_size(j), es = km_type_size(f->elem, f->sub);
        if (n > INT32_MAX)
            return km_fail(c->err, ": array is too long");
        a.count = (int32_t)n;
        if (n && !(a.items = km_arena_alloc(c->arena, n * es)))
            return km_fail(c->err, ": array exceeds the memory limit");
        for (size_t i = 0; i < n; i++) {
            if (value_from_json(c, f->elem, f, json_array_get(j, i), (char *)a.items + i * es)) {
                km_path_prepend(c->err, "[%d]", NULL, (int32_t)i);
                return -1;
            }
        }
    }
    memcpy(p, &a, sizeof a);
    return 0;
}

static int struct_ref_from_json(jctx *c, const km_field *f, km_type t, const json_t *j, void *p)
{
    bool by_pointer = f->struct_by_pointer && t == f->type;
    if (json_is_null(j)) {
        if (!by_pointer)
            return km_fail(c->err, ": null is not allowed here");
        memset(p, 0, sizeof(void *));
        return 0;
    }
    void *sp = p;
    if (by_pointer) {
        if (!(sp = km_arena_alloc(c->arena, f->sub->size)))
            return km_fail(c->err, ": struct exceeds the memory limit");
        memcpy(p, &sp, sizeof sp);
    }
    return struct_from_json(c, f->sub, j, sp);
}

static int value_from_json(jctx *c, km_type t, const km_field *f, const json_t *j, void *p)
{
    switch (t) {
    case KM_T_FLOAT64:
        if (!json_is_number(j))
            return km_fail(c->err, ": expected a number");
        *(double *)p = json_number_value(j);
        return 0;
    case KM_T_UUID:
        if (!json_is_string(j) || km_uuid_from_base64(json_string_value(j), p))
            return km_fail(c->err, ": expected a 22-character base64url uuid");
        return 0;
    case KM_T_STRING: case KM_T_BYTES: case KM_T_RECORDS: return blob_from_json(c, t, j, p);
    case KM_T_ARRAY: return array_from_json(c, f, j, p);
    case KM_T_STRUCT: return struct_ref_from_json(c, f, t, j, p);
    default: return int_from_json(c, t, j, p);
    }
}

static int unknown_tags_from_json(jctx *c, const json_t *j, km_raw_tags *tags)
{
    if (!json_is_array(j))
        return km_fail(c->err, "." UNKNOWN_TAGS_KEY ": expected an array");
    size_t n = json_array_size(j);
    if (n && !(tags->items = km_arena_alloc(c->arena, n * sizeof *tags->items)))
        return km_fail(c->err, "." UNKNOWN_TAGS_KEY ": exceeds the memory limit");
    for (size_t i = 0; i < n; i++) {
        json_t *tag = json_object_get(json_array_get(j, i), "tag");
        json_t *data = json_object_get(json_array_get(j, i), "data");
        if (!json_is_integer(tag) || json_integer_value(tag) < 0 || json_integer_value(tag) > UINT32_MAX ||
            !data || blob_from_json(c, KM_T_BYTES, data, &tags->items[i].data) || tags->items[i].data.len < 0)
            return km_fail(c->err, "." UNKNOWN_TAGS_KEY "[%zu]: expected {\"tag\":N,\"data\":\"base64\"}", i);
        tags->items[i].tag = (uint32_t)json_integer_value(tag);
    }
    tags->count = (int32_t)n;
    return 0;
}

static const km_field *field_by_json_name(const km_struct_desc *sd, const char *key)
{
    for (uint16_t i = 0; i < sd->nfields; i++)
        if (!strcmp(sd->fields[i].json_name, key))
            return &sd->fields[i];
    return NULL;
}

static int struct_from_json(jctx *c, const km_struct_desc *sd, const json_t *j, void *obj)
{
    if (!json_is_object(j))
        return km_fail(c->err, ": expected an object");
    km_init(sd, obj);
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)j, key, v) {
        if (!strcmp(key, UNKNOWN_TAGS_KEY)) {
            if (unknown_tags_from_json(c, v, (km_raw_tags *)((char *)obj + sd->unknown_tags_offset)))
                return -1;
            continue;
        }
        const km_field *f = field_by_json_name(sd, key);
        if (!f)
            return km_fail(c->err, ".%s: %s has no such field", key, sd->name);
        if (value_from_json(c, f->type, f, v, (char *)obj + f->offset)) {
            km_path_prepend(c->err, ".%s", f->json_name, 0);
            return -1;
        }
    }
    /* As in Kafka's JsonConverter, a field the version needs must be given; tagged ones default. */
    for (uint16_t i = 0; i < sd->nfields; i++) {
        const km_field *f = &sd->fields[i];
        if (km_version_in(f->versions, c->version) && !km_version_in(f->tagged, c->version) &&
            !json_object_get(j, f->json_name))
            return km_fail(c->err, ".%s: missing, and version %d requires it", f->json_name, c->version);
    }
    return 0;
}

int km_from_json(const km_message_desc *md, int16_t version, const json_t *json, void *obj, km_arena *arena,
                 km_err *err)
{
    if (!km_version_in(md->valid, version))
        return km_fail(err, "%s: version %d is not valid (valid: %d-%d)", md->name, version, md->valid.lo,
                       md->valid.hi);
    jctx c = {version, km_version_in(md->flexible, version), arena, err};
    if (struct_from_json(&c, md->root, json, obj)) {
        km_path_prepend(err, "%s", md->name, 0);
        return -1;
    }
    return 0;
}
