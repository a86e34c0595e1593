/* test_quorum_fetch.c - the KRaft observer (proxy/quorum) fetching real logs and snapshots
 * from the raft simulator: the image it builds over the network equals the files'. */
#include "test_quorum_util.h"
#include "km_testsupport.h"
#include "test_tls_certs.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool snapshot_loaded_and_caught_up(tq_rig *r)
{
    km_quorum_stats st;
    km_quorum_get_stats(r->q, &st);
    return st.snapshot_loads >= 1 && tq_caught_up(r);
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

/* Each corpus file `dir/name` passing keep(), as full paths; skips the test without a corpus. */
static char **corpus_files(const char *sub, bool (*keep)(const char *), size_t *n)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/corpus/%s", km_test_shared_dir(), sub);
    DIR *d = opendir(dir);
    if (!d)
        cr_skip_test("no corpus at %s", dir);
    char **out = calloc(512, sizeof *out);
    struct dirent *e;
    *n = 0;
    while ((e = readdir(d)) && *n < 512)
        if (keep(e->d_name)) {
            if (asprintf(&out[*n], "%s/%s", dir, e->d_name) > 0)
                (*n)++;
        }
    closedir(d);
    return out;
}

static bool first_segment(const char *name) { return ends_with(name, "00000000000000000000.log"); }
static bool numbered_snapshot(const char *name)
{
    return ends_with(name, ".checkpoint") && !ends_with(name, "bootstrap.checkpoint");
}

/* The fetched image equals the file's, and the simulator refused nothing; frees the rig. */
static void same_as_file(tq_rig *r, const char *path)
{
    km_err err;
    km_image *want = km_image_new();
    cr_assert(km_image_load(want, path, NULL, &err) >= 0, "%s", err.msg);
    tq_assert_same_image(r->img, want, path);
    km_rsim_stats st;
    km_rsim_get_stats(r->sims[0], &st);
    cr_assert_eq(st.rejected, 0, "%s: the simulator rejected a request: %s", path, st.last_rejection);
    km_image_free(want);
    tq_rig_free(r);
}

static void fetch_log_file(const char *path)
{
    tq_rig r;
    km_rsim_config c;
    km_rsim_config_init(&c);
    c.fetch_max_bytes = 64 * 1024; /* several fetches per file, answers ending in cut batches */
    tq_rig_init(&r, 1, &c);
    km_err err;
    cr_assert_eq(km_rsim_append_path(r.sims[0], path, &err), 0, "%s", err.msg);
    tq_set_leader(&r, 1, km_rsim_last_epoch(r.sims[0]));
    tq_rig_start(&r);
    cr_assert(tq_run_until(&r, tq_caught_up, 60), "%s: not caught up (fatal: %s)", path,
              r.fatal ? r.fatal_why.msg : "no");
    same_as_file(&r, path);
}

Test(quorum_fetch, every_corpus_log_over_the_network_equals_the_file, .timeout = 240)
{
    size_t n;
    char **files = corpus_files("kraft-log", first_segment, &n);
    cr_assert(n > 0);
    for (size_t i = 0; i < n; i++) {
        fetch_log_file(files[i]);
        free(files[i]);
    }
    free(files);
}

static bool dir_empty(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;
    while (d && (e = readdir(d)))
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    if (d)
        closedir(d);
    return d && n == 0;
}

/* spool: a directory the snapshot is spooled to (left empty afterwards), or NULL: in memory. */
static void fetch_snapshot_file(const char *path, const char *spool)
{
    tq_rig r;
    km_rsim_config c;
    km_rsim_config_init(&c);
    c.snapshot_chunk_bytes = 97; /* many odd-sized chunks */
    tq_rig_init(&r, 1, &c);
    r.cfg.snapshot_dir = spool;
    km_err err;
    cr_assert_eq(km_rsim_add_snapshot_file(r.sims[0], path, true, &err), 0, "%s", err.msg);
    tq_set_leader(&r, 1, km_rsim_last_epoch(r.sims[0]));
    tq_rig_start(&r);
    cr_assert(tq_run_until(&r, snapshot_loaded_and_caught_up, 60), "%s: snapshot not loaded (fatal: %s)", path,
              r.fatal ? r.fatal_why.msg : "no");
    km_rsim_stats st;
    km_rsim_get_stats(r.sims[0], &st);
    cr_assert_geq(st.snapshot_ids_sent, 1);
    same_as_file(&r, path);
    cr_assert(!spool || dir_empty(spool), "%s: the spooled snapshot was left behind", spool);
}

Test(quorum_fetch, every_corpus_snapshot_over_the_network_equals_the_file, .timeout = 240)
{
    size_t n;
    char **files = corpus_files("kraft-snapshot", numbered_snapshot, &n);
    cr_assert(n > 0);
    char *spool = km_test_tmpdir("tqspool");
    for (size_t i = 0; i < n; i++) {
        fetch_snapshot_file(files[i], NULL);
        fetch_snapshot_file(files[i], spool);
        free(files[i]);
    }
    free(files);
    km_test_rmtree(spool);
    free(spool);
}

/* A generated cluster (kmproxy metadata gen's writer) in many small fetches. */
Test(quorum_fetch, generated_log_in_small_fetches)
{
    char *dir = km_test_tmpdir("tqgen");
    km_gen_opts g = { .brokers = 3, .topics = 20, .partitions = 8, .leader_changes = 500, .seed = 7,
                      .records_per_batch = 50 };
    km_err err;
    km_image *want = km_image_new();
    cr_assert(km_gen_write(dir, &g, want, &err) > 0, "%s", err.msg);
    tq_rig r;
    km_rsim_config c;
    km_rsim_config_init(&c);
    c.fetch_max_bytes = 4096;
    tq_rig_init(&r, 1, &c);
    cr_assert_eq(km_rsim_append_path(r.sims[0], dir, &err), 0, "%s", err.msg);
    tq_set_leader(&r, 1, km_rsim_last_epoch(r.sims[0]));
    tq_rig_start(&r);
    cr_assert(tq_run_until(&r, tq_caught_up, 60));
    tq_assert_same_image(r.img, want, "generated log");
    km_image_free(want);
    tq_rig_free(&r);
    km_test_rmtree(dir);
    free(dir);
}

/* Fetch v12-v15 answers carry no NodeEndpoints: the observer knows the leader only as the bootstrap
 * address that answered without error (only a leader does), and must stay with it. */
static void fetch_at_version(int16_t v)
{
    km_rsim_config c;
    km_rsim_config_init(&c);
    c.fetch_max_version = v;
    tq_rig r;
    tq_rig_init(&r, 1, &c);
    km_err err;
    cr_assert_eq(km_rsim_set_voters(r.sims[0], NULL, 0, &err), 0);
    km_buf log;
    km_buf_init(&log);
    for (int b = 0; b < 10; b++)
        tq_config_batch(&log, b * 3, 4, 3, "v");
    cr_assert_eq(km_rsim_append(r.sims[0], log.data, log.len, &err), 0, "%s", err.msg);
    tq_set_leader(&r, 1, 4);
    tq_rig_start(&r);
    cr_assert(tq_run_until(&r, tq_caught_up, 30), "Fetch v%d: not caught up", v);
    km_image *want = tq_image_of(NULL, 0, 0, 0, log.data, log.len);
    tq_assert_same_image(r.img, want, "older Fetch version");
    km_rsim_stats st;
    km_rsim_get_stats(r.sims[0], &st);
    cr_assert_eq(st.rejected, 0, "Fetch v%d: %s", v, st.last_rejection);
    km_image_free(want);
    km_buf_free(&log);
    tq_rig_free(&r);
}

Test(quorum_fetch, every_kraft_fetch_version_without_node_endpoints)
{
    for (int16_t v = 12; v <= 17; v++)
        fetch_at_version(v);
}

static bool snapshot_caught_up(tq_rig *r)
{
    km_quorum_stats st;
    km_quorum_get_stats(r->q, &st);
    return st.snapshot_loads == 1 && tq_caught_up(r);
}

static uint64_t g_min_errors;
static bool failed_enough(tq_rig *r)
{
    km_quorum_stats st;
    km_quorum_get_stats(r->q, &st);
    return st.fetch_errors >= g_min_errors;
}

/* An SSL controller listener: a snapshot and records over TLS (tls/), the server verified against
 * the CA; a client that does not trust that CA never gets a byte. */
Test(quorum_fetch, snapshot_and_records_over_tls)
{
    km_test_pki pki;
    cr_assert(!km_test_pki_make(&pki));
    km_err err;
    km_tls_config sc = { .cert_file = pki.server_cert, .key_file = pki.server_key };
    km_tls_config good = { .ca_file = pki.ca }, bad = { .ca_file = pki.other_ca };
    km_tls_ctx *server = km_tls_server_ctx_new(&sc, &err);
    km_tls_ctx *client = km_tls_client_ctx_new(&good, &err);
    km_tls_ctx *untrusting = km_tls_client_ctx_new(&bad, &err);
    cr_assert(server && client && untrusting, "%s", err.msg);
    km_buf log;
    km_buf_init(&log);
    for (int b = 0; b < 12; b++)
        tq_config_batch(&log, b * 4, 2, 4, "tls");
    size_t head = 0; /* bytes of the two batches below offset 8: the snapshot holds them */
    for (int b = 0; b < 2; b++) {
        km_metalog_batch mb;
        cr_assert_eq(km_ml_peek_batch(log.data + head, log.len - head, 0, &mb, &err), 1);
        head += mb.size;
    }
    size_t snap_len;
    uint8_t *snap = tq_snapshot_of(log.data, head, &snap_len);
    for (int pass = 0; pass < 2; pass++) {
        km_rsim_config c;
        km_rsim_config_init(&c);
        c.tls = server;
        c.snapshot_chunk_bytes = 200;
        tq_rig r;
        tq_rig_init(&r, 1, &c);
        cr_assert_eq(km_rsim_add_snapshot(r.sims[0], snap, snap_len, 8, 2, true, &err), 0, "%s", err.msg);
        cr_assert_eq(km_rsim_append(r.sims[0], log.data + head, log.len - head, &err), 0, "%s", err.msg);
        tq_set_leader(&r, 1, 2);
        r.cfg.tls = pass == 0 ? client : untrusting;
        r.cfg.tls_name = "localhost";
        tq_rig_start(&r);
        if (pass == 0) {
            cr_assert(tq_run_until(&r, snapshot_caught_up, 30), "not caught up over TLS");
            km_image *want = tq_image_of(NULL, 0, 0, 0, log.data, log.len);
            tq_assert_same_image(r.img, want, "over TLS");
            km_image_free(want);
        } else {
            g_min_errors = 3;
            cr_assert(tq_run_until(&r, failed_enough, 30));
            km_quorum_stats st;
            km_quorum_get_stats(r.q, &st);
            cr_assert_eq(st.applied_offset, -1);
            cr_assert_eq(st.fetches, 0);
        }
        tq_rig_free(&r);
    }
    free(snap);
    km_buf_free(&log);
    km_tls_ctx_free(server);
    km_tls_ctx_free(client);
    km_tls_ctx_free(untrusting);
    km_test_pki_free(&pki);
}
