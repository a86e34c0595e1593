/* test_broker_client.h - a blocking Kafka client for the broker tests (one request at a time). */
#ifndef KM_TEST_BROKER_CLIENT_H
#define KM_TEST_BROKER_CLIENT_H

#include "km_codec.h"

#include <stdbool.h>
#include <stdint.h>

/* Connects to 127.0.0.1:port; -1 on failure. */
int tbc_connect(uint16_t port);
/* Sends raw bytes (already framed). */
bool tbc_send_raw(int fd, const void *p, size_t n);
/* Frames and sends body as (api, version); false on failure. */
bool tbc_send(int fd, int16_t api, int16_t version, int32_t corr, const void *body);
/* Reads one frame; false on EOF/timeout (2 s).  *payload is malloc'd. */
bool tbc_recv(int fd, uint8_t **payload, size_t *len);
/* Sends and decodes the response into resp (allocated from arena); false on failure. */
bool tbc_call(int fd, int16_t api, int16_t version, const void *body, void *resp, km_arena *arena);
/* True once the peer has closed (reads EOF within 2 s). */
bool tbc_closed(int fd);

#endif
