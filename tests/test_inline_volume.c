/* Volume through the inline proxy with two worker threads (issue 21, "Done means"): rounds of
 * 100,000 messages produced by an idempotent librdkafka producer and read back by a consumer in a
 * new group, every byte through the proxy (dynamic mode over librdkafka's mock cluster, so every
 * broker is proxied).  Each round must lose nothing, duplicate nothing and keep the producer's
 * order within each partition (so also the order of each key's messages, a key staying on one
 * partition).
 *
 * Each round writes a topic of its own, so that its consumer reads exactly that round's messages
 * from the earliest offset instead of every earlier round's again.  Most of a round's time is the
 * mock's fixed 3 s wait for more members when a group is first joined (rd_kafka_mock_cgrp_rebalance,
 * like a broker's group.initial.rebalance.delay.ms).
 *
 * The producer is idempotent (ordered retries), but librdkafka's mock checks producer ids and
 * sequence numbers only for transactional producers (rd_kafka_mock_validate_records returns early
 * without a TransactionalId), so a batch sent twice would be stored twice.  Duplicates are
 * therefore looked for three ways: the partition logs must hold exactly the messages delivered
 * (high watermarks, read through the proxy), the delivery reports must name each offset once, and
 * the consumer must see each sequence number once, at the partition and offset its delivery report
 * gave. */
#include "km_testsupport.h"
#include "test_inline_rig.h"

#include <criterion/criterion.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef KM_TEST_UNDER_ASAN
#define ROUNDS 3 /* ~4 s a round (the mock's 3 s first-join delay): fewer keep the sanitized CI lean */
#else
#define ROUNDS 10
#endif
#define MESSAGES 100000
#define BROKERS 3
#define PARTITIONS 6
#define KEYS 64
#define VALUE_BYTES 100 /* "round:seq:" and a filler that follows from seq, so corruption shows */
#define WAIT_S 120 /* bound on each round's flush and on its consumer */

/* What one round's producer learnt and its consumer saw. */
typedef struct vround {
    int round;
    char topic[32];
    int32_t partition[MESSAGES]; /* from the delivery report, -1 before it */
    int64_t offset[MESSAGES];
    unsigned char seen[MESSAGES]; /* by the consumer */
    int delivered, delivery_errors, reported_twice;
    char first_error[256];
    int consumed, duplicates, reordered, misplaced, foreign;
    char first_fault[256];
} vround;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk;
    vround *v = opaque;
    intptr_t seq = (intptr_t)m->_private;
    if (m->err) {
        if (v->delivery_errors++ == 0)
            snprintf(v->first_error, sizeof v->first_error, "message %ld: %s", (long)seq, rd_kafka_err2str(m->err));
        return;
    }
    if (v->partition[seq] >= 0) {
        v->reported_twice++;
        return;
    }
    v->partition[seq] = m->partition;
    v->offset[seq] = m->offset;
    v->delivered++;
}

static rd_kafka_t *volume_producer(const char *bootstrap, vround *v)
{
    char errstr[256];
    const char *settings[] = {
        "bootstrap.servers", bootstrap, "log_level", "3",
        "enable.idempotence", "true", /* acks=all and retries that keep the order */
        "linger.ms", "5", "batch.num.messages", "10000",
        "queue.buffering.max.messages", "200000", NULL};
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    for (const char **s = settings; s[0]; s += 2)
        cr_assert_eq(rd_kafka_conf_set(conf, s[0], s[1], errstr, sizeof errstr), RD_KAFKA_CONF_OK, "%s", errstr);
    rd_kafka_conf_set_dr_msg_cb(conf, dr_cb);
    rd_kafka_conf_set_opaque(conf, v);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof errstr);
    cr_assert(rk, "producer: %s", errstr);
    return rk;
}

/* Message seq's value: "round:seq:" then letters that follow from seq, VALUE_BYTES in all. */
static void make_value(char *value, int round, int seq)
{
    int n = snprintf(value, VALUE_BYTES + 1, "%d:%d:", round, seq);
    for (int i = n; i < VALUE_BYTES; i++)
        value[i] = (char)('a' + (seq + i) % 26);
}

/* Message seq of a round: key "k<seq % KEYS>" (the partitioner spreads the keys). */
static void produce_one(rd_kafka_t *rk, vround *v, int seq)
{
    char key[16], value[VALUE_BYTES + 1];
    int klen = snprintf(key, sizeof key, "k%d", seq % KEYS);
    size_t vlen = VALUE_BYTES;
    make_value(value, v->round, seq);
    rd_kafka_resp_err_t err;
    while ((err = rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(v->topic), RD_KAFKA_V_KEY(key, (size_t)klen),
                                    RD_KAFKA_V_VALUE(value, vlen), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                    RD_KAFKA_V_OPAQUE((void *)(intptr_t)seq), RD_KAFKA_V_END)) ==
           RD_KAFKA_RESP_ERR__QUEUE_FULL)
        rd_kafka_poll(rk, 10);
    cr_assert_eq(err, 0, "round %d: produce %d: %s", v->round, seq, rd_kafka_err2str(err));
}

/* The logs hold exactly what was delivered: per partition, the reports name offsets 0..n-1 once
 * each and the high watermark is n. */
static void check_logs(rd_kafka_t *rk, const vround *v)
{
    unsigned char (*taken)[MESSAGES] = calloc(PARTITIONS, MESSAGES);
    int per[PARTITIONS] = {0};
    cr_assert(taken);
    for (int seq = 0; seq < MESSAGES; seq++) {
        int32_t p = v->partition[seq];
        int64_t o = v->offset[seq];
        cr_assert(p >= 0 && p < PARTITIONS && o >= 0 && o < MESSAGES, "round %d: message %d reported at %d/%lld",
                  v->round, seq, p, (long long)o);
        cr_assert_eq(taken[p][o]++, 0, "round %d: partition %d offset %lld reported for two messages", v->round, p,
                     (long long)o);
        per[p]++;
    }
    free(taken);
    for (int32_t p = 0; p < PARTITIONS; p++) {
        int64_t lo = -1, hi = -1;
        rd_kafka_resp_err_t err = rd_kafka_query_watermark_offsets(rk, v->topic, p, &lo, &hi, 10000);
        cr_assert_eq(err, 0, "round %d: watermarks of partition %d: %s", v->round, p, rd_kafka_err2str(err));
        cr_assert_eq(lo, 0, "round %d: partition %d starts at %lld", v->round, p, (long long)lo);
        cr_assert_eq(hi, per[p], "round %d: partition %d holds %lld messages, %d were delivered to it (duplicates)",
                     v->round, p, (long long)hi, per[p]);
    }
}

static void produce_round(const char *bootstrap, vround *v)
{
    rd_kafka_t *rk = volume_producer(bootstrap, v);
    for (int seq = 0; seq < MESSAGES; seq++) {
        produce_one(rk, v, seq);
        rd_kafka_poll(rk, 0);
    }
    rd_kafka_resp_err_t err = rd_kafka_flush(rk, WAIT_S * 1000);
    char fatal[256] = "";
    rd_kafka_fatal_error(rk, fatal, sizeof fatal);
    cr_assert_eq(err, 0, "round %d: flush: %s; %d delivered, %d failed", v->round, rd_kafka_err2str(err), v->delivered,
                 v->delivery_errors);
    cr_assert_eq(v->delivery_errors, 0, "round %d: %d messages failed delivery, first %s", v->round, v->delivery_errors,
                 v->first_error);
    cr_assert_str_empty(fatal, "round %d: the idempotent producer failed: %s", v->round, fatal);
    cr_assert_eq(v->reported_twice, 0, "round %d: %d messages reported delivered twice", v->round, v->reported_twice);
    cr_assert_eq(v->delivered, MESSAGES, "round %d: %d of %d delivered", v->round, v->delivered, MESSAGES);
    check_logs(rk, v);
    rd_kafka_destroy(rk);
}

/* Counts a fault; true for the round's first, which the caller then describes. */
static bool first_fault(vround *v, int *count)
{
    return (*count)++ == 0 && !v->first_fault[0];
}

/* One consumed message against what the producer was told.  last[p]: the sequence number last
 * seen on partition p; the producer sent them in increasing order, so they must arrive so. */
static void check_message(vround *v, const rd_kafka_message_t *m, int *last)
{
    int round = -1, seq = -1;
    char value[VALUE_BYTES + 1], want[VALUE_BYTES + 1] = "", key[16];
    snprintf(value, sizeof value, "%.*s", (int)(m->len < VALUE_BYTES ? m->len : VALUE_BYTES),
             m->payload ? (const char *)m->payload : "");
    snprintf(key, sizeof key, "%.*s", (int)(m->key_len < 15 ? m->key_len : 15), m->key ? (const char *)m->key : "");
    int32_t p = m->partition;
    if (sscanf(value, "%d:%d:", &round, &seq) == 2 && seq >= 0)
        make_value(want, round, seq);
    if (m->len != VALUE_BYTES || round != v->round || seq < 0 || seq >= MESSAGES ||
        memcmp(m->payload, want, VALUE_BYTES) || p < 0 || p >= PARTITIONS || key[0] != 'k' ||
        atoi(key + 1) != seq % KEYS) {
        if (first_fault(v, &v->foreign))
            snprintf(v->first_fault, sizeof v->first_fault, "'%.40s...' (%zu bytes, key '%s') at %d/%lld is not one "
                     "this round sent", value, m->len, key, p, (long long)m->offset);
        return;
    }
    if (v->seen[seq]) {
        if (first_fault(v, &v->duplicates))
            snprintf(v->first_fault, sizeof v->first_fault, "message %d again at %d/%lld", seq, p,
                     (long long)m->offset);
        return;
    }
    v->seen[seq] = 1;
    v->consumed++;
    if ((p != v->partition[seq] || m->offset != v->offset[seq]) && first_fault(v, &v->misplaced))
        snprintf(v->first_fault, sizeof v->first_fault, "message %d read at %d/%lld, delivered to %d/%lld", seq, p,
                 (long long)m->offset, v->partition[seq], (long long)v->offset[seq]);
    if (seq < last[p] && first_fault(v, &v->reordered))
        snprintf(v->first_fault, sizeof v->first_fault, "message %d at %d/%lld came after message %d", seq, p,
                 (long long)m->offset, last[p]);
    last[p] = seq > last[p] ? seq : last[p];
}

static void consume_round(const char *bootstrap, vround *v)
{
    char group[32];
    snprintf(group, sizeof group, "volume-g%d", v->round);
    const char *extra[] = {"fetch.wait.max.ms", "100", NULL}; /* irig_consumer: auto.offset.reset=earliest */
    rd_kafka_t *rk = irig_consumer(bootstrap, group, extra);
    rd_kafka_topic_partition_list_t *topics = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(topics, v->topic, RD_KAFKA_PARTITION_UA);
    cr_assert_eq(rd_kafka_subscribe(rk, topics), 0);
    rd_kafka_topic_partition_list_destroy(topics);
    int last[PARTITIONS];
    for (int p = 0; p < PARTITIONS; p++)
        last[p] = -1;
    double deadline = now_s() + WAIT_S;
    while (v->consumed < MESSAGES && now_s() < deadline) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 200);
        if (!m)
            continue;
        if (!m->err)
            check_message(v, m, last);
        else if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
            fprintf(stderr, "round %d: consumer: %s\n", v->round, rd_kafka_message_errstr(m));
        rd_kafka_message_destroy(m);
    }
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
}

/* Every message missing from the consumer, by partition, with the first one's place. */
static void report_lost(const vround *v)
{
    int lost[PARTITIONS] = {0}, first = -1;
    for (int seq = 0; seq < MESSAGES; seq++)
        if (!v->seen[seq]) {
            lost[v->partition[seq]]++;
            first = first < 0 ? seq : first;
        }
    for (int p = 0; p < PARTITIONS; p++)
        if (lost[p])
            fprintf(stderr, "round %d: partition %d: %d messages never consumed\n", v->round, p, lost[p]);
    if (first >= 0)
        fprintf(stderr, "round %d: first lost: message %d at %d/%lld\n", v->round, first, v->partition[first],
                (long long)v->offset[first]);
}

static void run_round(irig *r, const char *bootstrap, vround *v, int round)
{
    memset(v, 0, sizeof *v);
    v->round = round;
    snprintf(v->topic, sizeof v->topic, "volume-r%d", round);
    for (int seq = 0; seq < MESSAGES; seq++)
        v->partition[seq] = -1;
    cr_assert_eq(rd_kafka_mock_topic_create(r->mock, v->topic, PARTITIONS, 1), RD_KAFKA_RESP_ERR_NO_ERROR);
    double t0 = now_s();
    produce_round(bootstrap, v);
    double t1 = now_s();
    consume_round(bootstrap, v);
    fprintf(stderr, "round %d: %d produced in %.1f s, %d consumed in %.1f s\n", round, MESSAGES, t1 - t0, v->consumed,
            now_s() - t1);
    if (v->consumed < MESSAGES)
        report_lost(v);
    cr_assert_eq(v->foreign + v->duplicates + v->misplaced + v->reordered, 0,
                 "round %d: %d foreign or corrupt, %d duplicated, %d misplaced, %d out of order; first: %s", round,
                 v->foreign, v->duplicates, v->misplaced, v->reordered, v->first_fault);
    cr_assert_eq(v->consumed, MESSAGES, "round %d: consumed %d of %d within %d s", round, v->consumed, MESSAGES,
                 WAIT_S);
}

/* Both workers carried the rounds' traffic, not just a handshake: each took clients and at least a
 * tenth of the bytes each way (the main loop hands a client to the least loaded worker, and every
 * round's producer and consumer hold several connections). */
static void check_workers(const km_inline *p, const km_inline_stats *all)
{
    cr_assert_eq(km_inline_threads(p), 2, "%zu worker threads", km_inline_threads(p));
    for (size_t w = 0; w < 2; w++) {
        km_inline_stats ws;
        km_inline_get_worker_stats(p, w, &ws);
        fprintf(stderr, "inline_volume: worker %zu: %llu clients, %llu bytes up, %llu down\n", w,
                (unsigned long long)ws.accepted, (unsigned long long)ws.bytes_up, (unsigned long long)ws.bytes_down);
        cr_expect_gt(ws.accepted, 0, "worker %zu took no client", w);
        cr_expect_geq(ws.bytes_up * 10, all->bytes_up, "worker %zu carried %llu of %llu bytes up", w,
                      (unsigned long long)ws.bytes_up, (unsigned long long)all->bytes_up);
        cr_expect_geq(ws.bytes_down * 10, all->bytes_down, "worker %zu carried %llu of %llu bytes down", w,
                      (unsigned long long)ws.bytes_down, (unsigned long long)all->bytes_down);
    }
}

TestSuite(inline_volume, .timeout = 600);

Test(inline_volume, rounds_of_100k_through_two_workers_lose_nothing_and_keep_order)
{
    fprintf(stderr, "inline_volume: %d rounds of %d messages%s\n", ROUNDS, MESSAGES,
            ROUNDS < 10 ? " (fewer than the plain build's 10: this is the sanitized build)" : "");
    irig r;
    irig_init(&r);
    irig_mock(&r, BROKERS, NULL, 0);
    irig_dynamic(&r);
    irig_set(&r, "proxy.threads", "2");
    irig_start(&r);
    char bootstrap[64];
    snprintf(bootstrap, sizeof bootstrap, "127.0.0.1:%u", irig_port(&r, -1));
    vround *v = malloc(sizeof *v);
    cr_assert(v);
    for (int round = 1; round <= ROUNDS; round++)
        run_round(&r, bootstrap, v, round);
    free(v);
    km_inline_stats st;
    irig_stop(&r, &st);
    fprintf(stderr, "inline_volume: proxy accepted %llu clients, cut %llu, %llu bytes up, %llu down, %d warnings\n",
            (unsigned long long)st.accepted, (unsigned long long)st.cut, (unsigned long long)st.bytes_up,
            (unsigned long long)st.bytes_down, r.log_lines);
    cr_expect_eq(st.cut, 0, "the proxy cut %llu clients", (unsigned long long)st.cut);
    cr_expect_geq(st.accepted, (uint64_t)ROUNDS * 2, "%llu clients accepted", (unsigned long long)st.accepted);
    cr_expect_eq(st.upstream_failures, 0, "%llu upstream connections failed", (unsigned long long)st.upstream_failures);
    /* Every message crossed the proxy twice: in a Produce request and in a Fetch response. */
    uint64_t payload = (uint64_t)ROUNDS * MESSAGES * VALUE_BYTES;
    cr_expect_gt(st.bytes_up, payload, "only %llu bytes went up", (unsigned long long)st.bytes_up);
    cr_expect_gt(st.bytes_down, payload, "only %llu bytes came down", (unsigned long long)st.bytes_down);
    check_workers(r.proxy, &st);
    irig_free(&r);
}
