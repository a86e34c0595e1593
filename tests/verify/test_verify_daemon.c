/* test_verify_daemon.c - the daemon's continuous broker check (verify.interval.ms): a `kmproxy run` process on a
 * generated log and a real ZooKeeper, its one broker played by the fake of verify_fakebroker.c.  The check runs
 * every interval; a broker answering a stale leader epoch is flagged in /metrics and /status (first_seen kept
 * across cycles) and clears once it answers as the image says; verify.interval.ms=0 runs no check at all. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "km_testsupport.h"
#include "ops_daemon.h"
#include "verify_fakebroker.h"

typedef struct rig {
    km_zks *zs;
    env e;
    km_image *img;
    uint16_t port;
    int lfd;
    pid_t broker;
    char stale_flag[600];  /* while this file exists the fake answers topic-0-0 one leader epoch behind */
    char gone_flag[600];   /* while this file exists the fake hangs up on every connection */
    bool silent;           /* nobody answers: the broker's port accepts connections and never replies */
    bool check_only;       /* no zookeeper.connect: a check-only instance */
} rig;

static void listen_loopback(rig *r)
{
    r->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t len = sizeof a;
    cr_assert(r->lfd >= 0 && bind(r->lfd, (struct sockaddr *)&a, sizeof a) == 0 && listen(r->lfd, 8) == 0 &&
              getsockname(r->lfd, (struct sockaddr *)&a, &len) == 0);
    r->port = ntohs(a.sin_port);
}

static void serve(rig *r)
{
    pid_t parent = getpid();
    if ((r->broker = fork()))
        return;
    km_test_die_with_parent(parent);
    for (;;) {
        int c = accept(r->lfd, NULL, NULL);
        struct stat st;
        while (c >= 0 && stat(r->gone_flag, &st) != 0 && vf_answer_one(c, r->img, r->port, stat(r->stale_flag, &st) == 0 ? VF_STALE_EPOCH : VF_EXACT))
            ;
        close(c);
    }
}

/* A log of one migrating broker (the fake, answering stale) with two topics, a ZooKeeper, the fake serving, and
 * `kmproxy run` on them (brokers.enabled=false: the fake answers only the verifier) with extra settings. */
static void rig_up(rig *r, inst *in, const char *tag, const char *const *extra)
{
    r->zs = ops_zk_start();
    listen_loopback(r);
    r->e.dir = km_test_tmpdir("verify-daemon");
    snprintf(r->e.metadata, sizeof r->e.metadata, "%s/log", r->e.dir);
    snprintf(r->stale_flag, sizeof r->stale_flag, "%s/stale", r->e.dir);
    snprintf(r->gone_flag, sizeof r->gone_flag, "%s/gone", r->e.dir);
    r->img = km_image_new();
    km_gen_opts o = { .brokers = 1, .topics = 2, .partitions = 2, .zk_migration = true, .seed = 26,
                      .leader_changes = 4, .broker_host = "127.0.0.1", .broker_ports = &r->port };
    km_err err;
    cr_assert(km_gen_write(r->e.metadata, &o, r->img, &err) > 0, "%s", err.msg);
    FILE *f = fopen(r->stale_flag, "w");
    cr_assert(f);
    fclose(f);
    if (!r->silent)
        serve(r);
    char zk[300];
    snprintf(zk, sizeof zk, "%s/%s", km_zks_hosts(r->zs, 0), tag);
    start(in, &r->e, tag, r->check_only ? NULL : zk, extra);
}

static void rig_down(rig *r)
{
    if (r->broker > 0) {
        kill(r->broker, SIGKILL);
        waitpid(r->broker, NULL, 0);
    }
    close(r->lfd);
    km_image_free(r->img);
    km_zks_stop(r->zs);
    env_free(&r->e);
}

static double labelled(const char *text, const char *sample)
{
    const char *at = strstr(text, sample);
    cr_assert(at, "no %s in %s", sample, text);
    return atof(at + strlen(sample));
}

/* /status's verify part (asserts it parses). */
static json_t *status_verify(inst *in)
{
    char *body = NULL;
    cr_assert_eq(ops_curl(in->port, "/status", &body), 200, "%s", body);
    json_error_t je;
    json_t *st = json_loads(body, 0, &je), *v = json_incref(json_object_get(st, "verify"));
    cr_assert(v, "no verify in /status: %s", body);
    json_decref(st);
    free(body);
    return v;
}

/* `kmproxy status` prints the check's line and its findings. */
static void assert_status_line(inst *in, const char *line, const char *finding)
{
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", in->port);
    char *argv[] = { (char *)km_test_binary(), "status", "--url", url, NULL };
    char *out = NULL, *errs = NULL;
    size_t n;
    int rc = km_test_run(argv, NULL, 0, &out, &n, &errs);
    cr_assert(rc == 0 && strstr(out, line) && (!finding || strstr(out, finding)), "exit %d: %s / %s", rc, out, errs);
    free(out);
    free(errs);
}

/* Scrapes /metrics until `name` is at least `least` and, when `also` is set, `also` equals `also_value` in the
 * same scrape: a counter moves on between two scrapes under load, so waiting for one exact value may never see it. */
static char *scrape_reaching(inst *in, const char *name, double least, const char *also, double also_value)
{
    char key[128], *body = NULL;
    snprintf(key, sizeof key, "\n%s ", name);
    for (int i = 0; i < 600; i++, usleep(100000)) {
        free(body);
        body = NULL;
        if (ops_curl(in->port, "/metrics", &body) == 200 && strstr(body, key) && metric(body, name) >= least &&
            (!also || metric(body, also) == also_value))
            return body;
    }
    cr_assert_fail("/metrics never had %s >= %g%s%s; last: %s", name, least, also ? " with " : "", also ? also : "",
                   body);
    return NULL;
}

TestSuite(verify_daemon, .timeout = 300);

Test(verify_daemon, a_stale_broker_is_flagged_each_interval_and_clears_once_it_answers_right)
{
    rig r = { 0 };
    inst in;
    const char *extra[] = { "brokers.enabled=false", "verify.interval.ms=300", "verify.jitter.percent=0",
                            "verify.timeout.ms=5000", NULL };
    rig_up(&r, &in, "verify", extra);
    char *m = scrape_until(&in, "/metrics", 200, "kmproxy_verify_findings{class=\"metadata_stale\"} 1", 60);
    cr_assert_eq(metric(m, "kmproxy_verify_last_verdict"), 1, "%s", m);
    cr_assert_eq(labelled(m, "kmproxy_verify_findings{class=\"isr_differs\"} "), 0, "%s", m);
    double cycles = metric(m, "kmproxy_verify_cycles_total");
    free(m);

    json_t *v = status_verify(&in), *f = json_array_get(json_object_get(v, "findings"), 0);
    cr_assert(json_array_size(json_object_get(v, "findings")) == 1 &&
                  !strcmp(json_string_value(json_object_get(v, "verdict")), "inconsistent") &&
                  !strcmp(json_string_value(json_object_get(f, "class")), "metadata_stale") &&
                  !strcmp(json_string_value(json_object_get(f, "topic")), "topic-0") &&
                  json_integer_value(json_object_get(f, "partition")) == 0 &&
                  json_integer_value(json_object_get(f, "broker")) == 1,
              "%s", json_dumps(v, 0));
    json_int_t first_seen = json_integer_value(json_object_get(f, "first_seen"));
    json_decref(v);
    assert_status_line(&in, "verify     inconsistent", "broker 1 topic-0-0 metadata_stale since");

    /* two more cycles: the check keeps running, and the finding keeps the time it was first seen */
    free(scrape_reaching(&in, "kmproxy_verify_cycles_total", cycles + 2, NULL, 0));
    v = status_verify(&in);
    f = json_array_get(json_object_get(v, "findings"), 0);
    cr_assert(json_integer_value(json_object_get(f, "first_seen")) == first_seen &&
                  json_integer_value(json_object_get(f, "last_seen")) >= first_seen &&
                  json_integer_value(json_object_get(v, "cycles")) >= (json_int_t)cycles + 2,
              "%s", json_dumps(v, 0));
    json_decref(v);

    /* the broker learns the leader epoch: the next cycle clears it */
    cr_assert_eq(unlink(r.stale_flag), 0);
    m = scrape_until(&in, "/metrics", 200, "kmproxy_verify_last_verdict 0\n", 60);
    cr_assert_eq(labelled(m, "kmproxy_verify_findings{class=\"metadata_stale\"} "), 0, "%s", m);
    cr_assert_eq(metric(m, "kmproxy_verify_unchecked_brokers"), 0, "%s", m);
    free(m);
    v = status_verify(&in);
    cr_assert(json_array_size(json_object_get(v, "findings")) == 0 &&
                  !strcmp(json_string_value(json_object_get(v, "verdict")), "consistent"),
              "%s", json_dumps(v, 0));
    json_decref(v);
    stop_cleanly(&in);
    rig_down(&r);
}

/* No zookeeper.connect: a check-only instance (role checker, kmproxy_ha_active 0, ready once it read the log) flags
 * and clears the stale broker as any instance does; it stops cleanly (exit 0: sanitizers quiet in their build). */
Test(verify_daemon, a_check_only_instance_checks_without_zookeeper)
{
    rig r = { .check_only = true };
    inst in;
    const char *extra[] = { "brokers.enabled=false", "verify.interval.ms=300", "verify.timeout.ms=5000", NULL };
    rig_up(&r, &in, "verify-check-only", extra);
    char *m = scrape_until(&in, "/metrics", 200, "kmproxy_verify_findings{class=\"metadata_stale\"} 1", 60);
    cr_assert_eq(metric(m, "kmproxy_ha_active"), 0, "%s", m);
    free(m);
    char *body = NULL;
    cr_assert_eq(ops_curl(in.port, "/readyz", &body), 200, "%s", body);
    free(body);
    body = NULL;
    cr_assert_eq(ops_curl(in.port, "/status", &body), 200, "%s", body);
    cr_assert(strstr(body, "\"role\":\"checker\"") && strstr(body, "\"session\":\"none (check-only)\"") &&
                  strstr(body, "\"first_cycle\":"),
              "%s", body);
    free(body);
    cr_assert_eq(unlink(r.stale_flag), 0);
    free(scrape_until(&in, "/metrics", 200, "kmproxy_verify_last_verdict 0\n", 60));
    cr_assert(ops_wait_for(&in.p, in.log_file, "cleared metadata_stale on broker 1, topic-0-0 (found in cycles", 1, 10),
              "no line naming the cleared finding: %s", ops_slurp(in.log_file));
    stop_cleanly(&in);
    rig_down(&r);
}

Test(verify_daemon, interval_zero_runs_no_check)
{
    rig r = { 0 };
    inst in;
    const char *extra[] = { "brokers.enabled=false", "verify.interval.ms=0", NULL };
    rig_up(&r, &in, "verify-off", extra);
    /* the image read to its end (the one finding would be there by now with the check on) */
    char want[100];
    snprintf(want, sizeof want, "kmproxy_image_offset %lld\n", (long long)km_image_offset(r.img));
    char *m = scrape_until(&in, "/metrics", 200, want, 60);
    cr_assert_eq(metric(m, "kmproxy_verify_interval_seconds"), 0, "%s", m);
    cr_assert(!strstr(m, "kmproxy_verify_cycles_total") && !strstr(m, "kmproxy_verify_findings"), "%s", m);
    free(m);
    json_t *v = status_verify(&in);
    cr_assert(json_is_false(json_object_get(v, "enabled")), "%s", json_dumps(v, 0));
    json_decref(v);
    assert_status_line(&in, "verify     off", NULL);
    stop_cleanly(&in);
    rig_down(&r);
}

/* verify.timeout.ms is what each broker gets: a broker that never answers is unchecked after that long, and
 * /status says who and why. */
Test(verify_daemon, a_silent_broker_is_unchecked_after_verify_timeout_ms)
{
    rig r = { .silent = true };
    inst in;
    const char *extra[] = { "brokers.enabled=false", "verify.interval.ms=300", "verify.timeout.ms=400", NULL };
    rig_up(&r, &in, "verify-silent", extra);
    char *m = scrape_until(&in, "/metrics", 200, "kmproxy_verify_last_verdict 2\n", 60);
    cr_assert_eq(metric(m, "kmproxy_verify_unchecked_brokers"), 1, "%s", m);
    free(m);
    json_t *v = status_verify(&in), *u = json_array_get(json_object_get(v, "unchecked"), 0);
    const char *why = json_string_value(json_object_get(u, "why"));
    cr_assert(json_integer_value(json_object_get(u, "broker")) == 1 && why && strstr(why, "no answer within 0.4 s"),
              "%s", json_dumps(v, 0));
    json_decref(v);
    stop_cleanly(&in);
    rig_down(&r);
}

static json_int_t jint(const json_t *o, const char *a, const char *b)
{
    const json_t *x = json_object_get(o, a);
    return json_integer_value(b ? json_object_get(x, b) : x);
}

/* verify.partitions.per.cycle=1 on 4 partitions (topic-0-0, topic-0-1, topic-1-0, topic-1-1): a pass spans 4
 * cycles, /status and the metrics say how far it is, the finding on topic-0-0 stands through the 3 cycles that
 * check the other partitions, and goes once the cycle that checks topic-0-0 again finds it clean. */
Test(verify_daemon, a_pass_split_across_cycles_keeps_a_finding_until_its_partition_is_checked_again)
{
    rig r = { 0 };
    inst in;
    const char *extra[] = { "brokers.enabled=false", "verify.interval.ms=200", "verify.jitter.percent=0",
                            "verify.timeout.ms=5000", "verify.partitions.per.cycle=1", NULL };
    rig_up(&r, &in, "verify-slices", extra);
    /* a pass ended: all 4 checked (the next pass may have begun by the time of a scrape: wait for a scrape between) */
    char *m = scrape_reaching(&in, "kmproxy_verify_passes_total", 1, "kmproxy_verify_pass_partitions_checked", 4);
    cr_assert_eq(metric(m, "kmproxy_verify_pass_partitions"), 4, "%s", m);
    cr_assert_eq(metric(m, "kmproxy_verify_pass_partitions_checked"), 4, "%s", m);
    free(m);
    json_t *v = status_verify(&in);
    cr_assert(jint(v, "pass", "partitions_per_cycle") == 1 && jint(v, "pass", "partitions") == 4 &&
                  jint(v, "cycles", NULL) >= 4 && json_array_size(json_object_get(v, "findings")) == 1,
              "%s", json_dumps(v, 0));
    json_int_t first_seen = jint(json_array_get(json_object_get(v, "findings"), 0), "first_seen", NULL);
    json_decref(v);

    /* each cycle one partition further (a scrape may see any pass): the finding stands whichever was checked */
    for (int step = 1; step <= 4; step++) {
        char want[120];
        snprintf(want, sizeof want, "kmproxy_verify_pass_partitions_checked %d\n", step);
        m = scrape_until(&in, "/metrics", 200, want, 60);
        cr_assert(metric(m, "kmproxy_verify_passes_total") >= 1 &&
                      labelled(m, "kmproxy_verify_findings{class=\"metadata_stale\"} ") == 1 &&
                      metric(m, "kmproxy_verify_last_verdict") == 1,
                  "step %d: %s", step, m);
        free(m);
    }
    v = status_verify(&in);
    cr_assert(jint(json_array_get(json_object_get(v, "findings"), 0), "first_seen", NULL) == first_seen,
              "%s", json_dumps(v, 0));
    json_decref(v);

    assert_status_line(&in, "  pass       ", "partitions checked");

    /* the broker learns the epoch: once topic-0-0's slice comes round again the finding goes */
    cr_assert_eq(unlink(r.stale_flag), 0);
    m = scrape_until(&in, "/metrics", 200, "kmproxy_verify_last_verdict 0\n", 60);
    cr_assert_eq(labelled(m, "kmproxy_verify_findings{class=\"metadata_stale\"} "), 0, "%s", m);
    free(m);
    stop_cleanly(&in);
    rig_down(&r);
}

/* The waits /status reports for the armed timer (the drawn value, not a measured time): exactly
 * verify.interval.ms with no jitter; within +-50 % and not all the same with verify.jitter.percent=50. */
static void collect_waits(inst *in, json_int_t *waits, int n)
{
    json_int_t cycles = -1;
    for (int got = 0; got < n;) {
        json_t *v = status_verify(in);
        if (jint(v, "cycles", NULL) != cycles) {
            cycles = jint(v, "cycles", NULL);
            waits[got++] = jint(v, "next_wait_ms", NULL);
        }
        json_decref(v);
        usleep(20 * 1000);
    }
}

Test(verify_daemon, jitter_spreads_the_waits_between_checks_and_none_keeps_them_equal)
{
    enum { N = 6 };
    json_int_t waits[N];
    for (int jitter = 0; jitter <= 50; jitter += 50) {
        rig r = { 0 };
        inst in;
        char pct[64];
        snprintf(pct, sizeof pct, "verify.jitter.percent=%d", jitter);
        const char *extra[] = { "brokers.enabled=false", "verify.interval.ms=300", pct, "verify.timeout.ms=5000",
                                NULL };
        rig_up(&r, &in, jitter ? "verify-jitter" : "verify-nojitter", extra);
        collect_waits(&in, waits, N);
        int distinct = 0;
        for (int i = 0; i < N; i++) {
            cr_assert(jitter ? waits[i] >= 150 && waits[i] <= 450 : waits[i] == 300, "jitter %d: wait %lld ms",
                      jitter, (long long)waits[i]);
            bool seen = false;
            for (int j = 0; j < i; j++)
                seen = seen || waits[j] == waits[i];
            distinct += !seen;
        }
        cr_assert(jitter ? distinct >= 3 : distinct == 1, "jitter %d: %d distinct waits of %d", jitter, distinct, N);
        stop_cleanly(&in);
        rig_down(&r);
    }
}

/* A broker the check cannot reach was not checked again: its finding stands (and the verdict stays
 * inconsistent) until a check reaches it. */
Test(verify_daemon, a_finding_stands_while_its_broker_cannot_be_reached)
{
    rig r = { 0 };
    inst in;
    const char *extra[] = { "brokers.enabled=false", "verify.interval.ms=200", "verify.jitter.percent=0",
                            "verify.timeout.ms=5000", NULL };
    rig_up(&r, &in, "verify-gone", extra);
    free(scrape_until(&in, "/metrics", 200, "kmproxy_verify_findings{class=\"metadata_stale\"} 1", 60));
    FILE *f = fopen(r.gone_flag, "w");
    cr_assert(f);
    fclose(f);
    char *m = scrape_until(&in, "/metrics", 200, "kmproxy_verify_unchecked_brokers 1\n", 60);
    double cycles = metric(m, "kmproxy_verify_cycles_total");
    free(m);
    m = scrape_reaching(&in, "kmproxy_verify_cycles_total", cycles + 1, NULL, 0);
    cr_assert(labelled(m, "kmproxy_verify_findings{class=\"metadata_stale\"} ") == 1 &&
                  metric(m, "kmproxy_verify_last_verdict") == 1 && metric(m, "kmproxy_verify_unchecked_brokers") == 1,
              "%s", m);
    free(m);
    stop_cleanly(&in);
    rig_down(&r);
}

/* Issue 26: the check logs in as the broker channels do (broker.security.protocol, broker.sasl.*).  The fake serves
 * no SASL (it closes on ApiVersions): the broker is unchecked and /status says the login failed, where a check that
 * ignored the keys would talk plaintext and report the fake's stale epoch. */
Test(verify_daemon, the_check_logs_in_with_the_broker_channels_sasl_keys)
{
    rig r = { 0 };
    inst in;
    const char *extra[] = { "brokers.enabled=false", "verify.interval.ms=300", "verify.timeout.ms=5000",
                            "broker.listener=PLAINTEXT", "broker.security.protocol=SASL_PLAINTEXT",
                            "broker.sasl.mechanism=PLAIN",
                            "broker.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
                            "username=\"kmverify\" password=\"secret\";", NULL };
    rig_up(&r, &in, "verify-sasl", extra);
    char *m = scrape_until(&in, "/metrics", 200, "kmproxy_verify_last_verdict 2\n", 60);
    free(m);
    json_t *v = status_verify(&in), *u = json_array_get(json_object_get(v, "unchecked"), 0);
    const char *why = json_string_value(json_object_get(u, "why"));
    cr_assert(json_integer_value(json_object_get(u, "broker")) == 1 && why &&
                  strstr(why, "SASL/PLAIN login as 'kmverify' failed: closed the connection"),
              "%s", json_dumps(v, 0));
    json_decref(v);
    stop_cleanly(&in);
    rig_down(&r);
}

/* A stale leader of topic-0-0 beside the image's leader (the fake brokers of test_verify_fake, each on its own
 * port): the daemon's finding in /status carries the exposure, in bytes too, and `kmproxy status` prints it. */
Test(verify_daemon, a_stale_leaders_exposure_in_bytes_reaches_status)
{
    km_zks *zs = ops_zk_start();
    env e = { .dir = km_test_tmpdir("verify-daemon-bytes") };
    snprintf(e.metadata, sizeof e.metadata, "%s/log", e.dir);
    uint16_t ports[2];
    int lfd[2];
    for (int i = 0; i < 2; i++) {
        rig one = { 0 };
        listen_loopback(&one);
        lfd[i] = one.lfd, ports[i] = one.port;
    }
    km_image *img = km_image_new();
    km_gen_opts o = { .brokers = 2, .topics = 1, .partitions = 2, .zk_migration = true, .seed = 5,
                      .broker_host = "127.0.0.1", .broker_ports = ports };
    km_err err;
    cr_assert(km_gen_write(e.metadata, &o, img, &err) > 0, "%s", err.msg);
    km_partition p;
    cr_assert(km_topic_partition(km_image_topic_by_name(img, "topic-0"), 0, &p));
    km_buf log;
    km_buf_init(&log);
    vf_add_batch(&log, 0, 2);
    size_t want = vf_add_batch(&log, 2, 3) + vf_add_batch(&log, 5, 1);
    vf_stale st = { .stale = p.leader == 1 ? 2 : 1, .high_watermark = 6, .truncation = 2, .log = log.data,
                    .log_len = log.len, .max_batches = 8 };
    pid_t kids[2];
    for (int i = 0; i < 2; i++)
        kids[i] = vf_serve_stale(lfd[i], img, ports[i], st, i + 1);
    inst in;
    const char *extra[] = { "brokers.enabled=false", "verify.interval.ms=300", "verify.jitter.percent=0",
                            "verify.timeout.ms=5000", NULL };
    char zk[300];
    snprintf(zk, sizeof zk, "%s/verify-bytes", km_zks_hosts(zs, 0));
    start(&in, &e, "verify-bytes", zk, extra);
    free(scrape_until(&in, "/metrics", 200, "kmproxy_verify_findings{class=\"stale_leader\"} 1", 60));
    json_t *v = status_verify(&in), *f;
    size_t i;
    bool seen = false;
    json_array_foreach(json_object_get(v, "findings"), i, f)
        if (!strcmp(json_string_value(json_object_get(f, "class")), "stale_leader"))
            seen = json_integer_value(json_object_get(f, "exposed_bytes")) == (json_int_t)want &&
                   json_is_false(json_object_get(f, "exposed_bytes_capped")) &&
                   json_integer_value(json_object_get(f, "exposed_offsets")) == 4 &&
                   json_integer_value(json_object_get(f, "first_seen")) > 0;
    cr_assert(seen, "no stale_leader with %zu exposed bytes in /status: %s", want, json_dumps(v, 0));
    json_decref(v);
    char line[120];
    snprintf(line, sizeof line, "; truncation point 2, 4 offsets and %zu bytes exposed", want);
    assert_status_line(&in, "verify     inconsistent", line);
    stop_cleanly(&in);
    for (int k = 0; k < 2; k++) {
        kill(kids[k], SIGKILL);
        waitpid(kids[k], NULL, 0);
        close(lfd[k]);
    }
    km_buf_free(&log);
    km_image_free(img);
    km_zks_stop(zs);
    env_free(&e);
}
