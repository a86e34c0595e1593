/* --config FILE / --set key=value, shared by the commands that read the daemon's properties. */
#include "km_cli.h"
#include "km_config.h"

#include <getopt.h>
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

int km_cli_read_config(int argc, char **argv, const char *cmd, void (*usage)(FILE *), km_config *cfg)
{
    static const struct option longopts[] = {
        {"config", required_argument, 0, 'c'}, {"set", required_argument, 0, 's'}, {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    km_config_defaults(cfg);
    km_err err = {{0}};
    optind = 1;
    for (int c; (c = getopt_long(argc, argv, "", longopts, NULL)) != -1;) {
        if (c == 'h') {
            usage(stdout);
            return 1;
        }
        int rc = c == 'c' ? km_config_load(cfg, optarg, &err) : c == 's' ? km_cli_apply_set(cfg, optarg, &err) : -2;
        if (rc == -2)
            usage(stderr);
        else if (rc)
            fprintf(stderr, "kmproxy %s: %s\n", cmd, err.msg);
        if (rc)
            return 2;
    }
    return 0;
}
