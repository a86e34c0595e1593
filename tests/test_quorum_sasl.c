/* test_quorum_sasl.c - the KRaft observer on a SASL controller listener whose sessions expire
 * (connections.max.reauth.ms): it renews them on the same connection before the controller
 * would close it (KIP-368, KafkaChannel.maybeBeginClientReauthentication), and a refused
 * renewal is logged, counted and retried on a new connection without losing a record. */
#include "test_quorum_util.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Kafka refuses a re-authentication begun less than a second after the one before
 * (KafkaChannel.MIN_REAUTH_INTERVAL_ONE_SECOND_NANOS): 85% of 1500 ms leaves room, and its last
 * 5% (75 ms) room for a loaded machine's pauses. */
#define LIFETIME_MS 1500
#define PER_BATCH 5
#define USERS "kmproxy:kmproxy-secret,admin:admin-secret"

/* Appends a batch to the leader's log every tick, so records keep flowing. */
typedef struct feed {
    tq_rig *r;
    ev_timer tick;
    int batches;
    int refusals_logged;
    char refusal[1024];
    char voters[300];
} feed;

static feed F;

static void on_tick(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop; (void)w; (void)revents;
    km_buf b;
    km_buf_init(&b);
    tq_config_batch(&b, (int64_t)F.batches * PER_BATCH, 1, PER_BATCH, "reauth");
    km_err err;
    cr_assert_eq(km_rsim_append(F.r->sims[0], b.data, b.len, &err), 0, "%s", err.msg);
    km_buf_free(&b);
    F.batches++;
}

static void on_log(km_quorum *q, const char *line, void *ud)
{
    (void)q; (void)ud;
    if (getenv("TQ_VERBOSE"))
        fprintf(stderr, "quorum: %s\n", line);
    if (strstr(line, "re-authentication") && F.refusals_logged++ == 0)
        snprintf(F.refusal, sizeof F.refusal, "%s", line);
}

static void start(tq_rig *r, km_sasl_mech mech)
{
    km_rsim_config c;
    km_rsim_config_init(&c);
    c.sasl_mechanisms = 1u << mech;
    c.sasl_users = USERS;
    c.sasl_session_lifetime_ms = LIFETIME_MS;
    tq_rig_init(r, 1, &c);
    r->cfg.sasl = (km_quorum_login){ mech, "kmproxy", "kmproxy-secret" };
    r->cfg.fetch_max_wait_ms = 50;
    r->on_log = on_log;
    memset(&F, 0, sizeof F);
    F.r = r;
    snprintf(F.voters, sizeof F.voters, "1@%s", r->servers); /* one connection: to the leader, by id */
    r->cfg.voters = F.voters;
    tq_rig_start(r);
    ev_timer_init(&F.tick, on_tick, 0.05, 0.05);
    ev_timer_start(r->loop, &F.tick);
}

static km_quorum_stats qstats(tq_rig *r)
{
    km_quorum_stats st;
    km_quorum_get_stats(r->q, &st);
    return st;
}

static km_rsim_stats sstats(tq_rig *r)
{
    km_rsim_stats st;
    km_rsim_get_stats(r->sims[0], &st);
    return st;
}

static bool two_renewals(tq_rig *r) { return qstats(r).reauthentications >= 2; }
static bool one_renewal(tq_rig *r) { return qstats(r).reauthentications >= 1; }
static bool logged_in(tq_rig *r) { return sstats(r).sasl_ok >= 1 && qstats(r).applied_offset >= 0; }
static bool a_refusal(tq_rig *r) { return qstats(r).auth_failures >= 1; }

/* Stops the feed and waits until every record appended is applied. */
static void drain(tq_rig *r)
{
    ev_timer_stop(r->loop, &F.tick);
    cr_assert(tq_run_until(r, tq_caught_up, 30), "applied up to %lld of %d records",
              (long long)qstats(r).applied_offset, F.batches * PER_BATCH);
    cr_assert_eq(qstats(r).applied_offset, (int64_t)F.batches * PER_BATCH - 1);
    cr_assert_eq(r->n_applied, (size_t)F.batches * PER_BATCH, "a record applied twice or missed");
}

static void renews_across_lifetimes(km_sasl_mech mech)
{
    tq_rig r;
    start(&r, mech);
    /* settled on the leader (the first Fetch may learn the epoch the hard way and reconnect) */
    cr_assert(tq_run_until(&r, logged_in, 30), "%s: no login", km_sasl_mech_name(mech));
    km_rsim_stats before = sstats(&r);
    uint64_t errors_before = qstats(&r).fetch_errors;
    cr_assert(tq_run_until(&r, two_renewals, 30), "%s: %llu renewals, %llu sessions expired", km_sasl_mech_name(mech),
              (unsigned long long)qstats(&r).reauthentications, (unsigned long long)sstats(&r).sasl_expired);
    drain(&r);
    km_rsim_stats s = sstats(&r);
    cr_assert_eq(s.sasl_expired, 0, "%s: the controller closed %llu expired sessions", km_sasl_mech_name(mech),
                 (unsigned long long)s.sasl_expired);
    cr_assert_eq(s.sasl_failed + s.unauthenticated + s.rejected, 0, "%s", s.last_rejection);
    cr_assert_eq(s.sasl_ok - before.sasl_ok, s.sasl_reauth - before.sasl_reauth,
                 "%s: a new login (a new connection) while renewing", km_sasl_mech_name(mech));
    km_quorum_stats q = qstats(&r);
    /* a renewal may be under way: the simulator counts it before the observer reads its answer */
    cr_assert(q.reauthentications >= 2 && q.reauthentications <= s.sasl_reauth);
    cr_assert_eq(q.auth_failures, 0);
    cr_assert_eq(q.fetch_errors, errors_before, "%s: the observer reconnected", km_sasl_mech_name(mech));
    cr_assert_gt(s.fetches, 10);
    tq_rig_free(&r);
}

Test(quorum_sasl, sessions_are_renewed_on_the_same_connection_before_they_expire, .timeout = 120)
{
    renews_across_lifetimes(KM_SASL_PLAIN);
    renews_across_lifetimes(KM_SASL_SCRAM_SHA_512);
}

/* The password changes between two logins: the renewal is refused with the controller's
 * reason, logged once, counted, and retried on a new connection after the backoff; once the
 * password is back every record is applied exactly once. */
Test(quorum_sasl, a_refused_renewal_is_logged_counted_and_retried, .timeout = 120)
{
    tq_rig r;
    km_err err;
    start(&r, KM_SASL_SCRAM_SHA_256);
    cr_assert(tq_run_until(&r, logged_in, 30), "no login");
    cr_assert_eq(km_rsim_set_sasl_password(r.sims[0], "kmproxy", "changed", &err), 0, "%s", err.msg);
    cr_assert(tq_run_until(&r, a_refusal, 30), "the renewal was not refused");
    cr_assert_eq(km_rsim_set_sasl_password(r.sims[0], "kmproxy", "kmproxy-secret", &err), 0, "%s", err.msg);
    cr_assert(tq_run_until(&r, one_renewal, 30), "no renewal after the reconnect");
    drain(&r);
    km_rsim_stats s = sstats(&r);
    cr_assert_geq(s.sasl_failed, 1);
    cr_assert_eq(s.sasl_expired + s.unauthenticated + s.rejected, 0, "%s", s.last_rejection);
    cr_assert_geq(qstats(&r).auth_failures, 1);
    cr_assert_geq(F.refusals_logged, 1);
    cr_assert(strstr(F.refusal, "SASL/SCRAM-SHA-256 re-authentication as 'kmproxy' to controller 127.0.0.1:"),
              "%s", F.refusal);
    cr_assert(strstr(F.refusal, "SASL_AUTHENTICATION_FAILED (58): Authentication failed during authentication due "
                                "to invalid credentials with SASL mechanism SCRAM-SHA-256"), "%s", F.refusal);
    tq_rig_free(&r);
}
