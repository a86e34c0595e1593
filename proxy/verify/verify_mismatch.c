/* The requests verify sends only where it found a mismatch (verify_internal.h): DescribeProducers on both sides
 * of a stale leader, DescribeLogDirs for logs a broker keeps of partitions the image no longer gives it. */
#include "verify_internal.h"

#include <stdio.h>
#include <string.h>

#define V_PRODUCERS_V 0
#define V_LOG_DIRS_V 4

/* The producers one broker holds state for on topic-part: [{producer_id, producer_epoch, last_sequence,
 * last_timestamp}], or a string saying why not. */
static json_t *producers_of(v_run *r, v_broker *b, const char *topic, int32_t part)
{
    if (!b || !b->reachable || b->c.fd < 0)
        return json_string("not reachable");
    km_describe_producers_request_topic_request t = { .name = km_cstr(topic) };
    t.partition_indexes.count = 1;
    t.partition_indexes.items = &part;
    km_describe_producers_request rq;
    km_describe_producers_request_init(&rq);
    rq.topics.count = 1;
    rq.topics.items = &t;
    void *answer;
    km_err err;
    if (v_conn_call(&b->c, KM_API_DESCRIBE_PRODUCERS, V_PRODUCERS_V, &rq, &r->arena, &answer, &err) < 0)
        return json_string(err.msg);
    const km_describe_producers_response *rs = answer;
    if (rs->topics.count != 1 || rs->topics.items[0].partitions.count != 1)
        return json_string("DescribeProducers answered another partition");
    const km_describe_producers_response_partition_response *p = &rs->topics.items[0].partitions.items[0];
    if (p->error_code != E_NONE)
        return json_string(v_error_name(p->error_code));
    json_t *a = json_array();
    for (int32_t i = 0; i < p->active_producers.count; i++) {
        const km_describe_producers_response_producer_state *s = &p->active_producers.items[i];
        json_array_append_new(a, json_pack("{s:I,s:i,s:i,s:I}", "producer_id", (json_int_t)s->producer_id,
                                           "producer_epoch", s->producer_epoch, "last_sequence", s->last_sequence,
                                           "last_timestamp", (json_int_t)s->last_timestamp));
    }
    return a;
}

void v_producers(v_run *r, json_t *f, v_broker *stale, const char *topic, int32_t part, int32_t leader)
{
    json_object_set_new(f, "producers", json_pack("{s:o,s:o}", "stale_leader", producers_of(r, stale, topic, part),
                                                  "image_leader",
                                                  producers_of(r, v_broker_by_id(r, leader), topic, part)));
}

/* Whether the image places topic-part on broker id (a replica, or one being added). */
static bool placed(v_run *r, const char *topic, int32_t part, int32_t id)
{
    const km_topic *t = km_image_topic_by_name(r->img, topic);
    km_partition p;
    if (!t || !km_topic_partition(t, part, &p))
        return false;
    for (int32_t i = 0; i < p.replicas.n; i++)
        if (p.replicas.v[i] == id)
            return true;
    for (int32_t i = 0; i < p.adding_replicas.n; i++)
        if (p.adding_replicas.v[i] == id)
            return true;
    return false;
}

static void stray_dir(v_run *r, v_broker *b, const km_describe_log_dirs_response_result *d)
{
    char detail[600];
    for (int32_t i = 0; i < d->topics.count; i++) {
        const km_describe_log_dirs_response_topic *t = &d->topics.items[i];
        for (int32_t j = 0; t->name.len > 0 && j < t->partitions.count; j++) {
            const km_describe_log_dirs_response_partition *p = &t->partitions.items[j];
            if (placed(r, t->name.ptr, p->partition_index, b->id))
                continue;
            snprintf(detail, sizeof detail, "a log of %lld bytes in %s that the image does not place on this broker",
                     (long long)p->partition_size, d->log_dir.len > 0 ? d->log_dir.ptr : "?");
            json_object_set_new(v_finding(r, b, t->name.ptr, p->partition_index, KM_VERIFY_STRAY_LOG, detail), "bytes",
                                json_integer(p->partition_size));
        }
    }
}

void v_stray_logs(v_run *r, v_broker *b)
{
    km_describe_log_dirs_request rq;
    km_describe_log_dirs_request_init(&rq);
    rq.topics.count = -1; /* every log */
    void *answer;
    km_err err;
    if (!b->reachable || b->c.fd < 0)
        return;
    if (v_conn_call(&b->c, KM_API_DESCRIBE_LOG_DIRS, V_LOG_DIRS_V, &rq, &r->arena, &answer, &err) < 0) {
        json_array_append_new(r->unchecked, json_pack("{s:i,s:s}", "broker", b->id, "why", err.msg));
        return;
    }
    const km_describe_log_dirs_response *rs = answer;
    for (int32_t i = 0; i < rs->results.count; i++)
        if (rs->results.items[i].error_code == E_NONE)
            stray_dir(r, b, &rs->results.items[i]);
}
