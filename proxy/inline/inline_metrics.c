/* Per-broker, per-API counters and latency histograms, rendered as Prometheus text. */
#include "inline_private.h"
#include "km_metrics.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Seconds: 100 us to 10 s, roughly x3 apart (Kafka request times span that). */
static const double BUCKETS[INL_LAT_BUCKETS] = {0.0001, 0.0003, 0.001, 0.003, 0.01, 0.03,
                                                 0.1,    0.3,    1,     3,     10,   30};

static int slot_of(int16_t api)
{
    return api >= 0 && api < INL_API_SLOTS - 1 ? api : INL_API_SLOTS - 1;
}

static int bucket_of(double seconds)
{
    int b = 0;
    while (b < INL_LAT_BUCKETS && seconds > BUCKETS[b])
        b++;
    return b;
}

/* The worker's figures for broker: only this worker adds entries, under its lock, because the
 * metrics page reads the array from another thread. */
static inl_bstats *bstats_of(inl_worker *w, int32_t broker)
{
    for (size_t i = 0; i < w->n_bstats; i++)
        if (w->bstats[i]->broker == broker)
            return w->bstats[i];
    inl_bstats *b = calloc(1, sizeof *b);
    if (!b)
        return NULL; /* metrics are best effort: traffic never fails for them */
    b->broker = broker;
    pthread_mutex_lock(&w->lock);
    inl_bstats **grown = realloc(w->bstats, (w->n_bstats + 1) * sizeof *grown);
    if (grown) {
        w->bstats = grown;
        w->bstats[w->n_bstats++] = b;
    }
    pthread_mutex_unlock(&w->lock);
    if (!grown)
        free(b);
    return grown ? b : NULL;
}

void inl_count_request(inl_worker *w, int32_t broker, int16_t api, size_t bytes)
{
    inl_bstats *b = bstats_of(w, broker);
    if (!b)
        return;
    INL_ADD(b->requests[slot_of(api)], 1);
    INL_ADD(b->request_bytes[slot_of(api)], bytes);
}

void inl_count_response(inl_worker *w, int32_t broker, int16_t api, size_t bytes, double upstream_seconds)
{
    inl_bstats *b = bstats_of(w, broker);
    if (!b)
        return;
    int s = slot_of(api);
    INL_ADD(b->response_bytes[s], bytes);
    INL_ADD(b->lat_count[s][bucket_of(upstream_seconds)], 1);
    INL_ADD(b->lat_sum_ns[s], (uint64_t)(upstream_seconds * 1e9));
}

/* Where a response body's top-level error code sits (after the throttle time or first), for the
 * APIs that have one (Kafka 3.9's schemas); -1: none (Produce, Metadata, ... answer per item). */
static int error_offset(int16_t api, int16_t ver)
{
    switch (api) {
    case KM_API_API_VERSIONS: case KM_API_SASL_HANDSHAKE: case KM_API_SASL_AUTHENTICATE:
        return 0;
    case KM_API_FIND_COORDINATOR:
        return ver == 0 ? 0 : ver <= 3 ? 4 : -1;
    case KM_API_JOIN_GROUP:
        return ver <= 1 ? 0 : 4;
    case KM_API_HEARTBEAT: case KM_API_LEAVE_GROUP: case KM_API_SYNC_GROUP: case KM_API_LIST_GROUPS:
        return ver == 0 ? 0 : 4;
    case KM_API_FETCH:
        return ver >= 7 ? 4 : -1;
    case KM_API_INIT_PRODUCER_ID: case KM_API_DESCRIBE_CLUSTER:
        return 4;
    default:
        return -1;
    }
}

void inl_count_response_error(inl_worker *w, int32_t broker, int16_t api, int16_t ver, const uint8_t *body,
                              size_t avail)
{
    size_t at = 0;
    if (km_response_header_version(api, ver) >= 1) { /* header tagged fields: only an empty set is read */
        if (!avail || body[0] != 0)
            return;
        at = 1;
    }
    int off = error_offset(api, ver);
    if (off < 0 || avail < at + (size_t)off + 2)
        return; /* not in this read: uncounted rather than held */
    int16_t code = (int16_t)(body[at + (size_t)off] << 8 | body[at + (size_t)off + 1]);
    inl_bstats *b = code ? bstats_of(w, broker) : NULL;
    if (b)
        INL_ADD(b->errors[slot_of(api)], 1);
}

void inl_count_cut(inl_worker *w, int32_t broker)
{
    inl_bstats *b = bstats_of(w, broker);
    if (b)
        INL_ADD(b->cut, 1);
}

void inl_count_proxy_time(inl_worker *w, double seconds)
{
    INL_ADD(w->proxy_time_count[bucket_of(seconds)], 1);
    INL_ADD(w->proxy_time_ns, (uint64_t)(seconds * 1e9));
}

void inl_metrics_free(inl_worker *w)
{
    for (size_t i = 0; i < w->n_bstats; i++)
        free(w->bstats[i]);
    free(w->bstats);
}

/* ---- the sums over workers ------------------------------------------------------------------ */

_Static_assert(sizeof(km_inline_stats) % sizeof(uint64_t) == 0, "km_inline_stats is made of uint64_t counters");
_Static_assert(sizeof(inl_bstats) % sizeof(uint64_t) == 0 && offsetof(inl_bstats, requests) == sizeof(uint64_t),
               "inl_bstats: the broker id, then uint64_t counters only");

/* to += from, field by field: both structs are arrays of counters read with relaxed loads. */
static void add_counters(uint64_t *to, const uint64_t *from, size_t n, bool max_at_hw)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t v = __atomic_load_n(&from[i], __ATOMIC_RELAXED);
        bool is_max = max_at_hw && (i == offsetof(km_inline_stats, buffered_high_water) / sizeof(uint64_t) ||
                                    i == offsetof(km_inline_stats, largest_frame) / sizeof(uint64_t));
        to[i] = is_max ? (v > to[i] ? v : to[i]) : to[i] + v;
    }
}

void inl_sum_stats(const km_inline *p, km_inline_stats *out)
{
    memset(out, 0, sizeof *out);
    size_t n = sizeof *out / sizeof(uint64_t);
    add_counters((uint64_t *)out, (const uint64_t *)&p->main_stats, n, true);
    for (size_t i = 0; i < p->n_workers; i++)
        add_counters((uint64_t *)out, (const uint64_t *)&p->workers[i]->stats, n, true);
    out->open = __atomic_load_n(&p->open, __ATOMIC_RELAXED);
}

void km_inline_get_worker_stats(const km_inline *p, size_t worker, km_inline_stats *out)
{
    memset(out, 0, sizeof *out);
    if (worker >= p->n_workers)
        return;
    const inl_worker *w = p->workers[worker];
    add_counters((uint64_t *)out, (const uint64_t *)&w->stats, sizeof *out / sizeof(uint64_t), true);
    out->open = __atomic_load_n(&w->assigned, __ATOMIC_RELAXED);
}

/* Every worker's per-broker figures added up, one entry per broker (malloc'd; *n entries). */
static inl_bstats *sum_bstats(const km_inline *p, size_t *n)
{
    inl_bstats *all = NULL;
    *n = 0;
    size_t fields = (sizeof(inl_bstats) - offsetof(inl_bstats, requests)) / sizeof(uint64_t);
    for (size_t k = 0; k < p->n_workers; k++) {
        inl_worker *w = p->workers[k];
        pthread_mutex_lock(&w->lock);
        for (size_t i = 0; i < w->n_bstats; i++) {
            const inl_bstats *b = w->bstats[i];
            size_t j = 0;
            while (j < *n && all[j].broker != b->broker)
                j++;
            if (j == *n) {
                inl_bstats *grown = realloc(all, (*n + 1) * sizeof *grown);
                if (!grown)
                    continue; /* best effort, as the counting */
                all = grown;
                memset(&all[j], 0, sizeof all[j]);
                all[j].broker = b->broker;
                (*n)++;
            }
            add_counters(all[j].requests, b->requests, fields, false);
        }
        pthread_mutex_unlock(&w->lock);
    }
    return all;
}

static void api_label(int slot, char *out, size_t cap)
{
    const char *name = slot < INL_API_SLOTS - 1 ? km_api_name((int16_t)slot) : NULL;
    if (name)
        snprintf(out, cap, "%s", name);
    else
        snprintf(out, cap, slot < INL_API_SLOTS - 1 ? "API_%d" : "OTHER", slot);
}

static void put_line(km_buf *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put_line(km_buf *out, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    km_buf_put(out, line, (size_t)(n < (int)sizeof line ? n : (int)sizeof line - 1));
}

static void histogram(km_buf *out, const char *name, const char *labels, const uint64_t *count, double sum)
{
    uint64_t total = 0;
    for (int b = 0; b <= INL_LAT_BUCKETS; b++) {
        total += count[b];
        if (b < INL_LAT_BUCKETS)
            put_line(out, "%s_bucket{%s%sle=\"%g\"} %llu\n", name, labels, *labels ? "," : "", BUCKETS[b],
                     (unsigned long long)total);
        else
            put_line(out, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, labels, *labels ? "," : "",
                     (unsigned long long)total);
    }
    put_line(out, *labels ? "%s_sum{%s} %.9g\n" : "%s_sum%s %.9g\n", name, labels, sum);
    put_line(out, *labels ? "%s_count{%s} %llu\n" : "%s_count%s %llu\n", name, labels, (unsigned long long)total);
}

static void per_api(const inl_bstats *bs, size_t n_bs, km_buf *out)
{
    static const struct {
        const char *name, *help;
        size_t offset;
    } COUNTERS[] = {
        {"kmproxy_inline_requests_total", "requests passed to the broker", offsetof(inl_bstats, requests)},
        {"kmproxy_inline_request_bytes_total", "request bytes passed", offsetof(inl_bstats, request_bytes)},
        {"kmproxy_inline_response_bytes_total", "response bytes passed (after rewriting sizes differ)",
         offsetof(inl_bstats, response_bytes)},
        {"kmproxy_inline_response_errors_total",
         "responses whose top-level error code is not NONE (APIs that have one: ApiVersions, Fetch v7+, "
         "FindCoordinator v0-3, the group APIs, InitProducerId, DescribeCluster, SASL)",
         offsetof(inl_bstats, errors)},
    };
    char labels[128], api[48];
    for (size_t c = 0; c < sizeof COUNTERS / sizeof COUNTERS[0]; c++) {
        put_line(out, "# HELP %s %s\n# TYPE %s counter\n", COUNTERS[c].name, COUNTERS[c].help, COUNTERS[c].name);
        for (size_t i = 0; i < n_bs; i++)
            for (int s = 0; s < INL_API_SLOTS; s++) {
                const uint64_t *v = (const uint64_t *)((const char *)&bs[i] + COUNTERS[c].offset);
                if (!v[s])
                    continue;
                api_label(s, api, sizeof api);
                put_line(out, "%s{broker=\"%d\",api=\"%s\"} %llu\n", COUNTERS[c].name, bs[i].broker, api,
                         (unsigned long long)v[s]);
            }
    }
    put_line(out, "# HELP kmproxy_inline_upstream_latency_seconds request forwarded to response head received\n"
                  "# TYPE kmproxy_inline_upstream_latency_seconds histogram\n");
    for (size_t i = 0; i < n_bs; i++)
        for (int s = 0; s < INL_API_SLOTS; s++) {
            const inl_bstats *b = &bs[i];
            uint64_t n = 0;
            for (int k = 0; k <= INL_LAT_BUCKETS; k++)
                n += b->lat_count[s][k];
            if (!n)
                continue;
            api_label(s, api, sizeof api);
            snprintf(labels, sizeof labels, "broker=\"%d\",api=\"%s\"", b->broker, api);
            histogram(out, "kmproxy_inline_upstream_latency_seconds", labels, b->lat_count[s], b->lat_sum_ns[s] / 1e9);
        }
    put_line(out, "# HELP kmproxy_inline_cut_total clients cut for a fault, by the listener's broker\n"
                  "# TYPE kmproxy_inline_cut_total counter\n");
    for (size_t i = 0; i < n_bs; i++)
        put_line(out, "kmproxy_inline_cut_total{broker=\"%d\"} %llu\n", bs[i].broker,
                 (unsigned long long)bs[i].cut);
}

/* Per worker: how the clients and bytes spread (an idle worker beside a busy one shows here). */
static void worker_lines(const km_inline *p, km_buf *out)
{
    km_metrics_sample(out, "kmproxy_inline_threads", "gauge", "worker threads (proxy.threads)", NULL, true,
                      (double)p->n_workers);
    put_line(out, "# HELP kmproxy_inline_worker_connections_open client connections open, by worker thread\n"
                  "# TYPE kmproxy_inline_worker_connections_open gauge\n");
    for (size_t i = 0; i < p->n_workers; i++)
        put_line(out, "kmproxy_inline_worker_connections_open{worker=\"%zu\"} %llu\n", i,
                 (unsigned long long)INL_GET(p->workers[i]->assigned));
    put_line(out, "# HELP kmproxy_inline_worker_bytes_total bytes forwarded both ways, by worker thread\n"
                  "# TYPE kmproxy_inline_worker_bytes_total counter\n");
    for (size_t i = 0; i < p->n_workers; i++)
        put_line(out, "kmproxy_inline_worker_bytes_total{worker=\"%zu\"} %llu\n", i,
                 (unsigned long long)(INL_GET(p->workers[i]->stats.bytes_up) +
                                      INL_GET(p->workers[i]->stats.bytes_down)));
}

void km_inline_render_metrics(const km_inline *p, km_buf *out)
{
    km_inline_stats sum;
    inl_sum_stats(p, &sum);
    const km_inline_stats *st = &sum;
    km_metrics_sample(out, "kmproxy_inline_connections_open", "gauge", "client connections open", NULL, true,
                      (double)st->open);
    km_metrics_sample(out, "kmproxy_inline_connections_accepted_total", "counter", "client connections accepted",
                      NULL, true, (double)st->accepted);
    km_metrics_sample(out, "kmproxy_inline_connections_refused_total", "counter",
                      "client connections refused at proxy.max.connections(.per.ip)", NULL, true,
                      (double)st->refused);
    km_metrics_sample(out, "kmproxy_inline_tls_handshake_failures_total", "counter",
                      "client TLS handshakes that failed", NULL, true, (double)st->tls_failures);
    km_metrics_sample(out, "kmproxy_inline_upstream_failures_total", "counter",
                      "upstream connections that failed (refused, TLS, reset)", NULL, true,
                      (double)st->upstream_failures);
    km_metrics_sample(out, "kmproxy_inline_unknown_api_total", "counter",
                      "requests of an API or version the codec does not know, forwarded untouched", NULL, true,
                      (double)st->unknown_api);
    km_metrics_sample(out, "kmproxy_inline_api_versions_unparsed_total", "counter",
                      "ApiVersions answers that could not be parsed: not passed on (the Fetch/Produce version cap, "
                      "KIP-951, could not be applied), the client cut", NULL, true, (double)st->api_versions_unparsed);
    km_metrics_sample(out, "kmproxy_inline_rewritten_total", "counter",
                      "responses whose broker addresses were replaced", NULL, true, (double)st->rewritten);
    km_metrics_sample(out, "kmproxy_inline_listeners", "gauge", "listeners open", NULL, true,
                      (double)st->listeners);
    km_metrics_sample(out, "kmproxy_inline_buffered_high_water_bytes", "gauge",
                      "most bytes one connection pair held at once", NULL, true,
                      (double)st->buffered_high_water);
    static const char *const RPC[3] = {"LEADER_AND_ISR", "UPDATE_METADATA", "STOP_REPLICA"};
    put_line(out, "# HELP kmproxy_inline_controller_rpc_divergent_total controller RPC partition states passing "
                  "inline that disagree with the KRaft image\n# TYPE kmproxy_inline_controller_rpc_divergent_total "
                  "counter\n");
    for (int i = 0; i < 3; i++)
        put_line(out, "kmproxy_inline_controller_rpc_divergent_total{api=\"%s\"} %llu\n", RPC[i],
                 (unsigned long long)INL_GET(p->divergent[i]));
    size_t n_bs;
    inl_bstats *bs = sum_bstats(p, &n_bs);
    per_api(bs, n_bs, out);
    free(bs);
    uint64_t time_count[INL_LAT_BUCKETS + 1] = {0}, time_ns = 0;
    for (size_t i = 0; i < p->n_workers; i++) {
        add_counters(time_count, p->workers[i]->proxy_time_count, INL_LAT_BUCKETS + 1, false);
        time_ns += INL_GET(p->workers[i]->proxy_time_ns);
    }
    put_line(out, "# HELP kmproxy_inline_proxy_time_seconds the proxy's own time handling one read\n"
                  "# TYPE kmproxy_inline_proxy_time_seconds histogram\n");
    histogram(out, "kmproxy_inline_proxy_time_seconds", "", time_count, time_ns / 1e9);
    worker_lines(p, out);
}
