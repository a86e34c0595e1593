/* Address rewriting: the three responses that tell a client where brokers
 * are.  Each broker named gets (or already has) a proxy route, and the client
 * is told the route's advertised address; a broker the proxy cannot serve is
 * left out, so no upstream address ever reaches a client. */
#include "inline_private.h"

#include <string.h>

#define ERR_COORDINATOR_NOT_AVAILABLE 15

bool inl_api_needs_rewrite(int16_t api_key)
{
    return api_key == KM_API_METADATA || api_key == KM_API_FIND_COORDINATOR || api_key == KM_API_DESCRIBE_CLUSTER ||
           api_key == KM_API_API_VERSIONS;
}

/* The newest version of api_key this proxy may let a client use.  KIP-951 put leader endpoints
 * (host, port) into Fetch v16+ and Produce v10+ responses; rewriting those would mean holding
 * every Fetch whole, so the versions before them are offered.  The answers that carry broker
 * addresses and are rewritten (Metadata, FindCoordinator, DescribeCluster) are rewritten at the
 * versions the codec knows: a newer one would pass through with the upstream's addresses, so
 * the codec's newest is the cap. */
static int16_t version_cap(int16_t api_key)
{
    if (api_key == KM_API_FETCH)
        return 15;
    if (api_key == KM_API_PRODUCE)
        return 9;
    if (api_key == KM_API_API_VERSIONS || !inl_api_needs_rewrite(api_key))
        return KM_VER_MAX;
    const km_message_desc *md = km_find_message(KM_K_RESPONSE, api_key);
    return md ? md->valid.hi : KM_VER_MAX;
}

/* Caps every API at version_cap; KIP-932's share fetches carry leader endpoints at every version
 * and are not offered at all. 1 when the answer changed. */
static int cap_versions(km_api_versions_response *m)
{
    int changed = 0;
    int32_t kept = 0;
    for (int32_t i = 0; i < m->api_keys.count; i++) {
        km_api_versions_response_api_version *v = &m->api_keys.items[i];
        int16_t cap = version_cap(v->api_key);
        if (v->api_key == KM_API_SHARE_FETCH || v->api_key == KM_API_SHARE_ACKNOWLEDGE) {
            changed = 1;
            continue;
        }
        if (v->max_version > cap)
            v->max_version = cap, changed = 1;
        m->api_keys.items[kept++] = *v;
    }
    if (m->api_keys.count > 0)
        m->api_keys.count = kept;
    return changed;
}

/* Points host/port at broker id's proxy listener; false when it has none. */
static bool rewrite_address(km_inline *p, int32_t id, km_str *host, int32_t *port)
{
    char upstream_host[INL_HOST_MAX] = "";
    if (host->len > 0 && (size_t)host->len < sizeof upstream_host)
        memcpy(upstream_host, host->ptr, (size_t)host->len);
    inl_route *r = inl_route_for_broker(p, id, upstream_host, *port);
    if (!r)
        return false;
    *host = km_cstr(r->adv_host); /* the route outlives the encode that follows */
    *port = r->adv_port;
    return true;
}

static void rewrite_metadata(km_inline *p, km_metadata_response *m)
{
    int32_t kept = 0;
    for (int32_t i = 0; i < m->brokers.count; i++) {
        km_metadata_response_response_broker *b = &m->brokers.items[i];
        if (rewrite_address(p, b->node_id, &b->host, &b->port))
            m->brokers.items[kept++] = *b;
    }
    if (m->brokers.count > 0)
        m->brokers.count = kept;
}

static void rewrite_describe_cluster(km_inline *p, km_describe_cluster_response *m)
{
    int32_t kept = 0;
    for (int32_t i = 0; i < m->brokers.count; i++) {
        km_describe_cluster_response_broker *b = &m->brokers.items[i];
        if (rewrite_address(p, b->broker_id, &b->host, &b->port))
            m->brokers.items[kept++] = *b;
    }
    if (m->brokers.count > 0)
        m->brokers.count = kept;
}

/* One coordinator (v0-3 keep it at the top level, v4+ in an array). */
static void rewrite_coordinator(km_inline *p, int16_t *error_code, int32_t *node_id, km_str *host, int32_t *port)
{
    if (*error_code != 0 || *node_id < 0)
        return;
    if (rewrite_address(p, *node_id, host, port))
        return;
    /* Unreachable through us: the client retries FindCoordinator, as for a moving coordinator. */
    *error_code = ERR_COORDINATOR_NOT_AVAILABLE;
    *node_id = -1;
    *host = km_cstr("");
    *port = -1;
}

static void rewrite_find_coordinator(km_inline *p, int16_t version, km_find_coordinator_response *m)
{
    if (version <= 3) /* v4+ answer in the array only; the top-level fields are absent */
        rewrite_coordinator(p, &m->error_code, &m->node_id, &m->host, &m->port);
    for (int32_t i = 0; i < m->coordinators.count; i++) {
        km_find_coordinator_response_coordinator *c = &m->coordinators.items[i];
        rewrite_coordinator(p, &c->error_code, &c->node_id, &c->host, &c->port);
    }
}

/* [size][the upstream's own header bytes][body]: the header goes back as it came, with any tagged
 * fields a newer broker put there (the codec would drop the ones it does not know). */
static int frame_keeping_header(const uint8_t *payload, size_t header_len, const km_message_desc *md,
                                int16_t version, const void *body, km_buf *out, km_err *err)
{
    size_t start = out->len;
    km_buf_put_i32(out, 0);
    km_buf_put(out, payload, header_len);
    if (km_encode(md, version, body, out, err)) {
        out->len = start;
        return -1;
    }
    if (out->oom || out->len - start - 4 > INT32_MAX) {
        out->len = start;
        return km_fail(err, "%s v%d: out of memory or a frame over 2 GiB re-encoding it", md->name, version);
    }
    km_buf_patch_i32(out, start, (int32_t)(out->len - start - 4));
    return 0;
}

/* Bytes after the body (a newer broker's fields, or padding such as librdkafka 2.15's mock sends)
 * follow the rewritten body as they came: Kafka's clients read what they know and ignore the rest
 * (AbstractResponse.parseResponse does not check for leftovers), so the proxy does the same. */
static int append_rest(km_buf *out, km_reader *r, km_err *err)
{
    size_t rest = km_reader_left(r);
    if (!rest)
        return 0;
    const uint8_t *tail;
    km_read_raw(r, rest, &tail, "rest", err);
    km_buf_put(out, tail, rest);
    if (out->oom || out->len - 4 > INT32_MAX)
        return km_fail(err, "out of memory appending %zu bytes after the body", rest);
    km_buf_patch_i32(out, 0, (int32_t)(out->len - 4));
    return 0;
}

/* An ApiVersions answer we cannot read (a version past our spec, bytes that do not decode) would
 * reach the client with Fetch/Produce versions uncapped, and from them KIP-951's leader endpoints
 * with upstream addresses: it is never passed on. Counted, logged once (every client of such a
 * broker would log it), and the client's connection is cut. */
static int api_versions_unparsed(inl_worker *w, int16_t version, const char *why, km_err *err)
{
    km_inline *p = w->p;
    INL_ADD(w->stats.api_versions_unparsed, 1);
    if (!__atomic_exchange_n(&p->api_versions_unparsed_logged, true, __ATOMIC_RELAXED))
        inl_log(p, 1, "an upstream's ApiVersions v%d answer cannot be parsed (%s): it is not passed on, as the "
                "Fetch/Produce version cap (KIP-951) could not be applied; its clients are cut. Counted in "
                "kmproxy_inline_api_versions_unparsed_total; logged once", version, why);
    return km_fail(err, "ApiVersions v%d answer cannot be parsed (%s): the version cap cannot be applied", version,
                   why);
}

static int rewrite_api_versions(inl_worker *w, int16_t version, const uint8_t *payload, size_t len, km_buf *out,
                                km_err *err)
{
    const km_message_desc *md = &km_api_versions_response_desc;
    /* The header is v0 at every version and the body starts with ErrorCode: an answer to a version
     * the broker refuses is v0-shaped whatever was asked and lists no versions to cap. */
    if (len >= 6 && (payload[4] || payload[5]))
        return 0;
    if (!km_version_in(md->valid, version))
        return api_versions_unparsed(w, version, "a version this proxy does not know", err);
    km_arena arena;
    km_arena_init(&arena, len * 8 + (1u << 20));
    km_reader r;
    km_reader_init(&r, payload, len);
    int32_t correlation_id;
    km_api_versions_response body;
    km_err why = {{0}};
    int rc;
    size_t header_len = 0;
    if (km_parse_response_header(&r, KM_API_API_VERSIONS, version, &correlation_id, &why) ||
        (header_len = r.pos, km_decode_from(md, version, &r, &body, &arena, &why)))
        rc = api_versions_unparsed(w, version, why.msg, err);
    else if (!cap_versions(&body))
        rc = 0;
    else
        rc = frame_keeping_header(payload, header_len, md, version, &body, out, err) ||
                     append_rest(out, &r, err) ? -1 : 1;
    km_arena_free(&arena);
    return rc;
}

int inl_rewrite_response(inl_worker *w, int16_t api_key, int16_t version, const uint8_t *payload, size_t len,
                         km_buf *out, km_err *err)
{
    km_inline *p = w->p;
    if (api_key == KM_API_API_VERSIONS)
        return rewrite_api_versions(w, version, payload, len, out, err);
    const km_message_desc *md = km_find_message(KM_K_RESPONSE, api_key);
    if (!inl_api_needs_rewrite(api_key) || !md || !km_version_in(md->valid, version))
        return 0;
    km_arena arena;
    km_arena_init(&arena, len * 8 + (1u << 20));
    km_reader r;
    km_reader_init(&r, payload, len);
    int32_t correlation_id;
    void *body = km_arena_alloc(&arena, md->root->size);
    int rc = -1;
    size_t header_len = 0;
    if (!body)
        km_fail(err, "out of memory decoding a %s", md->name);
    else if (!km_parse_response_header(&r, api_key, version, &correlation_id, err) &&
             (header_len = r.pos, !km_decode_from(md, version, &r, body, &arena, err)))
        rc = 0;
    if (rc == 0) {
        if (api_key == KM_API_METADATA)
            rewrite_metadata(p, body);
        else if (api_key == KM_API_FIND_COORDINATOR)
            rewrite_find_coordinator(p, version, body);
        else
            rewrite_describe_cluster(p, body);
        rc = frame_keeping_header(payload, header_len, md, version, body, out, err) ? -1 : 1;
    }
    if (rc == 1 && append_rest(out, &r, err))
        rc = -1;
    km_arena_free(&arena);
    return rc;
}
