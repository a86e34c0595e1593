/* km_capture: pcapng files checked by tshark's TCP reassembly and Kafka
 * dissector, JSON lines checked by parsing them back. */
#include <criterion/criterion.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "km_capture.h"
#include "km_testsupport.h"

#define KAFKA_PORT 19092       /* not 9092, so decoding relies on -d */
#define TSHARK "/usr/bin/tshark"

static char *dir;
static char pcap_path[512], jsonl_path[512];

static void setup(void)
{
    dir = km_test_tmpdir("capture");
    cr_assert(dir);
    snprintf(pcap_path, sizeof pcap_path, "%s/cap.pcapng", dir);
    snprintf(jsonl_path, sizeof jsonl_path, "%s/cap.jsonl", dir);
}

static void teardown(void)
{
    if (!getenv("KM_KEEP_CAPTURE")) /* keep the files for a look in Wireshark */
        km_test_rmtree(dir);
    free(dir);
}

TestSuite(capture, .init = setup, .fini = teardown);

static const km_capture_endpoint client_ep = {0x7f000001, 51234}, server_ep = {0x7f000001, KAFKA_PORT};

/* ---- real Kafka frames from the codec ------------------------------------------- */

static void api_versions_request(km_buf *out, int16_t ver, int32_t corr)
{
    km_api_versions_request req;
    km_api_versions_request_init(&req);
    req.client_software_name = km_cstr("kmproxy-test");
    req.client_software_version = km_cstr("1.0");
    km_err err = {{0}};
    cr_assert_eq(km_frame_request(KM_API_API_VERSIONS, ver, corr, "capture-test", &req, out, &err), 0, "%s",
                 err.msg);
}

/* nkeys entries make the response as long as we like (7 bytes each in v3). */
static void api_versions_response(km_buf *out, int16_t ver, int32_t corr, int nkeys)
{
    km_api_versions_response resp;
    km_api_versions_response_init(&resp);
    km_api_versions_response_api_version keys[1000];
    cr_assert_leq(nkeys, 1000);
    for (int i = 0; i < nkeys; i++) {
        keys[i] = (km_api_versions_response_api_version){0};
        keys[i].api_key = (int16_t)(i % 48); /* all known to Wireshark 4.0 */
        keys[i].min_version = 0;
        keys[i].max_version = 0; /* newer versions draw "unsupported version" warnings */
    }
    resp.api_keys.count = nkeys;
    resp.api_keys.items = keys;
    km_err err = {{0}};
    cr_assert_eq(km_frame_response(KM_API_API_VERSIONS, ver, corr, &resp, out, &err), 0, "%s", err.msg);
}

/* Hands a whole frame (size prefix included, as the codec builds it) to capture. */
static void capture_buf(km_capture *cap, km_capture_conn *c, km_capture_dir dir, km_buf *b)
{
    cr_assert_geq(b->len, 4);
    km_capture_frame(cap, c, dir, b->data + 4, b->len - 4);
    km_buf_reset(b);
}

/* Two connections: v3 (flexible) and v0 ApiVersions pairs, one response big
 * enough to span several segments. */
static void synthetic_exchange(km_capture *cap)
{
    km_buf b;
    km_buf_init(&b);
    km_capture_conn *c1 = km_capture_conn_open(cap, client_ep, server_ep);
    km_capture_endpoint other = {0x7f000002, 40000};
    km_capture_conn *c2 = km_capture_conn_open(cap, other, server_ep);
    cr_assert(c1 && c2);
    api_versions_request(&b, 3, 7);
    capture_buf(cap, c1, KM_CAPTURE_C2S, &b);
    api_versions_request(&b, 0, 1);
    capture_buf(cap, c2, KM_CAPTURE_C2S, &b);
    api_versions_response(&b, 3, 7, 900); /* ~6.3 kB: five segments at MSS 1460 */
    capture_buf(cap, c1, KM_CAPTURE_S2C, &b);
    api_versions_response(&b, 0, 1, 3);
    capture_buf(cap, c2, KM_CAPTURE_S2C, &b);
    km_capture_conn_close(cap, c1);
    /* c2 is left open: km_capture_close must finish it */
    km_buf_free(&b);
}

/* ---- tshark --------------------------------------------------------------------- */

/* Runs tshark on the capture with display filter `filter`, printing `fields`
 * (NULL-terminated); returns stdout (caller frees). */
static char *tshark(const char *path, const char *filter, const char *const *fields)
{
    char decode[64];
    snprintf(decode, sizeof decode, "tcp.port==%d,kafka", KAFKA_PORT);
    const char *argv[40] = {TSHARK, "-n", "-r", path, "-d", decode, "-o", "tcp.check_checksum:TRUE",
                            "-o", "ip.check_checksum:TRUE", "-Y", filter, "-T", "fields"};
    int n = 14;
    for (; fields && *fields && n < 36; fields++) {
        argv[n++] = "-e";
        argv[n++] = *fields;
    }
    argv[n] = NULL;
    char *out = NULL, *errs = NULL;
    int rc = km_test_run((char *const *)argv, NULL, 0, &out, NULL, &errs);
    cr_assert_eq(rc, 0, "tshark failed (%d): %s", rc, errs);
    free(errs);
    return out;
}

static int count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

static void assert_clean_decode(const char *path)
{
    static const char *const frame_no[] = {"frame.number", NULL};
    char *bad = tshark(path, "_ws.malformed || _ws.expert.severity >= warning", frame_no);
    cr_assert_str_empty(bad, "malformed or warned packets: %s", bad);
    free(bad);
    char *sums = tshark(path, "tcp.checksum.status != 1 || ip.checksum.status != 1", frame_no);
    cr_assert_str_empty(sums, "bad or unverified checksums in frames: %s", sums);
    free(sums);
}

static json_t *read_lines(const char *path, size_t *n)
{
    FILE *f = fopen(path, "r");
    cr_assert(f);
    json_t *arr = json_array();
    char line[1 << 16];
    while (fgets(line, sizeof line, f)) {
        json_error_t je;
        json_t *o = json_loads(line, 0, &je);
        cr_assert(o, "bad JSON line: %s (%s)", je.text, line);
        json_array_append_new(arr, o);
    }
    fclose(f);
    *n = json_array_size(arr);
    return arr;
}

static const char *str_of(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return json_is_string(v) ? json_string_value(v) : "";
}

static json_int_t int_of(json_t *o, const char *key) { return json_integer_value(json_object_get(o, key)); }

Test(capture, pcapng_decodes_as_kafka_in_tshark)
{
    km_err err = {{0}};
    km_capture_opts o = {.pcapng_path = pcap_path};
    km_capture *cap = km_capture_open(&o, &err);
    cr_assert(cap, "%s", err.msg);
    synthetic_exchange(cap);
    km_capture_stats st;
    km_capture_get_stats(cap, &st);
    cr_assert_eq(st.frames, 4);
    cr_assert_eq(st.dropped_frames, 0);
    cr_assert_eq(km_capture_close(cap, &err), 0, "%s", err.msg);

    assert_clean_decode(pcap_path);
    static const char *const f[] = {"kafka.api_key", "kafka.api_version", "kafka.correlation_id", NULL};
    char *kafka = tshark(pcap_path, "kafka", f);
    cr_assert_eq(count_lines(kafka), 4, "%s", kafka);
    cr_assert(strstr(kafka, "18\t3\t7\n") && strstr(kafka, "18\t0\t1\n"), "%s", kafka);
    free(kafka);
    /* responses are matched to their requests, so their content decodes too */
    static const char *const keys[] = {"kafka.api_versions.api_key", NULL};
    char *resp = tshark(pcap_path, "kafka.request_frame", keys);
    cr_assert_eq(count_lines(resp), 2, "%s", resp);
    cr_assert_eq(strlen(resp) > 900 * 2, true, "all 900 api keys of the segmented response decode: %zu bytes", strlen(resp));
    free(resp);
    /* handshakes and FINs for both connections: 2 SYN, 2 SYN-ACK, 4 FIN */
    static const char *const num[] = {"frame.number", NULL};
    char *syn = tshark(pcap_path, "tcp.flags.syn == 1", num), *fin = tshark(pcap_path, "tcp.flags.fin == 1", num);
    cr_assert_eq(count_lines(syn), 4);
    cr_assert_eq(count_lines(fin), 4);
    free(syn);
    free(fin);
}

Test(capture, raw_ipv4_link_type_and_small_mss)
{
    km_err err = {{0}};
    km_capture_opts o = {.pcapng_path = pcap_path, .link = KM_CAPTURE_RAW_IPV4, .mss = 100};
    km_capture *cap = km_capture_open(&o, &err);
    cr_assert(cap, "%s", err.msg);
    synthetic_exchange(cap);
    cr_assert_eq(km_capture_close(cap, &err), 0, "%s", err.msg);
    assert_clean_decode(pcap_path);
    static const char *const f[] = {"frame.encap_type", NULL};
    char *kafka = tshark(pcap_path, "kafka", f);
    cr_assert_eq(count_lines(kafka), 4, "%s", kafka);
    cr_assert(strstr(kafka, "7\n"), "encapsulation 7 is raw IP: %s", kafka);
    free(kafka);
    static const char *const len[] = {"tcp.len", NULL};
    char *big = tshark(pcap_path, "tcp.len > 100", len);
    cr_assert_str_empty(big, "segments above the MSS: %s", big);
    free(big);
}

Test(capture, dropped_frame_restarts_the_stream_cleanly)
{
    km_err err = {{0}};
    km_capture_opts o = {.pcapng_path = pcap_path, .jsonl_path = jsonl_path, .buffer_limit = 4096};
    km_capture *cap = km_capture_open(&o, &err);
    cr_assert(cap, "%s", err.msg);
    km_buf b;
    km_buf_init(&b);
    km_capture_conn *c = km_capture_conn_open(cap, client_ep, server_ep);
    api_versions_request(&b, 3, 1);
    capture_buf(cap, c, KM_CAPTURE_C2S, &b);
    api_versions_response(&b, 3, 1, 900); /* bigger than the whole buffer: always dropped */
    capture_buf(cap, c, KM_CAPTURE_S2C, &b);
    api_versions_request(&b, 3, 2);
    capture_buf(cap, c, KM_CAPTURE_C2S, &b);
    api_versions_response(&b, 3, 2, 5);
    capture_buf(cap, c, KM_CAPTURE_S2C, &b);
    km_buf_free(&b);
    km_capture_stats st;
    km_capture_get_stats(cap, &st);
    cr_assert_eq(st.dropped_frames, 1);
    cr_assert_gt(st.dropped_bytes, 4096);
    cr_assert_eq(st.frames, 3);
    cr_assert_eq(km_capture_close(cap, &err), 0, "%s", err.msg);

    static const char *const num[] = {"frame.number", NULL};
    char *bad = tshark(pcap_path, "_ws.malformed", num);
    cr_assert_str_empty(bad, "%s", bad);
    free(bad);
    static const char *const f[] = {"kafka.correlation_id", NULL};
    char *kafka = tshark(pcap_path, "kafka", f);
    cr_assert_str_eq(kafka, "1\n2\n2\n", "the pair after the drop decodes in full");
    free(kafka);
    char *rst = tshark(pcap_path, "tcp.flags.reset == 1", num);
    cr_assert_eq(count_lines(rst), 1);
    free(rst);
    size_t n;
    json_t *lines = read_lines(jsonl_path, &n);
    json_t *resumed = json_array_get(lines, 2);
    cr_assert_eq(int_of(resumed, "correlation_id"), 2);
    cr_assert(json_is_true(json_object_get(resumed, "after_dropped_frames")));
    json_t *end = json_array_get(lines, n - 1);
    cr_assert_str_eq(str_of(end, "event"), "capture_end");
    cr_assert_eq(int_of(end, "dropped_frames"), 1);
    json_decref(lines);
}

/* ---- JSON lines ------------------------------------------------------------------- */

Test(capture, jsonl_pairs_responses_with_requests)
{
    km_err err = {{0}};
    km_capture_opts o = {.jsonl_path = jsonl_path};
    km_capture *cap = km_capture_open(&o, &err);
    cr_assert(cap, "%s", err.msg);
    synthetic_exchange(cap);
    cr_assert_eq(km_capture_close(cap, &err), 0, "%s", err.msg);
    size_t n;
    json_t *lines = read_lines(jsonl_path, &n);
    cr_assert_eq(n, 9, "2 opens, 4 frames, 2 closes, the summary");
    json_t *end = json_array_get(lines, 8);
    cr_assert_str_eq(str_of(end, "event"), "capture_end");
    cr_assert_eq(int_of(end, "frames"), 4);
    cr_assert_eq(int_of(end, "dropped_frames"), 0);
    json_t *open = json_array_get(lines, 0);
    cr_assert_str_eq(str_of(open, "event"), "open");
    cr_assert_str_eq(str_of(open, "client"), "127.0.0.1:51234");
    cr_assert_str_eq(str_of(open, "server"), "127.0.0.1:19092");
    cr_assert(strchr(str_of(open, "ts"), 'T') && strchr(str_of(open, "ts"), 'Z'), "%s", str_of(open, "ts"));

    json_t *req = json_array_get(lines, 2);
    cr_assert_str_eq(str_of(req, "dir"), "c2s");
    cr_assert_eq(int_of(req, "conn"), 1);
    cr_assert_eq(int_of(req, "api_key"), 18);
    cr_assert_str_eq(str_of(req, "api_name"), "API_VERSIONS");
    cr_assert_eq(int_of(req, "api_version"), 3);
    cr_assert_eq(int_of(req, "correlation_id"), 7);
    cr_assert_str_eq(str_of(req, "client_id"), "capture-test");
    cr_assert_str_eq(str_of(json_object_get(req, "body"), "clientSoftwareName"), "kmproxy-test");

    json_t *resp = json_array_get(lines, 4);
    cr_assert_str_eq(str_of(resp, "dir"), "s2c");
    cr_assert_eq(int_of(resp, "api_key"), 18);
    cr_assert_eq(int_of(resp, "api_version"), 3);
    cr_assert_eq(int_of(resp, "correlation_id"), 7);
    json_t *keys = json_object_get(json_object_get(resp, "body"), "apiKeys");
    cr_assert_eq(json_array_size(keys), 900, "%s", str_of(resp, "error"));

    json_t *v0 = json_array_get(lines, 5);
    cr_assert_eq(int_of(v0, "conn"), 2);
    cr_assert_eq(int_of(v0, "api_version"), 0);
    cr_assert_eq(json_array_size(json_object_get(json_object_get(v0, "body"), "apiKeys")), 3);
    cr_assert_str_eq(str_of(json_array_get(lines, 6), "event"), "close");
    json_decref(lines);
}

Test(capture, jsonl_reports_what_it_cannot_decode)
{
    km_err err = {{0}};
    km_capture_opts o = {.jsonl_path = jsonl_path, .json_body_limit = 64};
    km_capture *cap = km_capture_open(&o, &err);
    cr_assert(cap, "%s", err.msg);
    km_capture_conn *c = km_capture_conn_open(cap, client_ep, server_ep);
    km_buf b;
    km_buf_init(&b);
    api_versions_response(&b, 3, 99, 1);           /* no request with id 99 */
    capture_buf(cap, c, KM_CAPTURE_S2C, &b);
    uint8_t junk[] = {0x7f, 0x00, 0x00, 0x01, 0, 0, 0, 6}; /* api key 32512 */
    km_capture_frame(cap, c, KM_CAPTURE_C2S, junk, sizeof junk);
    api_versions_request(&b, 3, 5);
    b.len -= 3;                                     /* truncated body */
    capture_buf(cap, c, KM_CAPTURE_C2S, &b);
    api_versions_response(&b, 3, 5, 50);            /* over json_body_limit */
    capture_buf(cap, c, KM_CAPTURE_S2C, &b);
    km_buf_free(&b);
    cr_assert_eq(km_capture_close(cap, &err), 0, "%s", err.msg);
    size_t n;
    json_t *lines = read_lines(jsonl_path, &n);
    cr_assert_eq(n, 7);
    cr_assert(strstr(str_of(json_array_get(lines, 1), "error"), "no request with this correlation id"));
    cr_assert_eq(int_of(json_array_get(lines, 1), "correlation_id"), 99);
    cr_assert_str_eq(str_of(json_array_get(lines, 5), "event"), "close");
    cr_assert(strstr(str_of(json_array_get(lines, 2), "error"), "32512"), "%s",
              str_of(json_array_get(lines, 2), "error"));
    json_t *trunc = json_array_get(lines, 3);
    cr_assert_eq(int_of(trunc, "correlation_id"), 5);
    cr_assert_str_neq(str_of(trunc, "error"), "", "a truncated body is reported");
    cr_assert_null(json_object_get(trunc, "body"));
    json_t *big = json_array_get(lines, 4);
    cr_assert_eq(int_of(big, "correlation_id"), 5, "paired despite the request's broken body");
    cr_assert(strstr(str_of(big, "body_omitted"), "64 bytes"));
    json_decref(lines);
}

Test(capture, bad_paths_and_write_errors_are_named)
{
    km_err err = {{0}};
    char missing[600];
    snprintf(missing, sizeof missing, "%s/no/such/dir/x.pcapng", dir);
    km_capture_opts o = {.pcapng_path = missing};
    cr_assert_null(km_capture_open(&o, &err));
    cr_assert(strstr(err.msg, missing) && strstr(err.msg, "No such file"), "%s", err.msg);

    km_capture_opts none = {0};
    cr_assert_null(km_capture_open(&none, &err));

    if (access("/dev/full", W_OK) != 0)
        cr_skip_test("no /dev/full");
    km_capture_opts full = {.jsonl_path = "/dev/full"};
    km_capture *cap = km_capture_open(&full, &err);
    cr_assert(cap, "%s", err.msg);
    km_capture_conn *c = km_capture_conn_open(cap, client_ep, server_ep);
    km_capture_conn_close(cap, c);
    cr_assert_eq(km_capture_close(cap, &err), -1);
    cr_assert(strstr(err.msg, "/dev/full") && strstr(err.msg, "No space left"), "%s", err.msg);
}

Test(capture, files_stop_growing_at_max_file_bytes_and_stay_valid)
{
    km_err err = {{0}};
    km_capture_opts o = {.pcapng_path = pcap_path, .jsonl_path = jsonl_path, .max_file_bytes = 1500};
    km_capture *cap = km_capture_open(&o, &err);
    cr_assert(cap, "%s", err.msg);
    synthetic_exchange(cap);
    km_capture_flush(cap);
    km_capture_stats st;
    km_capture_get_stats(cap, &st);
    cr_assert_gt(st.skipped_frames, 0);
    cr_assert_eq(st.write_errors, 0, "a full file is not an error");
    cr_assert_eq(km_capture_close(cap, &err), 0, "%s", err.msg);

    FILE *f = fopen(pcap_path, "rb");
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fclose(f);
    cr_assert_lt(size, 1500 + 16384, "at most one record past the limit: %ld", size);
    static const char *const num[] = {"frame.number", NULL};
    char *bad = tshark(pcap_path, "_ws.malformed", num); /* tshark also fails on a cut block */
    cr_assert_str_empty(bad, "%s", bad);
    free(bad);
    size_t n;
    json_t *lines = read_lines(jsonl_path, &n);
    json_t *end = json_array_get(lines, n - 1);
    cr_assert_str_eq(str_of(end, "event"), "capture_end");
    cr_assert_gt(int_of(end, "skipped_frames"), 0);
    json_decref(lines);
}
