/* cli_verify.c - `kmproxy verify`: every broker's metadata cache and replica state against the KRaft image
 * (km_verify.h).  Exit 0 all consistent, 1 inconsistent, 2 could not check (or bad usage). */
#include "cli_quorum.h"
#include "km_cli.h"
#include "km_config.h"
#include "km_image.h"
#include "km_verify.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void usage(FILE *to)
{
    fprintf(to,
            "usage: kmproxy verify --metadata PATH [--listener NAME] [--timeout S] [--json]\n"
            "       kmproxy verify --bootstrap-server HOST:PORT[,...] [--cluster-id ID] [--command-config FILE] ...\n"
            "Asks every broker the image registers (ZK-mode and KRaft-mode), one connection each, for its\n"
            "metadata cache (Metadata v12) and replica state (ListOffsets v7 at the image's leader epoch to the\n"
            "image's leader, without an epoch to any broker claiming leadership) and compares them with the\n"
            "image of PATH (a log segment, a .checkpoint file or a __cluster_metadata-0 directory), or the image\n"
            "fetched as an observer from the controllers (--bootstrap-server, --command-config as `metadata dump`\n"
            "takes them) up to the quorum's high watermark.\n"
            "Findings: metadata_stale, replica_stale, stale_leader (with the truncation point on the image's\n"
            "leader, the offsets exposed and the producers on both sides), isr_differs, stray_log (asked only of\n"
            "a broker with another finding).  When a broker knows newer state than the image\n"
            "the image is read again once.\n"
            "--listener NAME  the broker endpoint to use (default: each broker's first registered one)\n"
            "--timeout S      per broker, connect and each answer (default 10); fetching the image from the\n"
            "                 controllers may take 3 times that\n"
            "--broker-config FILE  how to reach the brokers, with the daemon's keys in a kmproxy configuration file:\n"
            "                 broker.security.protocol (SSL, SASL_PLAINTEXT, SASL_SSL), broker.tls.*, broker.sasl.*\n"
            "                 and broker.listener (the default listener then, instead of each broker's first);\n"
            "                 the daemon's other keys are ignored\n"
            "--json           the report as JSON\n"
            "--zookeeper HOST:PORT[/chroot]  also the dual-write lag: /migration's kraft_metadata_offset against\n"
            "                 the controllers' last committed offset (the high watermark the fetch reached, or the\n"
            "                 last offset of PATH) - Kafka's ZkWriteBehindLag reads 0 when its driver is wedged\n"
            "--watch-seconds N  with --zookeeper: read the log and /migration again N seconds later; the log past\n"
            "                 /migration's offset while /migration did not move is a stalled driver (KAFKA-21062)\n"
            "--max-lag N      with --zookeeper: a lag beyond N records is inconsistent (default: no threshold)\n"
            "Exit: 0 every broker consistent, 1 inconsistent (or a stalled driver, a lag beyond --max-lag), 2 could not check (named on stderr) or bad usage.\n");
}

typedef struct verify_cli {
    const char *metadata, *servers, *cluster_id, *command_config, *zookeeper, *broker_config;
    km_config_broker_security sec; /* from --broker-config */
    double watch_s;  /* 0: /migration read once */
    long long max_lag; /* -1: none */
    km_verify_opts opts;
    bool json;
} verify_cli;

static int parse(int argc, char **argv, verify_cli *c)
{
    static const struct option longs[] = {
        {"metadata", required_argument, NULL, 'm'}, {"listener", required_argument, NULL, 'l'},
        {"timeout", required_argument, NULL, 't'},  {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},           {"bootstrap-server", required_argument, NULL, 'b'},
        {"cluster-id", required_argument, NULL, 'c'}, {"command-config", required_argument, NULL, 'C'},
        {"zookeeper", required_argument, NULL, 'z'},  {"watch-seconds", required_argument, NULL, 'w'},
        {"max-lag", required_argument, NULL, 'L'},    {"broker-config", required_argument, NULL, 'B'},
        {0},
    };
    optind = 1;
    c->max_lag = -1;
    for (int ch; (ch = getopt_long(argc, argv, "", longs, NULL)) != -1;) {
        char *end;
        switch (ch) {
        case 'm': c->metadata = optarg; break;
        case 'b': c->servers = optarg; break;
        case 'c': c->cluster_id = optarg; break;
        case 'C': c->command_config = optarg; break;
        case 'l': c->opts.listener = optarg; break;
        case 'j': c->json = true; break;
        case 'h': usage(stdout); return 1;
        case 'z': c->zookeeper = optarg; break;
        case 'B': c->broker_config = optarg; break;
        case 'w':
            c->watch_s = strtod(optarg, &end);
            if (*end || !(c->watch_s > 0 && c->watch_s <= 3600)) {
                km_cli_print_error(stderr, "verify", "--watch-seconds takes seconds in (0, 3600]");
                return 2;
            }
            break;
        case 'L':
            c->max_lag = strtoll(optarg, &end, 10);
            if (*end || !*optarg || c->max_lag < 0) {
                km_cli_print_error(stderr, "verify", "--max-lag takes a number of records >= 0");
                return 2;
            }
            break;
        case 't':
            c->opts.timeout_s = strtod(optarg, &end);
            if (*end || !(c->opts.timeout_s > 0 && c->opts.timeout_s <= 3600)) {
                km_cli_print_error(stderr, "verify", "--timeout takes seconds in (0, 3600]");
                return 2;
            }
            break;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc || !c->metadata == !c->servers || (!c->zookeeper && (c->watch_s > 0 || c->max_lag >= 0))) {
        usage(stderr);
        return 2;
    }
    return 0;
}

static km_image *load(const verify_cli *c)
{
    km_image *img = km_image_new();
    km_err err = {{0}};
    double timeout = c->opts.timeout_s > 0 ? 3 * c->opts.timeout_s : 30;
    int rc = !img ? -1
             : c->metadata ? (km_image_load(img, c->metadata, NULL, &err) < 0 ? -1 : 0)
                           : km_cli_quorum_image(c->servers, c->cluster_id, c->command_config, timeout, img, &err);
    if (rc < 0) {
        fprintf(stderr, "kmproxy verify: could not check: %s: %s\n", c->metadata ? c->metadata : c->servers,
                err.msg[0] ? err.msg : "out of memory");
        km_image_free(img);
        return NULL;
    }
    return img;
}

/* Runs the check; once more on a fresh image when a broker was ahead of it. */
static int check(const verify_cli *c, json_t **report)
{
    for (int round = 0; round < 2; round++) {
        km_image *img = load(c);
        if (!img)
            return -1;
        km_err err;
        json_decref(*report);
        *report = NULL;
        int rc = km_verify_run(img, &c->opts, report, &err);
        km_image_free(img);
        if (rc < 0) {
            fprintf(stderr, "kmproxy verify: could not check: %s\n", err.msg);
            return -1;
        }
        if (!json_is_true(json_object_get(*report, "image_behind")))
            return rc;
    }
    return (int)json_integer_value(json_object_get(*report, "exit"));
}

static int read_migration(const verify_cli *c, km_verify_migration *m)
{
    km_err err;
    if (km_verify_read_migration(c->zookeeper, c->opts.timeout_s, m, &err) == 0)
        return 0;
    fprintf(stderr, "kmproxy verify: could not check: %s\n", err.msg);
    return -1;
}

/* The second reading of --watch-seconds: the log first, then /migration, so a driver that keeps up has had
 * the time to record what the log reached. */
static int watch(const verify_cli *c, km_verify_dual *d)
{
    struct timespec wait = { (time_t)c->watch_s, (long)((c->watch_s - (double)(time_t)c->watch_s) * 1e9) };
    while (nanosleep(&wait, &wait) < 0 && errno == EINTR) {
    }
    km_image *img = load(c);
    if (!img)
        return -1;
    d->high_watermark_after = km_image_offset(img);
    km_image_free(img);
    d->watched = true;
    d->watch_seconds = c->watch_s;
    return read_migration(c, &d->after);
}

/* --zookeeper: /migration read before the log (the log's offset is then at least what the driver had seen),
 * the report's image offset as the high watermark. */
static int dual_write(const verify_cli *c, const km_verify_migration *first, json_t *report)
{
    km_verify_dual d = { .high_watermark = json_integer_value(json_object_get(json_object_get(report, "image"),
                                                                              "offset")),
                         .source = c->servers ? "quorum" : "metadata_file", .first = *first,
                         .max_lag = c->max_lag };
    if (c->watch_s > 0 && watch(c, &d) < 0)
        return -1;
    int rc = km_verify_dual_write(report, &d);
    if (rc < 0)
        fprintf(stderr, "kmproxy verify: could not check: out of memory\n");
    return rc;
}

/* --broker-config: the daemon's broker.* security keys resolved as the broker channels resolve them. */
static int broker_security(verify_cli *c)
{
    if (!c->broker_config)
        return 0;
    km_config cfg;
    km_config_defaults(&cfg);
    km_err err = {{0}};
    int rc = km_config_load(&cfg, c->broker_config, &err) || km_config_check_files(&cfg, &err) ||
             km_config_resolve_broker_security(&cfg, &c->sec, &err) ? -1 : 0;
    if (rc == 0 && c->sec.tls) {
        km_tls_config tc = {.ca_file = cfg.broker_tls_ca, .cert_file = cfg.broker_tls_cert,
                            .key_file = cfg.broker_tls_key, .no_name_check = !c->sec.verify_name};
        rc = (c->opts.tls = km_tls_client_ctx_new(&tc, &err)) ? 0 : -1;
    }
    km_config_free(&cfg);
    if (rc < 0) {
        bool named = !strncmp(err.msg, c->broker_config, strlen(c->broker_config)); /* the loader's own errors */
        fprintf(stderr, "kmproxy verify: %s%s%s\n", named ? "" : c->broker_config, named ? "" : ": ", err.msg);
        return -1;
    }
    if (!c->opts.listener)
        c->opts.listener = c->sec.listener;
    c->opts.mechanism = c->sec.mechanism;
    c->opts.username = c->sec.username;
    c->opts.password = c->sec.password;
    return 0;
}

static int run(verify_cli *c)
{
    int rc;
    json_t *report = NULL;
    km_verify_migration first;
    if (c->zookeeper && read_migration(c, &first) < 0)
        return KM_VERIFY_UNCHECKED;
    rc = check(c, &report);
    if (rc >= 0 && c->zookeeper)
        rc = dual_write(c, &first, report);
    if (rc < 0) {
        json_decref(report); /* check() frees its own on failure; dual_write's failure leaves it here */
        return KM_VERIFY_UNCHECKED;
    }
    if (c->json) {
        json_dumpf(report, stdout, JSON_INDENT(2));
        fputc('\n', stdout);
    } else {
        km_verify_print(stdout, report);
    }
    size_t i;
    json_t *u;
    json_array_foreach(json_object_get(report, "unchecked"), i, u)
        fprintf(stderr, "kmproxy verify: could not check broker %lld: %s\n",
                (long long)json_integer_value(json_object_get(u, "broker")),
                json_string_value(json_object_get(u, "why")));
    json_decref(report);
    return rc;
}

int km_cli_verify(int argc, char **argv)
{
    verify_cli c = {0};
    int rc = parse(argc, argv, &c);
    if (rc)
        return rc == 1 ? 0 : 2;
    rc = broker_security(&c) < 0 ? 2 : run(&c);
    km_tls_ctx_free(c.opts.tls);
    km_config_broker_security_clear(&c.sec);
    return rc;
}
