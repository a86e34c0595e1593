/* kmproxy run: the daemon. */
#include "km_cli.h"
#include "km_daemon.h"

#include <ev.h>
#include <stdio.h>
#include <string.h>

static void run_usage(FILE *to)
{
    fprintf(to, "usage: kmproxy run [--config FILE] [--set key=value ...]\n"
                "  Follows the KRaft metadata log and keeps ZooKeeper and ZK-mode brokers in step.\n"
                "  --set applies after the file (of two for one key, the later wins); keys are those of deploy/kmproxy.properties.example.\n"
                "  On metrics.listen: /metrics, /healthz (alive) and /readyz (200 ready, 503 with the reasons).\n"
                "  SIGTERM/SIGINT: finish in-flight ZooKeeper writes (10 s at most) and exit 0; SIGHUP: reopen\n"
                "  log.file (a changed log.file: the new path) and reload the TLS material; other changed keys are\n"
                "  logged as needing a restart. ha.enabled=true: one active instance of several.\n");
}

typedef struct run_line {
    int argc;
    char **argv;
} run_line;

/* SIGHUP: the daemon compares what the same --config and --set say now with what it runs. */
static int reread(km_config *out, void *ud, km_err *err)
{
    const run_line *line = ud;
    return km_cli_reread_config(line->argc, line->argv, out, err);
}

int km_cli_run(int argc, char **argv)
{
    km_config cfg;
    km_err err = {{0}};
    int rc = km_cli_read_config(argc, argv, "run", run_usage, &cfg);
    if (rc) {
        km_config_free(&cfg);
        return rc == 1 ? 0 : rc;
    }
    struct ev_loop *loop = ev_default_loop(EVFLAG_AUTO);
    km_daemon *d = km_daemon_new(loop, &cfg, &err);
    km_config_free(&cfg);
    if (!d) {
        km_cli_print_error(stderr, "run", err.msg);
        return 2;
    }
    run_line line = {argc, argv};
    km_daemon_on_sighup_reread(d, reread, &line);
    rc = km_daemon_run(d);
    km_daemon_free(d);
    return rc;
}
