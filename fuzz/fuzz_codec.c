/* Fuzz target: any bytes as any message at any version.  Whatever decodes must encode,
 * and that encoding must decode and re-encode to itself (canonical after one pass). */
#include "km_codec.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static const km_message_desc *pick(const uint8_t **data, size_t *size, int16_t *version)
{
    size_t n = 0;
    for (const km_message_desc *const *m = km_all_messages(); *m; m++)
        n++;
    if (*size < 3)
        return NULL;
    const km_message_desc *md = km_all_messages()[((size_t)(*data)[0] << 8 | (*data)[1]) % n];
    *version = (int16_t)(md->valid.lo + (*data)[2] % (md->valid.hi - md->valid.lo + 1));
    *data += 3;
    *size -= 3;
    return md;
}

static void check_canonical(const km_message_desc *md, int16_t version, const km_buf *first)
{
    km_arena arena;
    km_arena_init(&arena, 64u << 20);
    void *obj = calloc(1, md->root->size);
    km_err err;
    if (km_decode(md, version, first->data, first->len, obj, &arena, NULL, &err))
        abort();  /* our own encoding must decode */
    km_buf second;
    km_buf_init(&second);
    if (km_encode(md, version, obj, &second, &err) || second.len != first->len ||
        (first->len && memcmp(second.data, first->data, first->len)))
        abort();
    json_t *j = km_to_json(md, version, obj, &err);
    json_decref(j);
    km_buf_free(&second);
    free(obj);
    km_arena_free(&arena);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int16_t version;
    const km_message_desc *md = pick(&data, &size, &version);
    if (!md)
        return 0;
    km_arena arena;
    km_arena_init(&arena, 64u << 20);
    void *obj = calloc(1, md->root->size);
    km_err err;
    if (km_decode(md, version, data, size, obj, &arena, NULL, &err) == 0) {
        km_buf out;
        km_buf_init(&out);
        if (km_encode(md, version, obj, &out, &err))
            abort();  /* decoded but cannot encode: a codec bug */
        check_canonical(md, version, &out);
        km_buf_free(&out);
    } else if (!err.msg[0]) {
        abort();  /* every failure must say why */
    }
    free(obj);
    km_arena_free(&arena);
    return 0;
}
