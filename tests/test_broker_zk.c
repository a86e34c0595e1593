/* End to end with a real ZooKeeper: the ControllerEpoch the brokers get is the ZooKeeper
 * controller epoch zkbridge's claim obtained; when a newer KRaft controller claims ZooKeeper and
 * reaches the brokers, the old propagator is answered STALE_CONTROLLER_EPOCH and stops. */
#include "km_zkbridge.h"
#include "test_broker_rig.h"
#include "zkserver.h"

#include <criterion/criterion.h>
#include <string.h>

static km_zks *zs;
static brig R;
static int claims[2];

static void on_event(km_zkw *w, km_zkw_event ev, void *ctx)
{
    (void)w;
    if (ev == KM_ZKW_EV_CLAIMED)
        claims[(intptr_t)ctx]++;
}

static void quiet(km_log_level level, const char *msg, void *ctx)
{
    (void)level;
    (void)msg;
    (void)ctx;
}

static km_zkw *claim(int idx, int32_t id, int32_t kraft_epoch)
{
    km_zkw_config cfg = { .hosts = km_zks_hosts(zs, 0), .controller_id = id, .controller_epoch = kraft_epoch,
                          .on_event = on_event, .log = quiet, .ctx = (void *)(intptr_t)idx };
    km_err err;
    km_zkw *w = km_zkw_new(R.loop, &cfg, &err);
    cr_assert(w, "%s", err.msg);
    return w;
}

static bool first_claimed(brig *r) { (void)r; return claims[0] > 0; }
static bool second_claimed(brig *r) { (void)r; return claims[1] > 0; }
static bool prop_fenced(brig *r) { return km_bprop_fenced(r->prop); }

Test(broker_zk, controller_epoch_comes_from_the_claim, .timeout = 240)
{
    char err[512] = "";
    zs = km_zks_start(1, NULL, 0, err, sizeof err);
    cr_assert(zs, "%s", err);
    /* a ZooKeeper-mode controller era came before: /controller_epoch is 41 */
    km_zkc *zc = km_zkc_open(km_zks_hosts(zs, 0), NULL, 10000);
    cr_assert(zc);
    cr_assert_eq(km_zkc_create(zc, "/controller_epoch", "41", 0), ZOK);
    brig_opts o = { .brokers = 5, .topics = 4, .partitions = 4, .replication = 3, .leader_changes = 20 };
    cr_assert(brig_init(&R, &o), "%s", R.why);

    km_zkw *w1 = claim(0, BRIG_CONTROLLER, 5);
    cr_assert(brig_run_until(&R, first_claimed, 60), "no claim: %s", km_zkw_state_name(km_zkw_get_state(w1)));
    R.zk_epoch = km_zkw_zk_controller_epoch(w1);
    cr_assert_eq(R.zk_epoch, 42, "the claim bumps /controller_epoch");
    cr_assert(brig_activate(&R), "%s", R.why);
    cr_assert(brig_run_until(&R, brig_converged, 30), "%s", R.why);

    /* a newer KRaft controller (epoch 6) takes ZooKeeper over and syncs the brokers */
    km_zkw *w2 = claim(1, BRIG_CONTROLLER + 1, 6);
    cr_assert(brig_run_until(&R, second_claimed, 60), "second claim: %s", km_zkw_state_name(km_zkw_get_state(w2)));
    int32_t epoch2 = km_zkw_zk_controller_epoch(w2);
    cr_assert_eq(epoch2, 43);
    km_bprop *old = R.prop;
    km_bprop_config pc = { .controller_id = BRIG_CONTROLLER + 1, .listener = "PLAINTEXT", .backoff_base = 0.01 };
    km_err kerr;
    R.prop = km_bprop_new(R.loop, &pc, &kerr);
    cr_assert(R.prop, "%s", kerr.msg);
    cr_assert(!km_bprop_activate(R.prop, R.img, epoch2, &kerr), "%s", kerr.msg);
    R.zk_epoch = epoch2;
    R.controller_id = BRIG_CONTROLLER + 1;
    cr_assert(brig_run_until(&R, brig_converged, 30), "%s", R.why);

    /* the old one tries again (a full sync at epoch 42): the brokers say STALE_CONTROLLER_EPOCH */
    km_bprop *newer = R.prop;
    R.prop = old;
    cr_assert(!km_bprop_activate(old, R.img, 42, &kerr), "%s", kerr.msg);
    cr_assert(brig_run_until(&R, prop_fenced, 30), "the old propagator was never fenced");
    R.prop = newer;
    km_bprop_free(old);
    cr_assert(brig_run_until(&R, brig_converged, 30), "the brokers still follow the new controller: %s", R.why);

    km_zkw_free(w1);
    km_zkw_free(w2);
    km_zkc_close(zc);
    brig_free(&R);
    km_zks_stop(zs);
}
