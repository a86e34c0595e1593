/* test_quorum_memlog.c - the metalog pieces the observer reads fetched bytes with:
 * km_metalog_open_mem (borrowed bytes, no follow) and km_ml_peek_batch (whole batch + CRC). */
#include "test_quorum_util.h"

#include <criterion/criterion.h>
#include <string.h>

static int count_records(const uint8_t *p, size_t len, km_err *err)
{
    km_metalog *m = km_metalog_open_mem("mem.log", p, len, KM_ML_FROM_LOG, NULL, err);
    cr_assert(m);
    km_metalog_record r;
    int n = 0, rc;
    while ((rc = km_metalog_next(m, &r, err)) > 0)
        n++;
    km_metalog_close(m);
    return rc < 0 ? -1 : n;
}

Test(quorum_memlog, whole_batches_read_from_borrowed_bytes)
{
    km_buf log;
    km_buf_init(&log);
    tq_config_batch(&log, 0, 1, 3, "m");
    tq_config_batch(&log, 3, 1, 2, "m");
    km_err err;
    cr_assert_eq(count_records(log.data, log.len, &err), 5, "%s", err.msg);
    km_buf_free(&log); /* the reader never freed or wrote the bytes (ASan would say) */
}

Test(quorum_memlog, a_cut_or_corrupt_batch_is_an_error_naming_the_byte)
{
    km_buf log;
    km_buf_init(&log);
    tq_config_batch(&log, 0, 1, 3, "m");
    size_t first = log.len;
    tq_config_batch(&log, 3, 1, 2, "m");
    km_err err;
    cr_assert_eq(count_records(log.data, log.len - 5, &err), -1);
    cr_assert(strstr(err.msg, "mem.log") && strstr(err.msg, "truncated batch"), "%s", err.msg);
    km_metalog_batch b;
    cr_assert_eq(km_ml_peek_batch(log.data, log.len, 0, &b, &err), 1);
    cr_assert_eq(b.base_offset, 0);
    cr_assert_eq(b.last_offset, 2);
    cr_assert_eq(b.size, first);
    cr_assert_eq(km_ml_peek_batch(log.data + first, 20, 0, &b, &err), 0, "a cut batch needs more bytes");
    log.data[first + 70] ^= 1;
    cr_assert_eq(km_ml_peek_batch(log.data + first, log.len - first, 0, &b, &err), -1);
    cr_assert(strstr(err.msg, "CRC32C mismatch"), "%s", err.msg);
    cr_assert_eq(count_records(log.data, log.len, &err), -1);
    cr_assert(strstr(err.msg, "CRC32C"), "%s", err.msg);
    km_buf_free(&log);
}

Test(quorum_memlog, a_snapshot_in_memory_takes_its_id_from_the_name)
{
    km_buf log;
    km_buf_init(&log);
    tq_config_batch(&log, 0, 1, 4, "s");
    size_t len;
    uint8_t *snap = tq_snapshot_of(log.data, log.len, &len);
    km_image *img = tq_image_of(snap, len, 40, 3, NULL, 0);
    cr_assert_eq(km_image_offset(img), 39);
    cr_assert_eq(km_image_epoch(img), 3);
    km_image_free(img);
    km_err err;
    km_metalog *m = km_metalog_open_mem("x/00000000000000000040-0000000003.checkpoint", snap, len - 10,
                                        KM_ML_FROM_SNAPSHOT, NULL, &err);
    km_metalog_record r;
    int rc;
    while ((rc = km_metalog_next(m, &r, &err)) > 0) {
    }
    cr_assert_eq(rc, -1, "a snapshot cut short was accepted");
    km_metalog_close(m);
    free(snap);
    km_buf_free(&log);
}

/* Reads what was fed; -1 on error, else the records read (the last one's control type in *last_type). */
static int drain(km_metalog *m, int16_t *last_type, km_err *err)
{
    km_metalog_record r;
    int n = 0, rc;
    while ((rc = km_metalog_next(m, &r, err)) > 0) {
        n++;
        *last_type = r.control ? r.type : -1;
    }
    return rc < 0 ? -1 : n;
}

static size_t batch_size_at(const uint8_t *p, size_t avail)
{
    km_metalog_batch b;
    km_err err;
    cr_assert_eq(km_ml_peek_batch(p, avail, 0, &b, &err), 1, "%s", err.msg);
    return b.size;
}

Test(quorum_memlog, a_snapshot_fed_batch_by_batch_reads_as_a_whole_one)
{
    km_buf log;
    km_buf_init(&log);
    tq_config_batch(&log, 0, 1, 4, "s");
    tq_config_batch(&log, 4, 1, 3, "s");
    size_t len;
    uint8_t *snap = tq_snapshot_of(log.data, log.len, &len);
    km_err err;
    km_metalog *whole = km_metalog_open_mem("00000000000000000007-0000000001.checkpoint", snap, len,
                                            KM_ML_FROM_SNAPSHOT, NULL, &err);
    int16_t type = -1;
    int want = drain(whole, &type, &err);
    km_metalog_close(whole);
    cr_assert_gt(want, 7, "%s", err.msg);
    km_metalog *m = km_metalog_open_stream("00000000000000000007-0000000001.checkpoint", KM_ML_FROM_SNAPSHOT, NULL,
                                           &err);
    cr_assert(m, "%s", err.msg);
    int got = 0, feeds = 0;
    for (size_t pos = 0; pos < len; feeds++) {
        size_t n = batch_size_at(snap + pos, len - pos);
        cr_assert_eq(km_metalog_feed(m, snap + pos, n, pos + n == len, &err), 0, "%s", err.msg);
        int r = drain(m, &type, &err);
        cr_assert_geq(r, 1, "feed %d: %s", feeds, err.msg);
        got += r;
        pos += n;
    }
    cr_assert_gt(feeds, 2);
    cr_assert_eq(got, want);
    cr_assert_eq(type, KM_ML_CTRL_SNAPSHOT_FOOTER);
    cr_assert_eq(km_metalog_feed(m, snap, 0, true, &err), -1, "fed after the last bytes");
    km_metalog_close(m);
    free(snap);
    km_buf_free(&log);
}

/* The checks of a whole file hold across feeds: header first, whole batches, footer at the end. */
Test(quorum_memlog, a_fed_snapshot_without_header_footer_or_whole_batches_is_refused)
{
    km_buf log;
    km_buf_init(&log);
    tq_config_batch(&log, 0, 1, 4, "s");
    size_t len;
    uint8_t *snap = tq_snapshot_of(log.data, log.len, &len);
    size_t first = batch_size_at(snap, len);
    const char *name = "00000000000000000004-0000000001.checkpoint";
    km_err err;
    int16_t type;
    km_metalog *m = km_metalog_open_stream(name, KM_ML_FROM_SNAPSHOT, NULL, &err);
    size_t footer_at = 0;
    while (footer_at + batch_size_at(snap + footer_at, len - footer_at) < len)
        footer_at += batch_size_at(snap + footer_at, len - footer_at);
    cr_assert_eq(km_metalog_feed(m, snap, footer_at, true, &err), 0); /* the footer's batch is missing */
    cr_assert_eq(drain(m, &type, &err), -1);
    cr_assert(strstr(err.msg, "without a SnapshotFooter"), "%s", err.msg);
    cr_assert_eq(km_metalog_feed(m, snap, len, true, &err), -1, "a failed reader takes more bytes");
    km_metalog_close(m);
    m = km_metalog_open_stream(name, KM_ML_FROM_SNAPSHOT, NULL, &err);
    cr_assert_eq(km_metalog_feed(m, snap + first, len - first, true, &err), 0);
    cr_assert_eq(drain(m, &type, &err), -1);
    cr_assert(strstr(err.msg, "SnapshotHeader"), "%s", err.msg);
    km_metalog_close(m);
    m = km_metalog_open_stream(name, KM_ML_FROM_SNAPSHOT, NULL, &err);
    cr_assert_eq(km_metalog_feed(m, snap, first + 10, false, &err), 0);
    cr_assert_eq(drain(m, &type, &err), -1, "a cut batch fed");
    cr_assert(strstr(err.msg, "truncated batch") && strstr(err.msg, name), "%s", err.msg);
    km_metalog_close(m);
    free(snap);
    km_buf_free(&log);
}

/* The observer reads a FetchSnapshot chunk where it arrived: km_decode_borrowing points the
 * records into the response instead of copying them. */
Test(quorum_memlog, a_fetch_snapshot_chunk_is_decoded_in_place)
{
    static const uint8_t chunk[] = "batches of a snapshot chunk";
    km_fetch_snapshot_response rs;
    km_fetch_snapshot_response_topic_snapshot t;
    km_fetch_snapshot_response_partition_snapshot p;
    km_fetch_snapshot_response_init(&rs);
    const km_struct_desc *tsd = NULL, *root = km_fetch_snapshot_response_desc.root;
    for (uint16_t i = 0; i < root->nfields; i++)
        if (!strcmp(root->fields[i].name, "Topics"))
            tsd = root->fields[i].sub;
    cr_assert(tsd);
    km_init(tsd, &t);
    for (uint16_t i = 0; i < tsd->nfields; i++)
        if (!strcmp(tsd->fields[i].name, "Partitions"))
            km_init(tsd->fields[i].sub, &p);
    p.unaligned_records = (km_bytes){ chunk, (int32_t)sizeof chunk };
    p.size = sizeof chunk;
    t.name = km_cstr("__cluster_metadata");
    t.partitions.count = 1;
    t.partitions.items = &p;
    rs.topics.count = 1;
    rs.topics.items = &t;
    km_buf out;
    km_buf_init(&out);
    km_err err;
    cr_assert_eq(km_encode(&km_fetch_snapshot_response_desc, 1, &rs, &out, &err), 0, "%s", err.msg);
    km_arena a;
    km_arena_init(&a, 1u << 20);
    km_fetch_snapshot_response back;
    cr_assert_eq(km_decode_borrowing(&km_fetch_snapshot_response_desc, 1, out.data, out.len, &back, &a, &err), 0,
                 "%s", err.msg);
    const km_bytes *got = &back.topics.items[0].partitions.items[0].unaligned_records;
    cr_assert_eq(got->len, (int32_t)sizeof chunk);
    cr_assert(got->ptr >= out.data && got->ptr + got->len <= out.data + out.len, "the records were copied");
    cr_assert_eq(memcmp(got->ptr, chunk, sizeof chunk), 0);
    cr_assert_eq(km_decode_borrowing(&km_fetch_snapshot_response_desc, 1, out.data, out.len - 1, &back, &a, &err),
                 -1, "a cut response was decoded");
    km_arena_free(&a);
    km_buf_free(&out);
}
