/* Batches -> multis -> the wire, and recovery (see the comment at the top of zk_writer.c). */
#include "zk_writer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Serialized size of one op inside a multi request: header (9) + path + data + version/ACL/flags. */
static size_t op_bytes(const km_zop *op)
{
    size_t n = 9 + 4 + strlen(op->path) + 4;
    if (op->kind == KM_ZOP_CREATE || op->kind == KM_ZOP_CREATE_SEQ)
        return n + 4 + (size_t)(op->len > 0 ? op->len : 0) + 4 + 4 + 4 + 5 + 4 + 6 + 4;
    return n + (op->kind == KM_ZOP_SET ? 4 + (size_t)(op->len > 0 ? op->len : 0) : 0);
}

/* The guards (two checks or check + set /migration) and the request/multi framing. */
#define MULTI_FIXED_BYTES 512

/* Length of the unit starting at ops[i] (ops joined by join_next), checked for a versioned op. */
static int unit_len(const km_zop *ops, size_t n, size_t i, size_t *bytes, km_err *err)
{
    size_t k = i;
    bool versioned = false;
    *bytes = 0;
    for (;; k++) {
        if (k >= n)
            return km_fail(err, "zk submit: op %zu (%s) has join_next set but is the last op", k - 1, ops[k - 1].path);
        if (!ops[k].path || ops[k].path[0] != '/')
            return km_fail(err, "zk submit: op %zu: path must be absolute", k);
        versioned |= ops[k].kind != KM_ZOP_CREATE_SEQ;
        *bytes += op_bytes(&ops[k]);
        if (!ops[k].join_next)
            break;
    }
    /* A lone sequential create would succeed again on resend, writing a duplicate notification. */
    if (!versioned)
        return km_fail(err, "zk submit: ops %zu..%zu: a sequential create must share a multi with a "
                            "conditional op", i, k);
    return (int)(k - i + 1);
}

static zkw_batch *batch_new(km_zkw *w, int64_t offset, int32_t epoch, bool bumps)
{
    zkw_batch *b = calloc(1, sizeof *b);
    if (!b)
        return NULL;
    b->offset = offset;
    b->epoch = epoch;
    b->bumps = bumps;
    b->check_version = -1;
    b->submitted_ms = zk_now_ms();
    if (bumps)
        b->mig_len = km_zk_migration_json(b->mig, sizeof b->mig, w->cfg.controller_id, w->cfg.controller_epoch,
                                          offset, epoch);
    return b;
}

static zkw_multi *multi_new(km_zkw *w, zkw_batch *b, int nops)
{
    zkw_multi *m = calloc(1, sizeof *m);
    if (!m || !(m->ops = calloc((size_t)(nops ? nops : 1), sizeof *m->ops))) {
        free(m);
        return NULL;
    }
    m->w = w;
    m->batch = b;
    return m;
}

/* Copies op into m, predicting the zkVersion it will find and leave behind. */
static int add_op(km_zkw *w, zkw_multi *m, const km_zop *op, km_err *err)
{
    zkw_op *o = &m->ops[m->nops];
    o->kind = op->kind;
    o->len = op->data ? op->len : 0;
    o->path = strdup(op->path);
    o->data = malloc((size_t)o->len + 1);
    if (!o->path || !o->data) {
        free(o->path);
        free(o->data);
        return km_fail(err, "zk submit: out of memory copying %s", op->path);
    }
    memcpy(o->data, op->data ? op->data : "", (size_t)o->len);
    m->nops++;
    int have = zk_vcache_get(&w->cache, op->path);
    switch (op->kind) {
    case KM_ZOP_CREATE:
        if (have >= 0)
            return km_fail(err, "zk submit: create %s, which exists (zkVersion %d)", op->path, have);
        o->version = -1;
        return zk_vcache_put(&w->cache, op->path, 0);
    case KM_ZOP_CREATE_SEQ:
        o->version = -1;
        return 0;
    case KM_ZOP_SET:
        if (have < 0)
            return km_fail(err, "zk submit: setData %s: zkVersion unknown (not read by the full sync)", op->path);
        o->version = have;
        return zk_vcache_put(&w->cache, op->path, have + 1);
    case KM_ZOP_DELETE:
        if (have < 0)
            return km_fail(err, "zk submit: delete %s: zkVersion unknown", op->path);
        o->version = have;
        zk_vcache_del(&w->cache, op->path);
        return 0;
    }
    return km_fail(err, "zk submit: op kind %d", (int)op->kind);
}

static void append_multi(km_zkw *w, zkw_multi *m)
{
    if (w->tail)
        w->tail->next = m;
    else
        w->head = m;
    w->tail = m;
    if (!w->next_send)
        w->next_send = m;
    w->pending_ops += (size_t)m->nops;
}

/* Drops the (unsent) multis queued after `keep` - a submit that failed half way. */
static void unqueue_after(km_zkw *w, zkw_multi *keep)
{
    zkw_multi *m = keep ? keep->next : w->head;
    if (keep)
        keep->next = NULL;
    else
        w->head = NULL;
    if (w->next_send && w->next_send->batch == (m ? m->batch : NULL))
        w->next_send = NULL;
    w->tail = keep;
    while (m) {
        zkw_multi *next = m->next;
        w->pending_ops -= (size_t)m->nops;
        if (w->next_send == m)
            w->next_send = NULL;
        zkw_free_multi(m);
        m = next;
    }
}

/* Splits ops into multis under max_multi_bytes / max_multi_ops without splitting a unit. A unit too
 * large to share a multi goes alone in one (check_sizes proved it fits the server's limit). */
static int split(km_zkw *w, zkw_batch *b, const km_zop *ops, size_t n, km_err *err)
{
    size_t i = 0;
    while (i < n || b->multis_left == 0) {
        size_t bytes = MULTI_FIXED_BYTES, count = 0, j = i, ub;
        while (j < n) {
            int len = unit_len(ops, n, j, &ub, err);
            if (len < 0)
                return -1;
            bool alone = MULTI_FIXED_BYTES + ub > w->cfg.max_multi_bytes;
            if (count && (alone || bytes + ub > w->cfg.max_multi_bytes ||
                          count + (size_t)len > (size_t)w->cfg.max_multi_ops))
                break;
            bytes += ub;
            count += (size_t)len;
            j += (size_t)len;
            if (alone)
                break;
        }
        zkw_multi *m = multi_new(w, b, (int)count);
        if (!m)
            return km_fail(err, "zk submit: out of memory");
        for (size_t k = i; k < j; k++)
            if (add_op(w, m, &ops[k], err)) {
                zkw_free_multi(m);
                return -1;
            }
        m->bytes = bytes;
        b->multis_left++;
        append_multi(w, m);
        i = j;
    }
    w->tail->is_last = b->bumps;
    return 0;
}

/* The op of the unit at ops[i] with the most data: what an operator must know about. */
static const km_zop *largest_op(const km_zop *ops, size_t i, int len)
{
    const km_zop *big = &ops[i];
    for (int k = 1; k < len; k++)
        if (ops[i + (size_t)k].len > big->len)
            big = &ops[i + (size_t)k];
    return big;
}

/* Refuses, before anything is queued, a batch holding a unit that no multi under the server's
 * jute.maxbuffer can carry: ZooKeeper would close the connection on it (or fail to read its own
 * transaction log back), so neither a resend nor a re-sync could ever write it. */
static int check_sizes(km_zkw *w, const km_zop *ops, size_t n, km_err *err)
{
    size_t limit = zkw_multi_limit(w), ub;
    km_err ignored;
    w->too_large = false;
    for (size_t i = 0; i < n;) {
        int len = unit_len(ops, n, i, &ub, &ignored);
        if (len < 0)
            return 0; /* split() reports a malformed unit */
        if (MULTI_FIXED_BYTES + ub > limit) {
            const km_zop *big = largest_op(ops, i, len);
            w->too_large = true;
            return km_fail(err, "znode %s is %d bytes (%zu with its multi), more than ZooKeeper takes in one "
                           "request: a multi may take %zu under zookeeper.jute.maxbuffer=%zu; raise jute.maxbuffer on "
                           "the ZooKeeper servers, then zookeeper.jute.maxbuffer here (and the brokers' own) to match",
                           big->path, big->len > 0 ? big->len : 0, MULTI_FIXED_BYTES + ub, limit,
                           w->cfg.jute_maxbuffer);
        }
        i += (size_t)len;
    }
    return 0;
}

static int submit_batch(km_zkw *w, const km_zop *ops, size_t n, int64_t offset, int32_t epoch, bool bumps,
                        km_err *err)
{
    if (w->state != KM_ZKW_READY || w->cfg.read_only)
        return km_fail(err, "zk submit: writer is %s%s, not DUAL_WRITE", km_zkw_state_name(km_zkw_get_state(w)),
                       w->cfg.read_only ? " (read only)" : "");
    if (!bumps && n == 0)
        return 0;
    if (check_sizes(w, ops, n, err))
        return -1;
    zkw_batch *b = batch_new(w, offset, epoch, bumps);
    if (!b)
        return km_fail(err, "zk submit: out of memory");
    b->ops = n;
    zkw_multi *before = w->tail;
    if (split(w, b, ops, n, err)) {
        unqueue_after(w, before);
        free(b);
        /* Its version predictions are half applied: the cache is void, a full sync rebuilds it. */
        zk_vcache_clear(&w->cache);
        zkw_emit(w, KM_ZKW_EV_RESYNC);
        return -1;
    }
    if (w->btail)
        w->btail->next = b;
    else
        w->bhead = b;
    w->btail = b;
    if (bumps)
        km_zkw_note_log_offset(w, offset);
    zkw_pump(w);
    return 0;
}

int km_zkw_submit(km_zkw *w, const km_zop *ops, size_t n, int64_t offset, int32_t epoch, km_err *err)
{
    return submit_batch(w, ops, n, offset, epoch, true, err);
}

int km_zkw_submit_partial(km_zkw *w, const km_zop *ops, size_t n, km_err *err)
{
    return submit_batch(w, ops, n, w->confirmed_offset, w->confirmed_epoch, false, err);
}

static void on_multi(int rc, const void *data);

static void release_wire(zkw_multi *m)
{
    free(m->zops);
    free(m->res);
    free(m->stats);
    m->zops = NULL;
    m->res = NULL;
    m->stats = NULL;
}

/* [check /controller_epoch, check or set /migration, data ops...]: the guards first, so a failed
 * multi's first error tells a foreign writer (guards) from our own landed write (data op). */
static int send_multi(km_zkw *w, zkw_multi *m)
{
    zkw_batch *b = m->batch;
    int n = m->nops + 2;
    release_wire(m);
    m->zops = calloc((size_t)n, sizeof *m->zops);
    m->res = calloc((size_t)n, sizeof *m->res);
    m->stats = calloc((size_t)n, sizeof *m->stats);
    if (!m->zops || !m->res || !m->stats)
        return -1;
    if (b->check_version < 0)
        b->check_version = w->next_check;
    zoo_check_op_init(&m->zops[0], "/controller_epoch", w->ctrl_epoch_version);
    if (m->is_last)
        zoo_set_op_init(&m->zops[1], "/migration", b->mig, b->mig_len, b->check_version, &m->mig_stat);
    else
        zoo_check_op_init(&m->zops[1], "/migration", b->check_version);
    for (int i = 0; i < m->nops; i++) {
        zkw_op *o = &m->ops[i];
        zoo_op_t *z = &m->zops[i + 2];
        if (o->kind == KM_ZOP_CREATE || o->kind == KM_ZOP_CREATE_SEQ)
            zoo_create_op_init(z, o->path, o->data, o->len, zk_session_acl(&w->sess, o->path),
                               o->kind == KM_ZOP_CREATE_SEQ ? ZOO_PERSISTENT_SEQUENTIAL : ZOO_PERSISTENT, NULL, 0);
        else if (o->kind == KM_ZOP_SET)
            zoo_set_op_init(z, o->path, o->data, o->len, o->version, &m->stats[i + 2]);
        else
            zoo_delete_op_init(z, o->path, o->version);
    }
    if (zoo_amulti(w->sess.zh, n, m->zops, m->res, on_multi, m) != ZOK)
        return -1;
    if (m->is_last)
        w->next_check = b->check_version + 1;
    m->st = M_SENT;
    m->generation = w->sess.generation;
    w->inflight++;
    return 0;
}

/* A multi that moves /migration goes out only once every earlier multi checking the same
 * /migration version is acknowledged. Otherwise one of them could fail (a drifted znode) while the
 * bump lands, and ZooKeeper would claim an offset whose data it does not hold. Multis before an
 * earlier bump need no wait: if that bump fails, ours fails its /migration check with it. */
static bool bump_may_go(const km_zkw *w, const zkw_multi *m)
{
    int open = 0;
    for (const zkw_multi *x = w->head; x && x != m; x = x->next) {
        if (x->is_last)
            open = 0;
        else if (x->st != M_ACKED)
            open++;
    }
    return open == 0;
}

void zkw_pump(km_zkw *w)
{
    if (w->state != KM_ZKW_READY || w->recover_wanted || !w->sess.zh)
        return;
    while (w->next_send && w->inflight < w->cfg.max_inflight) {
        zkw_multi *m = w->next_send;
        if (m->st == M_ACKED) { /* found landed by recovery, waiting for its predecessors */
            w->next_send = m->next;
            continue;
        }
        if (m->is_last && !bump_may_go(w, m))
            return; /* the replies still due call us again */
        if (send_multi(w, m)) {
            w->recover_wanted = true; /* not connected: the session watcher starts recovery */
            return;
        }
        w->next_send = m->next;
    }
}

static void count_ops(km_zkw *w, const zkw_multi *m)
{
    for (int i = 0; i < m->nops; i++) {
        km_zop_kind k = m->ops[i].kind;
        if (k == KM_ZOP_CREATE || k == KM_ZOP_CREATE_SEQ) w->m.znodes_created++;
        else if (k == KM_ZOP_SET) w->m.znodes_updated++;
        else w->m.znodes_deleted++;
    }
}

/* A batch is confirmed only now, after its /migration write is known to have succeeded (the
 * ordering Kafka got wrong in its dualWriteOffset metric). */
static void confirm_batch(km_zkw *w, zkw_batch *b, int version)
{
    w->mig_version = version;
    memcpy(w->mig, b->mig, (size_t)b->mig_len + 1);
    w->mig_len = b->mig_len;
    w->confirmed_offset = b->offset;
    w->confirmed_epoch = b->epoch;
    zkw_note_delta_time(w, zk_now_ms() - b->submitted_ms);
}

void zkw_ack(km_zkw *w, zkw_multi *m, bool adopted, int mig_version)
{
    m->st = M_ACKED;
    count_ops(w, m);
    if (adopted)
        w->m.lost_acks_adopted++;
    else
        w->m.multis_ok++;
    if (m->is_last)
        confirm_batch(w, m->batch, mig_version);
}

/* Frees the acknowledged prefix. No events: recovery must finish its bookkeeping before the
 * owner reacts (a CONFIRMED seen while still RECOVERING would look "not idle" to the owner, and
 * nothing would wake it again). */
zkw_popped zkw_pop_acked_quiet(km_zkw *w)
{
    zkw_popped p = {false, false};
    while (w->head && w->head->st == M_ACKED) {
        zkw_multi *m = w->head;
        w->head = m->next;
        if (w->tail == m)
            w->tail = NULL;
        if (w->next_send == m)
            w->next_send = m->next;
        w->pending_ops -= (size_t)m->nops;
        p.any = true;
        if (--m->batch->multis_left == 0 && m->batch == w->bhead) {
            w->bhead = m->batch->next;
            if (w->btail == m->batch)
                w->btail = NULL;
            p.confirmed |= m->batch->bumps;
            free(m->batch);
        }
        zkw_free_multi(m);
    }
    return p;
}

void zkw_emit_progress(km_zkw *w, zkw_popped p)
{
    if (p.confirmed)
        zkw_emit(w, KM_ZKW_EV_CONFIRMED);
    if (p.any)
        zkw_emit(w, KM_ZKW_EV_PROGRESS);
    if (p.any && !w->head && km_zkw_get_state(w) == KM_ZKW_READY)
        zkw_emit(w, KM_ZKW_EV_DRAINED);
}

void zkw_pop_acked(km_zkw *w)
{
    zkw_emit_progress(w, zkw_pop_acked_quiet(w));
}

static bool session_gone(int rc)
{
    return rc == ZCONNECTIONLOSS || rc == ZOPERATIONTIMEOUT || rc == ZCLOSING || rc == ZSESSIONEXPIRED ||
           rc == ZINVALIDSTATE;
}

/* A failed multi: ops 0/1 are the guards (verify, then adopt or fence); a failure no op carries
 * is the client's own (outcome unknown, verify); a data op failing means ZooKeeper has drifted
 * from our predictions and only a full sync can say how. */
static void on_failed(km_zkw *w, zkw_multi *m, int rc)
{
    int f = zkw_failed_op(m->res, m->nops + 2);
    m->st = M_UNKNOWN;
    w->recover_wanted = true;
    if (f < 0) { /* no op carries an error: the client failed it locally, the outcome is unknown */
        zkw_log(w, KM_LOG_INFO, "zk write: multi failed without a server verdict (%s); verifying", zerror(rc));
        return;
    }
    if (f >= 2) {
        /* Recovery decided whether each multi landed before resending it, so a data op failing
         * now is never our own earlier attempt. */
        const zkw_op *o = &m->ops[f - 2];
        static const char *verbs[] = {"create", "create sequential", "setData", "delete"};
        zkw_log(w, KM_LOG_WARN, "zk write: %s %s (expected zkVersion %d) failed: %s: ZooKeeper differs from our "
                "model of it; re-syncing", verbs[o->kind], o->path, o->version, zerror(m->res[f].err));
        w->resync_wanted = true;
        return;
    }
    zkw_log(w, KM_LOG_INFO, "zk write: guard %s failed (%s); verifying before anything else",
            f == 0 ? "/controller_epoch" : "/migration", zerror(rc));
}

/* How many times in a row a multi too large to share one may lose the connection before we conclude
 * that the servers' jute.maxbuffer is smaller than zookeeper.jute.maxbuffer says: a server closes
 * the connection on a request above it, so resending would loop for ever. */
#define BIG_MULTI_LOSSES 3

/* A multi above max_multi_bytes lost its connection: true when that keeps happening and the writer
 * stopped, refused, naming the znode (km_zkw_znode_too_large). */
static bool big_multi_lost(km_zkw *w, const zkw_multi *m)
{
    if (m->bytes <= w->cfg.max_multi_bytes || ++w->big_losses < BIG_MULTI_LOSSES)
        return false;
    const zkw_op *big = &m->ops[0];
    for (int i = 1; i < m->nops; i++)
        if (m->ops[i].len > big->len)
            big = &m->ops[i];
    w->too_large = true;
    zkw_fence(w, "ZooKeeper closed the connection each of the %d times the multi writing znode %.200s (%d bytes, "
              "%zu with its multi) was sent: its servers' jute.maxbuffer must be smaller than "
              "zookeeper.jute.maxbuffer=%zu; set zookeeper.jute.maxbuffer to the servers' value, or raise theirs",
              w->big_losses, big->path, big->len, m->bytes, w->cfg.jute_maxbuffer);
    return true;
}

static void on_multi(int rc, const void *data)
{
    zkw_multi *m = (zkw_multi *)data;
    km_zkw *w = m->w;
    w->inflight--;
    if (w->state == KM_ZKW_CLOSED || w->state == KM_ZKW_FENCED) {
        m->st = M_UNKNOWN;
        return;
    }
    if (rc == ZOK) {
        if (m->bytes > w->cfg.max_multi_bytes)
            w->big_losses = 0;
        zkw_ack(w, m, false, m->mig_stat.version);
    } else if (session_gone(rc)) {
        m->st = M_UNKNOWN;
        w->recover_wanted = true;
        if (rc == ZCONNECTIONLOSS && big_multi_lost(w, m))
            return;
    } else {
        on_failed(w, m, rc);
    }
    zkw_pop_acked(w);
    if (w->recover_wanted && w->inflight == 0 && w->state == KM_ZKW_READY &&
        zoo_state(w->sess.zh) == ZOO_CONNECTED_STATE)
        zkw_recover_start(w);
    else
        zkw_pump(w);
}
