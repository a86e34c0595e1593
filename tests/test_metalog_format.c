/* Record batch v2 format: CRC32C, every codec round trip, snapshots, and hostile input. */
#include "test_metalog.h"

#include <criterion/criterion.h>
#include <snappy-c.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- an independent, by-the-spec batch builder (cross-checks the library's) ---- */

static void raw_batch(int64_t base, const km_bytes *values, int n, uint16_t attrs, km_buf *out)
{
    km_buf recs;
    km_buf_init(&recs);
    for (int i = 0; i < n; i++) {
        km_buf body;
        km_buf_init(&body);
        km_buf_put_i8(&body, 0);
        km_buf_put_varlong(&body, 0);
        km_buf_put_varint(&body, i);
        km_buf_put_varint(&body, -1);
        km_buf_put_varint(&body, values[i].len);
        km_buf_put(&body, values[i].ptr, (size_t)values[i].len);
        km_buf_put_varint(&body, 0);
        km_buf_put_varint(&recs, (int32_t)body.len);
        km_buf_put(&recs, body.data, body.len);
        km_buf_free(&body);
    }
    size_t start = out->len;
    km_buf_put_i64(out, base);
    km_buf_put_i32(out, (int32_t)(49 + recs.len));
    km_buf_put_i32(out, 0);
    km_buf_put_i8(out, 2);
    km_buf_put_i32(out, 0);
    km_buf_put_i16(out, (int16_t)attrs);
    km_buf_put_i32(out, n - 1);
    km_buf_put_i64(out, 5);
    km_buf_put_i64(out, 5);
    km_buf_put_i64(out, -1);
    km_buf_put_i16(out, -1);
    km_buf_put_i32(out, -1);
    km_buf_put_i32(out, n);
    km_buf_put(out, recs.data, recs.len);
    tm_fix_crc(out->data + start);
    km_buf_free(&recs);
}

/* Writes bytes as a one-file log and returns what reading it says. */
static int read_bytes_file(const uint8_t *p, size_t len, const km_metalog_opts *o, long *n, km_err *err)
{
    char *dir = km_test_tmpdir("ml-bytes");
    char *path = tm_path(dir, "00000000000000000000.log");
    tm_spit(path, p, len);
    km_metalog *m = km_metalog_open_file(path, o, err);
    cr_assert(m, "%s", err->msg);
    int64_t last = -1;
    *n = 0;
    int rc = tm_drain_checked(m, n, &last, true, err);
    km_metalog_close(m);
    free(path);
    km_test_rmtree(dir);
    free(dir);
    return rc;
}

static void frame_value(km_buf *b, uint32_t frame, uint32_t key, uint32_t ver, const char *topic)
{
    km_buf_put_uvarint(b, frame);
    km_buf_put_uvarint(b, key);
    km_buf_put_uvarint(b, ver);
    km_topic_record t;
    km_topic_record_init(&t);
    t.name = km_cstr(topic);
    km_err err;
    cr_assert_eq(km_topic_record_encode(&t, 0, b, &err), 0, "%s", err.msg);
}

/* ---- CRC32C ----------------------------------------------------------------------------- */

static uint32_t crc_bitwise(const uint8_t *p, size_t n)
{
    uint32_t c = ~0u;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1)));
    }
    return ~c;
}

Test(metalog_crc, known_vectors_and_chaining)
{
    cr_assert_eq(km_crc32c(0, "123456789", 9), 0xE3069283u);
    cr_assert_eq(km_crc32c(0, "", 0), 0u);
    uint8_t buf[1031];
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = (uint8_t)(i * 131 + 7);
    for (size_t off = 0; off < 9; off++)
        for (size_t n = 0; n + off <= sizeof buf; n += 97)
            cr_assert_eq(km_crc32c(0, buf + off, n), crc_bitwise(buf + off, n), "off %zu n %zu", off, n);
    uint32_t a = km_crc32c(0, buf, 100);
    cr_assert_eq(km_crc32c(a, buf + 100, sizeof buf - 100), km_crc32c(0, buf, sizeof buf));
}

/* ---- round trips -------------------------------------------------------------------------- */

static void round_trip(km_ml_compression c)
{
    char *dir = km_test_tmpdir("ml-rt");
    tm_write_topics(dir, c, 4, 1, 0);
    tm_write_topics(dir, c, 3, 700, 0); /* > 32 KiB snappy chunks, > 64 KiB lz4 blocks */
    km_err err;
    km_metalog *m = km_metalog_open_dir(dir, NULL, &err);
    cr_assert(m, "%s", err.msg);
    km_metalog_record r;
    long n = 0;
    int rc;
    while ((rc = km_metalog_next(m, &r, &err)) == 1) {
        cr_assert_eq(r.offset, n);
        cr_assert_eq(r.batch->compression, c);
        cr_assert_eq(r.batch->leader_epoch, 3);
        cr_assert_eq(r.timestamp, 1700000000000);
        cr_assert_eq(r.type, KM_MDR_TOPIC_RECORD);
        cr_assert_eq(r.desc, &km_topic_record_desc);
        const km_topic_record *t = r.msg;
        char want[32];
        snprintf(want, sizeof want, "topic-%ld", n);
        cr_assert(km_str_eq(t->name, want));
        int64_t id;
        memcpy(&id, t->topic_id.b, sizeof id);
        cr_assert_eq(id, n + 1);
        n++;
    }
    cr_assert_eq(rc, 0, "%s", err.msg);
    cr_assert_eq(n, 4 + 3 * 700);
    cr_assert_eq(km_metalog_next_offset(m), n);
    km_metalog_close(m);
    km_test_rmtree(dir);
    free(dir);
}

Test(metalog_roundtrip, none) { round_trip(KM_ML_NONE); }
Test(metalog_roundtrip, gzip) { round_trip(KM_ML_GZIP); }
Test(metalog_roundtrip, snappy) { round_trip(KM_ML_SNAPPY); }
Test(metalog_roundtrip, lz4) { round_trip(KM_ML_LZ4); }
Test(metalog_roundtrip, zstd) { round_trip(KM_ML_ZSTD); }

Test(metalog_roundtrip, encoder_matches_independent_builder)
{
    km_buf a, b, v;
    km_buf_init(&a);
    km_buf_init(&b);
    km_buf_init(&v);
    tm_topic_batch(42, 1, KM_ML_NONE, &a);
    km_err err;
    km_topic_record t;
    km_topic_record_init(&t);
    t.name = km_cstr("topic-42");
    memcpy(t.topic_id.b, &(int64_t){43}, sizeof(int64_t));
    cr_assert_eq(km_ml_encode_frame(&km_topic_record_desc, 0, &t, &v, &err), 0, "%s", err.msg);
    km_bytes val = {v.data, (int32_t)v.len};
    raw_batch(42, &val, 1, 0, &b);
    /* same bytes except partitionLeaderEpoch and the timestamps, which the builders set differently */
    cr_assert_eq(a.len, b.len);
    cr_assert_eq(memcmp(a.data + 61, b.data + 61, a.len - 61), 0);
    cr_assert_eq(memcmp(a.data, b.data, 12), 0);
    km_buf_free(&a);
    km_buf_free(&b);
    km_buf_free(&v);
}

Test(metalog_roundtrip, raw_snappy_block_is_read)
{
    /* librdkafka-style snappy: one raw block, no xerial framing */
    km_buf plain, packed, batch;
    km_buf_init(&plain);
    km_buf_init(&packed);
    km_buf_init(&batch);
    tm_topic_batch(0, 3, KM_ML_NONE, &plain);
    size_t rlen = plain.len - 61;
    size_t max = snappy_max_compressed_length(rlen);
    km_buf_reserve(&packed, max);
    cr_assert_eq(snappy_compress((const char *)plain.data + 61, rlen, (char *)packed.data, &max), SNAPPY_OK);
    km_buf_put(&batch, plain.data, 61);
    km_buf_put(&batch, packed.data, max);
    batch.data[22] |= KM_ML_SNAPPY;
    km_buf_patch_i32(&batch, 8, (int32_t)(batch.len - 12));
    tm_fix_crc(batch.data);
    long n;
    km_err err;
    cr_assert_eq(read_bytes_file(batch.data, batch.len, NULL, &n, &err), 1, "%s", err.msg);
    cr_assert_eq(n, 3);
    km_buf_free(&plain);
    km_buf_free(&packed);
    km_buf_free(&batch);
}

/* ---- snapshots ---------------------------------------------------------------------------- */

static void write_snapshot(const char *path, int n, km_ml_compression c)
{
    km_err err;
    km_metalog_writer_opts o = {.leader_epoch = 7, .compression = c, .timestamp = 1234};
    km_metalog_writer *w = km_metalog_writer_open_snapshot(path, 999, &o, &err);
    cr_assert(w, "%s", err.msg);
    km_feature_level_record f;
    km_feature_level_record_init(&f);
    f.name = km_cstr("metadata.version");
    f.feature_level = 21;
    km_metalog_entry e = {.desc = &km_feature_level_record_desc, .version = 0, .msg = &f, .control_type = -1};
    for (int i = 0; i < n; i++)
        cr_assert_eq(km_metalog_writer_append(w, &e, 1, NULL, &err), 0, "%s", err.msg);
    cr_assert_eq(km_metalog_writer_finish(w, &err), 0, "%s", err.msg);
}

Test(metalog_snapshot, write_then_read)
{
    char *dir = km_test_tmpdir("ml-snap");
    char name[48];
    km_ml_snapshot_name(12, 7, name);
    cr_assert_str_eq(name, "00000000000000000012-0000000007.checkpoint");
    char *path = tm_path(dir, name);
    write_snapshot(path, 2, KM_ML_ZSTD);
    char *part = tm_path(dir, "00000000000000000012-0000000007.checkpoint.part");
    cr_assert_eq(access(part, F_OK), -1, ".part must be renamed away");
    km_err err;
    km_metalog *m = km_metalog_open_file(path, NULL, &err);
    cr_assert(m, "%s", err.msg);
    km_metalog_record r;
    cr_assert_eq(km_metalog_next(m, &r, &err), 1, "%s", err.msg);
    cr_assert(r.control);
    cr_assert_eq(r.type, KM_ML_CTRL_SNAPSHOT_HEADER);
    cr_assert_eq(r.batch->source, KM_ML_FROM_SNAPSHOT);
    const km_snapshot_header_record *h = r.msg;
    cr_assert_eq(h->last_contained_log_timestamp, 999);
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(km_metalog_next(m, &r, &err), 1, "%s", err.msg);
        cr_assert_eq(r.type, KM_MDR_FEATURE_LEVEL_RECORD);
        cr_assert_eq(((const km_feature_level_record *)r.msg)->feature_level, 21);
        cr_assert_eq(r.batch->compression, KM_ML_ZSTD);
        cr_assert_eq(r.batch->leader_epoch, 7);
    }
    cr_assert_eq(km_metalog_next(m, &r, &err), 1, "%s", err.msg);
    cr_assert_eq(r.type, KM_ML_CTRL_SNAPSHOT_FOOTER);
    cr_assert_eq(r.offset, 3);
    cr_assert_eq(km_metalog_next(m, &r, &err), 0, "%s", err.msg);
    km_metalog_close(m);
    km_test_rmtree(dir);
    free(part);
    free(path);
    free(dir);
}

Test(metalog_snapshot, dir_reads_latest_snapshot_then_log_after_it)
{
    char *dir = km_test_tmpdir("ml-dirsnap");
    tm_write_topics(dir, KM_ML_NONE, 10, 1, 0); /* offsets 0..9 */
    char name[48];
    km_ml_snapshot_name(3, 1, name);
    char *old = tm_path(dir, name);
    write_snapshot(old, 1, KM_ML_NONE);
    km_ml_snapshot_name(6, 2, name);
    char *latest = tm_path(dir, name);
    write_snapshot(latest, 2, KM_ML_NONE);
    km_err err;
    km_metalog *m = km_metalog_open_dir(dir, NULL, &err);
    cr_assert(m, "%s", err.msg);
    int64_t end;
    int32_t epoch;
    cr_assert_eq(km_metalog_snapshot_id(m, &end, &epoch), 1);
    cr_assert_eq(end, 6);
    cr_assert_eq(epoch, 2);
    km_metalog_record r;
    int snap = 0;
    int64_t first_log = -1, last = -1;
    int rc;
    while ((rc = km_metalog_next(m, &r, &err)) == 1) {
        if (r.batch->source == KM_ML_FROM_SNAPSHOT) {
            cr_assert_str_eq(r.batch->file, latest);
            snap++;
        } else {
            if (first_log < 0)
                first_log = r.offset;
            last = r.offset;
        }
    }
    cr_assert_eq(rc, 0, "%s", err.msg);
    cr_assert_eq(snap, 4); /* header, 2 records, footer */
    cr_assert_eq(first_log, 6);
    cr_assert_eq(last, 9);
    km_metalog_close(m);
    km_test_rmtree(dir);
    free(old);
    free(latest);
    free(dir);
}

Test(metalog_snapshot, without_footer_is_an_error)
{
    char *dir = km_test_tmpdir("ml-nofoot");
    char *path = tm_path(dir, "00000000000000000001-0000000001.checkpoint");
    write_snapshot(path, 1, KM_ML_NONE);
    size_t len;
    uint8_t *p = tm_slurp(path, &len);
    /* drop the footer batch (the last one: 61 + record bytes) */
    size_t cut = 0;
    while (cut < len) {
        uint32_t bl = (uint32_t)p[cut + 8] << 24 | (uint32_t)p[cut + 9] << 16 | (uint32_t)p[cut + 10] << 8 | p[cut + 11];
        if (cut + 12 + bl == len)
            break;
        cut += 12 + bl;
    }
    tm_spit(path, p, cut);
    km_err err;
    km_metalog *m = km_metalog_open_file(path, NULL, &err);
    long n = 0;
    int64_t last;
    cr_assert_eq(tm_drain_checked(m, &n, &last, true, &err), -1);
    cr_assert(strstr(err.msg, "without a SnapshotFooter"), "%s", err.msg);
    cr_assert(strstr(err.msg, path), "%s", err.msg);
    km_metalog_close(m);
    km_test_rmtree(dir);
    free(p);
    free(path);
    free(dir);
}

Test(metalog_dir, gap_between_snapshot_and_log_is_an_error)
{
    char *dir = km_test_tmpdir("ml-gap");
    km_buf b;
    km_buf_init(&b);
    tm_topic_batch(50, 1, KM_ML_NONE, &b);
    char *seg = tm_path(dir, "00000000000000000050.log");
    tm_spit(seg, b.data, b.len);
    km_err err;
    cr_assert_null(km_metalog_open_dir(dir, NULL, &err));
    cr_assert(strstr(err.msg, "no snapshot covers"), "%s", err.msg);
    char *snap = tm_path(dir, "00000000000000000010-0000000001.checkpoint");
    write_snapshot(snap, 1, KM_ML_NONE);
    cr_assert_null(km_metalog_open_dir(dir, NULL, &err));
    cr_assert(strstr(err.msg, "gap"), "%s", err.msg);
    km_buf_free(&b);
    km_test_rmtree(dir);
    free(seg);
    free(snap);
    free(dir);
}

/* ---- hostile input ------------------------------------------------------------------------ */

static void expect_error(const uint8_t *p, size_t len, const char *needle, const km_metalog_opts *o)
{
    long n;
    km_err err;
    cr_assert_eq(read_bytes_file(p, len, o, &n, &err), -1, "expected an error containing '%s'", needle);
    cr_assert(strstr(err.msg, needle), "'%s' lacks '%s'", err.msg, needle);
    cr_assert(strstr(err.msg, "00000000000000000000.log: byte "), "no file/position in '%s'", err.msg);
}

Test(metalog_hostile, corrupt_crc_names_file_offset_reason)
{
    km_buf b;
    km_buf_init(&b);
    tm_topic_batch(0, 2, KM_ML_NONE, &b);
    size_t second = b.len;
    tm_topic_batch(2, 2, KM_ML_NONE, &b);
    size_t third = b.len;
    tm_topic_batch(4, 2, KM_ML_NONE, &b);
    b.data[second + 70] ^= 0x01;
    char where[64];
    snprintf(where, sizeof where, "byte %zu (offset 2): CRC32C mismatch", second);
    expect_error(b.data, b.len, where, NULL);
    b.data[second + 70] ^= 0x01;
    b.data[b.len - 1] ^= 0x01; /* the last batch: without follow mode just as fatal */
    snprintf(where, sizeof where, "byte %zu (offset 4): CRC32C mismatch", third);
    expect_error(b.data, b.len, where, NULL);
    km_buf_free(&b);
}

Test(metalog_hostile, old_magic_rejected)
{
    km_buf b;
    km_buf_init(&b);
    tm_topic_batch(0, 1, KM_ML_NONE, &b);
    b.data[16] = 1;
    expect_error(b.data, b.len, "magic 1) is not supported", NULL);
    b.data[16] = 0;
    expect_error(b.data, b.len, "magic 0) is not supported", NULL);
    b.data[16] = 7;
    expect_error(b.data, b.len, "unknown magic byte 7", NULL);
    km_buf_free(&b);
}

Test(metalog_hostile, huge_and_negative_lengths)
{
    km_buf b;
    km_buf_init(&b);
    tm_topic_batch(0, 1, KM_ML_NONE, &b);
    km_buf_patch_i32(&b, 8, 0x7fffffff);
    expect_error(b.data, b.len, "exceeds the", NULL);
    km_buf_patch_i32(&b, 8, -5);
    expect_error(b.data, b.len, "below the 49-byte minimum", NULL);
    km_buf_reset(&b);
    /* record length varint claiming far more than the batch holds */
    tm_topic_batch(0, 1, KM_ML_NONE, &b);
    b.data[61] = 0xfe; b.data[62] = 0xff; b.data[63] = 0xff; b.data[64] = 0x0f;
    tm_fix_crc(b.data);
    expect_error(b.data, b.len, "does not fit", NULL);
    km_buf_reset(&b);
    tm_topic_batch(0, 1, KM_ML_NONE, &b);
    km_buf_patch_i32(&b, 57, 5); /* says 5 records, holds 1 */
    tm_fix_crc(b.data);
    expect_error(b.data, b.len, "record 1 of 5", NULL);
    km_buf_patch_i32(&b, 57, -1);
    tm_fix_crc(b.data);
    expect_error(b.data, b.len, "negative record count", NULL);
    km_buf_free(&b);
}

Test(metalog_hostile, decompression_is_capped)
{
    km_buf b;
    km_buf_init(&b);
    tm_topic_batch(0, 2000, KM_ML_ZSTD, &b);
    km_metalog_opts o = {.max_inflated = 4096};
    expect_error(b.data, b.len, "exceed the 4096-byte cap", &o);
    km_buf_reset(&b);
    tm_topic_batch(0, 2000, KM_ML_GZIP, &b);
    expect_error(b.data, b.len, "exceed the 4096-byte cap", &o);
    km_buf_free(&b);
}

Test(metalog_hostile, garbage_compressed_section)
{
    for (int c = KM_ML_GZIP; c <= KM_ML_ZSTD; c++) {
        km_buf b;
        km_buf_init(&b);
        tm_topic_batch(0, 20, (km_ml_compression)c, &b);
        for (size_t i = 61 + 16; i < b.len; i += 3)
            b.data[i] ^= 0x5a;
        tm_fix_crc(b.data);
        long n;
        km_err err;
        cr_assert_eq(read_bytes_file(b.data, b.len, NULL, &n, &err), -1, "codec %d", c);
        km_buf_free(&b);
    }
}

Test(metalog_hostile, unknown_record_type_version_and_frame)
{
    struct { uint32_t frame, key, ver; const char *needle; } cases[] = {
        {1, 99, 0, "unknown metadata record type 99 (version 0)"},
        {1, KM_MDR_TOPIC_RECORD, 9, "TopicRecord (type 2) version 9 is not supported"},
        {0, KM_MDR_TOPIC_RECORD, 0, "frame version 0"},
        {2, KM_MDR_TOPIC_RECORD, 0, "unknown metadata record frame version 2"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        km_buf v, b;
        km_buf_init(&v);
        km_buf_init(&b);
        frame_value(&v, cases[i].frame, cases[i].key, cases[i].ver, "x");
        km_bytes val = {v.data, (int32_t)v.len};
        raw_batch(0, &val, 1, 0, &b);
        expect_error(b.data, b.len, cases[i].needle, NULL);
        expect_error(b.data, b.len, "(offset 0): record 0 of 1", NULL);
        km_buf_free(&v);
        km_buf_free(&b);
    }
}

Test(metalog_hostile, trailing_garbage_after_record_body)
{
    km_buf v, b;
    km_buf_init(&v);
    km_buf_init(&b);
    frame_value(&v, 1, KM_MDR_TOPIC_RECORD, 0, "x");
    km_buf_put_i8(&v, 0);
    km_bytes val = {v.data, (int32_t)v.len};
    raw_batch(0, &val, 1, 0, &b);
    expect_error(b.data, b.len, "TopicRecord (type 2) v0", NULL);
    km_buf_free(&v);
    km_buf_free(&b);
}

/* ---- truncation at every byte ---------------------------------------------------------- */

Test(metalog_truncation, every_cut_point)
{
    km_buf b;
    km_buf_init(&b);
    size_t ends[3];
    tm_topic_batch(0, 2, KM_ML_NONE, &b);
    ends[0] = b.len;
    tm_topic_batch(2, 3, KM_ML_LZ4, &b);
    ends[1] = b.len;
    tm_topic_batch(5, 1, KM_ML_NONE, &b);
    ends[2] = b.len;
    const long recs_at[3] = {2, 5, 6};
    char *dir = km_test_tmpdir("ml-cut");
    char *path = tm_path(dir, "00000000000000000000.log");
    for (size_t cut = 0; cut <= b.len; cut++) {
        long whole = 0;
        bool boundary = cut == 0;
        for (int k = 0; k < 3; k++) {
            if (cut >= ends[k])
                whole = recs_at[k];
            boundary |= cut == ends[k];
        }
        tm_spit(path, b.data, cut);
        for (int follow = 0; follow < 2; follow++) {
            km_metalog_opts o = {.follow = follow};
            km_err err;
            km_metalog *m = km_metalog_open_file(path, &o, &err);
            cr_assert(m, "%s", err.msg);
            long n = 0;
            int64_t last = -1;
            int rc = tm_drain_checked(m, &n, &last, true, &err);
            cr_assert_eq(n, whole, "cut %zu follow %d: %ld records", cut, follow, n);
            if (boundary || follow)
                cr_assert_eq(rc, 1, "cut %zu follow %d: %s", cut, follow, err.msg);
            else {
                cr_assert_eq(rc, -1, "cut %zu: a torn file must fail without follow", cut);
                cr_assert(strstr(err.msg, "truncated batch"), "cut %zu: %s", cut, err.msg);
            }
            km_metalog_close(m);
        }
    }
    km_test_rmtree(dir);
    free(path);
    free(dir);
    km_buf_free(&b);
}

/* ---- control records in a log ------------------------------------------------------------ */

Test(metalog_roundtrip, control_records_as_typed_events)
{
    char *dir = km_test_tmpdir("ml-ctrl");
    km_err err;
    km_metalog_writer_opts o = {.leader_epoch = 4, .timestamp = 77};
    km_metalog_writer *w = km_metalog_writer_open_dir(dir, &o, &err);
    cr_assert(w, "%s", err.msg);
    km_leader_change_message lc;
    km_leader_change_message_init(&lc);
    km_leader_change_message_voter voters[2] = {{.voter_id = 1}, {.voter_id = 2}};
    lc.leader_id = 2;
    lc.voters.count = 2;
    lc.voters.items = voters;
    lc.granting_voters.count = 1;
    lc.granting_voters.items = &voters[1];
    km_kraft_version_record kv;
    km_kraft_version_record_init(&kv);
    kv.kraft_version = 1;
    km_metalog_entry ctl[2] = {
        {.desc = km_ml_control_desc(KM_ML_CTRL_LEADER_CHANGE), .msg = &lc, .control_type = KM_ML_CTRL_LEADER_CHANGE},
        {.desc = km_ml_control_desc(KM_ML_CTRL_KRAFT_VERSION), .msg = &kv, .control_type = KM_ML_CTRL_KRAFT_VERSION},
    };
    cr_assert_eq(km_metalog_writer_append(w, ctl, 2, NULL, &err), 0, "%s", err.msg);
    km_metalog_entry mixed[2] = {ctl[0], {.desc = &km_topic_record_desc, .msg = &kv, .control_type = -1}};
    cr_assert_eq(km_metalog_writer_append(w, mixed, 2, NULL, &err), -1);
    cr_assert(strstr(err.msg, "only control or only metadata"), "%s", err.msg);
    cr_assert_eq(km_metalog_writer_finish(w, &err), 0, "%s", err.msg);

    km_metalog *m = km_metalog_open_dir(dir, NULL, &err);
    km_metalog_record r;
    cr_assert_eq(km_metalog_next(m, &r, &err), 1, "%s", err.msg);
    cr_assert(r.control && r.batch->control && r.type == KM_ML_CTRL_LEADER_CHANGE && r.version == 0);
    cr_assert_str_eq(km_ml_control_name(r.type), "LeaderChange");
    const km_leader_change_message *got = r.msg;
    cr_assert_eq(got->leader_id, 2);
    cr_assert_eq(got->voters.count, 2);
    cr_assert_eq(got->voters.items[1].voter_id, 2);
    cr_assert_eq(got->granting_voters.count, 1);
    cr_assert_eq(km_metalog_next(m, &r, &err), 1, "%s", err.msg);
    cr_assert_eq(r.type, KM_ML_CTRL_KRAFT_VERSION);
    cr_assert_eq(((const km_kraft_version_record *)r.msg)->kraft_version, 1);
    cr_assert(r.last_in_batch);
    cr_assert_eq(km_metalog_next(m, &r, &err), 0, "%s", err.msg);
    km_metalog_close(m);
    km_test_rmtree(dir);
    free(dir);
}

Test(metalog_hostile, unknown_control_type)
{
    km_buf b;
    km_buf_init(&b);
    tm_topic_batch(0, 1, KM_ML_NONE, &b);
    /* turn it into a control batch whose record key says type 42: key was null (-1 => 0x01) */
    b.data[22] |= 0x20;
    km_buf c;
    km_buf_init(&c);
    km_buf_put(&c, b.data, 61);
    km_buf body;
    km_buf_init(&body);
    km_buf_put_i8(&body, 0);
    km_buf_put_varlong(&body, 0);
    km_buf_put_varint(&body, 0);
    km_buf_put_varint(&body, 4);
    km_buf_put_i16(&body, 0);
    km_buf_put_i16(&body, 42);
    km_buf_put_varint(&body, 0);
    km_buf_put_varint(&body, 0);
    km_buf_put_varint(&c, (int32_t)body.len);
    km_buf_put(&c, body.data, body.len);
    km_buf_patch_i32(&c, 8, (int32_t)(c.len - 12));
    tm_fix_crc(c.data);
    expect_error(c.data, c.len, "unknown control record type 42", NULL);
    km_buf_free(&b);
    km_buf_free(&c);
    km_buf_free(&body);
}

Test(metalog_roundtrip, record_headers_are_skipped_and_counted)
{
    km_buf v, recs, b;
    km_buf_init(&v);
    km_buf_init(&recs);
    km_buf_init(&b);
    frame_value(&v, 1, KM_MDR_TOPIC_RECORD, 0, "topic-0");
    km_buf body;
    km_buf_init(&body);
    km_buf_put_i8(&body, 0);
    km_buf_put_varlong(&body, 0);
    km_buf_put_varint(&body, 0);
    km_buf_put_varint(&body, -1);
    km_buf_put_varint(&body, (int32_t)v.len);
    km_buf_put(&body, v.data, v.len);
    km_buf_put_varint(&body, 2);            /* two headers: ("a", "xyz"), ("b", null) */
    km_buf_put_varint(&body, 1);
    km_buf_put(&body, "a", 1);
    km_buf_put_varint(&body, 3);
    km_buf_put(&body, "xyz", 3);
    km_buf_put_varint(&body, 1);
    km_buf_put(&body, "b", 1);
    km_buf_put_varint(&body, -1);
    km_buf_put_varint(&recs, (int32_t)body.len);
    km_buf_put(&recs, body.data, body.len);
    tm_topic_batch(0, 1, KM_ML_NONE, &b);   /* reuse its header */
    b.len = 61;
    km_buf_put(&b, recs.data, recs.len);
    km_buf_patch_i32(&b, 8, (int32_t)(b.len - 12));
    tm_fix_crc(b.data);
    char *dir = km_test_tmpdir("ml-hdrs");
    char *path = tm_path(dir, "00000000000000000000.log");
    tm_spit(path, b.data, b.len);
    km_err err;
    km_metalog *m = km_metalog_open_file(path, NULL, &err);
    km_metalog_record r;
    cr_assert_eq(km_metalog_next(m, &r, &err), 1, "%s", err.msg);
    cr_assert_eq(r.header_count, 2);
    cr_assert(km_str_eq(((const km_topic_record *)r.msg)->name, "topic-0"));
    cr_assert_eq(km_metalog_next(m, &r, &err), 0, "%s", err.msg);
    km_metalog_close(m);
    /* a header key may not be null */
    b.data[b.len - 9] = 0x01; /* first header key length: 1 (zig-zag 0x02) -> -1 (0x01) */
    tm_fix_crc(b.data);
    tm_spit(path, b.data, b.len);
    m = km_metalog_open_file(path, NULL, &err);
    cr_assert_eq(km_metalog_next(m, &r, &err), -1);
    cr_assert(strstr(err.msg, "record header key: invalid length -1"), "%s", err.msg);
    km_metalog_close(m);
    km_test_rmtree(dir);
    free(path);
    free(dir);
    km_buf_free(&v);
    km_buf_free(&recs);
    km_buf_free(&b);
    km_buf_free(&body);
}

Test(metalog_roundtrip, a_batch_stays_valid_until_the_next_batch)
{
    char *dir = km_test_tmpdir("ml-life");
    tm_write_topics(dir, KM_ML_ZSTD, 3, 50, 0);
    km_err err;
    km_metalog *m = km_metalog_open_dir(dir, NULL, &err);
    const km_topic_record *kept[50];
    km_metalog_record r;
    for (int b = 0; b < 3; b++) {
        for (int i = 0; i < 50; i++) {
            cr_assert_eq(km_metalog_next(m, &r, &err), 1, "%s", err.msg);
            cr_assert_eq(r.index, i);
            cr_assert_eq(r.last_in_batch, i == 49);
            kept[i] = r.msg;
        }
        for (int i = 0; i < 50; i++) { /* every record of the batch is still intact */
            char want[32];
            snprintf(want, sizeof want, "topic-%d", b * 50 + i);
            cr_assert(km_str_eq(kept[i]->name, want), "batch %d record %d", b, i);
        }
    }
    km_metalog_close(m);
    km_test_rmtree(dir);
    free(dir);
}

Test(metalog_snapshot, log_records_covered_by_the_snapshot_are_not_decoded)
{
    char *dir = km_test_tmpdir("ml-covered");
    km_buf v, b;
    km_buf_init(&v);
    km_buf_init(&b);
    frame_value(&v, 1, 99, 0, "x"); /* a type this build does not know, at offset 0 */
    km_bytes val = {v.data, (int32_t)v.len};
    raw_batch(0, &val, 1, 0, &b);
    tm_topic_batch(1, 2, KM_ML_NONE, &b);
    char *seg = tm_path(dir, "00000000000000000000.log");
    tm_spit(seg, b.data, b.len);
    km_err err;
    km_metalog *m = km_metalog_open_dir(dir, NULL, &err);
    long n = 0;
    int64_t last;
    cr_assert_eq(tm_drain(m, &n, &last, &err), -1, "without a snapshot offset 0 must be decoded");
    cr_assert(strstr(err.msg, "unknown metadata record type 99"), "%s", err.msg);
    km_metalog_close(m);
    char *snap = tm_path(dir, "00000000000000000001-0000000001.checkpoint");
    write_snapshot(snap, 1, KM_ML_NONE);
    m = km_metalog_open_dir(dir, NULL, &err);
    n = 0;
    cr_assert_eq(tm_drain_checked(m, &n, &last, true, &err), 1, "%s", err.msg);
    cr_assert_eq(n, 3 + 2); /* snapshot: header, record, footer; log: offsets 1 and 2 */
    cr_assert_eq(last, 2);
    km_metalog_close(m);
    char *snap2 = tm_path(dir, "00000000000000000002-0000000001.checkpoint"); /* ends inside the 1..2 batch */
    write_snapshot(snap2, 1, KM_ML_NONE);
    m = km_metalog_open_dir(dir, NULL, &err);
    n = 0;
    km_metalog_record r;
    int rc;
    while ((rc = km_metalog_next(m, &r, &err)) == 1)
        if (r.batch->source == KM_ML_FROM_LOG) {
            cr_assert_eq(r.offset, 2);
            cr_assert_eq(r.index, 1);
            cr_assert(r.last_in_batch);
            n++;
        }
    cr_assert_eq(rc, 0, "%s", err.msg);
    cr_assert_eq(n, 1);
    km_metalog_close(m);
    km_test_rmtree(dir);
    free(seg);
    free(snap);
    free(snap2);
    free(dir);
    km_buf_free(&v);
    km_buf_free(&b);
}

Test(metalog_snapshot, abort_leaves_nothing_behind)
{
    char *dir = km_test_tmpdir("ml-abort");
    char *path = tm_path(dir, "00000000000000000009-0000000001.checkpoint");
    char *part = tm_path(dir, "00000000000000000009-0000000001.checkpoint.part");
    km_err err;
    km_metalog_writer *w = km_metalog_writer_open_snapshot(path, 5, NULL, &err);
    cr_assert(w, "%s", err.msg);
    cr_assert_eq(access(part, F_OK), 0, "written as .part first");
    cr_assert_eq(access(path, F_OK), -1);
    km_metalog_writer_abort(w);
    cr_assert_eq(access(part, F_OK), -1);
    cr_assert_eq(access(path, F_OK), -1);
    /* and a directory reader never mistakes a .part for a snapshot */
    w = km_metalog_writer_open_snapshot(path, 5, NULL, &err);
    km_metalog *m = km_metalog_open_dir(dir, NULL, &err);
    cr_assert(m, "%s", err.msg);
    cr_assert_eq(km_metalog_snapshot_id(m, NULL, NULL), 0);
    km_metalog_close(m);
    km_metalog_writer_abort(w);
    km_test_rmtree(dir);
    free(path);
    free(part);
    free(dir);
}
