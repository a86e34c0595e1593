/* SASL mechanism names, Kafka's JAAS line, and PLAIN (RFC 4616). */
#include "km_sasl.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#define PLAIN_MODULE "org.apache.kafka.common.security.plain.PlainLoginModule"
#define SCRAM_MODULE "org.apache.kafka.common.security.scram.ScramLoginModule"

static const char *const MECH_NAMES[] = {"NONE", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "SCRAM-SHA-1"};

const char *km_sasl_mech_name(km_sasl_mech m)
{
    return m <= KM_SASL_SCRAM_SHA_1 ? MECH_NAMES[m] : "?";
}

int km_sasl_mech_parse(const char *name, km_sasl_mech *out, km_err *err)
{
    for (km_sasl_mech m = KM_SASL_PLAIN; m <= KM_SASL_SCRAM_SHA_512; m++)
        if (!strcmp(name, MECH_NAMES[m])) {
            *out = m;
            return 0;
        }
    return km_fail(err, "SASL mechanism '%s' is not supported (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)", name);
}

bool km_sasl_is_scram(km_sasl_mech m)
{
    return m == KM_SASL_SCRAM_SHA_256 || m == KM_SASL_SCRAM_SHA_512 || m == KM_SASL_SCRAM_SHA_1;
}

/* ---- JAAS ------------------------------------------------------------------------------------ */

typedef struct jaas_lexer { const char *p; const char *line; } jaas_lexer;

static void skip_space(jaas_lexer *lx)
{
    while (isspace((unsigned char)*lx->p))
        lx->p++;
}

/* A bare word (letters, digits, '.', '_', '-', '$') into out. */
static int read_word(jaas_lexer *lx, char *out, size_t cap, const char *what, km_err *err)
{
    skip_space(lx);
    size_t n = 0;
    while (isalnum((unsigned char)*lx->p) || (*lx->p && strchr("._-$", *lx->p))) {
        if (n + 1 >= cap)
            return km_fail(err, "sasl.jaas.config: %s is too long", what);
        out[n++] = *lx->p++;
    }
    out[n] = '\0';
    if (!n)
        return km_fail(err, "sasl.jaas.config: expected %s at offset %zu", what, (size_t)(lx->p - lx->line));
    return 0;
}

/* A double-quoted value with \" and \\ escapes, or a bare word. */
static int read_value(jaas_lexer *lx, const char *key, char *out, size_t cap, km_err *err)
{
    skip_space(lx);
    if (*lx->p != '"')
        return read_word(lx, out, cap, "a value", err);
    size_t n = 0;
    for (lx->p++; *lx->p != '"'; lx->p++) {
        if (!*lx->p)
            return km_fail(err, "sasl.jaas.config: the value of %s has no closing quote", key);
        if (*lx->p == '\\' && lx->p[1])
            lx->p++;
        if (n + 1 >= cap)
            return km_fail(err, "sasl.jaas.config: the value of %s is longer than %zu bytes", key, cap - 1);
        out[n++] = *lx->p;
    }
    lx->p++;
    out[n] = '\0';
    return 0;
}

static int check_module(const char *module, km_sasl_mech mech, km_err *err)
{
    const char *want = mech == KM_SASL_PLAIN ? PLAIN_MODULE : SCRAM_MODULE;
    if (strcmp(module, want))
        return km_fail(err, "sasl.jaas.config: login module %s does not fit mechanism %s (use %s)", module,
                       km_sasl_mech_name(mech), want);
    return 0;
}

static int read_options(jaas_lexer *lx, char *user, char *pass, km_err *err)
{
    char key[64];
    user[0] = pass[0] = '\0';
    bool have_user = false, have_pass = false;
    for (skip_space(lx); *lx->p && *lx->p != ';'; skip_space(lx)) {
        if (read_word(lx, key, sizeof key, "an option name", err))
            return -1;
        skip_space(lx);
        if (*lx->p++ != '=')
            return km_fail(err, "sasl.jaas.config: option %s needs '=' and a value", key);
        bool is_user = !strcmp(key, "username"), is_pass = !strcmp(key, "password");
        if (!is_user && !is_pass)
            return km_fail(err, "sasl.jaas.config: option %s is not supported (username and password are)", key);
        if (read_value(lx, key, is_user ? user : pass, KM_SASL_NAME_MAX, err))
            return -1;
        have_user |= is_user;
        have_pass |= is_pass;
    }
    if (*lx->p != ';')
        return km_fail(err, "sasl.jaas.config: the login module entry must end with ';'");
    lx->p++;
    skip_space(lx);
    if (*lx->p)
        return km_fail(err, "sasl.jaas.config: one login module only; unexpected '%s'", lx->p);
    if (!have_user || !*user || !have_pass)
        return km_fail(err, "sasl.jaas.config: needs username=\"...\" and password=\"...\"");
    return 0;
}

int km_sasl_parse_jaas(const char *jaas, km_sasl_mech mech, char user[KM_SASL_NAME_MAX],
                       char pass[KM_SASL_NAME_MAX], km_err *err)
{
    jaas_lexer lx = {jaas, jaas};
    char module[128], flag[32];
    if (read_word(&lx, module, sizeof module, "a login module class", err) || check_module(module, mech, err) ||
        read_word(&lx, flag, sizeof flag, "a control flag (required)", err))
        return -1;
    if (strcasecmp(flag, "required") && strcasecmp(flag, "requisite") && strcasecmp(flag, "sufficient") &&
        strcasecmp(flag, "optional"))
        return km_fail(err, "sasl.jaas.config: '%s' is not a control flag (required, requisite, sufficient, "
                            "optional)", flag);
    return read_options(&lx, user, pass, err);
}

/* ---- PLAIN ----------------------------------------------------------------------------------- */

int km_sasl_plain_message(const char *user, const char *pass, uint8_t *out, size_t *len, km_err *err)
{
    size_t ul = strlen(user), pl = strlen(pass);
    if (ul + pl + 2 > KM_SASL_MSG_MAX)
        return km_fail(err, "SASL/PLAIN: user name and password are longer than %d bytes", KM_SASL_MSG_MAX - 2);
    out[0] = 0;
    memcpy(out + 1, user, ul);
    out[1 + ul] = 0;
    memcpy(out + 2 + ul, pass, pl);
    *len = ul + pl + 2;
    return 0;
}

static int plain_field(const uint8_t **p, const uint8_t *end, bool last, char *out, const char *what, km_err *err)
{
    const uint8_t *stop = last ? end : memchr(*p, 0, (size_t)(end - *p));
    if (!stop)
        return km_fail(err, "SASL/PLAIN: Invalid SASL/PLAIN response: expected 3 tokens");
    size_t n = (size_t)(stop - *p);
    if (n >= KM_SASL_NAME_MAX || memchr(*p, 0, n))
        return km_fail(err, "SASL/PLAIN: %s is too long or holds a NUL", what);
    memcpy(out, *p, n);
    out[n] = '\0';
    *p = last ? end : stop + 1;
    return 0;
}

int km_sasl_plain_parse(const uint8_t *msg, size_t len, char user[KM_SASL_NAME_MAX],
                        char pass[KM_SASL_NAME_MAX], km_err *err)
{
    char authz[KM_SASL_NAME_MAX];
    const uint8_t *p = msg, *end = msg + len;
    if (plain_field(&p, end, false, authz, "the authorization id", err) ||
        plain_field(&p, end, false, user, "the user name", err) || plain_field(&p, end, true, pass, "the password", err))
        return -1;
    if (!*user)
        return km_fail(err, "SASL/PLAIN: Authentication failed: username not specified");
    if (*authz && strcmp(authz, user))
        return km_fail(err, "SASL/PLAIN: Authentication failed: Client requested an authorization id that is "
                            "different from username");
    return 0;
}
