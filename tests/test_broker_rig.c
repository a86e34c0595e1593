/* A generated log, simulated ZK-mode brokers and a propagator on one loop. */
#include "test_broker_rig.h"
#include "km_testsupport.h"

#include <ev.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool fail(brig *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->why, sizeof r->why, fmt, ap);
    va_end(ap);
    r->failed = true;
    return false;
}

static void quiet_log(int level, const char *msg, void *ud)
{
    (void)ud;
    if (level <= 1 || getenv("KM_TEST_VERBOSE"))
        fprintf(stderr, "[%d] %s\n", level, msg);
}

km_bsim *brig_sim(brig *r, int32_t id)
{
    for (int i = 0; i < r->nsims; i++)
        if (km_bsim_broker_id(r->sims[i]) == id)
            return r->sims[i];
    return NULL;
}

bool brig_append(brig *r, const km_message_desc *md, const void *msg)
{
    km_metalog_entry e = { md, md->valid.hi, msg, -1 };
    km_err err;
    if (km_metalog_writer_append(r->w, &e, 1, NULL, &err))
        return fail(r, "append %s: %s", md->name, err.msg);
    return true;
}

bool brig_append_batch(brig *r, const km_message_desc *const *mds, const void *const *msgs, size_t n)
{
    km_metalog_entry e[16];
    if (n > 16)
        return fail(r, "brig_append_batch: at most 16 records");
    for (size_t i = 0; i < n; i++)
        e[i] = (km_metalog_entry){ mds[i], mds[i]->valid.hi, msgs[i], -1 };
    km_err err;
    if (km_metalog_writer_append(r->w, e, n, NULL, &err))
        return fail(r, "append a batch of %zu: %s", n, err.msg);
    return true;
}

int32_t brig_reassign(brig *r, const km_topic *t, int32_t p, int32_t to)
{
    km_partition x;
    int32_t reps[16], isr[16], ni = 0, from = -1;
    if (!km_topic_partition(t, p, &x) || x.replicas.n > 16)
        return fail(r, "reassign: no partition %s-%d", km_topic_name(t), p), -1;
    for (int32_t i = 0; i < x.replicas.n; i++) {
        reps[i] = x.replicas.v[i];
        if (from < 0 && reps[i] != x.leader) {
            from = reps[i];
            reps[i] = to;
        }
    }
    for (int32_t i = 0; i < x.isr.n; i++)
        if (x.isr.v[i] != from)
            isr[ni++] = x.isr.v[i];
    km_partition_change_record rec;
    km_partition_change_record_init(&rec);
    rec.topic_id = km_topic_id(t);
    rec.partition_id = p;
    rec.leader = x.leader;
    rec.replicas.count = x.replicas.n;
    rec.replicas.items = reps;
    rec.isr.count = ni;
    rec.isr.items = isr;
    return brig_append(r, &km_partition_change_record_desc, &rec) ? from : -1;
}

bool brig_remove_topic(brig *r, const km_topic *t)
{
    km_remove_topic_record rec;
    km_remove_topic_record_init(&rec);
    rec.topic_id = km_topic_id(t);
    return brig_append(r, &km_remove_topic_record_desc, &rec);
}

bool brig_bump_leader_epoch(brig *r, const km_topic *t, int32_t p)
{
    km_partition x;
    if (!km_topic_partition(t, p, &x))
        return fail(r, "no partition %s-%d", km_topic_name(t), p);
    km_partition_change_record rec;
    km_partition_change_record_init(&rec);
    rec.topic_id = km_topic_id(t);
    rec.partition_id = x.id;
    rec.leader = x.leader;
    return brig_append(r, &km_partition_change_record_desc, &rec);
}

/* The old partitions' replica and ISR lists live in the image, which the append leaves alone. */
bool brig_recreate_topic(brig *r, const km_topic *t, km_uuid *new_id)
{
    int32_t np = km_topic_partition_count(t) < 8 ? km_topic_partition_count(t) : 8;
    km_remove_topic_record rm;
    km_remove_topic_record_init(&rm);
    rm.topic_id = km_topic_id(t);
    km_topic_record tr;
    km_topic_record_init(&tr);
    tr.name = km_cstr(km_topic_name(t));
    tr.topic_id = km_topic_id(t);
    tr.topic_id.b[0] ^= 0x5a;
    km_partition_record pr[8];
    const km_message_desc *mds[10] = { &km_remove_topic_record_desc, &km_topic_record_desc };
    const void *msgs[10] = { &rm, &tr };
    for (int32_t p = 0; p < np; p++) { /* the same brokers host it again, at epoch 0 */
        km_partition old;
        if (!km_topic_partition(t, p, &old))
            return fail(r, "no partition %s-%d", km_topic_name(t), p);
        km_partition_record_init(&pr[p]);
        pr[p].partition_id = p;
        pr[p].topic_id = tr.topic_id;
        pr[p].replicas.count = old.replicas.n;
        pr[p].replicas.items = (int32_t *)old.replicas.v;
        pr[p].isr.count = old.isr.n;
        pr[p].isr.items = (int32_t *)old.isr.v;
        pr[p].leader = old.leader;
        pr[p].leader_epoch = pr[p].partition_epoch = 0;
        mds[2 + p] = &km_partition_record_desc;
        msgs[2 + p] = &pr[p];
    }
    *new_id = tr.topic_id;
    return brig_append_batch(r, mds, msgs, (size_t)(2 + np));
}

long long brig_lisr_count(brig *r, int32_t broker, int type)
{
    char k[4];
    snprintf(k, sizeof k, "%d", type);
    json_t *st = km_bsim_state_json(brig_sim(r, broker));
    long long n = json_integer_value(json_object_get(json_object_get(st, "leaderAndIsrByType"), k));
    json_decref(st);
    return n;
}

void brig_registration(int32_t id, int64_t epoch, uint16_t port, bool migrating, km_register_broker_record *rec,
                       km_register_broker_record_broker_endpoint *ep, km_register_broker_record_broker_feature *ft)
{
    km_register_broker_record_init(rec);
    *ep = (km_register_broker_record_broker_endpoint){ km_cstr("PLAINTEXT"), km_cstr("127.0.0.1"), port, 0, { 0, 0 } };
    *ft = (km_register_broker_record_broker_feature){ km_cstr("metadata.version"), 1, KM_MV_3_9_IV0, { 0, 0 } };
    rec->broker_id = id;
    rec->is_migrating_zk_broker = migrating;
    rec->incarnation_id.b[0] = (uint8_t)id;
    rec->incarnation_id.b[1] = (uint8_t)epoch;
    rec->incarnation_id.b[15] = 0x42;
    rec->broker_epoch = epoch;
    rec->end_points.count = 1;
    rec->end_points.items = ep;
    rec->features.count = 1;
    rec->features.items = ft;
    rec->fenced = false;
}

bool brig_register(brig *r, int32_t id, int64_t epoch, uint16_t port, bool migrating)
{
    km_register_broker_record rec;
    km_register_broker_record_broker_endpoint ep;
    km_register_broker_record_broker_feature ft;
    brig_registration(id, epoch, port, migrating, &rec, &ep, &ft);
    return brig_append(r, &km_register_broker_record_desc, &rec);
}

static km_bsim *start_sim(brig *r, int32_t id, int64_t epoch, const char *max_versions)
{
    km_bsim_config cfg;
    km_bsim_config_init(&cfg);
    cfg.broker_id = id;
    cfg.kraft_broker_epoch = epoch;
    cfg.tls = r->o.tls_server;
    cfg.kafka = id % 2 && r->o.kafka_odd ? r->o.kafka_odd : r->o.kafka;
    cfg.zk_connect = r->o.sim_zk;
    cfg.cut_ratio = r->o.cut_ratio;
    km_err err;
    if (max_versions && km_bsim_parse_max_versions(&cfg, max_versions, &err))
        return fail(r, "%s", err.msg), NULL;
    km_bsim *s = km_bsim_new(r->loop, &cfg, &err);
    if (!s)
        return fail(r, "simulator %d: %s", id, err.msg), NULL;
    r->sims[r->nsims++] = s;
    return s;
}

bool brig_add_broker_ex(brig *r, int32_t id, int64_t epoch, const char *max_versions, bool migrating)
{
    if (r->nsims == BRIG_MAX_SIMS)
        return fail(r, "too many simulators");
    km_bsim *s = start_sim(r, id, epoch, max_versions);
    return s && brig_register(r, id, epoch, km_bsim_port(s), migrating);
}

bool brig_add_broker(brig *r, int32_t id, int64_t epoch, const char *max_versions)
{
    return brig_add_broker_ex(r, id, epoch, max_versions, true);
}

static bool make_log(brig *r, const brig_opts *o)
{
    km_gen_opts g = { .brokers = o->brokers, .topics = o->topics, .partitions = o->partitions,
                      .replication = o->replication, .leader_changes = o->leader_changes, .seed = 42,
                      .zk_migration = true, .controller_id = BRIG_CONTROLLER };
    km_err err;
    if (km_gen_write(r->logdir, &g, NULL, &err) < 0)
        return fail(r, "metadata gen: %s", err.msg);
    km_metalog_writer_opts wo = { .leader_epoch = 1, .timestamp = 1 };
    if (!(r->w = km_metalog_writer_open_dir(r->logdir, &wo, &err)))
        return fail(r, "writer: %s", err.msg);
    return true;
}

bool brig_init(brig *r, const brig_opts *o)
{
    memset(r, 0, sizeof *r);
    r->o = *o;
    r->loop = ev_loop_new(EVFLAG_AUTO);
    r->zk_epoch = o->zk_epoch ? o->zk_epoch : 7;
    r->controller_id = BRIG_CONTROLLER;
    r->tmp = km_test_tmpdir("brig");
    if (!r->loop || !r->tmp)
        return fail(r, "no loop or tmpdir");
    snprintf(r->logdir, sizeof r->logdir, "%s/__cluster_metadata-0", r->tmp);
    if (!make_log(r, o))
        return false;
    for (int32_t id = 1; id <= o->brokers; id++)
        if (!brig_add_broker(r, id, 1000 + id, o->max_versions))
            return false;
    km_err err;
    km_metalog_opts mo = { .follow = true, .no_inotify = true };
    r->img = km_image_new();
    r->delta = km_delta_new();
    if (!r->img || !r->delta || !(r->follow = km_image_follow_open(r->img, r->logdir, &mo, &err)))
        return fail(r, "follow: %s", err.msg);
    km_bprop_config pc = { .controller_id = BRIG_CONTROLLER, .listener = "PLAINTEXT",
                           .request_timeout = o->request_timeout > 0 ? o->request_timeout : 10,
                           .max_queue = o->max_queue, .backoff_base = 0.01, .backoff_max = 0.2,
                           .capture = o->capture, .log = quiet_log, .net = { .tls = o->tls_client } };
    if (!(r->prop = km_bprop_new(r->loop, &pc, &err)))
        return fail(r, "propagator: %s", err.msg);
    return brig_pump(r);
}

void brig_free(brig *r)
{
    km_bprop_free(r->prop);
    for (int i = 0; i < r->nsims; i++)
        km_bsim_free(r->sims[i]);
    km_image_follow_close(r->follow);
    km_delta_free(r->delta);
    km_image_free(r->img);
    if (r->w)
        km_metalog_writer_abort(r->w);
    if (r->loop)
        ev_loop_destroy(r->loop);
    km_test_rmtree(r->tmp);
    free(r->tmp);
}

bool brig_activate(brig *r)
{
    km_err err;
    if (km_bprop_activate(r->prop, r->img, r->zk_epoch, &err))
        return fail(r, "activate: %s", err.msg);
    return true;
}

bool brig_pump(brig *r)
{
    km_err err;
    int rc;
    while ((rc = km_image_follow_next(r->follow, r->delta, &err)) == 1) {
        r->deltas++;
        if (km_bprop_publish(r->prop, r->delta, &err))
            return fail(r, "publish: %s", err.msg);
    }
    return rc == 0 ? true : fail(r, "follow: %s", err.msg);
}

static void on_tick(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)revents;
    brig *r = w->data;
    if (!brig_pump(r))
        ev_break(loop, EVBREAK_ALL);
}

bool brig_run_until(brig *r, bool (*pred)(brig *r), double seconds)
{
    ev_timer tick;
    ev_timer_init(&tick, on_tick, 0.002, 0.002);
    tick.data = r;
    ev_timer_start(r->loop, &tick);
    ev_tstamp end = ev_time() + seconds;
    bool ok = false;
    while (!(ok = pred(r)) && ev_time() < end && !r->failed)
        ev_run(r->loop, EVRUN_ONCE);
    ev_timer_stop(r->loop, &tick);
    return !r->failed && (ok || pred(r));
}

km_uuid brig_topic_id(brig *r, const char *name)
{
    const km_topic *t = km_image_topic_by_name(r->img, name);
    return t ? km_topic_id(t) : (km_uuid){ { 0 } };
}
