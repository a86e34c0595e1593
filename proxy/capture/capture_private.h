/* capture_private.h - shared by the proxy/capture*.c sources only; not part of km_capture's API. */
#ifndef KM_CAPTURE_PRIVATE_H
#define KM_CAPTURE_PRIVATE_H

#include <pthread.h>
#include <stdio.h>

#include "km_capture.h"

#define CAP_PENDING 256 /* requests awaiting a response, per connection (oldest forgotten first) */

typedef struct cap_pending {
    int32_t correlation_id;
    int16_t api_key, api_version;
    bool used;
    uint64_t ts_ns;            /* when the request was captured: the response line's latency */
} cap_pending;

struct km_capture_conn {
    uint64_t id;
    km_capture_endpoint client, server;
    int32_t broker;            /* set at open: every JSON line names it */
    bool has_broker;
    /* under the capture mutex */
    bool gap;                  /* a frame was dropped since the last one queued */
    bool closing;              /* the close record is queued */
    struct cap_rec *close_rec; /* allocated up front so closing can never fail */
    km_capture_conn *prev, *next; /* live connections, closed by km_capture_close */
    /* writer thread only */
    uint32_t isn[2], next_seq[2];  /* [KM_CAPTURE_C2S], [KM_CAPTURE_S2C] */
    uint16_t ip_id[2];
    uint32_t incarnation;      /* bumped for every restarted synthetic stream */
    cap_pending pending[CAP_PENDING];
    unsigned pending_next;
};

typedef enum cap_rec_type { REC_OPEN, REC_FRAME, REC_CLOSE } cap_rec_type;

typedef struct cap_rec {
    struct cap_rec *next;
    cap_rec_type type;
    km_capture_conn *conn;
    km_capture_dir dir;
    bool after_gap;            /* frames of this connection were dropped just before this one */
    uint64_t ts_ns;            /* CLOCK_REALTIME when queued */
    size_t len;
    uint8_t data[];
} cap_rec;

/* capture_pcapng.c */
typedef struct cap_pcap {
    FILE *f;
    const char *path;
    km_capture_link link;
    uint16_t mss;
    uint64_t last_ts;          /* timestamps never go backwards in the file */
    uint8_t *pkt;              /* one packet's scratch space */
} cap_pcap;

int km_cap__pcap_open(cap_pcap *p, const char *path, km_capture_link link, uint16_t mss, km_err *err);
int km_cap__pcap_record(cap_pcap *p, const cap_rec *r, km_err *err);
int km_cap__pcap_close(cap_pcap *p, km_err *err);

/* capture_jsonl.c */
typedef struct cap_jsonl {
    FILE *f;
    const char *path;
    size_t body_limit;
} cap_jsonl;

int km_cap__jsonl_open(cap_jsonl *j, const char *path, size_t body_limit, km_err *err);
int km_cap__jsonl_record(cap_jsonl *j, const cap_rec *r, km_err *err);
int km_cap__jsonl_summary(cap_jsonl *j, const km_capture_stats *st, km_err *err);
int km_cap__jsonl_close(cap_jsonl *j, km_err *err);

#endif
