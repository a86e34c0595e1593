/* test_zk_util.h - helpers shared by the zkbridge suites: a libev loop driven until a condition
 * holds (with a generous real-time guard so a bug fails instead of hanging), and a writer harness
 * that records events. */
#ifndef KM_TEST_ZK_UTIL_H
#define KM_TEST_ZK_UTIL_H

#include "faultproxy.h"
#include "km_zkbridge.h"
#include "zkserver.h"
#include "zksecmode.h"
#include "km_testsupport.h"

#include <ev.h>
#include <stdbool.h>

typedef struct zkt_writer {
    struct ev_loop *loop;
    km_zkw *w;
    int claimed, confirmed, drained, resync, fenced, refused, sessions_lost;
    int errors_logged;
    char last_error[1024];
} zkt_writer;

/* A suite's one ZooKeeper server (jute.maxbuffer as km_zks_start takes it) and the test's own
 * client on it, for TestSuite's .init: asserts both came up; stop them with zkt_one_server_stop. */
void zkt_one_server_start(km_zks **zs_out, km_zkc **zc_out, int maxbuffer);
void zkt_one_server_stop(km_zks *zs, km_zkc *zc);

/* Runs the loop until pred(ctx) is true; false if guard_ms of wall time passed first. */
bool zkt_run_until(struct ev_loop *loop, bool (*pred)(void *), void *ctx, int guard_ms);
void zkt_spin(struct ev_loop *loop, int ms);

/* A writer (controller id/epoch as given) on hosts, with event counters; starts the claim. */
zkt_writer *zkt_writer_new(const char *hosts, int32_t id, int32_t epoch, const km_zkw_config *base);
void zkt_writer_free(zkt_writer *t);
bool zkt_wait_state(zkt_writer *t, km_zkw_state st, int guard_ms);
/* Waits until the writer is READY with nothing pending. */
bool zkt_wait_drained(zkt_writer *t, int guard_ms);

/* Reads path's data into a static-per-call malloc'd string (caller frees); NULL when absent. */
char *zkt_get(km_zkc *c, const char *path, int *version);

#endif

#include "km_image.h"

/* Reads every znode the mirror owns back from ZooKeeper and checks it against the image in
 * Kafka's formats (parsed independently of the renderer). False with the first difference in why. */
bool zkt_zk_equals_image(km_zkc *c, const km_image *img, int32_t controller_epoch, char *why, size_t whylen);
/* A bridge on hosts for img, driven until it is idle (in sync, lag 0) or stopped. */
typedef struct zkt_bridge {
    struct ev_loop *loop;
    km_zkb *b;
    int errors;
} zkt_bridge;
zkt_bridge *zkt_bridge_new(const char *hosts, const km_image *img, int32_t id, int32_t epoch, const km_zkb_config *base);
void zkt_bridge_free(zkt_bridge *t);
bool zkt_bridge_wait_idle(zkt_bridge *t, int guard_ms);

/* A `metadata gen` image of a migrating cluster (3 brokers, `topics` topics of 2 partitions; its log
 * in a temporary dir) and a delta that records applied with zkt_fixture_apply can go into. */
typedef struct zkt_fixture {
    char *dir;
    km_image *img;
    km_delta *d;
    int64_t off;
} zkt_fixture;
void zkt_fixture_open(zkt_fixture *f, const char *tag, int32_t topics, uint64_t seed);
void zkt_fixture_close(zkt_fixture *f);
/* Applies one record to the image; with `delta`, into the fixture's delta too. */
void zkt_fixture_apply(zkt_fixture *f, int16_t type, const void *rec, bool delta);
