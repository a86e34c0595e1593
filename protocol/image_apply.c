/* image_apply.c - replay of the non-topic metadata records (cluster, configs,
 * quotas, SCRAM, ACLs, tokens, features, producer ids, migration state), as
 * Kafka 3.9's ClusterDelta, ConfigurationsDelta, ClientQuotasDelta,
 * ScramDelta, AclsDelta, DelegationTokenDelta, FeaturesDelta and
 * ProducerIdsDelta do, and the dispatch by record type.
 */
#include "image_internal.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>

int km_apply_fail(const km_apply_ctx *c, const char *fmt, ...)
{
    char why[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    const char *name = km_metadata_record_type_name(c->type);
    char tn[32];
    if (!name) {
        snprintf(tn, sizeof tn, "record type %d", c->type);
        name = tn;
    }
    return km_fail(c->err, "%s: offset %" PRId64 ": %s v%d: %s", c->where ? c->where : "image", c->offset, name,
                   c->version, why);
}

static int oom(const km_apply_ctx *c)
{
    return km_apply_fail(c, "out of memory");
}

static int note_obj(km_apply_ctx *c, km_obj_kind k, const void *key, size_t klen, int32_t id, const void *old,
                    const void *new_)
{
    if (c->delta && km_delta_note_obj(c->delta, k, key, klen, id, old, new_) < 0)
        return oom(c);
    return 0;
}

/* Puts obj (owned, may be NULL to remove) under key in m, noting the change. */
static int swap_map(km_apply_ctx *c, km_map *m, km_obj_kind k, const void *key, size_t klen, void *obj)
{
    void *old = NULL;
    if (obj) {
        if (km_map_put(m, key, klen, obj, &old) < 0) {
            km_obj_unref(obj);
            return oom(c);
        }
    } else {
        old = km_map_del(m, key, klen);
    }
    int rc = (old || obj) ? note_obj(c, k, key, klen, 0, old, obj) : 0;
    km_obj_unref(old);
    return rc;
}

static int swap_idvec(km_apply_ctx *c, km_id_vec *v, km_obj_kind k, int32_t id, const void *obj)
{
    bool failed;
    const void *old = km_idvec_set(v, id, obj, &failed);
    if (failed) {
        km_obj_unref(obj);
        return oom(c);
    }
    int rc = (old || obj) ? note_obj(c, k, &id, sizeof id, id, old, obj) : 0;
    km_obj_unref(old);
    return rc;
}

/* ---- cluster ---------------------------------------------------------------------------------- */

static int register_broker(km_apply_ctx *c, const km_register_broker_record *r)
{
    km_broker *b = km_broker_from_record(r);
    return b ? swap_idvec(c, &c->st->brokers, KM_OBJ_BROKER, r->broker_id, b) : oom(c);
}

/* ClusterDelta.getBrokerOrThrow. */
static const km_broker *broker_at_epoch(km_apply_ctx *c, int32_t id, int64_t epoch, const char *action)
{
    const km_broker *b = km_idvec_get(&c->st->brokers, id);
    if (!b)
        km_apply_fail(c, "tried to %s broker %" PRId32 ", but that broker was not registered", action, id);
    else if (b->epoch != epoch)
        km_apply_fail(c, "tried to %s broker %" PRId32 ", but the given epoch, %" PRId64
                      ", did not match the current broker epoch, %" PRId64, action, id, epoch, b->epoch);
    else
        return b;
    return NULL;
}

/* BrokerRegistration.cloneWith: -1 in a tri-state means "no change". */
static int change_broker(km_apply_ctx *c, const km_broker *cur, int fenced, int shutdown, const km_uuid *dirs,
                         int32_t n_dirs)
{
    bool nf = fenced < 0 ? cur->fenced : fenced != 0;
    bool ns = shutdown < 0 ? cur->in_controlled_shutdown : shutdown != 0;
    km_uuid *d = NULL;
    if (dirs) {
        if (!(d = malloc((size_t)n_dirs * sizeof *d)))
            return oom(c);
        memcpy(d, dirs, (size_t)n_dirs * sizeof *d);
        km_im_sort_log_dirs(d, n_dirs);
    }
    bool same_dirs = !d || (n_dirs == cur->log_dirs.n && !memcmp(d, cur->log_dirs.v, (size_t)n_dirs * 16));
    km_broker *b = NULL;
    if (nf == cur->fenced && ns == cur->in_controlled_shutdown && same_dirs) {
        free(d);
        return 0;
    }
    if (!(b = km_broker_clone(cur))) {
        free(d);
        return oom(c);
    }
    b->fenced = nf;
    b->in_controlled_shutdown = ns;
    if (!same_dirs) {
        free((km_uuid *)b->log_dirs.v);
        b->log_dirs = (km_uuid_list){d, n_dirs};
    } else {
        free(d);
    }
    return swap_idvec(c, &c->st->brokers, KM_OBJ_BROKER, cur->id, b);
}

static int fence(km_apply_ctx *c, int32_t id, int64_t epoch, bool fenced)
{
    const km_broker *b = broker_at_epoch(c, id, epoch, fenced ? "fence" : "unfence");
    return b ? change_broker(c, b, fenced, -1, NULL, 0) : -1;
}

static int broker_change(km_apply_ctx *c, const km_broker_registration_change_record *r)
{
    const km_broker *b = broker_at_epoch(c, r->broker_id, r->broker_epoch, "change");
    if (!b)
        return -1;
    /* BrokerRegistrationFencingChange: 1 FENCE, 0 NONE, -1 UNFENCE. */
    if (r->fenced < -1 || r->fenced > 1)
        return km_apply_fail(c, "unknown value for fenced field: %d", r->fenced);
    /* BrokerRegistrationInControlledShutdownChange: 0 NONE, 1 IN_CONTROLLED_SHUTDOWN. */
    if (r->in_controlled_shutdown < 0 || r->in_controlled_shutdown > 1)
        return km_apply_fail(c, "unknown value for inControlledShutdown field: %d", r->in_controlled_shutdown);
    int fenced = r->fenced == 0 ? -1 : r->fenced == 1;
    int shutdown = r->in_controlled_shutdown ? 1 : -1;
    bool dirs = r->log_dirs.count > 0;
    return change_broker(c, b, fenced, shutdown, dirs ? r->log_dirs.items : NULL, dirs ? r->log_dirs.count : 0);
}

static int register_controller(km_apply_ctx *c, const km_register_controller_record *r)
{
    km_controller *ct = km_controller_from_record(r);
    return ct ? swap_idvec(c, &c->st->controllers, KM_OBJ_CONTROLLER, r->controller_id, ct) : oom(c);
}

/* ---- configs, quotas, credentials, ACLs, tokens ----------------------------------------------- */

static int config(km_apply_ctx *c, const km_config_record *r)
{
    char *rname = km_im_strdup(r->resource_name), *name = km_im_strdup(r->name), *value = km_im_strdup(r->value);
    km_buf k;
    km_buf_init(&k);
    int rc = -1;
    if (!rname || !name || (r->value.len >= 0 && !value)) {
        rc = oom(c);
        goto out;
    }
    km_config_key(r->resource_type, rname, &k);
    const km_config_res *cur = k.oom ? NULL : km_map_get(&c->st->configs, k.data, k.len);
    if (k.oom || (!cur && !value)) {
        rc = k.oom ? oom(c) : 0;  /* deleting a key that is not set: nothing changes */
        goto out;
    }
    km_config_res *nr = km_config_with(cur, r->resource_type, rname, name, value);
    if (!nr) {
        rc = oom(c);
        goto out;
    }
    if (nr->n == 0) {        /* a resource with no config left is dropped, as ConfigurationsDelta.apply does */
        km_obj_unref(nr);
        nr = NULL;
    }
    rc = swap_map(c, &c->st->configs, KM_OBJ_CONFIG, k.data, k.len, nr);
out:
    km_buf_free(&k);
    free(rname);
    free(name);
    free(value);
    return rc;
}

static int client_quota(km_apply_ctx *c, const km_client_quota_record *r)
{
    km_buf k;
    km_buf_init(&k);
    if (km_quota_key(r, &k) < 0) {
        km_buf_free(&k);
        return oom(c);
    }
    const km_client_quota *cur = km_map_get(&c->st->quotas, k.data, k.len);
    int rc = 0;
    if (cur || !r->remove) {
        km_client_quota *q = km_quota_with(cur, r);
        if (!q) {
            rc = oom(c);
        } else {
            if (q->n == 0) {
                km_obj_unref(q);
                q = NULL;
            }
            rc = swap_map(c, &c->st->quotas, KM_OBJ_QUOTA, k.data, k.len, q);
        }
    }
    km_buf_free(&k);
    return rc;
}

static int scram(km_apply_ctx *c, km_str user, int8_t mech, km_scram *obj)
{
    char *u = km_im_strdup(user);
    km_buf k;
    km_buf_init(&k);
    if (u)
        km_scram_key(mech, u, &k);
    int rc = !u || k.oom ? oom(c) : swap_map(c, &c->st->scram, KM_OBJ_SCRAM, k.data, k.len, obj);
    if ((!u || k.oom) && obj)
        km_obj_unref(obj);
    free(u);
    km_buf_free(&k);
    return rc;
}

static int remove_acl(km_apply_ctx *c, const km_remove_access_control_entry_record *r)
{
    if (!km_map_get(&c->st->acls, r->id.b, 16)) {
        char idb[23];
        km_uuid_to_base64(r->id, idb);
        return km_apply_fail(c, "failed to find existing ACL with ID %s", idb);
    }
    return swap_map(c, &c->st->acls, KM_OBJ_ACL, r->id.b, 16, NULL);
}

static int token(km_apply_ctx *c, km_str id, km_token *obj)
{
    if (id.len < 0) {
        km_obj_unref(obj);
        return km_apply_fail(c, "null token id");
    }
    return swap_map(c, &c->st->tokens, KM_OBJ_TOKEN, id.ptr, (size_t)id.len, obj);
}

/* ---- features, producer ids, migration state -------------------------------------------------- */

static int set_feature(km_apply_ctx *c, const char *name, int16_t level)
{
    km_istate *s = c->st;
    size_t i = 0;
    while (i < s->n_features && strcmp(s->features[i].name, name) < 0)
        i++;
    bool found = i < s->n_features && !strcmp(s->features[i].name, name);
    int16_t old = found ? s->features[i].level : 0;
    if (found && level) {
        s->features[i].level = level;
    } else if (found) {
        free(s->features[i].name);
        memmove(&s->features[i], &s->features[i + 1], (s->n_features - i - 1) * sizeof s->features[0]);
        s->n_features--;
    } else if (level) {
        if (s->n_features == s->cap_features) {
            size_t nc = s->cap_features ? s->cap_features * 2 : 8;
            km_feature *nf = realloc(s->features, nc * sizeof *nf);
            if (!nf)
                return oom(c);
            s->features = nf;
            s->cap_features = nc;
        }
        char *n = km_im_cstrdup(name);
        if (!n)
            return oom(c);
        memmove(&s->features[i + 1], &s->features[i], (s->n_features - i) * sizeof s->features[0]);
        s->features[i] = (km_feature){n, level};
        s->n_features++;
    }
    if (old != level && c->delta && km_delta_note_feature(c->delta, name, old, level) < 0)
        return oom(c);
    return 0;
}

/* FeaturesDelta.replay: level 0 removes a feature, but metadata.version
 * can never be 0.  Kafka 3.9 would also reject levels above its own latest
 * (22); we accept them, since logs of 4.x clusters (levels 25-30 in the
 * corpus) must load too and nothing here depends on the newer semantics. */
static int feature_level(km_apply_ctx *c, const km_feature_level_record *r)
{
    char name[256];
    if (r->name.len < 0 || (size_t)r->name.len >= sizeof name)
        return km_apply_fail(c, "bad feature name");
    memcpy(name, r->name.ptr, (size_t)r->name.len);
    name[r->name.len] = 0;
    if (!strcmp(name, "metadata.version") && r->feature_level < 1)
        return km_apply_fail(c, "unknown metadata.version feature level %d", r->feature_level);
    if (r->feature_level < 0)
        return km_apply_fail(c, "negative level %d for feature %s", r->feature_level, name);
    return set_feature(c, name, r->feature_level);
}

static int producer_ids(km_apply_ctx *c, const km_producer_ids_record *r)
{
    km_producer_ids old = c->st->pids;
    c->st->pids = (km_producer_ids){r->broker_id, r->broker_epoch, r->next_producer_id};
    if (c->delta)
        km_delta_note_pids(c->delta, old, c->st->pids);
    return 0;
}

static int zk_migration(km_apply_ctx *c, const km_zk_migration_state_record *r)
{
    if (!km_zk_migration_state_name(r->zk_migration_state))
        return km_apply_fail(c, "unknown ZkMigrationState %d", r->zk_migration_state);
    int old = c->st->zk_state;
    c->st->zk_state = r->zk_migration_state;
    if (c->delta && old != c->st->zk_state)
        km_delta_note_zk(c->delta, old, c->st->zk_state);
    return 0;
}

/* ---- dispatch ------------------------------------------------------------------------------------- */

static int apply_objects(km_apply_ctx *c, const void *msg)
{
    switch (c->type) {
    case KM_MDR_USER_SCRAM_CREDENTIAL_RECORD: {
        const km_user_scram_credential_record *r = msg;
        km_scram *s = km_scram_from_record(r);
        return s ? scram(c, r->name, r->mechanism, s) : oom(c);
    }
    case KM_MDR_REMOVE_USER_SCRAM_CREDENTIAL_RECORD: {
        const km_remove_user_scram_credential_record *r = msg;
        return scram(c, r->name, r->mechanism, NULL);
    }
    case KM_MDR_ACCESS_CONTROL_ENTRY_RECORD: {
        const km_access_control_entry_record *r = msg;
        km_acl *a = km_acl_from_record(r);
        return a ? swap_map(c, &c->st->acls, KM_OBJ_ACL, r->id.b, 16, a) : oom(c);
    }
    case KM_MDR_REMOVE_ACCESS_CONTROL_ENTRY_RECORD:
        return remove_acl(c, msg);
    case KM_MDR_DELEGATION_TOKEN_RECORD: {
        const km_delegation_token_record *r = msg;
        km_token *t = km_token_from_record(r);
        return t ? token(c, r->token_id, t) : oom(c);
    }
    case KM_MDR_REMOVE_DELEGATION_TOKEN_RECORD:
        return token(c, ((const km_remove_delegation_token_record *)msg)->token_id, NULL);
    default:
        return km_apply_fail(c, "unknown metadata record type");
    }
}

static int apply_cluster(km_apply_ctx *c, const void *msg)
{
    switch (c->type) {
    case KM_MDR_REGISTER_BROKER_RECORD:
        return register_broker(c, msg);
    case KM_MDR_UNREGISTER_BROKER_RECORD:
        return swap_idvec(c, &c->st->brokers, KM_OBJ_BROKER, ((const km_unregister_broker_record *)msg)->broker_id,
                          NULL);
    case KM_MDR_FENCE_BROKER_RECORD: {
        const km_fence_broker_record *r = msg;
        return fence(c, r->id, r->epoch, true);
    }
    case KM_MDR_UNFENCE_BROKER_RECORD: {
        const km_unfence_broker_record *r = msg;
        return fence(c, r->id, r->epoch, false);
    }
    case KM_MDR_BROKER_REGISTRATION_CHANGE_RECORD:
        return broker_change(c, msg);
    case KM_MDR_REGISTER_CONTROLLER_RECORD:
        return register_controller(c, msg);
    default:
        return apply_objects(c, msg);
    }
}

int km_apply_msg(km_apply_ctx *c, const void *msg)
{
    const km_message_desc *md = c->desc && c->desc->api_key == c->type ? c->desc
                                                                        : km_find_message(KM_K_METADATA, c->type);
    if (!md || !km_metadata_record_type_name(c->type))
        return km_apply_fail(c, "unknown metadata record type");
    if (!km_version_in(md->valid, c->version))
        return km_apply_fail(c, "unsupported version (known: %d-%d)", md->valid.lo, md->valid.hi);
    switch (c->type) {
    case KM_MDR_TOPIC_RECORD: return km_apply_topic_record(c, msg);
    case KM_MDR_PARTITION_RECORD: return km_apply_partition_record(c, msg);
    case KM_MDR_PARTITION_CHANGE_RECORD: return km_apply_partition_change(c, msg);
    case KM_MDR_REMOVE_TOPIC_RECORD: return km_apply_remove_topic(c, msg);
    case KM_MDR_CONFIG_RECORD: return config(c, msg);
    case KM_MDR_CLIENT_QUOTA_RECORD: return client_quota(c, msg);
    case KM_MDR_FEATURE_LEVEL_RECORD: return feature_level(c, msg);
    case KM_MDR_PRODUCER_IDS_RECORD: return producer_ids(c, msg);
    case KM_MDR_ZK_MIGRATION_STATE_RECORD: return zk_migration(c, msg);
    case KM_MDR_NO_OP_RECORD: return 0;
    default: return apply_cluster(c, msg);
    }
}
