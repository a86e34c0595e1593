/* metadata.source=quorum: the image is fed by the KRaft observer (proxy/quorum) instead of the
 * directory follower; committed records only, through the same delta path to the consumers. */
#include "daemon_internal.h"

#include <string.h>

bool km_daemon_quorum_mode(const km_daemon *d)
{
    return d->cfg.metadata_source && !strcmp(d->cfg.metadata_source, "quorum");
}

static void on_applied(km_quorum *q, km_delta *delta, void *ud)
{
    (void)q;
    km_daemon *d = ud;
    d->batches_applied++;
    if (km_delta_is_snapshot(delta))
        km_daemon_log(d, KM_LOG_INFO, "quorum: snapshot loaded as the image at offset %lld",
                      (long long)km_image_offset(d->img));
    km_daemon_publish_delta(d, delta);
}

/* A contradiction of applied records (or an image that refuses a committed one) ends the daemon:
 * km_daemon_run then returns 1 with the reason, which names the offset and epoch. */
static void on_fatal(km_quorum *q, const km_err *why, void *ud)
{
    (void)q;
    km_daemon_fatal(ud, "metadata quorum: %s", why->msg);
}

/* An SSL or SASL_SSL controller listener: a client context from the PEM truststore (and
 * keystore); SASL_*: the login, which km_quorum copies (and this copy is wiped). */
static int open_security(km_daemon *d, km_quorum_config *qc, km_config_quorum_security *sec, km_err *err)
{
    if (km_config_resolve_quorum_security(&d->cfg, sec, err) < 0)
        return -1;
    qc->sasl.mechanism = sec->mechanism;
    qc->sasl.username = sec->username;
    qc->sasl.password = sec->password;
    if (!sec->tls)
        return 0;
    km_tls_config tc = { .ca_file = sec->ca_file, .cert_file = sec->cert_file };
    d->quorum_tls = km_tls_client_ctx_new(&tc, err);
    qc->tls = d->quorum_tls;
    return d->quorum_tls ? 0 : -1;
}

static void on_log(km_quorum *q, const char *line, void *ud)
{
    (void)q;
    km_daemon_log(ud, KM_LOG_INFO, "quorum: %s", line);
}

int km_daemon_open_quorum(km_daemon *d, km_err *err)
{
    if (d->cfg.cluster_id && km_image_set_cluster_id(d->img, d->cfg.cluster_id, err))
        return -1;
    km_quorum_config qc;
    km_config_quorum_security sec;
    km_quorum_config_init(&qc);
    if (open_security(d, &qc, &sec, err) < 0) {
        km_config_quorum_security_clear(&sec);
        return -1;
    }
    qc.bootstrap_servers = d->cfg.quorum_bootstrap_servers;
    qc.voters = d->cfg.quorum_voters;
    qc.cluster_id = d->cfg.cluster_id;
    qc.request_timeout_ms = d->cfg.quorum_request_timeout_ms;
    qc.snapshot_dir = d->cfg.quorum_snapshot_dir;
    km_quorum_handlers h = { .on_applied = on_applied, .on_fatal = on_fatal, .on_log = on_log };
    d->quorum = km_quorum_new(d->loop, &qc, d->img, &h, d, err);
    km_config_quorum_security_clear(&sec);
    return d->quorum ? 0 : -1;
}

/* Records the observer has not applied below the leader's high watermark (-1: not known yet). */
static int64_t lag_records(const km_quorum_stats *st)
{
    if (st->high_watermark < 0)
        return -1;
    int64_t lag = st->high_watermark - (st->applied_offset + 1);
    return lag > 0 ? lag : 0;
}

/* A leader that works answers within MaxWaitMs + the request timeout (answer_bound), with
 * something taken: a paused or unreachable leader, or one whose answers are refused (a corrupt
 * batch), lets since_answer pass it.  Lag is against the leader's high watermark, never against
 * what was fetched (issue 18 item 2). */
bool km_daemon_quorum_unready(const km_daemon *d, char *why, size_t cap)
{
    km_quorum_stats st;
    km_quorum_get_stats(d->quorum, &st);
    double since_start = ev_now(d->loop) - d->started_at;
    const char *last = st.last_error[0] ? st.last_error : "no failure yet: the request in flight is unanswered";
    if (st.failed)
        return false; /* on_fatal: the daemon's own "stopping" reason says why */
    if (st.unauthorized)
        snprintf(why, cap, "quorum: not authorized: %s", last);
    else if (d->reading_paused) /* our own pause: no Fetch is in flight, so no answer is missing */
        snprintf(why, cap, "quorum: fetching paused by kmproxy at offset %lld until the ZooKeeper mirror takes more "
                 "(a full sync or a re-claim runs, or the write-behind bound is full)", (long long)st.applied_offset);
    else if (st.since_answer > st.answer_bound || (st.since_answer < 0 && since_start > st.answer_bound))
        snprintf(why, cap, "quorum unreachable: no usable answer from the quorum leader for %.1f s (bound %.1f s: "
                 "MaxWaitMs + controller.quorum.request.timeout.ms); last: %s",
                 st.since_answer >= 0 ? st.since_answer : since_start, st.answer_bound, last);
    else if (lag_records(&st) < 0)
        snprintf(why, cap, "quorum: not caught up: the leader's high watermark is not known yet");
    else if (lag_records(&st) > d->cfg.health_max_lag_records)
        snprintf(why, cap, "quorum lag: %lld records behind the quorum's high watermark %lld, over "
                 "health.max.lag.records=%d", (long long)lag_records(&st), (long long)st.high_watermark,
                 d->cfg.health_max_lag_records);
    else
        return false;
    return true;
}

/* One line when the quorum becomes unusable (WARN, with the reason) and one when it is back. */
static void log_usability(km_daemon *d)
{
    char why[700];
    bool unusable = km_daemon_quorum_unready(d, why, sizeof why) && strncmp(why, "quorum: not caught up", 21) &&
                    strncmp(why, "quorum: fetching paused", 23);
    if (unusable == d->quorum_unusable)
        return;
    d->quorum_unusable = unusable;
    if (unusable)
        km_daemon_log(d, KM_LOG_WARN, "%s; /readyz is 503 until it is back", why);
    else
        km_daemon_log(d, KM_LOG_INFO, "quorum: usable again: the leader answers and the image is within "
                      "health.max.lag.records of its high watermark");
}

/* The poll timer's turn in quorum mode: hold fetching while a consumer is full, and start the
 * bridge once everything committed so far is applied. */
void km_daemon_quorum_step(km_daemon *d)
{
    bool ready = km_daemon_consumers_ready(d);
    if (ready == d->reading_paused) {
        d->reading_paused = !ready;
        km_quorum_set_paused(d->quorum, !ready);
        km_daemon_log(d, KM_LOG_INFO, "quorum: fetching %s", ready ? "resumed" : "paused until the ZooKeeper mirror "
                      "takes more (a full sync or a re-claim runs, or the write-behind bound is full)");
    }
    km_quorum_stats st;
    km_quorum_get_stats(d->quorum, &st);
    if (st.caught_up && km_daemon_cluster_id_known(d)) /* the claim's guard needs the cluster id */
        km_daemon_caught_up(d);
    log_usability(d);
}

void km_daemon_quorum_metrics(const km_daemon *d, km_buf *out)
{
    km_quorum_stats st;
    km_quorum_get_stats(d->quorum, &st);
    km_metrics_sample(out, "kmproxy_quorum_leader_id", "gauge", "The KRaft quorum leader (-1: unknown).", NULL, true,
                      st.leader_id);
    km_metrics_sample(out, "kmproxy_quorum_leader_epoch", "gauge", "The quorum epoch.", NULL, true, st.leader_epoch);
    km_metrics_sample(out, "kmproxy_quorum_high_watermark", "gauge", "The leader's high watermark.", NULL, true,
                      (double)st.high_watermark);
    char why[700];
    km_metrics_sample(out, "kmproxy_quorum_reachable", "gauge",
                      "1 while the quorum leader's answers are taken within MaxWaitMs + the request timeout.", NULL,
                      true, !(km_daemon_quorum_unready(d, why, sizeof why) && strncmp(why, "quorum unreachable", 18)
                              == 0));
    km_metrics_sample(out, "kmproxy_quorum_seconds_since_answer", "gauge",
                      "Seconds since the last answer of the quorum leader taken whole (-1: none yet).", NULL, true,
                      st.since_answer);
    km_metrics_sample(out, "kmproxy_quorum_lag_records", "gauge",
                      "The leader's high watermark minus the next offset to apply (-1: not known yet).", NULL, true,
                      (double)lag_records(&st));
    km_metrics_sample(out, "kmproxy_fetched_offset", "gauge", "Next offset to fetch (end of the records held).", NULL,
                      true, (double)st.fetched_offset);
    km_metrics_sample(out, "kmproxy_applied_offset", "gauge", "Last committed offset applied (= the image offset).",
                      NULL, true, (double)st.applied_offset);
    km_metrics_sample(out, "kmproxy_quorum_uncommitted_bytes", "gauge", "Fetched bytes waiting for the high watermark.",
                      NULL, true, (double)st.buffered_bytes);
    km_metrics_histogram(out, "kmproxy_quorum_fetch_latency_seconds", "Time from Fetch to its answer (a long poll "
                         "waits up to MaxWaitMs for records).", NULL, true, st.fetch_latency_bounds,
                         st.fetch_latency_counts, st.fetch_latency_n, st.fetch_latency_sum);
    km_metrics_sample(out, "kmproxy_quorum_fetch_errors_total", "counter",
                      "Failed exchanges (errors, lost connections, timeouts).", NULL, true, (double)st.fetch_errors);
    km_metrics_sample(out, "kmproxy_quorum_snapshot_loads_total", "counter", "Snapshots fetched and loaded.", NULL,
                      true, (double)st.snapshot_loads);
    km_metrics_sample(out, "kmproxy_quorum_snapshots_refused_total", "counter", "Fetched snapshots that failed checks.",
                      NULL, true, (double)st.snapshot_refused);
    km_metrics_sample(out, "kmproxy_quorum_leader_changes_total", "counter", "Leader changes seen.", NULL, true,
                      (double)st.leader_changes);
    km_metrics_sample(out, "kmproxy_quorum_auth_failures_total", "counter",
                      "SASL logins to a controller refused or failed.", NULL, true, (double)st.auth_failures);
    km_metrics_sample(out, "kmproxy_quorum_sasl_reauthentications_total", "counter",
                      "SASL sessions renewed on the same controller connection (connections.max.reauth.ms).", NULL,
                      true, (double)st.reauthentications);
}
