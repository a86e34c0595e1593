/* GET /status on the metrics listener: the whole migration at a glance, as one JSON object that
 * `kmproxy status` prints as a table (or passes on with --json).  Everything is read from the
 * daemon's live state at the time of the request; a part that does not exist (no quorum in
 * metadata.source=dir, no bridge on a standby, no inline proxy) is null, never made up. */
#include "daemon_internal.h"
#include "km_broker.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static const char *phase_name(km_zkb_phase p)
{
    switch (p) {
    case KM_ZKB_WAITING: return "waiting";
    case KM_ZKB_SYNC: return "full sync";
    case KM_ZKB_DUAL_WRITE: return "dual write";
    case KM_ZKB_STOPPED: return "stopped";
    }
    return "unknown";
}

static json_t *metadata_json(const km_daemon *d)
{
    const char *state = km_zk_migration_state_name(km_image_zk_migration_state(d->img));
    return json_pack("{s:s,s:s,s:I,s:i,s:I,s:i,s:i,s:b}", "source", km_daemon_quorum_mode(d) ? "quorum" : "dir",
                     "migration_state", state ? state : "unknown",
                     "image_offset", (json_int_t)km_image_offset(d->img), "image_epoch", km_image_epoch(d->img),
                     "batches_applied", (json_int_t)d->batches_applied, "partitions",
                     (int)km_image_partition_count(d->img), "metadata_version", km_image_metadata_version(d->img),
                     "reading_paused", d->reading_paused);
}

static json_t *quorum_json(const km_daemon *d)
{
    if (!d->quorum)
        return json_null();
    km_quorum_stats s;
    km_quorum_get_stats(d->quorum, &s);
    return json_pack("{s:i,s:i,s:I,s:I,s:I,s:b,s:I}", "leader_id", s.leader_id, "leader_epoch", s.leader_epoch,
                     "high_watermark", (json_int_t)s.high_watermark, "applied_offset", (json_int_t)s.applied_offset,
                     "fetched_offset", (json_int_t)s.fetched_offset, "caught_up", s.caught_up, "leader_changes",
                     (json_int_t)s.leader_changes);
}

/* The bridge's view: session state, phase, our claim, the write-behind lag, a running sync. */
static json_t *zookeeper_json(const km_daemon *d)
{
    json_t *o = json_pack("{s:s}", "connect", d->cfg.zk_connect ? d->cfg.zk_connect : "");
    km_zkb *zkb = km_daemon_zkb(d);
    if (!zkb) {
        json_object_set_new(o, "session", json_string(km_daemon_check_only(d) ? "none (check-only)"
                                                      : km_daemon_is_active(d) ? "not started" : "standby"));
        return o;
    }
    km_zkw *w = km_zkb_writer(zkb);
    km_zkw_metrics m;
    km_zkw_get_metrics(w, &m);
    json_object_set_new(o, "session", json_string(km_zkw_state_name(m.state)));
    json_object_set_new(o, "phase", json_string(phase_name(km_zkb_get_phase(zkb))));
    int32_t id, epoch;
    if (km_daemon_claimed_as(d, &id, &epoch))
        json_object_set_new(o, "claim", json_pack("{s:i,s:i,s:i}", "kraft_controller_id", id, "kraft_controller_epoch",
                                                  epoch, "zk_controller_epoch", km_zkw_zk_controller_epoch(w)));
    json_object_set_new(o, "confirmed_offset", json_integer(km_zkw_confirmed_offset(w)));
    json_object_set_new(o, "write_behind_lag", json_integer(m.write_behind_lag));
    json_object_set_new(o, "sync", json_pack("{s:s,s:I,s:I}", "stage", d->sync_eta.stage ? d->sync_eta.stage : "",
                                             "done", (json_int_t)d->sync_eta.done, "total",
                                             (json_int_t)d->sync_eta.total));
    if (m.state == KM_ZKW_FENCED || m.state == KM_ZKW_REFUSED)
        json_object_set_new(o, "fenced", json_string(km_zkw_fence_reason(w)));
    return o;
}

/* A log line as JSON: null when empty, or when not UTF-8 (jansson refuses it) rather than no status at all. */
static json_t *text_or_null(const char *s)
{
    json_t *j = s[0] ? json_string(s) : NULL;
    return j ? j : json_null();
}

static json_t *channel_json(km_bprop *p, size_t i)
{
    static const struct { const char *name; int16_t api; } apis[] = {
        {"LeaderAndIsr", KM_API_LEADER_AND_ISR}, {"UpdateMetadata", KM_API_UPDATE_METADATA},
        {"StopReplica", KM_API_STOP_REPLICA}};
    const char *host = NULL;
    uint16_t port = 0;
    km_bchan *ch = km_bprop_channel_at(p, i, &host, &port);
    json_t *versions = json_object();
    for (size_t a = 0; a < sizeof apis / sizeof apis[0]; a++) { /* -1 before the first ApiVersions */
        int16_t v = km_bchan_version(ch, apis[a].api);
        json_object_set_new(versions, apis[a].name, v < 0 ? json_null() : json_integer(v));
    }
    km_bchan_stats s;
    km_bchan_get_stats(ch, &s);
    int32_t id = km_bchan_broker_id(ch);
    return json_pack("{s:i,s:s,s:i,s:s,s:o,s:I,s:I,s:I,s:I,s:o}", "id", id, "host", host ? host : "", "port", port,
                     "state", km_bchan_state_name(ch), "versions", versions, "pending_requests",
                     (json_int_t)km_bchan_pending(ch), "pending_stops", (json_int_t)km_bprop_pending_stops(p, id),
                     "errors", (json_int_t)(s.errors[0] + s.errors[1] + s.errors[2]), "reconnects",
                     (json_int_t)s.connects, "last_error", text_or_null(s.last_error));
}

static json_t *brokers_json(const km_daemon *d)
{
    km_bprop *p = km_daemon_bprop(d);
    json_t *o = json_pack("{s:b}", "enabled", d->cfg.brokers_enabled), *chans = json_array();
    if (p) {
        json_object_set_new(o, "sending", json_boolean(km_bprop_active(p)));
        json_object_set_new(o, "fenced", json_boolean(km_bprop_fenced(p)));
        for (size_t i = 0; i < km_bprop_channel_count(p); i++)
            json_array_append_new(chans, channel_json(p, i));
    }
    json_object_set_new(o, "channels", chans);
    return o;
}

static json_t *proxy_json(const km_daemon *d)
{
    if (!d->proxy)
        return json_null();
    km_inline_stats s;
    km_inline_get_stats(d->proxy, &s);
    uint16_t bootstrap = km_inline_listen_port(d->proxy, -1);
    return json_pack("{s:I,s:I,s:I,s:I,s:I,s:o}", "listeners", (json_int_t)s.listeners, "connections_open",
                     (json_int_t)s.open, "connections_accepted", (json_int_t)s.accepted, "connections_refused",
                     (json_int_t)s.refused, "requests", (json_int_t)s.requests, "bootstrap_port",
                     bootstrap ? json_integer(bootstrap) : json_null());
}

static json_t *ha_json(const km_daemon *d)
{
    if (!d->election)
        return json_null();
    const char *active = km_daemon_is_active(d) ? d->instance : km_zkel_leader_data(d->election);
    return json_pack("{s:s,s:s,s:b,s:o,s:I,s:I}", "instance", d->instance, "node", km_zkel_node(d->election),
                     "election_session", km_zkel_connected(d->election), "active_instance", text_or_null(active),
                     "active_since", (json_int_t)d->active_since, "takeovers", (json_int_t)d->takeovers);
}

int km_daemon_status_json(km_daemon *d, km_buf *out)
{
    json_t *o = json_object();
    json_object_set_new(o, "role", json_string(km_daemon_role(d)));
    json_t *reasons = km_daemon_readyz_reasons(d);
    json_object_set_new(o, "ready", json_boolean(json_array_size(reasons) == 0));
    json_object_set_new(o, "reasons", reasons);
    json_object_set_new(o, "fatal", d->fatal[0] ? json_string(d->fatal) : json_null());
    json_object_set_new(o, "uptime_seconds", json_integer((json_int_t)(ev_now(d->loop) - d->started_at)));
    json_object_set_new(o, "metadata", metadata_json(d));
    json_object_set_new(o, "quorum", quorum_json(d));
    json_object_set_new(o, "zookeeper", zookeeper_json(d));
    json_object_set_new(o, "brokers", brokers_json(d));
    json_object_set_new(o, "proxy", proxy_json(d));
    json_object_set_new(o, "ha", ha_json(d));
    json_object_set_new(o, "verify", km_daemon_verify_json(d));
    return km_daemon_json_reply(o, out, 200);
}
