/* Test hygiene (issue 18, tests): a test binary's run leaves nothing in $TMPDIR even when a test
 * forgets its temp dir, and a sanitizer report in a run fails it (a leak used to print and pass).
 * Checked on a helper binary (hygiene_helper.c) run with a fresh TMPDIR. */
#include "km_testsupport.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int entries(const char *dir)
{
    DIR *d = opendir(dir);
    cr_assert(d, "%s", dir);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return n;
}

static int run_helper(const char *tmp, bool leak, char **err)
{
    setenv("TMPDIR", tmp, 1);
    unsetenv("BXFI_MAP"); /* Criterion's worker marker: the helper must run as a test binary of its own */
    if (leak)
        setenv("KM_HYGIENE_LEAK", "1", 1);
    else
        unsetenv("KM_HYGIENE_LEAK");
    char *argv[] = {KM_HYGIENE_HELPER, "--jobs", "1", NULL};
    char *out = NULL;
    int rc = km_test_run(argv, NULL, 0, &out, NULL, err);
    free(out);
    return rc;
}

Test(hygiene, a_run_leaves_nothing_in_tmpdir)
{
    char *tmp = km_test_tmpdir("hygiene");
    char *err = NULL;
    int rc = run_helper(tmp, false, &err);
    cr_expect_eq(rc, 0, "helper exit %d: %s", rc, err);
    cr_expect_eq(entries(tmp), 0, "the helper's run left %d entries in its TMPDIR %s", entries(tmp), tmp);
    free(err);
    km_test_rmtree(tmp);
    free(tmp);
}

Test(hygiene, a_sanitizer_report_fails_the_run)
{
#ifndef KM_TEST_UNDER_ASAN
    cr_skip_test("needs the ASan build (cmake -DKM_SANITIZE=ON): there is no report to see without it");
#endif
    char *tmp = km_test_tmpdir("hygiene");
    char *err = NULL;
    int rc = run_helper(tmp, true, &err);
    cr_expect_neq(rc, 0, "a run with a leak passed: %s", err);
    cr_expect(strstr(err, "LeakSanitizer") && strstr(err, "sanitizer report"), "%s", err);
    cr_expect_eq(entries(tmp), 0, "the run left entries in %s", tmp);
    free(err);
    km_test_rmtree(tmp);
    free(tmp);
}
