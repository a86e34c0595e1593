/* Helpers for the zkbridge suites (see test_zk_util.h). */
#include "test_zk_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void tick(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)loop; (void)t; (void)revents;
}

bool zkt_run_until(struct ev_loop *loop, bool (*pred)(void *), void *ctx, int guard_ms)
{
    ev_timer t;
    ev_timer_init(&t, tick, 0.02, 0.02); /* wakes the loop so pred is re-checked */
    ev_timer_start(loop, &t);
    int64_t deadline = mono_ms() + guard_ms;
    bool ok;
    while (!(ok = pred(ctx)) && mono_ms() < deadline)
        ev_run(loop, EVRUN_ONCE);
    ev_timer_stop(loop, &t);
    return ok;
}

static bool never(void *ctx) { (void)ctx; return false; }
void zkt_spin(struct ev_loop *loop, int ms) { zkt_run_until(loop, never, NULL, ms); }

static void on_event(km_zkw *w, km_zkw_event ev, void *ctx)
{
    (void)w;
    zkt_writer *t = ctx;
    switch (ev) {
    case KM_ZKW_EV_CLAIMED: t->claimed++; break;
    case KM_ZKW_EV_CONFIRMED: t->confirmed++; break;
    case KM_ZKW_EV_DRAINED: t->drained++; break;
    case KM_ZKW_EV_RESYNC: t->resync++; break;
    case KM_ZKW_EV_FENCED: t->fenced++; break;
    case KM_ZKW_EV_REFUSED: t->refused++; break;
    }
}

static void on_log(km_log_level lvl, const char *msg, void *ctx)
{
    zkt_writer *t = ctx;
    if (lvl == KM_LOG_ERROR) {
        t->errors_logged++;
        snprintf(t->last_error, sizeof t->last_error, "%s", msg);
    }
    if (lvl <= KM_LOG_WARN || getenv("KM_ZK_DEBUG"))
        fprintf(stderr, "[zkw %d] %s\n", (int)lvl, msg);
}

zkt_writer *zkt_writer_new(const char *hosts, int32_t id, int32_t epoch, const km_zkw_config *base)
{
    zkt_writer *t = calloc(1, sizeof *t);
    t->loop = ev_loop_new(EVFLAG_AUTO);
    km_zkw_config cfg = base ? *base : (km_zkw_config){0};
    cfg.hosts = hosts;
    cfg.controller_id = id;
    cfg.controller_epoch = epoch;
    cfg.on_event = on_event;
    cfg.log = on_log;
    cfg.ctx = t;
    if (!cfg.session_timeout_ms)
        cfg.session_timeout_ms = 6000;
    km_err err = {{0}};
    t->w = km_zkw_new(t->loop, &cfg, &err);
    if (!t->w) {
        fprintf(stderr, "zkt_writer_new: %s\n", err.msg);
        ev_loop_destroy(t->loop);
        free(t);
        return NULL;
    }
    return t;
}

void zkt_writer_free(zkt_writer *t)
{
    if (!t)
        return;
    km_zkw_free(t->w);
    ev_loop_destroy(t->loop);
    free(t);
}

typedef struct state_wait {
    zkt_writer *t;
    km_zkw_state st;
} state_wait;

static bool state_is(void *ctx)
{
    state_wait *s = ctx;
    km_zkw_state now = km_zkw_get_state(s->t->w);
    return now == s->st || (s->st != KM_ZKW_FENCED && now == KM_ZKW_FENCED) ||
           (s->st != KM_ZKW_REFUSED && now == KM_ZKW_REFUSED);
}

bool zkt_wait_state(zkt_writer *t, km_zkw_state st, int guard_ms)
{
    state_wait s = {t, st};
    zkt_run_until(t->loop, state_is, &s, guard_ms);
    return km_zkw_get_state(t->w) == st;
}

static bool drained(void *ctx)
{
    zkt_writer *t = ctx;
    km_zkw_state st = km_zkw_get_state(t->w);
    return km_zkw_idle(t->w) || st == KM_ZKW_FENCED || st == KM_ZKW_REFUSED;
}

bool zkt_wait_drained(zkt_writer *t, int guard_ms)
{
    zkt_run_until(t->loop, drained, t, guard_ms);
    km_zkw_metrics m;
    km_zkw_get_metrics(t->w, &m);
    return km_zkw_idle(t->w) && m.write_behind_lag == 0;
}

char *zkt_get(km_zkc *c, const char *path, int *version)
{
    char *data = NULL;
    struct Stat st;
    if (km_zkc_get(c, path, &data, NULL, &st) != ZOK)
        return NULL;
    if (version)
        *version = st.version;
    return data;
}
