/* The inline proxy's address rewriting on flexible responses built by Kafka's own kafka-clients
 * classes (../shared/realkafka, through tests/java/ResponseBuilder.java), each followed by one
 * byte more than its body (librdkafka 2.15's mock cluster sends such a byte).  What the client
 * gets is read back by kafka-clients too (AbstractResponse.parseResponse, as NetworkClient does).
 * Skipped, saying why, when the kit, java or javac is absent. */
#include "test_inline_rig.h"
#include "km_testsupport.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

TestSuite(inline_realkafka, .timeout = 300);

typedef struct jcase {
    const char *api;
    int16_t key, ver;
} jcase;

static const jcase CASES[] = {
    {"metadata", KM_API_METADATA, 9},          {"metadata", KM_API_METADATA, 10},
    {"metadata", KM_API_METADATA, 11},         {"metadata", KM_API_METADATA, 12},
    {"find_coordinator", KM_API_FIND_COORDINATOR, 4}, {"find_coordinator", KM_API_FIND_COORDINATOR, 5},
    {"find_coordinator", KM_API_FIND_COORDINATOR, 6}, {"describe_cluster", KM_API_DESCRIBE_CLUSTER, 0},
    {"describe_cluster", KM_API_DESCRIBE_CLUSTER, 1},
};
#define N_CASES (sizeof CASES / sizeof CASES[0])

/* The tool's full path on PATH (km_test_run does not search it), or NULL. */
static char *on_path(const char *tool)
{
    char *dirs = strdup(getenv("PATH") ? getenv("PATH") : "/usr/bin:/bin"), *save = NULL, *path = NULL;
    for (char *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        if (asprintf(&path, "%s/%s", *d ? d : ".", tool) > 0 && access(path, X_OK) == 0)
            break;
        free(path);
        path = NULL;
    }
    free(dirs);
    return path;
}

static char *java_bin, *javac_bin;

/* Compiles the glue into dir; returns the class path to run it with. */
static char *compile_glue(const char *dir)
{
    char jar[4096], *cp = NULL;
    snprintf(jar, sizeof jar, "%s/realkafka/lib/kafka-clients-3.9.0.jar", km_test_shared_dir());
    if (access(jar, R_OK))
        cr_skip_test("%s is absent (the realkafka kit: Kafka 3.9 jars in ../shared/realkafka): nothing to build responses with", jar);
    java_bin = on_path("java"), javac_bin = on_path("javac");
    if (!java_bin || !javac_bin)
        cr_skip_test("java or javac is not on PATH (Debian: openjdk-17-jdk-headless): the kafka-clients glue needs both");
    cr_assert(asprintf(&cp, "%s:%s/realkafka/lib/*", dir, km_test_shared_dir()) > 0);
    char src[4096];
    snprintf(src, sizeof src, "%s/tests/java/ResponseBuilder.java", km_test_source_dir());
    char *argv[] = {javac_bin, "-nowarn", "-cp", cp, "-d", (char *)dir, src, NULL}, *out = NULL, *err = NULL;
    int rc = km_test_run(argv, NULL, 0, &out, NULL, &err);
    cr_assert_eq(rc, 0, "javac %s exited %d: %s", src, rc, err ? err : "");
    free(out), free(err);
    return cp;
}

/* Runs the glue over the command lines in; returns one malloc'd answer per line, "OK " stripped. */
static void run_glue(const char *cp, const char *in, char **answers, size_t n)
{
    char *argv[] = {java_bin, "-cp", (char *)cp, "ResponseBuilder", NULL}, *out = NULL, *err = NULL;
    int rc = km_test_run(argv, in, strlen(in), &out, NULL, &err);
    cr_assert_eq(rc, 0, "ResponseBuilder exited %d: %s", rc, err ? err : "");
    char *line = out;
    for (size_t i = 0; i < n; i++) {
        char *nl = line ? strchr(line, '\n') : NULL;
        cr_assert(nl, "ResponseBuilder answered %zu of %zu lines: %s", i, n, err ? err : "");
        *nl = '\0';
        cr_assert(!strncmp(line, "OK", 2), "ResponseBuilder, line %zu: %s", i + 1, line);
        answers[i] = strdup(line + (line[2] ? 3 : 2));
        line = nl + 1;
    }
    free(out), free(err);
}

static uint8_t *unhex(const char *h, size_t *len)
{
    *len = strlen(h) / 2;
    uint8_t *b = malloc(*len + 1);
    for (size_t i = 0; i < *len; i++)
        sscanf(h + 2 * i, "%2hhx", &b[i]);
    return b;
}

static void hex_into(char **buf, size_t *len, size_t *cap, const uint8_t *p, size_t n)
{
    if (*len + 2 * n + 1 > *cap) {
        *cap = (*len + 2 * n + 1) * 2;
        *buf = realloc(*buf, *cap);
    }
    for (size_t i = 0; i < n; i++)
        snprintf(*buf + *len + 2 * i, 3, "%02x", p[i]);
    *len += 2 * n;
}

/* The request's content does not matter to the proxy: an empty one of the API and version. */
static uint8_t *empty_request(int16_t key, int16_t ver, int32_t corr, size_t *len)
{
    km_metadata_request m;
    km_find_coordinator_request f;
    km_describe_cluster_request d;
    km_metadata_request_init(&m);
    km_find_coordinator_request_init(&f);
    km_describe_cluster_request_init(&d);
    const void *body = key == KM_API_METADATA ? (const void *)&m : key == KM_API_FIND_COORDINATOR ? (const void *)&f
                                                                                                  : (const void *)&d;
    return irig_request(key, ver, corr, body, len);
}

Test(inline_realkafka, flexible_responses_with_a_byte_more_are_rewritten_and_the_rest_passes)
{
    char *dir = km_test_tmpdir("inline-realkafka"), *cp = compile_glue(dir), *built[N_CASES], *parsed[N_CASES];
    char cmds[2048] = "";
    for (size_t i = 0; i < N_CASES; i++)
        snprintf(cmds + strlen(cmds), sizeof cmds - strlen(cmds), "build %s %d %zu\n", CASES[i].api, CASES[i].ver,
                 100 + i);
    run_glue(cp, cmds, built, N_CASES);

    irig r;
    uint16_t port;
    char addr[64], base[16];
    irig_init(&r);
    int lfd = irig_listen(&port);
    snprintf(addr, sizeof addr, "127.0.0.1:%u", port);
    snprintf(base, sizeof base, "%d", km_test_free_port_base(3));
    irig_set(&r, "proxy.bootstrap.listen", "127.0.0.1:0");
    irig_set(&r, "proxy.bootstrap.upstream", addr);
    irig_set(&r, "proxy.advertised.host", "127.0.0.1");
    irig_set(&r, "proxy.listen.host", "127.0.0.1");
    irig_set(&r, "proxy.port.base", base);
    irig_start(&r);
    int fd = irig_connect(irig_port(&r, -1)), up = irig_accept(lfd);

    char *parse_cmds = NULL;
    size_t plen = 0, pcap = 0;
    for (size_t i = 0; i < N_CASES; i++) {
        const jcase *c = &CASES[i];
        size_t rlen;
        uint8_t *req = empty_request(c->key, c->ver, (int32_t)(100 + i), &rlen);
        cr_assert(irig_send_all(fd, req, rlen));
        free(req);
        uint8_t *got;
        size_t glen;
        cr_assert(irig_read_frame(up, &got, &glen), "the upstream got no %s v%d", c->api, c->ver);
        free(got);
        size_t blen;
        uint8_t *body = unhex(built[i], &blen);
        body[blen++] = 0x00; /* one byte after the body */
        uint8_t size[4] = {(uint8_t)(blen >> 24), (uint8_t)(blen >> 16), (uint8_t)(blen >> 8), (uint8_t)blen};
        cr_assert(irig_send_all(up, size, 4) && irig_send_all(up, body, blen));
        free(body);
        cr_assert(irig_read_frame(fd, &got, &glen), "%s v%d with a byte more: the client got no answer (log: %s)",
                  c->api, c->ver, r.last_log);
        cr_expect_eq(got[glen - 1], 0x00, "%s v%d: the byte after the body", c->api, c->ver);
        char head[64];
        int hl = snprintf(head, sizeof head, "parse %s %d ", c->api, c->ver);
        if (plen + (size_t)hl + 1 > pcap) {
            pcap = (plen + (size_t)hl + 1) * 2;
            parse_cmds = realloc(parse_cmds, pcap);
        }
        memcpy(parse_cmds + plen, head, (size_t)hl);
        plen += (size_t)hl;
        hex_into(&parse_cmds, &plen, &pcap, got, glen);
        parse_cmds[plen++] = '\n';
        parse_cmds[plen] = '\0';
        free(got);
    }
    run_glue(cp, parse_cmds, parsed, N_CASES);

    int pb = r.cfg.port_base;
    for (size_t i = 0; i < N_CASES; i++) {
        const jcase *c = &CASES[i];
        char want[256];
        if (c->key == KM_API_FIND_COORDINATOR)
            snprintf(want, sizeof want, " 2@127.0.0.1:%d -1@:-1 rest=1", pb + 2);
        else
            snprintf(want, sizeof want, " 1@127.0.0.1:%d 2@127.0.0.1:%d rest=1", pb + 1, pb + 2);
        cr_expect_str_eq(parsed[i], want + 1, "%s v%d as kafka-clients reads what the client got", c->api, c->ver);
        free(built[i]), free(parsed[i]);
    }
    close(fd), close(up), close(lfd);
    km_inline_stats st;
    irig_stop(&r, &st);
    cr_expect_eq(st.rewritten, N_CASES);
    cr_expect_eq(st.cut, 0);
    irig_free(&r);
    free(parse_cmds), free(cp), free(java_bin), free(javac_bin);
    km_test_rmtree(dir);
    free(dir);
}
