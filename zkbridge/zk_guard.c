/* The guards against destroying a cluster: may this image take over what ZooKeeper holds?
 *
 * Kafka 3.9's KRaftMigrationDriver only claims ZooKeeper (BECOME_CONTROLLER) and syncs the image into
 * it (SYNC_KRAFT_TO_ZK) when the image's ZkMigrationState says a migration is under way and /migration
 * records the initial migration (WaitForControllerQuorumEvent; ZkMigrationLeadershipState.
 * initialZkMigrationComplete is kraftMetadataOffset > 0), and it never writes an image older than
 * what /migration records (MetadataChangeEvent compares image.highestOffsetAndEpoch() with
 * migrationLeadershipState.offsetAndEpoch(), epoch first as OffsetAndEpoch.compareTo does). Kafka's
 * controllers share meta.properties' cluster id with the brokers by construction; a tool given any
 * log must check it. A ZK-mode controller only yields /controller when its brokers run in migration
 * mode, i.e. they registered with KRaft as migrating ZK brokers (areZkBrokersReadyForMigration). */
#include "zk_bridge.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Topics alone do not count: they may be our own, from a first sync cut short (ZK-mode brokers
 * write /cluster/id at their first start, and register in /brokers/ids while they run). */
bool km_zk_holds_cluster(const km_zk_found *f)
{
    return f->has_cluster_id || f->brokers > 0;
}

bool km_zk_first_sync(const km_zk_found *f)
{
    return km_zk_holds_cluster(f) && !(f->has_migration && f->migration_offset >= 0);
}

/* ---- what the claim read, as facts ---- */

static json_t *parse_json(const char *data)
{
    json_error_t jerr;
    return data ? json_loads(data, 0, &jerr) : NULL;
}

static int64_t int_field(json_t *o, const char *name, int64_t missing)
{
    json_t *v = json_object_get(o, name);
    return json_is_integer(v) ? (int64_t)json_integer_value(v) : missing;
}

void zk_found_cluster_id(km_zk_found *f, const char *data)
{
    json_t *root = parse_json(data);
    json_t *id = json_object_get(root, "id");
    f->has_cluster_id = true;
    snprintf(f->cluster_id, sizeof f->cluster_id, "%s", json_is_string(id) ? json_string_value(id) : data ? data : "");
    json_decref(root);
}

void zk_found_controller(km_zk_found *f, const char *data, int64_t ephemeral_owner)
{
    json_t *root = parse_json(data);
    f->has_controller = true;
    f->controller_ephemeral = ephemeral_owner != 0;
    f->controller_id = (int32_t)int_field(root, "brokerid", -1);
    f->controller_kraft_epoch = (int32_t)int_field(root, "kraftControllerEpoch", -1); /* ZK mode writes -1 */
    json_decref(root);
}

void zk_found_migration(km_zk_found *f, const char *data)
{
    json_t *root = parse_json(data);
    f->has_migration = true;
    f->migration_offset = int_field(root, "kraft_metadata_offset", -1);
    f->migration_epoch = (int32_t)int_field(root, "kraft_metadata_epoch", -1);
    json_decref(root);
}

/* ---- the rules ---- */

typedef struct verdict {
    const km_zk_guard *g;
    char *why;
    size_t cap;
    bool refused, forceable;
} verdict;

/* One rule broken: refused unless forceable and forced (then noted in why, for a warning). */
static void broken(verdict *v, bool forceable, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void broken(verdict *v, bool forceable, const char *fmt, ...)
{
    if (v->refused)
        return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    bool overridden = forceable && v->g->force;
    size_t used = overridden ? strlen(v->why) : 0;
    if (used < v->cap)
        snprintf(v->why + used, v->cap - used, "%s%s%s", used ? "; " : "", msg,
                 overridden ? " (overridden by --force)" : forceable ? " (--force overrides this)" : "");
    v->refused = !overridden;
    v->forceable = forceable;
}

/* Never overridable: another cluster's log would replace this cluster's metadata. An image without
 * a cluster id cannot be checked: that one an operator who knows the log may override. */
static void check_cluster_id(const km_image *img, const km_zk_found *f, verdict *v, bool unknown_pass)
{
    const char *ours = km_image_cluster_id(img);
    if (!f->has_cluster_id || (!ours) != unknown_pass)
        return;
    if (!ours)
        broken(v, true, "the image has no cluster id (no meta.properties beside the log, none given) to check "
               "against ZooKeeper's /cluster/id %s", f->cluster_id);
    else if (strcmp(ours, f->cluster_id))
        broken(v, false, "the image's cluster id %s is not ZooKeeper's /cluster/id %s: another cluster's log", ours,
               f->cluster_id);
}

static const char *state_problem(int state)
{
    switch (state) {
    case KM_ZKM_NONE: return "its cluster was never migrated from ZooKeeper";
    case KM_ZKM_PRE_MIGRATION: return "the initial migration of ZooKeeper's metadata into KRaft has not run";
    case KM_ZKM_POST_MIGRATION: return "the migration is finalized: ZooKeeper is no longer mirrored";
    default: return "not a migration Kafka's KRaftMigrationDriver would run";
    }
}

static void check_migration_state(const km_image *img, const km_zk_found *f, verdict *v)
{
    int state = km_image_zk_migration_state(img);
    const char *name = km_zk_migration_state_name(state);
    if (state != KM_ZKM_MIGRATION)
        broken(v, true, "the image's ZkMigrationState is %s (%s) while ZooKeeper holds a cluster (%d brokers, %d topics)",
               name ? name : "unknown", state_problem(state), f->brokers, f->topics);
    else if (!f->has_migration || f->migration_offset <= 0)
        broken(v, true, "the image says a migration is under way but %s records no initial migration into KRaft",
               f->has_migration ? "/migration" : "ZooKeeper (no /migration)");
}

/* OffsetAndEpoch.compareTo: the epoch decides, then the offset. */
static bool behind(int64_t offset, int32_t epoch, int64_t their_offset, int32_t their_epoch)
{
    return epoch != their_epoch ? epoch < their_epoch : offset < their_offset;
}

bool km_zk_image_behind(const km_image *img, const km_zk_found *f)
{
    return f->has_migration && f->migration_offset >= 0 &&
           behind(km_image_offset(img), km_image_epoch(img), f->migration_offset, f->migration_epoch);
}

static void check_position(const km_image *img, const km_zk_found *f, verdict *v)
{
    if (km_zk_image_behind(img, f) && !v->g->wait_for_log)
        broken(v, true, "the image (offset %" PRId64 " epoch %d) is behind what /migration records (offset %" PRId64
               " epoch %d): syncing would roll ZooKeeper back", km_image_offset(img), km_image_epoch(img),
               f->migration_offset, f->migration_epoch);
}

static void check_controller(const km_image *img, const km_zk_found *f, verdict *v)
{
    if (!f->has_controller || f->controller_kraft_epoch >= 0 || !f->controller_ephemeral)
        return;
    const km_broker *b = f->controller_id >= 0 ? km_image_broker(img, f->controller_id) : NULL;
    if (!b || !b->is_migrating_zk_broker)
        broken(v, true, "/controller is held by the live ZK-mode controller, broker %d, which has not handed over "
               "(it is not registered with KRaft as a migrating ZK broker)", f->controller_id);
}

/* KafkaZkClient.tryRegisterKRaftControllerAsActiveController fails (IllegalStateException) when
 * /controller_epoch is missing: a ZK-mode cluster always has one, and creating it anew restarts the
 * epochs its brokers have seen, which then reject our requests as from a stale controller. A
 * ZooKeeper holding no cluster (a new one, the demo) has no such history: the claim creates it. */
static void check_controller_epoch(const km_zk_found *f, verdict *v)
{
    if (!f->has_controller_epoch && km_zk_holds_cluster(f))
        broken(v, true, "/controller_epoch is missing while ZooKeeper holds a cluster (%s): Kafka's KRaft "
               "controller cannot register as the active controller without it (restore it with the epoch the "
               "brokers last saw)", f->has_cluster_id ? "/cluster/id is set" : "brokers are registered");
}

int km_zk_guard_check(const km_image *img, const km_zk_found *f, const km_zk_guard *g, bool *forceable, char *why,
                      size_t cap)
{
    verdict v = {.g = g, .why = why, .cap = cap};
    if (cap)
        why[0] = '\0';
    /* the refusals nothing overrides first, so that --force is never suggested in vain */
    check_cluster_id(img, f, &v, false);
    if ((km_zk_holds_cluster(f) || f->topics > 0) && km_image_offset(img) < 0)
        broken(&v, false, "the image is empty (no records) while ZooKeeper holds a cluster (%d brokers, %d topics): "
               "syncing it would delete the cluster", f->brokers, f->topics);
    check_cluster_id(img, f, &v, true);
    if (km_zk_holds_cluster(f))
        check_migration_state(img, f, &v);
    check_position(img, f, &v);
    check_controller(img, f, &v);
    check_controller_epoch(f, &v);
    if (forceable)
        *forceable = v.forceable;
    return v.refused ? -1 : 0;
}
