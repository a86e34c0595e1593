/* The slice of the partitions one run checks (km_verify_opts.after_topic, max_partitions): topics in name order,
 * so that a cursor (topic, partition) keeps its meaning while topics are created or deleted between the cycles
 * of one pass; partitions by id. */
#include "verify_internal.h"

#include <stdlib.h>
#include <string.h>

static int by_name(const void *a, const void *b)
{
    return strcmp(km_topic_name(*(const km_topic *const *)a), km_topic_name(*(const km_topic *const *)b));
}

/* The first partition id of t after the cursor (count when none). */
static int32_t first_after(const km_verify_opts *o, const km_topic *t)
{
    if (!o->after_topic)
        return 0;
    int c = strcmp(km_topic_name(t), o->after_topic);
    return c > 0 ? 0 : c < 0 ? km_topic_partition_count(t) : o->after_partition + 1;
}

int v_slice_build(v_run *r, km_err *err)
{
    size_t n = km_image_topic_count(r->img), it = 0, k = 0;
    const km_topic **all = calloc(n ? n : 1, sizeof *all);
    if (!all || !(r->sel = calloc(n ? n : 1, sizeof *r->sel))) {
        free(all);
        return km_fail(err, "out of memory");
    }
    for (const km_topic *t; k < n && (t = km_image_next_topic(r->img, &it));)
        all[k++] = t;
    qsort(all, k, sizeof *all, by_name);
    int64_t left = r->o->max_partitions > 0 ? r->o->max_partitions : INT64_MAX;
    r->from_start = !r->o->after_topic;
    r->complete = true;
    for (size_t i = 0; i < k; i++) {
        int32_t count = km_topic_partition_count(all[i]), lo = first_after(r->o, all[i]);
        if (lo < 0)
            lo = 0;
        if (lo >= count)
            continue;
        if (left == 0) {
            r->complete = false; /* a partition after the slice */
            break;
        }
        int32_t hi = (int64_t)(count - lo) > left ? lo + (int32_t)left : count;
        r->sel[r->nsel++] = (v_sel){ .t = all[i], .lo = lo, .hi = hi };
        r->selected += hi - lo;
        left -= hi - lo;
        if (hi < count) {
            r->complete = false;
            break;
        }
    }
    free(all);
    return 0;
}

void v_slice_free(v_run *r)
{
    free(r->sel);
    r->sel = NULL;
}

json_t *v_slice_json(const v_run *r)
{
    const v_sel *last = r->nsel ? &r->sel[r->nsel - 1] : NULL;
    return json_pack("{s:I,s:b,s:o,s:b}", "partitions", (json_int_t)r->selected, "from_start", r->from_start,
                     "last", last ? json_pack("{s:s,s:i}", "topic", km_topic_name(last->t), "partition", last->hi - 1)
                                  : json_null(),
                     "complete", r->complete);
}

/* (ta, pa) against (tb, pb) in the slice order. */
static int order(const char *ta, int32_t pa, const char *tb, int32_t pb)
{
    int c = strcmp(ta, tb);
    return c ? c : (pa > pb) - (pa < pb);
}

bool km_verify_slice_covers(const json_t *slice, const char *after_topic, int32_t after_partition,
                            const char *topic, int32_t partition)
{
    bool from_start = json_is_true(json_object_get(slice, "from_start"));
    if (partition < 0)
        return from_start;
    if (after_topic && order(topic, partition, after_topic, after_partition) <= 0)
        return false;
    if (json_is_true(json_object_get(slice, "complete")))
        return true;
    const json_t *last = json_object_get(slice, "last");
    const char *lt = json_string_value(json_object_get(last, "topic"));
    return lt && order(topic, partition, lt, (int32_t)json_integer_value(json_object_get(last, "partition"))) <= 0;
}
