/* Private to proxy/cli_demo*.c: the demo's parts. */
#ifndef KM_CLI_DEMO_H
#define KM_CLI_DEMO_H

#include "km_codec.h"
#include "km_image.h"

#include <limits.h>
#include <stdint.h>
#include <sys/types.h>

#define DEMO_MAX_BROKERS 16

typedef struct demo_sim {
    int32_t id;
    uint16_t port;
    pid_t pid;
    char dump[PATH_MAX];   /* its state, rewritten after every request */
} demo_sim;

/* cli_demo_brokers.c: picks free loopback ports for n simulated ZK-mode brokers. */
int demo_pick_ports(demo_sim *sims, int n, km_err *err);
/* Starts kmproxy-brokersim processes (found next to this binary) with the epochs the image gives. */
int demo_start_sims(demo_sim *sims, int n, const km_image *img, const char *workdir, km_err *err);
void demo_stop_sims(demo_sim *sims, int n);
/* Compares every simulated broker's state with img: leader, epochs and ISR of each partition it
 * replicates, and no replica of a deleted topic left.  Returns the mismatches (printed), or -1. */
int demo_check_brokers(const demo_sim *sims, int n, const km_image *img, km_err *err);

/* cli_demo_changes.c: appends live changes to the log as a controller would: leader elections,
 * a topic deletion, a new topic, a new broker joining, and a partition reassigned onto it in
 * Kafka's two steps.  Returns the records written, or -1. */
int demo_append_changes(const char *logdir, const km_image *img, int leader_changes, const demo_sim *newcomer,
                        km_err *err);

/* cli_demo_quorum.c: a kmproxy-raftsim process serving logdir as the KRaft quorum leader. */
typedef struct demo_quorum { pid_t pid; uint16_t port; } demo_quorum;
int demo_start_quorum(demo_quorum *q, const char *logdir, const char *workdir, km_err *err);
void demo_stop_quorum(demo_quorum *q);

#endif
