/* Golden vectors written by hand from the Kafka 3.9 schemas, field by field.
 * Each test builds the message through the generated structs, checks the encoding
 * against the bytes below, and decodes the bytes back to the same encoding. */
#include "km_codec.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

/* Hex text with spaces and comments in [brackets] -> bytes. */
static size_t unhex(const char *hex, uint8_t *out)
{
    size_t n = 0;
    int hi = -1;
    for (const char *p = hex; *p; p++) {
        if (*p == '[') {
            while (*p && *p != ']') p++;
            continue;
        }
        int v = (*p >= '0' && *p <= '9') ? *p - '0' : (*p >= 'a' && *p <= 'f') ? *p - 'a' + 10 : -1;
        if (v < 0) continue;
        if (hi < 0) hi = v;
        else { out[n++] = (uint8_t)(hi << 4 | v); hi = -1; }
    }
    cr_assert_eq(hi, -1, "odd number of hex digits");
    return n;
}

static void check_golden(const km_message_desc *md, int16_t version, const void *obj, const char *hex)
{
    uint8_t want[1024];
    size_t n = unhex(hex, want);
    km_buf out;
    km_buf_init(&out);
    km_err err = {{0}};
    cr_assert_eq(km_encode(md, version, obj, &out, &err), 0, "%s", err.msg);
    cr_assert_eq(out.len, n, "%s v%d: %zu bytes, golden has %zu", md->name, version, out.len, n);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(out.data[i], want[i], "%s v%d: byte %zu is %02x, golden %02x", md->name, version, i,
                     out.data[i], want[i]);
    km_arena arena;
    km_arena_init(&arena, 0);
    void *back = calloc(1, md->root->size);
    cr_assert_eq(km_decode(md, version, want, n, back, &arena, NULL, &err), 0, "%s", err.msg);
    km_buf again;
    km_buf_init(&again);
    cr_assert_eq(km_encode(md, version, back, &again, &err), 0, "%s", err.msg);
    cr_assert(again.len == n && !memcmp(again.data, want, n), "%s v%d: decode+encode differs", md->name, version);
    km_buf_free(&again);
    km_buf_free(&out);
    free(back);
    km_arena_free(&arena);
}

static int32_t ISR12[] = {1, 2}, ONE[] = {1}, IDX34[] = {3, 4};
static const km_uuid TOPIC_ID = {{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}};

static void lai_partition(km_leader_and_isr_request_partition_state *p)
{
    memset(p, 0, sizeof *p);  /* zero is every default of this struct */
    p->partition_index = 0;
    p->controller_epoch = 2;
    p->leader = 1;
    p->leader_epoch = 5;
    p->isr.count = 2; p->isr.items = ISR12;
    p->partition_epoch = 7;
    p->replicas.count = 2; p->replicas.items = ISR12;
}

static void lai_common(km_leader_and_isr_request *m, km_leader_and_isr_request_live_leader *ll)
{
    km_leader_and_isr_request_init(m);
    m->controller_id = 1;
    m->controller_epoch = 2;
    ll->broker_id = 1;
    ll->host_name = km_cstr("h");
    ll->port = 9092;
    memset(&ll->unknown_tags, 0, sizeof ll->unknown_tags);
    m->live_leaders.count = 1; m->live_leaders.items = ll;
}

Test(codec_golden, leader_and_isr_v0)
{
    km_leader_and_isr_request m;
    km_leader_and_isr_request_live_leader ll;
    km_leader_and_isr_request_partition_state p;
    lai_common(&m, &ll);
    lai_partition(&p);
    p.topic_name = km_cstr("t");
    m.ungrouped_partition_states.count = 1; m.ungrouped_partition_states.items = &p;
    check_golden(&km_leader_and_isr_request_desc, 0, &m,
                 "00000001 [controllerId] 00000002 [controllerEpoch]"
                 "00000001 [ungrouped: 1] 0001 74 [topic t] 00000000 [partition] 00000002 [ctrl epoch]"
                 "00000001 [leader] 00000005 [leader epoch] 00000002 00000001 00000002 [isr]"
                 "00000007 [partition epoch] 00000002 00000001 00000002 [replicas]"
                 "00000001 [live leaders: 1] 00000001 0001 68 00002384 [1 h 9092]");
}

Test(codec_golden, leader_and_isr_v4)
{
    km_leader_and_isr_request m;
    km_leader_and_isr_request_live_leader ll;
    km_leader_and_isr_request_partition_state p;
    km_leader_and_isr_request_topic_state t = {0};
    lai_common(&m, &ll);
    lai_partition(&p);
    m.broker_epoch = 100;
    t.topic_name = km_cstr("t");
    t.partition_states.count = 1; t.partition_states.items = &p;
    m.topic_states.count = 1; m.topic_states.items = &t;
    check_golden(&km_leader_and_isr_request_desc, 4, &m,
                 "00000001 00000002 0000000000000064 [broker epoch 100]"
                 "02 [topics: compact 1] 02 74 [topic t] 02 [partitions: 1]"
                 "00000000 00000002 00000001 00000005 03 00000001 00000002 [isr] 00000007"
                 "03 00000001 00000002 [replicas] 01 [adding: empty] 01 [removing: empty] 00 [isNew]"
                 "00 [partition tags] 00 [topic tags]"
                 "02 00000001 02 68 00002384 00 [live leader + tags] 00 [top tags]");
}

Test(codec_golden, leader_and_isr_v7)
{
    km_leader_and_isr_request m;
    km_leader_and_isr_request_live_leader ll;
    km_leader_and_isr_request_partition_state p;
    km_leader_and_isr_request_topic_state t = {0};
    lai_common(&m, &ll);
    lai_partition(&p);
    p.is_new = true;
    m.controller_id = 3000;
    m.is_kraft_controller = true;
    m.broker_epoch = 100;
    m.type = 2;
    t.topic_name = km_cstr("t");
    t.topic_id = TOPIC_ID;
    t.partition_states.count = 1; t.partition_states.items = &p;
    m.topic_states.count = 1; m.topic_states.items = &t;
    check_golden(&km_leader_and_isr_request_desc, 7, &m,
                 "00000bb8 [controller 3000] 01 [isKRaftController] 00000002 0000000000000064 02 [type full]"
                 "02 02 74 0102030405060708090a0b0c0d0e0f10 [topic id]"
                 "02 00000000 00000002 00000001 00000005 03 00000001 00000002 00000007 03 00000001 00000002"
                 "01 01 01 [isNew] 00 [leader recovery state] 00 00"
                 "02 00000001 02 68 00002384 00 00");
}

static void um_partition(km_update_metadata_request_partition_state *p)
{
    memset(p, 0, sizeof *p);
    p->controller_epoch = 2;
    p->leader = 1;
    p->leader_epoch = 5;
    p->isr.count = 1; p->isr.items = ONE;
    p->zk_version = 7;
    p->replicas.count = 1; p->replicas.items = ONE;
}

Test(codec_golden, update_metadata_v0)
{
    km_update_metadata_request m;
    km_update_metadata_request_partition_state p;
    km_update_metadata_request_broker b;
    km_update_metadata_request_init(&m);
    m.controller_id = 1;
    m.controller_epoch = 2;
    um_partition(&p);
    p.topic_name = km_cstr("t");
    m.ungrouped_partition_states.count = 1; m.ungrouped_partition_states.items = &p;
    memset(&b, 0, sizeof b);
    b.id = 1;
    b.v0_host = km_cstr("h");
    b.v0_port = 9092;
    b.rack = km_cstr(NULL);
    m.live_brokers.count = 1; m.live_brokers.items = &b;
    check_golden(&km_update_metadata_request_desc, 0, &m,
                 "00000001 00000002 00000001 0001 74 00000000 00000002 00000001 00000005"
                 "00000001 00000001 [isr] 00000007 [zkVersion] 00000001 00000001 [replicas]"
                 "00000001 [brokers: 1] 00000001 0001 68 00002384 [v0 host/port]");
}

static void um_broker(km_update_metadata_request_broker *b, km_update_metadata_request_endpoint *e, const char *rack)
{
    memset(b, 0, sizeof *b);
    memset(e, 0, sizeof *e);
    e->port = 9092;
    e->host = km_cstr("h");
    e->listener = km_cstr("PLAINTEXT");
    e->security_protocol = 0;
    b->id = 1;
    b->endpoints.count = 1; b->endpoints.items = e;
    b->rack = km_cstr(rack);
}

/* One topic "t" with one partition and one broker, shared by the flexible UpdateMetadata vectors. */
typedef struct um_flex {
    km_update_metadata_request m;
    km_update_metadata_request_partition_state p;
    km_update_metadata_request_topic_state t;
    km_update_metadata_request_broker b;
    km_update_metadata_request_endpoint e;
} um_flex;

static void um_flex_init(um_flex *u, const char *rack)
{
    memset(u, 0, sizeof *u);
    km_update_metadata_request_init(&u->m);
    u->m.controller_id = 1;
    u->m.controller_epoch = 2;
    u->m.broker_epoch = 100;
    um_partition(&u->p);
    u->t.topic_name = km_cstr("t");
    u->t.partition_states.count = 1; u->t.partition_states.items = &u->p;
    u->m.topic_states.count = 1; u->m.topic_states.items = &u->t;
    um_broker(&u->b, &u->e, rack);
    u->m.live_brokers.count = 1; u->m.live_brokers.items = &u->b;
}

Test(codec_golden, update_metadata_v6)
{
    um_flex u;
    um_flex_init(&u, NULL);
    check_golden(&km_update_metadata_request_desc, 6, &u.m,
                 "00000001 00000002 0000000000000064 02 02 74"
                 "02 00000000 00000002 00000001 00000005 02 00000001 00000007 02 00000001 01 [offline: empty] 00"
                 "00 [topic tags] 02 00000001 [broker 1]"
                 "02 00002384 02 68 0a 504c41494e54455854 [PLAINTEXT] 0000 [security protocol] 00"
                 "00 [rack null] 00 00");
}

Test(codec_golden, update_metadata_v8)
{
    um_flex u;
    um_flex_init(&u, "r");
    u.m.controller_id = 3000;
    u.m.is_kraft_controller = true;
    u.m.type = 2;
    u.t.topic_id = TOPIC_ID;
    check_golden(&km_update_metadata_request_desc, 8, &u.m,
                 "00000bb8 01 00000002 0000000000000064 02 02 74 0102030405060708090a0b0c0d0e0f10"
                 "02 00000000 00000002 00000001 00000005 02 00000001 00000007 02 00000001 01 00"
                 "00 02 00000001 02 00002384 02 68 0a 504c41494e54455854 0000 00 02 72 [rack r] 00"
                 "01 00 01 02 [tagged: 1 field, tag 0 (Type), size 1, value 2]");
}

Test(codec_golden, stop_replica_v0)
{
    km_stop_replica_request m;
    km_stop_replica_request_partition_v0 p = {0};
    km_stop_replica_request_init(&m);
    m.controller_id = 1;
    m.controller_epoch = 2;
    m.delete_partitions = true;
    p.topic_name = km_cstr("t");
    p.partition_index = 3;
    m.ungrouped_partitions.count = 1; m.ungrouped_partitions.items = &p;
    check_golden(&km_stop_replica_request_desc, 0, &m,
                 "00000001 00000002 01 [delete] 00000001 0001 74 00000003");
}

Test(codec_golden, stop_replica_v2)
{
    km_stop_replica_request m;
    km_stop_replica_request_topic_v1 t = {0};
    km_stop_replica_request_init(&m);
    m.controller_id = 1;
    m.controller_epoch = 2;
    m.broker_epoch = 100;
    m.delete_partitions = true;
    t.name = km_cstr("t");
    t.partition_indexes.count = 2; t.partition_indexes.items = IDX34;
    m.topics.count = 1; m.topics.items = &t;
    check_golden(&km_stop_replica_request_desc, 2, &m,
                 "00000001 00000002 0000000000000064 01 02 02 74 03 00000003 00000004 00 [topic tags] 00");
}

Test(codec_golden, stop_replica_v4)
{
    km_stop_replica_request m;
    km_stop_replica_request_topic_state t = {0};
    km_stop_replica_request_partition_state p = {0};
    km_stop_replica_request_init(&m);
    m.controller_id = 3000;
    m.is_kraft_controller = true;
    m.controller_epoch = 2;
    m.broker_epoch = 100;
    p.partition_index = 3;
    p.leader_epoch = 5;
    p.delete_partition = true;
    t.topic_name = km_cstr("t");
    t.partition_states.count = 1; t.partition_states.items = &p;
    m.topic_states.count = 1; m.topic_states.items = &t;
    check_golden(&km_stop_replica_request_desc, 4, &m,
                 "00000bb8 01 00000002 0000000000000064 02 02 74 02 00000003 00000005 01 00 00 00");
}

Test(codec_golden, request_header_keeps_two_byte_client_id_when_flexible)
{
    km_buf out;
    km_buf_init(&out);
    km_err err;
    km_api_versions_request body;
    km_api_versions_request_init(&body);
    body.client_software_name = km_cstr("k");
    body.client_software_version = km_cstr("1");
    cr_assert_eq(km_frame_request(KM_API_API_VERSIONS, 3, 42, "c", &body, &out, &err), 0, "%s", err.msg);
    uint8_t want[64];
    size_t n = unhex("00000011 [size 17] 0012 0003 0000002a [key 18 v3 corr 42] 0001 63 [client id: int16 len]"
                     "00 [header tags] 02 6b 02 31 [compact software name/version] 00", want);
    cr_assert_eq(out.len, n);
    cr_assert(!memcmp(out.data, want, n));
    km_buf_free(&out);
}
