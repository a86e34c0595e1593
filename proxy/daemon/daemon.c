/* The daemon: log follower -> image -> (ZooKeeper mirror, broker channels), on one libev loop. */
#include "daemon_internal.h"
#include "km_capture.h"

#include <errno.h>
#include <ev.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define FOLLOW_POLL_SECONDS 0.2   /* when inotify is unavailable, and as a safety net beside it */
#define DRAIN_CHECK_SECONDS 0.05
#define DRAIN_MAX_SECONDS 10.0    /* SIGTERM: how long in-flight ZooKeeper writes may take to finish */

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
    pthread_mutex_lock(&d->log_lock);
    fprintf(d->log_fp ? d->log_fp : stderr, "%s.%03ldZ %-5s %s\n", stamp, ts.tv_nsec / 1000000, names[level], msg);
    pthread_mutex_unlock(&d->log_lock);
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
        km_daemon_log(d, KM_LOG_INFO, "log: reading paused until the ZooKeeper mirror takes more (a full sync or a "
                      "re-claim runs, or the write-behind bound is full)");
    }
    if (d->follow_io.fd >= 0)
        (on ? ev_io_start : ev_io_stop)(d->loop, &d->follow_io);
}

/* Applies every complete batch available now, handing each delta on; stops early while a
 * consumer cannot take more (write-behind bound), to resume from km_daemon_kick. */
void km_daemon_read_log(km_daemon *d)
{
    if (d->stopping)
        return; /* shutting down: no new work */
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

/* SIGUSR1 switches the inline proxy's capture. */
static void proxy_capture_cb(struct ev_loop *loop, ev_signal *s, int revents)
{
    (void)loop, (void)revents;
    km_daemon *d = s->data;
    if (!d->proxy)
        km_daemon_log(d, KM_LOG_INFO, "SIGUSR1: no inline proxy configured, ignored");
    else
        km_inline_capture(d->proxy, !km_inline_capture_on(d->proxy));
}

/* On SIGHUP: the inline proxy's certificates are read again (live connections keep theirs). */
static void reload_proxy_tls(km_daemon *d)
{
    km_err err = {{0}};
    if (d->proxy && km_inline_reload_tls(d->proxy, &err))
        km_daemon_log(d, KM_LOG_ERROR, "SIGHUP: TLS reload failed, the previous certificates stay in use: %s",
                      err.msg);
}

/* ---- signals ------------------------------------------------------------------------------- */

/* Multis are atomic and /migration moves only with the batch that completes it, so a write that
 * never lands leaves ZooKeeper consistent at an earlier offset (the log still has the rest): a
 * stop may abandon writes. It waits a little for them anyway, so a clean stop leaves no lag. */
static bool writes_settled(km_daemon *d, size_t *pending)
{
    km_zkb *zkb = km_daemon_zkb(d);
    *pending = 0;
    if (!zkb)
        return true;
    km_zkw *w = km_zkb_writer(zkb);
    km_zkw_state st = km_zkw_get_state(w);
    *pending = km_zkw_pending_ops(w);
    return *pending == 0 || (st != KM_ZKW_READY && st != KM_ZKW_RECOVERING); /* nothing can land now */
}

static void drain_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)revents;
    km_daemon *d = t->data;
    size_t pending;
    bool settled = writes_settled(d, &pending);
    if (!settled && ev_now(loop) < d->stop_deadline)
        return;
    if (settled)
        km_daemon_log(d, KM_LOG_INFO, "stopped: no ZooKeeper write in flight");
    else
        km_daemon_log(d, KM_LOG_WARN, "stopped: abandoned %zu queued ZooKeeper ops after %.0f s (ZooKeeper stays "
                      "consistent at its last confirmed offset; the next start re-syncs)", pending, DRAIN_MAX_SECONDS);
    ev_timer_stop(loop, t);
    ev_break(loop, EVBREAK_ALL);
}

static void stop_reading(km_daemon *d)
{
    ev_io_stop(d->loop, &d->follow_io);
    ev_timer_stop(d->loop, &d->follow_poll);
    if (d->quorum)
        km_quorum_set_paused(d->quorum, true); /* the observer fetches nothing more */
}

static void shutdown_cb(struct ev_loop *loop, ev_signal *s, int revents)
{
    (void)revents;
    km_daemon *d = s->data;
    if (d->stopping) {
        km_daemon_log(d, KM_LOG_WARN, "signal %d again: stopping now", s->signum);
        return ev_break(loop, EVBREAK_ALL);
    }
    d->stopping = true;
    km_daemon_notify(d, "STOPPING=1\nSTATUS=shutting down: finishing in-flight ZooKeeper writes");
    stop_reading(d);
    size_t pending;
    bool settled = writes_settled(d, &pending);
    km_daemon_log(d, KM_LOG_INFO, "signal %d: shutting down: no more log reading; %zu ZooKeeper ops in flight",
                  s->signum, pending);
    d->stop_deadline = ev_now(loop) + DRAIN_MAX_SECONDS;
    ev_timer_init(&d->drain, drain_cb, settled ? 0 : DRAIN_CHECK_SECONDS, DRAIN_CHECK_SECONDS);
    d->drain.data = d;
    ev_timer_start(loop, &d->drain);
}

/* A log.file whose directory is missing is the common mistake (a host without the package, which
 * creates /var/log/kmproxy, or a unit without LogsDirectory=): say so rather than a bare ENOENT. */
static int log_file_error(const char *path, int errnum, km_err *err)
{
    const char *slash = strrchr(path, '/');
    struct stat st;
    if (errnum == ENOENT && slash && slash != path) {
        int dir_len = (int)(slash - path);
        char dir[4096];
        snprintf(dir, sizeof dir, "%.*s", dir_len, path);
        if (stat(dir, &st))
            return km_fail(err, "log.file %s: cannot open it for appending: the directory %s does not exist "
                                "(the kmproxy package and the units' LogsDirectory= create /var/log/kmproxy; "
                                "create it, writable by the daemon's user, or set log.file elsewhere)",
                           path, dir);
    }
    return km_fail(err, "log.file %s: cannot open it for appending: %s", path, strerror(errnum));
}

static int open_log_file(km_daemon *d, km_err *err)
{
    FILE *f = fopen(d->cfg.log_file, "a");
    if (!f)
        return log_file_error(d->cfg.log_file, errno, err);
    setvbuf(f, NULL, _IOLBF, 0);
    pthread_mutex_lock(&d->log_lock);
    FILE *old = d->log_fp;
    d->log_fp = f;
    pthread_mutex_unlock(&d->log_lock);
    if (old)
        fclose(old);
    return 0;
}

/* SIGHUP: after logrotate moved the file away, write to a fresh one at the configured path; and
 * rotated broker certificates take effect. */
static void hangup_cb(struct ev_loop *loop, ev_signal *s, int revents)
{
    (void)loop; (void)revents;
    km_daemon *d = s->data;
    km_err err = {{0}};
    int changes_level;
    char *changes = km_daemon_reread_config(d, &changes_level); /* first: a new log.file is what the reopen opens */
    if (!d->cfg.log_file)
        km_daemon_log(d, KM_LOG_INFO, "SIGHUP: logging to stderr (no log.file): nothing to reopen");
    else if (open_log_file(d, &err))
        km_daemon_log(d, KM_LOG_ERROR, "SIGHUP: %s; still writing to the file open before", err.msg);
    else
        km_daemon_log(d, KM_LOG_INFO, "SIGHUP: reopened log.file %s", d->cfg.log_file);
    if (changes)
        km_daemon_log(d, changes_level, "%s", changes);
    free(changes);
    km_daemon_reload_brokers(d);
    reload_proxy_tls(d);
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
    pthread_mutex_init(&d->log_lock, NULL);
    d->cfg = *cfg;
    memset(cfg, 0, sizeof *cfg);
    d->log_level = level_of(d->cfg.log_level ? d->cfg.log_level : "info");
    d->follow_io.fd = -1;
    d->img = km_image_new();
    d->delta = km_delta_new();
    d->started_wall = time(NULL);
    if (km_config_resolve_zk_security(&d->cfg, &d->zk_security, err) || (d->cfg.log_file && open_log_file(d, err)) ||
        km_daemon_check_start(d, err) || !d->img || !d->delta || open_follower(d, err) ||
        open_capture(d, err) || km_daemon_start_consumers(d, err) || km_daemon_start_metrics(d, err) ||
        km_daemon_start_ha(d, err) || start_proxy(d, err) || km_daemon_start_verify(d, err)) {
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
    ev_signal_init(&d->sigint, shutdown_cb, SIGINT);
    ev_signal_init(&d->sigterm, shutdown_cb, SIGTERM);
    ev_signal_init(&d->sighup, hangup_cb, SIGHUP);
    ev_signal_init(&d->sigusr1, proxy_capture_cb, SIGUSR1);
    d->sigint.data = d->sigterm.data = d->sighup.data = d->sigusr1.data = d;
    ev_signal_start(d->loop, &d->sigint);
    ev_signal_start(d->loop, &d->sigterm);
    ev_signal_start(d->loop, &d->sighup);
    ev_signal_start(d->loop, &d->sigusr1);
    /* Every write already says MSG_NOSIGNAL or goes through km_tls' BIO; splice(2), which the inline
     * proxy uses for frame bodies it passes unchanged, has no such flag (km_net_forward declines
     * while SIGPIPE would kill the process). */
    signal(SIGPIPE, SIG_IGN);
    km_daemon_start_health(d);
    km_daemon_start_notify(d);
    if (d->follow_io.fd >= 0)
        ev_io_start(d->loop, &d->follow_io);
    ev_timer_again(d->loop, &d->follow_poll);
    if (d->quorum)
        km_daemon_log(d, KM_LOG_INFO, "following the KRaft quorum at %s as an observer",
                      d->cfg.quorum_bootstrap_servers ? d->cfg.quorum_bootstrap_servers : d->cfg.quorum_voters);
    else
        km_daemon_log(d, KM_LOG_INFO, "following %s", d->cfg.metadata_dir);
    if (km_daemon_check_only(d))
        km_daemon_log(d, KM_LOG_INFO, "check-only (no zookeeper.connect): no ZooKeeper write, no broker RPC; the "
                      "brokers are checked against the image every %d ms", d->cfg.verify_interval_ms);
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
    ev_timer_stop(d->loop, &d->drain);
    km_daemon_stop_health(d);
    km_daemon_stop_notify(d);
    stop_reading(d);
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
    km_daemon_stop_verify(d); /* its thread reads none of the daemon's state, only its own copy */
    km_inline_free(d->proxy);
    km_daemon_stop_metrics(d);
    km_daemon_stop_consumers(d);
    km_daemon_stop_ha(d);
    close_capture(d); /* after the channels that write into it */
    if (d->follow)
        km_image_follow_close(d->follow);
    km_daemon_cluster_id_stop(d);
    km_daemon_zk_precheck_stop(d);
    km_quorum_free(d->quorum);
    km_tls_ctx_free(d->quorum_tls);
    km_delta_free(d->delta);
    km_image_free(d->img);
    km_config_zk_security_clear(&d->zk_security);
    km_config_free(&d->cfg);
    if (d->log_fp)
        fclose(d->log_fp);
    pthread_mutex_destroy(&d->log_lock);
    free(d);
}

void km_daemon_get_status(const km_daemon *d, km_daemon_status *st)
{
    memset(st, 0, sizeof *st);
    st->image_offset = km_image_offset(d->img);
    st->batches_applied = d->batches_applied;
    st->reading_paused = d->reading_paused;
    st->fatal = d->fatal[0] ? d->fatal : NULL;
    st->active = km_daemon_is_active(d);
    st->zk_confirmed_offset = -1;
    km_daemon_consumers_status(d, st);
}
