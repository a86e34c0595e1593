/* Registry look-ups, header versions and size-prefixed frames. */
#include "codec_internal.h"

#include <string.h>

#define API_CONTROLLED_SHUTDOWN 7
#define API_API_VERSIONS 18

const km_message_desc *km_find_message(km_msg_kind kind, int16_t api_key)
{
    if (kind == KM_K_REQUEST || kind == KM_K_RESPONSE || kind == KM_K_METADATA)
        return km_find_keyed_message(kind, api_key); /* per frame in the proxy: no walk over every message */
    for (const km_message_desc *const *m = km_all_messages(); *m; m++)
        if ((*m)->kind == kind && (*m)->api_key == api_key)
            return *m;
    return NULL;
}

const km_message_desc *km_find_message_by_name(const char *name)
{
    for (const km_message_desc *const *m = km_all_messages(); *m; m++)
        if (!strcmp((*m)->name, name))
            return *m;
    return NULL;
}

int16_t km_request_header_version(int16_t api_key, int16_t api_version)
{
    const km_message_desc *md = km_find_message(KM_K_REQUEST, api_key);
    if (md && km_version_in(md->flexible, api_version))
        return 2;
    /* Only ControlledShutdown v0 predates the client id. */
    return (api_key == API_CONTROLLED_SHUTDOWN && api_version == 0) ? 0 : 1;
}

int16_t km_response_header_version(int16_t api_key, int16_t api_version)
{
    /* ApiVersions responses keep header v0 so a client can parse them before it knows versions. */
    if (api_key == API_API_VERSIONS)
        return 0;
    const km_message_desc *md = km_find_message(KM_K_RESPONSE, api_key);
    return (md && km_version_in(md->flexible, api_version)) ? 1 : 0;
}

static int frame(const km_message_desc *hdr_md, int16_t hdr_version, const void *hdr, const km_message_desc *md,
                 int16_t version, const void *body, km_buf *out, km_err *err)
{
    size_t start = out->len;
    km_buf_put_i32(out, 0);
    if (km_encode(hdr_md, hdr_version, hdr, out, err) || km_encode(md, version, body, out, err)) {
        out->len = start;
        return -1;
    }
    size_t size = out->len - start - 4;
    if (size > INT32_MAX) {
        out->len = start;
        return km_fail(err, "%s v%d: frame of %zu bytes is too large", md->name, version, size);
    }
    km_buf_patch_i32(out, start, (int32_t)size);
    return 0;
}

int km_frame_request(int16_t api_key, int16_t version, int32_t correlation_id, const char *client_id,
                     const void *body, km_buf *out, km_err *err)
{
    const km_message_desc *md = km_find_message(KM_K_REQUEST, api_key);
    if (!md)
        return km_fail(err, "request api key %d is unknown", api_key);
    km_request_header h;
    km_request_header_init(&h);
    h.request_api_key = api_key;
    h.request_api_version = version;
    h.correlation_id = correlation_id;
    h.client_id = km_cstr(client_id);
    return frame(&km_request_header_desc, km_request_header_version(api_key, version), &h, md, version, body,
                 out, err);
}

int km_frame_response(int16_t api_key, int16_t version, int32_t correlation_id, const void *body, km_buf *out,
                      km_err *err)
{
    const km_message_desc *md = km_find_message(KM_K_RESPONSE, api_key);
    if (!md)
        return km_fail(err, "response api key %d is unknown", api_key);
    km_response_header h;
    km_response_header_init(&h);
    h.correlation_id = correlation_id;
    return frame(&km_response_header_desc, km_response_header_version(api_key, version), &h, md, version, body,
                 out, err);
}

int km_parse_request_header(km_reader *r, km_request_header_view *hdr, km_arena *arena, km_err *err)
{
    /* The api key and version come first in every header version; they pick the header version. */
    km_reader peek = *r;
    int16_t key, ver;
    if (km_read_i16(&peek, &key, "request api key", err) || km_read_i16(&peek, &ver, "request api version", err))
        return -1;
    if (!km_find_message(KM_K_REQUEST, key))
        return km_fail(err, "request header at offset %zu: api key %d is unknown", r->base + r->pos, key);
    km_request_header h;
    if (km_decode_from(&km_request_header_desc, km_request_header_version(key, ver), r, &h, arena, err))
        return -1;
    hdr->api_key = h.request_api_key;
    hdr->api_version = h.request_api_version;
    hdr->correlation_id = h.correlation_id;
    hdr->client_id = h.client_id;
    return 0;
}

int km_parse_response_header(km_reader *r, int16_t api_key, int16_t version, int32_t *correlation_id, km_err *err)
{
    km_arena arena;  /* a response header holds no allocations but unknown tags */
    km_arena_init(&arena, 1u << 20);
    km_response_header h;
    int rc = km_decode_from(&km_response_header_desc, km_response_header_version(api_key, version), r, &h, &arena,
                            err);
    if (!rc)
        *correlation_id = h.correlation_id;
    km_arena_free(&arena);
    return rc;
}
