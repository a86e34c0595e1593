/* zk_password.c - Kafka 3.9's PasswordEncoder (password.encoder.*) over OpenSSL.
 *
 * ZK-mode brokers read password-type dynamic configs from /config/brokers/<id> in the form Kafka's
 * EncryptingPasswordEncoder writes: a CSV map "key:value,..." that names everything decoding needs.
 *   keyFactoryAlgorithm   PBKDF2WithHmacSHA512 (default), ...SHA1; the key is PBKDF2(secret as UTF-8,
 *                         salt, iterations, keyLength bits)
 *   cipherAlgorithm       AES/CBC/PKCS5Padding (default) or AES/GCM/NoPadding
 *   keyLength, iterations decimal
 *   salt                  256 random bytes
 *   initializationVector  16 bytes (CBC) or 12 (GCM)
 *   authenticationTagLength  GCM only, bits (128); the tag ends encryptedPassword, as in the JCE
 *   encryptedPassword     the ciphertext of the password's UTF-8
 *   passwordLength        the password's Java String length: UTF-16 code units, not bytes
 * Binary fields are standard base64 with padding. Without a secret Kafka stores values as they are.
 *
 * Decoding follows the stored fields, not our configuration, so values Kafka wrote with other
 * algorithms, lengths or iteration counts decode too. Errors never quote the input: it may be a
 * password. */
#include "km_zkbridge.h"

#include <limits.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define SALT_BYTES 256         /* Kafka's salt */
#define CBC_IV_BYTES 16
#define GCM_IV_BYTES 12        /* what the JCE generates for AES/GCM */
#define GCM_IV_MAX 128         /* OpenSSL's limit */
#define GCM_TAG_BITS 128       /* the JCE's default tag */
#define MAX_KEY_BYTES 32
#define MIN_CONFIG_ITERATIONS 1024  /* Kafka's atLeast(1024) on password.encoder.iterations */
/* A stored iteration count is work we do per value, on the event loop: one from a corrupt or
 * hostile znode must not hold it past ZooKeeper's session timeout (10^6 PBKDF2-SHA512 rounds take
 * about half a second here). Kafka has no upper bound; its default is 4096. */
#define MAX_ITERATIONS 1000000

typedef struct kdf_def {
    const char *name;
    const EVP_MD *(*md)(void);
} kdf_def;

/* The JCE's PBKDF2 factories; the JCE matches algorithm names case-insensitively, so do we. */
static const kdf_def KDFS[] = {
    {"PBKDF2WithHmacSHA512", EVP_sha512}, {"PBKDF2WithHmacSHA384", EVP_sha384},
    {"PBKDF2WithHmacSHA256", EVP_sha256}, {"PBKDF2WithHmacSHA224", EVP_sha224},
    {"PBKDF2WithHmacSHA1", EVP_sha1},
};

typedef enum pw_mode { PW_CBC, PW_GCM } pw_mode;

typedef struct cipher_def {
    const char *name;
    pw_mode mode;
} cipher_def;

static const cipher_def CIPHERS[] = {{"AES/CBC/PKCS5Padding", PW_CBC}, {"AES/GCM/NoPadding", PW_GCM}};

struct km_zk_pwenc {
    bool enabled;
    char *secret;
    size_t secret_len;
    const kdf_def *kdf;
    const cipher_def *cipher;
    char *kdf_name, *cipher_name; /* as configured: Kafka stores the names it was given */
    int key_bits, iterations;
    /* One salt and key per encoder: PBKDF2 is the whole cost of a value, and a salt per value buys
     * nothing when every value hides behind the same secret (one cracked value cracks them all).
     * Each value still gets its own random IV. */
    uint8_t salt[SALT_BYTES];
    char *salt_b64;
    uint8_t key[MAX_KEY_BYTES];
};

static const kdf_def *find_kdf(const char *name)
{
    for (size_t i = 0; i < sizeof KDFS / sizeof KDFS[0]; i++)
        if (!strcasecmp(KDFS[i].name, name))
            return &KDFS[i];
    return NULL;
}

static const cipher_def *find_cipher(const char *name)
{
    for (size_t i = 0; i < sizeof CIPHERS / sizeof CIPHERS[0]; i++)
        if (!strcasecmp(CIPHERS[i].name, name))
            return &CIPHERS[i];
    return NULL;
}

static const EVP_CIPHER *evp_cipher(pw_mode mode, int key_bits)
{
    switch (key_bits) {
    case 128: return mode == PW_GCM ? EVP_aes_128_gcm() : EVP_aes_128_cbc();
    case 192: return mode == PW_GCM ? EVP_aes_192_gcm() : EVP_aes_192_cbc();
    case 256: return mode == PW_GCM ? EVP_aes_256_gcm() : EVP_aes_256_cbc();
    }
    return NULL;
}

/* ---- text helpers ---- */

/* Java's String.length() of UTF-8 text: code units of UTF-16 (4-byte sequences are two). -1 when
 * the bytes are not well-formed UTF-8 (overlong forms and surrogates included) or hold a NUL,
 * which a C string cannot carry. */
static long utf16_units(const uint8_t *s, size_t n)
{
    long units = 0;
    for (size_t i = 0; i < n;) {
        uint8_t c = s[i];
        size_t len = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3
                   : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
        if (!len || c == 0 || len > n - i)
            return -1;
        uint8_t lo = 0x80, hi = 0xBF; /* the second byte's range excludes overlongs and surrogates */
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
        if (len > 1 && (s[i + 1] < lo || s[i + 1] > hi))
            return -1;
        for (size_t k = 2; k < len; k++)
            if ((s[i + k] & 0xC0) != 0x80)
                return -1;
        units += len == 4 ? 2 : 1;
        i += len;
    }
    return units;
}

static char *b64_encode(const uint8_t *p, size_t n)
{
    char *out = malloc(4 * ((n + 2) / 3) + 1);
    if (out)
        EVP_EncodeBlock((unsigned char *)out, p, (int)n);
    return out;
}

static int b64_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

/* Java's Base64.getDecoder(): the standard alphabet and nothing else; '=' padding is optional,
 * but when present it must complete the last 4-character unit. out has room for n*3/4 bytes. */
static int b64_decode(const char *field, const char *s, uint8_t *out, size_t *out_len, km_err *err)
{
    size_t n = strlen(s), pad = 0;
    while (pad < 2 && n > pad && s[n - 1 - pad] == '=')
        pad++;
    size_t data = n - pad;
    if ((pad && n % 4) || data % 4 == 1)
        return km_fail(err, "'%s' is not base64: %zu characters do not end a 4-character unit", field, n);
    uint32_t acc = 0;
    size_t bits = 0, o = 0;
    for (size_t i = 0; i < data; i++) {
        int v = b64_value((unsigned char)s[i]);
        if (v < 0)
            return km_fail(err, "'%s' is not base64: bad character at offset %zu", field, i);
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[o++] = (uint8_t)(acc >> bits);
        }
    }
    *out_len = o;
    return 0;
}

/* Integer.parseInt: an optional sign, decimal digits, int32 range. */
static int parse_int(const char *field, const char *s, int32_t *v, km_err *err)
{
    const char *p = s + (*s == '+' || *s == '-');
    long long x = 0;
    if (!*p)
        return km_fail(err, "'%s' is not an integer", field);
    for (; *p; p++) {
        if (*p < '0' || *p > '9' || x > (long long)INT32_MAX + 1)
            return km_fail(err, "'%s' is not an integer", field);
        x = x * 10 + (*p - '0');
    }
    x = *s == '-' ? -x : x;
    if (x < INT32_MIN || x > INT32_MAX)
        return km_fail(err, "'%s' is not an integer (out of int32 range)", field);
    *v = (int32_t)x;
    return 0;
}

/* ---- AES through EVP ---- */

/* key/iv lengths are checked by the callers; out has room for n + 16 bytes. */
static int aes_run(bool enc, pw_mode mode, int key_bits, const uint8_t *key, const uint8_t *iv, size_t iv_len,
                   const uint8_t *in, size_t n, uint8_t *tag, size_t tag_len, uint8_t *out, size_t *out_len)
{
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    int l1 = 0, l2 = 0;
    bool ok = ctx && EVP_CipherInit_ex(ctx, evp_cipher(mode, key_bits), NULL, NULL, NULL, enc ? 1 : 0) &&
              (mode != PW_GCM || EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_IVLEN, (int)iv_len, NULL)) &&
              EVP_CipherInit_ex(ctx, NULL, NULL, key, iv, enc ? 1 : 0) &&
              EVP_CipherUpdate(ctx, out, &l1, in, (int)n) &&
              (enc || mode != PW_GCM || EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, (int)tag_len, tag)) &&
              EVP_CipherFinal_ex(ctx, out + l1, &l2) &&
              (!enc || mode != PW_GCM || EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, (int)tag_len, tag));
    EVP_CIPHER_CTX_free(ctx);
    *out_len = ok ? (size_t)l1 + (size_t)l2 : 0;
    return ok ? 0 : -1;
}

static int derive_key(const char *secret, size_t secret_len, const kdf_def *kdf, const uint8_t *salt,
                      size_t salt_len, int iterations, int key_bits, uint8_t *key, km_err *err)
{
    if (!PKCS5_PBKDF2_HMAC(secret, (int)secret_len, salt, (int)salt_len, iterations, kdf->md(), key_bits / 8, key))
        return km_fail(err, "%s key derivation failed", kdf->name);
    return 0;
}

/* ---- the encoder ---- */

static int check_config(km_zk_pwenc *e, const km_zk_password_config *cfg, km_err *err)
{
    const char *kdf = cfg->keyfactory_algorithm ? cfg->keyfactory_algorithm : KDFS[0].name;
    const char *cipher = cfg->cipher_algorithm ? cfg->cipher_algorithm : CIPHERS[0].name;
    if (!(e->kdf = find_kdf(kdf)))
        return km_fail(err, "password.encoder.keyfactory.algorithm '%.64s' is not supported (PBKDF2WithHmacSHA512, "
                       "PBKDF2WithHmacSHA384, PBKDF2WithHmacSHA256, PBKDF2WithHmacSHA224 or PBKDF2WithHmacSHA1)", kdf);
    if (!(e->cipher = find_cipher(cipher)))
        return km_fail(err, "password.encoder.cipher.algorithm '%.64s' is not supported (AES/CBC/PKCS5Padding or "
                       "AES/GCM/NoPadding)", cipher);
    /* Kafka picks GCM's parameters (IV and tag length) only for a name starting with this. */
    if (e->cipher->mode == PW_GCM && strncmp(cipher, "AES/GCM/", 8))
        return km_fail(err, "password.encoder.cipher.algorithm '%.64s': Kafka treats GCM as GCM only when spelt "
                       "'AES/GCM/...': write AES/GCM/NoPadding", cipher);
    e->key_bits = cfg->key_length ? cfg->key_length : 128;
    if (!evp_cipher(e->cipher->mode, e->key_bits))
        return km_fail(err, "password.encoder.key.length %d is not an AES key length (128, 192 or 256)", e->key_bits);
    e->iterations = cfg->iterations ? cfg->iterations : 4096;
    if (e->iterations < MIN_CONFIG_ITERATIONS || e->iterations > MAX_ITERATIONS)
        return km_fail(err, "password.encoder.iterations %d is outside [%d, %d]", e->iterations,
                       MIN_CONFIG_ITERATIONS, MAX_ITERATIONS);
    if (!(e->kdf_name = strdup(kdf)) || !(e->cipher_name = strdup(cipher)))
        return km_fail(err, "password encoder: out of memory");
    return 0;
}

static int init_key(km_zk_pwenc *e, const char *secret, km_err *err)
{
    e->secret_len = strlen(secret);
    if (!(e->secret = strdup(secret)))
        return km_fail(err, "password encoder: out of memory");
    if (RAND_bytes(e->salt, SALT_BYTES) != 1)
        return km_fail(err, "password encoder: no random bytes for the salt");
    if (!(e->salt_b64 = b64_encode(e->salt, SALT_BYTES)))
        return km_fail(err, "password encoder: out of memory");
    e->enabled = true;
    return derive_key(e->secret, e->secret_len, e->kdf, e->salt, SALT_BYTES, e->iterations, e->key_bits, e->key, err);
}

km_zk_pwenc *km_zk_pwenc_new(const km_zk_password_config *cfg, km_err *err)
{
    static const km_zk_password_config none = {0};
    km_zk_pwenc *e = calloc(1, sizeof *e);
    if (!e) {
        km_fail(err, "password encoder: out of memory");
        return NULL;
    }
    if (!cfg)
        cfg = &none;
    /* The algorithms are checked even without a secret, so a typo shows before it matters. */
    if (check_config(e, cfg, err) || (cfg->secret && init_key(e, cfg->secret, err))) {
        km_zk_pwenc_free(e);
        return NULL;
    }
    return e;
}

void km_zk_pwenc_free(km_zk_pwenc *e)
{
    if (!e)
        return;
    if (e->secret)
        OPENSSL_cleanse(e->secret, e->secret_len);
    free(e->secret);
    free(e->kdf_name);
    free(e->cipher_name);
    free(e->salt_b64);
    OPENSSL_cleanse(e, sizeof *e);
    free(e);
}

bool km_zk_pwenc_enabled(const km_zk_pwenc *e) { return e && e->enabled; }

/* DynamicBrokerConfig.DynamicPasswordConfigs in Kafka 3.9: the dynamic broker configs of type
 * PASSWORD. Kafka tests a name with endsWith against each, which is what lets listener overrides
 * (listener.name.<l>.ssl.key.password, listener.name.<l>.<mechanism>.sasl.jaas.config) match. */
static const char *const PASSWORD_CONFIGS[] = {
    "ssl.keystore.password", "ssl.key.password", "ssl.keystore.key", "ssl.keystore.certificate.chain",
    "ssl.truststore.password", "ssl.truststore.certificates", "sasl.jaas.config",
};

bool km_zk_is_password_config(const char *name)
{
    size_t n = name ? strlen(name) : 0;
    for (size_t i = 0; name && i < sizeof PASSWORD_CONFIGS / sizeof PASSWORD_CONFIGS[0]; i++) {
        size_t m = strlen(PASSWORD_CONFIGS[i]);
        if (n >= m && !memcmp(name + n - m, PASSWORD_CONFIGS[i], m))
            return true;
    }
    return false;
}

static char *copy_of(const char *s, km_err *err)
{
    char *c = strdup(s);
    if (!c)
        km_fail(err, "password encoder: out of memory");
    return c;
}

/* The fields in the order Kafka 3.9 writes them (its HashMap's iteration order). */
static char *format_encoded(const km_zk_pwenc *e, const char *iv, const char *ct, long units)
{
    char *out = NULL;
    char tag[48] = "";
    if (e->cipher->mode == PW_GCM)
        snprintf(tag, sizeof tag, "authenticationTagLength:%d,", GCM_TAG_BITS);
    if (asprintf(&out, "initializationVector:%s,keyLength:%d,salt:%s,keyFactoryAlgorithm:%s,cipherAlgorithm:%s,"
                       "%siterations:%d,passwordLength:%ld,encryptedPassword:%s",
                 iv, e->key_bits, e->salt_b64, e->kdf_name, e->cipher_name, tag, e->iterations, units, ct) < 0)
        return NULL;
    return out;
}

char *km_zk_password_encode(const km_zk_pwenc *e, const char *plain, km_err *err)
{
    if (!plain) {
        km_fail(err, "password encoder: no password to encode");
        return NULL;
    }
    if (!km_zk_pwenc_enabled(e))
        return copy_of(plain, err);
    size_t n = strlen(plain), iv_len = e->cipher->mode == PW_GCM ? GCM_IV_BYTES : CBC_IV_BYTES, ct_len = 0;
    long units = utf16_units((const uint8_t *)plain, n);
    if (units < 0) {
        km_fail(err, "password encoder: the password is not valid UTF-8");
        return NULL;
    }
    if (n > INT_MAX / 2) {
        km_fail(err, "password encoder: a password of %zu bytes is too long", n);
        return NULL;
    }
    uint8_t iv[CBC_IV_BYTES], tag[GCM_TAG_BITS / 8];
    uint8_t *ct = malloc(n + 2 * 16);
    char *iv_b64 = NULL, *ct_b64 = NULL, *out = NULL;
    if (!ct || RAND_bytes(iv, (int)iv_len) != 1 ||
        aes_run(true, e->cipher->mode, e->key_bits, e->key, iv, iv_len, (const uint8_t *)plain, n, tag, sizeof tag,
                ct, &ct_len)) {
        km_fail(err, "password encoder: %s encryption failed", e->cipher_name);
    } else {
        if (e->cipher->mode == PW_GCM) { /* the JCE appends the tag to the ciphertext */
            memcpy(ct + ct_len, tag, sizeof tag);
            ct_len += sizeof tag;
        }
        if (!(iv_b64 = b64_encode(iv, iv_len)) || !(ct_b64 = b64_encode(ct, ct_len)) ||
            !(out = format_encoded(e, iv_b64, ct_b64, units)))
            km_fail(err, "password encoder: out of memory");
    }
    free(ct);
    free(iv_b64);
    free(ct_b64);
    return out;
}

/* ---- decoding ---- */

enum { F_KDF, F_CIPHER, F_KEY_LENGTH, F_SALT, F_ITERATIONS, F_IV, F_TAG_LENGTH, F_CT, F_PW_LENGTH, F_COUNT };
static const char *const FIELD_NAMES[F_COUNT] = {
    "keyFactoryAlgorithm", "cipherAlgorithm", "keyLength", "salt", "iterations", "initializationVector",
    "authenticationTagLength", "encryptedPassword", "passwordLength",
};

/* What Kafka's own regex split (\s*,\s*) and String.trim() remove. */
static bool is_java_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'; }
static bool is_trimmed(char c) { return (unsigned char)c <= ' '; }

static char *trim_in_place(char *s, bool (*drop)(char))
{
    while (*s && drop(*s))
        s++;
    size_t n = strlen(s);
    while (n && drop(s[n - 1]))
        s[--n] = '\0';
    return s;
}

/* Kafka's Csv.parseCsvMap: pieces split at commas (trailing empty pieces dropped), each split at
 * its last ':' into a trimmed key and value; a later key wins. work is modified in place. */
static int parse_fields(char *work, const char *f[F_COUNT], km_err *err)
{
    size_t n = strlen(work);
    while (n && (work[n - 1] == ',' || is_java_space(work[n - 1])))
        work[--n] = '\0';
    memset(f, 0, F_COUNT * sizeof f[0]);
    int index = 0;
    for (char *piece = work, *next; n && piece; piece = next, index++) {
        next = strchr(piece, ',');
        if (next)
            *next++ = '\0';
        char *colon = strrchr(piece, ':');
        if (!colon)
            return km_fail(err, "encoded password: piece %d has no ':' (not Kafka's encoded form)", index + 1);
        *colon = '\0';
        const char *key = trim_in_place(piece, is_trimmed);
        for (int i = 0; i < F_COUNT; i++)
            if (!strcmp(key, FIELD_NAMES[i]))
                f[i] = trim_in_place(colon + 1, is_trimmed);
    }
    return 0;
}

typedef struct pw_params {
    const kdf_def *kdf;
    const cipher_def *cipher;
    int32_t key_bits, iterations, tag_bits, units;
    uint8_t *salt, *iv, *ct; /* one allocation each, sized from the base64 */
    size_t salt_len, iv_len, ct_len;
} pw_params;

static int need(const char *f[F_COUNT], int i, km_err *err)
{
    return f[i] ? 0 : km_fail(err, "encoded password has no '%s'", FIELD_NAMES[i]);
}

static int read_b64(const char *f[F_COUNT], int i, uint8_t **out, size_t *len, km_err *err)
{
    if (need(f, i, err))
        return -1;
    if (!(*out = malloc(strlen(f[i]) / 4 * 3 + 3)))
        return km_fail(err, "password decoder: out of memory");
    return b64_decode(FIELD_NAMES[i], f[i], *out, len, err);
}

static int read_int(const char *f[F_COUNT], int i, int32_t lo, int32_t hi, int32_t *v, km_err *err)
{
    if (need(f, i, err) || parse_int(FIELD_NAMES[i], f[i], v, err))
        return -1;
    if (*v < lo || *v > hi)
        return km_fail(err, "encoded password: '%s' %d is outside [%d, %d]", FIELD_NAMES[i], *v, lo, hi);
    return 0;
}

static int read_algorithms(const char *f[F_COUNT], pw_params *p, km_err *err)
{
    if (need(f, F_CIPHER, err))
        return -1;
    if (!(p->cipher = find_cipher(f[F_CIPHER])))
        return km_fail(err, "encoded password: cipherAlgorithm '%.64s' is not supported (AES/CBC/PKCS5Padding or "
                       "AES/GCM/NoPadding)", f[F_CIPHER]);
    /* Kafka 3.9 falls back to its default factory when the field is absent (3.7 failed). */
    if (!(p->kdf = find_kdf(f[F_KDF] ? f[F_KDF] : KDFS[0].name)))
        return km_fail(err, "encoded password: keyFactoryAlgorithm '%.64s' is not supported", f[F_KDF]);
    if (read_int(f, F_KEY_LENGTH, 0, INT32_MAX, &p->key_bits, err))
        return -1;
    if (!evp_cipher(p->cipher->mode, p->key_bits))
        return km_fail(err, "encoded password: keyLength %d is not an AES key length (128, 192 or 256)", p->key_bits);
    return read_int(f, F_ITERATIONS, 1, MAX_ITERATIONS, &p->iterations, err);
}

static int read_cipher_params(const char *f[F_COUNT], pw_params *p, km_err *err)
{
    if (read_b64(f, F_IV, &p->iv, &p->iv_len, err))
        return -1;
    if (p->cipher->mode == PW_CBC && p->iv_len != CBC_IV_BYTES)
        return km_fail(err, "encoded password: initializationVector has %zu bytes, AES/CBC needs 16", p->iv_len);
    if (p->cipher->mode == PW_CBC)
        return 0;
    if (p->iv_len < 1 || p->iv_len > GCM_IV_MAX)
        return km_fail(err, "encoded password: initializationVector has %zu bytes, outside 1..%d for AES/GCM",
                       p->iv_len, GCM_IV_MAX);
    if (read_int(f, F_TAG_LENGTH, 96, 128, &p->tag_bits, err))
        return -1;
    if (p->tag_bits % 8) /* the JCE takes 96, 104, 112, 120 or 128 */
        return km_fail(err, "encoded password: authenticationTagLength %d is not a whole number of bytes", p->tag_bits);
    return 0;
}

static int read_params(const char *f[F_COUNT], pw_params *p, km_err *err)
{
    if (read_algorithms(f, p, err) || read_b64(f, F_SALT, &p->salt, &p->salt_len, err))
        return -1;
    if (!p->salt_len)
        return km_fail(err, "encoded password: 'salt' is empty");
    if (read_cipher_params(f, p, err) || read_b64(f, F_CT, &p->ct, &p->ct_len, err) ||
        read_int(f, F_PW_LENGTH, 0, INT32_MAX, &p->units, err))
        return -1;
    size_t tag = (size_t)p->tag_bits / 8;
    if (p->cipher->mode == PW_CBC && (p->ct_len == 0 || p->ct_len % 16))
        return km_fail(err, "encoded password: encryptedPassword has %zu bytes, not whole AES blocks", p->ct_len);
    if (p->cipher->mode == PW_GCM && p->ct_len < tag)
        return km_fail(err, "encoded password: encryptedPassword has %zu bytes, shorter than its %zu-byte tag",
                       p->ct_len, tag);
    if (p->ct_len > INT_MAX / 2)
        return km_fail(err, "encoded password: encryptedPassword is too long");
    return 0;
}

static void params_free(pw_params *p)
{
    free(p->salt);
    free(p->iv);
    free(p->ct);
}

/* The key for p: ours when the value is one we wrote, else derived from the stored fields. */
static const uint8_t *key_for(const km_zk_pwenc *e, const pw_params *p, uint8_t *buf, km_err *err)
{
    if (p->kdf == e->kdf && p->key_bits == e->key_bits && p->iterations == e->iterations &&
        p->salt_len == SALT_BYTES && !memcmp(p->salt, e->salt, SALT_BYTES))
        return e->key;
    if (derive_key(e->secret, e->secret_len, p->kdf, p->salt, p->salt_len, p->iterations, p->key_bits, buf, err))
        return NULL;
    return buf;
}

static char *decrypt(const km_zk_pwenc *e, const pw_params *p, km_err *err)
{
    uint8_t buf[MAX_KEY_BYTES];
    const uint8_t *key = key_for(e, p, buf, err);
    size_t tag = (size_t)p->tag_bits / 8, in_len = p->ct_len - tag, n = 0;
    uint8_t *plain = key ? malloc(p->ct_len + 16) : NULL;
    char *out = NULL;
    if (key && !plain)
        km_fail(err, "password decoder: out of memory");
    else if (plain && aes_run(false, p->cipher->mode, p->key_bits, key, p->iv, p->iv_len, p->ct, in_len,
                              p->ct + in_len, tag, plain, &n))
        km_fail(err, "encoded password: %s decryption failed (wrong password.encoder.secret or corrupt data)",
                p->cipher->name);
    else if (plain) {
        long units = utf16_units(plain, n);
        if (units < 0)
            km_fail(err, "encoded password: the decrypted bytes are not UTF-8 text (wrong password.encoder.secret "
                    "or corrupt data)");
        else if (units != p->units)
            km_fail(err, "encoded password: passwordLength %d does not match the decrypted password's %ld UTF-16 "
                    "units (wrong password.encoder.secret or corrupt data)", p->units, units);
        else if (!(out = malloc(n + 1)))
            km_fail(err, "password decoder: out of memory");
        else {
            memcpy(out, plain, n);
            out[n] = '\0';
        }
    }
    if (plain)
        OPENSSL_cleanse(plain, p->ct_len + 16);
    free(plain);
    OPENSSL_cleanse(buf, sizeof buf);
    return out;
}

char *km_zk_password_decode(const km_zk_pwenc *e, const char *encoded, km_err *err)
{
    if (!encoded) {
        km_fail(err, "password decoder: no encoded password");
        return NULL;
    }
    if (!km_zk_pwenc_enabled(e))
        return copy_of(encoded, err);
    size_t n = strlen(encoded);
    char *work = copy_of(encoded, err), *out = NULL;
    const char *f[F_COUNT];
    pw_params p = {0};
    if (work && !parse_fields(work, f, err) && !read_params(f, &p, err))
        out = decrypt(e, &p, err);
    params_free(&p);
    if (work)
        OPENSSL_cleanse(work, n);
    free(work);
    return out;
}
