/* The client's side of a SASL exchange, transport-free: what Kafka's SaslClientAuthenticator
 * does after ApiVersions (SEND_HANDSHAKE_REQUEST -> INITIAL -> INTERMEDIATE -> COMPLETE).
 * SaslHandshake v0 would carry the tokens as raw frames (before KIP-152): every server since
 * Kafka 1.0 takes v1, so v1 is required. */
#include "km_sasl.h"

#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define E_UNSUPPORTED_SASL_MECHANISM 33
#define E_ILLEGAL_SASL_STATE 34
#define E_SASL_AUTHENTICATION_FAILED 58

typedef enum step { STEP_HANDSHAKE, STEP_FIRST, STEP_FINAL, STEP_DONE } step;

struct km_sasl_client {
    km_sasl_mech mech;
    char user[KM_SASL_NAME_MAX], pass[KM_SASL_NAME_MAX];
    km_scram_client *scram;
    int16_t auth_version;
    step step;
    int64_t lifetime_ms;
    uint8_t token[KM_SASL_MSG_MAX];
    size_t token_len;
    km_sasl_handshake_request handshake;
    km_sasl_authenticate_request authenticate;
};

km_sasl_client *km_sasl_client_new(km_sasl_mech mech, const char *user, const char *pass, km_err *err)
{
    if (mech != KM_SASL_PLAIN && !km_sasl_is_scram(mech)) {
        km_fail(err, "SASL: no mechanism to authenticate with");
        return NULL;
    }
    if (strlen(user) >= KM_SASL_NAME_MAX || strlen(pass) >= KM_SASL_NAME_MAX) {
        km_fail(err, "SASL: user name or password longer than %d bytes", KM_SASL_NAME_MAX - 1);
        return NULL;
    }
    km_sasl_client *c = calloc(1, sizeof *c);
    if (!c) {
        km_fail(err, "SASL: out of memory");
        return NULL;
    }
    c->mech = mech;
    strcpy(c->user, user);
    strcpy(c->pass, pass);
    c->auth_version = -1;
    return c;
}

void km_sasl_client_free(km_sasl_client *c)
{
    if (!c)
        return;
    km_scram_client_free(c->scram);
    explicit_bzero(c, sizeof *c);
    free(c);
}

/* The highest version of api both sides speak, or -1. */
static int16_t common_version(const km_api_versions_response *rs, int16_t api)
{
    const km_message_desc *md = km_find_message(KM_K_REQUEST, api);
    for (int32_t k = 0; md && k < rs->api_keys.count; k++) {
        const km_api_versions_response_api_version *av = &rs->api_keys.items[k];
        if (av->api_key != api)
            continue;
        int16_t hi = av->max_version < md->valid.hi ? av->max_version : md->valid.hi;
        return hi >= av->min_version && hi >= md->valid.lo ? hi : -1;
    }
    return -1;
}

int km_sasl_client_versions(km_sasl_client *c, const km_api_versions_response *rs, km_err *err)
{
    int16_t hs = common_version(rs, KM_API_SASL_HANDSHAKE);
    c->auth_version = common_version(rs, KM_API_SASL_AUTHENTICATE);
    if (hs < 1 || c->auth_version < 0)
        return km_fail(err, "the server offers no SaslHandshake v1 and SaslAuthenticate (is the listener a SASL one?)");
    return 0;
}

void km_sasl_client_request(km_sasl_client *c, int16_t *api, int16_t *version, const void **body)
{
    if (c->step == STEP_HANDSHAKE) {
        km_sasl_handshake_request_init(&c->handshake);
        c->handshake.mechanism = km_cstr(km_sasl_mech_name(c->mech));
        *api = KM_API_SASL_HANDSHAKE;
        *version = 1;
        *body = &c->handshake;
        return;
    }
    km_sasl_authenticate_request_init(&c->authenticate);
    c->authenticate.auth_bytes = (km_bytes){ c->token, (int32_t)c->token_len };
    *api = KM_API_SASL_AUTHENTICATE;
    *version = c->auth_version;
    *body = &c->authenticate;
}

/* The mechanism's first message into c->token. */
static int first_token(km_sasl_client *c, km_err *err)
{
    if (c->mech == KM_SASL_PLAIN)
        return km_sasl_plain_message(c->user, c->pass, c->token, &c->token_len, err);
    km_scram_client_free(c->scram);
    if (!(c->scram = km_scram_client_new(c->mech, c->user, c->pass, NULL, err)) ||
        km_scram_client_first(c->scram, (char *)c->token, err))
        return -1;
    c->token_len = strlen((char *)c->token);
    return 0;
}

static int on_handshake(km_sasl_client *c, const uint8_t *body, size_t len, km_arena *a, km_err *err)
{
    km_sasl_handshake_response rs;
    if (km_decode(&km_sasl_handshake_response_desc, 1, body, len, &rs, a, NULL, err))
        return -1;
    if (rs.error_code == E_UNSUPPORTED_SASL_MECHANISM) {
        char offered[256] = "";
        for (int32_t i = 0; i < rs.mechanisms.count; i++)
            snprintf(offered + strlen(offered), sizeof offered - strlen(offered), "%s%.*s", i ? ", " : "",
                     (int)rs.mechanisms.items[i].len, rs.mechanisms.items[i].ptr);
        return km_fail(err, "the listener does not enable %s (it offers: %s)", km_sasl_mech_name(c->mech), offered);
    }
    if (rs.error_code)
        return km_fail(err, "SaslHandshake answered error %d%s", rs.error_code,
                       rs.error_code == E_ILLEGAL_SASL_STATE ? " (ILLEGAL_SASL_STATE: is the listener a SASL one?)" : "");
    c->step = STEP_FIRST;
    return first_token(c, err) ? -1 : 1;
}

static int on_authenticate(km_sasl_client *c, const uint8_t *body, size_t len, km_arena *a, km_err *err)
{
    km_sasl_authenticate_response rs;
    if (km_decode(&km_sasl_authenticate_response_desc, c->auth_version, body, len, &rs, a, NULL, err))
        return -1;
    if (rs.error_code)
        return km_fail(err, "%s (%d): %s",
                       rs.error_code == E_SASL_AUTHENTICATION_FAILED ? "SASL_AUTHENTICATION_FAILED" : "error",
                       rs.error_code, rs.error_message.len > 0 ? rs.error_message.ptr : "the server gave no reason");
    size_t n = rs.auth_bytes.len > 0 ? (size_t)rs.auth_bytes.len : 0;
    c->lifetime_ms = rs.session_lifetime_ms;
    if (c->mech == KM_SASL_PLAIN || c->step == STEP_FINAL) {
        if (c->mech != KM_SASL_PLAIN && km_scram_client_verify(c->scram, rs.auth_bytes.ptr, n, err))
            return -1;
        c->step = STEP_DONE;
        km_scram_client_free(c->scram);
        c->scram = NULL;
        return 0;
    }
    if (km_scram_client_final(c->scram, rs.auth_bytes.ptr, n, (char *)c->token, err))
        return -1;
    c->token_len = strlen((char *)c->token);
    c->step = STEP_FINAL;
    return 1;
}

int km_sasl_client_on_response(km_sasl_client *c, const uint8_t *body, size_t len, km_err *err)
{
    km_arena a;
    km_arena_init(&a, 1u << 20);
    int rc = c->step == STEP_DONE        ? km_fail(err, "SASL: a response after authentication")
             : c->step == STEP_HANDSHAKE ? on_handshake(c, body, len, &a, err)
                                         : on_authenticate(c, body, len, &a, err);
    km_arena_free(&a);
    return rc;
}

int64_t km_sasl_client_session_lifetime_ms(const km_sasl_client *c)
{
    return c->lifetime_ms;
}

void km_sasl_client_reauthenticate(km_sasl_client *c)
{
    c->step = STEP_HANDSHAKE;
    c->lifetime_ms = 0;
}

/* SaslClientAuthenticator.ReauthInfo.setAuthenticationEndAndSessionReauthenticationTimes
 * (Kafka 3.9): 0.85 + RNG.nextDouble() * 0.10 of the lifetime, counted from the end of the
 * authentication, so that many channels do not re-authenticate at once and network latency and
 * clock drift leave room before the broker's deadline. */
double km_sasl_client_reauth_delay(const km_sasl_client *c)
{
    if (c->lifetime_ms <= 0)
        return 0;
    uint32_t r;
    if (RAND_bytes((unsigned char *)&r, sizeof r) != 1)
        r = UINT32_MAX / 2;
    double pct = 0.85 + 0.10 * ((double)r / 4294967296.0);
    return (double)(int64_t)((double)c->lifetime_ms * pct) / 1000.0;
}
