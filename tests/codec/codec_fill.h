/* Fills any generated message with non-default values in every field a version has. */
#ifndef CODEC_FILL_H
#define CODEC_FILL_H

#include "km_codec.h"

/* obj must hold md->root->size bytes; memory comes from arena. */
void fill_message(const km_message_desc *md, int16_t version, void *obj, km_arena *arena, uint32_t seed);
/* Encodes obj, or fails the test. */
void encode_or_fail(const km_message_desc *md, int16_t version, const void *obj, km_buf *out);

#endif
