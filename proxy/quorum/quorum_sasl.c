/* SASL on the controller listener: between ApiVersions and the first Fetch, in the order of
 * Kafka's SaslClientAuthenticator (which KafkaRaftClient's NetworkClient runs on every
 * controller connection: RaftManager.buildNetworkClient -> ChannelBuilders.clientChannelBuilder).
 * The exchange itself is km_sasl's; here it only travels on the quorum connection.  Nothing
 * but the exchange is sent until it succeeds.
 * When the controller's sessions expire (connections.max.reauth.ms: SaslAuthenticate's
 * session_lifetime_ms), the session is renewed on the same connection before that, as
 * KafkaChannel.maybeBeginClientReauthentication does (KIP-368): once the point km_sasl picked
 * has passed, the next Fetch/FetchSnapshot waits for a new SaslHandshake + SaslAuthenticate
 * exchange; a refusal is an authentication failure like any other. */
#include "quorum_internal.h"

#include <stdio.h>

void q_sasl_drop(km_quorum *q)
{
    km_sasl_client_free(q->sasl);
    q->sasl = NULL;
    ev_timer_stop(q->loop, &q->reauth_timer);
    q->reauth_due = q->reauthenticating = false;
    q->reauth_at = 0;
}

static void on_reauth_timer(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    km_quorum *q = w->data;
    q->reauth_due = true;
    q_sasl_maybe_reauthenticate(q);
}

void q_sasl_init_timer(km_quorum *q)
{
    ev_timer_init(&q->reauth_timer, on_reauth_timer, 0., 0.);
    q->reauth_timer.data = q;
}

static void auth_failed(km_quorum *q, const char *why)
{
    char line[1200];
    q->st.auth_failures++;
    snprintf(line, sizeof line, "SASL/%s %s as '%s' to controller %s:%u (node %d) failed: %s",
             km_sasl_mech_name(q->cfg.sasl.mechanism), q->reauthenticating ? "re-authentication" : "authentication",
             q->sasl_user, q->target.host, q->target.port, q->target.id,
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

bool q_sasl_maybe_reauthenticate(km_quorum *q)
{
    /* the clock too, not only the timer: a response handled before the timer in the same loop
     * iteration must not send a Fetch past the renewal point (KafkaChannel checks the time) */
    bool due = q->reauth_due || (q->reauth_at > 0 && ev_now(q->loop) >= q->reauth_at);
    if (!due || !q->sasl || !q->conn || q->inflight_api >= 0 || q->fatal ||
        (q->phase != Q_FETCH && q->phase != Q_SNAPSHOT))
        return false;
    ev_timer_stop(q->loop, &q->reauth_timer);
    q->reauth_due = false;
    q->reauth_at = 0;
    q->reauthenticating = true;
    q->phase = Q_AUTH;
    km_sasl_client_reauthenticate(q->sasl);
    send_step(q);
    return true;
}

void q_on_sasl_response(km_quorum *q, const uint8_t *body, size_t len)
{
    km_err err;
    int rc = km_sasl_client_on_response(q->sasl, body, len, &err);
    if (rc < 0)
        return auth_failed(q, err.msg);
    if (rc > 0)
        return send_step(q);
    if (q->reauthenticating)
        q->st.reauthentications++;
    else
        q_log(q, "authenticated to %s:%u (node %d) with SASL/%s as '%s'", q->target.host, q->target.port,
              q->target.id, km_sasl_mech_name(q->cfg.sasl.mechanism), q->sasl_user);
    q->reauthenticating = false;
    double renew_in = km_sasl_client_reauth_delay(q->sasl);
    if (renew_in > 0) { /* connections.max.reauth.ms: the controller closes the connection once it ends */
        ev_timer_set(&q->reauth_timer, renew_in, 0.);
        ev_timer_start(q->loop, &q->reauth_timer);
        q->reauth_at = ev_now(q->loop) + renew_in;
    }
    q->phase = q->snap_active ? Q_SNAPSHOT : Q_FETCH;
    q_next_request(q);
}
