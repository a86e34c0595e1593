/* km_bchan: life cycle, connection, queue.  The wire side is in broker_chan_io.c. */
#include "broker_private.h"
#include "km_capture.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void km_bchan__log(km_bchan *ch, int level, const char *fmt, ...)
{
    char msg[1024];
    int n = snprintf(msg, sizeof msg, "broker %d: ", ch->cfg.broker_id);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg + n, sizeof msg - (size_t)n, fmt, ap);
    va_end(ap);
    if (level <= 2) /* errors and warnings: the last one is shown by /status and `kmproxy status` */
        snprintf(ch->st.last_error, sizeof ch->st.last_error, "%s", msg + n);
    if (ch->cfg.log)
        ch->cfg.log(level, msg, ch->cfg.log_ud);
    else if (level <= 2)
        fprintf(stderr, "kmproxy: %s\n", msg);
}

void km_bchan__free_item(bchan_item *it)
{
    if (!it)
        return;
    km_arena_free(&it->arena);
    free(it);
}

static void drop_queue(km_bchan *ch)
{
    while (ch->head) {
        bchan_item *it = ch->head;
        ch->head = it->next;
        km_bchan__free_item(it);
    }
    ch->tail = NULL;
    ch->queued = 0;
}

static void drop_inflight(km_bchan *ch)
{
    km_bchan__free_item(ch->inflight);
    ch->inflight = NULL;
    ch->inflight_on_wire = false;
    ev_timer_stop(ch->loop, &ch->request_timer);
}

static void connect_now(km_bchan *ch);

static void on_reconnect_timer(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    connect_now(w->data);
}

void km_bchan__disconnect(km_bchan *ch, const char *why) { km_bchan__disconnect_at(ch, 2, why); }

/* What is queued or in flight stays and goes out again after the reconnect (Kafka's
 * RequestSendThread resends the same request); only a stopped channel forgets it. */
void km_bchan__disconnect_at(km_bchan *ch, int level, const char *why)
{
    if (ch->conn) {
        km_net_close(ch->conn);
        ch->conn = NULL;
        ch->st.disconnects++;
    }
    if (ch->cap_conn) {
        km_capture_conn_close(ch->cfg.capture, ch->cap_conn);
        ch->cap_conn = NULL;
    }
    ev_timer_stop(ch->loop, &ch->request_timer);
    km_bchan__sasl_reset(ch);
    ev_timer_stop(ch->loop, &ch->sync_timer);
    ch->inflight_on_wire = false;
    if (ch->state == CH_STOPPED) {
        drop_queue(ch);
        drop_inflight(ch);
        ch->want_sync = false;
        return;
    }
    double delay = km_backoff_next(&ch->backoff);
    km_bchan__log(ch, level, "%s; reconnecting in %.3f s", why, delay);
    ch->state = CH_WAITING;
    ev_timer_set(&ch->reconnect_timer, delay, 0);
    ev_timer_start(ch->loop, &ch->reconnect_timer);
}

static void on_ready(km_net_conn *c, void *ud)
{
    km_bchan *ch = ud;
    (void)c;
    if (ch->cfg.capture) {
        km_capture_endpoint cl, sv;
        km_err err;
        if (!km_capture_endpoints_of_fd(km_net_fd(ch->conn), true, &cl, &sv, &err))
            ch->cap_conn = km_capture_conn_open(ch->cfg.capture, cl, sv);
    }
    ch->state = CH_NEGOTIATING;
    ch->av_version = 3;
    if (km_bchan__send_api_versions(ch))
        km_bchan__disconnect(ch, "cannot send ApiVersions");
}

static void on_close(km_net_conn *c, const km_err *why, void *ud)
{
    km_bchan *ch = ud;
    (void)c;
    ch->conn = NULL; /* km_net frees it after this returns */
    ch->st.disconnects++;
    char msg[600];
    snprintf(msg, sizeof msg, "connection to %s:%u lost: %s", ch->host, ch->cfg.port,
             why ? why->msg : "closed by the broker");
    km_bchan__disconnect(ch, msg);
}

static void connect_now(km_bchan *ch)
{
    static const km_net_handlers h = { .on_ready = on_ready, .on_frame = km_bchan__on_frame,
                                       .on_close = on_close };
    km_err err;
    ch->state = CH_CONNECTING;
    ch->st.connects++;
    ch->conn = km_net_connect(ch->loop, ch->host, ch->cfg.port, &ch->cfg.net, &h, ch, &err);
    if (!ch->conn)
        km_bchan__disconnect(ch, err.msg);
}

static void on_request_timer(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    km_bchan *ch = w->data;
    ch->st.timeouts++;
    char msg[128];
    snprintf(msg, sizeof msg, "no response within %.3g s", ch->cfg.request_timeout);
    km_bchan__disconnect(ch, msg);
}

/* Deferred so a full sync is never built inside the submit that overflowed. */
static void on_sync_timer(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    km_bchan *ch = w->data;
    if (ch->state != CH_READY || ch->inflight || !ch->want_sync)
        return; /* the in-flight response (or the next negotiation) re-schedules us */
    bool first = ch->sync_first;
    ch->want_sync = ch->sync_first = false;
    drop_queue(ch);
    if (!first)
        ch->st.full_syncs++;
    if (ch->h.need_full_sync)
        ch->h.need_full_sync(ch, first, ch->h.ud);
}

void km_bchan__schedule_sync(km_bchan *ch)
{
    ch->want_sync = true;
    if (ch->state == CH_READY && !ch->inflight && !ev_is_active(&ch->sync_timer)) {
        ev_timer_set(&ch->sync_timer, 0, 0);
        ev_timer_start(ch->loop, &ch->sync_timer);
    }
}

static void init_timers(km_bchan *ch)
{
    ev_timer_init(&ch->reconnect_timer, on_reconnect_timer, 0, 0);
    ev_timer_init(&ch->request_timer, on_request_timer, ch->cfg.request_timeout, 0);
    ev_timer_init(&ch->sync_timer, on_sync_timer, 0, 0);
    ch->reconnect_timer.data = ch->request_timer.data = ch->sync_timer.data = ch;
    km_bchan__sasl_init_timer(ch);
}

km_bchan *km_bchan_new(struct ev_loop *loop, const km_bchan_config *cfg, const km_bchan_hooks *hooks,
                       km_err *err)
{
    if (!cfg->host || !cfg->port)
        return km_fail(err, "broker %d: no inter-broker endpoint", cfg->broker_id), NULL;
    km_bchan *ch = calloc(1, sizeof *ch);
    if (!ch)
        return km_fail(err, "broker %d: out of memory for a channel", cfg->broker_id), NULL;
    ch->loop = loop;
    ch->cfg = *cfg;
    ch->h = *hooks;
    ch->host = strdup(cfg->host);
    ch->client_id = strdup(cfg->client_id ? cfg->client_id : "kmproxy");
    bool sasl = cfg->sasl.mechanism != KM_SASL_NONE;
    if (sasl && (!cfg->sasl.username || !cfg->sasl.password)) {
        free(ch->host);
        free(ch->client_id);
        free(ch);
        return km_fail(err, "broker %d: SASL %s needs a user name and a password", cfg->broker_id,
                       km_sasl_mech_name(cfg->sasl.mechanism)), NULL;
    }
    ch->sasl_user = sasl ? strdup(cfg->sasl.username) : NULL;
    ch->sasl_pass = sasl ? strdup(cfg->sasl.password) : NULL;
    ch->cfg.sasl.username = ch->cfg.sasl.password = NULL; /* the copies above are the ones to use */
    if (!ch->host || !ch->client_id || (sasl && (!ch->sasl_user || !ch->sasl_pass))) {
        km_bchan_free(ch);
        return km_fail(err, "broker %d: out of memory for a channel", cfg->broker_id), NULL;
    }
    if (ch->cfg.request_timeout <= 0)
        ch->cfg.request_timeout = 30;
    if (!ch->cfg.max_queue)
        ch->cfg.max_queue = 1024;
    if (!ch->cfg.net.write_limit) /* one request is queued at a time: the broker's cap plus its size prefix */
        ch->cfg.net.write_limit = KM_BROKER_MAX_REQUEST_BYTES + 4;
    km_backoff_init(&ch->backoff, cfg->backoff_base > 0 ? cfg->backoff_base : 0.05,
                    cfg->backoff_max > 0 ? cfg->backoff_max : 5, (uint64_t)cfg->broker_id * 7919u + 1);
    km_buf_init(&ch->wbuf);
    ch->corr = 1;
    ch->next_seq = 1;
    ch->ver[0] = ch->ver[1] = ch->ver[2] = -1;
    ch->released = -1;
    init_timers(ch);
    connect_now(ch);
    return ch;
}

void km_bchan_free(km_bchan *ch)
{
    if (!ch)
        return;
    ch->state = CH_STOPPED;
    km_bchan__disconnect(ch, "closing");
    ev_timer_stop(ch->loop, &ch->reconnect_timer);
    km_buf_free(&ch->wbuf);
    free(ch->host);
    free(ch->client_id);
    if (ch->sasl_pass)
        explicit_bzero(ch->sasl_pass, strlen(ch->sasl_pass));
    free(ch->sasl_user);
    free(ch->sasl_pass);
    free(ch);
}

/* Kafka reconfigures the controller's channel builder in place (DynamicBrokerConfig ->
 * SslFactory.reconfigure): connections made from then on use the new material. Here the connection
 * the channel has (or is making) is made again at once with it, so a rotated certificate or
 * password takes effect now: the request in flight is resent as it was and the queue goes on, as
 * after any reconnect (no full sync unless the broker's versions changed). */
int km_bchan_reconfigure(km_bchan *ch, const km_net_opts *net, const km_bchan_sasl *sasl, km_err *err)
{
    bool on = sasl->mechanism != KM_SASL_NONE;
    if (on && (!sasl->username || !sasl->password))
        return km_fail(err, "broker %d: SASL %s needs a user name and a password", ch->cfg.broker_id,
                       km_sasl_mech_name(sasl->mechanism));
    char *user = on ? strdup(sasl->username) : NULL, *pass = on ? strdup(sasl->password) : NULL;
    if (on && (!user || !pass)) {
        free(user);
        free(pass);
        return km_fail(err, "broker %d: out of memory reconfiguring the channel", ch->cfg.broker_id);
    }
    if (ch->sasl_pass)
        explicit_bzero(ch->sasl_pass, strlen(ch->sasl_pass));
    free(ch->sasl_user);
    free(ch->sasl_pass);
    ch->sasl_user = user;
    ch->sasl_pass = pass;
    ch->cfg.sasl.mechanism = sasl->mechanism;
    ch->cfg.net.tls = net->tls;
    ch->cfg.net.tls_name = net->tls_name;
    if (ch->state != CH_WAITING && ch->state != CH_STOPPED)
        km_bchan__disconnect(ch, "security material reloaded: connecting again with it");
    return 0;
}

int32_t km_bchan_broker_id(const km_bchan *ch) { return ch->cfg.broker_id; }
/* Renewing the SASL session is not a loss of readiness: the connection and its versions stay. */
bool km_bchan_ready(const km_bchan *ch)
{
    return (ch->state == CH_READY || (ch->state == CH_AUTHENTICATING && ch->reauthenticating)) && !ch->want_sync;
}

int16_t km_bchan_version(const km_bchan *ch, int16_t api)
{
    if (!ch->negotiated_once || ch->state == CH_STOPPED || api < KM_API_LEADER_AND_ISR ||
        api > KM_API_UPDATE_METADATA)
        return -1;
    return ch->ver[BCHAN_API_SLOT(api)];
}

size_t km_bchan_pending(const km_bchan *ch) { return ch->queued + (ch->inflight ? 1 : 0); }

void km_bchan_get_stats(const km_bchan *ch, km_bchan_stats *out)
{
    *out = ch->st;
    out->ready = km_bchan_ready(ch);
    out->stopped = ch->state == CH_STOPPED;
}

void km_bchan_stop(km_bchan *ch)
{
    ch->state = CH_STOPPED;
    km_bchan__disconnect(ch, "stopped");
    ev_timer_stop(ch->loop, &ch->reconnect_timer);
}

void km_bchan_resync(km_bchan *ch)
{
    if (ch->state == CH_STOPPED || !ch->negotiated_once)
        return; /* the first negotiation asks for a catch-up anyway */
    drop_queue(ch);
    if (ch->inflight && !ch->inflight_on_wire)
        drop_inflight(ch); /* waiting for a reconnect: the full sync replaces it */
    km_bchan__schedule_sync(ch);
}

void km_bchan_release(km_bchan *ch, int64_t offset)
{
    if (offset > ch->released) {
        ch->released = offset;
        km_bchan__kick(ch);
    }
}

void km_bchan_hold(km_bchan *ch, bool hold)
{
    ch->holding = hold;
    if (!hold)
        km_bchan__kick(ch);
}

static int64_t overflow(km_bchan *ch, km_arena *arena)
{
    ch->st.overflows++;
    ch->st.dropped += ch->queued + 1;
    km_bchan__log(ch, 2, "queue full (%zu requests): dropping them for a full sync", ch->queued);
    drop_queue(ch);
    km_arena_free(arena);
    km_bchan__schedule_sync(ch);
    return 0;
}

int64_t km_bchan_submit(km_bchan *ch, int16_t api, void *body, km_arena *arena, km_err *err)
{
    return km_bchan_submit_gated(ch, api, body, arena, -1, err);
}

int64_t km_bchan_submit_gated(km_bchan *ch, int16_t api, void *body, km_arena *arena, int64_t gate, km_err *err)
{
    if (api < KM_API_LEADER_AND_ISR || api > KM_API_UPDATE_METADATA)
        return km_fail(err, "broker %d: api %d is not a control request", ch->cfg.broker_id, api);
    if (!ch->negotiated_once || ch->state == CH_STOPPED || ch->want_sync) {
        ch->st.dropped++;
        km_arena_free(arena);
        return 0;
    }
    if (ch->queued >= ch->cfg.max_queue)
        return overflow(ch, arena);
    bchan_item *it = calloc(1, sizeof *it);
    if (!it)
        return overflow(ch, arena); /* out of memory: the same remedy as a full queue */
    it->api = api;
    it->version = ch->ver[BCHAN_API_SLOT(api)];
    it->body = body;
    it->arena = *arena;
    km_arena_init(arena, arena->limit);
    it->seq = ch->next_seq++;
    it->gate = gate;
    if (ch->tail)
        ch->tail->next = it;
    else
        ch->head = it;
    ch->tail = it;
    ch->queued++;
    int64_t seq = it->seq; /* kick may send it at once, and drop (free) it if it cannot be sent */
    km_bchan__kick(ch);
    return seq;
}

void km_bchan__kick(km_bchan *ch)
{
    if (km_bchan__sasl_maybe_reauthenticate(ch))
        return; /* what is queued goes once the session is renewed */
    if (ch->state == CH_READY && !ch->holding && !ch->inflight && !ch->want_sync && ch->head &&
        ch->head->gate <= ch->released) {
        bchan_item *it = ch->head;
        ch->head = it->next;
        if (!ch->head)
            ch->tail = NULL;
        ch->queued--;
        it->next = NULL;
        ch->inflight = it;
        km_bchan__send_head(ch);
    }
}

const char *km_bchan_state_name(const km_bchan *ch)
{
    switch (ch->state) {
    case CH_WAITING: return "backoff";
    case CH_CONNECTING: return "connecting";
    case CH_NEGOTIATING: return "negotiating";
    case CH_AUTHENTICATING: return ch->reauthenticating ? "reauthenticating" : "authenticating";
    case CH_READY: return ch->want_sync ? "syncing" : "ready";
    case CH_STOPPED: return "stopped";
    }
    return "unknown";
}
