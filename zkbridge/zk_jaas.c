/* The JAAS login section ZooKeeper's Java client reads (java.security.auth.login.config, section
 * `Client` or zookeeper.sasl.clientconfig), as Kafka's brokers configure it:
 *   Client { org.apache.zookeeper.server.auth.DigestLoginModule required username="u" password="p"; };
 * Only what a DIGEST-MD5 client needs is accepted; anything else is refused by name. */
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

/* One login module entry up to its ';': DigestLoginModule with username and password. */
static int module_entry(jaas_cursor *c, km_zk_security *sec, char **owned, km_err *err)
{
    char cls[256], flag[32], name[64];
    if (word(c, cls, sizeof cls, err) || word(c, flag, sizeof flag, err))
        return -1;
    if (strcmp(cls, "org.apache.zookeeper.server.auth.DigestLoginModule"))
        return km_fail(err, "%s: login module %s is not supported (DigestLoginModule only: Kerberos/GSSAPI is "
                       "not built into this kmproxy)", c->path, cls);
    if (strcmp(flag, "required"))
        return km_fail(err, "%s: control flag '%s': only 'required' is supported", c->path, flag);
    for (skip_space(c); *c->p && *c->p != ';'; skip_space(c)) {
        if (word(c, name, sizeof name, err) || expect(c, '=', err))
            return -1;
        char *v = quoted(c, err);
        if (!v)
            return -1;
        if (!strcmp(name, "username") || !strcmp(name, "password")) {
            bool user = name[0] == 'u';
            free(owned[user ? 0 : 1]);
            owned[user ? 0 : 1] = v;
        } else {
            free(v);
            return km_fail(err, "%s: option '%s' of DigestLoginModule is not supported", c->path, name);
        }
    }
    if (expect(c, ';', err))
        return -1;
    if (!owned[0] || !owned[1])
        return km_fail(err, "%s: DigestLoginModule needs both username and password", c->path);
    sec->sasl_mechanism = "DIGEST-MD5";
    sec->sasl_username = owned[0];
    sec->sasl_password = owned[1];
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
