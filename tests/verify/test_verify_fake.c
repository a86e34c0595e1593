/* test_verify_fake.c - `kmproxy verify` when brokers cannot be checked: what a real broker does not do on demand
 * (answer malformed bytes, accept and never answer) from a few lines of fake server here, and a port nobody
 * listens on.  Every case exits 2, names the broker and why on stderr, and prints nothing that reads like
 * success.  And a broker answering from the image but with one partition's ISR changed at the same leader epoch
 * (what hybrid mode may leave, KAFKA-16121): exactly one isr_differs.  The real cluster's cases are in
 * tests/realcluster/test_verify.c. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "km_codec.h"
#include "km_image.h"
#include "km_testsupport.h"
#include "verify_fakebroker.h"

static int listen_any(uint16_t *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t len = sizeof a;
    cr_assert(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && listen(fd, 8) == 0 &&
              getsockname(fd, (struct sockaddr *)&a, &len) == 0);
    *port = ntohs(a.sin_port);
    return fd;
}

/* Answers every request on a connection with its correlation id and bytes no Kafka answer starts with. */
static void answer_garbage(int c)
{
    uint8_t buf[65536];
    ssize_t n = read(c, buf, sizeof buf);
    if (n >= 12) {
        uint8_t rs[12] = { 0, 0, 0, 8, buf[8], buf[9], buf[10], buf[11], 0xff, 0xff, 0xff, 0xff };
        if (write(c, rs, sizeof rs) != (ssize_t)sizeof rs)
            _exit(1);
    }
}

/* A child serving both fakes until the test ends: `garbage` answers malformed, `silent` accepts and never
 * answers. */
static pid_t serve(int garbage, int silent)
{
    pid_t parent = getpid(), pid = fork();
    if (pid)
        return pid;
    km_test_die_with_parent(parent);
    struct pollfd p[2] = { { .fd = garbage, .events = POLLIN }, { .fd = silent, .events = POLLIN } };
    for (;;) {
        if (poll(p, 2, -1) <= 0)
            continue;
        if (p[0].revents) {
            int c = accept(garbage, NULL, NULL);
            answer_garbage(c);
            close(c);
        }
        if (p[1].revents)
            (void)accept(silent, NULL, NULL); /* kept open, never answered */
    }
}

TestSuite(verify_fake, .timeout = 120);

Test(verify_fake, unreachable_malformed_and_silent_brokers_exit_2_naming_each)
{
    uint16_t ports[3];
    int garbage = listen_any(&ports[0]), silent = listen_any(&ports[1]), closed = listen_any(&ports[2]);
    close(closed); /* nobody listens on ports[2] */
    pid_t server = serve(garbage, silent);
    char *dir = km_test_tmpdir("verify-fake");
    km_gen_opts o = { .brokers = 3, .topics = 2, .partitions = 3, .zk_migration = true, .seed = 26,
                      .broker_host = "127.0.0.1", .broker_ports = ports };
    km_err err;
    cr_assert(km_gen_write(dir, &o, NULL, &err) > 0, "%s", err.msg);
    char *argv[] = { (char *)km_test_binary(), "verify", "--metadata", dir, "--timeout", "2", NULL };
    char *out = NULL, *errs = NULL;
    int rc = km_test_run(argv, NULL, 0, &out, NULL, &errs);
    kill(server, SIGKILL);
    waitpid(server, NULL, 0);
    cr_assert_eq(rc, 2, "exit %d\nstdout: %s\nstderr: %s", rc, out, errs);
    cr_assert(!strstr(out, "consistent\n") && strstr(out, "verdict: unchecked"), "stdout: %s", out);
    cr_assert(strstr(errs, "could not check broker 1: broker 1 (127.0.0.1:") && strstr(errs, "malformed METADATA"),
              "the malformed answer is not named: %s", errs);
    cr_assert(strstr(errs, "could not check broker 2: broker 2 (127.0.0.1:") && strstr(errs, "no answer within 2.0 s"),
              "the silent broker is not named: %s", errs);
    cr_assert(strstr(errs, "could not check broker 3: broker 3 (127.0.0.1:") && strstr(errs, "connect"),
              "the unreachable broker is not named: %s", errs);
    free(out);
    free(errs);
    km_test_rmtree(dir);
    free(dir);
    close(garbage);
    close(silent);
}

/* --json: the same verdict, machine-readable, and the same exit status. */
Test(verify_fake, json_report_of_an_unreachable_broker)
{
    uint16_t ports[1];
    close(listen_any(&ports[0]));
    char *dir = km_test_tmpdir("verify-fake-json");
    km_gen_opts o = { .brokers = 1, .topics = 1, .partitions = 1, .zk_migration = true, .seed = 1,
                      .broker_host = "127.0.0.1", .broker_ports = ports };
    km_err err;
    cr_assert(km_gen_write(dir, &o, NULL, &err) > 0, "%s", err.msg);
    char *argv[] = { (char *)km_test_binary(), "verify", "--json", "--metadata", dir, NULL };
    char *out = NULL, *errs = NULL;
    int rc = km_test_run(argv, NULL, 0, &out, NULL, &errs);
    cr_assert_eq(rc, 2, "exit %d: %s %s", rc, out, errs);
    json_error_t jerr;
    json_t *rep = json_loads(out, 0, &jerr);
    cr_assert(rep, "not JSON: %s", out);
    cr_assert_str_eq(json_string_value(json_object_get(rep, "verdict")), "unchecked");
    cr_assert_eq(json_array_size(json_object_get(rep, "unchecked")), 1);
    cr_assert(json_is_false(json_object_get(json_array_get(json_object_get(rep, "brokers"), 0), "reachable")));
    json_decref(rep);
    free(out);
    free(errs);
    km_test_rmtree(dir);
    free(dir);
}

/* Bad usage is exit 2 with the usage, not a check. */
static void assert_usage(char *const argv[])
{
    char *out = NULL, *errs = NULL;
    cr_assert_eq(km_test_run(argv, NULL, 0, &out, NULL, &errs), 2);
    cr_assert(strstr(errs, "usage: kmproxy verify"), "%s", errs);
    free(out);
    free(errs);
}

Test(verify_fake, no_metadata_is_bad_usage)
{
    char *argv[] = { (char *)km_test_binary(), "verify", NULL };
    assert_usage(argv);
}

/* The image comes from one place: a log on disk or the controllers, not both. */
Test(verify_fake, metadata_and_bootstrap_server_together_is_bad_usage)
{
    char *argv[] = { (char *)km_test_binary(), "verify", "--metadata", "/nonexistent", "--bootstrap-server",
                     "127.0.0.1:1", NULL };
    assert_usage(argv);
}

/* Controllers that cannot be reached: exit 2 naming them, no report. */
Test(verify_fake, unreachable_controllers_exit_2)
{
    uint16_t port;
    close(listen_any(&port));
    char servers[64];
    snprintf(servers, sizeof servers, "127.0.0.1:%u", port);
    char *argv[] = { (char *)km_test_binary(), "verify", "--bootstrap-server", servers, "--timeout", "1", NULL };
    char *out = NULL, *errs = NULL;
    int rc = km_test_run(argv, NULL, 0, &out, NULL, &errs);
    cr_assert_eq(rc, 2, "exit %d: %s %s", rc, out, errs);
    cr_assert(strstr(errs, "could not check") && strstr(errs, servers) && !strstr(out, "verdict"), "%s / %s", out,
              errs);
    free(out);
    free(errs);
}

/* ---- a broker answering from an image, with one partition's ISR changed: isr_differs ---- */

Test(verify_fake, same_epoch_other_isr_is_isr_differs)
{
    uint16_t port;
    int lfd = listen_any(&port);
    char *dir = km_test_tmpdir("verify-fake-isr");
    km_image *img = km_image_new();
    km_gen_opts o = { .brokers = 1, .topics = 2, .partitions = 2, .zk_migration = true, .seed = 3,
                      .broker_host = "127.0.0.1", .broker_ports = &port };
    km_err err;
    cr_assert(km_gen_write(dir, &o, img, &err) > 0, "%s", err.msg);
    pid_t parent = getpid(), server = fork();
    if (server == 0) {
        km_test_die_with_parent(parent);
        for (;;) {
            int c = accept(lfd, NULL, NULL);
            while (c >= 0 && vf_answer_one(c, img, port, VF_ISR_DIFFERS))
                ;
            close(c);
        }
    }
    char *argv[] = { (char *)km_test_binary(), "verify", "--json", "--metadata", dir, "--timeout", "5", NULL };
    char *out = NULL, *errs = NULL;
    int rc = km_test_run(argv, NULL, 0, &out, NULL, &errs);
    kill(server, SIGKILL);
    waitpid(server, NULL, 0);
    cr_assert_eq(rc, 1, "exit %d\nstdout: %s\nstderr: %s", rc, out, errs);
    json_error_t jerr;
    json_t *rep = json_loads(out, 0, &jerr), *f = json_array_get(json_object_get(rep, "findings"), 0);
    cr_assert(json_array_size(json_object_get(rep, "findings")) == 1 &&
                  !strcmp(json_string_value(json_object_get(f, "class")), "isr_differs") &&
                  !strcmp(json_string_value(json_object_get(f, "topic")), "topic-0") &&
                  json_integer_value(json_object_get(f, "partition")) == 0,
              "want exactly one isr_differs on topic-0-0: %s", out);
    json_decref(rep);
    free(out);
    free(errs);
    km_image_free(img);
    km_test_rmtree(dir);
    free(dir);
    close(lfd);
}
