/* image_gen.c - `kmproxy metadata gen`: a synthetic but valid KRaft log.
 *
 * The records are what a 3.9 controller would write for such a cluster:
 * broker epochs are the offsets of their registrations, replicas are
 * assigned round-robin as Kafka's rack-unaware placement does, and later
 * leader changes move leadership within the ISR (Leader set, so the epoch is
 * bumped) or shrink/expand the ISR (Leader -2, no epoch bump, as in MV >= 3.6).
 */
#include "image_internal.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>

#define GEN_DEFAULT_TS 1735689600000LL   /* 2025-01-01T00:00:00Z: reproducible output */
#define GEN_MAX_BATCH 10000

typedef struct gen {
    const km_gen_opts *o;
    km_metalog_writer *w;
    km_image *img;
    uint64_t rng;
    int32_t epoch;
    km_metalog_entry *e;
    size_t n, cap;
    km_arena arena;
    int64_t written;
    int64_t *broker_epoch;   /* index id-1 */
    km_uuid *broker_dir;     /* index id-1: its one log dir */
    km_uuid *topic_ids;
    uint8_t *leader_idx;     /* per partition: index of the leader in its replicas */
    uint8_t *isr_short;      /* per partition: the last replica is out of the ISR */
    km_err *err;
} gen;

static uint64_t rnd(gen *g)
{
    uint64_t z = (g->rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static km_uuid rnd_uuid(gen *g)
{
    km_uuid u;
    uint64_t a = rnd(g), b = rnd(g);
    memcpy(u.b, &a, 8);
    memcpy(u.b + 8, &b, 8);
    u.b[6] = (uint8_t)((u.b[6] & 0x0f) | 0x40);   /* a version-4 uuid, never one of the reserved ids */
    u.b[8] = (uint8_t)((u.b[8] & 0x3f) | 0x80);
    return u;
}

static int64_t next_offset(const gen *g)
{
    return km_metalog_writer_next_offset(g->w) + (int64_t)g->n;
}

static int flush(gen *g)
{
    if (!g->n)
        return 0;
    int64_t base;
    if (km_metalog_writer_append(g->w, g->e, g->n, &base, g->err) < 0)
        return -1;
    for (size_t i = 0; g->img && i < g->n; i++) {
        if (g->e[i].control_type >= 0)
            continue;
        const km_message_desc *md = g->e[i].desc;
        if (km_image_apply(g->img, md->api_key, g->e[i].version, g->e[i].msg, base + (int64_t)i, g->epoch, "gen",
                           NULL, g->err) < 0)
            return -1;
    }
    g->written += (int64_t)g->n;
    g->n = 0;
    km_arena_free(&g->arena);
    return 0;
}

/* A zeroed-then-defaulted record of md to fill, queued for the current batch. */
static void *add(gen *g, const km_message_desc *md, int16_t version)
{
    size_t per = g->o->records_per_batch > 0 ? (size_t)g->o->records_per_batch : 1000;
    if (per > GEN_MAX_BATCH)
        per = GEN_MAX_BATCH;
    if (g->n >= per && flush(g) < 0)
        return NULL;
    void *m = km_arena_alloc(&g->arena, md->root->size);
    if (!m) {
        km_fail(g->err, "gen: out of memory");
        return NULL;
    }
    km_init(md->root, m);
    g->e[g->n++] = (km_metalog_entry){.desc = md, .version = version, .msg = m, .control_type = -1};
    return m;
}

static void *arr(gen *g, size_t n, size_t elem)
{
    return n ? km_arena_alloc(&g->arena, n * elem) : NULL;
}

static km_str astr(gen *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static km_str astr(gen *g, const char *fmt, ...)
{
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    char *p = km_arena_alloc(&g->arena, (size_t)n + 1);
    if (!p)
        return (km_str){NULL, -1};
    memcpy(p, buf, (size_t)n + 1);
    return (km_str){p, n};
}

/* The control batch Raft writes when a leader is elected. */
static int leader_change(gen *g)
{
    km_leader_change_message *m = km_arena_alloc(&g->arena, sizeof *m);
    if (!m)
        return km_fail(g->err, "gen: out of memory");
    km_init(km_leader_change_message_desc.root, m);
    m->leader_id = g->o->controller_id;
    km_leader_change_message_voter *v = arr(g, 1, sizeof *v);
    if (!v)
        return km_fail(g->err, "gen: out of memory");
    v->voter_id = g->o->controller_id;
    m->voters.count = m->granting_voters.count = 1;
    m->voters.items = m->granting_voters.items = v;
    km_metalog_entry e = {.desc = &km_leader_change_message_desc, .version = 0, .msg = m,
                          .control_type = KM_ML_CTRL_LEADER_CHANGE};
    if (km_metalog_writer_append(g->w, &e, 1, NULL, g->err) < 0)
        return -1;
    if (g->img) {
        g->img->raft_leader = g->o->controller_id;
        g->img->raft_leader_epoch = g->epoch;
    }
    g->written++;
    km_arena_free(&g->arena);
    return 0;
}

#define ADD(g, T, ver, var)                                 \
    T *var = add((g), &T##_desc, (ver));                    \
    if (!var)                                               \
        return -1

static int features(gen *g)
{
    ADD(g, km_feature_level_record, 0, f);
    f->name = km_cstr("metadata.version");
    f->feature_level = KM_MV_3_9_IV0;
    ADD(g, km_zk_migration_state_record, 0, z);
    z->zk_migration_state = g->o->zk_migration ? KM_ZKM_PRE_MIGRATION : KM_ZKM_NONE;
    ADD(g, km_register_controller_record, 0, c);
    c->controller_id = g->o->controller_id;
    c->incarnation_id = rnd_uuid(g);
    c->zk_migration_ready = g->o->zk_migration;
    km_register_controller_record_controller_endpoint *ep = arr(g, 1, sizeof *ep);
    km_register_controller_record_controller_feature *ft = arr(g, 1, sizeof *ft);
    if (!ep || !ft)
        return km_fail(g->err, "gen: out of memory");
    *ep = (km_register_controller_record_controller_endpoint){.name = km_cstr("CONTROLLER"),
                                                              .host = km_cstr("controller.kmproxy.test"), .port = 9093};
    *ft = (km_register_controller_record_controller_feature){.name = km_cstr("metadata.version"),
                                                             .min_supported_version = 1,
                                                             .max_supported_version = KM_MV_3_9_IV0};
    c->end_points.count = c->features.count = 1;
    c->end_points.items = ep;
    c->features.items = ft;
    return 0;
}

/* With --zk-migration every broker is a migrating ZK broker (they have no log dir ids yet). */
static int register_broker(gen *g, int32_t id)
{
    ADD(g, km_register_broker_record, 3, r);
    r->broker_id = id;
    r->is_migrating_zk_broker = g->o->zk_migration;
    r->incarnation_id = rnd_uuid(g);
    r->broker_epoch = g->broker_epoch[id - 1] = next_offset(g) - 1;
    km_register_broker_record_broker_endpoint *ep = arr(g, 1, sizeof *ep);
    km_register_broker_record_broker_feature *ft = arr(g, 1, sizeof *ft);
    if (!ep || !ft)
        return km_fail(g->err, "gen: out of memory");
    /* Real endpoints let the demo and tests point brokers at local simulators. */
    km_str host = g->o->broker_host ? astr(g, "%s", g->o->broker_host) : astr(g, "broker%d.kmproxy.test", id);
    uint16_t port = g->o->broker_ports ? g->o->broker_ports[id - 1] : 9092;
    *ep = (km_register_broker_record_broker_endpoint){.name = km_cstr("PLAINTEXT"), .host = host, .port = port};
    *ft = (km_register_broker_record_broker_feature){.name = km_cstr("metadata.version"), .min_supported_version = 1,
                                                     .max_supported_version = KM_MV_3_9_IV0};
    r->end_points.count = r->features.count = 1;
    r->end_points.items = ep;
    r->features.items = ft;
    r->rack = astr(g, "rack-%d", id % 3);
    r->fenced = true;
    if (!g->o->zk_migration) {
        km_uuid *d = arr(g, 1, sizeof *d);
        if (!d)
            return km_fail(g->err, "gen: out of memory");
        *d = g->broker_dir[id - 1] = rnd_uuid(g);
        r->log_dirs.count = 1;
        r->log_dirs.items = d;
    }
    return 0;
}

static int brokers(gen *g)
{
    for (int32_t id = 1; id <= g->o->brokers; id++)
        if (register_broker(g, id) < 0)
            return -1;
    for (int32_t id = 1; id <= g->o->brokers; id++) {
        ADD(g, km_unfence_broker_record, 0, u);
        u->id = id;
        u->epoch = g->broker_epoch[id - 1];
    }
    return 0;
}

static int32_t repl(const gen *g)
{
    int32_t r = g->o->replication > 0 ? g->o->replication : (g->o->brokers < 3 ? g->o->brokers : 3);
    return r > g->o->brokers ? g->o->brokers : r;
}

/* Round-robin placement: partition p of topic t starts at broker (t + p) mod N. */
static int32_t replica_of(const gen *g, int32_t t, int32_t p, int32_t i)
{
    return (int32_t)(((int64_t)t + p + i) % g->o->brokers) + 1;
}

static int partition(gen *g, int32_t t, int32_t p)
{
    ADD(g, km_partition_record, 1, r);
    int32_t n = repl(g);
    int32_t *reps = arr(g, (size_t)n, sizeof *reps);
    km_uuid *dirs = g->o->zk_migration ? NULL : arr(g, (size_t)n, sizeof *dirs);
    if (!reps || (!g->o->zk_migration && !dirs))
        return km_fail(g->err, "gen: out of memory");
    for (int32_t i = 0; i < n; i++) {
        reps[i] = replica_of(g, t, p, i);
        if (dirs)
            dirs[i] = g->broker_dir[reps[i] - 1];
    }
    r->partition_id = p;
    r->topic_id = g->topic_ids[t];
    r->replicas.count = r->isr.count = n;
    r->replicas.items = r->isr.items = reps;
    r->removing_replicas.count = r->adding_replicas.count = 0;
    r->leader = reps[0];
    r->leader_epoch = 0;
    r->partition_epoch = 0;
    r->directories.count = dirs ? n : 0;
    r->directories.items = dirs;
    return 0;
}

static int topics(gen *g)
{
    for (int32_t t = 0; t < g->o->topics; t++) {
        ADD(g, km_topic_record, 0, r);
        r->name = astr(g, "topic-%d", t);
        r->topic_id = g->topic_ids[t] = rnd_uuid(g);
        for (int32_t p = 0; p < g->o->partitions; p++)
            if (partition(g, t, p) < 0)
                return -1;
    }
    return 0;
}

static int config(gen *g, int8_t type, km_str res, const char *name, const char *value)
{
    ADD(g, km_config_record, 0, c);
    c->resource_type = type;
    c->resource_name = res;
    c->name = km_cstr(name);
    c->value = km_cstr(value);
    return 0;
}

static int configs(gen *g)
{
    if (g->o->topics > 0 && (config(g, KM_CFG_TOPIC, km_cstr("topic-0"), "cleanup.policy", "compact") < 0 ||
                             config(g, KM_CFG_TOPIC, km_cstr("topic-0"), "retention.ms", "86400000") < 0))
        return -1;
    if (g->o->topics > 1 && config(g, KM_CFG_TOPIC, km_cstr("topic-1"), "min.insync.replicas", "2") < 0)
        return -1;
    if (config(g, KM_CFG_BROKER, km_cstr(""), "log.retention.hours", "168") < 0 ||
        config(g, KM_CFG_BROKER, km_cstr("1"), "num.io.threads", "8") < 0)
        return -1;
    return 0;
}

static int acl(gen *g, int8_t pattern, const char *res, const char *principal, int8_t op)
{
    ADD(g, km_access_control_entry_record, 0, a);
    a->id = rnd_uuid(g);
    a->resource_type = 2;    /* TOPIC */
    a->resource_name = km_cstr(res);
    a->pattern_type = pattern;
    a->principal = km_cstr(principal);
    a->host = km_cstr("*");
    a->operation = op;
    a->permission_type = 3;  /* ALLOW */
    return 0;
}

static km_bytes rnd_bytes(gen *g, size_t n)
{
    uint8_t *p = km_arena_alloc(&g->arena, n);
    for (size_t i = 0; p && i < n; i++)
        p[i] = (uint8_t)rnd(g);
    return (km_bytes){p, p ? (int32_t)n : -1};
}

static int security(gen *g)
{
    /* AclOperation READ = 3, WRITE = 4; PatternType LITERAL = 3, PREFIXED = 4. */
    if (acl(g, 3, "topic-0", "User:alice", 3) < 0 || acl(g, 4, "topic-", "User:bob", 4) < 0)
        return -1;
    ADD(g, km_client_quota_record, 0, q);
    km_client_quota_record_entity_data *ent = arr(g, 1, sizeof *ent);
    if (!ent)
        return km_fail(g->err, "gen: out of memory");
    *ent = (km_client_quota_record_entity_data){.entity_type = km_cstr("user"), .entity_name = km_cstr("alice")};
    q->entity.count = 1;
    q->entity.items = ent;
    q->key = km_cstr("producer_byte_rate");
    q->value = 1048576.0;
    ADD(g, km_user_scram_credential_record, 0, s);
    s->name = km_cstr("alice");
    s->mechanism = 1;        /* SCRAM-SHA-256 */
    s->salt = rnd_bytes(g, 16);
    s->stored_key = rnd_bytes(g, 32);
    s->server_key = rnd_bytes(g, 32);
    s->iterations = 4096;
    ADD(g, km_producer_ids_record, 0, p);
    p->broker_id = 1;
    p->broker_epoch = g->broker_epoch[0];
    p->next_producer_id = 1000;
    return 0;
}

/* One change on a random partition: a leader move within a full ISR, or an
 * ISR shrink (one follower out) / expand (back to all replicas). */
static int leader_change_record(gen *g, int64_t k)
{
    int64_t np = (int64_t)g->o->topics * g->o->partitions;
    int64_t gp = (int64_t)(rnd(g) % (uint64_t)np);
    int32_t t = (int32_t)(gp / g->o->partitions), p = (int32_t)(gp % g->o->partitions), n = repl(g);
    ADD(g, km_partition_change_record, 1, r);
    r->topic_id = g->topic_ids[t];
    r->partition_id = p;
    bool isr_op = n > 1 && (k % 4 == 3 || g->isr_short[gp]);
    if (!isr_op) {
        int32_t li = g->leader_idx[gp];
        if (n > 1)
            li = (int32_t)((li + 1 + (int32_t)(rnd(g) % (uint64_t)(n - 1))) % n);
        g->leader_idx[gp] = (uint8_t)li;
        r->leader = replica_of(g, t, p, li);
        return 0;
    }
    int32_t out = g->isr_short[gp] ? -1 : (g->leader_idx[gp] + 1) % n;
    int32_t *isr = arr(g, (size_t)n, sizeof *isr), m = 0;
    if (!isr)
        return km_fail(g->err, "gen: out of memory");
    for (int32_t i = 0; i < n; i++)
        if (i != out)
            isr[m++] = replica_of(g, t, p, i);
    r->isr.count = m;
    r->isr.items = isr;
    g->isr_short[gp] = (uint8_t)(out >= 0);
    return 0;
}

static int leader_changes(gen *g)
{
    int64_t np = (int64_t)g->o->topics * g->o->partitions;
    if (np == 0 || g->o->leader_changes == 0)
        return 0;
    /* Small batches, as a controller handling AlterPartition/elections writes them. */
    for (int64_t k = 0; k < g->o->leader_changes; k++) {
        if (leader_change_record(g, k) < 0 || ((k + 1) % 10 == 0 && flush(g) < 0))
            return -1;
    }
    return flush(g);
}

static int finish_records(gen *g)
{
    if (g->o->zk_migration) {
        ADD(g, km_zk_migration_state_record, 0, z);
        z->zk_migration_state = KM_ZKM_MIGRATION;
    }
    return flush(g);
}

static int gen_alloc(gen *g)
{
    int64_t np = (int64_t)g->o->topics * g->o->partitions;
    g->cap = GEN_MAX_BATCH;
    g->e = calloc(g->cap, sizeof *g->e);
    g->broker_epoch = calloc((size_t)g->o->brokers, sizeof *g->broker_epoch);
    g->broker_dir = calloc((size_t)g->o->brokers, sizeof *g->broker_dir);
    g->topic_ids = calloc((size_t)g->o->topics + 1, sizeof *g->topic_ids);
    g->leader_idx = calloc((size_t)np + 1, 1);
    g->isr_short = calloc((size_t)np + 1, 1);
    if (!g->e || !g->broker_epoch || !g->broker_dir || !g->topic_ids || !g->leader_idx || !g->isr_short)
        return km_fail(g->err, "gen: out of memory");
    return 0;
}

static void gen_free(gen *g)
{
    free(g->e);
    free(g->broker_epoch);
    free(g->broker_dir);
    free(g->topic_ids);
    free(g->leader_idx);
    free(g->isr_short);
    km_arena_free(&g->arena);
}

static int check_opts(const km_gen_opts *o, km_err *err)
{
    if (o->brokers < 1 || o->topics < 0 || o->partitions < 1 || o->replication < 0 || o->replication > o->brokers ||
        o->leader_changes < 0 || o->replication > 255)
        return km_fail(err, "gen: need brokers >= 1, topics >= 0, partitions >= 1, 0 <= replication <= brokers");
    if ((int64_t)o->topics * o->partitions > INT32_MAX)
        return km_fail(err, "gen: too many partitions");
    return 0;
}

static int gen_run(gen *g)
{
    if (km_metalog_writer_next_offset(g->w) != 0)
        return km_fail(g->err, "gen: the directory already holds a log");
    if (leader_change(g) < 0 || features(g) < 0 || brokers(g) < 0 || flush(g) < 0 || topics(g) < 0 ||
        configs(g) < 0 || security(g) < 0 || finish_records(g) < 0 || leader_changes(g) < 0)
        return -1;
    return 0;
}

int64_t km_gen_write(const char *dir, const km_gen_opts *opts, km_image *img, km_err *err)
{
    km_gen_opts o = *opts;
    if (!o.controller_id)
        o.controller_id = 3000;
    if (check_opts(&o, err) < 0)
        return -1;
    gen g = {.o = &o, .img = img, .rng = o.seed ^ 0x6b6d70726f7879ull, .epoch = 1, .err = err};
    km_arena_init(&g.arena, 0);
    km_metalog_writer_opts wo = {.leader_epoch = g.epoch, .segment_bytes = o.segment_bytes,
                                 .timestamp = o.timestamp ? o.timestamp : GEN_DEFAULT_TS};
    int rc = gen_alloc(&g);
    if (rc == 0 && !(g.w = km_metalog_writer_open_dir(dir, &wo, err)))
        rc = -1;
    if (rc == 0)
        rc = gen_run(&g);
    if (g.w && rc == 0)
        rc = km_metalog_writer_finish(g.w, err);
    else if (g.w)
        km_metalog_writer_abort(g.w);
    gen_free(&g);
    return rc < 0 ? -1 : g.written;
}
