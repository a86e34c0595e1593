/* Broker simulator: the topic config a ZK broker reads when it creates a log.
 *
 * Kafka 3.9: Partition.createLogIfNotExists -> LogManager.getOrCreateLog, which calls
 * fetchLogConfig(topic) (LogManager.scala) -> configRepository.topicConfig -> ZkConfigRepository
 * .config -> adminZkClient.fetchEntityConfig: a synchronous read of /config/topics/<topic>, empty
 * (the broker's defaults) when the znode is absent.  So a LeaderAndIsr that reaches a broker
 * before ZooKeeper holds the topic's config creates the log with the defaults; every log created
 * here records what it read, for tests to check. */
#include "bsim_internal.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zookeeper/zookeeper.h>

#define BSIM_ZK_WAIT_MS 10000

struct bsim_zk {
    zhandle_t *zh;
    int state;
};

typedef struct zk_read { bool done; int rc; char *data; } zk_read;

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void on_session(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
    (void)zh;
    (void)path;
    if (type == ZOO_SESSION_EVENT)
        ((struct bsim_zk *)ctx)->state = state;
}

/* Drives the single-threaded client until *done (or the session connects) or the deadline. */
static void pump(struct bsim_zk *z, const bool *done)
{
    int64_t deadline = mono_ms() + BSIM_ZK_WAIT_MS;
    while (!(done ? *done : z->state == ZOO_CONNECTED_STATE) && mono_ms() < deadline) {
        int fd = -1, interest = 0;
        struct timeval tv = { 0, 0 };
        zookeeper_interest(z->zh, &fd, &interest, &tv);
        int wait = (int)(tv.tv_sec * 1000 + tv.tv_usec / 1000);
        struct pollfd p = { fd, (short)(((interest & ZOOKEEPER_READ) ? POLLIN : 0) |
                                        ((interest & ZOOKEEPER_WRITE) ? POLLOUT : 0)), 0 };
        poll(&p, fd >= 0 ? 1 : 0, wait > 0 && wait < 50 ? wait : 50);
        int ev = ((p.revents & (POLLIN | POLLHUP | POLLERR)) ? ZOOKEEPER_READ : 0) |
                 ((p.revents & POLLOUT) ? ZOOKEEPER_WRITE : 0);
        zookeeper_process(z->zh, ev);
    }
}

struct bsim_zk *bsim_zk_open(const char *hosts)
{
    struct bsim_zk *z = calloc(1, sizeof *z);
    if (!z)
        return NULL;
    zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);
    z->zh = zookeeper_init(hosts, on_session, 30000, NULL, z, 0);
    if (z->zh)
        pump(z, NULL);
    if (!z->zh || z->state != ZOO_CONNECTED_STATE) {
        bsim_zk_close(z);
        return NULL;
    }
    return z;
}

void bsim_zk_close(struct bsim_zk *z)
{
    if (!z)
        return;
    if (z->zh)
        zookeeper_close(z->zh);
    free(z);
}

static void on_data(int rc, const char *value, int len, const struct Stat *st, const void *data)
{
    (void)st;
    zk_read *r = (zk_read *)data;
    r->rc = rc;
    if (rc == ZOK && (r->data = malloc((size_t)(len > 0 ? len : 0) + 1))) {
        memcpy(r->data, value ? value : "", (size_t)(len > 0 ? len : 0));
        r->data[len > 0 ? len : 0] = '\0';
    }
    r->done = true;
}

/* NULL: absent, or unreadable (*rc says which; the caller notes the latter in lastRejection). */
static char *read_topic_config(struct bsim_zk *z, const char *topic, int *rc)
{
    char path[512];
    snprintf(path, sizeof path, "/config/topics/%s", topic);
    zk_read r = { 0 };
    *rc = zoo_aget(z->zh, path, 0, on_data, &r);
    if (*rc == ZOK) {
        pump(z, &r.done);
        *rc = r.done ? r.rc : ZOPERATIONTIMEOUT;
    }
    return r.data;
}

int bsim_note_log(bsim_state *st, const char *topic, int32_t partition, km_uuid topic_id)
{
    if (st->n_logs == st->cap_logs) {
        size_t ncap = st->cap_logs ? st->cap_logs * 2 : 64;
        bsim_log *grown = realloc(st->logs, ncap * sizeof *grown);
        if (!grown)
            return -1;
        st->logs = grown;
        st->cap_logs = ncap;
    }
    bsim_log *l = &st->logs[st->n_logs];
    *l = (bsim_log){ .topic = strdup(topic), .partition = partition, .topic_id = topic_id, .config_read = !!st->zk };
    if (!l->topic)
        return -1;
    int rc = ZOK;
    if (st->zk)
        l->config = read_topic_config(st->zk, topic, &rc);
    if (rc != ZOK && rc != ZNONODE)
        snprintf(st->last_rejection, sizeof st->last_rejection, "reading /config/topics/%s: %s", topic, zerror(rc));
    st->n_logs++;
    return 0;
}

void bsim_logs_free(bsim_state *st)
{
    for (size_t i = 0; i < st->n_logs; i++) {
        free(st->logs[i].topic);
        free(st->logs[i].config);
    }
    free(st->logs);
    st->logs = NULL;
    st->n_logs = st->cap_logs = 0;
    bsim_zk_close(st->zk);
    st->zk = NULL;
}
