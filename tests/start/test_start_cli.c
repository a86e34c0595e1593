/* `kmproxy run` / `kmproxy proxy` command lines (issue 18 item 10): one --config, no stray operand,
 * every --set after the file with the later of two winning (Kafka's --override), and errors that
 * never put a raw control byte on the operator's terminal. */
#include "km_testsupport.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int run_cli(const char *const *args, char **err)
{
    char *argv[16] = {(char *)km_test_binary()};
    int n = 1;
    for (; args[n - 1] && n < 15; n++)
        argv[n] = (char *)args[n - 1];
    argv[n] = NULL;
    char *out = NULL;
    int rc = km_test_run(argv, NULL, 0, &out, NULL, err);
    free(out);
    return rc;
}

static char *write_props(const char *dir, const char *name, const char *text)
{
    char *path = NULL;
    cr_assert(asprintf(&path, "%s/%s", dir, name) > 0);
    FILE *f = fopen(path, "w");
    cr_assert(f);
    fputs(text, f);
    fclose(f);
    return path;
}

static void expect_refused(const char *const *args, const char *named)
{
    char *err = NULL;
    int rc = run_cli(args, &err);
    cr_expect_eq(rc, 2, "%s ... %s: exit %d, stderr %s", args[0], named, rc, err);
    cr_expect(strstr(err, named), "stderr does not name '%s': %s", named, err);
    free(err);
}

Test(start_cli, a_second_config_and_a_stray_operand_are_refused)
{
    char *dir = km_test_tmpdir("startcli");
    char *a = write_props(dir, "a.properties", "log.level=info\n");
    char *b = write_props(dir, "b.properties", "log.level=debug\n");
    const char *twice[] = {"run", "--config", a, "--config", b, NULL};
    expect_refused(twice, "--config is given twice");
    const char *stray[] = {"run", "--config", a, b, NULL};
    expect_refused(stray, "unexpected argument");
    const char *stray_proxy[] = {"proxy", "--config", a, "extra", NULL};
    expect_refused(stray_proxy, "unexpected argument 'extra'");
    km_test_rmtree(dir);
    free(a), free(b), free(dir);
}

Test(start_cli, set_applies_after_the_file_and_the_later_set_wins)
{
    char *dir = km_test_tmpdir("startcli");
    char *f = write_props(dir, "dir.properties", "metadata.source=dir\nzookeeper.connect=127.0.0.1:1\n");
    /* --set before --config still overrides the file: quorum needs its bootstrap servers */
    const char *before[] = {"run", "--set", "metadata.source=quorum", "--config", f, NULL};
    expect_refused(before, "metadata.source=quorum needs controller.quorum.bootstrap.servers");
    /* only the later of two --set of one key is taken: the bad first value is never read */
    const char *later[] = {"run", "--set", "log.level=loud", "--set", "log.level=info", "--config", f, NULL};
    expect_refused(later, "metadata.dir is required");
    const char *later_bad[] = {"run", "--set", "log.level=info", "--set", "log.level=loud", NULL};
    expect_refused(later_bad, "log.level must be error, warn, info or debug, not 'loud'");
    km_test_rmtree(dir);
    free(f), free(dir);
}

Test(start_cli, control_bytes_in_errors_are_escaped)
{
    char *dir = km_test_tmpdir("startcli");
    char *f = write_props(dir, "esc.properties", "log.level=\x1b]0;owned\x07\n");
    const char *from_file[] = {"run", "--config", f, NULL};
    const char *from_set[] = {"run", "--set", "log.level=\x1b[31mred", NULL};
    const char *const *lines[] = {from_file, from_set};
    for (int i = 0; i < 2; i++) {
        char *err = NULL;
        cr_expect_eq(run_cli(lines[i], &err), 2);
        for (const char *p = err; *p; p++)
            cr_expect(*p == '\n' || (unsigned char)*p >= 0x20, "raw control byte 0x%02x on stderr: %s",
                      (unsigned char)*p, err);
        cr_expect(strstr(err, "\\x1b"), "the escape byte is not shown as \\x1b: %s", err);
        free(err);
    }
    km_test_rmtree(dir);
    free(f), free(dir);
}
