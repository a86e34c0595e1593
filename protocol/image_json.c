/* image_json.c - the image as JSON (`kmproxy metadata image`), with field
 * names as Kafka's records and the metadata shell spell them.  Output is
 * sorted (topics and configs by name) so two images compare as text.
 */
#include "image_internal.h"

#include <jansson.h>

static json_t *i32s(km_i32_list l)
{
    json_t *a = json_array();
    for (int32_t i = 0; a && i < l.n; i++)
        json_array_append_new(a, json_integer(l.v[i]));
    return a;
}

static json_t *uuid_json(km_uuid u)
{
    char b[23];
    km_uuid_to_base64(u, b);
    return json_string(b);
}

static json_t *uuids(km_uuid_list l)
{
    json_t *a = json_array();
    for (int32_t i = 0; a && i < l.n; i++)
        json_array_append_new(a, uuid_json(l.v[i]));
    return a;
}

static json_t *str_or_null(const char *s)
{
    return s ? json_string(s) : json_null();
}

json_t *km_partition_to_json(const km_partition *p)
{
    return json_pack("{s:i,s:o,s:o,s:o,s:o,s:i,s:i,s:i,s:i,s:o,s:o,s:o}", "partitionId", p->id, "replicas",
                     i32s(p->replicas), "isr", i32s(p->isr), "removingReplicas", i32s(p->removing_replicas),
                     "addingReplicas", i32s(p->adding_replicas), "leader", p->leader, "leaderRecoveryState",
                     p->leader_recovery_state, "leaderEpoch", p->leader_epoch, "partitionEpoch",
                     p->partition_epoch, "directories", uuids(p->directories), "eligibleLeaderReplicas",
                     i32s(p->elr), "lastKnownElr", i32s(p->last_known_elr));
}

static json_t *endpoints(const km_endpoint *e, int32_t n)
{
    json_t *a = json_array();
    for (int32_t i = 0; a && i < n; i++)
        json_array_append_new(a, json_pack("{s:s,s:s,s:i,s:i}", "name", e[i].name, "host", e[i].host, "port",
                                           e[i].port, "securityProtocol", e[i].security_protocol));
    return a;
}

static json_t *features(const km_feature_range *f, int32_t n)
{
    json_t *a = json_array();
    for (int32_t i = 0; a && i < n; i++)
        json_array_append_new(a, json_pack("{s:s,s:i,s:i}", "name", f[i].name, "minSupportedVersion",
                                           f[i].min_version, "maxSupportedVersion", f[i].max_version));
    return a;
}

json_t *km_broker_to_json(const km_broker *b)
{
    return json_pack("{s:i,s:o,s:I,s:b,s:b,s:b,s:o,s:o,s:o,s:o}", "brokerId", b->id, "incarnationId",
                     uuid_json(b->incarnation_id), "brokerEpoch", (json_int_t)b->epoch, "fenced", b->fenced,
                     "inControlledShutdown", b->in_controlled_shutdown, "isMigratingZkBroker",
                     b->is_migrating_zk_broker, "rack", str_or_null(b->rack), "endPoints",
                     endpoints(b->endpoints, b->n_endpoints), "features", features(b->features, b->n_features),
                     "logDirs", uuids(b->log_dirs));
}

static json_t *controller_json(const km_controller *c)
{
    return json_pack("{s:i,s:o,s:b,s:o,s:o}", "controllerId", c->id, "incarnationId", uuid_json(c->incarnation_id),
                     "zkMigrationReady", c->zk_migration_ready, "endPoints", endpoints(c->endpoints, c->n_endpoints),
                     "features", features(c->features, c->n_features));
}

static int cmp_topic(const void *a, const void *b)
{
    return strcmp(km_topic_name(*(const km_topic *const *)a), km_topic_name(*(const km_topic *const *)b));
}

static json_t *topic_json(const km_topic *t)
{
    json_t *parts = json_array();
    km_partition p;
    for (int32_t i = 0; parts && i < km_topic_partition_count(t); i++)
        if (km_topic_partition(t, i, &p))
            json_array_append_new(parts, km_partition_to_json(&p));
    return json_pack("{s:s,s:o,s:o}", "name", km_topic_name(t), "topicId", uuid_json(km_topic_id(t)), "partitions",
                     parts);
}

static json_t *topics_json(const km_image *img)
{
    size_t n = km_image_topic_count(img), it = 0, i = 0;
    const km_topic **v = malloc((n ? n : 1) * sizeof *v), *t;
    json_t *a = json_array();
    if (!v || !a) {
        free(v);
        json_decref(a);
        return NULL;
    }
    while ((t = km_image_next_topic(img, &it)) && i < n)
        v[i++] = t;
    qsort(v, i, sizeof *v, cmp_topic);
    for (size_t j = 0; j < i; j++)
        json_array_append_new(a, topic_json(v[j]));
    free(v);
    return a;
}

static json_t *config_json(const km_config_res *r)
{
    json_t *kv = json_object();
    for (int32_t i = 0; kv && i < r->n; i++)
        json_object_set_new(kv, r->kv[i].name, json_string(r->kv[i].value));
    const char *tn = km_config_resource_name(r->type);
    return json_pack("{s:o,s:s,s:o}", "resourceType", tn ? json_string(tn) : json_integer(r->type), "resourceName",
                     r->name, "configs", kv);
}

static int cmp_json_key(const void *a, const void *b)
{
    char *x = json_dumps(*(json_t *const *)a, JSON_COMPACT | JSON_SORT_KEYS);
    char *y = json_dumps(*(json_t *const *)b, JSON_COMPACT | JSON_SORT_KEYS);
    int c = strcmp(x ? x : "", y ? y : "");
    free(x);
    free(y);
    return c;
}

/* Sorts an array of objects by their compact text, so hash order never shows. */
static json_t *sorted(json_t *a)
{
    size_t n = json_array_size(a);
    json_t **v = malloc((n ? n : 1) * sizeof *v), *out = json_array();
    for (size_t i = 0; v && i < n; i++)
        v[i] = json_array_get(a, i);
    if (v)
        qsort(v, n, sizeof *v, cmp_json_key);
    for (size_t i = 0; v && out && i < n; i++)
        json_array_append(out, v[i]);
    free(v);
    json_decref(a);
    return out;
}

static json_t *quota_json(const km_client_quota *q)
{
    json_t *ent = json_object(), *kv = json_object();
    for (int32_t i = 0; ent && i < q->n_parts; i++)
        json_object_set_new(ent, q->parts[i].type, str_or_null(q->parts[i].name));
    for (int32_t i = 0; kv && i < q->n; i++)
        json_object_set_new(kv, q->kv[i].key, json_real(q->kv[i].value));
    return json_pack("{s:o,s:o}", "entity", ent, "quotas", kv);
}

static json_t *scram_json(const km_scram *s)
{
    const char *mech = s->mechanism == 1 ? "SCRAM-SHA-256" : s->mechanism == 2 ? "SCRAM-SHA-512" : "UNKNOWN";
    return json_pack("{s:s,s:s,s:i}", "name", s->user, "mechanism", mech, "iterations", s->iterations);
}

static json_t *acl_json(const km_acl *a)
{
    return json_pack("{s:o,s:i,s:s,s:i,s:s,s:s,s:i,s:i}", "id", uuid_json(a->id), "resourceType", a->resource_type,
                     "resourceName", a->resource_name, "patternType", a->pattern_type, "principal", a->principal,
                     "host", a->host, "operation", a->operation, "permissionType", a->permission_type);
}

static json_t *token_json(const km_token *t)
{
    json_t *r = json_array();
    for (int32_t i = 0; r && i < t->n_renewers; i++)
        json_array_append_new(r, json_string(t->renewers[i]));
    return json_pack("{s:s,s:s,s:s,s:o,s:I,s:I,s:I}", "tokenId", t->token_id, "owner", t->owner, "requester",
                     t->requester, "renewers", r, "issueTimestamp", (json_int_t)t->issue_timestamp, "maxTimestamp",
                     (json_int_t)t->max_timestamp, "expirationTimestamp", (json_int_t)t->expiration_timestamp);
}

#define COLLECT(arr, next_fn, to_json, T)              \
    do {                                               \
        size_t it_ = 0;                                \
        const T *x_;                                   \
        while ((x_ = next_fn(img, &it_)))              \
            json_array_append_new(arr, to_json(x_));   \
    } while (0)

static json_t *entities_json(const km_image *img)
{
    json_t *brokers = json_array(), *ctrls = json_array(), *cfgs = json_array(), *quotas = json_array(),
           *scram = json_array(), *acls = json_array(), *tokens = json_array();
    if (!brokers || !ctrls || !cfgs || !quotas || !scram || !acls || !tokens)
        return NULL;
    COLLECT(brokers, km_image_next_broker, km_broker_to_json, km_broker);
    COLLECT(ctrls, km_image_next_controller, controller_json, km_controller);
    COLLECT(cfgs, km_image_next_config, config_json, km_config_res);
    COLLECT(quotas, km_image_next_quota, quota_json, km_client_quota);
    COLLECT(scram, km_image_next_scram, scram_json, km_scram);
    COLLECT(acls, km_image_next_acl, acl_json, km_acl);
    COLLECT(tokens, km_image_next_token, token_json, km_token);
    return json_pack("{s:o,s:o,s:o,s:o,s:o,s:o,s:o}", "brokers", brokers, "controllers", ctrls, "configs",
                     sorted(cfgs), "clientQuotas", sorted(quotas), "scramCredentials", sorted(scram), "acls",
                     sorted(acls), "delegationTokens", sorted(tokens));
}

static json_t *header_json(const km_image *img)
{
    json_t *feats = json_object();
    size_t it = 0;
    const char *name;
    int16_t level;
    while (feats && km_image_next_feature(img, &it, &name, &level))
        json_object_set_new(feats, name, json_integer(level));
    /* FeaturesImage: without a FeatureLevelRecord the image is at 3.0-IV1; Kafka's image shows that level. */
    if (feats && !json_object_get(feats, "metadata.version"))
        json_object_set_new(feats, "metadata.version", json_integer(km_image_metadata_version(img)));
    km_producer_ids p = km_image_producer_ids(img);
    const char *zk = km_zk_migration_state_name(km_image_zk_migration_state(img));
    return json_pack("{s:o,s:I,s:i,s:{s:i,s:i},s:i,s:o,s:s,s:{s:i,s:I,s:I},s:I,s:I}", "clusterId",
                     str_or_null(km_image_cluster_id(img)), "offset", (json_int_t)km_image_offset(img), "epoch",
                     km_image_epoch(img), "raftLeader", "id", km_image_raft_leader(img), "epoch",
                     km_image_raft_leader_epoch(img), "metadataVersion", km_image_metadata_version(img), "features",
                     feats, "zkMigrationState", zk ? zk : "UNKNOWN", "producerIds", "brokerId", p.broker_id,
                     "brokerEpoch", (json_int_t)p.broker_epoch, "nextProducerId", (json_int_t)p.next_producer_id,
                     "topicCount", (json_int_t)km_image_topic_count(img), "partitionCount",
                     (json_int_t)km_image_partition_count(img));
}

json_t *km_image_to_json(const km_image *img, km_err *err)
{
    json_t *h = header_json(img), *e = entities_json(img), *t = topics_json(img);
    if (!h || !e || !t || json_object_update(h, e) < 0 || json_object_set(h, "topics", t) < 0) {
        json_decref(h);
        json_decref(e);
        json_decref(t);
        km_fail(err, "image: out of memory building JSON");
        return NULL;
    }
    json_decref(e);
    json_decref(t);
    return h;
}
