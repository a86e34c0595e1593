/* cli_verify.c - `kmproxy verify`: every broker's metadata cache and replica state against the KRaft image
 * (km_verify.h).  Exit 0 all consistent, 1 inconsistent, 2 could not check (or bad usage). */
#include "cli_quorum.h"
#include "km_cli.h"
#include "km_config.h"
#include "km_image.h"
#include "km_verify.h"
#include "km_zkbridge.h"

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
            "       kmproxy verify --config FILE [OPTIONS]\n"
            "Asks every broker the image registers (ZK-mode and KRaft-mode), one connection each, for its\n"
            "metadata cache (Metadata v12) and replica state (ListOffsets v7 at the image's leader epoch to the\n"
            "image's leader, without an epoch to any broker claiming leadership) and compares them with the\n"
            "image of PATH (a log segment, a .checkpoint file or a __cluster_metadata-0 directory), or the image\n"
            "fetched as an observer from the controllers (--bootstrap-server, --command-config as `metadata dump`\n"
            "takes them) up to the quorum's high watermark.\n"
            "Findings: metadata_stale, replica_stale, stale_leader (with the truncation point on the image's\n"
            "leader, the offsets and bytes exposed up to its log end (Fetch, at most 8 MiB read) and the\n"
            "producers on both sides), isr_differs, stray_log (asked only of a broker with another finding).\n"
            "When a broker knows newer state than the image, the image is read again once.\n"
            "--listener NAME  the broker endpoint to use (default: each broker's first registered one)\n"
            "--timeout S      per broker, connect and each answer (default 10); fetching the image from the\n"
            "                 controllers may take 3 times that\n"
            "--broker-config FILE  how to reach the brokers, with the daemon's keys in a kmproxy configuration file:\n"
            "                 broker.security.protocol (SSL, SASL_PLAINTEXT, SASL_SSL), broker.tls.*, broker.sasl.*\n"
            "                 and broker.listener (the default listener then, instead of each broker's first);\n"
            "                 the daemon's other keys are ignored\n"
            "--json           the report as JSON\n"
            "--config FILE    the daemon's kmproxy.properties: the image from metadata.source (metadata.dir, or\n"
            "                 controller.quorum.bootstrap.servers and cluster.id), how to reach the brokers\n"
            "                 (broker.listener, broker.security.protocol, broker.tls.*, broker.sasl.*; --broker-config\n"
            "                 overrides them), verify.timeout.ms, and zookeeper.connect with the zookeeper.*\n"
            "                 security keys (TLS, SASL, digest) for the dual-write lag; options given override\n"
            "                 it (a controller listener secured by the file's keys needs --command-config)\n"
            "--zookeeper HOST:PORT[/chroot]  also the dual-write lag: /migration's kraft_metadata_offset against\n"
            "                 the controllers' last committed offset (the high watermark the fetch reached, or the\n"
            "                 last offset of PATH) - Kafka's ZkWriteBehindLag reads 0 when its driver is wedged\n"
            "--watch-seconds N  with --zookeeper: read the log and /migration again N seconds later; the log past\n"
            "                 /migration's offset while /migration did not move is a stalled driver (KAFKA-21062)\n"
            "--max-lag N      with --zookeeper: a lag beyond N records is inconsistent (default: no threshold)\n"
            "Exit: 0 every broker consistent, 1 inconsistent (or a stalled driver, a lag beyond --max-lag), 2 could not check (named on stderr) or bad usage.\n");
}

typedef struct verify_cli {
    const char *metadata, *servers, *cluster_id, *command_config, *zookeeper, *config, *broker_config;
    km_config_broker_security sec; /* the brokers' TLS and SASL: --broker-config's keys, else --config's */
    double watch_s;  /* 0: /migration read once */
    long long max_lag; /* -1: none */
    km_verify_opts opts;
    bool json;
    km_config cfg;                  /* --config: the daemon's settings */
    km_config_zk_security zk_sec;   /* its zookeeper.* security keys */
    bool have_cfg;
} verify_cli;

/* metadata.source's image, unless --metadata or --bootstrap-server named one. */
static int config_image(verify_cli *c, km_err *err)
{
    if (c->metadata || c->servers)
        return 0;
    if (!strcmp(c->cfg.metadata_source, "dir")) {
        c->metadata = c->cfg.metadata_dir;
        return 0;
    }
    km_config_quorum_security q;
    if (km_config_resolve_quorum_security(&c->cfg, &q, err) < 0)
        return -1;
    bool secured = q.tls || q.mechanism != KM_SASL_NONE;
    km_config_quorum_security_clear(&q);
    if (secured && !c->command_config)
        return km_fail(err, "the controller listener %s is secured (TLS or SASL): give its client settings with "
                       "--command-config", q.listener);
    c->servers = c->cfg.quorum_bootstrap_servers;
    if (!c->cluster_id)
        c->cluster_id = c->cfg.cluster_id;
    return c->servers ? 0
                      : km_fail(err, "metadata.source=quorum: verify reads controller.quorum.bootstrap.servers, "
                                     "which is not set (with controller.quorum.voters only, give --bootstrap-server)");
}

/* --config FILE: what the options left unset comes from the daemon's configuration. */
static int apply_config(verify_cli *c)
{
    km_err err = {{0}};
    km_config_defaults(&c->cfg);
    c->have_cfg = true;
    if (km_config_load(&c->cfg, c->config, &err) || config_image(c, &err) ||
        km_config_resolve_zk_security(&c->cfg, &c->zk_sec, &err) || km_zk_security_check(&c->zk_sec.sec, &err)) {
        fprintf(stderr, "kmproxy verify: --config %s: %s\n", c->config, err.msg);
        return -1;
    }
    if (!c->zookeeper)
        c->zookeeper = c->cfg.zk_connect;
    if (!(c->opts.timeout_s > 0))
        c->opts.timeout_s = c->cfg.verify_timeout_ms / 1000.0;
    return 0;
}

static int parse(int argc, char **argv, verify_cli *c)
{
    static const struct option longs[] = {
        {"metadata", required_argument, NULL, 'm'}, {"listener", required_argument, NULL, 'l'},
        {"timeout", required_argument, NULL, 't'},  {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},           {"bootstrap-server", required_argument, NULL, 'b'},
        {"cluster-id", required_argument, NULL, 'c'}, {"command-config", required_argument, NULL, 'C'},
        {"zookeeper", required_argument, NULL, 'z'},  {"watch-seconds", required_argument, NULL, 'w'},
        {"max-lag", required_argument, NULL, 'L'},    {"config", required_argument, NULL, 'F'},
        {"broker-config", required_argument, NULL, 'B'},
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
        case 'F': c->config = optarg; break;
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
    if (c->config && apply_config(c) < 0)
        return 2;
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
    if (km_verify_read_migration(c->zookeeper, c->have_cfg ? &c->zk_sec.sec : NULL, c->opts.timeout_s, m, &err) == 0)
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

/* The brokers' TLS and SASL: --broker-config's broker.* keys, else --config's, resolved as the daemon's broker
 * channels resolve them; the listener they name is the default one. */
static int broker_security(verify_cli *c)
{
    const char *file = c->broker_config ? c->broker_config : c->config;
    if (!file)
        return 0;
    km_config cfg;
    km_config_defaults(&cfg);
    km_err err = {{0}};
    int rc = km_config_load(&cfg, file, &err) || km_config_check_files(&cfg, &err) ||
             km_config_resolve_broker_security(&cfg, &c->sec, &err) ? -1 : 0;
    if (rc == 0 && c->sec.tls) {
        km_tls_config tc = {.ca_file = cfg.broker_tls_ca, .cert_file = cfg.broker_tls_cert,
                            .key_file = cfg.broker_tls_key, .no_name_check = !c->sec.verify_name};
        rc = (c->opts.tls = km_tls_client_ctx_new(&tc, &err)) ? 0 : -1;
    }
    km_config_free(&cfg);
    if (rc < 0) {
        bool named = !strncmp(err.msg, file, strlen(file)); /* the loader's own errors */
        fprintf(stderr, "kmproxy verify: %s%s%s\n", named ? "" : file, named ? "" : ": ", err.msg);
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

static void cli_free(verify_cli *c)
{
    km_tls_ctx_free(c->opts.tls);
    km_config_broker_security_clear(&c->sec);
    if (c->have_cfg) {
        km_config_zk_security_clear(&c->zk_sec);
        km_config_free(&c->cfg);
    }
}

int km_cli_verify(int argc, char **argv)
{
    verify_cli c = {0};
    int rc = parse(argc, argv, &c);
    if (rc) { /* a --config refused after it was read holds memory too */
        cli_free(&c);
        return rc == 1 ? 0 : 2;
    }
    rc = broker_security(&c) < 0 ? 2 : run(&c);
    cli_free(&c);
    return rc;
}
