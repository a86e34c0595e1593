/* test_quorum_faults.c - the KRaft observer under a slow high watermark, leader failover with
 * divergence, connection cuts, a silent leader, snapshots taken mid-stream and corrupted
 * snapshot chunks, all against the raft simulator. */
#include "test_quorum_util.h"
#include "km_testsupport.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define PER_BATCH 5

/* Batches [from, to) of PER_BATCH records each at epoch, tagged, appended to log. */
static void batches(km_buf *log, int from, int to, int32_t epoch, const char *tag)
{
    for (int b = from; b < to; b++)
        tq_config_batch(log, (int64_t)b * PER_BATCH, epoch, PER_BATCH, tag);
}

static void append(km_rsim *s, const km_buf *log, size_t from)
{
    km_err err;
    cr_assert_eq(km_rsim_append(s, log->data + from, log->len - from, &err), 0, "%s", err.msg);
}

/* A rig of `voters` simulators (config c, NULL: the defaults), each holding the batches [0, n) at
 * epoch 1 tagged tag, which log holds too. */
static void rig_with_log(tq_rig *r, int voters, const km_rsim_config *c, km_buf *log, int n, const char *tag)
{
    tq_rig_init(r, voters, c);
    km_buf_init(log);
    batches(log, 0, n, 1, tag);
    for (int i = 0; i < voters; i++)
        append(r->sims[i], log, 0);
}

/* The observer's image is the one the whole of log makes (what names the case). */
static void assert_image_of_log(const tq_rig *r, const km_buf *log, const char *what)
{
    km_image *want = tq_image_of(NULL, 0, 0, 0, log->data, log->len);
    tq_assert_same_image(r->img, want, what);
    km_image_free(want);
}

static km_quorum_stats stats(tq_rig *r)
{
    km_quorum_stats st;
    km_quorum_get_stats(r->q, &st);
    return st;
}

static int64_t g_want_applied, g_want_fetched;
static bool applied_and_fetched(tq_rig *r)
{
    km_quorum_stats st = stats(r);
    return st.applied_offset == g_want_applied && (g_want_fetched < 0 || st.fetched_offset == g_want_fetched);
}

static uint64_t g_fetches_before;
static bool three_more_fetches(tq_rig *r)
{
    km_rsim_stats st;
    km_rsim_get_stats(r->sims[0], &st);
    return st.fetches >= g_fetches_before + 3;
}

static void assert_offsets_increase(const tq_rig *r)
{
    for (size_t i = 1; i < r->n_applied; i++)
        if (!r->applied[i].snapshot && !r->applied[i - 1].snapshot)
            cr_assert_gt(r->applied[i].offset, r->applied[i - 1].offset, "offset %lld applied twice or out of order",
                         (long long)r->applied[i].offset);
}

Test(quorum_faults, slow_high_watermark_holds_records_back)
{
    tq_rig r;
    km_buf log;
    rig_with_log(&r, 1, NULL, &log, 20, "c"); /* offsets 0..99 in batches of 5 */
    km_rsim_set_high_watermark(r.sims[0], 37); /* inside batch 35..39 */
    r.cfg.fetch_max_wait_ms = 50;
    tq_rig_start(&r);
    g_want_applied = 34, g_want_fetched = 100;
    cr_assert(tq_run_until(&r, applied_and_fetched, 30), "applied %lld", (long long)stats(&r).applied_offset);
    km_rsim_stats st;
    km_rsim_get_stats(r.sims[0], &st);
    g_fetches_before = st.fetches;
    cr_assert(tq_run_until(&r, three_more_fetches, 30));
    cr_assert_eq(stats(&r).applied_offset, 34, "a record above the high watermark was applied");
    cr_assert_gt(stats(&r).buffered_bytes, 0);
    km_rsim_set_high_watermark(r.sims[0], 60);
    g_want_applied = 59;
    cr_assert(tq_run_until(&r, applied_and_fetched, 30));
    km_rsim_set_high_watermark(r.sims[0], -1);
    cr_assert(tq_run_until(&r, tq_caught_up, 30));
    cr_assert_eq(r.max_offset_over_hw, -1, "offset %lld was applied above the high watermark",
                 (long long)r.max_offset_over_hw);
    assert_image_of_log(&r, &log, "slow high watermark");
    assert_offsets_increase(&r);
    km_buf_free(&log);
    tq_rig_free(&r);
}

Test(quorum_faults, uncommitted_buffer_is_bounded)
{
    tq_rig r;
    km_buf log;
    rig_with_log(&r, 1, NULL, &log, 40, "bound");
    size_t batch_bytes = log.len / 40;
    km_rsim_set_high_watermark(r.sims[0], 5);
    r.cfg.buffer_max_bytes = 4 * batch_bytes;
    r.cfg.fetch_max_wait_ms = 50;
    tq_rig_start(&r);
    g_want_applied = 4, g_want_fetched = 5 + 4 * PER_BATCH;
    cr_assert(tq_run_until(&r, applied_and_fetched, 30), "fetched %lld", (long long)stats(&r).fetched_offset);
    km_rsim_stats st;
    km_rsim_get_stats(r.sims[0], &st);
    g_fetches_before = st.fetches;
    cr_assert(tq_run_until(&r, three_more_fetches, 30));
    cr_assert_leq(stats(&r).buffered_bytes, r.cfg.buffer_max_bytes);
    cr_assert_eq(stats(&r).fetched_offset, 25, "the buffer grew past its bound");
    km_rsim_set_high_watermark(r.sims[0], -1);
    cr_assert(tq_run_until(&r, tq_caught_up, 30));
    assert_image_of_log(&r, &log, "bounded buffer");
    km_buf_free(&log);
    tq_rig_free(&r);
}

/* Leader 1 (epoch 1) holds an uncommitted suffix the new leader 2 (epoch 2) never had: the
 * observer truncates it on DivergingEpoch and never applies it. */
Test(quorum_faults, failover_truncates_the_uncommitted_suffix)
{
    tq_rig r;
    tq_rig_init(&r, 3, NULL);
    km_buf old_log, new_log;
    km_buf_init(&old_log);
    km_buf_init(&new_log);
    batches(&old_log, 0, 10, 1, "committed");
    batches(&new_log, 0, 10, 1, "committed");
    batches(&old_log, 10, 14, 1, "uncommitted");
    batches(&new_log, 10, 16, 2, "new-leader");
    append(r.sims[0], &old_log, 0);
    append(r.sims[1], &new_log, 0);
    append(r.sims[2], &new_log, 0);
    km_rsim_set_high_watermark(r.sims[0], 50);
    r.cfg.fetch_max_wait_ms = 100;
    tq_rig_start(&r);
    g_want_applied = 49, g_want_fetched = 70;
    cr_assert(tq_run_until(&r, applied_and_fetched, 30));
    tq_set_leader(&r, 2, 2);
    cr_assert(tq_run_until(&r, tq_caught_up, 30), "fatal: %s", r.fatal ? r.fatal_why.msg : "no");
    assert_image_of_log(&r, &new_log, "after failover");
    for (size_t i = 0; i < r.n_applied; i++)
        cr_assert(r.applied[i].offset < 50 ? r.applied[i].epoch == 1 : r.applied[i].epoch == 2,
                  "record at offset %lld epoch %d applied", (long long)r.applied[i].offset, r.applied[i].epoch);
    cr_assert_eq(r.max_offset_over_hw, -1);
    cr_assert_geq(stats(&r).truncations, 1);
    cr_assert_eq(stats(&r).leader_id, 2);
    km_rsim_stats st;
    km_rsim_get_stats(r.sims[1], &st);
    cr_assert_geq(st.diverging_sent, 1);
    km_buf_free(&old_log);
    km_buf_free(&new_log);
    tq_rig_free(&r);
}

static bool applied_past_half(tq_rig *r) { return stats(r).applied_offset >= g_want_applied; }

Test(quorum_faults, failover_between_three_voters_mid_stream_with_connection_cuts)
{
    km_rsim_config c;
    km_rsim_config_init(&c);
    c.fetch_max_bytes = 600; /* a few batches per answer: the stream takes many fetches */
    tq_rig r;
    km_buf log;
    rig_with_log(&r, 3, &c, &log, 60, "a");
    tq_rig_start(&r);
    g_want_applied = 100;
    cr_assert(tq_run_until(&r, applied_past_half, 30));
    size_t at = log.len;
    batches(&log, 60, 80, 2, "b");
    for (int i = 0; i < 3; i++)
        append(r.sims[i], &log, at);
    tq_set_leader(&r, 2, 2);
    km_rsim_drop_connections(r.sims[0]);
    g_want_applied = 320;
    cr_assert(tq_run_until(&r, applied_past_half, 30), "fatal: %s", r.fatal ? r.fatal_why.msg : "no");
    km_rsim_drop_connections(r.sims[1]); /* cut the new leader's connection too */
    cr_assert(tq_run_until(&r, tq_caught_up, 30));
    assert_image_of_log(&r, &log, "failover mid-stream");
    assert_offsets_increase(&r);
    cr_assert_eq(stats(&r).leader_id, 2);
    cr_assert_geq(stats(&r).fetch_errors, 1);
    km_buf_free(&log);
    tq_rig_free(&r);
}

Test(quorum_faults, silent_leader_is_left_for_the_new_one)
{
    tq_rig r;
    km_buf log;
    rig_with_log(&r, 3, NULL, &log, 10, "s");
    r.cfg.fetch_max_wait_ms = 100;
    r.cfg.request_timeout_ms = 300;
    tq_rig_start(&r);
    cr_assert(tq_run_until(&r, tq_caught_up, 30));
    km_rsim_set_silent(r.sims[0], true); /* node 1 hangs, still believing it leads epoch 1 */
    size_t at = log.len;
    batches(&log, 10, 15, 2, "t");
    for (int i = 1; i < 3; i++) {
        append(r.sims[i], &log, at);
        km_rsim_set_leader(r.sims[i], 2, 2);
    }
    g_want_applied = 74, g_want_fetched = -1;
    cr_assert(tq_run_until(&r, applied_and_fetched, 60), "fatal: %s", r.fatal ? r.fatal_why.msg : "no");
    assert_image_of_log(&r, &log, "after the silent leader");
    cr_assert_eq(stats(&r).leader_id, 2);
    assert_offsets_increase(&r);
    km_buf_free(&log);
    tq_rig_free(&r);
}

static bool loaded_and_caught_up(tq_rig *r) { return stats(r).snapshot_loads >= 1 && tq_caught_up(r); }

/* The leader snapshots at 200 and drops its log below it while the observer is at 150. */
Test(quorum_faults, snapshot_taken_mid_stream_is_fetched)
{
    tq_rig r;
    km_buf log;
    rig_with_log(&r, 1, NULL, &log, 30, "pre");
    km_rsim_set_high_watermark(r.sims[0], 50);
    r.cfg.fetch_max_wait_ms = 100;
    tq_rig_start(&r);
    g_want_applied = 49, g_want_fetched = 150;
    cr_assert(tq_run_until(&r, applied_and_fetched, 30));
    km_rsim_set_silent(r.sims[0], true); /* the observer's parked fetch sees only the final state */
    size_t at = log.len;
    batches(&log, 30, 40, 1, "pre");
    append(r.sims[0], &log, at);
    size_t snap_len;
    uint8_t *snap = tq_snapshot_of(log.data, log.len, &snap_len);
    km_err err;
    cr_assert_eq(km_rsim_add_snapshot(r.sims[0], snap, snap_len, 200, 1, true, &err), 0, "%s", err.msg);
    at = log.len;
    batches(&log, 40, 45, 1, "post");
    append(r.sims[0], &log, at);
    km_rsim_set_high_watermark(r.sims[0], -1);
    km_rsim_set_silent(r.sims[0], false);
    cr_assert(tq_run_until(&r, loaded_and_caught_up, 30), "fatal: %s", r.fatal ? r.fatal_why.msg : "no");
    km_image *want = tq_image_of(snap, snap_len, 200, 1, log.data + at, log.len - at);
    tq_assert_same_image(r.img, want, "snapshot mid-stream");
    assert_image_of_log(&r, &log, "snapshot mid-stream vs the whole log");
    cr_assert_eq(r.max_offset_over_hw, -1);
    km_image_free(want);
    free(snap);
    km_buf_free(&log);
    tq_rig_free(&r);
}

/* One voter (256-byte snapshot chunks) holding a snapshot at offset 100 of 20 batches "snap", then 3
 * batches "tail" in its log; log holds all 23. Returns the snapshot's bytes (malloc'd, *snap_len). */
static uint8_t *snapshot_rig(tq_rig *r, km_buf *log, size_t *snap_len)
{
    km_rsim_config c;
    km_rsim_config_init(&c);
    c.snapshot_chunk_bytes = 256;
    tq_rig_init(r, 1, &c);
    km_buf_init(log);
    batches(log, 0, 20, 1, "snap");
    uint8_t *snap = tq_snapshot_of(log->data, log->len, snap_len);
    km_err err;
    cr_assert_eq(km_rsim_add_snapshot(r->sims[0], snap, *snap_len, 100, 1, true, &err), 0, "%s", err.msg);
    size_t at = log->len;
    batches(log, 20, 23, 1, "tail");
    append(r->sims[0], log, at);
    return snap;
}

static void corrupted_chunk(const char *spool, bool whole)
{
    tq_rig r;
    km_buf log;
    size_t snap_len;
    uint8_t *snap = snapshot_rig(&r, &log, &snap_len);
    r.cfg.snapshot_dir = spool;
    r.cfg.snapshot_hold_whole = whole;
    km_rsim_corrupt_snapshot_chunks(r.sims[0], 1);
    tq_rig_start(&r);
    cr_assert(tq_run_until(&r, loaded_and_caught_up, 30), "fatal: %s", r.fatal ? r.fatal_why.msg : "no");
    cr_assert_eq(stats(&r).snapshot_refused, 1);
    cr_assert_eq(stats(&r).snapshot_loads, 1);
    km_rsim_stats st;
    km_rsim_get_stats(r.sims[0], &st);
    cr_assert_gt(st.fetch_snapshots, (snap_len + 255) / 256, "the snapshot was not fetched again");
    assert_image_of_log(&r, &log, "after a corrupted chunk");
    free(snap);
    km_buf_free(&log);
    tq_rig_free(&r);
}

Test(quorum_faults, corrupted_snapshot_chunk_is_refused_and_fetched_again)
{
    corrupted_chunk(NULL, false); /* streamed: 256-byte chunks cut every batch, carried over */
    corrupted_chunk(NULL, true);
    char *spool = km_test_tmpdir("tqspool");
    corrupted_chunk(spool, false); /* spooled: the refused .part file goes, the good one is loaded and removed */
    char cmd[600];
    snprintf(cmd, sizeof cmd, "test -z \"$(ls -A '%s')\"", spool);
    cr_assert_eq(system(cmd), 0, "files left in %s", spool);
    km_test_rmtree(spool);
    free(spool);
}

static bool snapshot_under_way(tq_rig *r)
{
    km_rsim_stats st;
    km_rsim_get_stats(r->sims[0], &st);
    return st.fetch_snapshots >= 3;
}

/* A leader change mid-download abandons the snapshot: its staged records are dropped, and the
 * new leader's log (which still starts at 0) is applied to the image, not to a stale staging. */
Test(quorum_faults, snapshot_abandoned_mid_download_leaves_the_image_to_the_log)
{
    km_rsim_config c;
    km_rsim_config_init(&c);
    c.snapshot_chunk_bytes = 64; /* over a thousand chunks: the download is long under way when the leader moves */
    tq_rig r;
    tq_rig_init(&r, 3, &c);
    km_buf log;
    km_buf_init(&log);
    batches(&log, 0, 400, 1, "big"); /* config keys of one broker: the image copies them all per change */
    size_t snap_len;
    uint8_t *snap = tq_snapshot_of(log.data, log.len, &snap_len);
    km_err err;
    cr_assert_eq(km_rsim_add_snapshot(r.sims[0], snap, snap_len, 400 * PER_BATCH, 1, true, &err), 0, "%s", err.msg);
    for (int i = 1; i < 3; i++)
        append(r.sims[i], &log, 0);
    tq_rig_start(&r);
    cr_assert(tq_run_until(&r, snapshot_under_way, 30), "fatal: %s", r.fatal ? r.fatal_why.msg : "no");
    tq_set_leader(&r, 2, 2);
    km_rsim_drop_connections(r.sims[0]);
    g_want_applied = 400 * PER_BATCH - 1, g_want_fetched = -1;
    cr_assert(tq_run_until(&r, applied_and_fetched, 60), "fatal: %s", r.fatal ? r.fatal_why.msg : "no");
    cr_assert_eq(stats(&r).snapshot_loads, 0, "the snapshot finished before the leader moved: nothing was abandoned");
    assert_image_of_log(&r, &log, "after an abandoned snapshot");
    free(snap);
    km_buf_free(&log);
    tq_rig_free(&r);
}

static bool is_fatal(tq_rig *r) { return r->fatal; }

/* A leader whose log contradicts records already applied (committed) stops the observer. */
Test(quorum_faults, contradiction_of_applied_records_stops)
{
    tq_rig r;
    km_buf log;
    rig_with_log(&r, 1, NULL, &log, 10, "x");
    tq_rig_start(&r);
    cr_assert(tq_run_until(&r, tq_caught_up, 30));
    km_rsim_truncate(r.sims[0], 30);
    km_buf other;
    km_buf_init(&other);
    batches(&other, 6, 12, 2, "y");
    append(r.sims[0], &other, 0);
    km_rsim_set_leader(r.sims[0], 1, 2);
    cr_assert(tq_run_until(&r, is_fatal, 30));
    cr_assert(strstr(r.fatal_why.msg, "offset 30") && strstr(r.fatal_why.msg, "epoch"), "%s", r.fatal_why.msg);
    cr_assert_eq(stats(&r).applied_offset, 49);
    km_buf_free(&other);
    km_buf_free(&log);
    tq_rig_free(&r);
}

/* cluster.id is sent in every Fetch; a quorum of another cluster answers INCONSISTENT_CLUSTER_ID
 * (hasValidClusterId) and the observer stops instead of mirroring a foreign cluster. */
Test(quorum_faults, another_clusters_quorum_stops_the_observer)
{
    tq_rig r;
    km_buf log;
    rig_with_log(&r, 1, NULL, &log, 2, "c");
    r.cfg.cluster_id = "some-other-cluster-id0";
    tq_rig_start(&r);
    cr_assert(tq_run_until(&r, is_fatal, 30));
    cr_assert(strstr(r.fatal_why.msg, "INCONSISTENT_CLUSTER_ID") && strstr(r.fatal_why.msg, "some-other-cluster-id0"),
              "%s", r.fatal_why.msg);
    cr_assert_eq(stats(&r).applied_offset, -1);
    km_buf_free(&log);
    tq_rig_free(&r);

    rig_with_log(&r, 1, NULL, &log, 2, "c"); /* the right one is accepted */
    r.cfg.cluster_id = "kmproxy-raftsim-cluster";
    tq_rig_start(&r);
    cr_assert(tq_run_until(&r, tq_caught_up, 30));
    cr_assert_str_eq(km_image_cluster_id(r.img), "kmproxy-raftsim-cluster");
    km_buf_free(&log);
    tq_rig_free(&r);
}

static bool epoch_two_caught_up(tq_rig *r) { return stats(r).leader_epoch == 2 && tq_caught_up(r); }
static bool never(tq_rig *r) { (void)r; return false; }

/* Issue 17 item 6: the leader resigned and won again (FENCED_LEADER_EPOCH naming itself at a newer
 * epoch): the observer asks it again at once, as KafkaRaftClient does after maybeTransition - no
 * failed exchange, no reconnect, no backoff. */
Test(quorum_faults, fenced_by_the_same_leader_at_a_newer_epoch_refetches_at_once)
{
    tq_rig r;
    km_buf log;
    rig_with_log(&r, 1, NULL, &log, 10, "a");
    tq_rig_start(&r);
    cr_assert(tq_run_until(&r, tq_caught_up, 30));
    uint64_t errors = stats(&r).fetch_errors;
    tq_set_leader(&r, 1, 2);
    cr_assert(tq_run_until(&r, epoch_two_caught_up, 30));
    cr_assert_eq(stats(&r).fetch_errors, errors, "the fence was handled as a failure (reconnect with backoff)");
    km_rsim_stats st;
    km_rsim_get_stats(r.sims[0], &st);
    cr_assert_geq(st.fenced_sent, 1);
    km_buf_free(&log);
    tq_rig_free(&r);
}

/* Issue 17 item 2 and the simulator's rule: a leader elected at a newer epoch answers with an unknown
 * high watermark (-1) until it commits in its epoch.  The observer applies nothing and is not caught
 * up meanwhile, even though it holds the whole log; once the leader knows it, it catches up. */
Test(quorum_faults, unknown_high_watermark_after_an_election_is_never_caught_up)
{
    km_rsim_config c;
    km_rsim_config_init(&c);
    c.unknown_hw_after_election = true;
    tq_rig r;
    km_buf log;
    rig_with_log(&r, 1, &c, &log, 10, "a");
    tq_set_leader(&r, 1, 2); /* elected again: nothing of epoch 2 committed yet */
    cr_assert_eq(km_rsim_high_watermark(r.sims[0]), -1);
    tq_rig_start(&r);
    tq_run_until(&r, never, 1.5);
    km_quorum_stats st = stats(&r);
    cr_assert(!st.caught_up && st.applied_offset == -1 && st.high_watermark == -1,
              "caught up %d, applied %lld, hw %lld with the leader's high watermark unknown", st.caught_up,
              (long long)st.applied_offset, (long long)st.high_watermark);
    km_rsim_set_high_watermark(r.sims[0], -1); /* known now: at the log end */
    cr_assert(tq_run_until(&r, tq_caught_up, 30));
    cr_assert_eq(stats(&r).applied_offset, 10 * PER_BATCH - 1);
    km_buf_free(&log);
    tq_rig_free(&r);
}

/* Issue 17 item 6: with controller.quorum.bootstrap.servers set, the voters' endpoints are not used
 * to find the leader (KIP-853: the bootstrap servers replace them); here the only voter entry points
 * at a port where nothing listens, and no exchange may fail on it. */
Test(quorum_faults, bootstrap_servers_replace_the_voters_for_discovery)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t len = sizeof a;
    cr_assert(fd >= 0 && !bind(fd, (struct sockaddr *)&a, sizeof a) && !getsockname(fd, (struct sockaddr *)&a, &len));
    close(fd); /* nothing listens there now */
    char voters[64];
    snprintf(voters, sizeof voters, "1@127.0.0.1:%u", ntohs(a.sin_port));
    tq_rig r;
    km_buf log;
    rig_with_log(&r, 1, NULL, &log, 4, "a");
    r.cfg.voters = voters;
    r.cfg.bootstrap_servers = r.servers;
    tq_rig_start(&r);
    cr_assert(tq_run_until(&r, tq_caught_up, 30));
    cr_assert_eq(stats(&r).fetch_errors, 0, "a voter's endpoint was dialled for discovery");
    km_buf_free(&log);
    tq_rig_free(&r);
}

/* Issue 17 item 6: POSITION_OUT_OF_RANGE in the middle of a snapshot download.  Asking the same
 * position again would be refused again; the observer starts the download over (a Fetch names the
 * snapshot anew, position 0), as it does on SNAPSHOT_NOT_FOUND, and loads it. */
Test(quorum_faults, position_out_of_range_starts_the_snapshot_over)
{
    tq_rig r;
    km_buf log;
    size_t snap_len;
    uint8_t *snap = snapshot_rig(&r, &log, &snap_len);
    km_rsim_fail_snapshot_positions(r.sims[0], 3);
    tq_rig_start(&r);
    cr_assert(tq_run_until(&r, loaded_and_caught_up, 30), "fatal: %s", r.fatal ? r.fatal_why.msg : "no");
    km_rsim_stats st;
    km_rsim_get_stats(r.sims[0], &st);
    cr_assert_eq(st.refused_position_asked_again, 0, "a refused position was asked for again");
    cr_assert_eq(stats(&r).snapshot_loads, 1);
    free(snap);
    km_buf_free(&log);
    tq_rig_free(&r);
}
