/* Follow mode: torn tails are waited on, batches arrive whole, segments roll, corruption stops. */
#include "test_metalog.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <ev.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static km_metalog *follow_dir_opts(const char *dir, bool no_inotify)
{
    km_metalog_opts o = {.follow = true, .no_inotify = no_inotify};
    km_err err;
    km_metalog *m = km_metalog_open_dir(dir, &o, &err);
    cr_assert(m, "%s", err.msg);
    return m;
}

static km_metalog *follow_dir(const char *dir) { return follow_dir_opts(dir, false); }

static int count_segments(const char *dir)
{
    DIR *d = opendir(dir);
    cr_assert(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += strlen(e->d_name) == 24 && strcmp(e->d_name + 20, ".log") == 0;
    closedir(d);
    return n;
}

static long drain_ok(km_metalog *m, int64_t *last)
{
    long n = 0;
    km_err err;
    cr_assert_eq(tm_drain_checked(m, &n, last, true, &err), 1, "%s", err.msg);
    return n;
}

Test(metalog_follow, half_written_batch_is_delivered_once_complete)
{
    char *dir = km_test_tmpdir("ml-half");
    tm_write_topics(dir, KM_ML_NONE, 2, 2, 0);
    km_metalog *m = follow_dir(dir);
    int64_t last = -1;
    cr_assert_eq(drain_ok(m, &last), 4);
    cr_assert_eq(last, 3);

    km_buf b;
    km_buf_init(&b);
    tm_topic_batch(4, 3, KM_ML_SNAPPY, &b);
    char *seg = tm_path(dir, "00000000000000000000.log");
    size_t half = b.len / 2;
    tm_append(seg, b.data, half);
    if (km_metalog_fd(m) >= 0) { /* the wake-up fires for the write */
        struct pollfd p = {km_metalog_fd(m), POLLIN, 0};
        cr_assert_eq(poll(&p, 1, 10000), 1);
    }
    km_metalog_record r;
    km_err err;
    cr_assert_eq(km_metalog_next(m, &r, &err), 0, "half a batch must not be delivered: %s", err.msg);
    cr_assert_eq(km_metalog_next(m, &r, &err), 0, "%s", err.msg);
    tm_append(seg, b.data + half, b.len - half);
    cr_assert_eq(drain_ok(m, &last), 3);
    cr_assert_eq(last, 6);
    cr_assert_eq(km_metalog_next_offset(m), 7);
    km_metalog_close(m);
    km_buf_free(&b);
    km_test_rmtree(dir);
    free(seg);
    free(dir);
}

static void segment_roll(bool no_inotify)
{
    char *dir = km_test_tmpdir("ml-roll");
    tm_write_topics(dir, KM_ML_NONE, 1, 5, 0);
    km_metalog *m = follow_dir_opts(dir, no_inotify);
    cr_assert(no_inotify ? km_metalog_fd(m) == -1 : true);
    int64_t last = -1;
    cr_assert_eq(drain_ok(m, &last), 5);
    /* tiny segments: every batch after the first rolls */
    tm_write_topics(dir, KM_ML_GZIP, 6, 2, 300);
    cr_assert_eq(drain_ok(m, &last), 12);
    cr_assert_eq(last, 16);
    cr_assert_geq(count_segments(dir), 4, "the writer should have rolled");
    tm_write_topics(dir, KM_ML_NONE, 1, 1, 300);
    cr_assert_eq(drain_ok(m, &last), 1);
    cr_assert_eq(last, 17);
    km_metalog_close(m);
    km_test_rmtree(dir);
    free(dir);
}

Test(metalog_follow, segment_roll) { segment_roll(false); }
Test(metalog_follow, segment_roll_polling) { segment_roll(true); }

Test(metalog_follow, empty_dir_then_first_segment)
{
    char *dir = km_test_tmpdir("ml-empty");
    km_metalog *m = follow_dir(dir);
    int64_t last = -1;
    cr_assert_eq(drain_ok(m, &last), 0);
    tm_write_topics(dir, KM_ML_ZSTD, 2, 2, 0);
    cr_assert_eq(drain_ok(m, &last), 4);
    cr_assert_eq(last, 3);
    km_metalog_close(m);
    km_test_rmtree(dir);
    free(dir);
}

Test(metalog_follow, snapshot_then_segments_appear_in_an_empty_dir)
{
    /* a follower that fetches a snapshot first, then starts its log at the snapshot's end */
    char *dir = km_test_tmpdir("ml-late-snap");
    km_metalog *m = follow_dir(dir);
    int64_t last = -1;
    cr_assert_eq(drain_ok(m, &last), 0);
    char *snap = tm_path(dir, "00000000000000000005-0000000002.checkpoint");
    km_err err;
    km_metalog_writer_opts o = {.leader_epoch = 2};
    km_metalog_writer *w = km_metalog_writer_open_snapshot(snap, 1, &o, &err);
    cr_assert(w, "%s", err.msg);
    cr_assert_eq(km_metalog_writer_finish(w, &err), 0, "%s", err.msg);
    tm_write_topics(dir, KM_ML_NONE, 2, 1, 0); /* the writer starts the log at offset 5 */
    cr_assert_eq(drain_ok(m, &last), 4);  /* header, footer, offsets 5 and 6 */
    cr_assert_eq(last, 6);
    int64_t end;
    cr_assert_eq(km_metalog_snapshot_id(m, &end, NULL), 1);
    cr_assert_eq(end, 5);
    km_metalog_close(m);
    km_test_rmtree(dir);
    free(snap);
    free(dir);
}

Test(metalog_follow, corrupt_batch_mid_log_stops_with_error)
{
    char *dir = km_test_tmpdir("ml-corrupt");
    tm_write_topics(dir, KM_ML_NONE, 1, 2, 0);
    km_metalog *m = follow_dir(dir);
    int64_t last = -1;
    cr_assert_eq(drain_ok(m, &last), 2);
    km_buf b;
    km_buf_init(&b);
    tm_topic_batch(2, 2, KM_ML_NONE, &b);
    size_t second = b.len;
    tm_topic_batch(4, 2, KM_ML_NONE, &b);
    b.data[second - 3] ^= 0x40; /* corrupt the first appended batch; another follows it */
    char *seg = tm_path(dir, "00000000000000000000.log");
    tm_append(seg, b.data, b.len);
    km_metalog_record r;
    km_err err;
    cr_assert_eq(km_metalog_next(m, &r, &err), -1);
    cr_assert(strstr(err.msg, seg), "%s", err.msg);
    cr_assert(strstr(err.msg, "(offset 2): CRC32C mismatch"), "%s", err.msg);
    cr_assert_eq(km_metalog_next(m, &r, &err), -1, "the failure is sticky");
    km_metalog_close(m);
    km_buf_free(&b);
    km_test_rmtree(dir);
    free(seg);
    free(dir);
}

/* A complete last batch failing its CRC is corruption, not a write landing: an appending writer's
 * bytes are in the file before its size covers them. Only an incomplete tail is waited on. */
Test(metalog_follow, bad_crc_on_a_complete_last_batch_fails_at_once)
{
    char *dir = km_test_tmpdir("ml-crc-tail");
    tm_write_topics(dir, KM_ML_NONE, 1, 2, 0);
    km_metalog *m = follow_dir(dir);
    int64_t last = -1;
    cr_assert_eq(drain_ok(m, &last), 2);
    km_buf b;
    km_buf_init(&b);
    tm_topic_batch(2, 2, KM_ML_NONE, &b);
    b.data[b.len - 3] ^= 0x40;
    char *seg = tm_path(dir, "00000000000000000000.log");
    tm_append(seg, b.data, b.len);
    km_metalog_record r;
    km_err err;
    cr_assert_eq(km_metalog_next(m, &r, &err), -1, "the batch is whole: no waiting for more");
    cr_assert(strstr(err.msg, seg), "%s", err.msg);
    cr_assert(strstr(err.msg, "(offset 2): CRC32C mismatch"), "%s", err.msg);
    km_metalog_close(m);
    km_buf_free(&b);
    km_test_rmtree(dir);
    free(seg);
    free(dir);
}

Test(metalog_follow, truncation_under_the_reader_is_an_error)
{
    char *dir = km_test_tmpdir("ml-shrink");
    tm_write_topics(dir, KM_ML_NONE, 3, 1, 0);
    km_metalog *m = follow_dir(dir);
    int64_t last = -1;
    cr_assert_eq(drain_ok(m, &last), 3);
    char *seg = tm_path(dir, "00000000000000000000.log");
    cr_assert_eq(truncate(seg, 10), 0);
    km_metalog_record r;
    km_err err;
    cr_assert_eq(km_metalog_next(m, &r, &err), -1);
    cr_assert(strstr(err.msg, "truncated under the reader"), "%s", err.msg);
    km_metalog_close(m);
    km_test_rmtree(dir);
    free(seg);
    free(dir);
}

Test(metalog_follow, torn_tail_before_a_newer_segment_is_an_error)
{
    char *dir = km_test_tmpdir("ml-torn-roll");
    tm_write_topics(dir, KM_ML_NONE, 2, 1, 0);
    km_metalog *m = follow_dir(dir);
    int64_t last = -1;
    cr_assert_eq(drain_ok(m, &last), 2);
    km_buf b;
    km_buf_init(&b);
    tm_topic_batch(2, 1, KM_ML_NONE, &b);
    char *seg = tm_path(dir, "00000000000000000000.log");
    tm_append(seg, b.data, b.len - 5); /* torn ... */
    km_metalog_record r;
    km_err err;
    cr_assert_eq(km_metalog_next(m, &r, &err), 0, "%s", err.msg);
    char *next = tm_path(dir, "00000000000000000003.log"); /* ... and yet the log rolled on */
    km_buf_reset(&b);
    tm_topic_batch(3, 1, KM_ML_NONE, &b);
    tm_spit(next, b.data, b.len);
    int rc;
    while ((rc = km_metalog_next(m, &r, &err)) == 0) /* polling: the roll is seen on a later call */
        if (km_metalog_fd(m) >= 0) {
            struct pollfd p = {km_metalog_fd(m), POLLIN, 0};
            cr_assert_eq(poll(&p, 1, 10000), 1, "no wake-up for the new segment");
        }
    cr_assert_eq(rc, -1);
    cr_assert(strstr(err.msg, seg) && strstr(err.msg, "truncated batch") && strstr(err.msg, "a later file follows"),
              "%s", err.msg);
    km_metalog_close(m);
    km_buf_free(&b);
    km_test_rmtree(dir);
    free(seg);
    free(next);
    free(dir);
}

Test(metalog_follow, writer_refuses_to_extend_a_torn_segment)
{
    char *dir = km_test_tmpdir("ml-torn-w");
    tm_write_topics(dir, KM_ML_NONE, 2, 1, 0);
    char *seg = tm_path(dir, "00000000000000000000.log");
    tm_append(seg, "\0\0\0\0\0\0\0\2\0\0", 10);
    km_metalog_writer_opts o = {0};
    km_err err;
    cr_assert_null(km_metalog_writer_open_dir(dir, &o, &err));
    cr_assert(strstr(err.msg, "truncated batch"), "%s", err.msg);
    km_test_rmtree(dir);
    free(seg);
    free(dir);
}

/* ---- inside a libev loop, as the daemon runs it ------------------------------------------- */

typedef struct ev_ctx {
    km_metalog *m;
    const char *dir;
    long records;
    int64_t last;
    bool timed_out;
} ev_ctx;

static void on_readable(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)revents;
    ev_ctx *c = w->data;
    km_metalog_record r;
    km_err err;
    int rc;
    while ((rc = km_metalog_next(c->m, &r, &err)) == 1) {
        c->records++;
        c->last = r.offset;
    }
    cr_assert_eq(rc, 0, "%s", err.msg);
    if (c->last >= 4)
        ev_break(loop, EVBREAK_ALL);
}

static void on_start(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)loop;
    (void)revents;
    ev_ctx *c = t->data;
    tm_write_topics(c->dir, KM_ML_NONE, 4, 1, 150); /* rolls along the way */
}

static void on_guard(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)revents;
    ((ev_ctx *)t->data)->timed_out = true; /* a hang guard, not a timing assertion */
    ev_break(loop, EVBREAK_ALL);
}

Test(metalog_follow, drives_from_a_libev_loop)
{
    char *dir = km_test_tmpdir("ml-ev");
    tm_write_topics(dir, KM_ML_NONE, 1, 1, 150);
    ev_ctx c = {.m = follow_dir(dir), .dir = dir, .last = -1};
    cr_assert_eq(drain_ok(c.m, &c.last), 1);
    if (km_metalog_fd(c.m) < 0)
        cr_skip_test("no inotify here");
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    ev_io io;
    ev_timer start, guard;
    ev_io_init(&io, on_readable, km_metalog_fd(c.m), EV_READ);
    ev_timer_init(&start, on_start, 0.0, 0.0);
    ev_timer_init(&guard, on_guard, 30.0, 0.0);
    io.data = start.data = guard.data = &c;
    ev_io_start(loop, &io);
    ev_timer_start(loop, &start);
    ev_timer_start(loop, &guard);
    ev_run(loop, 0);
    cr_assert(!c.timed_out, "no wake-up delivered the records (got %ld, last %lld)", c.records, (long long)c.last);
    cr_assert_eq(c.records, 4);
    cr_assert_eq(c.last, 4);
    ev_loop_destroy(loop);
    km_metalog_close(c.m);
    km_test_rmtree(dir);
    free(dir);
}

Test(metalog_follow, writer_stops_after_a_failed_write)
{
    char *dir = km_test_tmpdir("ml-efbig");
    signal(SIGXFSZ, SIG_IGN); /* the write then fails with EFBIG instead of killing the test */
    struct rlimit rl, saved;
    cr_assert_eq(getrlimit(RLIMIT_FSIZE, &saved), 0);
    rl = saved;
    rl.rlim_cur = 3000; /* the soft limit only, so it can be put back without privileges */
    cr_assert_eq(setrlimit(RLIMIT_FSIZE, &rl), 0);
    km_err err;
    km_metalog_writer *w = km_metalog_writer_open_dir(dir, NULL, &err);
    cr_assert(w, "%s", err.msg);
    km_topic_record t;
    km_topic_record_init(&t);
    t.name = km_cstr("a-topic-name-long-enough-to-fill-the-file-quickly");
    km_metalog_entry e[8];
    for (int i = 0; i < 8; i++)
        e[i] = (km_metalog_entry){.desc = &km_topic_record_desc, .msg = &t, .control_type = -1};
    int rc = 0, batches = 0;
    while ((rc = km_metalog_writer_append(w, e, 8, NULL, &err)) == 0)
        batches++;
    cr_assert(strstr(err.msg, "write failed"), "%s", err.msg);
    cr_assert_eq(km_metalog_writer_append(w, e, 1, NULL, &err), -1);
    cr_assert(strstr(err.msg, "accepts nothing more"), "%s", err.msg);
    cr_assert_eq(km_metalog_writer_finish(w, &err), -1);
    cr_assert_eq(setrlimit(RLIMIT_FSIZE, &saved), 0);
    /* what did land is a clean prefix plus (at most) one torn batch */
    km_metalog_opts o = {.follow = true};
    km_metalog *m = km_metalog_open_dir(dir, &o, &err);
    long n = 0;
    int64_t last = -1;
    cr_assert_eq(tm_drain(m, &n, &last, &err), 1, "%s", err.msg);
    cr_assert_eq(n, 8L * batches);
    km_metalog_close(m);
    km_test_rmtree(dir);
    free(dir);
}
