/* TLS contexts: certificate, key and trust loading with checks that name the file. */
#include "tls_private.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

/* Appends ": reason" for every queued OpenSSL error, oldest first, skipping
 * repeats (OpenSSL often queues the same reasons at several levels). */
static void append_openssl_reasons(char *msg, size_t cap)
{
    const char *file, *func, *data;
    int line, flags;
    unsigned long e;
    while ((e = ERR_get_error_all(&file, &line, &func, &data, &flags)) != 0) {
        const char *reason = ERR_reason_error_string(e);
        char piece[256];
        bool has_data = (flags & ERR_TXT_STRING) && data && *data;
        if (reason)
            snprintf(piece, sizeof piece, "%s%s%s%s", reason, has_data ? " (" : "", has_data ? data : "",
                     has_data ? ")" : "");
        else
            snprintf(piece, sizeof piece, "OpenSSL error 0x%lx", e);
        size_t used = strlen(msg);
        if (!strstr(msg, piece) && used + 1 < cap)
            snprintf(msg + used, cap - used, ": %s", piece);
    }
}

int km_tls_fail_openssl(km_err *err, const char *fmt, ...)
{
    char msg[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    append_openssl_reasons(msg, sizeof msg);
    return km_fail(err, "%s", msg);
}

/* Encrypted keys would make OpenSSL prompt on the terminal and hang a daemon;
 * refusing the password turns that into a load error instead. */
static int no_password(char *buf, int size, int rwflag, void *ud)
{
    (void)buf; (void)size; (void)rwflag; (void)ud;
    return 0;
}

/* OpenSSL's own messages for a missing file are vague; check first. */
static int check_readable(const char *what, const char *file, km_err *err)
{
    if (access(file, R_OK) != 0)
        return km_fail(err, "TLS %s file %s: %s", what, file, strerror(errno));
    return 0;
}

static void asn1_time_str(const ASN1_TIME *t, char *out, size_t cap)
{
    BIO *b = BIO_new(BIO_s_mem());
    int n = 0;
    if (b && ASN1_TIME_print(b, t))
        n = BIO_read(b, out, (int)cap - 1);
    out[n > 0 ? n : 0] = '\0';
    BIO_free(b);
}

static int check_validity(const char *file, X509 *x, km_err *err)
{
    char when[64];
    if (X509_cmp_current_time(X509_get0_notAfter(x)) < 0) {
        asn1_time_str(X509_get0_notAfter(x), when, sizeof when);
        return km_fail(err, "TLS certificate file %s: certificate has expired (notAfter %s)", file, when);
    }
    if (X509_cmp_current_time(X509_get0_notBefore(x)) > 0) {
        asn1_time_str(X509_get0_notBefore(x), when, sizeof when);
        return km_fail(err, "TLS certificate file %s: certificate is not yet valid (notBefore %s)", file, when);
    }
    return 0;
}

static EVP_PKEY *read_key(const char *file, km_err *err)
{
    BIO *in = BIO_new_file(file, "r");
    EVP_PKEY *pkey = in ? PEM_read_bio_PrivateKey(in, NULL, no_password, NULL) : NULL;
    BIO_free(in);
    if (!pkey)
        km_tls_fail_openssl(err, "TLS key file %s: cannot load an unencrypted PEM private key", file);
    return pkey;
}

static int load_identity(SSL_CTX *ssl, const km_tls_config *cfg, km_err *err)
{
    const char *key = cfg->key_file ? cfg->key_file : cfg->cert_file;
    if (check_readable("certificate", cfg->cert_file, err) || check_readable("key", key, err))
        return -1;
    if (SSL_CTX_use_certificate_chain_file(ssl, cfg->cert_file) != 1)
        return km_tls_fail_openssl(err, "TLS certificate file %s: cannot load a PEM certificate chain",
                                   cfg->cert_file);
    if (check_validity(cfg->cert_file, SSL_CTX_get0_certificate(ssl), err))
        return -1;
    EVP_PKEY *pkey = read_key(key, err);
    if (!pkey)
        return -1;
    int rc = 0;
    /* Checked apart from loading so a mismatch is not reported as a bad key file. */
    if (X509_check_private_key(SSL_CTX_get0_certificate(ssl), pkey) != 1)
        rc = km_tls_fail_openssl(err, "TLS key file %s does not match certificate file %s", key,
                                 cfg->cert_file);
    else if (SSL_CTX_use_PrivateKey(ssl, pkey) != 1)
        rc = km_tls_fail_openssl(err, "TLS key file %s: OpenSSL refused the key", key);
    EVP_PKEY_free(pkey);
    return rc;
}

static int load_trust(SSL_CTX *ssl, const km_tls_config *cfg, bool server, km_err *err)
{
    bool client_auth = server && (cfg->require_client_cert || cfg->request_client_cert);
    if (!cfg->ca_file) {
        if (client_auth)
            return km_fail(err, "TLS server: client certificate authentication needs ca_file to verify clients "
                                "against");
        if (SSL_CTX_set_default_verify_paths(ssl) != 1)
            return km_tls_fail_openssl(err, "TLS: cannot load the system trust store");
        return 0;
    }
    if (check_readable("CA", cfg->ca_file, err))
        return -1;
    if (SSL_CTX_load_verify_locations(ssl, cfg->ca_file, NULL) != 1)
        return km_tls_fail_openssl(err, "TLS CA file %s: cannot load PEM trust anchors", cfg->ca_file);
    if (client_auth) {
        STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(cfg->ca_file);
        if (!names)
            return km_tls_fail_openssl(err, "TLS CA file %s: no CA names for client auth", cfg->ca_file);
        SSL_CTX_set_client_CA_list(ssl, names);
    }
    return 0;
}

static void set_policy(SSL_CTX *ssl, const km_tls_config *cfg, bool server)
{
    SSL_CTX_set_min_proto_version(ssl, TLS1_2_VERSION);
    /* Partial writes let km_net keep its own queue; moving buffers let it
     * retry a WANT_WRITE from a reallocated queue chunk. */
    SSL_CTX_set_mode(ssl, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    /* One recv for several records (rather than a header read and a body read per record).
     * km_net reads until WANT_READ, or feeds itself a read event, so what OpenSSL read ahead is
     * never stranded out of the poller's sight. */
    SSL_CTX_set_read_ahead(ssl, 1);
    /* Kafka peers close without close_notify; frames are self-delimiting, so a
     * truncated frame is caught by the framer and a bare EOF is a plain close. */
    SSL_CTX_set_options(ssl, SSL_OP_IGNORE_UNEXPECTED_EOF | SSL_OP_NO_RENEGOTIATION);
    SSL_CTX_set_default_passwd_cb(ssl, no_password);
    int mode = SSL_VERIFY_NONE;
    if (!server && !cfg->no_verify)
        mode = SSL_VERIFY_PEER;
    if (server && cfg->request_client_cert)
        mode = SSL_VERIFY_PEER;
    if (server && cfg->require_client_cert)
        mode = SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
    SSL_CTX_set_verify(ssl, mode, NULL);
}

static km_tls_ctx *ctx_new(const km_tls_config *cfg, bool server, km_err *err)
{
    if (!cfg)
        return km_fail(err, "TLS: no configuration given"), NULL;
    if (server && !cfg->cert_file)
        return km_fail(err, "TLS server: cert_file is required"), NULL;
    ERR_clear_error();
    km_tls_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx)
        return km_fail(err, "TLS: out of memory"), NULL;
    ctx->server = server;
    ctx->no_name_check = !server && cfg->no_name_check;
    ctx->ssl = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
    if (!ctx->ssl) {
        km_tls_fail_openssl(err, "TLS: cannot create an OpenSSL context");
        free(ctx);
        return NULL;
    }
    ctx->sock = km_tls_sock_method_new();
    if (!ctx->sock) {
        km_tls_fail_openssl(err, "TLS: cannot create the socket BIO method");
        km_tls_ctx_free(ctx);
        return NULL;
    }
    set_policy(ctx->ssl, cfg, server);
    if ((cfg->cert_file && load_identity(ctx->ssl, cfg, err)) || load_trust(ctx->ssl, cfg, server, err)) {
        km_tls_ctx_free(ctx);
        return NULL;
    }
    return ctx;
}

km_tls_ctx *km_tls_client_ctx_new(const km_tls_config *cfg, km_err *err) { return ctx_new(cfg, false, err); }
km_tls_ctx *km_tls_server_ctx_new(const km_tls_config *cfg, km_err *err) { return ctx_new(cfg, true, err); }
bool km_tls_ctx_is_server(const km_tls_ctx *ctx) { return ctx->server; }

void km_tls_ctx_free(km_tls_ctx *ctx)
{
    if (!ctx)
        return;
    SSL_CTX_free(ctx->ssl);
    BIO_meth_free(ctx->sock);
    free(ctx);
}
