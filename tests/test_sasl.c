/* SCRAM against RFC 7677's SCRAM-SHA-256 and RFC 5802's SCRAM-SHA-1 exchanges (both sides,
 * byte for byte), PLAIN's message, and Kafka's JAAS line. */
#include "km_sasl.h"

#include <criterion/criterion.h>
#include <string.h>

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
