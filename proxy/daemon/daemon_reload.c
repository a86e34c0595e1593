/* SIGHUP and the configuration: the file (and --set) read again, every changed key named. Most
 * keys shape what start-up built (sessions, listeners, channels), so a change waits for a restart;
 * log.file is applied, since the reopen that SIGHUP exists for simply opens the new path. */
#include "daemon_internal.h"

#include <stdlib.h>
#include <string.h>

void km_daemon_on_sighup_reread(km_daemon *d, km_daemon_reread_fn fn, void *ud)
{
    d->reread = fn;
    d->reread_ud = ud;
}

typedef struct changes {
    km_daemon *d;
    const km_config *fresh;
    km_buf restart;      /* "key, key" */
    bool log_file_moved;
    bool failed;
} changes;

/* A changed log.file is applied (a removed one is not: stderr may be gone under a service
 * manager); anything else joins the list that needs a restart. */
static void on_change(const char *key, void *ud)
{
    changes *ch = ud;
    km_err err = {{0}};
    if (!strcmp(key, "log.file") && ch->fresh->log_file) {
        if (km_config_set(&ch->d->cfg, key, ch->fresh->log_file, "SIGHUP", &err) == 0) {
            ch->log_file_moved = true;
            return;
        }
        ch->failed = true;
    }
    if (ch->restart.len)
        km_buf_put(&ch->restart, ", ", 2);
    km_buf_put(&ch->restart, key, strlen(key));
}

static char *describe(changes *ch, int *level)
{
    *level = ch->restart.len || ch->failed ? KM_LOG_WARN : KM_LOG_INFO;
    if (!ch->restart.len && !ch->log_file_moved)
        return strdup("SIGHUP: configuration read again: no key changed");
    km_buf_put(&ch->restart, "", 1);
    size_t cap = ch->restart.len + 512;
    char *msg = malloc(cap);
    if (!msg)
        return NULL;
    int n = 0;
    if (ch->log_file_moved)
        n = snprintf(msg, cap, "SIGHUP: log.file changed: logging to %s now%s", ch->d->cfg.log_file,
                     ch->restart.len > 1 ? "; " : "");
    if (ch->restart.len > 1)
        snprintf(msg + n, cap - (size_t)n, "%skeys changed in the configuration that need a restart to take effect "
                 "(the running values stay until then): %s", n ? "" : "SIGHUP: ", ch->restart.data);
    return msg;
}

char *km_daemon_reread_config(km_daemon *d, int *level)
{
    *level = KM_LOG_WARN;
    if (!d->reread)
        return NULL;
    km_config fresh;
    km_err err = {{0}};
    if (d->reread(&fresh, d->reread_ud, &err)) {
        km_config_free(&fresh);
        size_t cap = sizeof err.msg + 128;
        char *msg = malloc(cap);
        if (msg)
            snprintf(msg, cap, "SIGHUP: the configuration does not read (%s); nothing of it changes", err.msg);
        return msg;
    }
    changes ch = {.d = d, .fresh = &fresh};
    km_buf_init(&ch.restart);
    km_config_each_change(&d->cfg, &fresh, on_change, &ch);
    char *msg = describe(&ch, level);
    km_buf_free(&ch.restart);
    km_config_free(&fresh);
    return msg;
}
