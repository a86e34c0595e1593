/* The continuous broker check (verify.interval.ms): every interval, with jitter, `kmproxy verify`'s check
 * (km_verify_run) against a copy of the image in a thread of its own, so that its blocking requests never stall
 * the event loop.  The image belongs to the loop thread and moves on while the check runs: the worker gets
 * km_image_copy_cluster's copy, made on the loop between batches, and owns it until it is done.  The result comes
 * back through an ev_async; the loop joins the thread (it has finished then) and keeps, per finding keyed by
 * broker, topic, partition and class, when it was first and last seen.  With verify.partitions.per.cycle each
 * cycle checks a slice, the next continuing after it (a cursor: topic name, partition), and a finding stands
 * until a cycle checks its partition again on a broker it could reach. */
#include "daemon_internal.h"
#include "km_verify.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define LOG_FINDINGS_MAX 5 /* lines a cycle naming a finding that appeared or cleared; /status has them all */

struct km_daemon_verify {
    km_daemon *d;
    ev_timer next;
    ev_async done;
    pthread_t thread;
    bool running;                /* a thread to join */
    /* the worker's, untouched by the loop until `done` */
    km_image *copy;
    km_verify_opts opts;
    char listener[256];
    km_config_broker_security sec; /* the broker channels' keys, resolved afresh each cycle (a rotated file counts) */
    km_tls_ctx *tls;
    json_t *report;
    int verdict;
    km_err err;
    /* the loop's */
    unsigned jitter_seed;        /* per instance, so that instances started together spread apart */
    double next_wait_s;          /* the wait drawn for the timer armed now (/status: the jitter at work) */
    int64_t cycles;
    int last_verdict;            /* -1: no cycle finished yet */
    int64_t inconsistent_streak; /* cycles in a row that found the brokers inconsistent (the alert's "for") */
    double last_run;             /* unix time that cycle finished */
    double last_seconds;
    int unchecked_brokers;
    int by_class[KM_VERIFY_N_CLASSES];
    int64_t image_offset;        /* the image the last cycle checked */
    char last_error[sizeof(km_err){0}.msg];
    json_t *findings;            /* "broker/topic/partition/class" -> the finding with first_seen, last_seen */
    json_t *unchecked;           /* the last cycle's [{broker, why}]: which broker could not be checked, and why */
    /* the pass over every partition, slice by slice (the cursor is read by the worker: the loop changes it only
     * between cycles) */
    char cursor_topic[256];      /* the last partition checked: the next slice starts after it */
    int32_t cursor_partition;
    bool have_cursor;            /* false: the next slice starts at the first partition */
    int64_t passes;              /* full passes finished */
    int64_t pass_checked;        /* partitions checked in the pass under way (the whole last one once it ends) */
    int64_t pass_partitions;     /* the image's partitions at the last cycle */
    bool pass_ended;             /* the next cycle begins a new pass */
};

static void *work(void *arg)
{
    struct km_daemon_verify *v = arg;
    v->report = NULL;
    v->verdict = km_verify_run(v->copy, &v->opts, &v->report, &v->err);
    ev_async_send(v->d->loop, &v->done);
    return NULL;
}

static double wait_s(km_daemon *d)
{
    double base = d->cfg.verify_interval_ms / 1000.0, j = d->cfg.verify_jitter_percent / 100.0;
    return base * (1.0 + j * (2.0 * rand_r(&d->verify->jitter_seed) / (double)RAND_MAX - 1.0));
}

/* The worker's TLS context and SASL login, from broker.security.protocol, broker.tls.* and broker.sasl.* as the
 * broker channels read them; its own, so that a SIGHUP rotating the channels' never frees one in use. */
static int cycle_security(struct km_daemon_verify *v, km_err *err)
{
    km_daemon *d = v->d;
    if (km_config_check_files(&d->cfg, err) || km_config_resolve_broker_security(&d->cfg, &v->sec, err))
        return -1; /* the files first: a FIFO must not block OpenSSL */
    km_tls_config tc = {.ca_file = d->cfg.broker_tls_ca, .cert_file = d->cfg.broker_tls_cert,
                        .key_file = d->cfg.broker_tls_key, .no_name_check = !v->sec.verify_name};
    if (v->sec.tls && !(v->tls = km_tls_client_ctx_new(&tc, err))) {
        km_config_broker_security_clear(&v->sec);
        return -1;
    }
    return 0;
}

static void cycle_security_free(struct km_daemon_verify *v)
{
    km_tls_ctx_free(v->tls);
    v->tls = NULL;
    km_config_broker_security_clear(&v->sec);
}

/* The next cycle, an interval (with jitter) after this one ended or was put off. */
static void schedule_next(EV_P_ struct km_daemon_verify *v)
{
    v->next_wait_s = wait_s(v->d);
    ev_timer_set(&v->next, v->next_wait_s, 0.);
    ev_timer_start(EV_A_ & v->next);
}

static void start_cycle(EV_P_ ev_timer *t, int revents)
{
    (void)revents;
    struct km_daemon_verify *v = t->data;
    km_daemon *d = v->d;
    if (v->running || km_image_offset(d->img) < 0 || km_image_in_transaction(d->img)) {
        schedule_next(EV_A_ v);
        return;
    }
    if (!(v->copy = km_image_copy_cluster(d->img, &v->err))) {
        km_daemon_log(d, KM_LOG_WARN, "verify: %s", v->err.msg);
        schedule_next(EV_A_ v);
        return;
    }
    if (cycle_security(v, &v->err) < 0) {
        km_daemon_log(d, KM_LOG_WARN, "verify: %s", v->err.msg);
        km_image_free(v->copy);
        v->copy = NULL;
        schedule_next(EV_A_ v);
        return;
    }
    /* a secured protocol names its listener (broker.listener, else the protocol's name), as the channels use it */
    const km_daemon_listener *l = km_daemon_listener_status(d);
    const char *secured = v->sec.tls || v->sec.mechanism != KM_SASL_NONE ? v->sec.listener : "";
    snprintf(v->listener, sizeof v->listener, "%s", l && l->name[0] ? l->name
                                                    : d->cfg.broker_listener ? d->cfg.broker_listener : secured);
    v->opts = (km_verify_opts){.listener = v->listener[0] ? v->listener : NULL,
                               .timeout_s = d->cfg.verify_timeout_ms / 1000.0, .client_id = "kmproxy-verify",
                               .after_topic = v->have_cursor ? v->cursor_topic : NULL,
                               .after_partition = v->cursor_partition,
                               .max_partitions = d->cfg.verify_partitions_per_cycle,
                               .tls = v->tls, .mechanism = v->sec.mechanism, .username = v->sec.username,
                               .password = v->sec.password};
    if (pthread_create(&v->thread, NULL, work, v)) {
        km_daemon_log(d, KM_LOG_WARN, "verify: cannot start its thread");
        cycle_security_free(v);
        km_image_free(v->copy);
        v->copy = NULL;
        schedule_next(EV_A_ v);
        return;
    }
    v->running = true;
}

/* The report's "unchecked" names a broker once per thing it could not check. */
static int distinct_brokers(const json_t *unchecked)
{
    int n = 0;
    for (size_t i = 0; i < json_array_size(unchecked); i++) {
        json_int_t id = json_integer_value(json_object_get(json_array_get(unchecked, i), "broker"));
        bool seen = false;
        for (size_t j = 0; j < i && !seen; j++)
            seen = json_integer_value(json_object_get(json_array_get(unchecked, j), "broker")) == id;
        n += !seen;
    }
    return n;
}

static bool broker_unchecked(const json_t *unchecked, json_int_t broker)
{
    size_t i;
    const json_t *u;
    json_array_foreach(unchecked, i, u)
        if (json_integer_value(json_object_get(u, "broker")) == broker)
            return true;
    return false;
}

/* Whether this cycle checked the finding's partition again on its broker: then a finding not found again is
 * gone.  Findings outside the slice, or on a broker it could not reach, stand. */
static bool rechecked(const struct km_daemon_verify *v, const json_t *slice, const json_t *f)
{
    json_int_t broker = json_integer_value(json_object_get(f, "broker"));
    return !broker_unchecked(json_object_get(v->report, "unchecked"), broker) &&
           km_verify_slice_covers(slice, v->opts.after_topic, v->opts.after_partition,
                                  json_string_value(json_object_get(f, "topic")),
                                  (int32_t)json_integer_value(json_object_get(f, "partition")));
}

static void count_classes(struct km_daemon_verify *v)
{
    const char *key;
    json_t *f;
    memset(v->by_class, 0, sizeof v->by_class);
    json_object_foreach(v->findings, key, f) {
        const char *cls = json_string_value(json_object_get(f, "class"));
        for (int c = 0; c < KM_VERIFY_N_CLASSES; c++)
            v->by_class[c] += cls && !strcmp(cls, km_verify_class_name((km_verify_class)c));
    }
}

/* "stale_leader on broker 0, t-0" (a topic-wide finding, partition -1: "on broker 0, topic t"). */
static void describe_finding(const json_t *f, char *out, size_t cap)
{
    json_int_t part = json_integer_value(json_object_get(f, "partition"));
    const char *cls = json_string_value(json_object_get(f, "class"));
    const char *topic = json_string_value(json_object_get(f, "topic"));
    long long broker = (long long)json_integer_value(json_object_get(f, "broker"));
    if (part < 0)
        snprintf(out, cap, "%s on broker %lld, topic %s", cls ? cls : "?", broker, topic ? topic : "?");
    else
        snprintf(out, cap, "%s on broker %lld, %s-%lld", cls ? cls : "?", broker, topic ? topic : "?", (long long)part);
}

/* A line for each finding that appeared or cleared this cycle (up to LOG_FINDINGS_MAX): the operator's record of
 * what went wrong and for how many checks, a transient included. */
static void log_finding_changes(struct km_daemon_verify *v, json_t *before, json_t *after)
{
    int lines = 0, more = 0;
    char what[600];
    const char *k;
    json_t *f;
    json_object_foreach(after, k, f) {
        if (json_object_get(before, k))
            continue;
        describe_finding(f, what, sizeof what);
        if (lines++ < LOG_FINDINGS_MAX)
            km_daemon_log(v->d, KM_LOG_WARN, "verify: cycle %lld: found %s", (long long)v->cycles, what);
        else
            more++;
    }
    json_object_foreach(before, k, f) {
        if (json_object_get(after, k))
            continue;
        describe_finding(f, what, sizeof what);
        if (lines++ < LOG_FINDINGS_MAX)
            km_daemon_log(v->d, KM_LOG_INFO, "verify: cycle %lld: cleared %s (found in cycles %lld to %lld)",
                          (long long)v->cycles, what, (long long)json_integer_value(json_object_get(f, "first_cycle")),
                          (long long)json_integer_value(json_object_get(f, "last_cycle")));
        else
            more++;
    }
    if (more)
        km_daemon_log(v->d, KM_LOG_INFO, "verify: cycle %lld: %d more findings appeared or cleared (/status lists "
                      "those that stand)", (long long)v->cycles, more);
}

/* The findings of this cycle replace those it checked again; one seen before keeps its first_seen and
 * first_cycle. */
static void merge_findings(struct km_daemon_verify *v, double now)
{
    const json_t *found = json_object_get(v->report, "findings"), *slice = json_object_get(v->report, "slice");
    json_t *next = json_object();
    const char *k;
    json_t *old;
    json_object_foreach(v->findings, k, old)
        if (!rechecked(v, slice, old))
            json_object_set(next, k, old);
    size_t i;
    const json_t *f;
    json_array_foreach(found, i, f) {
        const char *cls = json_string_value(json_object_get(f, "class"));
        char key[600];
        snprintf(key, sizeof key, "%lld/%s/%lld/%s", (long long)json_integer_value(json_object_get(f, "broker")),
                 json_string_value(json_object_get(f, "topic")),
                 (long long)json_integer_value(json_object_get(f, "partition")), cls ? cls : "");
        json_t *seen = json_object_get(v->findings, key), *copy = json_deep_copy(f);
        json_object_set_new(copy, "first_seen", seen ? json_incref(json_object_get(seen, "first_seen"))
                                                      : json_integer((json_int_t)now));
        json_object_set_new(copy, "last_seen", json_integer((json_int_t)now));
        json_object_set_new(copy, "first_cycle", seen ? json_incref(json_object_get(seen, "first_cycle"))
                                                       : json_integer((json_int_t)v->cycles));
        json_object_set_new(copy, "last_cycle", json_integer((json_int_t)v->cycles));
        json_object_set_new(next, key, copy);
    }
    log_finding_changes(v, v->findings, next);
    json_decref(v->findings);
    v->findings = next;
    count_classes(v);
}

/* The pass goes on after the slice just checked, or starts again once a slice reached the last partition. */
static void advance_pass(struct km_daemon_verify *v)
{
    const json_t *slice = json_object_get(v->report, "slice"), *last = json_object_get(slice, "last");
    if (v->pass_ended)
        v->pass_checked = 0;
    v->pass_checked += json_integer_value(json_object_get(slice, "partitions"));
    v->pass_partitions = json_integer_value(json_object_get(json_object_get(v->report, "image"), "partitions"));
    v->pass_ended = json_is_true(json_object_get(slice, "complete"));
    v->passes += v->pass_ended;
    v->have_cursor = !v->pass_ended && json_is_string(json_object_get(last, "topic"));
    if (v->have_cursor) {
        snprintf(v->cursor_topic, sizeof v->cursor_topic, "%s", json_string_value(json_object_get(last, "topic")));
        v->cursor_partition = (int32_t)json_integer_value(json_object_get(last, "partition"));
    }
}

static void cycle_done(EV_P_ ev_async *a, int revents)
{
    (void)revents;
    struct km_daemon_verify *v = a->data;
    km_daemon *d = v->d;
    if (!v->running)
        return;
    pthread_join(v->thread, NULL);
    v->running = false;
    v->image_offset = km_image_offset(v->copy);
    km_image_free(v->copy);
    v->copy = NULL;
    cycle_security_free(v);
    v->cycles++;
    v->last_run = (double)time(NULL);
    if (v->verdict < 0) {
        snprintf(v->last_error, sizeof v->last_error, "%s", v->err.msg);
        km_daemon_log(d, KM_LOG_WARN, "verify: %s", v->err.msg);
    } else {
        v->last_error[0] = 0;
        merge_findings(v, v->last_run);
        advance_pass(v);
        if (json_object_size(v->findings))
            v->verdict = KM_VERIFY_INCONSISTENT; /* a finding from an earlier slice, not checked again yet */
        if (v->verdict != v->last_verdict)
            km_daemon_log(d, v->verdict ? KM_LOG_WARN : KM_LOG_INFO, "verify: cycle %lld: the brokers are %s",
                          (long long)v->cycles, v->verdict == KM_VERIFY_INCONSISTENT ? "inconsistent"
                          : v->verdict == KM_VERIFY_UNCHECKED ? "unchecked" : "consistent");
        v->last_verdict = v->verdict;
        v->inconsistent_streak = v->verdict == KM_VERIFY_INCONSISTENT ? v->inconsistent_streak + 1 : 0;
        json_decref(v->unchecked);
        v->unchecked = json_incref(json_object_get(v->report, "unchecked"));
        v->unchecked_brokers = distinct_brokers(v->unchecked);
        v->last_seconds = json_real_value(json_object_get(json_object_get(v->report, "cost"), "seconds"));
    }
    json_decref(v->report);
    v->report = NULL;
    schedule_next(EV_A_ v);
}

int km_daemon_start_verify(km_daemon *d, km_err *err)
{
    if (d->cfg.verify_interval_ms <= 0)
        return 0;
    struct km_daemon_verify *v = calloc(1, sizeof *v);
    if (!v || !(v->findings = json_object())) {
        free(v);
        return km_fail(err, "out of memory");
    }
    v->d = d;
    v->last_verdict = -1;
    v->jitter_seed = (unsigned)time(NULL) ^ (unsigned)getpid() << 8;
    d->verify = v;
    v->next_wait_s = wait_s(d);
    ev_timer_init(&v->next, start_cycle, v->next_wait_s, 0.);
    ev_async_init(&v->done, cycle_done);
    v->next.data = v->done.data = v;
    ev_timer_start(d->loop, &v->next);
    ev_async_start(d->loop, &v->done);
    return 0;
}

/* A running check is waited for: it is bounded by verify.timeout.ms per broker. */
void km_daemon_stop_verify(km_daemon *d)
{
    struct km_daemon_verify *v = d->verify;
    if (!v)
        return;
    ev_timer_stop(d->loop, &v->next);
    ev_async_stop(d->loop, &v->done);
    if (v->running) {
        pthread_join(v->thread, NULL);
        json_decref(v->report);
        km_image_free(v->copy);
        cycle_security_free(v);
    }
    json_decref(v->findings);
    json_decref(v->unchecked);
    free(v);
    d->verify = NULL;
}

void km_daemon_verify_metrics(const km_daemon *d, km_buf *out)
{
    const struct km_daemon_verify *v = d->verify;
    km_metrics_sample(out, "kmproxy_verify_interval_seconds", "gauge",
                      "verify.interval.ms in seconds; 0: the continuous broker check is off.", NULL, true,
                      d->cfg.verify_interval_ms / 1000.0);
    if (!v)
        return;
    km_metrics_sample(out, "kmproxy_verify_cycles_total", "counter", "Continuous broker checks finished.", NULL,
                      true, (double)v->cycles);
    km_metrics_sample(out, "kmproxy_verify_last_verdict", "gauge",
                      "The last check: 0 consistent, 1 inconsistent, 2 some broker could not be checked; -1 none "
                      "yet.", NULL, true, v->last_verdict);
    km_metrics_sample(out, "kmproxy_verify_inconsistent_cycles", "gauge",
                      "Checks in a row, up to the last, that found the brokers inconsistent.", NULL, true,
                      (double)v->inconsistent_streak);
    km_metrics_sample(out, "kmproxy_verify_last_run_timestamp_seconds", "gauge",
                      "Unix time the last check finished (0: none yet).", NULL, true, v->last_run);
    km_metrics_sample(out, "kmproxy_verify_last_duration_seconds", "gauge", "How long the last check took.", NULL,
                      true, v->last_seconds);
    km_metrics_sample(out, "kmproxy_verify_unchecked_brokers", "gauge",
                      "Brokers (or partitions of a broker) the last check could not check.", NULL, true,
                      v->unchecked_brokers);
    km_metrics_sample(out, "kmproxy_verify_passes_total", "counter",
                      "Full passes over every partition finished (one per check unless verify.partitions.per.cycle "
                      "splits a pass into slices).", NULL, true, (double)v->passes);
    km_metrics_sample(out, "kmproxy_verify_pass_partitions_checked", "gauge",
                      "Partitions checked in the pass under way (the whole last pass once it ended).", NULL, true,
                      (double)v->pass_checked);
    km_metrics_sample(out, "kmproxy_verify_pass_partitions", "gauge",
                      "Partitions in the image at the last check: what a full pass covers.", NULL, true,
                      (double)v->pass_partitions);
    for (int c = 0; c < KM_VERIFY_N_CLASSES; c++) {
        char labels[64];
        snprintf(labels, sizeof labels, "class=\"%s\"", km_verify_class_name((km_verify_class)c));
        km_metrics_sample(out, "kmproxy_verify_findings", "gauge",
                          "Findings of the last check by class (docs/verify.md).", labels, c == 0, v->by_class[c]);
    }
}

json_t *km_daemon_verify_json(const km_daemon *d)
{
    const struct km_daemon_verify *v = d->verify;
    if (!v)
        return json_pack("{s:b}", "enabled", false);
    static const char *const VERDICTS[] = {"consistent", "inconsistent", "unchecked"};
    json_t *found = json_array();
    const char *k;
    json_t *f;
    json_object_foreach(v->findings, k, f)
        json_array_append(found, f);
    json_t *o = json_pack("{s:b,s:i,s:I,s:o,s:I,s:I,s:i,s:o,s:o,s:o}", "enabled", true, "interval_ms",
                     d->cfg.verify_interval_ms, "cycles", (json_int_t)v->cycles, "verdict",
                     v->last_verdict >= 0 ? json_string(VERDICTS[v->last_verdict]) : json_null(), "last_run",
                     (json_int_t)v->last_run, "image_offset", (json_int_t)v->image_offset, "unchecked_brokers",
                     v->unchecked_brokers, "error", v->last_error[0] ? json_string(v->last_error) : json_null(),
                     "findings", found, "unchecked", v->unchecked ? json_incref(v->unchecked) : json_array());
    json_object_set_new(o, "pass", json_pack("{s:i,s:I,s:I,s:I,s:b}", "partitions_per_cycle",
                                             d->cfg.verify_partitions_per_cycle, "passes", (json_int_t)v->passes,
                                             "partitions_checked", (json_int_t)v->pass_checked, "partitions",
                                             (json_int_t)v->pass_partitions, "ended", v->pass_ended));
    json_object_set_new(o, "next_wait_ms", json_integer((json_int_t)(v->next_wait_s * 1000.0 + 0.5)));
    return o;
}
