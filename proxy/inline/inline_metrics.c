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

static inl_bstats *bstats_of(km_inline *p, int32_t broker)
{
    for (size_t i = 0; i < p->n_bstats; i++)
        if (p->bstats[i]->broker == broker)
            return p->bstats[i];
    inl_bstats **grown = realloc(p->bstats, (p->n_bstats + 1) * sizeof *grown);
    inl_bstats *b = calloc(1, sizeof *b);
    if (grown)
        p->bstats = grown;
    if (!grown || !b) {
        free(b);
        return NULL; /* metrics are best effort: traffic never fails for them */
    }
    b->broker = broker;
    p->bstats[p->n_bstats++] = b;
    return b;
}

void inl_count_request(km_inline *p, int32_t broker, int16_t api, size_t bytes)
{
    inl_bstats *b = bstats_of(p, broker);
    if (b)
        b->requests[slot_of(api)]++, b->request_bytes[slot_of(api)] += bytes;
}

void inl_count_response(km_inline *p, int32_t broker, int16_t api, size_t bytes, double upstream_seconds)
{
    inl_bstats *b = bstats_of(p, broker);
    if (!b)
        return;
    int s = slot_of(api);
    b->response_bytes[s] += bytes;
    b->lat_count[s][bucket_of(upstream_seconds)]++;
    b->lat_sum[s] += upstream_seconds;
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

void inl_count_response_error(km_inline *p, int32_t broker, int16_t api, int16_t ver, const uint8_t *body,
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
    inl_bstats *b = code ? bstats_of(p, broker) : NULL;
    if (b)
        b->errors[slot_of(api)]++;
}

void inl_count_cut(km_inline *p, int32_t broker)
{
    inl_bstats *b = bstats_of(p, broker);
    if (b)
        b->cut++;
}

void inl_count_proxy_time(km_inline *p, double seconds)
{
    p->proxy_time_count[bucket_of(seconds)]++;
    p->proxy_time_sum += seconds;
}

void inl_metrics_free(km_inline *p)
{
    for (size_t i = 0; i < p->n_bstats; i++)
        free(p->bstats[i]);
    free(p->bstats);
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

static void per_api(const km_inline *p, km_buf *out)
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
        for (size_t i = 0; i < p->n_bstats; i++)
            for (int s = 0; s < INL_API_SLOTS; s++) {
                const uint64_t *v = (const uint64_t *)((const char *)p->bstats[i] + COUNTERS[c].offset);
                if (!v[s])
                    continue;
                api_label(s, api, sizeof api);
                put_line(out, "%s{broker=\"%d\",api=\"%s\"} %llu\n", COUNTERS[c].name, p->bstats[i]->broker, api,
                         (unsigned long long)v[s]);
            }
    }
    put_line(out, "# HELP kmproxy_inline_upstream_latency_seconds request forwarded to response head received\n"
                  "# TYPE kmproxy_inline_upstream_latency_seconds histogram\n");
    for (size_t i = 0; i < p->n_bstats; i++)
        for (int s = 0; s < INL_API_SLOTS; s++) {
            const inl_bstats *b = p->bstats[i];
            uint64_t n = 0;
            for (int k = 0; k <= INL_LAT_BUCKETS; k++)
                n += b->lat_count[s][k];
            if (!n)
                continue;
            api_label(s, api, sizeof api);
            snprintf(labels, sizeof labels, "broker=\"%d\",api=\"%s\"", b->broker, api);
            histogram(out, "kmproxy_inline_upstream_latency_seconds", labels, b->lat_count[s], b->lat_sum[s]);
        }
    put_line(out, "# HELP kmproxy_inline_cut_total clients cut for a fault, by the listener's broker\n"
                  "# TYPE kmproxy_inline_cut_total counter\n");
    for (size_t i = 0; i < p->n_bstats; i++)
        put_line(out, "kmproxy_inline_cut_total{broker=\"%d\"} %llu\n", p->bstats[i]->broker,
                 (unsigned long long)p->bstats[i]->cut);
}

void km_inline_render_metrics(const km_inline *p, km_buf *out)
{
    const km_inline_stats *st = &p->stats;
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
                 (unsigned long long)p->divergent[i]);
    per_api(p, out);
    put_line(out, "# HELP kmproxy_inline_proxy_time_seconds the proxy's own time handling one read\n"
                  "# TYPE kmproxy_inline_proxy_time_seconds histogram\n");
    histogram(out, "kmproxy_inline_proxy_time_seconds", "", p->proxy_time_count, p->proxy_time_sum);
}
