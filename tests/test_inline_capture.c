/* Capture of inline connections: librdkafka clients through the proxy with capture on; tshark
 * must decode every Kafka frame of the pcapng (zero malformed), the JSON lines must match what
 * was sent; filters by API and broker, and switching capture on at run time. */
#include "km_testsupport.h"
#include "test_inline_rig.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

TestSuite(inline_capture, .timeout = 180);

typedef struct cap_files {
    char *dir, pcap[512], jsonl[512];
} cap_files;

/* Wireshark 4.0's Kafka dissector predates some of what librdkafka 2.0 sends, so the capture that
 * tshark checks is restricted with proxy.capture.apis, and the mock offers InitProducerId v3 at
 * most (Wireshark 4.0 knows v0-3).  Left out: ApiVersions (the mock answers the client's v3 probe
 * with a v0-shaped error body that Wireshark flags), JoinGroup and SyncGroup (Wireshark 4.0 flags
 * the version 1 consumer-protocol subscription and assignment inside, at every JoinGroup version).
 * The JSON lines test decodes every API. */
static const char TSHARK_APIS[] = "PRODUCE,FETCH,LIST_OFFSETS,METADATA,OFFSET_COMMIT,OFFSET_FETCH,FIND_COORDINATOR,"
                                  "HEARTBEAT,LEAVE_GROUP,INIT_PRODUCER_ID";

static void wireshark_40_versions(irig *r)
{
    rd_kafka_mock_set_apiversion(r->mock, 22, 0, 3);
}

static void capture_rig(irig *r, cap_files *f, const char *apis, const char *brokers, bool enabled)
{
    f->dir = km_test_tmpdir("inline-capture");
    snprintf(f->pcap, sizeof f->pcap, "%s/c.pcapng", f->dir);
    snprintf(f->jsonl, sizeof f->jsonl, "%s/c.jsonl", f->dir);
    irig_init(r);
    irig_mock(r, 3, "cap", 3);
    wireshark_40_versions(r);
    irig_dynamic(r);
    irig_set(r, "proxy.capture.pcapng", f->pcap);
    irig_set(r, "proxy.capture.jsonl", f->jsonl);
    irig_set(r, "proxy.capture.enabled", enabled ? "true" : "false");
    if (apis)
        irig_set(r, "proxy.capture.apis", apis);
    if (brokers)
        irig_set(r, "proxy.capture.brokers", brokers);
    irig_start(r);
}

static void traffic(irig *r, int n)
{
    char bootstrap[64];
    snprintf(bootstrap, sizeof bootstrap, "127.0.0.1:%u", irig_port(r, -1));
    const char *pextra[] = {"linger.ms", "5", NULL};
    rd_kafka_t *p = irig_producer(bootstrap, pextra);
    for (int i = 0; i < n; i++) {
        char v[16];
        int len = snprintf(v, sizeof v, "m%d", i);
        cr_assert_eq(rd_kafka_producev(p, RD_KAFKA_V_TOPIC("cap"), RD_KAFKA_V_VALUE(v, (size_t)len),
                                       RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END), 0);
    }
    cr_assert_eq(rd_kafka_flush(p, 30000), 0);
    rd_kafka_destroy(p);
    static int round;
    char group[32];
    snprintf(group, sizeof group, "cap-group-%d", round++); /* a fresh group: no wait for the last one's members */
    rd_kafka_t *c = irig_consumer(bootstrap, group, NULL);
    rd_kafka_topic_partition_list_t *t = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(t, "cap", RD_KAFKA_PARTITION_UA);
    cr_assert_eq(rd_kafka_subscribe(c, t), 0);
    rd_kafka_topic_partition_list_destroy(t);
    int got = 0;
    for (time_t end = time(NULL) + 60; got < n && time(NULL) < end;) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(c, 200);
        if (m && !m->err)
            got++;
        if (m)
            rd_kafka_message_destroy(m);
    }
    cr_assert_eq(got, n);
    rd_kafka_consumer_close(c);
    rd_kafka_destroy(c);
}

static char *run_tshark(const char *pcap, int base, uint16_t boot, const char *filter)
{
    char d[4][64];
    snprintf(d[0], sizeof d[0], "tcp.port==%u,kafka", boot);
    for (int i = 1; i <= 3; i++)
        snprintf(d[i], sizeof d[i], "tcp.port==%d,kafka", base + i);
    char *argv[] = {"/usr/bin/tshark", "-n", "-r", (char *)pcap, "-d", d[0], "-d", d[1], "-d", d[2], "-d", d[3],
                    "-Y", (char *)filter, "-T", "fields", "-e", "frame.number", NULL};
    char *out = NULL, *err = NULL;
    int rc = km_test_run(argv, NULL, 0, &out, NULL, &err);
    cr_assert_eq(rc, 0, "tshark failed (%d): %s", rc, err);
    free(err);
    return out;
}

static int count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

/* Every JSON line, parsed. */
static json_t *jsonl(const char *path)
{
    FILE *f = fopen(path, "r");
    cr_assert(f, "%s", path);
    json_t *all = json_array();
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) > 0) {
        json_error_t e;
        json_t *o = json_loads(line, 0, &e);
        cr_assert(o, "bad JSON line: %s", e.text);
        json_array_append_new(all, o);
    }
    free(line);
    fclose(f);
    return all;
}

Test(inline_capture, tshark_decodes_every_frame_and_json_lines_match)
{
    irig r;
    cap_files f;
    capture_rig(&r, &f, TSHARK_APIS, NULL, true);
    int base = r.cfg.port_base;
    uint16_t boot = irig_port(&r, -1);
    traffic(&r, 500);
    km_inline_stats st;
    irig_stop(&r, &st);
    irig_free(&r); /* closes the capture: everything flushed */
    cr_assert_gt(st.captured, 0);
    char *bad = run_tshark(f.pcap, base, boot, "_ws.malformed || _ws.expert.severity >= warning");
    cr_expect_str_empty(bad, "malformed or warned frames: %.300s", bad);
    free(bad);
    char *kafka = run_tshark(f.pcap, base, boot, "kafka");
    cr_expect_gt(count_lines(kafka), 20, "tshark saw %d Kafka frames", count_lines(kafka));
    free(kafka);

    if (!getenv("KM_KEEP_CAPTURE"))
        km_test_rmtree(f.dir);
    else
        fprintf(stderr, "capture kept in %s (ports: bootstrap %u, base %d)\n", f.dir, boot, base);
    free(f.dir);
}

/* Every API (no filter): the JSON lines name the API, the broker, the latency of responses, and
 * show the client's view (Metadata with the proxy's ports). */
Test(inline_capture, json_lines_match_what_was_sent)
{
    irig r;
    cap_files f;
    capture_rig(&r, &f, NULL, NULL, true);
    int base = r.cfg.port_base;
    traffic(&r, 300);
    irig_free(&r);
    json_t *lines = jsonl(f.jsonl);
    size_t i;
    json_t *o;
    int produce = 0, metadata_ok = 0, latencies = 0, brokers_seen = 0;
    json_array_foreach(lines, i, o) {
        const char *api = json_string_value(json_object_get(o, "api_name"));
        const char *dir = json_string_value(json_object_get(o, "dir"));
        json_t *broker = json_object_get(o, "broker");
        if (broker && json_integer_value(broker) > 0)
            brokers_seen++;
        if (!api || !dir)
            continue;
        cr_expect_null(json_object_get(o, "error"), "line %zu has an error", i);
        if (!strcmp(dir, "c2s") && !strcmp(api, "PRODUCE"))
            produce++;
        if (!strcmp(dir, "s2c"))
            latencies += json_object_get(o, "latency_ms") != NULL;
        if (!strcmp(dir, "s2c") && !strcmp(api, "METADATA")) { /* the client's view: proxy ports */
            json_t *b, *brokers = json_object_get(json_object_get(o, "body"), "brokers");
            size_t k;
            json_array_foreach(brokers, k, b) {
                cr_expect_eq(json_integer_value(json_object_get(b, "port")),
                             base + json_integer_value(json_object_get(b, "nodeId")));
            }
            metadata_ok += json_array_size(brokers) == 3;
        }
    }
    cr_expect_gt(produce, 0);
    cr_expect_gt(metadata_ok, 0);
    cr_expect_gt(latencies, 0);
    cr_expect_gt(brokers_seen, 0);
    json_decref(lines);
    km_test_rmtree(f.dir);
    free(f.dir);
}

/* `kmproxy capture read` prints the frames a filter keeps, one line each, and refuses a bad line. */
static void read_back(const char *path)
{
    char *out = NULL, *err = NULL;
    char *argv[] = {(char *)km_test_binary(), "capture", "read", (char *)path, "--api", "metadata", "--broker", "-1",
                    NULL};
    cr_assert_eq(km_test_run(argv, NULL, 0, &out, NULL, &err), 0, "%s", err);
    cr_expect(strstr(out, "broker -1 -> METADATA v") && strstr(out, "broker -1 <- METADATA v"), "%s", out);
    cr_expect(strstr(out, " ms "), "no latency shown: %s", out);
    free(out), free(err);
    char *none[] = {(char *)km_test_binary(), "capture", "read", (char *)path, "--api", "PRODUCE", NULL};
    cr_assert_eq(km_test_run(none, NULL, 0, &out, NULL, &err), 0);
    cr_expect_null(strstr(out, "PRODUCE"), "PRODUCE frames that were never captured: %s", out);
    free(out), free(err);
    FILE *fp = fopen(path, "a");
    fputs("{not json\n", fp);
    fclose(fp);
    char *bad[] = {(char *)km_test_binary(), "capture", "read", (char *)path, NULL};
    cr_expect_eq(km_test_run(bad, NULL, 0, &out, NULL, &err), 2);
    cr_expect(strstr(err, path) && strstr(err, "not a capture line"), "%s", err);
    free(out), free(err);
}

/* Filters by API and broker, and capture switched on at run time (what SIGUSR1 does). */
Test(inline_capture, filters_and_run_time_switch)
{
    irig r;
    cap_files f;
    capture_rig(&r, &f, "METADATA", "-1", false);
    traffic(&r, 50);
    km_inline_stats st;
    irig_stop(&r, &st);
    cr_expect_eq(st.captured, 0, "captured while off");
    cr_assert(km_inline_capture(r.proxy, true));
    irig_resume(&r);
    traffic(&r, 50);
    irig_stop(&r, &st);
    cr_expect_gt(st.captured, 0);
    irig_free(&r);
    json_t *lines = jsonl(f.jsonl), *o;
    size_t i;
    int frames = 0;
    json_array_foreach(lines, i, o) {
        const char *api = json_string_value(json_object_get(o, "api_name"));
        if (!api)
            continue;
        frames++;
        cr_expect_str_eq(api, "METADATA");
        cr_expect_eq(json_integer_value(json_object_get(o, "broker")), -1);
    }
    cr_expect_gt(frames, 0);
    json_decref(lines);
    read_back(f.jsonl);
    km_test_rmtree(f.dir);
    free(f.dir);
}
