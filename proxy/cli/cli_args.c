/* Option values shared by the subcommands. */
#include "km_cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int km_cli_parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

bool km_cli_wants_help(int argc, char **argv)
{
    for (int i = 1; i < argc && strcmp(argv[i], "--"); i++)
        if (!strcmp(argv[i], "--help"))
            return true;
    return false;
}
