/* Raft simulator: DescribeCluster as a Kafka 3.7+ controller answers it on its controller
 * listener (ControllerApis.handleDescribeCluster, KIP-919): v1 and up only, EndpointType
 * CONTROLLER (2) only (AuthHelper.computeDescribeClusterResponse: MISMATCHED_ENDPOINT_TYPE),
 * with the cluster id and the leader as ControllerId. The voters stand for the controllers. */
#include "rsim_internal.h"

#define RSIM_E_MISMATCHED_ENDPOINT_TYPE 114
#define RSIM_ENDPOINT_CONTROLLER 2

int rsim_serve_describe_cluster(km_rsim *s, const rsim_req *rq, km_buf *out, km_arena *a, km_err *err)
{
    if (s->cfg.no_describe_cluster || rq->version < 1 || rq->version > 1)
        return km_fail(err, "DescribeCluster v%d is not advertised", rq->version);
    km_describe_cluster_request q;
    if (rsim_decode_body(&km_describe_cluster_request_desc, rq, &q, a, err) < 0)
        return -1;
    km_describe_cluster_response rs;
    km_describe_cluster_response_init(&rs);
    rs.endpoint_type = q.endpoint_type;
    if (q.endpoint_type != RSIM_ENDPOINT_CONTROLLER) {
        rs.error_code = RSIM_E_MISMATCHED_ENDPOINT_TYPE;
        rs.error_message = km_cstr("The request was sent to an endpoint of type CONTROLLER");
    } else {
        rs.cluster_id = km_cstr(s->cluster_id);
        rs.controller_id = s->leader_id;
    }
    return km_frame_response(KM_API_DESCRIBE_CLUSTER, rq->version, rq->correlation_id, &rs, out, err);
}
