/* metalog_compress.c - the four record-batch compression codecs, as Kafka writes them.
 *
 * gzip: a gzip stream (java.util.zip.GZIPOutputStream); members may be concatenated.
 * snappy: snappy-java's xerial framing (magic, version, compatible version,
 *   then [int32 length][raw block]...), or one raw block as some clients write.
 * lz4: the LZ4 frame format (KafkaLZ4BlockOutputStream: independent 64 KiB blocks).
 * zstd: zstd frames.
 * Every decompressor stops at `cap` output bytes so a hostile batch cannot
 * balloon memory.
 */
#include "metalog_internal.h"

#include <lz4frame.h>
#include <snappy-c.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>

#define ML_CHUNK (64u * 1024u)

static const uint8_t xerial_magic[8] = {0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0};
enum { XERIAL_HEADER = 16, XERIAL_BLOCK = 32 * 1024 };

/* Grows out so at least `want` more bytes fit, never past cap in total. */
static int room(km_buf *out, size_t want, size_t cap, km_err *err)
{
    if (out->len >= cap)
        return km_fail(err, "decompressed records exceed the %zu-byte cap", cap);
    if (want > cap - out->len)
        want = cap - out->len;
    if (!km_buf_reserve(out, want))
        return km_fail(err, "out of memory decompressing %zu bytes", out->len + want);
    return 0;
}

static int gunzip(const uint8_t *in, size_t len, size_t cap, km_buf *out, km_err *err)
{
    z_stream z;
    memset(&z, 0, sizeof z);
    if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK)
        return km_fail(err, "gzip: inflateInit2 failed");
    z.next_in = (Bytef *)(uintptr_t)in;
    z.avail_in = (uInt)(len > UINT32_MAX ? UINT32_MAX : len);
    int rc = Z_OK;
    for (;;) {
        if (room(out, ML_CHUNK, cap, err) < 0)
            break;
        z.next_out = out->data + out->len;
        z.avail_out = (uInt)(out->cap - out->len);
        size_t before = z.avail_out;
        rc = inflate(&z, Z_NO_FLUSH);
        out->len += before - z.avail_out;
        if (rc == Z_STREAM_END && z.avail_in == 0) {
            inflateEnd(&z);
            return 0;
        }
        if (rc == Z_STREAM_END) { /* another gzip member follows */
            inflateReset(&z);
            continue;
        }
        if (rc == Z_BUF_ERROR && z.avail_in == 0) {
            inflateEnd(&z);
            return km_fail(err, "gzip: stream truncated after %zu input bytes", len);
        }
        if (rc != Z_OK && rc != Z_BUF_ERROR) {
            km_fail(err, "gzip: %s at input byte %zu", z.msg ? z.msg : "inflate error",
                    len - z.avail_in);
            break;
        }
    }
    inflateEnd(&z);
    return -1;
}

static int unsnappy_block(const uint8_t *in, size_t len, size_t cap, km_buf *out, km_err *err)
{
    size_t n = 0;
    if (snappy_uncompressed_length((const char *)in, len, &n) != SNAPPY_OK)
        return km_fail(err, "snappy: bad block header");
    if (n > cap || out->len > cap - n)
        return km_fail(err, "decompressed records exceed the %zu-byte cap", cap);
    if (!km_buf_reserve(out, n))
        return km_fail(err, "out of memory decompressing %zu bytes", n);
    size_t got = n;
    if (snappy_uncompress((const char *)in, len, (char *)out->data + out->len, &got) != SNAPPY_OK || got != n)
        return km_fail(err, "snappy: corrupt block of %zu bytes", len);
    out->len += n;
    return 0;
}

static int unsnappy(const uint8_t *in, size_t len, size_t cap, km_buf *out, km_err *err)
{
    if (len < XERIAL_HEADER || memcmp(in, xerial_magic, sizeof xerial_magic) != 0)
        return unsnappy_block(in, len, cap, out, err);
    size_t pos = XERIAL_HEADER;
    while (pos < len) {
        if (len - pos < 4)
            return km_fail(err, "snappy: truncated xerial chunk length at input byte %zu", pos);
        uint32_t n = km_ml_be32(in + pos);
        pos += 4;
        if (n > len - pos)
            return km_fail(err, "snappy: xerial chunk of %u bytes at input byte %zu overruns %zu", n, pos - 4, len);
        if (unsnappy_block(in + pos, n, cap, out, err) < 0)
            return -1;
        pos += n;
    }
    return 0;
}

static int unlz4(const uint8_t *in, size_t len, size_t cap, km_buf *out, km_err *err)
{
    LZ4F_dctx *d = NULL;
    if (LZ4F_isError(LZ4F_createDecompressionContext(&d, LZ4F_VERSION)))
        return km_fail(err, "lz4: cannot create context");
    size_t pos = 0, hint = 1;
    while (pos < len) {
        if (room(out, ML_CHUNK, cap, err) < 0)
            goto fail;
        size_t src = len - pos, dst = out->cap - out->len;
        hint = LZ4F_decompress(d, out->data + out->len, &dst, in + pos, &src, NULL);
        if (LZ4F_isError(hint)) {
            km_fail(err, "lz4: %s at input byte %zu", LZ4F_getErrorName(hint), pos);
            goto fail;
        }
        pos += src;
        out->len += dst;
        if (src == 0 && dst == 0 && hint != 0) /* no progress: needs input we do not have */
            break;
    }
    /* Output may still be buffered inside the context after the input ends. */
    while (hint != 0) {
        if (room(out, ML_CHUNK, cap, err) < 0)
            goto fail;
        size_t src = 0, dst = out->cap - out->len;
        hint = LZ4F_decompress(d, out->data + out->len, &dst, in + len, &src, NULL);
        if (LZ4F_isError(hint) || dst == 0)
            break;
        out->len += dst;
    }
    LZ4F_freeDecompressionContext(d);
    if (hint != 0)
        return km_fail(err, "lz4: frame truncated after %zu input bytes", len);
    return 0;
fail:
    LZ4F_freeDecompressionContext(d);
    return -1;
}

static int unzstd(const uint8_t *in, size_t len, size_t cap, km_buf *out, km_err *err)
{
    ZSTD_DCtx *d = ZSTD_createDCtx();
    if (!d)
        return km_fail(err, "zstd: cannot create context");
    ZSTD_DCtx_setParameter(d, ZSTD_d_windowLogMax, 27); /* bounds the window memory a frame may ask for */
    ZSTD_inBuffer ib = {in, len, 0};
    size_t rc = 1;
    while (ib.pos < ib.size || rc != 0) {
        if (room(out, ML_CHUNK, cap, err) < 0)
            goto fail;
        ZSTD_outBuffer ob = {out->data + out->len, out->cap - out->len, 0};
        size_t before_in = ib.pos;
        rc = ZSTD_decompressStream(d, &ob, &ib);
        if (ZSTD_isError(rc)) {
            km_fail(err, "zstd: %s at input byte %zu", ZSTD_getErrorName(rc), ib.pos);
            goto fail;
        }
        out->len += ob.pos;
        if (rc != 0 && ib.pos == ib.size && ob.pos < ob.size && before_in == ib.pos) {
            km_fail(err, "zstd: frame truncated after %zu input bytes", len);
            goto fail;
        }
    }
    ZSTD_freeDCtx(d);
    return 0;
fail:
    ZSTD_freeDCtx(d);
    return -1;
}

int km_ml_inflate(km_ml_compression c, const uint8_t *in, size_t len, size_t cap, km_buf *out, km_err *err)
{
    km_buf_reset(out);
    switch (c) {
    case KM_ML_GZIP: return gunzip(in, len, cap, out, err);
    case KM_ML_SNAPPY: return unsnappy(in, len, cap, out, err);
    case KM_ML_LZ4: return unlz4(in, len, cap, out, err);
    case KM_ML_ZSTD: return unzstd(in, len, cap, out, err);
    default: return km_fail(err, "unknown compression codec %d", (int)c);
    }
}

/* ---- compression (the writer) ------------------------------------------------ */

static int gzip_out(const uint8_t *in, size_t len, km_buf *out, km_err *err)
{
    z_stream z;
    memset(&z, 0, sizeof z);
    if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        return km_fail(err, "gzip: deflateInit2 failed");
    size_t bound = deflateBound(&z, (uLong)len) + 32;
    if (len > UINT32_MAX || !km_buf_reserve(out, bound)) {
        deflateEnd(&z);
        return km_fail(err, "gzip: cannot compress %zu bytes", len);
    }
    z.next_in = (Bytef *)(uintptr_t)in;
    z.avail_in = (uInt)len;
    z.next_out = out->data + out->len;
    z.avail_out = (uInt)bound;
    int rc = deflate(&z, Z_FINISH);
    out->len += bound - z.avail_out;
    deflateEnd(&z);
    return rc == Z_STREAM_END ? 0 : km_fail(err, "gzip: deflate failed (%d)", rc);
}

/* snappy-java's SnappyOutputStream framing, which Kafka's Java clients write. */
static int snappy_out(const uint8_t *in, size_t len, km_buf *out, km_err *err)
{
    km_buf_put(out, xerial_magic, sizeof xerial_magic);
    km_buf_put_i32(out, 1); /* version */
    km_buf_put_i32(out, 1); /* minimum compatible version */
    for (size_t pos = 0; pos < len; pos += XERIAL_BLOCK) {
        size_t n = len - pos < XERIAL_BLOCK ? len - pos : XERIAL_BLOCK;
        size_t max = snappy_max_compressed_length(n);
        if (!km_buf_reserve(out, 4 + max))
            return km_fail(err, "snappy: out of memory");
        size_t at = out->len, got = max;
        out->len += 4;
        if (snappy_compress((const char *)in + pos, n, (char *)out->data + out->len, &got) != SNAPPY_OK)
            return km_fail(err, "snappy: compress failed");
        km_ml_put_be32(out->data + at, (uint32_t)got);
        out->len += got;
    }
    return out->oom ? km_fail(err, "snappy: out of memory") : 0;
}

static int lz4_out(const uint8_t *in, size_t len, km_buf *out, km_err *err)
{
    LZ4F_preferences_t prefs;
    memset(&prefs, 0, sizeof prefs);
    prefs.frameInfo.blockSizeID = LZ4F_max64KB;          /* KafkaLZ4BlockOutputStream's default */
    prefs.frameInfo.blockMode = LZ4F_blockIndependent;
    size_t bound = LZ4F_compressFrameBound(len, &prefs);
    if (!km_buf_reserve(out, bound))
        return km_fail(err, "lz4: out of memory");
    size_t n = LZ4F_compressFrame(out->data + out->len, bound, in, len, &prefs);
    if (LZ4F_isError(n))
        return km_fail(err, "lz4: %s", LZ4F_getErrorName(n));
    out->len += n;
    return 0;
}

static int zstd_out(const uint8_t *in, size_t len, km_buf *out, km_err *err)
{
    size_t bound = ZSTD_compressBound(len);
    if (!km_buf_reserve(out, bound))
        return km_fail(err, "zstd: out of memory");
    size_t n = ZSTD_compress(out->data + out->len, bound, in, len, 3);
    if (ZSTD_isError(n))
        return km_fail(err, "zstd: %s", ZSTD_getErrorName(n));
    out->len += n;
    return 0;
}

int km_ml_deflate(km_ml_compression c, const uint8_t *in, size_t len, km_buf *out, km_err *err)
{
    switch (c) {
    case KM_ML_GZIP: return gzip_out(in, len, out, err);
    case KM_ML_SNAPPY: return snappy_out(in, len, out, err);
    case KM_ML_LZ4: return lz4_out(in, len, out, err);
    case KM_ML_ZSTD: return zstd_out(in, len, out, err);
    default: return km_fail(err, "unknown compression codec %d", (int)c);
    }
}
