/* km_zk_read_once (km_zkbridge.h): a one-shot read on the session code the writer uses (zk_session.c), so a
 * command reading one znode gets the same TLS, SASL and digest handling, and the same refusal of credentials
 * that do not work, as the daemon; a private libev loop drives it until the answer or the deadline. */
#include "zk_writer.h"

#include <stdio.h>
#include <string.h>

typedef struct read_once {
    zk_session s;
    const char *path;
    char *data;
    size_t cap;
    int *version;
    bool asked, done;
    int rc;
} read_once;

static void on_data(int rc, const char *value, int len, const struct Stat *st, const void *ctx)
{
    read_once *r = (read_once *)ctx;
    if (rc == ZCLOSING)
        return;
    r->done = true;
    r->rc = rc;
    if (rc == ZOK && r->cap > 0) {
        size_t n = len < 0 ? 0 : (size_t)len < r->cap - 1 ? (size_t)len : r->cap - 1;
        memcpy(r->data, value, n);
        r->data[n] = '\0';
        *r->version = st->version;
    }
    ev_break(r->s.loop, EVBREAK_ALL);
}

/* Asks once the session is up; a refused authentication ends the wait at once. */
static void on_state(zk_session *s, int state)
{
    read_once *r = s->owner;
    if (s->auth_failed) {
        ev_break(s->loop, EVBREAK_ALL);
    } else if (state == ZOO_CONNECTED_STATE && !r->asked && s->zh) {
        r->asked = zoo_aget(s->zh, r->path, 0, on_data, r) == ZOK;
    }
}

static void on_deadline(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)t;
    (void)revents;
    ev_break(loop, EVBREAK_ALL);
}

static int outcome(const read_once *r, const char *hosts, km_err *err)
{
    if (r->s.auth_failed)
        return km_fail(err, "ZooKeeper %s: %s", hosts, r->s.auth_error);
    if (!r->done)
        return km_fail(err, "ZooKeeper %s: %s", hosts, r->asked ? "no answer for the read of the znode in time"
                                                                : "no session in time");
    if (r->rc == ZNONODE)
        return 0;
    if (r->rc == ZNOAUTH)
        return km_fail(err, "ZooKeeper %s: not authorized to read %s (its ACL denies this identity)", hosts,
                       r->path);
    if (r->rc != ZOK)
        return km_fail(err, "ZooKeeper %s: reading %s: %s", hosts, r->path, zerror(r->rc));
    return 1;
}

int km_zk_read_once(const char *hosts, const km_zk_security *sec, const char *path, double timeout_s, char *data,
                    size_t cap, int *version, km_err *err)
{
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    if (!loop)
        return km_fail(err, "ZooKeeper %s: cannot make an event loop", hosts);
    read_once r = { .path = path, .data = data, .cap = cap, .version = version };
    r.s = (zk_session){ .hosts = hosts, .timeout_ms = 10000, .on_state = on_state, .owner = &r, .security = sec,
                        .chroot_ready = true /* a reader never creates the chroot */ };
    ev_timer deadline;
    ev_timer_init(&deadline, on_deadline, timeout_s > 0 ? timeout_s : 10.0, 0.);
    ev_timer_start(loop, &deadline);
    int rc = zk_session_start(&r.s, loop, err);
    if (rc == 0) {
        ev_run(loop, 0);
        rc = outcome(&r, hosts, err);
    }
    if (!r.done && !r.s.auth_failed)
        zk_session_abandon(&r.s); /* no answer in time: closing must not wait for one either */
    r.done = true;
    zk_session_close(&r.s);
    ev_timer_stop(loop, &deadline);
    ev_loop_destroy(loop);
    return rc;
}
