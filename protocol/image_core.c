/* image_core.c - the image's state: lifetime, lookups, iteration, partition views. */
#include "image_internal.h"

#include <stdio.h>

/* Kafka's org.apache.kafka.common.DirectoryId: MIGRATING is the all-zero uuid (a replica whose directory is
 * not known yet: every pre-3.7 log), UNASSIGNED is 0...1, LOST is 0...2. */
const km_uuid KM_DIR_MIGRATING = {{0}};
const km_uuid KM_DIR_UNASSIGNED = {{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}};
const km_uuid KM_DIR_LOST = {{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2}};

/* ---- partitions ----------------------------------------------------------------------- */

#define PART_LISTS(pt) {&(pt)->replicas, &(pt)->isr, &(pt)->removing, &(pt)->adding, &(pt)->elr, &(pt)->lkelr, &(pt)->dirs}

void km_part_release(km_pool *p, km_part *pt)
{
    uint32_t *l[] = PART_LISTS(pt);
    for (size_t i = 0; i < sizeof l / sizeof l[0]; i++) {
        km_pool_unref(p, *l[i]);
        *l[i] = 0;
    }
}

void km_part_retain(km_pool *p, const km_part *pt)
{
    const uint32_t *l[] = PART_LISTS(pt);
    for (size_t i = 0; i < sizeof l / sizeof l[0]; i++)
        km_pool_ref(p, *l[i]);
}

static km_i32_list i32_list(const km_pool *p, uint32_t id)
{
    uint32_t len;
    const void *d = km_pool_data(p, id, &len);
    return (km_i32_list){d, (int32_t)(len / 4)};
}

void km_part_view(const km_pool *p, const km_part *pt, int32_t id, km_partition *out)
{
    out->id = id;
    out->leader = pt->leader;
    out->leader_epoch = pt->leader_epoch;
    out->partition_epoch = pt->partition_epoch;
    out->leader_recovery_state = pt->lrs;
    out->replicas = i32_list(p, pt->replicas);
    out->isr = i32_list(p, pt->isr);
    out->removing_replicas = i32_list(p, pt->removing);
    out->adding_replicas = i32_list(p, pt->adding);
    out->elr = i32_list(p, pt->elr);
    out->last_known_elr = i32_list(p, pt->lkelr);
    uint32_t len;
    const void *d = km_pool_data(p, pt->dirs, &len);
    out->directories = (km_uuid_list){d, (int32_t)(len / 16)};
}

bool km_part_same(const km_part *a, const km_part *b)
{
    return !km_part_diff(a, b);
}

uint32_t km_part_diff(const km_part *a, const km_part *b)
{
    uint32_t w = 0;
    w |= a->leader != b->leader ? KM_PC_LEADER : 0;
    w |= a->leader_epoch != b->leader_epoch ? KM_PC_LEADER_EPOCH : 0;
    w |= a->partition_epoch != b->partition_epoch ? KM_PC_PARTITION_EPOCH : 0;
    w |= a->lrs != b->lrs ? KM_PC_LRS : 0;
    w |= a->isr != b->isr ? KM_PC_ISR : 0;
    w |= a->replicas != b->replicas ? KM_PC_REPLICAS : 0;
    w |= a->adding != b->adding ? KM_PC_ADDING : 0;
    w |= a->removing != b->removing ? KM_PC_REMOVING : 0;
    w |= a->elr != b->elr ? KM_PC_ELR : 0;
    w |= a->lkelr != b->lkelr ? KM_PC_LAST_KNOWN_ELR : 0;
    w |= a->dirs != b->dirs ? KM_PC_DIRECTORIES : 0;
    return w;
}

/* ---- topics ----------------------------------------------------------------------------- */

km_uuid km_topic_id(const km_topic *t) { return t->id; }
const char *km_topic_name(const km_topic *t) { return t->name; }
int32_t km_topic_partition_count(const km_topic *t) { return t->n_parts; }

bool km_topic_partition(const km_topic *t, int32_t id, km_partition *out)
{
    if (id < 0 || id >= t->n_parts || !t->parts[id].present)
        return false;
    km_part_view(t->pool, &t->parts[id], id, out);
    return true;
}

static void topic_free(km_pool *pool, km_topic *t)
{
    for (int32_t i = 0; i < t->n_parts; i++)
        if (t->parts[i].present)
            km_part_release(pool, &t->parts[i]);
    free(t->parts);
    free(t->name);
    free(t);
}

/* ---- state ------------------------------------------------------------------------------- */

km_istate *km_istate_new(void)
{
    km_istate *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->pids = (km_producer_ids){.broker_id = -1, .broker_epoch = -1, .next_producer_id = -1};
    s->zk_state = KM_ZKM_NONE;
    return s;
}

static void free_obj_map(km_map *m)
{
    size_t it = 0;
    km_map_slot *s;
    while ((s = km_map_next(m, &it)))
        km_obj_unref(s->val);
    km_map_free(m);
}

static void free_idvec(km_id_vec *v)
{
    for (size_t i = 0; i < v->n; i++)
        km_obj_unref(v->v[i].obj);
    free(v->v);
}

void km_istate_free(km_pool *pool, km_istate *s)
{
    if (!s)
        return;
    size_t it = 0;
    km_map_slot *sl;
    while ((sl = km_map_next(&s->topics_by_id, &it)))
        topic_free(pool, sl->val);
    km_map_free(&s->topics_by_id);
    km_map_free(&s->topics_by_name);
    free_idvec(&s->brokers);
    free_idvec(&s->controllers);
    free_obj_map(&s->configs);
    free_obj_map(&s->quotas);
    free_obj_map(&s->scram);
    free_obj_map(&s->acls);
    free_obj_map(&s->tokens);
    for (size_t i = 0; i < s->n_features; i++)
        free(s->features[i].name);
    free(s->features);
    free(s);
}

int16_t km_istate_feature(const km_istate *s, const char *name)
{
    for (size_t i = 0; i < s->n_features; i++)
        if (!strcmp(s->features[i].name, name))
            return s->features[i].level;
    return 0;
}

/* ---- image ---------------------------------------------------------------------------------- */

km_image *km_image_new(void)
{
    km_image *img = calloc(1, sizeof *img);
    if (!img)
        return NULL;
    km_pool_init(&img->pool);
    img->st = km_istate_new();
    if (!img->st) {
        free(img);
        return NULL;
    }
    img->offset = -1;
    img->epoch = -1;
    img->raft_leader = -1;
    img->raft_leader_epoch = -1;
    return img;
}

void km_image_free(km_image *img)
{
    if (!img)
        return;
    km_istate_free(&img->pool, img->st);
    km_istate_free(&img->pool, img->staging);
    for (size_t i = 0; i < img->n_txn; i++)
        free(img->txn[i].frame);
    free(img->txn);
    free(img->cluster_id);
    km_pool_free(&img->pool);
    free(img);
}

int km_image_set_cluster_id(km_image *img, const char *cluster_id, km_err *err)
{
    char *c = cluster_id ? km_im_cstrdup(cluster_id) : NULL;
    if (cluster_id && !c)
        return km_fail(err, "image: out of memory setting the cluster id");
    free(img->cluster_id);
    img->cluster_id = c;
    return 0;
}

const char *km_image_cluster_id(const km_image *img) { return img->cluster_id; }
int64_t km_image_offset(const km_image *img) { return img->offset; }
int32_t km_image_epoch(const km_image *img) { return img->epoch; }
int32_t km_image_raft_leader(const km_image *img) { return img->raft_leader; }
int32_t km_image_raft_leader_epoch(const km_image *img) { return img->raft_leader_epoch; }
bool km_image_in_transaction(const km_image *img) { return img->in_txn; }
/* FeaturesImage.metadataVersion: a log with no FeatureLevelRecord (Kafka 3.0-3.2) is at MINIMUM_KRAFT_VERSION. */
int16_t km_image_metadata_version(const km_image *img)
{
    int16_t level = km_istate_feature(img->st, "metadata.version");
    return level ? level : KM_MV_3_0_IV1;
}
int16_t km_image_feature(const km_image *img, const char *name) { return km_istate_feature(img->st, name); }
int km_image_zk_migration_state(const km_image *img) { return img->st->zk_state; }
km_producer_ids km_image_producer_ids(const km_image *img) { return img->st->pids; }
size_t km_image_topic_count(const km_image *img) { return img->st->topics_by_id.n; }
size_t km_image_partition_count(const km_image *img) { return img->st->n_partitions; }
size_t km_image_broker_count(const km_image *img) { return img->st->brokers.n; }

const km_topic *km_image_topic_by_id(const km_image *img, km_uuid id)
{
    return km_map_get(&img->st->topics_by_id, id.b, 16);
}

const km_topic *km_image_topic_by_name(const km_image *img, const char *name)
{
    return km_map_get(&img->st->topics_by_name, name, strlen(name));
}

const km_broker *km_image_broker(const km_image *img, int32_t id) { return km_idvec_get(&img->st->brokers, id); }
const km_controller *km_image_controller(const km_image *img, int32_t id)
{
    return km_idvec_get(&img->st->controllers, id);
}

const km_config_res *km_image_config(const km_image *img, int8_t type, const char *name)
{
    km_buf k;
    km_buf_init(&k);
    km_config_key(type, name, &k);
    const km_config_res *r = k.oom ? NULL : km_map_get(&img->st->configs, k.data, k.len);
    km_buf_free(&k);
    return r;
}

const km_scram *km_image_scram(const km_image *img, const char *user, int8_t mechanism)
{
    km_buf k;
    km_buf_init(&k);
    km_scram_key(mechanism, user, &k);
    const km_scram *r = k.oom ? NULL : km_map_get(&img->st->scram, k.data, k.len);
    km_buf_free(&k);
    return r;
}

const km_acl *km_image_acl(const km_image *img, km_uuid id) { return km_map_get(&img->st->acls, id.b, 16); }
const km_token *km_image_token(const km_image *img, const char *token_id)
{
    return km_map_get(&img->st->tokens, token_id, strlen(token_id));
}

/* ---- iteration ---------------------------------------------------------------------------- */

static const void *map_next_val(const km_map *m, size_t *it)
{
    km_map_slot *s = km_map_next(m, it);
    return s ? s->val : NULL;
}

static const void *idvec_next(const km_id_vec *v, size_t *it)
{
    return *it < v->n ? v->v[(*it)++].obj : NULL;
}

const km_topic *km_image_next_topic(const km_image *img, size_t *it) { return map_next_val(&img->st->topics_by_id, it); }
const km_broker *km_image_next_broker(const km_image *img, size_t *it) { return idvec_next(&img->st->brokers, it); }
const km_controller *km_image_next_controller(const km_image *img, size_t *it)
{
    return idvec_next(&img->st->controllers, it);
}
const km_config_res *km_image_next_config(const km_image *img, size_t *it) { return map_next_val(&img->st->configs, it); }
const km_client_quota *km_image_next_quota(const km_image *img, size_t *it) { return map_next_val(&img->st->quotas, it); }
const km_scram *km_image_next_scram(const km_image *img, size_t *it) { return map_next_val(&img->st->scram, it); }
const km_acl *km_image_next_acl(const km_image *img, size_t *it) { return map_next_val(&img->st->acls, it); }
const km_token *km_image_next_token(const km_image *img, size_t *it) { return map_next_val(&img->st->tokens, it); }

bool km_image_next_feature(const km_image *img, size_t *it, const char **name, int16_t *level)
{
    if (*it >= img->st->n_features)
        return false;
    *name = img->st->features[*it].name;
    *level = img->st->features[*it].level;
    (*it)++;
    return true;
}

/* ---- names ----------------------------------------------------------------------------------- */

const char *km_zk_migration_state_name(int state)
{
    static const char *const names[] = {"NONE", "MIGRATION", "PRE_MIGRATION", "POST_MIGRATION", "ZK"};
    return state >= 0 && state <= 4 ? names[state] : NULL;
}

const char *km_config_resource_name(int type)
{
    switch (type) {
    case KM_CFG_TOPIC: return "TOPIC";
    case KM_CFG_BROKER: return "BROKER";
    case KM_CFG_BROKER_LOGGER: return "BROKER_LOGGER";
    case KM_CFG_CLIENT_METRICS: return "CLIENT_METRICS";
    case KM_CFG_GROUP: return "GROUP";
    default: return NULL;
    }
}

const char *km_metadata_record_type_name(int16_t type)
{
    static const char *const names[] = {
        [0] = "REGISTER_BROKER_RECORD", [1] = "UNREGISTER_BROKER_RECORD", [2] = "TOPIC_RECORD",
        [3] = "PARTITION_RECORD", [4] = "CONFIG_RECORD", [5] = "PARTITION_CHANGE_RECORD",
        [7] = "FENCE_BROKER_RECORD", [8] = "UNFENCE_BROKER_RECORD",
        [9] = "REMOVE_TOPIC_RECORD", [10] = "DELEGATION_TOKEN_RECORD", [11] = "USER_SCRAM_CREDENTIAL_RECORD",
        [12] = "FEATURE_LEVEL_RECORD", [14] = "CLIENT_QUOTA_RECORD",
        [15] = "PRODUCER_IDS_RECORD", [17] = "BROKER_REGISTRATION_CHANGE_RECORD", [18] = "ACCESS_CONTROL_ENTRY_RECORD",
        [19] = "REMOVE_ACCESS_CONTROL_ENTRY_RECORD", [20] = "NO_OP_RECORD", [21] = "ZK_MIGRATION_STATE_RECORD",
        [22] = "REMOVE_USER_SCRAM_CREDENTIAL_RECORD", [23] = "BEGIN_TRANSACTION_RECORD",
        [24] = "END_TRANSACTION_RECORD", [25] = "ABORT_TRANSACTION_RECORD",
        [26] = "REMOVE_DELEGATION_TOKEN_RECORD", [27] = "REGISTER_CONTROLLER_RECORD",
    };
    if (type < 0 || (size_t)type >= sizeof names / sizeof names[0])
        return NULL;
    return names[type];  /* NULL for ids Kafka never used or retired (6, 13, 16) */
}
