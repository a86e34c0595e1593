/* Helpers for the metalog suites: writing small logs, reading them back, file plumbing. */
#include "test_metalog.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void fill_topics(int64_t base, int per, km_topic_record *t, km_metalog_entry *e, char **names)
{
    for (int i = 0; i < per; i++) {
        cr_assert(asprintf(&names[i], "topic-%lld", (long long)(base + i)) > 0);
        km_topic_record_init(&t[i]);
        t[i].name = km_cstr(names[i]);
        memcpy(t[i].topic_id.b, &(int64_t){base + i + 1}, sizeof(int64_t));
        e[i] = (km_metalog_entry){.desc = &km_topic_record_desc, .version = 0, .msg = &t[i], .control_type = -1};
    }
}

static void free_names(char **names, int n)
{
    for (int i = 0; i < n; i++)
        free(names[i]);
}

void tm_write_topics(const char *dir, km_ml_compression c, int batches, int per, uint64_t segment_bytes)
{
    km_err err;
    km_metalog_writer_opts o = {.leader_epoch = 3, .compression = c, .segment_bytes = segment_bytes,
                                .timestamp = 1700000000000};
    km_metalog_writer *w = km_metalog_writer_open_dir(dir, &o, &err);
    cr_assert(w, "%s", err.msg);
    km_topic_record *t = calloc((size_t)per, sizeof *t);
    km_metalog_entry *e = calloc((size_t)per, sizeof *e);
    char **names = calloc((size_t)per, sizeof *names);
    for (int b = 0; b < batches; b++) {
        fill_topics(km_metalog_writer_next_offset(w), per, t, e, names);
        int64_t base = -1;
        cr_assert_eq(km_metalog_writer_append(w, e, (size_t)per, &base, &err), 0, "%s", err.msg);
        free_names(names, per);
    }
    cr_assert_eq(km_metalog_writer_finish(w, &err), 0, "%s", err.msg);
    free(t);
    free(e);
    free(names);
}

void tm_topic_batch(int64_t base_offset, int per, km_ml_compression c, km_buf *out)
{
    km_err err;
    km_topic_record *t = calloc((size_t)per, sizeof *t);
    km_metalog_entry *e = calloc((size_t)per, sizeof *e);
    char **names = calloc((size_t)per, sizeof *names);
    fill_topics(base_offset, per, t, e, names);
    km_metalog_batch_params p = {.base_offset = base_offset, .leader_epoch = 1, .timestamp = 1, .compression = c};
    cr_assert_eq(km_ml_encode_batch(&p, e, (size_t)per, out, &err), 0, "%s", err.msg);
    free_names(names, per);
    free(t);
    free(e);
    free(names);
}

int tm_drain(km_metalog *m, long *records, int64_t *last, km_err *err)
{
    return tm_drain_checked(m, records, last, false, err);
}

int tm_drain_checked(km_metalog *m, long *records, int64_t *last, bool check_names, km_err *err)
{
    km_metalog_record r;
    int rc;
    while ((rc = km_metalog_next(m, &r, err)) == 1) {
        (*records)++;
        *last = r.offset;
        if (check_names && !r.control && r.type == KM_MDR_TOPIC_RECORD && r.batch->source == KM_ML_FROM_LOG) {
            char want[64];
            snprintf(want, sizeof want, "topic-%lld", (long long)r.offset);
            const km_topic_record *t = r.msg;
            cr_assert(km_str_eq(t->name, want), "offset %lld holds %.*s", (long long)r.offset, t->name.len,
                      t->name.ptr);
        }
    }
    return rc < 0 ? -1 : 1;
}

char *tm_path(const char *dir, const char *name)
{
    char *p = NULL;
    cr_assert(asprintf(&p, "%s/%s", dir, name) > 0);
    return p;
}

uint8_t *tm_slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    cr_assert(f, "open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc((size_t)n + 1);
    cr_assert_eq(fread(p, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return p;
}

static void put(const char *path, const char *mode, const void *p, size_t len)
{
    FILE *f = fopen(path, mode);
    cr_assert(f, "open %s", path);
    cr_assert_eq(fwrite(p, 1, len, f), len);
    cr_assert_eq(fclose(f), 0);
}

void tm_spit(const char *path, const void *p, size_t len) { put(path, "wb", p, len); }
void tm_append(const char *path, const void *p, size_t len) { put(path, "ab", p, len); }

void tm_fix_crc(uint8_t *b)
{
    uint32_t len = (uint32_t)b[8] << 24 | (uint32_t)b[9] << 16 | (uint32_t)b[10] << 8 | b[11];
    uint32_t crc = km_crc32c(0, b + 21, len + 12 - 21);
    b[17] = (uint8_t)(crc >> 24); b[18] = (uint8_t)(crc >> 16); b[19] = (uint8_t)(crc >> 8); b[20] = (uint8_t)crc;
}
