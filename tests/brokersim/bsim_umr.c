/* Broker simulator: UpdateMetadata (ReplicaManager.maybeUpdateMetadataCache + ZkMetadataCache)
 * and StopReplica (ReplicaManager.stopReplicas), as Kafka 3.9 handles them (line numbers are
 * those of the 3.9 sources):
 *  - broker epoch: KafkaApis.scala:321 (StopReplica) and :381 (UpdateMetadata) ->
 *    ZkBrokerEpochManager.isBrokerEpochStale, as for LeaderAndIsr;
 *  - controller epoch: ReplicaManager.maybeUpdateMetadataCache (ReplicaManager.scala:1878) and
 *    stopReplicas (:499) refuse an older ControllerEpoch -> STALE_CONTROLLER_EPOCH;
 *  - StopReplica per partition (:527): the deletion sentinel EpochDuringDelete (-2) and NoEpoch
 *    (-1) always pass, otherwise the leader epoch must be >= the current one, else
 *    FENCED_LEADER_EPOCH; a partition not hosted answers NONE;
 *  - UpdateMetadata: leader -2 (LeaderDuringDelete) removes the partition from the cache
 *    (ZkMetadataCache.scala:576); a FULL request from a KRaft controller also removes the topics
 *    it does not name (ZkMetadataCache.maybeInjectDeletedPartitionsFromFullMetadataRequest, :473;
 *    not in 3.4.0). */
#include "bsim_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { E_STALE_CONTROLLER_EPOCH = 11, E_FENCED_LEADER_EPOCH = 74, E_STALE_BROKER_EPOCH = 77 };

static bool stale_broker_epoch(const bsim_state *st, int64_t req, bool kraft)
{
    return req != -1 && (kraft ? req < st->kraft_epoch : req < st->zk_epoch);
}

static bsim_topic_id *find_tid(bsim_state *st, const char *name, size_t *idx)
{
    for (size_t i = 0; i < st->n_tids; i++)
        if (!strcmp(st->tids[i].name, name)) {
            if (idx)
                *idx = i;
            return &st->tids[i];
        }
    return NULL;
}

static void forget_tid(bsim_state *st, const char *name)
{
    size_t i;
    if (find_tid(st, name, &i)) {
        free(st->tids[i].name);
        st->tids[i] = st->tids[--st->n_tids];
    }
}

static int set_tid(bsim_state *st, const char *name, km_uuid id)
{
    bsim_topic_id *t = find_tid(st, name, NULL);
    if (t) {
        t->id = id;
        return 0;
    }
    if (st->n_tids == st->cap_tids) {
        size_t ncap = st->cap_tids ? st->cap_tids * 2 : 16;
        bsim_topic_id *grown = realloc(st->tids, ncap * sizeof *grown);
        if (!grown)
            return -1;
        st->tids = grown;
        st->cap_tids = ncap;
    }
    char *copy = strdup(name);
    if (!copy)
        return -1;
    st->tids[st->n_tids++] = (bsim_topic_id){ copy, id };
    return 0;
}

/* ZkMetadataCache.removePartitionInfo: the topic (and its id) goes with its last partition. */
static void remove_mpart(bsim_state *st, const char *topic, int32_t partition)
{
    size_t idx;
    if (!bsim_find_mpart(st, topic, partition, &idx))
        return;
    char *name = strdup(topic);
    bsim_remove_mpart(st, idx);
    bool left = false;
    for (size_t i = 0; i < st->n_mparts && !left; i++)
        left = !strcmp(st->mparts[i]->topic, name);
    if (!left && name)
        forget_tid(st, name);
    free(name);
}

static bool topic_in_request(const km_update_metadata_request *rq, km_uuid id)
{
    for (int32_t t = 0; t < rq->topic_states.count; t++)
        if (!memcmp(&rq->topic_states.items[t].topic_id, &id, sizeof id))
            return true;
    return false;
}

/* transformKRaftControllerFullMetadataRequest: a topic whose id the full request lacks is
 * deleted.  (Its per-partition branch only ever re-adds what the request carries, so in
 * effect partitions missing from a present topic stay: we keep that behaviour.) */
static void full_update_deletions(bsim_state *st, const km_update_metadata_request *rq)
{
    for (size_t i = 0; i < st->n_tids;) {
        if (topic_in_request(rq, st->tids[i].id)) {
            i++;
            continue;
        }
        char *name = strdup(st->tids[i].name);
        for (size_t k = 0; k < st->n_mparts;) {
            if (name && !strcmp(st->mparts[k]->topic, name))
                bsim_remove_mpart(st, k);
            else
                k++;
        }
        free(st->tids[i].name);
        st->tids[i] = st->tids[--st->n_tids];
        free(name);
    }
}

static const char *protocol_name(int16_t sp)
{
    static const char *const names[] = { "PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL" };
    return sp >= 0 && sp < 4 ? names[sp] : "UNKNOWN";
}

static void free_brokers(bsim_state *st)
{
    for (size_t i = 0; i < st->n_brokers; i++) {
        bsim_broker *b = &st->brokers[i];
        for (int32_t e = 0; e < b->n_eps; e++) {
            free(b->eps[e].listener);
            free(b->eps[e].host);
        }
        free(b->eps);
        free(b->rack);
    }
    free(st->brokers);
    st->brokers = NULL;
    st->n_brokers = 0;
}

static int set_broker(bsim_broker *b, int16_t v, const km_update_metadata_request_broker *rb)
{
    b->id = rb->id;
    b->rack = v >= 2 ? bsim_strdup(rb->rack) : NULL;
    int32_t n = v == 0 ? 1 : rb->endpoints.count;
    b->eps = calloc((size_t)(n > 0 ? n : 1), sizeof *b->eps);
    if (!b->eps)
        return -1;
    b->n_eps = n > 0 ? n : 0;
    for (int32_t e = 0; e < b->n_eps; e++) {
        bsim_ep *ep = &b->eps[e];
        if (v == 0) { /* v0: one PLAINTEXT host:port */
            ep->host = bsim_strdup(rb->v0_host);
            ep->port = rb->v0_port;
            ep->security_protocol = 0;
        } else {
            const km_update_metadata_request_endpoint *re = &rb->endpoints.items[e];
            ep->host = bsim_strdup(re->host);
            ep->port = re->port;
            ep->security_protocol = re->security_protocol;
        }
        /* before v3 the listener is named after its security protocol */
        const km_str l = v >= 3 ? rb->endpoints.items[e].listener : km_cstr(protocol_name(ep->security_protocol));
        ep->listener = bsim_strdup(l);
        if (!ep->host || !ep->listener)
            return -1;
    }
    return 0;
}

static int replace_brokers(bsim_state *st, int16_t v, const km_update_metadata_request *rq)
{
    free_brokers(st);
    int32_t n = rq->live_brokers.count > 0 ? rq->live_brokers.count : 0;
    st->brokers = calloc((size_t)(n ? n : 1), sizeof *st->brokers);
    if (!st->brokers)
        return -1;
    st->n_brokers = (size_t)n;
    for (int32_t i = 0; i < n; i++)
        if (set_broker(&st->brokers[i], v, &rq->live_brokers.items[i]))
            return -1;
    return 0;
}

static int upsert_mpart(bsim_state *st, const char *topic, const km_update_metadata_request_partition_state *ps)
{
    bsim_mpart *m = bsim_find_mpart(st, topic, ps->partition_index, NULL);
    if (!m) {
        m = calloc(1, sizeof *m);
        if (!m || !(m->topic = strdup(topic)) || bsim_push((void ***)&st->mparts, &st->n_mparts, &st->cap_mparts, m)) {
            if (m)
                free(m->topic);
            free(m);
            return -1;
        }
        m->partition = ps->partition_index;
    }
    m->controller_epoch = ps->controller_epoch;
    m->leader = ps->leader;
    m->leader_epoch = ps->leader_epoch;
    m->zk_version = ps->zk_version;
    if (bsim_ivec_set(&m->isr, ps->isr.items, ps->isr.count) ||
        bsim_ivec_set(&m->replicas, ps->replicas.items, ps->replicas.count) ||
        bsim_ivec_set(&m->offline, ps->offline_replicas.items, ps->offline_replicas.count))
        return -1;
    return 0;
}

static int one_mpart(bsim_state *st, const char *topic, const km_update_metadata_request_partition_state *ps)
{
    if (ps->leader == -2) { /* LeaderAndIsr.LeaderDuringDelete */
        remove_mpart(st, topic, ps->partition_index);
        return 0;
    }
    return upsert_mpart(st, topic, ps);
}

static int apply_partitions(bsim_state *st, int16_t v, const km_update_metadata_request *rq)
{
    if (v < 5) {
        for (int32_t i = 0; i < rq->ungrouped_partition_states.count; i++) {
            const km_update_metadata_request_partition_state *ps = &rq->ungrouped_partition_states.items[i];
            if (one_mpart(st, ps->topic_name.ptr, ps))
                return -1;
        }
        return 0;
    }
    for (int32_t t = 0; t < rq->topic_states.count; t++) {
        const km_update_metadata_request_topic_state *ts = &rq->topic_states.items[t];
        /* a zero id clears the cached one (ZkMetadataCache's newZeroIds) */
        if (km_uuid_is_zero(ts->topic_id))
            forget_tid(st, ts->topic_name.ptr);
        else if (set_tid(st, ts->topic_name.ptr, ts->topic_id))
            return -1;
    }
    for (int32_t t = 0; t < rq->topic_states.count; t++) {
        const km_update_metadata_request_topic_state *ts = &rq->topic_states.items[t];
        for (int32_t i = 0; i < ts->partition_states.count; i++)
            if (one_mpart(st, ts->topic_name.ptr, &ts->partition_states.items[i]))
                return -1;
    }
    return 0;
}

int bsim_update_metadata(bsim_state *st, int16_t v, const km_update_metadata_request *rq,
                         km_update_metadata_response *rs, km_arena *a, km_err *err)
{
    (void)a;
    rs->error_code = 0;
    if (stale_broker_epoch(st, rq->broker_epoch, rq->is_kraft_controller))
        rs->error_code = E_STALE_BROKER_EPOCH;
    else if (rq->controller_epoch < st->controller_epoch) /* ControllerMovedException */
        rs->error_code = E_STALE_CONTROLLER_EPOCH;
    bsim_count_error(st, rs->error_code);
    if (rs->error_code)
        return 0;
    if (rq->is_kraft_controller && rq->type == 2 && v >= 8 && st->kafka == KM_BSIM_KAFKA_3_6_2)
        full_update_deletions(st, rq);
    st->md_controller_id = rq->controller_id < 0 ? -1 : rq->controller_id;
    st->md_kraft_controller = rq->is_kraft_controller;
    if (replace_brokers(st, v, rq) || apply_partitions(st, v, rq))
        return km_fail(err, "brokersim: UpdateMetadata: out of memory");
    st->controller_epoch = rq->controller_epoch;
    return 0;
}

/* ---- StopReplica ---------------------------------------------------------------------- */

typedef struct stop_item { const char *topic; int32_t partition, leader_epoch; bool del; } stop_item;

/* StopReplicaRequest.partitionStates(): before v3 the epoch is NoEpoch (-1) and the
 * delete flag is the request's. */
static stop_item *stop_items(int16_t v, const km_stop_replica_request *rq, size_t *n, km_arena *a)
{
    size_t total = 0, k = 0;
    if (v == 0)
        total = (size_t)(rq->ungrouped_partitions.count > 0 ? rq->ungrouped_partitions.count : 0);
    for (int32_t t = 0; v >= 1 && v < 3 && t < rq->topics.count; t++)
        total += (size_t)rq->topics.items[t].partition_indexes.count;
    for (int32_t t = 0; v >= 3 && t < rq->topic_states.count; t++)
        total += (size_t)rq->topic_states.items[t].partition_states.count;
    stop_item *it = km_arena_alloc(a, sizeof *it * (total ? total : 1));
    if (!it)
        return NULL;
    for (int32_t i = 0; v == 0 && i < rq->ungrouped_partitions.count; i++)
        it[k++] = (stop_item){ rq->ungrouped_partitions.items[i].topic_name.ptr,
                               rq->ungrouped_partitions.items[i].partition_index, -1, rq->delete_partitions };
    for (int32_t t = 0; v >= 1 && v < 3 && t < rq->topics.count; t++)
        for (int32_t i = 0; i < rq->topics.items[t].partition_indexes.count; i++)
            it[k++] = (stop_item){ rq->topics.items[t].name.ptr, rq->topics.items[t].partition_indexes.items[i], -1,
                                   rq->delete_partitions };
    for (int32_t t = 0; v >= 3 && t < rq->topic_states.count; t++) {
        const km_stop_replica_request_topic_state *ts = &rq->topic_states.items[t];
        for (int32_t i = 0; i < ts->partition_states.count; i++)
            it[k++] = (stop_item){ ts->topic_name.ptr, ts->partition_states.items[i].partition_index,
                                   ts->partition_states.items[i].leader_epoch,
                                   ts->partition_states.items[i].delete_partition };
    }
    *n = k;
    return it;
}

static int16_t stop_one(bsim_state *st, const stop_item *it)
{
    size_t idx;
    bsim_part *p = bsim_find_part(st, it->topic, it->partition, &idx);
    if (!p)
        return 0; /* HostedPartition.None: nothing to stop, NONE */
    if (it->leader_epoch != -2 && it->leader_epoch != -1 && it->leader_epoch < p->leader_epoch)
        return E_FENCED_LEADER_EPOCH;
    if (it->del)
        bsim_remove_part(st, idx);
    else
        p->stopped = true;
    return 0;
}

int bsim_stop_replica(bsim_state *st, int16_t v, const km_stop_replica_request *rq,
                      km_stop_replica_response *rs, km_arena *a, km_err *err)
{
    rs->error_code = 0;
    rs->partition_errors.count = 0;
    if (stale_broker_epoch(st, rq->broker_epoch, rq->is_kraft_controller))
        rs->error_code = E_STALE_BROKER_EPOCH;
    else if (rq->controller_epoch < st->controller_epoch)
        rs->error_code = E_STALE_CONTROLLER_EPOCH;
    bsim_count_error(st, rs->error_code);
    if (rs->error_code)
        return 0;
    st->controller_epoch = rq->controller_epoch;
    size_t n = 0;
    stop_item *items = stop_items(v, rq, &n, a);
    km_stop_replica_response_partition_error *pe = km_arena_alloc(a, sizeof *pe * (n ? n : 1));
    if (!items || !pe)
        return km_fail(err, "brokersim: StopReplica: out of memory");
    for (size_t i = 0; i < n; i++) {
        memset(&pe[i], 0, sizeof pe[i]);
        pe[i].topic_name = km_cstr(items[i].topic);
        pe[i].partition_index = items[i].partition;
        pe[i].error_code = stop_one(st, &items[i]);
        bsim_count_error(st, pe[i].error_code);
    }
    rs->partition_errors.count = (int32_t)n;
    rs->partition_errors.items = pe;
    return 0;
}

/* ---- life cycle ------------------------------------------------------------------------ */

void bsim_state_init(bsim_state *st, const km_bsim_config *cfg)
{
    memset(st, 0, sizeof *st);
    st->broker_id = cfg->broker_id;
    st->kraft_epoch = cfg->kraft_broker_epoch;
    st->zk_epoch = cfg->zk_broker_epoch;
    st->md_controller_id = -1;
    st->kafka = cfg->kafka;
}

/* A restart: the metadata cache is memory, the logs are on disk. */
void bsim_forget_metadata(bsim_state *st)
{
    while (st->n_mparts)
        bsim_remove_mpart(st, st->n_mparts - 1);
    for (size_t i = 0; i < st->n_tids; i++)
        free(st->tids[i].name);
    st->n_tids = 0;
    free_brokers(st);
    st->n_brokers = 0;
    st->md_controller_id = -1;
    st->md_kraft_controller = false;
    st->controller_epoch = 0;
}

void bsim_state_free(bsim_state *st)
{
    while (st->n_parts)
        bsim_remove_part(st, st->n_parts - 1);
    while (st->n_mparts)
        bsim_remove_mpart(st, st->n_mparts - 1);
    free(st->parts);
    free(st->mparts);
    for (size_t i = 0; i < st->n_tids; i++)
        free(st->tids[i].name);
    free(st->tids);
    free_brokers(st);
    bsim_logs_free(st);
    memset(st, 0, sizeof *st);
}
