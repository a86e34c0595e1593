/* rc_rig.h - the real Kafka 3.9 cluster of the real-cluster suites (tests/realcluster/rig.py, docs/realcluster.md):
 * one ZooKeeper, ZK-mode brokers in migration and KRaft controllers in migration mode, brought to dual-write, run
 * by a supervisor process the test talks to over a pipe, one command a line. */
#ifndef RC_RIG_H
#define RC_RIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <jansson.h>

#define RC_MAX_NODES 8

typedef struct rc_node {
    int id, port;
    char dir[512];
} rc_node;

typedef struct rc_rig {
    pid_t pid;
    int to_rig, from_rig;
    char dir[512];
    char zk[64];            /* 127.0.0.1:port */
    char bootstrap[256];    /* every broker, host:port,... */
    char voters[256];       /* id@host:port,... */
    char cluster_id[64];
    char *classpath;        /* Kafka's jars */
    char tools[512];        /* the compiled tests/realcluster/java classes */
    int nbrokers, ncontrollers;
    rc_node brokers[RC_MAX_NODES], controllers[RC_MAX_NODES];
    double start_s;
    long rss_total_kib;
    json_t *ready;          /* the whole ready line */
} rc_rig;

/* The jar cache (tests/realcluster/fetch-kafka), fetched or reused.  NULL with why when Java, javac, Maven or
 * python3 is missing or the fetch failed; rc_require() says whether that fails the test (CI, or
 * KM_REQUIRE_REALKAFKA=1) or skips it. */
const char *rc_cache(char *why, size_t cap);
bool rc_require(void);
/* Skips (or fails, under rc_require) the calling test when the cache cannot be had. */
const char *rc_cache_or_skip(void);

/* Starts a rig in a fresh temp dir and waits until it is in dual-write.  NULL with why (and the logs' tails). */
rc_rig *rc_rig_start(int controllers, char *why, size_t cap);
/* rc_rig_start with more of rig.py's options (NULL-terminated: --broker-ids, --controller-prop, --before-kafka). */
rc_rig *rc_rig_start_with(int controllers, const char *const *extra, char *why, size_t cap);
/* Sends one command (kill/start/stop KIND ID, kraft broker ID, zk PATH, rss); the answer line (malloc'd), NULL if
 * the rig is gone. */
char *rc_rig_cmd(rc_rig *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Tears it down: every process killed, no leftovers.  keep_logs (a failed test): every node's logs and
 * configuration are first copied out of the run's temp dir (which the test support removes) by rc_keep_logs. */
void rc_rig_stop(rc_rig *r, bool keep_logs);
/* rc_rig_stop keeping the logs when KEPT is not NULL: where they went (or why not) in KEPT. */
void rc_rig_stop_kept(rc_rig *r, char *kept, size_t cap);
/* Copies DIR's logs and configuration (not Kafka's or ZooKeeper's data) to $KM_RC_LOG_DIR/SUITE/TEST, by default
 * realcluster-logs/SUITE/TEST in the build tree, replacing an earlier run's; 0 and where in DEST, or -1 and why. */
int rc_keep_logs(const char *dir, char *dest, size_t cap);
/* The last `lines` lines of every node's server.log (and the rig's own), for a failure message (malloc'd). */
char *rc_rig_tails(const rc_rig *r, int lines);
/* Runs a shell command line with $CP (Kafka's jars and our tool classes), $BS (bootstrap), $ZK, $DIR set; the
 * exit status, output (stdout+stderr, malloc'd) in *out. */
int rc_sh(const rc_rig *r, char **out, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* A node's server.log as a string (malloc'd); "" when absent. */
char *rc_read_log(const rc_rig *r, const char *kind, int id);

/* Asserts with every log's tail in the message; the rig stops and its logs are kept (rc_keep_logs), the message
 * says where. */
#define rc_assert(r, cond, ...)                                                                                   \
    do {                                                                                                          \
        if (!(cond)) {                                                                                            \
            char *tails_ = rc_rig_tails((r), 40);                                                                 \
            char msg_[8192], kept_[1200];                                                                         \
            snprintf(msg_, sizeof msg_, __VA_ARGS__);                                                             \
            rc_rig_stop_kept((r), kept_, sizeof kept_);                                                           \
            cr_assert_fail("%s\nlogs kept in %s\n%s", msg_, kept_, tails_ ? tails_ : "");                         \
        }                                                                                                         \
    } while (0)

/* `kmproxy run` beside the controllers as docs/runbook.md deploys it (metadata.source=quorum, brokers.enabled=true),
 * with EXTRA property lines appended; config DIR/NAME.properties, its output in LOG (DIR/NAME.log). Its pid. */
pid_t rc_kmproxy_run(const rc_rig *r, const char *name, const char *extra, char *log, size_t cap);
/* The same reaching ZooKeeper at ZK (host:port), e.g. through the fault proxy (KM_RIG_ZK_FAULT=kmproxy). */
pid_t rc_kmproxy_run_via(const rc_rig *r, const char *name, const char *zk, const char *extra, char *log, size_t cap);

/* A check-only kmproxy (docs/verify.md): no zookeeper.connect, brokers.enabled=false, verify.interval.ms; it writes
 * no ZooKeeper and sends no broker RPC.  Config DIR/NAME.properties, output in LOG.  Its pid. */
pid_t rc_kmproxy_check_only(const rc_rig *r, const char *name, int interval_ms, char *log, size_t cap);
/* The port of kmproxy's metrics listener, from its log line (-1 after timeout_s). */
int rc_kmproxy_metrics_port(const char *log, int timeout_s);
/* GET PATH on kmproxy's metrics listener with curl: its JSON (NULL for /metrics or when unreadable); the body in
 * *text when TEXT is not NULL (malloc'd). */
json_t *rc_kmproxy_get(int port, const char *path, char **text);
/* /status verify.cycles: checks finished, -1 when unreadable. */
long rc_kmproxy_verify_cycles(int port);
/* The daemon's check verdicts between cycles FROM (excluded) and TO (included), from its log's lines "verify: cycle
 * N: the brokers are V" (written when the verdict changes): the runs of cycles not consistent. */
typedef struct rc_streaks {
    long longest;  /* the longest run, in cycles (0: every cycle consistent) */
    int streaks;   /* how many runs */
    bool open;     /* the last still runs at TO */
} rc_streaks;
void rc_verify_streaks(const char *log, long from, long to, rc_streaks *s);
/* The transient window W of docs/verify.md at a 500 ms verify.interval.ms: while an ordinary change (a leader move, a
 * reassignment's steps) propagates, at most this many checks in a row may find the brokers not consistent. */
#define RC_VERIFY_TRANSIENT_CHECKS 3

/* Admin API calls through RcAdmin (OPS: its commands, `\;`-separated); a failure fails the test with its output. */
void rc_admin(rc_rig *r, const char *ops);

/* Kafka's own reading of broker's log of TOPIC-0 (kafka.tools.DumpLogSegments over its segments): the bytes of the
 * batches holding offsets in [from, below) (a batch holding `from` whole: truncation drops whole batches), the log
 * end (the last batch's last offset + 1) and the batches read.  false if the tool read none. */
bool rc_dumped_log(rc_rig *r, int broker, const char *topic, int64_t from, int64_t below, int64_t *bytes,
                   int64_t *end, int64_t *batches);

#endif
