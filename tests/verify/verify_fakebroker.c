/* verify_fakebroker.c - a broker of a few lines for the verifier's tests: it answers Metadata and ListOffsets
 * from an image (as a broker that agrees with it would), with one partition of topic-0 changed on demand. */
#include "verify_fakebroker.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

static void metadata_partitions(const km_topic *t, km_metadata_response_response_topic *mt, km_arena *a,
                                bool first_topic, vf_tweak tweak)
{
    int32_t n = km_topic_partition_count(t);
    mt->partitions.items = km_arena_alloc(a, (size_t)n * sizeof *mt->partitions.items);
    mt->partitions.count = n;
    for (int32_t id = 0; id < n; id++) {
        km_partition p;
        cr_assert(km_topic_partition(t, id, &p));
        km_metadata_response_response_partition *mp = &mt->partitions.items[id];
        *mp = (km_metadata_response_response_partition){ .partition_index = id, .leader_id = p.leader,
                                                         .leader_epoch = p.leader_epoch };
        mp->replica_nodes.count = p.replicas.n;
        mp->replica_nodes.items = (int32_t *)p.replicas.v;
        int32_t *isr = km_arena_alloc(a, (size_t)(p.isr.n + 1) * sizeof *isr);
        memcpy(isr, p.isr.v, (size_t)p.isr.n * sizeof *isr);
        isr[p.isr.n] = 7; /* a replica the image's ISR does not hold, at the same leader epoch */
        bool first = first_topic && id == 0;
        if (tweak == VF_STALE_EPOCH && first)
            mp->leader_epoch = p.leader_epoch - 1; /* a broker that missed the last leader change */
        mp->isr_nodes.count = p.isr.n + (tweak == VF_ISR_DIFFERS && first);
        mp->isr_nodes.items = isr;
        mp->offline_replicas.count = 0;
    }
}

/* Whether the request asks about t: every topic (null array), or t by name. */
static bool asked(const km_metadata_request *rq, const km_topic *t)
{
    if (!rq || rq->topics.count < 0)
        return true;
    for (int32_t i = 0; i < rq->topics.count; i++)
        if (rq->topics.items[i].name.len >= 0 && !strcmp(rq->topics.items[i].name.ptr, km_topic_name(t)))
            return true;
    return false;
}

static void *metadata_answer(const km_image *img, const km_metadata_request *rq, uint16_t port, km_arena *a,
                             vf_tweak tweak)
{
    km_metadata_response *rs = km_arena_alloc(a, sizeof *rs);
    km_init(km_metadata_response_desc.root, rs);
    static km_metadata_response_response_broker b;
    b = (km_metadata_response_response_broker){ .node_id = 1, .host = km_cstr("127.0.0.1"), .port = port,
                                                .rack = km_cstr(NULL) };
    rs->brokers.count = 1;
    rs->brokers.items = &b;
    rs->controller_id = 3000;
    rs->topics.items = km_arena_alloc(a, km_image_topic_count(img) * sizeof *rs->topics.items);
    size_t it = 0;
    for (const km_topic *t; (t = km_image_next_topic(img, &it));) {
        if (!asked(rq, t))
            continue;
        km_metadata_response_response_topic *mt = &rs->topics.items[rs->topics.count++];
        *mt = (km_metadata_response_response_topic){ .topic_authorized_operations = INT32_MIN };
        mt->name = km_cstr(km_topic_name(t));
        mt->topic_id = km_topic_id(t);
        metadata_partitions(t, mt, a, !strcmp(km_topic_name(t), "topic-0"), tweak);
    }
    return rs;
}

/* Every partition asked about answers NONE at offset 0. */
static void *offsets_answer(const km_list_offsets_request *rq, km_arena *a)
{
    km_list_offsets_response *rs = km_arena_alloc(a, sizeof *rs);
    km_init(km_list_offsets_response_desc.root, rs);
    rs->topics.count = rq->topics.count;
    rs->topics.items = km_arena_alloc(a, (size_t)(rq->topics.count + 1) * sizeof *rs->topics.items);
    for (int32_t i = 0; i < rq->topics.count; i++) {
        km_list_offsets_response_topic_response *t = &rs->topics.items[i];
        t->name = rq->topics.items[i].name;
        t->partitions.count = rq->topics.items[i].partitions.count;
        t->partitions.items = km_arena_alloc(a, (size_t)(t->partitions.count + 1) * sizeof *t->partitions.items);
        for (int32_t j = 0; j < t->partitions.count; j++)
            t->partitions.items[j] = (km_list_offsets_response_partition_response){
                .partition_index = rq->topics.items[i].partitions.items[j].partition_index, .timestamp = -1,
                .leader_epoch = rq->topics.items[i].partitions.items[j].current_leader_epoch };
    }
    return rs;
}

bool vf_answer_one(int c, const km_image *img, uint16_t port, vf_tweak tweak)
{
    uint8_t size[4];
    if (recv(c, size, 4, MSG_WAITALL) != 4)
        return false;
    uint32_t n = (uint32_t)size[0] << 24 | (uint32_t)size[1] << 16 | (uint32_t)size[2] << 8 | size[3];
    uint8_t *req = malloc(n);
    km_arena a;
    km_arena_init(&a, 0);
    km_reader r;
    km_request_header_view h;
    km_err err;
    void *body = NULL;
    bool ok = recv(c, req, n, MSG_WAITALL) == (ssize_t)n;
    km_reader_init(&r, req, n);
    if (ok && km_parse_request_header(&r, &h, &a, &err) == 0) {
        if (h.api_key == KM_API_METADATA) {
            km_metadata_request *rq = km_arena_alloc(&a, sizeof *rq);
            if (km_decode(&km_metadata_request_desc, h.api_version, r.p + r.pos, km_reader_left(&r), rq, &a, NULL,
                          &err) == 0)
                body = metadata_answer(img, rq, port, &a, tweak);
        } else if (h.api_key == KM_API_LIST_OFFSETS) {
            km_list_offsets_request *rq = km_arena_alloc(&a, sizeof *rq);
            if (km_decode(&km_list_offsets_request_desc, h.api_version, r.p + r.pos, km_reader_left(&r), rq, &a,
                          NULL, &err) == 0)
                body = offsets_answer(rq, &a);
        }
    }
    km_buf b;
    km_buf_init(&b);
    ok = body && km_frame_response(h.api_key, h.api_version, h.correlation_id, body, &b, &err) == 0 &&
         send(c, b.data, b.len, MSG_NOSIGNAL) == (ssize_t)b.len;
    km_buf_free(&b);
    km_arena_free(&a);
    free(req);
    return ok;
}

