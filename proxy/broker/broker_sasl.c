/* km_bchan: SASL between ApiVersions and the first control request, in the order of Kafka's
 * SaslClientAuthenticator (SEND_APIVERSIONS_REQUEST -> SEND_HANDSHAKE_REQUEST -> INITIAL ->
 * INTERMEDIATE -> COMPLETE): the exchange is km_sasl's (SaslHandshake v1, then SaslAuthenticate
 * frames carrying the mechanism's messages, KIP-152); here it travels on the channel.  A
 * refusal closes the connection (the broker closes it too) and the reconnect backoff paces the
 * retries.
 * When the broker's sessions expire (connections.max.reauth.ms: SaslAuthenticate's
 * session_lifetime_ms), the session is renewed on the same connection before the broker's
 * deadline, as KafkaChannel.maybeBeginClientReauthentication does (KIP-368): once the point
 * km_sasl picked has passed and the request in flight is answered, a new SaslHandshake +
 * SaslAuthenticate exchange runs while what is queued waits; a refusal is an authentication
 * failure like any other. */
#include "broker_private.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void km_bchan__sasl_reset(km_bchan *ch)
{
    km_sasl_client_free(ch->sasl);
    ch->sasl = NULL;
    ev_timer_stop(ch->loop, &ch->reauth_timer);
    ch->reauth_due = ch->reauthenticating = false;
    ch->reauth_at = 0;
}

static void on_reauth_timer(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    km_bchan *ch = w->data;
    ch->reauth_due = true;
    km_bchan__sasl_maybe_reauthenticate(ch);
}

void km_bchan__sasl_init_timer(km_bchan *ch)
{
    ev_timer_init(&ch->reauth_timer, on_reauth_timer, 0, 0);
    ch->reauth_timer.data = ch;
}

/* Logged once (level error) until an authentication succeeds again; later ones at debug. */
static void auth_failed(km_bchan *ch, const char *why)
{
    ch->st.auth_failures++;
    km_bchan__log(ch, ch->auth_failure_logged ? 4 : 1,
                  "SASL/%s %s as '%s' failed: %s (retrying after the reconnect backoff%s)",
                  km_sasl_mech_name(ch->cfg.sasl.mechanism),
                  ch->reauthenticating ? "re-authentication" : "authentication", ch->sasl_user, why,
                  ch->auth_failure_logged ? "" : "; further failures are logged at debug level");
    ch->auth_failure_logged = true;
    km_bchan__disconnect_at(ch, 4, "SASL authentication failed");
}

static int send_step(km_bchan *ch)
{
    km_err err;
    const void *body;
    km_sasl_client_request(ch->sasl, &ch->sasl_api, &ch->sasl_version, &body);
    if (km_bchan__send_framed(ch, ch->sasl_api, ch->sasl_version, body, &err)) {
        km_bchan__log(ch, 1, "%s: %s", km_api_name(ch->sasl_api), err.msg);
        return -1;
    }
    return 0;
}

int km_bchan__sasl_start(km_bchan *ch, const km_api_versions_response *rs)
{
    if (ch->cfg.sasl.mechanism == KM_SASL_NONE)
        return 1;
    km_err err;
    km_bchan__sasl_reset(ch);
    if (!(ch->sasl = km_sasl_client_new(ch->cfg.sasl.mechanism, ch->sasl_user, ch->sasl_pass, &err)) ||
        km_sasl_client_versions(ch->sasl, rs, &err)) {
        auth_failed(ch, err.msg);
        return 0; /* already disconnected */
    }
    ch->state = CH_AUTHENTICATING;
    return send_step(ch);
}

bool km_bchan__sasl_maybe_reauthenticate(km_bchan *ch)
{
    /* the clock too, not only the timer: a response handled before the timer in the same loop
     * iteration must not send a request past the renewal point (KafkaChannel checks the time) */
    bool due = ch->reauth_due || (ch->reauth_at > 0 && ev_now(ch->loop) >= ch->reauth_at);
    if (!due || ch->state != CH_READY || ch->inflight || !ch->sasl)
        return false;
    ev_timer_stop(ch->loop, &ch->reauth_timer);
    ch->reauth_due = false;
    ch->reauth_at = 0;
    ch->reauthenticating = true;
    ch->state = CH_AUTHENTICATING;
    km_sasl_client_reauthenticate(ch->sasl);
    if (send_step(ch))
        km_bchan__disconnect(ch, "cannot send SaslHandshake to re-authenticate");
    return true;
}

static void authenticated(km_bchan *ch)
{
    double renew_in = km_sasl_client_reauth_delay(ch->sasl);
    bool renewed = ch->reauthenticating;
    ch->reauthenticating = false;
    if (renewed)
        ch->st.reauthentications++;
    km_bchan__log(ch, ch->auth_failure_logged ? 3 : 4, "%s with SASL/%s as '%s'%s",
                  renewed ? "re-authenticated" : "authenticated", km_sasl_mech_name(ch->cfg.sasl.mechanism),
                  ch->sasl_user, ch->auth_failure_logged ? " (after failures)" : "");
    if (renew_in > 0) { /* connections.max.reauth.ms: the broker closes the connection once the session ends */
        km_bchan__log(ch, 4, "the broker ends this SASL session in %lld ms: renewing it in %.3f s",
                      (long long)km_sasl_client_session_lifetime_ms(ch->sasl), renew_in);
        ev_timer_set(&ch->reauth_timer, renew_in, 0);
        ev_timer_start(ch->loop, &ch->reauth_timer);
        ch->reauth_at = ev_now(ch->loop) + renew_in;
    }
    ch->auth_failure_logged = false;
    if (renewed)
        km_bchan__resume(ch);
    else
        km_bchan__become_ready(ch);
}

void km_bchan__sasl_on_response(km_bchan *ch, km_reader *r)
{
    km_err err;
    int rc = km_sasl_client_on_response(ch->sasl, r->p + r->pos, km_reader_left(r), &err);
    if (rc < 0)
        auth_failed(ch, err.msg);
    else if (rc == 0)
        authenticated(ch);
    else if (send_step(ch))
        km_bchan__disconnect(ch, "cannot send SaslAuthenticate");
}
