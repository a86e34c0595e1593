/* Start-up checks (issue 18): what a failover would need is read now, by the standby too, so a
 * typo stops the start with exit 2 naming the key instead of the takeover hours later. */
#include "daemon_internal.h"

#include <string.h>

static void warn_line(void *ud, const char *msg)
{
    km_daemon_log(ud, KM_LOG_WARN, "start: %s", msg);
}

int km_daemon_check_start(km_daemon *d, km_err *err)
{
    if (km_config_check_files(&d->cfg, err))
        return -1;
    km_err why = {{0}};
    if (d->cfg.brokers_enabled && km_daemon_check_broker_material(d, &why))
        return km_fail(err, "brokers: %s%s", strstr(why.msg, "broker.") ? "" : "broker.tls.*: ", why.msg);
    return km_config_check_hosts(&d->cfg, warn_line, d, err);
}
