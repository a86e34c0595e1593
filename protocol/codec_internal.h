/* Private to protocol/codec*.c: helpers the engine, JSON and frame files share. */
#ifndef KM_CODEC_INTERNAL_H
#define KM_CODEC_INTERNAL_H

#include "km_codec.h"

int64_t km_get_int(km_type t, const void *p);
void km_set_int(km_type t, void *p, int64_t v);
bool km_is_int_type(km_type t);
bool km_field_flexible(const km_field *f, int16_t version, bool msg_flexible);
bool km_field_is_default(const km_field *f, const void *p);
/* Prepends a path segment (fmt takes name, or index when name is NULL) to err->msg. */
void km_path_prepend(km_err *err, const char *fmt, const char *name, int32_t index);
int km_encode_value(int16_t version, bool msg_flexible, const km_field *f, const void *p, km_buf *out,
                    km_err *err);
bool km_utf8_valid(const char *s, size_t n);
/* Generated (km_messages.c): a request, response or metadata record's descriptor by key, or NULL. */
const km_message_desc *km_find_keyed_message(km_msg_kind kind, int16_t api_key);

#endif
