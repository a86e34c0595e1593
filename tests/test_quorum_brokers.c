/* test_quorum_brokers.c - ZK-mode brokers (the broker simulator, driven by the propagator) fed by
 * the KRaft observer: they converge on the committed image only.  The quorum leader holds an
 * uncommitted suffix of leader elections that a failover truncates; the brokers never see it. */
#include "test_broker_rig.h"
#include "test_quorum_util.h"
#include "km_testsupport.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct obs {
    brig *r;
    km_image *img;
    int64_t committed_end;       /* first offset of the suffixes */
    int32_t suffix_epoch;        /* the uncommitted suffix's epoch */
    bool saw_uncommitted;
} obs;

static void on_applied(km_quorum *q, km_delta *d, void *ud)
{
    (void)q;
    obs *o = ud;
    km_err err;
    if (km_image_offset(o->img) >= o->committed_end && km_image_epoch(o->img) == o->suffix_epoch)
        o->saw_uncommitted = true;
    cr_assert_eq(km_bprop_publish(o->r->prop, d, &err), 0, "%s", err.msg);
}

/* n leader elections (PartitionChangeRecord, Leader = the next replica) at base/epoch. */
static void elections(const km_image *img, km_buf *out, int64_t base, int32_t epoch, int n, int shift)
{
    km_partition_change_record recs[16];
    km_metalog_entry e[16];
    size_t it = 0;
    const km_topic *t = km_image_next_topic(img, &it);
    cr_assert(t && n <= 16);
    for (int i = 0; i < n; i++) {
        km_partition p;
        cr_assert(km_topic_partition(t, i % km_topic_partition_count(t), &p));
        km_partition_change_record_init(&recs[i]);
        recs[i].topic_id = km_topic_id(t);
        recs[i].partition_id = p.id;
        recs[i].leader = p.replicas.v[(i + shift) % p.replicas.n];
        if (recs[i].leader == p.leader) /* an election moves the leadership */
            recs[i].leader = p.replicas.v[(i + shift + 1) % p.replicas.n];
        e[i] = (km_metalog_entry){ .desc = &km_partition_change_record_desc,
                                   .version = km_partition_change_record_desc.valid.hi, .msg = &recs[i],
                                   .control_type = -1 };
    }
    km_metalog_batch_params bp = { .base_offset = base, .leader_epoch = epoch, .timestamp = 1700000000000 };
    km_err err;
    cr_assert_eq(km_ml_encode_batch(&bp, e, (size_t)n, out, &err), 0, "%s", err.msg);
}

static obs *g_obs;
/* The observer holds the new leader's whole log (4 records past the committed end) and every
 * broker equals it. */
static bool new_log_converged(brig *r)
{
    return km_image_offset(g_obs->img) == g_obs->committed_end + 3 && brig_converged(r);
}

Test(quorum_brokers, brokers_get_committed_records_only_across_a_failover, .timeout = 240)
{
    brig R;
    brig_opts bo = { .brokers = 3, .topics = 3, .partitions = 3, .replication = 3, .leader_changes = 5 };
    cr_assert(brig_init(&R, &bo), "%s", R.why);
    size_t len;
    char seg[600];
    snprintf(seg, sizeof seg, "%s/00000000000000000000.log", R.logdir);
    uint8_t *log = tq_read_file(seg, &len);
    km_rsim *sims[2];
    tq_make_sims(R.loop, 2, NULL, sims, NULL, 0);
    km_err err;
    for (int i = 0; i < 2; i++)
        cr_assert_eq(km_rsim_append(sims[i], log, len, &err), 0, "%s", err.msg);
    int32_t e = km_rsim_last_epoch(sims[0]);
    int64_t end = km_rsim_log_end(sims[0]);
    km_buf a, b;
    km_buf_init(&a);
    km_buf_init(&b);
    elections(R.img, &a, end, e, 6, 1);  /* the old leader's suffix: never committed */
    elections(R.img, &b, end, e + 1, 4, 2); /* the new leader's */
    cr_assert_eq(km_rsim_append(sims[0], a.data, a.len, &err), 0, "%s", err.msg);
    cr_assert_eq(km_rsim_append(sims[1], b.data, b.len, &err), 0, "%s", err.msg);
    km_rsim_set_high_watermark(sims[0], end);
    for (int i = 0; i < 2; i++)
        km_rsim_set_leader(sims[i], 1, e);

    /* The propagator now follows the observer's image instead of the rig's file follower. */
    km_image *file_img = R.img;
    obs o = { .r = &R, .img = km_image_new(), .committed_end = end, .suffix_epoch = e };
    R.img = o.img;
    char servers[64];
    snprintf(servers, sizeof servers, "127.0.0.1:%u,127.0.0.1:%u", km_rsim_port(sims[0]), km_rsim_port(sims[1]));
    km_quorum_config qc;
    km_quorum_config_init(&qc);
    qc.bootstrap_servers = servers;
    qc.fetch_max_wait_ms = 100;
    qc.quiet = true;
    km_quorum_handlers h = { .on_applied = on_applied };
    km_quorum *q = km_quorum_new(R.loop, &qc, o.img, &h, &o, &err);
    cr_assert(q, "%s", err.msg);
    cr_assert(brig_activate(&R), "%s", R.why);
    cr_assert(brig_run_until(&R, brig_converged, 60), "brokers never converged on the committed image: %s", R.why);
    tq_assert_same_image(o.img, file_img, "observer vs the committed log");

    for (int i = 0; i < 2; i++)
        km_rsim_set_leader(sims[i], 2, e + 1);
    km_buf full;
    km_buf_init(&full);
    km_buf_put(&full, log, len);
    km_buf_put(&full, b.data, b.len);
    km_image *want = tq_image_of(NULL, 0, 0, 0, full.data, full.len);
    g_obs = &o;
    cr_assert(brig_run_until(&R, new_log_converged, 60), "brokers never converged on the new leader's log: %s", R.why);
    tq_assert_same_image(o.img, want, "after the failover");
    cr_assert(!o.saw_uncommitted, "the old leader's uncommitted suffix was applied");

    km_quorum_free(q);
    R.img = file_img;
    km_image_free(o.img);
    km_image_free(want);
    km_buf_free(&full);
    km_buf_free(&a);
    km_buf_free(&b);
    for (int i = 0; i < 2; i++)
        km_rsim_free(sims[i]);
    free(log);
    brig_free(&R);
}
