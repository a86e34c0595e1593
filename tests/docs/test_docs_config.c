/* docs/configuration.md: it is what `kmproxy config docs` prints now (regenerate: make docs), every key
 * the parser accepts is in it, every key in it is accepted, and README's quick-start config is valid.
 * docs/commands.md: every command's --help as the binary prints it. */
#include "km_config.h"
#include "km_testsupport.h"
#include "docs_util.h"

#include <criterion/criterion.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *config_md(void)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/docs/configuration.md", km_test_source_dir());
    return docs_slurp(path);
}

Test(docs_config, configuration_md_is_what_config_docs_prints)
{
    char *argv[] = {(char *)km_test_binary(), "config", "docs", NULL}, *out = NULL, *err = NULL;
    cr_assert_eq(km_test_run(argv, NULL, 0, &out, NULL, &err), 0, "kmproxy config docs: %s", err);
    char *committed = config_md();
    docs_assert_same(committed, out, "docs/configuration.md", "make docs");
    free(committed);
    free(out);
    free(err);
}

/* docs/commands.md: every command's and subcommand's --help as the binary prints it now, with its
 * hand-written part (exit codes, the demo) kept as it is (regenerate: make docs). */
Test(docs_config, commands_md_is_every_commands_help)
{
    char script[1024], md[1024];
    snprintf(script, sizeof script, "%s/tests/docs/commands_md.py", km_test_source_dir());
    snprintf(md, sizeof md, "%s/docs/commands.md", km_test_source_dir());
    char *argv[] = {"/usr/bin/python3", script, (char *)km_test_binary(), md, NULL}, *out = NULL, *err = NULL;
    cr_assert_eq(km_test_run(argv, NULL, 0, &out, NULL, &err), 0, "commands_md.py: %s", err);
    char *committed = docs_slurp(md);
    docs_assert_same(committed, out, "docs/commands.md", "make docs");
    free(committed);
    free(out);
    free(err);
}

/* A key is accepted when km_config_set refuses at most its value, never the key itself. */
static bool accepted(const char *key)
{
    km_config c;
    km_config_defaults(&c);
    km_err err = {{0}};
    int rc = km_config_set(&c, key, "x", "test", &err);
    km_config_free(&c);
    return rc == 0 || !strstr(err.msg, "unknown key");
}

static bool documented(const char *md, const char *key)
{
    char row[300];
    snprintf(row, sizeof row, "| `%s` |", key);
    return strstr(md, row) != NULL;
}

/* Every string literal of the parsers' sources that is a key the parser accepts: a key added with
 * strcmp beside the registry (as set_choice does) is found here even without a registry entry. */
Test(docs_config, every_key_the_parsers_accept_is_documented)
{
    static const char *const SOURCES[] = {"proxy/config/config.c", "proxy/config/config_quorum.c",
                                          "proxy/config/config_security.c", "proxy/inline/inline_config.c"};
    char *md = config_md();
    regex_t re;
    cr_assert_eq(regcomp(&re, "\"([a-z][a-z0-9]*(\\.[a-z0-9]+)+)\"", REG_EXTENDED), 0);
    int seen = 0;
    for (size_t i = 0; i < sizeof SOURCES / sizeof SOURCES[0]; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", km_test_source_dir(), SOURCES[i]);
        char *text = docs_slurp(path);
        regmatch_t m[2];
        for (const char *at = text; !regexec(&re, at, 2, m, 0); at += m[0].rm_eo) {
            char key[256];
            int n = (int)(m[1].rm_eo - m[1].rm_so);
            snprintf(key, sizeof key, "%.*s", n < 255 ? n : 255, at + m[1].rm_so);
            if (!accepted(key))
                continue;
            seen++;
            cr_expect(documented(md, key), "%s accepts '%s' but docs/configuration.md does not document it: give it "
                      "a doc string in the key registry and run `make docs`", SOURCES[i], key);
        }
        free(text);
    }
    regfree(&re);
    cr_assert_gt(seen, 60, "only %d keys found in the parsers' sources", seen);
    free(md);
}

/* The pattern rows (<id>, <listener>, <mechanism>) with sample values put in. */
static void concrete(const char *pattern, char *out, size_t size)
{
    static const char *const SUBST[][2] = {{"<id>", "1"}, {"<listener>", "controller"}, {"<mechanism>", "plain"}};
    snprintf(out, size, "%s", pattern);
    for (size_t i = 0; i < 3; i++) {
        char *at;
        while ((at = strstr(out, SUBST[i][0]))) {
            char rest[256];
            snprintf(rest, sizeof rest, "%s", at + strlen(SUBST[i][0]));
            snprintf(at, size - (size_t)(at - out), "%s%s", SUBST[i][1], rest);
        }
    }
}

Test(docs_config, every_documented_key_is_accepted)
{
    char *md = config_md();
    int rows = 0;
    for (const char *at = md; (at = strstr(at, "\n| `")); at++) {
        const char *start = at + 4, *end = strchr(start, '`');
        char key[256], real[256];
        snprintf(key, sizeof key, "%.*s", (int)(end - start), start);
        concrete(key, real, sizeof real);
        cr_expect(accepted(real), "docs/configuration.md documents '%s' but kmproxy refuses it as unknown", key);
        const char *eol = strchr(start, '\n');
        cr_expect(!eol || eol - start < 6 || strncmp(eol - 5, "| - |", 5), "%s has no meaning: give it a doc string "
                  "in the key registry and run `make docs`", key);
        rows++;
    }
    cr_assert_gt(rows, 60, "only %d key rows in docs/configuration.md", rows);
    free(md);
}

/* The documented form of a key: proxy.broker.<id>.* and listener.name.<listener>.<mechanism>.* rows. */
static void pattern_of(const char *key, char *out, size_t size)
{
    const char *tail;
    if (!strncmp(key, "proxy.broker.", 13) && (tail = strchr(key + 13, '.')))
        snprintf(out, size, "proxy.broker.<id>%s", tail);
    else if (!strncmp(key, "listener.name.", 14) && strstr(key, ".sasl.jaas.config"))
        snprintf(out, size, "listener.name.<listener>.<mechanism>.sasl.jaas.config");
    else
        snprintf(out, size, "%s", key);
}

/* deploy/kmproxy.properties.example shows keys set and commented out: each is accepted and documented. */
Test(docs_config, every_key_of_the_example_config_is_accepted_and_documented)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/deploy/kmproxy.properties.example", km_test_source_dir());
    char *example = docs_slurp(path), *md = config_md(), *save = NULL;
    regex_t re;
    cr_assert_eq(regcomp(&re, "^#?([a-z][a-z0-9-]*(\\.[a-z0-9-]+)+)=", REG_EXTENDED), 0);
    int keys = 0;
    for (char *line = strtok_r(example, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        regmatch_t m[2];
        if (regexec(&re, line, 2, m, 0))
            continue;
        line[m[1].rm_eo] = '\0';
        char pattern[256];
        pattern_of(line + m[1].rm_so, pattern, sizeof pattern);
        cr_expect(accepted(line + m[1].rm_so), "the example shows %s, which kmproxy refuses", line + m[1].rm_so);
        cr_expect(documented(md, pattern), "the example shows %s, which docs/configuration.md does not document",
                  line + m[1].rm_so);
        keys++;
    }
    cr_assert_gt(keys, 60, "only %d keys in the example", keys);
    regfree(&re);
    free(example);
    free(md);
}

/* The ```properties block of README's quick start loads and validates as `kmproxy run` would. */
Test(docs_config, readme_quick_start_config_is_valid)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/README.md", km_test_source_dir());
    char *readme = docs_slurp(path);
    const char *start = strstr(readme, "```properties\n");
    cr_assert(start, "README.md has no ```properties block");
    start += strlen("```properties\n");
    const char *end = strstr(start, "```");
    char *dir = km_test_tmpdir("docs-readme");
    snprintf(path, sizeof path, "%s/kmproxy.properties", dir);
    FILE *f = fopen(path, "w");
    cr_assert(f);
    fwrite(start, 1, (size_t)(end - start), f);
    fclose(f);
    km_config c;
    km_config_defaults(&c);
    km_err err = {{0}};
    cr_expect_eq(km_config_load(&c, path, &err), 0, "README quick start: %s", err.msg);
    cr_expect_eq(km_config_validate(&c, &err), 0, "README quick start: %s", err.msg);
    km_config_free(&c);
    km_test_rmtree(dir);
    free(dir);
    free(readme);
}
