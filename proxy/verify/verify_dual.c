/* The dual-write lag (km_verify.h): /migration read from ZooKeeper with a one-shot session, against the
 * controllers' committed log.  Kafka's own ZkWriteBehindLag reads 0 when its driver is wedged (KAFKA-21062):
 * only /migration itself, read twice while the log moves, shows the driver stopped. */
#include "km_verify.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zookeeper/zookeeper.h>

typedef struct zk_read {
    bool connected, done, expired;
    int rc;
    char data[1024];
    int len;
    struct Stat st;
} zk_read;

static void on_session(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
    (void)zh;
    (void)path;
    zk_read *z = ctx;
    if (type != ZOO_SESSION_EVENT)
        return;
    z->connected = state == ZOO_CONNECTED_STATE;
    z->expired = state == ZOO_EXPIRED_SESSION_STATE || state == ZOO_AUTH_FAILED_STATE;
}

static void on_data(int rc, const char *value, int len, const struct Stat *st, const void *ctx)
{
    zk_read *z = (zk_read *)ctx;
    z->done = true;
    z->rc = rc;
    if (rc == ZOK) {
        z->len = len < 0 ? 0 : len < (int)sizeof z->data - 1 ? len : (int)sizeof z->data - 1;
        memcpy(z->data, value, (size_t)z->len);
        z->data[z->len] = '\0';
        z->st = *st;
    }
}

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Drives the single-threaded client until the read completed or the deadline passed. */
static int zk_pump(zhandle_t *zh, zk_read *z, double deadline)
{
    bool asked = false;
    while (!z->done && !z->expired && mono_s() < deadline) {
        if (z->connected && !asked) {
            if (zoo_aget(zh, "/migration", 0, on_data, z) != ZOK)
                return -1;
            asked = true;
        }
        int fd, interest;
        struct timeval tv;
        if (zookeeper_interest(zh, &fd, &interest, &tv) != ZOK && fd < 0) {
            struct timespec pause = { 0, 20 * 1000 * 1000 };
            nanosleep(&pause, NULL);
            continue;
        }
        struct pollfd p = { .fd = fd, .events = (short)((interest & ZOOKEEPER_READ ? POLLIN : 0) |
                                                        (interest & ZOOKEEPER_WRITE ? POLLOUT : 0)) };
        int ms = (int)(tv.tv_sec * 1000 + tv.tv_usec / 1000);
        int left = (int)((deadline - mono_s()) * 1000) + 1;
        if (poll(&p, fd >= 0 ? 1 : 0, ms < left ? ms : left) < 0 && errno != EINTR)
            return -1;
        int events = (p.revents & POLLIN ? ZOOKEEPER_READ : 0) | (p.revents & POLLOUT ? ZOOKEEPER_WRITE : 0);
        zookeeper_process(zh, events);
    }
    return z->done ? 0 : -1;
}

static int parse_migration(const zk_read *z, const char *hosts, km_verify_migration *m, km_err *err)
{
    json_error_t jerr;
    json_t *root = json_loads(z->data, 0, &jerr);
    json_t *off = json_object_get(root, "kraft_metadata_offset"), *ep = json_object_get(root, "kraft_metadata_epoch");
    bool ok = json_is_integer(off) && json_is_integer(ep);
    if (ok) {
        m->offset = (int64_t)json_integer_value(off);
        m->epoch = (int32_t)json_integer_value(ep);
        m->zk_version = z->st.version;
    }
    json_decref(root);
    return ok ? 0
              : km_fail(err, "ZooKeeper %s: /migration holds %.200s: want kraft_metadata_offset/epoch integers",
                        hosts, z->data);
}

int km_verify_read_migration(const char *hosts, double timeout_s, km_verify_migration *m, km_err *err)
{
    zoo_set_debug_level((ZooLogLevel)0);
    zk_read z = { 0 };
    double deadline = mono_s() + (timeout_s > 0 ? timeout_s : 10.0);
    zhandle_t *zh = zookeeper_init(hosts, on_session, 30000, NULL, &z, 0);
    if (!zh)
        return km_fail(err, "ZooKeeper %s: %s", hosts, strerror(errno));
    int rc = zk_pump(zh, &z, deadline);
    zookeeper_close(zh);
    if (rc < 0)
        return km_fail(err, "ZooKeeper %s: %s", hosts,
                       z.expired ? "session refused" : z.connected ? "no answer for /migration in time"
                                                                   : "no session in time");
    if (z.rc == ZNONODE)
        return km_fail(err, "ZooKeeper %s: no /migration: the migration has not started", hosts);
    if (z.rc != ZOK)
        return km_fail(err, "ZooKeeper %s: reading /migration: %s", hosts, zerror(z.rc));
    return parse_migration(&z, hosts, m, err);
}

/* The lag at the last reading: committed records not in ZooKeeper yet (negative: the log read is behind what
 * ZooKeeper records, e.g. a metadata file older than the cluster). */
static int64_t last_lag(const km_verify_dual *d)
{
    return d->watched ? d->high_watermark_after - d->after.offset : d->high_watermark - d->first.offset;
}

static json_t *dual_json(const km_verify_dual *d, bool *bad)
{
    int64_t lag = last_lag(d);
    json_t *j = json_pack("{s:I,s:s,s:I,s:i,s:i,s:I}", "high_watermark", (json_int_t)d->high_watermark,
                          "high_watermark_source", d->source, "migration_offset", (json_int_t)d->first.offset,
                          "migration_epoch", d->first.epoch, "migration_zk_version", d->first.zk_version,
                          "lag_records", (json_int_t)lag);
    if (!j)
        return NULL;
    *bad = false;
    if (d->watched) {
        /* Kafka's driver records every batch it mirrors (NoOpRecords too) in /migration's offset: committed
         * records past it at the first reading and no advance over the whole wait is a driver that stopped
         * (KAFKA-21062).  The offset, not the zkVersion, decides: in one run on the real wedge the zkVersion
         * changed during the wait while the lag stayed at 33 records.  The first high watermark, not the
         * second, so records committed just before the second reading do not count against a driver that had
         * no time for them. */
        bool stalled = d->high_watermark > d->first.offset && d->after.offset <= d->first.offset;
        json_object_set_new(j, "watch_seconds", json_real(d->watch_seconds));
        json_object_set_new(j, "high_watermark_after", json_integer(d->high_watermark_after));
        json_object_set_new(j, "migration_offset_after", json_integer(d->after.offset));
        json_object_set_new(j, "migration_zk_version_after", json_integer(d->after.zk_version));
        json_object_set_new(j, "driver_stalled", json_boolean(stalled));
        *bad = stalled;
    }
    if (d->max_lag >= 0) {
        json_object_set_new(j, "max_lag", json_integer(d->max_lag));
        json_object_set_new(j, "lag_exceeded", json_boolean(lag > d->max_lag));
        *bad = *bad || lag > d->max_lag;
    }
    return j;
}

int km_verify_dual_write(json_t *report, const km_verify_dual *d)
{
    bool bad;
    json_t *j = dual_json(d, &bad);
    if (!j || json_object_set_new(report, "dual_write", j) < 0)
        return -1;
    if (bad) {
        json_object_set_new(report, "verdict", json_string("inconsistent"));
        json_object_set_new(report, "exit", json_integer(KM_VERIFY_INCONSISTENT));
    }
    return (int)json_integer_value(json_object_get(report, "exit"));
}
