/* The observer's connection to the quorum: finding the leader, one request at a time,
 * timeouts, backoff, and Kafka's common handling of leader/epoch answers. */
#include "quorum_internal.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <time.h>
#include <unistd.h>

#define Q_CLIENT_ID "kmproxy-quorum"

void q_log(const km_quorum *q, const char *fmt, ...)
{
    if (q->cfg.quiet && !q->h.on_log)
        return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (q->h.on_log)
        q->h.on_log((km_quorum *)q, line, q->ud);
    else
        fprintf(stderr, "kmproxy quorum: %s\n", line);
}

const char *q_error_name(int16_t code)
{
    switch (code) {
    case QE_NONE: return "NONE";
    case QE_UNKNOWN_TOPIC_OR_PARTITION: return "UNKNOWN_TOPIC_OR_PARTITION";
    case QE_NOT_LEADER_OR_FOLLOWER: return "NOT_LEADER_OR_FOLLOWER";
    case QE_BROKER_NOT_AVAILABLE: return "BROKER_NOT_AVAILABLE";
    case QE_TOPIC_AUTHORIZATION_FAILED: return "TOPIC_AUTHORIZATION_FAILED";
    case QE_CLUSTER_AUTHORIZATION_FAILED: return "CLUSTER_AUTHORIZATION_FAILED";
    case QE_UNSUPPORTED_VERSION: return "UNSUPPORTED_VERSION";
    case QE_INVALID_REQUEST: return "INVALID_REQUEST";
    case QE_FENCED_LEADER_EPOCH: return "FENCED_LEADER_EPOCH";
    case QE_UNKNOWN_LEADER_EPOCH: return "UNKNOWN_LEADER_EPOCH";
    case QE_SNAPSHOT_NOT_FOUND: return "SNAPSHOT_NOT_FOUND";
    case QE_POSITION_OUT_OF_RANGE: return "POSITION_OUT_OF_RANGE";
    case QE_INCONSISTENT_CLUSTER_ID: return "INCONSISTENT_CLUSTER_ID";
    default: return "error";
    }
}

double q_now(const km_quorum *q) { return ev_now(q->loop); }

const km_struct_desc *q_sub(const km_struct_desc *sd, const char *field)
{
    for (uint16_t i = 0; i < sd->nfields; i++)
        if (!strcmp(sd->fields[i].name, field))
            return sd->fields[i].sub;
    return NULL;
}

static void stop_timers(km_quorum *q)
{
    ev_timer_stop(q->loop, &q->request_timer);
    ev_timer_stop(q->loop, &q->backoff_timer);
    ev_timer_stop(q->loop, &q->pause_timer);
}

static void drop_conn(km_quorum *q)
{
    ev_timer_stop(q->loop, &q->request_timer);
    ev_timer_stop(q->loop, &q->pause_timer);
    if (q->conn)
        km_net_close(q->conn);
    q->conn = NULL;
    q->inflight_api = -1;
    q_sasl_drop(q);
}

void q_fatal(km_quorum *q, const char *fmt, ...)
{
    km_err why;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why.msg, sizeof why.msg, fmt, ap);
    va_end(ap);
    drop_conn(q);
    stop_timers(q);
    q->phase = Q_FAILED;
    q->fatal = q->st.failed = true;
    q_log(q, "stopped: %s", why.msg);
    if (q->h.on_fatal)
        q->h.on_fatal(q, &why, q->ud);
}

/* ---- endpoints -------------------------------------------------------------------------- */

int km_quorum_parse_hostport(const char *s, char *host, size_t host_len, uint16_t *port, km_err *err)
{
    const char *colon = strrchr(s, ':');
    const char *h = s, *he = colon;
    if (s[0] == '[') {
        const char *rb = strchr(s, ']');
        if (!rb || rb[1] != ':')
            return km_fail(err, "'%s' is not [address]:port", s);
        h = s + 1;
        he = rb;
        colon = rb + 1;
    }
    if (!colon || he == h || (size_t)(he - h) >= host_len)
        return km_fail(err, "'%s' is not host:port", s);
    char *end = NULL;
    long p = strtol(colon + 1, &end, 10);
    if (!colon[1] || *end || p <= 0 || p > 65535)
        return km_fail(err, "'%s': port must be 1-65535", s);
    memcpy(host, h, (size_t)(he - h));
    host[he - h] = '\0';
    *port = (uint16_t)p;
    return 0;
}

void q_learn_endpoint(km_quorum *q, int32_t id, const char *host, int32_t port)
{
    if (id < 0 || port <= 0 || port > 65535 || !host || !*host)
        return;
    q_node *n = NULL;
    for (int i = 0; i < q->n_known && !n; i++)
        if (q->known[i].id == id)
            n = &q->known[i];
    if (!n && q->n_known < Q_MAX_NODES)
        n = &q->known[q->n_known++];
    if (!n)
        return;
    n->id = id;
    snprintf(n->host, sizeof n->host, "%s", host);
    n->port = (uint16_t)port;
}

/* "host:port,..." or, with ids, "id@host:port,...". */
static int parse_list(km_quorum *q, const char *list, bool with_ids, km_err *err)
{
    char *copy = strdup(list), *save = NULL;
    if (!copy)
        return km_fail(err, "quorum: out of memory");
    int rc = 0;
    for (char *tok = strtok_r(copy, ", ", &save); tok && rc == 0; tok = strtok_r(NULL, ", ", &save)) {
        q_node n = { .id = -1 };
        char *at = strchr(tok, '@');
        if (with_ids) {
            char *end = NULL;
            long id = at ? strtol(tok, &end, 10) : -1;
            if (!at || end != at || id < 0 || id > INT32_MAX) {
                rc = km_fail(err, "controller.quorum.voters: '%s' is not id@host:port", tok);
                break;
            }
            n.id = (int32_t)id;
            tok = at + 1;
        }
        if (km_quorum_parse_hostport(tok, n.host, sizeof n.host, &n.port, err) < 0)
            rc = -1;
        else if (q->n_bootstrap == Q_MAX_NODES)
            rc = km_fail(err, "more than %d quorum servers", Q_MAX_NODES);
        else {
            q->bootstrap[q->n_bootstrap++] = n;
            if (with_ids)
                q_learn_endpoint(q, n.id, n.host, n.port);
        }
    }
    free(copy);
    return rc;
}

/* ---- requests ---------------------------------------------------------------------------- */

int q_send(km_quorum *q, int16_t api, int16_t version, const void *body, km_err *err)
{
    km_buf out;
    km_buf_init(&out);
    int32_t corr = ++q->next_correlation;
    int rc = km_frame_request(api, version, corr, Q_CLIENT_ID, body, &out, err);
    if (rc == 0)
        rc = km_net_send(q->conn, out.data, out.len, err);
    km_buf_free(&out);
    if (rc < 0)
        return -1;
    q->inflight_api = api;
    q->inflight_version = version;
    q->inflight_correlation = corr;
    q->sent_at = q_now(q);
    double wait = api == KM_API_FETCH ? q->cfg.fetch_max_wait_ms / 1000.0 : 0;
    ev_timer_set(&q->request_timer, wait + q->cfg.request_timeout_ms / 1000.0, 0.);
    ev_timer_start(q->loop, &q->request_timer);
    return 0;
}

void q_api_versions_request(km_api_versions_request *rq)
{
    km_api_versions_request_init(rq);
    /* both must match [a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])? (ApiVersionsRequest.SOFTWARE_NAME_VERSION_PATTERN) */
    rq->client_software_name = km_cstr("kmproxy");
    rq->client_software_version = km_cstr(KM_SOFTWARE_VERSION);
}

static void send_api_versions(km_quorum *q)
{
    km_api_versions_request rq;
    q_api_versions_request(&rq);
    km_err err;
    q->phase = Q_VERSIONS;
    if (q_send(q, KM_API_API_VERSIONS, Q_API_VERSIONS_V, &rq, &err) < 0)
        q_retry(q, false, err.msg);
}

void q_next_request(km_quorum *q)
{
    km_err err;
    if (q->fatal || !q->conn)
        return;
    if (q_sasl_maybe_reauthenticate(q))
        return; /* the Fetch follows the renewal */
    if (q->paused) {
        q->request_held = true;
        return;
    }
    int rc = q->snap_active ? q_send_fetch_snapshot(q, &err) : q_send_fetch(q, &err);
    if (rc < 0)
        q_retry(q, false, err.msg);
}

/* The highest version both sides know, or -1. */
static int16_t pick_version(const km_api_versions_response *rs, int16_t api, int16_t lo, int16_t hi)
{
    for (int32_t i = 0; i < rs->api_keys.count; i++) {
        const km_api_versions_response_api_version *v = &rs->api_keys.items[i];
        if (v->api_key != api)
            continue;
        int16_t top = v->max_version < hi ? v->max_version : hi;
        return top >= lo && top >= v->min_version ? top : -1;
    }
    return -1;
}

static void on_api_versions(km_quorum *q, const uint8_t *body, size_t len)
{
    km_arena a;
    km_arena_init(&a, 1u << 20);
    km_api_versions_response rs;
    km_err err;
    if (km_decode(&km_api_versions_response_desc, Q_API_VERSIONS_V, body, len, &rs, &a, NULL, &err) < 0) {
        km_arena_free(&a);
        return q_retry(q, true, err.msg);
    }
    q->fetch_v = pick_version(&rs, KM_API_FETCH, 12, 17); /* KRaft's fields start at v12 */
    q->snap_v = pick_version(&rs, KM_API_FETCH_SNAPSHOT, 0, 1);
    int16_t code = rs.error_code;
    if (code != 0 || q->fetch_v < 0 || q->snap_v < 0) {
        km_arena_free(&a);
        char why[1200];
        snprintf(why, sizeof why, "%s:%u: ApiVersions error %d or no Fetch v12+/FetchSnapshot (not a KRaft controller?)",
                 q->target.host, q->target.port, code);
        return q_retry(q, true, why);
    }
    if (q->cfg.sasl.mechanism != KM_SASL_NONE) { /* the first Fetch waits for the exchange */
        q_sasl_begin(q, &rs);
        km_arena_free(&a);
        return;
    }
    km_arena_free(&a);
    q->phase = q->snap_active ? Q_SNAPSHOT : Q_FETCH;
    q_next_request(q);
}

static void on_frame(km_net_conn *c, const uint8_t *payload, size_t len, void *ud)
{
    (void)c;
    km_quorum *q = ud;
    int16_t api = q->inflight_api;
    int16_t v = q->inflight_version;
    km_reader r;
    km_reader_init(&r, payload, len);
    int32_t corr = 0;
    km_err err;
    if (api < 0 || km_parse_response_header(&r, api, api == KM_API_API_VERSIONS ? 0 : v, &corr, &err) < 0 ||
        corr != q->inflight_correlation) {
        char why[1200];
        snprintf(why, sizeof why, "%s:%u: unexpected or bad response (correlation %d, expected %d)%s%s",
                 q->target.host, q->target.port, corr, q->inflight_correlation, api < 0 ? "" : ": ",
                 api < 0 ? "" : err.msg);
        return q_retry(q, false, why);
    }
    ev_timer_stop(q->loop, &q->request_timer);
    q->inflight_api = -1;
    const uint8_t *body = r.p + r.pos;
    size_t blen = km_reader_left(&r);
    if (api == KM_API_API_VERSIONS)
        on_api_versions(q, body, blen);
    else if (api == KM_API_SASL_HANDSHAKE || api == KM_API_SASL_AUTHENTICATE)
        q_on_sasl_response(q, body, blen);
    else if (api == KM_API_FETCH)
        q_on_fetch_response(q, body, blen);
    else
        q_on_fetch_snapshot_response(q, body, blen);
}

static void on_ready(km_net_conn *c, void *ud)
{
    (void)c;
    send_api_versions(ud);
}

static void on_close(km_net_conn *c, const km_err *why, void *ud)
{
    (void)c;
    km_quorum *q = ud;
    q->conn = NULL;
    char msg[1200];
    snprintf(msg, sizeof msg, "connection to %s:%u (node %d) lost: %s", q->target.host, q->target.port, q->target.id,
             why ? why->msg : "closed by the peer");
    /* A leader we could not even reach is forgotten; a dropped one is tried once more. */
    q_retry(q, q->phase == Q_CONNECTING, msg);
}

static const q_node *leader_endpoint(const km_quorum *q)
{
    for (int i = 0; q->leader_id >= 0 && i < q->n_known; i++)
        if (q->known[i].id == q->leader_id)
            return &q->known[i];
    return NULL;
}

static void connect_next(km_quorum *q)
{
    static const km_net_handlers h = { .on_ready = on_ready, .on_frame = on_frame, .on_close = on_close };
    const q_node *n = leader_endpoint(q);
    if (!n) {
        n = &q->bootstrap[q->next_bootstrap];
        q->next_bootstrap = (q->next_bootstrap + 1) % q->n_bootstrap;
    }
    q->target = *n;
    km_net_opts o = { .tls = q->cfg.tls, .tls_name = q->cfg.tls_name,
                      .connect_timeout = q->cfg.request_timeout_ms / 1000.0 };
    km_err err;
    q->phase = Q_CONNECTING;
    q->conn = km_net_connect(q->loop, n->host, n->port, &o, &h, q, &err);
    if (!q->conn)
        q_retry(q, true, err.msg);
}

static void on_pause(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    q_next_request(w->data);
}

static void on_backoff(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    connect_next(w->data);
}

#define Q_RETRY_LOG_EVERY 60.0 /* seconds between two lines of the same failure */

void q_healthy(km_quorum *q)
{
    km_backoff_reset(&q->backoff);
    memset(q->retry_notes, 0, sizeof q->retry_notes);
    q->answered_at = q_now(q);
    q->st.last_error[0] = '\0';
    q->st.unauthorized = false;
}

/* Logs a retry line unless the same line went out less than a minute ago (then it is counted, and
 * the count rides on its next line).  Several notes, because retries alternate between the
 * bootstrap servers and the leader, each with its own address in the line. */
static void log_retry(km_quorum *q, const char *line)
{
    double now = q_now(q);
    struct q_retry_note *same = NULL, *oldest = &q->retry_notes[0];
    for (size_t i = 0; !same && i < sizeof q->retry_notes / sizeof q->retry_notes[0]; i++) {
        struct q_retry_note *n = &q->retry_notes[i];
        if (n->line[0] && !strncmp(n->line, line, sizeof n->line - 1))
            same = n;
        else if (n->logged_at < oldest->logged_at)
            oldest = n;
    }
    if (same && now - same->logged_at < Q_RETRY_LOG_EVERY) {
        same->repeats++;
        return;
    }
    if (same && same->repeats)
        q_log(q, "%s (and %u more times in the last %.0f s)", line, same->repeats, now - same->logged_at);
    else
        q_log(q, "%s", line);
    struct q_retry_note *note = same ? same : oldest; /* a new line takes the oldest note's place */
    size_t len = strnlen(line, sizeof note->line - 1);
    memcpy(note->line, line, len);
    note->line[len] = '\0';
    note->logged_at = now;
    note->repeats = 0;
}

void q_retry(km_quorum *q, bool forget_leader, const char *why)
{
    if (q->fatal)
        return;
    drop_conn(q);
    q->st.fetch_errors++;
    char line[1400];
    if (forget_leader && q->leader_id >= 0) {
        snprintf(line, sizeof line, "lost leader %d (epoch %d): %s; asking the bootstrap servers", q->leader_id,
                 q->epoch, why);
        q->leader_id = -1;
        q->st.leader_id = -1;
    } else {
        snprintf(line, sizeof line, "%s; retrying", why);
    }
    log_retry(q, line);
    snprintf(q->st.last_error, sizeof q->st.last_error, "%s", why);
    q->phase = Q_IDLE;
    ev_timer_stop(q->loop, &q->backoff_timer);
    ev_timer_set(&q->backoff_timer, km_backoff_next(&q->backoff), 0.);
    ev_timer_start(q->loop, &q->backoff_timer);
}

static void on_request_timeout(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    km_quorum *q = w->data;
    char why[1200];
    snprintf(why, sizeof why, "%s:%u (node %d) did not answer within %.1f s", q->target.host, q->target.port,
             q->target.id, q_now(q) - q->sent_at);
    q_retry(q, true, why);
}

/* ---- leader and epoch (KafkaRaftClient.maybeHandleCommonResponse / maybeTransition) ---------- */

static void become_follower(km_quorum *q, int32_t leader, int32_t epoch)
{
    bool changed = leader != q->leader_id || epoch != q->epoch;
    q->epoch = epoch;
    q->leader_id = leader;
    q->st.leader_id = leader;
    q->st.leader_epoch = epoch;
    if (!changed)
        return;
    q->st.leader_changes++;
    q_log(q, "leader is now node %d at epoch %d", leader, epoch);
    if (q->snap_active) /* a snapshot download belongs to the leader state it started in */
        q_snapshot_abandon(q);
}

/* Reconnects to the leader now known (no backoff), or backs off when still unknown. */
static void go_to_leader(km_quorum *q, const char *why)
{
    const q_node *n = leader_endpoint(q);
    if (n && (n->id != q->target.id || strcmp(n->host, q->target.host) || n->port != q->target.port)) {
        drop_conn(q);
        connect_next(q);
        return;
    }
    q_retry(q, false, why); /* endpoint unknown: the bootstrap servers are asked in turn */
}

int q_common_response(km_quorum *q, int16_t error, int32_t leader_id, int32_t epoch)
{
    char why[1200];
    snprintf(why, sizeof why, "%s:%u answered error %d (leader %d, epoch %d)", q->target.host, q->target.port,
             error, leader_id, epoch);
    if (error == QE_NONE && leader_id >= 0 && epoch >= q->epoch) {
        /* Only the leader answers a Fetch without error (validateLeaderOnlyRequest), so the
         * server dialled is the leader: remember where it is, whatever name it was dialled by. */
        q_learn_endpoint(q, leader_id, q->target.host, q->target.port);
        q->target.id = leader_id;
    }
    if (epoch < q->epoch || error == QE_UNKNOWN_LEADER_EPOCH) {
        q_retry(q, q->target.id != q->leader_id, why); /* stale answer: ask again */
        return 1;
    }
    if (epoch > q->epoch || error == QE_FENCED_LEADER_EPOCH || error == QE_NOT_LEADER_OR_FOLLOWER) {
        bool newer = epoch > q->epoch;
        if (newer || (leader_id >= 0 && q->leader_id < 0))
            become_follower(q, leader_id, epoch);
        if ((error == QE_NONE || (error == QE_FENCED_LEADER_EPOCH && newer)) && leader_id >= 0 &&
            q->target.id == leader_id) {
            q_next_request(q); /* the leader itself moved on (it resigned and won again): ask it at once */
            return 1;
        }
        if (leader_id < 0 || q->target.id == leader_id) /* no leader elected yet, or it says it is not */
            q_retry(q, leader_id < 0, why);
        else
            go_to_leader(q, why);
        return 1;
    }
    if (epoch == q->epoch && leader_id >= 0 && q->leader_id < 0) {
        become_follower(q, leader_id, epoch);
        if (error == QE_NONE && q->target.id == leader_id)
            return 0; /* an observer learns the leader and appends in the same Fetch */
        go_to_leader(q, why);
        return 1;
    }
    if (error == QE_BROKER_NOT_AVAILABLE) {
        q_retry(q, false, why);
        return 1;
    }
    return 0;
}

bool q_top_level_ok(km_quorum *q, const char *api, int16_t error, bool has_partition)
{
    if (error == QE_INCONSISTENT_CLUSTER_ID) {
        q_fatal(q, "%s:%u refuses cluster.id %s (INCONSISTENT_CLUSTER_ID)", q->target.host, q->target.port,
                q->cfg.cluster_id ? q->cfg.cluster_id : "(none)");
        return false;
    }
    if (error == QE_CLUSTER_AUTHORIZATION_FAILED) {
        char why[600];
        snprintf(why, sizeof why, "%s:%u refuses %s: CLUSTER_AUTHORIZATION_FAILED: the controller listener's "
                 "principal for kmproxy needs ALLOW CLUSTER_ACTION on the CLUSTER resource (see docs/quorum.md)",
                 q->target.host, q->target.port, api);
        if (q->cfg.unauthorized_fatal) {
            q_fatal(q, "%s", why);
            return false;
        }
        q_retry(q, false, why);
        q->st.unauthorized = true;
        ev_timer_stop(q->loop, &q->backoff_timer); /* no faster than the cap until the ACL is granted */
        ev_timer_set(&q->backoff_timer, q->cfg.retry_backoff_max_ms / 1000.0, 0.);
        ev_timer_start(q->loop, &q->backoff_timer);
        return false;
    }
    if (error != QE_NONE || !has_partition) {
        char why[300];
        snprintf(why, sizeof why, "%s from %s:%u: top-level error %d (%s) or not exactly __cluster_metadata-0", api,
                 q->target.host, q->target.port, error, q_error_name(error));
        q_retry(q, false, why);
        return false;
    }
    return true;
}

/* Batches of NoOpRecords alone (the active controller appends one every metadata.max.idle.interval.ms) are
 * delivered too, as an empty delta at the new position: ZooKeeper's /migration then records the log's position
 * as Kafka's own driver does, so `verify --zookeeper` does not take an idle cluster for a stalled writer.
 * Nothing applied since the last delivery (the delta's position is -1) delivers nothing. */
void q_deliver(km_quorum *q)
{
    q->st.applied_offset = km_image_offset(q->img);
    if (km_delta_offset(q->delta) < 0 || km_image_in_transaction(q->img))
        return;
    if (q->h.on_applied)
        q->h.on_applied(q, q->delta, q->ud);
    km_delta_clear(q->delta);
}

/* ---- lifetime ---------------------------------------------------------------------------------- */

void km_quorum_config_init(km_quorum_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->node_id = -1;
}

static void fill_defaults(km_quorum_config *c)
{
    if (c->fetch_max_wait_ms <= 0)
        c->fetch_max_wait_ms = 500;
    if (c->request_timeout_ms <= 0)
        c->request_timeout_ms = 2000;
    if (c->retry_backoff_ms <= 0)
        c->retry_backoff_ms = 20;
    if (c->retry_backoff_max_ms <= 0)
        c->retry_backoff_max_ms = 1000;
    if (!c->buffer_max_bytes)
        c->buffer_max_bytes = 64u << 20;
    if (!c->snapshot_max_bytes)
        c->snapshot_max_bytes = (size_t)4 << 30;
    if (c->snapshot_chunk_bytes <= 0)
        c->snapshot_chunk_bytes = Q_SNAPSHOT_CHUNK_DEFAULT;
}

static int init_position(km_quorum *q, km_err *err)
{
    const char *cid = km_image_cluster_id(q->img);
    if (q->cfg.cluster_id && cid && strcmp(cid, q->cfg.cluster_id))
        return km_fail(err, "cluster.id %s differs from the image's %s", q->cfg.cluster_id, cid);
    if (q->cfg.cluster_id && !cid && km_image_set_cluster_id(q->img, q->cfg.cluster_id, err) < 0)
        return -1;
    q->applied_next = km_image_offset(q->img) + 1;
    q->applied_epoch = km_image_offset(q->img) >= 0 ? km_image_epoch(q->img) : 0;
    q_reset_epochs(q, km_image_offset(q->img) >= 0 ? q->applied_epoch : -1, q->applied_next);
    q->st.applied_offset = km_image_offset(q->img);
    return 0;
}

static km_quorum *alloc_quorum(struct ev_loop *loop, const km_quorum_config *cfg, km_image *img,
                               const km_quorum_handlers *h, void *ud)
{
    km_quorum *q = calloc(1, sizeof *q);
    if (!q)
        return NULL;
    q->loop = loop;
    q->cfg = *cfg;
    fill_defaults(&q->cfg);
    q->img = img;
    q->h = *h;
    q->ud = ud;
    q->leader_id = -1;
    q->hw = q->leader_hw = -1;
    q->inflight_api = -1;
    q->spool_fd = -1;
    q->st = (km_quorum_stats){ .leader_id = -1, .leader_epoch = -1, .high_watermark = -1, .applied_offset = -1 };
    km_buf_init(&q->buf);
    km_buf_init(&q->snap);
    ev_timer_init(&q->request_timer, on_request_timeout, 1., 0.);
    ev_timer_init(&q->backoff_timer, on_backoff, 0., 0.);
    ev_timer_init(&q->pause_timer, on_pause, 0., 0.);
    q->request_timer.data = q->backoff_timer.data = q->pause_timer.data = q;
    q_sasl_init_timer(q);
    km_backoff_init(&q->backoff, q->cfg.retry_backoff_ms / 1000.0, q->cfg.retry_backoff_max_ms / 1000.0,
                    (uint64_t)time(NULL) ^ (uint64_t)(uintptr_t)q);
    q->delta = km_delta_new();
    return q;
}

/* Copies of the config strings kept after parsing; a spool directory must be writable now. */
static int keep_strings(km_quorum *q, const km_quorum_config *cfg, km_err *err)
{
    const char *src[3] = { cfg->cluster_id, cfg->tls_name, cfg->snapshot_dir };
    const char **dst[3] = { &q->cfg.cluster_id, &q->cfg.tls_name, &q->cfg.snapshot_dir };
    size_t total = 0;
    for (int i = 0; i < 3; i++)
        total += src[i] ? strlen(src[i]) + 1 : 0;
    if (total && !(q->cfg_strings = malloc(total)))
        return km_fail(err, "quorum: out of memory");
    for (int i = 0, at = 0; i < 3; i++)
        if (src[i]) {
            *dst[i] = memcpy(q->cfg_strings + at, src[i], strlen(src[i]) + 1);
            at += (int)strlen(src[i]) + 1;
        }
    if (cfg->snapshot_dir && access(cfg->snapshot_dir, W_OK | X_OK) != 0)
        return km_fail(err, "snapshot directory %s: %s", cfg->snapshot_dir, strerror(errno));
    return 0;
}

static int keep_credentials(km_quorum *q, const km_quorum_config *cfg, km_err *err)
{
    if (cfg->sasl.mechanism == KM_SASL_NONE)
        return 0;
    const char *user = cfg->sasl.username ? cfg->sasl.username : "", *pass = cfg->sasl.password ? cfg->sasl.password : "";
    if (!*user || strlen(user) >= sizeof q->sasl_user || strlen(pass) >= sizeof q->sasl_pass)
        return km_fail(err, "quorum: SASL/%s needs a user name and a password shorter than %zu bytes",
                       km_sasl_mech_name(cfg->sasl.mechanism), sizeof q->sasl_user);
    strcpy(q->sasl_user, user);
    strcpy(q->sasl_pass, pass);
    return 0;
}

km_quorum *km_quorum_new(struct ev_loop *loop, const km_quorum_config *cfg, km_image *img,
                         const km_quorum_handlers *h, void *ud, km_err *err)
{
    km_quorum *q = alloc_quorum(loop, cfg, img, h, ud);
    if (!q || !q->delta) {
        km_quorum_free(q);
        km_fail(err, "quorum: out of memory");
        return NULL;
    }
    q->cfg.bootstrap_servers = q->cfg.voters = q->cfg.tls_name = NULL; /* parsed below; not kept */
    q->cfg.cluster_id = q->cfg.snapshot_dir = NULL;
    q->cfg.sasl.username = q->cfg.sasl.password = NULL;
    int rc = 0;
    if (cfg->voters && *cfg->voters)
        rc = parse_list(q, cfg->voters, true, err);
    if (rc == 0 && cfg->bootstrap_servers && *cfg->bootstrap_servers) {
        q->n_bootstrap = 0; /* KIP-853: bootstrap servers replace the voters for discovery (their endpoints stay known) */
        rc = parse_list(q, cfg->bootstrap_servers, false, err);
    }
    if (rc == 0 && q->n_bootstrap == 0)
        rc = km_fail(err, "neither controller.quorum.bootstrap.servers nor controller.quorum.voters names a server");
    if (rc == 0)
        rc = keep_strings(q, cfg, err);
    if (rc == 0)
        rc = keep_credentials(q, cfg, err);
    if (rc == 0)
        rc = init_position(q, err);
    if (rc < 0) {
        km_quorum_free(q);
        return NULL;
    }
    /* A random first server, as KafkaRaftClient picks one: instances do not all load the first. */
    q->next_bootstrap = (int)(((uint64_t)time(NULL) ^ (uint64_t)getpid() ^ (uint64_t)(uintptr_t)q) % (uint64_t)q->n_bootstrap);
    connect_next(q);
    return q;
}

void km_quorum_free(km_quorum *q)
{
    if (!q)
        return;
    drop_conn(q);
    stop_timers(q);
    q_log_free(q);
    km_delta_free(q->delta);
    free(q->cfg_strings);
    explicit_bzero(q->sasl_pass, sizeof q->sasl_pass);
    free(q);
}

void km_quorum_set_paused(km_quorum *q, bool paused)
{
    q->paused = paused;
    if (!paused && q->request_held) {
        q->request_held = false;
        if (q->conn && q->inflight_api < 0 && (q->phase == Q_FETCH || q->phase == Q_SNAPSHOT))
            q_next_request(q);
    }
}

/* A Fetch answer comes at once while records wait, or after up to MaxWaitMs (500 ms by default) of long
 * poll; a slow link or leader shows past that. */
static const double FETCH_LATENCY_BOUNDS[KM_QUORUM_LATENCY_BUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                                      0.25, 0.5, 0.75, 1, 2.5, 5, 10};

void q_observe_fetch_latency(km_quorum *q, double seconds)
{
    size_t i = 0;
    while (i < KM_QUORUM_LATENCY_BUCKETS && seconds > FETCH_LATENCY_BOUNDS[i])
        i++;
    q->st.fetch_latency_counts[i]++;
}

void km_quorum_get_stats(const km_quorum *q, km_quorum_stats *out)
{
    *out = q->st;
    out->fetch_latency_bounds = FETCH_LATENCY_BOUNDS;
    out->fetch_latency_n = KM_QUORUM_LATENCY_BUCKETS;
    out->high_watermark = q->leader_hw;
    out->fetched_offset = q_fetch_offset(q);
    out->applied_offset = km_image_offset(q->img);
    /* Everything whole below the leader's high watermark is applied (a batch it cuts waits).  A
     * snapshot's end is not enough: the leader's log goes on after it (issue 17 item 2). */
    out->since_answer = q->answered_at > 0 ? q_now(q) - q->answered_at : -1;
    out->answer_bound = (q->cfg.fetch_max_wait_ms + q->cfg.request_timeout_ms) / 1000.0;
    bool cut_waits = q->n_batches > q->first_batch && q->batches[q->first_batch].last >= q->leader_hw;
    out->caught_up = q->leader_hw >= 0 && !q->snap_active && (q->applied_next >= q->leader_hw || cut_waits);
}
