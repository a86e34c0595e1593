/* km_inline.h - the inline proxy: kmproxy in the data path between Kafka
 * clients and the brokers.
 *
 * Every proxied broker gets a listener; each accepted client gets its own
 * upstream connection.  Bytes stream through as they arrive (no whole frames
 * held) while a small parser follows the frame boundaries, pairs responses
 * with requests by correlation id, and decodes only the responses that carry
 * broker addresses (Metadata, FindCoordinator, DescribeCluster) to replace
 * them with the proxy's own.  Two ways to say what to proxy:
 *   static:  proxy.broker.<id>.listen / .upstream, proxy.bootstrap.listen / .upstream
 *   dynamic: proxy.listen.host, proxy.advertised.host, proxy.port.base: broker <id>
 *            is served on port.base + id, its listener opened the moment a
 *            response first names it (before the client can see the address).
 * Threads: the loop passed to km_inline_new (the main loop) owns the listeners, discovery,
 * inspection and the capture switch; it hands each accepted client to one of proxy.threads
 * worker threads, each running its own libev loop with its sessions and their upstream
 * connections.  A session never leaves its worker, so the data path takes no lock.  The log
 * callback may be called from any of these threads (never two at once).  Every km_inline_*
 * call below is made from the main loop's thread (or while it is stopped).  Nothing blocks but
 * name resolution. */
#ifndef KM_INLINE_H
#define KM_INLINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "km_codec.h" /* km_err */

struct ev_loop;

typedef struct km_inline_broker_cfg {
    int32_t id;
    char *listen;   /* proxy.broker.<id>.listen: HOST:PORT */
    char *upstream; /* proxy.broker.<id>.upstream: HOST:PORT */
} km_inline_broker_cfg;

typedef struct km_inline_config {
    km_inline_broker_cfg *brokers; /* static routes, by id */
    size_t n_brokers;
    char *bootstrap_listen, *bootstrap_upstream;
    char *listen_host;             /* proxy.listen.host: where dynamic listeners bind (NULL: every address) */
    char *advertised_host;         /* proxy.advertised.host: the host clients are told */
    int32_t port_base;             /* proxy.port.base; -1: no dynamic listeners */
    int32_t max_frame_bytes;       /* proxy.max.frame.bytes */
    int32_t max_connections;       /* proxy.max.connections: clients at once, all listeners */
    int32_t max_connections_per_ip;/* proxy.max.connections.per.ip */
    int32_t idle_timeout_ms;       /* proxy.idle.timeout.ms: nothing in flight and no bytes */
    int32_t request_timeout_ms;    /* proxy.request.timeout.ms: the upstream's answer to the oldest request */
    int32_t upstream_hold_ms;      /* proxy.upstream.hold.ms: a client held while its broker cannot be dialled */
    int32_t threads;               /* proxy.threads: worker loops; 0: one per CPU of the affinity */
    int32_t discovery_interval_ms; /* proxy.discovery.interval.ms: brokers asked of the bootstrap upstream; 0: off */
    int32_t request_read_timeout_ms;/* proxy.request.read.timeout.ms: a client's whole request, from its first byte */
    int32_t listen_backlog;        /* proxy.listen.backlog: listen(2)'s backlog (the kernel caps it at somaxconn) */
    int32_t buffer_bytes;          /* proxy.connection.buffer.bytes: queued bytes per direction before pausing */
    /* TLS towards clients (on when the certificate is set), librdkafka's and Kafka's names. */
    char *client_ssl_cert, *client_ssl_key, *client_ssl_ca; /* proxy.client.ssl.{certificate,key,ca}.location */
    int client_ssl_auth;           /* proxy.client.ssl.client.auth: KM_INLINE_AUTH_* */
    /* TLS towards the brokers: proxy.upstream.security.protocol=ssl, verified unless told otherwise. */
    bool upstream_ssl;
    char *upstream_ssl_cert, *upstream_ssl_key, *upstream_ssl_ca; /* proxy.upstream.ssl.*.location */
    bool upstream_ssl_check_hostname; /* proxy.upstream.ssl.endpoint.identification.algorithm=https (default) */
    /* SNI routing: one TLS port for every broker; the SNI name <prefix><id><suffix> picks broker <id>
     * and the addresses clients are told use the same pattern (any other name: the bootstrap upstream). */
    char *sni_listen;              /* proxy.sni.listen: HOST:PORT */
    char *sni_prefix, *sni_suffix; /* proxy.sni.host.prefix, proxy.sni.host.suffix */
    /* Capture of the client side (what clients send and get) through km_capture. */
    char *capture_pcapng, *capture_jsonl; /* proxy.capture.pcapng / .jsonl: files (truncated at start) */
    bool capture_enabled;          /* proxy.capture.enabled: on from the start (else SIGUSR1 turns it on) */
    uint64_t capture_apis[2];      /* proxy.capture.apis: API names or keys, comma-separated; all zero: every API */
    int32_t *capture_brokers;      /* proxy.capture.brokers: broker ids (-1: bootstrap); none: every broker */
    size_t n_capture_brokers;
} km_inline_config;

enum { KM_INLINE_AUTH_NONE, KM_INLINE_AUTH_REQUESTED, KM_INLINE_AUTH_REQUIRED };

void km_inline_config_defaults(km_inline_config *c);
/* One proxy.* key (the full key, "proxy." included).  Unknown keys and bad
 * values are refused naming `where` ("FILE:LINE" or "--set"). */
int km_inline_config_set(km_inline_config *c, const char *key, const char *value, const char *where, km_err *err);
/* True once any proxy.* key asks for listeners. */
bool km_inline_config_enabled(const km_inline_config *c);
/* Pairs that go together; at least one listener. */
int km_inline_config_validate(const km_inline_config *c, km_err *err);
void km_inline_config_free(km_inline_config *c);
/* Every proxy.* key with its type, default as text ("" when unset) and meaning, for
 * docs/configuration.md (`kmproxy config docs`); patterns such as proxy.broker.<id>.listen included. */
typedef void (*km_inline_key_fn)(const char *key, const char *type, const char *def, const char *doc, void *ud);
void km_inline_config_each_key(km_inline_key_fn fn, void *ud);

typedef struct km_inline km_inline;
struct km_buf;

/* Log sink: level 0 error, 1 warn, 2 info, 3 debug (km_daemon's levels). */
typedef void (*km_inline_log_fn)(void *ud, int level, const char *msg);

/* Opens the static listeners on loop.  cfg is copied. */
km_inline *km_inline_new(struct ev_loop *loop, const km_inline_config *cfg, km_inline_log_fn log, void *log_ud,
                         km_err *err);
/* Closes every listener and connection at once. */
void km_inline_free(km_inline *p);
/* A broker registered in the KRaft log (the daemon follows it): its route is made or updated as a
 * Metadata response naming it would, so its listener exists before any client hears of it. */
void km_inline_broker_registered(km_inline *p, int32_t id, const char *host, uint16_t port);

struct km_image;
/* Migration-aware inspection: LeaderAndIsr, UpdateMetadata and StopReplica requests passing
 * inline are compared with img (which must outlive p; the daemon's, updated on the same loop).
 * A stale controller epoch, a leader epoch behind the image or a partition state that disagrees
 * counts in kmproxy_inline_controller_rpc_divergent_total{api} and is logged once per partition. */
void km_inline_follow_image(km_inline *p, const struct km_image *img);
/* ZooKeeper's controller epoch (from the daemon's claim); RPCs with an older one are stale. */
void km_inline_set_controller_epoch(km_inline *p, int32_t epoch);

/* Capture on or off at run time (SIGUSR1 toggles it in kmproxy proxy).  Returns the new state;
 * false when no capture file is configured. */
bool km_inline_capture(km_inline *p, bool on);
bool km_inline_capture_on(const km_inline *p);
/* For km_metrics_on_post: POST /capture/on and /capture/off; -1 for other paths. */
int km_inline_http_action(const char *path, struct km_buf *out, void *proxy);

/* Reloads the TLS certificates, keys and CAs from their files (on SIGHUP): new connections use
 * them, live ones keep theirs.  On failure (err names the file) the old ones stay in use. */
int km_inline_reload_tls(km_inline *p, km_err *err);

#define KM_INLINE_SNI INT32_MIN /* km_inline_listen_port: the SNI listener */

/* The port a listener really got (useful with port 0): broker id, -1 for the
 * bootstrap listener, KM_INLINE_SNI.  0 when there is no such listener. */
uint16_t km_inline_listen_port(const km_inline *p, int32_t broker_id);

typedef struct km_inline_stats {
    uint64_t accepted, refused, cut;          /* client connections: accepted, refused at a limit, cut for a fault */
    uint64_t open;                            /* client connections open now */
    uint64_t requests, responses;             /* frames paired by correlation id */
    uint64_t rewritten;                       /* responses whose addresses were replaced */
    uint64_t unknown_api;                     /* requests of an API or version the codec does not know */
    uint64_t bytes_up, bytes_down;            /* client -> broker, broker -> client */
    uint64_t buffered_high_water;             /* most bytes one connection pair held queued at once */
    uint64_t largest_frame;                   /* largest frame that passed, either way */
    uint64_t listeners;                       /* listeners open */
    uint64_t tls_failures;                    /* client TLS handshakes that failed */
    uint64_t upstream_failures;               /* upstream connections that failed (TLS included) */
    uint64_t captured;                        /* frames handed to the capture */
    uint64_t divergent;                       /* controller RPCs that disagreed with the image */
    uint64_t api_versions_unparsed;           /* ApiVersions answers that could not be parsed (not passed on) */
} km_inline_stats;
/* Summed over the workers (largest_frame and buffered_high_water: their maximum). */
void km_inline_get_stats(const km_inline *p, km_inline_stats *out);
/* The worker threads running, and one worker's share (accepted, open, bytes...; the main
 * loop's own counters, refused and listeners, stay zero there). */
size_t km_inline_threads(const km_inline *p);
void km_inline_get_worker_stats(const km_inline *p, size_t worker, km_inline_stats *out);

/* Appends the proxy's Prometheus metrics (kmproxy_inline_*): requests and bytes per broker and
 * API, upstream latency histograms per broker and API, the proxy's own time per read,
 * connections accepted, open, refused and cut, TLS handshake failures. */
void km_inline_render_metrics(const km_inline *p, struct km_buf *out);

#endif
