/* Exposition text to families and docs/metrics.md (see docs_metrics.h). */
#include "docs_metrics.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static docs_family *find(docs_families *fs, const char *name)
{
    for (size_t i = 0; i < fs->n; i++)
        if (!strcmp(fs->f[i].name, name))
            return &fs->f[i];
    return NULL;
}

static docs_family *find_or_add(docs_families *fs, const char *name)
{
    docs_family *f = find(fs, name);
    if (f || fs->n == DOCS_MAX_FAMILIES)
        return f;
    f = &fs->f[fs->n++];
    memset(f, 0, sizeof *f);
    snprintf(f->name, sizeof f->name, "%s", name);
    return f;
}

static void problem(docs_families *fs, const char *fmt, const char *what)
{
    size_t used = strlen(fs->problems);
    snprintf(fs->problems + used, sizeof fs->problems - used, fmt, what);
}

/* The family a sample belongs to: its own name, or a histogram's base for _bucket/_sum/_count. */
static docs_family *family_of(docs_families *fs, const char *name)
{
    docs_family *f = find(fs, name);
    if (f)
        return f;
    static const char *const SUFFIX[] = {"_bucket", "_sum", "_count"};
    for (size_t i = 0; i < 3; i++) {
        size_t n = strlen(name), k = strlen(SUFFIX[i]);
        char base[128];
        if (n <= k || n - k >= sizeof base || strcmp(name + n - k, SUFFIX[i]))
            continue;
        snprintf(base, sizeof base, "%.*s", (int)(n - k), name);
        f = find(fs, base);
        if (f && (!strcmp(f->type, "histogram") || !strcmp(f->type, "summary")))
            return f;
    }
    return NULL;
}

static void add_label(docs_family *f, const char *label)
{
    if (!strcmp(label, "le") && !strcmp(f->type, "histogram"))
        return; /* the bucket bound, part of every histogram */
    char padded[80];
    snprintf(padded, sizeof padded, ", %s,", label);
    char have[300];
    snprintf(have, sizeof have, ", %s,", f->labels);
    if (strstr(have, padded))
        return;
    size_t used = strlen(f->labels);
    snprintf(f->labels + used, sizeof f->labels - used, "%s%s", used ? ", " : "", label);
}

static void sample_line(docs_families *fs, const char *line, unsigned source)
{
    char name[128];
    size_t n = strcspn(line, "{ ");
    snprintf(name, sizeof name, "%.*s", (int)(n < sizeof name ? n : sizeof name - 1), line);
    docs_family *f = family_of(fs, name);
    if (!f || !f->type[0] || !f->help[0]) {
        problem(fs, "sample without # HELP and # TYPE: %s\n", name);
        return;
    }
    f->sources |= 1u << source;
    f->sampled = true;
    for (const char *at = line[n] == '{' ? line + n + 1 : NULL; at && *at && *at != '}';) {
        const char *eq = strchr(at, '=');
        if (!eq)
            break;
        char label[64];
        snprintf(label, sizeof label, "%.*s", (int)(eq - at < 63 ? eq - at : 63), at);
        add_label(f, label);
        const char *q = eq + 2; /* past =" */
        while (*q && *q != '"')
            q += *q == '\\' && q[1] ? 2 : 1;
        at = *q ? q + 1 : q;
        if (*at == ',')
            at++;
    }
}

static void comment_line(docs_families *fs, const char *line, unsigned source)
{
    char kind[8], name[128];
    int off = 0;
    if (sscanf(line, "# %7s %127s %n", kind, name, &off) < 2)
        return;
    docs_family *f = strcmp(kind, "HELP") && strcmp(kind, "TYPE") ? NULL : find_or_add(fs, name);
    if (!f)
        return;
    f->sources |= 1u << source;
    if (!strcmp(kind, "HELP"))
        snprintf(f->help, sizeof f->help, "%s", line + off);
    else
        snprintf(f->type, sizeof f->type, "%s", line + off);
}

void docs_families_add(docs_families *fs, const char *exposition, unsigned source)
{
    for (const char *line = exposition; line && *line;) {
        const char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        char buf[2048];
        snprintf(buf, sizeof buf, "%.*s", (int)(len < sizeof buf ? len : sizeof buf - 1), line);
        if (buf[0] == '#')
            comment_line(fs, buf, source);
        else if (buf[0])
            sample_line(fs, buf, source);
        line = nl ? nl + 1 : NULL;
    }
}

bool docs_families_has_series(const docs_families *fs, const char *series)
{
    return family_of((docs_families *)fs, series) != NULL;
}

bool docs_families_has_label(const docs_families *fs, const char *series, const char *label)
{
    const docs_family *f = family_of((docs_families *)fs, series);
    if (!f || !f->sampled)
        return f != NULL;
    if (!strcmp(label, "le") && !strcmp(f->type, "histogram"))
        return true;
    char padded[80], have[300];
    snprintf(padded, sizeof padded, ", %s,", label);
    snprintf(have, sizeof have, ", %s,", f->labels);
    return strstr(have, padded) != NULL;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(((const docs_family *)a)->name, ((const docs_family *)b)->name);
}

static void cell(FILE *out, const char *text)
{
    for (const char *p = text; *p; p++) {
        if (*p == '|')
            fputc('\\', out);
        fputc(*p, out);
    }
}

char *docs_metrics_markdown(const docs_families *fs, const char *const *source_names, size_t n_sources)
{
    docs_family *sorted = malloc(sizeof *sorted * (fs->n ? fs->n : 1));
    memcpy(sorted, fs->f, sizeof *sorted * fs->n);
    qsort(sorted, fs->n, sizeof *sorted, by_name);
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    fputs("# Metrics\n\n"
          "<!-- Generated from the /metrics of a running daemon and a running `kmproxy proxy` (tests/docs).\n"
          "     Do not edit: change the # HELP text in the code and run `make docs`. -->\n\n"
          "Prometheus text on `metrics.listen`, path `/metrics`. Every family kmproxy exports, with the\n"
          "`# TYPE` and `# HELP` it sends and the labels its samples carry (a dash: none; families whose samples\n"
          "appear only once an event happened show none sampled). Counters and histograms start at 0 when the\n"
          "process starts. The daemon exports `kmproxy_quorum_*` with `metadata.source=quorum` and\n"
          "`kmproxy_inline_*` when it runs the inline proxy (`proxy.*` keys); the per-broker families have a\n"
          "sample per migrating broker. What the main ones mean for an operator:\n"
          "[daemon.md](daemon.md#metrics), [inline-proxy.md](inline-proxy.md#metrics); alerts:\n"
          "[runbook.md](runbook.md#watch).\n\n"
          "| metric | type | labels | exported by | help |\n|---|---|---|---|---|\n",
          out);
    for (size_t i = 0; i < fs->n; i++) {
        const docs_family *f = &sorted[i];
        const char *labels = !f->sampled ? "(none sampled: see help)" : f->labels[0] ? f->labels : "-";
        fprintf(out, "| `%s` | %s | %s | ", f->name, f->type, labels);
        for (size_t s = 0, shown = 0; s < n_sources; s++)
            if (f->sources & (1u << s))
                fprintf(out, "%s%s", shown++ ? ", " : "", source_names[s]);
        fputs(" | ", out);
        cell(out, f->help);
        fputs(" |\n", out);
    }
    fprintf(out, "\n%zu metric families.\n", fs->n);
    fclose(out);
    free(sorted);
    return text;
}
