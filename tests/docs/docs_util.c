/* Helpers of the documentation tests (see docs_util.h). */
#include "docs_util.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *docs_slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    cr_assert(f, "cannot open %s", path);
    size_t cap = 1 << 16, n = 0;
    char *text = malloc(cap);
    for (size_t got; text && (got = fread(text + n, 1, cap - n - 1, f)) > 0;) {
        n += got;
        if (n + 1 == cap)
            text = realloc(text, cap *= 2);
    }
    fclose(f);
    cr_assert(text, "out of memory reading %s", path);
    text[n] = '\0';
    return text;
}

void docs_assert_same(const char *committed, const char *fresh, const char *what, const char *regenerate)
{
    if (!strcmp(committed, fresh))
        return;
    int line = 1;
    const char *a = committed, *b = fresh;
    for (; *a && *a == *b; a++, b++)
        line += *a == '\n';
    const char *ea = strchr(a, '\n'), *eb = strchr(b, '\n');
    while (a > committed && a[-1] != '\n')
        a--, b--;
    cr_assert_fail("%s is stale (line %d differs): run `%s` and commit it.\n  committed: %.*s\n  generated: %.*s", what,
                   line, regenerate, ea ? (int)(ea - a) : (int)strlen(a), a, eb ? (int)(eb - b) : (int)strlen(b), b);
}
