/* verify_fakebroker.c - a broker of a few lines for the verifier's tests: it answers Metadata and ListOffsets
 * from an image (as a broker that agrees with it would), with one partition of topic-0 changed on demand, and
 * plays a stale leader of topic-0-0 (its log served by Fetch) or the image's leader beside it. */
#include "verify_fakebroker.h"

#include "km_metalog.h"
#include "km_testsupport.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static void metadata_partitions(const km_topic *t, km_metadata_response_response_topic *mt, km_arena *a,
                                bool first_topic, vf_tweak tweak, const vf_stale *st)
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
        if (st && st->self == st->stale && first) { /* it never heard of the image's leader change */
            mp->leader_id = st->stale;
            mp->leader_epoch = p.leader_epoch > 0 ? p.leader_epoch - 1 : 0;
        }
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
                             vf_tweak tweak, const vf_stale *st)
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
        metadata_partitions(t, mt, a, !strcmp(km_topic_name(t), "topic-0"), tweak, st);
    }
    return rs;
}

/* Where the stale leader's log ends: after its last batch. */
static int64_t log_end(const vf_stale *st)
{
    int64_t end = 0;
    for (size_t pos = 0; pos + 61 <= st->log_len;) {
        const uint8_t *b = st->log + pos;
        int64_t base = 0;
        for (int i = 0; i < 8; i++)
            base = base << 8 | b[i];
        uint32_t len = (uint32_t)b[8] << 24 | (uint32_t)b[9] << 16 | (uint32_t)b[10] << 8 | b[11];
        uint32_t delta = (uint32_t)b[23] << 24 | (uint32_t)b[24] << 16 | (uint32_t)b[25] << 8 | b[26];
        end = base + delta + 1;
        pos += 12 + len;
    }
    return end;
}

/* Every partition asked about answers NONE at offset 0; the stale leader's topic-0-0 its high watermark, or with
 * replica id -2 its log end. */
static void *offsets_answer(const km_list_offsets_request *rq, km_arena *a, const vf_stale *st)
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
        for (int32_t j = 0; st && st->self == st->stale && !strcmp(t->name.ptr, "topic-0") && j < t->partitions.count;
             j++)
            if (t->partitions.items[j].partition_index == 0)
                t->partitions.items[j].offset = rq->replica_id == -2 ? log_end(st) : st->high_watermark;
    }
    return rs;
}

/* The image's leader: where the stale epoch ends on it (the truncation point). */
static void *epoch_answer(const km_offset_for_leader_epoch_request *rq, km_arena *a, const vf_stale *st)
{
    km_offset_for_leader_epoch_response *rs = km_arena_alloc(a, sizeof *rs);
    km_init(km_offset_for_leader_epoch_response_desc.root, rs);
    cr_assert(rq->topics.count == 1 && rq->topics.items[0].partitions.count == 1);
    km_offset_for_leader_epoch_response_offset_for_leader_topic_result *t = km_arena_alloc(a, sizeof *t);
    km_offset_for_leader_epoch_response_epoch_end_offset *p = km_arena_alloc(a, sizeof *p);
    *p = (km_offset_for_leader_epoch_response_epoch_end_offset){
        .partition = rq->topics.items[0].partitions.items[0].partition,
        .leader_epoch = rq->topics.items[0].partitions.items[0].leader_epoch, .end_offset = st->truncation };
    *t = (km_offset_for_leader_epoch_response_offset_for_leader_topic_result){ .topic = rq->topics.items[0].topic };
    t->partitions.count = 1;
    t->partitions.items = p;
    rs->topics.count = 1;
    rs->topics.items = t;
    return rs;
}

/* No producer on either side. */
static void *producers_answer(const km_describe_producers_request *rq, km_arena *a)
{
    km_describe_producers_response *rs = km_arena_alloc(a, sizeof *rs);
    km_init(km_describe_producers_response_desc.root, rs);
    cr_assert(rq->topics.count == 1 && rq->topics.items[0].partition_indexes.count == 1);
    km_describe_producers_response_topic_response *t = km_arena_alloc(a, sizeof *t);
    km_describe_producers_response_partition_response *p = km_arena_alloc(a, sizeof *p);
    *p = (km_describe_producers_response_partition_response){
        .partition_index = rq->topics.items[0].partition_indexes.items[0], .error_message = km_cstr(NULL) };
    *t = (km_describe_producers_response_topic_response){ .name = rq->topics.items[0].name };
    t->partitions.count = 1;
    t->partitions.items = p;
    rs->topics.count = 1;
    rs->topics.items = t;
    return rs;
}

/* The batches of the stale leader's log from the one holding `offset`, below `below`: at most max_batches whole
 * ones and max_bytes (the first one whole whatever its size, as Kafka answers), then the head of the next (an
 * answer cut at its size, as Kafka's may be). */
static km_bytes fetch_records(const vf_stale *st, int64_t offset, int32_t max_bytes, int64_t below)
{
    static const uint8_t garbage[40] = { 0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 28, 0, 0, 0, 0, 7 }; /* magic 7 */
    if (st->malformed_fetch)
        return (km_bytes){ garbage, (int32_t)sizeof garbage };
    size_t from = st->log_len, to = st->log_len, pos = 0;
    int whole = 0;
    while (pos + 61 <= st->log_len) {
        const uint8_t *b = st->log + pos;
        int64_t base = 0;
        for (int i = 0; i < 8; i++)
            base = base << 8 | b[i];
        size_t size = 12 + ((size_t)b[8] << 24 | (size_t)b[9] << 16 | (size_t)b[10] << 8 | b[11]);
        int64_t last = base + ((int64_t)b[23] << 24 | b[24] << 16 | b[25] << 8 | b[26]);
        if (base >= below)
            break;
        if (last >= offset && from == st->log_len)
            from = pos;
        bool full = from != st->log_len && whole > 0 && pos + size - from > (size_t)max_bytes;
        if (from != st->log_len && (whole++ == st->max_batches || full)) {
            size_t room = from + (size_t)max_bytes > pos ? from + (size_t)max_bytes - pos : 0;
            to = pos + (room < size / 2 ? room : size / 2); /* the next batch, cut */
            break;
        }
        pos += size;
        to = pos;
    }
    return from < to ? (km_bytes){ st->log + from, (int32_t)(to - from) } : (km_bytes){ NULL, 0 };
}

static void *fetch_answer(const km_fetch_request *rq, km_arena *a, const vf_stale *st)
{
    km_fetch_response *rs = km_arena_alloc(a, sizeof *rs);
    km_init(km_fetch_response_desc.root, rs);
    cr_assert((rq->replica_id == -1 || rq->replica_id == -3) && rq->isolation_level == 0 && rq->topics.count == 1 &&
              rq->topics.items[0].partitions.count == 1);
    km_fetch_response_able_topic_response *t = km_arena_alloc(a, sizeof *t);
    km_fetch_response_partition_data *p = km_arena_alloc(a, sizeof *p);
    *p = (km_fetch_response_partition_data){ .partition_index = rq->topics.items[0].partitions.items[0].partition,
                                             .high_watermark = st->high_watermark, .last_stable_offset = -1,
                                             .preferred_read_replica = -1,
                                             .diverging_epoch = { .epoch = -1, .end_offset = -1 },
                                             .current_leader = { .leader_id = -1, .leader_epoch = -1 },
                                             .snapshot_id = { .end_offset = -1, .epoch = -1 } };
    p->aborted_transactions.count = -1;
    if (rq->replica_id == -3 && st->consumer_fetch_only)
        p->error_code = -1; /* UNKNOWN_SERVER_ERROR */
    else
        p->records = fetch_records(st, rq->topics.items[0].partitions.items[0].fetch_offset,
                                   rq->topics.items[0].partitions.items[0].partition_max_bytes,
                                   rq->replica_id == -3 ? log_end(st) : st->high_watermark);
    *t = (km_fetch_response_able_topic_response){ .topic = rq->topics.items[0].topic };
    t->partitions.count = 1;
    t->partitions.items = p;
    rs->responses.count = 1;
    rs->responses.items = t;
    return rs;
}

static void *decoded(const km_message_desc *md, const km_request_header_view *h, km_reader *r, km_arena *a)
{
    void *rq = km_arena_alloc(a, md->root->size);
    km_err err;
    return km_decode(md, h->api_version, r->p + r->pos, km_reader_left(r), rq, a, NULL, &err) == 0 ? rq : NULL;
}

static void *answer(const km_image *img, uint16_t port, vf_tweak tweak, const vf_stale *st,
                    const km_request_header_view *h, km_reader *r, km_arena *a)
{
    void *rq;
    switch (h->api_key) {
    case KM_API_METADATA:
        return (rq = decoded(&km_metadata_request_desc, h, r, a)) ? metadata_answer(img, rq, port, a, tweak, st) : NULL;
    case KM_API_LIST_OFFSETS:
        return (rq = decoded(&km_list_offsets_request_desc, h, r, a)) ? offsets_answer(rq, a, st) : NULL;
    }
    if (!st)
        return NULL;
    switch (h->api_key) {
    case KM_API_OFFSET_FOR_LEADER_EPOCH:
        return (rq = decoded(&km_offset_for_leader_epoch_request_desc, h, r, a)) ? epoch_answer(rq, a, st) : NULL;
    case KM_API_DESCRIBE_PRODUCERS:
        return (rq = decoded(&km_describe_producers_request_desc, h, r, a)) ? producers_answer(rq, a) : NULL;
    case KM_API_DESCRIBE_LOG_DIRS:
        if (!(rq = km_arena_alloc(a, sizeof(km_describe_log_dirs_response))))
            return NULL;
        km_init(km_describe_log_dirs_response_desc.root, rq);
        return rq;
    case KM_API_FETCH:
        return (rq = decoded(&km_fetch_request_desc, h, r, a)) ? fetch_answer(rq, a, st) : NULL;
    }
    return NULL;
}

static bool answer_one(int c, const km_image *img, uint16_t port, vf_tweak tweak, const vf_stale *st)
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
    if (ok && km_parse_request_header(&r, &h, &a, &err) == 0)
        body = answer(img, port, tweak, st, &h, &r, &a);
    km_buf b;
    km_buf_init(&b);
    ok = body && km_frame_response(h.api_key, h.api_version, h.correlation_id, body, &b, &err) == 0 &&
         send(c, b.data, b.len, MSG_NOSIGNAL) == (ssize_t)b.len;
    km_buf_free(&b);
    km_arena_free(&a);
    free(req);
    return ok;
}

bool vf_answer_one(int c, const km_image *img, uint16_t port, vf_tweak tweak)
{
    return answer_one(c, img, port, tweak, NULL);
}

bool vf_answer_stale(int c, const km_image *img, uint16_t port, const vf_stale *s)
{
    return answer_one(c, img, port, VF_EXACT, s);
}

size_t vf_add_batch(km_buf *log, int64_t base, int n)
{
    km_config_record recs[8];
    km_metalog_entry e[8];
    cr_assert(n >= 1 && n <= 8);
    for (int i = 0; i < n; i++) {
        km_config_record_init(&recs[i]);
        recs[i].resource_type = 4;
        recs[i].resource_name = km_cstr("0");
        recs[i].name = km_cstr("exposed.record");
        recs[i].value = km_cstr(base % 2 ? "an odd batch, a longer value" : "even");
        e[i] = (km_metalog_entry){ .desc = &km_config_record_desc, .version = 0, .msg = &recs[i], .control_type = -1 };
    }
    km_metalog_batch_params p = { .base_offset = base, .leader_epoch = 0, .timestamp = 1700000000000 };
    size_t before = log->len;
    km_err err;
    cr_assert_eq(km_ml_encode_batch(&p, e, (size_t)n, log, &err), 0, "%s", err.msg);
    return log->len - before;
}

pid_t vf_serve_stale(int lfd, const km_image *img, uint16_t port, vf_stale s, int32_t self)
{
    pid_t parent = getpid(), kid = fork();
    if (kid)
        return kid;
    km_test_die_with_parent(parent);
    s.self = self;
    for (;;) {
        int c = accept(lfd, NULL, NULL);
        while (c >= 0 && vf_answer_stale(c, img, port, &s))
            ;
        close(c);
    }
}
