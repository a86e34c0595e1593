/* Fuzz target: any bytes as a metadata log segment, and as one record frame. */
#include "km_metalog.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static void read_all(const char *path)
{
    km_err err;
    km_metalog_opts opts = {.max_inflated = 8u << 20};
    km_metalog *log = km_metalog_open_file(path, &opts, &err);
    if (!log)
        return;
    km_metalog_record rec;
    int rc;
    while ((rc = km_metalog_next(log, &rec, &err)) == 1) {
    }
    if (rc < 0 && !err.msg[0])
        abort();  /* every failure must say why */
    km_metalog_close(log);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/kmfuzz-metalog-%d.log", (int)getpid());
    FILE *f = fopen(path, "wb");
    if (!f)
        return 0;
    fwrite(data, 1, size, f);
    fclose(f);
    read_all(path);
    unlink(path);
    km_arena arena;
    km_arena_init(&arena, 64u << 20);
    int16_t key, version;
    const km_message_desc *desc;
    void *msg;
    km_err err;
    km_ml_decode_frame(data, size, &key, &version, &desc, &msg, &arena, &err);
    km_arena_free(&arena);
    return 0;
}
