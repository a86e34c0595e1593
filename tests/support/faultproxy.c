/* Fault-injecting ZooKeeper proxy for tests (see faultproxy.h). */
#include "faultproxy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define FP_MAX_CONNS 16
#define FP_MAX_FRAME (64 * 1024 * 1024)
#define OP_CREATE 1
#define OP_DELETE 2
#define OP_GETDATA 4
#define OP_SETDATA 5
#define OP_CHECK 13
#define OP_MULTI 14
#define OP_CREATE2 15
#define OP_CREATE_CONTAINER 19
#define OP_CREATE_TTL 21

typedef struct fp_buf {
    unsigned char *p;
    size_t len, cap;
} fp_buf;

typedef struct fp_conn {
    int cfd, sfd;
    bool c_hello_done, s_hello_done; /* the first frame each way is the connect handshake, headerless */
    int64_t drop_xid;                /* reply to drop, -1 none */
    fp_buf from_client, from_server;
} fp_conn;

struct km_fp {
    int lfd, upstream_port, port;
    int wake[2];
    pthread_t thread;
    pthread_mutex_t mu;
    bool stop, refuse, cut_requested, paused;
    bool armed, swallowing;
    km_fp_match match;
    km_fp_action action;
    char path[512];
    int skip, fired, multis;
    fp_conn conns[FP_MAX_CONNS];
    char hosts[64];
    km_fp_req log[KM_FP_LOG_MAX];
    int log_n, log_at;
    /* KM_FP_HOLD_REPLIES: the connection held (-1 none), its requests not answered by a held frame yet */
    int hold_conn, hold_unanswered, hold_client_port;
    int32_t hold_xids[64];           /* ... by xid (pings and watch events left out) */
    fp_buf held;
    bool release_requested;
    int release_keep;                /* frames left held by that release (the last ones) */
    pthread_cond_t released;
};

static uint32_t be32(const unsigned char *p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]; }

typedef struct rd {
    const unsigned char *p;
    size_t left;
    bool bad;
} rd;

static int32_t rd_i32(rd *r)
{
    if (r->left < 4) {
        r->bad = true;
        return 0;
    }
    int32_t v = (int32_t)be32(r->p);
    r->p += 4;
    r->left -= 4;
    return v;
}

static void rd_skip(rd *r, size_t n)
{
    if (r->left < n) {
        r->bad = true;
        return;
    }
    r->p += n;
    r->left -= n;
}

/* A jute string or buffer: int32 length (-1 null) then bytes. Returns a pointer to the bytes. */
static const unsigned char *rd_bytes(rd *r, int32_t *len)
{
    *len = rd_i32(r);
    const unsigned char *at = r->p;
    if (*len > 0)
        rd_skip(r, (size_t)*len);
    return r->bad ? NULL : at;
}

static bool path_is(const unsigned char *p, int32_t len, const char *want)
{
    return p && len == (int32_t)strlen(want) && !memcmp(p, want, (size_t)len);
}

/* Walks a multi body (after xid/type): does any setData target `path`? -1 when malformed. */
static int multi_writes_path(const unsigned char *body, size_t len, const char *path)
{
    rd r = {body, len, false};
    int found = 0;
    for (int guard = 0; guard < 100000 && !r.bad; guard++) {
        int32_t type = rd_i32(&r);
        rd_skip(&r, 1); /* done */
        rd_i32(&r);     /* err */
        if (type == -1 || r.bad)
            break;
        int32_t plen, dlen;
        const unsigned char *p = rd_bytes(&r, &plen);
        switch (type) {
        case OP_SETDATA:
            rd_bytes(&r, &dlen);
            rd_i32(&r);
            found |= path_is(p, plen, path);
            break;
        case OP_DELETE: case OP_CHECK:
            rd_i32(&r);
            break;
        case OP_CREATE: case OP_CREATE2: case OP_CREATE_CONTAINER: case OP_CREATE_TTL: {
            rd_bytes(&r, &dlen);
            int32_t nacl = rd_i32(&r);
            for (int32_t i = 0; i < nacl && !r.bad; i++) {
                rd_i32(&r);
                rd_bytes(&r, &dlen);
                rd_bytes(&r, &dlen);
            }
            rd_i32(&r);
            if (type == OP_CREATE_TTL)
                rd_skip(&r, 8);
            break;
        }
        default:
            return -1;
        }
    }
    return r.bad ? -1 : found;
}

static bool request_matches(km_fp *fp, int32_t type, const unsigned char *body, size_t len)
{
    if (fp->match == KM_FP_SETDATA_PATH) {
        rd r = {body, len, false};
        int32_t plen;
        const unsigned char *p = rd_bytes(&r, &plen);
        return type == OP_SETDATA && path_is(p, plen, fp->path);
    }
    if (fp->match == KM_FP_GETDATA_PATH) {
        rd r = {body, len, false};
        int32_t plen;
        const unsigned char *p = rd_bytes(&r, &plen);
        return type == OP_GETDATA && path_is(p, plen, fp->path);
    }
    if (type != OP_MULTI)
        return false;
    int w = multi_writes_path(body, len, fp->path);
    switch (fp->match) {
    case KM_FP_MULTI_CHECKPOINT: return w == 1;
    case KM_FP_MULTI_DATA: return w == 0;
    default: return true;
    }
}

static int send_all(int fd, const unsigned char *p, size_t len)
{
    while (len) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static void conn_close(fp_conn *c)
{
    if (c->cfd >= 0) close(c->cfd);
    if (c->sfd >= 0) close(c->sfd);
    free(c->from_client.p);
    free(c->from_server.p);
    memset(c, 0, sizeof *c);
    c->cfd = c->sfd = -1;
    c->drop_xid = -1;
}

static void log_request(km_fp *fp, int32_t type, const unsigned char *body, size_t len)
{
    km_fp_req *r = &fp->log[fp->log_at];
    fp->log_at = (fp->log_at + 1) % KM_FP_LOG_MAX;
    if (fp->log_n < KM_FP_LOG_MAX)
        fp->log_n++;
    r->type = type;
    r->path[0] = '\0';
    rd rr = {body, len, false};
    int32_t plen;
    const unsigned char *p = type == OP_MULTI ? NULL : rd_bytes(&rr, &plen);
    if (p && plen > 0) {
        size_t n = (size_t)plen < sizeof r->path - 1 ? (size_t)plen : sizeof r->path - 1;
        memcpy(r->path, p, n);
        r->path[n] = '\0';
    }
}

int km_fp_log(km_fp *fp, km_fp_req *out, int max)
{
    pthread_mutex_lock(&fp->mu);
    int n = fp->log_n < max ? fp->log_n : max;
    int start = (fp->log_at - fp->log_n + KM_FP_LOG_MAX) % KM_FP_LOG_MAX;
    for (int i = 0; i < n; i++)
        out[i] = fp->log[(start + i) % KM_FP_LOG_MAX];
    pthread_mutex_unlock(&fp->mu);
    return n;
}

static void start_hold(km_fp *fp, fp_conn *c, const unsigned char *frame)
{
    struct sockaddr_in a;
    socklen_t alen = sizeof a;
    fp->hold_conn = (int)(c - fp->conns);
    fp->hold_unanswered = 1;
    fp->hold_xids[0] = (int32_t)be32(frame);
    fp->hold_client_port = getpeername(c->cfd, (struct sockaddr *)&a, &alen) ? -1 : ntohs(a.sin_port);
    fp->held.len = 0;
}

/* Decides one complete client frame: 0 forward, 1 cut the connection without forwarding, 2 drop
 * the frame and carry on (KM_FP_SWALLOW). */
static int on_client_frame(km_fp *fp, fp_conn *c, const unsigned char *frame, size_t len)
{
    if (!c->c_hello_done) {
        c->c_hello_done = true;
        return 0;
    }
    if (len < 8)
        return 0;
    int32_t xid = (int32_t)be32(frame), type = (int32_t)be32(frame + 4);
    pthread_mutex_lock(&fp->mu);
    int verdict = 0;
    if (type != 11) /* not a ping */
        log_request(fp, type, frame + 8, len - 8);
    if (type == OP_MULTI)
        fp->multis++;
    if (fp->hold_conn == (int)(c - fp->conns) && xid >= 0 && fp->hold_unanswered < 64)
        fp->hold_xids[fp->hold_unanswered++] = xid;
    if (fp->armed && request_matches(fp, type, frame + 8, len - 8) && (fp->swallowing || fp->skip-- == 0)) {
        fp->armed = fp->action == KM_FP_SWALLOW; /* the others fire once */
        if (fp->action == KM_FP_SWALLOW) {
            fp->swallowing = true;
            fp->fired++;
            verdict = 2;
        } else if (fp->action == KM_FP_HOLD_REPLIES) {
            fp->fired++;
            start_hold(fp, c, frame);
        } else if (fp->action == KM_FP_DROP_REQUEST) {
            fp->fired++;
            verdict = 1;
        } else {
            c->drop_xid = xid;
        }
    }
    pthread_mutex_unlock(&fp->mu);
    return verdict;
}

/* Keeps a whole server frame (length prefix included) for km_fp_release_held. */
static int hold_frame(km_fp *fp, const unsigned char *frame, size_t len)
{
    pthread_mutex_lock(&fp->mu);
    fp_buf *h = &fp->held;
    int rc = 0;
    if (h->cap - h->len < len) {
        size_t cap = h->len + len + 65536;
        unsigned char *grown = realloc(h->p, cap);
        if (grown) {
            h->p = grown;
            h->cap = cap;
        } else {
            rc = -1;
        }
    }
    if (!rc) {
        memcpy(h->p + h->len, frame - 4, len);
        h->len += len;
        for (int i = 0; len >= 8 && i < fp->hold_unanswered; i++)
            if (fp->hold_xids[i] == (int32_t)be32(frame)) { /* answered: the last one takes its place */
                fp->hold_xids[i] = fp->hold_xids[--fp->hold_unanswered];
                break;
            }
    }
    pthread_mutex_unlock(&fp->mu);
    return rc;
}

/* 0 forward, 1 cut (the reply we were told to lose), 2 held. */
static int on_server_frame(km_fp *fp, fp_conn *c, const unsigned char *frame, size_t len)
{
    if (!c->s_hello_done) {
        c->s_hello_done = true;
        return 0;
    }
    pthread_mutex_lock(&fp->mu);
    bool held = fp->hold_conn == (int)(c - fp->conns);
    pthread_mutex_unlock(&fp->mu);
    if (held && len >= 4 && (int32_t)be32(frame) == -2)
        return 0; /* a ping's answer: the client takes it out of turn, and a held one would cost the connection */
    if (held)
        return hold_frame(fp, frame, 4 + len) ? 1 : 2;
    if (len < 4 || c->drop_xid < 0 || (int32_t)be32(frame) != (int32_t)c->drop_xid)
        return 0;
    pthread_mutex_lock(&fp->mu);
    fp->fired++;
    pthread_mutex_unlock(&fp->mu);
    return 1;
}

/* Reads what is there, then handles every complete frame. Returns -1 to close the connection. */
static int pump(km_fp *fp, fp_conn *c, bool from_client)
{
    int in = from_client ? c->cfd : c->sfd, out = from_client ? c->sfd : c->cfd;
    fp_buf *b = from_client ? &c->from_client : &c->from_server;
    if (b->cap - b->len < 65536) {
        size_t cap = b->cap ? b->cap * 2 : 131072;
        unsigned char *grown = cap <= FP_MAX_FRAME * 2u ? realloc(b->p, cap) : NULL;
        if (!grown)
            return -1;
        b->p = grown;
        b->cap = cap;
    }
    ssize_t n = recv(in, b->p + b->len, b->cap - b->len, 0);
    if (n <= 0)
        return (n < 0 && errno == EINTR) ? 0 : -1;
    b->len += (size_t)n;
    size_t at = 0;
    while (b->len - at >= 4) {
        uint32_t flen = be32(b->p + at);
        if (flen > FP_MAX_FRAME)
            return -1;
        if (b->len - at < 4 + (size_t)flen)
            break;
        const unsigned char *f = b->p + at + 4;
        int verdict = from_client ? on_client_frame(fp, c, f, flen) : on_server_frame(fp, c, f, flen);
        if (verdict == 1 || (verdict == 0 && send_all(out, b->p + at, 4 + (size_t)flen)))
            return -1;
        at += 4 + (size_t)flen;
    }
    memmove(b->p, b->p + at, b->len - at);
    b->len -= at;
    return 0;
}

static int connect_upstream(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a)) {
        close(fd);
        return -1;
    }
    int one = 1;
    if (fd >= 0)
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

static void accept_one(km_fp *fp)
{
    int cfd = accept(fp->lfd, NULL, NULL);
    if (cfd < 0)
        return;
    pthread_mutex_lock(&fp->mu);
    bool refuse = fp->refuse;
    pthread_mutex_unlock(&fp->mu);
    int sfd = refuse ? -1 : connect_upstream(fp->upstream_port);
    fp_conn *slot = NULL;
    for (int i = 0; i < FP_MAX_CONNS && !slot; i++)
        if (fp->conns[i].cfd < 0)
            slot = &fp->conns[i];
    if (sfd < 0 || !slot) {
        close(cfd);
        if (sfd >= 0) close(sfd);
        return;
    }
    int one = 1;
    setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    slot->cfd = cfd;
    slot->sfd = sfd;
}

/* Where the held frames but the last `keep` end. */
static size_t held_upto(const fp_buf *h, int keep)
{
    size_t ends[256], n = 0;
    for (size_t at = 0; at + 4 <= h->len && n < 256; at += 4 + be32(h->p + at))
        ends[n++] = at + 4 + be32(h->p + at);
    return (size_t)keep >= n ? 0 : (size_t)keep == 0 ? h->len : ends[n - 1 - (size_t)keep];
}

/* Before any frame read now: the held ones reach the client first, in their order. */
static void release_if_asked(km_fp *fp)
{
    pthread_mutex_lock(&fp->mu);
    if (fp->release_requested) {
        fp_conn *c = fp->hold_conn >= 0 ? &fp->conns[fp->hold_conn] : NULL;
        size_t upto = held_upto(&fp->held, fp->release_keep);
        if (c && c->cfd >= 0 && upto)
            (void)send_all(c->cfd, fp->held.p, upto);
        if (upto) {
            memmove(fp->held.p, fp->held.p + upto, fp->held.len - upto);
            fp->held.len -= upto;
        }
        if (!fp->release_keep)
            fp->hold_conn = fp->hold_unanswered = -1;
        fp->release_requested = false;
        pthread_cond_broadcast(&fp->released);
    }
    pthread_mutex_unlock(&fp->mu);
}

static void *run(void *arg)
{
    km_fp *fp = arg;
    for (;;) {
        struct pollfd p[2 + 2 * FP_MAX_CONNS];
        int np = 0;
        pthread_mutex_lock(&fp->mu);
        bool paused = fp->paused; /* nothing is read, so nothing moves: poll ignores fd -1 */
        pthread_mutex_unlock(&fp->mu);
        p[np++] = (struct pollfd){fp->wake[0], POLLIN, 0};
        p[np++] = (struct pollfd){paused ? -1 : fp->lfd, POLLIN, 0};
        for (int i = 0; i < FP_MAX_CONNS; i++) {
            p[np++] = (struct pollfd){paused ? -1 : fp->conns[i].cfd, POLLIN, 0};
            p[np++] = (struct pollfd){paused ? -1 : fp->conns[i].sfd, POLLIN, 0};
        }
        if (poll(p, (nfds_t)np, -1) < 0 && errno != EINTR)
            break;
        pthread_mutex_lock(&fp->mu);
        bool stop = fp->stop, cut = fp->cut_requested;
        fp->cut_requested = false;
        pthread_mutex_unlock(&fp->mu);
        if (p[0].revents) {
            char drain[64];
            (void)!read(fp->wake[0], drain, sizeof drain);
        }
        if (stop)
            break;
        release_if_asked(fp);
        for (int i = 0; i < FP_MAX_CONNS; i++) {
            fp_conn *c = &fp->conns[i];
            if (c->cfd < 0)
                continue;
            if (cut || (p[2 + 2 * i].revents && pump(fp, c, true)) ||
                (c->cfd >= 0 && p[3 + 2 * i].revents && pump(fp, c, false)))
                conn_close(c);
        }
        if (p[1].revents)
            accept_one(fp);
    }
    for (int i = 0; i < FP_MAX_CONNS; i++)
        if (fp->conns[i].cfd >= 0)
            conn_close(&fp->conns[i]);
    return NULL;
}

static int listen_loopback(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) || listen(fd, 16) ||
        getsockname(fd, (struct sockaddr *)&a, &len)) {
        if (fd >= 0) close(fd);
        return -1;
    }
    *port = ntohs(a.sin_port);
    return fd;
}

km_fp *km_fp_start(int upstream_port, char *err, size_t errlen)
{
    km_fp *fp = calloc(1, sizeof *fp);
    if (!fp)
        return NULL;
    fp->upstream_port = upstream_port;
    for (int i = 0; i < FP_MAX_CONNS; i++) {
        fp->conns[i].cfd = fp->conns[i].sfd = -1;
        fp->conns[i].drop_xid = -1;
    }
    pthread_mutex_init(&fp->mu, NULL);
    pthread_cond_init(&fp->released, NULL);
    fp->hold_conn = fp->hold_unanswered = fp->hold_client_port = -1;
    fp->lfd = listen_loopback(&fp->port);
    if (fp->lfd < 0 || pipe(fp->wake) || pthread_create(&fp->thread, NULL, run, fp)) {
        snprintf(err, errlen, "faultproxy: cannot listen or start its thread: %s", strerror(errno));
        if (fp->lfd >= 0) close(fp->lfd);
        free(fp);
        return NULL;
    }
    snprintf(fp->hosts, sizeof fp->hosts, "127.0.0.1:%d", fp->port);
    return fp;
}

static void wake(km_fp *fp) { (void)!write(fp->wake[1], "x", 1); }

void km_fp_stop(km_fp *fp)
{
    if (!fp)
        return;
    pthread_mutex_lock(&fp->mu);
    fp->stop = true;
    pthread_mutex_unlock(&fp->mu);
    wake(fp);
    pthread_join(fp->thread, NULL);
    close(fp->lfd);
    close(fp->wake[0]);
    close(fp->wake[1]);
    pthread_mutex_destroy(&fp->mu);
    pthread_cond_destroy(&fp->released);
    free(fp->held.p);
    free(fp);
}

int km_fp_port(const km_fp *fp) { return fp->port; }
const char *km_fp_hosts(km_fp *fp) { return fp->hosts; }

void km_fp_arm(km_fp *fp, km_fp_match match, km_fp_action action, const char *path, int skip)
{
    pthread_mutex_lock(&fp->mu);
    fp->armed = true;
    fp->swallowing = false;
    fp->match = match;
    fp->action = action;
    fp->skip = skip;
    snprintf(fp->path, sizeof fp->path, "%s", path ? path : "/migration");
    pthread_mutex_unlock(&fp->mu);
}

void km_fp_disarm(km_fp *fp)
{
    pthread_mutex_lock(&fp->mu);
    fp->armed = fp->swallowing = false;
    pthread_mutex_unlock(&fp->mu);
}

static int read_counter(km_fp *fp, const int *field)
{
    pthread_mutex_lock(&fp->mu);
    int v = *field;
    pthread_mutex_unlock(&fp->mu);
    return v;
}

int km_fp_fired(km_fp *fp) { return read_counter(fp, &fp->fired); }
int km_fp_multis_seen(km_fp *fp) { return read_counter(fp, &fp->multis); }

void km_fp_cut_all(km_fp *fp)
{
    pthread_mutex_lock(&fp->mu);
    fp->cut_requested = true;
    pthread_mutex_unlock(&fp->mu);
    wake(fp);
}

void km_fp_refuse(km_fp *fp, bool refuse)
{
    pthread_mutex_lock(&fp->mu);
    fp->refuse = refuse;
    pthread_mutex_unlock(&fp->mu);
}

void km_fp_pause(km_fp *fp, bool paused)
{
    pthread_mutex_lock(&fp->mu);
    fp->paused = paused;
    pthread_mutex_unlock(&fp->mu);
    wake(fp);
}

int km_fp_hold_unanswered(km_fp *fp) { return read_counter(fp, &fp->hold_unanswered); }
int km_fp_hold_client_port(km_fp *fp) { return read_counter(fp, &fp->hold_client_port); }

void km_fp_release_held(km_fp *fp, int keep)
{
    pthread_mutex_lock(&fp->mu);
    fp->release_requested = true;
    fp->release_keep = keep;
    pthread_mutex_unlock(&fp->mu);
    wake(fp);
    pthread_mutex_lock(&fp->mu);
    while (fp->release_requested)
        pthread_cond_wait(&fp->released, &fp->mu);
    pthread_mutex_unlock(&fp->mu);
}
