/* km_bprop: StopReplica (and a deleted partition's UpdateMetadata entry) at least once.
 *
 * A full sync cannot carry StopReplica (MigrationPropagator.sendRPCsToBrokersFromMetadataImage:
 * "we cannot send StopReplica requests from the image"), so every stop a broker has not answered
 * is kept here, per broker, until the broker's answer to a request carrying it arrives.  It
 * survives reconnects, dropped queues, full syncs and the channel itself (a fenced broker that
 * comes back still gets it).  A newer stop for the same partition replaces the older one. */
#include "broker_prop.h"

#include <stdlib.h>
#include <string.h>

static pstop_set *find_set(const pstop_sets *ss, int32_t broker)
{
    for (size_t i = 0; i < ss->n; i++)
        if (ss->v[i].broker == broker)
            return &ss->v[i];
    return NULL;
}

static pstop_set *find_or_add_set(pstop_sets *ss, int32_t broker)
{
    pstop_set *s = find_set(ss, broker);
    if (s)
        return s;
    if (ss->n == ss->cap) {
        size_t ncap = ss->cap ? ss->cap * 2 : 8;
        pstop_set *grown = realloc(ss->v, ncap * sizeof *grown);
        if (!grown)
            return NULL;
        ss->v = grown;
        ss->cap = ncap;
    }
    s = &ss->v[ss->n++];
    *s = (pstop_set){ .broker = broker };
    return s;
}

static void evict_oldest(km_bprop *p, pstop_set *s)
{
    free(s->v[0].topic);
    memmove(s->v, s->v + 1, (s->n - 1) * sizeof *s->v);
    s->n--;
    if (!s->evicted++)
        km_bprop__log(p, 2, "broker %d: more than %d deletions unanswered; forgetting the oldest", s->broker,
                      BPROP_MAX_PENDING_STOPS);
}

static int add_one(km_bprop *p, pstop_set *s, const km_bp_stop *x, int64_t seq)
{
    for (size_t i = 0; i < s->n; i++) {
        if (s->v[i].partition == x->partition && !strcmp(s->v[i].topic, x->topic)) {
            s->v[i].epoch = x->leader_epoch;
            s->v[i].del = x->delete_partition;
            s->v[i].seq = seq;
            return 0;
        }
    }
    if (s->n == BPROP_MAX_PENDING_STOPS)
        evict_oldest(p, s);
    if (s->n == s->cap) {
        size_t ncap = s->cap ? s->cap * 2 : 16;
        pstop *grown = realloc(s->v, ncap * sizeof *grown);
        if (!grown)
            return -1;
        s->v = grown;
        s->cap = ncap;
    }
    char *topic = strdup(x->topic);
    if (!topic)
        return -1;
    s->v[s->n++] = (pstop){ topic, x->partition, x->leader_epoch, x->delete_partition, seq };
    return 0;
}

int km_bprop__stops_add(km_bprop *p, pstop_sets *ss, int32_t broker, const km_bp_stop *stops, size_t n, int64_t seq)
{
    pstop_set *s = n ? find_or_add_set(ss, broker) : NULL;
    if (n && !s)
        return -1;
    for (size_t i = 0; i < n; i++)
        if (add_one(p, s, &stops[i], seq))
            return -1;
    return 0;
}

/* The broker answered request `seq` (any per-partition code is an answer: it has acted). */
void km_bprop__stops_answered(pstop_sets *ss, int32_t broker, int64_t seq)
{
    pstop_set *s = find_set(ss, broker);
    for (size_t i = 0; s && i < s->n;) {
        if (s->v[i].seq == seq) {
            free(s->v[i].topic);
            s->v[i] = s->v[--s->n];
        } else {
            i++;
        }
    }
}

/* The broker is a replica again (a LeaderAndIsr for the partition goes to it after the stop): a
 * reassignment's stop is moot.  A deleted topic's stop (-2) stays: the name may be re-created,
 * and the old log must still go before the new one is made. */
void km_bprop__stops_superseded(km_bprop *p, int32_t broker, const km_bp_part *parts, size_t n)
{
    pstop_set *s = find_set(&p->stops, broker);
    for (size_t k = 0; s && s->n && k < n; k++) {
        for (size_t i = 0; i < s->n; i++) {
            pstop *x = &s->v[i];
            if (x->epoch != KM_EPOCH_DURING_DELETE && x->partition == parts[k].partition &&
                !strcmp(x->topic, parts[k].topic)) {
                free(x->topic);
                s->v[i] = s->v[--s->n];
                break;
            }
        }
    }
}

/* The channel is gone: its sequence numbers start again with the next one. */
void km_bprop__stops_forget_seqs(pstop_sets *ss, int32_t broker)
{
    pstop_set *s = find_set(ss, broker);
    for (size_t i = 0; s && i < s->n; i++)
        s->v[i].seq = 0;
}

/* Before v3 the delete flag is per request: one request per flag value. */
int km_bprop__stops_resend(km_bprop *p, prop_chan *pc, km_err *err)
{
    pstop_set *s = find_set(&p->stops, pc->id);
    if (!s || !s->n)
        return 0;
    km_bp_stop *v = malloc(s->n * sizeof *v);
    if (!v)
        return km_fail(err, "broker %d: out of memory resending %zu stops", pc->id, s->n);
    km_bp_ctl ctl = km_bprop__ctl(p, pc->id, KM_CTL_TYPE_INCREMENTAL);
    int rc = 0;
    for (int del = 1; del >= 0 && !rc; del--) {
        size_t k = 0;
        for (size_t i = 0; i < s->n; i++)
            if (s->v[i].del == (del == 1))
                v[k++] = (km_bp_stop){ s->v[i].topic, s->v[i].partition, s->v[i].epoch, s->v[i].del };
        /* send_stop records the new request's seq on each (the same keys: no entry moves) */
        if (k && km_bprop__send_stop(p, pc, &ctl, v, k, err) < 0)
            rc = -1;
    }
    free(v);
    return rc;
}

size_t km_bprop__uncached_count(const km_bprop *p, int32_t broker)
{
    const pstop_set *s = find_set(&p->uncached, broker);
    return s ? s->n : 0;
}

size_t km_bprop__uncached_parts(const km_bprop *p, int32_t broker, km_bp_part *parts)
{
    const pstop_set *s = find_set(&p->uncached, broker);
    size_t k = 0;
    for (size_t i = 0; s && i < s->n; i++) {
        const km_topic *t = km_image_topic_by_name(p->img, s->v[i].topic);
        if (!t || s->v[i].partition >= km_topic_partition_count(t))
            parts[k++] = (km_bp_part){ .topic = s->v[i].topic, .partition = s->v[i].partition,
                                       .controller_epoch = p->zk_epoch, .leader = KM_LEADER_DURING_DELETE };
    }
    return k;
}

void km_bprop__stops_free(pstop_sets *ss)
{
    for (size_t i = 0; i < ss->n; i++) {
        for (size_t k = 0; k < ss->v[i].n; k++)
            free(ss->v[i].v[k].topic);
        free(ss->v[i].v);
    }
    free(ss->v);
    *ss = (pstop_sets){ 0 };
}

size_t km_bprop_pending_stops(const km_bprop *p, int32_t broker_id)
{
    const pstop_set *s = find_set(&p->stops, broker_id);
    return s ? s->n : 0;
}
