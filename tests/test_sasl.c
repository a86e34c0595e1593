/* SCRAM against RFC 7677's SCRAM-SHA-256 and RFC 5802's SCRAM-SHA-1 exchanges (both sides,
 * byte for byte), PLAIN's message, Kafka's JAAS line, and the client and server exchanges
 * (SaslHandshake, SaslAuthenticate) against each other through real frames, re-authentication
 * (KIP-368) included. */
#include "km_sasl.h"

#include <criterion/criterion.h>
#include <string.h>
#include <time.h>

typedef struct vector {
    km_sasl_mech mech;
    const char *cnonce, *snonce, *salt_b64;
    const char *client_first, *server_first, *client_final, *server_final;
} vector;

/* RFC 7677, section 3 */
static const vector RFC7677 = {
    KM_SASL_SCRAM_SHA_256, "rOprNGfwEbeRWgbNEkqO", "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0", "W22ZaJ0SNY7soEsUEjb6gQ==",
    "n,,n=user,r=rOprNGfwEbeRWgbNEkqO",
    "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
    "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
    "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="};

/* RFC 5802, section 5 */
static const vector RFC5802 = {
    KM_SASL_SCRAM_SHA_1, "fyko+d2lbbFgONRv9qkxdawL", "3rfcNHYJY1ZVvWVs7j", "QSXCR+Q6sek8bf92",
    "n,,n=user,r=fyko+d2lbbFgONRv9qkxdawL",
    "r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096",
    "c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts=",
    "v=rmF9pqV8S7suAoZWja4dJRkFsKQ="};

static const char *pencil(const char *user, void *ud)
{
    (void)ud;
    return strcmp(user, "user") ? NULL : "pencil";
}

static const uint8_t *u8(const char *s) { return (const uint8_t *)s; }

static void client_side(const vector *v)
{
    km_err err = {{0}};
    char out[KM_SASL_MSG_MAX];
    km_scram_client *c = km_scram_client_new(v->mech, "user", "pencil", v->cnonce, &err);
    cr_assert(c, "%s", err.msg);
    cr_assert_eq(km_scram_client_first(c, out, &err), 0, "%s", err.msg);
    cr_assert_str_eq(out, v->client_first);
    cr_assert_eq(km_scram_client_final(c, u8(v->server_first), strlen(v->server_first), out, &err), 0, "%s", err.msg);
    cr_assert_str_eq(out, v->client_final);
    cr_assert_eq(km_scram_client_verify(c, u8(v->server_final), strlen(v->server_final), &err), 0, "%s", err.msg);
    km_scram_client_free(c);
}

static void server_side(const vector *v)
{
    km_err err = {{0}};
    uint8_t salt[64];
    int64_t salt_len = km_base64_decode(v->salt_b64, strlen(v->salt_b64), salt);
    cr_assert_gt(salt_len, 0);
    km_scram_server *s = km_scram_server_new(v->mech, 4096, salt, (size_t)salt_len, v->snonce, &err);
    cr_assert(s, "%s", err.msg);
    char out[KM_SASL_MSG_MAX];
    cr_assert_eq(km_scram_server_first(s, u8(v->client_first), strlen(v->client_first), pencil, NULL, out, &err), 0,
                 "%s", err.msg);
    cr_assert_str_eq(out, v->server_first);
    cr_assert_str_eq(km_scram_server_user(s), "", "not authenticated before the proof");
    cr_assert_eq(km_scram_server_final(s, u8(v->client_final), strlen(v->client_final), out, &err), 0, "%s", err.msg);
    cr_assert_str_eq(out, v->server_final);
    cr_assert_str_eq(km_scram_server_user(s), "user");
    km_scram_server_free(s);
}

Test(scram, rfc7677_sha256_client_and_server) { client_side(&RFC7677); server_side(&RFC7677); }
Test(scram, rfc5802_sha1_client_and_server) { client_side(&RFC5802); server_side(&RFC5802); }

Test(scram, sha512_round_trip_and_a_wrong_password_is_refused)
{
    km_err err = {{0}};
    char c1[KM_SASL_MSG_MAX], s1[KM_SASL_MSG_MAX], c2[KM_SASL_MSG_MAX], s2[KM_SASL_MSG_MAX];
    for (int wrong = 0; wrong < 2; wrong++) {
        km_scram_client *c = km_scram_client_new(KM_SASL_SCRAM_SHA_512, "user", wrong ? "pencil2" : "pencil", NULL, &err);
        km_scram_server *s = km_scram_server_new(KM_SASL_SCRAM_SHA_512, 0, NULL, 0, NULL, &err);
        cr_assert(c && s, "%s", err.msg);
        cr_assert_eq(km_scram_client_first(c, c1, &err), 0);
        cr_assert_eq(km_scram_server_first(s, u8(c1), strlen(c1), pencil, NULL, s1, &err), 0, "%s", err.msg);
        cr_assert_eq(km_scram_client_final(c, u8(s1), strlen(s1), c2, &err), 0, "%s", err.msg);
        int rc = km_scram_server_final(s, u8(c2), strlen(c2), s2, &err);
        if (wrong) {
            cr_assert_eq(rc, -1);
            cr_assert(strstr(err.msg, "Invalid client credentials"), "%s", err.msg);
        } else {
            cr_assert_eq(rc, 0, "%s", err.msg);
            cr_assert_eq(km_scram_client_verify(c, u8(s2), strlen(s2), &err), 0, "%s", err.msg);
        }
        km_scram_client_free(c);
        km_scram_server_free(s);
    }
}

Test(scram, client_refuses_a_forged_server_and_weak_parameters)
{
    km_err err = {{0}};
    char out[KM_SASL_MSG_MAX];
    km_scram_client *c = km_scram_client_new(KM_SASL_SCRAM_SHA_256, "user", "pencil", RFC7677.cnonce, &err);
    cr_assert_eq(km_scram_client_first(c, out, &err), 0);
    const char *low = "r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=1000";
    cr_assert_eq(km_scram_client_final(c, u8(low), strlen(low), out, &err), -1);
    cr_assert(strstr(err.msg, "iterations 1000"), "%s", err.msg);
    const char *other = "r=somebodyelse,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
    cr_assert_eq(km_scram_client_final(c, u8(other), strlen(other), out, &err), -1);
    cr_assert(strstr(err.msg, "nonce"), "%s", err.msg);
    cr_assert_eq(km_scram_client_final(c, u8(RFC7677.server_first), strlen(RFC7677.server_first), out, &err), 0);
    const char *forged = "v=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";
    cr_assert_eq(km_scram_client_verify(c, u8(forged), strlen(forged), &err), -1);
    cr_assert(strstr(err.msg, "server signature"), "%s", err.msg);
    km_scram_client_free(c);
    c = km_scram_client_new(KM_SASL_SCRAM_SHA_256, "user", "pencil", RFC7677.cnonce, &err);
    km_scram_client_first(c, out, &err);
    km_scram_client_final(c, u8(RFC7677.server_first), strlen(RFC7677.server_first), out, &err);
    const char *refused = "e=invalid-proof";
    cr_assert_eq(km_scram_client_verify(c, u8(refused), strlen(refused), &err), -1);
    cr_assert(strstr(err.msg, "invalid-proof"), "%s", err.msg);
    km_scram_client_free(c);
}

Test(scram, user_names_are_escaped_both_ways)
{
    km_err err = {{0}};
    char out[KM_SASL_MSG_MAX];
    km_scram_client *c = km_scram_client_new(KM_SASL_SCRAM_SHA_256, "a,b=c", "pw", "abc", &err);
    cr_assert_eq(km_scram_client_first(c, out, &err), 0);
    cr_assert_str_eq(out, "n,,n=a=2Cb=3Dc,r=abc");
    km_scram_server *s = km_scram_server_new(KM_SASL_SCRAM_SHA_256, 0, NULL, 0, NULL, &err);
    char sf[KM_SASL_MSG_MAX];
    cr_assert_eq(km_scram_server_first(s, u8(out), strlen(out), pencil, NULL, sf, &err), -1, "unknown user");
    cr_assert(strstr(err.msg, "a,b=c"), "%s", err.msg);
    km_scram_server_free(s);
    km_scram_client_free(c);
}

Test(plain, message_and_parse)
{
    uint8_t msg[KM_SASL_MSG_MAX];
    size_t n;
    km_err err = {{0}};
    cr_assert_eq(km_sasl_plain_message("alice", "s3cret", msg, &n, &err), 0);
    cr_assert_eq(n, 13);
    cr_assert_eq(memcmp(msg, "\0alice\0s3cret", 13), 0);
    char user[KM_SASL_NAME_MAX], pass[KM_SASL_NAME_MAX];
    cr_assert_eq(km_sasl_plain_parse(msg, n, user, pass, &err), 0, "%s", err.msg);
    cr_assert_str_eq(user, "alice");
    cr_assert_str_eq(pass, "s3cret");
    cr_assert_eq(km_sasl_plain_parse(u8("bob\0alice\0x"), 11, user, pass, &err), -1);
    cr_assert(strstr(err.msg, "authorization id"), "%s", err.msg);
    cr_assert_eq(km_sasl_plain_parse(u8("alice"), 5, user, pass, &err), -1);
}

Test(jaas, kafka_login_modules)
{
    char user[KM_SASL_NAME_MAX], pass[KM_SASL_NAME_MAX];
    km_err err = {{0}};
    cr_assert_eq(km_sasl_parse_jaas("org.apache.kafka.common.security.scram.ScramLoginModule required "
                                    "username=\"kmproxy\" password=\"p\\\"w;d\";",
                                    KM_SASL_SCRAM_SHA_512, user, pass, &err), 0, "%s", err.msg);
    cr_assert_str_eq(user, "kmproxy");
    cr_assert_str_eq(pass, "p\"w;d");
    cr_assert_eq(km_sasl_parse_jaas("org.apache.kafka.common.security.plain.PlainLoginModule required "
                                    "username=admin password=\"x\";", KM_SASL_PLAIN, user, pass, &err), 0, "%s",
                 err.msg);
    cr_assert_str_eq(user, "admin");
    cr_assert_eq(km_sasl_parse_jaas("org.apache.kafka.common.security.plain.PlainLoginModule required "
                                    "username=\"a\" password=\"b\";", KM_SASL_SCRAM_SHA_256, user, pass, &err), -1);
    cr_assert(strstr(err.msg, "does not fit mechanism SCRAM-SHA-256"), "%s", err.msg);
    cr_assert_eq(km_sasl_parse_jaas("org.apache.kafka.common.security.scram.ScramLoginModule required "
                                    "username=\"a\" password=\"b\"", KM_SASL_SCRAM_SHA_256, user, pass, &err), -1);
    cr_assert(strstr(err.msg, "end with ';'"), "%s", err.msg);
    cr_assert_eq(km_sasl_parse_jaas("org.apache.kafka.common.security.scram.ScramLoginModule required "
                                    "username=\"a\" tokenauth=true password=\"b\";", KM_SASL_SCRAM_SHA_256, user,
                                    pass, &err), -1);
    cr_assert(strstr(err.msg, "tokenauth"), "%s", err.msg);
    cr_assert_eq(km_sasl_parse_jaas("org.apache.kafka.common.security.scram.ScramLoginModule required "
                                    "username=\"a\";", KM_SASL_SCRAM_SHA_256, user, pass, &err), -1);
    km_sasl_mech m;
    cr_assert_eq(km_sasl_mech_parse("GSSAPI", &m, &err), -1);
    cr_assert(strstr(err.msg, "GSSAPI"), "%s", err.msg);
    cr_assert_eq(km_sasl_mech_parse("SCRAM-SHA-512", &m, &err), 0);
    cr_assert_eq(m, KM_SASL_SCRAM_SHA_512);
}

/* ---- the client and server exchanges, back to back through real frames ---------------------- */

static const char *users(const char *user, void *ud)
{
    (void)ud;
    return !strcmp(user, "u") ? "pw" : NULL;
}

/* One request frame through the server; the answer (if any) back into the client.  Returns the
 * client's verdict (1 more, 0 done, -1 failed) and the server's in *what. */
static int round_trip(km_sasl_client *c, km_sasl_server *s, km_sasl_served *what, km_err *err)
{
    int16_t api, v;
    const void *body;
    km_sasl_client_request(c, &api, &v, &body);
    km_buf rq, rs;
    km_buf_init(&rq);
    km_buf_init(&rs);
    km_arena a;
    km_arena_init(&a, 1u << 20);
    cr_assert_eq(km_frame_request(api, v, 7, "test", body, &rq, err), 0, "%s", err->msg);
    km_reader r;
    km_reader_init(&r, rq.data + 4, rq.len - 4);
    km_request_header_view h;
    cr_assert_eq(km_parse_request_header(&r, &h, &a, err), 0, "%s", err->msg);
    cr_assert_eq(km_sasl_server_serve(s, &h, r.p + r.pos, km_reader_left(&r), &rs, &a, what, err), 0, "%s", err->msg);
    int rc = -2;
    if (*what != KM_SASL_UNEXPECTED && *what != KM_SASL_PASS) {
        int32_t corr;
        km_reader_init(&r, rs.data + 4, rs.len - 4);
        cr_assert_eq(km_parse_response_header(&r, api, v, &corr, err), 0, "%s", err->msg);
        cr_assert_eq(corr, 7);
        rc = km_sasl_client_on_response(c, r.p + r.pos, km_reader_left(&r), err);
    }
    km_buf_free(&rq);
    km_buf_free(&rs);
    km_arena_free(&a);
    return rc;
}

/* A broker's ApiVersions offering SaslHandshake 0-1 and SaslAuthenticate 0-2 (or none). */
static void offer(km_sasl_client *c, bool sasl, int want)
{
    km_api_versions_response_api_version keys[2] = { { .api_key = KM_API_SASL_HANDSHAKE, .max_version = 1 },
                                                     { .api_key = KM_API_SASL_AUTHENTICATE, .max_version = 2 } };
    km_api_versions_response rs;
    km_api_versions_response_init(&rs);
    rs.api_keys.count = sasl ? 2 : 0;
    rs.api_keys.items = keys;
    km_err err;
    cr_assert_eq(km_sasl_client_versions(c, &rs, &err), want);
}

static int login(km_sasl_mech mech, const char *pass, km_sasl_server *s, km_err *err)
{
    km_sasl_client *c = km_sasl_client_new(mech, "u", pass, err);
    cr_assert(c, "%s", err->msg);
    offer(c, true, 0);
    km_sasl_served what;
    int rc, rounds = 0;
    while ((rc = round_trip(c, s, &what, err)) == 1)
        cr_assert_lt(++rounds, 4, "more rounds than %s takes", km_sasl_mech_name(mech));
    km_sasl_client_free(c);
    cr_assert_eq(what, rc == 0 ? KM_SASL_AUTHENTICATED : KM_SASL_FAILED, "server %d, client %d: %s", what, rc, err->msg);
    return rc;
}

Test(sasl_exchange, plain_and_scram_log_in)
{
    for (km_sasl_mech m = KM_SASL_PLAIN; m <= KM_SASL_SCRAM_SHA_512; m++) {
        km_err err;
        km_sasl_server *s = km_sasl_server_new(1u << m, users, NULL, &err);
        cr_assert_eq(login(m, "pw", s, &err), 0, "%s: %s", km_sasl_mech_name(m), err.msg);
        cr_assert(km_sasl_server_authenticated(s));
        cr_assert_str_eq(km_sasl_server_user(s), "u");
        km_sasl_server_free(s);
    }
}

Test(sasl_exchange, a_wrong_password_or_mechanism_is_refused_with_the_reason)
{
    km_err err;
    km_sasl_server *s = km_sasl_server_new(1u << KM_SASL_SCRAM_SHA_512, users, NULL, &err);
    cr_assert_eq(login(KM_SASL_SCRAM_SHA_512, "bad", s, &err), -1);
    cr_assert(strstr(err.msg, "SASL_AUTHENTICATION_FAILED (58): Authentication failed"), "%s", err.msg);
    cr_assert(!km_sasl_server_authenticated(s));
    km_sasl_server_free(s);
    s = km_sasl_server_new(1u << KM_SASL_PLAIN, users, NULL, &err);
    cr_assert_eq(login(KM_SASL_SCRAM_SHA_256, "pw", s, &err), -1);
    cr_assert(strstr(err.msg, "does not enable SCRAM-SHA-256 (it offers: PLAIN)"), "%s", err.msg);
    km_sasl_server_free(s);
}

/* SaslServerAuthenticator's order: only ApiVersions passes before the login; after it
 * everything passes and SASL requests get ILLEGAL_SASL_STATE, as on a listener without SASL. */
Test(sasl_exchange, the_server_keeps_kafkas_order)
{
    km_err err;
    km_arena a;
    km_arena_init(&a, 1u << 20);
    km_buf out;
    km_buf_init(&out);
    km_sasl_server *s = km_sasl_server_new(1u << KM_SASL_PLAIN, users, NULL, &err);
    km_sasl_served what;
    km_request_header_view fetch = { .api_key = KM_API_FETCH, .api_version = 16 };
    km_request_header_view versions = { .api_key = KM_API_API_VERSIONS, .api_version = 3 };
    cr_assert_eq(km_sasl_server_serve(s, &versions, NULL, 0, &out, &a, &what, &err), 0);
    cr_assert_eq(what, KM_SASL_PASS);
    cr_assert_eq(km_sasl_server_serve(s, &fetch, NULL, 0, &out, &a, &what, &err), 0);
    cr_assert_eq(what, KM_SASL_UNEXPECTED);
    cr_assert(strstr(err.msg, "Unexpected Kafka request of type FETCH during SASL handshake."), "%s", err.msg);
    cr_assert_eq(login(KM_SASL_PLAIN, "pw", s, &err), 0, "%s", err.msg);
    cr_assert_eq(km_sasl_server_serve(s, &fetch, NULL, 0, &out, &a, &what, &err), 0);
    cr_assert_eq(what, KM_SASL_PASS);
    km_sasl_server_free(s);
    /* no SASL on the listener: the client's handshake is answered ILLEGAL_SASL_STATE */
    s = km_sasl_server_new(0, users, NULL, &err);
    km_sasl_client *c = km_sasl_client_new(KM_SASL_PLAIN, "u", "pw", &err);
    offer(c, true, 0);
    cr_assert_eq(round_trip(c, s, &what, &err), -1);
    cr_assert(strstr(err.msg, "ILLEGAL_SASL_STATE"), "%s", err.msg);
    km_sasl_client_free(c);
    km_sasl_server_free(s);
    /* a server that offers no SASL requests at all */
    c = km_sasl_client_new(KM_SASL_PLAIN, "u", "pw", &err);
    offer(c, false, -1);
    km_sasl_client_free(c);
    km_buf_free(&out);
    km_arena_free(&a);
}

/* ---- re-authentication (KIP-368) -------------------------------------------------------------- */

static const char *two_users(const char *user, void *ud)
{
    (void)ud;
    return !strcmp(user, "u") ? "pw" : !strcmp(user, "v") ? "pw2" : NULL;
}

/* The client's whole exchange (from where it stands) against s: its verdict, the server's in *what. */
static int exchange(km_sasl_client *c, km_sasl_server *s, km_sasl_served *what, km_err *err)
{
    int rc, rounds = 0;
    while ((rc = round_trip(c, s, what, err)) == 1)
        cr_assert_lt(++rounds, 4, "more rounds than a mechanism takes");
    return rc;
}

static km_sasl_client *logged_in(km_sasl_mech mech, const char *user, const char *pass, km_sasl_server *s)
{
    km_err err;
    km_sasl_served what;
    km_sasl_client *c = km_sasl_client_new(mech, user, pass, &err);
    cr_assert(c, "%s", err.msg);
    offer(c, true, 0);
    cr_assert_eq(exchange(c, s, &what, &err), 0, "%s", err.msg);
    cr_assert_eq(what, KM_SASL_AUTHENTICATED);
    return c;
}

/* KafkaChannel.maybeBeginServerReauthentication: a SaslHandshake on an authenticated connection
 * renews the session when sessions expire, at most once a second; the lifetime is announced in
 * SaslAuthenticate and the client picks 85-95% of it. */
Test(sasl_reauth, a_session_is_renewed_at_most_once_a_second)
{
    for (km_sasl_mech m = KM_SASL_PLAIN; m <= KM_SASL_SCRAM_SHA_512; m++) {
        km_err err;
        km_sasl_served what;
        km_sasl_server *s = km_sasl_server_new(1u << m, users, NULL, &err);
        km_sasl_server_set_session_lifetime(s, 60000);
        km_sasl_client *c = logged_in(m, "u", "pw", s);
        cr_assert_eq(km_sasl_client_session_lifetime_ms(c), 60000);
        for (int i = 0; i < 50; i++) {
            double d = km_sasl_client_reauth_delay(c);
            cr_assert(d >= 51.0 && d <= 57.0, "renewal after %.3f s of a 60 s session", d);
        }
        cr_assert(!km_sasl_server_reauthenticated(s));
        km_sasl_client_reauthenticate(c);
        cr_assert_eq(exchange(c, s, &what, &err), 0, "%s: %s", km_sasl_mech_name(m), err.msg);
        cr_assert_eq(what, KM_SASL_AUTHENTICATED);
        cr_assert(km_sasl_server_reauthenticated(s));
        cr_assert_str_eq(km_sasl_server_user(s), "u");
        km_sasl_client_reauthenticate(c); /* again at once: KafkaApis answers the handshake */
        cr_assert_eq(exchange(c, s, &what, &err), -1);
        cr_assert(strstr(err.msg, "ILLEGAL_SASL_STATE"), "%s", err.msg);
        cr_assert(km_sasl_server_authenticated(s), "the session itself stays");
        km_sasl_client_free(c);
        km_sasl_server_free(s);
    }
}

/* Without connections.max.reauth.ms the lifetime is 0, the client never renews, and a
 * handshake after the login is answered ILLEGAL_SASL_STATE. */
Test(sasl_reauth, sessions_without_a_lifetime_are_not_renewed)
{
    km_err err;
    km_sasl_served what;
    km_sasl_server *s = km_sasl_server_new(1u << KM_SASL_SCRAM_SHA_256, users, NULL, &err);
    km_sasl_client *c = logged_in(KM_SASL_SCRAM_SHA_256, "u", "pw", s);
    cr_assert_eq(km_sasl_client_session_lifetime_ms(c), 0);
    cr_assert_eq(km_sasl_client_reauth_delay(c), 0);
    km_sasl_client_reauthenticate(c);
    cr_assert_eq(exchange(c, s, &what, &err), -1);
    cr_assert(strstr(err.msg, "ILLEGAL_SASL_STATE"), "%s", err.msg);
    km_sasl_client_free(c);
    km_sasl_server_free(s);
}

/* SaslServerAuthenticator.ReauthInfo: saslMechanismUnchanged and ensurePrincipalUnchanged. */
Test(sasl_reauth, the_mechanism_and_the_principal_must_stay)
{
    km_err err;
    km_sasl_served what;
    unsigned both = (1u << KM_SASL_PLAIN) | (1u << KM_SASL_SCRAM_SHA_256);
    km_sasl_server *s = km_sasl_server_new(both, two_users, NULL, &err);
    km_sasl_server_set_session_lifetime(s, 60000);
    km_sasl_client *c = logged_in(KM_SASL_PLAIN, "u", "pw", s);
    km_sasl_client *other = km_sasl_client_new(KM_SASL_SCRAM_SHA_256, "u", "pw", &err);
    offer(other, true, 0);
    cr_assert_eq(exchange(other, s, &what, &err), -1);
    cr_assert_eq(what, KM_SASL_FAILED);
    cr_assert(strstr(err.msg, "SCRAM-SHA-256") && strstr(err.msg, "(it offers: PLAIN, SCRAM-SHA-256)"), "%s", err.msg);
    km_sasl_client_free(other);
    km_sasl_client_free(c);
    km_sasl_server_free(s);

    s = km_sasl_server_new(both, two_users, NULL, &err);
    km_sasl_server_set_session_lifetime(s, 60000);
    c = logged_in(KM_SASL_SCRAM_SHA_256, "u", "pw", s);
    other = km_sasl_client_new(KM_SASL_SCRAM_SHA_256, "v", "pw2", &err);
    offer(other, true, 0);
    cr_assert_eq(exchange(other, s, &what, &err), -1);
    cr_assert_eq(what, KM_SASL_FAILED);
    cr_assert(strstr(err.msg, "Cannot change principals during re-authentication from User:u: User:v"), "%s",
              err.msg);
    km_sasl_client_free(other);
    km_sasl_client_free(c);
    km_sasl_server_free(s);
}

/* What the server makes of a request of api/version without a body (not a SASL one). */
static km_sasl_served serve_bare(km_sasl_server *s, int16_t api, int16_t version, km_err *err)
{
    km_arena a;
    km_arena_init(&a, 1u << 20);
    km_buf out;
    km_buf_init(&out);
    km_request_header_view h = { .api_key = api, .api_version = version };
    km_sasl_served what;
    cr_assert_eq(km_sasl_server_serve(s, &h, NULL, 0, &out, &a, &what, err), 0);
    km_buf_free(&out);
    km_arena_free(&a);
    return what;
}

/* SocketServer's Processor: after the session expired any request but a re-authentication's
 * SaslHandshake closes the connection (KafkaChannel.serverAuthenticationSessionExpired); during
 * the re-authentication nothing but its exchange is served. */
Test(sasl_reauth, an_expired_session_closes_on_anything_but_a_renewal)
{
    km_err err;
    km_sasl_served what;
    km_sasl_server *s = km_sasl_server_new(1u << KM_SASL_PLAIN, users, NULL, &err);
    km_sasl_server_set_session_lifetime(s, 1);
    km_sasl_client *c = logged_in(KM_SASL_PLAIN, "u", "pw", s);
    struct timespec nap = { 0, 20 * 1000 * 1000 }; /* past the 1 ms lifetime */
    nanosleep(&nap, NULL);
    cr_assert_eq(serve_bare(s, KM_API_FETCH, 16, &err), KM_SASL_EXPIRED);
    cr_assert(strstr(err.msg, "the SASL session of 'u' expired"), "%s", err.msg);
    km_sasl_client_reauthenticate(c);
    cr_assert_eq(exchange(c, s, &what, &err), 0, "%s", err.msg);
    cr_assert(km_sasl_server_reauthenticated(s));
    km_sasl_client_free(c);
    km_sasl_server_free(s);
    /* SaslServerAuthenticator: only the exchange itself while re-authenticating (no ApiVersions) */
    s = km_sasl_server_new(1u << KM_SASL_PLAIN, users, NULL, &err);
    km_sasl_server_set_session_lifetime(s, 60000);
    c = logged_in(KM_SASL_PLAIN, "u", "pw", s);
    km_sasl_client_reauthenticate(c);
    cr_assert_eq(round_trip(c, s, &what, &err), 1, "%s", err.msg); /* the SaslHandshake */
    cr_assert_eq(serve_bare(s, KM_API_API_VERSIONS, 3, &err), KM_SASL_UNEXPECTED);
    km_sasl_client_free(c);
    km_sasl_server_free(s);
}
