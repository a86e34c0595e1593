/* kmproxy proxy: only the inline proxy, for operators who want no daemon. */
#include "km_cli.h"
#include "km_config.h"
#include "km_inline.h"
#include "km_metrics.h"

#include <ev.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

static void proxy_usage(FILE *to)
{
    fprintf(to, "usage: kmproxy proxy [--config FILE] [--set key=value ...]\n"
                "  Runs the inline Kafka proxy alone: the proxy.* keys of deploy/kmproxy.properties.example,\n"
                "  metrics.listen (its /metrics) and log.level; other keys of the file are checked but unused.\n"
                "  --set applies after the file.\n"
                "  Prints one 'listening broker=ID port=PORT' line per configured listener, then serves\n"
                "  until SIGINT or SIGTERM.  SIGHUP reloads the TLS certificates (live connections stay) and\n"
                "  names the keys changed since start, which need a restart;\n"
                "  SIGUSR1 turns the capture (proxy.capture.*) on or off.\n");
}

static void log_line(void *ud, int level, const char *msg)
{
    static const char *const NAMES[] = {"error", "warn", "info", "debug"};
    const km_config *cfg = ud;
    int max = !strcmp(cfg->log_level, "error") ? 0 : !strcmp(cfg->log_level, "warn") ? 1
              : !strcmp(cfg->log_level, "info") ? 2 : 3;
    if (level <= max)
        fprintf(stderr, "kmproxy proxy: %s: %s\n", NAMES[level < 0 ? 0 : level > 3 ? 3 : level], msg);
}

static void on_stop_signal(struct ev_loop *loop, ev_signal *w, int revents)
{
    (void)revents;
    fprintf(stderr, "kmproxy proxy: signal %d: shutting down\n", w->signum);
    ev_break(loop, EVBREAK_ALL);
}

/* What SIGHUP needs: the proxy, the configuration it runs, and the line to read it again from. */
typedef struct proxy_run {
    km_inline *p;
    const km_config *cfg;
    int argc;
    char **argv;
} proxy_run;

static void add_key_name(const char *key, void *ud)
{
    km_buf *names = ud;
    if (names->len)
        km_buf_put(names, ", ", 2);
    km_buf_put(names, key, strlen(key));
}

/* SIGHUP: the keys whose value changed since start are named; listeners, limits and routes are
 * built at start, so each needs a restart (only the TLS material is read again). */
static void report_changed_keys(const proxy_run *run)
{
    km_config fresh;
    km_err err = {{0}};
    km_buf names;
    km_buf_init(&names);
    if (km_cli_reread_config(run->argc, run->argv, &fresh, &err))
        fprintf(stderr, "kmproxy proxy: SIGHUP: the configuration does not read (%s); nothing of it changes\n",
                err.msg);
    else
        km_config_each_change(run->cfg, &fresh, add_key_name, &names);
    if (names.len)
        fprintf(stderr, "kmproxy proxy: SIGHUP: keys changed in the configuration that need a restart to take "
                "effect (the running values stay until then): %.*s\n", (int)names.len, (const char *)names.data);
    km_buf_free(&names);
    km_config_free(&fresh);
}

static void on_reload_signal(struct ev_loop *loop, ev_signal *w, int revents)
{
    (void)loop, (void)revents;
    const proxy_run *run = w->data;
    report_changed_keys(run);
    km_err err = {{0}};
    if (km_inline_reload_tls(run->p, &err))
        fprintf(stderr, "kmproxy proxy: SIGHUP: TLS reload failed, the previous certificates stay in use: %s\n",
                err.msg);
}

static void on_capture_signal(struct ev_loop *loop, ev_signal *w, int revents)
{
    (void)loop, (void)revents;
    km_inline_capture(w->data, !km_inline_capture_on(w->data));
}

static void print_listeners(const km_inline *p, const km_config *cfg)
{
    if (cfg->proxy.bootstrap_listen)
        printf("listening broker=-1 port=%u\n", km_inline_listen_port(p, -1));
    if (cfg->proxy.sni_listen)
        printf("listening sni port=%u\n", km_inline_listen_port(p, KM_INLINE_SNI));
    for (size_t i = 0; i < cfg->proxy.n_brokers; i++)
        if (cfg->proxy.brokers[i].listen)
            printf("listening broker=%d port=%u\n", cfg->proxy.brokers[i].id,
               km_inline_listen_port(p, cfg->proxy.brokers[i].id));
    fflush(stdout);
}

static void render(km_buf *out, void *ud)
{
    km_inline_render_metrics(ud, out);
    km_metrics_render_standard(out);
}

static int serve(km_config *cfg, int argc, char **argv)
{
    km_err err = {{0}};
    /* the keys' combinations first: a file that a wrong combination names is not the mistake to report */
    if (km_inline_config_validate(&cfg->proxy, &err) || km_config_check_files(cfg, &err)) { /* a FIFO must not block */
        km_cli_print_error(stderr, "proxy", err.msg);
        return 2;
    }
    struct ev_loop *loop = ev_default_loop(EVFLAG_AUTO);
    km_inline *p = km_inline_new(loop, &cfg->proxy, log_line, cfg, &err);
    km_metrics_server *metrics = NULL;
    if (p && cfg->metrics_listen && (!(metrics = km_metrics_listen(loop, cfg->metrics_listen, render, p, &err)) ||
        km_metrics_guard_post(metrics, cfg->metrics_post_enabled, cfg->metrics_post_token_file, &err))) {
        km_metrics_free(metrics);
        metrics = NULL;
        km_inline_free(p);
        p = NULL;
    }
    if (!p) {
        km_cli_print_error(stderr, "proxy", err.msg);
        return 2;
    }
    if (metrics) {
        km_metrics_on_post(metrics, km_inline_http_action, p);
        printf("metrics port=%u\n", km_metrics_port(metrics));
    }
    signal(SIGPIPE, SIG_IGN);
    ev_signal sigint, sigterm, sighup, sigusr1;
    ev_signal_init(&sigint, on_stop_signal, SIGINT);
    ev_signal_init(&sigterm, on_stop_signal, SIGTERM);
    ev_signal_init(&sighup, on_reload_signal, SIGHUP);
    proxy_run run = {p, cfg, argc, argv};
    sighup.data = &run;
    ev_signal_init(&sigusr1, on_capture_signal, SIGUSR1);
    sigusr1.data = p;
    ev_signal_start(loop, &sigusr1);
    ev_signal_start(loop, &sigint);
    ev_signal_start(loop, &sigterm);
    ev_signal_start(loop, &sighup);
    print_listeners(p, cfg);
    ev_run(loop, 0);
    km_metrics_free(metrics);
    km_inline_free(p);
    return 0;
}

int km_cli_proxy(int argc, char **argv)
{
    km_config cfg;
    int rc = km_cli_read_config(argc, argv, "proxy", proxy_usage, &cfg);
    if (rc == 0)
        rc = serve(&cfg, argc, argv);
    km_config_free(&cfg);
    return rc == 1 ? 0 : rc;
}
