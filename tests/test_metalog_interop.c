/* Compression interop with the Java libraries Kafka itself uses: snappy-java's
 * SnappyOutputStream/SnappyInputStream (xerial framing) and java.util.zip's
 * GZIP streams.  Skips when java or snappy-java is not installed. */
#include "test_metalog.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define JAVA "/usr/bin/java"
#define SNAPPY_JAR "/usr/share/java/snappy-java.jar"

static const char java_src[] =
    "import java.io.*; import java.nio.file.*; import java.util.zip.*; import org.xerial.snappy.*;\n"
    "public class Jz { public static void main(String[] a) throws Exception {\n"
    "  byte[] in = Files.readAllBytes(Paths.get(a[1])); ByteArrayOutputStream bo = new ByteArrayOutputStream();\n"
    "  switch (a[0]) {\n"
    "  case \"snappy-c\": try (OutputStream o = new SnappyOutputStream(bo)) { o.write(in); } break;\n"
    "  case \"gzip-c\": try (OutputStream o = new GZIPOutputStream(bo)) { o.write(in); } break;\n"
    "  case \"snappy-d\": try (InputStream i = new SnappyInputStream(new ByteArrayInputStream(in))) { i.transferTo(bo); } break;\n"
    "  case \"gzip-d\": try (InputStream i = new GZIPInputStream(new ByteArrayInputStream(in))) { i.transferTo(bo); } break;\n"
    "  }\n"
    "  Files.write(Paths.get(a[2]), bo.toByteArray()); } }\n";

typedef struct jenv {
    char *dir, *src, *in, *out;
} jenv;

static void jenv_open(jenv *j)
{
    if (access(JAVA, X_OK) != 0 || access(SNAPPY_JAR, R_OK) != 0)
        cr_skip_test("needs %s and %s", JAVA, SNAPPY_JAR);
    j->dir = km_test_tmpdir("ml-java");
    j->src = tm_path(j->dir, "Jz.java");
    j->in = tm_path(j->dir, "in.bin");
    j->out = tm_path(j->dir, "out.bin");
    tm_spit(j->src, java_src, strlen(java_src));
}

static void jenv_close(jenv *j)
{
    km_test_rmtree(j->dir);
    free(j->dir); free(j->src); free(j->in); free(j->out);
}

/* Runs the Java helper: mode on bytes p, result malloc'd into *out. */
static uint8_t *java(jenv *j, const char *mode, const uint8_t *p, size_t len, size_t *out_len)
{
    tm_spit(j->in, p, len);
    char *argv[] = {JAVA, "-cp", SNAPPY_JAR, j->src, (char *)mode, j->in, j->out, NULL};
    char *err_out = NULL;
    int rc = km_test_run(argv, NULL, 0, NULL, NULL, &err_out);
    cr_assert_eq(rc, 0, "java %s failed: %s", mode, err_out ? err_out : "");
    free(err_out);
    return tm_slurp(j->out, out_len);
}

static void java_compressed_batch_reads(km_ml_compression c, const char *mode)
{
    jenv j;
    jenv_open(&j);
    km_buf plain, batch;
    km_buf_init(&plain);
    km_buf_init(&batch);
    tm_topic_batch(0, 1500, KM_ML_NONE, &plain); /* ~40 KiB of records: several snappy chunks */
    size_t zlen;
    uint8_t *z = java(&j, mode, plain.data + 61, plain.len - 61, &zlen);
    km_buf_put(&batch, plain.data, 61);
    km_buf_put(&batch, z, zlen);
    batch.data[22] |= (uint8_t)c;
    km_buf_patch_i32(&batch, 8, (int32_t)(batch.len - 12));
    tm_fix_crc(batch.data);
    char *path = tm_path(j.dir, "00000000000000000000.log");
    tm_spit(path, batch.data, batch.len);
    km_err err;
    km_metalog *m = km_metalog_open_file(path, NULL, &err);
    long n = 0;
    int64_t last = -1;
    cr_assert_eq(tm_drain_checked(m, &n, &last, true, &err), 1, "%s", err.msg);
    cr_assert_eq(n, 1500);
    km_metalog_close(m);
    free(z);
    free(path);
    km_buf_free(&plain);
    km_buf_free(&batch);
    jenv_close(&j);
}

static void our_batch_reads_in_java(km_ml_compression c, const char *mode)
{
    jenv j;
    jenv_open(&j);
    km_buf plain, packed;
    km_buf_init(&plain);
    km_buf_init(&packed);
    tm_topic_batch(0, 1500, KM_ML_NONE, &plain);
    tm_topic_batch(0, 1500, c, &packed);
    size_t len;
    uint8_t *back = java(&j, mode, packed.data + 61, packed.len - 61, &len);
    cr_assert_eq(len, plain.len - 61);
    cr_assert_eq(memcmp(back, plain.data + 61, len), 0);
    free(back);
    km_buf_free(&plain);
    km_buf_free(&packed);
    jenv_close(&j);
}

Test(metalog_interop, snappy_java_output_reads, .timeout = 120) { java_compressed_batch_reads(KM_ML_SNAPPY, "snappy-c"); }
Test(metalog_interop, gzip_java_output_reads, .timeout = 120) { java_compressed_batch_reads(KM_ML_GZIP, "gzip-c"); }
Test(metalog_interop, our_snappy_reads_in_snappy_java, .timeout = 120) { our_batch_reads_in_java(KM_ML_SNAPPY, "snappy-d"); }
Test(metalog_interop, our_gzip_reads_in_java, .timeout = 120) { our_batch_reads_in_java(KM_ML_GZIP, "gzip-d"); }

/* ---- lz4 and zstd: the reference command-line tools as independent peers --------------- */

static uint8_t *tool(const char *bin, const char *flags, const uint8_t *p, size_t len, size_t *out_len)
{
    if (access(bin, X_OK) != 0)
        cr_skip_test("needs %s", bin);
    char *argv[] = {(char *)bin, (char *)flags, "-c", "-q", NULL};
    char *out = NULL, *err_out = NULL;
    int rc = km_test_run(argv, p, len, &out, out_len, &err_out);
    cr_assert_eq(rc, 0, "%s %s failed: %s", bin, flags, err_out ? err_out : "");
    free(err_out);
    return (uint8_t *)out;
}

static void tool_compressed_batch_reads(km_ml_compression c, const char *bin)
{
    km_buf plain, batch;
    km_buf_init(&plain);
    km_buf_init(&batch);
    tm_topic_batch(0, 3000, KM_ML_NONE, &plain);
    size_t zlen;
    uint8_t *z = tool(bin, "-z", plain.data + 61, plain.len - 61, &zlen);
    km_buf_put(&batch, plain.data, 61);
    km_buf_put(&batch, z, zlen);
    batch.data[22] |= (uint8_t)c;
    km_buf_patch_i32(&batch, 8, (int32_t)(batch.len - 12));
    tm_fix_crc(batch.data);
    char *dir = km_test_tmpdir("ml-tool");
    char *path = tm_path(dir, "00000000000000000000.log");
    tm_spit(path, batch.data, batch.len);
    km_err err;
    km_metalog *m = km_metalog_open_file(path, NULL, &err);
    long n = 0;
    int64_t last = -1;
    cr_assert_eq(tm_drain_checked(m, &n, &last, true, &err), 1, "%s", err.msg);
    cr_assert_eq(n, 3000);
    km_metalog_close(m);
    km_test_rmtree(dir);
    free(path);
    free(dir);
    free(z);
    km_buf_free(&plain);
    km_buf_free(&batch);
}

static void our_batch_reads_in_tool(km_ml_compression c, const char *bin)
{
    km_buf plain, packed;
    km_buf_init(&plain);
    km_buf_init(&packed);
    tm_topic_batch(0, 3000, KM_ML_NONE, &plain);
    tm_topic_batch(0, 3000, c, &packed);
    size_t len;
    uint8_t *back = tool(bin, "-d", packed.data + 61, packed.len - 61, &len);
    cr_assert_eq(len, plain.len - 61);
    cr_assert_eq(memcmp(back, plain.data + 61, len), 0);
    free(back);
    km_buf_free(&plain);
    km_buf_free(&packed);
}

Test(metalog_interop, lz4_cli_output_reads) { tool_compressed_batch_reads(KM_ML_LZ4, "/usr/bin/lz4"); }
Test(metalog_interop, zstd_cli_output_reads) { tool_compressed_batch_reads(KM_ML_ZSTD, "/usr/bin/zstd"); }
Test(metalog_interop, our_lz4_reads_in_lz4_cli) { our_batch_reads_in_tool(KM_ML_LZ4, "/usr/bin/lz4"); }
Test(metalog_interop, our_zstd_reads_in_zstd_cli) { our_batch_reads_in_tool(KM_ML_ZSTD, "/usr/bin/zstd"); }

Test(metalog_interop, our_lz4_frame_fits_kafkas_reader)
{
    /* Kafka's Lz4BlockInputStream reads exactly one frame and wants FLG version 1
     * with independent blocks; we also keep block/content checksums and content
     * size off, as Kafka's own writer does, and 64 KiB blocks (BD 0x40). */
    km_buf b;
    km_buf_init(&b);
    tm_topic_batch(0, 3000, KM_ML_LZ4, &b);
    const uint8_t *f = b.data + 61;
    cr_assert(f[0] == 0x04 && f[1] == 0x22 && f[2] == 0x4d && f[3] == 0x18, "LZ4 frame magic");
    cr_assert_eq(f[4], 0x60, "FLG %02x", f[4]);
    cr_assert_eq(f[5], 0x40, "BD %02x", f[5]);
    /* one frame: the EndMark (a zero block size) is the last four bytes */
    cr_assert_eq(memcmp(b.data + b.len - 4, "\0\0\0\0", 4), 0);
    km_buf_free(&b);
}
