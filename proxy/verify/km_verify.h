/* km_verify.h - the broker-state verifier (issue 26 part 3): every broker's own view of each partition,
 * its metadata cache (Metadata v12) and its replica state (ListOffsets v7 with the image's leader epoch),
 * compared with the KRaft image.  One connection per broker, one batched request of each kind per broker;
 * OffsetForLeaderEpoch to the image's leader only where a broker is found acting as a stale leader, and a Fetch
 * of the stale leader's records past the truncation point to count their bytes.
 *
 * Classes, per broker and partition:
 *   metadata_stale   the broker's Metadata answer lacks the partition, names an older leader epoch, or names a
 *                    topic the image does not have
 *   replica_stale    the leader the image names does not act as leader at the image's epoch
 *                    (UNKNOWN_LEADER_EPOCH, NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION)
 *   stale_leader     a broker the image does not name leader still acts as leader (ListOffsets without an epoch
 *                    answers): it accepts produce requests that the image's leader will truncate
 *   stray_log        (asked only of a broker with another finding: DescribeLogDirs) a log of a partition the image
 *                    does not place on the broker
 *   isr_differs      same leader epoch, another replica set or ISR (compared as sets whatever the epochs say:
 *                    hybrid mode does not always bump them, KAFKA-16121, KAFKA-15109)
 * Could not check (the result's "unchecked"): a broker unreachable, a malformed or error answer, a broker
 * ahead of the image (FENCED_LEADER_EPOCH, a newer epoch in its cache: read the image again). */
#ifndef KM_VERIFY_H
#define KM_VERIFY_H

#include "km_codec.h"
#include "km_image.h"
#include "km_sasl.h"
#include "km_tls.h"

#include <jansson.h>
#include <stdio.h>

typedef struct km_verify_opts {
    const char *listener;   /* the broker endpoint to use, by listener name; NULL: each broker's first */
    double timeout_s;       /* per broker: connect and every answer; <= 0: 10 s */
    const char *client_id;  /* NULL: "kmproxy-verify" */
    /* A slice of the partitions, for a large cluster checked over several cycles: in the order of topic names
     * (strcmp) then partition ids, the partitions strictly after (after_topic, after_partition) (after_topic
     * NULL: from the first), at most max_partitions of them (0: all).  The report's "slice" says which were
     * checked and whether the slice reached the last partition; the next slice starts after its "last". */
    const char *after_topic;
    int32_t after_partition;
    int64_t max_partitions;
    /* How the brokers are reached, as the daemon's broker channels (broker.security.protocol, broker.tls.*,
     * broker.sasl.*): TLS when tls is set (a client context; it names the broker's host to check), then the SASL
     * login after ApiVersions when mechanism is set.  A failed handshake or login leaves the broker unchecked with
     * the reason. */
    km_tls_ctx *tls;
    km_sasl_mech mechanism;     /* KM_SASL_NONE: no SASL */
    const char *username, *password;
    /* A stale leader's exposure in bytes is read from its log (Fetch); at most this many bytes per finding, so
     * that a large exposure cannot make a check read gigabytes (the finding then says "at least").  0: 8 MiB. */
    int64_t max_exposure_bytes;
} km_verify_opts;

/* The finding classes above, as a finding's "class" names them (km_verify_class_name). */
typedef enum km_verify_class {
    KM_VERIFY_METADATA_STALE,
    KM_VERIFY_REPLICA_STALE,
    KM_VERIFY_STALE_LEADER,
    KM_VERIFY_STRAY_LOG,
    KM_VERIFY_ISR_DIFFERS,
    KM_VERIFY_N_CLASSES
} km_verify_class;

/* "metadata_stale", ...; NULL for a value outside the enum. */
const char *km_verify_class_name(km_verify_class c);

/* Whether a finding on (topic, partition) was checked again by the run whose report's "slice" is slice and
 * which started after (after_topic, after_partition) (as km_verify_opts): a finding checked again and not
 * found is gone; one outside the slice stands.  partition -1 (a finding on a whole topic): only a slice from
 * the start asks a broker for every topic it caches. */
bool km_verify_slice_covers(const json_t *slice, const char *after_topic, int32_t after_partition,
                            const char *topic, int32_t partition);

/* Verdicts of km_verify_run, as `kmproxy verify` exits. */
enum { KM_VERIFY_CONSISTENT = 0, KM_VERIFY_INCONSISTENT = 1, KM_VERIFY_UNCHECKED = 2 };

/* Checks every broker the image registers against img (the partitions of o's slice).  *report (new reference)
 * holds "slice" {partitions, from_start, last: {topic, partition} or null, complete}, "verdict"
 * ("consistent", "inconsistent", "unchecked"), "image" {offset, epoch}, "brokers" [{id, endpoint, mode,
 * partitions, findings, unchecked}], "findings" [{broker, topic, partition, class, ...}], "unchecked"
 * [{broker, why}], "image_behind" (true: a broker knows newer state: read the image again).  Returns the
 * verdict, or -1 + err when no report could be made (out of memory). */
int km_verify_run(const km_image *img, const km_verify_opts *o, json_t **report, km_err *err);

/* ---- the dual-write lag: /migration against the controllers' committed log ---- */
typedef struct km_verify_migration {
    int64_t offset;     /* kraft_metadata_offset: the last KRaft record written to ZooKeeper */
    int32_t epoch;      /* kraft_metadata_epoch */
    int32_t zk_version; /* /migration's zkVersion: it moves at every write of the driver */
} km_verify_migration;

/* Reads /migration with a one-shot session to hosts ("HOST:PORT[,...][/chroot]") within timeout_s (<= 0: 10 s),
 * secured as sec says (km_zk_read_once; NULL: plain).  0, or -1 + err (no session, credentials refused, not
 * authorized, no /migration, not Kafka's JSON). */
struct km_zk_security;
int km_verify_read_migration(const char *hosts, const struct km_zk_security *sec, double timeout_s,
                             km_verify_migration *m, km_err *err);

typedef struct km_verify_dual {
    int64_t high_watermark;     /* the controllers' last committed offset when /migration was first read */
    const char *source;         /* what high_watermark is: "quorum" (the observer's fetch) or "metadata_file" */
    km_verify_migration first;
    bool watched;               /* read again after watch_seconds, the log read again too */
    double watch_seconds;
    int64_t high_watermark_after;
    km_verify_migration after;
    int64_t max_lag;            /* a lag beyond it is inconsistent; < 0: no threshold */
} km_verify_dual;

/* Adds "dual_write" {high_watermark, high_watermark_source, migration_offset, migration_epoch,
 * migration_zk_version, lag_records[, watch_seconds, high_watermark_after, migration_offset_after,
 * migration_zk_version_after, driver_stalled][, max_lag, lag_exceeded]} to report (from km_verify_run).  A stalled
 * driver (the log past /migration's offset at the first reading, /migration's offset not advanced at the second)
 * or a lag beyond max_lag makes the verdict inconsistent.  Returns the report's exit, or -1 when out of memory. */
int km_verify_dual_write(json_t *report, const km_verify_dual *d);

/* The report as a person reads it: one line a broker, one a finding, one a broker not checked. */
void km_verify_print(FILE *to, const json_t *report);

#endif
