/* SIGHUP reloads the broker channels' TLS material: a daemon that trusts the wrong CA cannot reach
 * its (simulated, TLS) brokers; the CA file is replaced by the right one, SIGHUP, and the channels
 * come up. A broken file on a later SIGHUP is refused and the channels keep what they had. */
#include "km_testsupport.h"
#include "km_tls.h"
#include "ops_daemon.h"
#include "ops_util.h"
#include "test_broker_rig.h"
#include "test_tls_certs.h"
#include "zkserver.h"

#include <criterion/criterion.h>
#include <ev.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static brig R;

static void slice_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)t; (void)revents;
    ev_break(loop, EVBREAK_ALL);
}

/* Serves the simulators (on R's loop) until the daemon's /readyz answers `status` with needle. */
static bool serve_until(inst *in, int status, const char *needle, int timeout_s)
{
    for (int i = 0; i < timeout_s * 10; i++) {
        char *body = NULL;
        bool got = ops_curl(in->port, "/readyz", &body) == status && strstr(body, needle);
        free(body);
        if (got)
            return true;
        ev_timer t;
        ev_timer_init(&t, slice_cb, 0.1, 0);
        ev_timer_start(R.loop, &t);
        ev_run(R.loop, 0);
        ev_timer_stop(R.loop, &t);
    }
    return false;
}

static void copy_file(const char *from, const char *to)
{
    char *data = ops_slurp(from);
    FILE *f = fopen(to, "w");
    cr_assert(f);
    fputs(data, f);
    fclose(f);
    free(data);
}

Test(daemon_tls, sighup_reloads_the_broker_tls_material, .timeout = 240)
{
    km_test_pki pki;
    cr_assert_eq(km_test_pki_make(&pki), 0);
    km_err err = {{0}};
    km_tls_config sc = {.cert_file = pki.server_cert, .key_file = pki.server_key};
    km_tls_config cc = {.ca_file = pki.ca};
    km_tls_ctx *server = km_tls_server_ctx_new(&sc, &err), *client = km_tls_client_ctx_new(&cc, &err);
    cr_assert(server && client, "%s", err.msg);
    brig_opts o = {.brokers = 3, .topics = 2, .partitions = 2, .replication = 2, .tls_server = server,
                   .tls_client = client};
    cr_assert(brig_init(&R, &o), "%s", R.why);
    char zkerr[512];
    km_zks *zs = km_zks_start(1, NULL, 0, zkerr, sizeof zkerr);
    cr_assert(zs, "%s", zkerr);
    env e = {.dir = km_test_tmpdir("ops-tls")};
    snprintf(e.metadata, sizeof e.metadata, "%s", R.logdir);
    char ca[700], ca_set[800], zk[128];
    snprintf(ca, sizeof ca, "%s/ca.pem", e.dir);
    snprintf(ca_set, sizeof ca_set, "broker.tls.ca.file=%s", ca);
    snprintf(zk, sizeof zk, "%s/tls", km_zks_hosts(zs, 0));
    copy_file(pki.other_ca, ca); /* the wrong CA first */
    inst d;
    start(&d, &e, "tls", zk, (const char *const[]){"broker.security.protocol=SSL", ca_set, "broker.listener=PLAINTEXT",
                                                   NULL});
    cr_assert(serve_until(&d, 503, "brokers unreachable: 3 of 3", 60), "%s", ops_slurp(d.log_file));
    copy_file(pki.ca, ca);
    kill(d.p.pid, SIGHUP);
    cr_assert(serve_until(&d, 200, "\"ready\":true", 60), "the rotated CA was not taken: %s", ops_slurp(d.log_file));
    char *log = ops_slurp(d.log_file);
    cr_expect(strstr(log, "SIGHUP: broker channels reconfigured with their TLS material read again"), "%s", log);
    free(log);
    copy_file(pki.garbage, ca);
    kill(d.p.pid, SIGHUP);
    cr_assert(ops_wait_for(&d.p, d.log_file, "the channels keep the material they had", 1, 60), "%s",
              ops_slurp(d.log_file));
    cr_expect(serve_until(&d, 200, "\"ready\":true", 60), "a refused reload broke the channels");
    stop_cleanly(&d);
    brig_free(&R);
    km_zks_stop(zs);
    km_tls_ctx_free(server);
    km_tls_ctx_free(client);
    km_test_pki_free(&pki);
    km_test_rmtree(e.dir);
    free(e.dir);
}
