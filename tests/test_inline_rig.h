/* test_inline_rig.h - the inline proxy on its own thread and loop, librdkafka's mock cluster as
 * its upstream, and blocking raw-socket helpers for clients and scripted upstreams. */
#ifndef KM_TEST_INLINE_RIG_H
#define KM_TEST_INLINE_RIG_H

#include "km_inline.h"

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct irig {
    rd_kafka_t *mock_rk;
    rd_kafka_mock_cluster_t *mock;
    char mock_bootstraps[256];
    struct ev_loop *loop;
    struct ev_async *stop;
    pthread_t thread;
    bool running;
    km_inline *proxy;
    km_inline_config cfg;
    int log_lines;                   /* lines the proxy logged (warn and worse) */
    char last_log[1024];
    pthread_mutex_t log_lock;
} irig;

/* A mock cluster of n brokers (ids 1..n); topic created with partitions. */
void irig_mock(irig *r, int brokers, const char *topic, int partitions);
/* Mock broker id's "127.0.0.1:PORT". */
void irig_mock_broker_address(const irig *r, int32_t id, char *out, size_t cap);
/* cfg defaults; the caller sets keys with irig_set before irig_start. */
void irig_init(irig *r);
void irig_set(irig *r, const char *key, const char *value);
/* Dynamic mode over the mock: bootstrap on 127.0.0.1:0 -> broker 1, port.base free. */
void irig_dynamic(irig *r);
void irig_start(irig *r);
/* Stops the proxy's thread; stats are then safe to read (and the proxy safe to call). */
void irig_stop(irig *r, km_inline_stats *stats);
/* Runs the proxy's loop again after irig_stop; its connections are still there. */
void irig_resume(irig *r);
void irig_free(irig *r);
uint16_t irig_port(irig *r, int32_t broker_id);

/* librdkafka clients.  extra: NULL-terminated key, value pairs. */
rd_kafka_t *irig_producer(const char *bootstrap, const char *const *extra);
rd_kafka_t *irig_consumer(const char *bootstrap, const char *group, const char *const *extra);

/* Raw sockets (blocking, 20 s receive timeout). */
int irig_connect(uint16_t port);
int irig_listen(uint16_t *port);
int irig_accept(int lfd);
bool irig_send_all(int fd, const void *p, size_t n);
/* Reads one frame's payload into *out (malloc'd); false on EOF/timeout. */
bool irig_read_frame(int fd, uint8_t **out, size_t *len);
/* True when the peer closes (EOF or reset) before the receive timeout. */
bool irig_wait_eof(int fd);
/* A framed request for body at version (km_frame_request) into a malloc'd buffer. */
uint8_t *irig_request(int16_t api, int16_t ver, int32_t corr, const void *body, size_t *len);

#endif
