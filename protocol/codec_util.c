/* Codec building blocks: errors, arena, output buffer, bounded reader, varints, base64, uuid. */
#include "km_codec.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int km_fail(km_err *err, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return -1;
}

km_str km_cstr(const char *s)
{
    km_str r = {s, s ? (int32_t)strlen(s) : -1};
    return r;
}

bool km_str_eq(km_str a, const char *s)
{
    if (!s || a.len < 0)
        return !s && a.len < 0;
    return strlen(s) == (size_t)a.len && (a.len == 0 || memcmp(a.ptr, s, (size_t)a.len) == 0);
}

bool km_uuid_is_zero(km_uuid u)
{
    static const km_uuid zero;
    return memcmp(u.b, zero.b, 16) == 0;
}

/* ---- base64 ---- */

static const char B64_STD[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
static const char B64_URL[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

size_t km_base64_encode(const uint8_t *p, size_t n, char *out, bool url_nopad)
{
    const char *tab = url_nopad ? B64_URL : B64_STD;
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16;
        if (i + 1 < n) v |= (uint32_t)p[i + 1] << 8;
        if (i + 2 < n) v |= p[i + 2];
        out[o++] = tab[(v >> 18) & 63];
        out[o++] = tab[(v >> 12) & 63];
        if (i + 1 < n) out[o++] = tab[(v >> 6) & 63];
        else if (!url_nopad) out[o++] = '=';
        if (i + 2 < n) out[o++] = tab[v & 63];
        else if (!url_nopad) out[o++] = '=';
    }
    out[o] = '\0';
    return o;
}

static int b64_value(char c)
{
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+' || c == '-') return 62;
    if (c == '/' || c == '_') return 63;
    return -1;
}

int64_t km_base64_decode(const char *s, size_t n, uint8_t *out)
{
    while (n > 0 && s[n - 1] == '=')
        n--;
    if (n % 4 == 1)
        return -1;
    size_t o = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < n; i++) {
        int v = b64_value(s[i]);
        if (v < 0)
            return -1;
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[o++] = (uint8_t)(acc >> bits);
        }
    }
    if (bits && (acc & ((1u << bits) - 1)))  /* non-canonical trailing bits */
        return -1;
    return (int64_t)o;
}

void km_uuid_to_base64(km_uuid u, char out[23])
{
    km_base64_encode(u.b, 16, out, true);
}

int km_uuid_from_base64(const char *s, km_uuid *out)
{
    uint8_t tmp[18];
    if (strlen(s) != 22 || km_base64_decode(s, 22, tmp) != 16)
        return -1;
    memcpy(out->b, tmp, 16);
    return 0;
}

/* ---- arena: a chain of chunks; big requests get a chunk of their own ---- */

struct km_arena_chunk {
    km_arena_chunk *next;
    size_t size, used;
    max_align_t data[];
};

#define ARENA_CHUNK (64u * 1024u)

void km_arena_init(km_arena *a, size_t limit)
{
    a->head = NULL;
    a->used = 0;
    a->limit = limit ? limit : (size_t)KM_MAX_FRAME_DEFAULT * 4;
}

void *km_arena_alloc(km_arena *a, size_t n)
{
    n = (n + sizeof(max_align_t) - 1) & ~(sizeof(max_align_t) - 1);
    if (n == 0)
        n = sizeof(max_align_t);
    if (n > a->limit || a->used > a->limit - n)
        return NULL;
    km_arena_chunk *c = a->head;
    if (!c || c->size - c->used < n) {
        size_t size = n > ARENA_CHUNK ? n : ARENA_CHUNK;
        c = malloc(sizeof *c + size);
        if (!c)
            return NULL;
        c->size = size;
        c->used = 0;
        /* A big one-off chunk goes behind the head so the head's free space stays usable. */
        if (a->head && size > ARENA_CHUNK) {
            c->next = a->head->next;
            a->head->next = c;
        } else {
            c->next = a->head;
            a->head = c;
        }
    }
    void *p = (char *)c->data + c->used;
    c->used += n;
    a->used += n;
    memset(p, 0, n);
    return p;
}

void km_arena_free(km_arena *a)
{
    for (km_arena_chunk *c = a->head, *next; c; c = next) {
        next = c->next;
        free(c);
    }
    a->head = NULL;
    a->used = 0;
}

/* ---- output buffer ---- */

void km_buf_init(km_buf *b) { memset(b, 0, sizeof *b); }
void km_buf_free(km_buf *b) { free(b->data); km_buf_init(b); }
void km_buf_reset(km_buf *b) { b->len = 0; b->oom = false; }

bool km_buf_reserve(km_buf *b, size_t extra)
{
    if (b->oom)
        return false;
    if (b->count_only || b->cap - b->len >= extra)
        return true;
    size_t cap = b->cap ? b->cap : 256;
    while (cap - b->len < extra) {
        if (cap > SIZE_MAX / 2) {
            b->oom = true;
            return false;
        }
        cap *= 2;
    }
    uint8_t *p = realloc(b->data, cap);
    if (!p) {
        b->oom = true;
        return false;
    }
    b->data = p;
    b->cap = cap;
    return true;
}

void km_buf_put(km_buf *b, const void *p, size_t n)
{
    if (!km_buf_reserve(b, n))
        return;
    if (!b->count_only && n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
}

static void put_be(km_buf *b, uint64_t v, int bytes)
{
    uint8_t tmp[8];
    for (int i = 0; i < bytes; i++)
        tmp[i] = (uint8_t)(v >> (8 * (bytes - 1 - i)));
    km_buf_put(b, tmp, (size_t)bytes);
}

void km_buf_put_i8(km_buf *b, int8_t v) { put_be(b, (uint8_t)v, 1); }
void km_buf_put_i16(km_buf *b, int16_t v) { put_be(b, (uint16_t)v, 2); }
void km_buf_put_i32(km_buf *b, int32_t v) { put_be(b, (uint32_t)v, 4); }
void km_buf_put_i64(km_buf *b, int64_t v) { put_be(b, (uint64_t)v, 8); }

static void put_uvarlong(km_buf *b, uint64_t v)
{
    uint8_t tmp[10];
    size_t n = 0;
    while (v >= 0x80) {
        tmp[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    tmp[n++] = (uint8_t)v;
    km_buf_put(b, tmp, n);
}

void km_buf_put_uvarint(km_buf *b, uint32_t v) { put_uvarlong(b, v); }
void km_buf_put_varint(km_buf *b, int32_t v) { put_uvarlong(b, ((uint32_t)v << 1) ^ (uint32_t)(v >> 31)); }
void km_buf_put_varlong(km_buf *b, int64_t v) { put_uvarlong(b, ((uint64_t)v << 1) ^ (uint64_t)(v >> 63)); }

void km_buf_patch_i32(km_buf *b, size_t at, int32_t v)
{
    if (b->count_only || b->oom || at + 4 > b->len)
        return;
    uint32_t u = (uint32_t)v;
    for (int i = 0; i < 4; i++)
        b->data[at + (size_t)i] = (uint8_t)(u >> (24 - 8 * i));
}

static size_t uvarlong_size(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

size_t km_uvarint_size(uint32_t v) { return uvarlong_size(v); }
size_t km_varint_size(int32_t v) { return uvarlong_size(((uint32_t)v << 1) ^ (uint32_t)(v >> 31)); }
size_t km_varlong_size(int64_t v) { return uvarlong_size(((uint64_t)v << 1) ^ (uint64_t)(v >> 63)); }

/* ---- bounded reader ---- */

void km_reader_init(km_reader *r, const uint8_t *p, size_t len)
{
    r->p = p;
    r->len = len;
    r->pos = 0;
    r->base = 0;
}

size_t km_reader_left(const km_reader *r) { return r->len - r->pos; }

static int short_read(km_reader *r, size_t need, const char *what, km_err *err)
{
    return km_fail(err, "%s at offset %zu: needs %zu bytes, %zu left", what, r->base + r->pos, need,
                   km_reader_left(r));
}

static int get_be(km_reader *r, int bytes, uint64_t *v, const char *what, km_err *err)
{
    if (km_reader_left(r) < (size_t)bytes)
        return short_read(r, (size_t)bytes, what, err);
    uint64_t acc = 0;
    for (int i = 0; i < bytes; i++)
        acc = (acc << 8) | r->p[r->pos + (size_t)i];
    r->pos += (size_t)bytes;
    *v = acc;
    return 0;
}

int km_read_i8(km_reader *r, int8_t *v, const char *what, km_err *err)
{
    uint64_t u = 0;
    if (get_be(r, 1, &u, what, err)) return -1;
    *v = (int8_t)(uint8_t)u;
    return 0;
}

int km_read_i16(km_reader *r, int16_t *v, const char *what, km_err *err)
{
    uint64_t u = 0;
    if (get_be(r, 2, &u, what, err)) return -1;
    *v = (int16_t)(uint16_t)u;
    return 0;
}

int km_read_i32(km_reader *r, int32_t *v, const char *what, km_err *err)
{
    uint64_t u = 0;
    if (get_be(r, 4, &u, what, err)) return -1;
    *v = (int32_t)(uint32_t)u;
    return 0;
}

int km_read_i64(km_reader *r, int64_t *v, const char *what, km_err *err)
{
    uint64_t u = 0;
    if (get_be(r, 8, &u, what, err)) return -1;
    *v = (int64_t)u;
    return 0;
}

/* Reads an unsigned varint of at most max_bytes (5 for 32-bit, 10 for 64-bit values). */
static int read_uvar(km_reader *r, int max_bytes, uint64_t *v, const char *what, km_err *err)
{
    uint64_t acc = 0;
    size_t start = r->pos;
    for (int i = 0; i < max_bytes; i++) {
        if (km_reader_left(r) == 0) {
            r->pos = start;
            return short_read(r, (size_t)i + 1, what, err);
        }
        uint8_t byte = r->p[r->pos++];
        acc |= (uint64_t)(byte & 0x7f) << (7 * i);
        if (!(byte & 0x80)) {
            if (max_bytes == 5 && acc > UINT32_MAX)
                break;
            *v = acc;
            return 0;
        }
    }
    size_t at = r->base + start;
    r->pos = start;
    return km_fail(err, "%s at offset %zu: varint is longer than %d bytes", what, at, max_bytes);
}

int km_read_uvarint(km_reader *r, uint32_t *v, const char *what, km_err *err)
{
    uint64_t u = 0;
    if (read_uvar(r, 5, &u, what, err)) return -1;
    *v = (uint32_t)u;
    return 0;
}

int km_read_varint(km_reader *r, int32_t *v, const char *what, km_err *err)
{
    uint64_t u = 0;
    if (read_uvar(r, 5, &u, what, err)) return -1;
    uint32_t z = (uint32_t)u;
    *v = (int32_t)((z >> 1) ^ (~(z & 1) + 1));
    return 0;
}

int km_read_varlong(km_reader *r, int64_t *v, const char *what, km_err *err)
{
    uint64_t u = 0;
    if (read_uvar(r, 10, &u, what, err)) return -1;
    *v = (int64_t)((u >> 1) ^ (~(u & 1) + 1));
    return 0;
}

int km_read_raw(km_reader *r, size_t n, const uint8_t **out, const char *what, km_err *err)
{
    if (km_reader_left(r) < n)
        return short_read(r, n, what, err);
    *out = r->p + r->pos;
    r->pos += n;
    return 0;
}
