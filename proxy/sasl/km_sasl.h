/* km_sasl.h - SASL for the ZK-mode broker channels and the KRaft controller listener: PLAIN
 * (RFC 4616) and SCRAM-SHA-256/512 (RFC 5802, RFC 7677), both the client side kmproxy speaks
 * and the server side the simulators check it with, the whole exchange over Kafka requests
 * (SaslHandshake v1 + SaslAuthenticate) on either side, plus the JAAS line Kafka clients are
 * configured with.
 *
 * The crypto is OpenSSL's (PBKDF2-HMAC, HMAC, SHA-2).  Messages are the bytes that travel in
 * SaslAuthenticate's AuthBytes, as Kafka's PlainSaslServer / ScramSaslClient / ScramSaslServer
 * exchange them.  Every failure fills a km_err saying what was wrong; nothing prints or aborts.
 * Secrets are wiped when a context is freed. */
#ifndef KM_SASL_H
#define KM_SASL_H

#include "km_codec.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KM_SASL_MSG_MAX 1024   /* every message we build or accept fits */
#define KM_SASL_NAME_MAX 256   /* user names and passwords */

typedef enum km_sasl_mech {
    KM_SASL_NONE = 0,
    KM_SASL_PLAIN,
    KM_SASL_SCRAM_SHA_256,
    KM_SASL_SCRAM_SHA_512,
    KM_SASL_SCRAM_SHA_1,       /* RFC 5802's test vector only: Kafka offers no SCRAM-SHA-1 */
} km_sasl_mech;

/* "PLAIN", "SCRAM-SHA-256", ... ("NONE" for KM_SASL_NONE). */
const char *km_sasl_mech_name(km_sasl_mech m);
/* Kafka's mechanism names we implement: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512.  Anything else
 * (GSSAPI, OAUTHBEARER, SCRAM-SHA-1) fails naming what is supported. */
int km_sasl_mech_parse(const char *name, km_sasl_mech *out, km_err *err);
bool km_sasl_is_scram(km_sasl_mech m);

/* Credentials from Kafka's sasl.jaas.config value, e.g.
 *   org.apache.kafka.common.security.scram.ScramLoginModule required username="a" password="b";
 * The login module must fit the mechanism (PlainLoginModule for PLAIN, ScramLoginModule for
 * SCRAM-*); the control flag must be `required`; values are double-quoted with \" and \\
 * escapes (as Java's JAAS parser reads them); other options are refused by name. */
int km_sasl_parse_jaas(const char *jaas, km_sasl_mech mech, char user[KM_SASL_NAME_MAX],
                       char pass[KM_SASL_NAME_MAX], km_err *err);

/* ---- PLAIN ------------------------------------------------------------------------------- */

/* "\0user\0password" (no authorization id, as Kafka's PlainSaslClient sends it).  *len gets
 * the size; out holds KM_SASL_MSG_MAX bytes. */
int km_sasl_plain_message(const char *user, const char *pass, uint8_t *out, size_t *len, km_err *err);
/* Server side (Kafka's PlainSaslServer.evaluateResponse): splits the message; the
 * authorization id must be empty or the user. */
int km_sasl_plain_parse(const uint8_t *msg, size_t len, char user[KM_SASL_NAME_MAX],
                        char pass[KM_SASL_NAME_MAX], km_err *err);

/* ---- SCRAM client (Kafka's ScramSaslClient) ------------------------------------------------ */

typedef struct km_scram_client km_scram_client;
/* nonce NULL: 32 random printable characters (tests pass RFC vectors' nonces). */
km_scram_client *km_scram_client_new(km_sasl_mech mech, const char *user, const char *pass, const char *nonce,
                                     km_err *err);
void km_scram_client_free(km_scram_client *c);
/* client-first-message: "n,,n=USER,r=NONCE". out: KM_SASL_MSG_MAX bytes, NUL-terminated. */
int km_scram_client_first(km_scram_client *c, char *out, km_err *err);
/* server-first-message in, client-final-message out.  Refuses a nonce that does not extend
 * ours and an iteration count outside [4096, 16384] (Kafka's ScramMechanism bounds). */
int km_scram_client_final(km_scram_client *c, const uint8_t *server_first, size_t len, char *out, km_err *err);
/* server-final-message: the server's signature must prove it knows our password ("v=..."); an
 * "e=..." error is reported as the server's reason. */
int km_scram_client_verify(km_scram_client *c, const uint8_t *server_final, size_t len, km_err *err);

/* ---- SCRAM server (Kafka's ScramSaslServer; the broker simulator's side) --------------------- */

typedef struct km_scram_server km_scram_server;
/* The password of `user`, or NULL: no such user. */
typedef const char *(*km_scram_lookup_fn)(const char *user, void *ud);
/* salt/nonce NULL: random (tests pass RFC vectors'); iterations 0: 4096. */
km_scram_server *km_scram_server_new(km_sasl_mech mech, int iterations, const uint8_t *salt, size_t salt_len,
                                     const char *nonce, km_err *err);
void km_scram_server_free(km_scram_server *s);
/* client-first in, server-first out (KM_SASL_MSG_MAX, NUL-terminated). */
int km_scram_server_first(km_scram_server *s, const uint8_t *client_first, size_t len, km_scram_lookup_fn lookup,
                          void *ud, char *out, km_err *err);
/* client-final in: verifies the proof; server-final ("v=...") out. */
int km_scram_server_final(km_scram_server *s, const uint8_t *client_final, size_t len, char *out, km_err *err);
/* The authenticated user, once km_scram_server_final succeeded ("" before). */
const char *km_scram_server_user(const km_scram_server *s);

/* ---- the client's exchange (Kafka's SaslClientAuthenticator, after ApiVersions) ------------- */

/* SaslHandshake v1 names the mechanism, then SaslAuthenticate frames carry its messages
 * (KIP-152): PLAIN one round, SCRAM two (the server's final message is verified).  The caller
 * owns the connection and sends what this gives; nothing else may go on it until done. */
typedef struct km_sasl_client km_sasl_client;
km_sasl_client *km_sasl_client_new(km_sasl_mech mech, const char *user, const char *pass, km_err *err);
void km_sasl_client_free(km_sasl_client *c);  /* wipes the password and the SCRAM state */
/* From the server's ApiVersions: -1 when it offers no SaslHandshake v1 or SaslAuthenticate
 * (not a SASL listener?). */
int km_sasl_client_versions(km_sasl_client *c, const km_api_versions_response *rs, km_err *err);
/* The request to send next: SaslHandshake (v1) first, then SaslAuthenticate; body points into
 * c until the next call.  *api and *version say which. */
void km_sasl_client_request(km_sasl_client *c, int16_t *api, int16_t *version, const void **body);
/* The response to that request: 1 send the next request, 0 authenticated, -1 refused or
 * failed (err carries the server's error and message). */
int km_sasl_client_on_response(km_sasl_client *c, const uint8_t *body, size_t len, km_err *err);
/* The server's session lifetime once authenticated (0: none). */
int64_t km_sasl_client_session_lifetime_ms(const km_sasl_client *c);
/* Re-authentication on the same connection (KIP-368): back to SaslHandshake, with the versions
 * the server offered before.  Only once authenticated, with nothing else in flight. */
void km_sasl_client_reauthenticate(km_sasl_client *c);
/* Seconds after authentication to re-authenticate at: a random point between 85% and 95% of the
 * session lifetime, as Kafka's client picks it; 0 when the session does not expire. */
double km_sasl_client_reauth_delay(const km_sasl_client *c);

/* ---- the server's exchange (Kafka's SaslServerAuthenticator; the simulators' listeners) ------ */

/* Before authentication only ApiVersions, SaslHandshake (v1) and SaslAuthenticate are served
 * (handleKafkaRequest closes on anything else: "Unexpected Kafka request of type ... during
 * SASL handshake."); a bad login is answered SASL_AUTHENTICATION_FAILED with the reason, then
 * the connection closes; after it, SaslHandshake/SaslAuthenticate get ILLEGAL_SASL_STATE.
 * With a session lifetime (connections.max.reauth.ms, KIP-368) a SaslHandshake on an
 * authenticated connection begins a re-authentication (at most one a second, same mechanism
 * and same user, as KafkaChannel and SaslServerAuthenticator require), and any other request
 * once the session expired closes the connection (SocketServer's Processor). */
typedef struct km_sasl_server km_sasl_server;
/* mechanisms: a bit (1u << km_sasl_mech) per mechanism enabled; lookup gives the passwords.
 * 0: a listener without SASL (everything passes; SaslHandshake/SaslAuthenticate are answered
 * ILLEGAL_SASL_STATE, as KafkaApis does). */
km_sasl_server *km_sasl_server_new(unsigned mechanisms, km_scram_lookup_fn lookup, void *ud, km_err *err);
void km_sasl_server_free(km_sasl_server *s);
typedef enum km_sasl_served {
    KM_SASL_PASS,           /* not SASL's: serve it as usual (ApiVersions, or anything once authenticated) */
    KM_SASL_ANSWERED,       /* out holds the answer */
    KM_SASL_AUTHENTICATED,  /* out holds the answer; the connection is authenticated now */
    KM_SASL_FAILED,         /* out holds the failure's answer; close after sending it (err: why) */
    KM_SASL_UNEXPECTED,     /* another request before authentication: close without an answer (err) */
    KM_SASL_EXPIRED,        /* a request after the session expired: close without an answer (err) */
} km_sasl_served;
/* -1 only when an answer cannot be built (err). */
int km_sasl_server_serve(km_sasl_server *s, const km_request_header_view *h, const uint8_t *body, size_t len,
                         km_buf *out, km_arena *a, km_sasl_served *what, km_err *err);
/* connections.max.reauth.ms: sessions last lifetime_ms from each (re-)authentication (0: forever). */
void km_sasl_server_set_session_lifetime(km_sasl_server *s, int64_t lifetime_ms);
bool km_sasl_server_authenticated(const km_sasl_server *s); /* a login succeeded */
bool km_sasl_server_reauthenticated(const km_sasl_server *s); /* ... and the last one was a re-authentication */
const char *km_sasl_server_user(const km_sasl_server *s); /* "" before authentication */

#endif
