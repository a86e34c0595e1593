/* Broker simulator: a control request's error response as Kafka builds it
 * (AbstractRequest.getErrorResponse, used by KafkaApis' handleError): the top-level code and,
 * for LeaderAndIsr and StopReplica, the same code for every partition of the request.
 * LeaderAndIsrRequest.getErrorResponse: partitionErrors before v5, topics (by id) from v5;
 * StopReplicaRequest.getErrorResponse: partitionErrors; UpdateMetadataRequest: the code only. */
#include "bsim_internal.h"

#include <string.h>

static int32_t lisr_partition_count(int16_t v, const km_leader_and_isr_request *rq)
{
    if (v < 2)
        return rq->ungrouped_partition_states.count > 0 ? rq->ungrouped_partition_states.count : 0;
    int32_t n = 0;
    for (int32_t t = 0; t < rq->topic_states.count; t++)
        n += rq->topic_states.items[t].partition_states.count;
    return n;
}

static int lisr_errors(int16_t v, const km_leader_and_isr_request *rq, int16_t code, km_leader_and_isr_response *rs,
                       km_arena *a)
{
    int32_t n = lisr_partition_count(v, rq), k = 0;
    km_leader_and_isr_response_partition_error *pe = km_arena_alloc(a, sizeof *pe * (size_t)(n ? n : 1));
    km_leader_and_isr_response_topic_error *te =
        km_arena_alloc(a, sizeof *te * (size_t)(rq->topic_states.count > 0 ? rq->topic_states.count : 1));
    if (!pe || !te)
        return -1;
    for (int32_t i = 0; v < 2 && i < n; i++)
        pe[k++] = (km_leader_and_isr_response_partition_error){
            rq->ungrouped_partition_states.items[i].topic_name,
            rq->ungrouped_partition_states.items[i].partition_index, code, { 0, 0 } };
    for (int32_t t = 0; v >= 2 && t < rq->topic_states.count; t++) {
        const km_leader_and_isr_request_topic_state *ts = &rq->topic_states.items[t];
        te[t] = (km_leader_and_isr_response_topic_error){ ts->topic_id, { ts->partition_states.count, &pe[k] },
                                                          { 0, 0 } };
        for (int32_t i = 0; i < ts->partition_states.count; i++)
            pe[k++] = (km_leader_and_isr_response_partition_error){
                ts->topic_name, ts->partition_states.items[i].partition_index, code, { 0, 0 } };
    }
    if (v < 5) {
        rs->partition_errors.count = k;
        rs->partition_errors.items = pe;
    } else {
        rs->topics.count = rq->topic_states.count > 0 ? rq->topic_states.count : 0;
        rs->topics.items = te;
    }
    return 0;
}

static int32_t sr_partition_count(int16_t v, const km_stop_replica_request *rq)
{
    int32_t n = 0;
    if (v == 0)
        return rq->ungrouped_partitions.count > 0 ? rq->ungrouped_partitions.count : 0;
    for (int32_t t = 0; v < 3 && t < rq->topics.count; t++)
        n += rq->topics.items[t].partition_indexes.count;
    for (int32_t t = 0; v >= 3 && t < rq->topic_states.count; t++)
        n += rq->topic_states.items[t].partition_states.count;
    return n;
}

static void sr_error(km_stop_replica_response_partition_error *pe, km_str topic, int32_t p, int16_t code)
{
    *pe = (km_stop_replica_response_partition_error){ topic, p, code, { 0, 0 } };
}

static int sr_errors(int16_t v, const km_stop_replica_request *rq, int16_t code, km_stop_replica_response *rs,
                     km_arena *a)
{
    int32_t n = sr_partition_count(v, rq), k = 0;
    km_stop_replica_response_partition_error *pe = km_arena_alloc(a, sizeof *pe * (size_t)(n ? n : 1));
    if (!pe)
        return -1;
    for (int32_t i = 0; v == 0 && i < n; i++)
        sr_error(&pe[k++], rq->ungrouped_partitions.items[i].topic_name,
                 rq->ungrouped_partitions.items[i].partition_index, code);
    for (int32_t t = 0; v >= 1 && v < 3 && t < rq->topics.count; t++)
        for (int32_t i = 0; i < rq->topics.items[t].partition_indexes.count; i++)
            sr_error(&pe[k++], rq->topics.items[t].name, rq->topics.items[t].partition_indexes.items[i], code);
    for (int32_t t = 0; v >= 3 && t < rq->topic_states.count; t++)
        for (int32_t i = 0; i < rq->topic_states.items[t].partition_states.count; i++)
            sr_error(&pe[k++], rq->topic_states.items[t].topic_name,
                     rq->topic_states.items[t].partition_states.items[i].partition_index, code);
    rs->partition_errors.count = k;
    rs->partition_errors.items = pe;
    return 0;
}

int bsim_error_response(int16_t api, int16_t v, const void *rq, int16_t code, void *rs, km_arena *a)
{
    if (api == KM_API_LEADER_AND_ISR) {
        km_leader_and_isr_response_init(rs);
        ((km_leader_and_isr_response *)rs)->error_code = code;
        return lisr_errors(v, rq, code, rs, a);
    }
    if (api == KM_API_STOP_REPLICA) {
        km_stop_replica_response_init(rs);
        ((km_stop_replica_response *)rs)->error_code = code;
        return sr_errors(v, rq, code, rs, a);
    }
    km_update_metadata_response_init(rs);
    ((km_update_metadata_response *)rs)->error_code = code;
    return 0;
}
