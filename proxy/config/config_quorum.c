/* The controller listener kmproxy dials as a KRaft observer, resolved from Kafka's own keys:
 * controller.listener.names names it, listener.security.protocol.map gives its protocol
 * (PLAINTEXT, or SSL through tls/), and the ssl.* keys give PEM trust and identity files. */
#include "km_config.h"

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
    return 0;
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
    if (strcasecmp(proto, "PLAINTEXT") && strcasecmp(proto, "SSL"))
        return km_fail(err, "listener.security.protocol.map: controller listener %s uses %s; the quorum is reached "
                       "over PLAINTEXT or SSL only", out->listener[0] ? out->listener : "PLAINTEXT", proto);
    out->tls = !strcasecmp(proto, "SSL");
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
                       "PLAINTEXT (listener.security.protocol.map)", out->listener[0] ? out->listener : "PLAINTEXT");
    out->ca_file = c->ssl_truststore_location;
    out->cert_file = c->ssl_keystore_location;
    return 0;
}
