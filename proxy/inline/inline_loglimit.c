/* Per-connection warnings (a client cut, refused, failing TLS, an upstream lost), rate-limited by
 * kind: a flood of bad connections must not flood the log. Each kind logs its first
 * INL_LOG_BURST lines of a window; the rest are counted and summed up in one line at the
 * window's end. The counters in /metrics (cut, refused, TLS failures) keep every one. */
#include "inline_private.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char *const KIND_NAMES[INL_LOG_KINDS] = {
    [INL_LOG_CUT] = "client-cut", [INL_LOG_REFUSED] = "client-refused", [INL_LOG_TLS] = "client-TLS-failure",
    [INL_LOG_LEFT] = "client-left-inside-a-frame", [INL_LOG_UPSTREAM] = "upstream-failure",
};

static void flush(km_inline *p, double now)
{
    pthread_mutex_lock(&p->log_lock);
    for (int k = 0; k < INL_LOG_KINDS; k++) {
        inl_log_rate *r = &p->log_rate[k];
        if (r->suppressed) {
            char msg[256];
            snprintf(msg, sizeof msg, "%" PRIu64 " more %s warnings in the last %.0f s were not logged (at most %d "
                     "per %.0f s are)", r->suppressed, KIND_NAMES[k], now - r->window_start, INL_LOG_BURST,
                     INL_LOG_WINDOW);
            inl_log_sink_locked(p, 1, msg);
        }
        *r = (inl_log_rate){0};
    }
    p->log_window_open = false;
    pthread_mutex_unlock(&p->log_lock);
}

static void on_flush(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)loop, (void)revents;
    flush(t->data, ev_time());
}

void inl_log_limit_init(km_inline *p)
{
    ev_timer_init(&p->log_flush, on_flush, INL_LOG_WINDOW, 0.);
    p->log_flush.data = p;
}

/* Main loop: one window for every kind, opened by the first warning on any thread; its end
 * sums them all up. */
void inl_log_limit_arm(km_inline *p)
{
    pthread_mutex_lock(&p->log_lock);
    bool open = p->log_window_open;
    pthread_mutex_unlock(&p->log_lock);
    if (open && !ev_is_active(&p->log_flush)) {
        ev_timer_set(&p->log_flush, INL_LOG_WINDOW, 0.);
        ev_timer_start(p->loop, &p->log_flush);
    }
}

void inl_log_limit_stop(km_inline *p)
{
    ev_timer_stop(p->loop, &p->log_flush);
    flush(p, ev_time());
}

void inl_log_conn(km_inline *p, inl_log_kind kind, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    double now = ev_time(); /* any thread: not a loop's cached time */
    pthread_mutex_lock(&p->log_lock);
    inl_log_rate *r = &p->log_rate[kind];
    bool opened = !p->log_window_open;
    if (!r->logged && !r->suppressed)
        r->window_start = now;
    p->log_window_open = true;
    if (r->logged >= INL_LOG_BURST) {
        r->suppressed++;
    } else {
        r->logged++;
        if (r->logged == INL_LOG_BURST)
            snprintf(msg + strnlen(msg, sizeof msg - 80), 80, " (more such lines are counted, not logged, until "
                     "the window ends)");
        inl_log_sink_locked(p, 1, msg);
    }
    pthread_mutex_unlock(&p->log_lock);
    if (opened)
        inl_wake_main(p); /* the main loop starts the window's timer */
}
