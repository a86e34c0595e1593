/* The daemon runs the inline proxy from its own properties: brokers registered in the KRaft log
 * it follows get their listeners (port.base + id) before any client asked for Metadata. */
#include "km_daemon.h"
#include "km_image.h"
#include "km_testsupport.h"
#include "test_inline_rig.h"
#include "zkserver.h"

#include <criterion/criterion.h>
#include <ev.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

typedef struct daemon_thread {
    struct ev_loop *loop;
    ev_async stop;
    pthread_t thread;
} daemon_thread;

static void on_stop(struct ev_loop *loop, ev_async *w, int revents)
{
    (void)w, (void)revents;
    ev_break(loop, EVBREAK_ALL);
}

static void *run(void *arg)
{
    ev_run(((daemon_thread *)arg)->loop, 0);
    return NULL;
}

static void set(km_config *cfg, const char *key, const char *value)
{
    km_err e = {{0}};
    cr_assert_eq(km_config_set(cfg, key, value, "test", &e), 0, "%s: %s", key, e.msg);
}

Test(inline_daemon, registered_brokers_get_listeners_from_the_log, .timeout = 120)
{
    char err[512];
    km_zks *zks = km_zks_start(1, NULL, 0, err, sizeof err);
    cr_assert(zks, "ZooKeeper: %s", err);
    uint16_t ports[2];
    int l1 = irig_listen(&ports[0]), l2 = irig_listen(&ports[1]);
    char *tmp = km_test_tmpdir("inline-daemon"), logdir[600], hosts[128], up[64], base[16];
    snprintf(logdir, sizeof logdir, "%s/__cluster_metadata-0", tmp);
    snprintf(hosts, sizeof hosts, "%s/kafka", km_zks_hosts(zks, -1));
    km_gen_opts g = {.brokers = 2, .topics = 1, .partitions = 1, .zk_migration = true, .seed = 3,
                     .broker_host = "127.0.0.1", .broker_ports = ports, .leader_changes = 3};
    km_err e = {{0}};
    km_image *img = km_image_new();
    cr_assert_geq(km_gen_write(logdir, &g, img, &e), 0, "%s", e.msg);
    size_t it = 0;
    const km_topic *topic = km_image_next_topic(img, &it);
    km_partition part;
    cr_assert(topic && km_topic_partition(topic, 0, &part));
    int port_base = km_test_free_port_base(4);
    snprintf(up, sizeof up, "127.0.0.1:%u", ports[0]);
    snprintf(base, sizeof base, "%d", port_base);
    km_config cfg;
    km_config_defaults(&cfg);
    set(&cfg, "metadata.source", "dir");
    set(&cfg, "metadata.dir", logdir);
    set(&cfg, "zookeeper.connect", hosts);
    set(&cfg, "brokers.enabled", "false");
    set(&cfg, "proxy.bootstrap.listen", "127.0.0.1:0");
    set(&cfg, "proxy.bootstrap.upstream", up);
    set(&cfg, "proxy.listen.host", "127.0.0.1");
    set(&cfg, "proxy.advertised.host", "127.0.0.1");
    set(&cfg, "proxy.port.base", base);
    set(&cfg, "metrics.listen", "127.0.0.1:0");
    char threads[32];
    if (km_test_proxy_threads(threads, sizeof threads))
        set(&cfg, "proxy.threads", threads + strlen("proxy.threads="));
    daemon_thread t = {.loop = ev_loop_new(0)};
    km_daemon *d = km_daemon_new(t.loop, &cfg, &e);
    km_config_free(&cfg);
    cr_assert(d, "%s", e.msg);
    km_daemon_start(d); /* reads the log: the registrations open broker 2's listener */
    ev_async_init(&t.stop, on_stop);
    ev_async_start(t.loop, &t.stop);
    cr_assert_eq(pthread_create(&t.thread, NULL, run, &t), 0);
    int c2 = irig_connect((uint16_t)(port_base + 2)), u2 = irig_accept(l2);
    km_api_versions_request av;
    km_api_versions_request_init(&av);
    size_t len;
    uint8_t *f = irig_request(KM_API_API_VERSIONS, 0, 5, &av, &len), *p;
    cr_assert(irig_send_all(c2, f, len));
    cr_assert(irig_read_frame(u2, &p, &len), "the request did not reach broker 2");
    cr_expect_eq(p[7], 5);
    free(f), free(p);
    /* A LeaderAndIsr a leader epoch behind the log, passing inline: the daemon's image says so. */
    km_leader_and_isr_request_partition_state ps;
    memset(&ps, 0, sizeof ps);
    ps.partition_index = 0, ps.leader = part.leader, ps.leader_epoch = part.leader_epoch - 1;
    km_leader_and_isr_request_topic_state ts;
    memset(&ts, 0, sizeof ts);
    ts.topic_name = km_cstr(km_topic_name(topic)), ts.partition_states.count = 1, ts.partition_states.items = &ps;
    km_leader_and_isr_request lisr;
    km_leader_and_isr_request_init(&lisr);
    lisr.topic_states.count = 1, lisr.topic_states.items = &ts;
    f = irig_request(KM_API_LEADER_AND_ISR, 5, 6, &lisr, &len);
    cr_assert(irig_send_all(c2, f, len));
    cr_assert(irig_read_frame(u2, &p, &len), "the LeaderAndIsr did not reach broker 2");
    free(f), free(p);
    int mfd = irig_connect(km_daemon_metrics_port(d));
    const char *get = "GET /metrics HTTP/1.0\r\n\r\n";
    cr_assert(irig_send_all(mfd, get, strlen(get)));
    char *text = calloc(1, 1 << 20);
    for (size_t n = 0, k; (k = (size_t)recv(mfd, text + n, (1 << 20) - 1 - n, 0)) > 0 && k != (size_t)-1;)
        n += k;
    cr_expect(strstr(text, "kmproxy_inline_controller_rpc_divergent_total{api=\"LEADER_AND_ISR\"} 1"),
              "the daemon's image was not consulted");
    cr_expect(strstr(text, "kmproxy_inline_requests_total{broker=\"2\",api=\"LEADER_AND_ISR\"} 1"));
    free(text);
    close(mfd);
    close(c2), close(u2);
    ev_async_send(t.loop, &t.stop);
    pthread_join(t.thread, NULL);
    km_daemon_free(d);
    ev_loop_destroy(t.loop);
    close(l1), close(l2);
    km_image_free(img);
    km_zks_stop(zks);
    km_test_rmtree(tmp);
    free(tmp);
}
