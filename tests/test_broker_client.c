/* A blocking Kafka client for the broker tests. */
#include "test_broker_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int tbc_connect(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa)) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

bool tbc_send_raw(int fd, const void *p, size_t n)
{
    const uint8_t *b = p;
    while (n) {
        ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
        if (w <= 0)
            return false;
        b += w;
        n -= (size_t)w;
    }
    return true;
}

bool tbc_send(int fd, int16_t api, int16_t version, int32_t corr, const void *body)
{
    km_buf out;
    km_buf_init(&out);
    km_err err;
    bool ok = !km_frame_request(api, version, corr, "test", body, &out, &err) && tbc_send_raw(fd, out.data, out.len);
    km_buf_free(&out);
    return ok;
}

static bool read_full(int fd, uint8_t *p, size_t n)
{
    while (n) {
        struct pollfd pfd = { .fd = fd, .events = POLLIN };
        if (poll(&pfd, 1, 2000) <= 0)
            return false;
        ssize_t r = recv(fd, p, n, 0);
        if (r <= 0)
            return false;
        p += r;
        n -= (size_t)r;
    }
    return true;
}

bool tbc_recv(int fd, uint8_t **payload, size_t *len)
{
    uint8_t hdr[4];
    if (!read_full(fd, hdr, 4))
        return false;
    uint32_t n = km_be32(hdr);
    *payload = malloc(n ? n : 1);
    *len = n;
    if (!*payload || !read_full(fd, *payload, n)) {
        free(*payload);
        *payload = NULL;
        return false;
    }
    return true;
}

bool tbc_call(int fd, int16_t api, int16_t version, const void *body, void *resp, km_arena *arena)
{
    static int32_t corr = 100;
    int32_t my = ++corr, got = -1;
    uint8_t *p = NULL;
    size_t n = 0;
    if (!tbc_send(fd, api, version, my, body) || !tbc_recv(fd, &p, &n))
        return false;
    km_reader r;
    km_reader_init(&r, p, n);
    km_err err;
    const km_message_desc *md = km_find_message(KM_K_RESPONSE, api);
    int16_t rv = version;
    bool ok = !km_parse_response_header(&r, api, rv, &got, &err) && got == my;
    /* ApiVersions answers an unsupported version with v0 */
    if (ok && km_decode(md, rv, r.p + r.pos, km_reader_left(&r), resp, arena, NULL, &err)) {
        ok = api == KM_API_API_VERSIONS &&
             !km_decode(md, 0, r.p + r.pos, km_reader_left(&r), resp, arena, NULL, &err);
    }
    free(p);
    return ok;
}

bool tbc_closed(int fd)
{
    struct pollfd pfd = { .fd = fd, .events = POLLIN };
    if (poll(&pfd, 1, 2000) <= 0)
        return false;
    char c;
    return recv(fd, &c, 1, 0) == 0;
}
