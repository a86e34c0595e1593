/* metalog_internal.h - shared between protocol/metalog*.c only; not a public header. */
#ifndef KM_METALOG_INTERNAL_H
#define KM_METALOG_INTERNAL_H

#include "km_metalog.h"

/* Byte positions inside a v2 batch (DefaultRecordBatch). */
enum {
    KM_ML_POS_LENGTH = 8,
    KM_ML_POS_EPOCH = 12,
    KM_ML_POS_MAGIC = 16,
    KM_ML_POS_CRC = 17,
    KM_ML_POS_ATTRIBUTES = 21,
    KM_ML_POS_LAST_DELTA = 23,
    KM_ML_POS_BASE_TS = 27,
    KM_ML_POS_MAX_TS = 35,
    KM_ML_POS_PRODUCER_ID = 43,
    KM_ML_POS_PRODUCER_EPOCH = 51,
    KM_ML_POS_BASE_SEQ = 53,
    KM_ML_POS_COUNT = 57,
    KM_ML_HEADER_UP_TO_MAGIC = 17,
};

enum {
    KM_ML_ATTR_COMPRESSION = 0x07,
    KM_ML_ATTR_LOG_APPEND_TIME = 0x08,
    KM_ML_ATTR_TRANSACTIONAL = 0x10,
    KM_ML_ATTR_CONTROL = 0x20,
    KM_ML_ATTR_DELETE_HORIZON = 0x40,
};

/* Big-endian loads/stores (the batch header is big-endian). */
static inline uint16_t km_ml_be16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }
static inline uint32_t km_ml_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static inline uint64_t km_ml_be64(const uint8_t *p) { return (uint64_t)km_ml_be32(p) << 32 | km_ml_be32(p + 4); }
static inline void km_ml_put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16); p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v;
}

/* Outcome of looking at the bytes where a batch should start. */
typedef enum km_ml_scan {
    KM_ML_SCAN_BAD_CRC = -2,  /* a whole batch whose CRC32C does not match (header in *b) */
    KM_ML_SCAN_BAD = -1,      /* invalid: err says why */
    KM_ML_SCAN_SHORT = 0,     /* fewer bytes than the batch needs; *need says how many */
    KM_ML_SCAN_OK = 1         /* a whole batch: header parsed into *b, CRC checked */
} km_ml_scan;

/* Parses the batch at p[0..avail).  Errors carry the reason only; the
 * caller prefixes file and position. */
km_ml_scan km_ml_scan_batch(const uint8_t *p, size_t avail, size_t max_batch,
                            km_metalog_batch *b, size_t *need, km_err *err);

/* Decompresses a records section into out (reset first), failing past cap bytes. */
int km_ml_inflate(km_ml_compression c, const uint8_t *in, size_t len, size_t cap, km_buf *out, km_err *err);
/* Appends the compressed form of in to out. */
int km_ml_deflate(km_ml_compression c, const uint8_t *in, size_t len, km_buf *out, km_err *err);

/* One record of a records section, fields as raw views. */
typedef struct km_ml_raw_record {
    int8_t attributes;
    int64_t timestamp_delta;
    int32_t offset_delta;
    km_bytes key;
    km_bytes value;
    int32_t header_count;
} km_ml_raw_record;

/* Parses the record at r (advancing it past the record). */
int km_ml_parse_record(km_reader *r, km_ml_raw_record *out, km_err *err);

/* Metadata record descriptors by api key, looked up once per reader
 * (km_find_message walks every message the codec knows). */
#define KM_ML_DESC_CACHE 128
typedef struct km_ml_desc_cache {
    const km_message_desc *desc[KM_ML_DESC_CACHE];
    bool looked[KM_ML_DESC_CACHE];
} km_ml_desc_cache;

/* Reads [frame version][api key][version]; *body = where the record body starts. */
int km_ml_frame_header(const uint8_t *p, size_t len, int16_t *api_key, int16_t *version, size_t *body,
                       km_err *err);
/* km_ml_decode_frame with a cache (NULL: none). */
int km_ml_decode_frame_cached(km_ml_desc_cache *cache, const uint8_t *p, size_t len, int16_t *api_key,
                              int16_t *version, const km_message_desc **desc, void **msg, km_arena *arena,
                              km_err *err);

/* Decodes a control record key (version, type). */
int km_ml_parse_control_key(km_bytes key, int16_t *version, int16_t *type, km_err *err);
/* Decodes a control record value as its data message. */
int km_ml_decode_control(int16_t type, km_bytes value, const km_message_desc **desc, void **msg,
                         km_arena *arena, km_err *err);

/* Sets an integer field of obj (root struct of sd) by spec name: lets the
 * library fill SnapshotHeaderRecord and friends without depending on
 * generated struct member names. */
int km_ml_set_int_field(const km_struct_desc *sd, void *obj, const char *name, int64_t v, km_err *err);

/* `<20 digits>.log` -> base offset, else -1. */
int64_t km_ml_segment_base(const char *name);
/* `<20 digits>-<10 digits>.checkpoint` -> end offset and epoch. */
bool km_ml_snapshot_parse(const char *name, int64_t *end, int32_t *epoch);

/* Wall-clock milliseconds, Kafka's timestamp unit. */
int64_t km_ml_now_ms(void);

#endif
