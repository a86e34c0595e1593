/* The daemon: log follower -> image -> (ZooKeeper mirror, broker channels), on one libev loop. */
#include "daemon_internal.h"
#include "km_capture.h"

#include <ev.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define FOLLOW_POLL_SECONDS 0.2   /* when inotify is unavailable, and as a safety net beside it */

static int level_of(const char *name)
{
    if (!strcmp(name, "error")) return KM_LOG_ERROR;
    if (!strcmp(name, "warn")) return KM_LOG_WARN;
    if (!strcmp(name, "debug")) return KM_LOG_DEBUG;
    return KM_LOG_INFO;
}

void km_daemon_log(km_daemon *d, int level, const char *fmt, ...)
{
    static const char *const names[] = {"", "ERROR", "WARN", "INFO", "DEBUG"};
    if (level > d->log_level)
        return;
    char stamp[32];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &tm);
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s.%03ldZ %-5s %s\n", stamp, ts.tv_nsec / 1000000, names[level], msg);
}

static void fatal_v(km_daemon *d, int exit_code, const char *fmt, va_list ap)
{
    if (d->fatal[0])
        return;  /* the first cause is the one worth reporting */
    vsnprintf(d->fatal, sizeof d->fatal, fmt, ap);
    d->exit_code = exit_code;
    km_daemon_log(d, KM_LOG_ERROR, "stopping: %s", d->fatal);
    ev_break(d->loop, EVBREAK_ALL);
}

void km_daemon_fatal(km_daemon *d, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fatal_v(d, 1, fmt, ap);
    va_end(ap);
}

void km_daemon_fatal_input(km_daemon *d, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fatal_v(d, 2, fmt, ap);
    va_end(ap);
}

/* ---- reading the log ------------------------------------------------------------------- */

static void set_reading(km_daemon *d, bool on)
{
    if (on == !d->reading_paused)
        return;
    d->reading_paused = !on;
    if (on) {
        ev_timer_again(d->loop, &d->follow_poll);
        km_daemon_log(d, KM_LOG_INFO, "log: reading resumed");
    } else {
        ev_timer_stop(d->loop, &d->follow_poll);
        km_daemon_log(d, KM_LOG_INFO, "log: reading paused: the ZooKeeper write-behind bound is full");
    }
    if (d->follow_io.fd >= 0)
        (on ? ev_io_start : ev_io_stop)(d->loop, &d->follow_io);
}

/* Applies every complete batch available now, handing each delta on; stops early while a
 * consumer cannot take more (write-behind bound), to resume from km_daemon_kick. */
void km_daemon_read_log(km_daemon *d)
{
    if (d->quorum) {
        km_daemon_quorum_step(d);
        return;
    }
    km_err err = {{0}};
    while (!d->fatal[0]) {
        if (!km_daemon_consumers_ready(d)) {
            set_reading(d, false);
            return;
        }
        int rc = km_image_follow_next(d->follow, d->delta, &err);
        if (rc < 0) {
            km_daemon_fatal_input(d, "metadata log: %s", err.msg);
            return;
        }
        if (rc == 0) {
            km_daemon_caught_up(d);
            break;
        }
        d->batches_applied++;
        km_daemon_publish_delta(d, d->delta);
    }
    set_reading(d, true);
}

void km_daemon_kick(km_daemon *d)
{
    if (d->reading_paused && !d->fatal[0])
        km_daemon_read_log(d);
}

static void follow_io_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)loop; (void)revents;
    km_daemon_read_log(w->data);
}

static void follow_poll_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)loop; (void)revents;
    km_daemon_read_log(t->data);
}

/* SIGHUP reloads the inline proxy's certificates, SIGUSR1 switches its capture. */
static void proxy_signal_cb(struct ev_loop *loop, ev_signal *s, int revents)
{
    (void)loop, (void)revents;
    km_daemon *d = s->data;
    km_err err = {{0}};
    if (!d->proxy)
        km_daemon_log(d, KM_LOG_INFO, "signal %d: no inline proxy configured, ignored", s->signum);
    else if (s->signum == SIGUSR1)
        km_inline_capture(d->proxy, !km_inline_capture_on(d->proxy));
    else if (km_inline_reload_tls(d->proxy, &err))
        km_daemon_log(d, KM_LOG_ERROR, "SIGHUP: TLS reload failed, the previous certificates stay in use: %s",
                      err.msg);
}

static void signal_cb(struct ev_loop *loop, ev_signal *s, int revents)
{
    (void)revents;
    km_daemon *d = s->data;
    km_daemon_log(d, KM_LOG_INFO, "signal %d: shutting down", s->signum);
    ev_break(loop, EVBREAK_ALL);
}

static int open_follower(km_daemon *d, km_err *err)
{
    ev_timer_init(&d->follow_poll, follow_poll_cb, 0, FOLLOW_POLL_SECONDS);
    d->follow_poll.data = d;
    if (km_daemon_quorum_mode(d))
        return km_daemon_open_quorum(d, err);
    if (d->cfg.cluster_id && km_image_set_cluster_id(d->img, d->cfg.cluster_id, err))
        return -1;
    if (!d->cfg.cluster_id && km_image_load_meta_properties(d->img, d->cfg.metadata_dir, err) < 0)
        return -1;
    km_metalog_opts opts = {.follow = true};
    d->follow = km_image_follow_open(d->img, d->cfg.metadata_dir, &opts, err);
    if (!d->follow)
        return -1;
    ev_io_init(&d->follow_io, follow_io_cb, km_image_follow_fd(d->follow), EV_READ);
    d->follow_io.data = d;
    return 0;
}

static void proxy_log(void *ud, int level, const char *msg)
{
    km_daemon_log(ud, level + KM_LOG_ERROR, "proxy: %s", msg); /* km_inline counts from 0 = error */
}

static int start_proxy(km_daemon *d, km_err *err)
{
    if (!km_inline_config_enabled(&d->cfg.proxy))
        return 0;
    d->proxy = km_inline_new(d->loop, &d->cfg.proxy, proxy_log, d, err);
    if (d->proxy && d->metrics) /* POST /capture/on|off */
        km_metrics_on_post(d->metrics, km_inline_http_action, d->proxy);
    if (d->proxy) /* controller RPCs passing inline are compared with the image */
        km_inline_follow_image(d->proxy, d->img);
    return d->proxy ? 0 : -1;
}

/* Every frame to and from the ZK-mode brokers, for Wireshark or jq. */
static int open_capture(km_daemon *d, km_err *err)
{
    if (!d->cfg.capture_pcapng && !d->cfg.capture_jsonl)
        return 0;
    km_capture_opts o = {.pcapng_path = d->cfg.capture_pcapng, .jsonl_path = d->cfg.capture_jsonl};
    d->capture = km_capture_open(&o, err);
    return d->capture ? 0 : -1;
}

static void close_capture(km_daemon *d)
{
    km_err err = {{0}};
    if (d->capture && km_capture_close(d->capture, &err))
        km_daemon_log(d, KM_LOG_ERROR, "capture: %s", err.msg);
    d->capture = NULL;
}

km_daemon *km_daemon_new(struct ev_loop *loop, km_config *cfg, km_err *err)
{
    if (km_config_validate(cfg, err))
        return NULL;
    km_daemon *d = calloc(1, sizeof *d);
    if (!d) {
        km_fail(err, "out of memory");
        return NULL;
    }
    d->loop = loop;
    d->cfg = *cfg;
    memset(cfg, 0, sizeof *cfg);
    d->log_level = level_of(d->cfg.log_level ? d->cfg.log_level : "info");
    d->follow_io.fd = -1;
    d->img = km_image_new();
    d->delta = km_delta_new();
    if (!d->img || !d->delta || open_follower(d, err) || open_capture(d, err) || km_daemon_start_consumers(d, err) ||
        km_daemon_start_metrics(d, err) || start_proxy(d, err)) {
        km_daemon_free(d);
        return NULL;
    }
    return d;
}

void km_daemon_start(km_daemon *d)
{
    if (d->started)
        return;
    d->started = true;
    ev_signal_init(&d->sigint, signal_cb, SIGINT);
    ev_signal_init(&d->sigterm, signal_cb, SIGTERM);
    ev_signal_init(&d->sighup, proxy_signal_cb, SIGHUP);
    ev_signal_init(&d->sigusr1, proxy_signal_cb, SIGUSR1);
    d->sigint.data = d->sigterm.data = d->sighup.data = d->sigusr1.data = d;
    ev_signal_start(d->loop, &d->sigint);
    ev_signal_start(d->loop, &d->sigterm);
    ev_signal_start(d->loop, &d->sighup);
    ev_signal_start(d->loop, &d->sigusr1);
    if (d->follow_io.fd >= 0)
        ev_io_start(d->loop, &d->follow_io);
    ev_timer_again(d->loop, &d->follow_poll);
    if (d->quorum)
        km_daemon_log(d, KM_LOG_INFO, "following the KRaft quorum at %s as an observer",
                      d->cfg.quorum_bootstrap_servers ? d->cfg.quorum_bootstrap_servers : d->cfg.quorum_voters);
    else
        km_daemon_log(d, KM_LOG_INFO, "following %s", d->cfg.metadata_dir);
    km_daemon_read_log(d);
}

static void disarm(km_daemon *d)
{
    if (!d->started)
        return;
    d->started = false;
    ev_signal_stop(d->loop, &d->sigint);
    ev_signal_stop(d->loop, &d->sigterm);
    ev_signal_stop(d->loop, &d->sighup);
    ev_signal_stop(d->loop, &d->sigusr1);
    ev_io_stop(d->loop, &d->follow_io);
    ev_timer_stop(d->loop, &d->follow_poll);
}

int km_daemon_run(km_daemon *d)
{
    km_daemon_start(d);
    if (!d->fatal[0])
        ev_run(d->loop, 0);
    disarm(d);
    return d->fatal[0] ? d->exit_code : 0;
}

void km_daemon_stop(km_daemon *d) { ev_break(d->loop, EVBREAK_ALL); }

void km_daemon_free(km_daemon *d)
{
    if (!d)
        return;
    disarm(d);
    km_inline_free(d->proxy);
    km_daemon_stop_metrics(d);
    km_daemon_stop_consumers(d);
    close_capture(d); /* after the channels that write into it */
    if (d->follow)
        km_image_follow_close(d->follow);
    km_quorum_free(d->quorum);
    km_tls_ctx_free(d->quorum_tls);
    km_delta_free(d->delta);
    km_image_free(d->img);
    km_config_free(&d->cfg);
    free(d);
}

void km_daemon_get_status(const km_daemon *d, km_daemon_status *st)
{
    memset(st, 0, sizeof *st);
    st->image_offset = km_image_offset(d->img);
    st->batches_applied = d->batches_applied;
    st->reading_paused = d->reading_paused;
    st->fatal = d->fatal[0] ? d->fatal : NULL;
    st->zk_confirmed_offset = -1;
    km_daemon_consumers_status(d, st);
}
