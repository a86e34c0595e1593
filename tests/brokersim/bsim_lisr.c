/* Broker simulator: LeaderAndIsr as Kafka 3.9's ReplicaManager.becomeLeaderOrFollower handles it
 * (core/src/main/scala/kafka/server/ReplicaManager.scala at 3.9; line numbers are that file's):
 *  - broker epoch: KafkaApis.handleLeaderAndIsrRequest (KafkaApis.scala:300) asks
 *    ZkBrokerEpochManager.isBrokerEpochStale (ZkBrokerEpochManager.scala:37): -1 is never
 *    stale; a KRaft controller's request is stale below the KRaft registration epoch, a ZK
 *    controller's below the /brokers/ids czxid -> STALE_BROKER_EPOCH for the whole request;
 *  - controller epoch: becomeLeaderOrFollower (:1919) refuses a ControllerEpoch below the last
 *    one seen -> STALE_CONTROLLER_EPOCH for the whole request, else remembers it (:1944);
 *  - stray detection (:1933, from 3.6.2 on): a FULL request from a KRaft controller first removes
 *    hosted logs it does not name or names under another topic id (LogManager.findStrayReplicas);
 *  - per partition (:1986): a higher leader epoch wins; an equal one wins only from a KRaft
 *    controller (from 3.6.2 on; Kafka 3.4.0's ReplicaManager.scala:1385 takes only a higher one);
 *    a lower one -> STALE_CONTROLLER_EPOCH; a topic id change -> INCONSISTENT_TOPIC_ID;
 *  - a partition without a log gets one (Partition.createLogIfNotExists -> LogManager
 *    .getOrCreateLog), with the topic config read from ZooKeeper then (bsim_zk.c). */
#include "bsim_internal.h"

#include <stdlib.h>
#include <string.h>

enum { E_NONE = 0, E_UNKNOWN_TOPIC_OR_PARTITION = 3, E_STALE_CONTROLLER_EPOCH = 11,
       E_STALE_BROKER_EPOCH = 77, E_INCONSISTENT_TOPIC_ID = 103 };

typedef struct lisr_item {
    const char *topic;
    km_uuid topic_id;                  /* zero: the request has none (v < 5) */
    const km_leader_and_isr_request_partition_state *ps;
    int16_t error;
} lisr_item;

void bsim_count_error(bsim_state *st, int16_t code)
{
    if (code != 0)
        st->err_count[code > 0 && code < BSIM_MAX_ERRCODE ? code : 0]++;
}

/* Flattens v0-1 (ungrouped) and v2+ (by topic) into one list. */
static lisr_item *flatten(int16_t v, const km_leader_and_isr_request *rq, size_t *n, km_arena *a)
{
    size_t total = 0;
    if (v < 2) {
        total = (size_t)(rq->ungrouped_partition_states.count > 0 ? rq->ungrouped_partition_states.count : 0);
    } else {
        for (int32_t t = 0; t < rq->topic_states.count; t++)
            total += (size_t)rq->topic_states.items[t].partition_states.count;
    }
    lisr_item *items = km_arena_alloc(a, sizeof *items * (total ? total : 1));
    if (!items)
        return NULL;
    size_t k = 0;
    if (v < 2) {
        for (int32_t i = 0; i < rq->ungrouped_partition_states.count; i++) {
            const km_leader_and_isr_request_partition_state *ps = &rq->ungrouped_partition_states.items[i];
            items[k++] = (lisr_item){ .topic = ps->topic_name.ptr, .ps = ps };
        }
    } else {
        for (int32_t t = 0; t < rq->topic_states.count; t++) {
            const km_leader_and_isr_request_topic_state *ts = &rq->topic_states.items[t];
            for (int32_t i = 0; i < ts->partition_states.count; i++)
                items[k++] = (lisr_item){ .topic = ts->topic_name.ptr, .topic_id = ts->topic_id,
                                          .ps = &ts->partition_states.items[i] };
        }
    }
    *n = k;
    return items;
}

static bool in_request(const lisr_item *items, size_t n, const bsim_part *p, bool *same_id)
{
    for (size_t i = 0; i < n; i++) {
        if (items[i].ps->partition_index == p->partition && !strcmp(items[i].topic, p->topic)) {
            *same_id = !memcmp(&items[i].topic_id, &p->topic_id, sizeof p->topic_id);
            return true;
        }
    }
    return false;
}

/* LogManager.findStrayReplicas: with a full request, a hosted partition that is absent
 * or now carries another topic id is a stray and goes away before anything else. */
static void drop_strays(bsim_state *st, const lisr_item *items, size_t n)
{
    for (size_t i = 0; i < st->n_parts;) {
        bool same_id = false;
        if (!in_request(items, n, st->parts[i], &same_id) || !same_id) {
            bsim_remove_part(st, i);
            st->strays++;
        } else {
            i++;
        }
    }
}

static int apply_state(bsim_state *st, bsim_part *p, const lisr_item *it)
{
    const km_leader_and_isr_request_partition_state *ps = it->ps;
    /* Partition.makeLeader/makeFollower skip an older partition epoch but still answer NONE. */
    if (ps->partition_epoch < p->partition_epoch)
        return 0;
    p->leader = ps->leader;
    p->leader_epoch = ps->leader_epoch;
    p->partition_epoch = ps->partition_epoch;
    p->controller_epoch = ps->controller_epoch;
    p->lrs = ps->leader_recovery_state;
    p->stopped = false;
    if (!km_uuid_is_zero(it->topic_id))
        p->topic_id = it->topic_id;
    (void)st;
    if (bsim_ivec_set(&p->isr, ps->isr.items, ps->isr.count) ||
        bsim_ivec_set(&p->replicas, ps->replicas.items, ps->replicas.count) ||
        bsim_ivec_set(&p->adding, ps->adding_replicas.items, ps->adding_replicas.count) ||
        bsim_ivec_set(&p->removing, ps->removing_replicas.items, ps->removing_replicas.count))
        return -1;
    return 0;
}

static bsim_part *new_part(bsim_state *st, const char *topic, int32_t partition)
{
    bsim_part *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->topic = strdup(topic);
    p->partition = partition;
    p->leader = -1;
    p->leader_epoch = -1; /* Partition starts at InitialLeaderEpoch - 1 */
    if (!p->topic || bsim_push((void ***)&st->parts, &st->n_parts, &st->cap_parts, p)) {
        free(p->topic);
        free(p);
        return NULL;
    }
    return p;
}

/* Equal leader epoch from a ZK controller: only a topic-id change is taken. */
static int16_t equal_epoch_zk(bsim_part *p, const lisr_item *it, int32_t self)
{
    if (!p) /* leader epoch -1 for a partition it does not host: not above InitialLeaderEpoch - 1 */
        return E_STALE_CONTROLLER_EPOCH;
    if (!km_uuid_is_zero(it->topic_id) && km_uuid_is_zero(p->topic_id)) {
        p->topic_id = it->topic_id;
        return E_NONE;
    }
    if (km_uuid_is_zero(it->topic_id) && !km_uuid_is_zero(p->topic_id) && it->ps->leader != self)
        return E_NONE;
    return E_STALE_CONTROLLER_EPOCH;
}

static int16_t one_partition(bsim_state *st, const lisr_item *it, bool kraft, km_err *err)
{
    bool equal_wins = kraft && st->kafka == KM_BSIM_KAFKA_3_6_2;
    const km_leader_and_isr_request_partition_state *ps = it->ps;
    bsim_part *p = bsim_find_part(st, it->topic, ps->partition_index, NULL);
    int32_t cur = p ? p->leader_epoch : -1;
    if (p && !km_uuid_is_zero(it->topic_id) && !km_uuid_is_zero(p->topic_id) &&
        memcmp(&p->topic_id, &it->topic_id, sizeof it->topic_id))
        return E_INCONSISTENT_TOPIC_ID;
    if (ps->leader_epoch > cur || (ps->leader_epoch == cur && equal_wins)) {
        if (!bsim_ivec_has(ps->replicas.items, ps->replicas.count, st->broker_id))
            return E_UNKNOWN_TOPIC_OR_PARTITION;
        if (!p && (!(p = new_part(st, it->topic, ps->partition_index)) ||
                   bsim_note_log(st, it->topic, ps->partition_index, it->topic_id)))
            return km_fail(err, "brokersim: out of memory for partition %s-%d", it->topic, ps->partition_index);
        if (apply_state(st, p, it))
            return km_fail(err, "brokersim: out of memory for partition %s-%d", it->topic, ps->partition_index);
        return E_NONE;
    }
    if (ps->leader_epoch < cur)
        return E_STALE_CONTROLLER_EPOCH;
    return equal_epoch_zk(p, it, st->broker_id);
}

static int fill_response(int16_t v, int16_t top, lisr_item *items, size_t n, km_leader_and_isr_response *rs,
                         km_arena *a)
{
    rs->error_code = top;
    km_leader_and_isr_response_partition_error *pe = km_arena_alloc(a, sizeof *pe * (n ? n : 1));
    km_leader_and_isr_response_topic_error *te = km_arena_alloc(a, sizeof *te * (n ? n : 1));
    if (!pe || !te)
        return -1;
    int32_t nt = 0;
    for (size_t i = 0; i < n; i++) {
        memset(&pe[i], 0, sizeof pe[i]);
        pe[i].topic_name = km_cstr(items[i].topic);
        pe[i].partition_index = items[i].ps->partition_index;
        pe[i].error_code = top ? top : items[i].error;
    }
    if (v < 5) {
        rs->partition_errors.count = (int32_t)n;
        rs->partition_errors.items = pe;
        return 0;
    }
    /* v5+: grouped by topic id, partitions of a topic contiguous in the request */
    for (size_t i = 0; i < n; i++) {
        if (!nt || memcmp(&te[nt - 1].topic_id, &items[i].topic_id, sizeof(km_uuid)) ||
            strcmp(items[i - 1].topic, items[i].topic)) {
            memset(&te[nt], 0, sizeof te[nt]);
            te[nt].topic_id = items[i].topic_id;
            te[nt].partition_errors.items = &pe[i];
            nt++;
        }
        te[nt - 1].partition_errors.count++;
    }
    rs->topics.count = nt;
    rs->topics.items = te;
    return 0;
}

static bool broker_epoch_stale(const bsim_state *st, int64_t req, bool kraft)
{
    if (req == -1)
        return false;
    return kraft ? req < st->kraft_epoch : req < st->zk_epoch;
}

int bsim_leader_and_isr(bsim_state *st, int16_t v, const km_leader_and_isr_request *rq,
                        km_leader_and_isr_response *rs, km_arena *a, km_err *err)
{
    size_t n = 0;
    lisr_item *items = flatten(v, rq, &n, a);
    if (!items)
        return km_fail(err, "brokersim: LeaderAndIsr: out of memory");
    int16_t top = E_NONE;
    if (broker_epoch_stale(st, rq->broker_epoch, rq->is_kraft_controller))
        top = E_STALE_BROKER_EPOCH;
    else if (rq->controller_epoch < st->controller_epoch)
        top = E_STALE_CONTROLLER_EPOCH;
    if (!top) {
        st->lisr_by_type[rq->type >= 0 && rq->type <= 2 ? rq->type : 0]++;
        if (rq->is_kraft_controller && rq->type == 2 && st->kafka == KM_BSIM_KAFKA_3_6_2)
            drop_strays(st, items, n);
        st->controller_epoch = rq->controller_epoch;
        for (size_t i = 0; i < n; i++) {
            int rc = one_partition(st, &items[i], rq->is_kraft_controller, err);
            if (rc < 0)
                return -1;
            items[i].error = (int16_t)rc;
        }
    }
    if (fill_response(v, top, items, n, rs, a))
        return km_fail(err, "brokersim: LeaderAndIsr: out of memory");
    bsim_count_error(st, top);
    for (size_t i = 0; i < n && !top; i++)
        bsim_count_error(st, items[i].error);
    return 0;
}
