/* kmproxy status [--url http://HOST:PORT] [--json | --check] [--timeout S]: asks a running daemon's
 * metrics listener for GET /status and prints the migration at a glance, as a table for people or the
 * JSON as served for scripts.  Exit 0 when the daemon answered; 1 when it could not be reached or
 * did not answer with a status (said on stderr with the URL); 2 for bad usage.  --check is for probes
 * and scripts: one line, exit 0 ready, 1 not ready (the /readyz reasons), 2 could not ask. */
#include "km_cli.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <netdb.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_URL "http://127.0.0.1:9779" /* metrics.listen in deploy/kmproxy.properties.example */
#define MAX_ANSWER (4u << 20)

static void usage(FILE *to)
{
    fprintf(to, "usage: kmproxy status [--url http://HOST:PORT] [--json | --check] [--timeout S]\n"
                "  The migration at a glance from a running `kmproxy run`: role and readiness, ZooKeeper session\n"
                "  and claim, write-behind lag, quorum leader / high watermark / applied offset, each ZK-mode\n"
                "  broker's channel state, versions and pending stops, inline proxy connections.\n"
                "  --url      the daemon's metrics.listen (default %s); GET /status there\n"
                "  --json     print the JSON as served, for scripts\n"
                "  --check    print one line, ready or not and why; exit 0 ready, 1 not ready, 2 could not ask\n"
                "  --timeout  seconds to wait for the answer (default 5)\n"
                "  Exit 0 when the daemon answered, 1 when it could not be reached or gave no status\n"
                "  (with --check: 2), 2 for bad usage.\n",
            DEFAULT_URL);
}

/* "http://HOST:PORT[/...]" -> host, port ("[v6]" brackets dropped). 0, or -1. */
static int parse_url(const char *url, char *host, size_t host_cap, char *port, size_t port_cap)
{
    if (strncmp(url, "http://", 7))
        return -1;
    const char *h = url + 7, *hend, *p;
    if (*h == '[') {
        hend = strchr(h, ']');
        if (!hend || hend[1] != ':')
            return -1;
        h++;
        p = hend + 2;
    } else {
        hend = strchr(h, ':');
        const char *slash = strchr(h, '/');
        if (!hend || (slash && slash < hend))
            return -1;
        p = hend + 1;
    }
    size_t hl = (size_t)(hend - h), pl = strcspn(p, "/");
    if (!hl || hl >= host_cap || !pl || pl >= port_cap || strspn(p, "0123456789") != pl)
        return -1;
    memcpy(host, h, hl);
    host[hl] = '\0';
    memcpy(port, p, pl);
    port[pl] = '\0';
    return 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Waits for events on fd until the deadline: 1 ready, 0 timed out, -1 error. */
static int wait_fd(int fd, short events, double deadline)
{
    for (;;) {
        double left = deadline - now_s();
        if (left <= 0)
            return 0;
        struct pollfd p = {.fd = fd, .events = events};
        int n = poll(&p, 1, (int)(left * 1000) + 1);
        if (n < 0 && errno == EINTR)
            continue;
        return n < 0 ? -1 : n > 0;
    }
}

static int connect_to(const char *host, const char *port, double deadline, char *why, size_t cap)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    int rc = getaddrinfo(host, port, &hints, &ai);
    if (rc) {
        snprintf(why, cap, "%s", gai_strerror(rc));
        return -1;
    }
    int fd = -1;
    snprintf(why, cap, "no address");
    for (struct addrinfo *a = ai; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) {
            snprintf(why, cap, "%s", strerror(errno));
            continue;
        }
        int err = 0;
        socklen_t len = sizeof err;
        if (connect(fd, a->ai_addr, a->ai_addrlen) && errno != EINPROGRESS)
            err = errno;
        else if ((rc = wait_fd(fd, POLLOUT, deadline)) <= 0)
            err = rc ? errno : ETIMEDOUT;
        else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len))
            err = errno;
        if (err) {
            snprintf(why, cap, "%s", strerror(err));
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(ai);
    return fd;
}

/* GET /status: the HTTP status and the body (malloc'd), or -1 with why. */
static int http_get_status(const char *host, const char *port, double timeout, char **body, char *why, size_t cap)
{
    double deadline = now_s() + timeout;
    int fd = connect_to(host, port, deadline, why, cap);
    if (fd < 0)
        return -1;
    char req[600];
    int n = snprintf(req, sizeof req, "GET /status HTTP/1.0\r\nHost: %s:%s\r\n\r\n", host, port);
    int status = -1;
    size_t len = 0;
    char *buf = malloc(MAX_ANSWER + 1);
    if (!buf || send(fd, req, (size_t)n, MSG_NOSIGNAL) != n) {
        snprintf(why, cap, "sending the request: %s", buf ? strerror(errno) : "out of memory");
        goto out;
    }
    for (;;) { /* HTTP/1.0: the answer ends when the server closes */
        int w = wait_fd(fd, POLLIN, deadline);
        if (w <= 0) {
            if (w)
                snprintf(why, cap, "reading the answer: %s", strerror(errno));
            else
                snprintf(why, cap, "no whole answer within %.0f s", timeout);
            goto out;
        }
        ssize_t got = recv(fd, buf + len, MAX_ANSWER - len, 0);
        if (got < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (got < 0) {
            snprintf(why, cap, "reading the answer: %s", strerror(errno));
            goto out;
        }
        if (got == 0)
            break;
        len += (size_t)got;
        if (len == MAX_ANSWER) {
            snprintf(why, cap, "the answer is over %u bytes", MAX_ANSWER);
            goto out;
        }
    }
    buf[len] = '\0';
    char *sep = strstr(buf, "\r\n\r\n");
    if (sscanf(buf, "HTTP/1.%*d %d", &status) != 1 || !sep) {
        snprintf(why, cap, "not an HTTP answer");
        status = -1;
        goto out;
    }
    *body = strdup(sep + 4);
out:
    free(buf);
    close(fd);
    return status;
}

/* ---- the table ---- */

static json_int_t num(json_t *o, const char *key) { return json_integer_value(json_object_get(o, key)); }
static const char *str(json_t *o, const char *key)
{
    const char *s = json_string_value(json_object_get(o, key));
    return s ? s : "-";
}
static const char *yes(json_t *o, const char *key) { return json_is_true(json_object_get(o, key)) ? "yes" : "no"; }

static void print_reasons(FILE *to, json_t *st)
{
    size_t i;
    json_t *r;
    json_array_foreach(json_object_get(st, "reasons"), i, r)
        fprintf(to, "  not ready: %s\n", json_string_value(r) ? json_string_value(r) : "?");
}

static void print_head(FILE *to, const char *url, json_t *st)
{
    json_int_t up = num(st, "uptime_seconds");
    fprintf(to, "kmproxy at %s: %s, %s, up %lldh%02lldm%02llds\n", url, str(st, "role"),
            json_is_true(json_object_get(st, "ready")) ? "ready" : "NOT READY", (long long)up / 3600,
            (long long)up / 60 % 60, (long long)up % 60);
    print_reasons(to, st);
    if (json_is_string(json_object_get(st, "fatal")))
        fprintf(to, "  FATAL: %s\n", str(st, "fatal"));
    json_t *ha = json_object_get(st, "ha");
    if (json_is_object(ha))
        fprintf(to, "  ha: instance %s, election node %s, election session %s, takeovers %lld; active instance: %s\n",
                str(ha, "instance"), str(ha, "node"), yes(ha, "election_session"), (long long)num(ha, "takeovers"),
                json_is_string(json_object_get(ha, "active_instance")) ? str(ha, "active_instance") : "unknown");
}

static void print_metadata(FILE *to, json_t *st)
{
    json_t *m = json_object_get(st, "metadata"), *q = json_object_get(st, "quorum");
    fprintf(to, "migration  %s\n", str(m, "migration_state"));
    fprintf(to, "metadata   source %s, image offset %lld (epoch %lld), %lld partitions, metadata.version %lld%s\n",
            str(m, "source"), (long long)num(m, "image_offset"), (long long)num(m, "image_epoch"),
            (long long)num(m, "partitions"), (long long)num(m, "metadata_version"),
            json_is_true(json_object_get(m, "reading_paused")) ? ", reading PAUSED (write-behind bound)" : "");
    if (json_is_object(q))
        fprintf(to, "quorum     leader %lld (epoch %lld), high watermark %lld, applied offset %lld, fetched to %lld%s\n",
                (long long)num(q, "leader_id"), (long long)num(q, "leader_epoch"), (long long)num(q, "high_watermark"),
                (long long)num(q, "applied_offset"), (long long)num(q, "fetched_offset"),
                json_is_true(json_object_get(q, "caught_up")) ? ", caught up" : ", catching up");
}

static void print_zookeeper(FILE *to, json_t *st)
{
    json_t *z = json_object_get(st, "zookeeper"), *claim = json_object_get(z, "claim");
    fprintf(to, "zookeeper  %s: session %s", str(z, "connect"), str(z, "session"));
    if (json_object_get(z, "phase"))
        fprintf(to, ", %s, write-behind lag %lld records (confirmed offset %lld)", str(z, "phase"),
                (long long)num(z, "write_behind_lag"), (long long)num(z, "confirmed_offset"));
    fputc('\n', to);
    if (json_is_object(claim))
        fprintf(to, "           claim: KRaft controller %lld epoch %lld, /controller_epoch %lld\n",
                (long long)num(claim, "kraft_controller_id"), (long long)num(claim, "kraft_controller_epoch"),
                (long long)num(claim, "zk_controller_epoch"));
    json_t *sync = json_object_get(z, "sync");
    if (json_is_object(sync) && strcmp(str(sync, "stage"), "in sync"))
        fprintf(to, "           full sync: %s, %lld of %lld\n", str(sync, "stage"), (long long)num(sync, "done"),
                (long long)num(sync, "total"));
    if (json_object_get(z, "fenced"))
        fprintf(to, "           FENCED: %s\n", str(z, "fenced"));
}

static void version_cell(FILE *to, json_t *versions, const char *api)
{
    json_t *v = json_object_get(versions, api);
    char cell[16] = "-";
    if (json_is_integer(v))
        snprintf(cell, sizeof cell, "v%lld", (long long)json_integer_value(v));
    fprintf(to, " %-*s", (int)strlen(api), cell);
}

/* Column widths that hold every row: host names are shown whole. */
static void broker_widths(json_t *chans, int *ep_w, int *state_w)
{
    size_t i;
    json_t *c;
    *ep_w = (int)strlen("ENDPOINT");
    *state_w = (int)strlen("STATE");
    json_array_foreach(chans, i, c) {
        int ep = snprintf(NULL, 0, "%s:%lld", str(c, "host"), (long long)num(c, "port"));
        int state = (int)strlen(str(c, "state"));
        *ep_w = ep > *ep_w ? ep : *ep_w;
        *state_w = state > *state_w ? state : *state_w;
    }
}

static void print_broker_row(FILE *to, json_t *c, int ep_w, int state_w)
{
    char ep[600];
    snprintf(ep, sizeof ep, "%s:%lld", str(c, "host"), (long long)num(c, "port"));
    fprintf(to, "  %-6lld %-*s %-*s", (long long)num(c, "id"), ep_w, ep, state_w, str(c, "state"));
    json_t *v = json_object_get(c, "versions");
    version_cell(to, v, "LeaderAndIsr");
    version_cell(to, v, "UpdateMetadata");
    version_cell(to, v, "StopReplica");
    fprintf(to, " %8lld %6lld %6lld  %s\n", (long long)num(c, "pending_requests"), (long long)num(c, "pending_stops"),
            (long long)num(c, "errors"), str(c, "last_error"));
}

static void print_brokers(FILE *to, json_t *st)
{
    json_t *b = json_object_get(st, "brokers"), *chans = json_object_get(b, "channels");
    if (!json_is_true(json_object_get(b, "enabled"))) {
        fprintf(to, "brokers    disabled (brokers.enabled=false)\n");
        return;
    }
    fprintf(to, "brokers    %zu channels%s%s\n", json_array_size(chans),
            json_is_true(json_object_get(b, "sending")) ? ", sending" : ", held (not sending yet)",
            json_is_true(json_object_get(b, "fenced")) ? ", FENCED" : "");
    if (!json_array_size(chans))
        return;
    int ep_w, state_w;
    broker_widths(chans, &ep_w, &state_w);
    fprintf(to, "  %-6s %-*s %-*s LeaderAndIsr UpdateMetadata StopReplica %8s %6s %6s  %s\n", "BROKER", ep_w,
            "ENDPOINT", state_w, "STATE", "PENDING", "STOPS", "ERRORS", "LAST ERROR");
    size_t i;
    json_t *c;
    json_array_foreach(chans, i, c)
        print_broker_row(to, c, ep_w, state_w);
}

static void print_proxy(FILE *to, json_t *st)
{
    json_t *p = json_object_get(st, "proxy");
    if (!json_is_object(p)) {
        fprintf(to, "proxy      off (no proxy.* keys)\n");
        return;
    }
    fprintf(to, "proxy      %lld listeners, %lld connections open (%lld accepted, %lld refused), %lld requests\n",
            (long long)num(p, "listeners"), (long long)num(p, "connections_open"),
            (long long)num(p, "connections_accepted"), (long long)num(p, "connections_refused"),
            (long long)num(p, "requests"));
}

/* The continuous broker check: its last verdict, then one line a finding. */
static void print_verify(FILE *to, json_t *st)
{
    json_t *v = json_object_get(st, "verify");
    if (!json_is_object(v) || !json_is_true(json_object_get(v, "enabled"))) {
        fprintf(to, "verify     off (verify.interval.ms=0)\n");
        return;
    }
    if (!json_is_string(json_object_get(v, "verdict"))) {
        bool failed = json_is_string(json_object_get(v, "error"));
        fprintf(to, "verify     every %lld ms, no check finished yet%s%s\n", (long long)num(v, "interval_ms"),
                failed ? ": " : "", failed ? str(v, "error") : "");
        return;
    }
    fprintf(to, "verify     %s (image offset %lld, %lld cycles), %zu findings, %lld brokers not checked\n",
            str(v, "verdict"), (long long)num(v, "image_offset"), (long long)num(v, "cycles"),
            json_array_size(json_object_get(v, "findings")), (long long)num(v, "unchecked_brokers"));
    json_t *pass = json_object_get(v, "pass");
    if (num(pass, "partitions_per_cycle") > 0)
        fprintf(to, "  pass       %lld of %lld partitions checked, %lld passes finished (%lld a cycle)\n",
                (long long)num(pass, "partitions_checked"), (long long)num(pass, "partitions"),
                (long long)num(pass, "passes"), (long long)num(pass, "partitions_per_cycle"));
    size_t i;
    json_t *f;
    json_array_foreach(json_object_get(v, "findings"), i, f) {
        fprintf(to, "  broker %lld %s-%lld %s since %lld: %s", (long long)num(f, "broker"), str(f, "topic"),
                (long long)num(f, "partition"), str(f, "class"), (long long)num(f, "first_seen"), str(f, "detail"));
        if (json_is_integer(json_object_get(f, "exposed_bytes"))) /* a stale leader's exposure */
            fprintf(to, "; truncation point %lld, %lld offsets and %s%lld bytes exposed up to offset %lld",
                    (long long)num(f, "truncation_offset"), (long long)num(f, "exposed_offsets"),
                    json_is_true(json_object_get(f, "exposed_bytes_capped")) ? "at least " : "",
                    (long long)num(f, "exposed_bytes"), (long long)num(f, "exposed_bytes_to"));
        fputc('\n', to);
    }
}

static int print_table(const char *url, const char *body)
{
    json_error_t jerr;
    json_t *st = json_loads(body, 0, &jerr);
    if (!json_is_object(st) || !json_is_object(json_object_get(st, "metadata"))) {
        fprintf(stderr, "kmproxy status: %s/status answered no status object (%s)\n", url,
                st ? "unexpected JSON" : jerr.text);
        json_decref(st);
        return 1;
    }
    print_head(stdout, url, st);
    print_metadata(stdout, st);
    print_zookeeper(stdout, st);
    print_brokers(stdout, st);
    print_proxy(stdout, st);
    print_verify(stdout, st);
    json_decref(st);
    return 0;
}

/* --check: one line; 0 ready, 1 not ready. */
static int print_check(const char *url, const char *body)
{
    json_t *st = json_loads(body, 0, NULL);
    if (!json_is_object(st) || !json_is_boolean(json_object_get(st, "ready"))) {
        fprintf(stderr, "kmproxy status: %s/status answered no readiness\n", url);
        json_decref(st);
        return 2;
    }
    bool ready = json_is_true(json_object_get(st, "ready"));
    printf("kmproxy at %s: %s, %s", url, str(st, "role"), ready ? "ready" : "not ready");
    size_t i;
    json_t *r;
    json_array_foreach(json_object_get(st, "reasons"), i, r)
        printf("%s%s", i ? "; " : ": ", json_string_value(r) ? json_string_value(r) : "?");
    putchar('\n');
    json_decref(st);
    return ready ? 0 : 1;
}

/* ---- the command ---- */

typedef struct status_args {
    const char *url;
    bool json, check;
    int64_t timeout;
} status_args;

/* 0, or the exit code of bad usage (said on stderr). */
static int parse_args(int argc, char **argv, status_args *a)
{
    static const struct option longopts[] = {{"url", required_argument, NULL, 'u'}, {"json", no_argument, NULL, 'j'},
                                             {"check", no_argument, NULL, 'c'},
                                             {"timeout", required_argument, NULL, 't'}, {NULL, 0, NULL, 0}};
    *a = (status_args){.url = DEFAULT_URL, .timeout = 5};
    optind = 1;
    opterr = 0;
    for (int c; (c = getopt_long(argc, argv, "", longopts, NULL)) != -1;) {
        if (c == 'u')
            a->url = optarg;
        else if (c == 'j')
            a->json = true;
        else if (c == 'c')
            a->check = true;
        else if (c == 't' && km_cli_parse_int(optarg, 1, 3600, &a->timeout))
            return fprintf(stderr, "kmproxy status: --timeout %s: not a whole number of seconds in 1..3600\n", optarg), 2;
        else if (c != 't')
            return fprintf(stderr, "kmproxy status: bad option '%s'\n", argv[optind - 1]), usage(stderr), 2;
    }
    if (optind < argc)
        return fprintf(stderr, "kmproxy status: unexpected argument '%s'\n", argv[optind]), usage(stderr), 2;
    if (a->json && a->check)
        return fprintf(stderr, "kmproxy status: --json and --check exclude each other\n"), usage(stderr), 2;
    return 0;
}

/* What the daemon answered (HTTP status), printed as asked: the exit code. */
static int print_answer(const status_args *a, int status, const char *body)
{
    int failed = a->check ? 2 : 1; /* --check: 1 means "not ready", never "could not ask" */
    if (status == 404) {
        fprintf(stderr, "kmproxy status: %s has no /status (404): not the metrics.listen of a `kmproxy run` daemon "
                        "of this version?\n", a->url);
        return failed;
    }
    if (status != 200) {
        fprintf(stderr, "kmproxy status: %s/status answered HTTP %d: %s", a->url, status, body);
        return failed;
    }
    if (a->check)
        return print_check(a->url, body);
    if (!a->json)
        return print_table(a->url, body);
    json_error_t jerr;
    json_t *st = json_loads(body, 0, &jerr);
    int rc = json_is_object(st) ? 0 : 1;
    if (!rc)
        fputs(body, stdout);
    else
        fprintf(stderr, "kmproxy status: %s/status answered no JSON object: %s\n", a->url, jerr.text);
    json_decref(st);
    return rc;
}

int km_cli_status(int argc, char **argv)
{
    if (km_cli_wants_help(argc, argv))
        return usage(stdout), 0;
    status_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc)
        return rc;
    char host[256], port[16], why[300];
    if (parse_url(a.url, host, sizeof host, port, sizeof port))
        return fprintf(stderr, "kmproxy status: --url %s: expected http://HOST:PORT\n", a.url), 2;
    char *body = NULL;
    int status = http_get_status(host, port, (double)a.timeout, &body, why, sizeof why);
    if (status < 0)
        return fprintf(stderr, "kmproxy status: cannot get %s/status: %s\n", a.url, why), a.check ? 2 : 1;
    rc = print_answer(&a, status, body);
    free(body);
    return rc;
}
