/* A blocking Kafka client connection with a deadline on every step: the one-shot verifier asks each broker a
 * few batched questions in turn, and a broker that stops answering must end the check, never hang it. */
#include "verify_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define V_MAX_ANSWER (64u * 1024u * 1024u)

static int wait_fd(int fd, short events, double timeout_s)
{
    struct pollfd p = { .fd = fd, .events = events };
    int rc;
    do
        rc = poll(&p, 1, (int)(timeout_s * 1000));
    while (rc < 0 && errno == EINTR);
    return rc;
}

static int connect_addr(v_conn *c, const struct addrinfo *ai, km_err *err)
{
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return km_fail(err, "%s: socket: %s", c->where, strerror(errno));
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0 && errno != EINPROGRESS) {
        km_fail(err, "%s: connect: %s", c->where, strerror(errno));
        close(fd);
        return -1;
    }
    int soerr = 0;
    socklen_t len = sizeof soerr;
    int rc = wait_fd(fd, POLLOUT, c->timeout_s);
    if (rc <= 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) < 0 || soerr) {
        km_fail(err, "%s: connect: %s", c->where, rc == 0 ? "timed out" : strerror(soerr ? soerr : errno));
        close(fd);
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    c->fd = fd;
    return 0;
}

int v_conn_open(v_conn *c, int32_t broker, const char *host, uint16_t port, double timeout_s,
                const char *client_id, km_err *err)
{
    *c = (v_conn){ .fd = -1, .corr = 1, .timeout_s = timeout_s, .client_id = client_id };
    snprintf(c->where, sizeof c->where, "broker %d (%s:%u)", broker, host, port);
    struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res = NULL;
    char service[8];
    snprintf(service, sizeof service, "%u", port);
    int gai = getaddrinfo(host, service, &hints, &res);
    if (gai)
        return km_fail(err, "%s: cannot resolve: %s", c->where, gai_strerror(gai));
    int rc = connect_addr(c, res, err);
    freeaddrinfo(res);
    return rc;
}

void v_conn_close(v_conn *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
}

/* Moves n bytes through the socket before the deadline (write: out, else in). */
static int io_all(v_conn *c, uint8_t *p, size_t n, bool write_, double deadline, km_err *err)
{
    while (n) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        double left = deadline - (ts.tv_sec + ts.tv_nsec / 1e9);
        if (left <= 0 || wait_fd(c->fd, write_ ? POLLOUT : POLLIN, left) == 0)
            return km_fail(err, "%s: no answer within %.1f s", c->where, c->timeout_s);
        ssize_t k = write_ ? send(c->fd, p, n, MSG_NOSIGNAL) : recv(c->fd, p, n, 0);
        if (k == 0)
            return km_fail(err, "%s: closed the connection", c->where);
        if (k < 0 && errno != EAGAIN && errno != EINTR)
            return km_fail(err, "%s: %s", c->where, strerror(errno));
        if (k > 0)
            p += k, n -= (size_t)k;
    }
    return 0;
}

static int exchange(v_conn *c, const km_buf *rq, uint8_t **answer, size_t *len, km_err *err)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double deadline = ts.tv_sec + ts.tv_nsec / 1e9 + c->timeout_s;
    uint8_t size[4];
    if (io_all(c, rq->data, rq->len, true, deadline, err) < 0 || io_all(c, size, 4, false, deadline, err) < 0)
        return -1;
    uint32_t n = (uint32_t)size[0] << 24 | (uint32_t)size[1] << 16 | (uint32_t)size[2] << 8 | size[3];
    if (n < 4 || n > V_MAX_ANSWER)
        return km_fail(err, "%s: answer of %u bytes (a Kafka answer is 4 to %u)", c->where, n, V_MAX_ANSWER);
    if (!(*answer = malloc(n)))
        return km_fail(err, "out of memory");
    *len = n;
    c->requests++;
    c->bytes_out += (int64_t)rq->len;
    c->bytes_in += 4 + (int64_t)n;
    if (io_all(c, *answer, n, false, deadline, err) < 0) {
        free(*answer);
        *answer = NULL;
        return -1;
    }
    return 0;
}

static int decode_answer(v_conn *c, int16_t api, int16_t version, const uint8_t *p, size_t n, km_arena *a,
                         void **rs, km_err *err)
{
    km_reader r;
    km_reader_init(&r, p, n);
    int32_t corr;
    km_err why;
    if (km_parse_response_header(&r, api, version, &corr, &why) < 0)
        return km_fail(err, "%s: malformed %s answer: %s", c->where, km_api_name(api), why.msg);
    if (corr != c->corr)
        return km_fail(err, "%s: %s answer for correlation id %d, asked %d", c->where, km_api_name(api), corr,
                       c->corr);
    const km_message_desc *md = km_find_message(KM_K_RESPONSE, api);
    if (!(*rs = km_arena_alloc(a, md->root->size)))
        return km_fail(err, "out of memory");
    if (km_decode(md, version, r.p + r.pos, km_reader_left(&r), *rs, a, NULL, &why) < 0)
        return km_fail(err, "%s: malformed %s v%d answer: %s", c->where, km_api_name(api), version, why.msg);
    return 0;
}

int v_conn_call(v_conn *c, int16_t api, int16_t version, const void *rq, km_arena *a, void **rs, km_err *err)
{
    if (c->fd < 0)
        return km_fail(err, "%s: not connected", c->where);
    km_buf b;
    km_buf_init(&b);
    c->corr++;
    uint8_t *answer = NULL;
    size_t len = 0;
    int rc = km_frame_request(api, version, c->corr, c->client_id, rq, &b, err);
    if (rc == 0)
        rc = exchange(c, &b, &answer, &len, err);
    km_buf_free(&b);
    if (rc == 0)
        rc = decode_answer(c, api, version, answer, len, a, rs, err);
    free(answer);
    if (rc < 0)
        v_conn_close(c);
    return rc;
}
