/* Broker channels under pressure: a bounded queue that overflows into a full sync, a broker that
 * accepts but never answers (request timeout), and TLS. */
#include "km_tls.h"
#include "test_broker_rig.h"
#include "test_tls_certs.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
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
        km_partition x;
        cr_assert(km_topic_partition(t, i % km_topic_partition_count(t), &x));
        km_partition_change_record rec;
        km_partition_change_record_init(&rec);
        rec.topic_id = km_topic_id(t);
        rec.partition_id = x.id;
        rec.leader = x.leader; /* a new leader epoch, same leader */
        cr_assert(brig_append(&R, &km_partition_change_record_desc, &rec), "%s", R.why);
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
    cr_assert(s.overflows >= 1 && s.full_syncs >= 2 && s.dropped > 0, "overflows %llu full syncs %llu",
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

static bool timed_out(brig *r)
{
    km_bchan_stats s;
    km_bchan_get_stats(km_bprop_channel(r->prop, 9), &s);
    return s.timeouts >= 2 && brig_converged(r);
}

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
