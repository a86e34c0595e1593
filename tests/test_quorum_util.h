/* test_quorum_util.h - a rig for the observer suites: raft simulators and a km_quorum on one loop. */
#ifndef TEST_QUORUM_UTIL_H
#define TEST_QUORUM_UTIL_H

#include "km_quorum.h"
#include "km_raftsim.h"

#include <ev.h>
#include <stdbool.h>

#define TQ_MAX_SIMS 3
#define TQ_MAX_APPLIED 200000

typedef struct tq_applied { int64_t offset; int32_t epoch; bool snapshot; } tq_applied;

typedef struct tq_rig {
    struct ev_loop *loop;
    km_rsim *sims[TQ_MAX_SIMS];
    int n_sims;
    char servers[256];            /* the simulators' "127.0.0.1:port,..." */
    km_image *img;
    km_quorum *q;
    km_quorum_config cfg;
    /* every record applied, in order (from on_record) and the high watermark seen when applied */
    tq_applied *applied;
    size_t n_applied;
    int64_t max_offset_over_hw;   /* any applied offset >= the leader's high watermark: the first such, else -1 */
    size_t deliveries;
    bool fatal;
    km_err fatal_why;
    void (*on_log)(km_quorum *q, const char *line, void *ud); /* the observer's log lines (ud: the rig); set before tq_rig_start */
} tq_rig;

/* n simulators on loop (ids 1..n, 127.0.0.1, any free port) that know each other as voters;
 * servers (if not NULL) receives "127.0.0.1:port,...". */
void tq_make_sims(struct ev_loop *loop, int n, const km_rsim_config *base, km_rsim **sims, char *servers,
                  size_t cap);
/* n simulators (ids 1..n) that know each other as voters; node 1 leads at epoch 1. */
void tq_rig_init(tq_rig *r, int n_sims, const km_rsim_config *base);
/* Starts the observer with the bootstrap servers = every simulator (cfg tweaks in r->cfg first). */
void tq_rig_start(tq_rig *r);
/* Also expects that no simulator rejected a request. */
void tq_rig_free(tq_rig *r);
/* Runs the loop until pred(r) holds or timeout_s passes; returns pred's last value. */
bool tq_run_until(tq_rig *r, bool (*pred)(tq_rig *r), double timeout_s);
/* Sets the leader on every simulator. */
void tq_set_leader(tq_rig *r, int32_t leader, int32_t epoch);
bool tq_caught_up(tq_rig *r);  /* applied up to the leader's log end, and nothing buffered */

/* A batch of n ConfigRecords (BROKER "0", names tag-<offset>) at base/epoch, appended to out. */
void tq_config_batch(km_buf *out, int64_t base, int32_t epoch, int n, const char *tag);
/* One batch of n NoOpRecords at base (what an idle active controller appends). */
void tq_noop_batch(km_buf *out, int64_t base, int32_t epoch, int n);
/* The image of the whole log bytes (and of a snapshot first, if snap is not NULL). */
km_image *tq_image_of(const uint8_t *snap, size_t snap_len, int64_t snap_end, int32_t snap_epoch,
                      const uint8_t *log, size_t log_len);
/* A snapshot file's bytes holding the records of log[0..len) (header, records, footer). */
uint8_t *tq_snapshot_of(const uint8_t *log, size_t len, size_t *out_len);
/* A whole file's bytes (malloc'd; asserts it reads). */
uint8_t *tq_read_file(const char *path, size_t *len);
/* `kmproxy metadata gen` with g into <tmp>/gen: its segment's bytes (malloc'd; asserts it works). */
uint8_t *tq_gen_log(const char *tmp, const km_gen_opts *g, size_t *len);
/* Asserts the two images' JSON are equal (what names the case). */
void tq_assert_same_image(const km_image *a, const km_image *b, const char *what);

#endif
