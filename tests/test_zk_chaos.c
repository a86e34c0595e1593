/* The mirror under trouble: a session expired mid-batch, ZooKeeper restarted mid-sync, lost acks
 * during a full sync, and a stale follower (KAFKA-16667) on a 3-server ensemble. Each ends with
 * ZooKeeper equal to the image. The suite runs twice: on a plain ZooKeeper (test_zk_chaos) and on one
 * that requires SASL (test_zk_chaos_sasl: KM_TEST_ZK_SECURE=sasl, zksecmode.h), where the bridge
 * authenticates on every new session with zookeeper.set.acl=true and every znode must end with
 * Kafka's ACL, those written before the trouble and after it alike. */
#include "test_tls_certs.h"
#include "test_zk_util.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static km_image *gen_image(char **dir, int topics, int partitions)
{
    *dir = km_test_tmpdir("zkchaos");
    char log[512];
    snprintf(log, sizeof log, "%s/log", *dir);
    km_image *img = km_image_new();
    km_gen_opts o = {.brokers = 3, .topics = topics, .partitions = partitions, .leader_changes = 20, .seed = 11,
                     .zk_migration = true};
    km_err err = {{0}};
    cr_assert_geq(km_gen_write(log, &o, img, &err), 0, "%s", err.msg);
    return img;
}

typedef struct progress {
    zkt_bridge *t;
    uint64_t multis;
} progress;

static bool multis_at_least(void *ctx)
{
    progress *p = ctx;
    km_zkw_metrics m;
    km_zkw_get_metrics(km_zkb_writer(p->t->b), &m);
    return m.multis_ok >= p->multis || km_zkb_idle(p->t->b);
}

static void check_equal(km_zks *zs, const km_image *img, int32_t epoch)
{
    km_zkc *c = km_zksec_open(km_zks_hosts(zs, -1), 10000);
    cr_assert(c);
    char why[512];
    cr_assert(zkt_zk_equals_image(c, img, epoch, why, sizeof why), "%s", why);
    if (km_zksec_on()) /* written by sessions that came and went: each znode as Kafka's ACLs have it */
        cr_assert(km_zksec_acls_are_kafkas(c, why, sizeof why), "%s", why);
    km_zkc_close(c);
}

/* Slow multis (few ops each, few in flight) so that the trouble lands in the middle. */
static const km_zkb_config SLOW = {.zk = {.max_multi_ops = 25, .max_inflight = 4, .max_pending_ops = 2000}};

Test(zk_chaos, session_expired_mid_batch, .timeout = 240)
{
    char err[512] = "", *dir;
    km_zks *zs = km_zksec_start(1, err, sizeof err);
    cr_assert(zs, "%s", err);
    km_image *img = gen_image(&dir, 40, 40);
    zkt_bridge *t = zkt_bridge_new(km_zks_hosts(zs, 0), img, 3000, 2, &SLOW);
    progress p = {t, 10};
    cr_assert(zkt_run_until(t->loop, multis_at_least, &p, 60000));
    cr_assert_not(km_zkb_idle(t->b), "the sync must still be running when the session dies");
    clientid_t id = *zoo_client_id(km_zkw_handle(km_zkb_writer(t->b)));
    cr_assert_eq(km_zksec_expire_session(km_zks_hosts(zs, 0), &id), 0);
    cr_assert(zkt_bridge_wait_idle(t, 120000), "%s", km_zkb_error(t->b));
    km_zkw_metrics m;
    km_zkw_get_metrics(km_zkb_writer(t->b), &m);
    cr_assert_eq(m.sessions, 2, "a new session after expiry");
    cr_assert_eq(m.claims, 2, "and a new claim on it");
    cr_assert_eq(m.write_behind_lag, 0);
    check_equal(zs, img, 2);
    zkt_bridge_free(t);
    km_image_free(img);
    km_test_rmtree(dir);
    free(dir);
    km_zks_stop(zs);
}

Test(zk_chaos, zookeeper_restarted_mid_sync, .timeout = 240)
{
    char err[512] = "", *dir;
    km_zks *zs = km_zksec_start(1, err, sizeof err);
    cr_assert(zs, "%s", err);
    km_image *img = gen_image(&dir, 40, 40);
    zkt_bridge *t = zkt_bridge_new(km_zks_hosts(zs, 0), img, 3000, 2, &SLOW);
    progress p = {t, 10};
    cr_assert(zkt_run_until(t->loop, multis_at_least, &p, 60000));
    cr_assert_not(km_zkb_idle(t->b));
    cr_assert_eq(km_zks_restart(zs, 0), 0, "ZooKeeper did not come back");
    cr_assert(zkt_bridge_wait_idle(t, 120000), "%s", km_zkb_error(t->b));
    km_zkw_metrics m;
    km_zkw_get_metrics(km_zkb_writer(t->b), &m);
    cr_assert_eq(m.write_behind_lag, 0);
    cr_assert_eq(m.state, KM_ZKW_READY);
    check_equal(zs, img, 2);
    zkt_bridge_free(t);
    km_image_free(img);
    km_test_rmtree(dir);
    free(dir);
    km_zks_stop(zs);
}

/* The restart on a TLS-only ZooKeeper (zookeeper.set.acl=true; SASL is the whole suite's second
 * run): the new connection completes its TLS handshake again before anything is sent, and the
 * znodes written after the restart carry Kafka's ACLs like those before it; `who` is the
 * creator's ACL id. */
static void restart_mid_sync_secured(const km_zks_options *opt, const km_zk_security *sec, const km_zkc_auth *auth,
                                     const char *scheme, const char *who)
{
    char err[512] = "", *dir;
    km_zks *zs = km_zks_start_opts(1, opt, err, sizeof err);
    cr_assert(zs, "%s", err);
    km_image *img = gen_image(&dir, 40, 40);
    km_zkb_config cfg = SLOW;
    cfg.zk.security = sec;
    zkt_bridge *t = zkt_bridge_new(km_zks_hosts(zs, 0), img, 3000, 2, &cfg);
    progress p = {t, 10};
    cr_assert(zkt_run_until(t->loop, multis_at_least, &p, 60000));
    cr_assert_not(km_zkb_idle(t->b));
    cr_assert_eq(km_zks_restart(zs, 0), 0, "ZooKeeper did not come back");
    cr_assert(zkt_bridge_wait_idle(t, 120000), "%s", km_zkb_error(t->b));
    km_zkc *c = km_zkc_open_auth(km_zks_hosts(zs, 0), auth, 10000);
    cr_assert(c);
    char why[512];
    cr_assert(zkt_zk_equals_image(c, img, 2, why, sizeof why), "%s", why);
    const char *paths[] = {"/brokers/topics/topic-39/partitions/39/state", "/config/users/alice"};
    for (int i = 0; i < 2; i++) {
        struct ACL_vector acl;
        cr_assert_eq(km_zkc_get_acl(c, paths[i], &acl), ZOK, "%s", paths[i]);
        cr_assert_eq(acl.count, 2 - i, "%s: %d ACL entries", paths[i], acl.count);
        cr_assert_str_eq(acl.data[0].id.scheme, scheme);
        cr_assert_str_eq(acl.data[0].id.id, who);
        deallocate_ACL_vector(&acl);
    }
    km_zkc_close(c);
    zkt_bridge_free(t);
    km_image_free(img);
    km_test_rmtree(dir);
    free(dir);
    km_zks_stop(zs);
}

Test(zk_chaos, zookeeper_restarted_mid_sync_on_a_tls_only_server_with_kafka_acls, .timeout = 240)
{
    km_test_pki pki;
    cr_assert_eq(km_test_pki_make(&pki), 0);
    char ks[PATH_MAX + 16], cmd[3 * PATH_MAX + 64];
    snprintf(ks, sizeof ks, "%s/keystore.pem", pki.dir);
    snprintf(cmd, sizeof cmd, "cat '%s' '%s' > '%s'", pki.client_key, pki.client_cert, ks);
    cr_assert_eq(system(cmd), 0);
    km_zk_security sec = {.tls = true, .keystore_location = ks, .truststore_location = pki.ca, .verify_host = true,
                          .set_acl = true};
    restart_mid_sync_secured(&(km_zks_options){.tls_ca = pki.ca, .tls_cert = pki.server_cert,
                                               .tls_key = pki.server_key, .tls_client_cert = pki.client_cert,
                                               .tls_client_key = pki.client_key},
                             &sec, &(km_zkc_auth){.tls_ca = pki.ca, .tls_cert = pki.client_cert,
                                                  .tls_key = pki.client_key}, "x509", "CN=km-test-client");
    km_test_pki_free(&pki);
}

Test(zk_chaos, lost_acks_during_full_sync, .timeout = 240)
{
    char err[512] = "", *dir;
    km_zks *zs = km_zksec_start(1, err, sizeof err);
    cr_assert(zs, "%s", err);
    km_fp *fp = km_fp_start(km_zks_port(zs, 0), err, sizeof err);
    cr_assert(fp, "%s", err);
    km_image *img = gen_image(&dir, 20, 20);
    km_fp_arm(fp, KM_FP_MULTI_DATA, KM_FP_DROP_REPLY, "/migration", 5);
    km_zkb_config cfg = SLOW;
    cfg.sync_chunk_ops = 200; /* many partial batches ahead of the one checkpoint multi */
    zkt_bridge *t = zkt_bridge_new(km_fp_hosts(fp), img, 3000, 2, &cfg);
    progress p = {t, 10};
    cr_assert(zkt_run_until(t->loop, multis_at_least, &p, 60000));
    km_fp_arm(fp, KM_FP_MULTI_CHECKPOINT, KM_FP_DROP_REPLY, "/migration", 0);
    cr_assert(zkt_bridge_wait_idle(t, 120000), "%s", km_zkb_error(t->b));
    cr_assert_eq(km_fp_fired(fp), 2, "faults fired: %d", km_fp_fired(fp));
    km_zkw_metrics m;
    km_zkw_get_metrics(km_zkb_writer(t->b), &m);
    cr_assert_geq(m.lost_acks_adopted, 2);
    cr_assert_eq(m.claims, 1);
    check_equal(zs, img, 2);
    zkt_bridge_free(t);
    km_fp_stop(fp);
    km_image_free(img);
    km_test_rmtree(dir);
    free(dir);
    km_zks_stop(zs);
}

static int leader_index(km_zks *zs)
{
    char mode[32];
    for (int i = 0; i < km_zks_count(zs); i++)
        if (km_zks_mode(zs, i, mode, sizeof mode) && !strcmp(mode, "leader"))
            return i;
    return -1;
}

static void batches(zkt_writer *w, int n, int64_t *offset)
{
    km_err err = {{0}};
    for (int i = 0; i < n; i++)
        cr_assert_eq(km_zkw_submit(w->w, NULL, 0, ++*offset, 1, &err), 0, "%s", err.msg);
    cr_assert(zkt_wait_drained(w, 30000), "%s", km_zkw_state_name(km_zkw_get_state(w->w)));
}

/* KAFKA-16667: a new controller on a follower that is behind must still learn the true /migration
 * zkVersion (sync() before reading, then its own conditional write), and go on writing. */
Test(zk_chaos, stale_follower_read_on_a_3_server_ensemble, .timeout = 300)
{
    char err[512] = "";
    km_zks *zs = km_zksec_start(3, err, sizeof err);
    cr_assert(zs, "%s", err);
    int lead = leader_index(zs), f = km_zks_follower(zs);
    cr_assert(lead >= 0 && f >= 0);
    zkt_writer *a = zkt_writer_new(km_zks_hosts(zs, lead), 3000, 1, NULL);
    cr_assert(zkt_wait_state(a, KM_ZKW_READY, 30000));
    int64_t offset = 0;
    batches(a, 5, &offset);
    cr_assert_eq(km_zks_pause(zs, f, true), 0);
    batches(a, 30, &offset); /* the quorum (leader + the other follower) moves on without f */
    cr_assert_eq(km_zks_pause(zs, f, false), 0);
    zkt_writer *b = zkt_writer_new(km_zks_hosts(zs, f), 3001, 2, NULL);
    cr_assert(zkt_wait_state(b, KM_ZKW_READY, 60000), "%s: %s", km_zkw_state_name(km_zkw_get_state(b->w)),
              km_zkw_fence_reason(b->w));
    km_zkc *c = km_zksec_open(km_zks_hosts(zs, lead), 10000);
    cr_assert(c);
    int truth = -1;
    char *mig = zkt_get(c, "/migration", &truth);
    cr_assert_eq(km_zkw_migration_version(b->w), truth, "B uses zkVersion %d, ZooKeeper's leader has %d",
                 km_zkw_migration_version(b->w), truth);
    cr_assert_eq(km_zkw_confirmed_offset(b->w), offset, "B took over at the offset A left: %s", mig);
    free(mig);
    int64_t boff = offset;
    batches(b, 3, &boff); /* and it is not wedged */
    cr_assert_eq(km_zkw_confirmed_offset(b->w), boff);
    km_err e = {{0}};
    cr_assert_eq(km_zkw_submit(a->w, NULL, 0, ++offset, 1, &e), 0, "%s", e.msg);
    cr_assert(zkt_wait_state(a, KM_ZKW_FENCED, 30000), "the old controller must fence itself");
    char why[512] = "";
    cr_assert(!km_zksec_on() || km_zksec_acls_are_kafkas(c, why, sizeof why), "%s", why);
    km_zkc_close(c);
    zkt_writer_free(a);
    zkt_writer_free(b);
    km_zks_stop(zs);
}

/* The lost ack of a sync's very last /migration write (with data, then a no-op re-sync): recovery
 * adopts it, and the bridge must notice it is done (it once waited for an event that never came). */
Test(zk_chaos, lost_ack_on_the_last_checkpoint_of_a_sync, .timeout = 120)
{
    char err[512] = "", *dir;
    km_zks *zs = km_zksec_start(1, err, sizeof err);
    cr_assert(zs, "%s", err);
    km_fp *fp = km_fp_start(km_zks_port(zs, 0), err, sizeof err);
    cr_assert(fp, "%s", err);
    km_image *img = gen_image(&dir, 3, 3);
    for (int round = 0; round < 2; round++) {
        /* round 1: the claim's own setData of /migration comes first (round 0 creates it) */
        km_fp_arm(fp, KM_FP_MULTI_CHECKPOINT, KM_FP_DROP_REPLY, "/migration", round);
        zkt_bridge *t = zkt_bridge_new(km_fp_hosts(fp), img, 3000, 2 + round, NULL);
        cr_assert(zkt_bridge_wait_idle(t, 30000), "round %d: phase %d, %s", round, (int)km_zkb_get_phase(t->b),
                  km_zkb_error(t->b));
        cr_assert_eq(km_fp_fired(fp), round + 1);
        check_equal(zs, img, 2 + round);
        zkt_bridge_free(t);
    }
    km_fp_stop(fp);
    km_image_free(img);
    km_test_rmtree(dir);
    free(dir);
    km_zks_stop(zs);
}
