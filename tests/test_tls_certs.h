/* test_tls_certs.h - a throwaway PKI generated at test time with the OpenSSL API. */
#ifndef KM_TEST_TLS_CERTS_H
#define KM_TEST_TLS_CERTS_H

#include <limits.h>

typedef struct km_test_pki {
    char *dir;                        /* removed by km_test_pki_free */
    char ca[PATH_MAX];                /* CA that signs everything below */
    char other_ca[PATH_MAX];          /* an unrelated CA */
    char server_cert[PATH_MAX], server_key[PATH_MAX];   /* CN=localhost, SAN localhost + 127.0.0.1 */
    char client_cert[PATH_MAX], client_key[PATH_MAX];   /* CN=km-test-client */
    char expired_cert[PATH_MAX], expired_key[PATH_MAX]; /* same names as server, validity in the past */
    char future_cert[PATH_MAX], future_key[PATH_MAX];   /* validity starts tomorrow */
    char encrypted_key[PATH_MAX];     /* server key, AES-encrypted with a password */
    char other_key[PATH_MAX];         /* a key matching no certificate */
    char garbage[PATH_MAX];           /* not PEM at all */
    char missing[PATH_MAX];           /* a path that does not exist */
} km_test_pki;

/* 0 on success; -1 with a message on stderr. */
int km_test_pki_make(km_test_pki *p);
void km_test_pki_free(km_test_pki *p);

#endif
