/* Capture of the client side of inline connections: what a client sent and what it got back
 * (rewritten addresses included), with its real address and the proxy's, through km_capture.
 * Only frames passing the API and broker filters and at most INL_CAPTURE_FRAME_MAX bytes are
 * copied; the capture's own queue bounds the rest (it drops, never waits).  Every worker feeds
 * the one km_capture (its writer thread formats and writes); a connection lives on one worker,
 * so its frames reach the queue in their order. */
#include "inline_private.h"

#include <stdlib.h>
#include <string.h>

int inl_capture_open(km_inline *p, const km_inline_config *cfg, km_err *err)
{
    if (!cfg->capture_pcapng && !cfg->capture_jsonl)
        return 0;
    km_capture_opts o = {.pcapng_path = cfg->capture_pcapng, .jsonl_path = cfg->capture_jsonl};
    km_err why = {{0}};
    p->cap = km_capture_open(&o, &why);
    if (!p->cap)
        return km_fail(err, "proxy.capture: %s", why.msg);
    memcpy(p->cap_apis, cfg->capture_apis, sizeof p->cap_apis);
    if (cfg->n_capture_brokers) {
        p->cap_brokers = malloc(cfg->n_capture_brokers * sizeof *p->cap_brokers);
        if (!p->cap_brokers)
            return km_fail(err, "proxy.capture: out of memory");
        memcpy(p->cap_brokers, cfg->capture_brokers, cfg->n_capture_brokers * sizeof *p->cap_brokers);
        p->n_cap_brokers = cfg->n_capture_brokers;
    }
    p->cap_on = cfg->capture_enabled;
    return 0;
}

void inl_capture_free(km_inline *p)
{
    km_err err = {{0}};
    if (p->cap && km_capture_close(p->cap, &err))
        inl_log(p, 0, "capture: %s", err.msg);
    p->cap = NULL;
    free(p->cap_brokers);
}

bool km_inline_capture(km_inline *p, bool on)
{
    bool now = on && p->cap;
    __atomic_store_n(&p->cap_on, now, __ATOMIC_RELAXED); /* each worker sees it at its next frame */
    inl_log(p, 2, "capture %s", now ? "on" : p->cap ? "off" : "unavailable: no proxy.capture.* file");
    return now;
}

bool km_inline_capture_on(const km_inline *p)
{
    return __atomic_load_n(&p->cap_on, __ATOMIC_RELAXED);
}

bool inl_capture_wanted(const km_inline *p, int32_t broker, int16_t api, size_t size)
{
    if (!__atomic_load_n(&p->cap_on, __ATOMIC_RELAXED) || size > INL_CAPTURE_FRAME_MAX || api < 0 || api > 127)
        return false;
    if ((p->cap_apis[0] || p->cap_apis[1]) && !(p->cap_apis[api / 64] >> (api % 64) & 1))
        return false;
    bool broker_ok = !p->n_cap_brokers;
    for (size_t i = 0; i < p->n_cap_brokers; i++)
        broker_ok |= p->cap_brokers[i] == broker;
    return broker_ok;
}

void inl_capture_bytes(inl_session *s, km_capture_dir dir, const uint8_t *payload, size_t len)
{
    km_inline *p = s->p;
    if (!s->cap_conn && s->client) {
        km_capture_endpoint client, server;
        km_err ignored;
        if (!km_capture_endpoints_of_fd(km_net_fd(s->client), false, &client, &server, &ignored))
            s->cap_conn = km_capture_conn_open_broker(p->cap, client, server, s->route->broker_id);
    }
    if (s->cap_conn) {
        km_capture_frame(p->cap, s->cap_conn, dir, payload, len);
        INL_ADD(s->w->stats.captured, 1);
    }
}

void inl_capture_frame(inl_session *s, km_capture_dir dir, km_buf *frame)
{
    if (!frame->oom)
        inl_capture_bytes(s, dir, frame->data, frame->len);
    if (frame->cap > INL_CAPTURE_FRAME_MAX / 4)
        km_buf_free(frame);
    km_buf_reset(frame);
}

void inl_capture_close(inl_session *s)
{
    if (s->cap_conn)
        km_capture_conn_close(s->p->cap, s->cap_conn);
    s->cap_conn = NULL;
    km_buf_free(&s->cap_req);
    km_buf_free(&s->cap_resp);
}

int km_inline_http_action(const char *path, km_buf *out, void *proxy)
{
    bool on = !strcmp(path, "/capture/on");
    if (!on && strcmp(path, "/capture/off"))
        return -1;
    bool now = km_inline_capture(proxy, on);
    const char *text = now ? "capture on\n" : on ? "capture unavailable: no proxy.capture.* file\n" : "capture off\n";
    km_buf_put(out, text, strlen(text));
    return 0;
}
