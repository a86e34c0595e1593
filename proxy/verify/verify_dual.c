/* The dual-write lag (km_verify.h): /migration read from ZooKeeper with a one-shot session (zkbridge's
 * km_zk_read_once, secured as the daemon's zookeeper.* keys say), against the controllers' committed log.  Kafka's own ZkWriteBehindLag reads 0 when its driver is wedged (KAFKA-21062):
 * only /migration itself, read twice while the log moves, shows the driver stopped. */
#include "km_verify.h"

#include "km_zkbridge.h"

#include <stdio.h>
#include <string.h>

static int parse_migration(const char *data, int version, const char *hosts, km_verify_migration *m, km_err *err)
{
    json_error_t jerr;
    json_t *root = json_loads(data, 0, &jerr);
    json_t *off = json_object_get(root, "kraft_metadata_offset"), *ep = json_object_get(root, "kraft_metadata_epoch");
    bool ok = json_is_integer(off) && json_is_integer(ep);
    if (ok) {
        m->offset = (int64_t)json_integer_value(off);
        m->epoch = (int32_t)json_integer_value(ep);
        m->zk_version = version;
    }
    json_decref(root);
    return ok ? 0
              : km_fail(err, "ZooKeeper %s: /migration holds %.200s: want kraft_metadata_offset/epoch integers",
                        hosts, data);
}

int km_verify_read_migration(const char *hosts, const km_zk_security *sec, double timeout_s, km_verify_migration *m,
                             km_err *err)
{
    char data[1024];
    int version = -1;
    int rc = km_zk_read_once(hosts, sec, "/migration", timeout_s, data, sizeof data, &version, err);
    if (rc < 0)
        return -1;
    if (rc == 0)
        return km_fail(err, "ZooKeeper %s: no /migration: the migration has not started", hosts);
    return parse_migration(data, version, hosts, m, err);
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
