/* bench_verify.c - what one continuous check costs on 10,000 partitions (100 topics of 100, one broker played by
 * tests/verify's fake broker on loopback): every partition in one check (the baseline, verify.partitions.per.cycle
 * 0) against a pass split into checks of 1,000 (verify.partitions.per.cycle=1000): requests, bytes each way and
 * the verifier's CPU per check, and for the whole pass.  The fake's own CPU is its child's, not counted. */
#include "bench_util.h"
#include "km_image.h"
#include "km_testsupport.h"
#include "km_verify.h"
#include "verify_fakebroker.h"

#include <jansson.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define PARTITIONS_PER_TOPIC 100
#define TOPICS 100
#define SLICE 1000
#define PASSES 5

typedef struct cost {
    double cpu;
    long long checks, requests, out, in, first_in; /* first_in: the first check of a pass (every topic asked) */
} cost;

static int listen_loopback(uint16_t *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) || listen(fd, 8) ||
        getsockname(fd, (struct sockaddr *)&a, &len))
        return -1;
    *port = ntohs(a.sin_port);
    return fd;
}

static void add_check(cost *c, const json_t *rep, double cpu)
{
    const json_t *k = json_object_get(rep, "cost");
    long long in = json_integer_value(json_object_get(k, "bytes_in"));
    if (json_is_true(json_object_get(json_object_get(rep, "slice"), "from_start")))
        c->first_in += in;
    c->cpu += cpu;
    c->checks++;
    c->requests += json_integer_value(json_object_get(k, "requests"));
    c->out += json_integer_value(json_object_get(k, "bytes_out"));
    c->in += in;
}

/* PASSES full passes in checks of per partitions (0: all), as the daemon runs them: each after the last's cursor. */
static int run_passes(const km_image *img, int64_t per, cost *c)
{
    char cursor[256] = "";
    int32_t cursor_part = 0;
    for (int passes = 0; passes < PASSES;) {
        km_verify_opts o = { .timeout_s = 10, .after_topic = cursor[0] ? cursor : NULL,
                             .after_partition = cursor_part, .max_partitions = per };
        json_t *rep = NULL;
        km_err err;
        double t0 = bench_cpu_s();
        int verdict = km_verify_run(img, &o, &rep, &err);
        double t1 = bench_cpu_s();
        if (verdict != KM_VERIFY_CONSISTENT)
            return fprintf(stderr, "bench_verify: verdict %d: %s\n", verdict, verdict < 0 ? err.msg : ""), -1;
        add_check(c, rep, t1 - t0);
        const json_t *slice = json_object_get(rep, "slice"), *last = json_object_get(slice, "last");
        cursor[0] = 0;
        if (json_is_true(json_object_get(slice, "complete")))
            passes++;
        else
            snprintf(cursor, sizeof cursor, "%s", json_string_value(json_object_get(last, "topic")));
        cursor_part = (int32_t)json_integer_value(json_object_get(last, "partition"));
        json_decref(rep);
    }
    return 0;
}

static void print_cost(const char *what, const cost *c)
{
    printf("%-28s %4lld checks  per check: %5.1f requests %8.0f B out %8.0f B in %7.3f ms CPU"
           "  per pass: %8.0f B in %7.3f ms CPU\n", what, c->checks, (double)c->requests / c->checks,
           (double)c->out / c->checks, (double)c->in / c->checks, 1e3 * c->cpu / c->checks,
           (double)c->in / PASSES, 1e3 * c->cpu / PASSES);
}

int main(void)
{
    uint16_t port;
    int lfd = listen_loopback(&port);
    char *dir = km_test_tmpdir("bench-verify");
    km_image *img = km_image_new();
    km_gen_opts g = { .brokers = 1, .topics = TOPICS, .partitions = PARTITIONS_PER_TOPIC, .replication = 1,
                      .zk_migration = true, .seed = 26, .broker_host = "127.0.0.1", .broker_ports = &port };
    km_err err;
    if (lfd < 0 || km_gen_write(dir, &g, img, &err) < 0)
        return fprintf(stderr, "bench_verify: set-up failed\n"), 1;
    int parent = getpid();
    pid_t server = fork();
    if (server == 0) {
        bench_die_with_parent(parent);
        for (;;) {
            int c = accept(lfd, NULL, NULL);
            while (c >= 0 && vf_answer_one(c, img, port, VF_EXACT))
                ;
            close(c);
        }
    }
    cost all = { 0 }, sliced = { 0 };
    int rc = run_passes(img, 0, &all) || run_passes(img, SLICE, &sliced);
    kill(server, SIGKILL);
    waitpid(server, NULL, 0);
    km_test_rmtree(dir);
    free(dir);
    km_image_free(img);
    if (rc)
        return 1;
    printf("verify, %d partitions, %d passes each:\n", TOPICS * PARTITIONS_PER_TOPIC, PASSES);
    print_cost("every partition (baseline)", &all);
    print_cost("partitions.per.cycle=1000", &sliced);
    printf("per check: %.2fx the baseline's bytes in, %.2fx its CPU; the first check of a pass %.0f B in "
           "(every topic's Metadata); a pass %.2fx the baseline's bytes in\n",
           ((double)sliced.in / sliced.checks) / ((double)all.in / all.checks),
           (sliced.cpu / sliced.checks) / (all.cpu / all.checks), (double)sliced.first_in / PASSES,
           (double)sliced.in / all.in);
    return 0;
}
