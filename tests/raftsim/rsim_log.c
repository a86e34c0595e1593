/* Raft simulator: the replicated log, its snapshots and Kafka's offset/epoch validation. */
#include "rsim_internal.h"
#include "km_metalog.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

int64_t rsim_hw(const km_rsim *s)
{
    if (s->hw_unknown)
        return -1;
    if (s->fixed_hw < 0 || s->fixed_hw > s->log_end)
        return s->log_end;
    return s->fixed_hw < s->log_start ? s->log_start : s->fixed_hw;
}

static int grow_batches(km_rsim *s, km_err *err)
{
    if (s->n_batches < s->cap_batches)
        return 0;
    size_t n = s->cap_batches ? s->cap_batches * 2 : 256;
    rsim_batch *b = realloc(s->batches, n * sizeof *b);
    if (!b)
        return km_fail(err, "raftsim: out of memory for %zu batches", n);
    s->batches = b;
    s->cap_batches = n;
    return 0;
}

static int grow_log(km_rsim *s, size_t extra, km_err *err)
{
    if (s->log_len + extra <= s->log_cap)
        return 0;
    size_t n = s->log_cap ? s->log_cap : 1u << 20;
    while (n < s->log_len + extra)
        n *= 2;
    uint8_t *p = realloc(s->log, n);
    if (!p)
        return km_fail(err, "raftsim: out of memory for a %zu-byte log", n);
    s->log = p;
    s->log_cap = n;
    return 0;
}

/* Appends one checked batch: offsets continue the log end, epochs never go back. */
static int append_one(km_rsim *s, const uint8_t *p, const km_metalog_batch *b, km_err *err)
{
    if (b->base_offset != s->log_end)
        return km_fail(err, "raftsim: batch at offset %" PRId64 " does not continue the log end %" PRId64,
                       b->base_offset, s->log_end);
    int32_t prev = s->n_batches > s->first ? s->batches[s->n_batches - 1].epoch : -1;
    if (b->leader_epoch < prev)
        return km_fail(err, "raftsim: batch at offset %" PRId64 " has epoch %d below the log's %d",
                       b->base_offset, b->leader_epoch, prev);
    if (grow_batches(s, err) < 0 || grow_log(s, b->size, err) < 0)
        return -1;
    memcpy(s->log + s->log_len, p, b->size);
    s->batches[s->n_batches++] = (rsim_batch){ b->base_offset, b->last_offset, b->leader_epoch, s->log_len,
                                               b->size };
    s->log_len += b->size;
    s->log_end = b->last_offset + 1;
    return 0;
}

int km_rsim_append(km_rsim *s, const uint8_t *p, size_t len, km_err *err)
{
    size_t pos = 0;
    while (pos < len) {
        km_metalog_batch b;
        km_err why;
        int r = km_ml_peek_batch(p + pos, len - pos, 0, &b, &why);
        if (r <= 0)
            return km_fail(err, "raftsim: byte %zu of %zu appended: %s", pos, len,
                           r < 0 ? why.msg : "partial batch");
        if (append_one(s, p + pos, &b, err) < 0)
            return -1;
        pos += b.size;
    }
    if (len)
        s->hw_unknown = false; /* the leader's first batch of its epoch commits at once here */
    rsim_wake_fetches(s);
    return 0;
}

static uint8_t *read_whole(const char *path, size_t *len, km_err *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        km_fail(err, "%s: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    uint8_t *p = NULL;
    if (fstat(fileno(f), &st) == 0 && (p = malloc((size_t)st.st_size + 1)) &&
        fread(p, 1, (size_t)st.st_size, f) == (size_t)st.st_size) {
        fclose(f);
        *len = (size_t)st.st_size;
        return p;
    }
    fclose(f);
    free(p);
    km_fail(err, "%s: cannot read it whole", path);
    return NULL;
}

static int append_file(km_rsim *s, const char *path, km_err *err)
{
    size_t len = 0;
    uint8_t *p = read_whole(path, &len, err);
    if (!p)
        return -1;
    km_err inner;
    int r = km_rsim_append(s, p, len, &inner);
    free(p);
    return r < 0 ? km_fail(err, "%s: %s", path, inner.msg) : 0;
}

static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Segments are named by their 20-digit base offset, so name order is offset order. */
int km_rsim_append_path(km_rsim *s, const char *path, km_err *err)
{
    DIR *d = opendir(path);
    if (!d)
        return errno == ENOTDIR ? append_file(s, path, err) : km_fail(err, "%s: %s", path, strerror(errno));
    char *names[4096];
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 4096) {
        size_t l = strlen(e->d_name);
        if (l == 24 && !strcmp(e->d_name + 20, ".log"))
            names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof *names, cmp_names);
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        char full[4200];
        snprintf(full, sizeof full, "%s/%s", path, names[i]);
        if (rc == 0 && append_file(s, full, err) < 0)
            rc = -1;
        free(names[i]);
    }
    return rc;
}

/* ---- snapshots -------------------------------------------------------------------------- */

static void move_log_start(km_rsim *s, int64_t start)
{
    s->log_start = start;
    if (s->log_end <= start) { /* the snapshot is past everything: the log restarts at its end */
        s->n_batches = s->first = 0;
        s->log_len = 0;
        s->log_end = start;
        return;
    }
    while (s->first < s->n_batches && s->batches[s->first].last < start)
        s->first++;
}

int km_rsim_add_snapshot(km_rsim *s, const uint8_t *bytes, size_t len, int64_t end, int32_t epoch,
                         bool set_log_start, km_err *err)
{
    if (end < 0 || epoch < 0)
        return km_fail(err, "raftsim: snapshot id (%" PRId64 ", %d) is invalid", end, epoch);
    rsim_snapshot *n = realloc(s->snaps, (s->n_snaps + 1) * sizeof *n);
    if (!n)
        return km_fail(err, "raftsim: out of memory");
    s->snaps = n;
    rsim_snapshot *sn = &s->snaps[s->n_snaps];
    sn->bytes = malloc(len ? len : 1);
    if (!sn->bytes)
        return km_fail(err, "raftsim: out of memory for a %zu-byte snapshot", len);
    memcpy(sn->bytes, bytes, len);
    sn->len = len;
    sn->end = end;
    sn->epoch = epoch;
    s->n_snaps++;
    if (set_log_start)
        move_log_start(s, end);
    rsim_wake_fetches(s);
    return 0;
}

int km_rsim_add_snapshot_file(km_rsim *s, const char *path, bool set_log_start, km_err *err)
{
    size_t n = strlen(path);
    const char *b = n >= 42 ? path + n - 42 : NULL;
    if (!b || strcmp(b + 31, ".checkpoint") || b[20] != '-')
        return km_fail(err, "%s: not named <end offset>-<epoch>.checkpoint", path);
    int64_t end = strtoll(b, NULL, 10);
    int32_t epoch = (int32_t)strtol(b + 21, NULL, 10);
    size_t len = 0;
    uint8_t *p = read_whole(path, &len, err);
    if (!p)
        return -1;
    int r = km_rsim_add_snapshot(s, p, len, end, epoch, set_log_start, err);
    free(p);
    return r;
}

const rsim_snapshot *rsim_find_snapshot(const km_rsim *s, int64_t end, int32_t epoch)
{
    for (size_t i = 0; i < s->n_snaps; i++)
        if (s->snaps[i].end == end && s->snaps[i].epoch == epoch)
            return &s->snaps[i];
    return NULL;
}

const rsim_snapshot *rsim_latest_snapshot(const km_rsim *s)
{
    const rsim_snapshot *best = NULL;
    for (size_t i = 0; i < s->n_snaps; i++)
        if (!best || s->snaps[i].end > best->end)
            best = &s->snaps[i];
    return best;
}

/* ReplicatedLog.earliestSnapshotId: the snapshot at the log start offset, if the log starts past 0. */
static const rsim_snapshot *earliest_snapshot(const km_rsim *s)
{
    const rsim_snapshot *best = NULL;
    for (size_t i = 0; i < s->n_snaps; i++)
        if (s->snaps[i].end == s->log_start && (!best || s->snaps[i].epoch > best->epoch))
            best = &s->snaps[i];
    return best;
}

void km_rsim_truncate(km_rsim *s, int64_t offset)
{
    size_t i = s->first;
    while (i < s->n_batches && s->batches[i].last < offset)
        i++;
    if (i == s->n_batches)
        return;
    s->log_end = s->batches[i].base; /* whole batches, as Kafka truncates a follower */
    s->log_len = s->batches[i].pos;
    s->n_batches = i;
    rsim_wake_fetches(s);
}

/* ---- Kafka's offset/epoch validation ------------------------------------------------------ */

/* LeaderEpochFileCache.endOffsetFor as KafkaMetadataLog uses it: the largest epoch <= the one
 * asked for, and where it ends (the next epoch's first offset, or the log end). */
static rsim_oe end_offset_for_epoch(const km_rsim *s, int32_t epoch)
{
    int32_t best = -1;
    for (size_t i = s->first; i < s->n_batches; i++) {
        int32_t e = s->batches[i].epoch;
        if (e <= epoch)
            best = e;
        else if (best >= 0)
            return (rsim_oe){ s->batches[i].base, best };
        else
            break;
    }
    if (best >= 0)
        return (rsim_oe){ s->log_end, best };
    const rsim_snapshot *sn = earliest_snapshot(s);
    if (sn && sn->epoch <= epoch)
        return (rsim_oe){ s->log_start, sn->epoch };
    return (rsim_oe){ s->log_start, 0 };
}

/* ReplicatedLog.validateOffsetAndEpoch. */
rsim_valid rsim_validate(const km_rsim *s, int64_t offset, int32_t epoch, rsim_oe *out)
{
    if (s->log_start == 0 && offset == 0)
        return RSIM_VALID;
    const rsim_snapshot *early = earliest_snapshot(s);
    if (early && (offset < s->log_start || (offset == s->log_start && epoch != early->epoch) ||
                  epoch < early->epoch)) {
        const rsim_snapshot *latest = rsim_latest_snapshot(s);
        *out = (rsim_oe){ latest->end, latest->epoch };
        return RSIM_SNAPSHOT;
    }
    rsim_oe e = end_offset_for_epoch(s, epoch);
    if (e.epoch != epoch || e.offset < offset) {
        *out = e;
        return RSIM_DIVERGING;
    }
    return RSIM_VALID;
}

static size_t batch_at(const km_rsim *s, int64_t offset)
{
    size_t lo = s->first, hi = s->n_batches;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->batches[mid].last < offset)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

void rsim_read(const km_rsim *s, int64_t fetch_offset, const uint8_t **p, size_t *len)
{
    size_t i = batch_at(s, fetch_offset), j = i;
    size_t limit = (size_t)s->cfg.fetch_max_bytes, bytes = 0;
    *len = 0;
    if (i >= s->n_batches)
        return;
    while (j < s->n_batches && (j == i || bytes + s->batches[j].size <= limit))
        bytes += s->batches[j++].size;
    if (j < s->n_batches && bytes < limit) /* a cut head of the next batch, as a FileRecords slice ends */
        bytes += limit - bytes < s->batches[j].size ? limit - bytes : s->batches[j].size - 1;
    *p = s->log + s->batches[i].pos;
    *len = bytes;
}

void rsim_note_observer(km_rsim *s, int32_t id, int64_t fetch_offset)
{
    if (id < 0)
        return; /* an observer without an id cannot be told apart from another */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t now = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    for (int i = 0; i < s->n_observers; i++)
        if (s->observers[i].id == id) {
            s->observers[i].fetch_offset = fetch_offset;
            s->observers[i].last_fetch_ms = now;
            return;
        }
    if (s->n_observers < 16)
        s->observers[s->n_observers++] = (rsim_observer){ id, fetch_offset, now };
}

void rsim_log_free(km_rsim *s)
{
    for (size_t i = 0; i < s->n_snaps; i++)
        free(s->snaps[i].bytes);
    free(s->snaps);
    free(s->batches);
    free(s->log);
}

int32_t km_rsim_last_epoch(const km_rsim *s)
{
    if (s->n_batches > s->first)
        return s->batches[s->n_batches - 1].epoch;
    const rsim_snapshot *sn = rsim_latest_snapshot(s);
    return sn ? sn->epoch : 0;
}
