/* Broker simulator: listener, connections, strict request decoding and dispatch. */
#include "bsim_internal.h"

#include <errno.h>
#include <ev.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/socket.h>
#include <unistd.h>

#define BSIM_ARENA_LIMIT (256u * 1024u * 1024u)
#define E_UNSUPPORTED_VERSION 35
#define E_CLUSTER_AUTHORIZATION_FAILED 31
#define TLS_HANDSHAKE_RECORD 0x16      /* the first byte of every TLS ClientHello */

typedef struct bsim_conn {
    km_bsim *s;
    km_net_conn *c;
    bsim_auth auth;
    struct bsim_conn *prev, *next;
} bsim_conn;

/* An accepted TLS connection whose first byte has not arrived yet. */
typedef struct bsim_peek {
    km_bsim *s;
    int fd;
    char peer[64];
    ev_io io;
    struct bsim_peek *next;
} bsim_peek;

static void unlink_conn(bsim_conn *bc)
{
    bsim_auth_free(&bc->auth);
    if (bc->prev)
        bc->prev->next = bc->next;
    else
        bc->s->conns = bc->next;
    if (bc->next)
        bc->next->prev = bc->prev;
    free(bc);
}

/* A broker closes a connection whose request it cannot parse; so do we, and remember why. */
static void note_rejection(bsim_state *st, const char *why)
{
    st->rejected++;
    snprintf(st->last_rejection, sizeof st->last_rejection, "%s", why);
}

static void close_conn(bsim_conn *bc)
{
    km_net_close(bc->c);
    unlink_conn(bc);
}

static int16_t max_version(const km_bsim *s, int16_t api)
{
    if (api == KM_API_API_VERSIONS)
        return s->cfg.max_api_versions;
    return api >= 0 && api < KM_BSIM_APIS ? s->cfg.max_version[api] : -1;
}

/* Every Kafka broker lists SaslHandshake and SaslAuthenticate, SASL listener or not. */
static int api_versions_body(const km_bsim *s, int16_t code, km_api_versions_response *rs, km_arena *a)
{
    static const int16_t apis[] = { KM_API_LEADER_AND_ISR, KM_API_STOP_REPLICA, KM_API_UPDATE_METADATA,
                                    KM_API_API_VERSIONS, KM_API_SASL_HANDSHAKE, KM_API_SASL_AUTHENTICATE };
    enum { N = sizeof apis / sizeof apis[0] };
    km_api_versions_response_init(rs);
    rs->error_code = code;
    rs->api_keys.items = km_arena_alloc(a, sizeof *rs->api_keys.items * N);
    if (!rs->api_keys.items)
        return -1;
    rs->api_keys.count = N;
    for (int i = 0; i < N; i++) {
        km_api_versions_response_api_version *av = &rs->api_keys.items[i];
        memset(av, 0, sizeof *av);
        av->api_key = apis[i];
        av->min_version = 0;
        av->max_version = i < 4 ? max_version(s, apis[i]) : km_find_message(KM_K_REQUEST, apis[i])->valid.hi;
    }
    return 0;
}

/* Kafka answers an ApiVersions version it does not know with v0 and UNSUPPORTED_VERSION,
 * listing what it supports, so the client can retry. */
static int serve_api_versions(bsim_conn *bc, const km_request_header_view *h, km_reader *r, km_buf *out,
                              km_arena *a, km_err *err)
{
    km_bsim *s = bc->s;
    km_api_versions_response rs;
    int16_t v = h->api_version;
    if (v > s->cfg.max_api_versions || v < 0) {
        if (api_versions_body(s, E_UNSUPPORTED_VERSION, &rs, a))
            return km_fail(err, "brokersim: out of memory");
        s->st.err_count[E_UNSUPPORTED_VERSION]++;
        return km_frame_response(KM_API_API_VERSIONS, 0, h->correlation_id, &rs, out, err);
    }
    km_api_versions_request rq;
    if (km_decode(&km_api_versions_request_desc, v, r->p + r->pos, km_reader_left(r), &rq, a, NULL, err))
        return -1;
    if (api_versions_body(s, 0, &rs, a))
        return km_fail(err, "brokersim: out of memory");
    s->st.api_versions_count++;
    return km_frame_response(KM_API_API_VERSIONS, v, h->correlation_id, &rs, out, err);
}

typedef union control_req {
    km_leader_and_isr_request lisr;
    km_update_metadata_request umr;
    km_stop_replica_request sr;
} control_req;

typedef union control_resp {
    km_leader_and_isr_response lisr;
    km_update_metadata_response umr;
    km_stop_replica_response sr;
} control_resp;

static int dispatch(bsim_state *st, int16_t api, int16_t v, const control_req *rq, control_resp *rs, km_arena *a,
                    km_err *err)
{
    switch (api) {
    case KM_API_LEADER_AND_ISR:
        km_leader_and_isr_response_init(&rs->lisr);
        return bsim_leader_and_isr(st, v, &rq->lisr, &rs->lisr, a, err);
    case KM_API_UPDATE_METADATA:
        km_update_metadata_response_init(&rs->umr);
        return bsim_update_metadata(st, v, &rq->umr, &rs->umr, a, err);
    default:
        km_stop_replica_response_init(&rs->sr);
        return bsim_stop_replica(st, v, &rq->sr, &rs->sr, a, err);
    }
}

static int serve_control(bsim_conn *bc, const km_request_header_view *h, km_reader *r, km_buf *out, km_arena *a,
                         km_err *err)
{
    int16_t api = h->api_key, v = h->api_version;
    if (v < 0 || v > max_version(bc->s, api))
        return km_fail(err, "%s v%d is not supported (this broker advertises up to v%d)", km_api_name(api), v,
                       max_version(bc->s, api));
    control_req rq;
    const km_message_desc *md = km_find_message(KM_K_REQUEST, api);
    /* consumed == NULL: the body must fill the frame exactly, no trailing bytes */
    if (km_decode(md, v, r->p + r->pos, km_reader_left(r), &rq, a, NULL, err))
        return -1;
    control_resp rs;
    bsim_state *st = &bc->s->st;
    if (!bsim_auth_cluster_action(bc->s, &bc->auth)) { /* KafkaApis: authorizeClusterOperation throws, handleError */
        st->sec.unauthorized++;
        bsim_count_error(st, E_CLUSTER_AUTHORIZATION_FAILED);
        if (bsim_error_response(api, v, &rq, E_CLUSTER_AUTHORIZATION_FAILED, &rs, a))
            return km_fail(err, "brokersim: out of memory");
        return km_frame_response(api, v, h->correlation_id, &rs, out, err);
    }
    if (dispatch(st, api, v, &rq, &rs, a, err))
        return -1;
    st->sec.controller_requests++;
    snprintf(st->sec.last_principal, sizeof st->sec.last_principal, "%s", bc->auth.principal);
    snprintf(st->sec.last_client_id, sizeof st->sec.last_client_id, "%.*s",
             h->client_id.len > 0 ? (int)h->client_id.len : 0, h->client_id.ptr ? h->client_id.ptr : "");
    st->req_count[api][v < 16 ? v : 15]++;
    return km_frame_response(api, v, h->correlation_id, &rs, out, err);
}

static int serve(bsim_conn *bc, const uint8_t *payload, size_t len, km_buf *out, km_arena *a, bool *close_after,
                 km_err *err)
{
    km_reader r;
    km_reader_init(&r, payload, len);
    km_request_header_view h;
    if (km_parse_request_header(&r, &h, a, err))
        return -1;
    bc->s->st.total++;
    int sasl = bsim_auth_serve(bc->s, &bc->auth, &h, &r, out, a, close_after, err);
    if (sasl)
        return sasl < 0 ? -1 : 0;
    if (h.api_key == KM_API_API_VERSIONS)
        return serve_api_versions(bc, &h, &r, out, a, err);
    if (h.api_key == KM_API_LEADER_AND_ISR || h.api_key == KM_API_UPDATE_METADATA ||
        h.api_key == KM_API_STOP_REPLICA)
        return serve_control(bc, &h, &r, out, a, err);
    return km_fail(err, "api %s (%d) is not served by this simulator", km_api_name(h.api_key) ? km_api_name(h.api_key) : "?",
                   h.api_key);
}

/* 0 answer, 1 lose the request (cut), 2 lose the answer (cut), 3 never answer (muted).
 * cut_ratio's draws are splitmix64's, reproducible from cut_seed. */
static int draw_cut(km_bsim *s, const uint8_t *payload, size_t len)
{
    int16_t api = len < 2 ? -1 : (int16_t)(payload[0] << 8 | payload[1]);
    if (api < KM_API_LEADER_AND_ISR || api > KM_API_UPDATE_METADATA)
        return 0;
    if (s->cfg.cut_ratio <= 0)
        return s->muted > 0 ? (s->muted--, 3) : 0;
    uint64_t z = (s->rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    double u = (double)(z >> 11) / 9007199254740992.0;
    if (u >= s->cfg.cut_ratio)
        return s->muted > 0 ? (s->muted--, 3) : 0;
    s->st.cuts++;
    return u < s->cfg.cut_ratio / 2 ? 1 : 2;
}

static void on_frame(km_net_conn *c, const uint8_t *payload, size_t len, void *ud)
{
    (void)c;
    bsim_conn *bc = ud;
    km_bsim *s = bc->s;
    pthread_mutex_lock(&s->mu);
    int cut = draw_cut(s, payload, len);
    pthread_mutex_unlock(&s->mu);
    if (cut == 1) { /* the request is lost on the way */
        close_conn(bc);
        return;
    }
    km_arena a;
    km_arena_init(&a, BSIM_ARENA_LIMIT);
    km_buf out;
    km_buf_init(&out);
    km_err err = { "" };
    bool close_after = false;
    pthread_mutex_lock(&s->mu);
    int rc = serve(bc, payload, len, &out, &a, &close_after, &err);
    if (!rc && out.oom)
        rc = km_fail(&err, "out of memory encoding a response");
    if (!rc && cut < 2 && km_net_send(bc->c, out.data, out.len, &err))
        rc = -1;
    if (rc)
        note_rejection(&s->st, err.msg);
    if (!rc && cut == 2) /* handled, but the answer is lost on the way */
        rc = 1;
    /* dump before closing, so whoever sees the close also sees the state that caused it */
    km_err derr;
    if (s->dump_path && km_bsim_dump_locked(s, s->dump_path, &derr))
        fprintf(stderr, "brokersim %d: %s\n", s->cfg.broker_id, derr.msg);
    if (rc)
        close_conn(bc);
    else if (close_after) /* a refused authentication: answered, then closed (flushed first) */
        km_net_shutdown(bc->c);
    pthread_mutex_unlock(&s->mu);
    km_buf_free(&out);
    km_arena_free(&a);
}

static void on_close(km_net_conn *c, const km_err *why, void *ud)
{
    (void)c;
    (void)why;
    unlink_conn(ud);
}

static void accept_conn(km_bsim *s, int fd, const char *peer)
{
    static const km_net_handlers h = { .on_frame = on_frame, .on_close = on_close };
    bsim_conn *bc = calloc(1, sizeof *bc);
    km_err err;
    km_net_opts opts = { .tls = s->cfg.tls };
    if (!bc) {
        close(fd);
        return;
    }
    bc->s = s;
    if (bsim_auth_init(s, &bc->auth, &err)) {
        close(fd);
        free(bc);
        return;
    }
    bc->c = km_net_accept(s->loop, fd, peer, &opts, &h, bc, &err);
    if (!bc->c) {
        bsim_auth_free(&bc->auth);
        free(bc);
        return;
    }
    bc->next = s->conns;
    if (s->conns)
        s->conns->prev = bc;
    s->conns = bc;
}

void km_bsim_mute(km_bsim *s, int n)
{
    pthread_mutex_lock(&s->mu);
    s->muted = n;
    pthread_mutex_unlock(&s->mu);
}

static void unlink_peek(bsim_peek *pk)
{
    for (bsim_peek **pp = &pk->s->peeks; *pp; pp = &(*pp)->next)
        if (*pp == pk) {
            *pp = pk->next;
            break;
        }
    ev_io_stop(pk->s->loop, &pk->io);
    free(pk);
}

/* Plaintext on a TLS port is what a client that "fell back" would send: count it, close it. */
static void on_first_byte(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)loop;
    (void)revents;
    bsim_peek *pk = w->data;
    km_bsim *s = pk->s;
    uint8_t first;
    ssize_t n = recv(pk->fd, &first, 1, MSG_PEEK);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return;
    int fd = pk->fd;
    char peer[sizeof pk->peer];
    snprintf(peer, sizeof peer, "%s", pk->peer);
    unlink_peek(pk);
    if (n == 1 && first == TLS_HANDSHAKE_RECORD) {
        accept_conn(s, fd, peer);
        return;
    }
    if (n == 1) {
        pthread_mutex_lock(&s->mu);
        s->st.sec.plaintext_on_tls++;
        note_rejection(&s->st, "plaintext bytes on the TLS listener");
        pthread_mutex_unlock(&s->mu);
    }
    close(fd);
}

static void on_accept(km_net_listener *l, int fd, const char *peer, void *ud)
{
    (void)l;
    km_bsim *s = ud;
    if (s->unreachable) {
        close(fd);
        return;
    }
    if (!s->cfg.tls) {
        accept_conn(s, fd, peer);
        return;
    }
    bsim_peek *pk = calloc(1, sizeof *pk);
    if (!pk) {
        close(fd);
        return;
    }
    pk->s = s;
    pk->fd = fd;
    snprintf(pk->peer, sizeof pk->peer, "%s", peer);
    ev_io_init(&pk->io, on_first_byte, fd, EV_READ);
    pk->io.data = pk;
    ev_io_start(s->loop, &pk->io);
    pk->next = s->peeks;
    s->peeks = pk;
}

void km_bsim_drop_connections(km_bsim *s)
{
    while (s->peeks) {
        close(s->peeks->fd);
        unlink_peek(s->peeks);
    }
    while (s->conns) {
        km_net_close(s->conns->c);
        unlink_conn(s->conns);
    }
}

void km_bsim_set_unreachable(km_bsim *s, bool unreachable)
{
    s->unreachable = unreachable;
    if (unreachable)
        km_bsim_drop_connections(s);
}

km_bsim *km_bsim_new(struct ev_loop *loop, const km_bsim_config *cfg, km_err *err)
{
    km_bsim *s = calloc(1, sizeof *s);
    if (!s)
        return km_fail(err, "brokersim: out of memory"), NULL;
    s->loop = loop;
    s->cfg = *cfg;
    s->cfg.host = NULL;
    s->cfg.state_dump = NULL;
    if (cfg->state_dump && !(s->dump_path = strdup(cfg->state_dump))) {
        free(s);
        return km_fail(err, "brokersim: out of memory"), NULL;
    }
    pthread_mutex_init(&s->mu, NULL);
    bsim_state_init(&s->st, cfg);
    s->cfg.zk_connect = NULL;
    s->rng = cfg->cut_seed ? cfg->cut_seed : (uint64_t)cfg->broker_id * 7919u + 1;
    if (cfg->zk_connect && !(s->st.zk = bsim_zk_open(cfg->zk_connect))) {
        km_bsim_free(s);
        return km_fail(err, "brokersim %d: cannot open a ZooKeeper session to %s", cfg->broker_id,
                       cfg->zk_connect), NULL;
    }
    if (bsim_auth_config(s, cfg, err)) {
        km_bsim_free(s);
        return NULL;
    }
    s->listener = km_net_listen(loop, cfg->host ? cfg->host : "127.0.0.1", cfg->port, on_accept, s, err);
    if (!s->listener) {
        km_bsim_free(s);
        return NULL;
    }
    return s;
}

void km_bsim_free(km_bsim *s)
{
    if (!s)
        return;
    km_bsim_drop_connections(s);
    if (s->listener)
        km_net_listener_free(s->listener);
    bsim_state_free(&s->st);
    bsim_auth_free_config(s);
    pthread_mutex_destroy(&s->mu);
    free(s->dump_path);
    free(s);
}

uint16_t km_bsim_port(const km_bsim *s) { return km_net_listener_port(s->listener); }
int32_t km_bsim_broker_id(const km_bsim *s) { return s->cfg.broker_id; }
