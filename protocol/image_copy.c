/* km_image_copy_cluster: the brokers and partitions of an image in a new image of their own, so that another
 * thread (the daemon's continuous verifier) may read them while the event loop keeps applying records. */
#include "image_internal.h"

#include <stdlib.h>
#include <string.h>

/* A list of src's pool interned again in dst (ids are per pool). */
static int reintern(km_pool *dst, const km_pool *src, uint32_t *id)
{
    uint32_t len;
    const void *data = km_pool_data(src, *id, &len);
    *id = km_pool_intern(dst, data, len);
    return *id == UINT32_MAX ? -1 : 0;
}

static int copy_part(km_pool *dst, const km_pool *src, km_part *pt)
{
    uint32_t *l[] = {&pt->replicas, &pt->isr, &pt->removing, &pt->adding, &pt->elr, &pt->lkelr, &pt->dirs};
    size_t i = 0;
    for (; i < sizeof l / sizeof l[0]; i++)
        if (reintern(dst, src, l[i]) < 0)
            break;
    if (i == sizeof l / sizeof l[0])
        return 0;
    for (size_t j = 0; j < sizeof l / sizeof l[0]; j++) /* drop what was interned, forget the rest */
        if (j < i)
            km_pool_unref(dst, *l[j]);
    memset(pt, 0, sizeof *pt);
    return -1;
}

static int copy_topic(km_image *c, const km_image *src, const km_topic *t)
{
    km_topic *n = calloc(1, sizeof *n);
    if (!n)
        return -1;
    *n = (km_topic){.id = t->id, .n_parts = t->n_parts, .cap_parts = t->n_parts, .n_present = t->n_present,
                    .pool = &c->pool, .name = km_im_cstrdup(t->name),
                    .parts = calloc(t->n_parts ? (size_t)t->n_parts : 1, sizeof *n->parts)};
    void *prev;
    if (!n->name || !n->parts || km_map_put(&c->st->topics_by_id, n->id.b, 16, n, &prev) < 0) {
        free(n->name);
        free(n->parts);
        free(n);
        return -1;
    }
    if (km_map_put(&c->st->topics_by_name, n->name, strlen(n->name), n, &prev) < 0)
        return -1; /* owned by topics_by_id: freed with the copy */
    for (int32_t i = 0; i < t->n_parts; i++) {
        if (!t->parts[i].present)
            continue;
        n->parts[i] = t->parts[i];
        if (copy_part(&c->pool, &src->pool, &n->parts[i]) < 0)
            return -1;
    }
    c->st->n_partitions += (size_t)t->n_present;
    return 0;
}

static int copy_brokers(km_image *c, const km_image *src)
{
    for (size_t i = 0; i < src->st->brokers.n; i++) {
        km_broker *b = km_broker_clone(src->st->brokers.v[i].obj);
        bool oom = false;
        if (!b)
            return -1;
        km_idvec_set(&c->st->brokers, src->st->brokers.v[i].id, b, &oom);
        if (oom) {
            km_obj_unref(b);
            return -1;
        }
    }
    return 0;
}

km_image *km_image_copy_cluster(const km_image *src, km_err *err)
{
    km_image *c = km_image_new();
    if (!c || km_image_set_cluster_id(c, src->cluster_id, err) < 0) {
        km_image_free(c);
        return km_fail(err, "image: out of memory copying it"), NULL;
    }
    c->offset = src->offset;
    c->epoch = src->epoch;
    c->raft_leader = src->raft_leader;
    c->raft_leader_epoch = src->raft_leader_epoch;
    int rc = copy_brokers(c, src);
    size_t it = 0;
    for (km_map_slot *s; rc == 0 && (s = km_map_next(&src->st->topics_by_id, &it));)
        rc = copy_topic(c, src, s->val);
    if (rc < 0) {
        km_image_free(c);
        return km_fail(err, "image: out of memory copying it"), NULL;
    }
    return c;
}
