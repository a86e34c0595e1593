/* km_bchan: SASL between ApiVersions and the first control request, in the order of Kafka's
 * SaslClientAuthenticator (SEND_APIVERSIONS_REQUEST -> SEND_HANDSHAKE_REQUEST -> INITIAL ->
 * INTERMEDIATE -> COMPLETE): the exchange is km_sasl's (SaslHandshake v1, then SaslAuthenticate
 * frames carrying the mechanism's messages, KIP-152); here it travels on the channel.  A
 * refusal closes the connection (the broker closes it too) and the reconnect backoff paces the
 * retries. */
#include "broker_private.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void km_bchan__sasl_reset(km_bchan *ch)
{
    km_sasl_client_free(ch->sasl);
    ch->sasl = NULL;
}

/* Logged once (level error) until an authentication succeeds again; later ones at debug. */
static void auth_failed(km_bchan *ch, const char *why)
{
    ch->st.auth_failures++;
    km_bchan__log(ch, ch->auth_failure_logged ? 4 : 1,
                  "SASL/%s authentication as '%s' failed: %s (retrying after the reconnect backoff%s)",
                  km_sasl_mech_name(ch->cfg.sasl.mechanism), ch->sasl_user, why,
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

static void authenticated(km_bchan *ch)
{
    int64_t session_lifetime_ms = km_sasl_client_session_lifetime_ms(ch->sasl);
    km_bchan__sasl_reset(ch);
    km_bchan__log(ch, ch->auth_failure_logged ? 3 : 4, "authenticated with SASL/%s as '%s'%s",
                  km_sasl_mech_name(ch->cfg.sasl.mechanism), ch->sasl_user,
                  ch->auth_failure_logged ? " (after failures)" : "");
    if (session_lifetime_ms > 0) /* connections.max.reauth.ms: the broker closes then; the reconnect re-authenticates */
        km_bchan__log(ch, 4, "the broker ends this SASL session in %lld ms", (long long)session_lifetime_ms);
    ch->auth_failure_logged = false;
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
