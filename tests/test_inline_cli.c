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
    refused((const char *[]){"proxy.bootstrap.listen=127.0.0.1:0", "proxy.bootstrap.upstream=127.0.0.1:1",
                             "metrics.listen=127.0.0.1:0", "metrics.post.token.file=/nonexistent/token", NULL},
            "metrics.post.token.file");
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

/* An HTTP/1.0 request to 127.0.0.1:port; the answer (any status), malloc'd. */
static char *http_any(unsigned port, const char *req)
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
    return buf;
}

/* The same, answered 200. */
static char *http(unsigned port, const char *req)
{
    char *buf = http_any(port, req);
    cr_assert(strstr(buf, "200"), "%s: %.200s", req, buf);
    return buf;
}

static char *scrape(unsigned port)
{
    return http(port, "GET /metrics HTTP/1.0\r\n\r\n");
}

/* A `kmproxy proxy` child over the mock's broker 1 with metrics and a JSON-lines capture in dir
 * (off until switched on), its stderr in dir/err.log; extra: one more --set (NULL: none). */
typedef struct cli_proxy {
    const char *config;      /* --config FILE too, when set before cli_proxy_start */
    pid_t pid;
    FILE *out;
    unsigned metrics;
    int base;
    char bootstrap[64];
} cli_proxy;

static void cli_proxy_start(cli_proxy *cp, irig *r, const char *dir, const char *extra)
{
    char up[64], set_up[96], set_base[64], set_jsonl[600];
    snprintf(set_jsonl, sizeof set_jsonl, "proxy.capture.jsonl=%s/c.jsonl", dir);
    irig_mock_broker_address(r, 1, up, sizeof up);
    snprintf(set_up, sizeof set_up, "proxy.bootstrap.upstream=%s", up);
    cp->base = km_test_free_port_base(3);
    snprintf(set_base, sizeof set_base, "proxy.port.base=%d", cp->base);
    char threads_buf[32];
    const char *threads = km_test_proxy_threads(threads_buf, sizeof threads_buf);
    int out[2];
    cr_assert_eq(pipe(out), 0);
    pid_t parent = getpid(), pid = fork();
    if (pid == 0) {
        km_test_die_with_parent(parent);
        dup2(out[1], 1);
        close(out[0]);
        char err_log[600];
        snprintf(err_log, sizeof err_log, "%s/err.log", dir);
        FILE *errs = fopen(err_log, "w");
        if (errs)
            dup2(fileno(errs), 2);
        const char *argv[] = {"kmproxy", "proxy", "--set", "proxy.bootstrap.listen=127.0.0.1:0", "--set", set_up,
              "--set", set_base, "--set", "proxy.advertised.host=127.0.0.1", "--set", "proxy.listen.host=127.0.0.1",
              "--set", "log.level=warn", "--set", "metrics.listen=127.0.0.1:0", "--set", set_jsonl, "--set",
              threads ? threads : "log.level=warn", "--set", extra ? extra : "log.level=warn",
              cp->config ? "--config" : NULL, cp->config, NULL};
        execv(km_test_binary(), (char *const *)argv);
        _exit(127);
    }
    close(out[1]);
    cp->pid = pid;
    cp->out = fdopen(out[0], "r");
    char line[256];
    unsigned port = 0;
    cr_assert(fgets(line, sizeof line, cp->out), "kmproxy proxy printed nothing");
    cr_assert_eq(sscanf(line, "metrics port=%u", &cp->metrics), 1, "line: %s", line);
    cr_assert(fgets(line, sizeof line, cp->out), "kmproxy proxy printed no listener");
    cr_assert_eq(sscanf(line, "listening broker=-1 port=%u", &port), 1, "line: %s", line);
    snprintf(cp->bootstrap, sizeof cp->bootstrap, "127.0.0.1:%u", port);
}

/* SIGTERM: exit 0. */
static void cli_proxy_stop(cli_proxy *cp)
{
    kill(cp->pid, SIGTERM);
    int status = 0;
    waitpid(cp->pid, &status, 0);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d", status);
    fclose(cp->out);
}

/* What `kmproxy capture read` lists of the METADATA frames in dir's c.jsonl. */
static char *captured_metadata(const char *dir)
{
    char path[600], *listing = NULL, *errs = NULL;
    snprintf(path, sizeof path, "%s/c.jsonl", dir);
    char *argv[] = {(char *)km_test_binary(), "capture", "read", path, "--api", "METADATA", NULL};
    km_test_run(argv, NULL, 0, &listing, NULL, &errs);
    free(errs);
    return listing ? listing : strdup("");
}

/* One metadata request through the proxy: 3 brokers at the proxy's ports. */
static void metadata_through(const cli_proxy *cp)
{
    rd_kafka_t *rk = irig_producer(cp->bootstrap, NULL);
    const struct rd_kafka_metadata *md = NULL;
    cr_assert_eq(rd_kafka_metadata(rk, 1, NULL, &md, 10000), 0);
    cr_assert_eq(md->broker_cnt, 3, "%d brokers", md->broker_cnt);
    for (int i = 0; i < 3; i++)
        cr_expect_eq(md->brokers[i].port, cp->base + md->brokers[i].id);
    rd_kafka_metadata_destroy(md);
    rd_kafka_destroy(rk);
}

/* A mock cluster of 3 brokers and a fresh directory (returned) for one `kmproxy proxy` test. */
static char *cli_setup(irig *r, const char *tag)
{
    irig_init(r);
    irig_mock(r, 3, tag, 1);
    return km_test_tmpdir(tag);
}

static void cli_teardown(irig *r, char *dir)
{
    km_test_rmtree(dir);
    free(dir);
    irig_free(r);
}

/* Runs `kmproxy proxy`, reads its "listening" line, serves a metadata request, stops on SIGTERM. */
Test(inline_cli, kmproxy_proxy_serves_until_sigterm)
{
    irig r;
    char *dir = cli_setup(&r, "inline-cli");
    cli_proxy cp = {0};
    cli_proxy_start(&cp, &r, dir, "metrics.post.enabled=true");
    unsigned metrics = cp.metrics;
    char *answer = http(metrics, "POST /capture/on HTTP/1.0\r\n\r\n"); /* off until now */
    cr_expect(strstr(answer, "capture on"), "%s", answer);
    free(answer);
    metadata_through(&cp);
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
    cli_proxy_stop(&cp);
    char *listing = captured_metadata(dir);
    cr_expect(strstr(listing, "<- METADATA"), "nothing captured after POST /capture/on: %s", listing);
    free(listing);
    cli_teardown(&r, dir);
}

/* The metrics port may be reachable by anyone: POST /capture/on without metrics.post.enabled is
 * 403 and the capture stays off (nothing of the client's metadata request is written). */
Test(inline_cli, post_is_refused_unless_enabled)
{
    irig r;
    char *dir = cli_setup(&r, "inline-cli-guard");
    cli_proxy cp = {0};
    cli_proxy_start(&cp, &r, dir, NULL);
    char *answer = http_any(cp.metrics, "POST /capture/on HTTP/1.0\r\n\r\n");
    cr_expect(!strncmp(answer, "HTTP/1.0 403 ", 13), "%s", answer);
    free(answer);
    answer = http(cp.metrics, "GET /metrics HTTP/1.0\r\n\r\n"); /* GETs stay open */
    free(answer);
    metadata_through(&cp);
    cli_proxy_stop(&cp);
    char *listing = captured_metadata(dir);
    cr_expect(!strstr(listing, "METADATA"), "a refused POST switched the capture on: %s", listing);
    free(listing);
    cli_teardown(&r, dir);
}

/* metrics.post.token.file: a POST without the bearer token, or with another, is 401 and switches
 * nothing; with it, the capture goes on. */
Test(inline_cli, post_needs_the_configured_bearer_token)
{
    irig r;
    char *dir = cli_setup(&r, "inline-cli-token");
    char token_file[600], set_token[700];
    snprintf(token_file, sizeof token_file, "%s/token", dir);
    FILE *f = fopen(token_file, "w");
    cr_assert(f);
    fputs("s3cret-t0ken\n", f);
    fclose(f);
    snprintf(set_token, sizeof set_token, "metrics.post.token.file=%s", token_file);
    cli_proxy cp = {0};
    cli_proxy_start(&cp, &r, dir, set_token);
    static const char *const WRONG[] = {
        "POST /capture/on HTTP/1.0\r\n\r\n",
        "POST /capture/on HTTP/1.0\r\nAuthorization: Bearer s3cret-t0ke\r\n\r\n",
        "POST /capture/on HTTP/1.0\r\nAuthorization: Bearer s3cret-t0ken2\r\n\r\n",
        "POST /capture/on HTTP/1.0\r\nAuthorization: Basic s3cret-t0ken\r\n\r\n"};
    for (size_t i = 0; i < sizeof WRONG / sizeof WRONG[0]; i++) {
        char *answer = http_any(cp.metrics, WRONG[i]);
        cr_expect(!strncmp(answer, "HTTP/1.0 401 ", 13) && !strstr(answer, "capture on"), "%s -> %s", WRONG[i],
                  answer);
        free(answer);
    }
    char *answer = http(cp.metrics, "POST /capture/on HTTP/1.0\r\nauthorization: bearer s3cret-t0ken\r\n\r\n");
    cr_expect(strstr(answer, "capture on"), "%s", answer);
    free(answer);
    metadata_through(&cp);
    cli_proxy_stop(&cp);
    char *listing = captured_metadata(dir);
    cr_expect(strstr(listing, "<- METADATA"), "nothing captured after the authorized POST: %s", listing);
    free(listing);
    cli_teardown(&r, dir);
}

/* The whole file (malloc'd; NULL when it cannot be read). */
static char *file_text(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    size_t cap = 1 << 16;
    char *buf = malloc(cap);
    size_t len = buf ? fread(buf, 1, cap - 1, f) : 0;
    if (!buf) {
        fclose(f);
        return NULL;
    }
    buf[len] = '\0';
    fclose(f);
    return buf;
}

/* SIGHUP: the TLS material is read again, and the keys changed in the --config file since start
 * are named as needing a restart (the proxy's listeners and limits are built at start). */
Test(inline_cli, sighup_names_the_changed_keys)
{
    irig r;
    char *dir = cli_setup(&r, "inline-cli-hup");
    char conf[600], err_log[600];
    snprintf(conf, sizeof conf, "%s/proxy.properties", dir);
    snprintf(err_log, sizeof err_log, "%s/err.log", dir);
    FILE *f = fopen(conf, "w");
    cr_assert(f);
    fputs("proxy.max.connections=500\n", f);
    fclose(f);
    cli_proxy cp = {.config = conf};
    cli_proxy_start(&cp, &r, dir, NULL);
    f = fopen(conf, "w");
    cr_assert(f);
    fputs("proxy.max.connections=600\nproxy.idle.timeout.ms=1000\n", f);
    fclose(f);
    kill(cp.pid, SIGHUP);
    char *text = NULL;
    for (int i = 0; i < 600 && !(text && strstr(text, "need a restart")); i++) {
        free(text);
        usleep(50 * 1000);
        text = file_text(err_log);
    }
    const char *line = text ? strstr(text, "need a restart") : NULL;
    cr_expect(line && strstr(line, "proxy.max.connections") && strstr(line, "proxy.idle.timeout.ms") &&
              !strstr(line, "metrics.listen"), "stderr: %s", text ? text : "");
    free(text);
    metadata_through(&cp); /* still serving */
    cli_proxy_stop(&cp);
    cli_teardown(&r, dir);
}
