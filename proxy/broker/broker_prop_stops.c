/* km_bprop: StopReplica at least once.
 *
 * A full sync cannot carry StopReplica (MigrationPropagator.sendRPCsToBrokersFromMetadataImage:
 * "we cannot send StopReplica requests from the image"), so every stop a broker has not answered
 * is kept here, per broker, until the broker's answer to a request carrying it arrives.  It
 * survives reconnects, dropped queues, full syncs and the channel itself (a fenced broker that
 * comes back still gets it).  A newer stop for the same partition replaces the older one. */
#include "broker_prop.h"

#include <stdlib.h>
#include <string.h>

static pstop_set *find_set(km_bprop *p, int32_t broker, bool create)
{
    for (size_t i = 0; i < p->nstops; i++)
        if (p->stops[i].broker == broker)
            return &p->stops[i];
    if (!create)
        return NULL;
    if (p->nstops == p->capstops) {
        size_t ncap = p->capstops ? p->capstops * 2 : 8;
        pstop_set *grown = realloc(p->stops, ncap * sizeof *grown);
        if (!grown)
            return NULL;
        p->stops = grown;
        p->capstops = ncap;
    }
    pstop_set *s = &p->stops[p->nstops++];
    *s = (pstop_set){ .broker = broker };
    return s;
}

static void evict_oldest(km_bprop *p, pstop_set *s)
{
    free(s->v[0].topic);
    memmove(s->v, s->v + 1, (s->n - 1) * sizeof *s->v);
    s->n--;
    if (!s->evicted++)
        km_bprop__log(p, 2, "broker %d: more than %d StopReplica unanswered; forgetting the oldest", s->broker,
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

int km_bprop__stops_add(km_bprop *p, int32_t broker, const km_bp_stop *stops, size_t n, int64_t seq)
{
    pstop_set *s = n ? find_set(p, broker, true) : NULL;
    if (n && !s)
        return -1;
    for (size_t i = 0; i < n; i++)
        if (add_one(p, s, &stops[i], seq))
            return -1;
    return 0;
}

/* The broker answered request `seq` (any per-partition code is an answer: it has acted). */
void km_bprop__stops_answered(km_bprop *p, int32_t broker, int64_t seq)
{
    pstop_set *s = find_set(p, broker, false);
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
    pstop_set *s = find_set(p, broker, false);
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
void km_bprop__stops_forget_seqs(km_bprop *p, int32_t broker)
{
    pstop_set *s = find_set(p, broker, false);
    for (size_t i = 0; s && i < s->n; i++)
        s->v[i].seq = 0;
}

/* Before v3 the delete flag is per request: one request per flag value. */
int km_bprop__stops_resend(km_bprop *p, prop_chan *pc, km_err *err)
{
    pstop_set *s = find_set(p, pc->id, false);
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

void km_bprop__stops_free(km_bprop *p)
{
    for (size_t i = 0; i < p->nstops; i++) {
        for (size_t k = 0; k < p->stops[i].n; k++)
            free(p->stops[i].v[k].topic);
        free(p->stops[i].v);
    }
    free(p->stops);
    p->stops = NULL;
    p->nstops = p->capstops = 0;
}

size_t km_bprop_pending_stops(const km_bprop *p, int32_t broker_id)
{
    for (size_t i = 0; i < p->nstops; i++)
        if (p->stops[i].broker == broker_id)
            return p->stops[i].n;
    return 0;
}
