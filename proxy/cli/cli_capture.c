/* kmproxy capture read: a JSON-lines capture as a person reads it, filtered by API and broker. */
#include "km_cli.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define BODY_SHOWN 240 /* characters of the decoded body per line; the file has it whole */

typedef struct capture_filter {
    const char *api;  /* NULL: every API */
    bool by_broker;
    int64_t broker;
} capture_filter;

static void capture_usage(FILE *to)
{
    fprintf(to, "usage: kmproxy capture read FILE.jsonl [--api NAME] [--broker ID]\n"
                "  Prints a JSON-lines capture (proxy.capture.jsonl, capture.jsonl) one line per frame:\n"
                "  time, connection, broker, direction, API and version, correlation id, size, latency,\n"
                "  error code and the start of the decoded body.  --api takes Kafka's names (PRODUCE,\n"
                "  METADATA, ...), --broker an id (-1: bootstrap).\n");
}

static bool wanted(const capture_filter *f, json_t *o)
{
    json_t *broker = json_object_get(o, "broker");
    const char *api = json_string_value(json_object_get(o, "api_name"));
    if (f->by_broker && (!json_is_integer(broker) || json_integer_value(broker) != f->broker))
        return false;
    return !f->api || (api && !strcasecmp(api, f->api)) || (!api && json_object_get(o, "event") && !f->by_broker);
}

static void print_frame(json_t *o)
{
    const char *dir = json_string_value(json_object_get(o, "dir"));
    json_t *broker = json_object_get(o, "broker"), *latency = json_object_get(o, "latency_ms");
    json_t *body = json_object_get(o, "body"), *err = json_object_get(o, "error");
    const char *api = json_string_value(json_object_get(o, "api_name"));
    printf("%s conn %lld", json_string_value(json_object_get(o, "ts")),
           (long long)json_integer_value(json_object_get(o, "conn")));
    if (json_is_integer(broker))
        printf(" broker %lld", (long long)json_integer_value(broker));
    printf(" %s %s v%lld corr %lld %lld B", !strcmp(dir, "c2s") ? "->" : "<-", api ? api : "?",
           (long long)json_integer_value(json_object_get(o, "api_version")),
           (long long)json_integer_value(json_object_get(o, "correlation_id")),
           (long long)json_integer_value(json_object_get(o, "size")));
    const char *client = json_string_value(json_object_get(o, "client_id"));
    if (client)
        printf(" client %s", client);
    if (json_is_number(latency))
        printf(" %.3f ms", json_number_value(latency));
    json_t *code = body ? json_object_get(body, "errorCode") : NULL;
    if (json_is_integer(code) && json_integer_value(code))
        printf(" errorCode %lld", (long long)json_integer_value(code));
    if (err)
        printf(" (not decoded: %s)", json_string_value(err));
    if (body) {
        char *text = json_dumps(body, JSON_COMPACT);
        if (text)
            printf("  %.*s%s", BODY_SHOWN, text, strlen(text) > BODY_SHOWN ? "..." : "");
        free(text);
    }
    printf("\n");
}

static void print_line(json_t *o)
{
    const char *event = json_string_value(json_object_get(o, "event"));
    if (!event) {
        print_frame(o);
    } else if (!strcmp(event, "capture_end")) {
        printf("end of capture: %lld frames, %lld dropped, %lld write errors\n",
               (long long)json_integer_value(json_object_get(o, "frames")),
               (long long)json_integer_value(json_object_get(o, "dropped_frames")),
               (long long)json_integer_value(json_object_get(o, "write_errors")));
    } else {
        json_t *broker = json_object_get(o, "broker");
        printf("%s conn %lld %s %s -> %s", json_string_value(json_object_get(o, "ts")),
               (long long)json_integer_value(json_object_get(o, "conn")), event,
               json_string_value(json_object_get(o, "client")), json_string_value(json_object_get(o, "server")));
        if (json_is_integer(broker))
            printf(" (broker %lld)", (long long)json_integer_value(broker));
        printf("\n");
    }
}

static int read_capture(const char *path, const capture_filter *f)
{
    FILE *in = fopen(path, "r");
    if (!in) {
        fprintf(stderr, "kmproxy capture read: %s: %s\n", path, strerror(errno));
        return 2;
    }
    char *line = NULL;
    size_t cap = 0;
    int rc = 0;
    for (long lineno = 1; getline(&line, &cap, in) > 0; lineno++) {
        json_error_t e;
        json_t *o = json_loads(line, 0, &e);
        if (!json_is_object(o)) {
            fprintf(stderr, "kmproxy capture read: %s:%ld: not a capture line: %s\n", path, lineno,
                    o ? "not a JSON object" : e.text);
            json_decref(o);
            rc = 2;
            break;
        }
        if (wanted(f, o))
            print_line(o);
        json_decref(o);
    }
    free(line);
    fclose(in);
    return rc;
}

int km_cli_capture(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"api", required_argument, 0, 'a'}, {"broker", required_argument, 0, 'b'}, {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    capture_filter f = {0};
    optind = 1;
    for (int c; (c = getopt_long(argc, argv, "", longopts, NULL)) != -1;) {
        if (c == 'h') {
            capture_usage(stdout);
            return 0;
        }
        if (c == 'a') {
            f.api = optarg;
        } else if (c == 'b' && !km_cli_parse_int(optarg, -1, INT32_MAX, &f.broker)) {
            f.by_broker = true;
        } else {
            if (c == 'b')
                fprintf(stderr, "kmproxy capture read: --broker %s: not a broker id (-1: bootstrap)\n", optarg);
            capture_usage(stderr);
            return 2;
        }
    }
    if (optind + 2 != argc || strcmp(argv[optind], "read")) {
        capture_usage(stderr);
        return 2;
    }
    return read_capture(argv[optind + 1], &f);
}
