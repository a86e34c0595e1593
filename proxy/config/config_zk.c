/* The ZooKeeper client's security from Kafka's broker keys: zookeeper.ssl.* (KafkaConfig's
 * ZkSslConfigToSystemPropertyMap), the JAAS Client section (java.security.auth.login.config,
 * zookeeper.sasl.clientconfig, zookeeper.sasl.client) and zookeeper.set.acl. */
#include "km_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The file's first line, without its newline. */
static char *read_line(const char *key, const char *path, km_err *err)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return km_fail(err, "%s: cannot open %s", key, path), NULL;
    char buf[1024];
    char *line = fgets(buf, sizeof buf, f) ? strdup(buf) : NULL;
    fclose(f);
    explicit_bzero(buf, sizeof buf);
    if (line)
        line[strcspn(line, "\r\n")] = '\0';
    if (!line || !strchr(line, ':') || line[0] == ':') {
        free(line);
        return km_fail(err, "%s: %s must hold one line user:password", key, path), NULL;
    }
    return line;
}

static int resolve_tls(const km_config *c, km_zk_security *s, km_err *err)
{
    const char *sock = c->zk_client_cnxn_socket;
    if (sock && strcmp(sock, "org.apache.zookeeper.ClientCnxnSocketNetty") &&
        strcmp(sock, "org.apache.zookeeper.ClientCnxnSocketNIO"))
        return km_fail(err, "zookeeper.clientCnxnSocket: unknown socket '%s'", sock);
    if (!c->zk_ssl_client_enable)
        return 0;
    /* Kafka (KafkaConfig.zkClientConfigFromKafkaConfig) needs the Netty socket for TLS; NIO would
     * be a plaintext session, which is never what was meant. */
    if (sock && strcmp(sock, "org.apache.zookeeper.ClientCnxnSocketNetty"))
        return km_fail(err, "zookeeper.ssl.client.enable=true needs zookeeper.clientCnxnSocket="
                       "org.apache.zookeeper.ClientCnxnSocketNetty (or unset), not %s", sock);
    const char *alg = c->zk_ssl_endpoint_identification_algorithm;
    if (alg && strcasecmp(alg, "HTTPS"))
        return km_fail(err, "zookeeper.ssl.endpoint.identification.algorithm: HTTPS or empty, not '%s'", alg);
    s->tls = true;
    s->verify_host = c->zk_ssl_endpoint_identification_algorithm == NULL ||
                     !strcasecmp(c->zk_ssl_endpoint_identification_algorithm, "HTTPS");
    s->keystore_location = c->zk_ssl_keystore_location;
    s->keystore_password = c->zk_ssl_keystore_password;
    s->keystore_type = c->zk_ssl_keystore_type;
    s->truststore_location = c->zk_ssl_truststore_location;
    s->truststore_password = c->zk_ssl_truststore_password;
    s->truststore_type = c->zk_ssl_truststore_type;
    return 0;
}

int km_config_resolve_zk_security(const km_config *c, km_config_zk_security *out, km_err *err)
{
    memset(out, 0, sizeof *out);
    km_zk_security *s = &out->sec;
    s->set_acl = c->zk_set_acl;
    s->sasl_service = c->zk_sasl_client_username;
    if (resolve_tls(c, s, err))
        return -1;
    /* ZooKeeper's client uses SASL when zookeeper.sasl.client is true and the JAAS file is set. */
    if (c->zk_jaas_file && c->zk_sasl_client &&
        km_zk_security_from_jaas(s, c->zk_jaas_file, c->zk_sasl_clientconfig, out->owned, err))
        return -1;
    if (c->zk_auth_digest_file && !(s->digest_auth = out->owned[2] =
                                        read_line("zookeeper.auth.digest.file", c->zk_auth_digest_file, err)))
        return -1;
    return 0;
}

void km_config_zk_security_clear(km_config_zk_security *s)
{
    for (size_t i = 0; i < sizeof s->owned / sizeof s->owned[0]; i++) {
        if (s->owned[i])
            explicit_bzero(s->owned[i], strlen(s->owned[i]));
        free(s->owned[i]);
    }
    memset(s, 0, sizeof *s);
}
