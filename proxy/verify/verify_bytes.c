/* The bytes a stale leader holds past the truncation point (verify_internal.h), on a stale_leader finding only:
 * whole record batches summed from the truncation point to its log end.  Kafka truncates a log at batch
 * boundaries, so a batch holding the truncation point goes whole and counts whole.
 *
 * A consumer (replica id -1 or -2) reads no further than the high watermark, and on a stale leader in a KRaft
 * migration the loss lies past it: the new leader is in its ISR and fetches from it no more, so its high
 * watermark stands still while acks=1 producers are acknowledged.  So the read is a Fetch with replica id -3,
 * Kafka's FetchRequest.FUTURE_LOCAL_REPLICA_ID (the id its log-dir mover reads a partition with): Kafka 3.9 takes
 * it for no consumer (FetchRequest.isConsumer) and so reads to the log end (FetchIsolation.LOG_END), and for no
 * follower either (replica id < 0), so no follower state moves and no high watermark advances; it is authorized
 * as a consumer's read of the topic.  A broker that refuses it leaves the bytes up to the high watermark, read as
 * a consumer, and says why the rest is unknown. */
#include "km_metalog.h"
#include "verify_internal.h"

#include <stdio.h>

#define V_FETCH_V 12                           /* the last version with topic names; Kafka 3.9 serves 4-17 */
#define V_FETCH_CHUNK (1 << 20)                /* bytes asked per Fetch */
#define V_EXPOSURE_CAP_DEFAULT (8LL << 20)     /* bytes read per finding at most, unless the options say */
#define V_MAX_BATCH (64u * 1024u * 1024u)      /* a batch beyond it is not Kafka's (message.max.bytes is far less) */

#define V_READER_LOG_END (-3)               /* FetchRequest.FUTURE_LOCAL_REPLICA_ID: read to the log end */
#define V_READER_CONSUMER (-1)              /* read to the high watermark */

/* One Fetch of topic-part at `offset` as `reader`; *recs the partition's records.  0, or -1 + err. */
static int fetch_once(v_run *r, v_broker *b, int32_t reader, const char *topic, int32_t part, int32_t epoch,
                      int64_t offset, int32_t max_bytes, km_bytes *recs, km_err *err)
{
    km_fetch_request_partition qp = { .partition = part, .current_leader_epoch = epoch, .fetch_offset = offset,
                                      .last_fetched_epoch = -1, .log_start_offset = -1,
                                      .partition_max_bytes = max_bytes };
    km_fetch_request_topic qt = { .topic = km_cstr(topic) };
    qt.partitions.count = 1;
    qt.partitions.items = &qp;
    km_fetch_request rq;
    km_fetch_request_init(&rq);
    rq.replica_id = reader;  /* no follower: the broker's replication state is not touched */
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

/* Fetches from `from` until `end` or the cap as `reader`: 0 with *bytes and *capped, or -1 + err. */
static int sum_exposed(v_run *r, v_broker *b, int32_t reader, const char *topic, int32_t part, int32_t epoch,
                       int64_t from, int64_t end, int64_t *bytes, bool *capped, km_err *err)
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
        if (fetch_once(r, b, reader, topic, part, epoch, next, chunk, &recs, err) < 0)
            return -1;
        int n = tally(&recs, &next, end, bytes, err);
        if (n < 0)
            return -1;
        if (n == 0)
            return km_fail(err, "%s: Fetch of %s-%d at offset %lld answered %s below offset %lld", b->c.where,
                           topic, part, (long long)next, recs.len > 0 ? "no whole record batch" : "no records",
                           (long long)end);
        read += recs.len;
    }
    return 0;
}

static void put_bytes(json_t *f, int64_t bytes, bool capped, int64_t to)
{
    json_object_set_new(f, "exposed_bytes", json_integer(bytes));
    json_object_set_new(f, "exposed_bytes_capped", json_boolean(capped));
    json_object_set_new(f, "exposed_bytes_to", json_integer(to));
}

void v_exposed_bytes(v_run *r, json_t *f, v_broker *stale, const char *topic, int32_t part, int32_t epoch,
                     int64_t from, int64_t high_watermark, int64_t log_end)
{
    int64_t bytes = 0;
    bool capped = false;
    km_err err;
    if (log_end >= 0) {
        if (from >= log_end ||
            sum_exposed(r, stale, V_READER_LOG_END, topic, part, epoch, from, log_end, &bytes, &capped, &err) == 0)
            return put_bytes(f, bytes, capped, log_end);
        json_object_set_new(f, "exposed_bytes_past_high_watermark_unknown", json_string(err.msg));
    }
    if (from < high_watermark &&
        sum_exposed(r, stale, V_READER_CONSUMER, topic, part, epoch, from, high_watermark, &bytes, &capped, &err) < 0) {
        json_object_set_new(f, "exposed_bytes_unknown", json_string(err.msg));
        return;
    }
    put_bytes(f, bytes, capped, high_watermark > from ? high_watermark : from);
}
