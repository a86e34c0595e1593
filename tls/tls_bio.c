/* A socket BIO for TLS streams.  OpenSSL's own socket BIO writes with write(2),
 * which raises SIGPIPE on a reset connection and would kill the daemon; this
 * one uses send(MSG_NOSIGNAL) and turns that into an ordinary EPIPE error. */
#include "tls_private.h"

#include <errno.h>
#include <stdint.h>
#include <sys/socket.h>

static int bio_fd(BIO *b) { return (int)(intptr_t)BIO_get_data(b); }

static bool would_block(int e) { return e == EAGAIN || e == EWOULDBLOCK || e == EINTR; }

static int sock_write(BIO *b, const char *buf, size_t len, size_t *written)
{
    BIO_clear_retry_flags(b);
    ssize_t n = send(bio_fd(b), buf, len, MSG_NOSIGNAL);
    if (n >= 0) {
        *written = (size_t)n;
        return 1;
    }
    if (would_block(errno))
        BIO_set_retry_write(b);
    return 0;
}

static int sock_read(BIO *b, char *buf, size_t len, size_t *got)
{
    BIO_clear_retry_flags(b);
    ssize_t n = recv(bio_fd(b), buf, len, 0);
    if (n > 0) {
        *got = (size_t)n;
        return 1;
    }
    if (n == 0)
        BIO_set_flags(b, BIO_FLAGS_IN_EOF); /* lets SSL_OP_IGNORE_UNEXPECTED_EOF see a clean EOF */
    else if (would_block(errno))
        BIO_set_retry_read(b);
    return 0;
}

static long sock_ctrl(BIO *b, int cmd, long num, void *ptr)
{
    (void)num;
    switch (cmd) {
    case BIO_CTRL_FLUSH:
        return 1;
    case BIO_CTRL_EOF:
        return BIO_test_flags(b, BIO_FLAGS_IN_EOF) != 0;
    case BIO_C_GET_FD:
        if (ptr)
            *(int *)ptr = bio_fd(b);
        return bio_fd(b);
    default:
        return 0;
    }
}

BIO_METHOD *km_tls_sock_method_new(void)
{
    BIO_METHOD *m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK | BIO_TYPE_DESCRIPTOR,
                                 "kmproxy socket");
    if (m && (!BIO_meth_set_write_ex(m, sock_write) || !BIO_meth_set_read_ex(m, sock_read) ||
              !BIO_meth_set_ctrl(m, sock_ctrl))) {
        BIO_meth_free(m);
        return NULL;
    }
    return m;
}

/* The fd stays the caller's: freeing the BIO never closes it. */
BIO *km_tls_sock_bio_new(BIO_METHOD *m, int fd)
{
    BIO *b = BIO_new(m);
    if (!b)
        return NULL;
    BIO_set_data(b, (void *)(intptr_t)fd);
    BIO_set_init(b, 1);
    return b;
}
