/* realkafka_util.h - running Kafka 3.9's own code from ../shared/realkafka in a test (see its README). */
#ifndef REALKAFKA_UTIL_H
#define REALKAFKA_UTIL_H

#include <stdbool.h>
#include <stddef.h>

/* The kit's root when it and Java (java, javac, /usr/share/java/zstd-jni.jar) are present; NULL otherwise, with
 * why in why[] (the test then skips saying so). */
const char *rk_kit(char *why, size_t cap);
/* Runs a shell command line (bash -c) with the kit's class path in $CP ($K: the kit, $J: our classes dir);
 * returns the exit status, output (stdout and stderr, malloc'd) in *out. */
int rk_sh(const char *kit, const char *cmdline, char **out);
/* Compiles tests/java/RequestCheck.java into the build dir once (again when the source is newer);
 * returns the classes dir (static), or NULL with why. */
const char *rk_request_check_classes(const char *kit, char *why, size_t cap);
/* The corpus's KRaft files (../shared/corpus/MANIFEST.tsv, kraft-log/ and kraft-snapshot/) whose log carries a
 * ZkMigrationState record, as `kmproxy metadata dump` shows it: their count and full paths (malloc'd, in the
 * manifest's order) in *files, or -1 when the manifest cannot be read. */
int rk_corpus_migration_files(char ***files);

#endif
