/* Per-connection warnings (a client cut, refused, failing TLS, an upstream lost), rate-limited by
 * kind: a flood of bad connections must not flood the log. Each kind logs its first
 * INL_LOG_BURST lines of a window; the rest are counted and summed up in one line at the
 * window's end. The counters in /metrics (cut, refused, TLS failures) keep every one. */
#include "inline_private.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>

static const char *const KIND_NAMES[INL_LOG_KINDS] = {
    [INL_LOG_CUT] = "client-cut", [INL_LOG_REFUSED] = "client-refused", [INL_LOG_TLS] = "client-TLS-failure",
    [INL_LOG_LEFT] = "client-left-inside-a-frame", [INL_LOG_UPSTREAM] = "upstream-failure",
};

static void flush(km_inline *p, double now)
{
    for (int k = 0; k < INL_LOG_KINDS; k++) {
        inl_log_rate *r = &p->log_rate[k];
        if (r->suppressed)
            inl_log(p, 1, "%" PRIu64 " more %s warnings in the last %.0f s were not logged (at most %d per %.0f s "
                    "are)", r->suppressed, KIND_NAMES[k], now - r->window_start, INL_LOG_BURST, INL_LOG_WINDOW);
        *r = (inl_log_rate){0};
    }
}

static void on_flush(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)revents;
    flush(t->data, ev_now(loop));
}

void inl_log_limit_init(km_inline *p)
{
    ev_timer_init(&p->log_flush, on_flush, INL_LOG_WINDOW, 0.);
    p->log_flush.data = p;
}

void inl_log_limit_stop(km_inline *p)
{
    if (ev_is_active(&p->log_flush))
        flush(p, ev_now(p->loop));
    ev_timer_stop(p->loop, &p->log_flush);
}

void inl_log_conn(km_inline *p, inl_log_kind kind, const char *fmt, ...)
{
    inl_log_rate *r = &p->log_rate[kind];
    double now = ev_now(p->loop);
    if (!r->logged && !r->suppressed)
        r->window_start = now;
    if (r->logged >= INL_LOG_BURST) {
        r->suppressed++;
        return;
    }
    if (!ev_is_active(&p->log_flush)) { /* one window for every kind: its end sums them all up */
        ev_timer_set(&p->log_flush, INL_LOG_WINDOW, 0.);
        ev_timer_start(p->loop, &p->log_flush);
    }
    r->logged++;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    inl_log(p, 1, "%s%s", msg, r->logged == INL_LOG_BURST ? " (more such lines are counted, not logged, until "
                                                             "the window ends)" : "");
}
