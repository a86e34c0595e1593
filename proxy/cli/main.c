/* kmproxy: subcommand dispatch. */
#include "km_cli.h"

#include <stdio.h>
#include <string.h>

typedef struct km_subcommand {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} km_subcommand;

static const km_subcommand SUBCOMMANDS[] = {
    {"wire", km_cli_wire, "decode/encode one Kafka message body as JSON"},
    {"metadata", km_cli_metadata, "dump, inspect or generate a KRaft __cluster_metadata log"},
    {"zk", km_cli_zk, "mirror a KRaft metadata image into ZooKeeper (sync, diff)"},
    {"run", km_cli_run, "the daemon: follow the metadata log, keep ZooKeeper and ZK-mode brokers in step"},
    {"proxy", km_cli_proxy, "the inline Kafka proxy alone: listeners per broker, address rewriting"},
    {"capture", km_cli_capture, "print a JSON-lines capture as a person reads it (read FILE [--api] [--broker])"},
    {"config", km_cli_config, "the configuration keys: docs prints every key as Markdown"},
    {"status", km_cli_status, "the migration at a glance from a running daemon (--url http://HOST:PORT, --json, --check)"},
    {"verify", km_cli_verify, "check every broker's metadata cache and replica state against the KRaft image"},
    {"demo", km_cli_demo, "run the end-to-end demo on an embedded default"},
};
#define N_SUBCOMMANDS (sizeof SUBCOMMANDS / sizeof SUBCOMMANDS[0])

static void usage(FILE *to)
{
    fprintf(to, "usage: kmproxy <command> [options]\n       kmproxy --help | --version\n\ncommands:\n");
    for (size_t i = 0; i < N_SUBCOMMANDS; i++)
        fprintf(to, "  %-10s %s\n", SUBCOMMANDS[i].name, SUBCOMMANDS[i].summary);
    fprintf(to, "\n'kmproxy <command> --help' describes a command.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        km_cli_version(stdout);
        return 0;
    }
    for (size_t i = 0; i < N_SUBCOMMANDS; i++) {
        if (strcmp(argv[1], SUBCOMMANDS[i].name))
            continue;
        if (!SUBCOMMANDS[i].run) {
            fprintf(stderr, "kmproxy: '%s' is not available in this build yet\n", argv[1]);
            return 1;
        }
        return SUBCOMMANDS[i].run(argc - 1, argv + 1);
    }
    fprintf(stderr, "kmproxy: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
