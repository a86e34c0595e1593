/* metalog_read.c - reading segments and snapshots batch by batch, and following them.
 *
 * The reader keeps one window of file bytes (buf[lo..hi), starting at file
 * position bpos) and parses a batch only once all of it is in memory, so a
 * batch still being written is never applied half-way.  Uncompressed records
 * are served straight from that window; compressed ones from `inflated`.
 * Both, and the decode arena, are recycled only when the next batch starts,
 * which is the lifetime km_metalog.h promises.
 */
#include "metalog_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#define ML_READ_CHUNK (1u << 20)

typedef struct ml_file {
    char *path;
    km_ml_source source;
    int64_t base;            /* segment base offset from the name; -1 if the name does not say */
} ml_file;

struct km_metalog {
    km_metalog_opts o;
    char *dir;               /* NULL when reading a single file */
    ml_file *files;
    size_t nfiles, cap_files, cur;
    bool have_snap;
    int64_t snap_end;
    int32_t snap_epoch;
    int fd;                  /* current file */
    uint8_t *buf;
    size_t cap, lo, hi;
    uint64_t bpos;           /* file position of buf[lo] */
    size_t pending_need;     /* bytes the partial batch at lo needs (0: unknown) */
    km_metalog_batch batch;
    bool in_batch;
    km_reader recs;
    int32_t idx;
    km_buf inflated;
    km_arena arena;
    km_ml_desc_cache descs;
    bool snap_header, snap_footer;
    int64_t expect;          /* base offset the next batch must have; -1: any */
    int64_t log_expect;      /* where the previous segment ended; -1: unknown */
    int64_t last_seg_base;   /* highest segment base listed so far; -1: none */
    int64_t skip_below;      /* log records below this are in the snapshot already */
    int64_t next_offset;
    int ino;                 /* inotify fd or -1 */
    bool rescan;             /* the directory may hold new segments */
    bool failed;
    km_err failure;
    bool mem;                /* km_metalog_open_mem: buf is borrowed, there is no fd */
};

/* ---- errors ----------------------------------------------------------------------- */

static const char *cur_path(const km_metalog *m)
{
    return m->cur < m->nfiles ? m->files[m->cur].path : (m->dir ? m->dir : "?");
}

/* Records a sticky failure naming file, byte position and (if known) offset. */
static int fail_at(km_metalog *m, uint64_t pos, int64_t offset, const char *reason, km_err *err)
{
    if (offset >= 0)
        km_fail(&m->failure, "%s: byte %" PRIu64 " (offset %" PRId64 "): %s", cur_path(m), pos, offset, reason);
    else
        km_fail(&m->failure, "%s: byte %" PRIu64 ": %s", cur_path(m), pos, reason);
    m->failed = true;
    if (err)
        *err = m->failure;
    return -1;
}

/* ---- names ------------------------------------------------------------------------ */

static bool all_digits(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9')
            return false;
    return true;
}

int64_t km_ml_segment_base(const char *name)
{
    if (strlen(name) != 24 || strcmp(name + 20, ".log") != 0 || !all_digits(name, 20))
        return -1;
    return strtoll(name, NULL, 10);
}

bool km_ml_snapshot_parse(const char *name, int64_t *end, int32_t *epoch)
{
    if (strlen(name) != 42 || name[20] != '-' || strcmp(name + 31, ".checkpoint") != 0 ||
        !all_digits(name, 20) || !all_digits(name + 21, 10))
        return false;
    *end = strtoll(name, NULL, 10);
    long long e = strtoll(name + 21, NULL, 10);
    if (e > INT32_MAX)
        return false;
    *epoch = (int32_t)e;
    return true;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* ---- file list ---------------------------------------------------------------------- */

static int add_file(km_metalog *m, const char *path, km_ml_source src, int64_t base, km_err *err)
{
    if (m->nfiles == m->cap_files) {
        size_t n = m->cap_files ? m->cap_files * 2 : 8;
        ml_file *f = realloc(m->files, n * sizeof *f);
        if (!f)
            return km_fail(err, "out of memory listing %s", path);
        m->files = f;
        m->cap_files = n;
    }
    char *copy = strdup(path);
    if (!copy)
        return km_fail(err, "out of memory listing %s", path);
    m->files[m->nfiles++] = (ml_file){copy, src, base};
    return 0;
}

static char *join(const char *dir, const char *name)
{
    char *p = NULL;
    return asprintf(&p, "%s/%s", dir, name) < 0 ? NULL : p;
}

/* ---- the byte window ------------------------------------------------------------------ */

/* Makes room for `need` bytes from lo, moving the unread tail to the front. */
static int window_room(km_metalog *m, size_t need, km_err *err)
{
    if (m->lo > 0) {
        memmove(m->buf, m->buf + m->lo, m->hi - m->lo);
        m->hi -= m->lo;
        m->lo = 0;
    }
    size_t want = need > ML_READ_CHUNK ? need : ML_READ_CHUNK;
    if (m->cap >= want)
        return 0;
    uint8_t *b = realloc(m->buf, want);
    if (!b)
        return km_fail(err, "out of memory for a %zu-byte batch", need);
    m->buf = b;
    m->cap = want;
    return 0;
}

/* Reads until `need` bytes are buffered at lo or the file ends.  1: have
 * them; 0: the file ends first; -1: read error. */
static int window_fill(km_metalog *m, size_t need, km_err *err)
{
    if (m->hi - m->lo >= need)
        return 1;
    if (m->mem)
        return 0;
    if (m->cap - m->lo < need && window_room(m, need, err) < 0)
        return -1;
    if (m->hi == m->cap && window_room(m, need, err) < 0)
        return -1;
    while (m->hi - m->lo < need) {
        ssize_t n = read(m->fd, m->buf + m->hi, m->cap - m->hi);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return km_fail(err, "read failed: %s", strerror(errno));
        if (n == 0)
            return 0;
        m->hi += (size_t)n;
    }
    return 1;
}

/* Follow mode: a file shorter than what was already read was truncated under us. */
static int check_not_shrunk(km_metalog *m, km_err *err)
{
    struct stat st;
    if (fstat(m->fd, &st) < 0)
        return km_fail(err, "fstat failed: %s", strerror(errno));
    uint64_t read_to = m->bpos + (m->hi - m->lo);
    if ((uint64_t)st.st_size < read_to)
        return km_fail(err, "file shrank to %lld bytes below the %" PRIu64 " already read (truncated under the reader)",
                       (long long)st.st_size, read_to);
    return 0;
}

/* ---- opening files ------------------------------------------------------------------ */

static int open_current(km_metalog *m, km_err *err)
{
    ml_file *f = &m->files[m->cur];
    if (m->fd >= 0)
        close(m->fd);
    m->fd = open(f->path, O_RDONLY | O_CLOEXEC);
    if (m->fd < 0)
        return fail_at(m, 0, -1, strerror(errno), err);
    m->lo = m->hi = 0;
    m->bpos = 0;
    m->pending_need = 0;
    m->snap_header = m->snap_footer = false;
    /* Snapshot offsets count from the snapshot's own start; segments continue the log. */
    m->expect = -1;
    if (f->source != KM_ML_FROM_LOG)
        return 0;
    if (m->log_expect >= 0 && f->base >= 0 && f->base != m->log_expect) {
        char why[128];
        snprintf(why, sizeof why, "segment starts at offset %" PRId64 " but the one before it continues at %" PRId64,
                 f->base, m->log_expect);
        return fail_at(m, 0, f->base, why, err);
    }
    m->expect = f->base >= 0 ? f->base : m->log_expect;
    return 0;
}

static km_metalog *alloc_reader(const km_metalog_opts *opts)
{
    km_metalog *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    if (opts)
        m->o = *opts;
    if (!m->o.max_batch)
        m->o.max_batch = KM_ML_MAX_BATCH_DEFAULT;
    if (!m->o.max_inflated)
        m->o.max_inflated = KM_ML_MAX_INFLATED_DEFAULT;
    if (!m->o.arena_limit)
        m->o.arena_limit = 4 * m->o.max_inflated;
    m->fd = -1;
    m->ino = -1;
    m->expect = -1;
    m->skip_below = -1;
    m->log_expect = -1;
    m->last_seg_base = -1;
    km_buf_init(&m->inflated);
    km_arena_init(&m->arena, m->o.arena_limit);
    return m;
}

void km_metalog_close(km_metalog *m)
{
    if (!m)
        return;
    if (m->fd >= 0)
        close(m->fd);
    if (m->ino >= 0)
        close(m->ino);
    for (size_t i = 0; i < m->nfiles; i++)
        free(m->files[i].path);
    free(m->files);
    free(m->dir);
    if (!m->mem)
        free(m->buf);
    km_buf_free(&m->inflated);
    km_arena_free(&m->arena);
    free(m);
}

/* inotify is only a wake-up; the reader rechecks files itself, so losing it costs latency only. */
static void watch(km_metalog *m, const char *path, uint32_t mask)
{
    if (!m->o.follow || m->o.no_inotify)
        return;
    m->ino = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (m->ino >= 0 && inotify_add_watch(m->ino, path, mask) < 0) {
        close(m->ino);
        m->ino = -1;
    }
}

km_metalog *km_metalog_open_file(const char *path, const km_metalog_opts *opts, km_err *err)
{
    km_metalog *m = alloc_reader(opts);
    if (!m) {
        km_fail(err, "%s: out of memory", path);
        return NULL;
    }
    const char *name = base_name(path);
    km_ml_source src = ends_with(name, ".checkpoint") ? KM_ML_FROM_SNAPSHOT : KM_ML_FROM_LOG;
    if (add_file(m, path, src, km_ml_segment_base(name), err) < 0) {
        km_metalog_close(m);
        return NULL;
    }
    watch(m, path, IN_MODIFY | IN_CLOSE_WRITE);
    if (open_current(m, err) < 0) {
        km_metalog_close(m);
        return NULL;
    }
    return m;
}

km_metalog *km_metalog_open_mem(const char *name, const uint8_t *data, size_t len, km_ml_source source,
                                const km_metalog_opts *opts, km_err *err)
{
    km_metalog *m = alloc_reader(opts);
    if (!m) {
        km_fail(err, "%s: out of memory", name);
        return NULL;
    }
    m->o.follow = false;
    if (add_file(m, name, source, -1, err) < 0) {
        km_metalog_close(m);
        return NULL;
    }
    m->mem = true;
    m->buf = (uint8_t *)data; /* never written: the window only moves lo */
    m->cap = m->hi = len;
    return m;
}

/* ---- batches -------------------------------------------------------------------------- */

/* Points m->recs at the batch's records, decompressing if needed. */
static int open_records(km_metalog *m, const uint8_t *p, km_err *err)
{
    const uint8_t *recs = p + KM_ML_BATCH_OVERHEAD;
    size_t len = m->batch.size - KM_ML_BATCH_OVERHEAD;
    if (m->batch.compression == KM_ML_NONE) {
        km_reader_init(&m->recs, recs, len);
        m->recs.base = (size_t)(m->bpos + KM_ML_BATCH_OVERHEAD);
        return 0;
    }
    km_err inner;
    if (km_ml_inflate(m->batch.compression, recs, len, m->o.max_inflated, &m->inflated, &inner) < 0)
        return fail_at(m, m->bpos, m->batch.base_offset, inner.msg, err);
    km_reader_init(&m->recs, m->inflated.data, m->inflated.len);
    return 0;
}

static int check_sequence(km_metalog *m, km_err *err)
{
    char why[160];
    if (m->expect >= 0 && m->batch.base_offset != m->expect) {
        snprintf(why, sizeof why, "batch base offset %" PRId64 " where %" PRId64 " was expected (%s)",
                 m->batch.base_offset, m->expect, m->batch.base_offset > m->expect ? "gap" : "overlap");
        return fail_at(m, m->bpos, m->batch.base_offset, why, err);
    }
    m->expect = m->batch.last_offset + 1;
    return 0;
}

/* 1: a batch is loaded; 0: no complete batch at the end of the current file; -1: error. */
static int load_batch(km_metalog *m, km_err *err)
{
    km_err inner;
    size_t need = KM_ML_HEADER_UP_TO_MAGIC;
    for (;;) {
        int got = window_fill(m, need, &inner);
        if (got < 0)
            return fail_at(m, m->bpos, -1, inner.msg, err);
        size_t avail = m->hi - m->lo;
        km_ml_scan s = km_ml_scan_batch(m->buf + m->lo, avail, m->o.max_batch, &m->batch, &need, &inner);
        /* A complete batch failing its CRC is corrupt, in follow mode too: an appending writer's bytes
         * are in the file before its size covers them (only a batch the file does not hold whole yet
         * is still landing, and is waited on below). */
        if (s < 0)
            return fail_at(m, m->bpos, avail >= 8 ? (int64_t)km_ml_be64(m->buf + m->lo) : -1, inner.msg, err);
        if (s == KM_ML_SCAN_OK)
            break;
        if (!got || window_fill(m, need, &inner) == 0) {
            m->pending_need = need;
            return 0;
        }
    }
    m->pending_need = 0;
    m->batch.source = m->files[m->cur].source;
    m->batch.file = m->files[m->cur].path;
    m->batch.file_pos = m->bpos;
    km_arena_free(&m->arena);
    if (check_sequence(m, err) < 0)
        return -1;
    if (m->batch.source == KM_ML_FROM_LOG && m->batch.last_offset < m->skip_below) {
        m->lo += m->batch.size; /* wholly inside the snapshot: CRC checked, records never opened */
        m->bpos += m->batch.size;
        return 1;
    }
    if (open_records(m, m->buf + m->lo, err) < 0)
        return -1;
    m->in_batch = true;
    m->idx = 0;
    return 1;
}

/* The batch's records are all out: the section must be used up exactly. */
static int finish_batch(km_metalog *m, km_err *err)
{
    m->in_batch = false;
    if (km_reader_left(&m->recs) != 0) {
        char why[128];
        snprintf(why, sizeof why, "%zu bytes left after the batch's %d records", km_reader_left(&m->recs),
                 m->batch.record_count);
        return fail_at(m, m->bpos, m->batch.base_offset, why, err);
    }
    m->lo += m->batch.size;
    m->bpos += m->batch.size;
    return 0;
}

/* ---- records ------------------------------------------------------------------------------ */

static int decode_control(km_metalog *m, const km_ml_raw_record *rr, km_metalog_record *out, km_err *err)
{
    out->frame_version = 0;
    if (km_ml_parse_control_key(rr->key, &out->version, &out->type, err) < 0)
        return -1;
    if (m->o.raw)
        return 0;
    return km_ml_decode_control(out->type, rr->value, &out->desc, &out->msg, &m->arena, err);
}

static int decode_metadata(km_metalog *m, const km_ml_raw_record *rr, km_metalog_record *out, km_err *err)
{
    out->frame_version = 1;
    if (rr->value.len < 0)
        return km_fail(err, "metadata record with a null value");
    if (m->o.raw) {
        size_t body;
        return km_ml_frame_header(rr->value.ptr, (size_t)rr->value.len, &out->type, &out->version, &body, err);
    }
    return km_ml_decode_frame_cached(&m->descs, rr->value.ptr, (size_t)rr->value.len, &out->type, &out->version,
                                     &out->desc, &out->msg, &m->arena, err);
}

/* Snapshots open with SnapshotHeader and close with SnapshotFooter (RecordsSnapshotReader's rules). */
static int check_snapshot_order(km_metalog *m, const km_metalog_record *r, km_err *err)
{
    bool header = r->control && r->type == KM_ML_CTRL_SNAPSHOT_HEADER;
    bool footer = r->control && r->type == KM_ML_CTRL_SNAPSHOT_FOOTER;
    if (m->snap_footer)
        return km_fail(err, "record after the SnapshotFooter");
    if (!m->snap_header && !header)
        return km_fail(err, "snapshot does not start with a SnapshotHeader control record");
    if (m->snap_header && header)
        return km_fail(err, "second SnapshotHeader in the snapshot");
    m->snap_header = true;
    m->snap_footer = footer;
    return 0;
}

static int fill_record(km_metalog *m, const km_ml_raw_record *rr, km_metalog_record *out, km_err *err)
{
    const km_metalog_batch *b = &m->batch;
    memset(out, 0, sizeof *out);
    out->batch = b;
    out->offset = b->base_offset + rr->offset_delta;
    out->timestamp = b->log_append_time ? b->max_timestamp : b->base_timestamp + rr->timestamp_delta;
    out->index = m->idx;
    out->last_in_batch = m->idx == b->record_count - 1;
    out->control = b->control;
    out->key = rr->key;
    out->value = rr->value;
    out->header_count = rr->header_count;
    if (rr->offset_delta < 0 || out->offset > b->last_offset)
        return km_fail(err, "record offset delta %d is outside the batch (last offset %" PRId64 ")",
                       rr->offset_delta, b->last_offset);
    return b->control ? decode_control(m, rr, out, err) : decode_metadata(m, rr, out, err);
}

/* 1: *out filled; 0: the record was skipped (already in the snapshot); -1: error. */
static int emit_record(km_metalog *m, km_metalog_record *out, km_err *err)
{
    km_err inner;
    km_ml_raw_record rr;
    int32_t i = m->idx;
    char why[sizeof inner.msg + 64];
    int parsed = km_ml_parse_record(&m->recs, &rr, &inner);
    if (parsed == 0 && m->batch.source == KM_ML_FROM_LOG && m->batch.base_offset + rr.offset_delta < m->skip_below) {
        m->idx++; /* in the snapshot already: not decoded, so a record it superseded cannot fail the load */
        return 0;
    }
    if (parsed < 0 || fill_record(m, &rr, out, &inner) < 0 ||
        (m->batch.source == KM_ML_FROM_SNAPSHOT && check_snapshot_order(m, out, &inner) < 0)) {
        snprintf(why, sizeof why, "record %d of %d: %s", i, m->batch.record_count, inner.msg);
        return fail_at(m, m->bpos, m->batch.base_offset + i, why, err); /* KRaft offsets are dense */
    }
    m->idx++;
    if (m->batch.source == KM_ML_FROM_LOG)
        m->next_offset = out->offset + 1;
    return 1;
}

/* ---- end of a file: wait, move on, or fail -------------------------------------------------- */

static int fail_partial(km_metalog *m, const char *why_more, km_err *err)
{
    char why[256];
    if (m->pending_need)
        snprintf(why, sizeof why, "truncated batch: %zu bytes at the end of the file, the batch needs %zu%s",
                 m->hi - m->lo, m->pending_need, why_more);
    else
        snprintf(why, sizeof why, "truncated batch: %zu bytes at the end of the file%s", m->hi - m->lo, why_more);
    return fail_at(m, m->bpos, -1, why, err);
}

static int finish_file(km_metalog *m, km_err *err)
{
    if (m->files[m->cur].source == KM_ML_FROM_SNAPSHOT && !m->snap_footer)
        return fail_at(m, m->bpos, -1, m->snap_header ? "snapshot ends without a SnapshotFooter (incomplete)"
                                                       : "snapshot is empty (no SnapshotHeader)", err);
    return 0;
}

static int advance_file(km_metalog *m, km_err *err)
{
    if (finish_file(m, err) < 0)
        return -1;
    if (m->files[m->cur].source == KM_ML_FROM_LOG)
        m->log_expect = m->expect;
    m->cur++;
    return open_current(m, err);
}

static int rescan_dir(km_metalog *m, km_err *err);

/* Drains inotify; notes whether the directory may have gained files. */
static void drain_events(km_metalog *m)
{
    if (m->ino < 0) {
        m->rescan = true; /* polling: look every time */
        return;
    }
    char ev[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
    ssize_t n;
    while ((n = read(m->ino, ev, sizeof ev)) > 0) {
        for (char *p = ev; p < ev + n;) {
            const struct inotify_event *e = (const struct inotify_event *)p;
            if (e->mask & (IN_CREATE | IN_MOVED_TO | IN_Q_OVERFLOW))
                m->rescan = true;
            p += sizeof *e + e->len;
        }
    }
}

/* No complete batch is left in the current file.  1: go on reading; 0: nothing more (for now); -1: error. */
static int at_file_end(km_metalog *m, km_err *err)
{
    bool snapshot = m->files[m->cur].source == KM_ML_FROM_SNAPSHOT;
    bool partial = m->hi > m->lo;
    if (m->cur + 1 < m->nfiles) {
        if (partial)
            return fail_partial(m, ", and a later file follows", err);
        return advance_file(m, err) < 0 ? -1 : 1;
    }
    /* Snapshots are renamed into place whole, so a partial one is never "still being written". */
    if (partial && (!m->o.follow || snapshot))
        return fail_partial(m, "", err);
    if (!m->o.follow || snapshot) {
        if (finish_file(m, err) < 0)
            return -1;
        if (!m->o.follow)
            return 0;
    } else {
        km_err inner;
        if (check_not_shrunk(m, &inner) < 0)
            return fail_at(m, m->bpos, -1, inner.msg, err);
    }
    if (m->dir && m->rescan) {
        size_t before = m->nfiles;
        if (rescan_dir(m, err) < 0)
            return -1;
        if (m->nfiles > before)
            return 1; /* read this file once more before rolling: it may have grown first */
    }
    return 0;
}

int km_metalog_next(km_metalog *m, km_metalog_record *out, km_err *err)
{
    if (m->failed) {
        if (err)
            *err = m->failure;
        return -1;
    }
    for (;;) {
        if (m->in_batch && m->idx < m->batch.record_count) {
            int r = emit_record(m, out, err);
            if (r != 0)
                return r;
            continue;
        }
        if (m->in_batch && finish_batch(m, err) < 0)
            return -1;
        if (m->cur >= m->nfiles) { /* directory with no files yet (follow mode) */
            if (!m->o.follow)
                return 0;
            drain_events(m);
            if (!m->rescan || rescan_dir(m, err) < 0 || m->cur >= m->nfiles)
                return m->failed ? -1 : 0;
            if (open_current(m, err) < 0)
                return -1;
        }
        int r = load_batch(m, err);
        if (r == 0 && m->o.follow) {
            /* Drain the wake-ups, then look again: a write landing between the
             * two is then either read now or wakes the caller later. */
            drain_events(m);
            r = load_batch(m, err);
        }
        if (r < 0)
            return -1;
        if (r > 0)
            continue;
        r = at_file_end(m, err);
        if (r <= 0)
            return r;
    }
}

/* ---- directories ---------------------------------------------------------------------------- */

typedef struct ml_listing {
    int64_t *bases;          /* segment base offsets, sorted */
    size_t n, cap;
    bool have_snap;
    int64_t snap_end;
    int32_t snap_epoch;
} ml_listing;

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static int listing_add(ml_listing *l, int64_t base)
{
    if (l->n == l->cap) {
        size_t n = l->cap ? l->cap * 2 : 16;
        int64_t *b = realloc(l->bases, n * sizeof *b);
        if (!b)
            return -1;
        l->bases = b;
        l->cap = n;
    }
    l->bases[l->n++] = base;
    return 0;
}

/* Segments `<base>.log` and the latest `<end>-<epoch>.checkpoint`; anything else
 * (indexes, *.deleted, *.part, quorum-state) is not ours to read. */
static int list_dir(const char *dir, ml_listing *l, km_err *err)
{
    memset(l, 0, sizeof *l);
    DIR *d = opendir(dir);
    if (!d)
        return km_fail(err, "%s: %s", dir, strerror(errno));
    struct dirent *e;
    while ((e = readdir(d))) {
        int64_t end;
        int32_t epoch;
        int64_t base = km_ml_segment_base(e->d_name);
        if (base >= 0 && listing_add(l, base) < 0) {
            closedir(d);
            free(l->bases);
            return km_fail(err, "%s: out of memory", dir);
        }
        if (km_ml_snapshot_parse(e->d_name, &end, &epoch) &&
            (!l->have_snap || end > l->snap_end || (end == l->snap_end && epoch > l->snap_epoch))) {
            l->have_snap = true;
            l->snap_end = end;
            l->snap_epoch = epoch;
        }
    }
    closedir(d);
    if (l->n > 1)
        qsort(l->bases, l->n, sizeof *l->bases, cmp_i64);
    return 0;
}

static int add_segment(km_metalog *m, int64_t base, km_err *err)
{
    char name[32];
    snprintf(name, sizeof name, "%020" PRId64 ".log", base);
    char *path = join(m->dir, name);
    if (!path)
        return km_fail(err, "%s: out of memory", m->dir);
    int rc = add_file(m, path, KM_ML_FROM_LOG, base, err);
    free(path);
    m->last_seg_base = base;
    return rc;
}

/* Index of the first segment the reader needs, or -1 with err set when the log cannot continue the snapshot. */
static ssize_t first_segment(const km_metalog *m, const ml_listing *l, km_err *err)
{
    if (l->n == 0)
        return 0;
    if (!m->have_snap && l->bases[0] > 0)
        return km_fail(err, "%s: the log starts at offset %" PRId64 " and no snapshot covers the offsets before it",
                       m->dir, l->bases[0]);
    if (!m->have_snap)
        return 0;
    if (l->bases[0] > m->snap_end)
        return km_fail(err, "%s: gap: the log starts at offset %" PRId64 ", after the snapshot's end offset %" PRId64,
                       m->dir, l->bases[0], m->snap_end);
    size_t k = 0;
    while (k + 1 < l->n && l->bases[k + 1] <= m->snap_end)
        k++;
    return (ssize_t)k;
}

static int load_dir(km_metalog *m, km_err *err)
{
    ml_listing l;
    if (list_dir(m->dir, &l, err) < 0)
        return -1;
    int rc = 0;
    if (l.have_snap) {
        char name[48];
        km_ml_snapshot_name(l.snap_end, l.snap_epoch, name);
        char *path = join(m->dir, name);
        rc = path ? add_file(m, path, KM_ML_FROM_SNAPSHOT, -1, err) : km_fail(err, "out of memory");
        free(path);
        m->have_snap = true;
        m->snap_end = m->skip_below = m->next_offset = l.snap_end;
        m->snap_epoch = l.snap_epoch;
    }
    ssize_t k = rc < 0 ? -1 : first_segment(m, &l, err);
    for (size_t i = k < 0 ? l.n : (size_t)k; i < l.n && rc == 0; i++)
        rc = add_segment(m, l.bases[i], err);
    free(l.bases);
    return k < 0 ? -1 : rc;
}

static int rescan_dir(km_metalog *m, km_err *err)
{
    ml_listing l;
    km_err inner;
    m->rescan = false;
    if (m->nfiles == 0) { /* nothing yet: start as if just opened, so a snapshot that appeared counts */
        if (load_dir(m, &inner) < 0)
            return fail_at(m, 0, -1, inner.msg, err);
        return 0;
    }
    if (list_dir(m->dir, &l, &inner) < 0)
        return fail_at(m, m->bpos, -1, inner.msg, err);
    int rc = 0;
    size_t from = 0;
    if (m->last_seg_base < 0 && l.n > 0) { /* the first segments after a snapshot must reach back to it */
        ssize_t k = first_segment(m, &l, &inner);
        if (k < 0)
            rc = fail_at(m, 0, -1, inner.msg, err);
        from = k < 0 ? l.n : (size_t)k;
    }
    for (size_t i = from; i < l.n && rc == 0; i++)
        if (l.bases[i] > m->last_seg_base)
            rc = add_segment(m, l.bases[i], err);
    free(l.bases);
    return rc;
}

km_metalog *km_metalog_open_dir(const char *dir, const km_metalog_opts *opts, km_err *err)
{
    km_metalog *m = alloc_reader(opts);
    if (!m || !(m->dir = strdup(dir))) {
        km_fail(err, "%s: out of memory", dir);
        km_metalog_close(m);
        return NULL;
    }
    /* Watch before listing, so a segment created in between still wakes us. */
    watch(m, dir, IN_CREATE | IN_MOVED_TO | IN_MODIFY | IN_CLOSE_WRITE);
    if (load_dir(m, err) < 0 || (m->nfiles > 0 && open_current(m, err) < 0)) {
        km_metalog_close(m);
        return NULL;
    }
    return m;
}

int km_metalog_snapshot_id(const km_metalog *m, int64_t *end_offset, int32_t *epoch)
{
    if (!m->have_snap)
        return 0;
    if (end_offset)
        *end_offset = m->snap_end;
    if (epoch)
        *epoch = m->snap_epoch;
    return 1;
}

int64_t km_metalog_next_offset(const km_metalog *m) { return m->next_offset; }

int km_metalog_fd(const km_metalog *m) { return m->ino; }

void km_ml_snapshot_name(int64_t end_offset, int32_t epoch, char out[48])
{
    snprintf(out, 48, "%020" PRId64 "-%010" PRId32 ".checkpoint", end_offset, epoch);
}
