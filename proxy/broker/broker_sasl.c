/* km_bchan: SASL between ApiVersions and the first control request, in the order of Kafka's
 * SaslClientAuthenticator (SEND_APIVERSIONS_REQUEST -> SEND_HANDSHAKE_REQUEST -> INITIAL ->
 * INTERMEDIATE -> COMPLETE): SaslHandshake v1 names the mechanism, then SaslAuthenticate
 * frames carry the mechanism's messages (KIP-152).  A refusal closes the connection (the broker
 * closes it too) and the reconnect backoff paces the retries. */
#include "broker_private.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define E_UNSUPPORTED_SASL_MECHANISM 33
#define E_ILLEGAL_SASL_STATE 34

void km_bchan__sasl_reset(km_bchan *ch)
{
    km_scram_client_free(ch->scram);
    ch->scram = NULL;
    ch->sasl_step = 0;
}

/* Logged once (level error) until an authentication succeeds again; later ones at debug. */
static void auth_failed(km_bchan *ch, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void auth_failed(km_bchan *ch, const char *fmt, ...)
{
    char why[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    ch->st.auth_failures++;
    km_bchan__log(ch, ch->auth_failure_logged ? 4 : 1,
                  "SASL/%s authentication as '%s' failed: %s (retrying after the reconnect backoff%s)",
                  km_sasl_mech_name(ch->cfg.sasl.mechanism), ch->sasl_user, why,
                  ch->auth_failure_logged ? "" : "; further failures are logged at debug level");
    ch->auth_failure_logged = true;
    km_bchan__disconnect_at(ch, 4, "SASL authentication failed");
}

static int send_sasl(km_bchan *ch, int16_t api, int16_t v, const void *body)
{
    km_err err;
    ch->sasl_api = api;
    ch->sasl_version = v;
    if (km_bchan__send_framed(ch, api, v, body, &err)) {
        km_bchan__log(ch, 1, "%s: %s", km_api_name(api), err.msg);
        return -1;
    }
    return 0;
}

static int send_token(km_bchan *ch, const void *bytes, size_t len)
{
    km_sasl_authenticate_request rq;
    km_sasl_authenticate_request_init(&rq);
    rq.auth_bytes = (km_bytes){ bytes, (int32_t)len };
    ch->sasl_step++;
    return send_sasl(ch, KM_API_SASL_AUTHENTICATE, ch->sasl_auth_version, &rq);
}

/* The highest version of api both sides speak, or -1. */
static int16_t common_version(const km_api_versions_response *rs, int16_t api)
{
    const km_message_desc *md = km_find_message(KM_K_REQUEST, api);
    for (int32_t k = 0; k < rs->api_keys.count; k++) {
        const km_api_versions_response_api_version *av = &rs->api_keys.items[k];
        if (av->api_key != api)
            continue;
        int16_t hi = av->max_version < md->valid.hi ? av->max_version : md->valid.hi;
        return hi >= av->min_version && hi >= md->valid.lo ? hi : -1;
    }
    return -1;
}

int km_bchan__sasl_start(km_bchan *ch, const km_api_versions_response *rs)
{
    if (ch->cfg.sasl.mechanism == KM_SASL_NONE)
        return 1;
    /* SaslHandshake v0 would send the tokens as raw frames (before KIP-152): brokers since 1.0 take v1. */
    int16_t hs = common_version(rs, KM_API_SASL_HANDSHAKE);
    ch->sasl_auth_version = common_version(rs, KM_API_SASL_AUTHENTICATE);
    if (hs < 1 || ch->sasl_auth_version < 0) {
        auth_failed(ch, "the broker offers no SaslHandshake v1 and SaslAuthenticate (is the listener a SASL one?)");
        return 0; /* already disconnected */
    }
    km_sasl_handshake_request rq;
    km_sasl_handshake_request_init(&rq);
    rq.mechanism = km_cstr(km_sasl_mech_name(ch->cfg.sasl.mechanism));
    ch->state = CH_AUTHENTICATING;
    ch->sasl_step = 0;
    return send_sasl(ch, KM_API_SASL_HANDSHAKE, 1, &rq);
}

static int first_token(km_bchan *ch)
{
    km_err err;
    if (ch->cfg.sasl.mechanism == KM_SASL_PLAIN) {
        uint8_t msg[KM_SASL_MSG_MAX];
        size_t len;
        if (km_sasl_plain_message(ch->sasl_user, ch->sasl_pass, msg, &len, &err))
            return auth_failed(ch, "%s", err.msg), 0;
        int rc = send_token(ch, msg, len);
        explicit_bzero(msg, sizeof msg);
        return rc;
    }
    char first[KM_SASL_MSG_MAX];
    km_bchan__sasl_reset(ch);
    if (!(ch->scram = km_scram_client_new(ch->cfg.sasl.mechanism, ch->sasl_user, ch->sasl_pass, NULL, &err)) ||
        km_scram_client_first(ch->scram, first, &err))
        return auth_failed(ch, "%s", err.msg), 0;
    return send_token(ch, first, strlen(first));
}

static void on_handshake(km_bchan *ch, km_reader *r, km_arena *a)
{
    km_sasl_handshake_response rs;
    km_err err;
    if (km_decode(&km_sasl_handshake_response_desc, ch->sasl_version, r->p + r->pos, km_reader_left(r), &rs, a, NULL,
                  &err)) {
        km_bchan__disconnect(ch, err.msg);
        return;
    }
    if (rs.error_code == E_UNSUPPORTED_SASL_MECHANISM) {
        char offered[256] = "";
        for (int32_t i = 0; i < rs.mechanisms.count; i++)
            snprintf(offered + strlen(offered), sizeof offered - strlen(offered), "%s%.*s", i ? ", " : "",
                     (int)rs.mechanisms.items[i].len, rs.mechanisms.items[i].ptr);
        auth_failed(ch, "the listener does not enable %s (it offers: %s)", km_sasl_mech_name(ch->cfg.sasl.mechanism),
                    offered);
        return;
    }
    if (rs.error_code) {
        auth_failed(ch, "SaslHandshake: %s (%d)%s", km_broker_err_name(rs.error_code), rs.error_code,
                    rs.error_code == E_ILLEGAL_SASL_STATE ? ": is the listener a SASL one?" : "");
        return;
    }
    if (first_token(ch))
        km_bchan__disconnect(ch, "cannot send SaslAuthenticate");
}

static void authenticated(km_bchan *ch, int64_t session_lifetime_ms)
{
    km_bchan__sasl_reset(ch);
    km_bchan__log(ch, ch->auth_failure_logged ? 3 : 4, "authenticated with SASL/%s as '%s'%s",
                  km_sasl_mech_name(ch->cfg.sasl.mechanism), ch->sasl_user,
                  ch->auth_failure_logged ? " (after failures)" : "");
    if (session_lifetime_ms > 0) /* connections.max.reauth.ms: the broker closes then; the reconnect re-authenticates */
        km_bchan__log(ch, 4, "the broker ends this SASL session in %lld ms", (long long)session_lifetime_ms);
    ch->auth_failure_logged = false;
    km_bchan__become_ready(ch);
}

/* SCRAM: server-first -> client-final; server-final -> verified. */
static void scram_step(km_bchan *ch, const km_sasl_authenticate_response *rs)
{
    km_err err;
    if (ch->sasl_step == 1) {
        char final[KM_SASL_MSG_MAX];
        if (km_scram_client_final(ch->scram, rs->auth_bytes.ptr, rs->auth_bytes.len > 0 ? (size_t)rs->auth_bytes.len : 0,
                                  final, &err)) {
            auth_failed(ch, "%s", err.msg);
            return;
        }
        if (send_token(ch, final, strlen(final)))
            km_bchan__disconnect(ch, "cannot send SaslAuthenticate");
        return;
    }
    if (km_scram_client_verify(ch->scram, rs->auth_bytes.ptr, rs->auth_bytes.len > 0 ? (size_t)rs->auth_bytes.len : 0,
                               &err)) {
        auth_failed(ch, "%s", err.msg);
        return;
    }
    authenticated(ch, rs->session_lifetime_ms);
}

static void on_authenticate(km_bchan *ch, km_reader *r, km_arena *a)
{
    km_sasl_authenticate_response rs;
    km_err err;
    if (km_decode(&km_sasl_authenticate_response_desc, ch->sasl_version, r->p + r->pos, km_reader_left(r), &rs, a,
                  NULL, &err)) {
        km_bchan__disconnect(ch, err.msg);
        return;
    }
    if (rs.error_code) {
        auth_failed(ch, "%s (%d): %s", km_broker_err_name(rs.error_code), rs.error_code,
                    rs.error_message.len > 0 ? rs.error_message.ptr : "the broker gave no reason");
        return;
    }
    if (ch->cfg.sasl.mechanism == KM_SASL_PLAIN)
        authenticated(ch, rs.session_lifetime_ms);
    else
        scram_step(ch, &rs);
}

void km_bchan__sasl_on_response(km_bchan *ch, km_reader *r, km_arena *a)
{
    if (ch->sasl_api == KM_API_SASL_HANDSHAKE)
        on_handshake(ch, r, a);
    else
        on_authenticate(ch, r, a);
}
