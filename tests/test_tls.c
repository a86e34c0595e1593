/* km_tls: real handshakes between a km_tls server and client over a socketpair,
 * with a PKI generated per test. */
#include <criterion/criterion.h>

#include <fcntl.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/ssl.h>

#include "km_tls.h"
#include "test_tls_certs.h"

static km_test_pki pki;
static int fds[2];

static void setup(void)
{
    cr_assert_eq(km_test_pki_make(&pki), 0);
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    for (int i = 0; i < 2; i++)
        cr_assert_eq(fcntl(fds[i], F_SETFL, O_NONBLOCK), 0);
}

static void teardown(void)
{
    close(fds[0]);
    close(fds[1]);
    km_test_pki_free(&pki);
}

TestSuite(tls, .init = setup, .fini = teardown);

typedef struct side {
    km_tls_stream *s;
    km_tls_status st;
    km_err err;
} side;

/* Steps both ends until each is done or failed.  Socketpair writes land
 * synchronously, so every round makes progress; the bound only catches a bug. */
static void pump_handshake(side *c, side *s)
{
    c->st = s->st = KM_TLS_WANT_READ;
    for (int round = 0; round < 200; round++) {
        if (c->st == KM_TLS_WANT_READ || c->st == KM_TLS_WANT_WRITE)
            c->st = km_tls_handshake(c->s, &c->err);
        if (s->st == KM_TLS_WANT_READ || s->st == KM_TLS_WANT_WRITE)
            s->st = km_tls_handshake(s->s, &s->err);
        bool c_done = c->st == KM_TLS_OK || c->st == KM_TLS_ERROR;
        bool s_done = s->st == KM_TLS_OK || s->st == KM_TLS_ERROR;
        if ((c_done && s_done) || c->st == KM_TLS_ERROR || s->st == KM_TLS_ERROR)
            return;
    }
    cr_assert_fail("handshake did not finish in 200 rounds");
}

static km_tls_ctx *server_ctx(const char *cert, const char *key, bool require_client)
{
    km_err err = {{0}};
    km_tls_config cfg = {.cert_file = cert, .key_file = key, .ca_file = pki.ca,
                         .require_client_cert = require_client};
    km_tls_ctx *ctx = km_tls_server_ctx_new(&cfg, &err);
    cr_assert(ctx, "server ctx: %s", err.msg);
    return ctx;
}

static km_tls_ctx *client_ctx(const char *ca, const char *cert, const char *key)
{
    km_err err = {{0}};
    km_tls_config cfg = {.cert_file = cert, .key_file = key, .ca_file = ca};
    km_tls_ctx *ctx = km_tls_client_ctx_new(&cfg, &err);
    cr_assert(ctx, "client ctx: %s", err.msg);
    return ctx;
}

static void start(side *c, side *s, km_tls_ctx *cctx, km_tls_ctx *sctx, const char *name)
{
    memset(c, 0, sizeof *c);
    memset(s, 0, sizeof *s);
    c->s = km_tls_stream_new(cctx, fds[0], name, &c->err);
    s->s = km_tls_stream_new(sctx, fds[1], "test-client", &s->err);
    cr_assert(c->s && s->s);
    pump_handshake(c, s);
}

static void transfer(km_tls_stream *from, km_tls_stream *to, const char *msg)
{
    km_err err = {{0}};
    size_t n = 0;
    cr_assert_eq(km_tls_write(from, msg, strlen(msg), &n, &err), KM_TLS_OK, "%s", err.msg);
    cr_assert_eq(n, strlen(msg));
    char buf[256];
    cr_assert_eq(km_tls_read(to, buf, sizeof buf, &n, &err), KM_TLS_OK, "%s", err.msg);
    cr_assert_eq(n, strlen(msg));
    cr_assert_arr_eq(buf, msg, n);
}

Test(tls, good_handshake_and_data_both_ways)
{
    km_tls_ctx *sctx = server_ctx(pki.server_cert, pki.server_key, false);
    km_tls_ctx *cctx = client_ctx(pki.ca, NULL, NULL);
    side c, s;
    start(&c, &s, cctx, sctx, "localhost");
    cr_assert_eq(c.st, KM_TLS_OK, "client: %s", c.err.msg);
    cr_assert_eq(s.st, KM_TLS_OK, "server: %s", s.err.msg);
    char subject[256];
    cr_assert_str_eq(km_tls_peer_subject(c.s, subject, sizeof subject), "CN=localhost");
    cr_assert_str_eq(km_tls_version(c.s), "TLSv1.3");
    transfer(c.s, s.s, "ping from client");
    transfer(s.s, c.s, "pong from server");

    size_t n = 0;
    char buf[16];
    cr_assert_eq(km_tls_read(s.s, buf, sizeof buf, &n, &s.err), KM_TLS_WANT_READ);
    cr_assert_eq(km_tls_shutdown(c.s, &c.err), KM_TLS_OK, "%s", c.err.msg);
    cr_assert_eq(km_tls_read(s.s, buf, sizeof buf, &n, &s.err), KM_TLS_CLOSED, "%s", s.err.msg);
    km_tls_stream_free(c.s); km_tls_stream_free(s.s);
    km_tls_ctx_free(cctx); km_tls_ctx_free(sctx);
}

Test(tls, ip_address_is_verified_against_ip_san)
{
    km_tls_ctx *sctx = server_ctx(pki.server_cert, pki.server_key, false);
    km_tls_ctx *cctx = client_ctx(pki.ca, NULL, NULL);
    side c, s;
    start(&c, &s, cctx, sctx, "127.0.0.1");
    cr_assert_eq(c.st, KM_TLS_OK, "client: %s", c.err.msg);
    km_tls_stream_free(c.s); km_tls_stream_free(s.s);
    km_tls_ctx_free(cctx); km_tls_ctx_free(sctx);
}

Test(tls, wrong_host_name_fails_naming_peer)
{
    km_tls_ctx *sctx = server_ctx(pki.server_cert, pki.server_key, false);
    km_tls_ctx *cctx = client_ctx(pki.ca, NULL, NULL);
    side c, s;
    start(&c, &s, cctx, sctx, "broker-7.example");
    cr_assert_eq(c.st, KM_TLS_ERROR);
    cr_assert(strstr(c.err.msg, "broker-7.example"), "%s", c.err.msg);
    cr_assert(strstr(c.err.msg, "hostname mismatch"), "%s", c.err.msg);
    km_tls_stream_free(c.s); km_tls_stream_free(s.s);
    km_tls_ctx_free(cctx); km_tls_ctx_free(sctx);
}

Test(tls, wrong_ca_is_rejected_on_both_ends)
{
    km_tls_ctx *sctx = server_ctx(pki.server_cert, pki.server_key, false);
    km_tls_ctx *cctx = client_ctx(pki.other_ca, NULL, NULL);
    side c, s;
    start(&c, &s, cctx, sctx, "localhost");
    cr_assert_eq(c.st, KM_TLS_ERROR);
    /* the reason depends on whether the server sent its CA along; both name the rejection */
    cr_assert(strstr(c.err.msg, "TLS handshake with localhost: server certificate rejected: "), "%s", c.err.msg);
    cr_assert(strstr(c.err.msg, "certificate verify failed"), "%s", c.err.msg);
    /* the client's alert reaches the server */
    if (s.st != KM_TLS_ERROR)
        s.st = km_tls_handshake(s.s, &s.err);
    cr_assert_eq(s.st, KM_TLS_ERROR);
    cr_assert(strstr(s.err.msg, "test-client"), "%s", s.err.msg);
    cr_assert(strstr(s.err.msg, "unknown ca"), "%s", s.err.msg);
    km_tls_stream_free(c.s); km_tls_stream_free(s.s);
    km_tls_ctx_free(cctx); km_tls_ctx_free(sctx);
}

Test(tls, expired_own_certificate_is_refused_at_load)
{
    km_err err = {{0}};
    km_tls_config cfg = {.cert_file = pki.expired_cert, .key_file = pki.expired_key, .ca_file = pki.ca};
    cr_assert_null(km_tls_server_ctx_new(&cfg, &err));
    cr_assert(strstr(err.msg, pki.expired_cert), "%s", err.msg);
    cr_assert(strstr(err.msg, "certificate has expired"), "%s", err.msg);
}

/* A peer that presents an expired certificate: the server is plain OpenSSL,
 * since km_tls refuses to serve one. */
Test(tls, expired_peer_certificate_fails_handshake)
{
    SSL_CTX *raw = SSL_CTX_new(TLS_server_method());
    cr_assert_eq(SSL_CTX_use_certificate_file(raw, pki.expired_cert, SSL_FILETYPE_PEM), 1);
    cr_assert_eq(SSL_CTX_use_PrivateKey_file(raw, pki.expired_key, SSL_FILETYPE_PEM), 1);
    SSL *srv = SSL_new(raw);
    SSL_set_fd(srv, fds[1]);
    SSL_set_accept_state(srv);
    km_tls_ctx *cctx = client_ctx(pki.ca, NULL, NULL);
    km_err err = {{0}};
    km_tls_stream *c = km_tls_stream_new(cctx, fds[0], "localhost", &err);
    km_tls_status st = KM_TLS_WANT_READ;
    for (int round = 0; round < 200 && (st == KM_TLS_WANT_READ || st == KM_TLS_WANT_WRITE); round++) {
        st = km_tls_handshake(c, &err);
        SSL_do_handshake(srv);
    }
    cr_assert_eq(st, KM_TLS_ERROR);
    cr_assert(strstr(err.msg, "localhost"), "%s", err.msg);
    cr_assert(strstr(err.msg, "certificate has expired"), "%s", err.msg);
    km_tls_stream_free(c);
    km_tls_ctx_free(cctx);
    SSL_free(srv);
    SSL_CTX_free(raw);
}

Test(tls, key_not_matching_certificate)
{
    km_err err = {{0}};
    km_tls_config cfg = {.cert_file = pki.server_cert, .key_file = pki.other_key, .ca_file = pki.ca};
    cr_assert_null(km_tls_server_ctx_new(&cfg, &err));
    cr_assert(strstr(err.msg, pki.other_key), "%s", err.msg);
    cr_assert(strstr(err.msg, "does not match certificate file"), "%s", err.msg);
    cr_assert(strstr(err.msg, "key values mismatch"), "%s", err.msg);
}

Test(tls, missing_and_bad_files_are_named)
{
    km_err err = {{0}};
    km_tls_config cfg = {.cert_file = pki.missing, .key_file = pki.server_key};
    cr_assert_null(km_tls_server_ctx_new(&cfg, &err));
    cr_assert(strstr(err.msg, pki.missing) && strstr(err.msg, "No such file"), "%s", err.msg);

    km_tls_config bad_ca = {.ca_file = pki.missing};
    cr_assert_null(km_tls_client_ctx_new(&bad_ca, &err));
    cr_assert(strstr(err.msg, "CA file") && strstr(err.msg, pki.missing), "%s", err.msg);

    km_tls_config garbage = {.cert_file = pki.garbage, .key_file = pki.server_key};
    cr_assert_null(km_tls_server_ctx_new(&garbage, &err));
    cr_assert(strstr(err.msg, pki.garbage) && strstr(err.msg, "no start line"), "%s", err.msg);

    km_tls_config garbage_key = {.cert_file = pki.server_cert, .key_file = pki.garbage};
    cr_assert_null(km_tls_server_ctx_new(&garbage_key, &err));
    cr_assert(strstr(err.msg, pki.garbage), "%s", err.msg);

    km_tls_config garbage_ca = {.ca_file = pki.garbage};
    cr_assert_null(km_tls_client_ctx_new(&garbage_ca, &err));
    cr_assert(strstr(err.msg, pki.garbage), "%s", err.msg);
}

Test(tls, client_certificate_required_and_checked)
{
    km_tls_ctx *sctx = server_ctx(pki.server_cert, pki.server_key, true);
    km_tls_ctx *anon = client_ctx(pki.ca, NULL, NULL);
    side c, s;
    start(&c, &s, anon, sctx, "localhost");
    /* TLS 1.3 clients finish before the server checks; the server must refuse. */
    cr_assert_eq(s.st, KM_TLS_ERROR);
    cr_assert(strstr(s.err.msg, "peer did not return a certificate"), "%s", s.err.msg);
    km_tls_stream_free(c.s); km_tls_stream_free(s.s);
    km_tls_ctx_free(anon);

    close(fds[0]); close(fds[1]);
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fds), 0);
    km_tls_ctx *with_cert = client_ctx(pki.ca, pki.client_cert, pki.client_key);
    start(&c, &s, with_cert, sctx, "localhost");
    cr_assert_eq(s.st, KM_TLS_OK, "server: %s", s.err.msg);
    char subject[256];
    cr_assert_str_eq(km_tls_peer_subject(s.s, subject, sizeof subject), "CN=km-test-client");
    km_tls_stream_free(c.s); km_tls_stream_free(s.s);
    km_tls_ctx_free(with_cert); km_tls_ctx_free(sctx);
}

Test(tls, peer_vanishing_without_close_notify_reads_as_closed)
{
    km_tls_ctx *sctx = server_ctx(pki.server_cert, pki.server_key, false);
    km_tls_ctx *cctx = client_ctx(pki.ca, NULL, NULL);
    side c, s;
    start(&c, &s, cctx, sctx, "localhost");
    cr_assert_eq(c.st, KM_TLS_OK, "%s", c.err.msg);
    /* consume the session tickets first: closing with unread data would be a reset */
    char buf[16];
    size_t n = 0;
    cr_assert_eq(km_tls_read(c.s, buf, sizeof buf, &n, &c.err), KM_TLS_WANT_READ, "%s", c.err.msg);
    km_tls_stream_free(c.s);
    close(fds[0]);
    fds[0] = -1;
    km_tls_status st = km_tls_read(s.s, buf, sizeof buf, &n, &s.err);
    cr_assert_eq(st, KM_TLS_CLOSED, "%d %s", st, s.err.msg);
    km_tls_stream_free(s.s);
    km_tls_ctx_free(cctx); km_tls_ctx_free(sctx);
}

Test(tls, server_without_certificate_is_a_config_error)
{
    km_err err = {{0}};
    km_tls_config cfg = {.ca_file = NULL};
    cr_assert_null(km_tls_server_ctx_new(&cfg, &err));
    cr_assert(strstr(err.msg, "cert_file is required"), "%s", err.msg);
    km_tls_config need_ca = {.cert_file = pki.server_cert, .key_file = pki.server_key,
                             .require_client_cert = true};
    cr_assert_null(km_tls_server_ctx_new(&need_ca, &err));
    cr_assert(strstr(err.msg, "ca_file"), "%s", err.msg);
}

/* Criterion counts a SIGPIPE as a crash, so this also proves writes cannot raise one. */
Test(tls, write_to_vanished_peer_is_an_error_not_sigpipe)
{
    km_tls_ctx *sctx = server_ctx(pki.server_cert, pki.server_key, false);
    km_tls_ctx *cctx = client_ctx(pki.ca, NULL, NULL);
    side c, s;
    start(&c, &s, cctx, sctx, "localhost");
    cr_assert_eq(s.st, KM_TLS_OK, "%s", s.err.msg);
    km_tls_stream_free(c.s);
    close(fds[0]);
    fds[0] = -1;
    km_tls_status st = KM_TLS_OK;
    size_t n = 0;
    for (int i = 0; i < 100 && st == KM_TLS_OK; i++)
        st = km_tls_write(s.s, "data", 4, &n, &s.err);
    cr_assert_eq(st, KM_TLS_ERROR);
    cr_assert(strstr(s.err.msg, "TLS write with test-client: Broken pipe"), "%s", s.err.msg);
    km_tls_stream_free(s.s);
    km_tls_ctx_free(cctx); km_tls_ctx_free(sctx);
}

Test(tls, not_yet_valid_certificate_is_refused_at_load)
{
    km_err err = {{0}};
    km_tls_config cfg = {.cert_file = pki.future_cert, .key_file = pki.future_key};
    cr_assert_null(km_tls_server_ctx_new(&cfg, &err));
    cr_assert(strstr(err.msg, pki.future_cert) && strstr(err.msg, "not yet valid"), "%s", err.msg);
}

/* OpenSSL would prompt on the terminal for the password and hang a daemon. */
Test(tls, encrypted_key_fails_instead_of_prompting, .timeout = 20)
{
    km_err err = {{0}};
    km_tls_config cfg = {.cert_file = pki.server_cert, .key_file = pki.encrypted_key};
    cr_assert_null(km_tls_server_ctx_new(&cfg, &err));
    cr_assert(strstr(err.msg, pki.encrypted_key) && strstr(err.msg, "unencrypted PEM private key"), "%s", err.msg);
}

/* TLS 1.2 is the floor: a client that offers at most TLS 1.1 is turned away. */
Test(tls, tls_1_1_client_is_refused)
{
    km_tls_ctx *sctx = server_ctx(pki.server_cert, pki.server_key, false);
    SSL_CTX *raw = SSL_CTX_new(TLS_client_method());
    SSL_CTX_set_security_level(raw, 0); /* let the old client really offer TLS 1.1 */
    SSL_CTX_set_min_proto_version(raw, TLS1_VERSION);
    SSL_CTX_set_max_proto_version(raw, TLS1_1_VERSION);
    SSL *cli = SSL_new(raw);
    SSL_set_fd(cli, fds[0]);
    SSL_set_connect_state(cli);
    km_err err = {{0}};
    km_tls_stream *s = km_tls_stream_new(sctx, fds[1], "old-client", &err);
    km_tls_status st = KM_TLS_WANT_READ;
    for (int round = 0; round < 200 && (st == KM_TLS_WANT_READ || st == KM_TLS_WANT_WRITE); round++) {
        SSL_do_handshake(cli);
        st = km_tls_handshake(s, &err);
    }
    cr_assert_eq(st, KM_TLS_ERROR);
    cr_assert(strstr(err.msg, "TLS handshake with old-client") && strstr(err.msg, "unsupported protocol"), "%s",
              err.msg);
    km_tls_stream_free(s);
    SSL_free(cli);
    SSL_CTX_free(raw);
    km_tls_ctx_free(sctx);
}
