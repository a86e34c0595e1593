/* faultproxy.h - a TCP proxy between a ZooKeeper client and one server that understands ZooKeeper's
 * framing (4-byte length; requests: xid, type; replies: xid, zxid, err) and injects the fault behind
 * KAFKA-21062: it lets the server commit a write, then drops the reply and cuts the connection.
 * It runs on its own thread; the client (zkbridge on libev) runs on the test's thread. */
#ifndef KM_FAULTPROXY_H
#define KM_FAULTPROXY_H

#include <stdbool.h>
#include <stddef.h>

typedef struct km_fp km_fp;

typedef enum km_fp_match {
    KM_FP_MULTI_CHECKPOINT, /* a multi (opcode 14) holding a setData on the watched path (/migration) */
    KM_FP_MULTI_DATA,       /* a multi that does not write the watched path */
    KM_FP_MULTI_ANY,        /* any multi */
    KM_FP_SETDATA_PATH,     /* a plain setData (opcode 5) on the watched path */
    KM_FP_GETDATA_PATH,     /* a getData (opcode 4) of the watched path */
} km_fp_match;

typedef enum km_fp_action {
    KM_FP_DROP_REPLY,   /* forward the request, let the server commit, drop its reply, cut */
    KM_FP_DROP_REQUEST, /* cut before the request reaches the server */
    KM_FP_SWALLOW,      /* from the (skip+1)-th on, every matching request is neither forwarded nor
                         * answered while the connection (and its pings) stays up: a server that
                         * stopped applying writes. km_fp_disarm ends it (cut then, to recover). */
    KM_FP_HOLD_REPLIES, /* forward the request; from then on every frame the server sends on that connection
                         * but ping answers is held (nothing is cut) until km_fp_release_held: the client gets
                         * its answers exactly when the test says */
} km_fp_action;

/* Listens on 127.0.0.1 (free port) and forwards every connection to 127.0.0.1:upstream_port. */
km_fp *km_fp_start(int upstream_port, char *err, size_t errlen);
void km_fp_stop(km_fp *fp);
int km_fp_port(const km_fp *fp);
/* "127.0.0.1:<proxy port>" */
const char *km_fp_hosts(km_fp *fp);
/* Arms one fault: the (skip+1)-th matching request gets `action`. `path` is the full server-side path
 * (with any chroot) that KM_FP_MULTI_CHECKPOINT/KM_FP_SETDATA_PATH look for. Re-arming replaces it. */
void km_fp_arm(km_fp *fp, km_fp_match match, km_fp_action action, const char *path, int skip);
void km_fp_disarm(km_fp *fp);
/* Faults injected so far, and requests of opcode 14 seen so far. */
int km_fp_fired(km_fp *fp);
int km_fp_multis_seen(km_fp *fp);
/* The requests clients sent, in order (pings left out): opcode and first path. Keeps the last
 * KM_FP_LOG_MAX; returns how many were copied into out. */
#define KM_FP_LOG_MAX 8192
typedef struct km_fp_req {
    int type;
    char path[96];
} km_fp_req;
int km_fp_log(km_fp *fp, km_fp_req *out, int max);

/* Cuts every open connection now (no request dropped on purpose). */
void km_fp_cut_all(km_fp *fp);
/* While refusing, new connections are closed as soon as they are accepted. */
void km_fp_refuse(km_fp *fp, bool refuse);
/* While paused nothing moves either way and nothing is closed: a network that silently drops every
 * packet (no reset, no FIN). New connections wait in the listen backlog. Traffic flows again after. */
void km_fp_pause(km_fp *fp, bool paused);
/* KM_FP_HOLD_REPLIES: requests (pings left out) forwarded on the held connection since the hold began
 * that no held frame answers yet (-1: no hold now), and the client's own port of that connection. */
int km_fp_hold_unanswered(km_fp *fp);
int km_fp_hold_client_port(km_fp *fp);
/* Sends the held frames but the last `keep` to the client, in order, and ends the hold unless some are
 * kept; returns once they were sent. (The ZooKeeper C client reads one frame per wake-up: releasing one
 * at a time says which loop turn handles which answer.) */
void km_fp_release_held(km_fp *fp, int keep);

#endif
