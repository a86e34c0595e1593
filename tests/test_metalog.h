/* test_metalog.h - helpers shared by the tests/test_metalog*.c suites. */
#ifndef TEST_METALOG_H
#define TEST_METALOG_H

#include "km_metalog.h"
#include "km_testsupport.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Writes `batches` batches of `per` TopicRecords named "topic-<offset>" to the
 * segment directory dir (created), continuing whatever is there. */
void tm_write_topics(const char *dir, km_ml_compression c, int batches, int per, uint64_t segment_bytes);

/* Builds one batch of `per` TopicRecords at base_offset into out. */
void tm_topic_batch(int64_t base_offset, int per, km_ml_compression c, km_buf *out);

/* Drains m: returns 1 (finished / no more for now), or -1 with err; counts records
 * and reports the last offset.  With check_names, each log TopicRecord must be
 * named "topic-<offset>" (what tm_write_topics writes). */
int tm_drain(km_metalog *m, long *records, int64_t *last, km_err *err);
int tm_drain_checked(km_metalog *m, long *records, int64_t *last, bool check_names, km_err *err);

char *tm_path(const char *dir, const char *name);
uint8_t *tm_slurp(const char *path, size_t *len);
void tm_spit(const char *path, const void *p, size_t len);
void tm_append(const char *path, const void *p, size_t len);
/* Re-seals a batch starting at p after a test edited it. */
void tm_fix_crc(uint8_t *batch);

#endif
