/* Non-blocking TLS streams: OpenSSL's WANT_* states mapped for an event loop. */
#include "tls_private.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/x509v3.h>

struct km_tls_stream {
    SSL *ssl;
    bool server;
    char peer[256];        /* for messages: host name, address or label */
};

static bool is_ip_literal(const char *s)
{
    unsigned char buf[16];
    return inet_pton(AF_INET, s, buf) == 1 || inet_pton(AF_INET6, s, buf) == 1;
}

/* Clients verify the name they dialled: an IP literal against IP SANs, a host
 * name against DNS SANs (and SNI, so virtual-hosted servers pick the right cert). */
static int set_expected_peer(km_tls_stream *s, const char *peer, bool check_name, km_err *err)
{
    X509_VERIFY_PARAM *param = SSL_get0_param(s->ssl);
    if (!check_name) { /* still send SNI: a virtual-hosted server needs it to pick its certificate */
        if (!is_ip_literal(peer) && SSL_set_tlsext_host_name(s->ssl, peer) != 1)
            return km_tls_fail_openssl(err, "TLS peer %s: cannot set the server name indication", peer);
        return 0;
    }
    if (is_ip_literal(peer)) {
        if (X509_VERIFY_PARAM_set1_ip_asc(param, peer) != 1)
            return km_tls_fail_openssl(err, "TLS peer %s: cannot set the expected IP address", peer);
        return 0;
    }
    X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    if (SSL_set_tlsext_host_name(s->ssl, peer) != 1 || SSL_set1_host(s->ssl, peer) != 1)
        return km_tls_fail_openssl(err, "TLS peer %s: cannot set the expected host name", peer);
    return 0;
}

km_tls_stream *km_tls_stream_new(km_tls_ctx *ctx, int fd, const char *peer, km_err *err)
{
    ERR_clear_error();
    km_tls_stream *s = calloc(1, sizeof *s);
    if (!s)
        return km_fail(err, "TLS: out of memory"), NULL;
    s->server = ctx->server;
    snprintf(s->peer, sizeof s->peer, "%s", peer ? peer : "(unnamed peer)");
    s->ssl = SSL_new(ctx->ssl);
    BIO *bio = s->ssl ? km_tls_sock_bio_new(ctx->sock, fd) : NULL;
    if (!bio) {
        km_tls_fail_openssl(err, "TLS peer %s: cannot create a session on fd %d", s->peer, fd);
        km_tls_stream_free(s);
        return NULL;
    }
    SSL_set_bio(s->ssl, bio, bio);
    if (s->server) {
        SSL_set_accept_state(s->ssl);
    } else {
        SSL_set_connect_state(s->ssl);
        if (peer && set_expected_peer(s, peer, !ctx->no_name_check, err)) {
            km_tls_stream_free(s);
            return NULL;
        }
    }
    return s;
}

void km_tls_stream_free(km_tls_stream *s)
{
    if (!s)
        return;
    SSL_free(s->ssl);
    free(s);
}

/* A failed verification is the usual cause of a handshake failure; OpenSSL's
 * queue only says "certificate verify failed", the verify result says why. */
static km_tls_status fail_ssl(km_tls_stream *s, const char *op, km_err *err)
{
    long v = SSL_get_verify_result(s->ssl);
    if (v != X509_V_OK) {
        km_tls_fail_openssl(err, "TLS %s with %s: %s certificate rejected: %s", op, s->peer,
                            s->server ? "client" : "server", X509_verify_cert_error_string(v));
        return KM_TLS_ERROR;
    }
    km_tls_fail_openssl(err, "TLS %s with %s", op, s->peer);
    return KM_TLS_ERROR;
}

static km_tls_status map_result(km_tls_stream *s, int rc, const char *op, km_err *err)
{
    int saved_errno = errno;
    switch (SSL_get_error(s->ssl, rc)) {
    case SSL_ERROR_WANT_READ:
        return KM_TLS_WANT_READ;
    case SSL_ERROR_WANT_WRITE:
        return KM_TLS_WANT_WRITE;
    case SSL_ERROR_ZERO_RETURN:
        if (!SSL_is_init_finished(s->ssl)) {
            km_fail(err, "TLS %s with %s: peer closed the connection during the handshake", op, s->peer);
            return KM_TLS_ERROR;
        }
        return KM_TLS_CLOSED;
    case SSL_ERROR_SYSCALL:
        if (ERR_peek_error() != 0)
            return fail_ssl(s, op, err);
        km_fail(err, "TLS %s with %s: %s", op, s->peer,
                saved_errno ? strerror(saved_errno) : "peer closed the connection");
        return KM_TLS_ERROR;
    default:
        return fail_ssl(s, op, err);
    }
}

km_tls_status km_tls_handshake(km_tls_stream *s, km_err *err)
{
    ERR_clear_error();
    errno = 0;
    int rc = SSL_do_handshake(s->ssl);
    return rc == 1 ? KM_TLS_OK : map_result(s, rc, "handshake", err);
}

km_tls_status km_tls_read(km_tls_stream *s, void *buf, size_t cap, size_t *n, km_err *err)
{
    ERR_clear_error();
    errno = 0;
    *n = 0;
    int rc = SSL_read_ex(s->ssl, buf, cap, n);
    return rc == 1 ? KM_TLS_OK : map_result(s, rc, "read", err);
}

km_tls_status km_tls_write(km_tls_stream *s, const void *buf, size_t len, size_t *n, km_err *err)
{
    ERR_clear_error();
    errno = 0;
    *n = 0;
    if (len == 0)
        return KM_TLS_OK;
    int rc = SSL_write_ex(s->ssl, buf, len, n);
    return rc == 1 ? KM_TLS_OK : map_result(s, rc, "write", err);
}

km_tls_status km_tls_shutdown(km_tls_stream *s, km_err *err)
{
    ERR_clear_error();
    errno = 0;
    int rc = SSL_shutdown(s->ssl);
    return rc >= 0 ? KM_TLS_OK : map_result(s, rc, "shutdown", err);
}

size_t km_tls_pending(const km_tls_stream *s)
{
    int n = SSL_pending(s->ssl);
    return n > 0 ? (size_t)n : 0;
}

const char *km_tls_peer_subject(const km_tls_stream *s, char *out, size_t cap)
{
    if (cap == 0)
        return out;
    out[0] = '\0';
    X509 *peer = SSL_get0_peer_certificate(s->ssl);
    BIO *b = peer ? BIO_new(BIO_s_mem()) : NULL;
    if (b && X509_NAME_print_ex(b, X509_get_subject_name(peer), 0, XN_FLAG_RFC2253) >= 0) {
        int n = BIO_read(b, out, (int)(cap - 1));
        out[n > 0 ? n : 0] = '\0';
    }
    BIO_free(b);
    return out;
}

const char *km_tls_version(const km_tls_stream *s) { return SSL_get_version(s->ssl); }

const char *km_tls_server_name(const km_tls_stream *s)
{
    return s->server ? SSL_get_servername(s->ssl, TLSEXT_NAMETYPE_host_name) : NULL;
}
