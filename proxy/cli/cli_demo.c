/* kmproxy demo: the whole product on an embedded synthetic cluster, on this machine only.
 *
 * A KRaft metadata log of a cluster in migration (ZK-mode brokers registered with
 * IsMigratingZkBroker), a real ZooKeeper on loopback, simulated ZK-mode brokers, and the daemon
 * between them.  It waits until ZooKeeper and every broker equal the image, appends live changes
 * to the log (leader elections, a topic deletion, a new topic), and checks they converge again. */
#include "cli_demo.h"
#include "km_cli.h"
#include "km_daemon.h"
#include "km_localzk.h"

#include <ev.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define STAGE_TIMEOUT 60.0

typedef struct demo_opts {
    int brokers, topics, partitions, leader_changes;
    bool keep;
    bool quorum;             /* --quorum: metadata.source=quorum against kmproxy-raftsim */
} demo_opts;

typedef struct demo {
    demo_opts o;
    char workdir[1024], logdir[PATH_MAX];
    km_localzk zk;
    demo_quorum quorum;
    demo_sim sims[DEMO_MAX_BROKERS];
    struct ev_loop *loop;
    km_daemon *daemon;
    ev_timer tick;
    double waited;
    int64_t target_offset;   /* the stage is done when everything is at this offset */
    bool converged;
    int expected_brokers;    /* channels that must be in sync */
} demo;

static void tick_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)revents;
    demo *d = t->data;
    km_daemon_status st;
    km_daemon_get_status(d->daemon, &st);
    d->waited += t->repeat;
    d->converged = !st.fatal && st.image_offset == d->target_offset && st.zk_idle &&
                   st.zk_confirmed_offset == d->target_offset && st.brokers_in_sync == d->expected_brokers &&
                   st.broker_requests_pending == 0;
    if (d->converged || st.fatal || d->waited > STAGE_TIMEOUT) {
        if (!d->converged)
            printf("  not converged after %.0f s: image %lld, ZooKeeper %s at %lld, brokers %d/%d in sync, "
                   "%zu requests pending%s%s\n", d->waited, (long long)st.image_offset,
                   st.zk_state ? st.zk_state : "-", (long long)st.zk_confirmed_offset, st.brokers_in_sync,
                   st.brokers_total, st.broker_requests_pending, st.fatal ? "; " : "", st.fatal ? st.fatal : "");
        ev_break(loop, EVBREAK_ONE);
    }
}

/* Runs the loop until everything reaches target (or the stage times out). */
static bool wait_converged(demo *d, int64_t target)
{
    d->target_offset = target;
    d->waited = 0;
    d->converged = false;
    ev_timer_again(d->loop, &d->tick);
    ev_run(d->loop, 0);
    ev_timer_stop(d->loop, &d->tick);
    return d->converged;
}

/* What an operator would run: kmproxy zk diff against the log. */
static int zk_diff(demo *d)
{
    char cmd[3 * PATH_MAX];
    snprintf(cmd, sizeof cmd, "'/proc/%d/exe' zk diff --zookeeper '%s/kafka' --metadata '%s' 2>&1", (int)getpid(),
             d->zk.hosts, d->logdir);
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    char line[1024];
    while (fgets(line, sizeof line, p))
        printf("    %s", line);
    return pclose(p);
}

static bool verify(demo *d, const char *when)
{
    km_image *img = km_image_new();
    km_err err = {{0}};
    bool ok = km_image_load(img, d->logdir, NULL, &err) >= 0;
    printf("%s: image at offset %lld, %zu topics, %zu partitions\n", when, (long long)km_image_offset(img),
           km_image_topic_count(img), km_image_partition_count(img));
    printf("  ZooKeeper (kmproxy zk diff):\n");
    ok = ok && zk_diff(d) == 0;
    int bad = ok ? demo_check_brokers(d->sims, (int)km_image_broker_count(img), img, &err) : -1;
    if (bad < 0 && err.msg[0])
        printf("  cannot check the brokers: %s\n", err.msg);
    km_image_free(img);
    return ok && bad == 0;
}

static int make_cluster(demo *d, km_err *err)
{
    char kafka[1100];
    snprintf(kafka, sizeof kafka, "%s/kafka", d->workdir);
    snprintf(d->logdir, sizeof d->logdir, "%s/__cluster_metadata-0", kafka);
    if (mkdir(kafka, 0755) || demo_pick_ports(d->sims, d->o.brokers + 1, err))  /* +1: joins later */
        return err->msg[0] ? -1 : km_fail(err, "%s: cannot create", kafka);
    uint16_t ports[DEMO_MAX_BROKERS];
    for (int i = 0; i < d->o.brokers; i++)
        ports[i] = d->sims[i].port;
    km_gen_opts g = {.brokers = d->o.brokers, .topics = d->o.topics, .partitions = d->o.partitions,
                     .zk_migration = true, .seed = 42, .broker_host = "127.0.0.1", .broker_ports = ports};
    km_image *img = km_image_new();
    int64_t n = km_gen_write(d->logdir, &g, img, err);
    if (n >= 0) {
        printf("metadata log: %lld records in %s\n  %d ZK-mode brokers migrating to KRaft, %d topics, %zu partitions, "
               "metadata.version %d\n", (long long)n, d->logdir, d->o.brokers, d->o.topics,
               km_image_partition_count(img), km_image_metadata_version(img));
        if (demo_start_sims(d->sims, d->o.brokers + 1, img, d->workdir, err))
            n = -1;
    }
    km_image_free(img);
    return n < 0 ? -1 : 0;
}

static int start_daemon(demo *d, km_err *err)
{
    km_config cfg;
    km_config_defaults(&cfg);
    char zk[64];
    snprintf(zk, sizeof zk, "%s/kafka", d->zk.hosts);  /* a chroot, as clusters use; created if missing */
    char servers[64];
    snprintf(servers, sizeof servers, "127.0.0.1:%u", d->quorum.port);
    if ((d->o.quorum ? km_config_set(&cfg, "controller.quorum.bootstrap.servers", servers, "demo", err)
                     : (km_config_set(&cfg, "metadata.source", "dir", "demo", err) ||
                        km_config_set(&cfg, "metadata.dir", d->logdir, "demo", err))) ||
        km_config_set(&cfg, "zookeeper.connect", zk, "demo", err) ||
        km_config_set(&cfg, "metrics.listen", "127.0.0.1:0", "demo", err) ||
        km_config_set(&cfg, "log.level", "warn", "demo", err)) {
        km_config_free(&cfg);
        return -1;
    }
    d->daemon = km_daemon_new(d->loop, &cfg, err);
    km_config_free(&cfg);
    if (!d->daemon)
        return -1;
    km_daemon_start(d->daemon);
    if (d->o.quorum)
        printf("kmproxy: an observer of the KRaft quorum at %s (kmproxy-raftsim serving the log)\n", servers);
    printf("kmproxy: following the log, mirroring into ZooKeeper %s, metrics on http://127.0.0.1:%u/metrics\n",
           zk, km_daemon_metrics_port(d->daemon));
    return 0;
}

static bool run_stages(demo *d)
{
    km_image *img = km_image_new();
    km_err err = {{0}};
    bool ok = km_image_load(img, d->logdir, NULL, &err) >= 0 && wait_converged(d, km_image_offset(img)) &&
              verify(d, "\nafter the full sync");
    const demo_sim *newcomer = &d->sims[d->o.brokers];
    int n = ok ? demo_append_changes(d->logdir, img, d->o.leader_changes, newcomer, &err) : -1;
    if (n > 0)
        printf("\nappended %d records: %d leader elections, a topic deletion, a new topic, broker %d joining,\n"
               "  and a partition reassigned onto it\n", n, d->o.leader_changes, newcomer->id);
    d->expected_brokers = d->o.brokers + 1;
    km_image_free(img);
    img = km_image_new();
    ok = n > 0 && km_image_load(img, d->logdir, NULL, &err) >= 0 && wait_converged(d, km_image_offset(img)) &&
         verify(d, "after the live changes");
    if (err.msg[0])
        printf("demo: %s\n", err.msg);
    km_image_free(img);
    return ok;
}

static int parse_demo_opts(int argc, char **argv, demo_opts *o)
{
    static const struct option longopts[] = {
        {"brokers", required_argument, 0, 'b'}, {"topics", required_argument, 0, 't'},
        {"partitions", required_argument, 0, 'p'}, {"leader-changes", required_argument, 0, 'l'},
        {"keep", no_argument, 0, 'k'}, {"quorum", no_argument, 0, 'q'}, {0, 0, 0, 0}};
    *o = (demo_opts){.brokers = 5, .topics = 20, .partitions = 8, .leader_changes = 25};
    optind = 1;
    int64_t v = 0;
    int at = 0;
    for (int c; (c = getopt_long(argc, argv, "", longopts, &at)) != -1;) {
        if (c != 'k' && optarg && km_cli_parse_int(optarg, 0, 1000000, &v))
            return fprintf(stderr, "kmproxy demo: --%s %s: not a whole number\n", longopts[at].name, optarg), -1;
        switch (c) {
        case 'b': o->brokers = (int)v; break;
        case 't': o->topics = (int)v; break;
        case 'p': o->partitions = (int)v; break;
        case 'l': o->leader_changes = (int)v; break;
        case 'k': o->keep = true; break;
        case 'q': o->quorum = true; break;
        default: return -1;
        }
    }
    if (optind != argc)
        return -1;
    return (o->brokers >= 3 && o->brokers < DEMO_MAX_BROKERS && o->topics >= 2 && o->partitions >= 1 &&
            o->leader_changes >= 1) ? 0 : -1;
}

static void cleanup(demo *d)
{
    km_daemon_free(d->daemon);
    demo_stop_sims(d->sims, d->o.brokers + 1);
    demo_stop_quorum(&d->quorum);
    km_localzk_stop(&d->zk);
    if (!d->o.keep) {
        char cmd[PATH_MAX + 16];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", d->workdir);
        if (system(cmd) != 0)
            fprintf(stderr, "demo: could not remove %s\n", d->workdir);
    } else {
        printf("kept %s\n", d->workdir);
    }
}

int km_cli_demo(int argc, char **argv)
{
    demo d = {.loop = ev_default_loop(EVFLAG_AUTO)};
    setvbuf(stdout, NULL, _IOLBF, 0);  /* children are forked: nothing may sit unflushed */
    bool help = km_cli_wants_help(argc, argv);
    if (help || parse_demo_opts(argc, argv, &d.o)) {
        fprintf(help ? stdout : stderr,
                "usage: kmproxy demo [--brokers 3-%d] [--topics T>=2] [--partitions P] [--leader-changes K]"
                " [--keep] [--quorum]\n", DEMO_MAX_BROKERS - 1);
        return help ? 0 : 2;
    }
    snprintf(d.workdir, sizeof d.workdir, "%s/kmproxy-demo-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    km_err err = {{0}};
    if (!mkdtemp(d.workdir)) {
        fprintf(stderr, "demo: cannot create %s\n", d.workdir);
        return 1;
    }
    d.expected_brokers = d.o.brokers;
    ev_timer_init(&d.tick, tick_cb, 0.1, 0.1);
    d.tick.data = &d;
    printf("kmproxy demo in %s\n", d.workdir);
    bool ok = !make_cluster(&d, &err) && !km_localzk_start(&d.zk, d.workdir, 60, &err);
    if (ok)
        printf("ZooKeeper: serving on %s\n", d.zk.hosts);
    if (ok && d.o.quorum)
        ok = !demo_start_quorum(&d.quorum, d.logdir, d.workdir, &err);
    ok = ok && !start_daemon(&d, &err) && run_stages(&d);
    if (err.msg[0])
        fprintf(stderr, "demo: %s\n", err.msg);
    printf("\n%s\n", ok ? "demo: ZooKeeper and every ZK-mode broker converged on the KRaft image, twice."
                        : "demo: FAILED");
    cleanup(&d);
    return ok ? 0 : 1;
}
