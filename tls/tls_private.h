/* tls_private.h - shared by the tls module sources only; not part of its API. */
#ifndef KM_TLS_PRIVATE_H
#define KM_TLS_PRIVATE_H

#include <openssl/ssl.h>

#include "km_tls.h"

struct km_tls_ctx {
    SSL_CTX *ssl;
    BIO_METHOD *sock;      /* socket I/O with MSG_NOSIGNAL; outlives every stream */
    bool server;
    bool no_name_check;    /* clients: chain only (km_tls_config.no_name_check) */
};

/* tls_bio.c: a socket BIO whose writes cannot raise SIGPIPE. */
BIO_METHOD *km_tls_sock_method_new(void);
BIO *km_tls_sock_bio_new(BIO_METHOD *m, int fd);

/* km_fail with "prefix: <OpenSSL reasons>", draining this thread's OpenSSL
 * error queue so a later call does not report a stale reason. */
int km_tls_fail_openssl(km_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
