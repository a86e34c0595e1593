/* Non-default values for every field present in a version, derived from the descriptors alone. */
#include "codec_fill.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

typedef struct filler {
    int16_t version;
    km_arena *arena;
    uint32_t seed;
} filler;

static void fill_struct(filler *f, const km_struct_desc *sd, void *obj, int depth);

/* An integer in the type's range that differs from the default. */
static void fill_int(filler *f, const km_field *fd, km_type t, void *p)
{
    int64_t v = 1 + (int64_t)(f->seed++ % 90);
    if (v == fd->default_int)
        v++;
    switch (t) {
    case KM_T_BOOL: *(bool *)p = fd->default_int == 0; break;
    case KM_T_INT8: *(int8_t *)p = (int8_t)v; break;
    case KM_T_INT16: *(int16_t *)p = (int16_t)v; break;
    case KM_T_UINT16: *(uint16_t *)p = (uint16_t)(v + 40000); break;
    case KM_T_INT32: *(int32_t *)p = (int32_t)(v * 1000003); break;
    case KM_T_UINT32: *(uint32_t *)p = (uint32_t)v + 3000000000u; break;
    case KM_T_INT64: *(int64_t *)p = v * 10000000019LL; break;
    default: break;
    }
}

static void fill_value(filler *f, const km_field *fd, km_type t, void *p, int depth)
{
    switch (t) {
    case KM_T_FLOAT64: *(double *)p = fd->default_float + 1.5; break;
    case KM_T_UUID:
        for (int i = 0; i < 16; i++)
            ((km_uuid *)p)->b[i] = (uint8_t)(f->seed + (uint32_t)i * 7 + 1);
        f->seed++;
        break;
    case KM_T_STRING: {
        char *s = km_arena_alloc(f->arena, 24);
        snprintf(s, 24, "s%u-\xc3\xa9", f->seed++);  /* non-ASCII too: UTF-8 must survive */
        km_str v = km_cstr(s);
        memcpy(p, &v, sizeof v);
        break;
    }
    case KM_T_BYTES: case KM_T_RECORDS: {
        uint8_t *b = km_arena_alloc(f->arena, 3);
        b[0] = (uint8_t)f->seed++; b[1] = 0xff; b[2] = 0;
        km_bytes v = {b, 3};
        memcpy(p, &v, sizeof v);
        break;
    }
    case KM_T_ARRAY: {
        size_t es = km_type_size(fd->elem, fd->sub);
        km_array_any a = {depth < 4 ? 2 : 0, NULL};
        a.items = km_arena_alloc(f->arena, es * 2);
        for (int i = 0; i < a.count; i++)
            fill_value(f, fd, fd->elem, (char *)a.items + (size_t)i * es, depth + 1);
        memcpy(p, &a, sizeof a);
        break;
    }
    case KM_T_STRUCT: {
        void *sp = p;
        if (fd->struct_by_pointer && t == fd->type) {
            sp = km_arena_alloc(f->arena, fd->sub->size);
            memcpy(p, &sp, sizeof sp);
        }
        fill_struct(f, fd->sub, sp, depth + 1);
        break;
    }
    default: fill_int(f, fd, t, p); break;
    }
}

static void fill_struct(filler *f, const km_struct_desc *sd, void *obj, int depth)
{
    km_init(sd, obj);
    for (uint16_t i = 0; i < sd->nfields; i++) {
        const km_field *fd = &sd->fields[i];
        if (km_version_in(fd->versions, f->version))
            fill_value(f, fd, fd->type, (char *)obj + fd->offset, depth);
    }
}

void fill_message(const km_message_desc *md, int16_t version, void *obj, km_arena *arena, uint32_t seed)
{
    filler f = {version, arena, seed};
    fill_struct(&f, md->root, obj, 0);
}

void encode_or_fail(const km_message_desc *md, int16_t version, const void *obj, km_buf *out)
{
    km_err err = {{0}};
    if (km_encode(md, version, obj, out, &err))
        cr_assert_fail("%s v%d: encode failed: %s", md->name, version, err.msg);
}
