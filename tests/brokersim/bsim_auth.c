/* Broker simulator: a SASL listener and the ClusterAction check, as a ZK-mode broker does them.
 *  - org.apache.kafka.common.security.authenticator.SaslServerAuthenticator: before
 *    authentication only ApiVersions and SaslHandshake are Kafka requests it serves
 *    (handleKafkaRequest: "Unexpected Kafka request of type ... during SASL handshake." closes
 *    the connection); after SaslHandshake v1, SaslAuthenticate frames carry the tokens
 *    (handleSaslToken); an authentication failure is answered SASL_AUTHENTICATION_FAILED with
 *    the reason and the connection is closed;
 *  - PlainSaslServer.evaluateResponse and ScramSaslServer.evaluateResponse check the users'
 *    credentials (the simulator keeps plain passwords and salts them per exchange);
 *  - KafkaApis.handleLeaderAndIsrRequest / handleUpdateMetadataRequest / handleStopReplicaRequest
 *    call authHelper.authorizeClusterOperation(request, CLUSTER_ACTION) first; the authorizer
 *    (AclAuthorizer) lets super.users through, and without ACLs (allow.everyone.if.no.acl.found
 *    false) nobody else: ClusterAuthorizationException -> CLUSTER_AUTHORIZATION_FAILED.
 * On a listener without SASL, SaslHandshake and SaslAuthenticate reach KafkaApis, which answers
 * ILLEGAL_SASL_STATE (handleSaslHandshakeRequest / handleSaslAuthenticateRequest). */
#include "bsim_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define E_UNSUPPORTED_SASL_MECHANISM 33
#define E_ILLEGAL_SASL_STATE 34
#define E_SASL_AUTHENTICATION_FAILED 58

int km_bsim_parse_sasl_mechanisms(km_bsim_config *cfg, const char *list, km_err *err)
{
    cfg->sasl_mechanisms = 0;
    while (list && *list) {
        size_t n = strcspn(list, ",");
        char name[32];
        km_sasl_mech m;
        snprintf(name, sizeof name, "%.*s", (int)(n < sizeof name ? n : sizeof name - 1), list);
        if (km_sasl_mech_parse(name, &m, err))
            return -1;
        cfg->sasl_mechanisms |= 1u << m;
        list += n + (list[n] == ',');
    }
    return 0;
}

static int add_user(km_bsim *s, const char *item, size_t n, km_err *err)
{
    const char *colon = memchr(item, ':', n);
    if (!colon || colon == item)
        return km_fail(err, "brokersim: SASL user '%.*s' is not user:password", (int)n, item);
    bsim_user *grown = realloc(s->users, (s->n_users + 1) * sizeof *grown);
    if (!grown)
        return km_fail(err, "brokersim: out of memory");
    s->users = grown;
    bsim_user *u = &s->users[s->n_users++];
    u->name = strndup(item, (size_t)(colon - item));
    u->password = strndup(colon + 1, n - (size_t)(colon - item) - 1);
    return u->name && u->password ? 0 : km_fail(err, "brokersim: out of memory");
}

int bsim_auth_config(km_bsim *s, const km_bsim_config *cfg, km_err *err)
{
    for (const char *p = cfg->sasl_users; p && *p;) {
        size_t n = strcspn(p, ",");
        if (n && add_user(s, p, n, err))
            return -1;
        p += n + (p[n] == ',');
    }
    if (cfg->super_users && !(s->super_users = strdup(cfg->super_users)))
        return km_fail(err, "brokersim: out of memory");
    s->cfg.sasl_users = s->cfg.super_users = NULL;
    return 0;
}

void bsim_auth_free_config(km_bsim *s)
{
    for (size_t i = 0; i < s->n_users; i++) {
        free(s->users[i].name);
        free(s->users[i].password);
    }
    free(s->users);
    free(s->super_users);
}

void bsim_auth_init(const km_bsim *s, bsim_auth *a)
{
    memset(a, 0, sizeof *a);
    a->state = s->cfg.sasl_mechanisms ? AUTH_HANDSHAKE : AUTH_NONE;
    snprintf(a->principal, sizeof a->principal, "User:ANONYMOUS"); /* KafkaPrincipal.ANONYMOUS */
}

void bsim_auth_free(bsim_auth *a)
{
    km_scram_server_free(a->scram);
    a->scram = NULL;
}

static const char *password_of(const char *user, void *ud)
{
    const km_bsim *s = ud;
    for (size_t i = 0; i < s->n_users; i++)
        if (!strcmp(s->users[i].name, user))
            return s->users[i].password;
    return NULL;
}

/* super.users is "User:a;User:b" (AclAuthorizer.superUsers). */
bool bsim_auth_cluster_action(const km_bsim *s, const bsim_auth *a)
{
    if (!s->cfg.authorizer)
        return true;
    size_t n = strlen(a->principal);
    for (const char *p = s->super_users; p && *p;) {
        size_t len = strcspn(p, ";");
        if (len == n && !strncmp(p, a->principal, n))
            return true;
        p += len + (p[len] == ';');
    }
    return false;
}

static void mechanisms_list(const km_bsim *s, km_sasl_handshake_response *rs, km_arena *arena)
{
    rs->mechanisms.items = km_arena_alloc(arena, 4 * sizeof *rs->mechanisms.items);
    rs->mechanisms.count = 0;
    for (km_sasl_mech m = KM_SASL_PLAIN; rs->mechanisms.items && m <= KM_SASL_SCRAM_SHA_512; m++)
        if (s->cfg.sasl_mechanisms & (1u << m))
            rs->mechanisms.items[rs->mechanisms.count++] = km_cstr(km_sasl_mech_name(m));
}

/* SaslServerAuthenticator.handleHandshakeRequest */
static int handshake(km_bsim *s, bsim_auth *a, const km_request_header_view *h, km_reader *r, km_buf *out,
                     km_arena *arena, bool *close_after, km_err *err)
{
    km_sasl_handshake_request rq;
    if (h->api_version != 1) /* v0 means raw tokens after it (pre KIP-152): not simulated */
        return km_fail(err, "SaslHandshake v%d: the simulator serves v1 only", h->api_version);
    if (km_decode(&km_sasl_handshake_request_desc, 1, r->p + r->pos, km_reader_left(r), &rq, arena, NULL, err))
        return -1;
    km_sasl_handshake_response rs;
    km_sasl_handshake_response_init(&rs);
    mechanisms_list(s, &rs, arena);
    km_sasl_mech m;
    km_err ignored;
    if (km_sasl_mech_parse(rq.mechanism.ptr ? rq.mechanism.ptr : "", &m, &ignored) ||
        !(s->cfg.sasl_mechanisms & (1u << m))) {
        rs.error_code = E_UNSUPPORTED_SASL_MECHANISM; /* then UnsupportedSaslMechanismException closes */
        s->st.sec.sasl_failed++;
        *close_after = true;
    } else {
        a->mech = m;
        a->state = AUTH_TOKENS;
    }
    return km_frame_response(KM_API_SASL_HANDSHAKE, 1, h->correlation_id, &rs, out, err) ? -1 : 1;
}

/* One token through the mechanism's server; reply in *reply (NUL-terminated), or why it failed. */
static int mechanism_step(km_bsim *s, bsim_auth *a, km_bytes token, char *reply, bool *done, km_err *err)
{
    size_t len = token.len > 0 ? (size_t)token.len : 0;
    *done = false;
    reply[0] = '\0';
    if (a->mech == KM_SASL_PLAIN) {
        char user[KM_SASL_NAME_MAX], pass[KM_SASL_NAME_MAX];
        if (km_sasl_plain_parse(token.ptr, len, user, pass, err))
            return -1;
        const char *want = password_of(user, s);
        if (!want || strcmp(want, pass))
            return km_fail(err, "Authentication failed: Invalid username or password");
        snprintf(a->principal, sizeof a->principal, "User:%s", user);
        *done = true;
        return 0;
    }
    if (!a->scram) {
        if (!(a->scram = km_scram_server_new(a->mech, 4096, NULL, 0, NULL, err)))
            return -1;
        return km_scram_server_first(a->scram, token.ptr, len, password_of, s, reply, err);
    }
    if (km_scram_server_final(a->scram, token.ptr, len, reply, err))
        return km_fail(err, "Authentication failed during authentication due to invalid credentials with SASL "
                            "mechanism %s", km_sasl_mech_name(a->mech));
    snprintf(a->principal, sizeof a->principal, "User:%s", km_scram_server_user(a->scram));
    *done = true;
    return 0;
}

/* SaslServerAuthenticator.handleSaslToken (SaslAuthenticate v0-2). */
static int authenticate(km_bsim *s, bsim_auth *a, const km_request_header_view *h, km_reader *r, km_buf *out,
                        km_arena *arena, bool *close_after, km_err *err)
{
    km_sasl_authenticate_request rq;
    if (km_decode(&km_sasl_authenticate_request_desc, h->api_version, r->p + r->pos, km_reader_left(r), &rq, arena,
                  NULL, err))
        return -1;
    km_sasl_authenticate_response rs;
    km_sasl_authenticate_response_init(&rs);
    char *reply = km_arena_alloc(arena, KM_SASL_MSG_MAX), *why = km_arena_alloc(arena, sizeof(km_err));
    km_err fail;
    bool done;
    if (!reply || !why)
        return km_fail(err, "brokersim: out of memory");
    if (mechanism_step(s, a, rq.auth_bytes, reply, &done, &fail)) {
        snprintf(why, sizeof(km_err), "%s", fail.msg);
        rs.error_code = E_SASL_AUTHENTICATION_FAILED;
        rs.error_message = km_cstr(why);
        s->st.sec.sasl_failed++;
        *close_after = true;
    } else {
        rs.auth_bytes = (km_bytes){ (const uint8_t *)reply, (int32_t)strlen(reply) };
        if (done) {
            a->state = AUTH_DONE;
            bsim_auth_free(a);
            s->st.sec.sasl_ok++;
        }
    }
    return km_frame_response(KM_API_SASL_AUTHENTICATE, h->api_version, h->correlation_id, &rs, out, err) ? -1 : 1;
}

/* KafkaApis on a listener without SASL, or after authentication (no re-authentication here). */
static int illegal_state(const km_request_header_view *h, km_buf *out, km_err *err)
{
    if (h->api_key == KM_API_SASL_HANDSHAKE) {
        km_sasl_handshake_response rs;
        km_sasl_handshake_response_init(&rs);
        rs.error_code = E_ILLEGAL_SASL_STATE;
        return km_frame_response(h->api_key, h->api_version, h->correlation_id, &rs, out, err) ? -1 : 1;
    }
    km_sasl_authenticate_response rs;
    km_sasl_authenticate_response_init(&rs);
    rs.error_code = E_ILLEGAL_SASL_STATE;
    rs.error_message = km_cstr("SaslAuthenticate request received after successful authentication");
    return km_frame_response(h->api_key, h->api_version, h->correlation_id, &rs, out, err) ? -1 : 1;
}

int bsim_auth_serve(km_bsim *s, bsim_auth *a, const km_request_header_view *h, km_reader *r, km_buf *out,
                    km_arena *arena, bool *close_after, km_err *err)
{
    bool sasl_api = h->api_key == KM_API_SASL_HANDSHAKE || h->api_key == KM_API_SASL_AUTHENTICATE;
    if (a->state == AUTH_NONE || a->state == AUTH_DONE)
        return sasl_api ? illegal_state(h, out, err) : 0;
    if (h->api_key == KM_API_API_VERSIONS)
        return 0;
    if (a->state == AUTH_HANDSHAKE && h->api_key == KM_API_SASL_HANDSHAKE)
        return handshake(s, a, h, r, out, arena, close_after, err);
    if (a->state == AUTH_TOKENS && h->api_key == KM_API_SASL_AUTHENTICATE)
        return authenticate(s, a, h, r, out, arena, close_after, err);
    if (!sasl_api)
        s->st.sec.unauthenticated++;
    return km_fail(err, "Unexpected Kafka request of type %s during SASL handshake.",
                   km_api_name(h->api_key) ? km_api_name(h->api_key) : "?");
}
