/* Broker discovery (proxy.discovery.interval.ms): the proxy asks the bootstrap upstream for the
 * cluster's brokers itself, at start and then periodically, and makes their routes as a Metadata
 * answer passing through would.  Several instances with the same config then serve every broker
 * (its dynamic listener, its SNI name) before any client names it to them: a client that learned
 * the map from one instance can reach a broker through any other, behind DNS or a load balancer. */
#include "inline_private.h"

#include <stdio.h>
#include <string.h>

#define DISCOVER_RETRY 2.0 /* seconds after a failed attempt, while the interval is longer */
#define DISCOVER_VERSION 1 /* Metadata v1: an empty topic array asks for brokers only */

static void discover_after(km_inline *p, double seconds)
{
    ev_timer_stop(p->loop, &p->disc_timer);
    ev_timer_set(&p->disc_timer, seconds, 0.);
    ev_timer_start(p->loop, &p->disc_timer);
}

static void learn_brokers(km_inline *p, const uint8_t *payload, size_t len)
{
    km_arena arena;
    km_arena_init(&arena, len * 8 + (1u << 16));
    km_reader r;
    km_reader_init(&r, payload, len);
    km_metadata_response m;
    int32_t corr;
    km_err err = {{0}};
    if (km_parse_response_header(&r, KM_API_METADATA, DISCOVER_VERSION, &corr, &err) ||
        km_decode_from(&km_metadata_response_desc, DISCOVER_VERSION, &r, &m, &arena, &err)) {
        inl_log(p, 1, "broker discovery: undecodable Metadata answer: %s", err.msg);
    } else {
        for (int32_t i = 0; i < m.brokers.count; i++) {
            const km_metadata_response_response_broker *b = &m.brokers.items[i];
            char host[INL_HOST_MAX] = "";
            if (b->host.len > 0 && (size_t)b->host.len < sizeof host)
                memcpy(host, b->host.ptr, (size_t)b->host.len);
            inl_route_for_broker(p, b->node_id, host, b->port);
        }
        p->disc_failed = false;
    }
    km_arena_free(&arena);
}

static void on_disc_frame(km_net_conn *c, const uint8_t *payload, size_t len, void *ud)
{
    km_inline *p = ud;
    learn_brokers(p, payload, len);
    km_net_close(c);
    p->disc = NULL;
    discover_after(p, p->disc_interval);
}

static void on_disc_close(km_net_conn *c, const km_err *why, void *ud)
{
    (void)c;
    km_inline *p = ud;
    p->disc = NULL;
    if (!p->disc_failed) /* once per outage, not per attempt */
        inl_log(p, 1, "broker discovery through %s:%u failed: %s; retrying", p->disc_host, p->disc_port,
                why ? why->msg : "closed before answering");
    p->disc_failed = true;
    discover_after(p, p->disc_interval < DISCOVER_RETRY ? p->disc_interval : DISCOVER_RETRY);
}

static void on_disc_timer(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)revents;
    km_inline *p = w->data;
    km_err err = {{0}};
    km_metadata_request req;
    km_metadata_request_init(&req);
    req.topics.count = 0; /* no topics: brokers only */
    km_buf frame;
    km_buf_init(&frame);
    km_net_opts opts = {.max_frame = p->max_frame, .tls = p->up_tls ? p->up_tls->ctx : NULL,
                        .tls_name = p->up_tls && !p->tls_cfg.upstream_ssl_check_hostname ? "" : NULL};
    km_net_handlers h = {.on_frame = on_disc_frame, .on_close = on_disc_close};
    if (p->disc)
        km_net_close(p->disc);
    p->disc = NULL;
    if (km_frame_request(KM_API_METADATA, DISCOVER_VERSION, 1, "kmproxy-discovery", &req, &frame, &err) ||
        !(p->disc = km_net_connect(loop, p->disc_host, p->disc_port, &opts, &h, p, &err)) ||
        km_net_send(p->disc, frame.data, frame.len, &err)) {
        km_net_close(p->disc);
        on_disc_close(NULL, &err, p); /* sent on the connection's first ready; failures come to on_close */
    }
    km_buf_free(&frame);
}

void inl_discover_start(km_inline *p, const km_inline_config *cfg)
{
    ev_timer_init(&p->disc_timer, on_disc_timer, 0., 0.);
    p->disc_timer.data = p;
    p->disc_interval = cfg->discovery_interval_ms / 1000.0;
    inl_route *boot = NULL;
    for (size_t i = 0; i < p->n_routes; i++)
        if (p->routes[i]->broker_id == -1)
            boot = p->routes[i];
    if (!cfg->discovery_interval_ms || !boot || (p->port_base < 0 && !p->sni_route))
        return; /* off, nowhere to ask, or nothing to learn (static routes only) */
    snprintf(p->disc_host, sizeof p->disc_host, "%s", boot->up_host);
    p->disc_port = boot->up_port;
    discover_after(p, 0.);
}

void inl_discover_stop(km_inline *p)
{
    ev_timer_stop(p->loop, &p->disc_timer);
    km_net_close(p->disc);
    p->disc = NULL;
}
