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
                "  until SIGINT or SIGTERM.  SIGHUP reloads the TLS certificates (live connections stay);\n"
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

static void on_reload_signal(struct ev_loop *loop, ev_signal *w, int revents)
{
    (void)loop, (void)revents;
    km_err err = {{0}};
    if (km_inline_reload_tls(w->data, &err))
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
}

static int serve(km_config *cfg)
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
    sighup.data = p;
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
        rc = serve(&cfg);
    km_config_free(&cfg);
    return rc == 1 ? 0 : rc;
}
