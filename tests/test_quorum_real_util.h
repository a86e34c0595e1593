/* test_quorum_real_util.h - Kafka 3.9's own KRaft leader (../shared/realkafka bin/raft-leader:
 * KafkaRaftClient, KafkaNetworkChannel, ApiVersions as ControllerApis answers it) for the observer
 * suites, run as a child process; suites skip cleanly, saying why, when the kit or Java is absent. */
#ifndef TEST_QUORUM_REAL_UTIL_H
#define TEST_QUORUM_REAL_UTIL_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* Rounds each scenario repeats: 20, fewer under ASan/UBSan (each round is a whole kmproxy run, and
 * the sanitized binary is several times slower; the bug these catch showed in a third of runs). */
#if defined(__SANITIZE_ADDRESS__)
#define RK_ROUNDS 5
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RK_ROUNDS 5
#endif
#endif
#ifndef RK_ROUNDS
#define RK_ROUNDS 20
#endif

typedef struct rk_leader {
    pid_t pid;                 /* bin/raft-leader (a bash script around the JVM) */
    int port;
    int64_t hw;                /* the high watermark it printed when ready */
    int32_t epoch;
    char dir[600];             /* its --dir */
    char records[700];         /* dir/out/server-records.jsonl: what it holds */
    char ready_line[1024];
} rk_leader;

/* The kit's root when it and Java are usable; otherwise skips the test, saying why. */
const char *rk_kit_or_skip(void);
/* A log written by Kafka's own writers (bin/gen-coverage with 250 topics x 3 partitions), made
 * once per build tree and shared by the suites (a lock guards the first one). */
const char *rk_seed_log(void);
/* Starts raft-leader on a free port with dir under tmp, seeded with rk_seed_log(); extra: more
 * arguments (NULL-ended, e.g. "--snapshot-at", "0.5"). Waits for its "ready" line (asserts). */
void rk_leader_start(rk_leader *l, const char *tmp, const char *tag, const char *const *extra);
/* SIGTERM, then reaped (SIGKILL after a bound). */
void rk_leader_stop(rk_leader *l);
/* `kmproxy metadata dump --bootstrap-server` of the leader into path, then `compare-dump` against what
 * the leader holds: asserts the dump exits 0 and no record differs (round names the run). */
void rk_dump_equals_leader(const rk_leader *l, const char *path, int round, const char *const *extra);
/* Runs the kmproxy CLI with args (NULL-ended); out/err malloc'd; returns the exit status. */
int rk_kmproxy(const char *const *args, char **out, char **err);

#endif
