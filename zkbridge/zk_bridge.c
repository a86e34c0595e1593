/* The migration driver's ZooKeeper side: after every claim, SYNC_KRAFT_TO_ZK (read what ZooKeeper
 * holds, then a pass over the image that writes the difference as it is planned, slice by slice,
 * within the write-behind bound), then DUAL_WRITE (each image delta becomes one batch ending with
 * /migration := the delta's offset and epoch). Anything that makes our model of ZooKeeper doubtful
 * (drift, a new session) goes back to a full sync; an image that moved meanwhile gets a catch-up
 * pass against the model. */
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
    zk_vcache known;     /* path -> data ZooKeeper holds once our queued writes land; vals: pass marks */
    km_zk_pwenc *pw;     /* how password-type config values are stored */
    bool warned_plain;   /* said once that passwords go to ZooKeeper in the clear */
    bool dirty;          /* the image moved during a pass: a catch-up pass follows it */
    int failed_syncs;    /* re-syncs in a row without a completed full sync */
    bool walking;
    bool waiting_for_log;  /* claimed; the image has not reached what /migration records (guard.wait_for_log) */
    zk_walk walk;
    zk_tree actual;
    /* the running pass over the image (a full sync after a read of ZooKeeper, or a catch-up) */
    zk_plan plan;
    int pass;            /* the mark of the running pass in known's vals */
    bool full;           /* it follows a read of ZooKeeper */
    bool all_queued;     /* its last batch, moving /migration, is with the writer */
    zk_ops pass_ops;     /* planned, not yet handed to the writer */
    int64_t pass_offset; /* the image's position when the pass began: what its last batch claims */
    int32_t pass_epoch;
    ev_idle plan_idle;
    int64_t sync_started_ms;
    ev_timer retry;
    void (*user_log)(km_log_level lvl, const char *msg, void *ctx);
    void *user_ctx;
    zstr diff;
    km_zkb_summary sum;
    size_t pass_planned0;  /* sum's writes when the running pass began (progress counts from there) */
    uint64_t pass_acked0;  /* the writer's acknowledged znode writes then */
    size_t last_read;      /* znodes the last completed read of ZooKeeper found */
    bool refused;          /* stopped by a guard: bad input, not a runtime failure */
    int64_t delete_limit;  /* the most znodes a pass may delete now; -1: no limit */
    char *refused_deletes; /* "- path" lines of the pass that was refused */
    char verdict[600];     /* diff_only: why a sync would be refused ("" when it would not) */
    zk_acl_diff acl_diff;  /* diff_only with zookeeper.set.acl: the ACLs of what was read */
    int64_t await_offset;  /* after a claim: /migration's offset, ahead of the image; -1: not waiting */
    bool rollback_forced;  /* the claim's guard saw the image behind /migration and --force overrode it */
    int32_t await_epoch;
};

static void set_phase(km_zkb *b, km_zkb_phase p)
{
    if (b->phase == p)
        return;
    b->phase = p;
    if (b->cfg.on_phase)
        b->cfg.on_phase(b, p, b->cfg.ctx);
}

static void abort_pass(km_zkb *b)
{
    ev_idle_stop(b->loop, &b->plan_idle);
    zk_plan_free(&b->plan);
    zk_ops_free(&b->pass_ops);
    memset(&b->pass_ops, 0, sizeof b->pass_ops); /* its counts too: what was not handed over never happened */
    b->all_queued = false;
}

static void stop(km_zkb *b, const char *why)
{
    snprintf(b->error, sizeof b->error, "%s", why);
    b->await_offset = -1;
    abort_pass(b);
    set_phase(b, KM_ZKB_STOPPED);
}

static void start_full_sync(km_zkb *b);

static int cmp_path(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* The scan found more znodes to delete than the limit allows: nothing is deleted, and nothing of
 * this pass was handed to the writer (it held its writes until the count was known). */
static void refuse_deletes(km_zkb *b)
{
    zk_plan *p = &b->plan;
    qsort(p->doomed, p->n_doomed, sizeof *p->doomed, cmp_path);
    zstr list;
    zs_init(&list);
    for (size_t i = 0; i < p->n_doomed; i++)
        zs_fmt(&list, "- %s\n", p->doomed[i]);
    free(b->refused_deletes);
    b->refused_deletes = zs_take(&list);
    char why[400];
    snprintf(why, sizeof why, "zk sync: refusing to delete %zu znodes, more than zk.max.deletes=%lld%s; "
             "stopped before deleting anything", p->n_doomed, (long long)b->delete_limit,
             b->cfg.guard.max_deletes_set ? "" : " (the default for the first sync of a cluster ZK-mode brokers wrote)");
    b->refused = true;
    stop(b, why);
}

static void on_walked(zk_walk *wk, int rc, void *ctx);

static void on_retry(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)loop; (void)revents;
    start_full_sync(t->data);
}

/* SYNC_KRAFT_TO_ZK, step 1: read the mirrored namespace. */
/* Following a live quorum, the claim may find /migration ahead of our image: Kafka's driver wrote it for
 * records our observer has not been handed yet (it stops once our claim fences it). As Kafka's own
 * SyncKRaftMetadataEvent does, the sync waits until the image reaches that position: never an older image
 * over a newer ZooKeeper. The log keeps being read meanwhile (km_zkb_can_accept). */
static bool image_behind_claim(km_zkb *b)
{
    int64_t off = km_zkw_confirmed_offset(b->w);
    int32_t ep = km_zkw_confirmed_epoch(b->w);
    int32_t ours = km_image_epoch(b->img);
    bool behind = ours != ep ? ours < ep : km_image_offset(b->img) < off;
    if (behind && !b->waiting_for_log)
        zkw_log(b->w, KM_LOG_INFO, "zk sync: the log (offset %lld epoch %d) has not reached what /migration records "
                "(offset %lld epoch %d): waiting for it", (long long)km_image_offset(b->img), ours, (long long)off, ep);
    b->waiting_for_log = behind;
    return behind;
}

static void arm_retry(km_zkb *b, double seconds)
{
    ev_timer_stop(b->loop, &b->retry); /* libev: never set an active timer */
    ev_timer_set(&b->retry, seconds, 0.);
    ev_timer_start(b->loop, &b->retry);
}

/* After a claim that found /migration ahead of the image (sync_when_image_reaches_migration): still behind?
 * Polled, not left to the next delta: a delta may not come (or come while the writer is not READY), and a
 * sync that never starts would pause the log reader for good. */
static bool still_awaiting_image(km_zkb *b)
{
    int32_t ours = km_image_epoch(b->img);
    bool behind = ours != b->await_epoch ? ours < b->await_epoch : km_image_offset(b->img) < b->await_offset;
    if (behind) {
        arm_retry(b, 0.1);
        return true;
    }
    zkw_log(b->w, KM_LOG_INFO, "zk sync: the image reached offset %lld, which /migration records: starting the "
            "full sync", (long long)b->await_offset);
    b->await_offset = -1;
    return false;
}

static void start_full_sync(km_zkb *b)
{
    if (b->walking || b->phase == KM_ZKB_STOPPED || km_zkw_get_state(b->w) != KM_ZKW_READY)
        return;
    if (b->await_offset >= 0 && still_awaiting_image(b))
        return;
    if (b->cfg.guard.wait_for_log && image_behind_claim(b)) {
        set_phase(b, KM_ZKB_WAITING);
        arm_retry(b, 0.1);
        return;
    }
    abort_pass(b);
    set_phase(b, KM_ZKB_SYNC);
    b->sync_started_ms = zk_now_ms();
    zk_tree_free(&b->actual);
    b->walking = true;
    zk_walk_start(&b->walk, km_zkw_handle(b->w), &b->actual, on_walked, b);
}

/* Without password.encoder.secret passwords are stored as they are (Kafka's NOOP encoder), and
 * ZK-mode brokers that have a secret then drop them: worth saying, once. */
static void warn_plain_passwords(km_zkb *b)
{
    size_t it = 0;
    const km_config_res *res;
    if (b->warned_plain || km_zk_pwenc_enabled(b->pw))
        return;
    while ((res = km_image_next_config(b->img, &it)))
        for (int32_t i = 0; i < res->n; i++)
            if (km_zk_is_password_config(res->kv[i].name)) {
                zkw_log(b->w, KM_LOG_WARN, "zk sync: config %s of %s is a password and no password.encoder.secret "
                        "is set: it goes to ZooKeeper in the clear, which ZK-mode brokers configured with a "
                        "secret cannot decode", res->kv[i].name, res->name[0] ? res->name : "<default>");
                b->warned_plain = true;
                return;
            }
}

/* Step 2 starts a pass: from now on the slices are planned between the loop's other work. */
static void begin_pass(km_zkb *b, bool full, zk_tree *cands)
{
    abort_pass(b);
    if (++b->pass == 0) /* 0 is what deltas leave in known's vals */
        b->pass = 1;
    zk_plan_start(&b->plan, b->img, b->cfg.zk.controller_epoch, b->pw, &b->known, full ? &b->w->cache : NULL,
                  b->pass, cands);
    b->pass_ops.diff = b->cfg.diff_only ? &b->diff : NULL;
    b->pass_offset = km_image_offset(b->img);
    b->pass_epoch = km_image_epoch(b->img);
    km_zkw_note_log_offset(b->w, b->pass_offset); /* the lag shows the sync's distance from its start */
    b->full = full;
    b->dirty = false;
    km_zkw_metrics m;
    km_zkw_get_metrics(b->w, &m);
    b->pass_planned0 = b->sum.created + b->sum.updated + b->sum.deleted;
    b->pass_acked0 = m.znodes_created + m.znodes_updated + m.znodes_deleted;
    if (full)
        warn_plain_passwords(b);
    ev_idle_start(b->loop, &b->plan_idle);
}

/* Every path of our model of ZooKeeper: the deletion candidates of a catch-up pass. */
static void known_paths(const zk_vcache *known, zk_tree *out)
{
    for (size_t i = 0; i < known->cap; i++)
        if (zk_vcache_key_at(known, i))
            zk_tree_add(out, zk_vcache_key_at(known, i), NULL, ZN_DIR, NOTIFY_NONE, NULL);
}

/* The image moved during a pass. Reading ZooKeeper again could chase a busy log forever; our
 * model of it is exact by now, so the whole image is reconciled against the model instead. */
static void begin_catch_up(km_zkb *b)
{
    zk_tree cands = {0};
    known_paths(&b->known, &cands);
    if (cands.oom) {
        zk_tree_free(&cands);
        return stop(b, "zk sync: out of memory listing our model of ZooKeeper");
    }
    set_phase(b, KM_ZKB_SYNC);
    begin_pass(b, false, &cands);
}

static void finish_pass(km_zkb *b)
{
    if (b->full) {
        km_zkw_set_snapshot_time(b->w, zk_now_ms() - b->sync_started_ms);
        b->sum.full_syncs++;
        b->failed_syncs = 0;
    }
    abort_pass(b);
    if (b->dirty)
        return begin_catch_up(b);
    if (!b->cfg.guard.max_deletes_set)
        b->delete_limit = -1; /* synced once: deletions from now on are the log's own */
    set_phase(b, KM_ZKB_DUAL_WRITE);
}

static void maybe_finish(km_zkb *b)
{
    if (b->phase == KM_ZKB_SYNC && b->all_queued && km_zkw_idle(b->w))
        finish_pass(b);
}

static void count_ops(km_zkb *b, zk_ops *o)
{
    b->sum.created += o->created;
    b->sum.updated += o->updated;
    b->sum.deleted += o->deleted;
    o->created = o->updated = o->deleted = 0;
}

/* A znode ZooKeeper cannot hold: the image itself is what no retry can write, so the bridge stops
 * as refused (bad input) instead of re-syncing into the same refusal. */
static void refuse_too_large(km_zkb *b, const char *what, const char *msg)
{
    char why[sizeof b->error];
    snprintf(why, sizeof why, "%s: %s", what, msg);
    b->refused = true;
    stop(b, why);
}

/* Hands the planned ops to the writer: as a partial batch (checks only) while the pass goes on,
 * as the batch that moves /migration to the pass's offset at its end. So a crash half way never
 * leaves ZooKeeper claiming more than it holds. */
static void hand_over(km_zkb *b, bool last)
{
    km_err err = {{0}};
    zk_ops *o = &b->pass_ops;
    count_ops(b, o);
    int rc = last ? km_zkw_submit(b->w, o->v, o->n, b->pass_offset, b->pass_epoch, &err)
                  : km_zkw_submit_partial(b->w, o->v, o->n, &err);
    zk_ops_free(o);
    if (rc && km_zkw_znode_too_large(b->w))
        return refuse_too_large(b, "zk sync", err.msg);
    if (rc) {
        zkw_log(b->w, KM_LOG_ERROR, "zk sync: %s", err.msg);
        return abort_pass(b); /* the writer asked for a re-sync (RESYNC), or a new claim restarts it */
    }
    if (last) {
        b->all_queued = true;
        maybe_finish(b);
    }
}

/* Ops per hand-over: a few full multis (the writer's own max_multi_ops, defaults applied). */
static size_t hand_over_ops(const km_zkb *b)
{
    return b->cfg.sync_chunk_ops ? b->cfg.sync_chunk_ops : 4 * (size_t)b->w->cfg.max_multi_ops;
}

static void on_acl_diff_done(zk_acl_diff *d, void *ctx)
{
    km_zkb *b = ctx;
    b->sum.acl_differences = d->differ;
    b->sum.acls_checked = d->rc == ZOK;
    if (d->rc != ZOK)
        zkw_log(b->w, KM_LOG_WARN, "zk diff: the ACLs could not all be read (%s): not compared", zerror(d->rc));
    zk_acl_diff_free(d);
    set_phase(b, KM_ZKB_DUAL_WRITE);
}

static void finish_diff(km_zkb *b)
{
    count_ops(b, &b->pass_ops);
    bool acls = b->cfg.zk.security && b->cfg.zk.security->set_acl;
    if (acls) /* the plan still holds what was read */
        zk_acl_diff_start(&b->acl_diff, km_zkw_handle(b->w), &b->plan.cands, &b->diff, on_acl_diff_done, b);
    abort_pass(b);
    b->sum.full_syncs++;
    if (!b->verdict[0] && b->delete_limit >= 0 && b->sum.deleted > (size_t)b->delete_limit)
        snprintf(b->verdict, sizeof b->verdict, "it would delete %zu znodes, more than zk.max.deletes=%lld%s",
                 b->sum.deleted, (long long)b->delete_limit,
                 b->cfg.guard.max_deletes_set ? "" : " (the default for the first sync of a cluster ZK-mode brokers wrote)");
    zkw_log(b->w, KM_LOG_INFO, "zk diff: %zu missing, %zu different, %zu only in ZooKeeper after %lld ms",
            b->sum.created, b->sum.updated, b->sum.deleted, (long long)(zk_now_ms() - b->sync_started_ms));
    if (!acls)
        set_phase(b, KM_ZKB_DUAL_WRITE);
}

/* The scan has just counted the pass's deletions (none is planned yet): more than allowed? */
static bool over_delete_limit(const km_zkb *b)
{
    return !b->cfg.diff_only && b->delete_limit >= 0 && b->plan.stage == PLAN_DELETES && b->plan.it == 0 &&
           b->plan.n_doomed > (size_t)b->delete_limit;
}

/* One slice per loop iteration with nothing else to do, while the write-behind bound allows. */
static void plan_pump(km_zkb *b)
{
    if (!km_zkb_planning(b) || b->phase != KM_ZKB_SYNC)
        return ev_idle_stop(b->loop, &b->plan_idle);
    km_zkw_state ws = km_zkw_get_state(b->w);
    if (!b->cfg.diff_only && ws != KM_ZKW_READY && ws != KM_ZKW_RECOVERING)
        return abort_pass(b); /* the session is gone: the next claim starts the sync again */
    if (!b->cfg.diff_only && !km_zkw_can_accept(b->w))
        return ev_idle_stop(b->loop, &b->plan_idle); /* the writer's PROGRESS resumes it */
    bool done = zk_plan_step(&b->plan, &b->pass_ops);
    if (b->pass_ops.oom)
        return stop(b, "zk sync: out of memory (or the password encoder failed) planning the pass over the image");
    bool counted = b->plan.stage >= PLAN_DELETES; /* the scan knows every znode the pass deletes */
    if (over_delete_limit(b))
        return refuse_deletes(b);
    if (done) {
        ev_idle_stop(b->loop, &b->plan_idle);
        zkw_log(b->w, KM_LOG_INFO, "zk sync: pass planned after %lld ms",
                (long long)(zk_now_ms() - b->sync_started_ms));
    }
    if (b->cfg.diff_only) {
        zk_ops_free(&b->pass_ops); /* only the counts and the diff lines matter */
        if (done)
            finish_diff(b);
        return;
    }
    /* Under a delete limit nothing is written before the deletions are counted. */
    if (b->delete_limit >= 0 && !counted)
        return;
    if (done || b->pass_ops.n >= hand_over_ops(b))
        hand_over(b, done);
}

static void on_plan_idle(struct ev_loop *loop, ev_idle *w, int revents)
{
    (void)loop; (void)revents;
    plan_pump(w->data);
}

static void resume_pass(km_zkb *b)
{
    if (km_zkb_planning(b) && b->phase == KM_ZKB_SYNC && !ev_is_active(&b->plan_idle))
        ev_idle_start(b->loop, &b->plan_idle);
    maybe_finish(b);
}

/* Our model of ZooKeeper is about to be what we just read (the plan's first stage loads it). */
static int reset_model(km_zkb *b)
{
    zk_vcache_clear(&b->known);
    km_zkw_cache_forget_all(b->w);
    size_t expect = b->actual.n + km_image_partition_count(b->img) * 2 + km_image_topic_count(b->img) * 3 + 64;
    return zk_vcache_reserve(&b->known, expect) || zk_vcache_reserve(&b->w->cache, expect) ? -1 : 0;
}

/* ZooKeeper's ACL on a znode denies our (authenticated) identity: asking again gets the same
 * answer, so the credentials are what is wrong (bad input), never something to wait out. */
static void refuse_unreadable(km_zkb *b, const char *path)
{
    char why[sizeof b->error];
    snprintf(why, sizeof why, "zk %s: not authorized to read %.300s: its ZooKeeper ACL denies this session's identity "
             "(ZooKeeper: not authenticated); use the brokers' credentials (zookeeper.* keys, the JAAS Client "
             "section)", b->cfg.diff_only ? "diff" : "sync", path[0] ? path : "the mirrored namespace");
    b->refused = true;
    stop(b, why);
}

static void on_walked(zk_walk *wk, int rc, void *ctx)
{
    km_zkb *b = ctx;
    char failed[sizeof wk->failed_path];
    snprintf(failed, sizeof failed, "%s", wk->failed_path);
    zk_walk_free(wk);
    b->walking = false;
    if (b->phase == KM_ZKB_STOPPED)
        return; /* fenced, or being freed: the replies are ZCLOSING */
    if (rc == ZNOAUTH)
        return refuse_unreadable(b, failed);
    if (rc != ZOK) {
        zkw_log(b->w, KM_LOG_WARN, "zk sync: reading ZooKeeper failed (%s); retrying", zerror(rc));
        ev_timer_set(&b->retry, 0.1, 0.);
        ev_timer_start(b->loop, &b->retry);
        return;
    }
    b->last_read = b->actual.n; /* the plan takes the tree over */
    zkw_log(b->w, KM_LOG_INFO, "zk sync: read %zu znodes in %lld ms", b->actual.n,
            (long long)(zk_now_ms() - b->sync_started_ms));
    if (reset_model(b))
        return stop(b, "zk sync: out of memory sizing our model of ZooKeeper");
    begin_pass(b, true, &b->actual);
}

/* OffsetAndEpoch.compareTo: the epoch decides, then the offset. */
static bool image_behind(const km_zkb *b, int64_t offset, int32_t epoch)
{
    int32_t ours = km_image_epoch(b->img);
    return ours != epoch ? ours < epoch : km_image_offset(b->img) < offset;
}

/* After a claim /migration may record more than the image holds (the previous writer was ahead of
 * this process's log): syncing now would write an older image and move /migration backwards.
 * Like Kafka's SyncKRaftMetadataEvent, the sync waits for the image to reach it. */
static void sync_when_image_reaches_migration(km_zkb *b)
{
    int64_t offset = km_zkw_confirmed_offset(b->w);
    int32_t epoch = km_zkw_confirmed_epoch(b->w);
    b->await_offset = -1;
    if (!b->cfg.diff_only && !b->rollback_forced && offset >= 0 && image_behind(b, offset, epoch)) {
        b->await_offset = offset;
        b->await_epoch = epoch;
        zkw_log(b->w, KM_LOG_WARN, "zk claim: /migration records offset %lld epoch %d, ahead of the image (offset "
                "%lld epoch %d): the full sync waits until the log reaches it, so that /migration never moves "
                "backwards", (long long)offset, epoch, (long long)km_image_offset(b->img), km_image_epoch(b->img));
    }
    start_full_sync(b);
}

/* The session expired: nothing can be submitted until the new session's claim, whose full re-sync
 * writes the image as it is then (deltas meanwhile are folded into it, never refused). */
static void session_lost(km_zkb *b)
{
    ev_timer_stop(b->loop, &b->retry);
    abort_pass(b);
    b->await_offset = -1;
    b->dirty = true;
    set_phase(b, KM_ZKB_WAITING);
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
        abort_pass(b);
        set_phase(b, KM_ZKB_WAITING);
        ev_timer_set(&b->retry, 0.05 * b->failed_syncs, 0.);
        ev_timer_start(b->loop, &b->retry);
        break;
    case KM_ZKW_EV_CLAIMED:
        set_phase(b, KM_ZKB_WAITING);
        sync_when_image_reaches_migration(b);
        break;
    case KM_ZKW_EV_SESSION_LOST:
        session_lost(b);
        break;
    case KM_ZKW_EV_CONFIRMED:
        if (b->cfg.on_confirmed)
            b->cfg.on_confirmed(b, km_zkw_confirmed_offset(b->w), b->cfg.ctx);
        resume_pass(b);
        break;
    case KM_ZKW_EV_DRAINED:
    case KM_ZKW_EV_PROGRESS:
        resume_pass(b);
        break;
    case KM_ZKW_EV_FENCED:
    case KM_ZKW_EV_REFUSED:
        /* wrong credentials, a znode the servers cannot take: bad input, retrying cannot help */
        b->refused |= km_zkw_auth_refused(b->w) || km_zkw_znode_too_large(b->w);
        stop(b, km_zkw_fence_reason(b->w));
        break;
    }
}

/* Before each claim: may this image take over what ZooKeeper holds? Also sets the pass's delete limit. */
static int bridge_guard(km_zkw *w, const km_zk_found *f, char *why, size_t cap, void *ctx)
{
    km_zkb *b = ctx;
    bool forceable = false;
    int rc = km_zk_guard_check(b->img, f, &b->cfg.guard, &forceable, why, cap);
    if (rc && !b->cfg.diff_only) {
        b->refused = true;
        return -1;
    }
    if (rc) /* diff: what a sync would run into */
        snprintf(b->verdict, sizeof b->verdict, "%s", why);
    else if (why[0])
        zkw_log(w, KM_LOG_WARN, "zk claim: %s", why);
    const km_zk_guard *g = &b->cfg.guard;
    /* the operator took over knowing the image is behind: the sync rolls ZooKeeper back, as asked */
    b->rollback_forced = g->force && f->has_migration && f->migration_offset >= 0 &&
                         image_behind(b, f->migration_offset, f->migration_epoch);
    b->delete_limit = g->max_deletes_set ? g->max_deletes : km_zk_first_sync(f) ? 0 : -1;
    return 0;
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
    b->cfg.zk.guard = bridge_guard;
    b->cfg.zk.wait_for_newer_leader = cfg->guard.wait_for_log;
    b->delete_limit = cfg->guard.max_deletes_set ? cfg->guard.max_deletes : -1;
    b->await_offset = -1;
    b->cfg.zk.read_only = cfg->diff_only;
    b->user_log = cfg->zk.log;
    b->user_ctx = cfg->zk.ctx;
    b->cfg.zk.log = cfg->zk.log ? bridge_log : NULL;
    b->cfg.zk.ctx = b; /* the writer's callbacks come to the bridge; logs go on to the caller */
    zs_init(&b->diff);
    ev_timer_init(&b->retry, on_retry, 0.1, 0.);
    b->retry.data = b;
    zk_plan_free(&b->plan); /* no pass yet: PLAN_DONE */
    ev_idle_init(&b->plan_idle, on_plan_idle);
    b->plan_idle.data = b;
    b->pw = km_zk_pwenc_new(&cfg->passwords, err);
    b->w = b->pw ? km_zkw_new(loop, &b->cfg.zk, err) : NULL;
    if (!b->w) {
        km_zk_pwenc_free(b->pw);
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
    abort_pass(b);
    b->phase = KM_ZKB_STOPPED;
    km_zkw_free(b->w); /* fires outstanding walk replies (ZCLOSING) while the walk still exists */
    zk_walk_free(&b->walk);
    zk_acl_diff_free(&b->acl_diff);
    zk_tree_free(&b->actual);
    zk_vcache_clear(&b->known);
    km_zk_pwenc_free(b->pw);
    zs_free(&b->diff);
    free(b->refused_deletes);
    free(b);
}

km_zkb_phase km_zkb_get_phase(const km_zkb *b) { return b->phase; }
const char *km_zkb_error(const km_zkb *b) { return b->error; }
km_zkw *km_zkb_writer(km_zkb *b) { return b->w; }
bool km_zkb_refused(const km_zkb *b) { return b->refused; }
const char *km_zkb_sync_verdict(const km_zkb *b) { return b->verdict; }
const char *km_zkb_refused_deletes(const km_zkb *b) { return b->refused_deletes ? b->refused_deletes : ""; }

bool km_zkb_can_accept(km_zkb *b)
{
    if (b->await_offset >= 0)
        return true; /* the image must move for the sync to start */
    /* a claim waiting for the log: deltas only mark the image dirty until the full sync after the claim */
    return (b->phase == KM_ZKB_DUAL_WRITE && km_zkw_can_accept(b->w)) || km_zkw_claim_waiting(b->w) ||
           b->waiting_for_log;
}

int64_t km_zkb_awaited_offset(const km_zkb *b) { return b->await_offset; }

bool km_zkb_idle(const km_zkb *b)
{
    return b->phase == KM_ZKB_DUAL_WRITE && !b->dirty && km_zkw_idle(b->w) &&
           km_zkw_confirmed_offset(b->w) == km_image_offset(b->img);
}

bool km_zkb_planning(const km_zkb *b) { return b->plan.stage != PLAN_DONE; }

void km_zkb_get_summary(const km_zkb *b, km_zkb_summary *s)
{
    *s = b->sum;
    s->diff = b->diff.p ? b->diff.p : "";
}

void km_zkb_get_progress(const km_zkb *b, km_zkb_progress *p)
{
    km_zkw_metrics m;
    km_zkw_get_metrics(b->w, &m);
    const zk_ops *o = &b->pass_ops;
    size_t planned = b->sum.created + b->sum.updated + b->sum.deleted + o->created + o->updated + o->deleted;
    uint64_t acked = m.znodes_created + m.znodes_updated + m.znodes_deleted;
    *p = (km_zkb_progress){
        .phase = b->phase, .walking = b->walking, .znodes_read = b->walking ? b->actual.n : b->last_read, .planning = km_zkb_planning(b),
        .writes_planned = planned - b->pass_planned0,
        /* the writer also acknowledges ops the plan does not count (/migration, change notifications) */
        .writes_done = b->cfg.diff_only ? 0 : (size_t)(acked - b->pass_acked0),
        .topics_total = km_image_topic_count(b->img)};
    if (p->writes_done > p->writes_planned)
        p->writes_done = p->writes_planned;
    p->topics_planned = b->plan.stage < PLAN_TOPICS ? 0
                        : b->plan.stage == PLAN_TOPICS ? b->plan.it : p->topics_total;
}

int km_zkb_delta(km_zkb *b, const km_delta *d, km_err *err)
{
    if (b->phase == KM_ZKB_STOPPED)
        return km_fail(err, "zk bridge: stopped: %s", b->error);
    km_zkw_note_log_offset(b->w, km_delta_offset(d));
    if (b->phase != KM_ZKB_DUAL_WRITE || b->cfg.diff_only) {
        /* The running (or next) full sync catches up with the newer image; NoOpRecords alone changed nothing
         * ZooKeeper holds, and marking them would chase the controller's idle records with catch-up passes. */
        if (km_delta_empty(d) && !km_delta_is_snapshot(d))
            return 0;
        b->dirty = true;
        b->plan.image_moved |= km_zkb_planning(b);
        return 0;
    }
    if (km_delta_is_snapshot(d)) { /* a new snapshot replaced the image: reconcile all of it */
        begin_catch_up(b);
        return 0;
    }
    zk_tree want = {0}, cands = {0};
    zk_delta_render(b->img, d, b->cfg.zk.controller_epoch, b->pw, &want, &cands);
    zk_ops ops = {0};
    zk_reconcile(&b->known, &cands, &want, b->pw, &ops);
    zk_tree_free(&want);
    zk_tree_free(&cands);
    b->sum.created += ops.created;
    b->sum.updated += ops.updated;
    b->sum.deleted += ops.deleted;
    b->sum.deltas++;
    int rc = ops.oom ? km_fail(err, "zk delta: out of memory at offset %lld", (long long)km_delta_offset(d))
                     : km_zkw_submit(b->w, ops.v, ops.n, km_delta_offset(d), km_delta_epoch(d), err);
    zk_ops_free(&ops);
    if (rc && km_zkw_znode_too_large(b->w)) {
        refuse_too_large(b, "zk delta", err ? err->msg : "a znode is too large");
        km_fail(err, "%s", b->error);
    }
    return rc;
}

int km_zk_full_sync_ops(const km_image *img, int32_t controller_epoch, km_zop **ops, size_t *n, km_err *err)
{
    zk_tree want = {0}, none = {0};
    zk_vcache known = {0};
    zk_ops o = {0};
    if (zk_render_image(img, controller_epoch, NULL, &want, err)) {
        zk_tree_free(&want);
        return -1;
    }
    zk_reconcile(&known, &none, &want, NULL, &o);
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
