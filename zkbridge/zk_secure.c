/* A secured ZooKeeper handle: TLS (keystore/truststore as Kafka names them, turned into the PEM files
 * the C client reads), SASL DIGEST-MD5 (Cyrus SASL, as ZooKeeper's Java client speaks it) and digest
 * auth. The client library is Debian's, rebuilt with both (deploy/zookeeper-c/). What is configured
 * is required: the C client never falls back to plaintext once given certificates, and a failed SASL
 * exchange or refused certificate is reported as an authentication failure (zk_session.c). */
#include "zk_writer.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/pkcs12.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

struct zk_secure {
    const km_zk_security *sec;
    char dir[64];                       /* private temp dir for converted PKCS12 stores; "" if none */
    char ca[512], cert[512], key[512];  /* PEM files given to the client */
    char pass[128];                     /* the key's passphrase in `key` */
    sasl_callback_t cbs[4];
    sasl_secret_t *secret;
};

typedef enum store_type { ST_PEM, ST_PKCS12 } store_type;

static int store_type_of(const char *what, const char *path, const char *type, store_type *out, km_err *err)
{
    const char *dot = strrchr(path, '.');
    if (!type) /* ZooKeeper's X509Util infers the type from the file name when none is given */
        type = !dot ? "" : !strcasecmp(dot, ".pem") || !strcasecmp(dot, ".crt") ? "PEM"
             : !strcasecmp(dot, ".p12") || !strcasecmp(dot, ".pfx") ? "PKCS12" : !strcasecmp(dot, ".jks") ? "JKS" : "";
    if (!strcasecmp(type, "PEM"))
        return *out = ST_PEM, 0;
    if (!strcasecmp(type, "PKCS12"))
        return *out = ST_PKCS12, 0;
    if (!strcasecmp(type, "JKS"))
        return km_fail(err, "zookeeper.ssl.%s: %s is a JKS store, which kmproxy cannot read: convert it with "
                       "keytool -importkeystore -deststoretype PKCS12", what, path);
    return km_fail(err, "zookeeper.ssl.%s.type: '%s' for %s: PEM or PKCS12 expected", what, type, path);
}

static PKCS12 *read_p12(const char *what, const char *path, const char *pass, EVP_PKEY **key, X509 **cert,
                        STACK_OF(X509) **chain, km_err *err)
{
    FILE *f = fopen(path, "rb");
    PKCS12 *p12 = f ? d2i_PKCS12_fp(f, NULL) : NULL;
    if (f)
        fclose(f);
    if (!p12 || !PKCS12_parse(p12, pass ? pass : "", key, cert, chain)) {
        PKCS12_free(p12);
        return km_fail(err, "zookeeper.ssl.%s.location: cannot read %s as PKCS12 with the configured password",
                       what, path), NULL;
    }
    return p12;
}

/* Certificates of a PKCS12 truststore (or the certificate and chain of a keystore, with its key
 * re-encrypted under a random passphrase) into a PEM file of our private directory. */
static int p12_to_pem(zk_secure *z, const char *what, const char *path, const char *pass, bool with_key,
                      char *out, size_t cap, km_err *err)
{
    EVP_PKEY *key = NULL;
    X509 *cert = NULL;
    STACK_OF(X509) *chain = NULL;
    PKCS12 *p12 = read_p12(what, path, pass, &key, &cert, &chain, err);
    if (!p12)
        return -1;
    snprintf(out, cap, "%s/%s.pem", z->dir, with_key ? "key" : "ca");
    FILE *f = fopen(out, "w");
    bool ok = f && (!with_key || (key && cert));
    if (ok && cert)
        ok = PEM_write_X509(f, cert);
    for (int i = 0; ok && chain && i < sk_X509_num(chain); i++)
        ok = PEM_write_X509(f, sk_X509_value(chain, i));
    if (ok && with_key)
        ok = PEM_write_PrivateKey(f, key, EVP_aes_256_cbc(), (unsigned char *)z->pass, (int)strlen(z->pass),
                                  NULL, NULL);
    if (f && fclose(f))
        ok = false;
    EVP_PKEY_free(key);
    X509_free(cert);
    sk_X509_pop_free(chain, X509_free);
    PKCS12_free(p12);
    return ok ? 0 : km_fail(err, "zookeeper.ssl.%s: cannot convert %s to PEM in %s", what, path, z->dir);
}

static int make_private_dir(zk_secure *z, km_err *err)
{
    if (z->dir[0])
        return 0;
    unsigned char rnd[16];
    if (RAND_bytes(rnd, sizeof rnd) != 1)
        return km_fail(err, "zk tls: no randomness for the key passphrase");
    for (size_t i = 0; i < sizeof rnd; i++)
        snprintf(z->pass + 2 * i, 3, "%02x", rnd[i]);
    const char *tmp = getenv("TMPDIR");
    snprintf(z->dir, sizeof z->dir, "%.40s/kmproxy-zktls-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(z->dir)) /* 0700: only we read the converted key */
        return z->dir[0] = '\0', km_fail(err, "zk tls: cannot create a private directory under %s", tmp ? tmp : "/tmp");
    return 0;
}

static int prepare_tls(zk_secure *z, km_err *err)
{
    const km_zk_security *s = z->sec;
    store_type kt, tt;
    if (!s->keystore_location || !s->truststore_location)
        return km_fail(err, "zookeeper.ssl.client.enable=true needs zookeeper.ssl.keystore.location and "
                       "zookeeper.ssl.truststore.location (ZooKeeper servers ask for a client certificate)");
    if (store_type_of("keystore", s->keystore_location, s->keystore_type, &kt, err) ||
        store_type_of("truststore", s->truststore_location, s->truststore_type, &tt, err))
        return -1;
    if (kt == ST_PEM) {
        snprintf(z->cert, sizeof z->cert, "%s", s->keystore_location); /* key and chain in one file */
        snprintf(z->key, sizeof z->key, "%s", s->keystore_location);
        snprintf(z->pass, sizeof z->pass, "%s", s->keystore_password ? s->keystore_password : "");
    } else if (make_private_dir(z, err) ||
               p12_to_pem(z, "keystore", s->keystore_location, s->keystore_password, true, z->key, sizeof z->key, err)) {
        return -1;
    } else {
        snprintf(z->cert, sizeof z->cert, "%s", z->key);
    }
    if (tt == ST_PEM)
        snprintf(z->ca, sizeof z->ca, "%s", s->truststore_location);
    else if (make_private_dir(z, err) ||
             p12_to_pem(z, "truststore", s->truststore_location, s->truststore_password, false, z->ca, sizeof z->ca, err))
        return -1;
    return 0;
}

/* Loads what the client will load, so a wrong file or password is refused now, by name. */
static int check_pem(const zk_secure *z, km_err *err)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    int rc = 0;
    SSL_CTX_set_default_passwd_cb_userdata(ctx, (void *)z->pass);
    if (SSL_CTX_load_verify_locations(ctx, z->ca, NULL) != 1)
        rc = km_fail(err, "zookeeper.ssl.truststore.location: no certificate readable in %s", z->sec->truststore_location);
    else if (SSL_CTX_use_certificate_chain_file(ctx, z->cert) != 1)
        rc = km_fail(err, "zookeeper.ssl.keystore.location: no certificate readable in %s", z->sec->keystore_location);
    else if (SSL_CTX_use_PrivateKey_file(ctx, z->key, SSL_FILETYPE_PEM) != 1 || SSL_CTX_check_private_key(ctx) != 1)
        rc = km_fail(err, "zookeeper.ssl.keystore.location: no private key matching the certificate readable in %s "
                     "(zookeeper.ssl.keystore.password?)", z->sec->keystore_location);
    SSL_CTX_free(ctx);
    ERR_clear_error();
    return rc;
}

/* DIGEST-MD5: the user authenticates and is authorized as itself. GSSAPI: no authorization id (the
 * server takes the Kerberos principal, as from ZooKeeper's Java client). */
static int sasl_simple(void *ctx, int id, const char **result, unsigned *len)
{
    zk_secure *z = ctx;
    if (id != SASL_CB_USER && id != SASL_CB_AUTHNAME)
        return SASL_BADPARAM;
    *result = strcmp(z->sec->sasl_mechanism, "GSSAPI") ? z->sec->sasl_username : "";
    if (len)
        *len = (unsigned)strlen(*result);
    return SASL_OK;
}

static int sasl_pass(sasl_conn_t *conn, void *ctx, int id, sasl_secret_t **out)
{
    (void)conn;
    zk_secure *z = ctx;
    if (id != SASL_CB_PASS)
        return SASL_BADPARAM;
    *out = z->secret;
    return SASL_OK;
}

typedef int (*sasl_cb_fn)(void);

/* Kerberos through MIT's GSS-API, which reads its credentials from the environment: the keytab as
 * the client keytab (initial credentials are acquired from it, and renewed, as Krb5LoginModule's
 * useKeyTab does), kept in a private in-memory cache unless one is configured. krb5.conf is
 * KRB5_CONFIG's (the JVM's java.security.krb5.conf). One identity per process, as per JVM. */
static int prepare_gssapi(const km_zk_security *s, km_err *err)
{
    if (s->sasl_keytab && access(s->sasl_keytab, R_OK))
        return km_fail(err, "zookeeper SASL GSSAPI: cannot read the keytab %s", s->sasl_keytab);
    if (s->sasl_keytab && setenv("KRB5_CLIENT_KTNAME", s->sasl_keytab, 1))
        return km_fail(err, "zookeeper SASL GSSAPI: cannot set KRB5_CLIENT_KTNAME");
    if (s->sasl_keytab && setenv("KRB5CCNAME", "MEMORY:kmproxy-zookeeper", 0))
        return km_fail(err, "zookeeper SASL GSSAPI: cannot set KRB5CCNAME");
    return 0;
}

static int prepare_sasl(zk_secure *z, km_err *err)
{
    const km_zk_security *s = z->sec;
    bool gssapi = !strcmp(s->sasl_mechanism, "GSSAPI");
    if (!gssapi && strcmp(s->sasl_mechanism, "DIGEST-MD5"))
        return km_fail(err, "zookeeper SASL mechanism %s is not supported (DIGEST-MD5 or GSSAPI)", s->sasl_mechanism);
    if (gssapi && prepare_gssapi(s, err))
        return -1;
    if (!gssapi && (!s->sasl_username || !s->sasl_password))
        return km_fail(err, "zookeeper SASL DIGEST-MD5 needs a username and a password (JAAS Client section)");
    size_t n = s->sasl_password ? strlen(s->sasl_password) : 0;
    if (!(z->secret = malloc(sizeof *z->secret + n)))
        return km_fail(err, "zk sasl: out of memory");
    z->secret->len = n;
    memcpy(z->secret->data, s->sasl_password ? s->sasl_password : "", n);
    if (sasl_client_init(NULL) != SASL_OK)
        return km_fail(err, "zk sasl: Cyrus SASL failed to initialise (libsasl2-modules installed?)");
    z->cbs[0] = (sasl_callback_t){SASL_CB_USER, (sasl_cb_fn)(void (*)(void))sasl_simple, z};
    z->cbs[1] = (sasl_callback_t){SASL_CB_AUTHNAME, (sasl_cb_fn)(void (*)(void))sasl_simple, z};
    z->cbs[2] = (sasl_callback_t){SASL_CB_PASS, (sasl_cb_fn)(void (*)(void))sasl_pass, z};
    z->cbs[3] = (sasl_callback_t){SASL_CB_LIST_END, NULL, NULL};
    return 0;
}

void zk_secure_free(zk_secure *z)
{
    if (!z)
        return;
    if (z->dir[0]) {
        char p[600];
        snprintf(p, sizeof p, "%s/key.pem", z->dir);
        unlink(p);
        snprintf(p, sizeof p, "%s/ca.pem", z->dir);
        unlink(p);
        rmdir(z->dir);
    }
    /* No sasl_client_done(): Cyrus SASL's plugins are process-wide (sasl_client_init only counts
     * after the first call); unloading them when a session ends would lose memory the GSSAPI
     * plugin still holds, and load them all again for the next session. */
    if (z->secret)
        OPENSSL_cleanse(z->secret->data, z->secret->len);
    free(z->secret);
    OPENSSL_cleanse(z->pass, sizeof z->pass);
    free(z);
}

zk_secure *zk_secure_new(const km_zk_security *sec, km_err *err)
{
    zk_secure *z = calloc(1, sizeof *z);
    if (!z)
        return km_fail(err, "zk: out of memory"), NULL;
    z->sec = sec;
    if (sec && sec->set_acl && !sec->sasl_mechanism && !sec->tls && !sec->digest_auth) {
        zk_secure_free(z);
        return km_fail(err, "zookeeper.set.acl=true needs an authenticated session (SASL, TLS with a client "
                       "certificate, or digest auth): ZooKeeper cannot tell who created a znode otherwise"), NULL;
    }
    if (sec && ((sec->tls && (prepare_tls(z, err) || check_pem(z, err))) || (sec->sasl_mechanism && prepare_sasl(z, err)))) {
        zk_secure_free(z);
        return NULL;
    }
    return z;
}

zhandle_t *zk_secure_init(zk_secure *z, const char *hosts, watcher_fn fn, int timeout_ms, void *ctx)
{
    const km_zk_security *s = z->sec;
    bool gssapi = s && s->sasl_mechanism && !strcmp(s->sasl_mechanism, "GSSAPI");
    zoo_sasl_params_t sasl = {
        .service = s && s->sasl_service ? s->sasl_service : "zookeeper",
        /* DIGEST-MD5: the name ZooKeeper's server answers as. GSSAPI: NULL, each server's address,
         * which Kerberos canonicalizes (krb5.conf rdns) to its host name: zookeeper/<host>, as
         * ZooKeeper's Java client (zookeeper.sasl.client.canonicalize.hostname) asks for it. */
        .host = gssapi ? NULL : "zk-sasl-md5",
        .mechlist = gssapi ? "GSSAPI" : "DIGEST-MD5",
        .callbacks = z->cbs,
    };
    bool tls = s && s->tls;
    return zookeeper_init_secure(hosts, tls ? z->ca : NULL, z->cert, z->key, z->pass, tls && s->verify_host, fn,
                                 timeout_ms, NULL, ctx, 0, NULL, s && s->sasl_mechanism ? &sasl : NULL);
}

int km_zk_security_check(const km_zk_security *sec, km_err *err)
{
    zk_secure *z = zk_secure_new(sec, err);
    zk_secure_free(z);
    return z ? 0 : -1;
}
