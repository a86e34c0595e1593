/* cli_quorum.c - the KRaft quorum over the network: `metadata quorum` (DescribeQuorum, as
 * kafka-metadata-quorum describe --status prints it) and `metadata dump --bootstrap-server`
 * (the committed log, fetched as an observer, as `metadata dump PATH` prints files). */
#include "cli_quorum.h"
#include "km_cli.h"
#include "km_quorum.h"

#include <ctype.h>
#include <ev.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct quorum_opts {
    const char *servers, *cluster_id, *command_config;
    double timeout;
} quorum_opts;

/* --command-config FILE, as Kafka's tools take it: security.protocol (PLAINTEXT, SSL,
 * SASL_PLAINTEXT or SASL_SSL), PEM ssl.truststore.* / ssl.keystore.*
 * (ssl.endpoint.identification.algorithm: https only), and for SASL the client's sasl.mechanism
 * and sasl.jaas.config (JaasContext.loadClientContext: the bare key, as every Kafka client).
 * Any other key is refused.  tls stays NULL for PLAINTEXT and SASL_PLAINTEXT. */
typedef struct client_security { char proto[32], ca[1024], cert[1024], mech[32], jaas[2048]; } client_security;

typedef struct quorum_security {
    km_tls_ctx *tls;
    km_quorum_login login;             /* mechanism KM_SASL_NONE: no SASL */
    char user[KM_SASL_NAME_MAX], pass[KM_SASL_NAME_MAX];
} quorum_security;

static int security_key(client_security *s, const char *k, const char *v, km_err *err)
{
    if (!strcmp(k, "security.protocol"))
        snprintf(s->proto, sizeof s->proto, "%s", v);
    else if (!strcmp(k, "ssl.truststore.location"))
        snprintf(s->ca, sizeof s->ca, "%s", v);
    else if (!strcmp(k, "ssl.keystore.location"))
        snprintf(s->cert, sizeof s->cert, "%s", v);
    else if (!strcmp(k, "sasl.mechanism"))
        snprintf(s->mech, sizeof s->mech, "%s", v);
    else if (!strcmp(k, "sasl.jaas.config"))
        snprintf(s->jaas, sizeof s->jaas, "%s", v);
    else if ((!strcmp(k, "ssl.truststore.type") || !strcmp(k, "ssl.keystore.type")) && strcmp(v, "PEM"))
        return km_fail(err, "%s=%s: only PEM", k, v);
    else if (!strcmp(k, "ssl.endpoint.identification.algorithm") && strcmp(v, "https"))
        return km_fail(err, "%s=%s: only https", k, v);
    else if (strcmp(k, "ssl.truststore.type") && strcmp(k, "ssl.keystore.type") &&
             strcmp(k, "ssl.endpoint.identification.algorithm"))
        return km_fail(err, "unknown key '%s'", k);
    return 0;
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    for (size_t n = strlen(s); n && isspace((unsigned char)s[n - 1]);)
        s[--n] = 0;
    return s;
}

static int read_security(const char *path, client_security *s, km_err *err)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return km_fail(err, "%s: cannot open", path);
    char line[2048];
    km_err why;
    for (int n = 1; fgets(line, sizeof line, f); n++) {
        char *l = trim(line), *eq = strchr(l, '=');
        if (!*l || *l == '#')
            continue;
        if (!eq || (*eq = 0, security_key(s, trim(l), trim(eq + 1), &why) < 0)) {
            fclose(f);
            explicit_bzero(line, sizeof line);
            return km_fail(err, "%s:%d: %s", path, n, eq ? why.msg : "expected key=value");
        }
    }
    explicit_bzero(line, sizeof line);
    fclose(f);
    return 0;
}

/* SASL_*: sasl.mechanism (no default: Kafka's is GSSAPI) and the JAAS line; else neither key. */
static int resolve_login(const char *path, const client_security *s, bool sasl, quorum_security *out, km_err *err)
{
    km_err why;
    if (!sasl)
        return s->mech[0] || s->jaas[0] ? km_fail(err, "%s: %s is set but security.protocol is %s: nothing would use it",
                                                  path, s->mech[0] ? "sasl.mechanism" : "sasl.jaas.config", s->proto)
                                        : 0;
    if (!s->mech[0])
        return km_fail(err, "%s: security.protocol=%s needs sasl.mechanism: Kafka's default, GSSAPI, is not supported "
                            "(PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)", path, s->proto);
    if (km_sasl_mech_parse(s->mech, &out->login.mechanism, &why))
        return km_fail(err, "%s: sasl.mechanism=%s: %s", path, s->mech, why.msg);
    if (!s->jaas[0])
        return km_fail(err, "%s: security.protocol=%s needs sasl.jaas.config", path, s->proto);
    if (km_sasl_parse_jaas(s->jaas, out->login.mechanism, out->user, out->pass, &why))
        return km_fail(err, "%s: %s", path, why.msg);
    out->login.username = out->user;
    out->login.password = out->pass;
    return 0;
}

static void free_security(quorum_security *q)
{
    km_tls_ctx_free(q->tls);
    explicit_bzero(q, sizeof *q);
}

static int load_security(const char *path, quorum_security *out, km_err *err)
{
    client_security s = { .proto = "PLAINTEXT" };
    memset(out, 0, sizeof *out);
    bool tls = false, sasl = false;
    int rc = read_security(path, &s, err);
    if (rc == 0) {
        tls = !strcmp(s.proto, "SSL") || !strcmp(s.proto, "SASL_SSL");
        sasl = !strcmp(s.proto, "SASL_PLAINTEXT") || !strcmp(s.proto, "SASL_SSL");
        if (!tls && !sasl && strcmp(s.proto, "PLAINTEXT"))
            rc = km_fail(err, "%s: security.protocol=%s: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL", path, s.proto);
    }
    if (rc == 0)
        rc = resolve_login(path, &s, sasl, out, err);
    explicit_bzero(s.jaas, sizeof s.jaas);
    if (rc == 0 && tls) {
        km_tls_config tc = { .ca_file = s.ca[0] ? s.ca : NULL, .cert_file = s.cert[0] ? s.cert : NULL };
        out->tls = km_tls_client_ctx_new(&tc, err);
        rc = out->tls ? 0 : -1;
    }
    return rc;
}

/* --bootstrap-server X | --bootstrap-server=X, --cluster-id, --timeout; 0 or 2 (usage). */
static int parse_opts(int argc, char **argv, bool allow_cluster_id, quorum_opts *o, const char *cmd)
{
    o->timeout = 30;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *eq = strchr(a, '=');
        size_t name_len = eq ? (size_t)(eq - a) : strlen(a);
        const char *v = eq ? eq + 1 : (i + 1 < argc ? argv[i + 1] : NULL);
        int64_t n;
        if (!v) {
            fprintf(stderr, "kmproxy metadata %s: %s needs a value\n", cmd, a);
            return 2;
        }
        if (!eq)
            i++;
        if (!strncmp(a, "--bootstrap-server", name_len) && name_len == 18)
            o->servers = v;
        else if (allow_cluster_id && name_len == 12 && !strncmp(a, "--cluster-id", 12))
            o->cluster_id = v;
        else if (name_len == 16 && !strncmp(a, "--command-config", 16))
            o->command_config = v;
        else if (name_len == 9 && !strncmp(a, "--timeout", 9) && km_cli_parse_int(v, 1, 86400, &n) == 0)
            o->timeout = (double)n;
        else {
            fprintf(stderr, "kmproxy metadata %s: bad option %s %s\n", cmd, a, v);
            return 2;
        }
    }
    if (!o->servers) {
        fprintf(stderr, "kmproxy metadata %s: --bootstrap-server HOST:PORT is required\n", cmd);
        return 2;
    }
    return 0;
}

static void print_ids(const char *label, const km_quorum_replica *r, int n)
{
    printf("%-24s[", label);
    for (int i = 0; i < n; i++)
        printf("%s%d", i ? "," : "", r[i].id);
    printf("]\n");
}

int km_cli_metadata_quorum(int argc, char **argv)
{
    quorum_opts o = {0};
    int rc = parse_opts(argc, argv, false, &o, "quorum");
    if (rc)
        return rc;
    km_quorum_description d;
    km_err err;
    quorum_security sec = {0};
    if (o.command_config && load_security(o.command_config, &sec, &err) < 0) {
        free_security(&sec);
        fprintf(stderr, "kmproxy metadata quorum: %s\n", err.msg);
        return 2;
    }
    rc = km_quorum_describe(o.servers, sec.tls, &sec.login, o.timeout, &d, &err);
    free_security(&sec);
    if (rc < 0) {
        fprintf(stderr, "kmproxy metadata quorum: %s\n", err.msg);
        return 1;
    }
    int64_t lag_ms = 0, leader_caught = -1;
    for (int i = 0; i < d.n_voters; i++)
        if (d.voters[i].id == d.leader_id)
            leader_caught = d.voters[i].last_caught_up_ms;
    for (int i = 0; i < d.n_voters; i++)
        if (leader_caught >= 0 && d.voters[i].last_caught_up_ms >= 0 && leader_caught - d.voters[i].last_caught_up_ms > lag_ms)
            lag_ms = leader_caught - d.voters[i].last_caught_up_ms;
    printf("%-24s%d\n", "LeaderId:", d.leader_id);
    printf("%-24s%d\n", "LeaderEpoch:", d.leader_epoch);
    printf("%-24s%" PRId64 "\n", "HighWatermark:", d.high_watermark);
    printf("%-24s%d\n", "MaxFollowerLag:", d.max_follower_lag);
    printf("%-24s%" PRId64 "\n", "MaxFollowerLagTimeMs:", lag_ms);
    print_ids("CurrentVoters:", d.voters, d.n_voters);
    print_ids("CurrentObservers:", d.observers, d.n_observers);
    return fflush(stdout) == 0 ? 0 : 1;
}

/* ---- dump ------------------------------------------------------------------------------------- */

typedef struct dump_ctx {
    struct ev_loop *loop;
    km_quorum *q;
    int rc;                    /* -1 while running */
    km_err err;
} dump_ctx;

static void on_record(km_quorum *q, const km_metalog_record *rec, void *ud)
{
    (void)q;
    dump_ctx *d = ud;
    km_err err;
    json_t *j = km_cli_record_json(rec, &err);
    if (!j) {
        d->rc = 1;
        d->err = err;
        ev_break(d->loop, EVBREAK_ALL);
        return;
    }
    char *s = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(j);
    if (s)
        puts(s);
    free(s);
}

static void on_fatal(km_quorum *q, const km_err *why, void *ud)
{
    (void)q;
    dump_ctx *d = ud;
    d->rc = 1;
    d->err = *why;
    ev_break(d->loop, EVBREAK_ALL);
}

static void on_check(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)revents;
    dump_ctx *d = w->data;
    km_quorum_stats st;
    km_quorum_get_stats(d->q, &st);
    if (st.caught_up && d->rc < 0) {
        d->rc = 0;
        ev_break(loop, EVBREAK_ALL);
    }
}

static void on_deadline(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)revents;
    dump_ctx *d = w->data;
    km_quorum_stats st;
    km_quorum_get_stats(d->q, &st);
    km_fail(&d->err, "did not reach the quorum's high watermark in time (applied up to %lld of high watermark %lld%s%s)",
            (long long)st.applied_offset, (long long)st.high_watermark, st.last_error[0] ? "; last failure: " : "",
            st.last_error);
    d->rc = 1;
    ev_break(loop, EVBREAK_ALL);
}

/* Observes the quorum into img until caught up with its high watermark (d->rc 0), a fatal error or the
 * deadline (d->rc 1, d->err).  -1 when the observer could not even start (d->err). */
static int follow_to_hw(dump_ctx *d, const km_quorum_config *cfg, km_image *img, const km_quorum_handlers *h,
                        double timeout_s)
{
    if (!(d->q = km_quorum_new(d->loop, cfg, img, h, d, &d->err)))
        return -1;
    ev_timer check, deadline;
    ev_timer_init(&check, on_check, 0.01, 0.01);
    ev_timer_init(&deadline, on_deadline, timeout_s, 0.);
    check.data = deadline.data = d;
    ev_timer_start(d->loop, &check);
    ev_timer_start(d->loop, &deadline);
    ev_run(d->loop, 0);
    km_quorum_free(d->q);
    return 0;
}

int km_cli_metadata_dump_quorum(int argc, char **argv)
{
    quorum_opts o = {0};
    int rc = parse_opts(argc, argv, true, &o, "dump");
    if (rc)
        return rc;
    dump_ctx d = { .rc = -1 };
    quorum_security sec = {0};
    if (o.command_config && load_security(o.command_config, &sec, &d.err) < 0) {
        free_security(&sec);
        fprintf(stderr, "kmproxy metadata dump: %s\n", d.err.msg);
        return 2;
    }
    d.loop = ev_loop_new(EVFLAG_AUTO);
    km_image *img = km_image_new();
    km_quorum_config cfg;
    km_quorum_config_init(&cfg);
    cfg.bootstrap_servers = o.servers;
    cfg.cluster_id = o.cluster_id;
    cfg.tls = sec.tls;
    cfg.sasl = sec.login;
    cfg.snapshot_hold_whole = true; /* print no record of a snapshot refused later */
    cfg.quiet = true;
    cfg.unauthorized_fatal = true; /* as Kafka's raft client: an ACL is missing, retrying cannot help */
    km_quorum_handlers h = { .on_record = on_record, .on_fatal = on_fatal };
    if (follow_to_hw(&d, &cfg, img, &h, o.timeout) < 0)
        d.rc = 2;
    km_image_free(img);
    ev_loop_destroy(d.loop);
    free_security(&sec);
    fflush(stdout);
    if (d.rc != 0)
        fprintf(stderr, "kmproxy metadata dump: %s\n", d.err.msg);
    return d.rc;
}

/* ---- the image, fetched as an observer (kmproxy verify --bootstrap-server) ------------------------------------ */

int km_cli_quorum_image(const char *servers, const char *cluster_id, const char *command_config, double timeout_s,
                        km_image *img, km_err *err)
{
    dump_ctx d = { .rc = -1 };
    quorum_security sec = {0};
    if (command_config && load_security(command_config, &sec, err) < 0) {
        free_security(&sec);
        return -1;
    }
    d.loop = ev_loop_new(EVFLAG_AUTO);
    km_quorum_config cfg;
    km_quorum_config_init(&cfg);
    cfg.bootstrap_servers = servers;
    cfg.cluster_id = cluster_id;
    cfg.tls = sec.tls;
    cfg.sasl = sec.login;
    cfg.quiet = true;
    cfg.unauthorized_fatal = true;
    km_quorum_handlers h = { .on_fatal = on_fatal };
    if (follow_to_hw(&d, &cfg, img, &h, timeout_s) < 0)
        d.rc = 1;
    ev_loop_destroy(d.loop);
    free_security(&sec);
    if (d.rc != 0)
        *err = d.err;
    return d.rc == 0 ? 0 : -1;
}
