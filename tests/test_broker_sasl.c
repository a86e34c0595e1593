/* Broker channels on secured listeners: SASL/PLAIN and SCRAM-SHA-256/512 over PLAINTEXT and TLS
 * against the simulator's SaslServerAuthenticator, a refused password (logged once, retried,
 * nothing delivered), the ClusterAction authorizer, client.id, and the broker's 100 MiB request
 * cap as the channel's write limit. */
#include "km_broker.h"
#include "km_brokersim.h"
#include "km_tls.h"
#include "test_broker_client.h"
#include "test_broker_rig.h"
#include "test_tls_certs.h"

#include <criterion/criterion.h>
#include <ev.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define USERS "kmproxy:s3cret,other:pw"
#define SUPER "User:kmproxy"

typedef struct rig {
    struct ev_loop *loop;
    km_bsim *sim;
    km_bchan *ch;
    km_test_pki pki;
    bool have_pki;
    km_tls_ctx *server_tls, *client_tls;
    int done, last_top, syncs;
    int loud;                          /* log lines at warn or error mentioning authentication */
    char first_loud[1024];
    char last_warning[1024];           /* the last log line at warn or error */
    int64_t lifetime_ms;               /* the simulator's connections.max.reauth.ms (0: none) */
    ev_timer stream;                   /* submits an UpdateMetadata every tick while streaming */
    int submitted;
} rig;

static rig R;

static void fini(void)
{
    if (R.loop)
        ev_timer_stop(R.loop, &R.stream);
    km_bchan_free(R.ch);
    km_bsim_free(R.sim);
    km_tls_ctx_free(R.client_tls);
    km_tls_ctx_free(R.server_tls);
    if (R.loop)
        ev_loop_destroy(R.loop);
    if (R.have_pki)
        km_test_pki_free(&R.pki);
    memset(&R, 0, sizeof R);
}

static void on_log(int level, const char *msg, void *ud)
{
    rig *r = ud;
    if (getenv("KM_TEST_VERBOSE"))
        fprintf(stderr, "[%d] %s\n", level, msg);
    if (level <= 2)
        snprintf(r->last_warning, sizeof r->last_warning, "%s", msg);
    if (level <= 2 && strstr(msg, "authentication") && r->loud++ == 0)
        snprintf(r->first_loud, sizeof r->first_loud, "%s", msg);
}

/* An UpdateMetadata with no partitions, like batch 1 of a broker change. */
static void submit_empty_update_metadata(km_bchan *ch)
{
    km_arena a;
    km_arena_init(&a, 0);
    km_update_metadata_request *rq = km_arena_alloc(&a, sizeof *rq);
    km_bp_ctl ctl = { .controller_id = 3000, .controller_epoch = 1, .broker_epoch = -1, .kraft = true };
    km_err err;
    cr_assert_eq(km_bp_update_metadata(km_bchan_version(ch, KM_API_UPDATE_METADATA), &ctl, NULL, 0, NULL, 0, &a, rq,
                                       &err), 0, "%s", err.msg);
    cr_assert_gt(km_bchan_submit(ch, KM_API_UPDATE_METADATA, rq, &a, &err), 0);
}

static void on_sync(km_bchan *ch, bool first, void *ud)
{
    (void)first;
    rig *r = ud;
    r->syncs++;
    r->submitted++;
    submit_empty_update_metadata(ch);
}

static void on_done(km_bchan *ch, int16_t api, uint64_t seq, int16_t top, void *ud)
{
    (void)ch; (void)api; (void)seq;
    rig *r = ud;
    r->done++;
    r->last_top = top;
}

static void start_sim(unsigned mechs, bool tls, bool authorizer)
{
    R.loop = ev_loop_new(EVFLAG_AUTO);
    km_err err;
    if (tls) {
        cr_assert_eq(km_test_pki_make(&R.pki), 0);
        R.have_pki = true;
        km_tls_config sc = { .cert_file = R.pki.server_cert, .key_file = R.pki.server_key };
        km_tls_config cc = { .ca_file = R.pki.ca };
        cr_assert((R.server_tls = km_tls_server_ctx_new(&sc, &err)), "%s", err.msg);
        cr_assert((R.client_tls = km_tls_client_ctx_new(&cc, &err)), "%s", err.msg);
    }
    km_bsim_config cfg;
    km_bsim_config_init(&cfg);
    cfg.broker_id = 1;
    cfg.tls = R.server_tls;
    cfg.sasl_mechanisms = mechs;
    cfg.sasl_users = USERS;
    cfg.authorizer = authorizer;
    cfg.super_users = SUPER;
    cfg.sasl_session_lifetime_ms = R.lifetime_ms;
    cr_assert((R.sim = km_bsim_new(R.loop, &cfg, &err)), "%s", err.msg);
}

static void start_chan(km_sasl_mech mech, const char *user, const char *pass)
{
    static const km_bchan_hooks proto = { .need_full_sync = on_sync, .done = on_done };
    km_bchan_hooks h = proto;
    h.ud = &R;
    km_bchan_config cfg = { .broker_id = 1, .host = "127.0.0.1", .port = km_bsim_port(R.sim),
                            .net = { .tls = R.client_tls }, .sasl = { mech, user, pass },
                            .request_timeout = 10, .backoff_base = 0.01, .backoff_max = 0.05,
                            .client_id = "3000", .log = on_log, .log_ud = &R };
    km_err err;
    cr_assert((R.ch = km_bchan_new(R.loop, &cfg, &h, &err)), "%s", err.msg);
}

/* Runs the loop until pred or 30 s (a guard against hangs, not a timing assertion). */
static bool run_until_within(bool (*pred)(void), double seconds)
{
    ev_tstamp end = ev_time() + seconds;
    while (!pred() && ev_time() < end)
        ev_run(R.loop, EVRUN_ONCE);
    return pred();
}

static bool run_until(bool (*pred)(void)) { return run_until_within(pred, 30); }

static bool answered(void) { return R.done > 0; }

static km_bsim_security_stats sec(void)
{
    km_bsim_security_stats s;
    km_bsim_get_security_stats(R.sim, &s);
    return s;
}

/* Counted by the channel: the simulator counts a refusal before the channel has read it. */
static bool three_refusals(void)
{
    km_bchan_stats cs;
    km_bchan_get_stats(R.ch, &cs);
    return cs.auth_failures >= 3;
}

#define ALL_MECHS ((1u << KM_SASL_PLAIN) | (1u << KM_SASL_SCRAM_SHA_256) | (1u << KM_SASL_SCRAM_SHA_512))

static void authenticates(km_sasl_mech mech, bool tls)
{
    start_sim(ALL_MECHS, tls, true);
    start_chan(mech, "kmproxy", "s3cret");
    cr_assert(run_until(answered), "%s%s: no answer", km_sasl_mech_name(mech), tls ? " over TLS" : "");
    cr_assert_eq(R.last_top, 0, "%s: error %d", km_sasl_mech_name(mech), R.last_top);
    km_bsim_security_stats s = sec();
    cr_assert_eq(s.sasl_ok, 1);
    cr_assert_eq(s.sasl_failed + s.unauthenticated + s.unauthorized + s.plaintext_on_tls, 0);
    cr_assert_eq(s.controller_requests, 1);
    cr_assert_str_eq(s.last_principal, "User:kmproxy");
    cr_assert_eq(R.loud, 0, "%s", R.first_loud);
    fini();
}

Test(broker_sasl, every_mechanism_over_plaintext, .fini = fini, .timeout = 120)
{
    authenticates(KM_SASL_PLAIN, false);
    authenticates(KM_SASL_SCRAM_SHA_256, false);
    authenticates(KM_SASL_SCRAM_SHA_512, false);
}

Test(broker_sasl, every_mechanism_over_tls, .fini = fini, .timeout = 120)
{
    authenticates(KM_SASL_PLAIN, true);
    authenticates(KM_SASL_SCRAM_SHA_256, true);
    authenticates(KM_SASL_SCRAM_SHA_512, true);
}

static void refused(km_sasl_mech mech, const char *user, const char *pass, unsigned mechs, const char *reason)
{
    start_sim(mechs, false, true);
    start_chan(mech, user, pass);
    cr_assert(run_until(three_refusals), "the channel did not retry: %s", R.first_loud);
    cr_assert_geq(sec().sasl_failed, 3);
    km_bsim_security_stats s = sec();
    cr_assert_eq(s.controller_requests + s.unauthenticated + s.unauthorized, 0,
                 "a controller request reached the broker unauthenticated");
    cr_assert_eq(R.done, 0);
    cr_assert(!km_bchan_ready(R.ch));
    km_bchan_stats cs;
    km_bchan_get_stats(R.ch, &cs);
    cr_assert_geq(cs.auth_failures, 3);
    cr_assert_geq(cs.connects, 3, "retried on new connections");
    cr_assert_eq(R.loud, 1, "logged %d times (once expected); first: %s", R.loud, R.first_loud);
    cr_assert(strstr(R.first_loud, reason), "the log does not carry the broker's reason: %s", R.first_loud);
    cr_assert(strstr(R.first_loud, km_sasl_mech_name(mech)), "%s", R.first_loud);
    fini();
}

Test(broker_sasl, a_refused_password_is_logged_once_retried_and_nothing_is_sent, .fini = fini, .timeout = 120)
{
    refused(KM_SASL_SCRAM_SHA_256, "kmproxy", "wrong", ALL_MECHS,
            "SASL_AUTHENTICATION_FAILED (58): Authentication failed during authentication due to invalid credentials "
            "with SASL mechanism SCRAM-SHA-256");
    refused(KM_SASL_PLAIN, "kmproxy", "wrong", ALL_MECHS, "Authentication failed: Invalid username or password");
    refused(KM_SASL_SCRAM_SHA_512, "nobody", "pw", ALL_MECHS, "Invalid user credentials");
    refused(KM_SASL_SCRAM_SHA_512, "kmproxy", "s3cret", 1u << KM_SASL_PLAIN,
            "the listener does not enable SCRAM-SHA-512 (it offers: PLAIN)");
}

/* Defect 2 as it was: without SASL the authorizer refuses every controller request. */
Test(broker_sasl, the_authorizer_refuses_unauthenticated_and_non_super_users, .fini = fini, .timeout = 120)
{
    start_sim(0, false, true);
    start_chan(KM_SASL_NONE, NULL, NULL);
    cr_assert(run_until(answered));
    cr_assert_eq(R.last_top, 31, "CLUSTER_AUTHORIZATION_FAILED expected, got %d", R.last_top);
    km_bsim_security_stats s = sec();
    cr_assert_eq(s.unauthorized, 1);
    cr_assert_eq(s.controller_requests, 0, "the state changed for User:ANONYMOUS");
    fini();
    start_sim(ALL_MECHS, false, true);
    start_chan(KM_SASL_SCRAM_SHA_256, "other", "pw"); /* authenticated, but no ClusterAction */
    cr_assert(run_until(answered));
    cr_assert_eq(R.last_top, 31);
    cr_assert_eq(sec().controller_requests, 0);
    cr_assert_eq(sec().sasl_ok, 1);
}

/* A SASL channel pointed at a listener without SASL says what is wrong. */
Test(broker_sasl, sasl_against_a_plain_listener_names_the_cause, .fini = fini, .timeout = 120)
{
    start_sim(0, false, false);
    start_chan(KM_SASL_PLAIN, "kmproxy", "s3cret");
    cr_assert(run_until(three_refusals));
    cr_assert_eq(R.loud, 1, "%s", R.first_loud);
    cr_assert(strstr(R.first_loud, "ILLEGAL_SASL_STATE"), "%s", R.first_loud);
    cr_assert(strstr(R.first_loud, "is the listener a SASL one?"), "%s", R.first_loud);
    cr_assert_eq(sec().controller_requests, 0);
}

static bool brig_ready(brig *r) { return brig_converged(r); }

/* ControllerChannelManager.addNewBroker: NetworkClient(..., config.brokerId.toString, ...): the
 * controller's node id is the client.id of every controller request. */
Test(broker_sasl, client_id_is_the_controller_node_id, .timeout = 120)
{
    brig r;
    brig_opts o = { .brokers = 2, .topics = 2, .partitions = 2, .replication = 2 };
    cr_assert(brig_init(&r, &o), "%s", r.why);
    cr_assert(brig_activate(&r), "%s", r.why);
    cr_assert(brig_run_until(&r, brig_ready, 60), "%s", r.why);
    for (int i = 0; i < r.nsims; i++) {
        km_bsim_security_stats s;
        km_bsim_get_security_stats(r.sims[i], &s);
        char want[16];
        snprintf(want, sizeof want, "%d", BRIG_CONTROLLER);
        cr_assert_str_eq(s.last_client_id, want);
    }
    brig_free(&r);
}

static bool two_answers(void) { return R.done >= 2; }

static bool dropped_one(void)
{
    km_bchan_stats cs;
    km_bchan_get_stats(R.ch, &cs);
    return cs.dropped > 0;
}

/* An UpdateMetadata whose one partition lists `mib` MiB of replicas. */
static void submit_update_metadata_of(int mib)
{
    int32_t n = mib * 1024 * 1024 / 4;
    int32_t *replicas = malloc(sizeof *replicas * (size_t)n);
    cr_assert(replicas);
    for (int32_t i = 0; i < n; i++)
        replicas[i] = i;
    km_bp_part part = { .topic = "big", .partition = 0, .leader = 0, .leader_epoch = 1, .partition_epoch = 1,
                        .isr = { replicas, 1 }, .replicas = { replicas, n } };
    km_arena a;
    km_arena_init(&a, 0);
    km_update_metadata_request *rq = km_arena_alloc(&a, sizeof *rq);
    km_bp_ctl ctl = { .controller_id = 3000, .controller_epoch = 1, .broker_epoch = -1, .kraft = true };
    km_err err;
    cr_assert_eq(km_bp_update_metadata(km_bchan_version(R.ch, KM_API_UPDATE_METADATA), &ctl, &part, 1, NULL, 0, &a,
                                       rq, &err), 0, "%s", err.msg);
    free(replicas);
    cr_assert_gt(km_bchan_submit(R.ch, KM_API_UPDATE_METADATA, rq, &a, &err), 0);
}

/* socket.request.max.bytes is 100 MiB by default: an UpdateMetadata of 68 MiB (a big cluster's
 * full sync) must go out, not be dropped at a 64 MiB write limit; one above 100 MiB, which the
 * broker would refuse by closing the connection, is dropped with a message naming the limit. */
Test(broker_sasl, update_metadata_up_to_the_brokers_100_mib_cap_is_delivered, .fini = fini, .timeout = 300)
{
    start_sim(0, false, false);
    start_chan(KM_SASL_NONE, NULL, NULL);
    cr_assert(run_until(answered));
    submit_update_metadata_of(68);
    /* 68 MiB sent, decoded by the simulator and answered: minutes under ASan on a loaded machine */
    cr_assert(run_until_within(two_answers, 240), "the 68 MiB UpdateMetadata was not answered");
    km_bchan_stats cs;
    km_bchan_get_stats(R.ch, &cs);
    cr_assert_eq(cs.dropped, 0);
    cr_assert_eq(R.last_top, 0);
    submit_update_metadata_of(101);
    cr_assert(run_until_within(dropped_one, 240), "a request above 100 MiB was not dropped");
    cr_assert(strstr(R.last_warning, "above the broker's socket.request.max.bytes (104857600)"), "%s",
              R.last_warning);
}

/* The simulator as a broker sees a client that skips SASL, and what the authorizer answers:
 * Kafka's getErrorResponse repeats CLUSTER_AUTHORIZATION_FAILED for every partition. */
Test(broker_sasl, the_simulator_enforces_sasl_and_answers_like_kafkas_authorizer, .timeout = 60)
{
    km_bsim_config cfg;
    km_bsim_config_init(&cfg);
    cfg.sasl_mechanisms = 1u << KM_SASL_SCRAM_SHA_256;
    cfg.sasl_users = USERS;
    cfg.authorizer = true;
    cfg.super_users = SUPER;
    km_err err;
    km_bsim *sim = km_bsim_start_thread(&cfg, &err);
    cr_assert(sim, "%s", err.msg);
    km_arena a;
    km_arena_init(&a, 0);
    static const int32_t replicas[] = { 1, 2 };
    km_bp_part parts[2] = { { .topic = "t", .partition = 0, .leader = 1, .isr = { replicas, 2 }, .replicas = { replicas, 2 } },
                            { .topic = "t", .partition = 1, .leader = 1, .isr = { replicas, 2 }, .replicas = { replicas, 2 } } };
    parts[0].topic_id.b[0] = parts[1].topic_id.b[0] = 7;
    km_bp_ctl ctl = { .controller_id = 3000, .controller_epoch = 1, .broker_epoch = -1, .kraft = true };
    km_leader_and_isr_request lisr;
    cr_assert_eq(km_bp_leader_and_isr(7, &ctl, parts, 2, NULL, 0, "PLAINTEXT", &a, &lisr, &err), 0, "%s", err.msg);
    int fd = tbc_connect(km_bsim_port(sim));
    cr_assert(tbc_send(fd, KM_API_LEADER_AND_ISR, 7, 1, &lisr));
    cr_assert(tbc_closed(fd), "a request before authentication was not refused by closing");
    close(fd);
    km_bsim_security_stats st;
    km_bsim_get_security_stats(sim, &st);
    cr_assert_eq(st.unauthenticated, 1);
    cr_assert_eq(st.controller_requests, 0);
    km_bsim_stop_thread(sim);

    cfg.sasl_mechanisms = 0; /* a PLAINTEXT listener: User:ANONYMOUS */
    cr_assert((sim = km_bsim_start_thread(&cfg, &err)), "%s", err.msg);
    fd = tbc_connect(km_bsim_port(sim));
    for (int16_t v = 4; v <= 7; v += 3) {
        cr_assert_eq(km_bp_leader_and_isr(v, &ctl, parts, 2, NULL, 0, "PLAINTEXT", &a, &lisr, &err), 0, "%s", err.msg);
        km_leader_and_isr_response rs;
        cr_assert(tbc_call(fd, KM_API_LEADER_AND_ISR, v, &lisr, &rs, &a));
        cr_assert_eq(rs.error_code, 31);
        const km_leader_and_isr_response_partition_error *pe =
            v < 5 ? rs.partition_errors.items : rs.topics.items[0].partition_errors.items;
        cr_assert_eq(v < 5 ? rs.partition_errors.count : rs.topics.items[0].partition_errors.count, 2);
        cr_assert(pe[0].error_code == 31 && pe[1].error_code == 31 && pe[1].partition_index == 1);
    }
    km_bp_stop stops[2] = { { "t", 0, 3, true }, { "t", 1, 3, true } };
    km_stop_replica_request sr;
    cr_assert_eq(km_bp_stop_replica(3, &ctl, stops, 2, &a, &sr, &err), 0, "%s", err.msg);
    km_stop_replica_response srs;
    cr_assert(tbc_call(fd, KM_API_STOP_REPLICA, 3, &sr, &srs, &a));
    cr_assert_eq(srs.error_code, 31);
    cr_assert_eq(srs.partition_errors.count, 2);
    cr_assert_eq(srs.partition_errors.items[1].error_code, 31);
    close(fd);
    km_bsim_get_security_stats(sim, &st);
    cr_assert_eq(st.unauthorized, 3);
    cr_assert_eq(st.controller_requests, 0);
    km_bsim_stop_thread(sim);
    km_arena_free(&a);
}

/* ---- re-authentication (KIP-368) ------------------------------------------------------------ */

/* Kafka refuses a re-authentication begun less than a second after the one before
 * (KafkaChannel.MIN_REAUTH_INTERVAL_ONE_SECOND_NANOS), so the shortest lifetime a client can
 * keep renewing is a little above 1 s; 1500 ms leaves room for that, and its last 5% (75 ms)
 * for a loaded machine's pauses. */
#define REAUTH_LIFETIME_MS 1500

static void on_stream_tick(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop; (void)w; (void)revents;
    R.submitted++;
    submit_empty_update_metadata(R.ch);
}

static void stream_start(void)
{
    ev_timer_init(&R.stream, on_stream_tick, 0.02, 0.02);
    ev_timer_start(R.loop, &R.stream);
}

/* Counted by the channel once it read the answer (the simulator counts when it sends it). */
static bool two_reauthentications(void)
{
    km_bchan_stats cs;
    km_bchan_get_stats(R.ch, &cs);
    return cs.reauthentications >= 2;
}
static bool all_answered(void) { return R.done == R.submitted && km_bchan_pending(R.ch) == 0; }

static void stream_across_lifetimes(km_sasl_mech mech)
{
    R.lifetime_ms = REAUTH_LIFETIME_MS;
    start_sim(ALL_MECHS, false, true);
    start_chan(mech, "kmproxy", "s3cret");
    cr_assert(run_until(answered), "%s: no answer", km_sasl_mech_name(mech));
    stream_start();
    cr_assert(run_until(two_reauthentications), "%s: %llu re-authentications, %llu sessions expired",
              km_sasl_mech_name(mech), (unsigned long long)sec().sasl_reauth, (unsigned long long)sec().sasl_expired);
    ev_timer_stop(R.loop, &R.stream);
    cr_assert(run_until(all_answered), "%s: %d of %d requests answered", km_sasl_mech_name(mech), R.done,
              R.submitted);
    km_bsim_security_stats s = sec();
    cr_assert_eq(s.sasl_expired, 0, "%s: the broker closed %llu expired sessions", km_sasl_mech_name(mech),
                 (unsigned long long)s.sasl_expired);
    cr_assert_eq(s.sasl_failed + s.unauthenticated + s.unauthorized, 0);
    cr_assert_eq(s.sasl_ok, 1 + s.sasl_reauth, "one login, then renewals only");
    cr_assert_eq(s.controller_requests, (uint64_t)R.submitted);
    km_bchan_stats cs;
    km_bchan_get_stats(R.ch, &cs);
    /* a renewal may be under way: the simulator counts it before the channel reads its answer */
    cr_assert(cs.reauthentications >= 2 && cs.reauthentications <= s.sasl_reauth, "%llu renewals counted",
              (unsigned long long)cs.reauthentications);
    cr_assert_eq(cs.connects, 1, "%s: the channel reconnected", km_sasl_mech_name(mech));
    cr_assert_eq(cs.resent + cs.dropped + cs.auth_failures, 0);
    cr_assert_eq(R.loud, 0, "%s", R.first_loud);
    cr_assert_gt(R.submitted, 10);
    fini();
}

/* connections.max.reauth.ms: KafkaChannel.maybeBeginClientReauthentication renews the session on
 * the same connection before SocketServer would close it as expired. */
Test(broker_sasl, sessions_are_renewed_on_the_same_connection_before_they_expire, .fini = fini, .timeout = 120)
{
    stream_across_lifetimes(KM_SASL_PLAIN);
    stream_across_lifetimes(KM_SASL_SCRAM_SHA_512);
}

static bool a_reauth_refused(void)
{
    km_bchan_stats cs;
    km_bchan_get_stats(R.ch, &cs);
    return cs.auth_failures >= 1;
}

static bool renewed_after_the_refusal(void)
{
    km_bchan_stats cs;
    km_bchan_get_stats(R.ch, &cs);
    return cs.reauthentications >= 1;
}

/* The password changes between two authentications: the re-authentication is refused (logged
 * once with the broker's reason, counted), the channel reconnects once the password is back,
 * and every request is still answered. */
Test(broker_sasl, a_refused_reauthentication_reconnects_and_loses_nothing, .fini = fini, .timeout = 120)
{
    km_err err;
    R.lifetime_ms = REAUTH_LIFETIME_MS;
    start_sim(ALL_MECHS, false, true);
    start_chan(KM_SASL_SCRAM_SHA_256, "kmproxy", "s3cret");
    cr_assert(run_until(answered));
    stream_start();
    cr_assert_eq(km_bsim_set_sasl_password(R.sim, "kmproxy", "changed", &err), 0, "%s", err.msg);
    cr_assert(run_until(a_reauth_refused), "the re-authentication was not refused");
    cr_assert_eq(km_bsim_set_sasl_password(R.sim, "kmproxy", "s3cret", &err), 0, "%s", err.msg);
    cr_assert(run_until(renewed_after_the_refusal), "no re-authentication after the reconnect");
    ev_timer_stop(R.loop, &R.stream);
    cr_assert(run_until(all_answered), "%d of %d requests answered", R.done, R.submitted);
    km_bsim_security_stats s = sec();
    cr_assert_geq(s.sasl_failed, 1);
    cr_assert_eq(s.sasl_expired + s.unauthenticated + s.unauthorized, 0);
    cr_assert_geq(s.controller_requests, (uint64_t)R.submitted, "at least once");
    km_bchan_stats cs;
    km_bchan_get_stats(R.ch, &cs);
    cr_assert_geq(cs.connects, 2, "the channel reconnected");
    cr_assert_eq(cs.dropped, 0);
    cr_assert_eq(R.loud, 1, "logged %d times (once expected); first: %s", R.loud, R.first_loud);
    cr_assert(strstr(R.first_loud, "SASL/SCRAM-SHA-256 re-authentication as 'kmproxy' failed: "
                                   "SASL_AUTHENTICATION_FAILED (58)"), "%s", R.first_loud);
}
