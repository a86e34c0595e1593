/* A throwaway PKI for the TLS and net suites: EC P-256 keys, a CA, leaf certs
 * with chosen validity windows.  Built with the API so "expired" needs no clock games. */
#include "test_tls_certs.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509v3.h>

#include "km_testsupport.h"

typedef struct cert_spec {
    const char *cn;
    const char *san;       /* "DNS:localhost,IP:127.0.0.1" or NULL */
    bool is_ca;
    long not_before;       /* seconds from now */
    long not_after;
} cert_spec;

static int add_ext(X509 *x, X509 *issuer, int nid, const char *value)
{
    X509V3_CTX v3;
    X509V3_set_ctx_nodb(&v3);
    X509V3_set_ctx(&v3, issuer, x, NULL, NULL, 0);
    X509_EXTENSION *ext = X509V3_EXT_conf_nid(NULL, &v3, nid, value);
    if (!ext)
        return -1;
    int ok = X509_add_ext(x, ext, -1);
    X509_EXTENSION_free(ext);
    return ok ? 0 : -1;
}

/* Signs with issuer_key; a NULL issuer makes it self-signed. */
static X509 *make_cert(const cert_spec *spec, EVP_PKEY *key, X509 *issuer, EVP_PKEY *issuer_key)
{
    uint64_t serial = 0; /* random and distinct, as chain building expects */
    RAND_bytes((unsigned char *)&serial, sizeof serial);
    X509 *x = X509_new();
    X509_set_version(x, 2);
    ASN1_INTEGER_set_uint64(X509_get_serialNumber(x), serial >> 1);
    X509_gmtime_adj(X509_getm_notBefore(x), spec->not_before);
    X509_gmtime_adj(X509_getm_notAfter(x), spec->not_after);
    X509_set_pubkey(x, key);
    X509_NAME *name = X509_get_subject_name(x);
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)spec->cn, -1, -1, 0);
    X509_set_issuer_name(x, issuer ? X509_get_subject_name(issuer) : name);
    X509 *signer = issuer ? issuer : x;
    int bad = add_ext(x, signer, NID_basic_constraints, spec->is_ca ? "critical,CA:TRUE" : "CA:FALSE");
    bad |= add_ext(x, signer, NID_subject_key_identifier, "hash");
    if (spec->is_ca)
        bad |= add_ext(x, signer, NID_key_usage, "critical,keyCertSign,cRLSign");
    if (spec->san)
        bad |= add_ext(x, signer, NID_subject_alt_name, spec->san);
    if (bad || !X509_sign(x, issuer_key ? issuer_key : key, EVP_sha256())) {
        X509_free(x);
        return NULL;
    }
    return x;
}

static int write_pem(const char *path, X509 *x, EVP_PKEY *k)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    int ok = x ? PEM_write_X509(f, x) : PEM_write_PrivateKey(f, k, NULL, NULL, 0, NULL, NULL);
    return (fclose(f) == 0 && ok) ? 0 : -1;
}

static int write_encrypted(const char *path, EVP_PKEY *k)
{
    FILE *f = k ? fopen(path, "w") : NULL;
    if (!f)
        return -1;
    int ok = PEM_write_PrivateKey(f, k, EVP_aes_256_cbc(), (const unsigned char *)"secret", 6, NULL, NULL);
    return (fclose(f) == 0 && ok) ? 0 : -1;
}

static void path_in(char *out, const char *dir, const char *name)
{
    snprintf(out, PATH_MAX, "%s/%s", dir, name);
}

/* One leaf: key + cert signed by the CA, written to cert_path/key_path. */
static int make_leaf(const cert_spec *spec, X509 *ca, EVP_PKEY *ca_key, const char *cert_path,
                     const char *key_path)
{
    EVP_PKEY *key = EVP_EC_gen("P-256");
    X509 *x = key ? make_cert(spec, key, ca, ca_key) : NULL;
    int rc = (x && !write_pem(cert_path, x, NULL) && !write_pem(key_path, NULL, key)) ? 0 : -1;
    X509_free(x);
    EVP_PKEY_free(key);
    return rc;
}

static int make_ca(const char *cn, const char *cert_path, X509 **ca, EVP_PKEY **ca_key)
{
    cert_spec spec = {cn, NULL, true, -3600, 86400};
    *ca_key = EVP_EC_gen("P-256");
    *ca = *ca_key ? make_cert(&spec, *ca_key, NULL, NULL) : NULL;
    return (*ca && !write_pem(cert_path, *ca, NULL)) ? 0 : -1;
}

static int make_files(km_test_pki *p)
{
    X509 *ca = NULL, *other = NULL;
    EVP_PKEY *ca_key = NULL, *other_key = NULL, *stray = EVP_EC_gen("P-256");
    cert_spec server = {"localhost", "DNS:localhost,IP:127.0.0.1", false, -3600, 86400};
    cert_spec client = {"km-test-client", NULL, false, -3600, 86400};
    cert_spec expired = {"localhost", "DNS:localhost,IP:127.0.0.1", false, -2 * 86400, -86400};
    cert_spec future = {"localhost", "DNS:localhost,IP:127.0.0.1", false, 86400, 2 * 86400};
    int rc = make_ca("km-test-ca", p->ca, &ca, &ca_key) | make_ca("km-other-ca", p->other_ca, &other, &other_key);
    if (!rc)
        rc = make_leaf(&server, ca, ca_key, p->server_cert, p->server_key) |
             make_leaf(&client, ca, ca_key, p->client_cert, p->client_key) |
             make_leaf(&expired, ca, ca_key, p->expired_cert, p->expired_key) |
             make_leaf(&future, ca, ca_key, p->future_cert, p->future_key) |
             write_encrypted(p->encrypted_key, stray) |
             (stray ? write_pem(p->other_key, NULL, stray) : -1);
    FILE *g = fopen(p->garbage, "w");
    if (!g || fputs("this is not a PEM file\n", g) < 0 || fclose(g) != 0)
        rc = -1;
    X509_free(ca); X509_free(other);
    EVP_PKEY_free(ca_key); EVP_PKEY_free(other_key); EVP_PKEY_free(stray);
    return rc;
}

int km_test_pki_make(km_test_pki *p)
{
    memset(p, 0, sizeof *p);
    p->dir = km_test_tmpdir("pki");
    if (!p->dir)
        return -1;
    path_in(p->ca, p->dir, "ca.pem");
    path_in(p->other_ca, p->dir, "other-ca.pem");
    path_in(p->server_cert, p->dir, "server.pem");
    path_in(p->server_key, p->dir, "server.key");
    path_in(p->client_cert, p->dir, "client.pem");
    path_in(p->client_key, p->dir, "client.key");
    path_in(p->expired_cert, p->dir, "expired.pem");
    path_in(p->expired_key, p->dir, "expired.key");
    path_in(p->other_key, p->dir, "other.key");
    path_in(p->future_cert, p->dir, "future.pem");
    path_in(p->future_key, p->dir, "future.key");
    path_in(p->encrypted_key, p->dir, "encrypted.key");
    path_in(p->garbage, p->dir, "garbage.pem");
    path_in(p->missing, p->dir, "no-such-file.pem");
    if (make_files(p)) {
        fprintf(stderr, "km_test_pki_make: cannot write the test PKI under %s\n", p->dir);
        return -1;
    }
    return 0;
}

void km_test_pki_free(km_test_pki *p)
{
    km_test_rmtree(p->dir);
    free(p->dir);
    p->dir = NULL;
}
