/* SCRAM (RFC 5802) with SHA-256/512 (RFC 7677) over OpenSSL, client and server side, as
 * Kafka's ScramSaslClient / ScramSaslServer and ScramFormatter compute it:
 *   SaltedPassword  = PBKDF2-HMAC(password, salt, i)
 *   ClientKey       = HMAC(SaltedPassword, "Client Key"),  StoredKey = H(ClientKey)
 *   ServerKey       = HMAC(SaltedPassword, "Server Key")
 *   AuthMessage     = client-first-bare "," server-first "," client-final-without-proof
 *   ClientProof     = ClientKey XOR HMAC(StoredKey, AuthMessage)
 *   ServerSignature = HMAC(ServerKey, AuthMessage) */
#include "km_sasl.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIN_ITERATIONS 4096   /* Kafka's ScramMechanism.minIterations */
#define MAX_ITERATIONS 16384  /* Kafka's ScramMechanism.maxIterations */
#define GS2_HEADER "n,,"      /* no channel binding, no authorization id (Kafka's client) */
#define GS2_HEADER_B64 "biws"
#define NONCE_MAX 128
#define SALT_MAX 128

typedef struct scram_md { const EVP_MD *md; size_t len; } scram_md;

static int scram_md_of(km_sasl_mech mech, scram_md *out, km_err *err)
{
    out->md = mech == KM_SASL_SCRAM_SHA_256 ? EVP_sha256()
              : mech == KM_SASL_SCRAM_SHA_512 ? EVP_sha512()
              : mech == KM_SASL_SCRAM_SHA_1 ? EVP_sha1() : NULL;
    if (!out->md)
        return km_fail(err, "SCRAM: %s is not a SCRAM mechanism", km_sasl_mech_name(mech));
    out->len = (size_t)EVP_MD_get_size(out->md);
    return 0;
}

/* The keys both sides derive from the salted password. */
typedef struct scram_keys {
    uint8_t client_key[EVP_MAX_MD_SIZE], stored_key[EVP_MAX_MD_SIZE], server_key[EVP_MAX_MD_SIZE];
} scram_keys;

static int hmac(const scram_md *h, const uint8_t *key, const void *data, size_t n, uint8_t *out, km_err *err)
{
    unsigned int len = 0;
    if (!HMAC(h->md, key, (int)h->len, data, n, out, &len) || len != h->len)
        return km_fail(err, "SCRAM: HMAC failed");
    return 0;
}

static int derive_keys(const scram_md *h, const char *pass, const uint8_t *salt, size_t salt_len, int iterations,
                       scram_keys *k, km_err *err)
{
    uint8_t salted[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    int rc = -1;
    if (PKCS5_PBKDF2_HMAC(pass, (int)strlen(pass), salt, (int)salt_len, iterations, h->md, (int)h->len, salted) != 1)
        km_fail(err, "SCRAM: PBKDF2 failed");
    else if (!hmac(h, salted, "Client Key", 10, k->client_key, err) &&
             !hmac(h, salted, "Server Key", 10, k->server_key, err)) {
        if (EVP_Digest(k->client_key, h->len, k->stored_key, &len, h->md, NULL) != 1 || len != h->len)
            km_fail(err, "SCRAM: digest failed");
        else
            rc = 0;
    }
    OPENSSL_cleanse(salted, sizeof salted);
    return rc;
}

/* HMAC(StoredKey, AuthMessage), the signature the proof hides the client key with. */
static int client_signature(const scram_md *h, const scram_keys *k, const char *auth_msg, uint8_t *out, km_err *err)
{
    return hmac(h, k->stored_key, auth_msg, strlen(auth_msg), out, err);
}

static void random_nonce(char out[NONCE_MAX])
{
    uint8_t raw[24];
    if (RAND_bytes(raw, sizeof raw) != 1) /* never in practice; still unique enough for a session */
        for (size_t i = 0; i < sizeof raw; i++)
            raw[i] = (uint8_t)(rand() & 0xff);
    km_base64_encode(raw, sizeof raw, out, false);
}

/* The given nonce (tests), or a random one. */
static void use_nonce(char out[NONCE_MAX], const char *given)
{
    if (given)
        strcpy(out, given);
    else
        random_nonce(out);
}

/* Contexts hold passwords and derived keys: wipe them before freeing. */
static void wipe_free(void *p, size_t n)
{
    if (p)
        OPENSSL_cleanse(p, n);
    free(p);
}

/* RFC 5802 saslname: ',' and '=' escaped as =2C and =3D. */
static int escape_name(const char *in, char *out, size_t cap, km_err *err)
{
    size_t n = 0;
    for (; *in; in++) {
        const char *rep = *in == ',' ? "=2C" : *in == '=' ? "=3D" : NULL;
        size_t add = rep ? 3 : 1;
        if (n + add >= cap)
            return km_fail(err, "SCRAM: user name too long");
        memcpy(out + n, rep ? rep : in, add);
        n += add;
    }
    out[n] = '\0';
    return 0;
}

static int unescape_name(const char *in, size_t len, char *out, size_t cap, km_err *err)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        char c = in[i];
        if (c == '=') {
            if (i + 3 > len)
                return km_fail(err, "SCRAM: bad escape in user name");
            if (!strncmp(in + i, "=2C", 3))
                c = ',';
            else if (!strncmp(in + i, "=3D", 3))
                c = '=';
            else
                return km_fail(err, "SCRAM: bad escape in user name");
            i += 2;
        }
        if (n + 1 >= cap)
            return km_fail(err, "SCRAM: user name too long");
        out[n++] = c;
    }
    out[n] = '\0';
    return 0;
}

/* A message as a C string (it travels as bytes). */
static int message_str(const uint8_t *msg, size_t len, char *out, const char *what, km_err *err)
{
    if (len >= KM_SASL_MSG_MAX || memchr(msg, 0, len))
        return km_fail(err, "SCRAM: %s is longer than %d bytes or holds a NUL", what, KM_SASL_MSG_MAX - 1);
    memcpy(out, msg, len);
    out[len] = '\0';
    return 0;
}

/* Attribute `name` at *p ("x=value", up to ',' or the end) into out; *p moves past it. */
static int take_attr(const char **p, char name, char *out, size_t cap, const char *what, km_err *err)
{
    if ((*p)[0] != name || (*p)[1] != '=')
        return km_fail(err, "SCRAM: Invalid %s: expected '%c=' at '%.32s'", what, name, *p);
    const char *v = *p + 2, *end = strchr(v, ',');
    size_t n = end ? (size_t)(end - v) : strlen(v);
    if (n >= cap)
        return km_fail(err, "SCRAM: Invalid %s: '%c' is too long", what, name);
    memcpy(out, v, n);
    out[n] = '\0';
    *p = end ? end + 1 : v + n;
    return 0;
}

static int b64_decode(const char *s, uint8_t *out, size_t cap, size_t *len, const char *what, km_err *err)
{
    *len = 0; /* defined on every path: callers compare it even when an earlier step failed (gcc -O3 checks) */
    size_t n = strlen(s);
    if ((n + 3) / 4 * 3 > cap)
        return km_fail(err, "SCRAM: %s is too long", what);
    int64_t got = km_base64_decode(s, n, out);
    if (got < 0)
        return km_fail(err, "SCRAM: %s is not base64", what);
    *len = (size_t)got;
    return 0;
}

/* ---- client ------------------------------------------------------------------------------------ */

struct km_scram_client {
    scram_md h;
    char user[KM_SASL_NAME_MAX * 3], pass[KM_SASL_NAME_MAX];
    char nonce[NONCE_MAX];
    char first_bare[KM_SASL_MSG_MAX];
    uint8_t server_signature[EVP_MAX_MD_SIZE];
    int step;                    /* 0 new, 1 first sent, 2 final sent, 3 verified */
};

km_scram_client *km_scram_client_new(km_sasl_mech mech, const char *user, const char *pass, const char *nonce,
                                     km_err *err)
{
    km_scram_client *c = calloc(1, sizeof *c);
    if (!c)
        return km_fail(err, "SCRAM: out of memory"), NULL;
    if (scram_md_of(mech, &c->h, err) || escape_name(user, c->user, sizeof c->user, err)) {
        free(c);
        return NULL;
    }
    if (strlen(pass) >= sizeof c->pass || (nonce && (strlen(nonce) >= NONCE_MAX || strchr(nonce, ',')))) {
        free(c);
        return km_fail(err, "SCRAM: password or nonce too long"), NULL;
    }
    strcpy(c->pass, pass);
    use_nonce(c->nonce, nonce);
    return c;
}

void km_scram_client_free(km_scram_client *c) { wipe_free(c, c ? sizeof *c : 0); }

int km_scram_client_first(km_scram_client *c, char *out, km_err *err)
{
    int n = snprintf(c->first_bare, sizeof c->first_bare, "n=%s,r=%s", c->user, c->nonce);
    if (n < 0 || (size_t)n + sizeof GS2_HEADER > KM_SASL_MSG_MAX)
        return km_fail(err, "SCRAM: client-first-message too long");
    memcpy(out, GS2_HEADER, sizeof GS2_HEADER - 1);
    memcpy(out + sizeof GS2_HEADER - 1, c->first_bare, (size_t)n + 1);
    c->step = 1;
    return 0;
}

typedef struct server_first { char nonce[NONCE_MAX * 2], salt_b64[SALT_MAX * 2], iter[16]; } server_first;

/* Kafka's ScramMessages.ServerFirstMessage; extensions after i= are ignored, "m=" refused. */
static int parse_server_first(km_scram_client *c, const char *msg, server_first *sf, int *iterations, km_err *err)
{
    const char *p = msg;
    if (take_attr(&p, 'r', sf->nonce, sizeof sf->nonce, "server-first-message", err) ||
        take_attr(&p, 's', sf->salt_b64, sizeof sf->salt_b64, "server-first-message", err) ||
        take_attr(&p, 'i', sf->iter, sizeof sf->iter, "server-first-message", err))
        return -1;
    size_t cn = strlen(c->nonce);
    if (strncmp(sf->nonce, c->nonce, cn) || strlen(sf->nonce) == cn)
        return km_fail(err, "SCRAM: Invalid server nonce: does not start with client nonce");
    char *end;
    long it = strtol(sf->iter, &end, 10);
    if (*end || it < MIN_ITERATIONS || it > MAX_ITERATIONS)
        return km_fail(err, "SCRAM: Requested iterations %s is outside [%d, %d]", sf->iter, MIN_ITERATIONS,
                       MAX_ITERATIONS);
    *iterations = (int)it;
    return 0;
}

static int build_final(km_scram_client *c, const char *server_first_msg, const server_first *sf, int iterations,
                       char *out, km_err *err)
{
    uint8_t salt[SALT_MAX], sig[EVP_MAX_MD_SIZE], proof[EVP_MAX_MD_SIZE];
    size_t salt_len;
    scram_keys k;
    char without_proof[KM_SASL_MSG_MAX], auth[3 * KM_SASL_MSG_MAX], proof_b64[EVP_MAX_MD_SIZE * 2];
    snprintf(without_proof, sizeof without_proof, "c=" GS2_HEADER_B64 ",r=%s", sf->nonce);
    snprintf(auth, sizeof auth, "%s,%s,%s", c->first_bare, server_first_msg, without_proof);
    int rc = -1;
    if (!b64_decode(sf->salt_b64, salt, sizeof salt, &salt_len, "salt", err) &&
        !derive_keys(&c->h, c->pass, salt, salt_len, iterations, &k, err) &&
        !client_signature(&c->h, &k, auth, sig, err) &&
        !hmac(&c->h, k.server_key, auth, strlen(auth), c->server_signature, err)) {
        for (size_t i = 0; i < c->h.len; i++)
            proof[i] = k.client_key[i] ^ sig[i];
        km_base64_encode(proof, c->h.len, proof_b64, false);
        int n = snprintf(out, KM_SASL_MSG_MAX, "%s,p=%s", without_proof, proof_b64);
        rc = n > 0 && n < KM_SASL_MSG_MAX ? 0 : km_fail(err, "SCRAM: client-final-message too long");
    }
    OPENSSL_cleanse(&k, sizeof k);
    return rc;
}

int km_scram_client_final(km_scram_client *c, const uint8_t *server_first_msg, size_t len, char *out, km_err *err)
{
    char msg[KM_SASL_MSG_MAX];
    server_first sf;
    int iterations = 0;
    if (c->step != 1)
        return km_fail(err, "SCRAM: server-first-message out of order");
    if (message_str(server_first_msg, len, msg, "server-first-message", err) ||
        parse_server_first(c, msg, &sf, &iterations, err) || build_final(c, msg, &sf, iterations, out, err))
        return -1;
    c->step = 2;
    return 0;
}

int km_scram_client_verify(km_scram_client *c, const uint8_t *server_final, size_t len, km_err *err)
{
    char msg[KM_SASL_MSG_MAX], v[EVP_MAX_MD_SIZE * 2];
    uint8_t sig[EVP_MAX_MD_SIZE + 4];
    size_t sig_len;
    if (c->step != 2)
        return km_fail(err, "SCRAM: server-final-message out of order");
    if (message_str(server_final, len, msg, "server-final-message", err))
        return -1;
    if (!strncmp(msg, "e=", 2))
        return km_fail(err, "SCRAM: the server refused: %s", msg + 2);
    const char *p = msg;
    if (take_attr(&p, 'v', v, sizeof v, "server-final-message", err) ||
        b64_decode(v, sig, sizeof sig, &sig_len, "server signature", err))
        return -1;
    if (sig_len != c->h.len || CRYPTO_memcmp(sig, c->server_signature, sig_len))
        return km_fail(err, "SCRAM: Invalid server signature in server final message: the broker does not "
                            "know this user's credentials");
    c->step = 3;
    return 0;
}

/* ---- server ------------------------------------------------------------------------------------ */

struct km_scram_server {
    scram_md h;
    int iterations;
    uint8_t salt[SALT_MAX];
    size_t salt_len;
    char snonce[NONCE_MAX];
    char user[KM_SASL_NAME_MAX];
    char client_first_bare[KM_SASL_MSG_MAX], server_first[KM_SASL_MSG_MAX], nonce[NONCE_MAX * 2];
    scram_keys k;
    int step;                    /* 0 new, 1 server-first sent, 2 authenticated */
};

km_scram_server *km_scram_server_new(km_sasl_mech mech, int iterations, const uint8_t *salt, size_t salt_len,
                                     const char *nonce, km_err *err)
{
    km_scram_server *s = calloc(1, sizeof *s);
    if (!s)
        return km_fail(err, "SCRAM: out of memory"), NULL;
    if (scram_md_of(mech, &s->h, err) || salt_len > SALT_MAX || (nonce && strlen(nonce) >= NONCE_MAX)) {
        free(s);
        return km_fail(err, "SCRAM: bad server parameters"), NULL;
    }
    s->iterations = iterations > 0 ? iterations : MIN_ITERATIONS;
    if (salt) {
        memcpy(s->salt, salt, salt_len);
        s->salt_len = salt_len;
    } else {
        s->salt_len = 16;
        if (RAND_bytes(s->salt, (int)s->salt_len) != 1) {
            free(s);
            return km_fail(err, "SCRAM: no random salt"), NULL;
        }
    }
    use_nonce(s->snonce, nonce);
    return s;
}

void km_scram_server_free(km_scram_server *s) { wipe_free(s, s ? sizeof *s : 0); }

/* Kafka's ScramMessages.ClientFirstMessage: gs2 header "n,," or "n,a=authzid,"; "y"/"p"
 * (channel binding) refused; extensions after the nonce ignored. */
static int parse_client_first(km_scram_server *s, const char *msg, char *cnonce, km_err *err)
{
    if (strncmp(msg, "n,", 2))
        return km_fail(err, "SCRAM: Invalid SCRAM client first message: channel binding is not supported");
    const char *bare = strchr(msg + 2, ',');
    if (!bare)
        return km_fail(err, "SCRAM: Invalid SCRAM client first message: no gs2 header");
    snprintf(s->client_first_bare, sizeof s->client_first_bare, "%s", ++bare);
    char name[KM_SASL_NAME_MAX * 3];
    const char *p = bare;
    if (take_attr(&p, 'n', name, sizeof name, "client-first-message", err) ||
        take_attr(&p, 'r', cnonce, NONCE_MAX, "client-first-message", err) ||
        unescape_name(name, strlen(name), s->user, sizeof s->user, err))
        return -1;
    if (!*cnonce)
        return km_fail(err, "SCRAM: Invalid SCRAM client first message: empty nonce");
    return 0;
}

int km_scram_server_first(km_scram_server *s, const uint8_t *client_first, size_t len, km_scram_lookup_fn lookup,
                          void *ud, char *out, km_err *err)
{
    char msg[KM_SASL_MSG_MAX], cnonce[NONCE_MAX], salt_b64[SALT_MAX * 2];
    if (s->step != 0)
        return km_fail(err, "SCRAM: client-first-message out of order");
    if (message_str(client_first, len, msg, "client-first-message", err) || parse_client_first(s, msg, cnonce, err))
        return -1;
    const char *pass = lookup(s->user, ud);
    if (!pass)
        return km_fail(err, "SCRAM: Authentication failed: Invalid user credentials (unknown user %s)", s->user);
    if (derive_keys(&s->h, pass, s->salt, s->salt_len, s->iterations, &s->k, err))
        return -1;
    km_base64_encode(s->salt, s->salt_len, salt_b64, false);
    snprintf(s->nonce, sizeof s->nonce, "%s%s", cnonce, s->snonce);
    snprintf(s->server_first, sizeof s->server_first, "r=%s,s=%s,i=%d", s->nonce, salt_b64, s->iterations);
    snprintf(out, KM_SASL_MSG_MAX, "%s", s->server_first);
    s->step = 1;
    return 0;
}

int km_scram_server_final(km_scram_server *s, const uint8_t *client_final, size_t len, char *out, km_err *err)
{
    char msg[KM_SASL_MSG_MAX], cbind[64], nonce[NONCE_MAX * 2];
    char auth[3 * KM_SASL_MSG_MAX], sig_b64[EVP_MAX_MD_SIZE * 2];
    uint8_t proof[EVP_MAX_MD_SIZE + 4], sig[EVP_MAX_MD_SIZE], key[EVP_MAX_MD_SIZE], stored[EVP_MAX_MD_SIZE];
    size_t proof_len;
    unsigned int n = 0;
    if (s->step != 1)
        return km_fail(err, "SCRAM: client-final-message out of order");
    const char *p = msg;
    if (message_str(client_final, len, msg, "client-final-message", err) ||
        take_attr(&p, 'c', cbind, sizeof cbind, "client-final-message", err) ||
        take_attr(&p, 'r', nonce, sizeof nonce, "client-final-message", err))
        return -1;
    const char *proof_at = strstr(msg, ",p=");
    if (strcmp(cbind, GS2_HEADER_B64) || strcmp(nonce, s->nonce) || !proof_at)
        return km_fail(err, "SCRAM: Invalid client final message: channel binding, nonce or proof mismatch");
    if (b64_decode(proof_at + 3, proof, sizeof proof, &proof_len, "client proof", err))
        return -1;
    snprintf(auth, sizeof auth, "%s,%s,%.*s", s->client_first_bare, s->server_first, (int)(proof_at - msg), msg);
    if (proof_len != s->h.len || client_signature(&s->h, &s->k, auth, sig, err))
        return km_fail(err, "SCRAM: Invalid client credentials");
    for (size_t i = 0; i < s->h.len; i++)
        key[i] = proof[i] ^ sig[i];
    if (EVP_Digest(key, s->h.len, stored, &n, s->h.md, NULL) != 1 || CRYPTO_memcmp(stored, s->k.stored_key, s->h.len))
        return km_fail(err, "SCRAM: Invalid client credentials");
    if (hmac(&s->h, s->k.server_key, auth, strlen(auth), sig, err))
        return -1;
    km_base64_encode(sig, s->h.len, sig_b64, false);
    snprintf(out, KM_SASL_MSG_MAX, "v=%s", sig_b64);
    s->step = 2;
    return 0;
}

const char *km_scram_server_user(const km_scram_server *s) { return s->step == 2 ? s->user : ""; }
