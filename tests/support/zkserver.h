/* zkserver.h - real ZooKeeper servers for tests (Debian's zookeeper jars), and a small blocking
 * client for setting up and reading back znodes. Every server binds 127.0.0.1 on free ports and
 * dies with the test process (PR_SET_PDEATHSIG), so a crashed test leaves nothing behind. */
#ifndef KM_ZKSERVER_H
#define KM_ZKSERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <zookeeper/zookeeper.h>

#define KM_ZKS_MAX 5

typedef struct km_zks km_zks;

/* Starts `n` servers: n == 1 is a standalone server, n >= 3 a quorum on loopback. Waits until every
 * server answers `srvr` with a serving mode. `snapshot` (may be NULL) seeds every data dir with a
 * ZooKeeper snapshot file. jute.maxbuffer is `maxbuffer` bytes (0: ZooKeeper's default, 1 MiB - 1).
 * Returns NULL with a message in err. */
km_zks *km_zks_start(int n, const char *snapshot, int maxbuffer, char *err, size_t errlen);
/* A secured ensemble. sasl_users: the JAAS Server section's options (user_NAME="PASSWORD" ...): a
 * SASL DIGEST-MD5 server; require_sasl: sessions that do not authenticate with SASL are closed
 * (enforce.auth.schemes=sasl, requireClientAuthScheme=sasl). tls_*: a TLS-only server (a Netty
 * secureClientPort, no plaintext port; ssl.clientAuth=need) with the server's PEM certificate and
 * key and the CA it trusts; the harness's own probes present tls_client_cert/key. */
typedef struct km_zks_options {
    const char *snapshot;
    int maxbuffer;
    const char *sasl_users;
    const char *server_jaas;  /* instead of sasl_users: the whole JAAS file (e.g. a Kerberos Server section) */
    const char *krb5_conf;    /* java.security.krb5.conf for a Kerberos server */
    bool require_sasl;
    const char *tls_ca, *tls_cert, *tls_key, *tls_client_cert, *tls_client_key;
} km_zks_options;
km_zks *km_zks_start_opts(int n, const km_zks_options *opt, char *err, size_t errlen);
/* Kills every server (SIGKILL: tests need no graceful shutdown) and removes the data dirs. */
void km_zks_stop(km_zks *zs);
int km_zks_count(const km_zks *zs);
int km_zks_port(const km_zks *zs, int idx);
/* "127.0.0.1:p1,127.0.0.1:p2,..." for all servers (idx < 0) or "127.0.0.1:p" for one. Static per zs. */
const char *km_zks_hosts(km_zks *zs, int idx);
/* The server's mode from `srvr`: "leader", "follower", "standalone", or NULL when not serving. */
const char *km_zks_mode(const km_zks *zs, int idx, char *buf, size_t buflen);
/* Index of a serving follower, or -1. */
int km_zks_follower(const km_zks *zs);
/* Kills one server; km_zks_start_one brings it back on the same ports and data (waits for serving). */
int km_zks_kill_one(km_zks *zs, int idx);
int km_zks_start_one(km_zks *zs, int idx);
int km_zks_restart(km_zks *zs, int idx);
/* Suspends (SIGSTOP) / resumes (SIGCONT) one server: a follower that falls behind the quorum. */
int km_zks_pause(km_zks *zs, int idx, bool paused);

/* ---- blocking test client (single-threaded C client driven by poll) ---- */
typedef struct km_zkc km_zkc;

/* Connects and waits for the session; `id` (may be NULL) resumes an existing session. */
km_zkc *km_zkc_open(const char *hosts, const clientid_t *id, int timeout_ms);
void km_zkc_close(km_zkc *c);
/* An authenticated client: SASL DIGEST-MD5 (sasl_user), digest auth ("user:password") and/or TLS
 * (tls_ca; tls_cert/tls_key: the client certificate, PEM). NULL when the session did not open. */
typedef struct km_zkc_auth {
    const char *sasl_mech;    /* NULL: DIGEST-MD5 with sasl_user; "GSSAPI": the environment's Kerberos credentials */
    const char *sasl_user, *sasl_password;
    const char *digest;
    const char *tls_ca, *tls_cert, *tls_key;
    const clientid_t *session;  /* NULL: a new session; else joins that one (km_zksec_expire_session) */
} km_zkc_auth;
km_zkc *km_zkc_open_auth(const char *hosts, const km_zkc_auth *auth, int timeout_ms);
/* getAcl / create with an ACL; free acl with deallocate_ACL_vector. */
int km_zkc_get_acl(km_zkc *c, const char *path, struct ACL_vector *acl);
int km_zkc_create_acl(km_zkc *c, const char *path, const char *data, const struct ACL_vector *acl);
zhandle_t *km_zkc_handle(km_zkc *c);
/* These return the ZooKeeper rc (ZOK, ZNONODE, ...). get: *data is malloc'd and NUL-terminated. */
int km_zkc_get(km_zkc *c, const char *path, char **data, int *len, struct Stat *st);
int km_zkc_set(km_zkc *c, const char *path, const char *data, int version, struct Stat *st);
int km_zkc_create(km_zkc *c, const char *path, const char *data, int flags);
int km_zkc_delete(km_zkc *c, const char *path, int version);
/* Children sorted by name; *out is a malloc'd array of malloc'd strings. */
int km_zkc_children(km_zkc *c, const char *path, char ***out, int *count);
void km_zkc_free_strings(char **v, int count);
/* Deletes path and everything under it (ZNONODE is not an error). */
int km_zkc_delete_tree(km_zkc *c, const char *path);
/* Creates path and missing parents with empty data (existing nodes are left alone). */
int km_zkc_mkdirs(km_zkc *c, const char *path);

/* Expires the session `id` on the server side: a second client joins the same session and closes
 * it, exactly what the server does when a session times out. The owner sees EXPIRED next. */
int km_zks_expire_session(const char *hosts, const clientid_t *id);

#endif
