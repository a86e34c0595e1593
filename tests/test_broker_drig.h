/* test_broker_drig.h - the daemon (km_daemon) end to end over the broker rig: a real ZooKeeper
 * (optionally behind the fault proxy), simulated ZK-mode brokers re-registered in a generated log,
 * and the daemon following that log with brokers.enabled.  The rig's own propagator stays idle
 * (it may prime the brokers first); brig_converged asks the daemon whether it is idle. */
#ifndef KM_TEST_BROKER_DRIG_H
#define KM_TEST_BROKER_DRIG_H

#include "faultproxy.h"
#include "km_daemon.h"
#include "km_tls.h"
#include "test_broker_rig.h"
#include "test_tls_certs.h"
#include "zkserver.h"

#define DRIG_GUARD 90.0 /* seconds: only a guard against hangs */

typedef struct drig_opts {
    int brokers;
    double cut_ratio;                  /* the simulators cut this share of control requests */
    bool via_proxy;                    /* the daemon reaches ZooKeeper through a fault proxy */
    bool tls;                          /* the simulators listen with TLS only (SSL for the daemon) */
    int32_t prime_epoch;               /* != 0: an older controller era reached the brokers first */
    km_bsim_kafka kafka, kafka_odd;    /* as brig_opts: every broker's, odd ids' rules */
    bool default_listener;             /* broker.listener unset (else PLAINTEXT) */
    const char *session_timeout_ms;    /* NULL: 18000 */
    /* Before the daemon starts: e.g. registrations it must read (r->ud is the drig). */
    void (*before_daemon)(brig *r);
    const char *const *settings;       /* more "key=value" settings, NULL-terminated (may be NULL) */
} drig_opts;

typedef struct drig {
    brig r;
    km_zks *zs;
    km_fp *fp;
    km_daemon *d;
    km_test_pki pki;
    km_tls_ctx *server_tls;
    bool tls;
} drig;

/* Starts ZooKeeper, the rig and the daemon (cr_assert on failure). */
void drig_start(drig *g, const drig_opts *o);
void drig_stop(drig *g);
/* Runs until every broker equals the image and hosts nothing else (cr_assert). */
void drig_converge(drig *g, const char *when);
/* The daemon has applied everything the log holds. */
bool drig_image_caught_up(brig *r);
/* A predicate that never holds: brig_run_until(r, drig_never, s) runs the loop for s seconds. */
bool drig_never(brig *r);
/* A topic with min.insync.replicas=2 and np (<= 8) partitions on brokers (p + k + salt) % n + 1,
 * replication 3, one delta. */
void drig_create_topic(drig *g, const char *name, unsigned salt, int np, int nbrokers);
/* The sum over every simulator of state[object][key]. */
long long drig_sum_over_sims(drig *g, const char *object, const char *key);
/* The daemon's /metrics sample `name{labels}` (labels may be NULL); -1 if absent. */
double drig_metric(drig *g, const char *name, const char *labels);
/* The same for one broker's sample (labels broker="id"). */
double drig_broker_metric(drig *g, const char *name, int32_t broker);
/* The daemon's status, asserting it has not stopped. */
km_daemon_status drig_status(drig *g);

#endif
