/* Bad input: truncation at every offset, corrupted bytes, lengths past the end,
 * versions and fields that do not fit.  Always an error that names the place; never a crash. */
#include "codec_fill.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static void encode_filled(const km_message_desc *md, int16_t v, km_buf *wire)
{
    km_arena arena;
    km_arena_init(&arena, 0);
    void *obj = calloc(1, md->root->size);
    fill_message(md, v, obj, &arena, 5);
    km_buf_init(wire);
    encode_or_fail(md, v, obj, wire);
    free(obj);
    km_arena_free(&arena);
}

static int try_decode(const km_message_desc *md, int16_t v, const uint8_t *p, size_t n, km_err *err)
{
    km_arena arena;
    km_arena_init(&arena, 1u << 20);  /* a small cap: hostile counts must hit it, not the heap */
    void *obj = calloc(1, md->root->size);
    int rc = km_decode(md, v, p, n, obj, &arena, NULL, err);
    if (rc == 0) {
        km_buf again;  /* whatever decodes must encode again */
        km_buf_init(&again);
        cr_assert_eq(km_encode(md, v, obj, &again, err), 0, "%s v%d: decoded but cannot encode: %s", md->name, v,
                     err->msg);
        km_buf_free(&again);
    }
    free(obj);
    km_arena_free(&arena);
    return rc;
}

Test(codec_errors, truncation_at_every_offset_of_every_pair)
{
    for (const km_message_desc *const *m = km_all_messages(); *m; m++) {
        for (int v = (*m)->valid.lo; v <= (*m)->valid.hi; v++) {
            km_buf wire;
            encode_filled(*m, (int16_t)v, &wire);
            for (size_t cut = 0; cut < wire.len; cut++) {
                km_err err = {{0}};
                cr_assert_eq(try_decode(*m, (int16_t)v, wire.data, cut, &err), -1,
                             "%s v%d cut at %zu decoded", (*m)->name, v, cut);
                cr_assert(strstr(err.msg, (*m)->name) && strstr(err.msg, "offset"), "vague error: %s", err.msg);
            }
            km_buf_free(&wire);
        }
    }
}

Test(codec_errors, corrupt_bytes_never_crash)
{
    static const uint8_t patterns[] = {0xff, 0x7f, 0x80, 0x00};
    for (const km_message_desc *const *m = km_all_messages(); *m; m++) {
        for (int v = (*m)->valid.lo; v <= (*m)->valid.hi; v++) {
            km_buf wire;
            encode_filled(*m, (int16_t)v, &wire);
            uint8_t *copy = malloc(wire.len + 1);
            for (size_t at = 0; at < wire.len; at++) {
                for (size_t k = 0; k < sizeof patterns; k++) {
                    memcpy(copy, wire.data, wire.len);
                    copy[at] = patterns[k];
                    km_err err = {{0}};
                    if (try_decode(*m, (int16_t)v, copy, wire.len, &err))
                        cr_assert(err.msg[0], "%s v%d: failed without a message", (*m)->name, v);
                }
            }
            free(copy);
            km_buf_free(&wire);
        }
    }
}

Test(codec_errors, length_past_end_names_field_and_offset)
{
    /* StopReplica v0 with the topic name's int16 length raised to 0x7000. */
    const uint8_t bad[] = {0, 0, 0, 1, 0, 0, 0, 2, 1, 0, 0, 0, 1, 0x70, 0x00, 't', 0, 0, 0, 3};
    km_err err = {{0}};
    cr_assert_eq(try_decode(&km_stop_replica_request_desc, 0, bad, sizeof bad, &err), -1);
    cr_assert(strstr(err.msg, "StopReplicaRequest v0.UngroupedPartitions[0].TopicName"), "%s", err.msg);
    cr_assert(strstr(err.msg, "offset 13"), "%s", err.msg);
    cr_assert(strstr(err.msg, "runs past the end"), "%s", err.msg);
}

Test(codec_errors, negative_and_huge_array_counts)
{
    /* LeaderAndIsr v0: ControllerId, ControllerEpoch, then the ungrouped array count. */
    uint8_t neg[] = {0, 0, 0, 1, 0, 0, 0, 2, 0xff, 0xff, 0xff, 0xfe};
    uint8_t huge[] = {0, 0, 0, 1, 0, 0, 0, 2, 0x7f, 0xff, 0xff, 0xff};
    km_err err = {{0}};
    cr_assert_eq(try_decode(&km_leader_and_isr_request_desc, 0, neg, sizeof neg, &err), -1);
    cr_assert(strstr(err.msg, "negative length -2"), "%s", err.msg);
    cr_assert_eq(try_decode(&km_leader_and_isr_request_desc, 0, huge, sizeof huge, &err), -1);
    cr_assert(strstr(err.msg, "UngroupedPartitionStates") && strstr(err.msg, "memory limit"), "%s", err.msg);
}

Test(codec_errors, null_where_not_nullable)
{
    /* StopReplica v0 topic name length -1. */
    const uint8_t bad[] = {0, 0, 0, 1, 0, 0, 0, 2, 1, 0, 0, 0, 1, 0xff, 0xff, 0, 0, 0, 3};
    km_err err = {{0}};
    cr_assert_eq(try_decode(&km_stop_replica_request_desc, 0, bad, sizeof bad, &err), -1);
    cr_assert(strstr(err.msg, "TopicName") && strstr(err.msg, "null"), "%s", err.msg);
    km_stop_replica_request m;
    km_stop_replica_request_partition_v0 p = {.topic_name = {NULL, -1}};
    km_stop_replica_request_init(&m);
    m.ungrouped_partitions.count = 1;
    m.ungrouped_partitions.items = &p;
    km_buf out;
    km_buf_init(&out);
    cr_assert_eq(km_encode(&km_stop_replica_request_desc, 0, &m, &out, &err), -1);
    cr_assert(strstr(err.msg, "TopicName: is null"), "%s", err.msg);
    cr_assert_eq(out.len, 0, "a failed encode must leave nothing behind");
    km_buf_free(&out);
}

Test(codec_errors, non_default_field_missing_from_version)
{
    km_leader_and_isr_request m;
    km_leader_and_isr_request_init(&m);
    km_buf out;
    km_buf_init(&out);
    km_err err = {{0}};
    m.is_kraft_controller = true;  /* v7+ only, not ignorable */
    cr_assert_eq(km_encode(&km_leader_and_isr_request_desc, 6, &m, &out, &err), -1);
    cr_assert(strstr(err.msg, "isKRaftController") && strstr(err.msg, "version 6"), "%s", err.msg);
    m.is_kraft_controller = false;
    m.broker_epoch = 5;  /* v2+, ignorable: silently dropped at v1 */
    cr_assert_eq(km_encode(&km_leader_and_isr_request_desc, 1, &m, &out, &err), 0, "%s", err.msg);
    cr_assert_eq(km_encode(&km_leader_and_isr_request_desc, 8, &m, &out, &err), -1);
    cr_assert(strstr(err.msg, "version 8 is not valid"), "%s", err.msg);
    km_buf_free(&out);
}

Test(codec_errors, trailing_bytes_and_bad_booleans)
{
    const uint8_t extra[] = {0, 0, 0, 1, 0, 0, 0, 2, 1, 0, 0, 0, 0, 0x99};
    km_err err = {{0}};
    cr_assert_eq(try_decode(&km_stop_replica_request_desc, 0, extra, sizeof extra, &err), -1);
    cr_assert(strstr(err.msg, "1 trailing bytes"), "%s", err.msg);
    const uint8_t badbool[] = {0, 0, 0, 1, 0, 0, 0, 2, 2, 0, 0, 0, 0};
    cr_assert_eq(try_decode(&km_stop_replica_request_desc, 0, badbool, sizeof badbool, &err), -1);
    cr_assert(strstr(err.msg, "DeletePartitions: bool at offset 8 is 2"), "%s", err.msg);
}

Test(codec_errors, tagged_fields_out_of_order_or_oversized)
{
    /* PartitionChangeRecord v0: PartitionId, TopicId, then tags. Tag 1 (Leader) before tag 0 is refused. */
    uint8_t rec[64] = {0, 0, 0, 1};
    size_t n = 4 + 16;
    const uint8_t tags[] = {2, 1, 4, 0, 0, 0, 3, 0, 1, 1};
    memcpy(rec + n, tags, sizeof tags);
    km_err err = {{0}};
    const km_message_desc *md = km_find_message(KM_K_METADATA, KM_MDR_PARTITION_CHANGE_RECORD);
    cr_assert_eq(try_decode(md, 0, rec, n + sizeof tags, &err), -1);
    cr_assert(strstr(err.msg, "not above the previous tag"), "%s", err.msg);
    const uint8_t big[] = {1, 1, 9, 0, 0, 0, 3};  /* Leader tag claims 9 bytes, 4 follow */
    memcpy(rec + n, big, sizeof big);
    cr_assert_eq(try_decode(md, 0, rec, n + sizeof big, &err), -1);
    cr_assert(strstr(err.msg, "size 9"), "%s", err.msg);
}

Test(codec_errors, json_conventions_and_errors)
{
    km_topic_record t;
    km_topic_record_init(&t);
    t.name = km_cstr("orders");
    for (int i = 0; i < 16; i++)
        t.topic_id.b[i] = (uint8_t)(0xf0 + i);
    km_err err = {{0}};
    const km_message_desc *md = km_find_message(KM_K_METADATA, KM_MDR_TOPIC_RECORD);
    json_t *j = km_to_json(md, 0, &t, &err);
    char *s = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
    cr_assert_str_eq(s, "{\"name\":\"orders\",\"topicId\":\"8PHy8_T19vf4-fr7_P3-_w\"}");
    free(s);
    json_decref(j);
    km_arena arena;
    km_arena_init(&arena, 0);
    json_t *bad = json_loads("{\"name\":\"x\",\"topicId\":\"short\"}", 0, NULL);
    cr_assert_eq(km_from_json(md, 0, bad, &t, &arena, &err), -1);
    cr_assert(strstr(err.msg, "TopicRecord.topicId") && strstr(err.msg, "uuid"), "%s", err.msg);
    json_decref(bad);
    bad = json_loads("{\"name\":\"x\",\"topicId\":\"AAAAAAAAAAAAAAAAAAAAAA\",\"typo\":1}", 0, NULL);
    cr_assert_eq(km_from_json(md, 0, bad, &t, &arena, &err), -1);
    cr_assert(strstr(err.msg, "typo"), "%s", err.msg);
    json_decref(bad);
    bad = json_loads("{\"name\":\"x\"}", 0, NULL);
    cr_assert_eq(km_from_json(md, 0, bad, &t, &arena, &err), -1);
    cr_assert(strstr(err.msg, "topicId: missing"), "%s", err.msg);
    json_decref(bad);
    km_arena_free(&arena);
}

Test(codec_errors, header_versions_follow_flexible_versions)
{
    cr_assert_eq(km_request_header_version(KM_API_LEADER_AND_ISR, 3), 1);
    cr_assert_eq(km_request_header_version(KM_API_LEADER_AND_ISR, 4), 2);
    cr_assert_eq(km_request_header_version(KM_API_CONTROLLED_SHUTDOWN, 0), 0);
    cr_assert_eq(km_response_header_version(KM_API_UPDATE_METADATA, 6), 1);
    cr_assert_eq(km_response_header_version(KM_API_UPDATE_METADATA, 5), 0);
    cr_assert_eq(km_response_header_version(KM_API_API_VERSIONS, 3), 0);
    cr_assert_str_eq(km_api_name(KM_API_LEADER_AND_ISR), "LEADER_AND_ISR");
}
