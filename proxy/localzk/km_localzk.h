/* km_localzk.h - a throwaway standalone ZooKeeper on 127.0.0.1, for the demo.
 *
 * Uses Debian's `zookeeper` package (the jars under /usr/share/java and a `java` on PATH).
 * The server binds loopback only, lives in a directory of the caller's, and dies with the
 * calling process even if that one crashes. */
#ifndef KM_LOCALZK_H
#define KM_LOCALZK_H

#include "km_codec.h" /* km_err */

#include <stdint.h>
#include <sys/types.h>

typedef struct km_localzk {
    pid_t pid;
    uint16_t port;
    char hosts[32];        /* "127.0.0.1:<port>" */
} km_localzk;

/* n distinct loopback ports nobody listens on now (the kernel picks; all are held until every one
 * is picked, so none repeats).  The small race before they are used does not matter for a demo. */
int km_free_loopback_ports(uint16_t *ports, int n, km_err *err);

/* Starts a server with its data under `dir` and waits (up to timeout_s) until it serves. */
int km_localzk_start(km_localzk *zk, const char *dir, double timeout_s, km_err *err);
void km_localzk_stop(km_localzk *zk);

#endif
