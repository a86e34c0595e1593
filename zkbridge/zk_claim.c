/* BECOME_CONTROLLER: claim /controller + /controller_epoch, then learn /migration's true zkVersion.
 *
 * Every step that reads starts with sync(): a follower may answer from behind the leader, and a
 * stale /migration version is what wedged Kafka in KAFKA-16667. The version we finally trust comes
 * from our own conditional write of /migration. A write whose ack was lost is verified by reading
 * back (after sync) and comparing with exactly what we wrote. */
#include "zk_writer.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct claim_call claim_call;
typedef struct read_slot {
    claim_call *c;
    int idx;
} read_slot;

/* The first read of a claim: what the guard and the claim decide from. */
enum { R_CONTROLLER, R_CONTROLLER_EPOCH, R_MIGRATION, R_CLUSTER_ID, R_BROKER_IDS, R_TOPICS, R_RECORD, CLAIM_READS };
static const char *const CLAIM_PATHS[R_RECORD] = {"/controller", "/controller_epoch", "/migration", "/cluster/id",
                                                  "/brokers/ids", "/brokers/topics"};

struct claim_call {
    km_zkw *w;
    unsigned generation;
    int waiting;          /* replies still due for this step */
    int rc[CLAIM_READS];
    char *data[CLAIM_READS];
    int len[CLAIM_READS];
    struct Stat st[CLAIM_READS];
    zoo_op_t ops[5];
    zoo_op_result_t res[5];
    struct Stat set_stat, record_stat;
    char payload[256];
    char record[512];
    read_slot slots[CLAIM_READS];
};

static void claim_step(km_zkw *w);
static void resume(km_zkw *w);

static claim_call *call_new(km_zkw *w, int waiting)
{
    claim_call *c = calloc(1, sizeof *c);
    if (c) {
        c->w = w;
        c->generation = w->sess.generation;
        c->waiting = waiting;
        for (int i = 0; i < CLAIM_READS; i++) {
            c->slots[i] = (read_slot){c, i};
            c->rc[i] = ZNONODE; /* a slot a step does not read */
        }
    }
    return c;
}

static void call_free(claim_call *c)
{
    for (int i = 0; i < CLAIM_READS; i++)
        free(c->data[i]);
    free(c);
}

/* True when the reply belongs to a dead handle or the session is gone: the session watcher
 * restarts the whole claim, so the step just stops here. */
static bool stale(claim_call *c, int rc)
{
    return c->generation != c->w->sess.generation || rc == ZCLOSING || rc == ZSESSIONEXPIRED ||
           rc == ZINVALIDSTATE || c->w->state != KM_ZKW_CLAIMING;
}

/* A lost connection during the claim: the session watcher resumes us when it is back. */
static void lost(km_zkw *w, zkw_claim_step resume_at)
{
    w->step = resume_at;
    w->recover_wanted = true;
    if (zoo_state(w->sess.zh) == ZOO_CONNECTED_STATE) {
        w->recover_wanted = false;
        resume(w);
    }
}

static void fail_call(km_zkw *w, int rc, const char *what)
{
    zkw_log(w, KM_LOG_WARN, "zk claim: %s failed: %s; retrying the claim from the start", what, zerror(rc));
    if (++w->claim_attempts > 20) {
        w->state = KM_ZKW_REFUSED;
        snprintf(w->fence_reason, sizeof w->fence_reason, "claim gave up after %d attempts (last: %s: %s)",
                 w->claim_attempts, what, zerror(rc));
        zkw_log(w, KM_LOG_ERROR, "zk claim: gave up after %d attempts (last: %s: %s)", w->claim_attempts, what,
                zerror(rc));
        zkw_emit(w, KM_ZKW_EV_REFUSED);
        return;
    }
    w->step = CL_SYNC;
    resume(w);
}

static void on_synced(int rc, const char *value, const void *data)
{
    (void)value;
    claim_call *c = (claim_call *)data;
    km_zkw *w = c->w;
    bool is_stale = stale(c, rc);
    call_free(c);
    if (is_stale)
        return;
    if (rc == ZCONNECTIONLOSS || rc == ZOPERATIONTIMEOUT)
        return lost(w, w->step);
    if (rc != ZOK)
        return fail_call(w, rc, "sync");
    claim_step(w);
}

/* Issues sync() and then the reads of step `reads_step` (the reads go out after the sync reply). */
static void sync_then(km_zkw *w, zkw_claim_step reads_step)
{
    claim_call *c = call_new(w, 1);
    if (!c)
        return fail_call(w, ZSYSTEMERROR, "sync (out of memory)");
    w->step = reads_step;
    int rc = zoo_async(w->sess.zh, "/migration", on_synced, c);
    if (rc != ZOK) {
        call_free(c);
        w->recover_wanted = true; /* not connected: the session watcher resumes us */
    }
}

static void after_reads(km_zkw *w, claim_call *c);

static void on_read(int rc, const char *value, int len, const struct Stat *st, const void *data)
{
    const read_slot *slot = data;
    claim_call *c = slot->c;
    int i = slot->idx;
    c->rc[i] = rc;
    if (rc == ZOK) {
        c->len[i] = len < 0 ? 0 : len;
        c->data[i] = malloc((size_t)c->len[i] + 1);
        if (c->data[i]) {
            memcpy(c->data[i], value ? value : "", (size_t)c->len[i]);
            c->data[i][c->len[i]] = '\0';
        }
        c->st[i] = *st;
    }
    if (--c->waiting > 0)
        return;
    km_zkw *w = c->w;
    bool is_stale = false;
    for (int j = 0; j < CLAIM_READS; j++)
        is_stale |= stale(c, c->rc[j]);
    if (!is_stale)
        after_reads(w, c);
    call_free(c);
}

/* Reads n znodes; after_reads() gets every result once the last one is in. */
static void read_paths(km_zkw *w, const char *const *paths, int n)
{
    claim_call *c = call_new(w, n);
    if (!c)
        return fail_call(w, ZSYSTEMERROR, "read (out of memory)");
    for (int i = 0; i < n; i++) {
        if (zoo_aget(w->sess.zh, paths[i], 0, on_read, &c->slots[i]) == ZOK)
            continue;
        if (i == 0) {
            call_free(c);
            return lost(w, w->step);
        }
        c->waiting = i; /* the ones queued will fail with the connection */
        for (; i < n; i++)
            c->rc[i] = ZCONNECTIONLOSS;
    }
}

static void read_two(km_zkw *w, const char *p0, const char *p1)
{
    const char *paths[2] = {p0, p1};
    read_paths(w, paths, p1 ? 2 : 1);
}

/* The claim's first read: what the guard decides from, and the HA claim record when there is one. */
static void read_claim_paths(km_zkw *w)
{
    const char *paths[CLAIM_READS];
    memcpy(paths, CLAIM_PATHS, sizeof CLAIM_PATHS);
    paths[R_RECORD] = w->claim_record;
    read_paths(w, paths, w->claim_record ? CLAIM_READS : R_RECORD);
}

static bool is_loss(int rc) { return rc == ZCONNECTIONLOSS || rc == ZOPERATIONTIMEOUT; }

/* The first op that failed in a multi (the others report OK or RUNTIMEINCONSISTENCY). */
int zkw_failed_op(const zoo_op_result_t *res, int n)
{
    for (int i = 0; i < n; i++)
        if (res[i].err != ZOK && res[i].err != ZRUNTIMEINCONSISTENCY)
            return i;
    return -1;
}

/* Kafka's rule (KafkaZkClient.tryRegisterKRaftControllerAsActiveController, 3.9): a KRaft epoch in
 * /controller that is not older than ours - the same epoch included, whichever node wrote it -
 * refuses the claim (ControllerMovedException). One exception: `handover` says the claim record
 * proves /controller was written by a kmproxy claim for our node id - an HA takeover (the instances
 * act as one controller), or a single instance restarted at the same KRaft epoch (systemctl
 * restart, upgrade, crash: /controller is persistent in KRaft mode, so its predecessor's claim is
 * still there). Either continues that claim with a new /controller_epoch. */
static int check_controller(km_zkw *w, const char *json, bool handover)
{
    json_error_t jerr;
    json_t *root = json_loads(json, 0, &jerr);
    if (!root)
        return 0; /* unreadable: a ZK-era leftover; the claim overwrites it */
    json_t *ke = json_object_get(root, "kraftControllerEpoch");
    json_t *id = json_object_get(root, "brokerid");
    int refuse = 0;
    if (json_is_integer(ke)) {
        json_int_t epoch = json_integer_value(ke);
        bool same_node = json_is_integer(id) && json_integer_value(id) == w->cfg.controller_id;
        refuse = epoch > w->cfg.controller_epoch || (epoch == w->cfg.controller_epoch && !(handover && same_node));
        if (refuse)
            snprintf(w->fence_reason, sizeof w->fence_reason,
                     "/controller is held by KRaft controller %lld at epoch %lld, not lower than our epoch %d "
                     "(node %d): a KRaft controller claims ZooKeeper only with a newer epoch",
                     json_is_integer(id) ? (long long)json_integer_value(id) : -1LL, (long long)epoch,
                     w->cfg.controller_epoch, w->cfg.controller_id);
    }
    json_decref(root);
    return refuse;
}

/* /controller holds the claim of the very KRaft leader we claim as: its node id and its epoch, which a KRaft
 * controller's KRaftMigrationDriver writes when it becomes leader (ZkMigrationClient.claimControllerLeadership),
 * and no kmproxy claim of ours was made at that epoch yet (the claim record names the KRaft epoch of our last
 * claim; absent: kmproxy never claimed this cluster). Taking it over with a new /controller_epoch is the
 * deployment beside Kafka's own driver (docs/runbook.md): the driver's next ZooKeeper write fails its
 * /controller_epoch check (ControllerMovedException) and it sends no RPC for that change, so kmproxy stays the
 * only writer. Without a claim record (`zk sync`) we cannot tell that claim from another writer's: no takeover.
 * A second claim at the same KRaft epoch after ours (the record's epoch equals it) is another writer's: fenced. */
static bool leader_own_claim(const km_zkw *w, const claim_call *c)
{
    if (!w->claim_record || c->rc[R_CONTROLLER] != ZOK || !c->data[R_CONTROLLER])
        return false;
    json_error_t jerr;
    json_t *ctrl = json_loads(c->data[R_CONTROLLER], 0, &jerr);
    json_t *ke = json_object_get(ctrl, "kraftControllerEpoch"), *id = json_object_get(ctrl, "brokerid");
    bool leaders = json_is_integer(ke) && json_integer_value(ke) == w->cfg.controller_epoch &&
                   json_is_integer(id) && json_integer_value(id) == w->cfg.controller_id;
    json_decref(ctrl);
    if (!leaders || c->rc[R_RECORD] != ZOK)
        return leaders;
    json_t *rec = json_loads(c->data[R_RECORD] ? c->data[R_RECORD] : "", 0, &jerr);
    json_t *recorded = json_object_get(rec, "kraft_controller_epoch");
    bool older = json_is_integer(recorded) && json_integer_value(recorded) < w->cfg.controller_epoch &&
                 !json_object_get(rec, "foreign_writer");
    json_decref(rec);
    return older;
}

/* /controller holds a KRaft epoch newer than ours: a KRaft leader we have not seen in the log yet. */
static bool newer_leader(const km_zkw *w, const char *json)
{
    json_error_t jerr;
    json_t *root = json_loads(json, 0, &jerr);
    json_t *ke = json_object_get(root, "kraftControllerEpoch");
    bool newer = json_is_integer(ke) && json_integer_value(ke) > w->cfg.controller_epoch;
    json_decref(root);
    return newer;
}

/* Our own claim, made earlier by this writer, still stands (read again after a lost session, or a
 * retry after the claim landed): /controller holds exactly what we wrote (its timestamp included)
 * and /controller_epoch has not moved since. Claiming over it again (a new /controller_epoch for the
 * brokers after the session loss) takes nothing from another controller, so the epoch rule does not
 * refuse it. */
static bool still_ours(const km_zkw *w, const claim_call *c)
{
    return w->m.claims > 0 && c->rc[R_CONTROLLER] == ZOK && c->rc[R_CONTROLLER_EPOCH] == ZOK &&
           c->data[R_CONTROLLER] && !strcmp(c->data[R_CONTROLLER], w->ctrl_json) &&
           c->st[R_CONTROLLER_EPOCH].version == w->ctrl_epoch_version && c->data[R_CONTROLLER_EPOCH] &&
           strtol(c->data[R_CONTROLLER_EPOCH], NULL, 10) == w->zk_epoch;
}

static void on_claim_multi(int rc, const void *data);

/* The record of this claim rides in the claim's multi, at the version the claim read. */
static int record_op(km_zkw *w, claim_call *c, zoo_op_t *op)
{
    char owner[256];
    json_t *o = json_string(w->claim_owner);
    char *quoted = o ? json_dumps(o, JSON_ENCODE_ANY) : NULL;
    snprintf(owner, sizeof owner, "%s", quoted ? quoted : "\"?\"");
    free(quoted);
    json_decref(o);
    int len = snprintf(c->record, sizeof c->record,
                       "{\"version\":1,\"instance\":%s,\"controller_epoch\":%d,\"kraft_controller_id\":%d,"
                       "\"kraft_controller_epoch\":%d,\"since_ms\":%lld}", owner, w->zk_epoch + 1, w->cfg.controller_id,
                       w->cfg.controller_epoch, (long long)zk_wall_ms());
    if (w->record_version >= 0)
        zoo_set_op_init(op, w->claim_record, c->record, len, w->record_version, &c->record_stat);
    else
        zoo_create_op_init(op, w->claim_record, c->record, len, zk_session_acl(&w->sess, w->claim_record), 0, NULL, 0);
    return 1;
}

static void send_claim(km_zkw *w)
{
    claim_call *c = call_new(w, 1);
    if (!c)
        return fail_call(w, ZSYSTEMERROR, "claim (out of memory)");
    snprintf(c->payload, sizeof c->payload, "%d", w->zk_epoch + 1);
    snprintf(w->ctrl_json, sizeof w->ctrl_json,
             "{\"version\":2,\"brokerid\":%d,\"timestamp\":\"%lld\",\"kraftControllerEpoch\":%d}",
             w->cfg.controller_id, (long long)zk_wall_ms(), w->cfg.controller_epoch);
    int n = 0;
    if (w->epoch_exists)
        zoo_set_op_init(&c->ops[n++], "/controller_epoch", c->payload, (int)strlen(c->payload),
                        w->ctrl_epoch_version, &c->set_stat);
    else
        zoo_create_op_init(&c->ops[n++], "/controller_epoch", c->payload, (int)strlen(c->payload),
                           zk_session_acl(&w->sess, "/controller_epoch"), 0, NULL, 0);
    if (w->ctrl_exists)
        zoo_delete_op_init(&c->ops[n++], "/controller", w->ctrl_version);
    zoo_create_op_init(&c->ops[n++], "/controller", w->ctrl_json, (int)strlen(w->ctrl_json),
                       zk_session_acl(&w->sess, "/controller"), 0, NULL, 0);
    if (w->claim_record)
        n += record_op(w, c, &c->ops[n]);
    c->waiting = n; /* op count, kept for on_claim_multi */
    w->step = CL_CLAIM;
    if (zoo_amulti(w->sess.zh, n, c->ops, c->res, on_claim_multi, c) != ZOK) {
        call_free(c);
        lost(w, CL_VERIFY_CLAIM);
    }
}

static void on_claim_multi(int rc, const void *data)
{
    claim_call *c = (claim_call *)data;
    km_zkw *w = c->w;
    int n = c->waiting, failed = zkw_failed_op(c->res, n);
    bool is_stale = stale(c, rc);
    int new_version = w->epoch_exists ? c->set_stat.version : 0;
    call_free(c);
    if (is_stale)
        return;
    if (is_loss(rc))
        return lost(w, CL_VERIFY_CLAIM);
    if (rc == ZOK) {
        w->ctrl_epoch_version = new_version;
        w->zk_epoch++;
        w->m.claims++;
        zkw_log(w, KM_LOG_INFO, "zk claim: /controller_epoch is now %d (zkVersion %d)", w->zk_epoch, new_version);
        return sync_then(w, CL_MIG_READ);
    }
    /* After a lost ack our own first attempt makes the resend fail: verify before deciding. */
    zkw_log(w, KM_LOG_INFO, "zk claim: claim multi failed at op %d: %s; verifying", failed, zerror(rc));
    sync_then(w, CL_VERIFY_CLAIM);
}

/* Did the claim multi we sent land (lost ack)? Compare exactly with what we wrote. */
static void verify_claim(km_zkw *w, claim_call *c)
{
    char want[32];
    snprintf(want, sizeof want, "%d", w->zk_epoch + 1);
    if (c->rc[0] == ZOK && c->rc[1] == ZOK && !strcmp(c->data[0], want) && !strcmp(c->data[1], w->ctrl_json)) {
        w->ctrl_epoch_version = c->st[0].version;
        w->zk_epoch++;
        w->m.claims++;
        zkw_log(w, KM_LOG_INFO, "zk claim: our claim had landed (lost ack); /controller_epoch %d zkVersion %d",
                w->zk_epoch, w->ctrl_epoch_version);
        return sync_then(w, CL_MIG_READ);
    }
    fail_call(w, ZBADVERSION, "claim (someone else changed /controller or /controller_epoch)");
}

/* The guard's facts from the claim's first read (every rc is ZOK or ZNONODE). */
static void found_from_reads(const claim_call *c, km_zk_found *f)
{
    memset(f, 0, sizeof *f);
    f->controller_id = f->controller_kraft_epoch = f->migration_epoch = -1;
    f->migration_offset = -1;
    if (c->rc[R_CLUSTER_ID] == ZOK)
        zk_found_cluster_id(f, c->data[R_CLUSTER_ID]);
    if (c->rc[R_CONTROLLER] == ZOK)
        zk_found_controller(f, c->data[R_CONTROLLER], c->st[R_CONTROLLER].ephemeralOwner);
    f->has_controller_epoch = c->rc[R_CONTROLLER_EPOCH] == ZOK;
    if (c->rc[R_MIGRATION] == ZOK)
        zk_found_migration(f, c->data[R_MIGRATION]);
    f->brokers = c->rc[R_BROKER_IDS] == ZOK ? c->st[R_BROKER_IDS].numChildren : 0;
    f->topics = c->rc[R_TOPICS] == ZOK ? c->st[R_TOPICS].numChildren : 0;
}

static void claim_wait_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)loop; (void)revents;
    km_zkw *w = t->data;
    if (w->state == KM_ZKW_CLAIMING && w->sess.zh) {
        w->step = CL_SYNC;
        resume(w);
    }
}

void zkw_claim_wait_stop(km_zkw *w)
{
    if (w->sess.loop && ev_is_active(&w->claim_wait))
        ev_timer_stop(w->sess.loop, &w->claim_wait);
}

/* Nothing written yet; the same claim starts over once the log has moved on (the first wait and every 20th
 * are logged: Kafka's driver moves /migration every 500 ms, so a few waits are ordinary). */
static void wait_then_claim(km_zkw *w, const char *why)
{
    if (w->claim_waits++ % 20 == 0)
        zkw_log(w, KM_LOG_INFO, "zk claim: %s (wait %d)", why, w->claim_waits);
    zkw_claim_wait_stop(w);
    ev_timer_init(&w->claim_wait, claim_wait_cb, 0.5, 0.);
    w->claim_wait.data = w;
    ev_timer_start(w->sess.loop, &w->claim_wait);
}

/* The caller's guard may refuse the claim for good: nothing has been written yet. */
static bool guard_refuses(km_zkw *w, const claim_call *c)
{
    if (!w->cfg.guard)
        return false;
    km_zk_found f;
    found_from_reads(c, &f);
    char why[sizeof w->fence_reason];
    int verdict = w->cfg.guard(w, &f, why, sizeof why, w->cfg.ctx);
    if (!verdict) {
        w->claim_waits = 0;
        return false;
    }
    if (verdict > 0)
        return wait_then_claim(w, why), true;
    w->state = KM_ZKW_REFUSED;
    snprintf(w->fence_reason, sizeof w->fence_reason, "%s", why);
    zkw_log(w, KM_LOG_INFO, "zk claim refused: %s", w->fence_reason); /* the caller reports it, once */
    zkw_emit(w, KM_ZKW_EV_REFUSED);
    return true;
}

/* Read only (diff): the guard hears what a claim would find, and nothing is claimed. */
static void probed(km_zkw *w, const claim_call *c)
{
    km_zk_found f;
    found_from_reads(c, &f);
    char why[sizeof w->fence_reason];
    if (w->cfg.guard)
        w->cfg.guard(w, &f, why, sizeof why, w->cfg.ctx);
    w->state = KM_ZKW_READY;
    w->step = CL_DONE;
    w->claim_attempts = 0;
    zkw_emit(w, KM_ZKW_EV_CLAIMED);
}

/* /controller_epoch holds what the last kmproxy claim wrote (the record says which), or a writer
 * outside kmproxy claimed since - a KRaft controller's migration driver, an operator's tool (`kmproxy
 * zk sync` included: it keeps no record) - or the active instance found one moving /migration alone
 * and marked the record. Claiming over it would make the two fight (each claim fences the other),
 * so we stop: FENCED for good, km_zkw_fenced_by_foreign() and km_zkw_claim_refused() set. A single
 * instance decides the same as HA does, deliberately: it cannot tell a finished foreign writer
 * from a live one, so an operator looks and deletes the record (docs/runbook.md). No record yet:
 * the first claim of this cluster by a kmproxy that keeps one. */
static bool foreign_since_last_claim(km_zkw *w, const claim_call *c)
{
    w->record_version = c->rc[R_RECORD] == ZOK ? c->st[R_RECORD].version : -1;
    if (!w->claim_record || c->rc[R_RECORD] != ZOK)
        return false;
    json_error_t jerr;
    json_t *rec = json_loads(c->data[R_RECORD] ? c->data[R_RECORD] : "", 0, &jerr);
    json_t *ep = json_object_get(rec, "controller_epoch");
    long long recorded = json_is_integer(ep) ? (long long)json_integer_value(ep) : -1;
    const char *by = json_string_value(json_object_get(rec, "instance"));
    long long now = c->rc[R_CONTROLLER_EPOCH] == ZOK ? strtoll(c->data[R_CONTROLLER_EPOCH], NULL, 10) : -1;
    const char *marked = json_string_value(json_object_get(rec, "foreign_writer")); /* zk_recover.c */
    /* a newer KRaft leader's own claim that our log has not shown yet: decide_claim waits for the log */
    bool newer = w->cfg.wait_for_newer_leader && c->rc[R_CONTROLLER] == ZOK && c->data[R_CONTROLLER] &&
                 newer_leader(w, c->data[R_CONTROLLER]);
    bool foreign = marked || (recorded != now && !leader_own_claim(w, c) && !newer);
    w->foreign = w->claim_refused = foreign;
    if (marked)
        zkw_fence(w, "a writer outside %s owns ZooKeeper: %.120s, the active instance then, recorded in %s: "
                  "%.300s; not claiming over it", zkw_outside(w), by ? by : "?", w->claim_record, marked);
    else if (foreign)
        zkw_fence(w, "a writer outside %s owns ZooKeeper: /controller_epoch is %lld (/controller: %.150s) "
                  "but the last kmproxy claim, recorded in %s by %.120s, was epoch %lld; not claiming over it",
                  zkw_outside(w), now, c->rc[R_CONTROLLER] == ZOK ? c->data[R_CONTROLLER] : "absent",
                  w->claim_record, by ? by : "?", recorded);
    json_decref(rec);
    return foreign;
}

static void refuse_claim(km_zkw *w)
{
    w->state = KM_ZKW_REFUSED;
    w->claim_refused = true;
    zkw_log(w, KM_LOG_ERROR, "zk claim refused: %s", w->fence_reason);
    zkw_emit(w, KM_ZKW_EV_REFUSED);
}

static void on_parent(int rc, const char *name, const void *data)
{
    (void)rc; (void)name; (void)data; /* ZNODEEXISTS is the usual answer; the claim's multi says the rest */
}

/* The record's first create needs its parents: the election makes them under HA, nothing does for a
 * single instance. One session answers in order, so they exist before the claim's multi runs. */
static void create_record_parents(km_zkw *w)
{
    const char *p = w->claim_record;
    for (const char *slash = strchr(p + 1, '/'); slash; slash = strchr(slash + 1, '/')) {
        char prefix[512];
        snprintf(prefix, sizeof prefix, "%.*s", (int)(slash - p), p);
        zoo_acreate(w->sess.zh, prefix, NULL, -1, zk_session_acl(&w->sess, prefix), 0, on_parent, NULL);
    }
}

static void decide_claim(km_zkw *w, claim_call *c)
{
    for (int i = 0; i < CLAIM_READS; i++)
        if (c->rc[i] != ZOK && c->rc[i] != ZNONODE) {
            char what[64];
            snprintf(what, sizeof what, "read %s", CLAIM_PATHS[i]);
            return fail_call(w, c->rc[i], what);
        }
    if (w->cfg.read_only)
        return probed(w, c);
    if (foreign_since_last_claim(w, c))
        return;
    if (guard_refuses(w, c))
        return;
    w->ctrl_exists = c->rc[0] == ZOK;
    w->ctrl_version = w->ctrl_exists ? c->st[0].version : -1;
    /* the claim record (foreign_since_last_claim said: ours), or our own claim, still standing */
    bool takeover = leader_own_claim(w, c);
    bool handover = (w->claim_record && c->rc[R_RECORD] == ZOK) || still_ours(w, c) || takeover;
    if (takeover)
        zkw_log(w, KM_LOG_INFO, "zk claim: /controller holds KRaft leader %d's own claim at epoch %d (its migration "
                "driver's): taking it over with a new /controller_epoch", w->cfg.controller_id, w->cfg.controller_epoch);
    if (w->ctrl_exists && check_controller(w, c->data[0], handover)) {
        if (w->cfg.wait_for_newer_leader && newer_leader(w, c->data[0]))
            return wait_then_claim(w, w->fence_reason);
        return refuse_claim(w);
    }
    w->epoch_exists = c->rc[1] == ZOK;
    w->ctrl_epoch_version = w->epoch_exists ? c->st[1].version : -1;
    w->zk_epoch = w->epoch_exists ? (int32_t)strtol(c->data[1], NULL, 10) : 0;
    if (w->claim_record && w->record_version < 0)
        create_record_parents(w);
    send_claim(w);
}

int km_zk_migration_json(char *out, size_t cap, int32_t ctrl_id, int32_t ctrl_epoch, int64_t offset,
                         int32_t epoch)
{
    int n = snprintf(out, cap,
                     "{\"version\":0,\"kraft_controller_id\":%d,\"kraft_controller_epoch\":%d,"
                     "\"kraft_metadata_offset\":%lld,\"kraft_metadata_epoch\":%d}",
                     ctrl_id, ctrl_epoch, (long long)offset, epoch);
    return n < 0 || (size_t)n >= cap ? -1 : n;
}

static int parse_migration(km_zkw *w, const char *json, int64_t *offset, int32_t *epoch)
{
    json_error_t jerr;
    json_t *root = json_loads(json, 0, &jerr);
    json_t *o = root ? json_object_get(root, "kraft_metadata_offset") : NULL;
    json_t *e = root ? json_object_get(root, "kraft_metadata_epoch") : NULL;
    int rc = json_is_integer(o) && json_is_integer(e) ? 0 : -1;
    if (!rc) {
        *offset = json_integer_value(o);
        *epoch = (int32_t)json_integer_value(e);
    } else {
        zkw_log(w, KM_LOG_ERROR, "zk claim: /migration holds %s: want kraft_metadata_offset/epoch integers", json);
    }
    json_decref(root);
    return rc;
}

static void on_mig_multi(int rc, const void *data);

/* One multi guarded by our /controller_epoch: create or conditionally set /migration. */
static void send_mig(km_zkw *w, bool create, int64_t offset, int32_t epoch, int version)
{
    claim_call *c = call_new(w, 2);
    if (!c)
        return fail_call(w, ZSYSTEMERROR, "/migration write (out of memory)");
    w->mig_len = km_zk_migration_json(w->mig, sizeof w->mig, w->cfg.controller_id, w->cfg.controller_epoch,
                                      offset, epoch);
    w->confirmed_offset = offset;
    w->confirmed_epoch = epoch;
    zoo_check_op_init(&c->ops[0], "/controller_epoch", w->ctrl_epoch_version);
    if (create)
        zoo_create_op_init(&c->ops[1], "/migration", w->mig, w->mig_len, zk_session_acl(&w->sess, "/migration"),
                           0, NULL, 0);
    else
        zoo_set_op_init(&c->ops[1], "/migration", w->mig, w->mig_len, version, &c->set_stat);
    c->rc[1] = create;
    w->step = CL_MIG_WRITE;
    if (zoo_amulti(w->sess.zh, 2, c->ops, c->res, on_mig_multi, c) != ZOK) {
        call_free(c);
        lost(w, CL_MIG_VERIFY);
    }
}

static void claimed(km_zkw *w, int version)
{
    w->mig_version = version;
    w->next_check = version;
    w->state = KM_ZKW_READY;
    w->step = CL_DONE;
    w->claim_attempts = 0;
    zkw_log(w, KM_LOG_INFO, "zk claim: done; /migration zkVersion %d at offset %lld epoch %d", version,
            (long long)w->confirmed_offset, w->confirmed_epoch);
    zkw_emit(w, KM_ZKW_EV_CLAIMED);
    zkw_pump(w);
}

static void on_mig_multi(int rc, const void *data)
{
    claim_call *c = (claim_call *)data;
    km_zkw *w = c->w;
    bool created = c->rc[1], is_stale = stale(c, rc);
    int failed = zkw_failed_op(c->res, 2), version = created ? 0 : c->set_stat.version;
    call_free(c);
    if (is_stale)
        return;
    if (is_loss(rc))
        return lost(w, CL_MIG_VERIFY);
    if (rc == ZOK)
        return claimed(w, version);
    if (failed == 0)
        return zkw_fence(w, "/controller_epoch moved while we wrote /migration: another controller claimed (%s)",
                         zerror(rc));
    sync_then(w, CL_MIG_VERIFY);
}

static void after_mig_read(km_zkw *w, claim_call *c)
{
    if (c->rc[0] == ZNONODE)
        return send_mig(w, true, -1, -1, -1);
    if (c->rc[0] != ZOK)
        return fail_call(w, c->rc[0], "read /migration");
    int64_t offset;
    int32_t epoch;
    if (parse_migration(w, c->data[0], &offset, &epoch))
        return zkw_fence(w, "/migration is not Kafka's migration znode: %.200s", c->data[0]);
    send_mig(w, false, offset, epoch, c->st[0].version);
}

/* A /migration write whose outcome we do not know: ours iff it holds exactly what we wrote. */
static void after_mig_verify(km_zkw *w, claim_call *c)
{
    if (c->rc[0] == ZOK && c->len[0] == w->mig_len && !memcmp(c->data[0], w->mig, (size_t)w->mig_len)) {
        w->m.lost_acks_adopted++;
        zkw_log(w, KM_LOG_INFO, "zk claim: our /migration write had landed (lost ack): adopting zkVersion %d",
                c->st[0].version);
        return claimed(w, c->st[0].version);
    }
    if (c->rc[0] == ZNONODE)
        return sync_then(w, CL_MIG_READ);
    zkw_fence(w, "/migration was written by someone else during our claim: it holds %.200s (zkVersion %d)",
              c->rc[0] == ZOK ? c->data[0] : zerror(c->rc[0]), c->rc[0] == ZOK ? c->st[0].version : -1);
}

static void after_reads(km_zkw *w, claim_call *c)
{
    bool loss = false;
    for (int i = 0; i < CLAIM_READS; i++)
        loss |= is_loss(c->rc[i]);
    if (loss)
        return lost(w, w->step);
    switch (w->step) {
    case CL_READ: return decide_claim(w, c);
    case CL_VERIFY_CLAIM: return verify_claim(w, c);
    case CL_MIG_READ: return after_mig_read(w, c);
    case CL_MIG_VERIFY: return after_mig_verify(w, c);
    default: return;
    }
}

/* Runs the reads of w->step; only ever called once its sync() has answered. */
static void claim_step(km_zkw *w)
{
    if (w->state != KM_ZKW_CLAIMING || !w->sess.zh)
        return;
    switch (w->step) {
    case CL_READ: return read_claim_paths(w);
    case CL_VERIFY_CLAIM: return read_two(w, "/controller_epoch", "/controller");
    case CL_MIG_READ: return read_two(w, "/migration", NULL);
    case CL_MIG_VERIFY: return read_two(w, "/migration", NULL);
    default: return;
    }
}

/* (Re)starts from w->step after a sync: a read step reads again, a write step whose outcome is
 * unknown verifies instead of blindly resending. */
static void resume(km_zkw *w)
{
    if (w->state != KM_ZKW_CLAIMING || !w->sess.zh)
        return;
    switch (w->step) {
    case CL_SYNC: case CL_READ: return sync_then(w, CL_READ);
    case CL_CLAIM: case CL_VERIFY_CLAIM: return sync_then(w, CL_VERIFY_CLAIM);
    case CL_MIG_READ: case CL_MIG_CREATE: return sync_then(w, CL_MIG_READ);
    case CL_MIG_WRITE: case CL_MIG_VERIFY: return sync_then(w, CL_MIG_VERIFY);
    case CL_DONE: return;
    }
}

void zkw_claim_start(km_zkw *w)
{
    w->state = KM_ZKW_CLAIMING;
    w->recover_wanted = false;
    w->step = CL_SYNC;
    resume(w);
}

void zkw_claim_resume(km_zkw *w)
{
    if (w->state == KM_ZKW_CLAIMING && w->recover_wanted) {
        w->recover_wanted = false;
        resume(w);
    }
}
