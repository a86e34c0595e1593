/* bench_quorum: a large snapshot plus a tail of records fetched over loopback as a KRaft observer
 * (FetchSnapshot + Fetch from kmproxy-raftsim's library in another process) and applied, against
 * loading the same snapshot and segment from disk, in the same run.
 *
 * Prints wall and CPU seconds and the resident memory each path leaves in a fresh process (so
 * neither sees the other's heap), and the speed ratio disk/network (the target is >= 0.8).
 * Default: the 1,000,000 partitions (1000 topics x 1000) + 100,000 records.
 *
 * usage: bench_quorum [topics [partitions-per-topic [tail-records]]]
 */
#include "bench_util.h"
#include "km_image.h"
#include "km_metalog.h"
#include "km_quorum.h"
#include "km_raftsim.h"

#include <ev.h>
#include <inttypes.h>
#include <stdbool.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

enum { ROUNDS = 2 };
#define RSS_BOUND_PER_PARTITION 300.0 /* bytes: the image's bound (300 MB for 1M partitions) */

typedef struct result { double wall, cpu; long rss, peak; int64_t offset; int ok; } result;

/* VmHWM: the peak resident memory of this (fresh) process. */
static long peak_bytes(void)
{
    char line[256];
    long kb = 0;
    FILE *f = fopen("/proc/self/status", "r");
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %ld kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    return kb * 1024;
}

static int fail(const char *what, const km_err *err)
{
    fprintf(stderr, "bench_quorum: %s: %s\n", what, err ? err->msg : "");
    return -1;
}

/* ---- the files: a generated log cut into a snapshot at S and a segment from S ------------------ */

typedef struct files {
    char gen[4200], disk[4200], snap[4300], seg[4300], spool[4200];
    int64_t snap_end, log_end;
    int32_t epoch;
} files;

/* The first batch at or past want (its base and file position): the snapshot ends on a batch
 * boundary, as KRaft's do. */
static int64_t batch_boundary(const char *segment, int64_t want, int32_t *epoch, uint64_t *pos)
{
    km_metalog_opts o = { .raw = true };
    km_err err;
    km_metalog *m = km_metalog_open_file(segment, &o, &err);
    km_metalog_record r;
    int64_t found = -1;
    while (m && found < 0 && km_metalog_next(m, &r, &err) > 0)
        if (r.index == 0 && r.offset >= want) {
            found = r.offset;
            *epoch = r.batch->leader_epoch;
            *pos = r.batch->file_pos;
        }
    km_metalog_close(m);
    return found;
}

/* The snapshot: every metadata record below S, as a controller's snapshot holds them. */
static int write_snapshot(const files *f, const char *segment)
{
    km_err err;
    km_metalog_writer_opts wo = { .leader_epoch = f->epoch, .timestamp = 1700000000000 };
    km_metalog_writer *w = km_metalog_writer_open_snapshot(f->snap, 1700000000000, &wo, &err);
    km_metalog *m = w ? km_metalog_open_file(segment, NULL, &err) : NULL;
    if (!m)
        return fail("snapshot", &err);
    km_metalog_record r;
    int rc;
    while ((rc = km_metalog_next(m, &r, &err)) > 0 && r.offset < f->snap_end) {
        km_metalog_entry e = { .desc = r.desc, .version = r.version, .msg = r.msg, .control_type = -1 };
        if (!r.control && km_metalog_writer_append(w, &e, 1, NULL, &err) < 0)
            return fail("snapshot", &err);
    }
    km_metalog_close(m);
    return rc < 0 || km_metalog_writer_finish(w, &err) < 0 ? fail("snapshot", &err) : 0;
}

/* The segment from S: the generated log's bytes from the batch at S on, byte for byte. */
static int copy_tail(const char *from, uint64_t pos, const char *to)
{
    FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
    static char buf[1 << 20];
    size_t n;
    int rc = in && out && fseek(in, (long)pos, SEEK_SET) == 0 ? 0 : -1;
    while (rc == 0 && (n = fread(buf, 1, sizeof buf, in)) > 0)
        rc = fwrite(buf, 1, n, out) == n ? 0 : -1;
    if (in)
        fclose(in);
    if (out && fclose(out))
        rc = -1;
    return rc;
}

static int make_files(files *f, const km_gen_opts *o)
{
    pid_t pid = fork();
    if (pid == 0) { /* the generator's heap stays out of this process */
        km_err err;
        _exit(km_gen_write(f->gen, o, NULL, &err) < 0 ? (fail("gen", &err), 1) : 0);
    }
    int st;
    if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st))
        return -1;
    char segment[4300];
    snprintf(segment, sizeof segment, "%s/00000000000000000000.log", f->gen);
    km_metalog_opts raw = { .raw = true };
    km_err err;
    km_metalog *m = km_metalog_open_file(segment, &raw, &err);
    km_metalog_record r;
    while (m && km_metalog_next(m, &r, &err) > 0)
        f->log_end = r.offset + 1;
    km_metalog_close(m);
    uint64_t pos = 0;
    f->snap_end = batch_boundary(segment, f->log_end - o->leader_changes, &f->epoch, &pos);
    if (f->snap_end <= 0)
        return fail("no batch boundary for the snapshot", NULL);
    char name[48];
    km_ml_snapshot_name(f->snap_end, f->epoch, name);
    mkdir(f->disk, 0755);
    snprintf(f->snap, sizeof f->snap, "%s/%s", f->disk, name);
    snprintf(f->seg, sizeof f->seg, "%s/%020" PRId64 ".log", f->disk, f->snap_end);
    if (write_snapshot(f, segment) < 0 || copy_tail(segment, pos, f->seg) < 0)
        return -1;
    char cmd[4400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->gen); /* the page cache holds what the paths read */
    return system(cmd) == 0 ? 0 : -1;
}

/* ---- the two paths, each in a fresh process ------------------------------------------------------ */

static void disk_path(const files *f, result *res)
{
    long before = bench_rss_bytes();
    double w0 = bench_wall_s(), c0 = bench_cpu_s();
    /* The daemon's file path (metadata.source=dir): the follower, with a delta per batch as the
     * consumers need, exactly as the observer produces them. */
    km_image *img = km_image_new();
    km_delta *delta = km_delta_new();
    km_err err;
    km_metalog_opts o = {0};
    km_image_follow *fl = km_image_follow_open(img, f->disk, &o, &err);
    int n = fl ? 1 : -1;
    while (n > 0)
        n = km_image_follow_next(fl, delta, &err);
    km_image_follow_close(fl);
    km_delta_free(delta);
    res->wall = bench_wall_s() - w0;
    res->cpu = bench_cpu_s() - c0;
    res->rss = bench_rss_bytes() - before;
    res->offset = km_image_offset(img);
    res->ok = n >= 0;
    if (n < 0)
        fail("disk", &err);
}

typedef struct net_ctx { struct ev_loop *loop; km_image *img; int64_t target; bool failed; } net_ctx;

static void on_applied(km_quorum *q, km_delta *d, void *ud)
{
    (void)q;
    (void)d;
    net_ctx *c = ud;
    if (km_image_offset(c->img) >= c->target)
        ev_break(c->loop, EVBREAK_ALL);
}

static void on_fatal(km_quorum *q, const km_err *why, void *ud)
{
    (void)q;
    ((net_ctx *)ud)->failed = true;
    fail("observer", why);
    ev_break(((net_ctx *)ud)->loop, EVBREAK_ALL);
}

static void net_path(const files *f, uint16_t port, bool spool, result *res)
{
    long before = bench_rss_bytes();
    net_ctx c = { .loop = ev_loop_new(0), .img = km_image_new(), .target = f->log_end - 1 };
    char servers[64];
    snprintf(servers, sizeof servers, "127.0.0.1:%u", port);
    km_quorum_config qc;
    km_quorum_config_init(&qc);
    qc.bootstrap_servers = servers;
    qc.snapshot_dir = spool ? f->spool : NULL;
    qc.quiet = true;
    km_quorum_handlers h = { .on_applied = on_applied, .on_fatal = on_fatal };
    km_err err;
    double w0 = bench_wall_s(), c0 = bench_cpu_s();
    km_quorum *q = km_quorum_new(c.loop, &qc, c.img, &h, &c, &err);
    if (q)
        ev_run(c.loop, 0);
    res->wall = bench_wall_s() - w0;
    res->cpu = bench_cpu_s() - c0;
    km_quorum_stats st;
    if (q)
        km_quorum_get_stats(q, &st);
    km_quorum_free(q);
    res->rss = bench_rss_bytes() - before;
    res->offset = km_image_offset(c.img);
    res->ok = q && !c.failed && res->offset == c.target && st.snapshot_loads == 1;
    if (!q)
        fail("observer", &err);
}

/* Runs one path in a child (port 0: from disk); its result comes back through a pipe. */
static int in_child(const files *f, uint16_t port, bool spool, result *res)
{
    int p[2];
    if (pipe(p) < 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        result r = {0};
        if (port)
            net_path(f, port, spool, &r);
        else
            disk_path(f, &r);
        r.peak = peak_bytes();
        _exit(write(p[1], &r, sizeof r) == sizeof r ? 0 : 1);
    }
    close(p[1]);
    ssize_t n = read(p[0], res, sizeof *res);
    close(p[0]);
    int st;
    waitpid(pid, &st, 0);
    return n == sizeof *res && res->ok ? 0 : -1;
}

/* The leader: kmproxy-raftsim's library in its own process, serving the snapshot and the tail. */
static pid_t start_leader(const files *f, uint16_t *port)
{
    int p[2];
    if (pipe(p) < 0)
        return -1;
    pid_t parent = getpid(), pid = fork();
    if (pid == 0) {
        bench_die_with_parent(parent);
        struct ev_loop *loop = ev_loop_new(0);
        km_rsim_config c;
        km_rsim_config_init(&c);
        c.snapshot_chunk_bytes = 8 << 20;
        km_err err;
        km_rsim *s = km_rsim_new(loop, &c, &err);
        if (!s || km_rsim_add_snapshot_file(s, f->snap, true, &err) < 0 || km_rsim_append_path(s, f->seg, &err) < 0)
            _exit((fail("leader", &err), 1));
        km_rsim_set_leader(s, 1, km_rsim_last_epoch(s));
        uint16_t pt = km_rsim_port(s);
        if (write(p[1], &pt, sizeof pt) != sizeof pt)
            _exit(1);
        ev_run(loop, 0); /* until SIGTERM */
        _exit(0);
    }
    close(p[1]);
    ssize_t n = read(p[0], port, sizeof *port);
    close(p[0]);
    return n == sizeof *port ? pid : -1;
}

static void best(result *b, const result *r)
{
    if (r->wall < b->wall)
        *b = *r;
}

/* Both paths ROUNDS times, alternated so both see the same page cache; the best of each. */
static int measure(const files *f, result *disk, result *net, result *spooled)
{
    uint16_t port = 0;
    pid_t leader = start_leader(f, &port);
    int rc = leader > 0 ? 0 : 1;
    result r;
    for (int i = 0; i < ROUNDS && rc == 0; i++) {
        rc = in_child(f, 0, false, &r) < 0;
        if (rc == 0)
            best(disk, &r);
        rc = rc || in_child(f, port, false, &r) < 0;
        if (rc == 0)
            best(net, &r);
        rc = rc || in_child(f, port, true, &r) < 0;
        if (rc == 0)
            best(spooled, &r);
    }
    if (leader > 0) {
        kill(leader, SIGTERM);
        waitpid(leader, NULL, 0);
    }
    return rc;
}

static int report(const files *f, double parts, const result *disk, const result *net, const result *spooled)
{
    struct stat ss, sg;
    stat(f->snap, &ss);
    stat(f->seg, &sg);
    printf("quorum: %.0f partitions; snapshot %.1f MB ending at %" PRId64 ", tail %" PRId64 " records (%.1f MB)\n",
           parts, ss.st_size / 1e6, f->snap_end, f->log_end - f->snap_end, sg.st_size / 1e6);
    printf("quorum: over loopback %.3f s wall (%.3f CPU s), resident %.1f MB; from disk %.3f s wall (%.3f CPU s), "
           "resident %.1f MB\n", net->wall, net->cpu, net->rss / 1048576.0, disk->wall, disk->cpu,
           disk->rss / 1048576.0);
    printf("quorum: speed ratio %.2f of the file path (target >= 0.8; CPU seconds' ratio %.2f, the leader's own "
           "process aside); memory %.1f bytes/partition (bound %.0f)\n",
           disk->wall / net->wall, disk->cpu / net->cpu, net->rss / parts, RSS_BOUND_PER_PARTITION);
    printf("quorum: peak resident %.1f MB over loopback (streamed: chunks decoded into a staged image as they arrive), "
           "%.1f MB from disk; peak %.1f bytes/partition (bound %.0f)\n", net->peak / 1048576.0, disk->peak / 1048576.0,
           net->peak / parts, RSS_BOUND_PER_PARTITION);
    printf("quorum: snapshot spooled to a file (metadata.quorum.snapshot.dir): %.3f s wall (%.3f CPU s), ratio %.2f; "
           "peak resident %.1f MB\n", spooled->wall, spooled->cpu, disk->wall / spooled->wall, spooled->peak / 1048576.0);
    if (parts >= 1e6 && (net->rss > RSS_BOUND_PER_PARTITION * parts || net->peak > RSS_BOUND_PER_PARTITION * parts)) {
        printf("quorum: FAIL: over the memory bound\n");
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    km_gen_opts o = {.brokers = 12, .topics = 1000, .partitions = 1000, .replication = 3, .leader_changes = 100000,
                     .seed = 1, .records_per_batch = 1000, .segment_bytes = 1u << 30};
    if (argc > 1)
        o.topics = atoi(argv[1]);
    if (argc > 2)
        o.partitions = atoi(argv[2]);
    if (argc > 3)
        o.leader_changes = atoll(argv[3]);
    if (o.topics < 1 || o.partitions < 1 || o.leader_changes < 1)
        return fprintf(stderr, "usage: bench_quorum [topics [partitions-per-topic [tail-records]]]\n"), 2;
    const char *tmp = getenv("TMPDIR");
    char base[4096];
    snprintf(base, sizeof base, "%s/kmbench-quorum-XXXXXX", tmp ? tmp : "/tmp");
    if (!mkdtemp(base))
        return perror("mkdtemp"), 1;
    files f = {0};
    snprintf(f.gen, sizeof f.gen, "%s/gen", base);
    snprintf(f.disk, sizeof f.disk, "%s/__cluster_metadata-0", base);
    snprintf(f.spool, sizeof f.spool, "%s/spool", base);
    mkdir(f.spool, 0755);
    result disk = { .wall = 1e9 }, net = { .wall = 1e9 }, spooled = { .wall = 1e9 };
    int rc = make_files(&f, &o) == 0 ? measure(&f, &disk, &net, &spooled) : 1;
    if (rc == 0)
        rc = report(&f, (double)o.topics * o.partitions, &disk, &net, &spooled);
    else
        printf("quorum: FAILED: no result (see errors above)\n");
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", base);
    if (system(cmd) != 0)
        fprintf(stderr, "bench_quorum: could not remove %s\n", base);
    return rc;
}
