/* `kmproxy proxy` and the proxy.* keys: strict parsing (unknown keys and bad values refused with
 * the key named), and the standalone command serving a librdkafka client over the mock. */
#include "km_config.h"
#include "km_testsupport.h"
#include "test_inline_rig.h"

#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

TestSuite(inline_cli, .timeout = 120);

static void refused(const char *const *sets, const char *expect)
{
    char *argv[16] = {(char *)km_test_binary(), "proxy"};
    int n = 2;
    for (; *sets; sets++) {
        argv[n++] = "--set";
        argv[n++] = (char *)*sets;
    }
    argv[n] = NULL;
    char *out = NULL, *err = NULL;
    int rc = km_test_run(argv, NULL, 0, &out, NULL, &err);
    cr_expect_eq(rc, 2, "exit %d for %s", rc, sets[-1]);
    cr_expect(strstr(err, expect), "stderr '%s' does not say '%s'", err, expect);
    free(out), free(err);
}

Test(inline_cli, bad_keys_and_values_are_refused)
{
    refused((const char *[]){"proxy.bogus=1", NULL}, "unknown key 'proxy.bogus'");
    refused((const char *[]){"proxy.broker.x.listen=127.0.0.1:1", NULL}, "broker id 'x'");
    refused((const char *[]){"proxy.broker.1.port=1", NULL}, "unknown key 'proxy.broker.1.port'");
    refused((const char *[]){"proxy.broker.1.listen=nowhere", NULL}, "must be HOST:PORT");
    refused((const char *[]){"proxy.max.connections=0", NULL}, "proxy.max.connections must be an integer");
    refused((const char *[]){"proxy.broker.1.listen=127.0.0.1:0", NULL}, "needs both .listen and .upstream");
    refused((const char *[]){"proxy.bootstrap.listen=127.0.0.1:0", NULL}, "go together");
    refused((const char *[]){"proxy.bootstrap.listen=127.0.0.1:0", "proxy.bootstrap.upstream=127.0.0.1:1",
                             "proxy.port.base=30000", NULL},
            "proxy.port.base needs proxy.advertised.host");
    refused((const char *[]){"proxy.bootstrap.listen=0.0.0.0:0", "proxy.bootstrap.upstream=127.0.0.1:1", NULL},
            "set proxy.advertised.host");
    refused((const char *[]){NULL}, "the proxy has no listener");
    refused((const char *[]){"proxy.client.ssl.client.auth=maybe", NULL}, "must be required, requested or none");
    refused((const char *[]){"proxy.upstream.security.protocol=sasl_ssl", NULL}, "must be plaintext or ssl");
    refused((const char *[]){"proxy.upstream.ssl.endpoint.identification.algorithm=x", NULL}, "must be https");
    refused((const char *[]){"proxy.bootstrap.listen=127.0.0.1:0", "proxy.bootstrap.upstream=127.0.0.1:1",
                             "proxy.upstream.ssl.ca.location=/x", NULL},
            "needs proxy.upstream.security.protocol=ssl");
    refused((const char *[]){"proxy.bootstrap.listen=127.0.0.1:0", "proxy.bootstrap.upstream=127.0.0.1:1",
                             "proxy.client.ssl.certificate.location=/x", "proxy.client.ssl.client.auth=required", NULL},
            "needs proxy.client.ssl.ca.location");
    refused((const char *[]){"proxy.sni.listen=127.0.0.1:0", "proxy.sni.host.suffix=.k", NULL},
            "proxy.sni.listen needs proxy.client.ssl.certificate.location");
    refused((const char *[]){"proxy.sni.host.prefix=b-", "proxy.bootstrap.listen=127.0.0.1:0",
                             "proxy.bootstrap.upstream=127.0.0.1:1", NULL},
            "need proxy.sni.listen");
}

/* The daemon's configuration takes the same keys through km_config and checks them together. */
Test(inline_cli, the_daemon_config_delegates_proxy_keys)
{
    km_config c;
    km_config_defaults(&c);
    km_err err = {{0}};
    cr_assert_eq(km_config_set(&c, "proxy.broker.7.listen", "127.0.0.1:0", "t", &err), 0, "%s", err.msg);
    cr_assert_eq(km_config_set(&c, "proxy.nope", "1", "t:3", &err), -1);
    cr_expect(strstr(err.msg, "t:3: unknown key 'proxy.nope'"), "%s", err.msg);
    cr_assert_eq(km_config_set(&c, "metadata.source", "dir", "t", &err), 0);
    cr_assert_eq(km_config_set(&c, "metadata.dir", "/tmp", "t", &err), 0);
    cr_assert_eq(km_config_set(&c, "zookeeper.connect", "127.0.0.1:2181", "t", &err), 0);
    cr_assert_eq(km_config_validate(&c, &err), -1);
    cr_expect(strstr(err.msg, "proxy.broker.7: needs both"), "%s", err.msg);
    cr_assert_eq(c.proxy.n_brokers, 1);
    km_config_free(&c);
}

/* An HTTP/1.0 request to 127.0.0.1:port; the answer, malloc'd. */
static char *http(unsigned port, const char *req)
{
    int fd = irig_connect((uint16_t)port);
    cr_assert(irig_send_all(fd, req, strlen(req)));
    size_t cap = 1 << 20, len = 0;
    char *buf = malloc(cap);
    ssize_t k;
    while ((k = recv(fd, buf + len, cap - 1 - len, 0)) > 0)
        len += (size_t)k;
    buf[len] = '\0';
    close(fd);
    cr_assert(strstr(buf, "200"), "%s: %.200s", req, buf);
    return buf;
}

static char *scrape(unsigned port)
{
    return http(port, "GET /metrics HTTP/1.0\r\n\r\n");
}

/* Runs `kmproxy proxy`, reads its "listening" line, serves a metadata request, stops on SIGTERM. */
Test(inline_cli, kmproxy_proxy_serves_until_sigterm)
{
    irig r;
    irig_init(&r);
    irig_mock(&r, 3, "cli", 1);
    char up[64], set_up[96], set_base[64], set_jsonl[600];
    char *dir = km_test_tmpdir("inline-cli");
    snprintf(set_jsonl, sizeof set_jsonl, "proxy.capture.jsonl=%s/c.jsonl", dir);
    irig_mock_broker_address(&r, 1, up, sizeof up);
    snprintf(set_up, sizeof set_up, "proxy.bootstrap.upstream=%s", up);
    int base = irig_free_port_base(3);
    snprintf(set_base, sizeof set_base, "proxy.port.base=%d", base);
    char threads_buf[32];
    const char *threads = km_test_proxy_threads(threads_buf, sizeof threads_buf);
    int out[2];
    cr_assert_eq(pipe(out), 0);
    pid_t parent = getpid(), pid = fork();
    if (pid == 0) {
        km_test_die_with_parent(parent);
        dup2(out[1], 1);
        close(out[0]);
        execl(km_test_binary(), "kmproxy", "proxy", "--set", "proxy.bootstrap.listen=127.0.0.1:0", "--set", set_up,
              "--set", set_base, "--set", "proxy.advertised.host=127.0.0.1", "--set", "proxy.listen.host=127.0.0.1",
              "--set", "log.level=warn", "--set", "metrics.listen=127.0.0.1:0", "--set", set_jsonl, "--set",
              threads ? threads : "log.level=warn", (char *)NULL);
        _exit(127);
    }
    close(out[1]);
    FILE *f = fdopen(out[0], "r");
    char line[256];
    unsigned port = 0, metrics = 0;
    cr_assert(fgets(line, sizeof line, f), "kmproxy proxy printed nothing");
    cr_assert_eq(sscanf(line, "metrics port=%u", &metrics), 1, "line: %s", line);
    cr_assert(fgets(line, sizeof line, f), "kmproxy proxy printed no listener");
    cr_assert_eq(sscanf(line, "listening broker=-1 port=%u", &port), 1, "line: %s", line);
    char bootstrap[64];
    snprintf(bootstrap, sizeof bootstrap, "127.0.0.1:%u", port);
    char *answer = http(metrics, "POST /capture/on HTTP/1.0\r\n\r\n"); /* off until now */
    cr_expect(strstr(answer, "capture on"), "%s", answer);
    free(answer);
    rd_kafka_t *rk = irig_producer(bootstrap, NULL);
    const struct rd_kafka_metadata *md = NULL;
    cr_assert_eq(rd_kafka_metadata(rk, 1, NULL, &md, 10000), 0);
    cr_assert_eq(md->broker_cnt, 3, "%d brokers", md->broker_cnt);
    for (int i = 0; i < 3; i++)
        cr_expect_eq(md->brokers[i].port, base + md->brokers[i].id);
    rd_kafka_metadata_destroy(md);
    rd_kafka_destroy(rk);
    char *text = scrape(metrics);
    static const char *const EXPECT[] = {
        "kmproxy_inline_requests_total{broker=\"-1\",api=\"METADATA\"}",
        "kmproxy_inline_upstream_latency_seconds_count{broker=\"-1\",api=\"METADATA\"}",
        "kmproxy_inline_upstream_latency_seconds_bucket{broker=\"-1\",api=\"API_VERSIONS\",le=\"+Inf\"}",
        "kmproxy_inline_connections_accepted_total ", "kmproxy_inline_tls_handshake_failures_total 0",
        "kmproxy_inline_proxy_time_seconds_count ", "kmproxy_inline_rewritten_total ",
        /* librdkafka 2.0 asks ApiVersions v3 first; the mock answers UNSUPPORTED_VERSION (35) */
        "kmproxy_inline_response_errors_total{broker=\"-1\",api=\"API_VERSIONS\"} 1"};
    for (size_t i = 0; i < sizeof EXPECT / sizeof EXPECT[0]; i++)
        cr_expect(strstr(text, EXPECT[i]), "/metrics lacks %s", EXPECT[i]);
    free(text);
    kill(pid, SIGTERM);
    int status = 0;
    waitpid(pid, &status, 0);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d", status);
    fclose(f);
    char path[600], *listing = NULL, *errs = NULL;
    snprintf(path, sizeof path, "%s/c.jsonl", dir);
    char *argv[] = {(char *)km_test_binary(), "capture", "read", path, "--api", "METADATA", NULL};
    cr_assert_eq(km_test_run(argv, NULL, 0, &listing, NULL, &errs), 0, "%s", errs);
    cr_expect(strstr(listing, "<- METADATA"), "nothing captured after POST /capture/on: %s", listing);
    free(listing);
    free(errs);
    km_test_rmtree(dir);
    free(dir);
    irig_free(&r);
}
