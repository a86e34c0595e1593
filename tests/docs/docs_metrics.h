/* docs_metrics.h - Prometheus exposition text read as families (name, type, help, label names, who
 * exports it), and docs/metrics.md written from them. */
#ifndef KM_DOCS_METRICS_H
#define KM_DOCS_METRICS_H

#include <stdbool.h>
#include <stddef.h>

#define DOCS_MAX_FAMILIES 300

typedef struct docs_family {
    char name[128], type[16], help[512];
    char labels[256];   /* label names seen in samples, "a, b" in first-seen order */
    unsigned sources;   /* bit i: source i exported it */
    bool sampled;       /* at least one sample seen */
} docs_family;

typedef struct docs_families {
    docs_family f[DOCS_MAX_FAMILIES];
    size_t n;
    char problems[4096]; /* samples without # HELP / # TYPE, unparsable lines ("" when none) */
} docs_families;

/* Adds the families of one scrape, as source number `source` (0..7). */
void docs_families_add(docs_families *fs, const char *exposition, unsigned source);
/* True when `series` (a name in a PromQL expression) is one exported: a family, or a histogram's
 * _bucket/_sum/_count. */
bool docs_families_has_series(const docs_families *fs, const char *series);
/* True when the family of `series` has `label` on its samples, or has no sample to tell. */
bool docs_families_has_label(const docs_families *fs, const char *series, const char *label);
/* docs/metrics.md (malloc'd), families sorted by name; source_names name the source bits. */
char *docs_metrics_markdown(const docs_families *fs, const char *const *source_names, size_t n_sources);

#endif
