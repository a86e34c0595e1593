/* No write before every guard has passed. The claim's own guard (cluster id, migration state,
 * position, a live ZooKeeper controller) decides from its first reads, before any write; but the
 * delete limit (zk.max.deletes, 0 on the first sync of a cluster ZK-mode brokers wrote) is only
 * known once ZooKeeper has been compared with the image, which the sync does after claiming: a
 * refused pass would have deposed ZooKeeper's controller already. So before each claim from
 * nothing, a read-only pass (the bridge's diff) runs every guard; the claim follows only if it
 * finds nothing to refuse. The sync's own delete limit stays as the backstop for what changes
 * between the two. zk.max.deletes=-1 (no limit) skips it. */
#include "daemon_internal.h"

#include <string.h>

#define PRECHECK_RETRY_SECONDS 5.0

enum { PRECHECK_NONE, PRECHECK_PASSED, PRECHECK_REFUSED, PRECHECK_STOPPED };

#define LOGGED_DELETES_MAX 100

/* What the refused sync would have deleted, one log line each (an operator decides from them). */
static void log_would_delete(km_daemon *d, km_zkb *b)
{
    km_zkb_summary sum;
    km_zkb_get_summary(b, &sum);
    size_t n = 0;
    for (const char *line = sum.diff ? sum.diff : ""; *line;) {
        size_t len = strcspn(line, "\n");
        if (len > 2 && !strncmp(line, "- ", 2) && n++ < LOGGED_DELETES_MAX)
            km_daemon_log(d, KM_LOG_ERROR, "zk: would delete %.*s", (int)len - 2, line + 2);
        line += len + (line[len] == '\n');
    }
    if (n > LOGGED_DELETES_MAX)
        km_daemon_log(d, KM_LOG_ERROR, "zk: would delete %zu more znodes", n - LOGGED_DELETES_MAX);
}

static void precheck_phase(km_zkb *b, km_zkb_phase phase, void *ctx)
{
    km_daemon *d = ctx;
    if (phase != KM_ZKB_DUAL_WRITE && phase != KM_ZKB_STOPPED)
        return;
    const char *verdict = phase == KM_ZKB_DUAL_WRITE ? km_zkb_sync_verdict(b) : km_zkb_error(b);
    d->zk_precheck_outcome = phase == KM_ZKB_STOPPED ? PRECHECK_STOPPED : verdict[0] ? PRECHECK_REFUSED
                                                                                     : PRECHECK_PASSED;
    snprintf(d->zk_precheck_why, sizeof d->zk_precheck_why, "%s", verdict);
    if (d->zk_precheck_outcome == PRECHECK_REFUSED)
        log_would_delete(d, b);
    ev_timer_set(&d->zk_precheck_end, 0., 0.); /* the bridge is freed outside its own callback */
    ev_timer_start(d->loop, &d->zk_precheck_end);
}

static void precheck_end(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)revents;
    km_daemon *d = t->data;
    km_zkb_free(d->zk_precheck);
    d->zk_precheck = NULL;
    switch (d->zk_precheck_outcome) {
    case PRECHECK_REFUSED:
        km_daemon_fatal_input(d, "ZooKeeper mirror refused before any write: %s", d->zk_precheck_why);
        return;
    case PRECHECK_STOPPED:
        km_daemon_log(d, KM_LOG_WARN, "zk: the read-only check before claiming stopped (%s); again in %.0f s",
                      d->zk_precheck_why, PRECHECK_RETRY_SECONDS);
        d->zk_precheck_retry_at = ev_now(loop) + PRECHECK_RETRY_SECONDS;
        return;
    default:
        km_daemon_log(d, KM_LOG_INFO, "zk: every guard passed on a read-only pass: claiming");
        d->zk_prechecked = true;
        km_daemon_read_log(d); /* the claim goes ahead at the next caught-up */
    }
}

bool km_daemon_zk_prechecked(km_daemon *d, const km_zkb_config *zc)
{
    if (d->cfg.zk_max_deletes == -1)
        return true;
    if (d->zk_prechecked) {
        d->zk_prechecked = false; /* good for this claim only: the next one checks again */
        return true;
    }
    if (d->zk_precheck || ev_is_active(&d->zk_precheck_end) || ev_now(d->loop) < d->zk_precheck_retry_at ||
        d->fatal[0])
        return false;
    ev_init(&d->zk_precheck_end, precheck_end);
    d->zk_precheck_end.data = d;
    d->zk_precheck_outcome = PRECHECK_NONE;
    km_zkb_config dc = *zc;
    dc.diff_only = true;
    dc.on_phase = precheck_phase;
    dc.on_confirmed = NULL;
    dc.ctx = d;
    km_err err = {{0}};
    km_daemon_log(d, KM_LOG_INFO, "zk: checking every guard on a read-only pass over %s before claiming",
                  d->cfg.zk_connect);
    if (!(d->zk_precheck = km_zkb_new(d->loop, d->img, &dc, &err))) {
        km_daemon_log(d, KM_LOG_ERROR, "zk: the read-only check cannot start: %s", err.msg);
        d->zk_precheck_retry_at = ev_now(d->loop) + PRECHECK_RETRY_SECONDS;
    } else {
        km_daemon_watch_zk(d);
    }
    return false;
}

km_zkb *km_daemon_zk_precheck_bridge(const km_daemon *d)
{
    if (!d->zk_precheck)
        return NULL;
    km_zkb_phase phase = km_zkb_get_phase(d->zk_precheck);
    return phase == KM_ZKB_DUAL_WRITE || phase == KM_ZKB_STOPPED ? NULL : d->zk_precheck; /* done: not ready */
}

void km_daemon_zk_precheck_stop(km_daemon *d)
{
    if (d->zk_precheck_end.cb)
        ev_timer_stop(d->loop, &d->zk_precheck_end);
    km_zkb_free(d->zk_precheck);
    d->zk_precheck = NULL;
}
