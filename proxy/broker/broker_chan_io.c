/* km_bchan: ApiVersions negotiation, sending, responses and what each error means. */
#include "broker_private.h"
#include "km_capture.h"

#include <stdlib.h>
#include <string.h>

#define E_UNSUPPORTED_VERSION 35
#define E_STALE_CONTROLLER_EPOCH 11
#define E_STALE_BROKER_EPOCH 77
#define LOGGED_PARTITION_ERRORS 5      /* per response; the rest are only counted */
#define RESPONSE_ARENA_LIMIT (256u * 1024u * 1024u)

void km_bchan__capture(km_bchan *ch, int dir, const uint8_t *payload, size_t len)
{
    if (ch->cap_conn)
        km_capture_frame(ch->cfg.capture, ch->cap_conn, (km_capture_dir)dir, payload, len);
}

int km_bchan__send_framed(km_bchan *ch, int16_t api, int16_t v, const void *body, km_err *err)
{
    km_buf_reset(&ch->wbuf);
    ch->inflight_corr = ch->corr++;
    if (ch->corr == INT32_MAX)
        ch->corr = 1;
    if (km_frame_request(api, v, ch->inflight_corr, ch->client_id, body, &ch->wbuf, err))
        return -1;
    if (ch->wbuf.oom)
        return km_fail(err, "out of memory encoding %s v%d", km_api_name(api), v);
    if (ch->wbuf.len - 4 > KM_BROKER_MAX_REQUEST_BYTES) /* the broker would close the connection on it */
        return km_fail(err, "%s v%d is %zu bytes, above the broker's socket.request.max.bytes (%u)", km_api_name(api),
                       v, ch->wbuf.len - 4, KM_BROKER_MAX_REQUEST_BYTES);
    km_bchan__capture(ch, KM_CAPTURE_C2S, ch->wbuf.data + 4, ch->wbuf.len - 4);
    if (km_net_send(ch->conn, ch->wbuf.data, ch->wbuf.len, err))
        return -1;
    ev_timer_set(&ch->request_timer, ch->cfg.request_timeout, 0);
    ev_timer_start(ch->loop, &ch->request_timer);
    return 0;
}

int km_bchan__send_api_versions(km_bchan *ch)
{
    km_api_versions_request rq;
    km_api_versions_request_init(&rq);
    rq.client_software_name = km_cstr("kmproxy");
    rq.client_software_version = km_cstr(KM_SOFTWARE_VERSION);
    km_err err;
    if (km_bchan__send_framed(ch, KM_API_API_VERSIONS, ch->av_version, &rq, &err)) {
        km_bchan__log(ch, 1, "ApiVersions: %s", err.msg);
        return -1;
    }
    return 0;
}

static int32_t *controller_epoch_field(bchan_item *it)
{
    if (it->api == KM_API_LEADER_AND_ISR)
        return &((km_leader_and_isr_request *)it->body)->controller_epoch;
    if (it->api == KM_API_STOP_REPLICA)
        return &((km_stop_replica_request *)it->body)->controller_epoch;
    return &((km_update_metadata_request *)it->body)->controller_epoch;
}

/* The ZooKeeper controller epoch is read at each send (a re-claim after a session expiry
 * bumps it), as Kafka's channel manager reads it when it sends a batch. */
void km_bchan__send_head(km_bchan *ch)
{
    bchan_item *it = ch->inflight;
    if (!it || ch->inflight_on_wire || ch->state != CH_READY)
        return;
    int32_t epoch = ch->h.controller_epoch ? ch->h.controller_epoch(ch, ch->h.ud) : -1;
    if (epoch >= 0)
        *controller_epoch_field(it) = epoch;
    km_err err;
    if (!km_bchan__send_framed(ch, it->api, it->version, it->body, &err)) {
        ch->inflight_on_wire = true;
        ch->st.sent[BCHAN_API_SLOT(it->api)]++;
        if (it->sends++)
            ch->st.resent++;
        return;
    }
    /* It can never be sent (too large for the write limit, or unencodable): drop it. */
    km_bchan__log(ch, 1, "dropping %s v%d: %s", km_api_name(it->api), it->version, err.msg);
    ch->st.dropped++;
    km_bchan__free_item(it);
    ch->inflight = NULL;
    km_bchan__kick(ch);
}

/* ---- negotiation ------------------------------------------------------------------------ */

static int negotiate(km_bchan *ch, const km_api_versions_response *rs)
{
    static const int16_t apis[3] = { KM_API_LEADER_AND_ISR, KM_API_STOP_REPLICA, KM_API_UPDATE_METADATA };
    for (int i = 0; i < 3; i++) {
        const km_message_desc *md = km_find_message(KM_K_REQUEST, apis[i]);
        int16_t v = -1;
        for (int32_t k = 0; k < rs->api_keys.count; k++) {
            const km_api_versions_response_api_version *av = &rs->api_keys.items[k];
            if (av->api_key != apis[i])
                continue;
            int16_t hi = av->max_version < md->valid.hi ? av->max_version : md->valid.hi;
            v = hi >= av->min_version && hi >= md->valid.lo ? hi : -1;
        }
        if (v < 0) {
            km_bchan__log(ch, 1, "the broker offers no %s version we speak", km_api_name(apis[i]));
            return -1;
        }
        ch->ver[i] = v;
    }
    return 0;
}

/* Kafka answers an ApiVersions version it does not know with a v0 body. */
static void on_api_versions(km_bchan *ch, km_reader *r, km_arena *a)
{
    km_api_versions_response rs;
    km_err err;
    const uint8_t *body = r->p + r->pos;
    size_t left = km_reader_left(r);
    if (km_decode(&km_api_versions_response_desc, ch->av_version, body, left, &rs, a, NULL, &err) &&
        km_decode(&km_api_versions_response_desc, 0, body, left, &rs, a, NULL, &err)) {
        km_bchan__disconnect(ch, err.msg);
        return;
    }
    if (rs.error_code == E_UNSUPPORTED_VERSION && ch->av_version > 0) {
        /* retry at the highest version the broker listed for ApiVersions (as Kafka's clients do) */
        int16_t v = 0;
        for (int32_t k = 0; k < rs.api_keys.count; k++)
            if (rs.api_keys.items[k].api_key == KM_API_API_VERSIONS)
                v = rs.api_keys.items[k].max_version;
        ch->av_version = v > 0 && v < ch->av_version ? v : 0;
        if (km_bchan__send_api_versions(ch))
            km_bchan__disconnect(ch, "cannot send ApiVersions");
        return;
    }
    memcpy(ch->ver_before, ch->ver, sizeof ch->ver_before);
    if (rs.error_code || negotiate(ch, &rs)) {
        km_bchan__log(ch, 1, "ApiVersions: %s", km_broker_err_name(rs.error_code));
        km_bchan__disconnect(ch, "version negotiation failed");
        return;
    }
    int sasl = km_bchan__sasl_start(ch, &rs);
    if (sasl < 0)
        km_bchan__disconnect_at(ch, ch->auth_failure_logged ? 4 : 2, "SASL authentication cannot start");
    else if (sasl > 0)
        km_bchan__become_ready(ch);
}

void km_bchan__become_ready(km_bchan *ch)
{
    ch->state = CH_READY;
    km_bchan__log(ch, 3, "ready: LeaderAndIsr v%d, StopReplica v%d, UpdateMetadata v%d", ch->ver[0], ch->ver[1],
                  ch->ver[2]);
    if (!ch->negotiated_once) {
        ch->negotiated_once = ch->sync_first = true;
        km_bchan__schedule_sync(ch);
    } else if (memcmp(ch->ver_before, ch->ver, sizeof ch->ver)) {
        km_bchan__log(ch, 2, "versions changed since the last connection: what was queued is rebuilt");
        km_bchan_resync(ch); /* what is queued was built for the old versions */
    } else {
        km_bchan__resume(ch);
    }
}

void km_bchan__resume(km_bchan *ch)
{
    ch->state = CH_READY;
    if (ch->inflight)
        km_bchan__send_head(ch); /* the same request again; a due full sync follows its answer */
    else if (ch->want_sync)
        km_bchan__schedule_sync(ch);
    else
        km_bchan__kick(ch);
}

/* ---- responses ------------------------------------------------------------------------------ */

typedef union control_resp {
    km_leader_and_isr_response lisr;
    km_stop_replica_response sr;
    km_update_metadata_response umr;
} control_resp;

static void partition_error(km_bchan *ch, int16_t api, const char *topic, int32_t p, int16_t code, int *logged)
{
    if (!code)
        return;
    ch->st.errors[BCHAN_API_SLOT(api)]++;
    ch->st.error_by_code[code > 0 && code < 128 ? code : 0]++;
    /* KAFKA_STORAGE_ERROR: the replica is offline on that broker (Kafka logs it as an error) */
    if ((*logged)++ < LOGGED_PARTITION_ERRORS)
        km_bchan__log(ch, code == 56 ? 1 : 2, "%s: partition %s-%d: %s (%d)", km_api_name(api), topic, p,
                      km_broker_err_name(code), code);
}

static void lisr_errors(km_bchan *ch, int16_t v, const km_leader_and_isr_response *rs, int *logged)
{
    if (v < 5) {
        for (int32_t i = 0; i < rs->partition_errors.count; i++) {
            const km_leader_and_isr_response_partition_error *pe = &rs->partition_errors.items[i];
            partition_error(ch, KM_API_LEADER_AND_ISR, pe->topic_name.ptr, pe->partition_index, pe->error_code,
                            logged);
        }
        return;
    }
    for (int32_t t = 0; t < rs->topics.count; t++) {
        char id[23];
        km_uuid_to_base64(rs->topics.items[t].topic_id, id);
        const char *name = ch->h.topic_name ? ch->h.topic_name(ch, rs->topics.items[t].topic_id, ch->h.ud) : NULL;
        for (int32_t i = 0; i < rs->topics.items[t].partition_errors.count; i++) {
            const km_leader_and_isr_response_partition_error *pe = &rs->topics.items[t].partition_errors.items[i];
            partition_error(ch, KM_API_LEADER_AND_ISR, name ? name : id, pe->partition_index, pe->error_code,
                            logged);
        }
    }
}

/* Logs and counts every error; returns the top-level code. */
static int16_t account(km_bchan *ch, int16_t api, int16_t v, const control_resp *rs)
{
    int logged = 0;
    int16_t top = api == KM_API_LEADER_AND_ISR ? rs->lisr.error_code
                  : api == KM_API_STOP_REPLICA ? rs->sr.error_code : rs->umr.error_code;
    if (top) {
        ch->st.errors[BCHAN_API_SLOT(api)]++;
        ch->st.error_by_code[top > 0 && top < 128 ? top : 0]++;
        km_bchan__log(ch, 2, "%s v%d: %s (%d)", km_api_name(api), v, km_broker_err_name(top), top);
        return top; /* per-partition codes then only repeat it */
    }
    if (api == KM_API_LEADER_AND_ISR)
        lisr_errors(ch, v, &rs->lisr, &logged);
    for (int32_t i = 0; api == KM_API_STOP_REPLICA && i < rs->sr.partition_errors.count; i++) {
        const km_stop_replica_response_partition_error *pe = &rs->sr.partition_errors.items[i];
        partition_error(ch, api, pe->topic_name.ptr, pe->partition_index, pe->error_code, &logged);
    }
    if (logged > LOGGED_PARTITION_ERRORS)
        km_bchan__log(ch, 2, "%s: %d partition errors in all", km_api_name(api), logged);
    return 0;
}

static void finish(km_bchan *ch, int16_t top)
{
    bchan_item *it = ch->inflight;
    ch->inflight = NULL;
    ch->inflight_on_wire = false;
    ch->st.acked[BCHAN_API_SLOT(it->api)]++;
    km_backoff_reset(&ch->backoff);
    int16_t api = it->api;
    int64_t seq = it->seq;
    km_bchan__free_item(it);
    if (ch->want_sync)
        km_bchan__schedule_sync(ch);
    else
        km_bchan__kick(ch);
    if (ch->h.done)
        ch->h.done(ch, api, (uint64_t)seq, top, ch->h.ud);
}

static void on_control_response(km_bchan *ch, km_reader *r, km_arena *a)
{
    bchan_item *it = ch->inflight;
    control_resp rs;
    km_err err;
    const km_message_desc *md = km_find_message(KM_K_RESPONSE, it->api);
    if (km_decode(md, it->version, r->p + r->pos, km_reader_left(r), &rs, a, NULL, &err)) {
        km_bchan__disconnect(ch, err.msg);
        return;
    }
    int16_t top = account(ch, it->api, it->version, &rs);
    if (top == E_STALE_CONTROLLER_EPOCH && !ch->h.stale_controller_epoch) {
        km_bchan__log(ch, 1, "STALE_CONTROLLER_EPOCH: another controller owns the ZK brokers; stopping");
        km_bchan_stop(ch);
        if (ch->h.fenced)
            ch->h.fenced(ch, ch->h.ud);
        return;
    }
    int32_t sent_epoch = *controller_epoch_field(it);
    if (top == E_STALE_BROKER_EPOCH) {
        /* Kafka drops it (the broker has a newer registration than we know): the requests of
         * the registration that follows carry the new epoch. */
        ch->st.stale_broker_epoch++;
        ch->st.dropped++;
    }
    if (top == E_STALE_CONTROLLER_EPOCH)
        ch->st.stale_controller_epoch++;
    finish(ch, top);
    if (top == E_STALE_CONTROLLER_EPOCH) /* the owner asks ZooKeeper whose epoch it is */
        ch->h.stale_controller_epoch(ch, sent_epoch, ch->h.ud);
}

void km_bchan__on_frame(km_net_conn *c, const uint8_t *payload, size_t len, void *ud)
{
    (void)c;
    km_bchan *ch = ud;
    km_bchan__capture(ch, KM_CAPTURE_S2C, payload, len);
    bool negotiating = ch->state == CH_NEGOTIATING, authenticating = ch->state == CH_AUTHENTICATING;
    if (!negotiating && !authenticating && (!ch->inflight || !ch->inflight_on_wire)) {
        km_bchan__disconnect(ch, "a response nobody asked for");
        return;
    }
    int16_t api = negotiating ? KM_API_API_VERSIONS : authenticating ? ch->sasl_api : ch->inflight->api;
    int16_t v = negotiating ? ch->av_version : authenticating ? ch->sasl_version : ch->inflight->version;
    km_reader r;
    km_reader_init(&r, payload, len);
    int32_t corr;
    km_err err;
    if (km_parse_response_header(&r, api, v, &corr, &err) || corr != ch->inflight_corr) {
        km_bchan__disconnect(ch, "response header does not match the request in flight");
        return;
    }
    ev_timer_stop(ch->loop, &ch->request_timer);
    km_arena a;
    km_arena_init(&a, RESPONSE_ARENA_LIMIT);
    if (negotiating)
        on_api_versions(ch, &r, &a);
    else if (authenticating)
        km_bchan__sasl_on_response(ch, &r);
    else
        on_control_response(ch, &r, &a);
    km_arena_free(&a);
}
