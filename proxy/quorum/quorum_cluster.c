/* km_quorum_cluster_id: the cluster id the KRaft controllers hold, asked with DescribeCluster on
 * the controller listener (KIP-919, Kafka 3.7+). Kafka's ControllerApis.handleDescribeCluster
 * answers only v1 and up with EndpointType CONTROLLER (2) (AuthHelper.computeDescribeClusterResponse
 * answers MISMATCHED_ENDPOINT_TYPE otherwise); any controller answers, not only the leader.  Before that it
 * answers UNSUPPORTED_VERSION below metadata.version 3.7-IV0 and CLUSTER_AUTHORIZATION_FAILED without ALTER
 * on the CLUSTER (unlike a broker's, which needs nothing): both are named plainly.
 * The servers are tried in turn on the caller's loop; the first good answer is taken. */
#include "quorum_oneshot.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DC_ENDPOINT_CONTROLLER 2 /* EndpointType.CONTROLLER */

struct km_quorum_ask {
    q_oneshot o;                       /* first: the callbacks get it back */
    km_quorum_login login_copy;        /* the caller's login need not outlive the ask */
    char username[KM_SASL_NAME_MAX], password[KM_SASL_NAME_MAX];
    km_quorum_cluster_id_cb cb;
    void *ud;
};
typedef struct km_quorum_ask dc_ctx;

/* Tells the caller once (id, or NULL and why), then frees everything. */
static void dc_finish(dc_ctx *d, const char *id)
{
    km_err why = {{0}};
    if (!id)
        km_fail(&why, "no controller answered DescribeCluster (last: %s)", d->o.last.msg);
    km_quorum_cluster_id_cb cb = d->cb;
    void *ud = d->ud;
    km_quorum_ask_free(d);
    cb(id, id ? NULL : &why, ud);
}

static void dc_ask(q_oneshot *o)
{
    km_describe_cluster_request rq;
    km_describe_cluster_request_init(&rq);
    rq.endpoint_type = DC_ENDPOINT_CONTROLLER;
    q_oneshot_send(o, KM_API_DESCRIBE_CLUSTER, 1, &rq);
}

static void dc_on_versions(q_oneshot *o, const km_api_versions_response *rs)
{
    int16_t max = -1;
    for (int32_t i = 0; i < rs->api_keys.count; i++)
        if (rs->api_keys.items[i].api_key == KM_API_DESCRIBE_CLUSTER)
            max = rs->api_keys.items[i].max_version;
    if (max < 1)
        return q_oneshot_fail(o, "no DescribeCluster v1 in its ApiVersions: controllers answer it from Kafka 3.7 (KIP-919)");
    q_oneshot_login(o, rs);
}

/* What to do about the two errors handleDescribeCluster answers before looking at the request (first, as
 * Kafka's message for the first can be long). */
static const char *dc_error_hint(int16_t code)
{
    switch (code) {
    case QE_CLUSTER_AUTHORIZATION_FAILED:
        return " (not authorized: the principal needs ALTER on the CLUSTER kafka-cluster; grant it or set cluster.id)";
    case QE_UNSUPPORTED_VERSION:
        return " (metadata.version is older than 3.7-IV0: set cluster.id)";
    default:
        return "";
    }
}

static void dc_on_describe(q_oneshot *o, const void *answer)
{
    const km_describe_cluster_response *rs = answer;
    char why[700];
    if (rs->error_code) {
        snprintf(why, sizeof why, "DescribeCluster error %d%s%s%.*s", rs->error_code, dc_error_hint(rs->error_code),
                 rs->error_message.len > 0 ? ": " : "", rs->error_message.len > 0 ? (int)rs->error_message.len : 0,
                 rs->error_message.ptr);
        return q_oneshot_fail(o, why);
    }
    char id[128];
    if (rs->cluster_id.len <= 0 || (size_t)rs->cluster_id.len >= sizeof id)
        return q_oneshot_fail(o, "DescribeCluster answered no usable cluster id");
    memcpy(id, rs->cluster_id.ptr, (size_t)rs->cluster_id.len);
    id[rs->cluster_id.len] = '\0';
    dc_finish((dc_ctx *)o, id);
}

static void dc_on_end(q_oneshot *o)
{
    dc_finish((dc_ctx *)o, NULL);
}

static const q_oneshot_ops dc_ops = {
    .client_id = "kmproxy-cluster-id", .login_word = "login", .arena_limit = 1u << 20,
    .on_versions = dc_on_versions, .ask = dc_ask, .on_answer = dc_on_describe, .on_end = dc_on_end,
};

km_quorum_ask *km_quorum_ask_cluster_id(struct ev_loop *loop, const char *servers, km_tls_ctx *tls,
                                        const km_quorum_login *login, double timeout_s, km_quorum_cluster_id_cb cb,
                                        void *ud, km_err *err)
{
    dc_ctx *d = calloc(1, sizeof *d);
    if (!d)
        return km_fail(err, "out of memory"), NULL;
    const km_quorum_login *mine = NULL;
    if (login && login->mechanism != KM_SASL_NONE) {
        snprintf(d->username, sizeof d->username, "%s", login->username);
        snprintf(d->password, sizeof d->password, "%s", login->password);
        d->login_copy = (km_quorum_login){ login->mechanism, d->username, d->password };
        mine = &d->login_copy;
    }
    q_oneshot_init(&d->o, loop, tls, mine, &dc_ops);
    d->cb = cb;
    d->ud = ud;
    int n = q_oneshot_add_servers(&d->o, servers, true, err);
    if (n <= 0) {
        if (n == 0)
            km_fail(err, "no controller given");
        km_quorum_ask_free(d);
        return NULL;
    }
    q_oneshot_start(&d->o, timeout_s);
    return d;
}

void km_quorum_ask_free(km_quorum_ask *d)
{
    if (!d)
        return;
    q_oneshot_release(&d->o);
    explicit_bzero(d->password, sizeof d->password);
    free(d);
}
