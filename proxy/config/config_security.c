/* broker.security.protocol, broker.tls.* and broker.sasl.*: resolved into one description, with
 * every contradiction or unused key refused by name (a setting that says TLS or SASL must never
 * quietly give plaintext or no authentication). */
#include "km_config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static const char *const PROTOCOLS[] = {"PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"};

static int resolve_protocol(const km_config *c, km_config_broker_security *out, km_err *err)
{
    const char *p = c->broker_security_protocol ? c->broker_security_protocol : c->broker_tls ? "SSL" : "PLAINTEXT";
    out->protocol = NULL;
    for (size_t i = 0; i < sizeof PROTOCOLS / sizeof PROTOCOLS[0]; i++)
        if (!strcmp(p, PROTOCOLS[i]))
            out->protocol = PROTOCOLS[i];
    if (!out->protocol)
        return km_fail(err, "broker.security.protocol must be PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL, not '%s'", p);
    out->tls = !strcmp(out->protocol, "SSL") || !strcmp(out->protocol, "SASL_SSL");
    if (c->broker_tls && !out->tls)
        return km_fail(err, "broker.tls.enabled=true contradicts broker.security.protocol=%s: use SSL or SASL_SSL",
                       out->protocol);
    const char *listener = c->broker_listener ? c->broker_listener : out->protocol;
    if (strlen(listener) >= sizeof out->listener)
        return km_fail(err, "broker.listener is longer than %zu bytes", sizeof out->listener - 1);
    strcpy(out->listener, listener);
    return 0;
}

static int resolve_tls(const km_config *c, km_config_broker_security *out, km_err *err)
{
    const char *ident = c->broker_tls_endpoint_identification;
    if (ident && strcmp(ident, "true") && strcmp(ident, "false"))
        return km_fail(err, "broker.tls.endpoint.identification must be true or false, not '%s'", ident);
    out->verify_name = !ident || !strcmp(ident, "true");
    if (!c->broker_tls_cert != !c->broker_tls_key)
        return km_fail(err, "broker.tls.cert.file and broker.tls.key.file go together");
    const char *unused = c->broker_tls_ca ? "broker.tls.ca.file" : c->broker_tls_cert ? "broker.tls.cert.file"
                         : c->broker_tls_key ? "broker.tls.key.file" : ident ? "broker.tls.endpoint.identification"
                         : NULL;
    if (!out->tls && unused)
        return km_fail(err, "%s is set but broker.security.protocol is %s: nothing would use it (SSL or SASL_SSL?)",
                       unused, out->protocol);
    if (out->tls && !c->broker_tls_ca)
        return km_fail(err, "broker.security.protocol=%s needs broker.tls.ca.file (the brokers' CA)", out->protocol);
    return 0;
}

/* The first line of the file (one trailing newline dropped), as Kafka's FileConfigProvider users expect. */
static int read_password_file(const char *path, char *out, km_err *err)
{
    if (km_config_check_file("broker.sasl.password.file", path, err)) /* a FIFO would block fopen */
        return -1;
    FILE *f = fopen(path, "r");
    if (!f)
        return km_fail(err, "broker.sasl.password.file=%s: cannot open: %s", path, strerror(errno));
    size_t n = fread(out, 1, KM_SASL_NAME_MAX, f);
    bool bad = ferror(f);
    fclose(f);
    if (bad)
        return km_fail(err, "broker.sasl.password.file=%s: read error", path);
    if (n == KM_SASL_NAME_MAX)
        return km_fail(err, "broker.sasl.password.file=%s: longer than %d bytes", path, KM_SASL_NAME_MAX - 1);
    out[n] = '\0';
    out[strcspn(out, "\r\n")] = '\0';
    if (!*out)
        return km_fail(err, "broker.sasl.password.file=%s: the first line is empty", path);
    return 0;
}

static int resolve_credentials(const km_config *c, km_config_broker_security *out, km_err *err)
{
    bool file_creds = c->broker_sasl_username || c->broker_sasl_password_file;
    if (c->broker_sasl_jaas_config && file_creds)
        return km_fail(err, "broker.sasl.jaas.config and broker.sasl.username/password.file exclude each other");
    if (c->broker_sasl_jaas_config)
        return km_sasl_parse_jaas(c->broker_sasl_jaas_config, out->mechanism, out->username, out->password, err);
    if (!c->broker_sasl_username || !c->broker_sasl_password_file)
        return km_fail(err, "broker.security.protocol=%s needs broker.sasl.jaas.config, or broker.sasl.username "
                            "and broker.sasl.password.file", out->protocol);
    if (strlen(c->broker_sasl_username) >= KM_SASL_NAME_MAX)
        return km_fail(err, "broker.sasl.username is longer than %d bytes", KM_SASL_NAME_MAX - 1);
    strcpy(out->username, c->broker_sasl_username);
    return read_password_file(c->broker_sasl_password_file, out->password, err);
}

static int resolve_sasl(const km_config *c, km_config_broker_security *out, km_err *err)
{
    bool sasl = !strncmp(out->protocol, "SASL_", 5);
    const char *unused = c->broker_sasl_mechanism ? "broker.sasl.mechanism"
                         : c->broker_sasl_jaas_config ? "broker.sasl.jaas.config"
                         : c->broker_sasl_username ? "broker.sasl.username"
                         : c->broker_sasl_password_file ? "broker.sasl.password.file" : NULL;
    if (!sasl) {
        if (unused)
            return km_fail(err, "%s is set but broker.security.protocol is %s: nothing would use it "
                                "(SASL_PLAINTEXT or SASL_SSL?)", unused, out->protocol);
        return 0;
    }
    if (!c->broker_sasl_mechanism) /* Kafka's default, GSSAPI, is not one we speak: say so rather than guess */
        return km_fail(err, "broker.security.protocol=%s needs broker.sasl.mechanism (PLAIN, SCRAM-SHA-256 or "
                            "SCRAM-SHA-512)", out->protocol);
    km_err why;
    if (km_sasl_mech_parse(c->broker_sasl_mechanism, &out->mechanism, &why))
        return km_fail(err, "broker.sasl.mechanism: %s", why.msg);
    return resolve_credentials(c, out, err);
}

int km_config_resolve_broker_security(const km_config *c, km_config_broker_security *out, km_err *err)
{
    memset(out, 0, sizeof *out);
    return resolve_protocol(c, out, err) || resolve_tls(c, out, err) || resolve_sasl(c, out, err) ? -1 : 0;
}

void km_config_broker_security_clear(km_config_broker_security *s)
{
    explicit_bzero(s->password, sizeof s->password);
}
