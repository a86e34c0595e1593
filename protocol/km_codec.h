/* km_codec.h - the Kafka wire codec: public face of protocol/codec.
 *
 * Every message (requests, responses, headers, metadata records, KRaft control
 * records) is described by a generated table (km_message_desc).  One generic
 * engine encodes, decodes, sizes and converts to and from JSON for every
 * version, so no per-version branch is ever written by hand.  The generated
 * C structs and typed wrappers live in km_messages.h, which this header
 * includes.
 *
 * Memory: decoding allocates from a km_arena (one free for the whole message);
 * the arena has a byte limit so hostile input cannot exhaust memory.
 * Errors: every failing call fills a km_err naming the field path, the byte
 * offset and the reason, and returns -1.  Nothing here prints or aborts.
 */
#ifndef KM_CODEC_H
#define KM_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct json_t;

#define KM_MAX_FRAME_DEFAULT (100u * 1024u * 1024u) /* 100 MiB */
#define KM_VER_MAX INT16_MAX

typedef struct km_err {
    char msg[512];
} km_err;

/* Formats into err (if not NULL) and returns -1, so callers can `return km_fail(...)`. */
int km_fail(km_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- value types used by generated structs -------------------------------- */

typedef struct km_str {    /* not owned; decoded strings are NUL-terminated in the arena */
    const char *ptr;
    int32_t len;           /* -1: null */
} km_str;

typedef struct km_bytes {
    const uint8_t *ptr;
    int32_t len;           /* -1: null */
} km_bytes;

typedef struct km_uuid {
    uint8_t b[16];
} km_uuid;

/* Every array field has this layout: count then items (count -1: null). */
#define KM_ARRAY_OF(T) struct { int32_t count; T *items; }
typedef KM_ARRAY_OF(void) km_array_any;

typedef struct km_raw_tag {  /* a tagged field this build does not know; kept for re-encode */
    uint32_t tag;
    km_bytes data;
} km_raw_tag;
typedef KM_ARRAY_OF(km_raw_tag) km_raw_tags;

km_str km_cstr(const char *s);     /* wraps a C string (NULL gives the null string) */
/* Standard base64 with padding (bytes in Kafka's JSON).  out needs 4*ceil(n/3)+1 bytes. */
size_t km_base64_encode(const uint8_t *p, size_t n, char *out, bool url_nopad);
/* Decodes standard or url-safe base64 (padding optional); returns bytes written or -1. */
int64_t km_base64_decode(const char *s, size_t n, uint8_t *out);
bool km_str_eq(km_str a, const char *s);
bool km_uuid_is_zero(km_uuid u);
/* Kafka's Uuid.toString(): base64url without padding, 22 chars + NUL. */
void km_uuid_to_base64(km_uuid u, char out[23]);
int km_uuid_from_base64(const char *s, km_uuid *out);

/* ---- arena ------------------------------------------------------------------ */

typedef struct km_arena_chunk km_arena_chunk;
typedef struct km_arena {
    km_arena_chunk *head;
    size_t used;
    size_t limit;          /* bytes; 0 means KM_MAX_FRAME_DEFAULT * 4 */
} km_arena;

void km_arena_init(km_arena *a, size_t limit);
void *km_arena_alloc(km_arena *a, size_t n);      /* zeroed; NULL past the limit */
void km_arena_free(km_arena *a);                  /* frees everything; arena reusable */

/* ---- growable output buffer ------------------------------------------------- */

typedef struct km_buf {
    uint8_t *data;
    size_t len;
    size_t cap;
    bool oom;              /* set on allocation failure; later writes are dropped */
    bool count_only;       /* sizing mode: len counts, nothing is stored */
} km_buf;

void km_buf_init(km_buf *b);
void km_buf_free(km_buf *b);
void km_buf_reset(km_buf *b);
bool km_buf_reserve(km_buf *b, size_t extra);
void km_buf_put(km_buf *b, const void *p, size_t n);
void km_buf_put_i8(km_buf *b, int8_t v);
void km_buf_put_i16(km_buf *b, int16_t v);
void km_buf_put_i32(km_buf *b, int32_t v);
void km_buf_put_i64(km_buf *b, int64_t v);
void km_buf_put_uvarint(km_buf *b, uint32_t v);
void km_buf_put_varint(km_buf *b, int32_t v);      /* zig-zag */
void km_buf_put_varlong(km_buf *b, int64_t v);     /* zig-zag */
void km_buf_patch_i32(km_buf *b, size_t at, int32_t v);
size_t km_uvarint_size(uint32_t v);
size_t km_varint_size(int32_t v);
size_t km_varlong_size(int64_t v);

/* ---- bounded reader ---------------------------------------------------------- */

typedef struct km_reader {
    const uint8_t *p;
    size_t len;
    size_t pos;
    size_t base;           /* added to pos in error messages (offset within a file, say) */
} km_reader;

void km_reader_init(km_reader *r, const uint8_t *p, size_t len);
size_t km_reader_left(const km_reader *r);
/* Each returns 0, or -1 with err naming `what` and the offset. */
int km_read_i8(km_reader *r, int8_t *v, const char *what, km_err *err);
int km_read_i16(km_reader *r, int16_t *v, const char *what, km_err *err);
int km_read_i32(km_reader *r, int32_t *v, const char *what, km_err *err);
int km_read_i64(km_reader *r, int64_t *v, const char *what, km_err *err);
int km_read_uvarint(km_reader *r, uint32_t *v, const char *what, km_err *err);
int km_read_varint(km_reader *r, int32_t *v, const char *what, km_err *err);
int km_read_varlong(km_reader *r, int64_t *v, const char *what, km_err *err);
int km_read_raw(km_reader *r, size_t n, const uint8_t **out, const char *what, km_err *err);

/* A big-endian uint32 in place: a frame's size prefix, a correlation id. */
static inline uint32_t km_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* ---- descriptors (tables emitted by the generator) -------------------------- */

typedef struct km_versions {
    int16_t lo, hi;        /* inclusive; lo > hi means "none" */
} km_versions;

static inline bool km_version_in(km_versions v, int16_t ver) { return ver >= v.lo && ver <= v.hi; }

typedef enum km_type {
    KM_T_BOOL, KM_T_INT8, KM_T_INT16, KM_T_UINT16, KM_T_INT32, KM_T_UINT32,
    KM_T_INT64, KM_T_FLOAT64, KM_T_UUID, KM_T_STRING, KM_T_BYTES, KM_T_RECORDS,
    KM_T_STRUCT, KM_T_ARRAY
} km_type;

struct km_struct_desc;

typedef struct km_field {
    const char *name;                  /* spec name, e.g. "ControllerId" */
    const char *json_name;             /* JsonConverter name, e.g. "controllerId" */
    km_type type;
    km_type elem;                      /* element type when type == KM_T_ARRAY */
    const struct km_struct_desc *sub;  /* struct type for STRUCT or ARRAY of STRUCT */
    km_versions versions;
    km_versions nullable;
    km_versions tagged;                /* versions in which it is a tagged field */
    km_versions flexible;              /* field-level override ("none" for ClientId) */
    bool has_flexible_override;
    bool ignorable;
    bool struct_by_pointer;            /* nullable struct field: stored as T* */
    int32_t tag;                       /* -1 when never tagged */
    uint32_t offset;                   /* offsetof in the C struct */
    bool default_null;
    int64_t default_int;               /* ints and bools */
    double default_float;
    const char *default_str;           /* strings ("" unless given) */
} km_field;

typedef struct km_struct_desc {
    const char *name;
    uint32_t size;                     /* sizeof the C struct */
    uint32_t unknown_tags_offset;      /* offsetof its km_raw_tags member */
    uint16_t nfields;
    const km_field *fields;
} km_struct_desc;

typedef enum km_msg_kind {
    KM_K_REQUEST, KM_K_RESPONSE, KM_K_HEADER, KM_K_METADATA, KM_K_DATA
} km_msg_kind;

typedef struct km_message_desc {
    const char *name;                  /* e.g. "LeaderAndIsrRequest" */
    km_msg_kind kind;
    int16_t api_key;                   /* -1 for headers and data */
    km_versions valid;
    km_versions flexible;
    const km_struct_desc *root;
} km_message_desc;

/* Bytes one value of type t takes in a generated struct (an array element, say). */
size_t km_type_size(km_type t, const struct km_struct_desc *sub);

/* ---- registry ---------------------------------------------------------------- */

const km_message_desc *km_find_message(km_msg_kind kind, int16_t api_key);
const km_message_desc *km_find_message_by_name(const char *name);
/* NULL-terminated list of every generated message. */
const km_message_desc *const *km_all_messages(void);
/* Header versions Kafka pairs with an API version (from the flexible versions). */
int16_t km_request_header_version(int16_t api_key, int16_t api_version);
int16_t km_response_header_version(int16_t api_key, int16_t api_version);
/* Upper-snake API name as librdkafka and Kafka's ApiKeys print it ("LEADER_AND_ISR"), or NULL. */
const char *km_api_name(int16_t api_key);

/* ---- the engine -------------------------------------------------------------- */

/* Fills obj (desc->root->size bytes) with every field's default. */
void km_init(const km_struct_desc *sd, void *obj);

/* Appends the encoding of obj at `version` to out.  Fails if the version is
 * not valid, a non-ignorable field the version lacks holds a non-default
 * value, a null is given where the version forbids it, or a length overflows. */
int km_encode(const km_message_desc *md, int16_t version, const void *obj, km_buf *out, km_err *err);
/* Bytes km_encode would write, or -1. */
int64_t km_encoded_size(const km_message_desc *md, int16_t version, const void *obj, km_err *err);

/* Decodes data[0..len) into obj.  With consumed NULL the message must fill
 * the buffer exactly; otherwise *consumed receives the bytes used.  All
 * memory comes from arena. */
int km_decode(const km_message_desc *md, int16_t version, const uint8_t *data, size_t len,
              void *obj, km_arena *arena, size_t *consumed, km_err *err);
/* km_decode (the message fills data exactly), except that records fields (Fetch's Records,
 * FetchSnapshot's UnalignedRecords) point into data instead of being copied: a large
 * response is read in place.  They are valid while data is and must not be written. */
int km_decode_borrowing(const km_message_desc *md, int16_t version, const uint8_t *data, size_t len,
                        void *obj, km_arena *arena, km_err *err);
/* Same, reading from (and advancing) a reader; errors carry reader offsets. */
int km_decode_from(const km_message_desc *md, int16_t version, km_reader *r,
                   void *obj, km_arena *arena, km_err *err);

/* JSON in the conventions of Kafka's generated JsonConverter: lower-camel keys,
 * uuid as base64url, bytes/records as base64, tagged fields as plain keys, and
 * unknown tagged fields under "_unknownTaggedFields" so nothing is lost. */
struct json_t *km_to_json(const km_message_desc *md, int16_t version, const void *obj, km_err *err);
int km_from_json(const km_message_desc *md, int16_t version, const struct json_t *json,
                 void *obj, km_arena *arena, km_err *err);

/* ---- frames: size-prefixed request/response with header ----------------------- */

typedef struct km_request_header_view {
    int16_t api_key;
    int16_t api_version;
    int32_t correlation_id;
    km_str client_id;
} km_request_header_view;

/* Appends [size][RequestHeader][body] for body `obj` of (api_key, version). */
int km_frame_request(int16_t api_key, int16_t version, int32_t correlation_id, const char *client_id,
                     const void *body, km_buf *out, km_err *err);
/* Appends [size][ResponseHeader][body]. */
int km_frame_response(int16_t api_key, int16_t version, int32_t correlation_id,
                      const void *body, km_buf *out, km_err *err);
/* Parses a request frame's payload (after the 4-byte size): the header, then
 * leaves r positioned at the body. */
int km_parse_request_header(km_reader *r, km_request_header_view *hdr, km_arena *arena, km_err *err);
/* Parses a response payload's header for (api_key, version); r is left at the body. */
int km_parse_response_header(km_reader *r, int16_t api_key, int16_t version, int32_t *correlation_id,
                             km_err *err);

#include "km_messages.h" /* generated: structs, api-key enums, typed wrappers */

#endif
