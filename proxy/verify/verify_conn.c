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

static double now_mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Waits for the socket before the deadline: 0, or -1 + err (no answer in time). */
static int wait_until(v_conn *c, short events, double deadline, km_err *err)
{
    double left = deadline - now_mono();
    if (left <= 0 || wait_fd(c->fd, events, left) == 0)
        return km_fail(err, "%s: no answer within %.1f s", c->where, c->timeout_s);
    return 0;
}

/* One non-blocking step of n bytes through TLS or the socket: *k moved, *want what to wait for before the next. */
static int step(v_conn *c, uint8_t *p, size_t n, bool write_, size_t *k, short *want, km_err *err)
{
    *k = 0;
    *want = write_ ? POLLOUT : POLLIN;
    if (c->tls) {
        km_err why = {{0}};
        km_tls_status st = write_ ? km_tls_write(c->tls, p, n, k, &why) : km_tls_read(c->tls, p, n, k, &why);
        if (st == KM_TLS_WANT_READ || st == KM_TLS_WANT_WRITE)
            *want = st == KM_TLS_WANT_READ ? POLLIN : POLLOUT;
        else if (st == KM_TLS_CLOSED)
            return km_fail(err, "%s: closed the connection", c->where);
        else if (st != KM_TLS_OK)
            return km_fail(err, "%s: TLS: %s", c->where, why.msg);
        return 0;
    }
    ssize_t r = write_ ? send(c->fd, p, n, MSG_NOSIGNAL) : recv(c->fd, p, n, 0);
    if (r == 0 && !write_)
        return km_fail(err, "%s: closed the connection", c->where);
    if (r < 0 && errno != EAGAIN && errno != EINTR)
        return km_fail(err, "%s: %s", c->where, strerror(errno));
    *k = r > 0 ? (size_t)r : 0;
    return 0;
}

/* Moves n bytes through the connection before the deadline (write: out, else in). */
static int io_all(v_conn *c, uint8_t *p, size_t n, bool write_, double deadline, km_err *err)
{
    while (n) {
        size_t k;
        short want;
        if (step(c, p, n, write_, &k, &want, err) < 0)
            return -1;
        p += k, n -= k;
        if (n && !k && wait_until(c, want, deadline, err) < 0)
            return -1;
    }
    return 0;
}

/* The TLS handshake, the broker's name checked against its certificate unless the context says otherwise. */
static int tls_handshake(v_conn *c, km_tls_ctx *ctx, const char *host, km_err *err)
{
    km_err why = {{0}};
    if (!(c->tls = km_tls_stream_new(ctx, c->fd, host, &why)))
        return km_fail(err, "%s: TLS: %s", c->where, why.msg);
    double deadline = now_mono() + c->timeout_s;
    for (;;) {
        km_tls_status st = km_tls_handshake(c->tls, &why);
        if (st == KM_TLS_OK)
            return 0;
        if (st != KM_TLS_WANT_READ && st != KM_TLS_WANT_WRITE)
            return km_fail(err, "%s: TLS handshake: %s", c->where,
                           st == KM_TLS_CLOSED ? "the broker closed the connection (not a TLS listener?)" : why.msg);
        if (wait_until(c, st == KM_TLS_WANT_READ ? POLLIN : POLLOUT, deadline, err) < 0)
            return -1;
    }
}

static int exchange(v_conn *c, const km_buf *rq, uint8_t **answer, size_t *len, km_err *err);

/* One request and its answer's body, after the response header (header v0 for ApiVersions, KIP-511). */
static int call_raw(v_conn *c, int16_t api, int16_t version, const void *rq, uint8_t **answer, km_reader *body,
                    km_err *err)
{
    km_buf b;
    km_buf_init(&b);
    c->corr++;
    size_t len = 0;
    *answer = NULL;
    int rc = km_frame_request(api, version, c->corr, c->client_id, rq, &b, err);
    if (rc == 0)
        rc = exchange(c, &b, answer, &len, err);
    km_buf_free(&b);
    if (rc < 0)
        return -1;
    km_reader_init(body, *answer, len);
    int32_t corr;
    km_err why;
    if (km_parse_response_header(body, api, api == KM_API_API_VERSIONS ? 0 : version, &corr, &why) < 0)
        return km_fail(err, "%s: malformed %s answer: %s", c->where, km_api_name(api), why.msg);
    if (corr != c->corr)
        return km_fail(err, "%s: %s answer for correlation id %d, asked %d", c->where, km_api_name(api), corr,
                       c->corr);
    return 0;
}

/* SaslHandshake and SaslAuthenticate until the broker accepts the login (km_sasl's exchange). */
static int sasl_exchange(v_conn *c, km_sasl_client *s, km_err *err)
{
    int rc = 1;
    while (rc == 1) {
        int16_t api, v;
        const void *rq;
        km_sasl_client_request(s, &api, &v, &rq);
        uint8_t *answer;
        km_reader body;
        rc = call_raw(c, api, v, rq, &answer, &body, err);
        if (rc == 0)
            rc = km_sasl_client_on_response(s, body.p + body.pos, km_reader_left(&body), err);
        free(answer);
    }
    return rc;
}

/* ApiVersions (the broker says which SASL versions it serves), then the login; its failure names the
 * mechanism, the user and the broker's reason. */
static int sasl_login(v_conn *c, const km_verify_opts *o, km_err *err)
{
    km_api_versions_request rq;
    km_api_versions_request_init(&rq);
    /* both must match ApiVersionsRequest's SOFTWARE_NAME_VERSION_PATTERN, or the broker answers INVALID_REQUEST */
    rq.client_software_name = km_cstr("kmproxy-verify");
    rq.client_software_version = km_cstr(KM_SOFTWARE_VERSION);
    km_arena a;
    km_arena_init(&a, 0);
    void *rs;
    km_err why = {{0}};
    km_sasl_client *s = NULL;
    int rc = v_conn_call(c, KM_API_API_VERSIONS, V_API_VERSIONS_V, &rq, &a, &rs, &why);
    if (rc == 0 && !(s = km_sasl_client_new(o->mechanism, o->username, o->password, &why)))
        rc = -1;
    if (rc == 0)
        rc = km_sasl_client_versions(s, rs, &why) < 0 ? -1 : sasl_exchange(c, s, &why);
    km_sasl_client_free(s);
    km_arena_free(&a);
    if (rc < 0) {
        size_t named = strlen(c->where); /* the connection's own errors name the broker already */
        const char *reason = strncmp(why.msg, c->where, named) || strncmp(why.msg + named, ": ", 2) ? why.msg
                             : why.msg + named + 2;
        km_fail(err, "%s: SASL/%s login as '%s' failed: %s", c->where, km_sasl_mech_name(o->mechanism), o->username,
                reason);
    }
    return rc;
}

int v_conn_open(v_conn *c, int32_t broker, const char *host, uint16_t port, const km_verify_opts *o, km_err *err)
{
    *c = (v_conn){ .fd = -1, .corr = 1, .timeout_s = o->timeout_s, .client_id = o->client_id };
    snprintf(c->where, sizeof c->where, "broker %d (%s:%u)", broker, host, port);
    struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res = NULL;
    char service[8];
    snprintf(service, sizeof service, "%u", port);
    int gai = getaddrinfo(host, service, &hints, &res);
    if (gai)
        return km_fail(err, "%s: cannot resolve: %s", c->where, gai_strerror(gai));
    int rc = connect_addr(c, res, err);
    freeaddrinfo(res);
    if (rc == 0 && o->tls)
        rc = tls_handshake(c, o->tls, host, err);
    if (rc == 0 && o->mechanism != KM_SASL_NONE)
        rc = sasl_login(c, o, err);
    if (rc < 0)
        v_conn_close(c);
    return rc;
}

void v_conn_close(v_conn *c)
{
    km_tls_stream_free(c->tls);
    c->tls = NULL;
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
}

static int exchange(v_conn *c, const km_buf *rq, uint8_t **answer, size_t *len, km_err *err)
{
    double deadline = now_mono() + c->timeout_s;
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

int v_conn_call(v_conn *c, int16_t api, int16_t version, const void *rq, km_arena *a, void **rs, km_err *err)
{
    if (c->fd < 0)
        return km_fail(err, "%s: not connected", c->where);
    uint8_t *answer;
    km_reader r;
    int rc = call_raw(c, api, version, rq, &answer, &r, err);
    km_err why;
    const km_message_desc *md = km_find_message(KM_K_RESPONSE, api);
    if (rc == 0 && !(*rs = km_arena_alloc(a, md->root->size)))
        rc = km_fail(err, "out of memory");
    if (rc == 0 && km_decode(md, version, r.p + r.pos, km_reader_left(&r), *rs, a, NULL, &why) < 0)
        rc = km_fail(err, "%s: malformed %s v%d answer: %s", c->where, km_api_name(api), version, why.msg);
    free(answer);
    if (rc < 0)
        v_conn_close(c);
    return rc;
}
