/* Recovery after a lost connection or a failed guard: sync(), read /controller_epoch and
 * /migration, and decide from exactly what they hold (KAFKA-21062's fix, generalised to many
 * outstanding multis):
 *  - /controller_epoch's zkVersion moved: someone claimed after us -> FENCED.
 *  - /migration is what we last confirmed: no batch end landed; resend what is unconfirmed.
 *  - /migration is what batch b meant to write, at b's version + 1: b and everything before it
 *    landed (ZooKeeper applies a session's requests in order): adopt, resend the rest.
 *  - anything else: a second writer -> FENCED. Never a blind retry. */
#include "zk_writer.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void recover_finish(km_zkw *w);
static void probe_start(km_zkw *w);

typedef struct rec_call {
    km_zkw *w;
    unsigned generation;
    int waiting;
    int rc[2];
    struct Stat st[2];
    char *data[2];
    int len[2];
    struct rec_slot { struct rec_call *c; int idx; } slot[2];
} rec_call;

static void rec_free(rec_call *c)
{
    free(c->data[0]);
    free(c->data[1]);
    free(c);
}

/* Retry later: the session watcher calls zkw_recover_start again on the next CONNECTED. */
static void rec_abort(km_zkw *w)
{
    w->verify_running = false;
    w->recover_wanted = true;
}

static zkw_batch *landed_batch(km_zkw *w, const rec_call *c)
{
    for (zkw_batch *b = w->bhead; b; b = b->next)
        if (b->bumps && b->check_version >= 0 && c->st[1].version == b->check_version + 1 && c->len[1] == b->mig_len &&
            !memcmp(c->data[1], b->mig, (size_t)b->mig_len))
            return b;
    return NULL;
}

/* /migration shows batches up to `upto` ended: their last multis landed (the other multis of
 * those batches are probed like any other, see probe_start). */
static void adopt_upto(km_zkw *w, zkw_batch *upto, int version)
{
    for (zkw_multi *m = w->head; m; m = m->next) {
        if (m->is_last && m->st != M_ACKED)
            zkw_ack(w, m, true, version);
        if (m->batch == upto && m->is_last)
            break;
    }
}

/* Everything not landed goes out again, in order, on versions re-derived from now. */
static void requeue(km_zkw *w)
{
    for (zkw_multi *m = w->head; m; m = m->next)
        if (m->st == M_UNKNOWN || m->st == M_SENT) {
            m->st = M_QUEUED;
            m->resent = true;
            w->m.multis_resent++;
        }
    for (zkw_batch *b = w->bhead; b; b = b->next)
        b->check_version = -1;
    w->next_check = w->mig_version;
    w->next_send = w->head;
}

static void recover_finish(km_zkw *w)
{
    zkw_popped popped = zkw_pop_acked_quiet(w);
    requeue(w);
    w->verify_running = false;
    w->recover_wanted = false;
    if (w->resync_wanted) {
        w->resync_wanted = false;
        zkw_drop_pipeline(w);
        zkw_emit(w, KM_ZKW_EV_RESYNC);
        return;
    }
    zkw_pump(w);
    popped.any |= !w->head; /* READY again: the owner may see it idle and move on */
    zkw_emit_progress(w, popped);
}

/* The record beside the election is marked before the fence, so that whichever instance
 * leads next (a single instance: its next start) refuses to claim (foreign_since_last_claim) instead of writing over the other
 * writer.  The fence (and the daemon's exit) waits for ZooKeeper's answer. */
typedef struct mark_call {
    km_zkw *w;
    char record[3072]; /* the reason, JSON-escaped, and the claim's fields */
    char reason[1024];
} mark_call;

static void on_record_marked(int rc, const struct Stat *st, const void *data)
{
    (void)st;
    mark_call *mc = (mark_call *)data;
    km_zkw *w = mc->w;
    if (rc != ZOK)
        zkw_log(w, KM_LOG_ERROR, "zk recover: could not mark %s (%s): the next instance to lead checks "
                "/controller_epoch only", w->claim_record, zerror(rc));
    zkw_fence(w, "%s", mc->reason);
    free(mc);
}

/* /migration moved while /controller_epoch is still the one we claimed.  No instance of ours
 * does that (a takeover claims first, which moves /controller_epoch), so under HA it is a writer
 * outside the election, exactly as a foreign claim is. */
static void second_writer(km_zkw *w, const rec_call *c)
{
    char reason[1024];
    char who[64] = "";
    if (w->claim_record)
        snprintf(who, sizeof who, "a writer outside %s owns ZooKeeper: ", zkw_outside(w));
    snprintf(reason, sizeof reason, "%s/migration holds %.200s at zkVersion %d; our last confirmed write left "
             "zkVersion %d (%.200s): a second writer%s", who, c->data[1], c->st[1].version, w->mig_version, w->mig,
             w->claim_record ? " while /controller_epoch is still ours" : "");
    mark_call *mc = w->claim_record ? calloc(1, sizeof *mc) : NULL;
    if (!mc)
        return zkw_fence(w, "%s", reason);
    w->foreign = true;
    mc->w = w;
    snprintf(mc->reason, sizeof mc->reason, "%s", reason);
    json_t *rec = json_pack("{s:i, s:s, s:i, s:s}", "version", 1, "instance", w->claim_owner,
                            "controller_epoch", w->zk_epoch, "foreign_writer", reason);
    char *text = rec ? json_dumps(rec, JSON_COMPACT) : NULL;
    json_decref(rec);
    int len = text ? snprintf(mc->record, sizeof mc->record, "%s", text) : -1;
    free(text);
    if (len < 0 || (size_t)len >= sizeof mc->record ||
        zoo_aset(w->sess.zh, w->claim_record, mc->record, len, -1, on_record_marked, mc) != ZOK) {
        free(mc);
        zkw_fence(w, "%s", reason);
    }
}

static void decide(km_zkw *w, rec_call *c)
{
    if (c->rc[0] != ZOK || c->st[0].version != w->ctrl_epoch_version)
        return zkw_fence(w, "/controller_epoch is %s at zkVersion %d, we claimed zkVersion %d: another "
                         "controller claimed ZooKeeper", c->rc[0] == ZOK ? c->data[0] : zerror(c->rc[0]),
                         c->rc[0] == ZOK ? c->st[0].version : -1, w->ctrl_epoch_version);
    if (c->rc[1] != ZOK)
        return zkw_fence(w, "/migration cannot be read back (%s)", zerror(c->rc[1]));
    bool unchanged = c->st[1].version == w->mig_version && c->len[1] == w->mig_len &&
                     !memcmp(c->data[1], w->mig, (size_t)w->mig_len);
    zkw_batch *b = unchanged ? NULL : landed_batch(w, c);
    if (!unchanged && !b)
        return second_writer(w, c);
    if (b) {
        zkw_log(w, KM_LOG_INFO, "zk recover: our /migration write to offset %lld had landed (lost ack); "
                "adopting zkVersion %d", (long long)b->offset, c->st[1].version);
        adopt_upto(w, b, c->st[1].version);
    }
    if (w->resync_wanted)
        return recover_finish(w);
    probe_start(w);
}

static void on_rec_read(int rc, const char *value, int len, const struct Stat *st, const void *data)
{
    const struct rec_slot *s = data;
    rec_call *c = s->c;
    c->rc[s->idx] = rc;
    if (rc == ZOK) {
        c->len[s->idx] = len < 0 ? 0 : len;
        c->data[s->idx] = calloc(1, (size_t)c->len[s->idx] + 1);
        if (c->data[s->idx])
            memcpy(c->data[s->idx], value ? value : "", (size_t)c->len[s->idx]);
        c->st[s->idx] = *st;
    }
    if (--c->waiting)
        return;
    km_zkw *w = c->w;
    bool ok_state = c->generation == w->sess.generation && w->state == KM_ZKW_READY;
    bool failed = c->rc[0] != ZOK && c->rc[0] != ZNONODE;
    failed |= c->rc[1] != ZOK && c->rc[1] != ZNONODE;
    if (ok_state && failed)
        rec_abort(w);
    else if (ok_state)
        decide(w, c);
    rec_free(c);
}

static void on_rec_sync(int rc, const char *value, const void *data)
{
    (void)value;
    rec_call *c = (rec_call *)data;
    km_zkw *w = c->w;
    if (c->generation != w->sess.generation || w->state != KM_ZKW_READY) {
        rec_free(c);
        return;
    }
    if (rc != ZOK) {
        rec_free(c);
        return rec_abort(w);
    }
    c->waiting = 2;
    if (zoo_aget(w->sess.zh, "/controller_epoch", 0, on_rec_read, &c->slot[0]) != ZOK) {
        rec_free(c);
        return rec_abort(w);
    }
    if (zoo_aget(w->sess.zh, "/migration", 0, on_rec_read, &c->slot[1]) != ZOK) {
        c->waiting = 1;
        c->rc[1] = ZCONNECTIONLOSS;
    }
}

void zkw_recover_start(km_zkw *w)
{
    if (w->verify_running || w->state != KM_ZKW_READY)
        return;
    rec_call *c = calloc(1, sizeof *c);
    if (!c)
        return;
    c->w = w;
    c->generation = w->sess.generation;
    c->slot[0] = (struct rec_slot){c, 0};
    c->slot[1] = (struct rec_slot){c, 1};
    w->verify_running = true;
    if (zoo_async(w->sess.zh, "/migration", on_rec_sync, c) != ZOK) {
        rec_free(c);
        rec_abort(w);
    }
}

/* ---- which of the multis whose replies we lost did land? ----
 * Each one is judged on its own by the zkVersion of its first conditional data op (versions only
 * grow, and the guards just proved nobody else writes): a setData at version v landed iff the
 * node is past v, a create iff the node exists, a delete iff it is gone. So nothing is resent
 * that had landed, and nothing is taken for landed that had not. */

typedef struct probe {
    km_zkw *w;
    zkw_multi *m;
    unsigned generation;
} probe;

static const zkw_op *probe_op(const zkw_multi *m)
{
    for (int i = 0; i < m->nops; i++)
        if (m->ops[i].kind != KM_ZOP_CREATE_SEQ)
            return &m->ops[i];
    return NULL;
}

static bool landed(const zkw_op *o, int rc, const struct Stat *st)
{
    switch (o->kind) {
    case KM_ZOP_SET: return rc == ZOK && st->version > o->version;
    case KM_ZOP_CREATE: return rc == ZOK;
    case KM_ZOP_DELETE: return rc == ZNONODE;
    default: return false;
    }
}

static void on_probe(int rc, const struct Stat *st, const void *data)
{
    probe *p = (probe *)data;
    km_zkw *w = p->w;
    bool current = p->generation == w->sess.generation && w->state == KM_ZKW_READY;
    if (current && rc != ZOK && rc != ZNONODE)
        w->probe_failed = true;
    else if (current && landed(probe_op(p->m), rc, st)) {
        zkw_ack(w, p->m, true, 0);
        zkw_log(w, KM_LOG_INFO, "zk recover: a multi whose reply was lost had landed (%s)", probe_op(p->m)->path);
    }
    free(p);
    if (--w->probes_pending > 0 || !current)
        return;
    if (w->probe_failed)
        return rec_abort(w); /* connection lost again: the whole verification restarts */
    recover_finish(w);
}

static void probe_start(km_zkw *w)
{
    w->probes_pending = 1; /* held until every probe is issued */
    w->probe_failed = false;
    for (zkw_multi *m = w->head; m; m = m->next) {
        if (m->st != M_UNKNOWN || m->is_last || !probe_op(m))
            continue; /* a batch's last multi is judged by /migration (its data rides with it) */
        probe *p = malloc(sizeof *p);
        if (!p) {
            w->probe_failed = true;
            break;
        }
        *p = (probe){w, m, w->sess.generation};
        if (zoo_aexists(w->sess.zh, probe_op(m)->path, 0, on_probe, p) != ZOK) {
            free(p);
            w->probe_failed = true;
            break;
        }
        w->probes_pending++;
    }
    if (--w->probes_pending > 0)
        return;
    if (w->probe_failed)
        return rec_abort(w);
    recover_finish(w);
}
