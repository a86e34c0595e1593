/* Raft simulator: DescribeCluster as a Kafka 3.9 controller answers it on its controller listener
 * (KIP-919; ControllerApis.handleDescribeCluster, then AuthHelper.computeDescribeClusterResponse):
 *  - v0 and v1 are offered (DescribeClusterRequest.json "validVersions": "0-1", listeners include
 *    "controller"); v0 has no EndpointType, so it reads as BROKER (1);
 *  - an unknown EndpointType: UNSUPPORTED_ENDPOINT_TYPE (v0: INVALID_REQUEST); a known one other than
 *    CONTROLLER (2): MISMATCHED_ENDPOINT_TYPE (v0: INVALID_REQUEST); such an answer carries only the
 *    error code and message, its EndpointType and ControllerId keep their schema defaults (1, -1);
 *  - otherwise: ClusterId, EndpointType CONTROLLER, Brokers = the controllers registered with an
 *    endpoint on this listener (ControllerRegistrationsPublisher.describeClusterControllers; here the
 *    voters, or this node alone when it knows none), ControllerId = the raft leader
 *    (raftManager.leaderAndEpoch) or -1 when unknown or not among Brokers, and
 *    ClusterAuthorizedOperations left at its default (INT32_MIN) unless asked for: with no authorizer
 *    every operation is allowed, which the simulator does not model.
 * handleDescribeCluster's own checks come first (cfg.describe_cluster_error): the metadata.version
 * (isControllerRegistrationSupported), then ALTER on the CLUSTER; a failed one is answered by
 * DescribeClusterRequest.getErrorResponse: the error code and a message, nothing else. */
#include "rsim_internal.h"

#define RSIM_E_UNSUPPORTED_ENDPOINT_TYPE 113
#define RSIM_E_MISMATCHED_ENDPOINT_TYPE 114
#define RSIM_ENDPOINT_BROKER 1
#define RSIM_ENDPOINT_CONTROLLER 2

/* The controllers (Brokers) and ControllerId of a successful answer. */
static int describe_controllers(const km_rsim *s, km_describe_cluster_response *rs, km_arena *a, km_err *err)
{
    const km_rsim_voter *list = s->n_voters ? s->voters : &s->self;
    int n = s->n_voters ? s->n_voters : 1;
    km_describe_cluster_response_broker *b = km_arena_alloc(a, (size_t)n * sizeof *b);
    if (!b)
        return km_fail(err, "raftsim: out of memory");
    rs->controller_id = -1;
    for (int i = 0; i < n; i++) {
        km_init(rsim_sub(km_describe_cluster_response_desc.root, "Brokers"), &b[i]);
        b[i].broker_id = list[i].id;
        b[i].host = km_cstr(list[i].host);
        b[i].port = list[i].port;
        if (list[i].id == s->leader_id)
            rs->controller_id = s->leader_id;
    }
    rs->brokers.items = b;
    rs->brokers.count = n;
    return 0;
}

int rsim_serve_describe_cluster(km_rsim *s, const rsim_req *rq, km_buf *out, km_arena *a, km_err *err)
{
    if (s->cfg.no_describe_cluster || rq->version < 0 || rq->version > 1)
        return km_fail(err, "DescribeCluster v%d is not advertised", rq->version);
    km_describe_cluster_request q;
    if (rsim_decode_body(&km_describe_cluster_request_desc, rq, &q, a, err) < 0)
        return -1;
    km_describe_cluster_response rs;
    km_describe_cluster_response_init(&rs);
    if (s->cfg.describe_cluster_error) {
        rs.error_code = s->cfg.describe_cluster_error;
        rs.error_message = km_cstr(rs.error_code == RSIM_E_CLUSTER_AUTHORIZATION_FAILED
                                       ? "raftsim: the principal may not ALTER the CLUSTER"
                                       : "raftsim: metadata.version is older than 3.7-IV0");
        return km_frame_response(KM_API_DESCRIBE_CLUSTER, rq->version, rq->correlation_id, &rs, out, err);
    }
    int8_t type = rq->version == 0 ? RSIM_ENDPOINT_BROKER : q.endpoint_type;
    if (type != RSIM_ENDPOINT_BROKER && type != RSIM_ENDPOINT_CONTROLLER) {
        rs.error_code = rq->version == 0 ? RSIM_E_INVALID_REQUEST : RSIM_E_UNSUPPORTED_ENDPOINT_TYPE;
        rs.error_message = km_cstr("raftsim: no such endpoint type");
    } else if (type != RSIM_ENDPOINT_CONTROLLER) {
        rs.error_code = rq->version == 0 ? RSIM_E_INVALID_REQUEST : RSIM_E_MISMATCHED_ENDPOINT_TYPE;
        rs.error_message = km_cstr("raftsim: this is a CONTROLLER endpoint, BROKER was asked for");
    } else {
        rs.cluster_id = km_cstr(s->cluster_id);
        rs.endpoint_type = RSIM_ENDPOINT_CONTROLLER;
        if (describe_controllers(s, &rs, a, err) < 0)
            return -1;
    }
    return km_frame_response(KM_API_DESCRIBE_CLUSTER, rq->version, rq->correlation_id, &rs, out, err);
}
