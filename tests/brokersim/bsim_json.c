/* Broker simulator: the state as JSON, sorted so two dumps of equal state are equal. */
#include "bsim_internal.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static json_t *ints(const int32_t *v, int32_t n)
{
    json_t *a = json_array();
    for (int32_t i = 0; i < n; i++)
        json_array_append_new(a, json_integer(v[i]));
    return a;
}

static json_t *uuid_json(km_uuid u)
{
    if (km_uuid_is_zero(u))
        return json_null();
    char b64[23];
    km_uuid_to_base64(u, b64);
    return json_string(b64);
}

static int cmp_part(const void *a, const void *b)
{
    const bsim_part *x = *(bsim_part *const *)a, *y = *(bsim_part *const *)b;
    int c = strcmp(x->topic, y->topic);
    return c ? c : (x->partition > y->partition) - (x->partition < y->partition);
}

static int cmp_mpart(const void *a, const void *b)
{
    const bsim_mpart *x = *(bsim_mpart *const *)a, *y = *(bsim_mpart *const *)b;
    int c = strcmp(x->topic, y->topic);
    return c ? c : (x->partition > y->partition) - (x->partition < y->partition);
}

static int cmp_broker(const void *a, const void *b)
{
    const bsim_broker *x = a, *y = b;
    return (x->id > y->id) - (x->id < y->id);
}

static json_t *part_json(const bsim_part *p)
{
    return json_pack("{s:s, s:i, s:o, s:i, s:i, s:i, s:i, s:o, s:o, s:o, s:o, s:i, s:b}",
                     "topic", p->topic, "partition", p->partition, "topicId", uuid_json(p->topic_id),
                     "leader", p->leader, "leaderEpoch", p->leader_epoch, "partitionEpoch", p->partition_epoch,
                     "controllerEpoch", p->controller_epoch, "isr", ints(p->isr.v, p->isr.n),
                     "replicas", ints(p->replicas.v, p->replicas.n), "addingReplicas",
                     ints(p->adding.v, p->adding.n), "removingReplicas", ints(p->removing.v, p->removing.n),
                     "leaderRecoveryState", p->lrs, "stopped", p->stopped);
}

static json_t *parts_json(const bsim_state *st)
{
    bsim_part **sorted = malloc(sizeof *sorted * (st->n_parts + 1));
    json_t *a = json_array();
    if (!sorted)
        return a;
    if (st->n_parts) /* memcpy from NULL is undefined even for 0 bytes */
        memcpy(sorted, st->parts, sizeof *sorted * st->n_parts);
    qsort(sorted, st->n_parts, sizeof *sorted, cmp_part);
    for (size_t i = 0; i < st->n_parts; i++)
        json_array_append_new(a, part_json(sorted[i]));
    free(sorted);
    return a;
}

static json_t *brokers_json(const bsim_state *st)
{
    json_t *a = json_array();
    bsim_broker *sorted = malloc(sizeof *sorted * (st->n_brokers + 1));
    if (!sorted)
        return a;
    if (st->n_brokers)
        memcpy(sorted, st->brokers, sizeof *sorted * st->n_brokers);
    qsort(sorted, st->n_brokers, sizeof *sorted, cmp_broker);
    for (size_t i = 0; i < st->n_brokers; i++) {
        json_t *eps = json_array();
        for (int32_t e = 0; e < sorted[i].n_eps; e++) {
            const bsim_ep *ep = &sorted[i].eps[e];
            json_array_append_new(eps, json_pack("{s:s, s:s, s:i, s:i}", "listener", ep->listener, "host", ep->host,
                                                 "port", ep->port, "securityProtocol", ep->security_protocol));
        }
        json_array_append_new(a, json_pack("{s:i, s:o, s:o}", "id", sorted[i].id, "rack",
                                           sorted[i].rack ? json_string(sorted[i].rack) : json_null(),
                                           "endpoints", eps));
    }
    free(sorted);
    return a;
}

static km_uuid tid_of(const bsim_state *st, const char *name)
{
    for (size_t i = 0; i < st->n_tids; i++)
        if (!strcmp(st->tids[i].name, name))
            return st->tids[i].id;
    return (km_uuid){ { 0 } };
}

static json_t *mpart_json(const bsim_mpart *m)
{
    return json_pack("{s:i, s:i, s:i, s:o, s:i, s:o, s:o, s:i}", "partition", m->partition, "leader", m->leader,
                     "leaderEpoch", m->leader_epoch, "isr", ints(m->isr.v, m->isr.n), "zkVersion", m->zk_version,
                     "replicas", ints(m->replicas.v, m->replicas.n), "offlineReplicas",
                     ints(m->offline.v, m->offline.n), "controllerEpoch", m->controller_epoch);
}

static json_t *topics_json(const bsim_state *st)
{
    json_t *a = json_array();
    bsim_mpart **sorted = malloc(sizeof *sorted * (st->n_mparts + 1));
    if (!sorted)
        return a;
    if (st->n_mparts)
        memcpy(sorted, st->mparts, sizeof *sorted * st->n_mparts);
    qsort(sorted, st->n_mparts, sizeof *sorted, cmp_mpart);
    json_t *topic = NULL;
    for (size_t i = 0; i < st->n_mparts; i++) {
        if (!topic || strcmp(json_string_value(json_object_get(topic, "name")), sorted[i]->topic)) {
            topic = json_pack("{s:s, s:o, s:[]}", "name", sorted[i]->topic, "topicId",
                              uuid_json(tid_of(st, sorted[i]->topic)), "partitions");
            json_array_append_new(a, topic);
        }
        json_array_append_new(json_object_get(topic, "partitions"), mpart_json(sorted[i]));
    }
    free(sorted);
    return a;
}

static json_t *counts_json(const bsim_state *st)
{
    json_t *o = json_object();
    for (int api = 0; api < KM_BSIM_APIS; api++) {
        json_t *byv = NULL;
        for (int v = 0; v < 16; v++) {
            if (!st->req_count[api][v])
                continue;
            if (!byv)
                byv = json_object();
            char k[8];
            snprintf(k, sizeof k, "%d", v);
            json_object_set_new(byv, k, json_integer((json_int_t)st->req_count[api][v]));
        }
        if (byv)
            json_object_set_new(o, km_api_name((int16_t)api), byv);
    }
    if (st->api_versions_count)
        json_object_set_new(o, "API_VERSIONS", json_integer((json_int_t)st->api_versions_count));
    return o;
}

static json_t *errors_json(const bsim_state *st)
{
    json_t *o = json_object();
    for (int c = 0; c < BSIM_MAX_ERRCODE; c++) {
        if (!st->err_count[c])
            continue;
        char k[16];
        snprintf(k, sizeof k, "%d", c ? c : -1);
        json_object_set_new(o, k, json_integer((json_int_t)st->err_count[c]));
    }
    return o;
}

static json_t *logs_json(const bsim_state *st)
{
    json_t *a = json_array();
    for (size_t i = 0; i < st->n_logs; i++) {
        const bsim_log *l = &st->logs[i];
        json_array_append_new(a, json_pack("{s:s, s:i, s:o, s:b, s:o}", "topic", l->topic, "partition", l->partition,
                                           "topicId", uuid_json(l->topic_id), "configRead", l->config_read,
                                           "config", l->config ? json_string(l->config) : json_null()));
    }
    return a;
}

json_t *bsim_state_to_json(const bsim_state *st)
{
    json_t *md = json_pack("{s:i, s:b, s:o, s:o}", "controllerId", st->md_controller_id, "isKRaftController",
                           st->md_kraft_controller, "brokers", brokers_json(st), "topics", topics_json(st));
    const km_bsim_security_stats *sec = &st->sec;
    json_t *security = json_pack("{s:I, s:I, s:I, s:I, s:I, s:s}", "plaintextOnTls", (json_int_t)sec->plaintext_on_tls,
                                 "saslOk", (json_int_t)sec->sasl_ok, "saslFailed", (json_int_t)sec->sasl_failed,
                                 "unauthenticated", (json_int_t)sec->unauthenticated, "unauthorized",
                                 (json_int_t)sec->unauthorized, "lastPrincipal", sec->last_principal);
    json_t *o = json_pack("{s:i, s:I, s:i, s:o, s:o, s:o, s:o, s:I, s:s, s:o}", "brokerId", st->broker_id,
                          "kraftBrokerEpoch", (json_int_t)st->kraft_epoch, "controllerEpoch", st->controller_epoch,
                          "partitions", parts_json(st), "metadata", md, "requests", counts_json(st), "errors",
                          errors_json(st), "rejected", (json_int_t)st->rejected, "lastRejection",
                          st->last_rejection, "security", security);
    json_object_set_new(o, "leaderAndIsrByType",
                        json_pack("{s:I, s:I, s:I}", "0", (json_int_t)st->lisr_by_type[0], "1",
                                  (json_int_t)st->lisr_by_type[1], "2", (json_int_t)st->lisr_by_type[2]));
    json_object_set_new(o, "strayLogsRemoved", json_integer((json_int_t)st->strays));
    json_object_set_new(o, "cuts", json_integer((json_int_t)st->cuts));
    json_object_set_new(o, "logsCreated", logs_json(st));
    return o;
}
