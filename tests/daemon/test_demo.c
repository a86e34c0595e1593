/* `kmproxy demo`: the whole product converges twice, and says so. */
#include "km_testsupport.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

Test(demo, converges_after_full_sync_and_live_changes)
{
    char *argv[] = {(char *)km_test_binary(), "demo", "--brokers", "3", "--topics", "6", "--partitions", "4",
                    "--leader-changes", "8", NULL};
    char *out, *err;
    size_t n;
    int rc = km_test_run(argv, NULL, 0, &out, &n, &err);
    cr_assert_eq(rc, 0, "demo failed:\n%s\n%s", out, err);
    cr_assert_eq(count(out, "zk diff: 0 missing in ZooKeeper, 0 different, 0 only in ZooKeeper"), 2, "%s", out);
    cr_assert_eq(count(out, "equal to the image"), 3 + 4, "%s", out);  /* 3 brokers, then 4 with the newcomer */
    cr_assert(strstr(out, "broker 4: 1 partitions, leader epochs and ISRs equal to the image"), "%s", out);
    cr_assert(strstr(out, "converged on the KRaft image, twice"), "%s", out);
    cr_assert_null(strstr(out, "DIFFER"), "%s", out);
    free(out);
    free(err);
}

Test(demo, bad_options_exit_2)
{
    char *argv[] = {(char *)km_test_binary(), "demo", "--brokers", "1", NULL};
    char *out, *err;
    size_t n;
    cr_assert_eq(km_test_run(argv, NULL, 0, &out, &n, &err), 2);
    cr_assert(strstr(err, "usage: kmproxy demo"), "%s", err);
    free(out);
    free(err);
}
