/* kmproxy-brokersim: the broker simulator as a process, for the demo and for tests.
 *   kmproxy-brokersim --broker-id N [--port P] [--host H] [--broker-epoch E]
 *                     [--max-version api=ver,...] [--state-dump PATH] [--tls-cert PEM --tls-key PEM]
 *                     [--sasl-mechanisms PLAIN,SCRAM-SHA-256,...] [--sasl-users user:pw,...]
 *                     [--sasl-session-lifetime-ms MS]
 *                     [--authorizer] [--super-users User:a;User:b] [--kafka 3.4|3.9] [--zookeeper HOSTS]
 * --kafka picks the broker's rules (3.4: an IBP 3.4 broker; 3.9: 3.6.2 and later); --zookeeper makes
 * it read /config/topics/<t> when it creates a log, as a ZK broker does.
 * Prints "listening on HOST:PORT" once ready.  The state is rewritten to PATH after every
 * request and on SIGUSR1; SIGTERM/SIGINT stop it. */
#include "km_brokersim.h"
#include "km_tls.h"

#include <ev.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct app { km_bsim *sim; const char *dump; } app;

static void on_signal(struct ev_loop *loop, ev_signal *w, int revents)
{
    (void)revents;
    app *a = w->data;
    if (w->signum == SIGUSR1) {
        km_err err;
        if (a->dump && km_bsim_dump(a->sim, a->dump, &err))
            fprintf(stderr, "kmproxy-brokersim: %s\n", err.msg);
        return;
    }
    ev_break(loop, EVBREAK_ALL);
}

static int parse_args(int argc, char **argv, km_bsim_config *cfg, km_tls_config *tls, km_err *err)
{
    static const struct option opts[] = {
        { "port", required_argument, 0, 'p' },         { "host", required_argument, 0, 'H' },
        { "broker-id", required_argument, 0, 'b' },    { "broker-epoch", required_argument, 0, 'e' },
        { "max-version", required_argument, 0, 'm' },  { "state-dump", required_argument, 0, 's' },
        { "tls-cert", required_argument, 0, 'c' },     { "tls-key", required_argument, 0, 'k' },
        { "kafka", required_argument, 0, 'K' },        { "zookeeper", required_argument, 0, 'z' },
        { "sasl-mechanisms", required_argument, 0, 'M' }, { "sasl-users", required_argument, 0, 'U' },
        { "authorizer", no_argument, 0, 'A' },         { "super-users", required_argument, 0, 'S' },
        { "sasl-session-lifetime-ms", required_argument, 0, 'L' },
        { 0, 0, 0, 0 } };
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'p': cfg->port = (uint16_t)atoi(optarg); break;
        case 'H': cfg->host = optarg; break;
        case 'b': cfg->broker_id = atoi(optarg); break;
        case 'e': cfg->kraft_broker_epoch = strtoll(optarg, NULL, 10); break;
        case 'm':
            if (km_bsim_parse_max_versions(cfg, optarg, err))
                return -1;
            break;
        case 's': cfg->state_dump = optarg; break;
        case 'c': tls->cert_file = optarg; break;
        case 'k': tls->key_file = optarg; break;
        case 'z': cfg->zk_connect = optarg; break;
        case 'K':
            if (strcmp(optarg, "3.4") && strcmp(optarg, "3.9"))
                return km_fail(err, "--kafka: '%s' is neither 3.4 nor 3.9", optarg);
            cfg->kafka = strcmp(optarg, "3.4") ? KM_BSIM_KAFKA_3_6_2 : KM_BSIM_KAFKA_IBP_3_4;
            break;
        case 'M':
            if (km_bsim_parse_sasl_mechanisms(cfg, optarg, err))
                return -1;
            break;
        case 'U': cfg->sasl_users = optarg; break;
        case 'L': {
            char *end;
            cfg->sasl_session_lifetime_ms = strtoll(optarg, &end, 10);
            if (*end || end == optarg || cfg->sasl_session_lifetime_ms < 0)
                return km_fail(err, "--sasl-session-lifetime-ms: '%s' is not a number of milliseconds", optarg);
            break;
        }
        case 'A': cfg->authorizer = true; break;
        case 'S': cfg->super_users = optarg; break;
        default: return km_fail(err, "usage: kmproxy-brokersim --broker-id N [--port P] [--host H] "
                                     "[--broker-epoch E] [--max-version api=ver,...] [--state-dump PATH] "
                                     "[--tls-cert PEM --tls-key PEM] [--sasl-mechanisms M,...] "
                                     "[--sasl-users user:pw,...] [--sasl-session-lifetime-ms MS] [--authorizer] [--super-users User:a;User:b] "
                                     "[--kafka 3.4|3.9] [--zookeeper HOSTS]");
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    km_bsim_config cfg;
    km_bsim_config_init(&cfg);
    km_err err;
    km_tls_config tls = { 0 };
    if (parse_args(argc, argv, &cfg, &tls, &err)) {
        fprintf(stderr, "kmproxy-brokersim: %s\n", err.msg);
        return 2;
    }
    if (tls.cert_file && !(cfg.tls = km_tls_server_ctx_new(&tls, &err))) {
        fprintf(stderr, "kmproxy-brokersim: %s\n", err.msg);
        return 2;
    }
    struct ev_loop *loop = EV_DEFAULT;
    app a = { km_bsim_new(loop, &cfg, &err), cfg.state_dump };
    if (!a.sim) {
        fprintf(stderr, "kmproxy-brokersim: %s\n", err.msg);
        return 1;
    }
    ev_signal sigs[3];
    int nums[3] = { SIGTERM, SIGINT, SIGUSR1 };
    for (int i = 0; i < 3; i++) {
        ev_signal_init(&sigs[i], on_signal, nums[i]);
        sigs[i].data = &a;
        ev_signal_start(loop, &sigs[i]);
    }
    if (a.dump && km_bsim_dump(a.sim, a.dump, &err))
        fprintf(stderr, "kmproxy-brokersim: %s\n", err.msg);
    printf("listening on %s:%u\n", cfg.host ? cfg.host : "127.0.0.1", km_bsim_port(a.sim));
    fflush(stdout);
    ev_run(loop, 0);
    km_bsim_free(a.sim);
    km_tls_ctx_free(cfg.tls);
    return 0;
}
