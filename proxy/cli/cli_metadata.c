/* cli_metadata.c - `kmproxy metadata dump|image|gen`.
 *
 * dump follows kafka-dump-log --cluster-metadata-decoder: one JSON line per
 * record, metadata records typed by MetadataRecordType names and control
 * records by ControlRecordType names.  Bad input exits 2 with one line
 * naming the file, offset and reason.
 */
#include "km_cli.h"
#include "cli_quorum.h"
#include "km_image.h"
#include "km_metalog.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void usage(FILE *to)
{
    fprintf(to,
            "usage: kmproxy metadata dump PATH\n"
            "       kmproxy metadata dump --bootstrap-server HOST:PORT[,...] [--cluster-id ID] [--timeout S]\n"
            "                             [--command-config FILE]\n"
            "       kmproxy metadata quorum --bootstrap-server HOST:PORT[,...] [--timeout S] [--command-config FILE]\n"
            "--command-config: security.protocol=SSL, ssl.truststore.location=PEM (ssl.keystore.location) for an\n"
            "SSL controller listener; SASL_PLAINTEXT or SASL_SSL with sasl.mechanism (PLAIN, SCRAM-SHA-256/512)\n"
            "and sasl.jaas.config, as Kafka's tools take them.\n"
            "       kmproxy metadata image [--cluster-id ID] PATH\n"
            "       kmproxy metadata gen --out DIR --brokers N --topics T --partitions P [--replication R]\n"
            "                            [--leader-changes K] [--seed S] [--zk-migration]\n"
            "PATH is a log segment, a .checkpoint file or a __cluster_metadata-0 directory.\n");
}

#define NO_RECORDS "no records: no log segment or snapshot holding any (an empty __cluster_metadata-0 directory?)"

static km_metalog *open_any(const char *path, km_err *err)
{
    struct stat st;
    if (stat(path, &st) < 0) {
        km_fail(err, "%s: %s", path, strerror(errno));
        return NULL;
    }
    km_metalog_opts o = {0};
    return S_ISDIR(st.st_mode) ? km_metalog_open_dir(path, &o, err) : km_metalog_open_file(path, &o, err);
}

/* ControlRecordType names, as kafka-dump-log prints them. */
static const char *control_type_name(int16_t t)
{
    static const char *const n[] = {"ABORT", "COMMIT", "LEADER_CHANGE", "SNAPSHOT_HEADER", "SNAPSHOT_FOOTER",
                                    "KRAFT_VERSION", "KRAFT_VOTERS"};
    return t >= 0 && t < 7 ? n[t] : "UNKNOWN";
}

/* EndTransactionMarker value: version int16, coordinatorEpoch int32. */
static json_t *end_txn_marker(km_bytes v)
{
    if (v.len < 6)
        return json_null();
    const uint8_t *p = v.ptr;
    int16_t ver = (int16_t)(p[0] << 8 | p[1]);
    int32_t ce = (int32_t)km_be32(p + 2);
    return json_pack("{s:i,s:i}", "version", ver, "coordinatorEpoch", ce);
}

json_t *km_cli_record_json(const km_metalog_record *r, km_err *err)
{
    json_t *data;
    if (r->control && !r->desc)
        data = end_txn_marker(r->value);
    else if (!(data = km_to_json(r->desc, r->control ? 0 : r->version, r->msg, err)))
        return NULL;
    const char *type = r->control ? control_type_name(r->type) : km_metadata_record_type_name(r->type);
    json_t *o = json_pack("{s:I,s:i,s:s,s:i,s:o}", "offset", (json_int_t)r->offset, "epoch", r->batch->leader_epoch,
                          "type", type ? type : "UNKNOWN", "version", r->version, "data", data);
    if (o && r->control)
        json_object_set_new(o, "control", json_true());
    return o;
}

static int cmd_dump(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strncmp(argv[i], "--bootstrap-server", 18))
            return km_cli_metadata_dump_quorum(argc, argv); /* cli_quorum.c: over the network */
    if (argc != 2) {
        usage(stderr);
        return 2;
    }
    km_err err = {{0}};
    km_metalog *log = open_any(argv[1], &err);
    if (!log) {
        fprintf(stderr, "kmproxy metadata dump: %s\n", err.msg);
        return 2;
    }
    km_metalog_record rec;
    int rc;
    int64_t n = 0;
    while ((rc = km_metalog_next(log, &rec, &err)) == 1) {
        n++;
        json_t *j = km_cli_record_json(&rec, &err);
        if (!j) {
            rc = -1;
            break;
        }
        char *s = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
        json_decref(j);
        if (s)
            puts(s);
        free(s);
    }
    km_metalog_close(log);
    if (rc < 0) {
        fflush(stdout);
        fprintf(stderr, "kmproxy metadata dump: %s\n", err.msg);
        return 2;
    }
    if (n == 0) /* a wrong path, most likely: never an empty success */
        return fprintf(stderr, "kmproxy metadata dump: %s: %s\n", argv[1], NO_RECORDS), 2;
    return fflush(stdout) == 0 ? 0 : 1;
}

static int cmd_image(int argc, char **argv)
{
    const char *cluster_id = NULL, *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--cluster-id") && i + 1 < argc)
            cluster_id = argv[++i];
        else if (!path && argv[i][0] != '-')
            path = argv[i];
        else {
            usage(stderr);
            return 2;
        }
    }
    if (!path) {
        usage(stderr);
        return 2;
    }
    km_err err = {{0}};
    km_image *img = km_image_new();
    if (!img || (cluster_id && km_image_set_cluster_id(img, cluster_id, &err) < 0)) {
        fprintf(stderr, "kmproxy metadata image: out of memory\n");
        km_image_free(img);
        return 1;
    }
    int64_t n = km_image_load(img, path, NULL, &err);
    if (n <= 0) {
        fprintf(stderr, "kmproxy metadata image: %s%s%s\n", n < 0 ? "" : path, n < 0 ? "" : ": ",
                n < 0 ? err.msg : NO_RECORDS);
        km_image_free(img);
        return 2;
    }
    json_t *j = km_image_to_json(img, &err);
    km_image_free(img);
    if (!j) {
        fprintf(stderr, "kmproxy metadata image: %s\n", err.msg);
        return 1;
    }
    int rc = json_dumpf(j, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER) == 0 ? 0 : 1;
    json_decref(j);
    putchar('\n');
    return fflush(stdout) == 0 ? rc : 1;
}

/* Parses a non-negative integer option value into *out; false if it is not one. */
static bool parse_num(const char *s, int64_t max, int64_t *out) { return km_cli_parse_int(s, 0, max, out) == 0; }

static int gen_opt(int c, const char *arg, km_gen_opts *o, const char **out)
{
    int64_t v = 0;
    bool ok = true;
    switch (c) {
    case 'o': *out = arg; return 0;
    case 'b': ok = parse_num(arg, 1000000, &v); o->brokers = (int32_t)v; break;
    case 't': ok = parse_num(arg, 100000000, &v); o->topics = (int32_t)v; break;
    case 'p': ok = parse_num(arg, 1000000, &v); o->partitions = (int32_t)v; break;
    case 'r': ok = parse_num(arg, 1000, &v); o->replication = (int32_t)v; break;
    case 'l': ok = parse_num(arg, INT64_MAX, &v); o->leader_changes = v; break;
    case 's': ok = parse_num(arg, INT64_MAX, &v); o->seed = (uint64_t)v; break;
    case 'z': o->zk_migration = true; break;
    default: return -1;
    }
    return ok ? 0 : -1;
}

static int cmd_gen(int argc, char **argv)
{
    static const struct option longs[] = {
        {"out", required_argument, 0, 'o'},         {"brokers", required_argument, 0, 'b'},
        {"topics", required_argument, 0, 't'},      {"partitions", required_argument, 0, 'p'},
        {"replication", required_argument, 0, 'r'}, {"leader-changes", required_argument, 0, 'l'},
        {"seed", required_argument, 0, 's'},        {"zk-migration", no_argument, 0, 'z'},
        {0, 0, 0, 0}};
    km_gen_opts o = {.brokers = 3, .topics = 1, .partitions = 1};
    const char *out = NULL;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", longs, NULL)) != -1) {
        if (gen_opt(c, optarg, &o, &out) < 0) {
            fprintf(stderr, "kmproxy metadata gen: bad option%s%s\n", optarg ? " value " : "", optarg ? optarg : "");
            usage(stderr);
            return 2;
        }
    }
    if (!out || optind != argc || o.brokers < 1 || o.partitions < 1 || o.replication > o.brokers) {
        usage(stderr);
        return 2;
    }
    km_err err = {{0}};
    int64_t n = km_gen_write(out, &o, NULL, &err);
    if (n < 0) {
        fprintf(stderr, "kmproxy metadata gen: %s\n", err.msg);
        return 1;
    }
    printf("wrote %" PRId64 " records to %s\n", n, out);
    return 0;
}

int km_cli_metadata(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "-h") || km_cli_wants_help(argc, argv)) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "dump"))
        return cmd_dump(argc - 1, argv + 1);
    if (!strcmp(argv[1], "image"))
        return cmd_image(argc - 1, argv + 1);
    if (!strcmp(argv[1], "gen"))
        return cmd_gen(argc - 1, argv + 1);
    if (!strcmp(argv[1], "quorum"))
        return km_cli_metadata_quorum(argc - 1, argv + 1);
    fprintf(stderr, "kmproxy metadata: unknown subcommand '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
