/* kmproxy-brokersim as the demo runs it: a process with --port/--broker-id/--max-version/
 * --state-dump, answering over a real socket and dumping its state as JSON. */
#include "km_broker.h"
#include "km_testsupport.h"
#include "test_broker_client.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static pid_t spawn(char *const argv[], FILE **out)
{
    int fds[2];
    cr_assert(!pipe(fds));
    pid_t parent = getpid(), pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        km_test_die_with_parent(parent);
        dup2(fds[1], 1);
        close(fds[0]);
        execv(argv[0], argv);
        _exit(127);
    }
    close(fds[1]);
    *out = fdopen(fds[0], "r");
    return pid;
}

Test(broker_simexe, serves_and_dumps_state, .timeout = 60)
{
    char *dir = km_test_tmpdir("bsimexe");
    char dump[512];
    snprintf(dump, sizeof dump, "%s/state.json", dir);
    char *argv[] = { KM_BSIM_BINARY, "--port", "0", "--broker-id", "3", "--broker-epoch", "12",
                     "--max-version", "LeaderAndIsr=2,UpdateMetadata=5", "--state-dump", dump, NULL };
    FILE *out;
    pid_t pid = spawn(argv, &out);
    char line[256] = "";
    cr_assert(fgets(line, sizeof line, out), "no output from the simulator");
    unsigned port = 0;
    cr_assert_eq(sscanf(line, "listening on 127.0.0.1:%u", &port), 1, "%s", line);
    int fd = tbc_connect((uint16_t)port);
    cr_assert(fd >= 0);

    km_arena a;
    km_arena_init(&a, 0);
    static const int32_t reps[] = { 3, 1 };
    km_bp_part p = { .topic = "demo", .partition = 0, .controller_epoch = 1, .leader = 3, .leader_epoch = 2,
                     .partition_epoch = 2, .isr = { reps, 2 }, .replicas = { reps, 2 } };
    km_bp_ctl c = { .controller_id = 3000, .controller_epoch = 9, .broker_epoch = 12, .kraft = true };
    km_leader_and_isr_request rq;
    km_err err;
    cr_assert(!km_bp_leader_and_isr(2, &c, &p, 1, NULL, 0, "PLAINTEXT", &a, &rq, &err), "%s", err.msg);
    km_leader_and_isr_response rs;
    cr_assert(tbc_call(fd, KM_API_LEADER_AND_ISR, 2, &rq, &rs, &a));
    cr_assert_eq(rs.error_code, 0);
    /* above its advertised maximum: the process closes the connection */
    cr_assert(tbc_send(fd, KM_API_LEADER_AND_ISR, 3, 9, &rq));
    cr_assert(tbc_closed(fd));
    close(fd);

    json_error_t je;
    json_t *st = json_load_file(dump, 0, &je);
    cr_assert(st, "%s: %s", dump, je.text);
    cr_assert_eq(json_integer_value(json_object_get(st, "brokerId")), 3);
    cr_assert_eq(json_integer_value(json_object_get(st, "controllerEpoch")), 9);
    json_t *part = json_array_get(json_object_get(st, "partitions"), 0);
    cr_assert_str_eq(json_string_value(json_object_get(part, "topic")), "demo");
    cr_assert_eq(json_integer_value(json_object_get(part, "leader")), 3);
    cr_assert_eq(json_integer_value(json_object_get(st, "rejected")), 1);
    json_decref(st);

    kill(pid, SIGTERM);
    int status = 0;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d", status);
    fclose(out);
    km_arena_free(&a);
    km_test_rmtree(dir);
    free(dir);
}

/* The security options are checked at start-up, naming what is wrong. */
Test(broker_simexe, security_options_are_checked, .timeout = 60)
{
    char *out, *err;
    size_t n;
    char *gssapi[] = { KM_BSIM_BINARY, "--port", "0", "--sasl-mechanisms", "PLAIN,GSSAPI", NULL };
    cr_assert_eq(km_test_run(gssapi, NULL, 0, &out, &n, &err), 2);
    cr_assert(strstr(err, "SASL mechanism 'GSSAPI' is not supported"), "%s", err);
    free(out);
    free(err);
    char *users[] = { KM_BSIM_BINARY, "--port", "0", "--sasl-mechanisms", "SCRAM-SHA-256", "--sasl-users",
                      "kmproxy", "--authorizer", "--super-users", "User:kmproxy", NULL };
    cr_assert_eq(km_test_run(users, NULL, 0, &out, &n, &err), 1);
    cr_assert(strstr(err, "SASL user 'kmproxy' is not user:password"), "%s", err);
    free(out);
    free(err);
}
