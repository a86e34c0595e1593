/* Migration-aware inspection: controller RPCs passing inline (from a test "controller" to a
 * scripted broker) are compared with a KRaft image (`metadata gen`); divergent partition states
 * are counted per API and logged once per partition, and every RPC passes unchanged. */
#include "km_image.h"
#include "km_testsupport.h"
#include "test_inline_rig.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct gen_image {
    char *dir;
    km_image *img;
    const char *topic;
    km_partition p0, p1;
} gen_image;

static void gen(gen_image *g)
{
    char logdir[600];
    g->dir = km_test_tmpdir("inline-inspect");
    snprintf(logdir, sizeof logdir, "%s/__cluster_metadata-0", g->dir);
    g->img = km_image_new();
    km_gen_opts o = {.brokers = 3, .topics = 1, .partitions = 2, .zk_migration = true, .seed = 11,
                     .leader_changes = 5};
    km_err e = {{0}};
    cr_assert_geq(km_gen_write(logdir, &o, g->img, &e), 0, "%s", e.msg);
    size_t it = 0;
    const km_topic *t = km_image_next_topic(g->img, &it);
    cr_assert(t);
    g->topic = km_topic_name(t);
    cr_assert(km_topic_partition(t, 0, &g->p0) && km_topic_partition(t, 1, &g->p1));
}

static void send_and_pass(int fd, int up, int16_t api, int16_t ver, int32_t corr, const void *body)
{
    size_t len, got_len;
    uint8_t *f = irig_request(api, ver, corr, body, &len), *got;
    cr_assert(irig_send_all(fd, f, len));
    cr_assert(irig_read_frame(up, &got, &got_len), "the RPC did not reach the broker");
    cr_assert(got_len == len - 4 && !memcmp(got, f + 4, got_len), "the RPC was changed on the way");
    free(f), free(got);
}

static km_leader_and_isr_request_partition_state lisr_state(const km_partition *p, int32_t epoch_delta)
{
    km_leader_and_isr_request_partition_state s;
    memset(&s, 0, sizeof s);
    s.partition_index = p->id, s.controller_epoch = 5, s.leader = p->leader;
    s.leader_epoch = p->leader_epoch + epoch_delta, s.partition_epoch = p->partition_epoch;
    s.isr.count = p->isr.n, s.isr.items = (int32_t *)p->isr.v;
    s.replicas.count = p->replicas.n, s.replicas.items = (int32_t *)p->replicas.v;
    return s;
}

Test(inline_inspect, divergent_controller_rpcs_are_counted_and_logged_once, .timeout = 60)
{
    gen_image g;
    gen(&g);
    uint16_t port;
    char addr[64];
    int lfd = irig_listen(&port);
    snprintf(addr, sizeof addr, "127.0.0.1:%u", port);
    irig r;
    irig_init(&r);
    irig_set(&r, "proxy.broker.1.listen", "127.0.0.1:0");
    irig_set(&r, "proxy.broker.1.upstream", addr);
    irig_start(&r);
    irig_stop(&r, NULL);
    km_inline_follow_image(r.proxy, g.img);
    km_inline_set_controller_epoch(r.proxy, 3);
    irig_resume(&r);
    int fd = irig_connect(irig_port(&r, 1)), up = irig_accept(lfd);

    /* LeaderAndIsr v5: partition 0 a leader epoch behind the image, partition 1 as the image has it. */
    km_leader_and_isr_request_partition_state states[2] = {lisr_state(&g.p0, -1), lisr_state(&g.p1, 0)};
    km_leader_and_isr_request_topic_state ts;
    memset(&ts, 0, sizeof ts);
    ts.topic_name = km_cstr(g.topic), ts.partition_states.count = 2, ts.partition_states.items = states;
    km_leader_and_isr_request lisr;
    km_leader_and_isr_request_init(&lisr);
    lisr.controller_id = 1, lisr.controller_epoch = 5, lisr.topic_states.count = 1, lisr.topic_states.items = &ts;
    send_and_pass(fd, up, KM_API_LEADER_AND_ISR, 5, 1, &lisr);
    send_and_pass(fd, up, KM_API_LEADER_AND_ISR, 5, 2, &lisr); /* the same again: counted, not logged again */

    /* UpdateMetadata v7: partition 1 with another leader at the image's leader epoch. */
    km_update_metadata_request_partition_state us;
    memset(&us, 0, sizeof us);
    us.partition_index = 1, us.controller_epoch = 5, us.leader = g.p1.leader == 1 ? 2 : 1;
    us.leader_epoch = g.p1.leader_epoch, us.isr.count = g.p1.isr.n, us.isr.items = (int32_t *)g.p1.isr.v;
    us.replicas.count = us.isr.count, us.replicas.items = us.isr.items;
    km_update_metadata_request_topic_state uts;
    memset(&uts, 0, sizeof uts);
    uts.topic_name = km_cstr(g.topic), uts.partition_states.count = 1, uts.partition_states.items = &us;
    km_update_metadata_request um;
    km_update_metadata_request_init(&um);
    um.controller_epoch = 5, um.topic_states.count = 1, um.topic_states.items = &uts;
    send_and_pass(fd, up, KM_API_UPDATE_METADATA, 7, 3, &um);

    /* StopReplica v3 from a controller with a stale epoch. */
    km_stop_replica_request_partition_state ss = {.partition_index = 0, .leader_epoch = g.p0.leader_epoch};
    km_stop_replica_request_topic_state sts;
    memset(&sts, 0, sizeof sts);
    sts.topic_name = km_cstr(g.topic), sts.partition_states.count = 1, sts.partition_states.items = &ss;
    km_stop_replica_request sr;
    km_stop_replica_request_init(&sr);
    sr.controller_epoch = 2, sr.topic_states.count = 1, sr.topic_states.items = &sts;
    send_and_pass(fd, up, KM_API_STOP_REPLICA, 3, 4, &sr);

    close(fd), close(up), close(lfd);
    km_inline_stats st;
    irig_stop(&r, &st);
    cr_expect_eq(st.divergent, 4, "divergent: %llu", (unsigned long long)st.divergent);
    cr_expect_eq(r.log_lines, 3, "logged %d lines, last: %s", r.log_lines, r.last_log);
    cr_expect(strstr(r.last_log, "STOP_REPLICA") && strstr(r.last_log, "controllerEpoch 2 is stale"), "%s",
              r.last_log);
    km_buf m;
    km_buf_init(&m);
    km_inline_render_metrics(r.proxy, &m);
    km_buf_put(&m, "", 1);
    cr_expect(strstr((char *)m.data, "kmproxy_inline_controller_rpc_divergent_total{api=\"LEADER_AND_ISR\"} 2"), "%s",
              (char *)m.data);
    cr_expect(strstr((char *)m.data, "kmproxy_inline_controller_rpc_divergent_total{api=\"UPDATE_METADATA\"} 1"));
    km_buf_free(&m);
    irig_free(&r);
    km_image_free(g.img);
    km_test_rmtree(g.dir);
    free(g.dir);
}
