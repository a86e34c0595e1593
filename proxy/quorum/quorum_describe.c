/* km_quorum_describe: DescribeQuorum against each bootstrap server in turn until the leader
 * answers (only the leader describes the quorum: KafkaRaftClient.handleDescribeQuorumRequest). */
#include "quorum_oneshot.h"

#include <stdio.h>
#include <string.h>

typedef struct dq_ctx {
    q_oneshot o;                       /* first: the callbacks get it back */
    int16_t describe_v;                /* DescribeQuorum's version, from ApiVersions */
    int16_t fetch_v;                   /* Fetch's (17: answers name the leader's endpoint), -1 none */
    km_quorum_description *out;
    bool done;
} dq_ctx;

static void take_replicas(km_quorum_replica *dst, int *n, int cap, const km_describe_quorum_response_replica_state *src,
                          int32_t count)
{
    *n = 0;
    for (int32_t i = 0; i < count && *n < cap; i++)
        dst[(*n)++] = (km_quorum_replica){ src[i].replica_id, src[i].log_end_offset, src[i].last_fetch_timestamp,
                                           src[i].last_caught_up_timestamp };
}

/* The leader's endpoint goes next in the list of servers to ask (unless it already is). */
static void ask_next(q_oneshot *o, const q_node *leader)
{
    int at = o->idx + 1;
    if (at < o->n && o->servers[at].port == leader->port && !strcmp(o->servers[at].host, leader->host))
        return;
    int n = o->n < Q_MAX_NODES ? o->n : Q_MAX_NODES - 1;
    memmove(&o->servers[at + 1], &o->servers[at], sizeof o->servers[0] * (size_t)(n - at));
    o->servers[at] = *leader;
    o->n = n + 1;
}

/* A 3.9 non-leader's DescribeQuorum answer names no leader (singletonErrorResponse).  Learn it as an
 * observer does: a Fetch at epoch 0 is older than any quorum's, so validateLeaderOnlyRequest answers
 * FENCED_LEADER_EPOCH with CurrentLeader and, from v17, the leader's endpoint (RaftUtil.fetchResponse). */
static void send_leader_probe(dq_ctx *d)
{
    if (d->fetch_v < 17)
        return q_oneshot_fail(&d->o, "not the leader, and its Fetch answers cannot name the leader's endpoint (Fetch v17)");
    km_fetch_request rq;
    km_fetch_request_partition part;
    km_fetch_request_topic topic;
    q_fetch_request_init(&rq, &topic, &part, d->fetch_v); /* v17 here: the topic by id */
    rq.replica_state.replica_id = -1;
    rq.max_wait_ms = 0;
    part.current_leader_epoch = 0;
    part.last_fetched_epoch = 0;
    part.partition_max_bytes = 1;
    q_oneshot_send(&d->o, KM_API_FETCH, d->fetch_v, &rq);
}

static void on_leader_probe(q_oneshot *o, const km_fetch_response *rs)
{
    const km_fetch_response_partition_data *p = rs->responses.count == 1 && rs->responses.items[0].partitions.count == 1
                                                ? &rs->responses.items[0].partitions.items[0] : NULL;
    int32_t leader = p ? p->current_leader.leader_id : -1;
    char why[600];
    for (int32_t i = 0; leader >= 0 && i < rs->node_endpoints.count; i++) {
        const km_fetch_response_node_endpoint *e = &rs->node_endpoints.items[i];
        if (e->node_id != leader || e->host.len <= 0 || e->host.len >= (int32_t)sizeof o->servers[0].host ||
            e->port <= 0 || e->port > 65535)
            continue;
        q_node n = { .id = leader, .port = (uint16_t)e->port };
        memcpy(n.host, e->host.ptr, (size_t)e->host.len);
        ask_next(o, &n);
        snprintf(why, sizeof why, "not the leader; it names leader %d at %s:%d (epoch %d)", leader, n.host, e->port,
                 p->current_leader.leader_epoch);
        return q_oneshot_fail(o, why);
    }
    snprintf(why, sizeof why, "not the leader, and its Fetch answer (error %d, %s) names no leader endpoint",
             rs->error_code ? rs->error_code : p ? p->error_code : -1,
             q_error_name(rs->error_code ? rs->error_code : p ? p->error_code : -1));
    q_oneshot_fail(o, why);
}

/* The leader's answer, taken whole: the question ends. */
static void take_description(dq_ctx *d, const km_describe_quorum_response_partition_data *p)
{
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
    snprintf(o->leader_host, sizeof o->leader_host, "%s", d->o.servers[d->o.idx].host);
    o->leader_port = d->o.servers[d->o.idx].port;
    d->done = true;
    q_oneshot_release(&d->o);
    ev_break(d->o.loop, EVBREAK_ALL);
}

static void on_describe(dq_ctx *d, const km_describe_quorum_response *rs)
{
    if (rs->error_code == QE_CLUSTER_AUTHORIZATION_FAILED) /* every controller answers the same: stop */
        return q_oneshot_give_up(&d->o, "DescribeQuorum refused: CLUSTER_AUTHORIZATION_FAILED: the principal needs "
                                        "ALLOW DESCRIBE on the CLUSTER resource (see docs/quorum.md)");
    if (rs->error_code || rs->topics.count != 1 || rs->topics.items[0].partitions.count != 1) {
        char why[1200];
        snprintf(why, sizeof why, "DescribeQuorum error %d (%s)", rs->error_code, q_error_name(rs->error_code));
        return rs->error_code == QE_NOT_LEADER_OR_FOLLOWER ? send_leader_probe(d) : q_oneshot_fail(&d->o, why);
    }
    const km_describe_quorum_response_partition_data *p = &rs->topics.items[0].partitions.items[0];
    if (p->error_code == QE_NOT_LEADER_OR_FOLLOWER)
        return send_leader_probe(d);
    if (p->error_code) {
        char why[200];
        snprintf(why, sizeof why, "DescribeQuorum error %d (%s)", p->error_code, q_error_name(p->error_code));
        return q_oneshot_fail(&d->o, why);
    }
    take_description(d, p);
}

static void on_answer(q_oneshot *o, const void *rs)
{
    if (o->api == KM_API_FETCH)
        on_leader_probe(o, rs);
    else
        on_describe((dq_ctx *)o, rs);
}

static int16_t dq_version(const km_api_versions_response *rs)
{
    for (int32_t i = 0; i < rs->api_keys.count; i++)
        if (rs->api_keys.items[i].api_key == KM_API_DESCRIBE_QUORUM)
            return rs->api_keys.items[i].max_version < 2 ? rs->api_keys.items[i].max_version : 2;
    return -1;
}

static void send_describe(q_oneshot *o)
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
    q_oneshot_send(o, KM_API_DESCRIBE_QUORUM, ((dq_ctx *)o)->describe_v, &rq);
}

static void on_api_versions(q_oneshot *o, const km_api_versions_response *rs)
{
    dq_ctx *d = (dq_ctx *)o;
    d->describe_v = dq_version(rs);
    d->fetch_v = -1;
    for (int32_t i = 0; i < rs->api_keys.count; i++)
        if (rs->api_keys.items[i].api_key == KM_API_FETCH && rs->api_keys.items[i].max_version >= 17)
            d->fetch_v = 17;
    if (rs->error_code) {
        char why[200];
        snprintf(why, sizeof why, "ApiVersions refused with error %d (%s)", rs->error_code, q_error_name(rs->error_code));
        return q_oneshot_fail(o, why);
    }
    if (d->describe_v < 0)
        return q_oneshot_fail(o, "no DescribeQuorum in ApiVersions (not a KRaft controller?)");
    q_oneshot_login(o, rs);
}

static void on_end(q_oneshot *o)
{
    ev_break(o->loop, EVBREAK_ALL);
}

static const q_oneshot_ops dq_ops = {
    .client_id = "kmproxy-metadata-quorum", .login_word = "authentication", .arena_limit = 16u << 20,
    .on_versions = on_api_versions, .ask = send_describe, .on_answer = on_answer, .on_end = on_end,
};

int km_quorum_describe(const char *bootstrap, km_tls_ctx *tls, const km_quorum_login *login, double timeout_s,
                       km_quorum_description *out, km_err *err)
{
    dq_ctx d = { .out = out };
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    q_oneshot_init(&d.o, loop, tls, login, &dq_ops);
    int n = q_oneshot_add_servers(&d.o, bootstrap, false, err);
    if (n == 0)
        km_fail(err, "no bootstrap server given");
    if (n > 0) {
        q_oneshot_start(&d.o, timeout_s);
        ev_run(loop, 0);
    }
    q_oneshot_release(&d.o);
    ev_loop_destroy(loop);
    if (n <= 0)
        return -1;
    if (!d.done)
        return km_fail(err, "no quorum leader answered DescribeQuorum (last: %s)", d.o.last.msg);
    return 0;
}
