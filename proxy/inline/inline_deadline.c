/* How long a broker may legitimately hold a request before answering it: the time the request
 * itself allows.  The proxy's request deadline is that allowance plus proxy.request.timeout.ms,
 * so a Fetch waiting for data or a JoinGroup waiting for a rebalance is not cut while Kafka
 * itself is still within what the client asked for. */
#include "inline_private.h"

#include <stddef.h>
#include <string.h>

/* APIs whose timeout comes after arrays: decoded whole (they are small admin requests).  Kafka
 * holds each in a purgatory until done or TimeoutMs (DelayedCreatePartitions, DelayedDeleteTopics,
 * DelayedDeleteRecords, DelayedElectLeader). */
typedef struct whole_timeout {
    int16_t key;
    const km_message_desc *desc;
    size_t timeout_at; /* offsetof the struct's timeout_ms */
} whole_timeout;

static const whole_timeout WHOLE[] = {
    {KM_API_CREATE_TOPICS, &km_create_topics_request_desc, offsetof(km_create_topics_request, timeout_ms)},
    {KM_API_DELETE_TOPICS, &km_delete_topics_request_desc, offsetof(km_delete_topics_request, timeout_ms)},
    {KM_API_CREATE_PARTITIONS, &km_create_partitions_request_desc, offsetof(km_create_partitions_request, timeout_ms)},
    {KM_API_DELETE_RECORDS, &km_delete_records_request_desc, offsetof(km_delete_records_request, timeout_ms)},
    {KM_API_ELECT_LEADERS, &km_elect_leaders_request_desc, offsetof(km_elect_leaders_request, timeout_ms)},
};

static int whole_request_timeout(const whole_timeout *w, int16_t ver, km_reader *r, int32_t *ms, km_err *err)
{
    km_arena arena;
    km_arena_init(&arena, 4u << 20);
    uint8_t *body = km_arena_alloc(&arena, w->desc->root->size);
    int rc = !body ? km_fail(err, "out of memory decoding a %s", w->desc->name)
                   : km_decode_from(w->desc, ver, r, body, &arena, err);
    if (!rc)
        memcpy(ms, body + w->timeout_at, sizeof *ms);
    km_arena_free(&arena);
    return rc;
}

static int skip_group_id(km_reader *r, bool compact, km_err *err)
{
    int64_t len;
    if (compact) {
        uint32_t n;
        if (km_read_uvarint(r, &n, "group id length", err))
            return -1;
        len = (int64_t)n - 1;
    } else {
        int16_t n;
        if (km_read_i16(r, &n, "group id length", err))
            return -1;
        len = n;
    }
    const uint8_t *ignored;
    return len <= 0 ? 0 : km_read_raw(r, (size_t)len, &ignored, "group id", err);
}

/* JoinGroup: the rebalance timeout, which v0 does not carry: Kafka takes the session timeout
 * (JoinGroupRequest's constructor sets RebalanceTimeoutMs from SessionTimeoutMs for v0). */
static int join_group_allowance(km_reader *r, int16_t ver, int32_t *ms, km_err *err)
{
    int32_t session;
    if (skip_group_id(r, ver >= 6, err) || km_read_i32(r, &session, "session timeout", err))
        return -1;
    if (ver == 0) {
        *ms = session;
        return 0;
    }
    return km_read_i32(r, ms, "rebalance timeout", err);
}

int inl_request_allowance(km_reader *r, int16_t key, int16_t ver, int16_t acks, int32_t *ms, km_err *err)
{
    *ms = 0;
    int32_t ignored;
    switch (key) {
    case KM_API_PRODUCE: /* after acks; only acks=all waits for the in-sync replicas (DelayedProduce) */
        return km_read_i32(r, &ignored, "timeout", err) ? -1 : (*ms = acks == -1 ? ignored : 0, 0);
    case KM_API_FETCH: /* ReplicaId until v14, then MaxWaitMs (DelayedFetch) */
        if (ver <= 14 && km_read_i32(r, &ignored, "replica id", err))
            return -1;
        return km_read_i32(r, ms, "max wait", err);
    case KM_API_JOIN_GROUP:
        return join_group_allowance(r, ver, ms, err);
    case KM_API_ALTER_PARTITION_REASSIGNMENTS:
        return km_read_i32(r, ms, "timeout", err);
    default:
        for (size_t i = 0; i < sizeof WHOLE / sizeof WHOLE[0]; i++)
            if (WHOLE[i].key == key)
                return whole_request_timeout(&WHOLE[i], ver, r, ms, err);
        return 0;
    }
}
