/* verify_internal.h - proxy/verify only: a blocking Kafka client connection with deadlines (verify_conn.c). */
#ifndef KM_VERIFY_INTERNAL_H
#define KM_VERIFY_INTERNAL_H

#include "km_verify.h"

typedef struct v_conn {
    int fd;
    km_tls_stream *tls;     /* NULL: plaintext */
    int32_t corr;
    double timeout_s;
    const char *client_id;
    char where[300];        /* "broker ID (host:port)", every error names it */
    int64_t requests, bytes_out, bytes_in; /* the cost of this connection, for the report */
} v_conn;

/* Connects within o->timeout_s, with TLS and the SASL login when o says so.  0, or -1 + err naming the broker
 * (and the TLS or SASL failure). */
int v_conn_open(v_conn *c, int32_t broker, const char *host, uint16_t port, const km_verify_opts *o, km_err *err);
void v_conn_close(v_conn *c);
/* One request and its decoded answer (*rs from the arena).  0, or -1 + err (the connection is closed then). */
int v_conn_call(v_conn *c, int16_t api, int16_t version, const void *rq, km_arena *a, void **rs, km_err *err);


#define V_API_VERSIONS_V 3
#define V_METADATA_V 12
#define V_LIST_OFFSETS_V 7
#define V_EPOCH_V 4
#define E_NONE 0
#define E_OFFSET_OUT_OF_RANGE 1            /* a Fetch below the log start or past the log end */
#define E_TOPIC_AUTHORIZATION_FAILED 29    /* a Fetch without Read on the topic */
#define E_UNKNOWN_TOPIC_OR_PARTITION 3
#define E_NOT_LEADER_OR_FOLLOWER 6
#define E_FENCED_LEADER_EPOCH 74
#define E_UNKNOWN_LEADER_EPOCH 75
#define E_OFFSET_NOT_AVAILABLE 78

typedef struct v_broker {
    int32_t id;
    bool zk, fenced;
    const char *host;
    uint16_t port;
    v_conn c;
    bool reachable;
    km_metadata_response *md;
    json_t *by_topic;           /* name -> index into md->topics */
    int findings;
} v_broker;

/* One topic's part of the slice: partitions [lo, hi). */
typedef struct v_sel {
    const km_topic *t;
    int32_t lo, hi;
} v_sel;

typedef struct v_run {
    const km_image *img;
    v_sel *sel;                 /* the slice, in order (verify_slice.c) */
    int nsel;
    int64_t selected;           /* partitions in it */
    bool from_start, complete;  /* it starts at the first partition; it reaches the last */
    const km_verify_opts *o;
    km_arena arena;             /* every answer, for the whole run */
    v_broker *b;
    int nb;
    json_t *findings, *unchecked;
    bool image_behind;
} v_run;

const char *v_error_name(int16_t e);
/* The slice of r->o in r->img into r->sel (verify_slice.c).  0, or -1 + err (out of memory). */
int v_slice_build(v_run *r, km_err *err);
void v_slice_free(v_run *r);
/* The report's "slice". */
json_t *v_slice_json(const v_run *r);
v_broker *v_broker_by_id(v_run *r, int32_t id);
/* Adds a finding of `cls` for the broker's partition (part -1: the whole topic); the finding, owned by the run. */
json_t *v_finding(v_run *r, v_broker *b, const char *topic, int32_t part, km_verify_class cls, const char *detail);
/* Mismatch only (verify_mismatch.c): the producers active on the stale leader and on the image's leader
 * (DescribeProducers), into the finding f. */
void v_producers(v_run *r, json_t *f, v_broker *stale, const char *topic, int32_t part, int32_t leader);
/* Mismatch only: the logs b holds for partitions the image does not place on it (DescribeLogDirs). */
void v_stray_logs(v_run *r, v_broker *b);
/* Stale leader only (verify_bytes.c): the bytes of the record batches the stale leader holds from `from` (the
 * truncation point) below its log end (-1: unknown), Fetch at its own leader epoch, at most max_exposure_bytes
 * read: "exposed_bytes", "exposed_bytes_capped" (true: at least that many) and "exposed_bytes_to" (the offset
 * the bytes end at) into f.  A broker that will not serve past its high watermark: the bytes below it, and
 * "exposed_bytes_past_high_watermark_unknown" saying why; "exposed_bytes_unknown" when none could be read. */
void v_exposed_bytes(v_run *r, json_t *f, v_broker *stale, const char *topic, int32_t part, int32_t epoch,
                     int64_t from, int64_t high_watermark, int64_t log_end);

#endif
