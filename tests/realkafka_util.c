/* realkafka_util.c - the kit's presence, its class path, and our Java glue compiled at test time. */
#include "realkafka_util.h"

#include "km_testsupport.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static bool on_path(const char *prog)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "command -v %s >/dev/null 2>&1", prog);
    return system(cmd) == 0;
}

const char *rk_kit(char *why, size_t cap)
{
    static char kit[4096];
    snprintf(kit, sizeof kit, "%s/realkafka", km_test_shared_dir());
    char env[4200];
    snprintf(env, sizeof env, "%s/libexec/env.sh", kit);
    if (access(env, R_OK))
        snprintf(why, cap, "%s is absent: Kafka's own code is not here", kit);
    else if (!on_path("java") || !on_path("javac"))
        snprintf(why, cap, "java or javac is not installed (Debian: openjdk-17-jdk-headless)");
    else if (access("/usr/share/java/zstd-jni.jar", R_OK))
        snprintf(why, cap, "/usr/share/java/zstd-jni.jar is absent (Debian: libzstd-jni-java)");
    else
        return kit;
    return NULL;
}

int rk_sh(const char *kit, const char *cmdline, char **out)
{
    char *script = NULL;
    if (asprintf(&script, ". '%s/libexec/env.sh' && J='%s/tests/java-classes' && %s", kit, KM_TEST_BUILD_DIR,
                 cmdline) < 0)
        return -1;
    char *argv[] = {"/bin/bash", "-c", script, NULL};
    char *o = NULL, *e = NULL;
    size_t n = 0;
    int rc = km_test_run(argv, NULL, 0, &o, &n, &e);
    free(script);
    if (asprintf(out, "%s%s", o ? o : "", e ? e : "") < 0)
        *out = NULL;
    free(o);
    free(e);
    return rc;
}

static double mtime(const char *path)
{
    struct stat st;
    return stat(path, &st) ? -1 : (double)st.st_mtim.tv_sec + st.st_mtim.tv_nsec / 1e9;
}

/* javac into a private dir, then renamed into place, so two workers never see a half-written class. */
const char *rk_request_check_classes(const char *kit, char *why, size_t cap)
{
    static char dir[4096];
    char src[4096], cls[4200];
    snprintf(dir, sizeof dir, "%s/tests/java-classes", KM_TEST_BUILD_DIR);
    snprintf(src, sizeof src, "%s/tests/java/RequestCheck.java", km_test_source_dir());
    snprintf(cls, sizeof cls, "%s/RequestCheck.class", dir);
    if (mtime(cls) >= mtime(src))
        return dir;
    char tmp[4200], cmd[20000];
    snprintf(tmp, sizeof tmp, "%s.%d", dir, (int)getpid());
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s' && javac -nowarn -d '%s' -cp \"$CP\" '%s'", tmp, tmp, tmp,
             src);
    char *out = NULL;
    int rc = rk_sh(kit, cmd, &out);
    if (rc != 0) {
        snprintf(why, cap, "javac RequestCheck.java failed (%d): %s", rc, out ? out : "");
        free(out);
        return NULL;
    }
    free(out);
    km_test_rmtree(dir);
    if (rename(tmp, dir) && mtime(cls) < 0) {
        snprintf(why, cap, "could not move %s to %s", tmp, dir);
        return NULL;
    }
    km_test_rmtree(tmp);
    return dir;
}

static bool carries_migration_state(const char *file)
{
    char *argv[] = {(char *)km_test_binary(), "metadata", "dump", (char *)file, NULL}, *out = NULL;
    size_t n = 0;
    km_test_run(argv, NULL, 0, &out, &n, NULL);
    bool yes = out && strstr(out, "\"ZK_MIGRATION_STATE_RECORD\"");
    free(out);
    return yes;
}

int rk_corpus_migration_files(char ***files)
{
    char path[4096], line[8192];
    snprintf(path, sizeof path, "%s/corpus/MANIFEST.tsv", km_test_shared_dir());
    FILE *m = fopen(path, "r");
    if (!m)
        return -1;
    int n = 0, cap = 0;
    *files = NULL;
    while (fgets(line, sizeof line, m)) {
        line[strcspn(line, "\t\n")] = 0;
        if (strncmp(line, "kraft-log/", 10) && strncmp(line, "kraft-snapshot/", 15))
            continue;
        char *file = NULL;
        if (asprintf(&file, "%s/corpus/%s", km_test_shared_dir(), line) < 0)
            break;
        if (!carries_migration_state(file)) {
            free(file);
            continue;
        }
        if (n == cap) {
            cap = cap ? 2 * cap : 32;
            char **more = realloc(*files, (size_t)cap * sizeof **files);
            if (!more) {
                free(file);
                break;
            }
            *files = more;
        }
        (*files)[n++] = file;
    }
    fclose(m);
    return n;
}
