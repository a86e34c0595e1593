/* --config FILE / --set key=value, shared by the commands that read the daemon's properties. */
#include "km_cli.h"
#include "km_config.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>

int km_cli_apply_set(km_config *cfg, char *kv, km_err *err)
{
    char *eq = strchr(kv, '=');
    if (!eq)
        return km_fail(err, "--set %s: expected key=value", kv);
    *eq = '\0';
    int rc = km_config_set(cfg, kv, eq + 1, "--set", err);
    *eq = '=';
    return rc;
}

/* The file first, then every --set in the order given, wherever it stood on the line: a --set
 * always overrides the file, and of two --set of one key the later wins, as Kafka's own
 * `kafka-server-start.sh FILE --override k=v` does (kafka.Kafka.getPropsFromArgs puts the
 * overrides into one Properties in order). */
static bool set_again_later(char **sets, int i, int n_sets)
{
    size_t key_len = strcspn(sets[i], "=");
    if (!sets[i][key_len])
        return false; /* not key=value: refused as such */
    for (int j = i + 1; j < n_sets; j++)
        if (strcspn(sets[j], "=") == key_len && !strncmp(sets[i], sets[j], key_len))
            return true;
    return false;
}

static int apply(km_config *cfg, const char *file, char **sets, int n_sets, km_err *err)
{
    if (file && km_config_load(cfg, file, err))
        return -1;
    for (int i = 0; i < n_sets; i++)
        if (!set_again_later(sets, i, n_sets) && km_cli_apply_set(cfg, sets[i], err))
            return -1;
    return 0;
}

static int refuse(const char *cmd, void (*usage)(FILE *), const char *fmt, const char *what)
{
    char msg[512];
    snprintf(msg, sizeof msg, fmt, what);
    km_cli_print_error(stderr, cmd, msg);
    usage(stderr);
    return 2;
}

int km_cli_read_config(int argc, char **argv, const char *cmd, void (*usage)(FILE *), km_config *cfg)
{
    static const struct option longopts[] = {
        {"config", required_argument, 0, 'c'}, {"set", required_argument, 0, 's'}, {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    km_config_defaults(cfg);
    const char *file = NULL;
    char **sets = calloc((size_t)argc + 1, sizeof *sets);
    int n_sets = 0, rc = 0;
    optind = 1;
    for (int c; !rc && sets && (c = getopt_long(argc, argv, "", longopts, NULL)) != -1;) {
        if (c == 'h') {
            usage(stdout);
            rc = 1;
        } else if (c == 'c' && file) { /* which file was meant is anyone's guess: neither is taken */
            rc = refuse(cmd, usage, "--config is given twice (%s): give one file", optarg);
        } else if (c == 'c') {
            file = optarg;
        } else if (c == 's') {
            sets[n_sets++] = optarg;
        } else {
            usage(stderr);
            rc = 2;
        }
    }
    if (!rc && sets && optind < argc) /* kmproxy run takes no operands: a stray word is a mistake */
        rc = refuse(cmd, usage, "unexpected argument '%s' (the file is given with --config FILE)", argv[optind]);
    km_err err = {{0}};
    if (!sets)
        rc = (km_cli_print_error(stderr, cmd, "out of memory"), 2);
    else if (!rc && apply(cfg, file, sets, n_sets, &err))
        rc = (km_cli_print_error(stderr, cmd, err.msg), 2);
    free(sets);
    return rc;
}
