/* The operator's first commands: every command and subcommand answers --help on stdout with exit 0,
 * and every numeric option is parsed strictly ("3x" is refused, naming the option). */
#include "km_testsupport.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int run_cli(const char *const *args, char **out, char **err)
{
    char *argv[16] = {(char *)km_test_binary()};
    int n = 1;
    for (; args[n - 1] && n < 15; n++)
        argv[n] = (char *)args[n - 1];
    argv[n] = NULL;
    return km_test_run(argv, NULL, 0, out, NULL, err);
}

/* Each line: a command line, ending in --help. */
static const char *const HELP_LINES[][4] = {
    {"--help"},
    {"wire", "--help"},          {"wire", "decode", "--help"}, {"wire", "encode", "--help"},
    {"metadata", "--help"},      {"metadata", "dump", "--help"}, {"metadata", "image", "--help"},
    {"metadata", "gen", "--help"},      {"metadata", "quorum", "--help"},
    {"zk", "--help"},            {"zk", "sync", "--help"},     {"zk", "diff", "--help"},
    {"run", "--help"},           {"demo", "--help"},
};

Test(cli_help, every_command_and_subcommand_answers_help_on_stdout)
{
    for (size_t i = 0; i < sizeof HELP_LINES / sizeof HELP_LINES[0]; i++) {
        char *out = NULL, *err = NULL;
        int rc = run_cli(HELP_LINES[i], &out, &err);
        char line[128] = "";
        for (int k = 0; k < 4 && HELP_LINES[i][k]; k++)
            strcat(strcat(line, " "), HELP_LINES[i][k]);
        cr_expect_eq(rc, 0, "kmproxy%s exited %d; stderr: %s", line, rc, err);
        cr_expect(strstr(out, "usage:"), "kmproxy%s printed no usage on stdout (stdout '%s', stderr '%s')", line, out,
                  err);
        free(out);
        free(err);
    }
}

typedef struct bad_option {
    const char *args[12];
    const char *named;   /* what stderr must name */
} bad_option;

static const bad_option BAD[] = {
    {{"zk", "sync", "--zookeeper", "127.0.0.1:1", "--metadata", "/nonexistent", "--controller-id", "3x"},
     "--controller-id 3x"},
    {{"zk", "sync", "--zookeeper", "127.0.0.1:1", "--metadata", "/nonexistent", "--controller-epoch", "7e"},
     "--controller-epoch 7e"},
    {{"zk", "sync", "--zookeeper", "127.0.0.1:1", "--metadata", "/nonexistent", "--max-pending", "10k"},
     "--max-pending 10k"},
    {{"zk", "diff", "--zookeeper", "127.0.0.1:1", "--metadata", "/nonexistent", "--zookeeper-connect-timeout-ms",
      "5s"},
     "--zookeeper-connect-timeout-ms 5s"},
    {{"metadata", "gen", "--out", "/nonexistent", "--brokers", "3x"}, "3x"},
    {{"demo", "--brokers", "5x"}, "--brokers 5x"},
    {{"demo", "--leader-changes", "-1"}, "--leader-changes -1"},
};

Test(cli_help, numeric_options_are_parsed_strictly)
{
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        char *out = NULL, *err = NULL;
        int rc = run_cli(BAD[i].args, &out, &err);
        cr_expect_eq(rc, 2, "%s %s: exit %d, stderr %s", BAD[i].args[0], BAD[i].named, rc, err);
        cr_expect(strstr(err, BAD[i].named), "%s: stderr does not name '%s': %s", BAD[i].args[0], BAD[i].named, err);
        free(out);
        free(err);
    }
}
