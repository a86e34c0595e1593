/* kmproxy-raftsim: one simulated KRaft voter serving a log and snapshots, for the demo and
 * for tests that drive the kmproxy binary.  It runs until SIGINT/SIGTERM. */
#include "km_raftsim.h"
#include "km_sasl.h"

#include <dirent.h>
#include <ev.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(void)
{
    fprintf(stderr, "usage: kmproxy-raftsim [--node-id N] [--port P] [--cluster-id ID] [--leader N --epoch E]\n"
                    "         [--voters id@host:port,...] [--snapshot FILE.checkpoint]... [--log PATH]...\n"
                    "         [--high-watermark N] [--chunk-bytes N] [--port-file PATH] [--follow DIR]\n"
                    "         [--sasl-mechanisms PLAIN,SCRAM-SHA-256,SCRAM-SHA-512 --sasl-users user:password,...]\n"
                    "         [--sasl-session-lifetime-ms MS]\n"
                    "Serves Fetch, FetchSnapshot, DescribeQuorum and ApiVersions as a KRaft voter (after a SASL\n"
                    "login with --sasl-mechanisms).\n");
}

static int parse_voters(km_rsim *s, const char *spec, km_err *err)
{
    km_rsim_voter v[KM_RSIM_MAX_VOTERS];
    int n = 0;
    char *copy = strdup(spec), *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int port = 0;
        memset(&v[n], 0, sizeof v[n]);
        if (n == KM_RSIM_MAX_VOTERS || sscanf(tok, "%d@%63[^:]:%d", &v[n].id, v[n].host, &port) != 3 ||
            port <= 0 || port > 65535) {
            free(copy);
            return km_fail(err, "--voters: '%s' is not id@host:port", tok);
        }
        v[n++].port = (uint16_t)port;
    }
    free(copy);
    return km_rsim_set_voters(s, v, n, err);
}

/* --follow DIR: the directory's segments are re-read every 100 ms and new whole batches appended,
 * as a leader's log grows (the demo appends its live changes to the files). */
typedef struct follow {
    km_rsim *s;
    char dir[4096];
    char seg[300];             /* the segment being read */
    long pos;                  /* bytes of it already appended */
    ev_timer t;
} follow;

static int last_segment(const char *dir, char *out, size_t cap)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    struct dirent *e;
    out[0] = 0;
    while ((e = readdir(d)))
        if (strlen(e->d_name) == 24 && !strcmp(e->d_name + 20, ".log") && strcmp(e->d_name, out) > 0)
            snprintf(out, cap, "%s", e->d_name);
    closedir(d);
    return out[0] ? 0 : -1;
}

static void follow_tick(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    follow *f = w->data;
    char seg[300], path[4400];
    if (last_segment(f->dir, seg, sizeof seg) < 0)
        return;
    if (strcmp(seg, f->seg)) { /* rolled: a new segment starts at the log end */
        snprintf(f->seg, sizeof f->seg, "%s", seg);
        f->pos = 0;
    }
    snprintf(path, sizeof path, "%s/%s", f->dir, f->seg);
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return;
    static uint8_t buf[1 << 20];
    fseek(fp, f->pos, SEEK_SET);
    size_t n = fread(buf, 1, sizeof buf, fp);
    fclose(fp);
    size_t whole = 0;
    while (whole + 12 <= n) { /* baseOffset(8) + batchLength(4) */
        uint32_t len = (uint32_t)buf[whole + 8] << 24 | (uint32_t)buf[whole + 9] << 16 |
                       (uint32_t)buf[whole + 10] << 8 | buf[whole + 11];
        if (whole + 12 + len > n)
            break;
        whole += 12 + len;
    }
    km_err err;
    if (whole && km_rsim_append(f->s, buf, whole, &err) < 0) {
        fprintf(stderr, "kmproxy-raftsim: --follow %s: %s\n", path, err.msg);
        return;
    }
    f->pos += (long)whole;
    if (km_rsim_last_epoch(f->s) > km_rsim_epoch(f->s)) /* a leader's epoch is never below its log's */
        km_rsim_set_leader(f->s, km_rsim_node_id(f->s), km_rsim_last_epoch(f->s));
}

static void on_signal(struct ev_loop *loop, ev_signal *w, int revents)
{
    (void)w;
    (void)revents;
    ev_break(loop, EVBREAK_ALL);
}

static int apply_args(km_rsim *s, int argc, char **argv, km_err *err)
{
    int32_t leader = -1, epoch = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--node-id") || !strcmp(a, "--port") || !strcmp(a, "--cluster-id") ||
            !strcmp(a, "--chunk-bytes") || !strcmp(a, "--sasl-mechanisms") || !strcmp(a, "--sasl-users") ||
            !strcmp(a, "--sasl-session-lifetime-ms")) {
            i++;
            continue; /* taken before the simulator was made */
        }
        if (!v)
            return km_fail(err, "%s needs a value", a);
        i++;
        if (!strcmp(a, "--leader"))
            leader = atoi(v);
        else if (!strcmp(a, "--epoch"))
            epoch = atoi(v);
        else if (!strcmp(a, "--voters")) {
            if (parse_voters(s, v, err) < 0)
                return -1;
        } else if (!strcmp(a, "--snapshot")) {
            if (km_rsim_add_snapshot_file(s, v, true, err) < 0)
                return -1;
        } else if (!strcmp(a, "--log")) {
            if (km_rsim_append_path(s, v, err) < 0)
                return -1;
        } else if (!strcmp(a, "--follow")) {
            continue; /* started once the simulator runs */
        } else if (!strcmp(a, "--high-watermark"))
            km_rsim_set_high_watermark(s, atoll(v));
        else if (strcmp(a, "--port-file"))
            return km_fail(err, "unknown option %s", a);
    }
    if (epoch < 0) /* not given: the log's own epoch (at least 1) */
        epoch = km_rsim_last_epoch(s) > 1 ? km_rsim_last_epoch(s) : 1;
    km_rsim_set_leader(s, leader < 0 ? km_rsim_node_id(s) : leader, epoch);
    return 0;
}

/* "PLAIN,SCRAM-SHA-256,..." into the config's bit set. */
static int parse_mechanisms(km_rsim_config *cfg, const char *list, km_err *err)
{
    char name[64];
    for (const char *p = list; *p;) {
        size_t n = strcspn(p, ",");
        km_sasl_mech m;
        snprintf(name, sizeof name, "%.*s", (int)(n < sizeof name ? n : sizeof name - 1), p);
        if (km_sasl_mech_parse(name, &m, err) < 0)
            return -1;
        cfg->sasl_mechanisms |= 1u << m;
        p += n + (p[n] == ',');
    }
    return 0;
}

static int take_config(km_rsim_config *cfg, int argc, char **argv, const char **port_file,
                       const char **follow_dir, km_err *err)
{
    for (int i = 1; i + 1 < argc; i++) {
        if (!strcmp(argv[i], "--sasl-mechanisms") && parse_mechanisms(cfg, argv[i + 1], err) < 0)
            return -1;
        if (!strcmp(argv[i], "--sasl-users"))
            cfg->sasl_users = argv[i + 1];
        if (!strcmp(argv[i], "--sasl-session-lifetime-ms")) {
            char *end;
            cfg->sasl_session_lifetime_ms = strtoll(argv[i + 1], &end, 10);
            if (*end || end == argv[i + 1] || cfg->sasl_session_lifetime_ms < 0)
                return km_fail(err, "--sasl-session-lifetime-ms: '%s' is not a number of milliseconds", argv[i + 1]);
        }
        if (!strcmp(argv[i], "--node-id"))
            cfg->node_id = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--port"))
            cfg->port = (uint16_t)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--cluster-id"))
            cfg->cluster_id = argv[i + 1];
        else if (!strcmp(argv[i], "--chunk-bytes"))
            cfg->snapshot_chunk_bytes = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--port-file"))
            *port_file = argv[i + 1];
        else if (!strcmp(argv[i], "--follow"))
            *follow_dir = argv[i + 1];
    }
    if (cfg->sasl_mechanisms && !cfg->sasl_users)
        return km_fail(err, "--sasl-mechanisms needs --sasl-users user:password,...");
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        usage();
        return 0;
    }
    km_rsim_config cfg;
    km_rsim_config_init(&cfg);
    const char *port_file = NULL, *follow_dir = NULL;
    km_err err;
    if (take_config(&cfg, argc, argv, &port_file, &follow_dir, &err) < 0) {
        fprintf(stderr, "kmproxy-raftsim: %s\n", err.msg);
        return 2;
    }
    struct ev_loop *loop = ev_default_loop(0);
    km_rsim *s = km_rsim_new(loop, &cfg, &err);
    if (!s || apply_args(s, argc, argv, &err) < 0) {
        fprintf(stderr, "kmproxy-raftsim: %s\n", err.msg);
        km_rsim_free(s);
        return 2;
    }
    follow fl = { .s = s };
    if (follow_dir) {
        snprintf(fl.dir, sizeof fl.dir, "%s", follow_dir);
        ev_timer_init(&fl.t, follow_tick, 0., 0.1);
        fl.t.data = &fl;
        follow_tick(loop, &fl.t, 0);
        ev_timer_start(loop, &fl.t);
    }
    if (port_file) {
        FILE *f = fopen(port_file, "w");
        if (f) {
            fprintf(f, "%u\n", km_rsim_port(s));
            fclose(f);
        }
    }
    printf("kmproxy-raftsim: node %d on 127.0.0.1:%u, log %lld..%lld\n", cfg.node_id, km_rsim_port(s),
           (long long)km_rsim_log_start(s), (long long)km_rsim_log_end(s));
    fflush(stdout);
    ev_signal sigint, sigterm;
    ev_signal_init(&sigint, on_signal, SIGINT);
    ev_signal_init(&sigterm, on_signal, SIGTERM);
    ev_signal_start(loop, &sigint);
    ev_signal_start(loop, &sigterm);
    ev_run(loop, 0);
    if (follow_dir)
        ev_timer_stop(loop, &fl.t);
    km_rsim_free(s);
    return 0;
}
