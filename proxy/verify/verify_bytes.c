/* The bytes a stale leader holds past the truncation point (verify_internal.h), on a stale_leader finding only:
 * read as a consumer reads them (Fetch, replica id -1, READ_UNCOMMITTED) from the truncation point, whole record
 * batches summed up to the stale leader's high watermark.  Kafka truncates a log at batch boundaries, so a batch
 * holding the truncation point goes whole and counts whole.  A consumer reads no further than the high watermark,
 * which is also where exposed_offsets ends; the offsets past it are counted by the caller (stale_log_end). */
#include "km_metalog.h"
#include "verify_internal.h"

#include <stdio.h>

#define V_FETCH_V 12                           /* the last version with topic names; Kafka 3.9 serves 4-17 */
#define V_FETCH_CHUNK (1 << 20)                /* bytes asked per Fetch */
#define V_EXPOSURE_CAP_DEFAULT (8LL << 20)     /* bytes read per finding at most, unless the options say */
#define V_MAX_BATCH (64u * 1024u * 1024u)      /* a batch beyond it is not Kafka's (message.max.bytes is far less) */

/* One Fetch of topic-part at `offset` as a consumer; *recs the partition's records.  0, or -1 + err. */
static int fetch_once(v_run *r, v_broker *b, const char *topic, int32_t part, int32_t epoch, int64_t offset,
                      int32_t max_bytes, km_bytes *recs, km_err *err)
{
    km_fetch_request_partition qp = { .partition = part, .current_leader_epoch = epoch, .fetch_offset = offset,
                                      .last_fetched_epoch = -1, .log_start_offset = -1,
                                      .partition_max_bytes = max_bytes };
    km_fetch_request_topic qt = { .topic = km_cstr(topic) };
    qt.partitions.count = 1;
    qt.partitions.items = &qp;
    km_fetch_request rq;
    km_fetch_request_init(&rq);
    rq.replica_id = -1;      /* a consumer: the broker's state is not touched */
    rq.max_wait_ms = 0;      /* what is there now, never a wait for more */
    rq.min_bytes = 0;
    rq.max_bytes = max_bytes;
    rq.isolation_level = 0;  /* READ_UNCOMMITTED: open transactions' records are exposed too */
    rq.session_id = 0;
    rq.session_epoch = -1;   /* no fetch session: nothing stays on the broker */
    rq.topics.count = 1;
    rq.topics.items = &qt;
    void *answer;
    if (v_conn_call(&b->c, KM_API_FETCH, V_FETCH_V, &rq, &r->arena, &answer, err) < 0)
        return -1;
    const km_fetch_response *rs = answer;
    if (rs->error_code != E_NONE)
        return km_fail(err, "%s: Fetch: error %d (%s)", b->c.where, rs->error_code, v_error_name(rs->error_code));
    if (rs->responses.count != 1 || rs->responses.items[0].partitions.count != 1 ||
        rs->responses.items[0].partitions.items[0].partition_index != part)
        return km_fail(err, "%s: Fetch answered another partition", b->c.where);
    const km_fetch_response_partition_data *p = &rs->responses.items[0].partitions.items[0];
    if (p->error_code != E_NONE)
        return km_fail(err, "%s: Fetch of %s-%d at offset %lld: error %d (%s)", b->c.where, topic, part,
                       (long long)offset, p->error_code, v_error_name(p->error_code));
    *recs = p->records;
    return 0;
}

/* Adds the whole batches of recs holding offsets from *next below `end` to *bytes and moves *next past them.  A
 * batch cut at the answer's end (the size asked) is left for the next Fetch.  Returns the batches read, or -1 +
 * err naming the byte of the answer. */
static int tally(const km_bytes *recs, int64_t *next, int64_t end, int64_t *bytes, km_err *err)
{
    size_t pos = 0, len = recs->len > 0 ? (size_t)recs->len : 0;
    int n = 0;
    while (pos < len && *next < end) {
        km_metalog_batch mb;
        km_err why = {{0}};
        int k = km_ml_peek_batch(recs->ptr + pos, len - pos, V_MAX_BATCH, &mb, &why);
        if (k < 0)
            return km_fail(err, "the record batch at byte %zu of the Fetch answer (offset %lld asked): %s", pos,
                           (long long)*next, why.msg);
        if (k == 0)
            break;
        if (mb.base_offset >= end)
            break;
        if (mb.last_offset >= *next) {
            *bytes += mb.size;
            *next = mb.last_offset + 1;
        }
        pos += mb.size;
        n++;
    }
    return n;
}

/* Fetches from `from` until `end` or the cap: 0 with *bytes and *capped, or -1 + err. */
static int sum_exposed(v_run *r, v_broker *b, const char *topic, int32_t part, int32_t epoch, int64_t from,
                       int64_t end, int64_t *bytes, bool *capped, km_err *err)
{
    int64_t cap = r->o->max_exposure_bytes > 0 ? r->o->max_exposure_bytes : V_EXPOSURE_CAP_DEFAULT, read = 0;
    int32_t chunk = cap < V_FETCH_CHUNK ? (int32_t)cap : V_FETCH_CHUNK;
    *bytes = 0;
    *capped = false;
    for (int64_t next = from; next < end;) {
        if (read >= cap) {
            *capped = true;
            return 0;
        }
        km_bytes recs = { NULL, 0 };
        if (fetch_once(r, b, topic, part, epoch, next, chunk, &recs, err) < 0)
            return -1;
        int n = tally(&recs, &next, end, bytes, err);
        if (n < 0)
            return -1;
        if (n == 0)
            return km_fail(err, "%s: Fetch of %s-%d at offset %lld answered %s below its high watermark %lld",
                           b->c.where, topic, part, (long long)next,
                           recs.len > 0 ? "no whole record batch" : "no records", (long long)end);
        read += recs.len;
    }
    return 0;
}

void v_exposed_bytes(v_run *r, json_t *f, v_broker *stale, const char *topic, int32_t part, int32_t epoch,
                     int64_t from, int64_t end)
{
    int64_t bytes = 0;
    bool capped = false;
    km_err err;
    if (from < end && sum_exposed(r, stale, topic, part, epoch, from, end, &bytes, &capped, &err) < 0) {
        json_object_set_new(f, "exposed_bytes_unknown", json_string(err.msg));
        return;
    }
    json_object_set_new(f, "exposed_bytes", json_integer(bytes));
    json_object_set_new(f, "exposed_bytes_capped", json_boolean(capped));
}
