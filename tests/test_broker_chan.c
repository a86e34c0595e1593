/* Broker channels under pressure: a bounded queue that overflows into a full sync, a broker that
 * accepts but never answers (request timeout), and TLS. */
#include "km_tls.h"
#include "test_broker_rig.h"
#include "test_tls_certs.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <jansson.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static brig R;

static void fini(void) { brig_free(&R); }

static void leader_changes(int n)
{
    size_t it = 0;
    const km_topic *t = km_image_next_topic(R.img, &it);
    for (int i = 0; i < n; i++) {
        cr_assert(brig_bump_leader_epoch(&R, t, i % km_topic_partition_count(t)), "%s", R.why);
        cr_assert(brig_pump(&R), "%s", R.why); /* one delta each, faster than any broker answers */
    }
}

Test(broker_chan, overflow_collapses_into_a_full_sync, .fini = fini, .timeout = 120)
{
    brig_opts o = { .brokers = 3, .topics = 2, .partitions = 4, .replication = 3, .max_queue = 4 };
    cr_assert(brig_init(&R, &o), "%s", R.why);
    cr_assert(brig_activate(&R), "%s", R.why);
    cr_assert(brig_run_until(&R, brig_converged, 30), "%s", R.why);
    leader_changes(40); /* 80 requests per broker against a queue of 4 */
    for (int32_t b = 1; b <= 3; b++)
        cr_assert(km_bchan_pending(km_bprop_channel(R.prop, b)) <= 5, "the queue is bounded");
    cr_assert(brig_run_until(&R, brig_converged, 30), "%s", R.why);
    km_bchan_stats s;
    km_bchan_get_stats(km_bprop_channel(R.prop, 1), &s);
    cr_assert(s.overflows >= 1 && s.full_syncs >= 1 && s.dropped > 0, "overflows %llu full syncs %llu",
              (unsigned long long)s.overflows, (unsigned long long)s.full_syncs);
}

/* Listens but never accepts: connects succeed (the kernel's backlog), nothing is ever answered. */
static int black_hole(uint16_t *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = { .sin_family = AF_INET };
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof sa;
    cr_assert(!bind(fd, (struct sockaddr *)&sa, sizeof sa) && !listen(fd, 16) &&
              !getsockname(fd, (struct sockaddr *)&sa, &len));
    *port = ntohs(sa.sin_port);
    return fd;
}

static bool timeouts_then_converged(brig *r, int32_t broker, uint64_t n)
{
    km_bchan_stats s;
    km_bchan_get_stats(km_bprop_channel(r->prop, broker), &s);
    return s.timeouts >= n && brig_converged(r);
}

static bool timed_out(brig *r) { return timeouts_then_converged(r, 9, 2); }

Test(broker_chan, silent_broker_times_out_and_never_blocks, .fini = fini, .timeout = 120)
{
    brig_opts o = { .brokers = 3, .topics = 2, .partitions = 4, .replication = 3, .request_timeout = 0.2 };
    cr_assert(brig_init(&R, &o), "%s", R.why);
    uint16_t port;
    int hole = black_hole(&port);
    cr_assert(brig_register(&R, 9, 1009, port, true), "%s", R.why);
    cr_assert(brig_pump(&R), "%s", R.why);
    cr_assert(brig_activate(&R), "%s", R.why);
    leader_changes(8);
    cr_assert(brig_run_until(&R, timed_out, 30), "%s", R.why);
    cr_assert(!km_bchan_ready(km_bprop_channel(R.prop, 9)));
    close(hole);
}

Test(broker_chan, tls_to_every_broker, .fini = fini, .timeout = 120)
{
    km_test_pki pki;
    cr_assert(!km_test_pki_make(&pki));
    km_err err;
    km_tls_config sc = { .cert_file = pki.server_cert, .key_file = pki.server_key };
    km_tls_config cc = { .ca_file = pki.ca };
    km_tls_ctx *server = km_tls_server_ctx_new(&sc, &err);
    cr_assert(server, "%s", err.msg);
    km_tls_ctx *client = km_tls_client_ctx_new(&cc, &err);
    cr_assert(client, "%s", err.msg);
    brig_opts o = { .brokers = 3, .topics = 3, .partitions = 3, .replication = 3, .leader_changes = 10,
                    .tls_server = server, .tls_client = client };
    cr_assert(brig_init(&R, &o), "%s", R.why);
    cr_assert(brig_activate(&R), "%s", R.why);
    cr_assert(brig_run_until(&R, brig_converged, 30), "%s", R.why);
    leader_changes(6);
    cr_assert(brig_run_until(&R, brig_converged, 30), "%s", R.why);
    brig_free(&R);
    memset(&R, 0, sizeof R);
    km_tls_ctx_free(client);
    km_tls_ctx_free(server);
    km_test_pki_free(&pki);
}

static uint64_t requests_before;
static bool one_muted_in_flight(brig *r) { return km_bsim_requests(brig_sim(r, 1)) > requests_before; }

/* Issue 19 item 9: new TLS material (SIGHUP) reconfigures the channels in place. Broker 1 sits on an
 * unanswered request; the old client context is freed as soon as km_bprop_reconfigure returns (the
 * sanitizer build sees any use of it after); every channel connects again with the new one, the
 * request in flight is resent as it was, and no broker gets a full sync. */
Test(broker_chan, new_tls_material_reconnects_and_resends_what_was_in_flight, .fini = fini, .timeout = 120)
{
    km_test_pki pki;
    cr_assert(!km_test_pki_make(&pki));
    km_err err;
    km_tls_config sc = { .cert_file = pki.server_cert, .key_file = pki.server_key };
    km_tls_config cc = { .ca_file = pki.ca };
    km_tls_ctx *server = km_tls_server_ctx_new(&sc, &err), *client = km_tls_client_ctx_new(&cc, &err);
    cr_assert(server && client, "%s", err.msg);
    brig_opts o = { .brokers = 3, .topics = 2, .partitions = 3, .replication = 3, .tls_server = server,
                    .tls_client = client };
    cr_assert(brig_init(&R, &o), "%s", R.why);
    cr_assert(brig_activate(&R), "%s", R.why);
    cr_assert(brig_run_until(&R, brig_converged, 30), "%s", R.why);
    km_bsim_mute(brig_sim(&R, 1), 1);
    requests_before = km_bsim_requests(brig_sim(&R, 1));
    leader_changes(3);
    cr_assert(brig_run_until(&R, one_muted_in_flight, 30), "%s", R.why);
    km_tls_ctx *rotated = km_tls_client_ctx_new(&cc, &err);
    cr_assert(rotated, "%s", err.msg);
    cr_assert_eq(km_bprop_reconfigure(R.prop, &(km_net_opts){ .tls = rotated }, &(km_bchan_sasl){ 0 }, &err), 0,
                 "%s", err.msg);
    km_tls_ctx_free(client);
    cr_assert(brig_run_until(&R, brig_converged, 30), "%s", R.why);
    for (int32_t b = 1; b <= 3; b++) {
        km_bchan_stats s;
        km_bchan_get_stats(km_bprop_channel(R.prop, b), &s);
        cr_assert_geq(s.connects, 2, "broker %d: no new connection with the new material", b);
        cr_assert_eq(s.full_syncs, 0, "broker %d", b);
        cr_assert_eq(brig_lisr_count(&R, b, 2), 1, "broker %d: only activation's FULL LeaderAndIsr", b);
        if (b == 1)
            cr_assert_geq(s.resent, 1, "the muted request was not resent");
    }
    brig_free(&R);
    memset(&R, 0, sizeof R);
    km_tls_ctx_free(rotated);
    km_tls_ctx_free(server);
    km_test_pki_free(&pki);
}

/* ---- per-partition errors ------------------------------------------------------------------- */

typedef struct seed { km_bchan *ch; int done; const km_topic *t; } seed;

/* A ZooKeeper-era controller (epoch 5) left broker 1 at leader epoch 99 for one partition. */
static void seed_sync(km_bchan *ch, bool first, void *ud)
{
    (void)first;
    seed *s = ud;
    km_partition x;
    cr_assert(km_topic_partition(s->t, 0, &x));
    km_bp_part p = { .topic = km_topic_name(s->t), .topic_id = km_topic_id(s->t), .partition = 0,
                     .controller_epoch = 5, .leader = x.leader, .leader_epoch = 99, .partition_epoch = 99,
                     .isr = x.isr, .replicas = x.replicas };
    km_bp_ctl c = { .controller_id = 1, .controller_epoch = 5, .broker_epoch = -1, .kraft = false };
    km_arena a;
    km_arena_init(&a, 0);
    km_leader_and_isr_request *rq = km_arena_alloc(&a, sizeof *rq);
    km_err err;
    int16_t v = km_bchan_version(ch, KM_API_LEADER_AND_ISR);
    cr_assert(!km_bp_leader_and_isr(v, &c, &p, 1, NULL, 0, "PLAINTEXT", &a, rq, &err), "%s", err.msg);
    cr_assert(km_bchan_submit(ch, KM_API_LEADER_AND_ISR, rq, &a, &err) > 0);
}

static void seed_done(km_bchan *ch, int16_t api, uint64_t seq, int16_t top, void *ud)
{
    (void)ch;
    (void)api;
    (void)seq;
    (void)top;
    ((seed *)ud)->done++;
}

static seed *the_seed;
static bool seeded(brig *r) { (void)r; return the_seed->done > 0; }

static bool stale_partition_seen(brig *r)
{
    km_bchan_stats s;
    km_bchan_get_stats(km_bprop_channel(r->prop, 1), &s);
    return s.error_by_code[11] >= 1 && !km_bprop_pending(r->prop);
}

Test(broker_chan, per_partition_errors_are_logged_and_counted_by_name, .fini = fini, .timeout = 120)
{
    brig_opts o = { .brokers = 3, .topics = 2, .partitions = 2, .replication = 3 };
    cr_assert(brig_init(&R, &o), "%s", R.why);
    size_t it = 0;
    seed s = { .t = km_image_next_topic(R.img, &it) };
    the_seed = &s;
    const km_broker *b1 = km_image_broker(R.img, 1);
    km_bchan_config cc = { .broker_id = 1, .host = "127.0.0.1", .port = b1->endpoints[0].port };
    km_bchan_hooks h = { .need_full_sync = seed_sync, .done = seed_done, .ud = &s };
    km_err err;
    s.ch = km_bchan_new(R.loop, &cc, &h, &err);
    cr_assert(s.ch, "%s", err.msg);
    cr_assert(brig_run_until(&R, seeded, 30));
    km_bchan_free(s.ch);

    cr_assert(brig_activate(&R), "%s", R.why);
    cr_assert(brig_run_until(&R, stale_partition_seen, 30), "no per-partition STALE_CONTROLLER_EPOCH");
    km_buf m;
    km_buf_init(&m);
    km_bprop_render_metrics(R.prop, &m);
    km_buf_put(&m, "", 1);
    cr_assert(strstr((char *)m.data, "kmproxy_broker_error_codes_total{broker=\"1\",error=\"STALE_CTRL_EPOCH\"} 1"),
              "%s", (char *)m.data);
    cr_assert(strstr((char *)m.data, "\nkmproxy_broker_sasl_reauthentications_total{broker=\"1\"} 0\n"), "%s",
              (char *)m.data);
    km_buf_free(&m);
    /* a per-partition error is not a lost leadership: nothing stopped */
    cr_assert(!km_bprop_fenced(R.prop));
    cr_assert(km_bchan_ready(km_bprop_channel(R.prop, 1)));
}

/* ---- issue 9: nothing is lost to a timeout, an overflow or a cut ---------------------------- */

static bool timed_out_and_converged(brig *r) { return timeouts_then_converged(r, 1, 1); }

/* A request that times out is sent again as it was after the reconnect, not replaced by a full
 * sync (Kafka's RequestSendThread). */
Test(broker_chan, a_timed_out_request_is_resent_as_it_was, .fini = fini, .timeout = 120)
{
    brig_opts o = { .brokers = 3, .topics = 2, .partitions = 4, .replication = 3, .request_timeout = 0.3 };
    cr_assert(brig_init(&R, &o), "%s", R.why);
    cr_assert(brig_activate(&R), "%s", R.why);
    cr_assert(brig_run_until(&R, brig_converged, 30), "%s", R.why);
    km_bsim_mute(brig_sim(&R, 1), 1);
    leader_changes(3);
    cr_assert(brig_run_until(&R, timed_out_and_converged, 30), "%s", R.why);
    km_bchan_stats s;
    km_bchan_get_stats(km_bprop_channel(R.prop, 1), &s);
    cr_assert_geq(s.resent, 1);
    cr_assert_eq(s.full_syncs, 0);
    cr_assert_eq(brig_lisr_count(&R, 1, 2), 1, "only activation's FULL LeaderAndIsr");
}

static bool converged_without_strays(brig *r) { return brig_converged(r) && brig_no_strays(r); }

/* Broker 1's queue overflows while a deletion's StopReplica and UpdateMetadata wait in it: the
 * full sync that follows cannot carry a stop, so the pending stop goes with it, and its
 * UpdateMetadata names the deleted partitions (leader -2).  A 3.4 broker has no stray detection
 * and ignores Type=FULL: without them it would keep the logs and the cached topic for good. */
Test(broker_chan, a_deletion_survives_an_overflow, .fini = fini, .timeout = 120)
{
    brig_opts o = { .brokers = 3, .topics = 3, .partitions = 4, .replication = 3, .max_queue = 4,
                    .request_timeout = 0.3, .kafka = KM_BSIM_KAFKA_IBP_3_4 };
    cr_assert(brig_init(&R, &o), "%s", R.why);
    cr_assert(brig_activate(&R), "%s", R.why);
    cr_assert(brig_run_until(&R, brig_converged, 30), "%s", R.why);
    km_bsim_mute(brig_sim(&R, 1), 1); /* holds broker 1's queue behind one unanswered request */
    size_t it = 0;
    km_image_next_topic(R.img, &it);
    const km_topic *doomed = km_image_next_topic(R.img, &it);
    km_remove_topic_record rm;
    km_remove_topic_record_init(&rm);
    rm.topic_id = km_topic_id(doomed);
    leader_changes(1);
    cr_assert(brig_append(&R, &km_remove_topic_record_desc, &rm), "%s", R.why);
    cr_assert(brig_pump(&R), "%s", R.why);
    leader_changes(20);
    km_bchan_stats s;
    km_bchan_get_stats(km_bprop_channel(R.prop, 1), &s);
    cr_assert_geq(s.overflows, 1, "the queue never overflowed");
    cr_assert(brig_run_until(&R, converged_without_strays, 30), "%s", R.why);
    km_bchan_get_stats(km_bprop_channel(R.prop, 1), &s);
    cr_assert_geq(s.full_syncs, 1);
    cr_assert_eq(km_bprop_pending_stops(R.prop, 1), 0);
}
