/* SASL on the controller listener: between ApiVersions and the first Fetch, in the order of
 * Kafka's SaslClientAuthenticator (which KafkaRaftClient's NetworkClient runs on every
 * controller connection: RaftManager.buildNetworkClient -> ChannelBuilders.clientChannelBuilder).
 * The exchange itself is km_sasl's; here it only travels on the quorum connection.  Nothing
 * but the exchange is sent until it succeeds. */
#include "quorum_internal.h"

#include <stdio.h>

void q_sasl_drop(km_quorum *q)
{
    km_sasl_client_free(q->sasl);
    q->sasl = NULL;
}

static void auth_failed(km_quorum *q, const char *why)
{
    char line[1200];
    q->st.auth_failures++;
    snprintf(line, sizeof line, "SASL/%s authentication as '%s' to controller %s:%u (node %d) failed: %s",
             km_sasl_mech_name(q->cfg.sasl.mechanism), q->sasl_user, q->target.host, q->target.port, q->target.id,
             why);
    q_retry(q, false, line);
}

static void send_step(km_quorum *q)
{
    int16_t api, version;
    const void *body;
    km_err err;
    km_sasl_client_request(q->sasl, &api, &version, &body);
    if (q_send(q, api, version, body, &err) < 0)
        q_retry(q, false, err.msg);
}

void q_sasl_begin(km_quorum *q, const km_api_versions_response *rs)
{
    km_err err;
    q_sasl_drop(q);
    q->phase = Q_AUTH;
    if (!(q->sasl = km_sasl_client_new(q->cfg.sasl.mechanism, q->sasl_user, q->sasl_pass, &err)) ||
        km_sasl_client_versions(q->sasl, rs, &err) < 0)
        return auth_failed(q, err.msg);
    send_step(q);
}

void q_on_sasl_response(km_quorum *q, const uint8_t *body, size_t len)
{
    km_err err;
    int rc = km_sasl_client_on_response(q->sasl, body, len, &err);
    if (rc < 0)
        return auth_failed(q, err.msg);
    if (rc > 0)
        return send_step(q);
    q_sasl_drop(q);
    q_log(q, "authenticated to %s:%u (node %d) with SASL/%s as '%s'", q->target.host, q->target.port, q->target.id,
          km_sasl_mech_name(q->cfg.sasl.mechanism), q->sasl_user);
    q->phase = q->snap_active ? Q_SNAPSHOT : Q_FETCH;
    q_next_request(q);
}
