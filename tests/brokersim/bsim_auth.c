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
 * ILLEGAL_SASL_STATE (handleSaslHandshakeRequest / handleSaslAuthenticateRequest).
 * With connections.max.reauth.ms (cfg.sasl_session_lifetime_ms) sessions expire: SocketServer's
 * Processor closes a connection whose session expired on its next request
 * (KafkaChannel.serverAuthenticationSessionExpired), unless a SaslHandshake began a
 * re-authentication (maybeBeginServerReauthentication, KIP-368).
 * The exchange itself is km_sasl's server side (shared with the raft simulator); here are the
 * users, the principal and the counters. */
#include "bsim_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

int km_bsim_set_sasl_password(km_bsim *s, const char *user, const char *password, km_err *err)
{
    int rc = km_fail(err, "brokersim: no SASL user '%s'", user);
    pthread_mutex_lock(&s->mu);
    for (size_t i = 0; i < s->n_users; i++) {
        char *copy;
        if (strcmp(s->users[i].name, user))
            continue;
        if (!(copy = strdup(password))) {
            rc = km_fail(err, "brokersim: out of memory");
            break;
        }
        free(s->users[i].password);
        s->users[i].password = copy;
        rc = 0;
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

static const char *password_of(const char *user, void *ud)
{
    const km_bsim *s = ud;
    for (size_t i = 0; i < s->n_users; i++)
        if (!strcmp(s->users[i].name, user))
            return s->users[i].password;
    return NULL;
}

int bsim_auth_init(km_bsim *s, bsim_auth *a, km_err *err)
{
    memset(a, 0, sizeof *a);
    snprintf(a->principal, sizeof a->principal, "User:ANONYMOUS"); /* KafkaPrincipal.ANONYMOUS */
    if (!(a->sasl = km_sasl_server_new(s->cfg.sasl_mechanisms, password_of, s, err)))
        return -1;
    km_sasl_server_set_session_lifetime(a->sasl, s->cfg.sasl_session_lifetime_ms);
    return 0;
}

void bsim_auth_free(bsim_auth *a)
{
    km_sasl_server_free(a->sasl);
    a->sasl = NULL;
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

/* SaslServerAuthenticator (km_sasl's) before KafkaApis. */
int bsim_auth_serve(km_bsim *s, bsim_auth *a, const km_request_header_view *h, km_reader *r, km_buf *out,
                    km_arena *arena, bool *close_after, km_err *err)
{
    km_sasl_served what;
    if (km_sasl_server_serve(a->sasl, h, r->p + r->pos, km_reader_left(r), out, arena, &what, err))
        return -1;
    switch (what) {
    case KM_SASL_PASS:
        return 0;
    case KM_SASL_EXPIRED:
        s->st.sec.sasl_expired++;
        return -1;
    case KM_SASL_UNEXPECTED:
        s->st.sec.unauthenticated += h->api_key != KM_API_SASL_HANDSHAKE && h->api_key != KM_API_SASL_AUTHENTICATE;
        return -1;
    case KM_SASL_FAILED:
        s->st.sec.sasl_failed++;
        *close_after = true;
        return 1;
    case KM_SASL_AUTHENTICATED:
        s->st.sec.sasl_ok++;
        s->st.sec.sasl_reauth += km_sasl_server_reauthenticated(a->sasl);
        snprintf(a->principal, sizeof a->principal, "User:%s", km_sasl_server_user(a->sasl));
        return 1;
    case KM_SASL_ANSWERED:
        return 1;
    }
    return 1;
}
