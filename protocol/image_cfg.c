/* image_cfg.c - config resources and client quotas (copy-on-write key/value
 * sets), their keys, and content equality of every object kind (used when a
 * snapshot's delta is worked out by comparing two images).
 */
#include "image_internal.h"

void km_config_key(int8_t type, const char *name, km_buf *out)
{
    km_buf_reset(out);
    km_buf_put_i8(out, type);
    km_buf_put(out, name, strlen(name));
}

void km_scram_key(int8_t mech, const char *user, km_buf *out)
{
    km_buf_reset(out);
    km_buf_put_i8(out, mech);
    km_buf_put(out, user, strlen(user));
}

const char *km_config_get(const km_config_res *res, const char *name)
{
    for (int32_t i = 0; res && i < res->n; i++)
        if (!strcmp(res->kv[i].name, name))
            return res->kv[i].value;
    return NULL;
}

static bool add_kv(km_config_res *r, km_config_kv *kv, const char *name, const char *value)
{
    kv[r->n].name = km_im_cstrdup(name);
    kv[r->n].value = km_im_cstrdup(value);
    r->n++;
    return kv[r->n - 1].name && kv[r->n - 1].value;
}

/* Copies res's entries except `name`, inserting (name, value) in order when value is given. */
static bool config_fill(km_config_res *r, const km_config_res *res, const char *name, const char *value)
{
    int32_t n_old = res ? res->n : 0;
    km_config_kv *kv = calloc((size_t)n_old + 1, sizeof *kv);
    if (!kv)
        return false;
    r->kv = kv;
    bool inserted = !value, ok = true;
    for (int32_t i = 0; i < n_old; i++) {
        int c = strcmp(res->kv[i].name, name);
        if (!inserted && c >= 0) {
            ok = add_kv(r, kv, name, value) && ok;
            inserted = true;
        }
        if (c == 0)
            continue;
        ok = add_kv(r, kv, res->kv[i].name, res->kv[i].value) && ok;
    }
    if (!inserted) {
        ok = add_kv(r, kv, name, value) && ok;
    }
    return ok;
}

km_config_res *km_config_with(const km_config_res *res, int8_t type, const char *rname,
                              const char *name, const char *value)
{
    km_config_res *r = km_obj_new(KM_OBJ_CONFIG, sizeof *r);
    if (!r)
        return NULL;
    r->type = type;
    r->name = km_im_cstrdup(rname);
    if (!r->name || !config_fill(r, res, name, value)) {
        km_obj_unref(r);
        return NULL;
    }
    return r;
}

/* ---- client quotas ------------------------------------------------------------------------ */

static int cmp_entity(const void *a, const void *b)
{
    const km_client_quota_record_entity_data *x = a, *y = b;
    int32_t n = x->entity_type.len < y->entity_type.len ? x->entity_type.len : y->entity_type.len;
    int c = memcmp(x->entity_type.ptr, y->entity_type.ptr, (size_t)(n < 0 ? 0 : n));
    return c ? c : (x->entity_type.len > y->entity_type.len) - (x->entity_type.len < y->entity_type.len);
}

/* Sorted copy of the record's entity parts (the record's order is not canonical). */
static km_client_quota_record_entity_data *sorted_entity(const km_client_quota_record *r)
{
    size_t n = r->entity.count > 0 ? (size_t)r->entity.count : 0;
    km_client_quota_record_entity_data *e = malloc((n ? n : 1) * sizeof *e);
    if (!e)
        return NULL;
    if (n)
        memcpy(e, r->entity.items, n * sizeof *e);
    qsort(e, n, sizeof *e, cmp_entity);
    return e;
}

int km_quota_key(const km_client_quota_record *r, km_buf *out)
{
    km_client_quota_record_entity_data *e = sorted_entity(r);
    if (!e)
        return -1;
    km_buf_reset(out);
    for (int32_t i = 0; i < r->entity.count; i++) {
        km_buf_put(out, e[i].entity_type.ptr, (size_t)(e[i].entity_type.len > 0 ? e[i].entity_type.len : 0));
        km_buf_put_i8(out, 0);
        if (e[i].entity_name.len < 0)
            km_buf_put_i8(out, 1);     /* the default entity, distinct from "" */
        else
            km_buf_put(out, e[i].entity_name.ptr, (size_t)e[i].entity_name.len);
        km_buf_put_i8(out, 0);
    }
    free(e);
    return out->oom ? -1 : 0;
}

static bool quota_parts(km_client_quota *q, const km_client_quota *old, const km_client_quota_record *r)
{
    int32_t n = old ? old->n_parts : (r->entity.count > 0 ? r->entity.count : 0);
    km_quota_entity_part *p = calloc((size_t)n + 1, sizeof *p);
    km_client_quota_record_entity_data *e = old ? NULL : sorted_entity(r);
    bool ok = p && (old || e);
    for (int32_t i = 0; ok && i < n; i++) {
        p[i].type = old ? km_im_cstrdup(old->parts[i].type) : km_im_strdup(e[i].entity_type);
        p[i].name = old ? km_im_cstrdup(old->parts[i].name) : km_im_strdup(e[i].entity_name);
        bool had_name = old ? old->parts[i].name != NULL : e[i].entity_name.len >= 0;
        ok = p[i].type && (p[i].name || !had_name);
        q->n_parts = i + 1;
    }
    free(e);
    q->parts = p;
    return ok;
}

static bool quota_values(km_client_quota *q, const km_client_quota *old, const km_client_quota_record *r,
                         const char *key)
{
    int32_t n_old = old ? old->n : 0;
    km_quota_kv *kv = calloc((size_t)n_old + 1, sizeof *kv);
    if (!kv)
        return false;
    q->kv = kv;
    bool inserted = r->remove, ok = true;
    for (int32_t i = 0; i < n_old; i++) {
        int c = strcmp(old->kv[i].key, key);
        if (!inserted && c >= 0) {
            kv[q->n] = (km_quota_kv){km_im_cstrdup(key), r->value};
            ok = kv[q->n++].key && ok;
            inserted = true;
        }
        if (c == 0)
            continue;
        kv[q->n] = (km_quota_kv){km_im_cstrdup(old->kv[i].key), old->kv[i].value};
        ok = kv[q->n++].key && ok;
    }
    if (!inserted) {
        kv[q->n] = (km_quota_kv){km_im_cstrdup(key), r->value};
        ok = kv[q->n++].key && ok;
    }
    return ok;
}

km_client_quota *km_quota_with(const km_client_quota *old, const km_client_quota_record *r)
{
    km_client_quota *q = km_obj_new(KM_OBJ_QUOTA, sizeof *q);
    char *key = q ? km_im_strdup(r->key) : NULL;
    if (!key || !quota_parts(q, old, r) || !quota_values(q, old, r, key)) {
        free(key);
        km_obj_unref(q);
        return NULL;
    }
    free(key);
    return q;
}

/* ---- equality ------------------------------------------------------------------------------ */

static bool str_eq(const char *a, const char *b)
{
    return a == b || (a && b && !strcmp(a, b));
}

static bool endpoints_eq(const km_endpoint *a, int32_t na, const km_endpoint *b, int32_t nb)
{
    if (na != nb)
        return false;
    for (int32_t i = 0; i < na; i++)
        if (!str_eq(a[i].name, b[i].name) || !str_eq(a[i].host, b[i].host) || a[i].port != b[i].port ||
            a[i].security_protocol != b[i].security_protocol)
            return false;
    return true;
}

static bool features_eq(const km_feature_range *a, int32_t na, const km_feature_range *b, int32_t nb)
{
    if (na != nb)
        return false;
    for (int32_t i = 0; i < na; i++)
        if (!str_eq(a[i].name, b[i].name) || a[i].min_version != b[i].min_version ||
            a[i].max_version != b[i].max_version)
            return false;
    return true;
}

static bool bytes_eq(km_bytes a, km_bytes b)
{
    return a.len == b.len && (!a.len || !memcmp(a.ptr, b.ptr, (size_t)a.len));
}

static bool broker_eq(const km_broker *a, const km_broker *b)
{
    return a->id == b->id && !memcmp(&a->incarnation_id, &b->incarnation_id, 16) && a->epoch == b->epoch &&
           a->fenced == b->fenced && a->in_controlled_shutdown == b->in_controlled_shutdown &&
           a->is_migrating_zk_broker == b->is_migrating_zk_broker && str_eq(a->rack, b->rack) &&
           endpoints_eq(a->endpoints, a->n_endpoints, b->endpoints, b->n_endpoints) &&
           features_eq(a->features, a->n_features, b->features, b->n_features) &&
           a->log_dirs.n == b->log_dirs.n &&
           (!a->log_dirs.n || !memcmp(a->log_dirs.v, b->log_dirs.v, (size_t)a->log_dirs.n * 16));
}

static bool config_eq(const km_config_res *a, const km_config_res *b)
{
    if (a->type != b->type || !str_eq(a->name, b->name) || a->n != b->n)
        return false;
    for (int32_t i = 0; i < a->n; i++)
        if (!str_eq(a->kv[i].name, b->kv[i].name) || !str_eq(a->kv[i].value, b->kv[i].value))
            return false;
    return true;
}

static bool quota_eq(const km_client_quota *a, const km_client_quota *b)
{
    if (a->n_parts != b->n_parts || a->n != b->n)
        return false;
    for (int32_t i = 0; i < a->n_parts; i++)
        if (!str_eq(a->parts[i].type, b->parts[i].type) || !str_eq(a->parts[i].name, b->parts[i].name))
            return false;
    for (int32_t i = 0; i < a->n; i++)
        if (!str_eq(a->kv[i].key, b->kv[i].key) || a->kv[i].value != b->kv[i].value)
            return false;
    return true;
}

static bool token_eq(const km_token *a, const km_token *b)
{
    if (!str_eq(a->token_id, b->token_id) || !str_eq(a->owner, b->owner) || !str_eq(a->requester, b->requester) ||
        a->issue_timestamp != b->issue_timestamp || a->max_timestamp != b->max_timestamp ||
        a->expiration_timestamp != b->expiration_timestamp || a->n_renewers != b->n_renewers)
        return false;
    for (int32_t i = 0; i < a->n_renewers; i++)
        if (!str_eq(a->renewers[i], b->renewers[i]))
            return false;
    return true;
}

static bool kind_eq(km_obj_kind k, const void *x, const void *y)
{
    switch (k) {
    case KM_OBJ_BROKER:
        return broker_eq(x, y);
    case KM_OBJ_CONTROLLER: {
        const km_controller *a = x, *b = y;
        return a->id == b->id && !memcmp(&a->incarnation_id, &b->incarnation_id, 16) &&
               a->zk_migration_ready == b->zk_migration_ready &&
               endpoints_eq(a->endpoints, a->n_endpoints, b->endpoints, b->n_endpoints) &&
               features_eq(a->features, a->n_features, b->features, b->n_features);
    }
    case KM_OBJ_CONFIG:
        return config_eq(x, y);
    case KM_OBJ_QUOTA:
        return quota_eq(x, y);
    case KM_OBJ_SCRAM: {
        const km_scram *a = x, *b = y;
        return str_eq(a->user, b->user) && a->mechanism == b->mechanism && a->iterations == b->iterations &&
               bytes_eq(a->salt, b->salt) && bytes_eq(a->stored_key, b->stored_key) &&
               bytes_eq(a->server_key, b->server_key);
    }
    case KM_OBJ_ACL: {
        const km_acl *a = x, *b = y;
        return !memcmp(&a->id, &b->id, 16) && a->resource_type == b->resource_type &&
               str_eq(a->resource_name, b->resource_name) && a->pattern_type == b->pattern_type &&
               str_eq(a->principal, b->principal) && str_eq(a->host, b->host) &&
               a->operation == b->operation && a->permission_type == b->permission_type;
    }
    case KM_OBJ_TOKEN:
        return token_eq(x, y);
    case KM_OBJ_N:
        break;
    }
    return false;
}

bool km_obj_equal(const void *a, const void *b)
{
    if (a == b)
        return true;
    if (!a || !b || km_obj_kind_of(a) != km_obj_kind_of(b))
        return false;
    return kind_eq(km_obj_kind_of(a), a, b);
}
