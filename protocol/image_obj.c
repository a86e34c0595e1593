/* image_obj.c - immutable refcounted image entities (brokers, controllers,
 * config resources, quotas, SCRAM credentials, ACLs, tokens).
 *
 * A change never edits an object: it builds a new one and swaps it in, so a
 * delta that still references the old one keeps an exact "before" state.
 */
#include "image_internal.h"

typedef struct obj_hdr {
    uint32_t refs;
    uint32_t kind;
    uint64_t pad;            /* keeps the object 16-aligned */
} obj_hdr;

static obj_hdr *hdr(const void *obj)
{
    return (obj_hdr *)((uint8_t *)(uintptr_t)obj - sizeof(obj_hdr));
}

void *km_obj_new(km_obj_kind kind, size_t size)
{
    obj_hdr *h = calloc(1, sizeof *h + size);
    if (!h)
        return NULL;
    h->refs = 1;
    h->kind = kind;
    return h + 1;
}

const void *km_obj_ref(const void *obj)
{
    if (obj)
        hdr(obj)->refs++;
    return obj;
}

km_obj_kind km_obj_kind_of(const void *obj)
{
    return (km_obj_kind)hdr(obj)->kind;
}

char *km_im_cstrdup(const char *s)
{
    if (!s)
        return NULL;
    size_t n = strlen(s) + 1;
    char *c = malloc(n);
    if (c)
        memcpy(c, s, n);
    return c;
}

char *km_im_strdup(km_str s)
{
    if (s.len < 0)
        return NULL;
    char *c = malloc((size_t)s.len + 1);
    if (!c)
        return NULL;
    if (s.len)
        memcpy(c, s.ptr, (size_t)s.len);
    c[s.len] = 0;
    return c;
}

/* One signed 64-bit half of a uuid, as Kafka's Uuid holds it (big-endian on the wire). */
static int64_t uuid_half(const km_uuid *u, int half)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | u->b[half * 8 + i];
    return (int64_t)v;
}

static int cmp_uuid_kafka(const void *pa, const void *pb)
{
    const km_uuid *a = pa, *b = pb;
    for (int half = 0; half < 2; half++) {
        int64_t x = uuid_half(a, half), y = uuid_half(b, half);
        if (x != y)
            return x < y ? -1 : 1;
    }
    return 0;
}

void km_im_sort_log_dirs(km_uuid *dirs, int32_t n)
{
    if (n > 1)
        qsort(dirs, (size_t)n, sizeof *dirs, cmp_uuid_kafka);
}

static void *dupmem(const void *p, size_t n)
{
    if (!n)
        return NULL;
    void *c = malloc(n);
    if (c)
        memcpy(c, p, n);
    return c;
}

/* ---- freeing ----------------------------------------------------------------------------- */

static void free_endpoints(const km_endpoint *e, int32_t n)
{
    for (int32_t i = 0; i < n; i++) {
        free((char *)e[i].name);
        free((char *)e[i].host);
    }
    free((km_endpoint *)e);
}

static void free_features(const km_feature_range *f, int32_t n)
{
    for (int32_t i = 0; i < n; i++)
        free((char *)f[i].name);
    free((km_feature_range *)f);
}

static void free_broker(km_broker *b)
{
    free_endpoints(b->endpoints, b->n_endpoints);
    free_features(b->features, b->n_features);
    free((char *)b->rack);
    free((km_uuid *)b->log_dirs.v);
}

static void free_config(km_config_res *r)
{
    for (int32_t i = 0; i < r->n; i++) {
        free((char *)r->kv[i].name);
        free((char *)r->kv[i].value);
    }
    free((km_config_kv *)r->kv);
    free((char *)r->name);
}

static void free_quota(km_client_quota *q)
{
    for (int32_t i = 0; i < q->n_parts; i++) {
        free((char *)q->parts[i].type);
        free((char *)q->parts[i].name);
    }
    for (int32_t i = 0; i < q->n; i++)
        free((char *)q->kv[i].key);
    free((km_quota_entity_part *)q->parts);
    free((km_quota_kv *)q->kv);
}

static void free_token(km_token *t)
{
    free((char *)t->token_id);
    free((char *)t->owner);
    free((char *)t->requester);
    for (int32_t i = 0; i < t->n_renewers; i++)
        free((char *)t->renewers[i]);
    free((char **)t->renewers);
}

static void free_contents(km_obj_kind kind, void *o)
{
    switch (kind) {
    case KM_OBJ_BROKER:
        free_broker(o);
        break;
    case KM_OBJ_CONTROLLER: {
        km_controller *c = o;
        free_endpoints(c->endpoints, c->n_endpoints);
        free_features(c->features, c->n_features);
        break;
    }
    case KM_OBJ_CONFIG:
        free_config(o);
        break;
    case KM_OBJ_QUOTA:
        free_quota(o);
        break;
    case KM_OBJ_SCRAM: {
        km_scram *s = o;
        free((char *)s->user);
        free((uint8_t *)s->salt.ptr);
        free((uint8_t *)s->stored_key.ptr);
        free((uint8_t *)s->server_key.ptr);
        break;
    }
    case KM_OBJ_ACL: {
        km_acl *a = o;
        free((char *)a->resource_name);
        free((char *)a->principal);
        free((char *)a->host);
        break;
    }
    case KM_OBJ_TOKEN:
        free_token(o);
        break;
    case KM_OBJ_N:
        break;
    }
}

void km_obj_unref(const void *obj)
{
    if (!obj)
        return;
    obj_hdr *h = hdr(obj);
    if (--h->refs)
        return;
    free_contents((km_obj_kind)h->kind, (void *)(uintptr_t)obj);
    free(h);
}

/* ---- construction from records ------------------------------------------------------------ */

#define COPY_ENDPOINTS(dst, ndst, src, ok)                                                   \
    do {                                                                                     \
        km_endpoint *e_ = (src).count > 0 ? calloc((size_t)(src).count, sizeof *e_) : NULL;  \
        (ndst) = e_ ? (src).count : 0;                                                       \
        (dst) = e_;                                                                          \
        if ((src).count > 0 && !e_)                                                          \
            (ok) = false;                                                                    \
        for (int32_t i_ = 0; e_ && i_ < (src).count; i_++) {                                 \
            e_[i_].name = km_im_strdup((src).items[i_].name);                                \
            e_[i_].host = km_im_strdup((src).items[i_].host);                                \
            e_[i_].port = (src).items[i_].port;                                              \
            e_[i_].security_protocol = (src).items[i_].security_protocol;                    \
            if (!e_[i_].name || !e_[i_].host)                                                \
                (ok) = false;                                                                \
        }                                                                                    \
    } while (0)

#define COPY_FEATURES(dst, ndst, src, ok)                                                        \
    do {                                                                                         \
        km_feature_range *f_ = (src).count > 0 ? calloc((size_t)(src).count, sizeof *f_) : NULL; \
        (ndst) = f_ ? (src).count : 0;                                                           \
        (dst) = f_;                                                                              \
        if ((src).count > 0 && !f_)                                                              \
            (ok) = false;                                                                        \
        for (int32_t i_ = 0; f_ && i_ < (src).count; i_++) {                                     \
            f_[i_].name = km_im_strdup((src).items[i_].name);                                    \
            f_[i_].min_version = (src).items[i_].min_supported_version;                          \
            f_[i_].max_version = (src).items[i_].max_supported_version;                          \
            if (!f_[i_].name)                                                                    \
                (ok) = false;                                                                    \
        }                                                                                        \
    } while (0)

km_broker *km_broker_from_record(const km_register_broker_record *r)
{
    km_broker *b = km_obj_new(KM_OBJ_BROKER, sizeof *b);
    if (!b)
        return NULL;
    bool ok = true;
    b->id = r->broker_id;
    b->incarnation_id = r->incarnation_id;
    b->epoch = r->broker_epoch;
    b->fenced = r->fenced;
    b->in_controlled_shutdown = r->in_controlled_shutdown;
    b->is_migrating_zk_broker = r->is_migrating_zk_broker;
    b->rack = km_im_strdup(r->rack);
    if (r->rack.len >= 0 && !b->rack)
        ok = false;
    COPY_ENDPOINTS(b->endpoints, b->n_endpoints, r->end_points, ok);
    COPY_FEATURES(b->features, b->n_features, r->features, ok);
    if (r->log_dirs.count > 0) {
        b->log_dirs.v = dupmem(r->log_dirs.items, (size_t)r->log_dirs.count * sizeof(km_uuid));
        b->log_dirs.n = b->log_dirs.v ? r->log_dirs.count : 0;
        ok = ok && b->log_dirs.v;
        km_im_sort_log_dirs((km_uuid *)b->log_dirs.v, b->log_dirs.n);
    }
    if (!ok) {
        km_obj_unref(b);
        return NULL;
    }
    return b;
}

/* A deep copy, for cloneWith-style changes (fencing, shutdown, log dirs). */
km_broker *km_broker_clone(const km_broker *s)
{
    km_broker *b = km_obj_new(KM_OBJ_BROKER, sizeof *b);
    if (!b)
        return NULL;
    *b = *s;
    b->rack = NULL;
    b->endpoints = NULL;
    b->features = NULL;
    b->log_dirs = (km_uuid_list){0};
    b->n_endpoints = b->n_features = 0;
    bool ok = true;
    if (s->rack && !(b->rack = km_im_cstrdup(s->rack)))
        ok = false;
    km_endpoint *e = s->n_endpoints ? calloc((size_t)s->n_endpoints, sizeof *e) : NULL;
    for (int32_t i = 0; e && i < s->n_endpoints; i++) {
        e[i] = s->endpoints[i];
        e[i].name = km_im_cstrdup(s->endpoints[i].name);
        e[i].host = km_im_cstrdup(s->endpoints[i].host);
        ok = ok && e[i].name && e[i].host;
    }
    b->endpoints = e;
    b->n_endpoints = e ? s->n_endpoints : 0;
    ok = ok && (e || !s->n_endpoints);
    km_feature_range *f = s->n_features ? calloc((size_t)s->n_features, sizeof *f) : NULL;
    for (int32_t i = 0; f && i < s->n_features; i++) {
        f[i] = s->features[i];
        f[i].name = km_im_cstrdup(s->features[i].name);
        ok = ok && f[i].name;
    }
    b->features = f;
    b->n_features = f ? s->n_features : 0;
    ok = ok && (f || !s->n_features);
    if (s->log_dirs.n) {
        b->log_dirs.v = dupmem(s->log_dirs.v, (size_t)s->log_dirs.n * sizeof(km_uuid));
        b->log_dirs.n = b->log_dirs.v ? s->log_dirs.n : 0;
        ok = ok && b->log_dirs.v;
    }
    if (!ok) {
        km_obj_unref(b);
        return NULL;
    }
    return b;
}

km_controller *km_controller_from_record(const km_register_controller_record *r)
{
    km_controller *c = km_obj_new(KM_OBJ_CONTROLLER, sizeof *c);
    if (!c)
        return NULL;
    bool ok = true;
    c->id = r->controller_id;
    c->incarnation_id = r->incarnation_id;
    c->zk_migration_ready = r->zk_migration_ready;
    COPY_ENDPOINTS(c->endpoints, c->n_endpoints, r->end_points, ok);
    COPY_FEATURES(c->features, c->n_features, r->features, ok);
    if (!ok) {
        km_obj_unref(c);
        return NULL;
    }
    return c;
}

km_scram *km_scram_from_record(const km_user_scram_credential_record *r)
{
    km_scram *s = km_obj_new(KM_OBJ_SCRAM, sizeof *s);
    if (!s)
        return NULL;
    s->user = km_im_strdup(r->name);
    s->mechanism = r->mechanism;
    s->iterations = r->iterations;
    const km_bytes *src[3] = {&r->salt, &r->stored_key, &r->server_key};
    km_bytes *dst[3] = {&s->salt, &s->stored_key, &s->server_key};
    bool ok = s->user != NULL;
    for (int i = 0; i < 3; i++) {
        dst[i]->len = src[i]->len < 0 ? 0 : src[i]->len;
        dst[i]->ptr = dupmem(src[i]->ptr, (size_t)dst[i]->len);
        ok = ok && (dst[i]->ptr || !dst[i]->len);
    }
    if (!ok) {
        km_obj_unref(s);
        return NULL;
    }
    return s;
}

km_acl *km_acl_from_record(const km_access_control_entry_record *r)
{
    km_acl *a = km_obj_new(KM_OBJ_ACL, sizeof *a);
    if (!a)
        return NULL;
    a->id = r->id;
    a->resource_type = r->resource_type;
    a->pattern_type = r->pattern_type;
    a->operation = r->operation;
    a->permission_type = r->permission_type;
    a->resource_name = km_im_strdup(r->resource_name);
    a->principal = km_im_strdup(r->principal);
    a->host = km_im_strdup(r->host);
    if (!a->resource_name || !a->principal || !a->host) {
        km_obj_unref(a);
        return NULL;
    }
    return a;
}

km_token *km_token_from_record(const km_delegation_token_record *r)
{
    km_token *t = km_obj_new(KM_OBJ_TOKEN, sizeof *t);
    if (!t)
        return NULL;
    t->token_id = km_im_strdup(r->token_id);
    t->owner = km_im_strdup(r->owner);
    t->requester = km_im_strdup(r->requester);
    t->issue_timestamp = r->issue_timestamp;
    t->max_timestamp = r->max_timestamp;
    t->expiration_timestamp = r->expiration_timestamp;
    bool ok = t->token_id && t->owner && t->requester;
    if (r->renewers.count > 0) {
        char **rv = calloc((size_t)r->renewers.count, sizeof *rv);
        for (int32_t i = 0; rv && i < r->renewers.count; i++)
            ok = (rv[i] = km_im_strdup(r->renewers.items[i])) && ok;
        t->renewers = (const char *const *)rv;
        t->n_renewers = rv ? r->renewers.count : 0;
        ok = ok && rv;
    }
    if (!ok) {
        km_obj_unref(t);
        return NULL;
    }
    return t;
}
