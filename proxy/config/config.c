/* Kafka-style .properties parsing for the daemon, strict about every key. */
#include "km_config.h"
#include "km_zkbridge.h" /* checks the password.encoder.* combination */

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum key_kind { K_STRING, K_INT, K_BOOL, K_LEVEL, K_INT64 } key_kind;

typedef struct key_def {
    const char *key;
    key_kind kind;
    size_t offset;
    int64_t lo, hi;   /* K_INT bounds */
} key_def;

#define STR(k, f) {k, K_STRING, offsetof(km_config, f), 0, 0}
#define INT(k, f, lo, hi) {k, K_INT, offsetof(km_config, f), lo, hi}
#define BOOL(k, f) {k, K_BOOL, offsetof(km_config, f), 0, 0}
#define INT64(k, f, lo, hi) {k, K_INT64, offsetof(km_config, f), lo, hi}

static const key_def KEYS[] = {
    STR("metadata.source", metadata_source),
    STR("metadata.dir", metadata_dir),
    STR("controller.quorum.bootstrap.servers", quorum_bootstrap_servers),
    STR("controller.quorum.voters", quorum_voters),
    INT("controller.quorum.request.timeout.ms", quorum_request_timeout_ms, 100, 600000),
    STR("metadata.quorum.snapshot.dir", quorum_snapshot_dir),
    STR("controller.listener.names", controller_listener_names),
    STR("listener.security.protocol.map", listener_security_protocol_map),
    STR("ssl.truststore.location", ssl_truststore_location),
    STR("ssl.truststore.type", ssl_truststore_type),
    STR("ssl.keystore.location", ssl_keystore_location),
    STR("ssl.keystore.type", ssl_keystore_type),
    STR("ssl.endpoint.identification.algorithm", ssl_endpoint_identification_algorithm),
    STR("sasl.mechanism.controller.protocol", sasl_mechanism_controller_protocol),
    STR("sasl.jaas.config", sasl_jaas_config),
    STR("cluster.id", cluster_id),
    INT("kraft.controller.id", kraft_controller_id, -1, INT32_MAX),
    STR("zookeeper.connect", zk_connect),
    INT("zookeeper.session.timeout.ms", zk_session_timeout_ms, 2000, 600000),
    INT("zk.write.behind.max.records", zk_max_pending_records, 1, 10000000),
    BOOL("zk.force", zk_force),
    INT64("zk.max.deletes", zk_max_deletes, -1, INT64_MAX),
    BOOL("brokers.enabled", brokers_enabled),
    STR("broker.listener", broker_listener),
    INT("broker.request.timeout.ms", broker_request_timeout_ms, 100, 3600000),
    INT("broker.queue.max.requests", broker_max_queued, 1, 1000000),
    BOOL("broker.tls.enabled", broker_tls),
    STR("broker.tls.ca.file", broker_tls_ca),
    STR("broker.tls.cert.file", broker_tls_cert),
    STR("broker.tls.key.file", broker_tls_key),
    STR("broker.tls.endpoint.identification", broker_tls_endpoint_identification),
    STR("broker.security.protocol", broker_security_protocol),
    STR("broker.sasl.mechanism", broker_sasl_mechanism),
    STR("broker.sasl.jaas.config", broker_sasl_jaas_config),
    STR("broker.sasl.username", broker_sasl_username),
    STR("broker.sasl.password.file", broker_sasl_password_file),
    STR("metrics.listen", metrics_listen),
    STR("capture.pcapng", capture_pcapng),
    STR("capture.jsonl", capture_jsonl),
    {"log.level", K_LEVEL, offsetof(km_config, log_level), 0, 0},
    STR("log.file", log_file),
    INT("health.max.lag.records", health_max_lag_records, 0, INT32_MAX),
    BOOL("ha.enabled", ha_enabled),
    STR("kmproxy.election.path", election_path),
    STR("password.encoder.secret", password_encoder_secret),
    STR("password.encoder.keyfactory.algorithm", password_encoder_keyfactory_algorithm),
    STR("password.encoder.cipher.algorithm", password_encoder_cipher_algorithm),
    INT("password.encoder.key.length", password_encoder_key_length, 8, INT32_MAX),   /* Kafka's atLeast(8) */
    INT("password.encoder.iterations", password_encoder_iterations, 1024, INT32_MAX), /* Kafka's atLeast(1024) */
};
#define N_KEYS (sizeof KEYS / sizeof KEYS[0])

void km_config_defaults(km_config *c)
{
    memset(c, 0, sizeof *c);
    c->kraft_controller_id = -1;
    c->zk_session_timeout_ms = 18000;      /* Kafka's zookeeper.session.timeout.ms */
    c->zk_max_pending_records = 10000;
    c->zk_max_deletes = KM_CONFIG_UNSET;
    c->brokers_enabled = true;
    c->broker_request_timeout_ms = 30000;  /* Kafka's controller.socket.timeout.ms */
    c->broker_max_queued = 1000;
    c->log_level = strdup("info");
    c->health_max_lag_records = 1000;
    c->election_path = strdup("/kmproxy/election");
    c->metadata_source = strdup("quorum"); /* only committed records (issue 11); dir is for offline use */
    c->quorum_request_timeout_ms = 2000;   /* Kafka's controller.quorum.request.timeout.ms */
    c->password_encoder_key_length = 128;  /* Kafka's password.encoder.* defaults */
    c->password_encoder_iterations = 4096;
    km_inline_config_defaults(&c->proxy);
}

static int set_string(char **slot, const char *value, const char *where, const char *key, km_err *err)
{
    char *copy = strdup(value);
    if (!copy)
        return km_fail(err, "%s: %s: out of memory", where, key);
    free(*slot);
    *slot = *value ? copy : (free(copy), NULL);
    return 0;
}

static int parse_value(const key_def *k, km_config *c, const char *value, const char *where, km_err *err)
{
    void *slot = (char *)c + k->offset;
    switch (k->kind) {
    case K_STRING: return set_string(slot, value, where, k->key, err);
    case K_LEVEL:
        if (strcmp(value, "error") && strcmp(value, "warn") && strcmp(value, "info") && strcmp(value, "debug"))
            return km_fail(err, "%s: %s must be error, warn, info or debug, not '%s'", where, k->key, value);
        return set_string(slot, value, where, k->key, err);
    case K_BOOL:
        if (strcmp(value, "true") && strcmp(value, "false"))
            return km_fail(err, "%s: %s must be true or false, not '%s'", where, k->key, value);
        *(bool *)slot = !strcmp(value, "true");
        return 0;
    case K_INT:
    case K_INT64: {
        char *end;
        errno = 0;
        long long v = strtoll(value, &end, 10);
        if (!*value || *end || errno || v < k->lo || v > k->hi)
            return km_fail(err, "%s: %s must be an integer in [%lld, %lld], not '%s'", where, k->key,
                           (long long)k->lo, (long long)k->hi, value);
        if (k->kind == K_INT64)
            *(int64_t *)slot = v;
        else
            *(int32_t *)slot = (int32_t)v;
        return 0;
    }
    }
    return km_fail(err, "%s: %s: unknown kind", where, k->key);
}

static const key_def *find_key(const char *key)
{
    for (size_t i = 0; i < N_KEYS; i++)
        if (!strcmp(KEYS[i].key, key))
            return &KEYS[i];
    return NULL;
}

static bool is_listener_jaas_key(const char *key)
{
    static const char prefix[] = "listener.name.", suffix[] = ".sasl.jaas.config";
    size_t n = strlen(key);
    return !strncmp(key, prefix, sizeof prefix - 1) && n > sizeof prefix + sizeof suffix &&
           !strcmp(key + n - (sizeof suffix - 1), suffix);
}

static int find_listener_jaas(const km_config *c, const char *key)
{
    for (int i = 0; i < c->n_listener_jaas; i++)
        if (!strcmp(c->listener_jaas_keys[i], key))
            return i;
    return -1;
}

/* listener.name.<listener>.<mechanism>.sasl.jaas.config: which ones are used is decided once
 * the controller listener and mechanism are known (config_quorum.c). */
static int set_listener_jaas(km_config *c, const char *key, const char *value, const char *where, km_err *err)
{
    int i = find_listener_jaas(c, key);
    if (i < 0 && c->n_listener_jaas == KM_CONFIG_LISTENER_JAAS_MAX)
        return km_fail(err, "%s: %s: more than %d listener.name.*.sasl.jaas.config keys", where, key,
                       KM_CONFIG_LISTENER_JAAS_MAX);
    if (i < 0) {
        if (!(c->listener_jaas_keys[c->n_listener_jaas] = strdup(key)))
            return km_fail(err, "%s: %s: out of memory", where, key);
        i = c->n_listener_jaas++;
    } else if (c->listener_jaas_values[i]) {
        explicit_bzero(c->listener_jaas_values[i], strlen(c->listener_jaas_values[i]));
    }
    return set_string(&c->listener_jaas_values[i], value, where, key, err);
}

int km_config_set(km_config *c, const char *key, const char *value, const char *where, km_err *err)
{
    if (is_listener_jaas_key(key))
        return set_listener_jaas(c, key, value, where, err);
    /* Empty would mean "no encoding" here but an empty secret to Kafka: refuse the ambiguity. */
    if (!strcmp(key, "password.encoder.secret") && !*value)
        return km_fail(err, "%s: password.encoder.secret is empty: remove the line to store passwords as they are",
                       where);
    if (!strncmp(key, "proxy.", 6))
        return km_inline_config_set(&c->proxy, key, value, where, err);
    const key_def *k = find_key(key);
    return k ? parse_value(k, c, value, where, err) : km_fail(err, "%s: unknown key '%s'", where, key);
}

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r' || s[n - 1] == '\n'))
        s[--n] = '\0';
    return s;
}

/* A key given twice in one file: which line was meant is anyone's guess, so neither is taken. */
static int once(const km_config *c, int *first_line, const char *key, const char *path, int lineno, km_err *err)
{
    if (is_listener_jaas_key(key) && find_listener_jaas(c, key) >= 0)
        return km_fail(err, "%s:%d: %s is given twice: keep one", path, lineno, key);
    const key_def *k = find_key(key);
    if (!k)
        return 0; /* km_config_set names it */
    int *first = &first_line[k - KEYS];
    if (*first)
        return km_fail(err, "%s:%d: %s is given twice, at lines %d and %d: keep one", path, lineno, key, *first,
                       lineno);
    *first = lineno;
    return 0;
}

int km_config_load(km_config *c, const char *path, km_err *err)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return km_fail(err, "%s: cannot open: %s", path, strerror(errno));
    char line[4096], where[512];
    int rc = 0, first_line[N_KEYS] = {0};
    for (int lineno = 1; !rc && fgets(line, sizeof line, f); lineno++) {
        snprintf(where, sizeof where, "%s:%d", path, lineno);
        if (!strchr(line, '\n') && !feof(f)) {
            rc = km_fail(err, "%s: line longer than %zu bytes", where, sizeof line - 1);
            break;
        }
        char *s = trim(line);
        if (!*s || *s == '#' || *s == '!')
            continue;
        char *eq = strpbrk(s, "=:");
        if (!eq) {
            rc = km_fail(err, "%s: expected key=value, got '%s'", where, s);
            break;
        }
        *eq = '\0';
        char *key = trim(s);
        rc = once(c, first_line, key, path, lineno, err) ? -1 : km_config_set(c, key, trim(eq + 1), where, err);
    }
    if (!rc && ferror(f))
        rc = km_fail(err, "%s: read error: %s", path, strerror(errno));
    fclose(f);
    return rc;
}

/* Algorithms and lengths the encoder cannot use stop start-up here, not at the first password.
 * Without the secret: the check needs no key derivation. */
static int validate_password_encoder(const km_config *c, km_err *err)
{
    km_zk_password_config pc = {.keyfactory_algorithm = c->password_encoder_keyfactory_algorithm,
                                .cipher_algorithm = c->password_encoder_cipher_algorithm,
                                .key_length = c->password_encoder_key_length,
                                .iterations = c->password_encoder_iterations};
    km_zk_pwenc *e = km_zk_pwenc_new(&pc, err);
    km_zk_pwenc_free(e);
    return e ? 0 : -1;
}

/* The chroot of zookeeper.connect, by ZooKeeper's own rules: ConnectStringParser takes a lone "/"
 * as no chroot and gives the rest to PathUtils.validatePath, which refuses a trailing '/', an
 * empty node name ("//"), "." and ".." as node names and control characters. The C client would
 * otherwise accept "/kafka/" and every request under it would fail, forever. */
static int validate_chroot(const char *connect, km_err *err)
{
    const char *p = strchr(connect, '/');
    if (!p || !p[1])
        return 0;
    const char *why = NULL;
    size_t n = strlen(p);
    if (p[n - 1] == '/')
        why = "must not end with '/'";
    for (size_t i = 1; !why && i < n; i++) {
        unsigned char ch = (unsigned char)p[i];
        bool node_start = p[i - 1] == '/', node_end = i + 1 == n || p[i + 1] == '/';
        if (ch == '/' && node_start)
            why = "has an empty node name ('//')";
        else if (ch == '.' && node_start && node_end)
            why = "has '.' as a node name";
        else if (ch == '.' && p[i - 1] == '.' && i >= 2 && p[i - 2] == '/' && node_end)
            why = "has '..' as a node name";
        else if (ch < 0x20 || ch == 0x7f)
            why = "has a control character";
    }
    if (why)
        return km_fail(err, "zookeeper.connect=%s: the chroot '%s' %s (ZooKeeper's path rules)", connect, p, why);
    return 0;
}

int km_config_validate(const km_config *c, km_err *err)
{
    bool quorum = c->metadata_source && !strcmp(c->metadata_source, "quorum");
    if (!quorum && (!c->metadata_source || strcmp(c->metadata_source, "dir")))
        return km_fail(err, "metadata.source must be quorum or dir, not '%s'", c->metadata_source ? c->metadata_source : "");
    if (quorum && !c->quorum_bootstrap_servers && !c->quorum_voters)
        return km_fail(err, "metadata.source=quorum needs controller.quorum.bootstrap.servers or controller.quorum.voters");
    if (!quorum && !c->metadata_dir)
        return km_fail(err, "metadata.dir is required with metadata.source=dir (the __cluster_metadata-0 directory)");
    /* A key the chosen source would not read is refused, never silently ignored. */
    if (quorum && c->metadata_dir)
        return km_fail(err, "metadata.dir is read only with metadata.source=dir; the source is quorum (the default): "
                            "set metadata.source=dir to follow the directory");
    if (!quorum && (c->quorum_bootstrap_servers || c->quorum_voters))
        return km_fail(err, "controller.quorum.* is read only with metadata.source=quorum, and metadata.source is dir");
    km_config_quorum_security qs;
    int qrc = quorum ? km_config_resolve_quorum_security(c, &qs, err) : km_config_refuse_quorum_keys(c, err);
    if (quorum)
        km_config_quorum_security_clear(&qs);
    if (qrc < 0)
        return -1;
    km_config_broker_security sec;
    int rc = km_config_resolve_broker_security(c, &sec, err);
    km_config_broker_security_clear(&sec);
    if (rc)
        return -1;
    if (c->ha_enabled && (!c->election_path || c->election_path[0] != '/' ||
                          c->election_path[strlen(c->election_path) - 1] == '/'))
        return km_fail(err, "kmproxy.election.path must be an absolute ZooKeeper path, not '%s'",
                       c->election_path ? c->election_path : "");
    if (!c->zk_connect)  /* broker RPCs carry the ZooKeeper controller epoch our claim produces */
        return km_fail(err, "zookeeper.connect is required (HOST:PORT[,HOST:PORT][/chroot])");
    if (validate_chroot(c->zk_connect, err))
        return -1;
    if (km_inline_config_enabled(&c->proxy) && km_inline_config_validate(&c->proxy, err))
        return -1;
    return validate_password_encoder(c, err);
}

void km_config_free(km_config *c)
{
    if (c->password_encoder_secret)
        explicit_bzero(c->password_encoder_secret, strlen(c->password_encoder_secret));
    char *secrets[] = { c->broker_sasl_jaas_config, c->sasl_jaas_config };
    for (size_t i = 0; i < sizeof secrets / sizeof secrets[0]; i++)
        if (secrets[i])
            explicit_bzero(secrets[i], strlen(secrets[i]));
    for (int i = 0; i < c->n_listener_jaas; i++) {
        if (c->listener_jaas_values[i])
            explicit_bzero(c->listener_jaas_values[i], strlen(c->listener_jaas_values[i]));
        free(c->listener_jaas_values[i]);
        free(c->listener_jaas_keys[i]);
    }
    for (size_t i = 0; i < N_KEYS; i++)
        if (KEYS[i].kind == K_STRING || KEYS[i].kind == K_LEVEL)
            free(*(char **)((char *)c + KEYS[i].offset));
    km_inline_config_free(&c->proxy);
    memset(c, 0, sizeof *c);
}
