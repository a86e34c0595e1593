/* kmproxy wire decode|encode: one message body (no size prefix, no header) <-> JSON. */
#include "km_cli.h"
#include "km_codec.h"

#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct wire_opts {
    bool decode;
    int api;                  /* -1 when --message names it instead */
    int version;
    km_msg_kind kind;
    const char *message;      /* --message NAME: headers, metadata and control records */
    size_t max_bytes;
} wire_opts;

static void wire_usage(FILE *to)
{
    fprintf(to,
            "usage: kmproxy wire decode|encode (--api N (--request|--response) | --message NAME) --version V\n"
            "                            [--max-bytes N]\n"
            "  decode: reads one message body from stdin (no size prefix, no header), prints JSON\n"
            "  encode: reads that JSON from stdin, writes the body bytes to stdout\n"
            "  --message names any definition: RequestHeader, TopicRecord, LeaderChangeMessage, ...\n");
}

static int parse_wire_opts(int argc, char **argv, wire_opts *o)
{
    static const struct option longopts[] = {
        {"api", required_argument, 0, 'a'},      {"version", required_argument, 0, 'v'},
        {"request", no_argument, 0, 'q'},        {"response", no_argument, 0, 'r'},
        {"message", required_argument, 0, 'm'},  {"max-bytes", required_argument, 0, 'b'},
        {"help", no_argument, 0, 'h'},           {0, 0, 0, 0}};
    *o = (wire_opts){.api = -1, .version = -1, .kind = -1, .max_bytes = KM_MAX_FRAME_DEFAULT};
    if (argc < 2 || (strcmp(argv[1], "decode") && strcmp(argv[1], "encode")))
        return -1;
    o->decode = !strcmp(argv[1], "decode");
    optind = 2;
    int64_t v;
    for (int c; (c = getopt_long(argc, argv, "", longopts, NULL)) != -1;) {
        switch (c) {
        case 'a': if (km_cli_parse_int(optarg, 0, INT16_MAX, &v)) return -1; o->api = (int)v; break;
        case 'v': if (km_cli_parse_int(optarg, 0, INT16_MAX, &v)) return -1; o->version = (int)v; break;
        case 'q': o->kind = KM_K_REQUEST; break;
        case 'r': o->kind = KM_K_RESPONSE; break;
        case 'm': o->message = optarg; break;
        case 'b': if (km_cli_parse_int(optarg, 1, INT32_MAX, &v)) return -1; o->max_bytes = (size_t)v; break;
        default: return -1;
        }
    }
    if (optind != argc || o->version < 0)
        return -1;
    return (o->message != NULL) != (o->api >= 0 && (int)o->kind >= 0) ? 0 : -1;
}

/* Reads all of stdin, refusing more than max bytes. */
static uint8_t *read_stdin(size_t max, size_t *len, km_err *err)
{
    size_t cap = 65536, n = 0;
    uint8_t *buf = malloc(cap);
    for (size_t got; buf && (got = fread(buf + n, 1, cap - n, stdin)) > 0;) {
        n += got;
        if (n > max) {
            free(buf);
            km_fail(err, "input is larger than --max-bytes %zu", max);
            return NULL;
        }
        if (n == cap) {
            uint8_t *grown = realloc(buf, cap *= 2);
            if (!grown) free(buf);
            buf = grown;
        }
    }
    if (!buf)
        km_fail(err, "out of memory reading stdin");
    *len = n;
    return buf;
}

static int wire_decode(const km_message_desc *md, int16_t version, const uint8_t *in, size_t len, km_err *err)
{
    km_arena arena;
    km_arena_init(&arena, 0);
    void *obj = malloc(md->root->size);
    int rc = -1;
    if (obj && !km_decode(md, version, in, len, obj, &arena, NULL, err)) {
        json_t *j = km_to_json(md, version, obj, err);
        if (j) {
            rc = json_dumpf(j, stdout, JSON_COMPACT) ? km_fail(err, "cannot write stdout") : 0;
            fputc('\n', stdout);
            json_decref(j);
        }
    }
    free(obj);
    km_arena_free(&arena);
    return rc;
}

static int wire_encode(const km_message_desc *md, int16_t version, const uint8_t *in, size_t len, km_err *err)
{
    json_error_t jerr;
    json_t *j = json_loadb((const char *)in, len, 0, &jerr);
    if (!j)
        return km_fail(err, "JSON input line %d column %d: %s", jerr.line, jerr.column, jerr.text);
    km_arena arena;
    km_arena_init(&arena, 0);
    km_buf out;
    km_buf_init(&out);
    void *obj = malloc(md->root->size);
    int rc = -1;
    if (obj && !km_from_json(md, version, j, obj, &arena, err) && !km_encode(md, version, obj, &out, err))
        rc = fwrite(out.data, 1, out.len, stdout) == out.len ? 0 : km_fail(err, "cannot write stdout");
    free(obj);
    km_buf_free(&out);
    km_arena_free(&arena);
    json_decref(j);
    return rc;
}

int km_cli_wire(int argc, char **argv)
{
    wire_opts o;
    if (km_cli_wants_help(argc, argv)) {
        wire_usage(stdout);
        return 0;
    }
    if (parse_wire_opts(argc, argv, &o)) {
        wire_usage(stderr);
        return 2;
    }
    const km_message_desc *md = o.message ? km_find_message_by_name(o.message) : km_find_message(o.kind, (int16_t)o.api);
    if (!md) {
        if (o.message)
            fprintf(stderr, "kmproxy wire: no message named '%s'\n", o.message);
        else
            fprintf(stderr, "kmproxy wire: no %s with api key %d\n", o.kind == KM_K_REQUEST ? "request" : "response",
                    o.api);
        return 2;
    }
    km_err err = {{0}};
    size_t len = 0;
    uint8_t *in = read_stdin(o.max_bytes, &len, &err);
    int rc = !in ? -1
             : o.decode ? wire_decode(md, (int16_t)o.version, in, len, &err)
                        : wire_encode(md, (int16_t)o.version, in, len, &err);
    free(in);
    if (rc) {
        fprintf(stderr, "kmproxy wire %s: %s\n", o.decode ? "decode" : "encode", err.msg);
        return 2;
    }
    return 0;
}
