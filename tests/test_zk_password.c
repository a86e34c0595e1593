/* Kafka's PasswordEncoder in C (zkbridge/zk_password.c): values the JDK's crypto encoded (the way
 * Kafka 3.9 does, tests/support/PasswordEncoderPeer.java) decode here and ours decode there; then
 * the C side alone: defaults, NOOP without a secret, and errors rather than crashes for every
 * missing, corrupt or truncated field. */
#include "km_testsupport.h"
#include "km_zkbridge.h"

#include <criterion/criterion.h>
#include <openssl/evp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CBC "AES/CBC/PKCS5Padding"
#define GCM "AES/GCM/NoPadding"

typedef struct pw_case {
    const char *kdf;    /* NULL: Kafka's default */
    const char *cipher;
    int key_bits, iterations;
} pw_case;

/* Kafka's defaults first; the rest at Kafka's minimum iteration count to keep the suite quick. */
static const pw_case CASES[] = {
    {NULL, CBC, 128, 4096},
    {NULL, GCM, 128, 4096},
    {"PBKDF2WithHmacSHA1", CBC, 192, 1024},
    {"PBKDF2WithHmacSHA1", GCM, 256, 1024},
    {"PBKDF2WithHmacSHA512", CBC, 256, 1024},
    {"PBKDF2WithHmacSHA512", GCM, 192, 1024},
    {"PBKDF2WithHmacSHA256", CBC, 128, 1024},
    {"PBKDF2WithHmacSHA384", GCM, 128, 1024},
    {"PBKDF2WithHmacSHA224", CBC, 256, 1024},
    {"pbkdf2withhmacsha1", "aes/cbc/pkcs5padding", 128, 1024}, /* the JCE ignores case */
};
#define N_CASES (sizeof CASES / sizeof CASES[0])

static const char *const SECRETS[] = {"password-encoder-secret", ("s\xC3\xA9" "cret \xE2\x9C\x93 \xF0\x9F\x94\x91")};

/* Empty, ASCII, non-ASCII (2-, 3- and 4-byte UTF-8: 4-byte ones are two UTF-16 units), the CSV
 * separators themselves, and a PEM-sized value (ssl.keystore.key). */
#define N_PASSWORDS 5
static const char *password(int i)
{
    static char pem[4200];
    static const char *const fixed[] = {
        "", "hunter2", ("p\xC3\xA4ssw\xC3\xB6rd \xE2\x80\x93 \xD0\xBA\xD0\xBB\xD1\x8E\xD1\x87 \xE4\xB8\xAD\xE6\x96\x87 "
        "\xF0\x9F\x98\x80\xF0\x9D\x84\x9E"), "with,commas:and:colons\nand\ttabs  "};
    if (i < 4)
        return fixed[i];
    if (!pem[0]) {
        size_t o = (size_t)snprintf(pem, sizeof pem, "-----BEGIN PRIVATE KEY-----\n");
        for (int line = 0; line < 60; line++, o += 65) {
            for (int k = 0; k < 64; k++)
                pem[o + (size_t)k] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"[(line * 7 + k) % 64];
            pem[o + 64] = '\n';
        }
        snprintf(pem + o, sizeof pem - o, "-----END PRIVATE KEY-----\n");
    }
    return pem;
}

static km_zk_pwenc *encoder(const pw_case *c, const char *secret)
{
    km_err err = {{0}};
    km_zk_password_config cfg = {.secret = secret, .keyfactory_algorithm = c->kdf, .cipher_algorithm = c->cipher,
                                 .key_length = c->key_bits, .iterations = c->iterations};
    km_zk_pwenc *e = km_zk_pwenc_new(&cfg, &err);
    cr_assert(e, "km_zk_pwenc_new: %s", err.msg);
    return e;
}

/* ---- the JDK peer ---- */

static char *b64(const char *s)
{
    size_t n = strlen(s);
    char *out = malloc(4 * ((n + 2) / 3) + 1);
    EVP_EncodeBlock((unsigned char *)out, (const unsigned char *)s, (int)n);
    return out;
}

static char *unb64(const char *s, size_t n)
{
    char *out = calloc(1, n + 4);
    int len = n ? EVP_DecodeBlock((unsigned char *)out, (const unsigned char *)s, (int)n) : 0;
    cr_assert(len >= 0, "peer answered bad base64");
    len -= (n > 0 && s[n - 1] == '=') + (n > 1 && s[n - 2] == '=');
    out[len] = '\0';
    return out;
}

/* $JAVA_HOME/bin/java, else the first java on PATH (km_test_run execs a path). */
static char *find_java(void)
{
    char *path = NULL;
    const char *home = getenv("JAVA_HOME");
    if (home && asprintf(&path, "%s/bin/java", home) > 0 && access(path, X_OK) == 0)
        return path;
    free(path);
    char *dirs = strdup(getenv("PATH") ? getenv("PATH") : "/usr/bin:/bin"), *save = NULL;
    for (char *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        if (asprintf(&path, "%s/java", *d ? d : ".") > 0 && access(path, X_OK) == 0) {
            free(dirs);
            return path;
        }
        free(path);
    }
    free(dirs);
    return NULL;
}

typedef struct peer_batch {
    char *in;
    size_t len, cap;
    char **answers; /* "OK"-answers decoded, NULL for ERR */
    char **errors;
    size_t n;
} peer_batch;

static void peer_add(peer_batch *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void peer_add(peer_batch *b, const char *fmt, ...)
{
    va_list ap;
    char *line = NULL;
    va_start(ap, fmt);
    cr_assert(vasprintf(&line, fmt, ap) > 0);
    va_end(ap);
    size_t n = strlen(line);
    if (b->len + n + 2 > b->cap) {
        b->cap = (b->len + n + 2) * 2;
        b->in = realloc(b->in, b->cap);
    }
    memcpy(b->in + b->len, line, n);
    b->len += n;
    b->in[b->len++] = '\n';
    b->n++;
    free(line);
}

static void peer_add_encode(peer_batch *b, const pw_case *c, const char *secret, const char *plain)
{
    char *s = b64(secret), *p = b64(plain);
    peer_add(b, "encode %s %s %s %d %d %s", s, c->kdf ? c->kdf : "-", c->cipher, c->key_bits, c->iterations, p);
    free(s);
    free(p);
}

static void peer_add_decode(peer_batch *b, const char *secret, const char *cipher, const char *encoded)
{
    char *s = b64(secret), *e = b64(encoded);
    peer_add(b, "decode %s %s %s", s, cipher, e);
    free(s);
    free(e);
}

/* Runs the batch through one JVM; skips the test when there is no java at all. */
static void peer_run(peer_batch *b)
{
    char *java = find_java();
    if (!java)
        cr_skip_test("no java on PATH or in $JAVA_HOME (deploy/install-test-deps.sh installs default-jdk-headless): "
                     "the JDK interop checks need it");
    char src[4096];
    snprintf(src, sizeof src, "%s/tests/support/PasswordEncoderPeer.java", km_test_source_dir());
    char *argv[] = {java, src, NULL};
    char *out = NULL, *err_out = NULL;
    int rc = km_test_run(argv, b->in, b->len, &out, NULL, &err_out);
    cr_assert_eq(rc, 0, "%s %s exited %d: %s", java, src, rc, err_out ? err_out : "");
    b->answers = calloc(b->n, sizeof *b->answers);
    b->errors = calloc(b->n, sizeof *b->errors);
    size_t i = 0;
    for (char *line = out, *next; line && *line; line = next, i++) {
        next = strchr(line, '\n');
        cr_assert(next, "peer output ends without a newline");
        *next++ = '\0';
        cr_assert_lt(i, b->n, "peer answered more lines than asked");
        if (!strncmp(line, "OK", 2))
            b->answers[i] = unb64(line + (line[2] ? 3 : 2), strlen(line + (line[2] ? 3 : 2)));
        else
            b->errors[i] = strdup(line);
    }
    cr_assert_eq(i, b->n, "peer answered %zu of %zu lines: %s", i, b->n, err_out);
    free(out);
    free(err_out);
    free(java);
}

static void peer_free(peer_batch *b)
{
    for (size_t i = 0; i < b->n && b->answers; i++) {
        free(b->answers[i]);
        free(b->errors[i]);
    }
    free(b->answers);
    free(b->errors);
    free(b->in);
}

Test(zk_password, java_encoded_values_decode_here)
{
    peer_batch b = {0};
    for (size_t c = 0; c < N_CASES; c++)
        for (int p = 0; p < N_PASSWORDS; p++)
            peer_add_encode(&b, &CASES[c], SECRETS[(c + (size_t)p) % 2], password(p));
    peer_run(&b);
    size_t k = 0;
    for (size_t c = 0; c < N_CASES; c++) {
        km_zk_pwenc *e[2] = {encoder(&CASES[c], SECRETS[0]), encoder(&CASES[c], SECRETS[1])};
        for (int p = 0; p < N_PASSWORDS; p++, k++) {
            cr_assert(b.answers[k], "case %zu password %d: the JDK failed: %s", c, p, b.errors[k]);
            km_err err = {{0}};
            char *plain = km_zk_password_decode(e[(c + (size_t)p) % 2], b.answers[k], &err);
            cr_assert(plain, "case %zu password %d: %s\n%s", c, p, err.msg, b.answers[k]);
            cr_assert_str_eq(plain, password(p), "case %zu password %d", c, p);
            free(plain);
            /* and not with the other secret */
            cr_assert_null(km_zk_password_decode(e[(c + (size_t)p + 1) % 2], b.answers[k], &err));
        }
        km_zk_pwenc_free(e[0]);
        km_zk_pwenc_free(e[1]);
    }
    peer_free(&b);
}

Test(zk_password, our_values_decode_in_java)
{
    peer_batch b = {0};
    for (size_t c = 0; c < N_CASES; c++) {
        km_zk_pwenc *e = encoder(&CASES[c], SECRETS[c % 2]);
        for (int p = 0; p < N_PASSWORDS; p++) {
            km_err err = {{0}};
            char *enc = km_zk_password_encode(e, password(p), &err);
            cr_assert(enc, "case %zu password %d: %s", c, p, err.msg);
            peer_add_decode(&b, SECRETS[c % 2], CASES[c].cipher, enc);
            free(enc);
        }
        km_zk_pwenc_free(e);
    }
    peer_run(&b);
    size_t k = 0;
    for (size_t c = 0; c < N_CASES; c++)
        for (int p = 0; p < N_PASSWORDS; p++, k++) {
            cr_assert(b.answers[k], "case %zu password %d: the JDK could not decode ours: %s", c, p, b.errors[k]);
            cr_assert_str_eq(b.answers[k], password(p), "case %zu password %d", c, p);
        }
    peer_free(&b);
}

/* Field names in order: "a:x,b:y" -> "a,b". */
static char *field_order(const char *encoded)
{
    char *out = calloc(1, strlen(encoded) + 1), *work = strdup(encoded), *save = NULL;
    for (char *piece = strtok_r(work, ",", &save); piece; piece = strtok_r(NULL, ",", &save)) {
        *strchr(piece, ':') = '\0';
        strcat(strcat(out, *out ? "," : ""), piece);
    }
    free(work);
    return out;
}

/* Kafka writes its fields in a HashMap's order; ours are the same, which keeps diffs of znodes
 * readable side by side. And a Kafka broker reads IV or GCM parameters by its own configured
 * cipher, not the stored one: a GCM value does not decode on a broker configured for CBC. */
Test(zk_password, field_order_and_java_cipher_coupling)
{
    peer_batch b = {0};
    const pw_case cbc = {NULL, CBC, 128, 1024}, gcm = {NULL, GCM, 128, 1024};
    peer_add_encode(&b, &cbc, "s", "x");
    peer_add_encode(&b, &gcm, "s", "x");
    km_zk_pwenc *e = encoder(&gcm, "s");
    km_err err = {{0}};
    char *ours = km_zk_password_encode(e, "x", &err);
    cr_assert(ours, "%s", err.msg);
    peer_add_decode(&b, "s", CBC, ours);
    peer_run(&b);
    km_zk_pwenc *c = encoder(&cbc, "s");
    char *ours_cbc = km_zk_password_encode(c, "x", &err);
    const char *mine[2] = {ours_cbc, ours};
    for (int i = 0; i < 2; i++) {
        cr_assert(b.answers[i], "%s", b.errors[i]);
        char *theirs_order = field_order(b.answers[i]), *ours_order = field_order(mine[i]);
        cr_assert_str_eq(ours_order, theirs_order);
        free(theirs_order);
        free(ours_order);
    }
    cr_assert_null(b.answers[2], "a CBC-configured JDK decoder took GCM parameters");
    free(ours);
    free(ours_cbc);
    km_zk_pwenc_free(e);
    km_zk_pwenc_free(c);
    peer_free(&b);
}

/* ---- the C side alone ---- */

Test(zk_password, round_trip_and_kafka_defaults)
{
    for (size_t c = 0; c < N_CASES; c++) {
        km_zk_pwenc *e = encoder(&CASES[c], SECRETS[c % 2]);
        cr_assert(km_zk_pwenc_enabled(e));
        for (int p = 0; p < N_PASSWORDS; p++) {
            km_err err = {{0}};
            char *enc = km_zk_password_encode(e, password(p), &err);
            cr_assert(enc, "%s", err.msg);
            char *dec = km_zk_password_decode(e, enc, &err);
            cr_assert(dec, "case %zu password %d: %s", c, p, err.msg);
            cr_assert_str_eq(dec, password(p));
            free(enc);
            free(dec);
        }
        km_zk_pwenc_free(e);
    }
    km_zk_password_config cfg = {.secret = "s"}; /* everything else Kafka's default */
    km_err err = {{0}};
    km_zk_pwenc *e = km_zk_pwenc_new(&cfg, &err);
    cr_assert(e, "%s", err.msg);
    char *enc = km_zk_password_encode(e, "p\xC3\xA4ss\xF0\x9F\x98\x80", &err);
    cr_assert(strstr(enc, "keyFactoryAlgorithm:PBKDF2WithHmacSHA512,"), "%s", enc);
    cr_assert(strstr(enc, "cipherAlgorithm:AES/CBC/PKCS5Padding,"), "%s", enc);
    cr_assert(strstr(enc, "keyLength:128,"), "%s", enc);
    cr_assert(strstr(enc, "iterations:4096,"), "%s", enc);
    cr_assert(strstr(enc, "passwordLength:6,"), "UTF-16 units, like Java's String.length(): %s", enc);
    cr_assert(!strstr(enc, "authenticationTagLength"), "%s", enc);
    free(enc);
    km_zk_pwenc_free(e);
}

Test(zk_password, no_secret_is_kafkas_noop_encoder)
{
    km_err err = {{0}};
    km_zk_password_config cfg = {0};
    km_zk_pwenc *e = km_zk_pwenc_new(&cfg, &err);
    cr_assert(e, "%s", err.msg);
    cr_assert_not(km_zk_pwenc_enabled(e));
    const char *in = "plain,text:as:is";
    char *enc = km_zk_password_encode(e, in, &err), *dec = km_zk_password_decode(e, in, &err);
    cr_assert_str_eq(enc, in);
    cr_assert_str_eq(dec, in);
    cr_assert(enc != in && dec != in, "copies, for the caller to free");
    free(enc);
    free(dec);
    km_zk_pwenc_free(e);
    /* NULL config and NULL encoder behave the same */
    cr_assert(e = km_zk_pwenc_new(NULL, &err), "%s", err.msg);
    cr_assert_not(km_zk_pwenc_enabled(e));
    km_zk_pwenc_free(e);
    cr_assert_not(km_zk_pwenc_enabled(NULL));
    cr_assert_str_eq(enc = km_zk_password_encode(NULL, "x", &err), "x");
    free(enc);
    cr_assert_str_eq(dec = km_zk_password_decode(NULL, "y", &err), "y");
    free(dec);
    cr_assert_null(km_zk_password_decode(NULL, NULL, &err));
    cr_assert_null(km_zk_password_encode(NULL, NULL, &err));
    km_zk_pwenc_free(NULL);
}

Test(zk_password, unsupported_settings_are_named)
{
    static const struct {
        km_zk_password_config cfg;
        const char *want;
    } bad[] = {
        {{.keyfactory_algorithm = "PBKDF2WithHmacMD5"}, "keyfactory.algorithm 'PBKDF2WithHmacMD5' is not supported"},
        {{.cipher_algorithm = "DES/CBC/PKCS5Padding"}, "cipher.algorithm 'DES/CBC/PKCS5Padding' is not supported"},
        {{.cipher_algorithm = "AES/CFB/PKCS5Padding"}, "'AES/CFB/PKCS5Padding' is not supported"},
        {{.cipher_algorithm = "AES"}, "'AES' is not supported"},
        {{.cipher_algorithm = "aes/gcm/NoPadding"}, "spelt 'AES/GCM/...'"},
        {{.key_length = 100}, "key.length 100 is not an AES key length"},
        {{.key_length = 512}, "key.length 512"},
        {{.key_length = -128}, "key.length -128"},
        {{.iterations = 1000}, "iterations 1000 is outside [1024, 1000000]"},
        {{.iterations = -1}, "iterations -1"},
        {{.iterations = 20000000}, "iterations 20000000"},
        {{.secret = "s", .cipher_algorithm = "AES/CTR/NoPadding"}, "'AES/CTR/NoPadding' is not supported"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        km_err err = {{0}};
        cr_assert_null(km_zk_pwenc_new(&bad[i].cfg, &err), "case %zu accepted", i);
        cr_assert(strstr(err.msg, bad[i].want), "case %zu: %s", i, err.msg);
    }
    km_err err = {{0}};
    km_zk_password_config gcm_any_padding = {.secret = "s", .cipher_algorithm = "AES/GCM/nopadding"};
    km_zk_pwenc *e = km_zk_pwenc_new(&gcm_any_padding, &err);
    cr_assert(e, "only the AES/GCM/ prefix is case-sensitive in Kafka: %s", err.msg);
    km_zk_pwenc_free(e);
}

Test(zk_password, wrong_secret_is_an_error)
{
    const char *const ciphers[] = {CBC, GCM};
    for (int i = 0; i < 2; i++) {
        pw_case c = {NULL, ciphers[i], 128, 1024};
        km_zk_pwenc *right = encoder(&c, "right"), *wrong = encoder(&c, "wrong");
        km_err err = {{0}};
        char *enc = km_zk_password_encode(right, "a password long enough to span two blocks", &err);
        cr_assert_null(km_zk_password_decode(wrong, enc, &err));
        cr_assert(strstr(err.msg, "wrong password.encoder.secret or corrupt data"), "%s", err.msg);
        cr_assert(!strstr(err.msg, "password long"), "the error must not quote the password: %s", err.msg);
        free(enc);
        km_zk_pwenc_free(right);
        km_zk_pwenc_free(wrong);
    }
}

/* enc with field `name` replaced by `value` (NULL: removed). */
static char *with_field(const char *enc, const char *name, const char *value)
{
    char *out = calloc(1, strlen(enc) + (value ? strlen(value) : 0) + strlen(name) + 4);
    char *work = strdup(enc), *save = NULL;
    for (char *piece = strtok_r(work, ",", &save); piece; piece = strtok_r(NULL, ",", &save)) {
        size_t n = strlen(name);
        bool match = !strncmp(piece, name, n) && piece[n] == ':';
        if (match && !value)
            continue; /* removed */
        if (*out)
            strcat(out, ",");
        if (!match)
            strcat(out, piece);
        else if (value) /* always here; spelled out so that gcc -O3 sees strcat never gets NULL */
            strcat(strcat(strcat(out, name), ":"), value);
    }
    free(work);
    return out;
}

static const char *const FIELDS[] = {"keyLength", "salt", "cipherAlgorithm", "iterations",
                                     "initializationVector", "encryptedPassword", "passwordLength",
                                     "authenticationTagLength"};

Test(zk_password, every_missing_field_is_named)
{
    pw_case c = {NULL, GCM, 128, 1024};
    km_zk_pwenc *e = encoder(&c, "s");
    km_err err = {{0}};
    char *enc = km_zk_password_encode(e, "pw", &err);
    for (size_t i = 0; i < sizeof FIELDS / sizeof FIELDS[0]; i++) {
        char *cut = with_field(enc, FIELDS[i], NULL), want[80];
        cr_assert_null(km_zk_password_decode(e, cut, &err), "decoded without %s", FIELDS[i]);
        snprintf(want, sizeof want, "has no '%s'", FIELDS[i]);
        cr_assert(strstr(err.msg, want), "%s: %s", FIELDS[i], err.msg);
        free(cut);
    }
    /* Kafka 3.9 reads a missing keyFactoryAlgorithm as its default (SHA512 here) */
    char *cut = with_field(enc, "keyFactoryAlgorithm", NULL), *dec = km_zk_password_decode(e, cut, &err);
    cr_assert(dec, "%s", err.msg);
    cr_assert_str_eq(dec, "pw");
    free(dec);
    free(cut);
    free(enc);
    km_zk_pwenc_free(e);
}

Test(zk_password, corrupt_fields_are_named)
{
    static const struct {
        const char *cipher, *field, *value, *want;
    } bad[] = {
        {CBC, "salt", "!!!!", "'salt' is not base64: bad character at offset 0"},
        {CBC, "salt", "QQ=", "'salt' is not base64"},
        {CBC, "salt", "Q", "'salt' is not base64"},
        {CBC, "salt", "", "'salt' is empty"},
        {CBC, "initializationVector", "QUJD", "initializationVector has 3 bytes, AES/CBC needs 16"},
        {GCM, "initializationVector", "", "initializationVector has 0 bytes"},
        {GCM, "authenticationTagLength", "64", "'authenticationTagLength' 64 is outside [96, 128]"},
        {GCM, "authenticationTagLength", "100", "authenticationTagLength 100 is not a whole number of bytes"},
        {GCM, "authenticationTagLength", "120", "decryption failed"},
        {CBC, "keyLength", "abc", "'keyLength' is not an integer"},
        {CBC, "keyLength", "", "'keyLength' is not an integer"},
        {CBC, "keyLength", "100", "keyLength 100 is not an AES key length"},
        {CBC, "keyLength", "256", "wrong password.encoder.secret or corrupt data"},
        {CBC, "iterations", "0", "'iterations' 0 is outside [1, 1000000]"},
        {CBC, "iterations", "99999999999", "'iterations' is not an integer"},
        {CBC, "iterations", "1025", "wrong password.encoder.secret or corrupt data"},
        {CBC, "passwordLength", "3", "passwordLength 3 does not match the decrypted password's 2 UTF-16 units"},
        {CBC, "passwordLength", "-1", "'passwordLength' -1 is outside"},
        {CBC, "encryptedPassword", "", "encryptedPassword has 0 bytes, not whole AES blocks"},
        {CBC, "encryptedPassword", "QUJD", "encryptedPassword has 3 bytes"},
        {GCM, "encryptedPassword", "QUJD", "shorter than its 16-byte tag"},
        {GCM, "encryptedPassword", "QUJDREVGR0hJSktMTU5PUFFSUw==", "decryption failed"},
        {CBC, "cipherAlgorithm", "AES/CTR/NoPadding", "cipherAlgorithm 'AES/CTR/NoPadding' is not supported"},
        {CBC, "keyFactoryAlgorithm", "PBKDF2WithHmacMD5", "keyFactoryAlgorithm 'PBKDF2WithHmacMD5' is not supported"},
        {CBC, "keyFactoryAlgorithm", "PBKDF2WithHmacSHA1", "wrong password.encoder.secret or corrupt data"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        pw_case c = {NULL, bad[i].cipher, 128, 1024};
        km_zk_pwenc *e = encoder(&c, "s");
        km_err err = {{0}};
        char *enc = km_zk_password_encode(e, "pw", &err), *broken = with_field(enc, bad[i].field, bad[i].value);
        cr_assert_null(km_zk_password_decode(e, broken, &err), "case %zu decoded: %s", i, broken);
        cr_assert(strstr(err.msg, bad[i].want), "case %zu: %s", i, err.msg);
        free(broken);
        free(enc);
        km_zk_pwenc_free(e);
    }
}

Test(zk_password, not_the_encoded_form)
{
    pw_case c = {NULL, CBC, 128, 1024};
    km_zk_pwenc *e = encoder(&c, "s");
    static const char *const inputs[] = {"", "hunter2", ",", ",,,", " ", "a:b,,c:d", ",salt:QUJD", ":", "::::",
                                         "salt:QUJD,", "\x01", "encryptedPassword"};
    for (size_t i = 0; i < sizeof inputs / sizeof inputs[0]; i++) {
        km_err err = {{0}};
        cr_assert_null(km_zk_password_decode(e, inputs[i], &err), "input %zu decoded", i);
        cr_assert(err.msg[0], "input %zu: no message", i);
    }
    km_err err = {{0}};
    cr_assert_null(km_zk_password_decode(e, "hunter2", &err));
    cr_assert(strstr(err.msg, "no ':' (not Kafka's encoded form)") && !strstr(err.msg, "hunter2"), "%s", err.msg);
    cr_assert_null(km_zk_password_decode(e, NULL, &err));
    cr_assert_null(km_zk_password_encode(e, NULL, &err));
    cr_assert_null(km_zk_password_encode(e, "bad \xC3(", &err));
    cr_assert(strstr(err.msg, "not valid UTF-8"), "%s", err.msg);
    cr_assert_null(km_zk_password_encode(e, "surrogate \xED\xA0\x80", &err));
    km_zk_pwenc_free(e);
}

/* Kafka's CSV reading: whitespace around separators and values, a later duplicate wins, trailing
 * commas are dropped, unknown keys are ignored. */
Test(zk_password, kafkas_csv_leniency)
{
    pw_case c = {NULL, CBC, 128, 1024};
    km_zk_pwenc *e = encoder(&c, "s");
    km_err err = {{0}};
    char *enc = km_zk_password_encode(e, "pw", &err);
    size_t n = strlen(enc);
    char *spaced = calloc(1, 4 * n + 64);
    strcat(spaced, " passwordLength:999 ,\t");
    for (const char *p = enc; *p; p++) {
        size_t o = strlen(spaced);
        if (*p == ',')
            memcpy(spaced + o, " ,\n ", 4);
        else if (*p == ':')
            memcpy(spaced + o, " :\t", 3);
        else
            spaced[o] = *p;
    }
    strcat(spaced, " , future:field , , ");
    char *dec = km_zk_password_decode(e, spaced, &err);
    cr_assert(dec, "%s\n%s", err.msg, spaced);
    cr_assert_str_eq(dec, "pw");
    free(dec);
    free(spaced);
    free(enc);
    km_zk_pwenc_free(e);
}

/* Every prefix and many single-byte changes: an error, or (where the change is harmless, e.g. a
 * dropped base64 padding) the right password; never a crash or a read out of bounds (ASan). */
Test(zk_password, truncations_and_mutations)
{
    const char *const ciphers[] = {CBC, GCM};
    for (int ci = 0; ci < 2; ci++) {
        pw_case c = {NULL, ciphers[ci], 128, 1024};
        km_zk_pwenc *e = encoder(&c, "s");
        km_err err = {{0}};
        const char *pw = "p\xC3\xA4ssword";
        char *enc = km_zk_password_encode(e, pw, &err);
        size_t n = strlen(enc);
        for (size_t len = 0; len < n; len++) {
            km_err e2 = {{0}};
            char *cut = strndup(enc, len), *dec = km_zk_password_decode(e, cut, &e2);
            cr_assert(dec || e2.msg[0], "prefix %zu failed without a message", len);
            if (dec)
                cr_assert_str_eq(dec, pw, "prefix %zu of %s", len, enc);
            free(dec);
            free(cut);
        }
        uint32_t rng = 12345u + (uint32_t)ci;
        for (int round = 0; round < 400; round++) {
            char *m = strdup(enc);
            rng = rng * 1103515245u + 12345u;
            size_t at = (rng >> 8) % n;
            rng = rng * 1103515245u + 12345u;
            m[at] = (char)(1 + (rng >> 16) % 255);
            char *dec = km_zk_password_decode(e, m, &err);
            /* CBC is malleable through its IV, so only GCM promises a changed value never decodes */
            if (dec && ci == 1)
                cr_assert_str_eq(dec, pw, "mutation at %zu: %s", at, m);
            free(dec);
            free(m);
        }
        free(enc);
        km_zk_pwenc_free(e);
    }
}

Test(zk_password, kafkas_password_config_names)
{
    static const char *const yes[] = {
        "ssl.keystore.password", "ssl.key.password", "ssl.keystore.key", "ssl.keystore.certificate.chain",
        "ssl.truststore.password", "ssl.truststore.certificates", "sasl.jaas.config",
        "listener.name.internal.ssl.keystore.password", "listener.name.EXTERNAL.ssl.key.password",
        "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config", "listener.name.x.ssl.truststore.certificates",
        /* Kafka's endsWith matches these too, though they are not dynamic broker configs */
        "zookeeper.ssl.keystore.password", "anything.ssl.key.password",
    };
    static const char *const no[] = {
        "ssl.keystore.location", "ssl.keystore.type", "ssl.truststore.location", "sasl.enabled.mechanisms",
        "sasl.mechanism.inter.broker.protocol", "password.encoder.secret", "password.encoder.old.secret",
        "delegation.token.secret.key", "ssl.keystore.password.x", "ssl.key.passwords", "password", "",
        "listener.name.internal.ssl.keystore.location", "SSL.KEY.PASSWORD", "cleanup.policy",
    };
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++)
        cr_assert(km_zk_is_password_config(yes[i]), "%s", yes[i]);
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
        cr_assert_not(km_zk_is_password_config(no[i]), "%s", no[i]);
    cr_assert_not(km_zk_is_password_config(NULL));
}
