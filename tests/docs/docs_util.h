/* docs_util.h - helpers of the documentation tests: files, and comparing a committed generated file
 * with what the generator prints now. */
#ifndef KM_DOCS_UTIL_H
#define KM_DOCS_UTIL_H

/* The whole file (malloc'd, NUL-terminated); asserts it exists. */
char *docs_slurp(const char *path);
/* Asserts committed == fresh; otherwise names the first line that differs and how to regenerate. */
void docs_assert_same(const char *committed, const char *fresh, const char *what, const char *regenerate);

#endif
