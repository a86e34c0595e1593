/* The daemon against a real ZooKeeper: it mirrors, and it stops for good when a genuine second
 * writer takes ZooKeeper over; start-up errors name what was wrong. */
#include "km_daemon.h"
#include "km_image.h"
#include "km_metalog.h"
#include "km_testsupport.h"
#include "zkserver.h"

#include <criterion/criterion.h>
#include <ev.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct rig {
    km_zks *zks;
    char *tmp, logdir[512], hosts[128];
    struct ev_loop *loop;
    km_daemon *d;
} rig;

static void rig_start(rig *r)
{
    char err[512];
    r->zks = km_zks_start(1, NULL, 0, err, sizeof err);
    cr_assert(r->zks, "ZooKeeper: %s", err);
    snprintf(r->hosts, sizeof r->hosts, "%s/kafka", km_zks_hosts(r->zks, -1));
    r->tmp = km_test_tmpdir("daemon");
    snprintf(r->logdir, sizeof r->logdir, "%s/__cluster_metadata-0", r->tmp);
    km_gen_opts g = {.brokers = 3, .topics = 4, .partitions = 3, .zk_migration = true, .seed = 7};
    km_err e = {{0}};
    cr_assert_geq(km_gen_write(r->logdir, &g, NULL, &e), 0, "%s", e.msg);
    km_config cfg;
    km_config_defaults(&cfg);
    cr_assert_eq(km_config_set(&cfg, "metadata.source", "dir", "test", &e), 0);
    cr_assert_eq(km_config_set(&cfg, "metadata.dir", r->logdir, "test", &e), 0);
    cr_assert_eq(km_config_set(&cfg, "zookeeper.connect", r->hosts, "test", &e), 0);
    cr_assert_eq(km_config_set(&cfg, "brokers.enabled", "false", "test", &e), 0);
    r->loop = ev_loop_new(0);
    r->d = km_daemon_new(r->loop, &cfg, &e);
    km_config_free(&cfg);
    cr_assert(r->d, "%s", e.msg);
    km_daemon_start(r->d);
}

static void rig_stop(rig *r)
{
    km_daemon_free(r->d);
    ev_loop_destroy(r->loop);
    km_zks_stop(r->zks);
    km_test_rmtree(r->tmp);
    free(r->tmp);
}

typedef struct waiter { rig *r; bool (*pred)(const km_daemon_status *); } waiter;

static void poll_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)revents;
    waiter *w = t->data;
    km_daemon_status st;
    km_daemon_get_status(w->r->d, &st);
    if (w->pred(&st) || st.fatal)
        ev_break(loop, EVBREAK_ALL);
}

static void guard_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)t; (void)revents;
    ev_break(loop, EVBREAK_ALL);
}

/* Runs the loop until pred holds, the daemon stops, or 60 s (a guard against hangs). */
static bool run_until(rig *r, bool (*pred)(const km_daemon_status *))
{
    waiter w = {r, pred};
    ev_timer poll, guard;
    ev_timer_init(&poll, poll_cb, 0.02, 0.02);
    poll.data = &w;
    ev_timer_init(&guard, guard_cb, 60, 0);
    ev_timer_start(r->loop, &poll);
    ev_timer_start(r->loop, &guard);
    ev_run(r->loop, 0);
    ev_timer_stop(r->loop, &poll);
    ev_timer_stop(r->loop, &guard);
    km_daemon_status st;  /* the daemon may have stopped the loop itself (a fatal error) */
    km_daemon_get_status(r->d, &st);
    return pred(&st);
}

static bool mirrored(const km_daemon_status *st)
{
    return st->zk_idle && st->zk_confirmed_offset == st->image_offset && st->image_offset >= 0;
}

static bool stopped(const km_daemon_status *st) { return st->fatal != NULL; }

/* One more record in the log, so the daemon has something to write. */
static void append_noop(rig *r)
{
    km_err e = {{0}};
    km_metalog_writer_opts wo = {.leader_epoch = 1};
    km_metalog_writer *w = km_metalog_writer_open_dir(r->logdir, &wo, &e);
    cr_assert(w, "%s", e.msg);
    const km_message_desc *md = km_find_message(KM_K_METADATA, KM_MDR_NO_OP_RECORD);
    km_no_op_record rec;
    km_no_op_record_init(&rec);
    km_metalog_entry entry = {.desc = md, .version = 0, .msg = &rec, .control_type = -1};
    cr_assert_eq(km_metalog_writer_append(w, &entry, 1, NULL, &e), 0, "%s", e.msg);
    cr_assert_eq(km_metalog_writer_finish(w, &e), 0, "%s", e.msg);
}

Test(daemon, mirrors_under_a_new_chroot_then_fences_on_a_second_writer)
{
    rig r = {0};
    rig_start(&r);
    cr_assert(run_until(&r, mirrored), "never mirrored the log");
    km_zkc *c = km_zkc_open(r.hosts, NULL, 10000);
    cr_assert(c);
    char *data;
    int len;
    struct Stat st;
    cr_assert_eq(km_zkc_get(c, "/migration", &data, &len, &st), ZOK);
    cr_assert(strstr(data, "\"kraft_metadata_offset\":"), "%s", data);
    free(data);
    /* A genuine second writer: another controller claims and moves /migration. */
    cr_assert_eq(km_zkc_get(c, "/controller_epoch", &data, &len, &st), ZOK);
    char bumped[32];
    snprintf(bumped, sizeof bumped, "%d", atoi(data) + 5);
    free(data);
    cr_assert_eq(km_zkc_set(c, "/controller_epoch", bumped, st.version, &st), ZOK);
    const char *foreign = "{\"version\":0,\"kraft_controller_id\":9,\"kraft_controller_epoch\":99,"
                          "\"kraft_metadata_offset\":1,\"kraft_metadata_epoch\":99}";
    cr_assert_eq(km_zkc_set(c, "/migration", foreign, -1, &st), ZOK);
    append_noop(&r);
    cr_assert(run_until(&r, stopped), "the daemon kept going after another writer took over");
    km_daemon_status ds;
    km_daemon_get_status(r.d, &ds);
    cr_assert(strstr(ds.fatal, "ZooKeeper mirror stopped"), "%s", ds.fatal);
    cr_assert_eq(km_zkc_get(c, "/migration", &data, &len, &st), ZOK);
    cr_assert_str_eq(data, foreign, "the fenced daemon wrote /migration");
    free(data);
    km_zkc_close(c);
    rig_stop(&r);
}

Test(daemon, start_up_errors_exit_2_naming_the_problem)
{
    char *out, *err;
    size_t n;
    char *missing[] = {(char *)km_test_binary(), "run", "--set", "metadata.source=dir", "--set", "metadata.dir=/nonexistent/__cluster_metadata-0",
                       "--set", "zookeeper.connect=127.0.0.1:1", NULL};
    cr_assert_eq(km_test_run(missing, NULL, 0, &out, &n, &err), 2);
    cr_assert(strstr(err, "/nonexistent/__cluster_metadata-0"), "%s", err);
    free(out); free(err);
    char *typo[] = {(char *)km_test_binary(), "run", "--set", "zookeeper.conect=x", NULL};
    cr_assert_eq(km_test_run(typo, NULL, 0, &out, &n, &err), 2);
    cr_assert(strstr(err, "unknown key 'zookeeper.conect'"), "%s", err);
    free(out); free(err);
    char *nofile[] = {(char *)km_test_binary(), "run", "--config", "/nonexistent.properties", NULL};
    cr_assert_eq(km_test_run(nofile, NULL, 0, &out, &n, &err), 2);
    cr_assert(strstr(err, "/nonexistent.properties: cannot open"), "%s", err);
    free(out); free(err);
}

/* ---- a corrupt or torn log while following it ---- */

/* The last segment file of the log (the one being appended to). */
static void last_segment(const char *logdir, char *out, size_t cap)
{
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "ls %s/*.log | tail -1", logdir);
    FILE *p = popen(cmd, "r");
    cr_assert(p);
    cr_assert(fgets(out, (int)cap, p), "no segment in %s", logdir);
    out[strcspn(out, "\n")] = '\0';
    pclose(p);
}

static long file_size(const char *path)
{
    FILE *f = fopen(path, "rb");
    cr_assert(f, "%s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fclose(f);
    return n;
}

/* The bytes of the batch append_noop would add next, written by the real writer to a copy of the log
 * (the followed log itself must only ever grow). */
static char *next_batch_bytes(rig *r, size_t *len)
{
    char copy[600], cmd[2048], seg[1024], copy_seg[2048];
    snprintf(copy, sizeof copy, "%s/copy", r->tmp);
    snprintf(cmd, sizeof cmd, "rm -rf %s && cp -r %s %s", copy, r->logdir, copy);
    cr_assert_eq(system(cmd), 0);
    last_segment(r->logdir, seg, sizeof seg);
    snprintf(copy_seg, sizeof copy_seg, "%s/%s", copy, strrchr(seg, '/') + 1);
    long before = file_size(copy_seg);
    char saved[sizeof r->logdir];
    snprintf(saved, sizeof saved, "%s", r->logdir);
    cr_assert_lt(strlen(copy), sizeof r->logdir);
    memcpy(r->logdir, copy, strlen(copy) + 1);
    append_noop(r);
    snprintf(r->logdir, sizeof r->logdir, "%s", saved);
    long after = file_size(copy_seg);
    cr_assert_gt(after, before);
    *len = (size_t)(after - before);
    char *bytes = malloc(*len);
    FILE *f = fopen(copy_seg, "rb");
    cr_assert(f);
    fseek(f, before, SEEK_SET);
    cr_assert_eq(fread(bytes, 1, *len, f), *len);
    fclose(f);
    return bytes;
}

static void append_bytes(const char *path, const char *bytes, size_t len)
{
    FILE *f = fopen(path, "ab");
    cr_assert(f);
    cr_assert_eq(fwrite(bytes, 1, len, f), len);
    fclose(f);
}

static int64_t awaited_offset;
static bool reached_awaited(const km_daemon_status *st) { return st->image_offset >= awaited_offset; }

/* Runs the loop for `seconds` (several of the follower's polls), unless the daemon stops first. */
static void run_for(rig *r, double seconds)
{
    ev_timer guard;
    ev_timer_init(&guard, guard_cb, seconds, 0);
    ev_timer_start(r->loop, &guard);
    km_daemon_status st;
    km_daemon_get_status(r->d, &st);
    if (!st.fatal)
        ev_run(r->loop, 0);
    ev_timer_stop(r->loop, &guard);
}

/* A daemon that mirrored the log, the bytes of the batch that would come next (malloc'd) and the
 * segment it goes to; *st is the daemon's status before it. */
static char *following(rig *r, km_daemon_status *st, size_t *len, char *seg, size_t seg_cap)
{
    rig_start(r);
    cr_assert(run_until(r, mirrored), "never mirrored the log");
    km_daemon_get_status(r->d, st);
    char *batch = next_batch_bytes(r, len);
    last_segment(r->logdir, seg, seg_cap);
    return batch;
}

/* A complete batch with a bad CRC stops the daemon at once (exit 2) naming the file and offset; it
 * used to be waited on like a torn tail, the daemon healthy and stuck. */
Test(daemon, corrupt_complete_batch_while_following_exits_2_naming_file_and_offset)
{
    rig r = {0};
    km_daemon_status st;
    size_t len;
    char seg[1024], *batch = following(&r, &st, &len, seg, sizeof seg);
    batch[len - 3] ^= 0x40; /* inside the CRC's span */
    append_bytes(seg, batch, len);
    cr_assert(run_until(&r, stopped), "the daemon waited on a complete corrupt batch");
    km_daemon_status after;
    km_daemon_get_status(r.d, &after);
    char want[64];
    snprintf(want, sizeof want, "(offset %lld): CRC32C mismatch", (long long)st.image_offset + 1);
    cr_assert(strstr(after.fatal, seg) && strstr(after.fatal, want), "%s", after.fatal);
    cr_assert_eq(km_daemon_run(r.d), 2, "a corrupt log is bad input");
    free(batch);
    rig_stop(&r);
}

/* An incomplete batch at the end is a write still landing: waited on, then applied once whole. */
Test(daemon, torn_tail_while_following_is_waited_on)
{
    rig r = {0};
    km_daemon_status st;
    size_t len;
    char seg[1024], *batch = following(&r, &st, &len, seg, sizeof seg);
    append_bytes(seg, batch, len / 2);
    run_for(&r, 1.0); /* a fatal error would end this early */
    km_daemon_status mid;
    km_daemon_get_status(r.d, &mid);
    cr_assert_null(mid.fatal, "%s", mid.fatal);
    cr_assert_eq(mid.image_offset, st.image_offset);
    append_bytes(seg, batch + len / 2, len - len / 2);
    awaited_offset = st.image_offset + 1;
    cr_assert(run_until(&r, reached_awaited), "the completed batch was not applied");
    km_daemon_status after;
    km_daemon_get_status(r.d, &after);
    cr_assert_eq(after.image_offset, st.image_offset + 1);
    free(batch);
    rig_stop(&r);
}

/* ---- capture.pcapng / capture.jsonl: the broker channels' traffic ---- */

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

/* A "broker" that accepts and swallows whatever it is sent, counting the bytes. */
typedef struct sink {
    ev_io accept_io, conn_io[8];
    int nconn;
    size_t received;
} sink;

static void sink_read(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)revents;
    sink *s = w->data;
    char buf[4096];
    ssize_t n = read(w->fd, buf, sizeof buf);
    if (n > 0)
        s->received += (size_t)n;
    else
        ev_io_stop(loop, w);
}

static void sink_accept(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)revents;
    sink *s = w->data;
    int fd = accept(w->fd, NULL, NULL);
    if (fd < 0 || s->nconn == 8) {
        if (fd >= 0)
            close(fd);
        return;
    }
    ev_io *c = &s->conn_io[s->nconn++];
    ev_io_init(c, sink_read, fd, EV_READ);
    c->data = s;
    ev_io_start(loop, c);
}

static uint16_t sink_listen(struct ev_loop *loop, sink *s)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    cr_assert(fd >= 0 && !bind(fd, (struct sockaddr *)&a, sizeof a) && !listen(fd, 8));
    cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    ev_io_init(&s->accept_io, sink_accept, fd, EV_READ);
    s->accept_io.data = s;
    ev_io_start(loop, &s->accept_io);
    return ntohs(a.sin_port);
}

static void sink_close(struct ev_loop *loop, sink *s)
{
    for (int i = 0; i < s->nconn; i++) {
        ev_io_stop(loop, &s->conn_io[i]);
        close(s->conn_io[i].fd);
    }
    ev_io_stop(loop, &s->accept_io);
    close(s->accept_io.fd);
}

static sink *the_sink;
static bool sink_got_bytes(const km_daemon_status *st) { (void)st; return the_sink->received > 0; }

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    cr_assert(f, "%s was not written", path);
    char *buf = calloc(1, 1 << 20);
    *len = fread(buf, 1, (1 << 20) - 1, f);
    fclose(f);
    return buf;
}

/* capture.pcapng and capture.jsonl used to be accepted and never used. */
Test(daemon, capture_keys_record_the_broker_traffic)
{
    rig r = {0};
    char err[512];
    r.zks = km_zks_start(1, NULL, 0, err, sizeof err);
    cr_assert(r.zks, "ZooKeeper: %s", err);
    snprintf(r.hosts, sizeof r.hosts, "%s", km_zks_hosts(r.zks, -1));
    r.tmp = km_test_tmpdir("daemon-capture");
    snprintf(r.logdir, sizeof r.logdir, "%s/__cluster_metadata-0", r.tmp);
    r.loop = ev_loop_new(0);
    sink s = {0};
    the_sink = &s;
    uint16_t port = sink_listen(r.loop, &s), ports[2] = {port, port};
    km_gen_opts g = {.brokers = 2, .topics = 2, .partitions = 2, .zk_migration = true, .seed = 7,
                     .broker_host = "127.0.0.1", .broker_ports = ports};
    km_err e = {{0}};
    cr_assert_geq(km_gen_write(r.logdir, &g, NULL, &e), 0, "%s", e.msg);
    char pcap[600], jsonl[600];
    snprintf(pcap, sizeof pcap, "%s/brokers.pcapng", r.tmp);
    snprintf(jsonl, sizeof jsonl, "%s/brokers.jsonl", r.tmp);
    km_config cfg;
    km_config_defaults(&cfg);
    const char *kv[][2] = {{"metadata.source", "dir"}, {"metadata.dir", r.logdir}, {"zookeeper.connect", r.hosts}, {"capture.pcapng", pcap},
                           {"capture.jsonl", jsonl}, {"log.level", "warn"}};
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
        cr_assert_eq(km_config_set(&cfg, kv[i][0], kv[i][1], "test", &e), 0, "%s", e.msg);
    r.d = km_daemon_new(r.loop, &cfg, &e);
    km_config_free(&cfg);
    cr_assert(r.d, "%s", e.msg);
    km_daemon_start(r.d);
    cr_assert(run_until(&r, sink_got_bytes), "no broker channel ever sent anything");
    km_daemon_free(r.d); /* closes the capture: everything queued is written */
    r.d = NULL;
    size_t n;
    char *text = slurp(jsonl, &n);
    cr_assert(strstr(text, "\"api_name\":\"API_VERSIONS\""), "%s", text);
    free(text);
    char *bin = slurp(pcap, &n);
    cr_assert_gt(n, 200, "a header and at least one frame");
    cr_assert_eq(memcmp(bin, "\x0a\x0d\x0d\x0a", 4), 0, "a pcapng section header");
    free(bin);
    sink_close(r.loop, &s);
    rig_stop(&r);
}
