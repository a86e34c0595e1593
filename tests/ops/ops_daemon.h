/* ops_daemon.h - `kmproxy run` instances for the operations tests: started on a generated metadata
 * log with metrics on a free port and the log in a file, scraped with curl, stopped with SIGTERM. */
#ifndef KM_OPS_DAEMON_H
#define KM_OPS_DAEMON_H

#include "ops_util.h"
#include "zkserver.h"

typedef struct inst {
    ops_proc p;
    int port;            /* metrics listener */
    char log_file[600];
} inst;

typedef struct env {
    char *dir;
    char metadata[512];
} env;

/* One standalone ZooKeeper on loopback for a suite (asserts); secured as KM_TEST_ZK_SECURE says. */
km_zks *ops_zk_start(void);
/* A fresh dir with a generated log (3 migrating brokers, 3 topics x 2 partitions). */
void env_init(env *e);
void env_free(env *e);
/* Starts `kmproxy run` on e's log and zk; extra: more key=value settings (NULL-ended). */
void start(inst *in, env *e, const char *tag, const char *zk, const char *const *extra);
/* Scrapes path until its body holds needle (and the status is `status`, when non-zero); asserts. */
char *scrape_until(inst *in, const char *path, int status, const char *needle, int timeout_s);
/* SIGTERM: exit 0 after "shutting down" and "stopped:" in the log. */
void stop_cleanly(inst *in);
/* The value of an unlabelled sample in exposition text. */
double metric(const char *text, const char *name);
/* One more batch at the end of the log: topic-0's retention.ms := value. */
void append_record(const char *log, const char *value);

#endif
