/* The server's side of a SASL exchange over Kafka requests, as SaslServerAuthenticator runs it
 * (handleKafkaRequest, handleHandshakeRequest, handleSaslToken), with PlainSaslServer and
 * ScramSaslServer checking the login.  The simulators' SASL listeners use it. */
#include "km_sasl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
    /* KIP-368 (connections.max.reauth.ms) */
    int64_t lifetime_ms;               /* answered in SaslAuthenticate v1+; 0: sessions never expire */
    int64_t expires_ns;                /* CLOCK_MONOTONIC; 0: no expiry */
    int64_t last_reauth_ns;            /* when the last re-authentication began; 0: none yet */
    bool reauthenticating, reauthenticated;
    km_sasl_mech prev_mech;
    char prev_user[KM_SASL_NAME_MAX];
};

#define MIN_REAUTH_INTERVAL_NS 1000000000LL /* KafkaChannel.MIN_REAUTH_INTERVAL_ONE_SECOND_NANOS */

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

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

void km_sasl_server_set_session_lifetime(km_sasl_server *s, int64_t lifetime_ms)
{
    s->lifetime_ms = lifetime_ms > 0 ? lifetime_ms : 0;
}

bool km_sasl_server_authenticated(const km_sasl_server *s) { return s->state == SRV_DONE && s->user[0]; }
bool km_sasl_server_reauthenticated(const km_sasl_server *s) { return s->reauthenticated; }
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
    const char *asked = rq.mechanism.ptr ? rq.mechanism.ptr : "(null)";
    if (km_sasl_mech_parse(rq.mechanism.ptr ? rq.mechanism.ptr : "", &s->mech, &ignored) ||
        !(s->mechanisms & (1u << s->mech))) {
        rs.error_code = E_UNSUPPORTED_SASL_MECHANISM; /* then UnsupportedSaslMechanismException closes */
        *what = KM_SASL_FAILED;
        km_fail(err, "Unsupported SASL mechanism %s", asked);
    } else if (s->reauthenticating && s->mech != s->prev_mech) { /* ReauthInfo.saslMechanismUnchanged */
        rs.error_code = E_UNSUPPORTED_SASL_MECHANISM;
        *what = KM_SASL_FAILED;
        km_fail(err, "SASL mechanism '%s' requested by client is not supported for re-authentication of mechanism "
                     "'%s'", asked, km_sasl_mech_name(s->prev_mech));
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

/* ReauthInfo.ensurePrincipalUnchanged: a re-authentication keeps the principal. */
static int principal_changed(km_sasl_server *s, km_err *err)
{
    if (!s->reauthenticating || !strcmp(s->user, s->prev_user))
        return 0;
    km_fail(err, "Cannot change principals during re-authentication from User:%s: User:%s", s->prev_user, s->user);
    snprintf(s->user, sizeof s->user, "%s", s->prev_user);
    return -1;
}

/* ReauthInfo.calcCompletionTimesAndReturnSessionLifetimeMs: with connections.max.reauth.ms the
 * session ends that long after this authentication (the client is told, SaslAuthenticate v1+). */
static void session_begins(km_sasl_server *s, int64_t *lifetime_field)
{
    s->state = SRV_DONE;
    km_scram_server_free(s->scram);
    s->scram = NULL;
    s->reauthenticated = s->reauthenticating;
    s->reauthenticating = false;
    s->expires_ns = s->lifetime_ms > 0 ? now_ns() + s->lifetime_ms * 1000000LL : 0;
    if (lifetime_field)
        *lifetime_field = s->lifetime_ms;
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
    if (mechanism_step(s, rq.auth_bytes, reply, &done, err) || (done && principal_changed(s, err))) {
        snprintf(why, sizeof(km_err), "%s", err->msg);
        rs.error_code = E_SASL_AUTHENTICATION_FAILED;
        rs.error_message = km_cstr(why);
        *what = KM_SASL_FAILED;
    } else {
        rs.auth_bytes = (km_bytes){ (const uint8_t *)reply, (int32_t)strlen(reply) };
        *what = done ? KM_SASL_AUTHENTICATED : KM_SASL_ANSWERED;
        if (done)
            session_begins(s, h->api_version >= 1 ? &rs.session_lifetime_ms : NULL);
    }
    km_err enc;
    return km_frame_response(KM_API_SASL_AUTHENTICATE, h->api_version, h->correlation_id, &rs, out, &enc)
               ? (*err = enc, -1) : 0;
}

/* KafkaApis after authentication (re-authentication refused or not enabled): ILLEGAL_SASL_STATE. */
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

/* SocketServer's Processor hands a SaslHandshake on an authenticated connection to
 * KafkaChannel.maybeBeginServerReauthentication before it checks the session's expiry: allowed
 * when sessions expire (connections.max.reauth.ms) and the last re-authentication began at
 * least a second ago; otherwise KafkaApis answers it (ILLEGAL_SASL_STATE). */
static bool may_reauthenticate(km_sasl_server *s)
{
    int64_t now = now_ns();
    if (!s->expires_ns || (s->last_reauth_ns && now - s->last_reauth_ns < MIN_REAUTH_INTERVAL_NS))
        return false;
    s->last_reauth_ns = now;
    s->reauthenticating = true;
    s->prev_mech = s->mech;
    snprintf(s->prev_user, sizeof s->prev_user, "%s", s->user);
    s->state = SRV_HANDSHAKE;
    return true;
}

int km_sasl_server_serve(km_sasl_server *s, const km_request_header_view *h, const uint8_t *body, size_t len,
                         km_buf *out, km_arena *a, km_sasl_served *what, km_err *err)
{
    bool sasl_api = h->api_key == KM_API_SASL_HANDSHAKE || h->api_key == KM_API_SASL_AUTHENTICATE;
    *what = KM_SASL_PASS;
    if (s->state == SRV_DONE && h->api_key == KM_API_SASL_HANDSHAKE && may_reauthenticate(s))
        return handshake(s, h, body, len, out, a, what, err);
    if (s->state == SRV_DONE && s->expires_ns && now_ns() - s->expires_ns > 0) {
        *what = KM_SASL_EXPIRED;
        km_fail(err, "the SASL session of '%s' expired %lld ms ago without a re-authentication", s->user,
                (long long)((now_ns() - s->expires_ns) / 1000000));
        return 0;
    }
    if (s->state == SRV_DONE)
        return sasl_api ? (*what = KM_SASL_ANSWERED, illegal_state(h, out, err)) : 0;
    if (h->api_key == KM_API_API_VERSIONS && !s->reauthenticating) /* a renewal reuses the first ApiVersions */
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
