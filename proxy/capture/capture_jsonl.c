/* JSON lines output: one object per frame, decoded with the codec.  Responses
 * carry no api key, so each request's (api key, version) is remembered by
 * correlation id until its response arrives.  Writer thread only. */
#include "capture_private.h"

#include <errno.h>
#include <jansson.h>
#include <string.h>
#include <time.h>

int km_cap__jsonl_open(cap_jsonl *j, const char *path, size_t body_limit, km_err *err)
{
    j->path = path;
    j->body_limit = body_limit;
    j->f = fopen(path, "w");
    if (!j->f)
        return km_fail(err, "JSON lines capture %s: cannot create: %s", path, strerror(errno));
    return 0;
}

int km_cap__jsonl_close(cap_jsonl *j, km_err *err)
{
    errno = 0;
    int rc = fclose(j->f) ? km_fail(err, "JSON lines capture %s: close failed: %s", j->path, strerror(errno)) : 0;
    j->f = NULL;
    return rc;
}

static void iso_time(uint64_t ns, char *out, size_t cap)
{
    time_t secs = (time_t)(ns / 1000000000u);
    struct tm tm;
    gmtime_r(&secs, &tm);
    size_t n = strftime(out, cap, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out + n, cap - n, ".%09uZ", (unsigned)(ns % 1000000000u));
}

static json_t *endpoint_json(km_capture_endpoint e)
{
    return json_sprintf("%u.%u.%u.%u:%u", e.ip >> 24, (e.ip >> 16) & 255, (e.ip >> 8) & 255, e.ip & 255, e.port);
}

static json_t *line_base(const cap_rec *r, const char *event)
{
    char ts[48];
    iso_time(r->ts_ns, ts, sizeof ts);
    json_t *o = json_object();
    json_object_set_new(o, "ts", json_string(ts));
    json_object_set_new(o, "conn", json_integer((json_int_t)r->conn->id));
    json_object_set_new(o, event ? "event" : "dir",
                        json_string(event ? event : r->dir == KM_CAPTURE_C2S ? "c2s" : "s2c"));
    if (event || r->after_gap) {
        json_object_set_new(o, "client", endpoint_json(r->conn->client));
        json_object_set_new(o, "server", endpoint_json(r->conn->server));
    }
    if (r->after_gap)
        json_object_set_new(o, "after_dropped_frames", json_true());
    if (r->conn->has_broker)
        json_object_set_new(o, "broker", json_integer(r->conn->broker));
    return o;
}

static void pending_put(km_capture_conn *c, int32_t corr, int16_t key, int16_t ver, uint64_t ts_ns)
{
    /* a ring: requests never answered (Produce acks=0) age out instead of leaking */
    c->pending[c->pending_next] = (cap_pending){corr, key, ver, true, ts_ns};
    c->pending_next = (c->pending_next + 1) % CAP_PENDING;
}

static bool pending_take(km_capture_conn *c, int32_t corr, int16_t *key, int16_t *ver, uint64_t *ts_ns)
{
    for (unsigned i = 1; i <= CAP_PENDING; i++) { /* newest first, should an id be reused */
        cap_pending *p = &c->pending[(c->pending_next + CAP_PENDING - i) % CAP_PENDING];
        if (p->used && p->correlation_id == corr) {
            *key = p->api_key;
            *ver = p->api_version;
            *ts_ns = p->ts_ns;
            p->used = false;
            return true;
        }
    }
    return false;
}

static void set_api(json_t *o, int16_t key, int16_t ver, int32_t corr)
{
    const char *name = km_api_name(key);
    json_object_set_new(o, "api_key", json_integer(key));
    json_object_set_new(o, "api_name", name ? json_string(name) : json_null());
    json_object_set_new(o, "api_version", json_integer(ver));
    json_object_set_new(o, "correlation_id", json_integer(corr));
}

/* Decodes the body at r into "body", or says why not in "error". */
static void add_body(cap_jsonl *j, json_t *o, km_msg_kind kind, int16_t key, int16_t ver, km_reader *r,
                     km_arena *arena)
{
    const km_message_desc *md = km_find_message(kind, key);
    km_err e = {{0}};
    if (!md) {
        json_object_set_new(o, "error", json_sprintf("api key %d is unknown to this build", key));
        return;
    }
    if (r->len > j->body_limit) {
        json_object_set_new(o, "body_omitted", json_sprintf("frame over %zu bytes", j->body_limit));
        return;
    }
    void *obj = km_arena_alloc(arena, md->root->size);
    json_t *body = NULL;
    if (!obj)
        km_fail(&e, "%s v%d: out of memory", md->name, ver);
    else if (!km_decode_from(md, ver, r, obj, arena, &e))
        body = km_to_json(md, ver, obj, &e);
    if (!body) {
        json_object_set_new(o, "error", json_string(e.msg));
        return;
    }
    json_object_set_new(o, "body", body);
    if (km_reader_left(r))
        json_object_set_new(o, "trailing_bytes", json_integer((json_int_t)km_reader_left(r)));
}

static void describe_request(cap_jsonl *j, json_t *o, const cap_rec *r, km_arena *arena)
{
    km_reader rd;
    km_reader_init(&rd, r->data, r->len);
    km_err e = {{0}};
    int16_t key, ver;
    int32_t corr;
    km_reader peek = rd; /* key, version and correlation id lead every header version */
    if (km_read_i16(&peek, &key, "request api key", &e) || km_read_i16(&peek, &ver, "request api version", &e) ||
        km_read_i32(&peek, &corr, "request correlation id", &e)) {
        json_object_set_new(o, "error", json_string(e.msg));
        return;
    }
    set_api(o, key, ver, corr);
    pending_put(r->conn, corr, key, ver, r->ts_ns);
    km_request_header_view hdr;
    if (km_parse_request_header(&rd, &hdr, arena, &e)) {
        json_object_set_new(o, "error", json_string(e.msg));
        return;
    }
    json_object_set_new(o, "client_id", hdr.client_id.len < 0 ? json_null()
                                                               : json_stringn(hdr.client_id.ptr, (size_t)hdr.client_id.len));
    add_body(j, o, KM_K_REQUEST, key, ver, &rd, arena);
}

static void describe_response(cap_jsonl *j, json_t *o, const cap_rec *r, km_arena *arena)
{
    km_reader rd;
    km_reader_init(&rd, r->data, r->len);
    km_err e = {{0}};
    int32_t corr;
    km_reader peek = rd;
    if (km_read_i32(&peek, &corr, "response correlation id", &e)) {
        json_object_set_new(o, "error", json_string(e.msg));
        return;
    }
    int16_t key, ver;
    uint64_t sent_ns;
    if (!pending_take(r->conn, corr, &key, &ver, &sent_ns)) {
        json_object_set_new(o, "correlation_id", json_integer(corr));
        json_object_set_new(o, "error", json_string("no request with this correlation id was captured"));
        return;
    }
    set_api(o, key, ver, corr);
    json_object_set_new(o, "latency_ms", json_real(r->ts_ns >= sent_ns ? (double)(r->ts_ns - sent_ns) / 1e6 : 0));
    if (km_parse_response_header(&rd, key, ver, &corr, &e)) {
        json_object_set_new(o, "error", json_string(e.msg));
        return;
    }
    add_body(j, o, KM_K_RESPONSE, key, ver, &rd, arena);
}

int km_cap__jsonl_record(cap_jsonl *j, const cap_rec *r, km_err *err)
{
    json_t *o = line_base(r, r->type == REC_OPEN ? "open" : r->type == REC_CLOSE ? "close" : NULL);
    if (r->type == REC_FRAME) {
        json_object_set_new(o, "size", json_integer((json_int_t)r->len));
        km_arena arena;
        /* decoded structs are a few times the wire size; bodies are capped by body_limit */
        km_arena_init(&arena, 16 * (r->len < j->body_limit ? r->len : j->body_limit) + (64u << 10));
        if (r->dir == KM_CAPTURE_C2S)
            describe_request(j, o, r, &arena);
        else
            describe_response(j, o, r, &arena);
        km_arena_free(&arena);
    }
    errno = 0;
    int rc = json_dumpf(o, j->f, JSON_COMPACT) || fputc('\n', j->f) == EOF
                 ? km_fail(err, "JSON lines capture %s: write failed: %s", j->path, strerror(errno ? errno : EIO))
                 : 0;
    json_decref(o);
    return rc;
}

/* The last line: what the capture could not keep, so a reader knows the file has holes. */
int km_cap__jsonl_summary(cap_jsonl *j, const km_capture_stats *st, km_err *err)
{
    json_t *o = json_pack("{s:s, s:I, s:I, s:I, s:I, s:I, s:I}", "event", "capture_end", "frames",
                          (json_int_t)st->frames, "bytes", (json_int_t)st->bytes, "dropped_frames",
                          (json_int_t)st->dropped_frames, "dropped_bytes", (json_int_t)st->dropped_bytes,
                          "write_errors", (json_int_t)st->write_errors, "skipped_frames",
                          (json_int_t)st->skipped_frames);
    errno = 0;
    int rc = !o || json_dumpf(o, j->f, JSON_COMPACT) || fputc('\n', j->f) == EOF
                 ? km_fail(err, "JSON lines capture %s: write failed: %s", j->path, strerror(errno ? errno : EIO))
                 : 0;
    json_decref(o);
    return rc;
}
