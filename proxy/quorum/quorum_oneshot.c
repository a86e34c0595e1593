/* One question to the KRaft controllers, a server at a time (quorum_oneshot.h). */
#include "quorum_oneshot.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void try_next(q_oneshot *o);

static void stop_timers(q_oneshot *o)
{
    ev_timer_stop(o->loop, &o->deadline);
    ev_timer_stop(o->loop, &o->kick);
}

/* The deadline passed or no server is left: the timers stop first, as on_end may free o. */
static void end(q_oneshot *o)
{
    stop_timers(o);
    o->ops->on_end(o);
}

void q_oneshot_fail(q_oneshot *o, const char *why)
{
    km_fail(&o->last, "%s:%u: %s", o->servers[o->idx].host, o->servers[o->idx].port, why);
    km_sasl_client_free(o->sasl);
    o->sasl = NULL;
    if (o->conn)
        km_net_close(o->conn);
    o->conn = NULL;
    o->idx++;
    try_next(o);
}

void q_oneshot_give_up(q_oneshot *o, const char *why)
{
    o->n = o->idx + 1;
    q_oneshot_fail(o, why);
}

void q_oneshot_send(q_oneshot *o, int16_t api, int16_t version, const void *body)
{
    km_buf b;
    km_err err;
    km_buf_init(&b);
    o->api = api;
    o->version = version;
    int rc = km_frame_request(api, version, 1, o->ops->client_id, body, &b, &err);
    if (rc == 0)
        rc = km_net_send(o->conn, b.data, b.len, &err);
    km_buf_free(&b);
    if (rc < 0)
        q_oneshot_fail(o, err.msg);
}

/* The login's next request, or the question once it succeeded (rc as km_sasl's: -1, 0 done, 1 more). */
static void login_step(q_oneshot *o, int rc, const km_err *why)
{
    if (rc < 0) {
        char msg[1200];
        snprintf(msg, sizeof msg, "SASL/%s %s as '%s' failed: %s", km_sasl_mech_name(o->login->mechanism),
                 o->ops->login_word, o->login->username, why->msg);
        return q_oneshot_fail(o, msg);
    }
    if (rc == 0) {
        km_sasl_client_free(o->sasl);
        o->sasl = NULL;
        return o->ops->ask(o);
    }
    int16_t api, v;
    const void *body;
    km_sasl_client_request(o->sasl, &api, &v, &body);
    q_oneshot_send(o, api, v, body);
}

void q_oneshot_login(q_oneshot *o, const km_api_versions_response *rs)
{
    if (!o->login)
        return o->ops->ask(o);
    km_err err;
    if (!(o->sasl = km_sasl_client_new(o->login->mechanism, o->login->username, o->login->password, &err)) ||
        km_sasl_client_versions(o->sasl, rs, &err) < 0)
        return login_step(o, -1, &err);
    login_step(o, 1, NULL);
}

static void on_ready(km_net_conn *c, void *ud)
{
    (void)c;
    km_api_versions_request rq;
    q_api_versions_request(&rq); /* named, or a controller answers INVALID_REQUEST (ApiVersionsRequest.isValid) */
    q_oneshot_send(ud, KM_API_API_VERSIONS, Q_API_VERSIONS_V, &rq);
}

/* Decodes the answer to o->api into the arena and hands it on. */
static void take_answer(q_oneshot *o, const uint8_t *body, size_t len, km_arena *a)
{
    const km_message_desc *md = km_find_message(KM_K_RESPONSE, o->api);
    void *rs = km_arena_alloc(a, md->root->size);
    km_err err;
    if (!rs)
        return q_oneshot_fail(o, "out of memory");
    if (km_decode(md, o->version, body, len, rs, a, NULL, &err) < 0)
        return q_oneshot_fail(o, err.msg);
    if (o->api == KM_API_API_VERSIONS)
        o->ops->on_versions(o, rs);
    else
        o->ops->on_answer(o, rs);
}

static void on_frame(km_net_conn *c, const uint8_t *payload, size_t len, void *ud)
{
    (void)c;
    q_oneshot *o = ud;
    km_reader r;
    km_reader_init(&r, payload, len);
    km_err err;
    int32_t corr;
    /* ApiVersions answers with header v0 at every version (KIP-511: a client that does not know the
     * server yet must read the answer) */
    int16_t header_v = o->api == KM_API_API_VERSIONS ? 0 : o->version;
    if (km_parse_response_header(&r, o->api, header_v, &corr, &err) < 0)
        return q_oneshot_fail(o, err.msg);
    if (o->api == KM_API_SASL_HANDSHAKE || o->api == KM_API_SASL_AUTHENTICATE)
        return login_step(o, km_sasl_client_on_response(o->sasl, r.p + r.pos, km_reader_left(&r), &err), &err);
    km_arena a; /* on the stack: the callbacks may free o */
    km_arena_init(&a, o->ops->arena_limit);
    take_answer(o, r.p + r.pos, km_reader_left(&r), &a);
    km_arena_free(&a);
}

static void on_close(km_net_conn *c, const km_err *why, void *ud)
{
    (void)c;
    q_oneshot *o = ud;
    o->conn = NULL;
    q_oneshot_fail(o, why ? why->msg : "closed by the peer");
}

static void try_next(q_oneshot *o)
{
    static const km_net_handlers h = { .on_ready = on_ready, .on_frame = on_frame, .on_close = on_close };
    if (o->idx >= o->n)
        return end(o);
    km_net_opts opts = { .tls = o->tls, .connect_timeout = 5.0 };
    km_err err;
    o->conn = km_net_connect(o->loop, o->servers[o->idx].host, o->servers[o->idx].port, &opts, &h, o, &err);
    if (!o->conn)
        q_oneshot_fail(o, err.msg);
}

static void on_kick(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop, (void)revents;
    try_next(w->data);
}

static void on_deadline(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop, (void)revents;
    end(w->data);
}

void q_oneshot_init(q_oneshot *o, struct ev_loop *loop, km_tls_ctx *tls, const km_quorum_login *login,
                    const q_oneshot_ops *ops)
{
    *o = (q_oneshot){ .loop = loop, .tls = tls, .ops = ops };
    o->login = login && login->mechanism != KM_SASL_NONE ? login : NULL;
    ev_timer_init(&o->deadline, on_deadline, 0., 0.);
    o->deadline.data = o;
    ev_timer_init(&o->kick, on_kick, 0., 0.);
    o->kick.data = o;
}

int q_oneshot_add_servers(q_oneshot *o, const char *list, bool voter_ids, km_err *err)
{
    char *copy = strdup(list), *save = NULL;
    if (!copy)
        return km_fail(err, "out of memory");
    int rc = 0, before = o->n;
    for (char *tok = strtok_r(copy, ", ", &save); tok && !rc && o->n < Q_MAX_NODES; tok = strtok_r(NULL, ", ", &save)) {
        char *at = voter_ids ? strchr(tok, '@') : NULL;
        q_node *n = &o->servers[o->n];
        n->id = -1;
        rc = km_quorum_parse_hostport(at ? at + 1 : tok, n->host, sizeof n->host, &n->port, err);
        o->n += !rc;
    }
    free(copy);
    return rc ? -1 : o->n - before;
}

void q_oneshot_start(q_oneshot *o, double timeout_s)
{
    km_fail(&o->last, "no answer within %.1f s", timeout_s);
    ev_timer_set(&o->deadline, timeout_s, 0.);
    ev_timer_start(o->loop, &o->deadline);
    ev_timer_start(o->loop, &o->kick);
}

void q_oneshot_release(q_oneshot *o)
{
    stop_timers(o);
    if (o->conn)
        km_net_close(o->conn);
    o->conn = NULL;
    km_sasl_client_free(o->sasl);
    o->sasl = NULL;
}
