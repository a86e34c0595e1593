/* Memory back to the system after a burst of clients. Each session's buffers are freed with it
 * (and km_net gives an idle connection's receive buffer back), but glibc keeps freed heap pages
 * for reuse: after thousands of sessions come and go the process would stay at its peak. A second
 * after sessions end, if enough of them did, malloc_trim(0) returns the free pages. */
#include "inline_private.h"

#include <malloc.h>

#define TRIM_DELAY_SECONDS 1.0
#define TRIM_AFTER_SESSIONS 64   /* fewer ended sessions free too little to be worth a heap walk */

static void on_trim(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)loop, (void)revents;
    km_inline *p = t->data;
    if (p->ended_since_trim >= TRIM_AFTER_SESSIONS)
        malloc_trim(0);
    p->ended_since_trim = 0;
}

void inl_memory_init(km_inline *p)
{
    ev_timer_init(&p->trim, on_trim, TRIM_DELAY_SECONDS, 0.);
    p->trim.data = p;
}

void inl_memory_session_ended(km_inline *p)
{
    p->ended_since_trim++;
    if (!ev_is_active(&p->trim))
        ev_timer_start(p->loop, &p->trim);
}

void inl_memory_stop(km_inline *p)
{
    ev_timer_stop(p->loop, &p->trim);
}
