/* The demo's ZK-mode brokers: kmproxy-brokersim processes, and the check of their state. */
#include "cli_demo.h"
#include "km_localzk.h"

#include <errno.h>
#include <jansson.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

int demo_pick_ports(demo_sim *sims, int n, km_err *err)
{
    uint16_t ports[DEMO_MAX_BROKERS];
    if (n > DEMO_MAX_BROKERS)
        return km_fail(err, "at most %d brokers", DEMO_MAX_BROKERS);
    if (km_free_loopback_ports(ports, n, err))
        return -1;
    for (int i = 0; i < n; i++) {
        sims[i].port = ports[i];
        sims[i].id = i + 1;
    }
    return 0;
}

/* kmproxy-brokersim is built next to kmproxy. */
static int sim_path(char *out, size_t cap, km_err *err)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n < 0)
        return km_fail(err, "cannot find this binary: %s", strerror(errno));
    self[n] = '\0';
    snprintf(out, cap, "%s/kmproxy-brokersim", dirname(self));
    if (access(out, X_OK))
        return km_fail(err, "%s is missing: build the whole tree (make build)", out);
    return 0;
}

static pid_t spawn_sim(const char *path, const demo_sim *s, int64_t epoch, const char *log)
{
    char id[16], port[16], ep[32];
    snprintf(id, sizeof id, "%d", s->id);
    snprintf(port, sizeof port, "%u", s->port);
    snprintf(ep, sizeof ep, "%lld", (long long)epoch);
    fflush(NULL);  /* a forked child must not flush our buffers a second time */
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (!freopen(log, "w", stdout) || !freopen(log, "a", stderr))
        _exit(127);
    execl(path, path, "--broker-id", id, "--port", port, "--broker-epoch", ep, "--state-dump", s->dump,
          (char *)NULL);
    _exit(127);
}

int demo_start_sims(demo_sim *sims, int n, const km_image *img, const char *workdir, km_err *err)
{
    char path[PATH_MAX], log[PATH_MAX];
    if (sim_path(path, sizeof path, err))
        return -1;
    for (int i = 0; i < n; i++) {
        const km_broker *b = km_image_broker(img, sims[i].id);
        snprintf(sims[i].dump, sizeof sims[i].dump, "%s/broker-%d.json", workdir, sims[i].id);
        snprintf(log, sizeof log, "%s/broker-%d.log", workdir, sims[i].id);
        sims[i].pid = spawn_sim(path, &sims[i], b ? b->epoch : -1, log);
        if (sims[i].pid < 0)
            return km_fail(err, "fork: %s", strerror(errno));
    }
    return 0;
}

void demo_stop_sims(demo_sim *sims, int n)
{
    for (int i = 0; i < n; i++)
        if (sims[i].pid > 0) {
            kill(sims[i].pid, SIGTERM);
            waitpid(sims[i].pid, NULL, 0);
            sims[i].pid = 0;
        }
}

static bool same_list(const json_t *arr, km_i32_list want)
{
    if (!json_is_array(arr) || json_array_size(arr) != (size_t)want.n)
        return false;
    for (int32_t i = 0; i < want.n; i++)
        if (json_integer_value(json_array_get(arr, (size_t)i)) != want.v[i])
            return false;
    return true;
}

static bool is_replica(km_i32_list replicas, int32_t id)
{
    for (int32_t i = 0; i < replicas.n; i++)
        if (replicas.v[i] == id)
            return true;
    return false;
}

/* Mismatches between one broker's replica state and the image. */
static int check_one(const demo_sim *s, const json_t *state, const km_image *img)
{
    int bad = 0;
    size_t i;
    json_t *p;
    json_array_foreach(json_object_get(state, "partitions"), i, p) {
        const char *topic = json_string_value(json_object_get(p, "topic"));
        int32_t id = (int32_t)json_integer_value(json_object_get(p, "partition"));
        const km_topic *t = topic ? km_image_topic_by_name(img, topic) : NULL;
        km_partition want;
        bool stopped = json_is_true(json_object_get(p, "stopped"));
        if (!t || !km_topic_partition(t, id, &want) || !is_replica(want.replicas, s->id)) {
            if (!stopped && ++bad <= 3)
                printf("    broker %d still hosts %s-%d, which the image %s\n", s->id, topic, id,
                       t ? "moved to other brokers" : "deleted");
            continue;
        }
        if (stopped) {
            if (++bad <= 3)
                printf("    broker %d stopped %s-%d, which the image gives it\n", s->id, topic, id);
            continue;
        }
        if (json_integer_value(json_object_get(p, "leader")) != want.leader ||
            json_integer_value(json_object_get(p, "leaderEpoch")) != want.leader_epoch ||
            !same_list(json_object_get(p, "isr"), want.isr)) {
            if (++bad <= 3)
                printf("    broker %d: %s-%d differs from the image (leader %d, epoch %d)\n", s->id, topic, id,
                       want.leader, want.leader_epoch);
        }
    }
    return bad;
}

/* Partitions of the image that list broker id as a replica. */
static int hosted_by(const km_image *img, int32_t id)
{
    int n = 0;
    size_t it = 0;
    for (const km_topic *t; (t = km_image_next_topic(img, &it));)
        for (int32_t p = 0; p < km_topic_partition_count(t); p++) {
            km_partition part;
            n += km_topic_partition(t, p, &part) && is_replica(part.replicas, id);
        }
    return n;
}

int demo_check_brokers(const demo_sim *sims, int n, const km_image *img, km_err *err)
{
    int bad = 0;
    for (int i = 0; i < n; i++) {
        json_error_t jerr;
        json_t *state = json_load_file(sims[i].dump, 0, &jerr);
        if (!state)
            return km_fail(err, "%s: %s", sims[i].dump, jerr.text);
        int live = 0;
        size_t k;
        json_t *p;
        json_array_foreach(json_object_get(state, "partitions"), k, p)
            live += !json_is_true(json_object_get(p, "stopped"));
        int want = hosted_by(img, sims[i].id), mism = check_one(&sims[i], state, img);
        if (live != want && ++mism)
            printf("    broker %d hosts %d partitions, the image gives it %d\n", sims[i].id, live, want);
        printf("  broker %d: %d partitions, leader epochs and ISRs %s\n", sims[i].id, live,
               mism ? "DIFFER from the image" : "equal to the image");
        bad += mism;
        json_decref(state);
    }
    return bad;
}
