/* Every message, every version: non-default values in every field survive
 * encode -> decode -> encode byte for byte, and JSON -> struct -> bytes too. */
#include "codec_fill.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

typedef void (*pair_check)(const km_message_desc *md, int16_t version, const km_buf *wire);

/* Decodes wire, re-encodes, and checks the bytes are identical. */
static void check_binary(const km_message_desc *md, int16_t version, const km_buf *wire)
{
    km_arena arena;
    km_arena_init(&arena, 0);
    void *back = calloc(1, md->root->size);
    km_err err = {{0}};
    cr_assert_eq(km_decode(md, version, wire->data, wire->len, back, &arena, NULL, &err), 0, "%s v%d: %s",
                 md->name, version, err.msg);
    km_buf again;
    km_buf_init(&again);
    encode_or_fail(md, version, back, &again);
    cr_assert_eq(again.len, wire->len, "%s v%d: re-encoded %zu bytes, first time %zu", md->name, version,
                 again.len, wire->len);
    cr_assert(wire->len == 0 || !memcmp(again.data, wire->data, wire->len), "%s v%d: re-encoded bytes differ",
              md->name, version);
    cr_assert_eq(km_encoded_size(md, version, back, &err), (int64_t)wire->len, "%s v%d: size", md->name, version);
    km_buf_free(&again);
    free(back);
    km_arena_free(&arena);
}

/* bytes -> JSON -> text -> JSON -> struct -> bytes must give the same bytes. */
static void check_json(const km_message_desc *md, int16_t version, const km_buf *wire)
{
    km_arena arena;
    km_arena_init(&arena, 0);
    void *obj = calloc(1, md->root->size), *back = calloc(1, md->root->size);
    km_err err = {{0}};
    cr_assert_eq(km_decode(md, version, wire->data, wire->len, obj, &arena, NULL, &err), 0);
    json_t *j = km_to_json(md, version, obj, &err);
    cr_assert(j, "%s v%d: to_json: %s", md->name, version, err.msg);
    char *text = json_dumps(j, JSON_COMPACT);
    json_error_t jerr;
    json_t *parsed = json_loads(text, 0, &jerr);
    cr_assert(parsed, "%s v%d: output is not JSON: %s", md->name, version, jerr.text);
    cr_assert_eq(km_from_json(md, version, parsed, back, &arena, &err), 0, "%s v%d: from_json: %s\n%s", md->name,
                 version, err.msg, text);
    km_buf again;
    km_buf_init(&again);
    encode_or_fail(md, version, back, &again);
    cr_assert(again.len == wire->len && (wire->len == 0 || !memcmp(again.data, wire->data, wire->len)),
              "%s v%d: JSON round trip changed the bytes\n%s", md->name, version, text);
    km_buf_free(&again);
    free(text);
    json_decref(parsed);
    json_decref(j);
    free(obj);
    free(back);
    km_arena_free(&arena);
}

/* Adds a tag no definition knows to the root struct, so re-encoding must carry it through. */
static void add_unknown_tag(const km_message_desc *md, void *obj, km_arena *arena)
{
    km_raw_tags *tags = (km_raw_tags *)((char *)obj + md->root->unknown_tags_offset);
    tags->items = km_arena_alloc(arena, sizeof *tags->items);
    uint8_t *data = km_arena_alloc(arena, 2);
    data[0] = 0xab;
    data[1] = 0xcd;
    tags->items[0] = (km_raw_tag){.tag = 9999, .data = {data, 2}};
    tags->count = 1;
}

static int for_every_pair(pair_check check, bool with_unknown_tag)
{
    int pairs = 0;
    for (const km_message_desc *const *m = km_all_messages(); *m; m++) {
        const km_message_desc *md = *m;
        for (int v = md->valid.lo; v <= md->valid.hi; v++) {
            km_arena arena;
            km_arena_init(&arena, 0);
            void *obj = calloc(1, md->root->size);
            fill_message(md, (int16_t)v, obj, &arena, (uint32_t)v * 31u + 7u);
            if (with_unknown_tag && km_version_in(md->flexible, (int16_t)v))
                add_unknown_tag(md, obj, &arena);
            km_buf wire;
            km_buf_init(&wire);
            encode_or_fail(md, (int16_t)v, obj, &wire);
            check(md, (int16_t)v, &wire);
            km_buf_free(&wire);
            free(obj);
            km_arena_free(&arena);
            pairs++;
        }
    }
    return pairs;
}

Test(codec_roundtrip, every_message_every_version_binary)
{
    int pairs = for_every_pair(check_binary, false);
    cr_assert_gt(pairs, 650, "only %d (message, version) pairs", pairs);
}

Test(codec_roundtrip, unknown_tagged_fields_survive) { for_every_pair(check_binary, true); }

Test(codec_roundtrip, every_message_every_version_json) { for_every_pair(check_json, true); }

Test(codec_roundtrip, required_apis_cover_their_versions)
{
    static const struct { const char *name; int lo, hi; } required[] = {
        {"RequestHeader", 0, 2},         {"ResponseHeader", 0, 1},        {"ApiVersionsRequest", 0, 4},
        {"ApiVersionsResponse", 0, 4},   {"LeaderAndIsrRequest", 0, 7},   {"LeaderAndIsrResponse", 0, 7},
        {"UpdateMetadataRequest", 0, 8}, {"UpdateMetadataResponse", 0, 8}, {"StopReplicaRequest", 0, 4},
        {"StopReplicaResponse", 0, 4},   {"MetadataRequest", 0, 12},      {"MetadataResponse", 0, 12},
        {"FindCoordinatorRequest", 0, 5}, {"DescribeClusterRequest", 0, 1}, {"FetchRequest", 0, 17},
        {"FetchSnapshotRequest", 0, 1},  {"FetchSnapshotResponse", 0, 1},
    };
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++) {
        const km_message_desc *md = km_find_message_by_name(required[i].name);
        cr_assert(md, "%s is not defined", required[i].name);
        cr_expect_leq(md->valid.lo, required[i].lo, "%s", required[i].name);
        cr_expect_geq(md->valid.hi, required[i].hi, "%s", required[i].name);
    }
    cr_assert_eq(km_find_message(KM_K_METADATA, KM_MDR_PARTITION_CHANGE_RECORD)->valid.hi, 2);
}

/* km_find_message by key (a generated switch) names every keyed message of the registry, and
 * nothing for a key no message has. */
Test(codec_roundtrip, every_keyed_message_is_found_by_its_key)
{
    int found = 0;
    for (const km_message_desc *const *m = km_all_messages(); *m; m++) {
        if ((*m)->kind != KM_K_REQUEST && (*m)->kind != KM_K_RESPONSE && (*m)->kind != KM_K_METADATA)
            continue;
        cr_expect_eq(km_find_message((*m)->kind, (*m)->api_key), *m, "%s", (*m)->name);
        found++;
    }
    cr_expect_gt(found, 150);
    cr_expect_null(km_find_message(KM_K_REQUEST, 32000));
    cr_expect_null(km_find_message(KM_K_RESPONSE, -1));
}
