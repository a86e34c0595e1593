/* km_tls.h - OpenSSL 3 contexts and non-blocking TLS streams over a socket fd.
 *
 * A context holds our certificate, key and trust anchors; a stream is one TLS
 * session over a caller-owned, non-blocking fd.  Stream calls never wait: they
 * report KM_TLS_WANT_READ / KM_TLS_WANT_WRITE and the caller (a libev loop in
 * km_net) retries once the fd is ready in that direction.
 *
 * Policy: TLS 1.2 is the floor; peers are verified unless the config says
 * otherwise; clients check the server's host name (or IP address) against its
 * certificate.  Every failure fills a km_err naming the file or peer and
 * OpenSSL's own reason ("certificate has expired", "no such file", ...).
 * Nothing here prints, aborts or keeps global state of its own.
 *
 * Socket I/O uses send(MSG_NOSIGNAL)/recv, so a vanished peer is an error
 * return and never a SIGPIPE.  A context must outlive its streams.
 */
#ifndef KM_TLS_H
#define KM_TLS_H

#include <stdbool.h>
#include <stddef.h>

#include "km_codec.h" /* km_err, km_fail */

typedef struct km_tls_config {
    const char *cert_file; /* PEM chain (leaf first). Required for servers, optional client cert. */
    const char *key_file;  /* PEM private key matching cert_file; defaults to cert_file. */
    const char *ca_file;   /* PEM trust anchors; NULL uses the system default store. */
    bool no_verify;        /* clients only: skip server verification (tests, debugging). */
    bool no_name_check;    /* clients only: verify the chain but not the server's name
                            * (Kafka's ssl.endpoint.identification.algorithm set empty). */
    bool require_client_cert; /* servers only: demand and verify a client certificate (needs ca_file). */
    bool request_client_cert; /* servers only: ask for one and verify it if sent (needs ca_file). */
} km_tls_config;

typedef struct km_tls_ctx km_tls_ctx;
typedef struct km_tls_stream km_tls_stream;

/* Both fail (NULL + err) on a missing or unreadable file, bad PEM, a key that
 * does not match the certificate, or a certificate that is expired or not yet
 * valid, so a bad deployment is caught at startup rather than at first use. */
km_tls_ctx *km_tls_client_ctx_new(const km_tls_config *cfg, km_err *err);
km_tls_ctx *km_tls_server_ctx_new(const km_tls_config *cfg, km_err *err);
bool km_tls_ctx_is_server(const km_tls_ctx *ctx);
void km_tls_ctx_free(km_tls_ctx *ctx);

typedef enum km_tls_status {
    KM_TLS_ERROR = -1,     /* fatal; err says why.  Only km_tls_stream_free is valid after. */
    KM_TLS_OK = 0,
    KM_TLS_WANT_READ = 1,  /* retry the same call when the fd is readable */
    KM_TLS_WANT_WRITE = 2, /* retry the same call when the fd is writable */
    KM_TLS_CLOSED = 3,     /* the peer sent close_notify (read) */
} km_tls_status;

/* A stream over fd (the caller keeps owning and closing fd).  `peer` is the
 * server's host name or IP for clients (SNI + verification; NULL or the
 * context's no_name_check skips the name check) and a label for messages on
 * servers ("127.0.0.1:4711"). */
km_tls_stream *km_tls_stream_new(km_tls_ctx *ctx, int fd, const char *peer, km_err *err);
void km_tls_stream_free(km_tls_stream *s);

km_tls_status km_tls_handshake(km_tls_stream *s, km_err *err);
/* Reads up to cap bytes; *n gets the count when KM_TLS_OK (always > 0). */
km_tls_status km_tls_read(km_tls_stream *s, void *buf, size_t cap, size_t *n, km_err *err);
/* Writes up to len bytes; *n gets the count when KM_TLS_OK (may be < len).
 * After a WANT_*, retry with the same bytes (at least the same first byte). */
km_tls_status km_tls_write(km_tls_stream *s, const void *buf, size_t len, size_t *n, km_err *err);
/* Sends close_notify; KM_TLS_OK once sent (we do not wait for the peer's). */
km_tls_status km_tls_shutdown(km_tls_stream *s, km_err *err);
/* Decrypted bytes already buffered inside OpenSSL: the fd will not signal
 * readability for them, so an event loop must drain these before waiting. */
size_t km_tls_pending(const km_tls_stream *s);
/* After a successful handshake: the peer certificate's subject ("CN=...") into
 * out, or "" when the peer sent none.  Returns out. */
const char *km_tls_peer_subject(const km_tls_stream *s, char *out, size_t cap);
const char *km_tls_version(const km_tls_stream *s); /* "TLSv1.3", ... */
/* Servers, after the handshake: the host name the client sent (SNI), or NULL. */
const char *km_tls_server_name(const km_tls_stream *s);

#endif
