/* The daemon's /metrics: image progress plus whatever the consumers report. */
#include "daemon_internal.h"

#include <stdio.h>

static void render(km_buf *out, void *ud)
{
    km_daemon *d = ud;
    km_metrics_sample(out, "kmproxy_image_offset", "gauge", "Offset of the last metadata record applied.", NULL,
                      true, (double)km_image_offset(d->img));
    km_metrics_sample(out, "kmproxy_image_batches_applied_total", "counter", "Metadata log batches applied.", NULL,
                      true, (double)d->batches_applied);
    km_metrics_sample(out, "kmproxy_image_partitions", "gauge", "Partitions in the metadata image.", NULL, true,
                      (double)km_image_partition_count(d->img));
    km_metrics_sample(out, "kmproxy_image_reading_paused", "gauge",
                      "1 while log reading is held back by the ZooKeeper write-behind bound.", NULL, true,
                      d->reading_paused);
    km_metrics_sample(out, "kmproxy_healthy", "gauge", "0 once a fatal condition stopped the daemon.", NULL, true,
                      !d->fatal[0]);
    if (d->quorum)
        km_daemon_quorum_metrics(d, out);
    km_daemon_consumers_metrics(d, out);
    km_daemon_health_metrics(d, out);
    km_daemon_ha_metrics(d, out);
    km_daemon_verify_metrics(d, out);
    if (d->proxy)
        km_inline_render_metrics(d->proxy, out);
    km_metrics_render_standard(out);
}

int km_daemon_start_metrics(km_daemon *d, km_err *err)
{
    if (!d->cfg.metrics_listen)
        return 0;
    d->metrics = km_metrics_listen(d->loop, d->cfg.metrics_listen, render, d, err);
    if (!d->metrics)
        return -1;
    if (km_metrics_guard_post(d->metrics, d->cfg.metrics_post_enabled, d->cfg.metrics_post_token_file, err)) {
        km_metrics_free(d->metrics);
        d->metrics = NULL;
        return -1;
    }
    km_daemon_log(d, KM_LOG_INFO, "metrics on http://127.0.0.1:%u/metrics", km_metrics_port(d->metrics));
    return 0;
}

void km_daemon_stop_metrics(km_daemon *d)
{
    km_metrics_free(d->metrics);
    d->metrics = NULL;
}

uint16_t km_daemon_metrics_port(const km_daemon *d) { return d->metrics ? km_metrics_port(d->metrics) : 0; }
