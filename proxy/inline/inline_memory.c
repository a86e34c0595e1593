/* Memory back to the system after a burst of clients. Each session's buffers are freed with it
 * (and km_net gives an idle connection's receive buffer back), but glibc keeps freed heap pages
 * for reuse: after thousands of sessions come and go the process would stay at its peak. A second
 * after sessions end on a worker, if enough of them did, malloc_trim(0) returns the free pages
 * (of every arena: each worker thread allocates from its own). */
#include "inline_private.h"

#include <malloc.h>

#define TRIM_DELAY_SECONDS 1.0
#define TRIM_AFTER_SESSIONS 64   /* fewer ended sessions free too little to be worth a heap walk */

static void on_trim(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)loop, (void)revents;
    inl_worker *w = t->data;
    if (w->ended_since_trim >= TRIM_AFTER_SESSIONS)
        malloc_trim(0);
    w->ended_since_trim = 0;
}

void inl_memory_init(inl_worker *w)
{
    ev_timer_init(&w->trim, on_trim, TRIM_DELAY_SECONDS, 0.);
    w->trim.data = w;
}

void inl_memory_session_ended(inl_worker *w)
{
    w->ended_since_trim++;
    if (!ev_is_active(&w->trim))
        ev_timer_start(w->loop, &w->trim);
}

void inl_memory_stop(inl_worker *w)
{
    ev_timer_stop(w->loop, &w->trim);
}
