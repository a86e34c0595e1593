/* The daemon against secured ZK-mode brokers (simulated), with a real ZooKeeper:
 *  - broker.tls.enabled / broker.security.protocol=SSL dial TLS and verify the broker's name;
 *    a wrong CA or a wrong name is refused, logged with the reason, and not one byte goes out in
 *    plaintext (the simulators count plaintext on their TLS ports);
 *  - broker.tls.endpoint.identification=false verifies the chain only;
 *  - SASL_SSL with SCRAM-SHA-512 against an authorizing broker converges;
 *  - the listener defaults to the one named after the protocol (Kafka's inter.broker.listener.name). */
#include "km_brokersim.h"
#include "km_daemon.h"
#include "km_image.h"
#include "km_metalog.h"
#include "km_testsupport.h"
#include "km_tls.h"
#include "../test_tls_certs.h"
#include "zkserver.h"

#include <criterion/criterion.h>
#include <ev.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BROKERS 3
#define JAAS "org.apache.kafka.common.security.scram.ScramLoginModule required username=\"kmproxy\" password=\"s3cret\";"

typedef struct rig {
    km_zks *zks;
    km_test_pki pki;
    char *tmp, logdir[512], hosts[128], logfile[600];
    struct ev_loop *loop;
    km_tls_ctx *server_tls;
    km_bsim *sims[BROKERS];
    km_daemon *d;
    int saved_stderr;
} rig;

static rig R;

typedef struct sim_opts {
    const char *listener;              /* the endpoint name the brokers register */
    const char *bind;                  /* the simulators' address (and registered host) */
    const char *registered_host;       /* NULL: bind */
    bool sasl;                         /* PLAIN and SCRAM-SHA-512 + authorizer */
    bool client_cert;                  /* the TLS listener demands a client certificate */
    int64_t session_lifetime_ms;       /* connections.max.reauth.ms (0: sessions never expire) */
} sim_opts;

static void start_sims(const sim_opts *o)
{
    km_err e = {{0}};
    km_tls_config sc = {.cert_file = R.pki.server_cert, .key_file = R.pki.server_key,
                        .ca_file = o->client_cert ? R.pki.ca : NULL, .require_client_cert = o->client_cert};
    cr_assert((R.server_tls = km_tls_server_ctx_new(&sc, &e)), "%s", e.msg);
    km_metalog_writer_opts wo = {.leader_epoch = 1};
    km_metalog_writer *w = km_metalog_writer_open_dir(R.logdir, &wo, &e);
    cr_assert(w, "%s", e.msg);
    for (int i = 0; i < BROKERS; i++) {
        km_bsim_config cfg;
        km_bsim_config_init(&cfg);
        cfg.broker_id = i + 1;
        cfg.kraft_broker_epoch = 1000 + i + 1;
        cfg.host = o->bind;
        cfg.tls = R.server_tls;
        if (o->sasl) {
            cfg.sasl_mechanisms = 1u << KM_SASL_SCRAM_SHA_512 | 1u << KM_SASL_PLAIN;
            cfg.sasl_users = "kmproxy:s3cret";
            cfg.authorizer = true;
            cfg.super_users = "User:kmproxy";
            cfg.sasl_session_lifetime_ms = o->session_lifetime_ms;
        }
        cr_assert((R.sims[i] = km_bsim_new(R.loop, &cfg, &e)), "%s", e.msg);
        /* a re-registration at the simulator's endpoint, as a restarted ZK broker does */
        km_register_broker_record rec;
        km_register_broker_record_init(&rec);
        const char *host = o->registered_host ? o->registered_host : o->bind;
        km_register_broker_record_broker_endpoint ep = {km_cstr(o->listener), km_cstr(host),
                                                        km_bsim_port(R.sims[i]), o->sasl ? 3 : 1, {0, 0}};
        km_register_broker_record_broker_feature ft = {km_cstr("metadata.version"), 1, KM_MV_3_9_IV0, {0, 0}};
        rec.broker_id = i + 1;
        rec.is_migrating_zk_broker = true;
        rec.fenced = false;
        rec.incarnation_id.b[0] = (uint8_t)(i + 1);
        rec.incarnation_id.b[15] = 0x42;
        rec.broker_epoch = 1000 + i + 1;
        rec.end_points.count = rec.features.count = 1;
        rec.end_points.items = &ep;
        rec.features.items = &ft;
        km_metalog_entry entry = {&km_register_broker_record_desc, km_register_broker_record_desc.valid.hi, &rec, -1};
        cr_assert_eq(km_metalog_writer_append(w, &entry, 1, NULL, &e), 0, "%s", e.msg);
    }
    cr_assert_eq(km_metalog_writer_finish(w, &e), 0, "%s", e.msg);
}

/* A file holding the simulators' password for kmproxy. */
static const char *password_file(void)
{
    static char path[700];
    snprintf(path, sizeof path, "%s/sasl-password", R.tmp);
    FILE *f = fopen(path, "w");
    cr_assert(f);
    fputs("s3cret\n", f);
    fclose(f);
    return path;
}

/* settings: "key=value" strings, NULL-terminated; the values CA and OTHER_CA name the test PKI's
 * CA files, CLIENT_CERT/CLIENT_KEY the client identity, PASSWORD_FILE a file with the right SASL
 * password.  The daemon's log goes to R.logfile. */
static void start(const sim_opts *o, const char *const *settings)
{
    char err[512];
    cr_assert_eq(km_test_pki_make(&R.pki), 0);
    R.zks = km_zks_start(1, NULL, 0, err, sizeof err);
    cr_assert(R.zks, "ZooKeeper: %s", err);
    snprintf(R.hosts, sizeof R.hosts, "%s/kafka", km_zks_hosts(R.zks, -1));
    R.tmp = km_test_tmpdir("daemon-secure");
    snprintf(R.logdir, sizeof R.logdir, "%s/__cluster_metadata-0", R.tmp);
    snprintf(R.logfile, sizeof R.logfile, "%s/kmproxy.log", R.tmp);
    km_gen_opts g = {.brokers = BROKERS, .topics = 4, .partitions = 3, .replication = 2, .zk_migration = true,
                     .seed = 11};
    km_err e = {{0}};
    cr_assert_geq(km_gen_write(R.logdir, &g, NULL, &e), 0, "%s", e.msg);
    R.loop = ev_loop_new(0);
    start_sims(o);
    km_config cfg;
    km_config_defaults(&cfg);
    cr_assert_eq(km_config_set(&cfg, "metadata.source", "dir", "test", &e), 0);
    cr_assert_eq(km_config_set(&cfg, "metadata.dir", R.logdir, "test", &e), 0);
    cr_assert_eq(km_config_set(&cfg, "zookeeper.connect", R.hosts, "test", &e), 0);
    for (const char *const *s = settings; *s; s++) {
        char key[128];
        const char *eq = strchr(*s, '=');
        snprintf(key, sizeof key, "%.*s", (int)(eq - *s), *s);
        const char *value = !strcmp(eq + 1, "CA") ? R.pki.ca : !strcmp(eq + 1, "OTHER_CA") ? R.pki.other_ca
                            : !strcmp(eq + 1, "CLIENT_CERT") ? R.pki.client_cert
                            : !strcmp(eq + 1, "CLIENT_KEY") ? R.pki.client_key
                            : !strcmp(eq + 1, "PASSWORD_FILE") ? password_file() : eq + 1;
        cr_assert_eq(km_config_set(&cfg, key, value, "test", &e), 0, "%s", e.msg);
    }
    fflush(stderr);
    R.saved_stderr = dup(2);
    int fd = open(R.logfile, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    cr_assert_geq(fd, 0);
    if (!getenv("KM_TEST_VERBOSE"))
        dup2(fd, 2);
    close(fd);
    R.d = km_daemon_new(R.loop, &cfg, &e);
    km_config_free(&cfg);
    cr_assert(R.d, "%s", e.msg);
    km_daemon_start(R.d);
}

static void fini(void)
{
    km_daemon_free(R.d);
    for (int i = 0; i < BROKERS; i++)
        km_bsim_free(R.sims[i]);
    km_tls_ctx_free(R.server_tls);
    if (R.loop)
        ev_loop_destroy(R.loop);
    if (R.saved_stderr > 0) {
        fflush(stderr);
        dup2(R.saved_stderr, 2);
        close(R.saved_stderr);
    }
    km_zks_stop(R.zks);
    if (R.tmp) {
        km_test_rmtree(R.tmp);
        free(R.tmp);
    }
    km_test_pki_free(&R.pki);
    memset(&R, 0, sizeof R);
}

static char *daemon_log(void)
{
    fflush(stderr);
    FILE *f = fopen(R.logfile, "r");
    cr_assert(f);
    char *buf = calloc(1, 1 << 22);
    size_t n = fread(buf, 1, (1 << 22) - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static int occurrences(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

static km_bsim_security_stats sim_sec(int i)
{
    km_bsim_security_stats s;
    km_bsim_get_security_stats(R.sims[i], &s);
    return s;
}

/* Every broker holds every topic of the image and nothing is pending. */
static bool converged(void)
{
    km_daemon_status st;
    km_daemon_get_status(R.d, &st);
    if (st.fatal || st.brokers_total != BROKERS || st.brokers_in_sync != BROKERS || st.broker_requests_pending)
        return false;
    for (int i = 0; i < BROKERS; i++) {
        json_t *j = km_bsim_state_json(R.sims[i]);
        size_t topics = json_array_size(json_object_get(json_object_get(j, "metadata"), "topics"));
        json_decref(j);
        if (topics != 4)
            return false;
    }
    return true;
}

static const char *rejection_needle;
static bool three_rejections_each(void)
{
    char *log = daemon_log();
    int n = occurrences(log, rejection_needle);
    free(log);
    return n >= 3 * BROKERS;
}

static bool three_refusals_each(void)
{
    for (int i = 0; i < BROKERS; i++)
        if (sim_sec(i).sasl_failed < 3)
            return false;
    return true;
}

/* Runs the loop until pred, a fatal error, or 60 s (a guard against hangs, not a timing assertion). */
static bool run_until(bool (*pred)(void))
{
    ev_tstamp end = ev_time() + 60;
    km_daemon_status st;
    do {
        ev_run(R.loop, EVRUN_ONCE);
        km_daemon_get_status(R.d, &st);
    } while (!pred() && !st.fatal && ev_time() < end);
    return pred();
}

static bool all_saw_plaintext(void)
{
    for (int i = 0; i < BROKERS; i++)
        if (!sim_sec(i).plaintext_on_tls)
            return false;
    return true;
}

static void assert_no_plaintext(void)
{
    for (int i = 0; i < BROKERS; i++)
        cr_assert_eq(sim_sec(i).plaintext_on_tls, 0, "broker %d got plaintext on its TLS port", i + 1);
}

/* Defect 1: broker.tls.enabled=true used to dial plaintext.  The listener is not set: it defaults
 * to the one named after the protocol, SSL.  The name (localhost) is verified by default. */
Test(daemon_secure, tls_enabled_dials_tls_verifies_the_name_and_converges, .fini = fini, .timeout = 180)
{
    static const sim_opts o = {.listener = "SSL", .bind = "127.0.0.1", .registered_host = "localhost"};
    start(&o, (const char *const[]){"broker.tls.enabled=true", "broker.tls.ca.file=CA", NULL});
    cr_assert(run_until(converged), "did not converge over TLS");
    assert_no_plaintext();
    char *log = daemon_log();
    cr_assert(strstr(log, "brokers: SSL to listener SSL"), "%s", log);
    free(log);
}

/* A wrong CA: refused, logged with OpenSSL's reason and the broker's address, retried, and never a
 * plaintext byte on the TLS ports. */
Test(daemon_secure, a_wrong_ca_is_refused_and_nothing_goes_out_in_plaintext, .fini = fini, .timeout = 180)
{
    static const sim_opts o = {.listener = "SSL", .bind = "127.0.0.1"};
    start(&o, (const char *const[]){"broker.security.protocol=SSL", "broker.tls.ca.file=OTHER_CA", NULL});
    rejection_needle = "server certificate rejected";
    cr_assert(run_until(three_rejections_each), "the daemon did not retry the TLS handshakes");
    char *log = daemon_log();
    cr_assert(strstr(log, "TLS handshake with 127.0.0.1: server certificate rejected: unable to get local issuer "
                          "certificate"), "%s", log);
    free(log);
    assert_no_plaintext();
    for (int i = 0; i < BROKERS; i++)
        cr_assert_eq(sim_sec(i).controller_requests, 0);
    km_daemon_status st;
    km_daemon_get_status(R.d, &st);
    cr_assert_eq(st.brokers_in_sync, 0);
    cr_assert_null(st.fatal, "a TLS refusal is retried, not fatal: %s", st.fatal);
}

/* The simulators' plaintext counter works: a PLAINTEXT daemon pointed at TLS ports is caught (what
 * broker.tls.enabled=true did before the fix). */
Test(daemon_secure, the_simulator_catches_plaintext_on_a_tls_port, .fini = fini, .timeout = 180)
{
    static const sim_opts o = {.listener = "PLAINTEXT", .bind = "127.0.0.1"};
    start(&o, (const char *const[]){NULL});
    cr_assert(run_until(all_saw_plaintext), "no simulator saw the plaintext ApiVersions");
}

/* The certificate names localhost and 127.0.0.1; a broker registered as 127.0.0.2 is refused
 * unless broker.tls.endpoint.identification=false. */
Test(daemon_secure, the_broker_name_is_verified_unless_switched_off, .fini = fini, .timeout = 180)
{
    static const sim_opts o = {.listener = "SSL", .bind = "127.0.0.2"};
    start(&o, (const char *const[]){"broker.security.protocol=SSL", "broker.tls.ca.file=CA", NULL});
    rejection_needle = "server certificate rejected: IP address mismatch";
    cr_assert(run_until(three_rejections_each), "a certificate for another address was accepted");
    assert_no_plaintext();
    fini();
    start(&o, (const char *const[]){"broker.security.protocol=SSL", "broker.tls.ca.file=CA",
                                    "broker.tls.endpoint.identification=false", NULL});
    cr_assert(run_until(converged), "did not converge without name verification");
    assert_no_plaintext();
}

/* Defect 2: SASL_SSL with SCRAM-SHA-512 to brokers whose authorizer wants a super user. */
Test(daemon_secure, sasl_ssl_scram_converges_with_an_authorizer, .fini = fini, .timeout = 180)
{
    static const sim_opts o = {.listener = "SASL_SSL", .bind = "127.0.0.1", .sasl = true};
    start(&o, (const char *const[]){"broker.security.protocol=SASL_SSL", "broker.tls.ca.file=CA",
                                    "broker.sasl.mechanism=SCRAM-SHA-512", "broker.sasl.jaas.config=" JAAS, NULL});
    cr_assert(run_until(converged), "did not converge over SASL_SSL");
    assert_no_plaintext();
    for (int i = 0; i < BROKERS; i++) {
        km_bsim_security_stats s = sim_sec(i);
        cr_assert_str_eq(s.last_principal, "User:kmproxy");
        cr_assert_eq(s.unauthorized + s.unauthenticated + s.sasl_failed, 0);
        cr_assert_geq(s.sasl_ok, 1);
    }
}

static int g_out_of_sync;              /* loop turns that saw a broker not in sync */
static bool two_renewals_each(void)
{
    km_daemon_status st;
    km_daemon_get_status(R.d, &st);
    g_out_of_sync += st.brokers_in_sync != BROKERS;
    for (int i = 0; i < BROKERS; i++)
        if (sim_sec(i).sasl_reauth < 2)
            return false;
    return true;
}

/* connections.max.reauth.ms on the brokers (1500 ms: Kafka renews at most once a second): the
 * daemon's channels renew their sessions on the same connections, idle or not, stay in sync
 * meanwhile, and no broker closes one as expired (KIP-368). */
Test(daemon_secure, sasl_sessions_are_renewed_before_the_brokers_expire_them, .fini = fini, .timeout = 180)
{
    static const sim_opts o = {.listener = "SASL_SSL", .bind = "127.0.0.1", .sasl = true,
                               .session_lifetime_ms = 1500};
    start(&o, (const char *const[]){"broker.security.protocol=SASL_SSL", "broker.tls.ca.file=CA",
                                    "broker.sasl.mechanism=SCRAM-SHA-512", "broker.sasl.jaas.config=" JAAS, NULL});
    cr_assert(run_until(converged), "did not converge");
    cr_assert(run_until(two_renewals_each), "a broker's session was not renewed twice");
    cr_assert_eq(g_out_of_sync, 0, "a renewal took a broker out of sync (%d loop turns)", g_out_of_sync);
    cr_assert(converged());
    for (int i = 0; i < BROKERS; i++) {
        km_bsim_security_stats s = sim_sec(i);
        cr_assert_eq(s.sasl_expired, 0, "broker %d closed %llu expired sessions", i + 1,
                     (unsigned long long)s.sasl_expired);
        cr_assert_eq(s.unauthorized + s.unauthenticated + s.sasl_failed, 0);
        cr_assert_eq(s.sasl_ok, 1 + s.sasl_reauth, "broker %d: one login, then renewals only", i + 1);
    }
}

/* A wrong password: every broker refuses; each refusal is logged once per broker with the
 * broker's reason, retried, and no controller request reaches any broker. */
Test(daemon_secure, a_wrong_sasl_password_is_logged_once_per_broker_and_retried, .fini = fini, .timeout = 180)
{
    static const sim_opts o = {.listener = "SASL_SSL", .bind = "127.0.0.1", .sasl = true};
    start(&o, (const char *const[]){"broker.security.protocol=SASL_SSL", "broker.tls.ca.file=CA",
                                    "broker.sasl.mechanism=SCRAM-SHA-512",
                                    "broker.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule "
                                    "required username=\"kmproxy\" password=\"wrong\";", NULL});
    cr_assert(run_until(three_refusals_each), "the daemon did not retry");
    char *log = daemon_log();
    cr_assert_eq(occurrences(log, "authentication as 'kmproxy' failed"), BROKERS, "%s", log);
    cr_assert(strstr(log, "invalid credentials with SASL mechanism SCRAM-SHA-512"), "%s", log);
    free(log);
    assert_no_plaintext();
    for (int i = 0; i < BROKERS; i++)
        cr_assert_eq(sim_sec(i).controller_requests + sim_sec(i).unauthenticated, 0);
}

/* broker.sasl.username + broker.sasl.password.file with PLAIN. */
Test(daemon_secure, sasl_plain_with_a_password_file_converges, .fini = fini, .timeout = 180)
{
    static const sim_opts o = {.listener = "SASL_SSL", .bind = "127.0.0.1", .sasl = true};
    start(&o, (const char *const[]){"broker.security.protocol=SASL_SSL", "broker.tls.ca.file=CA",
                                    "broker.sasl.mechanism=PLAIN", "broker.sasl.username=kmproxy",
                                    "broker.sasl.password.file=PASSWORD_FILE", NULL});
    cr_assert(run_until(converged), "did not converge with SASL/PLAIN");
    for (int i = 0; i < BROKERS; i++)
        cr_assert_str_eq(sim_sec(i).last_principal, "User:kmproxy");
}

/* broker.tls.cert.file/key.file: a listener with ssl.client.auth=required. */
Test(daemon_secure, a_client_certificate_is_presented_when_configured, .fini = fini, .timeout = 180)
{
    static const sim_opts o = {.listener = "SSL", .bind = "127.0.0.1", .client_cert = true};
    start(&o, (const char *const[]){"broker.security.protocol=SSL", "broker.tls.ca.file=CA", NULL});
    rejection_needle = "connection to 127.0.0.1:";
    cr_assert(run_until(three_rejections_each), "a listener that requires a client certificate let us in");
    for (int i = 0; i < BROKERS; i++)
        cr_assert_eq(sim_sec(i).controller_requests, 0);
    fini();
    start(&o, (const char *const[]){"broker.security.protocol=SSL", "broker.tls.ca.file=CA",
                                    "broker.tls.cert.file=CLIENT_CERT", "broker.tls.key.file=CLIENT_KEY", NULL});
    cr_assert(run_until(converged), "did not converge with a client certificate");
    assert_no_plaintext();
}
