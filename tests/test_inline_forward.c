/* The inline proxy with real clients: librdkafka producers and a consumer group over librdkafka's
 * mock cluster (3 brokers), every byte through the proxy.  Every message must arrive, in order per
 * partition, and every broker address the clients ever learn (from Metadata and FindCoordinator)
 * must be one of the proxy's. */
#include "test_inline_rig.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define TOPIC "inline-t"
#define PARTITIONS 3

typedef struct addr_check {
    uint16_t allowed[8];
    int n_allowed;
    int bad;            /* broker names seen that are not proxy addresses */
    char bad_name[128];
    int seen;
    int delivery_errors;
} addr_check;

/* librdkafka's statistics list every broker the client knows, with its "nodename" HOST:PORT. */
static int stats_cb(rd_kafka_t *rk, char *json, size_t len, void *opaque)
{
    (void)rk, (void)len;
    addr_check *ac = opaque;
    for (const char *s = json; (s = strstr(s, "\"nodename\":\"")); s++) {
        const char *name = s + strlen("\"nodename\":\""), *colon = strchr(name, ':');
        unsigned port = colon ? (unsigned)atoi(colon + 1) : 0;
        bool ok = false;
        for (int i = 0; i < ac->n_allowed; i++)
            ok |= ac->allowed[i] == port;
        ac->seen++;
        if (!ok && ac->bad++ == 0)
            snprintf(ac->bad_name, sizeof ac->bad_name, "%.*s", (int)strcspn(name, "\""), name);
    }
    return 0;
}

static void allow_proxy_ports(addr_check *ac, irig *r)
{
    ac->allowed[ac->n_allowed++] = irig_port(r, -1);
    for (int id = 1; id <= 3; id++)
        ac->allowed[ac->n_allowed++] = (uint16_t)(r->cfg.port_base >= 0 ? r->cfg.port_base + id : irig_port(r, id));
}

static void dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk;
    addr_check *ac = opaque;
    if (m->err && ac->delivery_errors++ == 0)
        fprintf(stderr, "delivery failed: %s\n", rd_kafka_err2str(m->err));
}

static rd_kafka_t *client(rd_kafka_type_t type, const char *bootstrap, const char *const *extra, addr_check *ac)
{
    char errstr[256];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "bootstrap.servers", bootstrap, errstr, sizeof errstr);
    rd_kafka_conf_set(conf, "statistics.interval.ms", "200", errstr, sizeof errstr);
    rd_kafka_conf_set(conf, "log_level", "3", errstr, sizeof errstr);
    for (; extra && extra[0]; extra += 2)
        cr_assert_eq(rd_kafka_conf_set(conf, extra[0], extra[1], errstr, sizeof errstr), RD_KAFKA_CONF_OK, "%s",
                     errstr);
    rd_kafka_conf_set_stats_cb(conf, stats_cb);
    rd_kafka_conf_set_dr_msg_cb(conf, dr_cb);
    rd_kafka_conf_set_opaque(conf, ac);
    rd_kafka_t *rk = rd_kafka_new(type, conf, errstr, sizeof errstr);
    cr_assert(rk, "%s", errstr);
    return rk;
}

/* Produces n messages, message i to partition i % PARTITIONS with value "i". */
static void produce(const char *bootstrap, int n, const char *const *extra, addr_check *ac)
{
    rd_kafka_t *rk = client(RD_KAFKA_PRODUCER, bootstrap, extra, ac);
    char value[32];
    for (int i = 0; i < n; i++) {
        int len = snprintf(value, sizeof value, "%d", i);
        rd_kafka_resp_err_t err;
        while ((err = rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(TOPIC), RD_KAFKA_V_PARTITION(i % PARTITIONS),
                                        RD_KAFKA_V_VALUE(value, (size_t)len), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                        RD_KAFKA_V_END)) == RD_KAFKA_RESP_ERR__QUEUE_FULL)
            rd_kafka_poll(rk, 10);
        cr_assert_eq(err, 0, "produce %d: %s", i, rd_kafka_err2str(err));
        rd_kafka_poll(rk, 0);
    }
    cr_assert_eq(rd_kafka_flush(rk, 60000), 0, "flush did not finish");
    rd_kafka_poll(rk, 300); /* one more statistics round */
    rd_kafka_destroy(rk);
    cr_assert_eq(ac->delivery_errors, 0, "%d messages failed delivery", ac->delivery_errors);
}

static void consume_all(const char *bootstrap, int n, addr_check *ac)
{
    const char *extra[] = {"group.id", "inline-group", "auto.offset.reset", "earliest", NULL};
    rd_kafka_t *rk = client(RD_KAFKA_CONSUMER, bootstrap, extra, ac);
    rd_kafka_poll_set_consumer(rk);
    rd_kafka_topic_partition_list_t *topics = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(topics, TOPIC, RD_KAFKA_PARTITION_UA);
    cr_assert_eq(rd_kafka_subscribe(rk, topics), 0);
    rd_kafka_topic_partition_list_destroy(topics);
    int next[PARTITIONS] = {0, 1, 2}, got = 0;
    time_t deadline = time(NULL) + 120;
    while (got < n && time(NULL) < deadline) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 200);
        if (!m)
            continue;
        if (!m->err) {
            int v = atoi((const char *)m->payload), p = m->partition;
            cr_assert(p >= 0 && p < PARTITIONS);
            cr_assert_eq(v, next[p], "partition %d: got message %d, expected %d (order or loss)", p, v, next[p]);
            next[p] += PARTITIONS;
            got++;
        } else if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF) {
            fprintf(stderr, "consumer: %s\n", rd_kafka_message_errstr(m));
        }
        rd_kafka_message_destroy(m);
    }
    cr_assert_eq(got, n, "consumed %d of %d messages", got, n);
    for (int i = 0; i < 3; i++) { /* statistics after the group coordinator is known */
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 150);
        if (m)
            rd_kafka_message_destroy(m);
    }
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
}

static void round_trip(const char *const *producer_extra, int n, bool dynamic)
{
    irig r;
    irig_init(&r);
    irig_mock(&r, 3, TOPIC, PARTITIONS);
    if (dynamic) {
        irig_dynamic(&r);
    } else { /* static: one configured listener per broker, and a bootstrap */
        char key[64], addr[64];
        irig_mock_broker_address(&r, 2, addr, sizeof addr);
        irig_set(&r, "proxy.bootstrap.listen", "127.0.0.1:0");
        irig_set(&r, "proxy.bootstrap.upstream", addr);
        for (int id = 1; id <= 3; id++) {
            irig_mock_broker_address(&r, id, addr, sizeof addr);
            snprintf(key, sizeof key, "proxy.broker.%d.listen", id);
            irig_set(&r, key, "127.0.0.1:0");
            snprintf(key, sizeof key, "proxy.broker.%d.upstream", id);
            irig_set(&r, key, addr);
        }
    }
    irig_start(&r);
    char bootstrap[64];
    snprintf(bootstrap, sizeof bootstrap, "127.0.0.1:%u", irig_port(&r, -1));
    addr_check ac = {0};
    allow_proxy_ports(&ac, &r);
    produce(bootstrap, n, producer_extra, &ac);
    consume_all(bootstrap, n, &ac);
    km_inline_stats st;
    irig_stop(&r, &st);
    cr_expect_gt(ac.seen, 0, "no statistics seen");
    cr_expect_eq(ac.bad, 0, "%d broker addresses were not the proxy's, first %s", ac.bad, ac.bad_name);
    cr_expect_gt(st.rewritten, 0);
    cr_expect_eq(st.cut, 0, "the proxy cut %llu clients", (unsigned long long)st.cut);
    cr_expect_geq(st.listeners, 4);
    irig_free(&r);
}

TestSuite(inline_forward, .timeout = 240);

Test(inline_forward, acks_all_dynamic)
{
    const char *extra[] = {"acks", "all", NULL};
    round_trip(extra, 100000, true);
}

Test(inline_forward, acks_zero_dynamic)
{
    const char *extra[] = {"acks", "0", NULL};
    round_trip(extra, 100000, true);
}

Test(inline_forward, idempotent_static)
{
    const char *extra[] = {"enable.idempotence", "true", NULL};
    round_trip(extra, 100000, false);
}

Test(inline_forward, compressed_dynamic)
{
    const char *extra[] = {"compression.codec", "lz4", "linger.ms", "5", NULL};
    round_trip(extra, 100000, true);
}


/* ---- an upstream outage (issue 21) ------------------------------------------------------------- */

/* A relay in front of mock broker 1 that can go down (listener and connections closed: dials are
 * refused, as for a stopped broker) and come back on the same port. */
enum { RELAY_UP, RELAY_DOWN, RELAY_STOP };
typedef struct relay {
    uint16_t port, target_port;
    atomic_int state;
    pthread_t thread;
    int fds[32][2];
    int n;
} relay;

static int relay_listen(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (bind(fd, (struct sockaddr *)&a, sizeof a) || listen(fd, 16)) {
        close(fd);
        return -1;
    }
    return fd;
}

static void relay_drop(relay *rl, int i)
{
    close(rl->fds[i][0]), close(rl->fds[i][1]);
    rl->fds[i][0] = rl->fds[rl->n - 1][0], rl->fds[i][1] = rl->fds[rl->n - 1][1];
    rl->n--;
}

static void relay_accept(relay *rl, int lfd)
{
    int c = accept(lfd, NULL, NULL);
    if (c < 0)
        return;
    int t = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(rl->target_port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (rl->n == 32 || connect(t, (struct sockaddr *)&a, sizeof a)) {
        close(c), close(t);
        return;
    }
    rl->fds[rl->n][0] = c, rl->fds[rl->n][1] = t;
    rl->n++;
}

/* One poll round over the listener and every pair; bytes are copied blocking (the traffic is small). */
static void relay_round(relay *rl, int lfd)
{
    struct pollfd pf[65] = {{.fd = lfd, .events = POLLIN}};
    for (int i = 0; i < rl->n; i++)
        pf[1 + 2 * i] = (struct pollfd){.fd = rl->fds[i][0], .events = POLLIN},
                   pf[2 + 2 * i] = (struct pollfd){.fd = rl->fds[i][1], .events = POLLIN};
    int n = rl->n;
    if (poll(pf, (nfds_t)(1 + 2 * n), 20) <= 0)
        return;
    for (int i = n - 1; i >= 0; i--)
        for (int side = 0; side < 2; side++) {
            if (!(pf[1 + 2 * i + side].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            char buf[65536];
            ssize_t k = read(rl->fds[i][side], buf, sizeof buf);
            if (k <= 0 || !irig_send_all(rl->fds[i][!side], buf, (size_t)k)) {
                relay_drop(rl, i);
                break;
            }
        }
    if (pf[0].revents & POLLIN)
        relay_accept(rl, lfd);
}

static void *relay_main(void *arg)
{
    relay *rl = arg;
    int lfd = -1;
    while (atomic_load(&rl->state) != RELAY_STOP) {
        if (atomic_load(&rl->state) == RELAY_DOWN) {
            while (rl->n)
                relay_drop(rl, 0);
            if (lfd >= 0)
                close(lfd), lfd = -1;
            usleep(10000);
            continue;
        }
        if (lfd < 0 && (lfd = relay_listen(rl->port)) < 0) {
            usleep(10000);
            continue;
        }
        relay_round(rl, lfd);
    }
    while (rl->n)
        relay_drop(rl, 0);
    if (lfd >= 0)
        close(lfd);
    return NULL;
}

Test(inline_forward, a_producer_rides_out_an_upstream_outage)
{
    irig r;
    irig_init(&r);
    irig_mock(&r, 1, TOPIC, 1);
    char mock1[64], addr[64];
    irig_mock_broker_address(&r, 1, mock1, sizeof mock1);
    relay rl = {.target_port = (uint16_t)atoi(strrchr(mock1, ':') + 1)};
    int probe = irig_listen(&rl.port);
    close(probe);
    atomic_init(&rl.state, RELAY_UP);
    cr_assert_eq(pthread_create(&rl.thread, NULL, relay_main, &rl), 0);
    snprintf(addr, sizeof addr, "127.0.0.1:%u", rl.port); /* static routes: the relay is the broker */
    irig_set(&r, "proxy.bootstrap.listen", "127.0.0.1:0");
    irig_set(&r, "proxy.bootstrap.upstream", addr);
    irig_set(&r, "proxy.broker.1.listen", "127.0.0.1:0");
    irig_set(&r, "proxy.broker.1.upstream", addr);
    irig_set(&r, "proxy.upstream.hold.ms", "20000");
    irig_start(&r);
    char bootstrap[64];
    snprintf(bootstrap, sizeof bootstrap, "127.0.0.1:%u", irig_port(&r, -1));
    addr_check ac = {0};
    allow_proxy_ports(&ac, &r);
    const char *extra[] = {"message.timeout.ms", "60000", "acks", "all", NULL};
    rd_kafka_t *p = client(RD_KAFKA_PRODUCER, bootstrap, extra, &ac);
    for (int i = 0; i < 200; i++) {
        if (i == 100) { /* half before the outage, half during it */
            cr_assert_eq(rd_kafka_flush(p, 30000), 0, "the first half was not delivered");
            atomic_store(&rl.state, RELAY_DOWN);
            usleep(300 * 1000);
        }
        char v[16];
        snprintf(v, sizeof v, "m%d", i);
        cr_assert_eq(rd_kafka_producev(p, RD_KAFKA_V_TOPIC(TOPIC), RD_KAFKA_V_VALUE(v, strlen(v)),
                                      RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END), 0);
        rd_kafka_poll(p, 0);
    }
    usleep(1500 * 1000);
    atomic_store(&rl.state, RELAY_UP);
    cr_assert_eq(rd_kafka_flush(p, 30000), 0, "messages produced during the outage were not delivered");
    cr_expect_eq(ac.delivery_errors, 0);
    cr_expect_eq(ac.bad, 0, "the client learned a non-proxy address: %s", ac.bad_name);
    rd_kafka_destroy(p);
    atomic_store(&rl.state, RELAY_STOP);
    pthread_join(rl.thread, NULL);
    km_inline_stats st;
    irig_stop(&r, &st);
    cr_expect_geq(st.upstream_failures, 1, "the outage never reached the proxy");
    cr_expect_eq(st.cut, 0, "a client was dropped for the outage");
    irig_free(&r);
}

/* ---- two instances with one config (issue 21 part 4) ---------------------------------------------- */

/* True once host:port accepts a connection (bounded wait). */
static bool accepts_within(const char *host, uint16_t port, int seconds)
{
    for (int i = 0; i < seconds * 20; i++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
        inet_pton(AF_INET, host, &a.sin_addr);
        bool ok = connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
        close(fd);
        if (ok)
            return true;
        usleep(50 * 1000);
    }
    return false;
}

/* The map as a client bootstrapping from bootstrap sees it: "id@host:port ..." sorted by id. */
static void broker_map(const char *bootstrap, char *out, size_t cap)
{
    rd_kafka_t *rk = irig_producer(bootstrap, NULL);
    const struct rd_kafka_metadata *md = NULL;
    cr_assert_eq(rd_kafka_metadata(rk, 1, NULL, &md, 10000), 0, "metadata through %s failed", bootstrap);
    out[0] = '\0';
    for (int32_t id = 0; id <= 8; id++)
        for (int i = 0; i < md->broker_cnt; i++)
            if (md->brokers[i].id == id)
                snprintf(out + strlen(out), cap - strlen(out), "%d@%s:%d ", id, md->brokers[i].host,
                         md->brokers[i].port);
    rd_kafka_metadata_destroy(md);
    rd_kafka_destroy(rk);
}

/* Instances A and B share a config (behind a load balancer they would share advertised.host); here B
 * differs only in where it binds (127.0.0.2), and the advertised host leads to A.  A client that
 * bootstraps from B is sent to A's broker listeners, which exist before any client talked to A
 * because A asked the cluster for its brokers itself (proxy.discovery.interval.ms). */
Test(inline_forward, two_instances_with_one_config_give_one_broker_map)
{
    irig a, b;
    irig_init(&a);
    irig_mock(&a, 3, TOPIC, PARTITIONS);
    irig_dynamic(&a);
    irig_set(&a, "proxy.discovery.interval.ms", "30000");
    char base[16], first[64];
    snprintf(base, sizeof base, "%d", a.cfg.port_base);
    irig_mock_broker_address(&a, 1, first, sizeof first);
    irig_init(&b);
    irig_set(&b, "proxy.bootstrap.listen", "127.0.0.2:0");
    irig_set(&b, "proxy.bootstrap.upstream", first);
    irig_set(&b, "proxy.listen.host", "127.0.0.2");
    irig_set(&b, "proxy.advertised.host", "127.0.0.1");
    irig_set(&b, "proxy.port.base", base);
    irig_set(&b, "proxy.discovery.interval.ms", "30000");
    irig_start(&a);
    irig_start(&b);
    for (int id = 1; id <= 3; id++) {
        cr_assert(accepts_within("127.0.0.1", (uint16_t)(a.cfg.port_base + id), 10),
                  "instance A has no listener for broker %d before any client used it", id);
        cr_assert(accepts_within("127.0.0.2", (uint16_t)(a.cfg.port_base + id), 10),
                  "instance B has no listener for broker %d", id);
    }
    char via_a[256], via_b[256], boot_a[64], boot_b[64];
    snprintf(boot_a, sizeof boot_a, "127.0.0.1:%u", irig_port(&a, -1));
    snprintf(boot_b, sizeof boot_b, "127.0.0.2:%u", irig_port(&b, -1));
    broker_map(boot_b, via_b, sizeof via_b);
    broker_map(boot_a, via_a, sizeof via_a);
    cr_expect_str_eq(via_a, via_b, "the two instances give different broker maps");
    char want[256];
    snprintf(want, sizeof want, "1@127.0.0.1:%d 2@127.0.0.1:%d 3@127.0.0.1:%d ", a.cfg.port_base + 1,
             a.cfg.port_base + 2, a.cfg.port_base + 3);
    cr_expect_str_eq(via_b, want);
    addr_check ac = {0};
    allow_proxy_ports(&ac, &a);
    ac.allowed[ac.n_allowed++] = irig_port(&b, -1);
    produce(boot_b, 300, NULL, &ac); /* bootstrapped from B, served by A's broker listeners */
    consume_all(boot_a, 300, &ac);
    cr_expect_eq(ac.bad, 0, "%d broker addresses were not the proxy's, first %s", ac.bad, ac.bad_name);
    irig_free(&b);
    irig_free(&a);
}

/* ---- a Fetch the broker holds (issue 21) ------------------------------------------------------ */

/* librdkafka's mock holds a Fetch that finds no data for its MaxWaitMs, as a broker's DelayedFetch
 * does.  With fetch.wait.max.ms past proxy.request.timeout.ms, the consumer's empty Fetches must not
 * be cut, and what is produced later still arrives. */
Test(inline_forward, fetches_held_past_the_proxy_timeout_within_max_wait_pass)
{
    irig r;
    irig_init(&r);
    irig_mock(&r, 1, TOPIC, 1);
    irig_dynamic(&r);
    irig_set(&r, "proxy.request.timeout.ms", "300");
    irig_start(&r);
    char bootstrap[64];
    snprintf(bootstrap, sizeof bootstrap, "127.0.0.1:%u", irig_port(&r, -1));
    addr_check ac = {0};
    allow_proxy_ports(&ac, &r);
    const char *extra[] = {"group.id", "held-fetch", "fetch.wait.max.ms", "1200", "enable.partition.eof", "false",
                           NULL};
    rd_kafka_t *c = client(RD_KAFKA_CONSUMER, bootstrap, extra, &ac);
    rd_kafka_topic_partition_list_t *parts = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(parts, TOPIC, 0)->offset = RD_KAFKA_OFFSET_BEGINNING;
    cr_assert_eq(rd_kafka_assign(c, parts), 0);
    rd_kafka_topic_partition_list_destroy(parts);
    for (int i = 0; i < 20; i++) { /* about three empty Fetches, each held 1.2 s */
        rd_kafka_message_t *m = rd_kafka_consumer_poll(c, 200);
        if (m)
            rd_kafka_message_destroy(m);
    }
    rd_kafka_t *p = client(RD_KAFKA_PRODUCER, bootstrap, NULL, &ac);
    cr_assert_eq(rd_kafka_producev(p, RD_KAFKA_V_TOPIC(TOPIC), RD_KAFKA_V_VALUE("late", 4),
                                   RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END), 0);
    cr_assert_eq(rd_kafka_flush(p, 10000), 0);
    rd_kafka_destroy(p);
    bool got = false;
    for (int i = 0; i < 100 && !got; i++) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(c, 200);
        got = m && !m->err && m->len == 4 && !memcmp(m->payload, "late", 4);
        if (m)
            rd_kafka_message_destroy(m);
    }
    cr_expect(got, "the message produced after the held Fetches did not arrive");
    rd_kafka_consumer_close(c);
    rd_kafka_destroy(c);
    km_inline_stats st;
    irig_stop(&r, &st);
    cr_expect_eq(st.cut, 0, "the proxy cut %llu clients (last: %s)", (unsigned long long)st.cut, r.last_log);
    irig_free(&r);
}
