/* Without libFuzzer: runs a fuzz target once over each file named on the command line,
 * so the targets build and run in every CI build (and reproduce a crash file by hand). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        FILE *f = fopen(argv[i], "rb");
        if (!f) {
            fprintf(stderr, "replay: cannot open %s\n", argv[i]);
            return 2;
        }
        uint8_t *buf = NULL;
        size_t len = 0, cap = 0;
        for (size_t n; (buf = cap - len < 65536 ? realloc(buf, cap = cap * 2 + 65536) : buf) &&
                       (n = fread(buf + len, 1, cap - len, f)) > 0;)
            len += n;
        fclose(f);
        if (!buf)
            return 2;
        LLVMFuzzerTestOneInput(buf, len);
        free(buf);
    }
    printf("replayed %d inputs\n", argc - 1);
    return 0;
}
