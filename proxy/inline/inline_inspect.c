/* Migration-aware inspection: the controller RPCs (LeaderAndIsr, UpdateMetadata, StopReplica)
 * that pass inline, from whichever controller sends them, are compared with the KRaft image the
 * daemon follows.  A stale controller epoch, a leader epoch behind the image, or a partition
 * state that disagrees is counted per API and logged once per partition with the first field
 * that differs.  The RPC itself always passes unchanged: this only reports. */
#include "inline_private.h"
#include "km_image.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LOGGED_MAX 100000 /* partitions remembered as logged; past it, counting goes on silently */

void km_inline_follow_image(km_inline *p, const km_image *img)
{
    __atomic_store_n(&p->img, img, __ATOMIC_RELEASE); /* workers only test it for NULL */
}

void km_inline_set_controller_epoch(km_inline *p, int32_t epoch)
{
    p->controller_epoch = epoch;
}

bool inl_inspect_wanted(const km_inline *p, int16_t api)
{
    bool controller_rpc = api == KM_API_LEADER_AND_ISR || api == KM_API_UPDATE_METADATA || api == KM_API_STOP_REPLICA;
    return controller_rpc && __atomic_load_n(&p->img, __ATOMIC_ACQUIRE);
}

static int inspect_slot(int16_t api)
{
    return api == KM_API_LEADER_AND_ISR ? 0 : api == KM_API_UPDATE_METADATA ? 1 : 2;
}

/* True the first time (api, topic, partition) diverges: it is logged once. */
static bool first_time(km_inline *p, int16_t api, const char *topic, int32_t partition)
{
    char key[300];
    snprintf(key, sizeof key, "%d/%s/%d", api, topic, partition);
    for (size_t i = 0; i < p->n_logged; i++)
        if (!strcmp(p->logged[i], key))
            return false;
    if (p->n_logged >= LOGGED_MAX)
        return false;
    char **grown = realloc(p->logged, (p->n_logged + 1) * sizeof *grown);
    char *copy = strdup(key);
    if (grown)
        p->logged = grown;
    if (!grown || !copy) {
        free(copy);
        return false;
    }
    p->logged[p->n_logged++] = copy;
    return true;
}

static void diverged(km_inline *p, int16_t api, const char *topic, int32_t partition, const char *what)
{
    INL_ADD(p->divergent[inspect_slot(api)], 1);
    INL_ADD(p->main_stats.divergent, 1);
    if (first_time(p, api, topic, partition))
        inl_log(p, 1, "%s for %s-%d disagrees with the KRaft image: %s", km_api_name(api), topic, partition, what);
}

static bool same_isr(const int32_t *a, int32_t na, km_i32_list b)
{
    if (na != b.n)
        return false;
    for (int32_t i = 0; i < na; i++)
        if (a[i] != b.v[i])
            return false;
    return true;
}

/* One partition state (LeaderAndIsr, UpdateMetadata): the first field that differs. */
static void check_state(km_inline *p, int16_t api, const char *topic, int32_t partition, int32_t controller_epoch,
                        int32_t leader, int32_t leader_epoch, const int32_t *isr, int32_t n_isr)
{
    char what[200];
    const km_topic *t = km_image_topic_by_name(p->img, topic);
    km_partition part;
    if (p->controller_epoch >= 0 && controller_epoch < p->controller_epoch)
        snprintf(what, sizeof what, "controllerEpoch %d is stale (ZooKeeper's is %d)", controller_epoch,
                 p->controller_epoch);
    else if (!t || !km_topic_partition(t, partition, &part))
        snprintf(what, sizeof what, "the image has no such partition");
    else if (leader_epoch < part.leader_epoch)
        snprintf(what, sizeof what, "leaderEpoch %d is behind the image's %d", leader_epoch, part.leader_epoch);
    else if (leader_epoch == part.leader_epoch && leader != part.leader)
        snprintf(what, sizeof what, "leader %d, the image has %d at the same leaderEpoch %d", leader, part.leader,
                 leader_epoch);
    else if (leader_epoch == part.leader_epoch && !same_isr(isr, n_isr, part.isr))
        snprintf(what, sizeof what, "isr differs from the image's at leaderEpoch %d", leader_epoch);
    else
        return;
    diverged(p, api, topic, partition, what);
}

static void name_of(km_str s, char *out, size_t cap)
{
    size_t n = s.len > 0 ? (size_t)s.len : 0;
    n = n < cap - 1 ? n : cap - 1;
    memcpy(out, s.ptr ? s.ptr : "", n);
    out[n] = '\0';
}

/* LeaderAndIsr and UpdateMetadata name their partition-state fields alike, ungrouped in old
 * versions and grouped by topic later, but in types of their own: one walk, written once. */
#define CHECK_ONE(p, api, topic, s)                                                                      \
    check_state(p, api, topic, (s)->partition_index, (s)->controller_epoch, (s)->leader, (s)->leader_epoch, \
                (s)->isr.items, (s)->isr.count)
#define CHECK_STATES(p, api, m)                                                                          \
    do {                                                                                                \
        char topic_[256];                                                                               \
        for (int32_t i_ = 0; i_ < (m)->ungrouped_partition_states.count; i_++) {                      \
            name_of((m)->ungrouped_partition_states.items[i_].topic_name, topic_, sizeof topic_);      \
            CHECK_ONE(p, api, topic_, &(m)->ungrouped_partition_states.items[i_]);                     \
        }                                                                                               \
        for (int32_t t_ = 0; t_ < (m)->topic_states.count; t_++) {                                    \
            name_of((m)->topic_states.items[t_].topic_name, topic_, sizeof topic_);                    \
            for (int32_t i_ = 0; i_ < (m)->topic_states.items[t_].partition_states.count; i_++)       \
                CHECK_ONE(p, api, topic_, &(m)->topic_states.items[t_].partition_states.items[i_]);    \
        }                                                                                               \
    } while (0)

static void check_leader_and_isr(km_inline *p, const km_leader_and_isr_request *m)
{
    CHECK_STATES(p, KM_API_LEADER_AND_ISR, m);
}

static void check_update_metadata(km_inline *p, const km_update_metadata_request *m)
{
    CHECK_STATES(p, KM_API_UPDATE_METADATA, m);
}

/* StopReplica carries leader epochs from v3 (-1, -2: no epoch to compare). */
static void check_stop_replica(km_inline *p, const km_stop_replica_request *m)
{
    char topic[256], what[160];
    for (int32_t t = 0; t < m->topic_states.count; t++) {
        name_of(m->topic_states.items[t].topic_name, topic, sizeof topic);
        const km_topic *kt = km_image_topic_by_name(p->img, topic);
        for (int32_t i = 0; i < m->topic_states.items[t].partition_states.count; i++) {
            const km_stop_replica_request_partition_state *s = &m->topic_states.items[t].partition_states.items[i];
            km_partition part;
            if (p->controller_epoch >= 0 && m->controller_epoch < p->controller_epoch)
                snprintf(what, sizeof what, "controllerEpoch %d is stale (ZooKeeper's is %d)", m->controller_epoch,
                         p->controller_epoch);
            else if (s->leader_epoch >= 0 && kt && km_topic_partition(kt, s->partition_index, &part) &&
                     s->leader_epoch < part.leader_epoch)
                snprintf(what, sizeof what, "leaderEpoch %d is behind the image's %d", s->leader_epoch,
                         part.leader_epoch);
            else
                continue;
            diverged(p, KM_API_STOP_REPLICA, topic, s->partition_index, what);
        }
    }
}

static void inspect(km_inline *p, int16_t api, int16_t ver, const uint8_t *payload, size_t len)
{
    const km_message_desc *md = km_find_message(KM_K_REQUEST, api);
    if (!p->img || !md || !km_version_in(md->valid, ver))
        return;
    km_arena arena;
    km_arena_init(&arena, len * 8 + (1u << 20));
    km_reader r;
    km_reader_init(&r, payload, len);
    km_request_header_view h;
    km_err err = {{0}};
    void *body = km_arena_alloc(&arena, md->root->size);
    if (!body || km_parse_request_header(&r, &h, &arena, &err) || km_decode_from(md, ver, &r, body, &arena, &err))
        inl_log(p, 1, "%s v%d passing inline could not be decoded for inspection: %s", km_api_name(api), ver,
                body ? err.msg : "out of memory");
    else if (api == KM_API_LEADER_AND_ISR)
        check_leader_and_isr(p, body);
    else if (api == KM_API_UPDATE_METADATA)
        check_update_metadata(p, body);
    else
        check_stop_replica(p, body);
    km_arena_free(&arena);
}

/* The image belongs to the main loop (the daemon applies records there): a worker hands a copy
 * of the request over rather than reading the image while it changes. */
void inl_inspect_post(km_inline *p, int16_t api, int16_t ver, const uint8_t *payload, size_t len)
{
    inl_inspect_item *it = malloc(sizeof *it + len);
    if (!it) {
        inl_log(p, 1, "%s v%d passing inline was not inspected: out of memory", km_api_name(api), ver);
        return;
    }
    it->next = NULL;
    it->api = api;
    it->version = ver;
    it->len = len;
    memcpy(it->payload, payload, len);
    pthread_mutex_lock(&p->lock);
    *p->inspect_tail = it;
    p->inspect_tail = &it->next;
    pthread_mutex_unlock(&p->lock);
    inl_wake_main(p);
}

void inl_inspect_drain(km_inline *p)
{
    pthread_mutex_lock(&p->lock);
    inl_inspect_item *it = p->inspect_head;
    p->inspect_head = NULL;
    p->inspect_tail = &p->inspect_head;
    pthread_mutex_unlock(&p->lock);
    while (it) {
        inl_inspect_item *next = it->next;
        inspect(p, it->api, it->version, it->payload, it->len);
        free(it);
        it = next;
    }
}

void inl_inspect_free(km_inline *p)
{
    for (size_t i = 0; i < p->n_logged; i++)
        free(p->logged[i]);
    free(p->logged);
}
