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

/* A message may quote a configuration value or file line byte for byte: a control byte in it
 * (an escape sequence) must not reach the terminal as such, so it is shown as \xNN. */
void km_cli_print_error(FILE *to, const char *cmd, const char *msg)
{
    fprintf(to, "kmproxy %s: ", cmd);
    for (const unsigned char *p = (const unsigned char *)msg; *p; p++) {
        if (*p < 0x20 || *p == 0x7f)
            fprintf(to, "\\x%02x", *p);
        else
            fputc(*p, to);
    }
    fputc('\n', to);
}
