/* test_quorum_util.c - the observer rig (see test_quorum_util.h). */
#include "test_quorum_util.h"
#include "km_testsupport.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool leader_hw_ok(tq_rig *r, int64_t offset)
{
    for (int i = 0; i < r->n_sims; i++)
        if (offset < km_rsim_high_watermark(r->sims[i]))
            return true;
    return false;
}

static void on_record(km_quorum *q, const km_metalog_record *rec, void *ud)
{
    (void)q;
    tq_rig *r = ud;
    bool snap = rec->batch->source == KM_ML_FROM_SNAPSHOT;
    if (!snap && !leader_hw_ok(r, rec->offset) && r->max_offset_over_hw < 0)
        r->max_offset_over_hw = rec->offset;
    if (r->n_applied < TQ_MAX_APPLIED)
        r->applied[r->n_applied++] = (tq_applied){ rec->offset, rec->batch->leader_epoch, snap };
}

static void on_applied(km_quorum *q, km_delta *d, void *ud)
{
    (void)q;
    (void)d;
    ((tq_rig *)ud)->deliveries++;
}

static void on_fatal(km_quorum *q, const km_err *why, void *ud)
{
    (void)q;
    tq_rig *r = ud;
    r->fatal = true;
    r->fatal_why = *why;
}

void tq_make_sims(struct ev_loop *loop, int n, const km_rsim_config *base, km_rsim **sims, char *servers,
                  size_t cap)
{
    km_rsim_voter v[KM_RSIM_MAX_VOTERS];
    km_err err;
    cr_assert(n <= KM_RSIM_MAX_VOTERS);
    if (servers)
        servers[0] = '\0';
    for (int i = 0; i < n; i++) {
        km_rsim_config c;
        if (base)
            c = *base;
        else
            km_rsim_config_init(&c);
        c.node_id = i + 1;
        sims[i] = km_rsim_new(loop, &c, &err);
        cr_assert(sims[i], "%s", err.msg);
        v[i] = (km_rsim_voter){ .id = i + 1, .port = km_rsim_port(sims[i]) };
        snprintf(v[i].host, sizeof v[i].host, "127.0.0.1");
        size_t l = servers ? strlen(servers) : 0;
        if (servers)
            snprintf(servers + l, cap - l, "%s127.0.0.1:%u", i ? "," : "", v[i].port);
    }
    for (int i = 0; i < n; i++)
        cr_assert_eq(km_rsim_set_voters(sims[i], v, n, &err), 0);
}

void tq_rig_init(tq_rig *r, int n, const km_rsim_config *base)
{
    memset(r, 0, sizeof *r);
    r->loop = ev_loop_new(EVFLAG_AUTO);
    r->n_sims = n;
    r->max_offset_over_hw = -1;
    r->applied = calloc(TQ_MAX_APPLIED, sizeof *r->applied);
    tq_make_sims(r->loop, n, base, r->sims, r->servers, sizeof r->servers);
    tq_set_leader(r, 1, 1);
    r->img = km_image_new();
    km_quorum_config_init(&r->cfg);
    r->cfg.quiet = getenv("TQ_VERBOSE") == NULL;
}

void tq_rig_start(tq_rig *r)
{
    if (!r->cfg.voters)
        r->cfg.bootstrap_servers = r->servers;
    km_quorum_handlers h = { .on_applied = on_applied, .on_record = on_record, .on_fatal = on_fatal,
                             .on_log = r->on_log };
    km_err err;
    r->q = km_quorum_new(r->loop, &r->cfg, r->img, &h, r, &err);
    r->cfg.bootstrap_servers = NULL;
    cr_assert(r->q, "%s", err.msg);
}

void tq_rig_free(tq_rig *r)
{
    km_quorum_free(r->q);
    for (int i = 0; i < r->n_sims; i++) { /* every request the observer sent was valid */
        km_rsim_stats st;
        km_rsim_get_stats(r->sims[i], &st);
        cr_expect_eq(st.rejected, 0, "simulator %d rejected a request: %s", i + 1, st.last_rejection);
        km_rsim_free(r->sims[i]);
    }
    km_image_free(r->img);
    ev_loop_destroy(r->loop);
    free(r->applied);
}

typedef struct tq_wait { tq_rig *r; bool (*pred)(tq_rig *); bool met; } tq_wait;

static void on_check(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)revents;
    tq_wait *tw = w->data;
    if (tw->pred(tw->r) || tw->r->fatal) {
        tw->met = tw->pred(tw->r);
        ev_break(loop, EVBREAK_ALL);
    }
}

static void on_deadline(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)w;
    (void)revents;
    ev_break(loop, EVBREAK_ALL);
}

bool tq_run_until(tq_rig *r, bool (*pred)(tq_rig *), double timeout_s)
{
    tq_wait tw = { r, pred, false };
    if (pred(r))
        return true;
    ev_timer check, deadline;
    ev_timer_init(&check, on_check, 0.005, 0.005);
    ev_timer_init(&deadline, on_deadline, timeout_s, 0.);
    check.data = &tw;
    ev_timer_start(r->loop, &check);
    ev_timer_start(r->loop, &deadline);
    ev_run(r->loop, 0);
    ev_timer_stop(r->loop, &check);
    ev_timer_stop(r->loop, &deadline);
    return tw.met || pred(r);
}

void tq_set_leader(tq_rig *r, int32_t leader, int32_t epoch)
{
    for (int i = 0; i < r->n_sims; i++)
        km_rsim_set_leader(r->sims[i], leader, epoch);
}

bool tq_caught_up(tq_rig *r)
{
    km_quorum_stats st;
    km_quorum_get_stats(r->q, &st);
    int64_t end = -1;
    for (int i = 0; i < r->n_sims; i++)
        if (km_rsim_node_id(r->sims[i]) == st.leader_id)
            end = km_rsim_log_end(r->sims[i]);
    return end >= 0 && st.applied_offset == end - 1 && st.buffered_bytes == 0;
}

void tq_config_batch(km_buf *out, int64_t base, int32_t epoch, int n, const char *tag)
{
    km_config_record recs[64];
    km_metalog_entry e[64];
    char names[64][48];
    cr_assert(n >= 1 && n <= 64);
    for (int i = 0; i < n; i++) {
        km_config_record_init(&recs[i]);
        snprintf(names[i], sizeof names[i], "%s-%lld", tag, (long long)(base + i));
        recs[i].resource_type = 4; /* BROKER */
        recs[i].resource_name = km_cstr("0");
        recs[i].name = km_cstr(names[i]);
        recs[i].value = km_cstr(tag);
        e[i] = (km_metalog_entry){ .desc = &km_config_record_desc, .version = 0, .msg = &recs[i], .control_type = -1 };
    }
    km_metalog_batch_params p = { .base_offset = base, .leader_epoch = epoch, .timestamp = 1700000000000 };
    km_err err;
    cr_assert_eq(km_ml_encode_batch(&p, e, (size_t)n, out, &err), 0, "%s", err.msg);
}

void tq_noop_batch(km_buf *out, int64_t base, int32_t epoch, int n)
{
    km_no_op_record recs[64];
    km_metalog_entry e[64];
    cr_assert(n >= 1 && n <= 64);
    for (int i = 0; i < n; i++) {
        km_no_op_record_init(&recs[i]);
        e[i] = (km_metalog_entry){ .desc = &km_no_op_record_desc, .version = 0, .msg = &recs[i], .control_type = -1 };
    }
    km_metalog_batch_params p = { .base_offset = base, .leader_epoch = epoch, .timestamp = 1700000000000 };
    km_err err;
    cr_assert_eq(km_ml_encode_batch(&p, e, (size_t)n, out, &err), 0, "%s", err.msg);
}

static void apply_all(km_image *img, km_metalog *log)
{
    km_metalog_record rec;
    km_err err;
    int rc;
    while ((rc = km_metalog_next(log, &rec, &err)) > 0)
        cr_assert_eq(km_image_apply_record(img, &rec, NULL, &err), 0, "%s", err.msg);
    cr_assert_eq(rc, 0, "%s", err.msg);
    km_metalog_close(log);
}

km_image *tq_image_of(const uint8_t *snap, size_t snap_len, int64_t snap_end, int32_t snap_epoch, const uint8_t *log,
                      size_t log_len)
{
    km_image *img = km_image_new();
    km_err err;
    if (snap) {
        char name[96];
        snprintf(name, sizeof name, "expected/%020lld-%010d.checkpoint", (long long)snap_end, snap_epoch);
        km_metalog *m = km_metalog_open_mem(name, snap, snap_len, KM_ML_FROM_SNAPSHOT, NULL, &err);
        cr_assert(m, "%s", err.msg);
        apply_all(img, m);
    }
    if (log_len) {
        km_metalog *m = km_metalog_open_mem("expected.log", log, log_len, KM_ML_FROM_LOG, NULL, &err);
        cr_assert(m, "%s", err.msg);
        apply_all(img, m);
    }
    return img;
}

uint8_t *tq_snapshot_of(const uint8_t *log, size_t len, size_t *out_len)
{
    char *dir = km_test_tmpdir("tqsnap");
    char path[512];
    snprintf(path, sizeof path, "%s/snap.checkpoint", dir);
    km_err err;
    km_metalog_writer_opts wo = { .leader_epoch = 1, .timestamp = 1700000000000 };
    km_metalog_writer *w = km_metalog_writer_open_snapshot(path, 1700000000000, &wo, &err);
    cr_assert(w, "%s", err.msg);
    km_metalog *m = km_metalog_open_mem("tq.log", log, len, KM_ML_FROM_LOG, NULL, &err);
    cr_assert(m, "%s", err.msg);
    km_metalog_record rec;
    int rc;
    while ((rc = km_metalog_next(m, &rec, &err)) > 0) {
        km_metalog_entry e = { .desc = rec.desc, .version = rec.version, .msg = rec.msg, .control_type = -1 };
        cr_assert(!rec.control);
        cr_assert_eq(km_metalog_writer_append(w, &e, 1, NULL, &err), 0, "%s", err.msg);
    }
    cr_assert_eq(rc, 0, "%s", err.msg);
    km_metalog_close(m);
    cr_assert_eq(km_metalog_writer_finish(w, &err), 0, "%s", err.msg);
    uint8_t *p = tq_read_file(path, out_len);
    km_test_rmtree(dir);
    free(dir);
    return p;
}

void tq_assert_same_image(const km_image *a, const km_image *b, const char *what)
{
    km_err err;
    json_t *ja = km_image_to_json(a, &err), *jb = km_image_to_json(b, &err);
    cr_assert(ja && jb, "%s", err.msg);
    if (!json_equal(ja, jb)) {
        char *sa = json_dumps(ja, JSON_COMPACT | JSON_PRESERVE_ORDER), *sb = json_dumps(jb, JSON_COMPACT | JSON_PRESERVE_ORDER);
        cr_assert_fail("%s: images differ\nfetched: %.800s\nfiles:   %.800s", what, sa, sb);
    }
    json_decref(ja);
    json_decref(jb);
}

uint8_t *tq_gen_log(const char *tmp, const km_gen_opts *g, size_t *len)
{
    char gendir[600], seg[700];
    snprintf(gendir, sizeof gendir, "%s/gen", tmp);
    km_err e = {{0}};
    cr_assert_geq(km_gen_write(gendir, g, NULL, &e), 0, "%s", e.msg);
    snprintf(seg, sizeof seg, "%s/00000000000000000000.log", gendir);
    return tq_read_file(seg, len);
}

uint8_t *tq_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    cr_assert(f, "%s", path);
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc(*len ? *len : 1);
    cr_assert_eq(fread(p, 1, *len, f), *len, "%s", path);
    fclose(f);
    return p;
}
