/* verify_internal.h - proxy/verify only: a blocking Kafka client connection with deadlines (verify_conn.c). */
#ifndef KM_VERIFY_INTERNAL_H
#define KM_VERIFY_INTERNAL_H

#include "km_verify.h"

typedef struct v_conn {
    int fd;
    int32_t corr;
    double timeout_s;
    const char *client_id;
    char where[300];        /* "broker ID (host:port)", every error names it */
    int64_t requests, bytes_out, bytes_in; /* the cost of this connection, for the report */
} v_conn;

/* Connects within timeout_s.  0, or -1 + err naming the broker. */
int v_conn_open(v_conn *c, int32_t broker, const char *host, uint16_t port, double timeout_s,
                const char *client_id, km_err *err);
void v_conn_close(v_conn *c);
/* One request and its decoded answer (*rs from the arena).  0, or -1 + err (the connection is closed then). */
int v_conn_call(v_conn *c, int16_t api, int16_t version, const void *rq, km_arena *a, void **rs, km_err *err);

#endif
