/* systemd's notify protocol (sd_notify(3)) without libsystemd: one datagram of "KEY=value" lines to
 * the AF_UNIX socket named by $NOTIFY_SOCKET ('@' first: the abstract namespace). Type=notify units
 * learn from READY=1 that the daemon does its job (ZooKeeper in sync; the brokers are /readyz's
 * concern), from STATUS= what it is doing (shown by systemctl status) and from STOPPING=1 that it is
 * shutting down. */
#include "daemon_internal.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define READY_CHECK_SECONDS 0.2

void km_daemon_notify(km_daemon *d, const char *state)
{
    const char *path = getenv("NOTIFY_SOCKET");
    if (!path || !*path)
        return; /* not started by systemd (or not as Type=notify) */
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    size_t len = strlen(path);
    if (len >= sizeof sa.sun_path || (path[0] != '/' && path[0] != '@')) {
        if (!d->notify_failed)
            km_daemon_log(d, KM_LOG_WARN, "NOTIFY_SOCKET '%s' is not a socket path: systemd is not told", path);
        d->notify_failed = true;
        return;
    }
    memcpy(sa.sun_path, path, len);
    if (path[0] == '@')
        sa.sun_path[0] = '\0';
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ssize_t n = fd < 0 ? -1
                       : sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&sa,
                                (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len));
    if (n < 0 && !d->notify_failed) {
        km_daemon_log(d, KM_LOG_WARN, "NOTIFY_SOCKET %s: %s: systemd is not told", path, strerror(errno));
        d->notify_failed = true;
    }
    if (fd >= 0)
        close(fd);
}

/* READY=1 once, the first time this instance does its job: /readyz would answer 200 but for the
 * brokers. A broker that is down is a reason on /readyz; holding `systemctl start` until every
 * broker answers would hold it forever while one is down. */
static void ready_check_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)revents;
    km_daemon *d = t->data;
    if (!km_daemon_does_its_job(d))
        return;
    ev_timer_stop(loop, t);
    bool brokers = km_daemon_ready(d);
    km_daemon_log(d, KM_LOG_INFO, "ready: %s%s", km_daemon_check_only(d) ? "checker, following the log"
                                                 : km_daemon_is_active(d) ? "active, ZooKeeper in sync"
                                                                          : "standby, following the log",
                  brokers ? "" : "; not every ZK-mode broker is up to date yet (see /readyz)");
    km_daemon_notify(d, brokers ? "READY=1\nSTATUS=ready: in sync with the metadata log"
                                : "READY=1\nSTATUS=ready: ZooKeeper in sync; not every ZK-mode broker is up to date "
                                  "(see /readyz)");
}

void km_daemon_start_notify(km_daemon *d)
{
    ev_timer_init(&d->ready_check, ready_check_cb, READY_CHECK_SECONDS, READY_CHECK_SECONDS);
    d->ready_check.data = d;
    ev_timer_start(d->loop, &d->ready_check);
}

void km_daemon_stop_notify(km_daemon *d) { ev_timer_stop(d->loop, &d->ready_check); }
