/* The JAAS login section ZooKeeper's Java client reads (java.security.auth.login.config, section
 * `Client` or zookeeper.sasl.clientconfig), as Kafka's brokers configure it:
 *   Client { org.apache.zookeeper.server.auth.DigestLoginModule required username="u" password="p"; };
 * or Krb5LoginModule (GSSAPI). Only what those clients need is accepted; anything else is refused
 * by name. */
#include "zk_internal.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct jaas_cursor {
    const char *p, *path;
    const char *start;
} jaas_cursor;

static void skip_space(jaas_cursor *c)
{
    for (;;) {
        while (isspace((unsigned char)*c->p))
            c->p++;
        if (c->p[0] == '/' && c->p[1] == '/')
            c->p += strcspn(c->p, "\n");
        else if (c->p[0] == '/' && c->p[1] == '*' && strstr(c->p + 2, "*/"))
            c->p = strstr(c->p + 2, "*/") + 2;
        else
            return;
    }
}

/* A bare word (section, module class, flag, option name) into out. */
static int word(jaas_cursor *c, char *out, size_t cap, km_err *err)
{
    skip_space(c);
    size_t n = 0;
    while (isalnum((unsigned char)c->p[n]) || c->p[n] == '.' || c->p[n] == '_' || c->p[n] == '-' || c->p[n] == '$')
        n++;
    if (!n || n >= cap)
        return km_fail(err, "%s: byte %zu: expected a name", c->path, (size_t)(c->p - c->start));
    memcpy(out, c->p, n);
    out[n] = '\0';
    c->p += n;
    return 0;
}

static int expect(jaas_cursor *c, char ch, km_err *err)
{
    skip_space(c);
    if (*c->p != ch)
        return km_fail(err, "%s: byte %zu: expected '%c'", c->path, (size_t)(c->p - c->start), ch);
    c->p++;
    return 0;
}

/* "value" with \" and \\ escapes, as Java's ConfigFile reads it. */
static char *quoted(jaas_cursor *c, km_err *err)
{
    if (expect(c, '"', err))
        return NULL;
    char *out = malloc(strlen(c->p) + 1), *o = out;
    if (!out)
        return km_fail(err, "%s: out of memory", c->path), NULL;
    while (*c->p && *c->p != '"') {
        if (*c->p == '\\' && c->p[1])
            c->p++;
        *o++ = *c->p++;
    }
    *o = '\0';
    if (*c->p != '"') {
        free(out);
        return km_fail(err, "%s: unterminated quoted value", c->path), NULL;
    }
    c->p++;
    return out;
}

/* An option's value: "quoted" or a bare word (useKeyTab=true). */
static char *value(jaas_cursor *c, km_err *err)
{
    skip_space(c);
    if (*c->p == '"')
        return quoted(c, err);
    char word_buf[256];
    if (word(c, word_buf, sizeof word_buf, err))
        return NULL;
    char *v = strdup(word_buf);
    return v ? v : (km_fail(err, "%s: out of memory", c->path), NULL);
}

/* The options a login module entry may carry, each into its slot of owned (NULL: read, unused). */
typedef struct jaas_opt {
    const char *name;
    int slot;      /* index into owned, or -1: accepted and checked below, not kept */
} jaas_opt;

static const jaas_opt DIGEST_OPTS[] = {{"username", 0}, {"password", 1}, {NULL, 0}};
/* Krb5LoginModule as Kafka's docs configure it for ZooKeeper clients */
static const jaas_opt KRB5_OPTS[] = {{"principal", 0}, {"keyTab", 1}, {"useKeyTab", -1}, {"storeKey", -1},
                                     {"useTicketCache", -1}, {"doNotPrompt", -1}, {"debug", -1}, {NULL, 0}};

static int options(jaas_cursor *c, const jaas_opt *opts, const char *cls, char **owned, bool *keytab, km_err *err)
{
    char name[64];
    for (skip_space(c); *c->p && *c->p != ';'; skip_space(c)) {
        if (word(c, name, sizeof name, err) || expect(c, '=', err))
            return -1;
        char *v = value(c, err);
        if (!v)
            return -1;
        const jaas_opt *o = opts;
        while (o->name && strcmp(o->name, name))
            o++;
        if (!o->name) {
            free(v);
            return km_fail(err, "%s: option '%s' of %s is not supported", c->path, name, cls);
        }
        if (!strcmp(name, "useKeyTab"))
            *keytab = !strcmp(v, "true");
        if (o->slot >= 0) {
            free(owned[o->slot]);
            owned[o->slot] = v;
        } else {
            free(v);
        }
    }
    return expect(c, ';', err);
}

/* One login module entry up to its ';': DigestLoginModule (DIGEST-MD5) or Krb5LoginModule (GSSAPI). */
static int module_entry(jaas_cursor *c, km_zk_security *sec, char **owned, km_err *err)
{
    char cls[256], flag[32];
    if (word(c, cls, sizeof cls, err) || word(c, flag, sizeof flag, err))
        return -1;
    bool digest = !strcmp(cls, "org.apache.zookeeper.server.auth.DigestLoginModule");
    bool krb5 = !strcmp(cls, "com.sun.security.auth.module.Krb5LoginModule");
    if (!digest && !krb5)
        return km_fail(err, "%s: login module %s is not supported (DigestLoginModule or Krb5LoginModule)",
                       c->path, cls);
    if (strcmp(flag, "required"))
        return km_fail(err, "%s: control flag '%s': only 'required' is supported", c->path, flag);
    bool keytab = false;
    if (options(c, digest ? DIGEST_OPTS : KRB5_OPTS, cls, owned, &keytab, err))
        return -1;
    if (digest && (!owned[0] || !owned[1]))
        return km_fail(err, "%s: DigestLoginModule needs both username and password", c->path);
    if (krb5 && keytab != (owned[1] != NULL))
        return km_fail(err, "%s: Krb5LoginModule: useKeyTab=true and keyTab go together (without them the "
                       "default credential cache is used)", c->path);
    sec->sasl_mechanism = digest ? "DIGEST-MD5" : "GSSAPI";
    sec->sasl_username = owned[0];
    sec->sasl_password = digest ? owned[1] : NULL;
    sec->sasl_keytab = krb5 ? owned[1] : NULL;
    return 0;
}

static char *read_file(const char *path, km_err *err)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return km_fail(err, "%s: cannot open the JAAS file", path), NULL;
    char *buf = malloc(65537);
    size_t n = buf ? fread(buf, 1, 65536, f) : 0;
    bool more = buf && fgetc(f) != EOF;
    fclose(f);
    if (!buf || more) {
        free(buf);
        return km_fail(err, "%s: JAAS file larger than 64 KiB", path), NULL;
    }
    buf[n] = '\0';
    return buf;
}

/* owned: 2 slots (username, password) the caller frees. */
int km_zk_security_from_jaas(km_zk_security *sec, const char *path, const char *section, char **owned,
                             km_err *err)
{
    char *text = read_file(path, err);
    if (!text)
        return -1;
    const char *want = section ? section : "Client";
    jaas_cursor c = {text, path, text};
    int rc = -1, found = 0;
    char name[128];
    for (skip_space(&c); *c.p; skip_space(&c)) {
        if (word(&c, name, sizeof name, err) || expect(&c, '{', err))
            goto out;
        bool mine = !strcmp(name, want);
        for (skip_space(&c); *c.p && *c.p != '}'; skip_space(&c)) {
            if (mine) {
                if (found++)
                    { km_fail(err, "%s: section %s has more than one login module", path, want); goto out; }
                if (module_entry(&c, sec, owned, err))
                    goto out;
            } else {
                c.p += strcspn(c.p, ";}");  /* another program's section: not ours to judge */
                if (*c.p == ';')
                    c.p++;
            }
        }
        if (expect(&c, '}', err) || expect(&c, ';', err))
            goto out;
    }
    rc = found ? 0 : km_fail(err, "%s: no '%s' section (the one ZooKeeper's client reads)", path, want);
out:
    free(text);
    return rc;
}
