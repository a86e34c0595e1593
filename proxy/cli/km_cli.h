/* km_cli.h - the kmproxy subcommands, one entry point each (argv[0] is the subcommand).
 * Exit codes: 0 success, 1 runtime failure, 2 bad usage or bad input. */
#ifndef KM_CLI_H
#define KM_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* Weak, so a command whose module has not landed yet reads "not available" instead of breaking the link. */
#define KM_CLI_ENTRY __attribute__((weak))
KM_CLI_ENTRY int km_cli_wire(int argc, char **argv);      /* proxy/cli_wire.c */
KM_CLI_ENTRY int km_cli_metadata(int argc, char **argv);  /* proxy/cli_metadata.c */
KM_CLI_ENTRY int km_cli_zk(int argc, char **argv);        /* proxy/cli_zk.c */
KM_CLI_ENTRY int km_cli_demo(int argc, char **argv);      /* proxy/cli_demo.c */
KM_CLI_ENTRY int km_cli_run(int argc, char **argv);       /* proxy/cli_run.c: the daemon */
KM_CLI_ENTRY int km_cli_proxy(int argc, char **argv);     /* proxy/cli/cli_proxy.c: the inline proxy alone */
KM_CLI_ENTRY int km_cli_capture(int argc, char **argv);   /* proxy/cli/cli_capture.c: capture read */
KM_CLI_ENTRY int km_cli_config(int argc, char **argv);    /* proxy/cli/cli_config.c: config docs */
KM_CLI_ENTRY int km_cli_status(int argc, char **argv);
KM_CLI_ENTRY int km_cli_verify(int argc, char **argv);    /* proxy/cli/cli_verify.c: brokers against the image */    /* proxy/cli/cli_status.c: GET /status of a daemon */

/* kmproxy --version: version, git commit, the Kafka versions spoken (proxy/cli/cli_version.c). */
void km_cli_version(FILE *to);

struct km_config;
struct km_err;
/* One --set key=value onto a configuration (proxy/cli/cli_config.c). 0, or -1 + err. */
int km_cli_apply_set(struct km_config *cfg, char *kv, struct km_err *err);
/* Defaults, then the --config FILE (given once), then every --set key=value in order (the later
 * of two for one key wins, as Kafka's --override), or --help; an operand is refused.  0: go on; 1: usage
 * printed on stdout (exit 0); 2: bad usage or configuration, said on stderr.  The caller frees
 * cfg in every case. */
int km_cli_read_config(int argc, char **argv, const char *cmd, void (*usage)(FILE *), struct km_config *cfg);
/* The same configuration read again from the same line (SIGHUP), saying nothing: 0, or -1 + err. */
int km_cli_reread_config(int argc, char **argv, struct km_config *cfg, struct km_err *err);

/* A whole decimal option value in [lo, hi]: no trailing text, no overflow. 0, or -1 (proxy/cli_args.c). */
int km_cli_parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out);
/* True when "--help" is among argv[1..] (before a "--"): every command and subcommand then prints
 * its usage on stdout and exits 0, whatever else the line holds. */
bool km_cli_wants_help(int argc, char **argv);
/* "kmproxy CMD: MSG" with every control byte of msg shown as \xNN (proxy/cli/cli_args.c). */
void km_cli_print_error(FILE *to, const char *cmd, const char *msg);

#endif
