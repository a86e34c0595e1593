/* The proxy.* configuration keys: one strict table plus the proxy.broker.<id>.* family. */
#include "km_inline.h"

#include <errno.h>
#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef struct int_key {
    const char *key;
    size_t offset;
    int64_t lo, hi;
    const char *doc; /* its meaning, for docs/configuration.md */
} int_key;

static const int_key INT_KEYS[] = {
    {"proxy.port.base", offsetof(km_inline_config, port_base), 1, 65535,
     "Dynamic routes: broker <id> is served on this + <id>, its listener opened the moment a response first names "
     "it; needs `proxy.advertised.host`. Pick it below the kernel's ephemeral port range. -1: no dynamic listeners."},
    {"proxy.max.frame.bytes", offsetof(km_inline_config, max_frame_bytes), 1024, INT32_MAX,
     "Largest request frame a client may send (Kafka's socket.request.max.bytes)."},
    {"proxy.max.connections", offsetof(km_inline_config, max_connections), 1, 1000000,
     "Client connections at once over all listeners; more are refused."},
    {"proxy.max.connections.per.ip", offsetof(km_inline_config, max_connections_per_ip), 1, 1000000,
     "Client connections at once from one IP address."},
    {"proxy.idle.timeout.ms", offsetof(km_inline_config, idle_timeout_ms), 10, INT32_MAX,
     "A client with nothing in flight and no traffic for this long is closed (Kafka's connections.max.idle.ms)."},
    {"proxy.request.timeout.ms", offsetof(km_inline_config, request_timeout_ms), 10, INT32_MAX,
     "An upstream that does not answer the oldest request within this, counted from when the request was sent or "
     "the answer before it came, plus the time the request itself lets the broker hold it (Fetch MaxWaitMs, "
     "JoinGroup's rebalance timeout, also for the SyncGroup after it, Produce TimeoutMs with acks=all, the "
     "TimeoutMs of CreateTopics, DeleteTopics, CreatePartitions, DeleteRecords, ElectLeaders and "
     "AlterPartitionReassignments), has its client cut."},
    {"proxy.upstream.hold.ms", offsetof(km_inline_config, upstream_hold_ms), 0, INT32_MAX,
     "While a client's broker cannot be reached (connection refused or timed out), the client's connection is "
     "held and the broker dialled again with backoff, for at most this long; then the client is closed. The "
     "client's requests wait unread meanwhile. 0: close the client at the first failed dial."},
    {"proxy.threads", offsetof(km_inline_config, threads), 0, 256,
     "Worker threads carrying client connections, each with its own event loop (no lock on the data path); "
     "the main loop accepts and hands each new client to the worker with the fewest. 0: one per CPU the "
     "process may run on at start (its affinity: taskset, a container's cpuset; a CPU quota is not seen)."},
    {"proxy.discovery.interval.ms", offsetof(km_inline_config, discovery_interval_ms), 0, INT32_MAX,
     "At start and then every this long, the proxy asks the bootstrap upstream for the cluster's brokers "
     "(Metadata) and opens their dynamic listeners or SNI routes, so that several instances with the same config "
     "serve every broker before any client names it to them (set it when clients may reach a broker through "
     "another instance than the one they bootstrapped from). 0: routes are learned from client traffic only."},
    {"proxy.request.read.timeout.ms", offsetof(km_inline_config, request_read_timeout_ms), 10, INT32_MAX,
     "Once a request's first byte arrived, the client has this long to send the rest before it is cut (a client "
     "trickling a request, slowloris, holds its slot no longer); the clock stops while the proxy holds the client "
     "back."},
    {"proxy.listen.backlog", offsetof(km_inline_config, listen_backlog), 1, 65535,
     "listen(2) backlog of every proxy listener (the kernel caps it at net.core.somaxconn)."},
    {"proxy.connection.buffer.bytes", offsetof(km_inline_config, buffer_bytes), 4096, 1 << 30,
     "Bytes queued towards one side before the proxy stops reading the other (back-pressure)."},
};

typedef struct str_key {
    const char *key;
    size_t offset;
    bool address; /* HOST:PORT */
    const char *doc;
} str_key;

static const str_key STR_KEYS[] = {
    {"proxy.bootstrap.listen", offsetof(km_inline_config, bootstrap_listen), true,
     "Static route: HOST:PORT of the bootstrap listener (port 0: any free port)."},
    {"proxy.bootstrap.upstream", offsetof(km_inline_config, bootstrap_upstream), true,
     "HOST:PORT the bootstrap listener forwards to (with SNI, where unknown names go)."},
    {"proxy.listen.host", offsetof(km_inline_config, listen_host), false,
     "Dynamic routes: the address their listeners bind; unset: every address."},
    {"proxy.advertised.host", offsetof(km_inline_config, advertised_host), false,
     "The host clients are told for the proxy's listeners."},
    {"proxy.client.ssl.certificate.location", offsetof(km_inline_config, client_ssl_cert), false,
     "PEM certificate chain: TLS towards clients is on when set (TLS 1.2 at least; reloaded on SIGHUP)."},
    {"proxy.client.ssl.key.location", offsetof(km_inline_config, client_ssl_key), false,
     "PEM key of the client-side certificate."},
    {"proxy.client.ssl.ca.location", offsetof(km_inline_config, client_ssl_ca), false,
     "PEM CA that client certificates are checked against."},
    {"proxy.upstream.ssl.certificate.location", offsetof(km_inline_config, upstream_ssl_cert), false,
     "PEM client certificate towards the brokers."},
    {"proxy.upstream.ssl.key.location", offsetof(km_inline_config, upstream_ssl_key), false,
     "PEM key of that certificate."},
    {"proxy.upstream.ssl.ca.location", offsetof(km_inline_config, upstream_ssl_ca), false,
     "PEM CA that verifies the brokers' certificates; unset: the system store."},
    {"proxy.sni.listen", offsetof(km_inline_config, sni_listen), true,
     "HOST:PORT of one TLS listener for every broker: the SNI name <prefix><id><suffix> picks broker <id>; excludes "
     "`proxy.port.base`."},
    {"proxy.sni.host.prefix", offsetof(km_inline_config, sni_prefix), false,
     "The SNI name's part before the broker id (names must resolve to the proxy)."},
    {"proxy.sni.host.suffix", offsetof(km_inline_config, sni_suffix), false,
     "The SNI name's part after the broker id."},
    {"proxy.capture.pcapng", offsetof(km_inline_config, capture_pcapng), false,
     "Capture of the client side as pcapng (truncated at start; tshark -d tcp.port==PORT,kafka)."},
    {"proxy.capture.jsonl", offsetof(km_inline_config, capture_jsonl), false,
     "The same capture as JSON lines (API, version, correlation id, client id, broker, size, latency, body)."},
};

static int parse_int(const char *value, int64_t lo, int64_t hi, int64_t *out);

/* proxy.capture.apis: names as Kafka prints them (PRODUCE, METADATA) or numeric keys. */
static int set_capture_apis(km_inline_config *c, const char *value, const char *where, km_err *err)
{
    uint64_t mask[2] = {0, 0};
    char *copy = strdup(value), *save = NULL;
    int rc = copy ? 0 : km_fail(err, "%s: proxy.capture.apis: out of memory", where);
    for (char *tok = copy ? strtok_r(copy, ", ", &save) : NULL; !rc && tok; tok = strtok_r(NULL, ", ", &save)) {
        int64_t key = -1;
        for (int16_t k = 0; k < 128 && key < 0; k++)
            if (km_api_name(k) && !strcasecmp(km_api_name(k), tok))
                key = k;
        if (key < 0 && (parse_int(tok, 0, 127, &key) || !km_api_name((int16_t)key)))
            rc = km_fail(err, "%s: proxy.capture.apis: '%s' is no API name (PRODUCE, FETCH, ...) nor key", where, tok);
        else
            mask[key / 64] |= 1ull << (key % 64);
    }
    free(copy);
    if (!rc)
        memcpy(c->capture_apis, mask, sizeof mask);
    return rc;
}

static int set_capture_brokers(km_inline_config *c, const char *value, const char *where, km_err *err)
{
    char *copy = strdup(value), *save = NULL;
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = copy ? 0 : km_fail(err, "%s: proxy.capture.brokers: out of memory", where);
    for (char *tok = copy ? strtok_r(copy, ", ", &save) : NULL; !rc && tok; tok = strtok_r(NULL, ", ", &save)) {
        int64_t id;
        int32_t *grown = parse_int(tok, -1, INT32_MAX, &id) ? NULL : realloc(ids, (n + 1) * sizeof *ids);
        if (!grown)
            rc = km_fail(err, "%s: proxy.capture.brokers: '%s' is no broker id (-1: bootstrap)", where, tok);
        else
            ids = grown, ids[n++] = (int32_t)id;
    }
    free(copy);
    if (rc) {
        free(ids);
        return rc;
    }
    free(c->capture_brokers);
    c->capture_brokers = ids;
    c->n_capture_brokers = n;
    return 0;
}

/* Keys with a fixed set of values. */
static int set_choice(km_inline_config *c, const char *key, const char *value, const char *where, km_err *err)
{
    if (!strcmp(key, "proxy.client.ssl.client.auth")) {
        static const char *const NAMES[] = {"none", "requested", "required"};
        for (int i = 0; i < 3; i++)
            if (!strcmp(value, NAMES[i]))
                return c->client_ssl_auth = i, 0;
        return km_fail(err, "%s: %s must be required, requested or none, not '%s'", where, key, value);
    }
    if (!strcmp(key, "proxy.upstream.security.protocol")) {
        if (strcasecmp(value, "plaintext") && strcasecmp(value, "ssl"))
            return km_fail(err, "%s: %s must be plaintext or ssl, not '%s' (SASL is passed through, not spoken)",
                           where, key, value);
        c->upstream_ssl = !strcasecmp(value, "ssl");
        return 0;
    }
    if (!strcmp(key, "proxy.capture.apis"))
        return set_capture_apis(c, value, where, err);
    if (!strcmp(key, "proxy.capture.brokers"))
        return set_capture_brokers(c, value, where, err);
    if (!strcmp(key, "proxy.capture.enabled")) {
        if (strcmp(value, "true") && strcmp(value, "false"))
            return km_fail(err, "%s: %s must be true or false, not '%s'", where, key, value);
        c->capture_enabled = !strcmp(value, "true");
        return 0;
    }
    if (!strcmp(key, "proxy.upstream.ssl.endpoint.identification.algorithm")) {
        if (strcmp(value, "https") && strcmp(value, "none") && *value)
            return km_fail(err, "%s: %s must be https, none or empty, not '%s'", where, key, value);
        c->upstream_ssl_check_hostname = !strcmp(value, "https");
        return 0;
    }
    return 1;
}

void km_inline_config_defaults(km_inline_config *c)
{
    memset(c, 0, sizeof *c);
    c->port_base = -1;
    c->max_frame_bytes = 100 * 1024 * 1024;     /* Kafka's socket.request.max.bytes is 100 MiB */
    c->max_connections = 10000;
    c->max_connections_per_ip = 1000;           /* a tenth of the whole: one address cannot take every slot */
    c->idle_timeout_ms = 600000;                /* Kafka's connections.max.idle.ms */
    c->request_timeout_ms = 60000;              /* past every client's request.timeout.ms default */
    c->threads = 0;                             /* one worker per core */
    c->upstream_hold_ms = 10000;                /* below every client's request timeout default (30 s and up) */
    c->request_read_timeout_ms = 30000;         /* a client trickling a request (slowloris) holds its slot no longer */
    c->listen_backlog = 1024;
    c->buffer_bytes = 256 * 1024;
    c->upstream_ssl_check_hostname = true;      /* as librdkafka >= 2.0 and Kafka >= 2.0 */
}

static int parse_int(const char *value, int64_t lo, int64_t hi, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(value, &end, 10);
    if (!*value || *end || errno || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

/* "HOST:PORT" with a non-empty host (or [v6]) and a port in 1..65535 (0 allowed for listeners). */
static bool valid_address(const char *s)
{
    const char *colon = strrchr(s, ':');
    int64_t port;
    return colon && colon != s && !parse_int(colon + 1, 0, 65535, &port);
}

static int set_str(char **slot, const char *value, const char *where, const char *key, bool address, km_err *err)
{
    if (address && !valid_address(value))
        return km_fail(err, "%s: %s must be HOST:PORT, not '%s'", where, key, value);
    if (!*value)
        return km_fail(err, "%s: %s is empty", where, key);
    char *copy = strdup(value);
    if (!copy)
        return km_fail(err, "%s: %s: out of memory", where, key);
    free(*slot);
    *slot = copy;
    return 0;
}

static km_inline_broker_cfg *broker_slot(km_inline_config *c, int32_t id)
{
    for (size_t i = 0; i < c->n_brokers; i++)
        if (c->brokers[i].id == id)
            return &c->brokers[i];
    km_inline_broker_cfg *grown = realloc(c->brokers, (c->n_brokers + 1) * sizeof *grown);
    if (!grown)
        return NULL;
    c->brokers = grown;
    grown[c->n_brokers] = (km_inline_broker_cfg){.id = id};
    return &grown[c->n_brokers++];
}

/* proxy.broker.<id>.listen | .upstream */
static int set_broker_key(km_inline_config *c, const char *key, const char *value, const char *where, km_err *err)
{
    const char *id_start = key + strlen("proxy.broker."), *dot = strchr(id_start, '.');
    char id_text[16];
    int64_t id;
    size_t id_len = dot ? (size_t)(dot - id_start) : 0;
    if (!dot || id_len == 0 || id_len >= sizeof id_text)
        return km_fail(err, "%s: unknown key '%s' (expected proxy.broker.<id>.listen or .upstream)", where, key);
    memcpy(id_text, id_start, id_len);
    id_text[id_len] = '\0';
    if (parse_int(id_text, 0, INT32_MAX, &id))
        return km_fail(err, "%s: %s: broker id '%s' is not an integer in [0, %d]", where, key, id_text, INT32_MAX);
    bool listen = !strcmp(dot + 1, "listen");
    if (!listen && strcmp(dot + 1, "upstream"))
        return km_fail(err, "%s: unknown key '%s' (expected proxy.broker.<id>.listen or .upstream)", where, key);
    km_inline_broker_cfg *b = broker_slot(c, (int32_t)id);
    if (!b)
        return km_fail(err, "%s: %s: out of memory", where, key);
    return set_str(listen ? &b->listen : &b->upstream, value, where, key, true, err);
}

int km_inline_config_set(km_inline_config *c, const char *key, const char *value, const char *where, km_err *err)
{
    if (!strncmp(key, "proxy.broker.", strlen("proxy.broker.")))
        return set_broker_key(c, key, value, where, err);
    int rc = set_choice(c, key, value, where, err);
    if (rc <= 0)
        return rc;
    for (size_t i = 0; i < sizeof STR_KEYS / sizeof STR_KEYS[0]; i++)
        if (!strcmp(key, STR_KEYS[i].key))
            return set_str((char **)((char *)c + STR_KEYS[i].offset), value, where, key, STR_KEYS[i].address, err);
    for (size_t i = 0; i < sizeof INT_KEYS / sizeof INT_KEYS[0]; i++) {
        const int_key *k = &INT_KEYS[i];
        if (strcmp(key, k->key))
            continue;
        int64_t v;
        if (parse_int(value, k->lo, k->hi, &v))
            return km_fail(err, "%s: %s must be an integer in [%lld, %lld], not '%s'", where, key, (long long)k->lo,
                           (long long)k->hi, value);
        *(int32_t *)((char *)c + k->offset) = (int32_t)v;
        return 0;
    }
    return km_fail(err, "%s: unknown key '%s'", where, key);
}

bool km_inline_config_enabled(const km_inline_config *c)
{
    return c->n_brokers || c->bootstrap_listen || c->bootstrap_upstream || c->port_base >= 0 || c->listen_host ||
           c->advertised_host || c->client_ssl_cert || c->client_ssl_key || c->client_ssl_ca || c->upstream_ssl ||
           c->upstream_ssl_cert || c->upstream_ssl_key || c->upstream_ssl_ca || c->sni_listen || c->sni_prefix ||
           c->sni_suffix || c->capture_pcapng || c->capture_jsonl;
}

int km_inline_config_validate(const km_inline_config *c, km_err *err)
{
    for (size_t i = 0; i < c->n_brokers; i++)
        if (!c->brokers[i].upstream || (!c->brokers[i].listen && !c->sni_listen))
            return km_fail(err, "proxy.broker.%d: needs both .listen and .upstream (or .upstream and proxy.sni.listen)",
                           c->brokers[i].id);
    if ((c->bootstrap_listen && !c->bootstrap_upstream) || (!c->bootstrap_listen && c->bootstrap_upstream && !c->sni_listen))
        return km_fail(err, "proxy.bootstrap.listen and proxy.bootstrap.upstream go together (the upstream alone "
                            "only with proxy.sni.listen)");
    if ((c->listen_host || c->advertised_host) && c->port_base < 0)
        return km_fail(err, "proxy.listen.host and proxy.advertised.host need proxy.port.base");
    if (c->port_base >= 0 && !c->advertised_host)
        return km_fail(err, "proxy.port.base needs proxy.advertised.host (the host clients are told)");
    if (!c->client_ssl_cert && (c->client_ssl_key || c->client_ssl_ca || c->client_ssl_auth))
        return km_fail(err, "proxy.client.ssl.* needs proxy.client.ssl.certificate.location (TLS towards clients)");
    if (c->client_ssl_auth && !c->client_ssl_ca)
        return km_fail(err, "proxy.client.ssl.client.auth=%s needs proxy.client.ssl.ca.location to verify clients",
                       c->client_ssl_auth == KM_INLINE_AUTH_REQUIRED ? "required" : "requested");
    if (!c->upstream_ssl && (c->upstream_ssl_cert || c->upstream_ssl_key || c->upstream_ssl_ca))
        return km_fail(err, "proxy.upstream.ssl.* needs proxy.upstream.security.protocol=ssl");
    if (c->sni_listen && !c->client_ssl_cert)
        return km_fail(err, "proxy.sni.listen needs proxy.client.ssl.certificate.location (SNI is part of TLS)");
    if (c->sni_listen && !c->sni_prefix && !c->sni_suffix)
        return km_fail(err, "proxy.sni.listen needs proxy.sni.host.prefix or proxy.sni.host.suffix "
                            "(names are <prefix><id><suffix>)");
    if ((c->sni_prefix || c->sni_suffix) && !c->sni_listen)
        return km_fail(err, "proxy.sni.host.prefix and .suffix need proxy.sni.listen");
    if (c->port_base >= 0 && c->sni_listen)
        return km_fail(err, "proxy.port.base and proxy.sni.listen exclude each other: brokers are told one kind of address");
    bool capture_keys = c->capture_enabled || c->capture_apis[0] || c->capture_apis[1] || c->n_capture_brokers;
    if (capture_keys && !c->capture_pcapng && !c->capture_jsonl)
        return km_fail(err, "proxy.capture.enabled/.apis/.brokers need proxy.capture.pcapng or proxy.capture.jsonl");
    if (!c->bootstrap_listen && !c->n_brokers && !c->sni_listen)
        return km_fail(err, "the proxy has no listener: set proxy.bootstrap.listen/.upstream or "
                            "proxy.broker.<id>.listen/.upstream");
    return 0;
}

/* The keys set_choice and set_broker_key parse, documented here beside them. */
static const struct {
    const char *key, *type, *def, *doc;
} OTHER_KEYS[] = {
    {"proxy.broker.<id>.listen", "HOST:PORT", "",
     "Static route: the listener for broker <id> (port 0: any free port); with `proxy.sni.listen` not needed."},
    {"proxy.broker.<id>.upstream", "HOST:PORT", "", "Static route: where broker <id> really is."},
    {"proxy.client.ssl.client.auth", "required, requested or none", "none",
     "required: refuse clients without a valid certificate; requested: check one if sent (needs "
     "`proxy.client.ssl.ca.location`)."},
    {"proxy.upstream.security.protocol", "plaintext or ssl", "plaintext",
     "TLS towards the brokers (SASL is passed through, not spoken); the broker's certificate is always verified."},
    {"proxy.upstream.ssl.endpoint.identification.algorithm", "https, none or empty", "https",
     "https: check the broker's host name against its certificate; none or empty: the chain only."},
    {"proxy.capture.enabled", "boolean", "false",
     "Capture from the start; false opens the files and waits for SIGUSR1 or POST /capture/on."},
    {"proxy.capture.apis", "API names or keys, comma-separated", "",
     "Capture only these APIs (PRODUCE, FETCH, ... or numeric keys); unset: every API."},
    {"proxy.capture.brokers", "broker ids, comma-separated", "",
     "Capture only these brokers' listeners (-1: bootstrap); unset: every broker."},
};

void km_inline_config_each_key(km_inline_key_fn fn, void *ud)
{
    km_inline_config d;
    km_inline_config_defaults(&d);
    char type[64], def[32];
    for (size_t i = 0; i < sizeof INT_KEYS / sizeof INT_KEYS[0]; i++) {
        snprintf(type, sizeof type, "integer in [%lld, %lld]", (long long)INT_KEYS[i].lo, (long long)INT_KEYS[i].hi);
        snprintf(def, sizeof def, "%d", *(const int32_t *)((const char *)&d + INT_KEYS[i].offset));
        fn(INT_KEYS[i].key, type, def, INT_KEYS[i].doc, ud);
    }
    for (size_t i = 0; i < sizeof STR_KEYS / sizeof STR_KEYS[0]; i++)
        fn(STR_KEYS[i].key, STR_KEYS[i].address ? "HOST:PORT" : "string", "", STR_KEYS[i].doc, ud);
    for (size_t i = 0; i < sizeof OTHER_KEYS / sizeof OTHER_KEYS[0]; i++)
        fn(OTHER_KEYS[i].key, OTHER_KEYS[i].type, OTHER_KEYS[i].def, OTHER_KEYS[i].doc, ud);
    km_inline_config_free(&d);
}

void km_inline_config_free(km_inline_config *c)
{
    for (size_t i = 0; i < c->n_brokers; i++) {
        free(c->brokers[i].listen);
        free(c->brokers[i].upstream);
    }
    free(c->brokers);
    for (size_t i = 0; i < sizeof STR_KEYS / sizeof STR_KEYS[0]; i++)
        free(*(char **)((char *)c + STR_KEYS[i].offset));
    free(c->capture_brokers);
    memset(c, 0, sizeof *c);
}
