/* image_topics.c - replay of TopicRecord, PartitionRecord, PartitionChangeRecord
 * and RemoveTopicRecord, as Kafka 3.9's TopicsDelta / PartitionRegistration do.
 */
#include "image_internal.h"

#include <inttypes.h>
#include <string.h>

static int oom(const km_apply_ctx *c)
{
    return km_apply_fail(c, "out of memory");
}

static int intern(km_apply_ctx *c, const void *data, int32_t count, size_t elem, uint32_t *id)
{
    *id = count > 0 ? km_pool_intern(&c->img->pool, data, (size_t)count * elem) : 0;
    return *id == UINT32_MAX ? oom(c) : 0;
}

static km_topic *find_topic(const km_apply_ctx *c, km_uuid id)
{
    return km_map_get(&c->st->topics_by_id, id.b, 16);
}

static int unknown_topic(const km_apply_ctx *c, km_uuid id)
{
    char idb[23];
    km_uuid_to_base64(id, idb);
    return km_apply_fail(c, "unknown topic id %s", idb);
}

static int note_topic(km_apply_ctx *c, const km_topic *t, bool had, int32_t old_n, bool has)
{
    if (!c->delta)
        return 0;
    if (km_delta_note_topic(c->delta, t->id, t->name, had, old_n, has, has ? t->n_parts : 0) < 0)
        return oom(c);
    return 0;
}

static int note_part(km_apply_ctx *c, const km_topic *t, int32_t pid, const km_part *old, const km_part *new_)
{
    if (!c->delta)
        return 0;
    if (km_delta_note_part(c->delta, &c->img->pool, t->id, t->name, pid, old, new_) < 0)
        return oom(c);
    return 0;
}

/* Drops every partition of t, noting each as deleted. */
static int drop_partitions(km_apply_ctx *c, km_topic *t)
{
    for (int32_t i = 0; i < t->n_parts; i++) {
        km_part *pt = &t->parts[i];
        if (!pt->present)
            continue;
        if (note_part(c, t, i, pt, NULL) < 0)
            return -1;
        km_part_release(&c->img->pool, pt);
        pt->present = false;
        t->n_present--;
        c->st->n_partitions--;
    }
    return 0;
}

static void topic_destroy(km_apply_ctx *c, km_topic *t)
{
    km_map_del(&c->st->topics_by_id, t->id.b, 16);
    if (km_map_get(&c->st->topics_by_name, t->name, strlen(t->name)) == t)
        km_map_del(&c->st->topics_by_name, t->name, strlen(t->name));
    free(t->parts);
    free(t->name);
    free(t);
}

/* Kafka's controller gives each topic a fresh id.  A second name for one would make the delta
 * (keyed by id) carry the old name with the new partitions, so the brokers would never hear of
 * the new topic while the image holds it; Kafka's image cannot hold it either
 * (TopicsDelta.replay(TopicRecord) re-keys the id, apply() keeps the old name in topicsByName). */
static bool same_name(const km_topic *t, km_str name)
{
    size_t n = name.len > 0 ? (size_t)name.len : 0;
    return strlen(t->name) == n && !memcmp(t->name, name.ptr, n);
}

static int id_reused(const km_apply_ctx *c, const km_topic_record *r, const km_topic *old)
{
    char id[23];
    km_uuid_to_base64(r->topic_id, id);
    return km_apply_fail(c, "topic \"%.*s\": id %s already belongs to topic \"%s\"",
                         r->name.len > 0 ? (int)r->name.len : 0, r->name.ptr ? r->name.ptr : "", id, old->name);
}

/* TopicRecord: a new empty topic.  A record for an id that exists under the same name replaces
 * it with an empty topic, as TopicsDelta does; under another name it is refused (above). */
int km_apply_topic_record(km_apply_ctx *c, const void *msg)
{
    const km_topic_record *r = msg;
    km_topic *old = find_topic(c, r->topic_id);
    if (old && !same_name(old, r->name)) /* before anything changes: the image stays as it was */
        return id_reused(c, r, old);
    if (old) {
        int32_t n = old->n_parts;
        if (drop_partitions(c, old) < 0 || note_topic(c, old, true, n, false) < 0)
            return -1;
        topic_destroy(c, old);
    }
    km_topic *t = calloc(1, sizeof *t);
    if (!t || !(t->name = km_im_strdup(r->name))) {
        free(t);
        return oom(c);
    }
    t->id = r->topic_id;
    t->pool = &c->img->pool;
    void *prev;
    if (km_map_put(&c->st->topics_by_id, t->id.b, 16, t, &prev) < 0 ||
        km_map_put(&c->st->topics_by_name, t->name, strlen(t->name), t, &prev) < 0) {
        km_map_del(&c->st->topics_by_id, t->id.b, 16);
        free(t->name);
        free(t);
        return oom(c);
    }
    return note_topic(c, t, false, 0, true);
}

static int slot_for(km_apply_ctx *c, km_topic *t, int32_t pid, km_part **out)
{
    if (pid < 0 || pid > KM_IMAGE_MAX_PARTITION_ID)
        return km_apply_fail(c, "partition id %" PRId32 " out of range (0-%d)", pid, KM_IMAGE_MAX_PARTITION_ID);
    if (pid >= t->cap_parts) {
        int32_t nc = t->cap_parts ? t->cap_parts : 1;
        while (nc <= pid)
            nc = nc > INT32_MAX / 2 ? INT32_MAX : nc * 2;
        km_part *np = realloc(t->parts, (size_t)nc * sizeof *np);
        if (!np)
            return oom(c);
        memset(np + t->cap_parts, 0, (size_t)(nc - t->cap_parts) * sizeof *np);
        t->parts = np;
        t->cap_parts = nc;
    }
    if (pid >= t->n_parts)
        t->n_parts = pid + 1;
    *out = &t->parts[pid];
    return 0;
}

static int migrating_dirs(km_apply_ctx *c, int32_t n, uint32_t *id)
{
    km_uuid *d = n > 0 ? malloc((size_t)n * sizeof *d) : NULL;
    if (n > 0 && !d)
        return oom(c);
    for (int32_t i = 0; i < n; i++)
        d[i] = KM_DIR_MIGRATING;
    int rc = intern(c, d, n, 16, id);
    free(d);
    return rc;
}

static int check_lrs(km_apply_ctx *c, int8_t lrs)
{
    if (lrs != KM_LRS_RECOVERED && lrs != KM_LRS_RECOVERING)
        return km_apply_fail(c, "unknown leader recovery state %d", lrs);
    return 0;
}

static int part_from_record(km_apply_ctx *c, const km_partition_record *r, km_part *p)
{
    memset(p, 0, sizeof *p);
    if (r->directories.count > 0 && r->directories.count != r->replicas.count)
        return km_apply_fail(c, "%" PRId32 " directories for %" PRId32 " replicas", r->directories.count,
                             r->replicas.count);
    if (check_lrs(c, r->leader_recovery_state) < 0)
        return -1;
    p->leader = r->leader;
    p->leader_epoch = r->leader_epoch;
    p->partition_epoch = r->partition_epoch;
    p->lrs = r->leader_recovery_state;
    p->present = true;
    if (intern(c, r->replicas.items, r->replicas.count, 4, &p->replicas) < 0)
        goto fail;
    /* A full ISR is the common case: same list, no second hash. */
    if (r->isr.count == r->replicas.count && r->isr.count > 0 &&
        !memcmp(r->isr.items, r->replicas.items, (size_t)r->isr.count * 4)) {
        km_pool_ref(&c->img->pool, p->replicas);
        p->isr = p->replicas;
    } else if (intern(c, r->isr.items, r->isr.count, 4, &p->isr) < 0) {
        goto fail;
    }
    if (intern(c, r->removing_replicas.items, r->removing_replicas.count, 4, &p->removing) < 0 ||
        intern(c, r->adding_replicas.items, r->adding_replicas.count, 4, &p->adding) < 0 ||
        intern(c, r->eligible_leader_replicas.items, r->eligible_leader_replicas.count, 4, &p->elr) < 0 ||
        intern(c, r->last_known_elr.items, r->last_known_elr.count, 4, &p->lkelr) < 0)
        goto fail;
    int rc = r->directories.count > 0 ? intern(c, r->directories.items, r->directories.count, 16, &p->dirs)
                                      : migrating_dirs(c, r->replicas.count, &p->dirs);
    if (rc < 0)
        goto fail;
    return 0;
fail:
    km_part_release(&c->img->pool, p);
    return -1;
}

int km_apply_partition_record(km_apply_ctx *c, const void *msg)
{
    const km_partition_record *r = msg;
    km_topic *t = find_topic(c, r->topic_id);
    if (!t)
        return unknown_topic(c, r->topic_id);
    km_part np, *slot = NULL;
    if (part_from_record(c, r, &np) < 0)
        return -1;
    int32_t old_n = t->n_parts;
    if (slot_for(c, t, r->partition_id, &slot) < 0) {
        km_part_release(&c->img->pool, &np);
        return -1;
    }
    bool existed = slot->present;
    if (note_part(c, t, r->partition_id, existed ? slot : NULL, &np) < 0) {
        km_part_release(&c->img->pool, &np);
        return -1;
    }
    if (existed)
        km_part_release(&c->img->pool, slot);
    else {
        t->n_present++;
        c->st->n_partitions++;
    }
    *slot = np;
    return note_topic(c, t, true, old_n, true);
}

static int change_list(km_apply_ctx *c, const void *items, int32_t count, size_t elem, uint32_t cur, uint32_t *out)
{
    if (count < 0) {         /* null: no change */
        km_pool_ref(&c->img->pool, cur);
        *out = cur;
        return 0;
    }
    return intern(c, items, count, elem, out);
}

static bool all_migrating(const km_uuid *d, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        if (memcmp(&d[i], &KM_DIR_MIGRATING, sizeof d[i]))
            return false;
    return true;
}

/* PartitionRegistration.merge as of Kafka 3.7.1 (KAFKA-16583; 3.9 unchanged): the record's directories when it
 * has the field, else the current ones; when those are empty or all MIGRATING (a replica set from before 3.7)
 * they become MIGRATING for every new replica, so a reassignment resizes them instead of failing. Any other
 * list whose length differs from the new replicas is an error (the PartitionRegistration constructor). */
static int merge_dirs(km_apply_ctx *c, const km_part *old, const km_partition_change_record *r, km_part *p)
{
    if (r->replicas.count >= 0 && r->directories.count > 0 && r->replicas.count != r->directories.count)
        return km_apply_fail(c, "%" PRId32 " directories for %" PRId32 " replicas", r->directories.count,
                             r->replicas.count);
    uint32_t nrl, dl;
    km_pool_data(&c->img->pool, p->replicas, &nrl);
    const km_uuid *dirs = km_pool_data(&c->img->pool, old->dirs, &dl);
    if (r->directories.count >= 0) {
        dirs = r->directories.items;
        dl = (uint32_t)r->directories.count * 16;
    }
    if (all_migrating(dirs, dl / 16))
        return migrating_dirs(c, (int32_t)(nrl / 4), &p->dirs);
    if (dl / 16 != nrl / 4)
        return km_apply_fail(c, "the lengths for replicas (%u) and directories (%u) do not match", nrl / 4, dl / 16);
    if (r->directories.count >= 0)
        return intern(c, r->directories.items, r->directories.count, 16, &p->dirs);
    return change_list(c, NULL, -1, 16, old->dirs, &p->dirs);
}

/* PartitionRegistration.merge. */
static int merge(km_apply_ctx *c, const km_part *old, const km_partition_change_record *r, km_part *p)
{
    memset(p, 0, sizeof *p);
    p->present = true;
    p->leader = old->leader;
    p->leader_epoch = old->leader_epoch;
    if (r->leader != KM_NO_LEADER_CHANGE) {
        p->leader = r->leader;
        p->leader_epoch = old->leader_epoch + 1;
    }
    p->partition_epoch = old->partition_epoch + 1;
    p->lrs = old->lrs;
    if (r->leader_recovery_state != -1) {
        if (check_lrs(c, r->leader_recovery_state) < 0)
            return -1;
        p->lrs = r->leader_recovery_state;
    }
    if (change_list(c, r->replicas.items, r->replicas.count, 4, old->replicas, &p->replicas) < 0 ||
        change_list(c, r->isr.items, r->isr.count, 4, old->isr, &p->isr) < 0 ||
        change_list(c, r->removing_replicas.items, r->removing_replicas.count, 4, old->removing, &p->removing) < 0 ||
        change_list(c, r->adding_replicas.items, r->adding_replicas.count, 4, old->adding, &p->adding) < 0 ||
        change_list(c, r->eligible_leader_replicas.items, r->eligible_leader_replicas.count, 4, old->elr, &p->elr) < 0 ||
        change_list(c, r->last_known_elr.items, r->last_known_elr.count, 4, old->lkelr, &p->lkelr) < 0 ||
        merge_dirs(c, old, r, p) < 0) {
        km_part_release(&c->img->pool, p);
        return -1;
    }
    return 0;
}

int km_apply_partition_change(km_apply_ctx *c, const void *msg)
{
    const km_partition_change_record *r = msg;
    km_topic *t = find_topic(c, r->topic_id);
    if (!t)
        return unknown_topic(c, r->topic_id);
    if (r->partition_id < 0 || r->partition_id >= t->n_parts || !t->parts[r->partition_id].present) {
        char idb[23];
        km_uuid_to_base64(r->topic_id, idb);
        return km_apply_fail(c, "unknown partition %s-%" PRId32 " (topic %s)", t->name, r->partition_id, idb);
    }
    km_part *slot = &t->parts[r->partition_id], np;
    if (merge(c, slot, r, &np) < 0)
        return -1;
    if (note_part(c, t, r->partition_id, slot, &np) < 0) {
        km_part_release(&c->img->pool, &np);
        return -1;
    }
    km_part_release(&c->img->pool, slot);
    *slot = np;
    return 0;
}

/* Drops the topic's configs too (MetadataDelta.replay(RemoveTopicRecord)). */
static int drop_topic_configs(km_apply_ctx *c, const char *name)
{
    km_buf k;
    km_buf_init(&k);
    km_config_key(KM_CFG_TOPIC, name, &k);
    if (k.oom) {
        km_buf_free(&k);
        return oom(c);
    }
    int rc = 0;
    const km_config_res *res = km_map_del(&c->st->configs, k.data, k.len);
    if (res && c->delta && km_delta_note_obj(c->delta, KM_OBJ_CONFIG, k.data, k.len, 0, res, NULL) < 0)
        rc = oom(c);
    km_obj_unref(res);
    km_buf_free(&k);
    return rc;
}

int km_apply_remove_topic(km_apply_ctx *c, const void *msg)
{
    const km_remove_topic_record *r = msg;
    km_topic *t = find_topic(c, r->topic_id);
    if (!t) {
        char idb[23];
        km_uuid_to_base64(r->topic_id, idb);
        return km_apply_fail(c, "failed to find topic %s", idb);
    }
    int32_t n = t->n_parts;
    if (drop_partitions(c, t) < 0 || note_topic(c, t, true, n, false) < 0 || drop_topic_configs(c, t->name) < 0)
        return -1;
    topic_destroy(c, t);
    return 0;
}
