/* The migration driver's ZooKeeper side: after every claim, SYNC_KRAFT_TO_ZK (read what ZooKeeper
 * holds, write the difference from the image, in bounded batches), then DUAL_WRITE (each image
 * delta becomes one batch ending with /migration := the delta's offset and epoch). Anything that
 * makes our model of ZooKeeper doubtful (drift, a new session) goes back to a full sync. */
#include "zk_bridge.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct km_zkb {
    km_zkb_config cfg;
    struct ev_loop *loop;
    const km_image *img;
    km_zkw *w;
    km_zkb_phase phase;
    char error[600];
    zk_vcache known;     /* path -> data ZooKeeper holds once our queued writes land */
    bool dirty;          /* the image moved during a full sync: sync again when it ends */
    int failed_syncs;    /* re-syncs in a row without a completed full sync */
    bool walking;
    zk_walk walk;
    zk_tree actual;
    zk_ops sync_ops;
    size_t sync_cursor;
    bool sync_all_queued;
    int64_t sync_started_ms;
    ev_timer retry;
    void (*user_log)(km_log_level lvl, const char *msg, void *ctx);
    void *user_ctx;
    zstr diff;
    km_zkb_summary sum;
};

static void set_phase(km_zkb *b, km_zkb_phase p)
{
    if (b->phase == p)
        return;
    b->phase = p;
    if (b->cfg.on_phase)
        b->cfg.on_phase(b, p, b->cfg.ctx);
}

static void stop(km_zkb *b, const char *why)
{
    snprintf(b->error, sizeof b->error, "%s", why);
    set_phase(b, KM_ZKB_STOPPED);
}

static void start_full_sync(km_zkb *b);

static void on_walked(zk_walk *wk, int rc, void *ctx);

static void on_retry(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)loop; (void)revents;
    start_full_sync(t->data);
}

/* SYNC_KRAFT_TO_ZK, step 1: read the mirrored namespace. */
static void start_full_sync(km_zkb *b)
{
    if (b->walking || b->phase == KM_ZKB_STOPPED || km_zkw_get_state(b->w) != KM_ZKW_READY)
        return;
    set_phase(b, KM_ZKB_SYNC);
    b->dirty = false;
    b->sync_started_ms = zk_now_ms();
    zk_tree_free(&b->actual);
    zk_ops_free(&b->sync_ops);
    b->sync_cursor = 0;
    b->sync_all_queued = false;
    b->walking = true;
    zk_walk_start(&b->walk, km_zkw_handle(b->w), &b->actual, on_walked, b);
}

static size_t chunk_ops(const km_zkb *b)
{
    if (b->cfg.sync_chunk_ops)
        return b->cfg.sync_chunk_ops;
    size_t bound = b->cfg.zk.max_pending_ops ? b->cfg.zk.max_pending_ops : 100000;
    return bound / 2 ? bound / 2 : 1;
}

/* Every path of our model of ZooKeeper, sorted: the deletion candidates of a catch-up pass. */
static void known_paths(const zk_vcache *known, zk_tree *out)
{
    for (size_t i = 0; i < known->cap; i++)
        if (zk_vcache_key_at(known, i))
            zk_tree_add(out, zk_vcache_key_at(known, i), NULL, ZN_DIR, NOTIFY_NONE, NULL);
    zk_tree_sort(out);
}

/* The image moved while the full sync ran. Reading ZooKeeper again could chase a busy log forever;
 * our model of it is exact by now, so the whole image is reconciled against the model in one
 * batch, and dual write starts right behind it. */
static void catch_up(km_zkb *b)
{
    km_err err = {{0}};
    zk_tree want = {0}, cands = {0};
    zk_ops ops = {0};
    b->dirty = false;
    if (zk_render_image(b->img, b->cfg.zk.controller_epoch, &want, &err)) {
        zk_tree_free(&want);
        return stop(b, err.msg);
    }
    known_paths(&b->known, &cands);
    zk_reconcile(&b->known, &cands, &want, b->img, &ops);
    b->sum.created += ops.created;
    b->sum.updated += ops.updated;
    b->sum.deleted += ops.deleted;
    if (ops.oom || km_zkw_submit(b->w, ops.v, ops.n, km_image_offset(b->img), km_image_epoch(b->img), &err))
        zkw_log(b->w, KM_LOG_ERROR, "zk sync: catching up with the image failed: %s",
                ops.oom ? "out of memory" : err.msg);
    zk_ops_free(&ops);
    zk_tree_free(&want);
    zk_tree_free(&cands);
}

static void finish_sync(km_zkb *b)
{
    km_zkw_set_snapshot_time(b->w, zk_now_ms() - b->sync_started_ms);
    b->sum.full_syncs++;
    b->failed_syncs = 0;
    zk_tree_free(&b->actual);
    zk_ops_free(&b->sync_ops);
    set_phase(b, KM_ZKB_DUAL_WRITE);
    if (b->dirty)
        catch_up(b);
}

/* Step 3: queue the difference in batches while the write-behind bound allows. Only the last
 * batch moves /migration to the image's offset; the others keep what ZooKeeper had, so a crash
 * half way never claims more than ZooKeeper holds. */
static void pump_sync(km_zkb *b)
{
    zk_ops *o = &b->sync_ops;
    km_err err = {{0}};
    while (b->phase == KM_ZKB_SYNC && !b->walking && !b->sync_all_queued && km_zkw_can_accept(b->w)) {
        size_t end = b->sync_cursor + chunk_ops(b);
        if (end > o->n)
            end = o->n;
        while (end < o->n && end > 0 && o->v[end - 1].join_next)
            end++;
        bool last = end == o->n;
        int64_t off = last ? km_image_offset(b->img) : km_zkw_confirmed_offset(b->w);
        int32_t ep = last ? km_image_epoch(b->img) : km_zkw_confirmed_epoch(b->w);
        if (km_zkw_submit(b->w, o->v + b->sync_cursor, end - b->sync_cursor, off, ep, &err)) {
            zkw_log(b->w, KM_LOG_ERROR, "zk sync: %s", err.msg);
            return; /* the writer asked for a re-sync (RESYNC event) or is stopping */
        }
        b->sync_cursor = end;
        b->sync_all_queued = last;
    }
    if (b->phase == KM_ZKB_SYNC && b->sync_all_queued && km_zkw_idle(b->w))
        finish_sync(b);
}

/* Step 2: our model of ZooKeeper is what we just read; the ops are the difference. */
static void plan_sync(km_zkb *b)
{
    km_err err = {{0}};
    zk_vcache_clear(&b->known);
    km_zkw_cache_forget_all(b->w);
    size_t expect = b->actual.n + km_image_partition_count(b->img) * 2 + km_image_topic_count(b->img) * 3 + 64;
    zk_vcache_reserve(&b->known, expect);
    zk_vcache_reserve(&b->w->cache, expect);
    for (size_t i = 0; i < b->actual.n; i++) {
        zk_node *n = &b->actual.v[i];
        zk_vcache_put_data(&b->known, n->path, 0, n->data ? strdup(n->data) : NULL);
        km_zkw_cache_put(b->w, n->path, n->version);
    }
    zk_tree want = {0};
    if (zk_render_image(b->img, b->cfg.zk.controller_epoch, &want, &err)) {
        zk_tree_free(&want);
        return stop(b, err.msg);
    }
    zkw_log(b->w, KM_LOG_DEBUG, "zk sync: rendered %zu znodes after %lld ms", want.n,
            (long long)(zk_now_ms() - b->sync_started_ms));
    b->sync_ops.diff = b->cfg.diff_only ? &b->diff : NULL;
    zk_reconcile(&b->known, &b->actual, &want, b->img, &b->sync_ops);
    zk_tree_free(&want);
    b->sum.created += b->sync_ops.created;
    b->sum.updated += b->sync_ops.updated;
    b->sum.deleted += b->sync_ops.deleted;
    if (b->sync_ops.oom)
        return stop(b, "zk sync: out of memory planning the full sync");
    zkw_log(b->w, KM_LOG_INFO, "zk sync: %zu znodes in ZooKeeper, %zu ops planned (%zu create, %zu update, "
            "%zu delete) after %lld ms", b->actual.n, b->sync_ops.n, b->sync_ops.created, b->sync_ops.updated,
            b->sync_ops.deleted, (long long)(zk_now_ms() - b->sync_started_ms));
    if (b->cfg.diff_only) {
        b->sum.full_syncs++;
        return set_phase(b, KM_ZKB_DUAL_WRITE);
    }
    pump_sync(b);
}

static void on_walked(zk_walk *wk, int rc, void *ctx)
{
    km_zkb *b = ctx;
    zk_walk_free(wk);
    b->walking = false;
    if (b->phase == KM_ZKB_STOPPED)
        return; /* fenced, or being freed: the replies are ZCLOSING */
    if (rc != ZOK) {
        zkw_log(b->w, KM_LOG_WARN, "zk sync: reading ZooKeeper failed (%s); retrying", zerror(rc));
        ev_timer_set(&b->retry, 0.1, 0.);
        ev_timer_start(b->loop, &b->retry);
        return;
    }
    zkw_log(b->w, KM_LOG_INFO, "zk sync: read %zu znodes in %lld ms", b->actual.n,
            (long long)(zk_now_ms() - b->sync_started_ms));
    plan_sync(b);
}

static void on_writer_event(km_zkw *w, km_zkw_event ev, void *ctx)
{
    km_zkb *b = ctx;
    (void)w;
    switch (ev) {
    case KM_ZKW_EV_RESYNC:
        /* Drift that a fresh read cannot explain keeps coming back: stop instead of spinning. */
        if (++b->failed_syncs > 5)
            return stop(b, "zk sync: ZooKeeper kept differing from what we read a moment before "
                           "(5 full syncs in a row); another writer is changing it");
        set_phase(b, KM_ZKB_WAITING);
        ev_timer_set(&b->retry, 0.05 * b->failed_syncs, 0.);
        ev_timer_start(b->loop, &b->retry);
        break;
    case KM_ZKW_EV_CLAIMED:
        set_phase(b, KM_ZKB_WAITING);
        start_full_sync(b);
        break;
    case KM_ZKW_EV_CONFIRMED:
    case KM_ZKW_EV_DRAINED:
        pump_sync(b);
        break;
    case KM_ZKW_EV_FENCED:
    case KM_ZKW_EV_REFUSED:
        stop(b, km_zkw_fence_reason(b->w));
        break;
    }
}

static void bridge_log(km_log_level lvl, const char *msg, void *ctx)
{
    km_zkb *b = ctx;
    b->user_log(lvl, msg, b->user_ctx);
}

km_zkb *km_zkb_new(struct ev_loop *loop, const km_image *img, const km_zkb_config *cfg, km_err *err)
{
    km_zkb *b = calloc(1, sizeof *b);
    if (!b)
        return km_fail(err, "zk bridge: out of memory"), NULL;
    b->cfg = *cfg;
    b->loop = loop;
    b->img = img;
    b->cfg.zk.on_event = on_writer_event;
    b->cfg.zk.read_only = cfg->diff_only;
    b->user_log = cfg->zk.log;
    b->user_ctx = cfg->zk.ctx;
    b->cfg.zk.log = cfg->zk.log ? bridge_log : NULL;
    b->cfg.zk.ctx = b; /* the writer's callbacks come to the bridge; logs go on to the caller */
    zs_init(&b->diff);
    ev_timer_init(&b->retry, on_retry, 0.1, 0.);
    b->retry.data = b;
    b->w = km_zkw_new(loop, &b->cfg.zk, err);
    if (!b->w) {
        free(b);
        return NULL;
    }
    return b;
}

void km_zkb_free(km_zkb *b)
{
    if (!b)
        return;
    ev_timer_stop(b->loop, &b->retry);
    b->phase = KM_ZKB_STOPPED;
    km_zkw_free(b->w); /* fires outstanding walk replies (ZCLOSING) while the walk still exists */
    zk_walk_free(&b->walk);
    zk_tree_free(&b->actual);
    zk_ops_free(&b->sync_ops);
    zk_vcache_clear(&b->known);
    zs_free(&b->diff);
    free(b);
}

km_zkb_phase km_zkb_get_phase(const km_zkb *b) { return b->phase; }
const char *km_zkb_error(const km_zkb *b) { return b->error; }
km_zkw *km_zkb_writer(km_zkb *b) { return b->w; }

bool km_zkb_can_accept(km_zkb *b)
{
    return b->phase == KM_ZKB_DUAL_WRITE && km_zkw_can_accept(b->w);
}

bool km_zkb_idle(const km_zkb *b)
{
    return b->phase == KM_ZKB_DUAL_WRITE && !b->dirty && km_zkw_idle(b->w) &&
           km_zkw_confirmed_offset(b->w) == km_image_offset(b->img);
}

void km_zkb_get_summary(const km_zkb *b, km_zkb_summary *s)
{
    *s = b->sum;
    s->diff = b->diff.p ? b->diff.p : "";
}

int km_zkb_delta(km_zkb *b, const km_delta *d, km_err *err)
{
    if (b->phase == KM_ZKB_STOPPED)
        return km_fail(err, "zk bridge: stopped: %s", b->error);
    km_zkw_note_log_offset(b->w, km_delta_offset(d));
    if (b->phase != KM_ZKB_DUAL_WRITE || b->cfg.diff_only) {
        b->dirty = true; /* the running (or next) full sync catches up with the newer image */
        return 0;
    }
    if (km_delta_is_snapshot(d)) { /* a new snapshot replaced the image: reconcile all of it */
        b->dirty = true;
        catch_up(b);
        return 0;
    }
    zk_tree want = {0}, cands = {0};
    zk_delta_render(b->img, d, b->cfg.zk.controller_epoch, &want, &cands);
    zk_ops ops = {0};
    zk_reconcile(&b->known, &cands, &want, b->img, &ops);
    zk_tree_free(&want);
    zk_tree_free(&cands);
    b->sum.created += ops.created;
    b->sum.updated += ops.updated;
    b->sum.deleted += ops.deleted;
    b->sum.deltas++;
    int rc = ops.oom ? km_fail(err, "zk delta: out of memory at offset %lld", (long long)km_delta_offset(d))
                     : km_zkw_submit(b->w, ops.v, ops.n, km_delta_offset(d), km_delta_epoch(d), err);
    zk_ops_free(&ops);
    return rc;
}

int km_zk_full_sync_ops(const km_image *img, int32_t controller_epoch, km_zop **ops, size_t *n, km_err *err)
{
    zk_tree want = {0}, none = {0};
    zk_vcache known = {0};
    zk_ops o = {0};
    if (zk_render_image(img, controller_epoch, &want, err)) {
        zk_tree_free(&want);
        return -1;
    }
    zk_reconcile(&known, &none, &want, img, &o);
    zk_tree_free(&want);
    zk_vcache_clear(&known);
    if (o.oom) {
        zk_ops_free(&o);
        return km_fail(err, "zk ops: out of memory");
    }
    *ops = o.v;
    *n = o.n;
    return 0;
}

void km_zk_ops_free(km_zop *ops, size_t n)
{
    zk_ops o = {.v = ops, .n = n, .cap = n};
    zk_ops_free(&o);
}
