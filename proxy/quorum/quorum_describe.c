/* km_quorum_describe: DescribeQuorum against each bootstrap server in turn until the leader
 * answers (only the leader describes the quorum: KafkaRaftClient.handleDescribeQuorumRequest). */
#include "quorum_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct dq_ctx {
    struct ev_loop *loop;
    km_tls_ctx *tls;
    const km_quorum_login *login;      /* NULL: no SASL */
    km_sasl_client *sasl;              /* the login in progress on conn */
    int16_t describe_v;                /* DescribeQuorum's version, from ApiVersions */
    int16_t fetch_v;                   /* Fetch's (17: answers name the leader's endpoint), -1 none */
    q_node servers[Q_MAX_NODES];
    int n, idx;
    km_net_conn *conn;
    int16_t api, dq_v;
    km_quorum_description *out;
    km_err last;
    bool done;
    bool give_up;                      /* an answer every server would give (not authorized): no more tries */
} dq_ctx;

static void try_next(dq_ctx *d);

static void fail_server(dq_ctx *d, const char *why)
{
    km_fail(&d->last, "%s:%u: %s", d->servers[d->idx].host, d->servers[d->idx].port, why);
    km_sasl_client_free(d->sasl);
    d->sasl = NULL;
    if (d->conn)
        km_net_close(d->conn);
    d->conn = NULL;
    d->idx++;
    try_next(d);
}

static int send_req(dq_ctx *d, int16_t api, int16_t v, const void *body, km_err *err)
{
    km_buf b;
    km_buf_init(&b);
    int rc = km_frame_request(api, v, 1, "kmproxy-metadata-quorum", body, &b, err);
    if (rc == 0)
        rc = km_net_send(d->conn, b.data, b.len, err);
    km_buf_free(&b);
    d->api = api;
    d->dq_v = v;
    return rc;
}

static void on_ready(km_net_conn *c, void *ud)
{
    (void)c;
    dq_ctx *d = ud;
    km_api_versions_request rq;
    q_api_versions_request(&rq);
    km_err err;
    if (send_req(d, KM_API_API_VERSIONS, Q_API_VERSIONS_V, &rq, &err) < 0)
        fail_server(d, err.msg);
}

static void take_replicas(km_quorum_replica *dst, int *n, int cap, const km_describe_quorum_response_replica_state *src,
                          int32_t count)
{
    *n = 0;
    for (int32_t i = 0; i < count && *n < cap; i++)
        dst[(*n)++] = (km_quorum_replica){ src[i].replica_id, src[i].log_end_offset, src[i].last_fetch_timestamp,
                                           src[i].last_caught_up_timestamp };
}

/* The leader's endpoint goes next in the list of servers to ask (unless it already is). */
static void ask_next(dq_ctx *d, const q_node *leader)
{
    int at = d->idx + 1;
    if (at < d->n && d->servers[at].port == leader->port && !strcmp(d->servers[at].host, leader->host))
        return;
    int n = d->n < Q_MAX_NODES ? d->n : Q_MAX_NODES - 1;
    memmove(&d->servers[at + 1], &d->servers[at], sizeof d->servers[0] * (size_t)(n - at));
    d->servers[at] = *leader;
    d->n = n + 1;
}

/* A 3.9 non-leader's DescribeQuorum answer names no leader (singletonErrorResponse).  Learn it as an
 * observer does: a Fetch at epoch 0 is older than any quorum's, so validateLeaderOnlyRequest answers
 * FENCED_LEADER_EPOCH with CurrentLeader and, from v17, the leader's endpoint (RaftUtil.fetchResponse). */
static void send_leader_probe(dq_ctx *d)
{
    if (d->fetch_v < 17)
        return fail_server(d, "not the leader, and its Fetch answers cannot name the leader's endpoint (Fetch v17)");
    km_fetch_request rq;
    km_fetch_request_partition part;
    km_fetch_request_topic topic;
    km_fetch_request_init(&rq);
    const km_struct_desc *tsd = q_sub(km_fetch_request_desc.root, "Topics");
    km_init(tsd, &topic);
    km_init(q_sub(tsd, "Partitions"), &part);
    rq.replica_state.replica_id = -1;
    rq.max_wait_ms = 0;
    topic.topic_id.b[15] = 1; /* Uuid.METADATA_TOPIC_ID */
    part.current_leader_epoch = 0;
    part.last_fetched_epoch = 0;
    part.partition_max_bytes = 1;
    topic.partitions.count = 1;
    topic.partitions.items = &part;
    rq.topics.count = 1;
    rq.topics.items = &topic;
    km_err err;
    if (send_req(d, KM_API_FETCH, d->fetch_v, &rq, &err) < 0)
        fail_server(d, err.msg);
}

static void on_leader_probe(dq_ctx *d, const km_fetch_response *rs)
{
    const km_fetch_response_partition_data *p = rs->responses.count == 1 && rs->responses.items[0].partitions.count == 1
                                                ? &rs->responses.items[0].partitions.items[0] : NULL;
    int32_t leader = p ? p->current_leader.leader_id : -1;
    char why[600];
    for (int32_t i = 0; leader >= 0 && i < rs->node_endpoints.count; i++) {
        const km_fetch_response_node_endpoint *e = &rs->node_endpoints.items[i];
        if (e->node_id != leader || e->host.len <= 0 || e->host.len >= (int32_t)sizeof d->servers[0].host ||
            e->port <= 0 || e->port > 65535)
            continue;
        q_node n = { .id = leader, .port = (uint16_t)e->port };
        memcpy(n.host, e->host.ptr, (size_t)e->host.len);
        ask_next(d, &n);
        snprintf(why, sizeof why, "not the leader; it names leader %d at %s:%d (epoch %d)", leader, n.host, e->port,
                 p->current_leader.leader_epoch);
        return fail_server(d, why);
    }
    snprintf(why, sizeof why, "not the leader, and its Fetch answer (error %d, %s) names no leader endpoint",
             rs->error_code ? rs->error_code : p ? p->error_code : -1,
             q_error_name(rs->error_code ? rs->error_code : p ? p->error_code : -1));
    fail_server(d, why);
}

static void on_describe(dq_ctx *d, const km_describe_quorum_response *rs)
{
    if (rs->error_code == QE_CLUSTER_AUTHORIZATION_FAILED) { /* every controller answers the same: stop */
        d->give_up = true;
        return fail_server(d, "DescribeQuorum refused: CLUSTER_AUTHORIZATION_FAILED: the principal needs ALLOW "
                              "DESCRIBE on the CLUSTER resource (see docs/quorum.md)");
    }
    if (rs->error_code || rs->topics.count != 1 || rs->topics.items[0].partitions.count != 1) {
        char why[1200];
        snprintf(why, sizeof why, "DescribeQuorum error %d (%s)", rs->error_code, q_error_name(rs->error_code));
        return rs->error_code == QE_NOT_LEADER_OR_FOLLOWER ? send_leader_probe(d) : fail_server(d, why);
    }
    const km_describe_quorum_response_partition_data *p = &rs->topics.items[0].partitions.items[0];
    if (p->error_code == QE_NOT_LEADER_OR_FOLLOWER)
        return send_leader_probe(d);
    if (p->error_code) {
        char why[200];
        snprintf(why, sizeof why, "DescribeQuorum error %d (%s)", p->error_code, q_error_name(p->error_code));
        return fail_server(d, why);
    }
    km_quorum_description *o = d->out;
    memset(o, 0, sizeof *o);
    o->leader_id = p->leader_id;
    o->leader_epoch = p->leader_epoch;
    o->high_watermark = p->high_watermark;
    take_replicas(o->voters, &o->n_voters, 32, p->current_voters.items, p->current_voters.count);
    take_replicas(o->observers, &o->n_observers, 64, p->observers.items, p->observers.count);
    int64_t leo = -1;
    for (int i = 0; i < o->n_voters; i++)
        if (o->voters[i].id == o->leader_id)
            leo = o->voters[i].log_end_offset;
    for (int i = 0; i < o->n_voters; i++)
        if (leo - o->voters[i].log_end_offset > o->max_follower_lag)
            o->max_follower_lag = (int32_t)(leo - o->voters[i].log_end_offset);
    snprintf(o->leader_host, sizeof o->leader_host, "%s", d->servers[d->idx].host);
    o->leader_port = d->servers[d->idx].port;
    d->done = true;
    km_net_close(d->conn);
    d->conn = NULL;
    ev_break(d->loop, EVBREAK_ALL);
}

static int16_t dq_version(const km_api_versions_response *rs)
{
    for (int32_t i = 0; i < rs->api_keys.count; i++)
        if (rs->api_keys.items[i].api_key == KM_API_DESCRIBE_QUORUM)
            return rs->api_keys.items[i].max_version < 2 ? rs->api_keys.items[i].max_version : 2;
    return -1;
}

static void send_describe(dq_ctx *d)
{
    km_describe_quorum_request rq;
    km_describe_quorum_request_topic_data t;
    km_describe_quorum_request_partition_data p = { .partition_index = 0 };
    km_describe_quorum_request_init(&rq);
    km_init(q_sub(km_describe_quorum_request_desc.root, "Topics"), &t);
    t.topic_name = km_cstr(Q_METADATA_TOPIC);
    t.partitions.count = 1;
    t.partitions.items = &p;
    rq.topics.count = 1;
    rq.topics.items = &t;
    km_err err;
    if (send_req(d, KM_API_DESCRIBE_QUORUM, d->describe_v, &rq, &err) < 0)
        fail_server(d, err.msg);
}

/* The SASL login's next request, or DescribeQuorum once it succeeded (rc from km_sasl). */
static void sasl_step(dq_ctx *d, int rc, const km_err *why)
{
    if (rc < 0) {
        char msg[1200];
        snprintf(msg, sizeof msg, "SASL/%s authentication as '%s' failed: %s", km_sasl_mech_name(d->login->mechanism),
                 d->login->username, why->msg);
        return fail_server(d, msg);
    }
    if (rc == 0) {
        km_sasl_client_free(d->sasl);
        d->sasl = NULL;
        return send_describe(d);
    }
    int16_t api, v;
    const void *body;
    km_err err;
    km_sasl_client_request(d->sasl, &api, &v, &body);
    if (send_req(d, api, v, body, &err) < 0)
        fail_server(d, err.msg);
}

static void on_api_versions(dq_ctx *d, const km_api_versions_response *rs)
{
    km_err err;
    d->describe_v = dq_version(rs);
    d->fetch_v = -1;
    for (int32_t i = 0; i < rs->api_keys.count; i++)
        if (rs->api_keys.items[i].api_key == KM_API_FETCH && rs->api_keys.items[i].max_version >= 17)
            d->fetch_v = 17;
    if (rs->error_code) {
        char why[200];
        snprintf(why, sizeof why, "ApiVersions refused with error %d (%s)", rs->error_code, q_error_name(rs->error_code));
        return fail_server(d, why);
    }
    if (d->describe_v < 0)
        return fail_server(d, "no DescribeQuorum in ApiVersions (not a KRaft controller?)");
    if (!d->login)
        return send_describe(d);
    if (!(d->sasl = km_sasl_client_new(d->login->mechanism, d->login->username, d->login->password, &err)) ||
        km_sasl_client_versions(d->sasl, rs, &err) < 0)
        return sasl_step(d, -1, &err);
    sasl_step(d, 1, NULL);
}

static void on_frame(km_net_conn *c, const uint8_t *payload, size_t len, void *ud)
{
    (void)c;
    dq_ctx *d = ud;
    km_reader r;
    km_reader_init(&r, payload, len);
    km_arena a;
    km_arena_init(&a, 16u << 20);
    km_err err;
    int32_t corr;
    union { km_api_versions_response av; km_describe_quorum_response dq; km_fetch_response f; } rs;
    bool av = d->api == KM_API_API_VERSIONS, fetch = d->api == KM_API_FETCH;
    const km_message_desc *md = av ? &km_api_versions_response_desc
                                   : fetch ? &km_fetch_response_desc : &km_describe_quorum_response_desc;
    if (km_parse_response_header(&r, d->api, av ? 0 : d->dq_v, &corr, &err) < 0)
        fail_server(d, err.msg);
    else if (d->api == KM_API_SASL_HANDSHAKE || d->api == KM_API_SASL_AUTHENTICATE)
        sasl_step(d, km_sasl_client_on_response(d->sasl, r.p + r.pos, km_reader_left(&r), &err), &err);
    else if (km_decode(md, av ? Q_API_VERSIONS_V : d->dq_v, r.p + r.pos, km_reader_left(&r), &rs, &a, NULL, &err) < 0)
        fail_server(d, err.msg);
    else if (av)
        on_api_versions(d, &rs.av);
    else if (fetch)
        on_leader_probe(d, &rs.f);
    else
        on_describe(d, &rs.dq);
    km_arena_free(&a);
}

static void on_close(km_net_conn *c, const km_err *why, void *ud)
{
    (void)c;
    dq_ctx *d = ud;
    d->conn = NULL;
    fail_server(d, why ? why->msg : "closed by the peer");
}

static void try_next(dq_ctx *d)
{
    static const km_net_handlers h = { .on_ready = on_ready, .on_frame = on_frame, .on_close = on_close };
    if (d->idx >= d->n || d->give_up) {
        ev_break(d->loop, EVBREAK_ALL);
        return;
    }
    km_net_opts o = { .tls = d->tls, .connect_timeout = 5.0 };
    km_err err;
    d->conn = km_net_connect(d->loop, d->servers[d->idx].host, d->servers[d->idx].port, &o, &h, d, &err);
    if (!d->conn)
        fail_server(d, err.msg);
}

static void on_deadline(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)w;
    (void)revents;
    ev_break(loop, EVBREAK_ALL);
}

int km_quorum_describe(const char *bootstrap, km_tls_ctx *tls, const km_quorum_login *login, double timeout_s,
                       km_quorum_description *out, km_err *err)
{
    dq_ctx d = { .tls = tls, .out = out, .login = login && login->mechanism != KM_SASL_NONE ? login : NULL };
    char *copy = strdup(bootstrap), *save = NULL;
    if (!copy)
        return km_fail(err, "out of memory");
    for (char *tok = strtok_r(copy, ", ", &save); tok && d.n < Q_MAX_NODES; tok = strtok_r(NULL, ", ", &save)) {
        d.servers[d.n].id = -1;
        if (km_quorum_parse_hostport(tok, d.servers[d.n].host, sizeof d.servers[d.n].host, &d.servers[d.n].port,
                                     err) < 0) {
            free(copy);
            return -1;
        }
        d.n++;
    }
    free(copy);
    if (d.n == 0)
        return km_fail(err, "no bootstrap server given");
    d.loop = ev_loop_new(EVFLAG_AUTO);
    ev_timer deadline;
    ev_timer_init(&deadline, on_deadline, timeout_s, 0.);
    ev_timer_start(d.loop, &deadline);
    km_fail(&d.last, "no answer within %.1f s", timeout_s);
    try_next(&d);
    if (d.idx < d.n && !d.done && !d.give_up)
        ev_run(d.loop, 0);
    if (d.conn)
        km_net_close(d.conn);
    km_sasl_client_free(d.sasl);
    ev_loop_destroy(d.loop);
    if (!d.done)
        return km_fail(err, "no quorum leader answered DescribeQuorum (last: %s)", d.last.msg);
    return 0;
}
