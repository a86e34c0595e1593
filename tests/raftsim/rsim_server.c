/* Raft simulator: listener, connections, strict framing, the fetch purgatory, settings. */
#include "rsim_internal.h"
#include "km_sasl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define RSIM_ARENA_LIMIT (512u * 1024u * 1024u)

struct rsim_conn {
    km_rsim *s;
    km_net_conn *c;
    rsim_conn *prev, *next;
    km_sasl_server *sasl;        /* this connection's login (without SASL: ILLEGAL_SASL_STATE to SASL requests) */
    bool parked;                 /* a Fetch waits in the purgatory */
    rsim_fetch fetch;
    km_buf stale;                /* ... and the answer built on its arrival, sent as is if MaxWaitMs runs out */
    ev_timer wait;
};

static void unlink_conn(rsim_conn *rc)
{
    if (rc->parked)
        ev_timer_stop(rc->s->loop, &rc->wait);
    if (rc->prev)
        rc->prev->next = rc->next;
    else
        rc->s->conns = rc->next;
    if (rc->next)
        rc->next->prev = rc->prev;
    km_sasl_server_free(rc->sasl);
    km_buf_free(&rc->stale);
    free(rc);
}

static void reject(rsim_conn *rc, const char *why)
{
    km_rsim *s = rc->s;
    s->st.rejected++;
    snprintf(s->st.last_rejection, sizeof s->st.last_rejection, "%s", why);
    fprintf(stderr, "raftsim %d: closing %s: %s\n", s->cfg.node_id, km_net_peer(rc->c), why);
    km_net_close(rc->c);
    unlink_conn(rc);
}

static int send_out(rsim_conn *rc, km_buf *out)
{
    km_err err;
    if (out->oom)
        return -1;
    if (out->len && km_net_send(rc->c, out->data, out->len, &err) < 0) {
        reject(rc, err.msg);
        return -1;
    }
    return 0;
}

/* Answers a parked fetch with what the log holds now (the purgatory completed: the log grew). */
static void complete_parked(rsim_conn *rc)
{
    km_arena a;
    km_buf out;
    km_err err;
    km_arena_init(&a, RSIM_ARENA_LIMIT);
    km_buf_init(&out);
    rc->parked = false;
    ev_timer_stop(rc->s->loop, &rc->wait);
    if (rsim_fetch_answer(rc->s, &rc->fetch, false, &out, &a, &err) < 0)
        reject(rc, err.msg);
    else
        send_out(rc, &out);
    km_buf_free(&out);
    km_arena_free(&a);
}

static void on_wait_timeout(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    rsim_conn *rc = w->data;
    if (rc->s->silent) /* a hung controller never answers, not even when MaxWaitMs runs out */
        return;
    /* handleFetchRequest: a fetch that timed out in the purgatory gets the response built when it
     * arrived (its high watermark then), not a new one */
    rc->parked = false;
    send_out(rc, &rc->stale);
    km_buf_reset(&rc->stale);
}

void rsim_wake_fetches(km_rsim *s)
{
    if (s->silent)
        return;
    for (rsim_conn *rc = s->conns, *next; rc; rc = next) {
        next = rc->next;
        if (rc->parked)
            complete_parked(rc);
    }
}

static int dispatch(rsim_conn *rc, const rsim_req *rq, km_buf *out, km_arena *a, km_err *err)
{
    km_rsim *s = rc->s;
    int denied = rsim_deny(s, rq, out, err);
    if (denied != 0)
        return denied < 0 ? -1 : 0;
    switch (rq->api) {
    case KM_API_API_VERSIONS:
        return rsim_serve_api_versions(s, rq, out, a, err);
    case KM_API_FETCH_SNAPSHOT:
        return rsim_serve_fetch_snapshot(s, rq, out, a, err);
    case KM_API_DESCRIBE_QUORUM:
        return rsim_serve_describe_quorum(s, rq, out, a, err);
    case KM_API_DESCRIBE_CLUSTER:
        return rsim_serve_describe_cluster(s, rq, out, a, err);
    case KM_API_FETCH: {
        int r = rsim_fetch_decode(s, rq, &rc->fetch, out, a, err);
        if (r != 0)
            return r < 0 ? -1 : 0;
        r = rsim_fetch_answer(s, &rc->fetch, true, out, a, err);
        if (r == 0) { /* out holds the answer built now: kept for a timeout, nothing sent yet */
            km_buf_reset(&rc->stale);
            km_buf_put(&rc->stale, out->data, out->len);
            km_buf_reset(out);
            rc->parked = true;
            ev_timer_set(&rc->wait, rc->fetch.max_wait_ms / 1000.0, 0.);
            ev_timer_start(s->loop, &rc->wait);
        }
        return r < 0 ? -1 : 0;
    }
    default:
        return km_fail(err, "api key %d (%s) is not served by a KRaft controller simulator", rq->api,
                       km_api_name(rq->api) ? km_api_name(rq->api) : "?");
    }
}

static const char *password_of(const char *user, void *ud)
{
    const km_rsim *s = ud;
    for (int i = 0; i < s->n_users; i++)
        if (!strcmp(s->user_names[i], user))
            return s->user_passwords[i];
    return NULL;
}

int km_rsim_set_sasl_password(km_rsim *s, const char *user, const char *password, km_err *err)
{
    for (int i = 0; i < s->n_users; i++) {
        if (strcmp(s->user_names[i], user))
            continue;
        char *copy = strdup(password);
        if (!copy)
            return km_fail(err, "raftsim: out of memory");
        free(s->changed_passwords[i]);
        s->user_passwords[i] = s->changed_passwords[i] = copy;
        return 0;
    }
    return km_fail(err, "raftsim: no SASL user '%s'", user);
}

/* cfg.sasl_users "user:password,..." cut in place into the users' table. */
static int parse_users(km_rsim *s, const char *list, km_err *err)
{
    if (!list)
        return 0;
    if (!(s->sasl_users = strdup(list)))
        return km_fail(err, "raftsim: out of memory");
    char *save = NULL;
    for (char *tok = strtok_r(s->sasl_users, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *colon = strchr(tok, ':');
        if (!colon || colon == tok || s->n_users == 16)
            return km_fail(err, "raftsim: SASL user '%s' is not user:password (16 at most)", tok);
        *colon = '\0';
        s->user_names[s->n_users] = tok;
        s->user_passwords[s->n_users++] = colon + 1;
    }
    return 0;
}

/* SASL before anything else: 1 answered here (out filled, or the connection closed), 0 go on. */
static int serve_sasl(rsim_conn *rc, const km_request_header_view *h, const km_reader *r, km_buf *out,
                      km_arena *a, bool *close_after, km_err *err)
{
    km_rsim *s = rc->s;
    km_sasl_served what;
    if (km_sasl_server_serve(rc->sasl, h, r->p + r->pos, km_reader_left(r), out, a, &what, err) < 0)
        return -1;
    if (what == KM_SASL_UNEXPECTED) {
        s->st.unauthenticated++;
        return -1;
    }
    if (what == KM_SASL_EXPIRED) { /* SocketServer: serverAuthenticationSessionExpired -> close */
        s->st.sasl_expired++;
        return -1;
    }
    if (what == KM_SASL_FAILED) {
        s->st.sasl_failed++;
        fprintf(stderr, "raftsim %d: SASL login from %s failed: %s\n", s->cfg.node_id, km_net_peer(rc->c), err->msg);
        *close_after = true;
    }
    s->st.sasl_ok += what == KM_SASL_AUTHENTICATED;
    s->st.sasl_reauth += what == KM_SASL_AUTHENTICATED && km_sasl_server_reauthenticated(rc->sasl);
    return what != KM_SASL_PASS;
}

static void on_frame(km_net_conn *c, const uint8_t *payload, size_t len, void *ud)
{
    (void)c;
    rsim_conn *rc = ud;
    if (rc->s->silent)
        return;
    km_arena a;
    km_buf out;
    km_err err;
    km_arena_init(&a, RSIM_ARENA_LIMIT);
    km_buf_init(&out);
    km_reader r;
    km_reader_init(&r, payload, len);
    km_request_header_view h;
    int rc_ = km_parse_request_header(&r, &h, &a, &err);
    if (rc_ == 0 && rc->parked)
        rc_ = km_fail(&err, "a second request while a Fetch is outstanding (KRaft sends one at a time)");
    bool close_after = false;
    int answered = rc_ == 0 ? serve_sasl(rc, &h, &r, &out, &a, &close_after, &err) : 0;
    if (answered < 0)
        rc_ = -1;
    if (rc_ == 0 && !answered) {
        rsim_req rq = { h.api_key, h.api_version, h.correlation_id, r.p + r.pos, km_reader_left(&r) };
        rc_ = dispatch(rc, &rq, &out, &a, &err);
    }
    if (rc_ < 0)
        reject(rc, err.msg);
    else if (send_out(rc, &out) == 0 && close_after)
        km_net_shutdown(rc->c); /* the answer goes out, then on_close */
    km_buf_free(&out);
    km_arena_free(&a);
}

static void on_close(km_net_conn *c, const km_err *why, void *ud)
{
    (void)c;
    (void)why;
    unlink_conn(ud);
}

static void on_accept(km_net_listener *l, int fd, const char *peer, void *ud)
{
    (void)l;
    km_rsim *s = ud;
    static const km_net_handlers h = { .on_frame = on_frame, .on_close = on_close };
    rsim_conn *rc = calloc(1, sizeof *rc);
    if (!rc) {
        close(fd);
        return;
    }
    km_err err;
    rc->s = s;
    ev_timer_init(&rc->wait, on_wait_timeout, 1., 0.);
    km_buf_init(&rc->stale);
    rc->wait.data = rc;
    km_net_opts o = { .tls = s->cfg.tls };
    if (!(rc->sasl = km_sasl_server_new(s->cfg.sasl_mechanisms, password_of, s, &err))) {
        close(fd);
        free(rc);
        return;
    }
    km_sasl_server_set_session_lifetime(rc->sasl, s->cfg.sasl_session_lifetime_ms);
    rc->c = km_net_accept(s->loop, fd, peer, &o, &h, rc, &err);
    if (!rc->c) {
        km_sasl_server_free(rc->sasl);
        free(rc);
        return;
    }
    rc->next = s->conns;
    if (s->conns)
        s->conns->prev = rc;
    s->conns = rc;
}

/* ---- settings ------------------------------------------------------------------------------- */

void km_rsim_config_init(km_rsim_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->node_id = 1;
}

km_rsim *km_rsim_new(struct ev_loop *loop, const km_rsim_config *cfg, km_err *err)
{
    km_rsim *s = calloc(1, sizeof *s);
    if (!s) {
        km_fail(err, "raftsim: out of memory");
        return NULL;
    }
    s->loop = loop;
    s->cfg = *cfg;
    if (!s->cfg.fetch_max_bytes)
        s->cfg.fetch_max_bytes = 8 * 1024 * 1024;
    if (s->cfg.fetch_max_version < RSIM_API_FETCH_MIN || s->cfg.fetch_max_version > RSIM_API_FETCH_MAX)
        s->cfg.fetch_max_version = RSIM_API_FETCH_MAX;
    if (!s->cfg.snapshot_chunk_bytes)
        s->cfg.snapshot_chunk_bytes = 1024 * 1024;
    snprintf(s->cluster_id, sizeof s->cluster_id, "%s", cfg->cluster_id ? cfg->cluster_id : "kmproxy-raftsim-cluster");
    if (parse_users(s, cfg->sasl_users, err) < 0) {
        free(s->sasl_users);
        free(s);
        return NULL;
    }
    s->cfg.sasl_users = NULL;
    s->leader_id = -1;
    s->fixed_hw = -1;
    s->refused_position = -1;
    s->listener = km_net_listen(loop, cfg->host ? cfg->host : "127.0.0.1", cfg->port, on_accept, s, err);
    if (!s->listener) {
        free(s->sasl_users);
        free(s);
        return NULL;
    }
    s->self.id = cfg->node_id;
    s->self.port = km_net_listener_port(s->listener);
    snprintf(s->self.host, sizeof s->self.host, "%s", cfg->host ? cfg->host : "127.0.0.1");
    return s;
}

void km_rsim_drop_connections(km_rsim *s)
{
    while (s->conns) {
        rsim_conn *rc = s->conns;
        km_net_close(rc->c);
        unlink_conn(rc);
    }
}

void km_rsim_free(km_rsim *s)
{
    if (!s)
        return;
    km_rsim_drop_connections(s);
    km_net_listener_free(s->listener);
    rsim_log_free(s);
    free(s->sasl_users);
    for (int i = 0; i < s->n_users; i++)
        free(s->changed_passwords[i]);
    free(s);
}

uint16_t km_rsim_port(const km_rsim *s) { return km_net_listener_port(s->listener); }
int32_t km_rsim_node_id(const km_rsim *s) { return s->cfg.node_id; }
int32_t km_rsim_epoch(const km_rsim *s) { return s->epoch; }
int64_t km_rsim_high_watermark(const km_rsim *s) { return rsim_hw(s); }
int64_t km_rsim_log_end(const km_rsim *s) { return s->log_end; }
int64_t km_rsim_log_start(const km_rsim *s) { return s->log_start; }
void km_rsim_get_stats(const km_rsim *s, km_rsim_stats *out)
{
    *out = s->st;
    out->parked = 0;
    for (const rsim_conn *rc = s->conns; rc; rc = rc->next)
        out->parked += rc->parked;
}
void km_rsim_corrupt_snapshot_chunks(km_rsim *s, int n) { s->corrupt_chunks = n; }

int km_rsim_set_voters(km_rsim *s, const km_rsim_voter *v, int n, km_err *err)
{
    if (n < 0 || n > KM_RSIM_MAX_VOTERS)
        return km_fail(err, "raftsim: %d voters (at most %d)", n, KM_RSIM_MAX_VOTERS);
    if (n > 0)
        memcpy(s->voters, v, sizeof *v * (size_t)n);
    s->n_voters = n;
    return 0;
}

void km_rsim_set_leader(km_rsim *s, int32_t leader_id, int32_t epoch)
{
    /* A new leader's high watermark is unknown until it commits in its own epoch (LeaderState:
     * Optional.empty until a majority fetched past the epoch start): Fetch answers carry -1 */
    if (epoch > s->epoch && leader_id == s->cfg.node_id && s->cfg.unknown_hw_after_election)
        s->hw_unknown = true;
    s->leader_id = leader_id;
    s->epoch = epoch;
    rsim_wake_fetches(s);
}

/* No wake-up: Kafka's fetch purgatory completes on log growth only (appendAsLeader), so a waiting
 * Fetch learns a new high watermark at its MaxWaitMs at the latest. */
void km_rsim_set_high_watermark(km_rsim *s, int64_t hw)
{
    s->fixed_hw = hw;
    s->hw_unknown = false;
}

void km_rsim_set_corrupt_records(km_rsim *s, bool on) { s->corrupt_records = on; }
void km_rsim_fail_snapshot_positions(km_rsim *s, int n) { s->fail_positions = n; }

void km_rsim_set_denied(km_rsim *s, bool cluster_action, bool describe)
{
    s->deny_cluster_action = cluster_action;
    s->deny_describe = describe;
}

void km_rsim_set_silent(km_rsim *s, bool silent)
{
    s->silent = silent;
    if (!silent)
        rsim_wake_fetches(s);
}
