/* kmproxy run: the daemon. */
#include "km_cli.h"
#include "km_daemon.h"

#include <ev.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>

static void run_usage(FILE *to)
{
    fprintf(to, "usage: kmproxy run [--config FILE] [--set key=value ...]\n"
                "  Follows the KRaft metadata log and keeps ZooKeeper and ZK-mode brokers in step.\n"
                "  --set applies after the file; keys are those of deploy/kmproxy.properties.example.\n");
}

int km_cli_run(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"config", required_argument, 0, 'c'}, {"set", required_argument, 0, 's'}, {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    km_config cfg;
    km_config_defaults(&cfg);
    km_err err = {{0}};
    optind = 1;
    for (int c; (c = getopt_long(argc, argv, "", longopts, NULL)) != -1;) {
        if (c == 'h') {
            run_usage(stdout);
            km_config_free(&cfg);
            return 0;
        }
        int rc = c == 'c' ? km_config_load(&cfg, optarg, &err) : c == 's' ? km_cli_apply_set(&cfg, optarg, &err) : -2;
        if (rc) {
            if (rc == -2) run_usage(stderr);
            else fprintf(stderr, "kmproxy run: %s\n", err.msg);
            km_config_free(&cfg);
            return 2;
        }
    }
    struct ev_loop *loop = ev_default_loop(EVFLAG_AUTO);
    km_daemon *d = km_daemon_new(loop, &cfg, &err);
    km_config_free(&cfg);
    if (!d) {
        fprintf(stderr, "kmproxy run: %s\n", err.msg);
        return 2;
    }
    int rc = km_daemon_run(d);
    km_daemon_free(d);
    return rc;
}
