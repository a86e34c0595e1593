/* test_image_util.h - record builders shared by the image suites. */
#ifndef TEST_IMAGE_UTIL_H
#define TEST_IMAGE_UTIL_H

#include "km_image.h"

/* Each applies one record at the next offset of *off (incremented) and asserts success. */
typedef struct ti_ctx {
    km_image *img;
    km_delta *delta;
    int64_t off;
    km_err err;
} ti_ctx;

/* A fresh image and delta in *c (asserted), for a suite's .init; ti_ctx_close frees them. */
void ti_ctx_open(ti_ctx *c);
void ti_ctx_close(ti_ctx *c);
km_uuid ti_uuid(uint8_t n);
void ti_broker(ti_ctx *c, int32_t id, int64_t epoch, bool zk);
void ti_topic(ti_ctx *c, const char *name, km_uuid id);
void ti_partition(ti_ctx *c, km_uuid tid, int32_t pid, const int32_t *reps, int32_t n, int32_t leader);
/* -1 in an array count means null (no change). */
int ti_change(ti_ctx *c, const km_partition_change_record *r);
void ti_change_init(km_partition_change_record *r, km_uuid tid, int32_t pid);
void ti_config(ti_ctx *c, int8_t type, const char *res, const char *name, const char *value);
/* Applies any record; returns km_image_apply's result (err in c->err). */
int ti_apply(ti_ctx *c, int16_t type, int16_t version, const void *msg);

#define TI_LIST(...) ((const int32_t[]){__VA_ARGS__}), (int32_t)(sizeof((const int32_t[]){__VA_ARGS__}) / 4)

#endif
