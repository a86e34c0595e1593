/* km_quorum_cluster_id: the cluster id the KRaft controllers hold, asked with DescribeCluster on
 * the controller listener (KIP-919, Kafka 3.7+). Kafka's ControllerApis.handleDescribeCluster
 * answers only v1 and up with EndpointType CONTROLLER (2) (AuthHelper.computeDescribeClusterResponse
 * answers MISMATCHED_ENDPOINT_TYPE otherwise); any controller answers, not only the leader.  Before that it
 * answers UNSUPPORTED_VERSION below metadata.version 3.7-IV0 and CLUSTER_AUTHORIZATION_FAILED without ALTER
 * on the CLUSTER (unlike a broker's, which needs nothing): both are named plainly.
 * The servers are tried in turn on the caller's loop; the first good answer is taken. */
#include "quorum_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DC_ENDPOINT_CONTROLLER 2 /* EndpointType.CONTROLLER */

struct km_quorum_ask {
    struct ev_loop *loop;
    km_tls_ctx *tls;
    const km_quorum_login *login; /* NULL: no SASL; else &login_copy */
    km_quorum_login login_copy;
    char username[KM_SASL_NAME_MAX], password[KM_SASL_NAME_MAX];
    km_sasl_client *sasl;
    q_node servers[Q_MAX_NODES];
    int n, idx;
    km_net_conn *conn;
    int16_t api, version;
    ev_timer deadline, kick;
    km_quorum_cluster_id_cb cb;
    void *ud;
    km_err last;
};
typedef struct km_quorum_ask dc_ctx;

static void dc_try_next(dc_ctx *d);

/* Tells the caller once (id, or NULL and why), then frees everything. */
static void dc_finish(dc_ctx *d, const char *id)
{
    km_err why = {{0}};
    if (!id)
        km_fail(&why, "no controller answered DescribeCluster (last: %s)", d->last.msg);
    km_quorum_cluster_id_cb cb = d->cb;
    void *ud = d->ud;
    km_quorum_ask_free(d);
    cb(id, id ? NULL : &why, ud);
}

static void dc_fail(dc_ctx *d, const char *why)
{
    km_fail(&d->last, "%s:%u: %s", d->servers[d->idx].host, d->servers[d->idx].port, why);
    km_sasl_client_free(d->sasl);
    d->sasl = NULL;
    if (d->conn)
        km_net_close(d->conn);
    d->conn = NULL;
    d->idx++;
    dc_try_next(d);
}

static void dc_send(dc_ctx *d, int16_t api, int16_t v, const void *body)
{
    km_buf b;
    km_err err;
    km_buf_init(&b);
    d->api = api;
    d->version = v;
    int rc = km_frame_request(api, v, 1, "kmproxy-cluster-id", body, &b, &err);
    if (rc == 0)
        rc = km_net_send(d->conn, b.data, b.len, &err);
    km_buf_free(&b);
    if (rc < 0)
        dc_fail(d, err.msg);
}

static void dc_on_ready(km_net_conn *c, void *ud)
{
    (void)c;
    km_api_versions_request rq;
    q_api_versions_request(&rq); /* named, or a controller answers INVALID_REQUEST (ApiVersionsRequest.isValid) */
    dc_send(ud, KM_API_API_VERSIONS, Q_API_VERSIONS_V, &rq);
}

static void dc_send_describe(dc_ctx *d)
{
    km_describe_cluster_request rq;
    km_describe_cluster_request_init(&rq);
    rq.endpoint_type = DC_ENDPOINT_CONTROLLER;
    dc_send(d, KM_API_DESCRIBE_CLUSTER, 1, &rq);
}

static void dc_sasl_step(dc_ctx *d, int rc, const km_err *why)
{
    if (rc < 0) {
        char msg[1200];
        snprintf(msg, sizeof msg, "SASL/%s login as '%s' failed: %s", km_sasl_mech_name(d->login->mechanism),
                 d->login->username, why->msg);
        return dc_fail(d, msg);
    }
    if (rc == 0) {
        km_sasl_client_free(d->sasl);
        d->sasl = NULL;
        return dc_send_describe(d);
    }
    int16_t api, v;
    const void *body;
    km_sasl_client_request(d->sasl, &api, &v, &body);
    dc_send(d, api, v, body);
}

static void dc_on_versions(dc_ctx *d, const km_api_versions_response *rs)
{
    int16_t max = -1;
    for (int32_t i = 0; i < rs->api_keys.count; i++)
        if (rs->api_keys.items[i].api_key == KM_API_DESCRIBE_CLUSTER)
            max = rs->api_keys.items[i].max_version;
    if (max < 1)
        return dc_fail(d, "no DescribeCluster v1 in its ApiVersions: controllers answer it from Kafka 3.7 (KIP-919)");
    if (!d->login)
        return dc_send_describe(d);
    km_err err;
    if (!(d->sasl = km_sasl_client_new(d->login->mechanism, d->login->username, d->login->password, &err)) ||
        km_sasl_client_versions(d->sasl, rs, &err) < 0)
        return dc_sasl_step(d, -1, &err);
    dc_sasl_step(d, 1, NULL);
}

#define DC_E_CLUSTER_AUTHORIZATION_FAILED 31
#define DC_E_UNSUPPORTED_VERSION 35

/* What to do about the two errors handleDescribeCluster answers before looking at the request (first, as
 * Kafka's message for the first can be long). */
static const char *dc_error_hint(int16_t code)
{
    switch (code) {
    case DC_E_CLUSTER_AUTHORIZATION_FAILED:
        return " (not authorized: the principal needs ALTER on the CLUSTER kafka-cluster; grant it or set cluster.id)";
    case DC_E_UNSUPPORTED_VERSION:
        return " (metadata.version is older than 3.7-IV0: set cluster.id)";
    default:
        return "";
    }
}

static void dc_on_describe(dc_ctx *d, const km_describe_cluster_response *rs)
{
    char why[700];
    if (rs->error_code) {
        snprintf(why, sizeof why, "DescribeCluster error %d%s%s%.*s", rs->error_code, dc_error_hint(rs->error_code),
                 rs->error_message.len > 0 ? ": " : "", rs->error_message.len > 0 ? (int)rs->error_message.len : 0,
                 rs->error_message.ptr);
        return dc_fail(d, why);
    }
    char id[128];
    if (rs->cluster_id.len <= 0 || (size_t)rs->cluster_id.len >= sizeof id)
        return dc_fail(d, "DescribeCluster answered no usable cluster id");
    memcpy(id, rs->cluster_id.ptr, (size_t)rs->cluster_id.len);
    id[rs->cluster_id.len] = '\0';
    dc_finish(d, id);
}

static void dc_on_frame(km_net_conn *c, const uint8_t *payload, size_t len, void *ud)
{
    (void)c;
    dc_ctx *d = ud;
    km_reader r;
    km_reader_init(&r, payload, len);
    km_arena a;
    km_arena_init(&a, 1u << 20);
    km_err err;
    int32_t corr;
    union { km_api_versions_response av; km_describe_cluster_response dc; } rs;
    bool av = d->api == KM_API_API_VERSIONS;
    const km_message_desc *md = av ? &km_api_versions_response_desc : &km_describe_cluster_response_desc;
    if (km_parse_response_header(&r, d->api, av ? 0 : d->version, &corr, &err) < 0)
        dc_fail(d, err.msg);
    else if (d->api == KM_API_SASL_HANDSHAKE || d->api == KM_API_SASL_AUTHENTICATE)
        dc_sasl_step(d, km_sasl_client_on_response(d->sasl, r.p + r.pos, km_reader_left(&r), &err), &err);
    else if (km_decode(md, d->version, r.p + r.pos, km_reader_left(&r), &rs, &a, NULL, &err) < 0)
        dc_fail(d, err.msg);
    else if (av)
        dc_on_versions(d, &rs.av);
    else
        dc_on_describe(d, &rs.dc);
    km_arena_free(&a);
}

static void dc_on_close(km_net_conn *c, const km_err *why, void *ud)
{
    (void)c;
    dc_ctx *d = ud;
    d->conn = NULL;
    dc_fail(d, why ? why->msg : "closed by the peer");
}

static void dc_try_next(dc_ctx *d)
{
    static const km_net_handlers h = { .on_ready = dc_on_ready, .on_frame = dc_on_frame, .on_close = dc_on_close };
    if (d->idx >= d->n)
        return dc_finish(d, NULL);
    km_net_opts o = { .tls = d->tls, .connect_timeout = 5.0 };
    km_err err;
    d->conn = km_net_connect(d->loop, d->servers[d->idx].host, d->servers[d->idx].port, &o, &h, d, &err);
    if (!d->conn)
        dc_fail(d, err.msg);
}

/* "host:port,..." or "id@host:port,...". */
static int dc_parse(dc_ctx *d, const char *servers, km_err *err)
{
    char *copy = strdup(servers), *save = NULL;
    if (!copy)
        return km_fail(err, "out of memory");
    int rc = 0;
    for (char *tok = strtok_r(copy, ", ", &save); tok && !rc && d->n < Q_MAX_NODES; tok = strtok_r(NULL, ", ", &save)) {
        char *at = strchr(tok, '@');
        q_node *n = &d->servers[d->n];
        n->id = -1;
        rc = km_quorum_parse_hostport(at ? at + 1 : tok, n->host, sizeof n->host, &n->port, err);
        d->n += !rc;
    }
    free(copy);
    return rc ? -1 : d->n ? 0 : km_fail(err, "no controller given");
}

/* The first connection is made from the loop, so cb never runs inside km_quorum_ask_cluster_id. */
static void dc_on_kick(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop, (void)revents;
    dc_try_next(w->data);
}

static void dc_on_deadline(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop, (void)revents;
    dc_finish(w->data, NULL);
}

km_quorum_ask *km_quorum_ask_cluster_id(struct ev_loop *loop, const char *servers, km_tls_ctx *tls,
                                        const km_quorum_login *login, double timeout_s, km_quorum_cluster_id_cb cb,
                                        void *ud, km_err *err)
{
    dc_ctx *d = calloc(1, sizeof *d);
    if (!d)
        return km_fail(err, "out of memory"), NULL;
    *d = (dc_ctx){ .loop = loop, .tls = tls, .cb = cb, .ud = ud };
    if (login && login->mechanism != KM_SASL_NONE) {
        snprintf(d->username, sizeof d->username, "%s", login->username);
        snprintf(d->password, sizeof d->password, "%s", login->password);
        d->login_copy = (km_quorum_login){ login->mechanism, d->username, d->password };
        d->login = &d->login_copy;
    }
    if (dc_parse(d, servers, err) < 0) {
        km_quorum_ask_free(d);
        return NULL;
    }
    ev_timer_init(&d->deadline, dc_on_deadline, timeout_s, 0.);
    d->deadline.data = d;
    ev_timer_start(loop, &d->deadline);
    km_fail(&d->last, "no answer within %.1f s", timeout_s);
    ev_timer_init(&d->kick, dc_on_kick, 0., 0.);
    d->kick.data = d;
    ev_timer_start(loop, &d->kick);
    return d;
}

void km_quorum_ask_free(km_quorum_ask *d)
{
    if (!d)
        return;
    ev_timer_stop(d->loop, &d->deadline);
    ev_timer_stop(d->loop, &d->kick);
    if (d->conn)
        km_net_close(d->conn);
    km_sasl_client_free(d->sasl);
    explicit_bzero(d->password, sizeof d->password);
    free(d);
}
