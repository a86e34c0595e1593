/* km_verify.h - the broker-state verifier (issue 26 part 3): every broker's own view of each partition,
 * its metadata cache (Metadata v12) and its replica state (ListOffsets v7 with the image's leader epoch),
 * compared with the KRaft image.  One connection per broker, one batched request of each kind per broker;
 * OffsetForLeaderEpoch to the image's leader only where a broker is found acting as a stale leader.
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

#include <jansson.h>
#include <stdio.h>

typedef struct km_verify_opts {
    const char *listener;   /* the broker endpoint to use, by listener name; NULL: each broker's first */
    double timeout_s;       /* per broker: connect and every answer; <= 0: 10 s */
    const char *client_id;  /* NULL: "kmproxy-verify" */
} km_verify_opts;

/* Verdicts of km_verify_run, as `kmproxy verify` exits. */
enum { KM_VERIFY_CONSISTENT = 0, KM_VERIFY_INCONSISTENT = 1, KM_VERIFY_UNCHECKED = 2 };

/* Checks every broker the image registers against img.  *report (new reference) holds "verdict"
 * ("consistent", "inconsistent", "unchecked"), "image" {offset, epoch}, "brokers" [{id, endpoint, mode,
 * partitions, findings, unchecked}], "findings" [{broker, topic, partition, class, ...}], "unchecked"
 * [{broker, why}], "image_behind" (true: a broker knows newer state: read the image again).  Returns the
 * verdict, or -1 + err when no report could be made (out of memory). */
int km_verify_run(const km_image *img, const km_verify_opts *o, json_t **report, km_err *err);

/* The report as a person reads it: one line a broker, one a finding, one a broker not checked. */
void km_verify_print(FILE *to, const json_t *report);

#endif
