/* Run by test_hygiene, not by ctest: one test that leaves a temp dir behind, and with
 * KM_HYGIENE_LEAK set, loses memory (a leak LeakSanitizer reports at the worker's exit). */
#include "km_testsupport.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *volatile kept;

/* On a thread of its own: tests/lsan.supp suppresses leaks with Criterion's frames on the stack. */
static void *lose_memory(void *arg)
{
    (void)arg;
    kept = malloc(64);
    memset(kept, 1, 64);
    kept = NULL; /* lost: a leak */
    return NULL;
}

Test(hygiene_helper, leaves_a_dir_behind)
{
    char *dir = km_test_tmpdir("left-behind"), path[600];
    cr_assert(dir);
    snprintf(path, sizeof path, "%s/file", dir);
    FILE *f = fopen(path, "w");
    cr_assert(f);
    fclose(f);
    free(dir);
    pthread_t t;
    if (getenv("KM_HYGIENE_LEAK")) {
        cr_assert_eq(pthread_create(&t, NULL, lose_memory, NULL), 0);
        pthread_join(t, NULL);
    }
}
