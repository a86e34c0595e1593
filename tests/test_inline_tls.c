/* The inline proxy with TLS: terminating client TLS (with client-certificate authentication),
 * originating TLS to the brokers (a second proxy terminating TLS in front of the mock cluster is
 * the TLS broker), refusals that leave other clients alone, and certificate reloads that keep
 * live connections.  Certificates are made by the test (test_tls_certs). */
#include "km_testsupport.h"
#include "test_inline_rig.h"
#include "test_tls_certs.h"

#include <criterion/criterion.h>
#include <poll.h>
#include <ev.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

TestSuite(inline_tls, .timeout = 180);

static km_test_pki pki;

static void make_pki(void)
{
    cr_assert_eq(km_test_pki_make(&pki), 0);
}

/* A TLS-terminating proxy over the mock (dynamic routes), client auth as given. */
static void tls_front(irig *r, const char *auth)
{
    irig_init(r);
    irig_mock(r, 3, "tls", 3);
    irig_dynamic(r);
    irig_set(r, "proxy.client.ssl.certificate.location", pki.server_cert);
    irig_set(r, "proxy.client.ssl.key.location", pki.server_key);
    irig_set(r, "proxy.client.ssl.ca.location", pki.ca);
    irig_set(r, "proxy.client.ssl.client.auth", auth);
}

static rd_kafka_t *tls_client(uint16_t port, const char *ca, const char *cert, const char *key)
{
    char bootstrap[64];
    snprintf(bootstrap, sizeof bootstrap, "127.0.0.1:%u", port);
    const char *extra[] = {"security.protocol", "ssl", "ssl.ca.location", ca,
                           cert ? "ssl.certificate.location" : NULL, cert, "ssl.key.location", key, NULL};
    return irig_producer(bootstrap, extra);
}

static bool metadata_ok(rd_kafka_t *rk, int timeout_ms, int expect_port_base)
{
    const struct rd_kafka_metadata *md = NULL;
    if (rd_kafka_metadata(rk, 1, NULL, &md, timeout_ms))
        return false;
    bool ok = md->broker_cnt == 3;
    for (int i = 0; ok && i < md->broker_cnt; i++)
        ok = md->brokers[i].port == expect_port_base + md->brokers[i].id;
    rd_kafka_metadata_destroy(md);
    return ok;
}

static void produce_some(rd_kafka_t *rk, int n)
{
    for (int i = 0; i < n; i++) {
        char v[16];
        int len = snprintf(v, sizeof v, "%d", i);
        cr_assert_eq(rd_kafka_producev(rk, RD_KAFKA_V_TOPIC("tls"), RD_KAFKA_V_VALUE(v, (size_t)len),
                                       RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END), 0);
    }
    cr_assert_eq(rd_kafka_flush(rk, 30000), 0, "messages were not delivered through TLS");
}

Test(inline_tls, client_auth_required_refuses_bad_clients_and_serves_good_ones, .init = make_pki)
{
    irig r;
    tls_front(&r, "required");
    irig_start(&r);
    uint16_t port = irig_port(&r, -1);
    int base = r.cfg.port_base;
    rd_kafka_t *good = tls_client(port, pki.ca, pki.client_cert, pki.client_key);
    cr_assert(metadata_ok(good, 10000, base), "a client with a valid certificate was not served");
    produce_some(good, 1000);
    struct {
        const char *what, *ca, *cert, *key;
    } bad[] = {{"a client trusting another CA", pki.other_ca, pki.client_cert, pki.client_key},
               {"a client without a certificate", pki.ca, NULL, NULL},
               {"a client with an expired certificate", pki.ca, pki.expired_cert, pki.expired_key}};
    for (size_t i = 0; i < 3; i++) {
        rd_kafka_t *rk = tls_client(port, bad[i].ca, bad[i].cert, bad[i].key);
        cr_expect(!metadata_ok(rk, 2000, base), "%s was served", bad[i].what);
        rd_kafka_destroy(rk);
        cr_assert(metadata_ok(good, 10000, base), "the good client suffered from %s", bad[i].what);
    }
    produce_some(good, 100);
    rd_kafka_destroy(good);
    km_inline_stats st;
    irig_stop(&r, &st);
    cr_expect_geq(st.tls_failures, 3, "%llu handshake failures counted", (unsigned long long)st.tls_failures);
    irig_free(&r);
    km_test_pki_free(&pki);
}

/* Client -> proxy A (plaintext in, TLS out) -> proxy B (TLS in) -> mock.  A trusting the wrong CA
 * never falls back to plaintext: its clients get nothing. */
static void tls_upstream(irig *a, irig *b, const char *ca)
{
    char up[64];
    snprintf(up, sizeof up, "127.0.0.1:%u", irig_port(b, -1));
    irig_init(a);
    char base[16];
    snprintf(base, sizeof base, "%d", km_test_free_port_base(8));
    irig_set(a, "proxy.bootstrap.listen", "127.0.0.1:0");
    irig_set(a, "proxy.bootstrap.upstream", up);
    irig_set(a, "proxy.listen.host", "127.0.0.1");
    irig_set(a, "proxy.advertised.host", "127.0.0.1");
    irig_set(a, "proxy.port.base", base);
    irig_set(a, "proxy.upstream.security.protocol", "ssl");
    irig_set(a, "proxy.upstream.ssl.ca.location", ca);
    irig_start(a);
}

Test(inline_tls, upstream_tls_is_verified_and_never_falls_back, .init = make_pki)
{
    irig b, a;
    tls_front(&b, "none");
    irig_start(&b);
    tls_upstream(&a, &b, pki.ca);
    char bootstrap[64];
    snprintf(bootstrap, sizeof bootstrap, "127.0.0.1:%u", irig_port(&a, -1));
    rd_kafka_t *rk = irig_producer(bootstrap, NULL);
    cr_assert(metadata_ok(rk, 10000, a.cfg.port_base), "no metadata through the TLS chain");
    produce_some(rk, 1000);
    rd_kafka_destroy(rk);
    km_inline_stats st;
    irig_stop(&a, &st);
    cr_expect_eq(st.upstream_failures, 0);
    irig_free(&a);

    tls_upstream(&a, &b, pki.other_ca);
    snprintf(bootstrap, sizeof bootstrap, "127.0.0.1:%u", irig_port(&a, -1));
    rk = irig_producer(bootstrap, NULL);
    cr_expect(!metadata_ok(rk, 2000, a.cfg.port_base), "served although the broker's certificate is not trusted");
    rd_kafka_destroy(rk);
    irig_stop(&a, &st);
    cr_expect_geq(st.upstream_failures, 1);
    cr_expect(strstr(a.last_log, "certificate verify failed"), "log: %s", a.last_log);
    irig_free(&a);
    irig_free(&b);
    km_test_pki_free(&pki);
}

Test(inline_tls, bad_certificates_stop_start_up_naming_the_file, .init = make_pki)
{
    const char *certs[] = {pki.expired_cert, pki.garbage, pki.missing};
    const char *expect[] = {"certificate has expired", pki.garbage, pki.missing};
    for (int i = 0; i < 3; i++) {
        km_inline_config c;
        km_inline_config_defaults(&c);
        km_err err = {{0}};
        cr_assert_eq(km_inline_config_set(&c, "proxy.bootstrap.listen", "127.0.0.1:0", "t", &err), 0);
        cr_assert_eq(km_inline_config_set(&c, "proxy.bootstrap.upstream", "127.0.0.1:1", "t", &err), 0);
        cr_assert_eq(km_inline_config_set(&c, "proxy.client.ssl.certificate.location", certs[i], "t", &err), 0);
        cr_assert_eq(km_inline_config_set(&c, "proxy.client.ssl.key.location", pki.server_key, "t", &err), 0);
        struct ev_loop *loop = ev_loop_new(0);
        km_inline *p = km_inline_new(loop, &c, NULL, NULL, &err);
        cr_expect_null(p);
        cr_expect(strstr(err.msg, "proxy.client.ssl") && strstr(err.msg, expect[i]), "error: %s", err.msg);
        km_inline_free(p);
        ev_loop_destroy(loop);
        km_inline_config_free(&c);
    }
    km_test_pki_free(&pki);
}

/* ---- reload -------------------------------------------------------------------------------- */

typedef struct tls_conn {
    SSL_CTX *ctx;
    SSL *ssl;
    int fd;
} tls_conn;

static void tls_dial_sni(tls_conn *t, uint16_t port, const char *sni)
{
    t->ctx = SSL_CTX_new(TLS_client_method());
    cr_assert_eq(SSL_CTX_load_verify_locations(t->ctx, pki.ca, NULL), 1);
    SSL_CTX_set_verify(t->ctx, SSL_VERIFY_PEER, NULL);
    t->fd = irig_connect(port);
    t->ssl = SSL_new(t->ctx);
    if (sni)
        SSL_set_tlsext_host_name(t->ssl, sni);
    SSL_set_fd(t->ssl, t->fd);
    cr_assert_eq(SSL_connect(t->ssl), 1, "TLS handshake with the proxy failed");
}

static void tls_dial(tls_conn *t, uint16_t port)
{
    tls_dial_sni(t, port, NULL);
}

static void tls_close(tls_conn *t)
{
    SSL_free(t->ssl);
    SSL_CTX_free(t->ctx);
    close(t->fd);
}

/* One ApiVersions round trip over the TLS connection. */
static bool tls_round_trip(tls_conn *t, int32_t corr)
{
    km_api_versions_request av;
    km_api_versions_request_init(&av);
    size_t len;
    uint8_t *f = irig_request(KM_API_API_VERSIONS, 0, corr, &av, &len), head[8];
    bool ok = SSL_write(t->ssl, f, (int)len) == (int)len;
    free(f);
    size_t got = 0;
    while (ok && got < 8) {
        int k = SSL_read(t->ssl, head + got, (int)(8 - got));
        ok = k > 0;
        got += ok ? (size_t)k : 0;
    }
    if (!ok)
        return false;
    size_t size = km_be32(head);
    uint8_t *rest = malloc(size);
    for (got = 4; ok && got < size;) {
        int k = SSL_read(t->ssl, rest, (int)(size - got));
        ok = k > 0;
        got += ok ? (size_t)k : 0;
    }
    free(rest);
    return ok && head[7] == (uint8_t)corr;
}

static void copy_file(const char *from, const char *to)
{
    FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
    cr_assert(in && out);
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        fwrite(buf, 1, n, out);
    fclose(in), fclose(out);
}

Test(inline_tls, reload_keeps_live_connections_and_a_bad_file_keeps_the_old_certificate, .init = make_pki)
{
    char cert[PATH_MAX + 16];
    snprintf(cert, sizeof cert, "%s/reload.pem", pki.dir);
    copy_file(pki.server_cert, cert);
    irig r;
    irig_init(&r);
    irig_mock(&r, 1, NULL, 0);
    irig_dynamic(&r);
    irig_set(&r, "proxy.client.ssl.certificate.location", cert);
    irig_set(&r, "proxy.client.ssl.key.location", pki.server_key);
    irig_start(&r);
    uint16_t port = irig_port(&r, -1);
    tls_conn live;
    tls_dial(&live, port);
    cr_assert(tls_round_trip(&live, 1));
    km_err err = {{0}};
    irig_stop(&r, NULL);
    cr_assert_eq(km_inline_reload_tls(r.proxy, &err), 0, "%s", err.msg);
    irig_resume(&r);
    cr_assert(tls_round_trip(&live, 2), "the live connection did not survive the reload");
    tls_conn fresh;
    tls_dial(&fresh, port);
    cr_assert(tls_round_trip(&fresh, 3));
    tls_close(&fresh);
    copy_file(pki.garbage, cert);
    irig_stop(&r, NULL);
    cr_assert_eq(km_inline_reload_tls(r.proxy, &err), -1);
    cr_expect(strstr(err.msg, cert), "error: %s", err.msg);
    irig_resume(&r);
    tls_dial(&fresh, port); /* still the previous certificate */
    cr_assert(tls_round_trip(&fresh, 4));
    cr_assert(tls_round_trip(&live, 5));
    tls_close(&fresh);
    tls_close(&live);
    irig_free(&r);
    km_test_pki_free(&pki);
}

Test(inline_tls, client_auth_requested_verifies_only_certificates_sent, .init = make_pki)
{
    irig r;
    tls_front(&r, "requested");
    irig_start(&r);
    uint16_t port = irig_port(&r, -1);
    rd_kafka_t *anon = tls_client(port, pki.ca, NULL, NULL);
    cr_expect(metadata_ok(anon, 10000, r.cfg.port_base), "a client without a certificate was refused");
    rd_kafka_destroy(anon);
    rd_kafka_t *expired = tls_client(port, pki.ca, pki.expired_cert, pki.expired_key);
    cr_expect(!metadata_ok(expired, 2000, r.cfg.port_base), "an expired client certificate was accepted");
    rd_kafka_destroy(expired);
    irig_free(&r);
    km_test_pki_free(&pki);
}

/* The broker's certificate is valid but names another host: refused with host name checks
 * (the default), accepted with proxy.upstream.ssl.endpoint.identification.algorithm=none. */
Test(inline_tls, endpoint_identification_checks_the_broker_name, .init = make_pki)
{
    for (int check = 1; check >= 0; check--) {
        irig b, a;
        irig_init(&b);
        irig_mock(&b, 3, "tls", 1);
        irig_dynamic(&b);
        irig_set(&b, "proxy.client.ssl.certificate.location", pki.client_cert); /* CN=km-test-client */
        irig_set(&b, "proxy.client.ssl.key.location", pki.client_key);
        irig_start(&b);
        char up[64], base[16];
        snprintf(up, sizeof up, "127.0.0.1:%u", irig_port(&b, -1));
        snprintf(base, sizeof base, "%d", km_test_free_port_base(8));
        irig_init(&a);
        irig_set(&a, "proxy.bootstrap.listen", "127.0.0.1:0");
        irig_set(&a, "proxy.bootstrap.upstream", up);
        irig_set(&a, "proxy.listen.host", "127.0.0.1");
        irig_set(&a, "proxy.advertised.host", "127.0.0.1");
        irig_set(&a, "proxy.port.base", base);
        irig_set(&a, "proxy.upstream.security.protocol", "ssl");
        irig_set(&a, "proxy.upstream.ssl.ca.location", pki.ca);
        if (!check)
            irig_set(&a, "proxy.upstream.ssl.endpoint.identification.algorithm", "none");
        irig_start(&a);
        char bootstrap[64];
        snprintf(bootstrap, sizeof bootstrap, "127.0.0.1:%u", irig_port(&a, -1));
        rd_kafka_t *rk = irig_producer(bootstrap, NULL);
        bool served = metadata_ok(rk, check ? 2000 : 10000, a.cfg.port_base);
        rd_kafka_destroy(rk);
        cr_expect_eq(served, !check, "%s", check ? "served although the broker's name does not match"
                                                 : "not served with host name checks off");
        irig_free(&a);
        irig_free(&b);
    }
    km_test_pki_free(&pki);
}

/* ---- SNI routing ----------------------------------------------------------------------------- */

static bool ssl_read_all(tls_conn *t, uint8_t *p, size_t n)
{
    for (size_t got = 0; got < n;) {
        int k = SSL_read(t->ssl, p + got, (int)(n - got));
        if (k <= 0)
            return false;
        got += (size_t)k;
    }
    return true;
}

static void upstream_gets(int lfd, tls_conn *t, int32_t corr)
{
    km_api_versions_request av;
    km_api_versions_request_init(&av);
    size_t len;
    uint8_t *f = irig_request(KM_API_API_VERSIONS, 0, corr, &av, &len), *p;
    cr_assert_eq(SSL_write(t->ssl, f, (int)len), (int)len);
    int up = irig_accept(lfd);
    cr_assert(irig_read_frame(up, &p, &len), "the routed upstream got nothing");
    cr_assert(len == (size_t)(f[3] | f[2] << 8) && !memcmp(p, f + 4, len));
    free(p), free(f);
    close(up);
}

Test(inline_tls, sni_names_pick_the_broker_and_rewritten_addresses_use_them, .init = make_pki)
{
    uint16_t pb, p1, p2;
    int lb = irig_listen(&pb), l1 = irig_listen(&p1), l2 = irig_listen(&p2);
    char v[64];
    irig r;
    irig_init(&r);
    irig_set(&r, "proxy.client.ssl.certificate.location", pki.server_cert);
    irig_set(&r, "proxy.client.ssl.key.location", pki.server_key);
    irig_set(&r, "proxy.sni.listen", "127.0.0.1:0");
    irig_set(&r, "proxy.sni.host.prefix", "b-");
    irig_set(&r, "proxy.sni.host.suffix", ".kafka.test");
    snprintf(v, sizeof v, "127.0.0.1:%u", pb);
    irig_set(&r, "proxy.bootstrap.upstream", v);
    snprintf(v, sizeof v, "127.0.0.1:%u", p1);
    irig_set(&r, "proxy.broker.1.upstream", v);
    irig_start(&r);
    uint16_t sni = irig_port(&r, KM_INLINE_SNI);

    tls_conn boot; /* a name outside the pattern reaches the bootstrap upstream */
    tls_dial_sni(&boot, sni, "bootstrap.kafka.test");
    km_metadata_request mq;
    km_metadata_request_init(&mq);
    size_t len;
    uint8_t *f = irig_request(KM_API_METADATA, 1, 7, &mq, &len), *p;
    cr_assert_eq(SSL_write(boot.ssl, f, (int)len), (int)len);
    free(f);
    int up = irig_accept(lb);
    cr_assert(irig_read_frame(up, &p, &len));
    free(p);
    km_metadata_response m;
    km_metadata_response_init(&m);
    km_metadata_response_response_broker mb[2] = {{.node_id = 1, .host = km_cstr("10.9.9.1"), .port = 9092},
                                                  {.node_id = 2, .host = km_cstr("127.0.0.1"), .port = p2}};
    m.brokers.count = 2, m.brokers.items = mb;
    km_buf out;
    km_buf_init(&out);
    km_err err = {{0}};
    cr_assert_eq(km_frame_response(KM_API_METADATA, 1, 7, &m, &out, &err), 0, "%s", err.msg);
    cr_assert(irig_send_all(up, out.data, out.len));
    km_buf_free(&out);
    uint8_t head[4];
    cr_assert(ssl_read_all(&boot, head, 4));
    len = km_be32(head);
    p = malloc(len);
    cr_assert(ssl_read_all(&boot, p, len));
    km_arena a;
    km_arena_init(&a, 1 << 20);
    km_metadata_response mr;
    km_reader rd;
    km_reader_init(&rd, p, len);
    int32_t corr;
    cr_assert_eq(km_parse_response_header(&rd, KM_API_METADATA, 1, &corr, &err), 0);
    cr_assert_eq(km_decode(&km_metadata_response_desc, 1, p + rd.pos, len - rd.pos, &mr, &a, NULL, &err), 0, "%s",
                 err.msg);
    cr_assert_eq(mr.brokers.count, 2);
    for (int i = 0; i < 2; i++) {
        char want[64];
        snprintf(want, sizeof want, "b-%d.kafka.test", mr.brokers.items[i].node_id);
        cr_expect(km_str_eq(mr.brokers.items[i].host, want), "broker %d told %.*s", mr.brokers.items[i].node_id,
                  mr.brokers.items[i].host.len, mr.brokers.items[i].host.ptr);
        cr_expect_eq(mr.brokers.items[i].port, sni);
    }
    km_arena_free(&a);
    free(p);
    close(up);
    tls_close(&boot);

    tls_conn b2, b1, b9;
    tls_dial_sni(&b2, sni, "b-2.kafka.test"); /* learned from the Metadata answer */
    upstream_gets(l2, &b2, 1);
    tls_dial_sni(&b1, sni, "B-1.KAFKA.TEST"); /* static; names are case-insensitive */
    upstream_gets(l1, &b1, 2);
    tls_dial_sni(&b9, sni, "b-9.kafka.test"); /* no such broker: cut */
    uint8_t byte;
    cr_expect_leq(SSL_read(b9.ssl, &byte, 1), 0, "a client naming an unknown broker was served");
    tls_conn wrap; /* 2^32 + 1 is no broker id: it must not wrap around onto broker 1 */
    tls_dial_sni(&wrap, sni, "b-4294967297.kafka.test");
    cr_expect_leq(SSL_read(wrap.ssl, &byte, 1), 0, "a client naming broker 4294967297 was served");
    struct pollfd pl = {.fd = l1, .events = POLLIN};
    cr_expect_eq(poll(&pl, 1, 200), 0, "broker 4294967297 was routed to broker 1's upstream");
    tls_close(&wrap);
    tls_close(&b1), tls_close(&b2), tls_close(&b9);
    close(lb), close(l1), close(l2);
    irig_free(&r);
    km_test_pki_free(&pki);
}
