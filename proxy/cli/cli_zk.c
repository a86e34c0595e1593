/* kmproxy zk sync|diff: mirror a KRaft metadata image into ZooKeeper, or list how they differ.
 *   sync   claims leadership, writes the difference, exits 0 with a summary (or keeps dual-writing
 *          with --follow until SIGINT/SIGTERM).
 *   diff   reads only: prints "+ path" (missing in ZooKeeper), "~ path" (differs), "- path"
 *          (ZooKeeper has it, the image does not). */
#include "km_cli.h"
#include "km_config.h"
#include "km_image.h"
#include "km_zkbridge.h"

#include <errno.h>
#include <ev.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct zk_cli {
    const char *zookeeper, *metadata;
    bool follow, diff, verbose;
    int32_t controller_id, controller_epoch;
    long max_pending;
    int32_t connect_timeout_ms;   /* no session by then: exit 1 naming the address (0: the session timeout) */
    km_zk_guard guard;        /* --force, --max-deletes */
    const char *cluster_id;   /* --cluster-id; NULL: meta.properties beside the log */
    const char *secret;       /* from --password-encoder-secret-file; NULL: passwords stored as they are */
    char secret_buf[4096];
    km_zk_password_config pw; /* the other password.encoder.* settings (0/NULL: Kafka's defaults) */
    km_config zk_cfg;         /* --zk-config: the daemon's zookeeper.* security keys */
    km_config_zk_security zk_sec;
    struct ev_loop *loop;
    km_image *img;
    km_image_follow *fol;
    km_delta *delta;
    km_zkb *b;
    ev_timer tick, progress, deadline;
    double last_at;               /* when `last` was sampled */
    ev_signal sigint, sigterm;
    km_zkb_progress last;         /* the previous progress sample, for the rate */
    bool synced;                  /* reached dual write once (--follow: a signal then ends it normally) */
    int exit_code;
    bool done;
} zk_cli;

#define ZK_SESSION_TIMEOUT_MS 10000  /* what the CLI asks ZooKeeper for */
#define PROGRESS_SECONDS 2.0

static int usage(FILE *to, int code)
{
    fprintf(to, "usage: kmproxy zk sync --zookeeper HOST:PORT[/chroot] --metadata PATH [--follow]\n"
                "                       [--controller-id N] [--controller-epoch N] [--max-pending N] [-v]\n"
                "                       [--zookeeper-connect-timeout-ms MS]\n"
                "                       [--password-encoder-secret-file FILE [ENCODER OPTIONS]]\n"
                "                       [--cluster-id ID] [--max-deletes N] [--force] [--zk-config FILE]\n"
                "       kmproxy zk diff --zookeeper HOST:PORT[/chroot] --metadata PATH\n"
                "                       [--zookeeper-connect-timeout-ms MS] [--zk-config FILE]\n"
                "                       [--password-encoder-secret-file FILE [ENCODER OPTIONS]]\n"
                "PATH is a log segment, a .checkpoint file or a __cluster_metadata-0 directory; its cluster\n"
                "id comes from meta.properties beside it, or --cluster-id.\n"
                "sync refuses (exit 2, before claiming) an image of another cluster, an empty image, an\n"
                "image Kafka's migration driver would not sync (ZkMigrationState, /migration), one behind\n"
                "/migration, and a live ZK-mode controller that has not handed over; --force overrides\n"
                "these but never a cluster id mismatch or an empty image. --max-deletes N (-1: no limit)\n"
                "stops (exit 2) a sync that would delete more znodes before it writes any, listing them\n"
                "(diff lists them too, and says why a sync would refuse); the default is 0 on the first\n"
                "sync of a cluster ZK-mode brokers wrote (/migration absent or never written), no limit after.\n"
                "diff exits 0 when ZooKeeper equals the image, 1 when they differ, 2 on bad input (a znode\n"
                "whose ZooKeeper ACL denies the configured identity: \"not authorized to read PATH\").\n"
                "--zk-config FILE: the daemon's zookeeper.* keys (TLS, the JAAS file for SASL, digest,\n"
                "zookeeper.set.acl, zookeeper.jute.maxbuffer); with zookeeper.set.acl=true diff also lists\n"
                "\"! path\" for every znode whose ACL is not the one Kafka gives it (ZkData.defaultAcls).\n"
                "The controller id/epoch default to the raft leader and epoch seen in the log.\n"
                "Without a ZooKeeper session after MS (default: the 10000 ms session timeout) the\n"
                "command exits 1; progress goes to stderr every few seconds. Interrupted (SIGINT,\n"
                "SIGTERM) it exits 130/143 without a result (sync --follow once in sync: 0).\n"
                "FILE's first line is Kafka's password.encoder.secret: password-type configs are\n"
                "written encrypted with it; without it, as they are. ENCODER OPTIONS are the brokers'\n"
                "other password.encoder.* settings (brokers decode only their own cipher's format):\n"
                "  --password-encoder-cipher-algorithm ALG   (default AES/CBC/PKCS5Padding)\n"
                "  --password-encoder-keyfactory-algorithm ALG (default PBKDF2WithHmacSHA512)\n"
                "  --password-encoder-key-length BITS        (default 128)\n"
                "  --password-encoder-iterations N           (default 4096)\n");
    return code;
}

/* The secret comes from a file: on the command line it would show in ps. */
static int read_secret(zk_cli *c, const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return fprintf(stderr, "kmproxy zk: --password-encoder-secret-file %s: %s\n", path, strerror(errno)), -1;
    bool got = fgets(c->secret_buf, sizeof c->secret_buf, f) != NULL;
    fclose(f);
    size_t n = got ? strcspn(c->secret_buf, "\r\n") : 0;
    if (got && !c->secret_buf[n] && n == sizeof c->secret_buf - 1)
        return fprintf(stderr, "kmproxy zk: %s: the secret is longer than %zu bytes\n", path, n), -1;
    c->secret_buf[n] = '\0';
    if (!n)
        return fprintf(stderr, "kmproxy zk: %s: the first line (the secret) is empty\n", path), -1;
    c->secret = c->secret_buf;
    return 0;
}

/* A whole number in [lo, hi] into *out (no trailing text: "3x" is refused), or -1 naming the option. */
static int parse_num(const char *opt, const char *arg, int64_t lo, int64_t hi, int64_t *out)
{
    if (km_cli_parse_int(arg, lo, hi, out))
        return fprintf(stderr, "kmproxy zk: --%s %s: not a whole number in [%lld, %lld]\n", opt, arg, (long long)lo,
                       (long long)hi), -1;
    return 0;
}

/* A whole positive number (at most 10^8) into *out, or -1 naming the option. */
static int parse_count(const char *opt, const char *arg, int *out)
{
    int64_t v;
    if (parse_num(opt, arg, 1, 100000000, &v))
        return -1;
    *out = (int)v;
    return 0;
}

static int parse_i32(const char *opt, const char *arg, int32_t *out)
{
    int64_t v;
    if (parse_num(opt, arg, 0, INT32_MAX, &v))
        return -1;
    *out = (int32_t)v;
    return 0;
}

static int parse_max_deletes(zk_cli *c, const char *arg)
{
    int64_t v;
    if (km_cli_parse_int(arg, -1, INT64_MAX, &v))
        return fprintf(stderr, "kmproxy zk: --max-deletes %s: not a whole number >= -1\n", arg), -1;
    c->guard.max_deletes_set = true;
    c->guard.max_deletes = v;
    return 0;
}

/* An unsupported algorithm or length is refused before anything is read or written. */
static int check_encoder(zk_cli *c)
{
    km_err err = {{0}};
    km_zk_password_config pw = c->pw;
    pw.secret = c->secret;
    km_zk_pwenc *e = km_zk_pwenc_new(&pw, &err);
    if (!e)
        return fprintf(stderr, "kmproxy zk: %s\n", err.msg), -1;
    km_zk_pwenc_free(e);
    return 0;
}

/* --zk-config FILE: a .properties file with the daemon's zookeeper.* security keys (TLS, SASL's
 * JAAS file, digest, zookeeper.set.acl), as Kafka's tools take --zk-tls-config-file. */
static int load_zk_config(zk_cli *c, const char *path)
{
    km_err err = {{0}};
    km_config_defaults(&c->zk_cfg);
    if (km_config_load(&c->zk_cfg, path, &err) || km_config_resolve_zk_security(&c->zk_cfg, &c->zk_sec, &err) ||
        km_zk_security_check(&c->zk_sec.sec, &err))
        return fprintf(stderr, "kmproxy zk: --zk-config %s: %s\n", path, err.msg), -1;
    return 0;
}

static int parse(zk_cli *c, int argc, char **argv)
{
    static const struct option opts[] = {
        {"zookeeper", required_argument, NULL, 'z'}, {"metadata", required_argument, NULL, 'm'},
        {"follow", no_argument, NULL, 'f'}, {"controller-id", required_argument, NULL, 'i'},
        {"controller-epoch", required_argument, NULL, 'e'}, {"max-pending", required_argument, NULL, 'p'},
        {"verbose", no_argument, NULL, 'v'}, {"help", no_argument, NULL, 'h'},
        {"password-encoder-secret-file", required_argument, NULL, 's'},
        {"password-encoder-cipher-algorithm", required_argument, NULL, 'C'},
        {"password-encoder-keyfactory-algorithm", required_argument, NULL, 'K'},
        {"password-encoder-key-length", required_argument, NULL, 'L'},
        {"password-encoder-iterations", required_argument, NULL, 'I'}, {"force", no_argument, NULL, 'F'},
        {"max-deletes", required_argument, NULL, 'D'}, {"cluster-id", required_argument, NULL, 'c'},
        {"zookeeper-connect-timeout-ms", required_argument, NULL, 'T'},
        {"zk-config", required_argument, NULL, 'Z'}, {0}};
    int ch;
    int64_t num;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "z:m:fi:e:p:vh", opts, NULL)) != -1) {
        switch (ch) {
        case 'z': c->zookeeper = optarg; break;
        case 'm': c->metadata = optarg; break;
        case 'f': c->follow = true; break;
        case 'i': if (parse_i32("controller-id", optarg, &c->controller_id)) return -1; break;
        case 'e': if (parse_i32("controller-epoch", optarg, &c->controller_epoch)) return -1; break;
        case 'p': if (parse_num("max-pending", optarg, 0, 1000000000, &num)) return -1; c->max_pending = num; break;
        case 'v': c->verbose = true; break;
        case 'T': if (parse_num("zookeeper-connect-timeout-ms", optarg, 1, INT32_MAX, &num)) return -1;
                  c->connect_timeout_ms = (int32_t)num; break;
        case 's': if (read_secret(c, optarg)) return -1; break;
        case 'C': c->pw.cipher_algorithm = optarg; break;
        case 'K': c->pw.keyfactory_algorithm = optarg; break;
        case 'L': if (parse_count("password-encoder-key-length", optarg, &c->pw.key_length)) return -1; break;
        case 'I': if (parse_count("password-encoder-iterations", optarg, &c->pw.iterations)) return -1; break;
        case 'F': c->guard.force = true; break;
        case 'D': if (parse_max_deletes(c, optarg)) return -1; break;
        case 'c': c->cluster_id = optarg; break;
        case 'Z': if (load_zk_config(c, optarg)) return -1; break;
        case 'h': return usage(stdout, 0) ? 1 : 1;
        default: return -1;
        }
    }
    if (!c->zookeeper || !c->metadata || (c->follow && c->diff) || c->max_pending < 0)
        return -1;
    return check_encoder(c);
}

static void cli_log(km_log_level lvl, const char *msg, void *ctx)
{
    zk_cli *c = ctx;
    static const char *names[] = {"", "ERROR", "WARN", "INFO", "DEBUG"};
    if (lvl <= KM_LOG_WARN || (c->verbose && lvl <= KM_LOG_INFO))
        fprintf(stderr, "kmproxy zk %s: %s\n", names[lvl], msg);
}

/* Reads what the log has now; each complete batch's delta goes to the bridge. Bounded: not while
 * the write-behind bound is full, nor while a sync pass renders the image (it would chase a
 * moving image); before the claim the image may run ahead, the sync renders it as it is. */
static int read_log(zk_cli *c)
{
    km_err err = {{0}};
    while (!c->b || km_zkb_can_accept(c->b) || km_zkb_get_phase(c->b) == KM_ZKB_WAITING) {
        int r = km_image_follow_next(c->fol, c->delta, &err);
        if (r < 0) {
            fprintf(stderr, "kmproxy zk: %s\n", err.msg);
            return -1;
        }
        if (r == 0)
            return 0;
        if (c->b && km_zkb_delta(c->b, c->delta, &err)) {
            fprintf(stderr, "kmproxy zk: %s\n", err.msg);
            return -1;
        }
    }
    return 0;
}

static void finish(zk_cli *c, int code)
{
    c->exit_code = code;
    c->done = true;
    ev_break(c->loop, EVBREAK_ALL);
}

static const char *cmd_name(const zk_cli *c) { return c->diff ? "zk diff" : "zk sync"; }

static bool has_session(zk_cli *c)
{
    km_zkw_metrics m;
    km_zkw_get_metrics(km_zkb_writer(c->b), &m);
    return m.sessions > 0;
}

/* No session by the deadline: ZooKeeper is unreachable (or the address is wrong); waiting longer
 * silently is what made `timeout 60 kmproxy zk diff` look like success. */
static void on_deadline(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)loop; (void)revents;
    zk_cli *c = t->data;
    if (has_session(c))
        return;
    fprintf(stderr, "kmproxy %s: no ZooKeeper session with %s within %d ms (--zookeeper-connect-timeout-ms): "
                    "nothing was compared or written\n", cmd_name(c), c->zookeeper, c->connect_timeout_ms);
    finish(c, 1);
}

/* A line on stderr every few seconds while connecting and while syncing: never silent. */
static void on_progress(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)revents;
    zk_cli *c = t->data;
    if (!has_session(c)) {
        fprintf(stderr, "kmproxy %s: connecting to ZooKeeper at %s: no session yet\n", cmd_name(c), c->zookeeper);
        return;
    }
    km_zkb_progress p;
    km_zkb_eta e;
    km_zkb_get_progress(c->b, &p);
    km_zkb_progress_eta(&p, &c->last, ev_now(loop) - c->last_at, c->diff, &e);
    c->last = p;
    c->last_at = ev_now(loop);
    char line[256];
    km_zkb_eta_format(&e, line, sizeof line);
    if (p.phase == KM_ZKB_WAITING)
        fprintf(stderr, "kmproxy %s: connected to %s; %s\n", cmd_name(c), c->zookeeper,
                c->diff ? "starting to read" : "claiming leadership");
    else if (p.phase == KM_ZKB_SYNC)
        fprintf(stderr, "kmproxy %s: %s\n", cmd_name(c), line);
}

static void on_tick(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)loop; (void)revents;
    zk_cli *c = t->data;
    km_zkb_phase ph = km_zkb_get_phase(c->b);
    if (ph == KM_ZKB_STOPPED && km_zkb_refused(c->b)) {
        fputs(km_zkb_refused_deletes(c->b), stdout); /* what the sync would have deleted */
        fprintf(stderr, "kmproxy zk: refused: %s\n", km_zkb_error(c->b));
        return finish(c, 2);
    }
    c->synced |= ph == KM_ZKB_DUAL_WRITE;
    if (ph == KM_ZKB_STOPPED) {
        fprintf(stderr, "kmproxy zk: stopped: %s\n", km_zkb_error(c->b));
        return finish(c, 1);
    }
    if (c->follow && read_log(c))
        return finish(c, 1);
    if (!c->follow && ph == KM_ZKB_DUAL_WRITE && (c->diff || km_zkb_idle(c->b)))
        finish(c, 0);
}

/* --follow ends with a signal once in sync (what it did is the summary); anything else a signal
 * ends has no result to show: 128 + the signal, like a shell reports it. */
static void on_signal(struct ev_loop *loop, ev_signal *s, int revents)
{
    (void)loop; (void)revents;
    zk_cli *c = s->data;
    if (c->follow && c->synced)
        return finish(c, 0);
    km_zkb_progress p;
    km_zkb_eta e;
    km_zkb_get_progress(c->b, &p);
    km_zkb_progress_eta(&p, NULL, 0, c->diff, &e);
    fprintf(stderr, "kmproxy %s: interrupted by %s while %s: no result\n", cmd_name(c),
            s->signum == SIGINT ? "SIGINT" : "SIGTERM", has_session(c) ? e.stage : "connecting to ZooKeeper");
    finish(c, 128 + s->signum);
}

/* The guard checks it against /cluster/id: Kafka keeps it in meta.properties, not in the log. */
static int load_cluster_id(zk_cli *c, km_err *err)
{
    if (c->cluster_id)
        return km_image_set_cluster_id(c->img, c->cluster_id, err);
    return km_image_load_meta_properties(c->img, c->metadata, err) < 0 ? -1 : 0;
}

static int load_image(zk_cli *c)
{
    km_err err = {{0}};
    c->img = km_image_new();
    c->delta = km_delta_new();
    km_metalog_opts opts = {0};
    if (!c->img || !c->delta || load_cluster_id(c, &err) ||
        !(c->fol = km_image_follow_open(c->img, c->metadata, &opts, &err))) {
        fprintf(stderr, "kmproxy zk: %s: %s\n", c->metadata, err.msg[0] ? err.msg : "out of memory");
        return -1;
    }
    if (read_log(c))
        return -1;
    if (!c->controller_id)
        c->controller_id = km_image_raft_leader(c->img) >= 0 ? km_image_raft_leader(c->img) : 3000;
    if (!c->controller_epoch)
        c->controller_epoch = km_image_raft_leader_epoch(c->img) > 0 ? km_image_raft_leader_epoch(c->img)
                              : km_image_epoch(c->img) > 0 ? km_image_epoch(c->img) : 1;
    return 0;
}

static void print_summary(zk_cli *c)
{
    km_zkb_summary s;
    km_zkb_get_summary(c->b, &s);
    km_zkw *w = km_zkb_writer(c->b);
    if (c->diff) {
        fputs(s.diff, stdout);
        printf("zk diff: %zu missing in ZooKeeper, %zu different, %zu only in ZooKeeper\n", s.created, s.updated,
               s.deleted);
        if (km_zkb_sync_verdict(c->b)[0])
            printf("zk diff: a sync would refuse: %s\n", km_zkb_sync_verdict(c->b));
        c->exit_code = s.created + s.updated + s.deleted ? 1 : 0; /* as diff(1) */
        if (c->zk_sec.sec.set_acl && !s.acls_checked) {
            printf("zk diff: the ACLs could not all be read: not compared\n");
            c->exit_code = 2;
        } else if (c->zk_sec.sec.set_acl) {
            printf("zk diff: %zu znodes with ACLs other than Kafka's (zookeeper.set.acl=true)\n", s.acl_differences);
            c->exit_code |= s.acl_differences ? 1 : 0;
        }
        return;
    }
    printf("zk sync: %zu znodes created, %zu updated, %zu deleted; /migration at offset %lld epoch %d "
           "(zkVersion %d); controller %d epoch %d, /controller_epoch %d\n",
           s.created, s.updated, s.deleted, (long long)km_zkw_confirmed_offset(w), km_zkw_confirmed_epoch(w),
           km_zkw_migration_version(w), c->controller_id, c->controller_epoch, km_zkw_zk_controller_epoch(w));
    char *m = km_zkw_metrics_json(w);
    if (m && c->verbose)
        fprintf(stderr, "%s\n", m);
    free(m);
}

static int run(zk_cli *c)
{
    km_err err = {{0}};
    km_zkb_config cfg = {0};
    cfg.zk.hosts = c->zookeeper;
    cfg.zk.session_timeout_ms = ZK_SESSION_TIMEOUT_MS;
    cfg.zk.controller_id = c->controller_id;
    cfg.zk.controller_epoch = c->controller_epoch;
    cfg.zk.max_pending_ops = (size_t)c->max_pending;
    cfg.zk.jute_maxbuffer = (size_t)c->zk_cfg.zk_jute_maxbuffer; /* 0 without --zk-config: ZooKeeper's default */
    cfg.zk.log = cli_log;
    cfg.zk.ctx = c;
    cfg.zk.security = &c->zk_sec.sec;
    cfg.diff_only = c->diff;
    cfg.guard = c->guard;
    cfg.passwords = c->pw;
    cfg.passwords.secret = c->secret;
    c->loop = ev_loop_new(EVFLAG_AUTO);
    if (!c->loop || !(c->b = km_zkb_new(c->loop, c->img, &cfg, &err))) {
        fprintf(stderr, "kmproxy zk: %s\n", err.msg[0] ? err.msg : "cannot create the event loop");
        return 1;
    }
    ev_timer_init(&c->tick, on_tick, 0.02, 0.02);
    ev_timer_init(&c->progress, on_progress, PROGRESS_SECONDS, PROGRESS_SECONDS);
    if (!c->connect_timeout_ms)
        c->connect_timeout_ms = ZK_SESSION_TIMEOUT_MS;
    ev_timer_init(&c->deadline, on_deadline, c->connect_timeout_ms / 1000.0, 0);
    c->tick.data = c->progress.data = c->deadline.data = c;
    ev_timer_start(c->loop, &c->tick);
    ev_timer_start(c->loop, &c->progress);
    ev_timer_start(c->loop, &c->deadline);
    c->last_at = ev_now(c->loop);
    fprintf(stderr, "kmproxy %s: connecting to ZooKeeper at %s (giving up after %d ms)\n", cmd_name(c),
            c->zookeeper, c->connect_timeout_ms);
    ev_signal_init(&c->sigint, on_signal, SIGINT);
    ev_signal_init(&c->sigterm, on_signal, SIGTERM);
    c->sigint.data = c->sigterm.data = c;
    ev_signal_start(c->loop, &c->sigint);
    ev_signal_start(c->loop, &c->sigterm);
    ev_run(c->loop, 0);
    if (c->exit_code == 0)
        print_summary(c); /* diff: sets 1 when ZooKeeper differs from the image */
    ev_timer_stop(c->loop, &c->tick);
    ev_timer_stop(c->loop, &c->progress);
    ev_timer_stop(c->loop, &c->deadline);
    ev_signal_stop(c->loop, &c->sigint);
    ev_signal_stop(c->loop, &c->sigterm);
    km_zkb_free(c->b);
    ev_loop_destroy(c->loop);
    return c->exit_code;
}

int km_cli_zk(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))
        return usage(argc < 2 ? stderr : stdout, argc < 2 ? 2 : 0);
    zk_cli c = {0};
    if (!strcmp(argv[1], "diff"))
        c.diff = true;
    else if (strcmp(argv[1], "sync"))
        return fprintf(stderr, "kmproxy zk: unknown subcommand '%s'\n", argv[1]), usage(stderr, 2);
    int p = parse(&c, argc - 1, argv + 1);
    if (p) {
        km_config_zk_security_clear(&c.zk_sec);
        km_config_free(&c.zk_cfg);
        return p > 0 ? 0 : usage(stderr, 2);
    }
    int rc = load_image(&c) ? 2 : run(&c);
    km_image_follow_close(c.fol);
    km_delta_free(c.delta);
    km_image_free(c.img);
    km_config_zk_security_clear(&c.zk_sec);
    km_config_free(&c.zk_cfg);
    return rc;
}
