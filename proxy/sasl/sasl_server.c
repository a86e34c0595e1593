/* The server's side of a SASL exchange over Kafka requests, as SaslServerAuthenticator runs it
 * (handleKafkaRequest, handleHandshakeRequest, handleSaslToken), with PlainSaslServer and
 * ScramSaslServer checking the login.  The simulators' SASL listeners use it. */
#include "km_sasl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define E_UNSUPPORTED_SASL_MECHANISM 33
#define E_ILLEGAL_SASL_STATE 34
#define E_SASL_AUTHENTICATION_FAILED 58

typedef enum srv_state { SRV_HANDSHAKE, SRV_TOKENS, SRV_DONE } srv_state;

struct km_sasl_server {
    unsigned mechanisms;
    km_scram_lookup_fn lookup;
    void *ud;
    srv_state state;
    km_sasl_mech mech;
    km_scram_server *scram;
    char user[KM_SASL_NAME_MAX];
};

km_sasl_server *km_sasl_server_new(unsigned mechanisms, km_scram_lookup_fn lookup, void *ud, km_err *err)
{
    km_sasl_server *s = calloc(1, sizeof *s);
    if (!s) {
        km_fail(err, "SASL: out of memory");
        return NULL;
    }
    s->mechanisms = mechanisms;
    s->lookup = lookup;
    s->ud = ud;
    s->state = mechanisms ? SRV_HANDSHAKE : SRV_DONE; /* no SASL listener: KafkaApis' ILLEGAL_SASL_STATE */
    return s;
}

void km_sasl_server_free(km_sasl_server *s)
{
    if (!s)
        return;
    km_scram_server_free(s->scram);
    free(s);
}

bool km_sasl_server_authenticated(const km_sasl_server *s) { return s->state == SRV_DONE && s->user[0]; }
const char *km_sasl_server_user(const km_sasl_server *s) { return s->state == SRV_DONE ? s->user : ""; }

static int handshake(km_sasl_server *s, const km_request_header_view *h, const uint8_t *body, size_t len,
                     km_buf *out, km_arena *a, km_sasl_served *what, km_err *err)
{
    km_sasl_handshake_request rq;
    if (h->api_version != 1) /* v0 means raw tokens after it (pre KIP-152): not served */
        return *what = KM_SASL_UNEXPECTED, km_fail(err, "SaslHandshake v%d: only v1 is served", h->api_version), 0;
    if (km_decode(&km_sasl_handshake_request_desc, 1, body, len, &rq, a, NULL, err))
        return *what = KM_SASL_UNEXPECTED, 0;
    km_sasl_handshake_response rs;
    km_sasl_handshake_response_init(&rs);
    rs.mechanisms.items = km_arena_alloc(a, 4 * sizeof *rs.mechanisms.items);
    rs.mechanisms.count = 0;
    for (km_sasl_mech m = KM_SASL_PLAIN; rs.mechanisms.items && m <= KM_SASL_SCRAM_SHA_512; m++)
        if (s->mechanisms & (1u << m))
            rs.mechanisms.items[rs.mechanisms.count++] = km_cstr(km_sasl_mech_name(m));
    km_err ignored;
    if (km_sasl_mech_parse(rq.mechanism.ptr ? rq.mechanism.ptr : "", &s->mech, &ignored) ||
        !(s->mechanisms & (1u << s->mech))) {
        rs.error_code = E_UNSUPPORTED_SASL_MECHANISM; /* then UnsupportedSaslMechanismException closes */
        *what = KM_SASL_FAILED;
        km_fail(err, "Unsupported SASL mechanism %s", rq.mechanism.ptr ? rq.mechanism.ptr : "(null)");
    } else {
        s->state = SRV_TOKENS;
        *what = KM_SASL_ANSWERED;
    }
    return km_frame_response(KM_API_SASL_HANDSHAKE, 1, h->correlation_id, &rs, out, err);
}

/* One token through the mechanism: reply (NUL-terminated) and *done, or why it failed. */
static int mechanism_step(km_sasl_server *s, km_bytes token, char *reply, bool *done, km_err *err)
{
    size_t len = token.len > 0 ? (size_t)token.len : 0;
    *done = false;
    reply[0] = '\0';
    if (s->mech == KM_SASL_PLAIN) {
        char user[KM_SASL_NAME_MAX], pass[KM_SASL_NAME_MAX];
        if (km_sasl_plain_parse(token.ptr, len, user, pass, err))
            return -1;
        const char *want = s->lookup(user, s->ud);
        int bad = !want || strcmp(want, pass);
        explicit_bzero(pass, sizeof pass);
        if (bad)
            return km_fail(err, "Authentication failed: Invalid username or password");
        snprintf(s->user, sizeof s->user, "%s", user);
        *done = true;
        return 0;
    }
    if (!s->scram) {
        if (!(s->scram = km_scram_server_new(s->mech, 4096, NULL, 0, NULL, err)))
            return -1;
        return km_scram_server_first(s->scram, token.ptr, len, s->lookup, s->ud, reply, err);
    }
    if (km_scram_server_final(s->scram, token.ptr, len, reply, err))
        return km_fail(err, "Authentication failed during authentication due to invalid credentials with SASL "
                            "mechanism %s", km_sasl_mech_name(s->mech));
    snprintf(s->user, sizeof s->user, "%s", km_scram_server_user(s->scram));
    *done = true;
    return 0;
}

static int authenticate(km_sasl_server *s, const km_request_header_view *h, const uint8_t *body, size_t len,
                        km_buf *out, km_arena *a, km_sasl_served *what, km_err *err)
{
    km_sasl_authenticate_request rq;
    if (km_decode(&km_sasl_authenticate_request_desc, h->api_version, body, len, &rq, a, NULL, err))
        return *what = KM_SASL_UNEXPECTED, 0;
    km_sasl_authenticate_response rs;
    km_sasl_authenticate_response_init(&rs);
    char *reply = km_arena_alloc(a, KM_SASL_MSG_MAX), *why = km_arena_alloc(a, sizeof(km_err));
    bool done;
    if (!reply || !why)
        return km_fail(err, "SASL: out of memory");
    if (mechanism_step(s, rq.auth_bytes, reply, &done, err)) {
        snprintf(why, sizeof(km_err), "%s", err->msg);
        rs.error_code = E_SASL_AUTHENTICATION_FAILED;
        rs.error_message = km_cstr(why);
        *what = KM_SASL_FAILED;
    } else {
        rs.auth_bytes = (km_bytes){ (const uint8_t *)reply, (int32_t)strlen(reply) };
        *what = done ? KM_SASL_AUTHENTICATED : KM_SASL_ANSWERED;
        if (done) {
            s->state = SRV_DONE;
            km_scram_server_free(s->scram);
            s->scram = NULL;
        }
    }
    km_err enc;
    return km_frame_response(KM_API_SASL_AUTHENTICATE, h->api_version, h->correlation_id, &rs, out, &enc)
               ? (*err = enc, -1) : 0;
}

/* KafkaApis after authentication (no re-authentication here): ILLEGAL_SASL_STATE. */
static int illegal_state(const km_request_header_view *h, km_buf *out, km_err *err)
{
    if (h->api_key == KM_API_SASL_HANDSHAKE) {
        km_sasl_handshake_response rs;
        km_sasl_handshake_response_init(&rs);
        rs.error_code = E_ILLEGAL_SASL_STATE;
        return km_frame_response(h->api_key, h->api_version, h->correlation_id, &rs, out, err);
    }
    km_sasl_authenticate_response rs;
    km_sasl_authenticate_response_init(&rs);
    rs.error_code = E_ILLEGAL_SASL_STATE;
    rs.error_message = km_cstr("SaslAuthenticate request received after successful authentication");
    return km_frame_response(h->api_key, h->api_version, h->correlation_id, &rs, out, err);
}

int km_sasl_server_serve(km_sasl_server *s, const km_request_header_view *h, const uint8_t *body, size_t len,
                         km_buf *out, km_arena *a, km_sasl_served *what, km_err *err)
{
    bool sasl_api = h->api_key == KM_API_SASL_HANDSHAKE || h->api_key == KM_API_SASL_AUTHENTICATE;
    *what = KM_SASL_PASS;
    if (s->state == SRV_DONE)
        return sasl_api ? (*what = KM_SASL_ANSWERED, illegal_state(h, out, err)) : 0;
    if (h->api_key == KM_API_API_VERSIONS)
        return 0;
    if (s->state == SRV_HANDSHAKE && h->api_key == KM_API_SASL_HANDSHAKE)
        return handshake(s, h, body, len, out, a, what, err);
    if (s->state == SRV_TOKENS && h->api_key == KM_API_SASL_AUTHENTICATE)
        return authenticate(s, h, body, len, out, a, what, err);
    *what = KM_SASL_UNEXPECTED;
    km_fail(err, "Unexpected Kafka request of type %s during SASL handshake.",
            km_api_name(h->api_key) ? km_api_name(h->api_key) : "?");
    return 0;
}
