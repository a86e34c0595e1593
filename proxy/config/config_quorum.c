/* The controller listener kmproxy dials as a KRaft observer, resolved from Kafka's own keys:
 * controller.listener.names names it, listener.security.protocol.map gives its protocol
 * (PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL), the ssl.* keys give PEM trust and identity
 * files, and sasl.mechanism.controller.protocol with the JAAS line give the SASL login. */
#include "km_config.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* The protocol mapped to `listener` in "NAME:PROTO,..."; a listener not in the map is
 * named after its protocol (Kafka's default map: PLAINTEXT:PLAINTEXT, SSL:SSL, ...). */
static int protocol_of(const char *map, const char *listener, char *out, size_t cap, km_err *err)
{
    snprintf(out, cap, "%s", listener);
    for (const char *p = map; p && *p;) {
        const char *comma = strchr(p, ','), *end = comma ? comma : p + strlen(p), *colon = memchr(p, ':', (size_t)(end - p));
        if (!colon)
            return km_fail(err, "listener.security.protocol.map: '%.*s' is not NAME:PROTOCOL", (int)(end - p), p);
        if ((size_t)(colon - p) == strlen(listener) && !strncasecmp(p, listener, strlen(listener)))
            snprintf(out, cap, "%.*s", (int)(end - colon - 1), colon + 1);
        p = comma ? comma + 1 : end;
    }
    return 0;
}

static int pem_only(const char *key, const char *type, km_err *err)
{
    if (type && strcasecmp(type, "PEM"))
        return km_fail(err, "%s=%s: only PEM files are read (set it to PEM)", key, type);
    return 0;
}

static int readable(const char *key, const char *path, km_err *err)
{
    if (path && access(path, R_OK) != 0)
        return km_fail(err, "%s=%s: cannot read it", key, path);
    return km_config_check_file(key, path, err);
}

/* ---- SASL ------------------------------------------------------------------------------------ */

/* The first SASL key for the controller that is set, or NULL. */
static const char *first_sasl_key(const km_config *c)
{
    return c->sasl_mechanism_controller_protocol ? "sasl.mechanism.controller.protocol"
           : c->sasl_jaas_config                  ? "sasl.jaas.config"
           : c->n_listener_jaas                   ? c->listener_jaas_keys[0]
                                                  : NULL;
}

static int refuse_sasl_keys(const km_config *c, const char *listener, const char *proto, km_err *err)
{
    const char *key = first_sasl_key(c);
    if (key)
        return km_fail(err, "%s is set but controller listener %s is %s (listener.security.protocol.map): nothing "
                            "would use it (SASL_PLAINTEXT or SASL_SSL?)", key, listener, proto);
    return 0;
}

/* The first key read only to reach the controllers that is set, or NULL. */
static const char *first_quorum_key(const km_config *c)
{
    const struct { const char *key, *value; } keys[] = {
        {"metadata.quorum.snapshot.dir", c->quorum_snapshot_dir},
        {"controller.listener.names", c->controller_listener_names},
        {"listener.security.protocol.map", c->listener_security_protocol_map},
        {"ssl.truststore.location", c->ssl_truststore_location},
        {"ssl.truststore.type", c->ssl_truststore_type},
        {"ssl.keystore.location", c->ssl_keystore_location},
        {"ssl.keystore.type", c->ssl_keystore_type},
        {"ssl.endpoint.identification.algorithm", c->ssl_endpoint_identification_algorithm},
    };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (keys[i].value)
            return keys[i].key;
    return first_sasl_key(c);
}

int km_config_refuse_quorum_keys(const km_config *c, km_err *err)
{
    const char *key = first_quorum_key(c);
    if (key)
        return km_fail(err, "%s is read only with metadata.source=quorum (to reach the controllers), and "
                            "metadata.source is %s", key, c->metadata_source ? c->metadata_source : "");
    return 0;
}

/* Kafka 3.9 logs in to the controllers as RaftManager.buildNetworkClient sets it up:
 * ChannelBuilders.clientChannelBuilder(protocol, JaasContext.Type.SERVER, config, controller
 * listener, sasl.mechanism.controller.protocol) reads the configs through
 * AbstractConfig.valuesWithPrefixOverride(ListenerName.configPrefix()), which is
 * "listener.name.<listener lower case>.", and
 * JaasContext.loadServerContext(listenerName, mechanism, configs) takes
 * "<mechanism lower case>.sasl.jaas.config" from them: so the key is
 * listener.name.<listener>.<mechanism>.sasl.jaas.config.  (loadServerContext ignores a bare
 * sasl.jaas.config, with a warning, for the static JAAS file's KafkaServer section, which
 * kmproxy does not read: kmproxy takes a bare sasl.jaas.config as that fallback instead.) */
static void listener_jaas_key(const char *listener, km_sasl_mech m, char *out, size_t cap)
{
    snprintf(out, cap, "listener.name.%s.%s.sasl.jaas.config", listener, km_sasl_mech_name(m));
    for (char *p = out; *p; p++)
        *p = (char)tolower((unsigned char)*p);
}

/* The JAAS line to use and its key; any other listener.name.*.sasl.jaas.config (another
 * listener's or mechanism's) or a bare one shadowed by the prefixed one is refused by name. */
static const char *pick_jaas(const km_config *c, const char *want, const char **used, km_err *err)
{
    const char *line = NULL;
    for (int i = 0; i < c->n_listener_jaas; i++) {
        if (strcmp(c->listener_jaas_keys[i], want))
            return km_fail(err, "%s is set but the controller's login is read from %s: nothing would use it",
                           c->listener_jaas_keys[i], want), NULL;
        line = c->listener_jaas_values[i];
    }
    if (line && c->sasl_jaas_config)
        return km_fail(err, "sasl.jaas.config is set but %s is what the controller's login uses: keep one", want),
               NULL;
    *used = line ? want : "sasl.jaas.config";
    line = line ? line : c->sasl_jaas_config;
    if (!line)
        km_fail(err, "the controller's SASL login needs %s (or sasl.jaas.config): Kafka's PlainLoginModule or "
                     "ScramLoginModule with username and password", want);
    return line;
}

static int resolve_sasl(const km_config *c, const char *listener, const char *proto, km_config_quorum_security *out,
                        km_err *err)
{
    const char *mech = c->sasl_mechanism_controller_protocol;
    if (!mech) /* Kafka's default is GSSAPI (KRaftConfigs: SaslConfigs.DEFAULT_SASL_MECHANISM) */
        return km_fail(err, "controller listener %s is %s but sasl.mechanism.controller.protocol is not set: "
                            "Kafka's default, GSSAPI, is not supported (set PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)",
                       listener, proto);
    km_err why;
    if (km_sasl_mech_parse(mech, &out->mechanism, &why))
        return km_fail(err, "sasl.mechanism.controller.protocol=%s: %s", mech, why.msg);
    char want[300];
    const char *key = NULL;
    listener_jaas_key(listener, out->mechanism, want, sizeof want);
    const char *line = pick_jaas(c, want, &key, err);
    if (!line)
        return -1;
    if (km_sasl_parse_jaas(line, out->mechanism, out->username, out->password, &why))
        return km_fail(err, "%s: %s", key, why.msg);
    return 0;
}

void km_config_quorum_security_clear(km_config_quorum_security *s)
{
    explicit_bzero(s->password, sizeof s->password);
}

int km_config_resolve_quorum_security(const km_config *c, km_config_quorum_security *out, km_err *err)
{
    memset(out, 0, sizeof *out);
    const char *names = c->controller_listener_names;
    size_t n = names ? strcspn(names, ",") : 0;
    if (n >= sizeof out->listener)
        return km_fail(err, "controller.listener.names: '%s' is too long", names);
    if (names)
        memcpy(out->listener, names, n);
    char proto[160];
    if (protocol_of(c->listener_security_protocol_map, out->listener[0] ? out->listener : "PLAINTEXT", proto,
                    sizeof proto, err) < 0)
        return -1;
    const char *listener = out->listener[0] ? out->listener : "PLAINTEXT";
    bool sasl = !strcasecmp(proto, "SASL_PLAINTEXT") || !strcasecmp(proto, "SASL_SSL");
    if (strcasecmp(proto, "PLAINTEXT") && strcasecmp(proto, "SSL") && !sasl)
        return km_fail(err, "listener.security.protocol.map: controller listener %s uses %s; the quorum is reached "
                       "over PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL", listener, proto);
    out->tls = !strcasecmp(proto, "SSL") || !strcasecmp(proto, "SASL_SSL");
    if ((sasl ? resolve_sasl(c, listener, proto, out, err) : refuse_sasl_keys(c, listener, proto, err)) < 0)
        return -1;
    const char *alg = c->ssl_endpoint_identification_algorithm;
    if (alg && strcasecmp(alg, "https"))
        return km_fail(err, "ssl.endpoint.identification.algorithm=%s: only https (the server's name is always "
                       "verified)", alg);
    if (pem_only("ssl.truststore.type", c->ssl_truststore_type, err) < 0 ||
        pem_only("ssl.keystore.type", c->ssl_keystore_type, err) < 0 ||
        readable("ssl.truststore.location", c->ssl_truststore_location, err) < 0 ||
        readable("ssl.keystore.location", c->ssl_keystore_location, err) < 0)
        return -1;
    if (!out->tls && (c->ssl_truststore_location || c->ssl_keystore_location))
        return km_fail(err, "ssl.truststore.location/ssl.keystore.location are set but controller listener %s is "
                       "%s (listener.security.protocol.map)", listener, proto);
    out->ca_file = c->ssl_truststore_location;
    out->cert_file = c->ssl_keystore_location;
    return 0;
}
