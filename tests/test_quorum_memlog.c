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
