/* km_metrics.h - Prometheus text exposition over a minimal HTTP/1.0 endpoint on the libev loop.
 *
 * The daemon renders its modules' metrics (zkbridge, broker channels, image) on each scrape;
 * this module only serves the bytes.  Connections are bounded in number, size and time (a short
 * deadline for the request), and a new connection when all slots are taken evicts the oldest one
 * still sending its request (else the oldest one), so idle or slow clients can neither hold the
 * loop nor starve probes. */
#ifndef KM_METRICS_H
#define KM_METRICS_H

#include "km_codec.h" /* km_err, km_buf */

#include <stdint.h>

struct ev_loop;

typedef struct km_metrics_server km_metrics_server;
/* Appends the exposition text for one scrape. */
typedef void (*km_metrics_render_fn)(km_buf *out, void *ud);

/* Listens on "host:port" (port 0: any free port). */
km_metrics_server *km_metrics_listen(struct ev_loop *loop, const char *host_port, km_metrics_render_fn render,
                                     void *ud, km_err *err);
uint16_t km_metrics_port(const km_metrics_server *s);
/* Answers GET paths other than /metrics (the daemon's /healthz and /readyz): fills body (sent as
 * application/json) and returns the HTTP status, or 0 when the path is unknown (404). */
typedef int (*km_metrics_route_fn)(const char *path, km_buf *body, void *ud);
void km_metrics_set_route(km_metrics_server *s, km_metrics_route_fn route);
/* POST PATH runs fn (body ignored): 0 answers 200 with what fn appended to out, -1 answers 404.
 * For run-time switches (the inline proxy's capture: POST /capture/on, /capture/off), and only
 * as km_metrics_guard_post allows. */
typedef int (*km_metrics_action_fn)(const char *path, km_buf *out, void *ud);
void km_metrics_on_post(km_metrics_server *s, km_metrics_action_fn fn, void *ud);
/* The guard on POST (the port's GETs stay open): every POST answers 403 unless enabled or a token
 * file is given; with token_file (its first line is the token) a POST without
 * "Authorization: Bearer <token>" answers 401. -1 + err when the file cannot be read (POST stays
 * refused). The default is refused. */
int km_metrics_guard_post(km_metrics_server *s, bool enabled, const char *token_file, km_err *err);
void km_metrics_free(km_metrics_server *s);

/* One sample with its HELP and TYPE lines; type is "gauge" or "counter".  labels may be NULL or
 * e.g. "broker=\"1\"" (HELP/TYPE are written only when labels is NULL or first is true). */
void km_metrics_sample(km_buf *out, const char *name, const char *type, const char *help, const char *labels,
                       bool first, double value);

/* A histogram family (Prometheus text): counts[i] holds the observations in bucket i (not cumulative):
 * <= bounds[0], then (bounds[i-1], bounds[i]], and counts[n] those above bounds[n-1]; sum is theirs.
 * The owner keeps the counts (km_metrics_observe adds one). */
void km_metrics_histogram(km_buf *out, const char *name, const char *help, const char *labels, bool first,
                          const double *bounds, const uint64_t *counts, size_t n, double sum);
void km_metrics_observe(const double *bounds, uint64_t *counts, size_t n, double value);
/* kmproxy_build_info and the standard process_* families (CPU, memory, descriptors, start time), which
 * every exporter of this program appends to its own. */
void km_metrics_render_standard(km_buf *out);

#endif
