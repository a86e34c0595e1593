/* km_bprop: StopReplica (and a deleted partition's UpdateMetadata entry) at least once.
 *
 * A full sync cannot carry StopReplica (MigrationPropagator.sendRPCsToBrokersFromMetadataImage:
 * "we cannot send StopReplica requests from the image"), so every stop a broker has not answered
 * is kept here, per broker, until the broker's answer to a request carrying it arrives.  It
 * survives reconnects, dropped queues, full syncs and the channel itself (a fenced broker that
 * comes back still gets it).  A newer stop for the same partition replaces the older one.
 * Lookups go through a hash index, so a deletion of many partitions costs linear time. */
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

static size_t key_hash(const char *topic, int32_t partition)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (const unsigned char *c = (const unsigned char *)topic; *c; c++)
        h = (h ^ *c) * 1099511628211ull;
    return (size_t)(h ^ ((uint64_t)(uint32_t)partition * 0x9e3779b97f4a7c15ull));
}

static void slot_insert(pstop_set *s, size_t i)
{
    size_t mask = s->nslots - 1, h = key_hash(s->v[i].topic, s->v[i].partition) & mask;
    while (s->slots[h])
        h = (h + 1) & mask;
    s->slots[h] = (uint32_t)(i + 1);
}

/* Sized for twice the entries; false when out of memory (lookups then scan). */
static bool reindex(pstop_set *s)
{
    size_t want = 64;
    while (want < 2 * (s->n + 1))
        want *= 2;
    if (want != s->nslots) {
        uint32_t *grown = realloc(s->slots, want * sizeof *grown);
        if (!grown)
            return false;
        s->slots = grown;
        s->nslots = want;
    }
    memset(s->slots, 0, s->nslots * sizeof *s->slots);
    for (size_t i = 0; i < s->n; i++)
        slot_insert(s, i);
    s->stale = false;
    return true;
}

static bool same_key(const pstop *x, const char *topic, int32_t partition)
{
    return x->topic && x->partition == partition && !strcmp(x->topic, topic);
}

/* Index of (topic, partition) in s->v, or -1. */
static ptrdiff_t find_entry(pstop_set *s, const char *topic, int32_t partition)
{
    if ((s->stale || s->nslots < 2 * (s->n + 1)) && !reindex(s)) {
        for (size_t i = 0; i < s->n; i++)
            if (same_key(&s->v[i], topic, partition))
                return (ptrdiff_t)i;
        return -1;
    }
    size_t mask = s->nslots - 1;
    for (size_t h = key_hash(topic, partition) & mask; s->slots[h]; h = (h + 1) & mask)
        if (same_key(&s->v[s->slots[h] - 1], topic, partition))
            return (ptrdiff_t)s->slots[h] - 1;
    return -1;
}

/* Drops the entries whose topic was cleared, keeping the order (oldest first). */
static void compact(pstop_set *s)
{
    size_t k = 0;
    for (size_t i = 0; i < s->n; i++)
        if (s->v[i].topic)
            s->v[k++] = s->v[i];
    if (k != s->n)
        s->stale = true;
    s->n = k;
}

/* At the bound the oldest eighth goes at once, so the index is rebuilt rarely. */
static void evict_oldest(km_bprop *p, pstop_set *s)
{
    size_t drop = s->n / 8 ? s->n / 8 : 1;
    for (size_t i = 0; i < drop; i++)
        free(s->v[i].topic);
    memmove(s->v, s->v + drop, (s->n - drop) * sizeof *s->v);
    s->n -= drop;
    s->stale = true;
    if (!s->evicted)
        km_bprop__log(p, 2, "broker %d: more than %d deletions unanswered; forgetting the oldest", s->broker,
                      BPROP_MAX_PENDING_STOPS);
    s->evicted += drop;
}

static int add_one(km_bprop *p, pstop_set *s, const km_bp_stop *x, int64_t seq)
{
    ptrdiff_t i = find_entry(s, x->topic, x->partition);
    if (i >= 0) {
        s->v[i].epoch = x->leader_epoch;
        s->v[i].del = x->delete_partition;
        s->v[i].seq = seq;
        return 0;
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
    if (!s->stale && s->nslots >= 2 * (s->n + 1))
        slot_insert(s, s->n - 1);
    else
        s->stale = true;
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
    for (size_t i = 0; s && i < s->n; i++) {
        if (s->v[i].seq == seq) {
            free(s->v[i].topic);
            s->v[i].topic = NULL;
        }
    }
    if (s)
        compact(s);
}

/* The broker is a replica again (a LeaderAndIsr for the partition goes to it after the stop): a
 * reassignment's stop is moot.  A deleted topic's stop (-2) stays: the name may be re-created,
 * and the old log must still go before the new one is made. */
void km_bprop__stops_superseded(km_bprop *p, int32_t broker, const km_bp_part *parts, size_t n)
{
    pstop_set *s = find_set(&p->stops, broker);
    for (size_t k = 0; s && s->n && k < n; k++) {
        ptrdiff_t i = find_entry(s, parts[k].topic, parts[k].partition);
        if (i >= 0 && s->v[i].epoch != KM_EPOCH_DURING_DELETE) {
            free(s->v[i].topic);
            s->v[i].topic = NULL; /* the index stays valid until compact() */
        }
    }
    if (s)
        compact(s);
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
        free(ss->v[i].slots);
    }
    free(ss->v);
    *ss = (pstop_sets){ 0 };
}

size_t km_bprop_pending_stops(const km_bprop *p, int32_t broker_id)
{
    const pstop_set *s = find_set(&p->stops, broker_id);
    return s ? s->n : 0;
}
