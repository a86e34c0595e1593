/* inline_private.h - shared by the proxy/inline sources only; not part of km_inline's API. */
#ifndef KM_INLINE_PRIVATE_H
#define KM_INLINE_PRIVATE_H

#include <ev.h>
#include <pthread.h>

#include "km_inline.h"
#include "km_net.h"

#define INL_HOST_MAX 256
/* Request bytes held before forwarding: enough for any header plus the start
 * of the body (Produce's acks, SaslHandshake's mechanism). */
#define INL_REQ_PREFIX_MAX (64u * 1024u)
#define INL_REQ_PREFIX_FIRST 1024u /* most headers fit: a longer one grows the prefix */
#define INL_INFLIGHT_MAX 65536u /* requests awaiting answers; past it the client waits */
#define INL_ACKS0_REMEMBERED 256u /* recent acks=0 Produce correlation ids (see response_head_ready) */

/* Counters with one writer thread each, read from any (metrics, stats): relaxed atomics, which
 * cost the writer a plain load and store (no lock prefix) and make the readers' loads defined. */
#define INL_ADD(field, n) \
    __atomic_store_n(&(field), __atomic_load_n(&(field), __ATOMIC_RELAXED) + (n), __ATOMIC_RELAXED)
#define INL_GET(field) __atomic_load_n(&(field), __ATOMIC_RELAXED)
#define INL_MAX(field, v) do { if ((v) > INL_GET(field)) __atomic_store_n(&(field), (v), __ATOMIC_RELAXED); } while (0)

typedef struct inl_worker inl_worker;

typedef struct inl_route {
    km_inline *p;
    int32_t broker_id;                       /* -1: bootstrap, INL_SNI_ROUTE: the SNI listener */
    bool is_static;                          /* configured: upstream never learned */
    char listen_host[INL_HOST_MAX];          /* "" binds every address */
    uint16_t listen_port;
    char adv_host[INL_HOST_MAX];
    uint16_t adv_port;
    char up_host[INL_HOST_MAX];              /* where new connections go */
    uint16_t up_port;
    km_net_listener *listener;
    bool listener_waiting;                   /* opened off the main loop: the main loop starts accepting */
} inl_route;

#define INL_SNI_ROUTE KM_INLINE_SNI /* the SNI listener's route: the handshake picks the real one */

#define INL_CAPTURE_FRAME_MAX (1u << 20) /* larger frames are left out of captures (never held for them) */
#define INL_API_SLOTS 96     /* per-API metrics; keys past it share the last slot ("other") */
#define INL_LAT_BUCKETS 12

/* Per broker (-1: bootstrap) and API: what passed and how long the upstream took. */
typedef struct inl_bstats {
    int32_t broker;
    uint64_t requests[INL_API_SLOTS], request_bytes[INL_API_SLOTS], response_bytes[INL_API_SLOTS];
    uint64_t errors[INL_API_SLOTS];   /* responses with a top-level error code other than NONE */
    uint64_t lat_count[INL_API_SLOTS][INL_LAT_BUCKETS + 1]; /* non-cumulative; last: +Inf */
    uint64_t lat_sum_ns[INL_API_SLOTS];
    uint64_t cut;
} inl_bstats;

typedef struct inl_ip_count {
    char ip[64];
    uint32_t n;
} inl_ip_count;

typedef struct inl_session inl_session;

/* Per-connection warnings by kind, rate-limited (inline_loglimit.c). */
typedef enum inl_log_kind { INL_LOG_CUT, INL_LOG_REFUSED, INL_LOG_TLS, INL_LOG_LEFT, INL_LOG_UPSTREAM, INL_LOG_KINDS } inl_log_kind;
#define INL_LOG_BURST 10      /* lines of one kind per window */
#define INL_LOG_WINDOW 10.0   /* seconds */
typedef struct inl_log_rate { double window_start; unsigned logged; uint64_t suppressed; } inl_log_rate;

/* A TLS context shared by the connections made with it: a reload makes a new current one while
 * live connections keep theirs (km_tls contexts must outlive their streams). */
typedef struct inl_tls {
    km_tls_ctx *ctx;
    unsigned refs;        /* sessions using it, plus one while it is the current one */
} inl_tls;

typedef struct inl_span { /* bytes of the current read that pass unchanged, sent together */
    const uint8_t *head;  /* a frame head copied into our own buffer, to go out first */
    size_t head_len;
    const uint8_t *ptr;
    size_t len;
} inl_span;

/* A client accepted on the main loop, on its way to a worker. */
typedef struct inl_handoff_item {
    inl_route *route;
    int fd;
    char peer[80], ip[64];
} inl_handoff_item;

/* A controller RPC seen by a worker, checked against the image on the main loop (which owns it). */
typedef struct inl_inspect_item {
    struct inl_inspect_item *next;
    int16_t api, version;
    size_t len;
    uint8_t payload[];
} inl_inspect_item;

/* One worker thread (inline_worker.c): its loop, its sessions, its counters. */
struct inl_worker {
    km_inline *p;
    unsigned index;
    struct ev_loop *loop;
    pthread_t thread;
    bool running;
    ev_async wake;                           /* new clients in the inbox, or stop */
    pthread_mutex_t lock;                    /* inbox, stopping, and the bstats array (not its counters) */
    inl_handoff_item *inbox;
    size_t n_inbox, cap_inbox;
    bool stopping;
    uint64_t assigned;                       /* clients handed here and not yet ended (atomic) */
    inl_session *sessions;                   /* doubly linked, this worker's clients */
    km_inline_stats stats;                   /* written here only: INL_ADD; read with INL_GET */
    inl_bstats **bstats;
    size_t n_bstats;
    uint64_t proxy_time_count[INL_LAT_BUCKETS + 1]; /* time spent on one read, per read */
    uint64_t proxy_time_ns;
    ev_timer trim;                           /* inline_memory.c: heap pages back after sessions end */
    uint64_t ended_since_trim;
};

struct km_inline {
    struct ev_loop *loop;                    /* the main loop: listeners, discovery, inspection */
    /* settings copied from km_inline_config (read-only once the workers run) */
    char *listen_host, *advertised_host;
    int32_t port_base;
    size_t max_frame, buffer_bytes;
    uint32_t max_conns, max_conns_per_ip;
    double idle_timeout, request_timeout, upstream_hold; /* seconds */
    double read_timeout;                     /* seconds: a whole request from its first byte */
    int backlog;
    char *sni_prefix, *sni_suffix;           /* SNI routing when sni_route is set */
    inl_route *sni_route;
    km_inline_config tls_cfg;                /* the TLS keys, kept for reloads */
    /* Shared with the workers under `lock` (taken per accept, per session end, per address
     * rewritten; never per byte): the routes and their fields, the per-IP counts, the current TLS
     * contexts, the inspection queue. */
    pthread_mutex_t lock;
    inl_route **routes;
    size_t n_routes;
    inl_ip_count *ips;
    size_t n_ips;
    int32_t *unserved;                       /* broker ids already reported as having no listener */
    size_t n_unserved;
    inl_tls *client_tls, *up_tls;            /* current; NULL: plaintext */
    inl_inspect_item *inspect_head, **inspect_tail;
    ev_async wake;                           /* main loop: listeners to start, RPCs to inspect, a log window */
    uint64_t open;                           /* clients handed to workers and not yet ended (atomic) */
    inl_worker **workers;
    size_t n_workers;
    size_t next_worker;                      /* round-robin start among the least loaded */
    km_inline_stats main_stats;              /* the main loop's own: refused, listeners, divergent (never a worker's) */
    const struct km_image *img;              /* followed by the daemon: controller RPCs are checked against it */
    int32_t controller_epoch;                /* ZooKeeper's controller epoch; -1: unknown */
    uint64_t divergent[3];                   /* LeaderAndIsr, UpdateMetadata, StopReplica */
    char **logged;                           /* partitions already logged as divergent */
    size_t n_logged;
    km_capture *cap;                         /* NULL: no capture files (km_capture takes frames from any thread) */
    bool cap_on;                             /* atomic: switched on the main loop, read by the workers */
    uint64_t cap_apis[2];                    /* all zero: every API */
    int32_t *cap_brokers;
    size_t n_cap_brokers;
    km_inline_log_fn log;
    void *log_ud;
    pthread_mutex_t log_lock;                /* one log call at a time; the rate limits below */
    inl_log_rate log_rate[INL_LOG_KINDS];
    bool log_window_open;                    /* the main loop arms log_flush for it */
    ev_timer log_flush;                      /* sums up what the window did not log */
    bool api_versions_unparsed_logged;       /* said once (atomic): every client of that broker would repeat it */
    /* broker discovery (inline_discover.c), main loop only */
    ev_timer disc_timer;
    double disc_interval;                    /* seconds; 0: off */
    km_net_conn *disc;                       /* the Metadata request in flight */
    char disc_host[INL_HOST_MAX];
    uint16_t disc_port;
    bool disc_failed;
};

typedef struct inl_inflight {
    int32_t correlation_id;
    int16_t api_key, api_version;
    ev_tstamp sent;
    bool capture;         /* its response goes into the capture too */
    ev_tstamp started;    /* when the broker could start on it: sent, or the answer before it */
    double allowance;     /* seconds the request lets the broker hold it (inl_request_allowance) */
} inl_inflight;

/* The request direction's parser: size, then a header prefix, then the rest streamed. */
typedef struct inl_req_parser {
    uint8_t *prefix;      /* 4 + INL_REQ_PREFIX_FIRST bytes, grown on demand */
    size_t have, want;
    uint64_t left;        /* payload bytes of the current frame still to stream */
} inl_req_parser;

/* The response direction's: size + correlation id, then streamed or collected whole. */
typedef struct inl_resp_parser {
    uint8_t prefix[8];
    size_t have;
    uint64_t left;
    bool collecting;      /* a response to rewrite or inspect: held whole */
    km_buf whole;
    size_t whole_want;
    inl_inflight req;     /* the request this response answers */
} inl_resp_parser;

struct inl_session {
    km_inline *p;
    inl_worker *w;        /* the worker whose loop runs this session, for its whole life */
    inl_route *route;
    char up_host[INL_HOST_MAX]; /* the route's upstream when this session dialled it */
    uint16_t up_port;
    inl_session *prev, *next;
    km_net_conn *client, *up;
    inl_tls *client_tls, *up_tls; /* the contexts its connections were made with */
    bool client_ready;
    char peer[80], ip[64];
    ev_timer timer;
    ev_tstamp last_activity;
    ev_tstamp req_started;  /* the first byte of a request not yet whole arrived (0: between requests) */
    bool req_paused;        /* we hold the client back: its request's clock restarts when we resume */
    inl_req_parser rq;
    inl_resp_parser rs;
    inl_span span[2];     /* [0] towards the client, [1] towards the broker; empty between reads */
    inl_inflight *ring;   /* in-flight requests, oldest first (brokers answer in order) */
    size_t ring_cap, ring_head, ring_count;
    int32_t acks0[INL_ACKS0_REMEMBERED]; /* recent acks=0 Produce requests, which Kafka never answers */
    int16_t acks0_version[INL_ACKS0_REMEMBERED];
    size_t acks0_next;
    int sasl_raw_rounds;  /* >0: SaslHandshake v0 switched to raw tokens; server tokens still due */
    bool sasl_raw_pending;/* a SaslHandshake v0 is in flight with this mechanism's rounds: */
    int sasl_rounds_on_ok;
    bool opaque;          /* raw SASL of a mechanism we cannot follow: bytes pass unparsed */
    bool client_bp, client_full, up_bp; /* paused: back-pressure, in-flight table full */
    km_capture_conn *cap_conn;  /* opened at the first captured frame */
    km_buf cap_req, cap_resp;   /* the frame being captured (or inspected), each way */
    bool cap_req_on, cap_resp_on;
    bool req_capture, req_inspect; /* what the gathered request is for */
    int16_t req_api, req_version;
    int32_t rebalance_ms; /* the last JoinGroup's rebalance timeout: a SyncGroup may be held as long */
    ev_tstamp timer_due;  /* when the session's timer fires */
    bool up_ready;        /* the upstream is connected: until then the client is not read */
    ev_tstamp up_first_try; /* the first dial of a held client (proxy.upstream.hold.ms) */
    double up_backoff;    /* seconds before the next dial */
    ev_timer up_retry;
};

/* inline_proxy.c */
void inl_log(km_inline *p, int level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The sink itself, with log_lock held by the caller (the rate limit decides under the same lock). */
void inl_log_sink_locked(km_inline *p, int level, const char *msg);
/* inline_loglimit.c: a warning about one connection, at most INL_LOG_BURST of a kind per window. */
void inl_log_conn(km_inline *p, inl_log_kind kind, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void inl_log_limit_init(km_inline *p);
void inl_log_limit_arm(km_inline *p);  /* main loop: a window opened on a worker gets its flush timer */
void inl_log_limit_stop(km_inline *p); /* logs what is still counted */
/* inline_memory.c (a worker's own timer) */
void inl_memory_init(inl_worker *w);
void inl_memory_session_ended(inl_worker *w);
void inl_memory_stop(inl_worker *w);
/* The route serving broker id (creating a dynamic one, listener included, when
 * port.base allows), its upstream learned from host:port; NULL when the broker
 * cannot be served. */
inl_route *inl_route_for_broker(km_inline *p, int32_t id, const char *host, int32_t port);
void inl_ip_release(km_inline *p, const char *ip);
/* The route an SNI name picks: <prefix><id><suffix>, else the bootstrap route; NULL: none. */
inl_route *inl_route_for_sni(km_inline *p, const char *name);
/* "broker 3 listener", "bootstrap listener", "SNI listener" into buf (48 bytes); returns buf. */
const char *inl_route_name(const inl_route *r, char *buf);
inl_tls *inl_tls_ref(inl_tls *t);
void inl_tls_unref(inl_tls *t);
/* Wakes the main loop (from any thread): waiting listeners, queued inspections, a log window. */
void inl_wake_main(km_inline *p);

/* inline_worker.c */
int inl_workers_start(km_inline *p, int32_t threads, km_err *err);
/* Each worker ends its sessions and its thread; then the workers are freed. */
void inl_workers_stop(km_inline *p);
/* Hands an accepted client (fd owned from here on) to the least loaded worker. */
void inl_handoff(km_inline *p, inl_route *r, int fd, const char *peer, const char *ip);

/* inline_session.c */
void inl_session_start(inl_worker *w, inl_route *r, int fd, const char *peer, const char *ip);
void inl_session_free(inl_session *s);

/* inline_deadline.c: the milliseconds a request lets the broker hold it before answering
 * (Fetch MaxWaitMs, JoinGroup's rebalance timeout, Produce acks=all TimeoutMs, admin TimeoutMs;
 * 0 for the rest), r positioned after the request header (Produce: after acks).  -1 + err when
 * the bytes at hand end first. */
int inl_request_allowance(km_reader *r, int16_t key, int16_t ver, int16_t acks, int32_t *ms, km_err *err);

/* inline_discover.c: proxy.discovery.interval.ms (after the routes are made; stop before freeing them) */
void inl_discover_start(km_inline *p, const km_inline_config *cfg);
void inl_discover_stop(km_inline *p);

/* inline_capture.c */
bool inl_capture_wanted(const km_inline *p, int32_t broker, int16_t api, size_t size);
/* Hands the gathered frame (payload after the size) to km_capture and resets the buffer. */
void inl_capture_frame(inl_session *s, km_capture_dir dir, km_buf *frame);
void inl_capture_bytes(inl_session *s, km_capture_dir dir, const uint8_t *payload, size_t len);
void inl_capture_close(inl_session *s);
int inl_capture_open(km_inline *p, const km_inline_config *cfg, km_err *err);
void inl_capture_free(km_inline *p);

/* inline_inspect.c */
bool inl_inspect_wanted(const km_inline *p, int16_t api);
/* From a worker: a copy of the request goes to the main loop, which owns the image. */
void inl_inspect_post(km_inline *p, int16_t api, int16_t ver, const uint8_t *payload, size_t len);
void inl_inspect_drain(km_inline *p); /* main loop */
void inl_inspect_free(km_inline *p);

/* inline_metrics.c */
/* Each counts into the calling worker's own figures. */
void inl_count_request(inl_worker *w, int32_t broker, int16_t api, size_t bytes);
void inl_count_response(inl_worker *w, int32_t broker, int16_t api, size_t bytes, double upstream_seconds);
/* body: the response after its correlation id, avail bytes of it at hand. */
void inl_count_response_error(inl_worker *w, int32_t broker, int16_t api, int16_t ver, const uint8_t *body,
                              size_t avail);
void inl_count_cut(inl_worker *w, int32_t broker);
void inl_count_proxy_time(inl_worker *w, double seconds);
void inl_metrics_free(inl_worker *w);
/* The sum of every worker's counters plus the main loop's (largest_frame, buffered_high_water: max). */
void inl_sum_stats(const km_inline *p, km_inline_stats *out);

/* inline_rewrite.c: replaces the broker addresses of a whole response frame
 * (payload after the size) into out, framed.  1: rewritten, 0: not an API
 * that carries addresses (out untouched), -1 + err: undecodable. */
int inl_rewrite_response(inl_worker *w, int16_t api_key, int16_t version, const uint8_t *payload, size_t len,
                         km_buf *out, km_err *err);
bool inl_api_needs_rewrite(int16_t api_key);

#endif
