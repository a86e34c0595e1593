/* tls_private.h - shared by the tls module sources only; not part of its API. */
#ifndef KM_TLS_PRIVATE_H
#define KM_TLS_PRIVATE_H

#include <openssl/ssl.h>

#include "km_tls.h"

struct km_tls_ctx {
    SSL_CTX *ssl;
    bool server;
};

/* km_fail with "prefix: <OpenSSL reasons>", draining this thread's OpenSSL
 * error queue so a later call does not report a stale reason. */
int km_tls_fail_openssl(km_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
