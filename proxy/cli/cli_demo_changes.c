/* The demo's live changes, written to the metadata log the way the KRaft controller writes them. */
#include "cli_demo.h"
#include "km_metalog.h"

#include <stdlib.h>
#include <string.h>

#define NEW_TOPIC "orders"
#define NEW_TOPIC_PARTITIONS 4

typedef struct change_batch {
    km_metalog_entry e[64];
    size_t n;
    km_arena arena;
} change_batch;

static void *add_record(change_batch *b, int16_t type, int16_t version)
{
    const km_message_desc *md = km_find_message(KM_K_METADATA, type);
    void *msg = km_arena_alloc(&b->arena, md->root->size);
    if (!msg || b->n == sizeof b->e / sizeof b->e[0])
        return NULL;
    km_init(md->root, msg);
    b->e[b->n++] = (km_metalog_entry){.desc = md, .version = version, .msg = msg, .control_type = -1};
    return msg;
}

/* A leader moves to the next in-sync replica: what an election after a broker failure writes. */
static int leader_changes(change_batch *b, const km_image *img, int count)
{
    size_t it = 0;
    const km_topic *t;
    while (count > 0 && (t = km_image_next_topic(img, &it))) {
        for (int32_t p = 0; count > 0 && p < km_topic_partition_count(t); p++) {
            km_partition part;
            if (!km_topic_partition(t, p, &part) || part.isr.n < 2)
                continue;
            km_partition_change_record *r = add_record(b, KM_MDR_PARTITION_CHANGE_RECORD, 0);
            if (!r)
                return -1;
            r->topic_id = km_topic_id(t);
            r->partition_id = p;
            r->leader = part.isr.v[0] == part.leader ? part.isr.v[1] : part.isr.v[0];
            count--;
        }
    }
    return 0;
}

static int new_topic(change_batch *b, const km_image *img)
{
    km_topic_record *t = add_record(b, KM_MDR_TOPIC_RECORD, 0);
    if (!t)
        return -1;
    t->name = km_cstr(NEW_TOPIC);
    for (int i = 0; i < 16; i++)
        t->topic_id.b[i] = (uint8_t)(0xa0 + i);
    int32_t brokers[DEMO_MAX_BROKERS], nb = 0;
    size_t it = 0;
    for (const km_broker *br; nb < DEMO_MAX_BROKERS && (br = km_image_next_broker(img, &it));)
        brokers[nb++] = br->id;
    for (int32_t p = 0; p < NEW_TOPIC_PARTITIONS; p++) {
        km_partition_record *r = add_record(b, KM_MDR_PARTITION_RECORD, 0);
        int32_t *replicas = km_arena_alloc(&b->arena, 2 * sizeof *replicas);
        if (!r || !replicas || nb < 2)
            return -1;
        replicas[0] = brokers[p % nb];
        replicas[1] = brokers[(p + 1) % nb];
        r->partition_id = p;
        r->topic_id = t->topic_id;
        r->replicas.count = r->isr.count = 2;
        r->replicas.items = r->isr.items = replicas;
        r->leader = replicas[0];
        r->leader_epoch = 0;
        r->partition_epoch = 0;
    }
    return 0;
}

static int delete_first_topic(change_batch *b, const km_image *img)
{
    size_t it = 0;
    const km_topic *t = km_image_next_topic(img, &it);
    km_remove_topic_record *r = t ? add_record(b, KM_MDR_REMOVE_TOPIC_RECORD, 0) : NULL;
    if (!r)
        return -1;
    r->topic_id = km_topic_id(t);
    return 0;
}

/* The joining broker registers (migrating, unfenced), as a ZK broker restarted into migration does. */
static int register_broker(change_batch *b, const demo_sim *sim, int64_t epoch)
{
    km_register_broker_record *r = add_record(b, KM_MDR_REGISTER_BROKER_RECORD, 3);
    km_register_broker_record_broker_endpoint *ep = km_arena_alloc(&b->arena, sizeof *ep);
    km_unfence_broker_record *u = add_record(b, KM_MDR_UNFENCE_BROKER_RECORD, 0);
    if (!r || !ep || !u)
        return -1;
    *ep = (km_register_broker_record_broker_endpoint){.name = km_cstr("PLAINTEXT"), .host = km_cstr("127.0.0.1"),
                                                      .port = sim->port, .security_protocol = 0};
    r->broker_id = sim->id;
    r->broker_epoch = epoch;  /* Kafka's broker epoch is the offset of the registration record */
    r->is_migrating_zk_broker = true;
    r->fenced = false;
    r->incarnation_id.b[0] = (uint8_t)sim->id;
    r->end_points.count = 1;
    r->end_points.items = ep;
    u->id = sim->id;
    u->epoch = epoch;
    return 0;
}

/* A partition of the first surviving topic that the new broker is not a replica of. */
static bool pick_reassignment(const km_image *img, int32_t newcomer, const km_topic **topic, km_partition *part)
{
    size_t it = 0;
    const km_topic *t = km_image_next_topic(img, &it);  /* the first is deleted; take the second */
    t = t ? km_image_next_topic(img, &it) : NULL;
    if (!t || !km_topic_partition(t, 0, part) || part->replicas.n < 2)
        return false;
    for (int32_t i = 0; i < part->replicas.n; i++)
        if (part->replicas.v[i] == newcomer)
            return false;
    *topic = t;
    return true;
}

static void set_list(int32_t *count, int32_t **items, int32_t n, int32_t *v)
{
    *count = n;
    *items = v;
}

/* Kafka's two steps: first replicas = target + leaving (adding/removing set), then, once the new
 * replica is in sync, replicas = target.  The leaving replica gets StopReplica(delete). */
static int reassign(change_batch *b, const km_image *img, int32_t newcomer, int step)
{
    const km_topic *t;
    km_partition p;
    int32_t *v = km_arena_alloc(&b->arena, 4 * (size_t)(4 + 1) * sizeof *v);
    km_partition_change_record *r = add_record(b, KM_MDR_PARTITION_CHANGE_RECORD, 0);
    if (!v || !r || !pick_reassignment(img, newcomer, &t, &p) || p.replicas.n > 4)
        return -1;
    int32_t leaving = p.replicas.v[0], n = p.replicas.n;
    int32_t *target = v, *both = v + 5, *isr = v + 10, *one = v + 15;
    target[0] = newcomer;  /* the newcomer takes the first replica's place */
    for (int32_t i = 1; i < n; i++)
        target[i] = both[i] = isr[i - 1] = p.replicas.v[i];
    both[0] = newcomer;
    both[n] = leaving;
    r->topic_id = km_topic_id(t);
    r->partition_id = p.id;
    if (step == 1) {
        one[0] = newcomer;
        one[1] = leaving;
        set_list(&r->replicas.count, &r->replicas.items, n + 1, both);
        set_list(&r->adding_replicas.count, &r->adding_replicas.items, 1, &one[0]);
        set_list(&r->removing_replicas.count, &r->removing_replicas.items, 1, &one[1]);
        return 0;
    }
    isr[n - 1] = newcomer;
    set_list(&r->replicas.count, &r->replicas.items, n, target);
    set_list(&r->isr.count, &r->isr.items, n, isr);
    set_list(&r->adding_replicas.count, &r->adding_replicas.items, 0, one);  /* empty, not null: cleared */
    set_list(&r->removing_replicas.count, &r->removing_replicas.items, 0, one);
    r->leader = p.leader == leaving ? target[1] : KM_NO_LEADER_CHANGE;
    return 0;
}

/* Writes what b holds as one batch: one batch per kind of change, as separate controller events. */
static int flush_batch(km_metalog_writer *w, change_batch *b, int *written, km_err *err)
{
    if (b->n && km_metalog_writer_append(w, b->e, b->n, NULL, err))
        return -1;
    *written += (int)b->n;
    b->n = 0;
    return 0;
}

int demo_append_changes(const char *logdir, const km_image *img, int leader_change_count, const demo_sim *newcomer,
                        km_err *err)
{
    km_metalog_writer_opts wo = {.leader_epoch = km_image_epoch(img)};
    km_metalog_writer *w = km_metalog_writer_open_dir(logdir, &wo, err);
    if (!w)
        return -1;
    change_batch b = {.n = 0};
    km_arena_init(&b.arena, 0);
    int written = 0;
    int rc = leader_changes(&b, img, leader_change_count) ? km_fail(err, "demo: no partition to move")
                                                        : flush_batch(w, &b, &written, err);
    if (!rc)
        rc = delete_first_topic(&b, img) ? km_fail(err, "demo: no topic to delete") : flush_batch(w, &b, &written, err);
    if (!rc)
        rc = new_topic(&b, img) ? km_fail(err, "demo: cannot create a topic") : flush_batch(w, &b, &written, err);
    if (!rc)
        rc = register_broker(&b, newcomer, km_metalog_writer_next_offset(w))
                 ? km_fail(err, "demo: cannot register broker %d", newcomer->id)
                 : flush_batch(w, &b, &written, err);
    for (int step = 1; !rc && step <= 2; step++)
        rc = reassign(&b, img, newcomer->id, step) ? km_fail(err, "demo: no partition to reassign")
                                                  : flush_batch(w, &b, &written, err);
    km_arena_free(&b.arena);
    if (rc) {
        km_metalog_writer_abort(w);
        return -1;
    }
    return km_metalog_writer_finish(w, err) ? -1 : written;
}
