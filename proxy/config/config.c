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
    const char *doc;  /* its meaning, for docs/configuration.md (`kmproxy config docs`) */
} key_def;

#define STR(k, f, doc) {k, K_STRING, offsetof(km_config, f), 0, 0, doc}
#define INT(k, f, lo, hi, doc) {k, K_INT, offsetof(km_config, f), lo, hi, doc}
#define BOOL(k, f, doc) {k, K_BOOL, offsetof(km_config, f), 0, 0, doc}
#define INT64(k, f, lo, hi, doc) {k, K_INT64, offsetof(km_config, f), lo, hi, doc}

static const key_def KEYS[] = {
    STR("metadata.source", metadata_source,
        "Where the KRaft metadata comes from: `quorum` joins the KRaft quorum as an observer and applies "
        "committed records only; `dir` reads `metadata.dir` (records past the high watermark included: offline "
        "use, tests, the demo). Each refuses the other's keys."),
    STR("metadata.dir", metadata_dir,
        "The `__cluster_metadata-0` directory to follow (read only) with `metadata.source=dir`; required there."),
    STR("controller.quorum.bootstrap.servers", quorum_bootstrap_servers,
        "The controllers to ask, HOST:PORT,... (Kafka's name); this or `controller.quorum.voters` with "
        "`metadata.source=quorum`."),
    STR("controller.quorum.voters", quorum_voters,
        "The voters as ID@HOST:PORT,... (Kafka's name), instead of `controller.quorum.bootstrap.servers`."),
    INT("controller.quorum.request.timeout.ms", quorum_request_timeout_ms, 100, 600000,
        "A request to a controller not answered within this (beyond the Fetch wait of 500 ms) drops the "
        "controller and finds the leader again."),
    STR("metadata.quorum.snapshot.dir", quorum_snapshot_dir,
        "Spool fetched snapshots to a file here and load them once whole; unset: each chunk is checked and "
        "decoded into a staged image as it arrives."),
    STR("controller.listener.names", controller_listener_names,
        "The controller listener (the first name is used), as in the controllers' own config."),
    STR("listener.security.protocol.map", listener_security_protocol_map,
        "LISTENER:PROTOCOL,...: the controller listener's protocol, PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL."),
    STR("ssl.truststore.location", ssl_truststore_location,
        "PEM file of the CA that signed the controllers' certificates (SSL, SASL_SSL)."),
    STR("ssl.truststore.type", ssl_truststore_type,
        "PEM (the only type read)."),
    STR("ssl.keystore.location", ssl_keystore_location,
        "PEM file with a client certificate chain and key, when the controllers require one."),
    STR("ssl.keystore.type", ssl_keystore_type,
        "PEM (the only type read)."),
    STR("ssl.endpoint.identification.algorithm", ssl_endpoint_identification_algorithm,
        "`https`: the controllers' names are always verified (the only value accepted)."),
    STR("sasl.mechanism.controller.protocol", sasl_mechanism_controller_protocol,
        "SASL mechanism towards the controllers: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512; required with a SASL "
        "protocol (GSSAPI and OAUTHBEARER are refused)."),
    STR("sasl.jaas.config", sasl_jaas_config,
        "The controller login (PlainLoginModule or ScramLoginModule line) when no "
        "`listener.name.<listener>.<mechanism>.sasl.jaas.config` is set."),
    STR("cluster.id", cluster_id,
        "The cluster id; overrides `meta.properties` next to the log. ZooKeeper's `/cluster/id` must match it."),
    INT("kraft.controller.id", kraft_controller_id, -1, INT32_MAX,
        "The KRaft controller id written as ControllerId in broker RPCs and into `/controller`; -1: the raft "
        "leader the log's LeaderChange records name."),
    STR("zookeeper.connect", zk_connect,
        "The ZooKeeper ZK-mode brokers read, HOST:PORT[,HOST:PORT][/chroot]: exactly their `zookeeper.connect`. "
        "Required, except for a check-only instance: unset with `brokers.enabled=false` and `verify.interval.ms` "
        "above 0, kmproxy writes no ZooKeeper and sends no broker RPC, it follows the log and checks the brokers "
        "beside Kafka's own migration driver (docs/verify.md)."),
    INT("zookeeper.session.timeout.ms", zk_session_timeout_ms, 2000, 600000,
        "ZooKeeper session timeout (Kafka's default); HA takeovers happen within it."),
    INT("zookeeper.jute.maxbuffer", zk_jute_maxbuffer, 4096, INT32_MAX,
        "The ZooKeeper servers' `jute.maxbuffer` in bytes (ZooKeeper's default, 1 MiB - 1, when unset): the "
        "largest request they take. A znode too large to share a multi (a topic with tens of thousands of "
        "partitions, thousands of ACLs on one resource) is written alone in one, as Kafka does; one that cannot "
        "fit even so (1 KiB of headroom) stops the mirror with exit 2 naming it. Set it to the servers' value."),
    INT("zk.write.behind.max.records", zk_max_pending_records, 1, 10000000,
        "Records waiting for ZooKeeper before kmproxy stops reading the log until they drain "
        "(`kmproxy_zk_blocking_kraft_seconds_total`)."),
    BOOL("zk.force", zk_force,
        "Override the guards before a claim (migration state, image behind `/migration`, a live ZK-mode "
        "controller); never a cluster id mismatch or an empty image."),
    INT64("zk.max.deletes", zk_max_deletes, -1, INT64_MAX,
        "Most znodes one full-sync pass may delete (more: exit 2 before writing); -1: no limit; unset: 0 on the "
        "first sync of a cluster ZK-mode brokers wrote, no limit after."),
    BOOL("brokers.enabled", brokers_enabled,
        "Send LeaderAndIsr, UpdateMetadata and StopReplica to the ZK-mode brokers registered with "
        "IsMigratingZkBroker."),
    STR("broker.listener", broker_listener,
        "The broker listener to dial (the brokers' inter-broker or control-plane listener); unset: the one named "
        "after `broker.security.protocol`."),
    INT("broker.request.timeout.ms", broker_request_timeout_ms, 100, 3600000,
        "A broker request unanswered this long closes the connection; the same request is sent again once "
        "reconnected (controller.socket.timeout.ms)."),
    INT("broker.queue.max.requests", broker_max_queued, 1, 1000000,
        "Requests waiting per broker; beyond it the queue is dropped for a full sync "
        "(`kmproxy_broker_full_syncs_total`)."),
    BOOL("broker.tls.enabled", broker_tls,
        "TLS to the brokers; the same as `broker.security.protocol=SSL`."),
    STR("broker.tls.ca.file", broker_tls_ca,
        "PEM CA that signed the brokers' certificates (required for SSL and SASL_SSL)."),
    STR("broker.tls.cert.file", broker_tls_cert,
        "PEM client certificate, for broker listeners with ssl.client.auth=required."),
    STR("broker.tls.key.file", broker_tls_key,
        "PEM key of `broker.tls.cert.file`."),
    STR("broker.tls.endpoint.identification", broker_tls_endpoint_identification,
        "`true`: check the broker's certificate against the host it registered; `false`: the chain only. Unset: "
        "true."),
    STR("broker.security.protocol", broker_security_protocol,
        "PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL towards the brokers; unset: SSL with "
        "`broker.tls.enabled=true`, else PLAINTEXT."),
    STR("broker.sasl.mechanism", broker_sasl_mechanism,
        "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 towards the brokers; the user needs ClusterAction (a super user)."),
    STR("broker.sasl.jaas.config", broker_sasl_jaas_config,
        "Broker credentials as Kafka's sasl.jaas.config (PlainLoginModule or ScramLoginModule)."),
    STR("broker.sasl.username", broker_sasl_username,
        "Broker SASL user, with `broker.sasl.password.file` (instead of the JAAS line)."),
    STR("broker.sasl.password.file", broker_sasl_password_file,
        "File whose first line is the broker SASL password (reloaded on SIGHUP)."),
    STR("metrics.listen", metrics_listen,
        "HOST:PORT for /metrics, /healthz, /readyz, /status (and POST /capture/on|off); unset: no listener. "
        "Whoever reaches it can read them (docs/security.md)."),
    BOOL("metrics.post.enabled", metrics_post_enabled,
         "Allow POST (POST /capture/on|off) on `metrics.listen`; false: every POST answers 403 (GETs stay open)."),
    STR("metrics.post.token.file", metrics_post_token_file,
        "File whose first line is a bearer token: POST on `metrics.listen` is allowed with "
        "`Authorization: Bearer <token>` only (401 without); setting it enables POST. Read at start."),
    STR("capture.pcapng", capture_pcapng,
        "Capture every frame to and from the ZK-mode brokers into this pcapng file (truncated at start)."),
    STR("capture.jsonl", capture_jsonl,
        "The same capture as JSON lines, one per frame."),
    {"log.level", K_LEVEL, offsetof(km_config, log_level), 0, 0, "error, warn, info or debug."},
    STR("log.file", log_file,
        "Append the log to this file (reopened on SIGHUP); unset: stderr."),
    INT("health.max.lag.records", health_max_lag_records, 0, INT32_MAX,
        "/readyz answers 503 while ZooKeeper is more than this many records behind the log (exported as "
        "`kmproxy_config_health_max_lag_records` for the alert rules)."),
    INT("verify.interval.ms", verify_interval_ms, 0, INT32_MAX,
        "Check every broker against the image (as `kmproxy verify` does) this often, in a thread of its own "
        "(`kmproxy_verify_*` metrics, `/status`); 0: never."),
    INT("verify.jitter.percent", verify_jitter_percent, 0, 100,
        "Each wait between checks is drawn up to this much shorter or longer than `verify.interval.ms`, so that "
        "instances do not ask the brokers at the same moment."),
    INT("verify.timeout.ms", verify_timeout_ms, 100, 600000,
        "The check's timeout per broker (connect and every answer); a broker that does not answer within it is "
        "reported unchecked."),
    INT("verify.partitions.per.cycle", verify_partitions_per_cycle, 0, INT32_MAX,
        "A large cluster checked over several cycles: each check asks the brokers about this many partitions "
        "(topics by name, then partition ids), the next one continues after them, and a full pass spans "
        "several intervals (`kmproxy_verify_pass_*` metrics, `/status`); a finding stands until its partition "
        "is checked again. 0: every partition every cycle."),
    BOOL("ha.enabled", ha_enabled,
        "Elect one active instance among several under `kmproxy.election.path`; the others follow the log and "
        "take over."),
    STR("kmproxy.election.path", election_path,
        "Where the instances elect (inside the chroot); the claim record `active` lives beside it, with or "
        "without HA."),
    STR("password.encoder.secret", password_encoder_secret,
        "The controllers' password.encoder.secret: password-type configs are written encoded as Kafka's "
        "PasswordEncoder does; unset: stored as they are."),
    STR("password.encoder.keyfactory.algorithm", password_encoder_keyfactory_algorithm,
        "PBKDF2WithHmacSHA512 (when unset), ...SHA384, ...SHA256, ...SHA224 or PBKDF2WithHmacSHA1."),
    STR("password.encoder.cipher.algorithm", password_encoder_cipher_algorithm,
        "AES/CBC/PKCS5Padding (when unset) or AES/GCM/NoPadding: the brokers' own."),
    INT("password.encoder.key.length", password_encoder_key_length, 8, INT32_MAX,
        "AES key bits: 128, 192 or 256."),   /* Kafka's atLeast(8) */
    INT("password.encoder.iterations", password_encoder_iterations, 1024, INT32_MAX,
        "PBKDF2 iterations."), /* Kafka's atLeast(1024) */
    BOOL("zookeeper.set.acl", zk_set_acl,
         "Create znodes with Kafka's ACLs (ZkData.defaultAcls: creator-all plus world-read, creator-only on "
         "sensitive paths); needs an authenticated session (SASL or digest)."),
    BOOL("zookeeper.ssl.client.enable", zk_ssl_client_enable,
         "TLS to ZooKeeper (its secureClientPort); never falls back to plaintext."),
    STR("zookeeper.clientCnxnSocket", zk_client_cnxn_socket,
        "Unset or `org.apache.zookeeper.ClientCnxnSocketNetty` (Kafka requires Netty for TLS)."),
    STR("zookeeper.ssl.keystore.location", zk_ssl_keystore_location,
        "Client certificate and key for ZooKeeper TLS (PEM or PKCS12; JKS is refused with the keytool command)."),
    STR("zookeeper.ssl.keystore.password", zk_ssl_keystore_password,
        "Password of `zookeeper.ssl.keystore.location`."),
    STR("zookeeper.ssl.keystore.type", zk_ssl_keystore_type,
        "PEM or PKCS12; unset: guessed from the file extension."),
    STR("zookeeper.ssl.truststore.location", zk_ssl_truststore_location,
        "The CA(s) ZooKeeper's certificate must chain to (PEM or PKCS12); only these are trusted."),
    STR("zookeeper.ssl.truststore.password", zk_ssl_truststore_password,
        "Password of `zookeeper.ssl.truststore.location`."),
    STR("zookeeper.ssl.truststore.type", zk_ssl_truststore_type,
        "PEM or PKCS12; unset: guessed from the file extension."),
    STR("zookeeper.ssl.endpoint.identification.algorithm", zk_ssl_endpoint_identification_algorithm,
        "HTTPS (when unset): ZooKeeper's host name is verified; empty turns that off."),
    STR("java.security.auth.login.config", zk_jaas_file,
        "The brokers' JAAS file: its `Client` section (DigestLoginModule: SASL DIGEST-MD5; Krb5LoginModule with a "
        "keytab: GSSAPI) authenticates to ZooKeeper."),
    STR("zookeeper.sasl.clientconfig", zk_sasl_clientconfig,
        "The JAAS section to read (when unset: Client)."),
    BOOL("zookeeper.sasl.client", zk_sasl_client,
         "false ignores the JAAS file for ZooKeeper (default true)."),
    STR("zookeeper.sasl.client.username", zk_sasl_client_username,
        "ZooKeeper's SASL service name (when unset: zookeeper)."),
    STR("zookeeper.auth.digest.file", zk_auth_digest_file,
        "File whose first line is `user:password` for ZooKeeper digest auth (added before any request)."),
};
#define N_KEYS (sizeof KEYS / sizeof KEYS[0])

void km_config_defaults(km_config *c)
{
    memset(c, 0, sizeof *c);
    c->kraft_controller_id = -1;
    c->zk_session_timeout_ms = 18000;      /* Kafka's zookeeper.session.timeout.ms */
    c->zk_jute_maxbuffer = 0xfffff;        /* ZooKeeper's jute.maxbuffer default */
    c->zk_max_pending_records = 10000;
    c->zk_max_deletes = KM_CONFIG_UNSET;
    c->brokers_enabled = true;
    c->broker_request_timeout_ms = 30000;  /* Kafka's controller.socket.timeout.ms */
    c->broker_max_queued = 1000;
    c->log_level = strdup("info");
    c->health_max_lag_records = 1000;
    c->verify_interval_ms = 60000;
    c->verify_jitter_percent = 10;
    c->verify_timeout_ms = 10000;
    c->election_path = strdup("/kmproxy/election");
    c->metadata_source = strdup("quorum"); /* only committed records (issue 11); dir is for offline use */
    c->quorum_request_timeout_ms = 2000;   /* Kafka's controller.quorum.request.timeout.ms */
    c->password_encoder_key_length = 128;  /* Kafka's password.encoder.* defaults */
    c->password_encoder_iterations = 4096;
    c->zk_sasl_client = true;              /* ZooKeeper's zookeeper.sasl.client default */
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

static int set_value(km_config *c, const char *key, const char *value, const char *where, km_err *err)
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

static int given_index(const km_config *c, const char *key)
{
    for (int i = 0; i < c->n_given; i++)
        if (!strcmp(c->given_keys[i], key))
            return i;
    return -1;
}

/* Remembers key=value as given (the later value of a key replaces the earlier). */
static int remember(km_config *c, const char *key, const char *value, km_err *err)
{
    char *v = strdup(value);
    int i = given_index(c, key);
    if (v && i >= 0) {
        explicit_bzero(c->given_values[i], strlen(c->given_values[i]));
        free(c->given_values[i]);
        c->given_values[i] = v;
        return 0;
    }
    char **keys = v ? realloc(c->given_keys, (size_t)(c->n_given + 1) * sizeof *keys) : NULL;
    if (keys)
        c->given_keys = keys;
    char **values = keys ? realloc(c->given_values, (size_t)(c->n_given + 1) * sizeof *values) : NULL;
    if (values)
        c->given_values = values;
    char *k = values ? strdup(key) : NULL;
    if (!k) {
        free(v);
        return km_fail(err, "config: out of memory");
    }
    c->given_keys[c->n_given] = k;
    c->given_values[c->n_given++] = v;
    return 0;
}

int km_config_set(km_config *c, const char *key, const char *value, const char *where, km_err *err)
{
    return set_value(c, key, value, where, err) ? -1 : remember(c, key, value, err);
}

void km_config_each_change(const km_config *a, const km_config *b, km_config_change_fn fn, void *ud)
{
    for (int i = 0; i < a->n_given; i++) {
        int j = given_index(b, a->given_keys[i]);
        if (j < 0 || strcmp(a->given_values[i], b->given_values[j]))
            fn(a->given_keys[i], ud);
    }
    for (int j = 0; j < b->n_given; j++)
        if (given_index(a, b->given_keys[j]) < 0)
            fn(b->given_keys[j], ud);
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

/* Keys only a ZooKeeper writer reads: a check-only instance refuses them rather than ignore them. */
static bool is_writer_key(const char *key)
{
    static const char *const prefixes[] = {"zookeeper.", "zk.", "password.encoder.", "kmproxy.election.path",
                                           "java.security.auth.login.config"};
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++)
        if (!strncmp(key, prefixes[i], strlen(prefixes[i])))
            return true;
    return false;
}

/* No zookeeper.connect: a check-only instance (docs/verify.md), beside Kafka's own migration driver.  It writes
 * no ZooKeeper and sends no broker RPC (those carry the ZooKeeper controller epoch of a claim); it follows the
 * log and checks the brokers, so the check must be on and nothing may ask for a writer's work. */
static int validate_check_only(const km_config *c, km_err *err)
{
    if (c->brokers_enabled)
        return km_fail(err, "zookeeper.connect is required (HOST:PORT[,HOST:PORT][/chroot]) while brokers.enabled=true "
                            "(the default): broker RPCs carry the ZooKeeper controller epoch of kmproxy's claim. A "
                            "check-only instance sets brokers.enabled=false and verify.interval.ms (docs/verify.md)");
    if (c->verify_interval_ms <= 0)
        return km_fail(err, "verify.interval.ms=0 without zookeeper.connect: a check-only instance (no "
                            "zookeeper.connect, brokers.enabled=false) does nothing but the broker check");
    if (c->ha_enabled)
        return km_fail(err, "ha.enabled needs zookeeper.connect (the instances elect there); a check-only instance "
                            "(no zookeeper.connect) has no election");
    for (int i = 0; i < c->n_given; i++)
        if (is_writer_key(c->given_keys[i]))
            return km_fail(err, "%s is read only with zookeeper.connect; without it this is a check-only instance "
                                "that writes no ZooKeeper", c->given_keys[i]);
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
    /* HA or not: the claim record lives beside it (daemon_ha.c) */
    if (!c->election_path || c->election_path[0] != '/' || c->election_path[strlen(c->election_path) - 1] == '/')
        return km_fail(err, "kmproxy.election.path must be an absolute ZooKeeper path, not '%s'",
                       c->election_path ? c->election_path : "");
    if (c->zk_connect ? validate_chroot(c->zk_connect, err) : validate_check_only(c, err))
        return -1;
    if (km_inline_config_enabled(&c->proxy) && km_inline_config_validate(&c->proxy, err))
        return -1;
    km_config_zk_security zs;
    rc = km_config_resolve_zk_security(c, &zs, err);
    if (!rc)
        rc = km_zk_security_check(&zs.sec, err);
    km_config_zk_security_clear(&zs);
    if (rc)
        return -1;
    return validate_password_encoder(c, err);
}

static void key_type(const key_def *k, char *out, size_t size)
{
    switch (k->kind) {
    case K_STRING: snprintf(out, size, "string"); break;
    case K_BOOL: snprintf(out, size, "boolean"); break;
    case K_LEVEL: snprintf(out, size, "error, warn, info or debug"); break;
    case K_INT:
    case K_INT64: snprintf(out, size, "integer in [%lld, %lld]", (long long)k->lo, (long long)k->hi); break;
    }
}

/* The default as the parser would have set it: km_config_defaults is the one source. */
static void key_default(const key_def *k, const km_config *defaults, char *out, size_t size)
{
    const void *slot = (const char *)defaults + k->offset;
    const char *text = k->kind == K_STRING || k->kind == K_LEVEL ? *(char *const *)slot : NULL;
    int64_t v = k->kind == K_INT ? *(const int32_t *)slot : k->kind == K_INT64 ? *(const int64_t *)slot : 0;
    if (k->kind == K_BOOL)
        snprintf(out, size, "%s", *(const bool *)slot ? "true" : "false");
    else if (v == KM_CONFIG_UNSET && k->lo > KM_CONFIG_UNSET) /* a marker, not a value it could take */
        snprintf(out, size, "%s", "");
    else if (k->kind == K_INT || k->kind == K_INT64)
        snprintf(out, size, "%lld", (long long)v);
    else
        snprintf(out, size, "%s", text ? text : "");
}

void km_config_each_key(km_config_key_fn fn, void *ud)
{
    km_config defaults;
    km_config_defaults(&defaults);
    char type[64], def[256];
    for (size_t i = 0; i < N_KEYS; i++) {
        key_type(&KEYS[i], type, sizeof type);
        key_default(&KEYS[i], &defaults, def, sizeof def);
        fn(KEYS[i].key, type, def, KEYS[i].doc, ud);
    }
    /* Parsed by set_listener_jaas, not the table. */
    fn("listener.name.<listener>.<mechanism>.sasl.jaas.config", "string", "",
       "The controller login for that listener and mechanism, both in lower case, as Kafka's "
       "JaasContext.loadServerContext reads it (up to 8 such keys); preferred to `sasl.jaas.config`. One for "
       "another listener or mechanism is refused by name.", ud);
    km_config_free(&defaults);
}

void km_config_free(km_config *c)
{
    if (c->password_encoder_secret)
        explicit_bzero(c->password_encoder_secret, strlen(c->password_encoder_secret));
    char *secrets[] = { c->broker_sasl_jaas_config, c->sasl_jaas_config, c->zk_ssl_keystore_password,
                        c->zk_ssl_truststore_password };
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
    for (int i = 0; i < c->n_given; i++) {
        explicit_bzero(c->given_values[i], strlen(c->given_values[i]));
        free(c->given_values[i]);
        free(c->given_keys[i]);
    }
    free(c->given_values);
    free(c->given_keys);
    memset(c, 0, sizeof *c);
}
