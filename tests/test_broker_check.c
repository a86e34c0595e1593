/* The rig's convergence check: every simulator's state equals the image. */
#include "test_broker_rig.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static bool miss(brig *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->why, sizeof r->why, fmt, ap);
    va_end(ap);
    return false;
}

static bool ints_eq(json_t *arr, km_i32_list l)
{
    if (json_array_size(arr) != (size_t)(l.n > 0 ? l.n : 0))
        return false;
    for (int32_t i = 0; i < l.n; i++)
        if (json_integer_value(json_array_get(arr, (size_t)i)) != l.v[i])
            return false;
    return true;
}

static json_int_t geti(json_t *o, const char *k) { return json_integer_value(json_object_get(o, k)); }

static bool hosts(const km_partition *p, int32_t id)
{
    for (int32_t i = 0; i < p->replicas.n; i++)
        if (p->replicas.v[i] == id)
            return true;
    return false;
}

static json_t *find_part(json_t *parts, const char *topic, int32_t p)
{
    size_t i;
    json_t *x;
    json_array_foreach(parts, i, x) {
        if (geti(x, "partition") == p && !strcmp(json_string_value(json_object_get(x, "topic")), topic))
            return x;
    }
    return NULL;
}

static json_t *find_topic(json_t *topics, const char *name)
{
    size_t i;
    json_t *x;
    json_array_foreach(topics, i, x) {
        if (!strcmp(json_string_value(json_object_get(x, "name")), name))
            return x;
    }
    return NULL;
}

static bool id_eq(json_t *j, km_uuid id)
{
    char b64[23];
    km_uuid_to_base64(id, b64);
    return json_is_string(j) && !strcmp(json_string_value(j), b64);
}

static bool check_hosted(brig *r, int32_t b, json_t *parts, const km_topic *t, const km_partition *p, size_t *n)
{
    const char *name = km_topic_name(t);
    if (!hosts(p, b))
        return true;
    (*n)++;
    json_t *x = find_part(parts, name, p->id);
    if (!x)
        return miss(r, "broker %d does not host %s-%d", b, name, p->id);
    if (geti(x, "leader") != p->leader || geti(x, "leaderEpoch") != p->leader_epoch ||
        geti(x, "partitionEpoch") != p->partition_epoch || !ints_eq(json_object_get(x, "isr"), p->isr) ||
        !ints_eq(json_object_get(x, "replicas"), p->replicas) ||
        (!r->no_lisr_topic_ids && !id_eq(json_object_get(x, "topicId"), km_topic_id(t))))
        return miss(r, "broker %d: %s-%d is leader %d epoch %d/%d, image says %d epoch %d/%d", b, name, p->id,
                    (int)geti(x, "leader"), (int)geti(x, "leaderEpoch"), (int)geti(x, "partitionEpoch"), p->leader,
                    p->leader_epoch, p->partition_epoch);
    return true;
}

static bool check_cached(brig *r, int32_t b, json_t *topic, const km_topic *t, const km_partition *p)
{
    json_t *x = NULL, *y;
    size_t i;
    json_array_foreach(json_object_get(topic, "partitions"), i, y) {
        if (geti(y, "partition") == p->id)
            x = y;
    }
    if (!x || geti(x, "leader") != p->leader || geti(x, "leaderEpoch") != p->leader_epoch ||
        geti(x, "zkVersion") != p->partition_epoch || !ints_eq(json_object_get(x, "isr"), p->isr) ||
        !ints_eq(json_object_get(x, "replicas"), p->replicas))
        return miss(r, "broker %d: metadata cache for %s-%d differs from the image", b, km_topic_name(t), p->id);
    return true;
}

static bool check_topics(brig *r, int32_t b, json_t *st)
{
    json_t *parts = json_object_get(st, "partitions");
    json_t *topics = json_object_get(json_object_get(st, "metadata"), "topics");
    size_t it = 0, hosted = 0;
    const km_topic *t;
    if (json_array_size(topics) != km_image_topic_count(r->img))
        return miss(r, "broker %d caches %zu topics, the image has %zu", b, json_array_size(topics),
                    km_image_topic_count(r->img));
    while ((t = km_image_next_topic(r->img, &it))) {
        json_t *topic = find_topic(topics, km_topic_name(t));
        if (!topic || (!r->no_umr_topic_ids && !id_eq(json_object_get(topic, "topicId"), km_topic_id(t))))
            return miss(r, "broker %d: topic %s missing from its cache (or another id)", b, km_topic_name(t));
        if (json_array_size(json_object_get(topic, "partitions")) != (size_t)km_topic_partition_count(t))
            return miss(r, "broker %d: topic %s has other partitions", b, km_topic_name(t));
        for (int32_t i = 0; i < km_topic_partition_count(t); i++) {
            km_partition p;
            if (km_topic_partition(t, i, &p) &&
                (!check_hosted(r, b, parts, t, &p, &hosted) || !check_cached(r, b, topic, t, &p)))
                return false;
        }
    }
    if (json_array_size(parts) != hosted)
        return miss(r, "broker %d hosts %zu partitions, the image gives it %zu", b, json_array_size(parts), hosted);
    return true;
}

static bool check_brokers(brig *r, int32_t b, json_t *st)
{
    json_t *md = json_object_get(st, "metadata");
    json_t *brokers = json_object_get(md, "brokers");
    if (geti(md, "controllerId") != r->controller_id ||
        (!r->no_umr_kraft && !json_is_true(json_object_get(md, "isKRaftController"))) ||
        geti(st, "controllerEpoch") != r->zk_epoch)
        return miss(r, "broker %d: controller %d epoch %d", b, (int)geti(md, "controllerId"),
                    (int)geti(st, "controllerEpoch"));
    if (json_array_size(brokers) != km_image_broker_count(r->img))
        return miss(r, "broker %d knows %zu live brokers, the image has %zu", b, json_array_size(brokers),
                    km_image_broker_count(r->img));
    size_t it = 0, i = 0;
    const km_broker *kb;
    while ((kb = km_image_next_broker(r->img, &it)))
        if (geti(json_array_get(brokers, i++), "id") != kb->id)
            return miss(r, "broker %d: live broker %d missing", b, kb->id);
    return true;
}

bool brig_converged(brig *r)
{
    if (km_image_offset(r->img) + 1 < km_metalog_writer_next_offset(r->w))
        return miss(r, "the image is at offset %lld, the log ends at %lld", (long long)km_image_offset(r->img),
                    (long long)km_metalog_writer_next_offset(r->w) - 1);
    if (r->external_idle && !r->external_idle(r))
        return false;
    if (!r->external_idle && !km_bprop_channel_count(r->prop))
        return miss(r, "no channels");
    for (int i = 0; i < r->nsims; i++) {
        int32_t b = km_bsim_broker_id(r->sims[i]);
        const km_broker *kb = km_image_broker(r->img, b);
        if (!kb || kb->fenced || !kb->is_migrating_zk_broker)
            continue; /* not propagated to */
        km_bchan *ch = r->external_idle ? NULL : km_bprop_channel(r->prop, b);
        if (!r->external_idle && (!ch || !km_bchan_ready(ch) || km_bchan_pending(ch)))
            return miss(r, "broker %d: channel %s", b, !ch ? "missing" : !km_bchan_ready(ch) ? "not ready" : "busy");
        json_t *st = km_bsim_state_json(r->sims[i]);
        bool ok = check_brokers(r, b, st) && check_topics(r, b, st);
        if (ok && json_integer_value(json_object_get(st, "rejected")))
            ok = miss(r, "broker %d rejected a request: %s", b,
                      json_string_value(json_object_get(st, "lastRejection")));
        json_decref(st);
        if (!ok)
            return false;
    }
    return true;
}

bool brig_no_strays(brig *r)
{
    for (int i = 0; i < r->nsims; i++) {
        int32_t b = km_bsim_broker_id(r->sims[i]);
        json_t *st = km_bsim_state_json(r->sims[i]);
        size_t k;
        json_t *x;
        bool ok = true;
        json_array_foreach(json_object_get(st, "partitions"), k, x) {
            const char *name = json_string_value(json_object_get(x, "topic"));
            const km_topic *t = km_image_topic_by_name(r->img, name);
            km_partition p;
            if (!t || !km_topic_partition(t, (int32_t)geti(x, "partition"), &p) || !hosts(&p, b) ||
                (!r->no_lisr_topic_ids && !id_eq(json_object_get(x, "topicId"), km_topic_id(t)))) {
                ok = miss(r, "broker %d still hosts %s-%d, which the image does not give it", b, name,
                          (int)geti(x, "partition"));
                break;
            }
        }
        json_decref(st);
        if (!ok)
            return false;
    }
    return true;
}
