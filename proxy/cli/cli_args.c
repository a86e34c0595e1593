/* Option values shared by the subcommands. */
#include "km_cli.h"

#include <errno.h>
#include <stdlib.h>

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
