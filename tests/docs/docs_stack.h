/* docs_stack.h - a running daemon and a running proxy, scraped as Prometheus scrapes them, for the
 * tests that check docs/metrics.md, the Grafana dashboard and the Prometheus rules against what
 * kmproxy really exports.  The daemon follows kmproxy-raftsim as a KRaft observer (quorum metrics),
 * writes a real ZooKeeper, has channels to the log's 3 migrating brokers (unreachable: their
 * per-broker metrics exist all the same) and runs the inline proxy; one ApiVersions request passes
 * each proxy so that the per-broker/API families have samples. */
#ifndef KM_DOCS_STACK_H
#define KM_DOCS_STACK_H

typedef struct docs_scrapes {
    char *daemon, *proxy; /* /metrics bodies (malloc'd) */
} docs_scrapes;

/* Starts everything, scrapes once each is complete, stops everything (asserts on failure). */
void docs_scrape_daemon_and_proxy(docs_scrapes *out);
void docs_scrapes_free(docs_scrapes *s);

#endif
