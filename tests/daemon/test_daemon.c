/* The daemon against a real ZooKeeper: it mirrors, and it stops for good when a genuine second
 * writer takes ZooKeeper over; start-up errors name what was wrong. */
#include "km_daemon.h"
#include "km_image.h"
#include "km_metalog.h"
#include "km_testsupport.h"
#include "zkserver.h"

#include <criterion/criterion.h>
#include <ev.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct rig {
    km_zks *zks;
    char *tmp, logdir[512], hosts[128];
    struct ev_loop *loop;
    km_daemon *d;
} rig;

static void rig_start(rig *r)
{
    char err[512];
    r->zks = km_zks_start(1, NULL, 0, err, sizeof err);
    cr_assert(r->zks, "ZooKeeper: %s", err);
    snprintf(r->hosts, sizeof r->hosts, "%s/kafka", km_zks_hosts(r->zks, -1));
    r->tmp = km_test_tmpdir("daemon");
    snprintf(r->logdir, sizeof r->logdir, "%s/__cluster_metadata-0", r->tmp);
    km_gen_opts g = {.brokers = 3, .topics = 4, .partitions = 3, .zk_migration = true, .seed = 7};
    km_err e = {{0}};
    cr_assert_geq(km_gen_write(r->logdir, &g, NULL, &e), 0, "%s", e.msg);
    km_config cfg;
    km_config_defaults(&cfg);
    cr_assert_eq(km_config_set(&cfg, "metadata.dir", r->logdir, "test", &e), 0);
    cr_assert_eq(km_config_set(&cfg, "zookeeper.connect", r->hosts, "test", &e), 0);
    cr_assert_eq(km_config_set(&cfg, "brokers.enabled", "false", "test", &e), 0);
    r->loop = ev_loop_new(0);
    r->d = km_daemon_new(r->loop, &cfg, &e);
    km_config_free(&cfg);
    cr_assert(r->d, "%s", e.msg);
    km_daemon_start(r->d);
}

static void rig_stop(rig *r)
{
    km_daemon_free(r->d);
    ev_loop_destroy(r->loop);
    km_zks_stop(r->zks);
    km_test_rmtree(r->tmp);
    free(r->tmp);
}

typedef struct waiter { rig *r; bool (*pred)(const km_daemon_status *); } waiter;

static void poll_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)revents;
    waiter *w = t->data;
    km_daemon_status st;
    km_daemon_get_status(w->r->d, &st);
    if (w->pred(&st) || st.fatal)
        ev_break(loop, EVBREAK_ALL);
}

static void guard_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)t; (void)revents;
    ev_break(loop, EVBREAK_ALL);
}

/* Runs the loop until pred holds, the daemon stops, or 60 s (a guard against hangs). */
static bool run_until(rig *r, bool (*pred)(const km_daemon_status *))
{
    waiter w = {r, pred};
    ev_timer poll, guard;
    ev_timer_init(&poll, poll_cb, 0.02, 0.02);
    poll.data = &w;
    ev_timer_init(&guard, guard_cb, 60, 0);
    ev_timer_start(r->loop, &poll);
    ev_timer_start(r->loop, &guard);
    ev_run(r->loop, 0);
    ev_timer_stop(r->loop, &poll);
    ev_timer_stop(r->loop, &guard);
    km_daemon_status st;  /* the daemon may have stopped the loop itself (a fatal error) */
    km_daemon_get_status(r->d, &st);
    return pred(&st);
}

static bool mirrored(const km_daemon_status *st)
{
    return st->zk_idle && st->zk_confirmed_offset == st->image_offset && st->image_offset >= 0;
}

static bool stopped(const km_daemon_status *st) { return st->fatal != NULL; }

/* One more record in the log, so the daemon has something to write. */
static void append_noop(rig *r)
{
    km_err e = {{0}};
    km_metalog_writer_opts wo = {.leader_epoch = 1};
    km_metalog_writer *w = km_metalog_writer_open_dir(r->logdir, &wo, &e);
    cr_assert(w, "%s", e.msg);
    const km_message_desc *md = km_find_message(KM_K_METADATA, KM_MDR_NO_OP_RECORD);
    km_no_op_record rec;
    km_no_op_record_init(&rec);
    km_metalog_entry entry = {.desc = md, .version = 0, .msg = &rec, .control_type = -1};
    cr_assert_eq(km_metalog_writer_append(w, &entry, 1, NULL, &e), 0, "%s", e.msg);
    cr_assert_eq(km_metalog_writer_finish(w, &e), 0, "%s", e.msg);
}

Test(daemon, mirrors_under_a_new_chroot_then_fences_on_a_second_writer)
{
    rig r = {0};
    rig_start(&r);
    cr_assert(run_until(&r, mirrored), "never mirrored the log");
    km_zkc *c = km_zkc_open(r.hosts, NULL, 10000);
    cr_assert(c);
    char *data;
    int len;
    struct Stat st;
    cr_assert_eq(km_zkc_get(c, "/migration", &data, &len, &st), ZOK);
    cr_assert(strstr(data, "\"kraft_metadata_offset\":"), "%s", data);
    free(data);
    /* A genuine second writer: another controller claims and moves /migration. */
    cr_assert_eq(km_zkc_get(c, "/controller_epoch", &data, &len, &st), ZOK);
    char bumped[32];
    snprintf(bumped, sizeof bumped, "%d", atoi(data) + 5);
    free(data);
    cr_assert_eq(km_zkc_set(c, "/controller_epoch", bumped, st.version, &st), ZOK);
    const char *foreign = "{\"version\":0,\"kraft_controller_id\":9,\"kraft_controller_epoch\":99,"
                          "\"kraft_metadata_offset\":1,\"kraft_metadata_epoch\":99}";
    cr_assert_eq(km_zkc_set(c, "/migration", foreign, -1, &st), ZOK);
    append_noop(&r);
    cr_assert(run_until(&r, stopped), "the daemon kept going after another writer took over");
    km_daemon_status ds;
    km_daemon_get_status(r.d, &ds);
    cr_assert(strstr(ds.fatal, "ZooKeeper mirror stopped"), "%s", ds.fatal);
    cr_assert_eq(km_zkc_get(c, "/migration", &data, &len, &st), ZOK);
    cr_assert_str_eq(data, foreign, "the fenced daemon wrote /migration");
    free(data);
    km_zkc_close(c);
    rig_stop(&r);
}

Test(daemon, start_up_errors_exit_2_naming_the_problem)
{
    char *out, *err;
    size_t n;
    char *missing[] = {(char *)km_test_binary(), "run", "--set", "metadata.dir=/nonexistent/__cluster_metadata-0",
                       "--set", "zookeeper.connect=127.0.0.1:1", NULL};
    cr_assert_eq(km_test_run(missing, NULL, 0, &out, &n, &err), 2);
    cr_assert(strstr(err, "/nonexistent/__cluster_metadata-0"), "%s", err);
    free(out); free(err);
    char *typo[] = {(char *)km_test_binary(), "run", "--set", "zookeeper.conect=x", NULL};
    cr_assert_eq(km_test_run(typo, NULL, 0, &out, &n, &err), 2);
    cr_assert(strstr(err, "unknown key 'zookeeper.conect'"), "%s", err);
    free(out); free(err);
    char *nofile[] = {(char *)km_test_binary(), "run", "--config", "/nonexistent.properties", NULL};
    cr_assert_eq(km_test_run(nofile, NULL, 0, &out, &n, &err), 2);
    cr_assert(strstr(err, "/nonexistent.properties: cannot open"), "%s", err);
    free(out); free(err);
}
