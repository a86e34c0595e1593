/* km_capture: the bounded hand-off from the data path to the writer thread. */
#include "capture_private.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

struct km_capture {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    cap_rec *head, *tail;          /* under mu */
    size_t queued_bytes;           /* frame records (with their headers) queued or being written, under mu */
    bool stopping;                 /* under mu */
    bool writing;                  /* under mu: the writer holds a batch */
    pthread_cond_t idle;           /* signalled when the writer runs out of work */
    km_capture_stats stats;        /* under mu */
    uint64_t next_conn_id;         /* under mu */
    km_capture_conn *live;         /* under mu: opened and not yet written closed */
    km_err first_err;              /* under mu */
    bool have_err;
    size_t buffer_limit;
    pthread_t thread;
    /* writer thread only (and open/close) */
    cap_pcap pcap;
    cap_jsonl jsonl;
    bool pcap_on, jsonl_on;
    bool pcap_full, jsonl_full;    /* reached max_file_bytes (not an error) */
    uint64_t max_file_bytes;
};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static cap_rec *rec_new(cap_rec_type type, km_capture_conn *conn, km_capture_dir dir, size_t len)
{
    cap_rec *r = malloc(sizeof *r + len);
    if (r)
        *r = (cap_rec){.type = type, .conn = conn, .dir = dir, .len = len, .ts_ns = now_ns()};
    return r;
}

static void push_locked(km_capture *cap, cap_rec *r)
{
    if (cap->tail)
        cap->tail->next = r;
    else
        cap->head = r;
    cap->tail = r;
    pthread_cond_signal(&cap->cv);
}

/* ---- writer thread ---------------------------------------------------------- */

static void note_failure(km_capture *cap, const km_err *e)
{
    pthread_mutex_lock(&cap->mu);
    cap->stats.write_errors++;
    if (!cap->have_err) {
        cap->first_err = *e;
        cap->have_err = true;
    }
    pthread_mutex_unlock(&cap->mu);
}

/* A failing sink (disk full, say) is switched off after its first error so
 * it cannot flood; the other sink carries on. */
/* A full file stops growing but stays valid: records end on a boundary. */
static bool has_room(km_capture *cap, bool *on, bool *full, FILE *f)
{
    if (*on && cap->max_file_bytes) {
        long pos = ftell(f);
        if (pos >= 0 && (uint64_t)pos >= cap->max_file_bytes) {
            *on = false;
            *full = true;
        }
    }
    return *on;
}

static void write_one(km_capture *cap, const cap_rec *r)
{
    km_err e = {{0}};
    if (has_room(cap, &cap->pcap_on, &cap->pcap_full, cap->pcap.f) && km_cap__pcap_record(&cap->pcap, r, &e)) {
        cap->pcap_on = false;
        note_failure(cap, &e);
    }
    if (has_room(cap, &cap->jsonl_on, &cap->jsonl_full, cap->jsonl.f) &&
        km_cap__jsonl_record(&cap->jsonl, r, &e)) {
        cap->jsonl_on = false;
        note_failure(cap, &e);
    }
    if (r->type == REC_FRAME && (cap->pcap_full || cap->jsonl_full)) {
        pthread_mutex_lock(&cap->mu);
        cap->stats.skipped_frames++;
        pthread_mutex_unlock(&cap->mu);
    }
}

static void forget_conn(km_capture *cap, km_capture_conn *c)
{
    pthread_mutex_lock(&cap->mu);
    if (c->prev)
        c->prev->next = c->next;
    else
        cap->live = c->next;
    if (c->next)
        c->next->prev = c->prev;
    pthread_mutex_unlock(&cap->mu);
    free(c->close_rec);
    free(c);
}

static void flush_sink(km_capture *cap, bool *on, FILE *f, const char *what, const char *path)
{
    if (!*on || fflush(f) == 0)
        return;
    km_err e;
    km_fail(&e, "%s capture %s: write failed: %s", what, path, strerror(errno));
    *on = false;
    note_failure(cap, &e);
}

static void write_batch(km_capture *cap, cap_rec *batch)
{
    size_t bytes = 0;
    for (cap_rec *r = batch, *next; r; r = next) {
        next = r->next;
        write_one(cap, r);
        if (r->type == REC_FRAME)
            bytes += sizeof *r + r->len;
        if (r->type == REC_CLOSE)
            forget_conn(cap, r->conn); /* frees r too: it is the conn's close_rec */
        else
            free(r);
    }
    /* Flushed per batch: a crashed daemon still leaves a readable capture. */
    flush_sink(cap, &cap->pcap_on, cap->pcap.f, "pcapng", cap->pcap.path);
    flush_sink(cap, &cap->jsonl_on, cap->jsonl.f, "JSON lines", cap->jsonl.path);
    pthread_mutex_lock(&cap->mu);
    cap->queued_bytes -= bytes;
    cap->writing = false;
    if (!cap->head)
        pthread_cond_broadcast(&cap->idle);
    pthread_mutex_unlock(&cap->mu);
}

static void *writer_main(void *arg)
{
    km_capture *cap = arg;
    for (;;) {
        pthread_mutex_lock(&cap->mu);
        while (!cap->head && !cap->stopping)
            pthread_cond_wait(&cap->cv, &cap->mu);
        cap_rec *batch = cap->head;
        cap->head = cap->tail = NULL;
        cap->writing = batch != NULL;
        pthread_mutex_unlock(&cap->mu);
        if (!batch)
            return NULL; /* stopping and drained */
        write_batch(cap, batch);
    }
}

/* ---- owner ------------------------------------------------------------------- */

static int open_sinks(km_capture *cap, const km_capture_opts *o, km_err *err)
{
    uint16_t mss = o->mss ? o->mss : KM_CAPTURE_MSS_DEFAULT;
    if (mss < 64 || mss > 65495)
        return km_fail(err, "capture: mss %u is outside 64..65495", mss);
    if (o->pcapng_path && km_cap__pcap_open(&cap->pcap, o->pcapng_path, o->link, mss, err))
        return -1;
    cap->pcap_on = o->pcapng_path != NULL;
    size_t body_limit = o->json_body_limit ? o->json_body_limit : KM_CAPTURE_JSON_BODY_LIMIT_DEFAULT;
    if (o->jsonl_path && km_cap__jsonl_open(&cap->jsonl, o->jsonl_path, body_limit, err))
        return -1;
    cap->jsonl_on = o->jsonl_path != NULL;
    return 0;
}

static void close_sinks(km_capture *cap, km_err *first)
{
    km_err e = {{0}};
    if (cap->pcap.f && km_cap__pcap_close(&cap->pcap, &e) && !cap->have_err) {
        *first = e;
        cap->have_err = true;
    }
    if (cap->jsonl.f && km_cap__jsonl_close(&cap->jsonl, &e) && !cap->have_err) {
        *first = e;
        cap->have_err = true;
    }
}

km_capture *km_capture_open(const km_capture_opts *opts, km_err *err)
{
    if (!opts || (!opts->pcapng_path && !opts->jsonl_path))
        return km_fail(err, "capture: neither a pcapng nor a JSON lines path given"), NULL;
    km_capture *cap = calloc(1, sizeof *cap);
    if (!cap)
        return km_fail(err, "capture: out of memory"), NULL;
    cap->buffer_limit = opts->buffer_limit ? opts->buffer_limit : KM_CAPTURE_BUFFER_DEFAULT;
    cap->max_file_bytes = opts->max_file_bytes;
    pthread_mutex_init(&cap->mu, NULL);
    pthread_cond_init(&cap->cv, NULL);
    pthread_cond_init(&cap->idle, NULL);
    int rc = open_sinks(cap, opts, err);
    if (!rc && (rc = pthread_create(&cap->thread, NULL, writer_main, cap)) != 0)
        rc = km_fail(err, "capture: cannot start the writer thread: %s", strerror(rc));
    if (rc) {
        km_err ignored;
        close_sinks(cap, &ignored);
        pthread_cond_destroy(&cap->idle);
        pthread_cond_destroy(&cap->cv);
        pthread_mutex_destroy(&cap->mu);
        free(cap);
        return NULL;
    }
    return cap;
}

int km_capture_close(km_capture *cap, km_err *err)
{
    if (!cap)
        return 0;
    pthread_mutex_lock(&cap->mu);
    for (km_capture_conn *c = cap->live; c; c = c->next)
        if (!c->closing) { /* FIN them, so the pcapng streams end properly */
            c->closing = true;
            c->close_rec->ts_ns = now_ns();
            push_locked(cap, c->close_rec);
        }
    cap->stopping = true;
    pthread_cond_signal(&cap->cv);
    pthread_mutex_unlock(&cap->mu);
    pthread_join(cap->thread, NULL);
    km_err e = {{0}};
    bool summary = cap->jsonl_on || cap->jsonl_full; /* a full file still gets its last line */
    if (summary && km_cap__jsonl_summary(&cap->jsonl, &cap->stats, &e) && !cap->have_err) {
        cap->first_err = e;
        cap->have_err = true;
    }
    close_sinks(cap, &cap->first_err);
    int rc = cap->have_err ? km_fail(err, "%s", cap->first_err.msg) : 0;
    pthread_cond_destroy(&cap->idle);
    pthread_cond_destroy(&cap->cv);
    pthread_mutex_destroy(&cap->mu);
    free(cap);
    return rc;
}

/* ---- data path ------------------------------------------------------------------ */

km_capture_conn *km_capture_conn_open(km_capture *cap, km_capture_endpoint client, km_capture_endpoint server)
{
    return km_capture_conn_open_broker(cap, client, server, -2);
}

km_capture_conn *km_capture_conn_open_broker(km_capture *cap, km_capture_endpoint client, km_capture_endpoint server,
                                             int32_t broker)
{
    if (!cap)
        return NULL;
    km_capture_conn *c = calloc(1, sizeof *c);
    cap_rec *open = rec_new(REC_OPEN, c, KM_CAPTURE_C2S, 0);
    if (c)
        c->close_rec = rec_new(REC_CLOSE, c, KM_CAPTURE_C2S, 0);
    if (!c || !open || !c->close_rec) {
        if (c)
            free(c->close_rec);
        free(c);
        free(open);
        return NULL;
    }
    c->client = client;
    c->server = server;
    c->broker = broker;
    c->has_broker = broker != -2;
    pthread_mutex_lock(&cap->mu);
    c->id = ++cap->next_conn_id;
    c->next = cap->live;
    if (cap->live)
        cap->live->prev = c;
    cap->live = c;
    push_locked(cap, open);
    pthread_mutex_unlock(&cap->mu);
    return c;
}

static void count_drop_locked(km_capture *cap, km_capture_conn *conn, size_t len)
{
    cap->stats.dropped_frames++;
    cap->stats.dropped_bytes += len;
    conn->gap = true;
}

void km_capture_frame(km_capture *cap, km_capture_conn *conn, km_capture_dir dir, const uint8_t *payload,
                      size_t len)
{
    if (!cap || !conn)
        return;
    /* Headers count too: a flood of tiny frames must not escape the bound. */
    size_t cost = sizeof(cap_rec) + len;
    pthread_mutex_lock(&cap->mu);
    bool fits = !conn->closing && len <= SIZE_MAX - sizeof(cap_rec) &&
                cost <= cap->buffer_limit - cap->queued_bytes;
    if (fits)
        cap->queued_bytes += cost; /* reserved now, so the copy can happen outside the lock */
    else
        count_drop_locked(cap, conn, len);
    pthread_mutex_unlock(&cap->mu);
    if (!fits)
        return;
    cap_rec *r = rec_new(REC_FRAME, conn, dir, len);
    if (r && len)
        memcpy(r->data, payload, len);
    pthread_mutex_lock(&cap->mu);
    if (!r) {
        cap->queued_bytes -= cost;
        count_drop_locked(cap, conn, len);
    } else {
        r->after_gap = conn->gap;
        conn->gap = false;
        cap->stats.frames++;
        cap->stats.bytes += len;
        push_locked(cap, r);
    }
    pthread_mutex_unlock(&cap->mu);
}

void km_capture_conn_close(km_capture *cap, km_capture_conn *conn)
{
    if (!cap || !conn)
        return;
    pthread_mutex_lock(&cap->mu);
    if (!conn->closing) {
        conn->closing = true;
        conn->close_rec->ts_ns = now_ns(); /* allocated at open; stamped now */
        push_locked(cap, conn->close_rec);
    }
    pthread_mutex_unlock(&cap->mu);
}

void km_capture_flush(km_capture *cap)
{
    pthread_mutex_lock(&cap->mu);
    while (cap->head || cap->writing)
        pthread_cond_wait(&cap->idle, &cap->mu);
    pthread_mutex_unlock(&cap->mu);
}

void km_capture_get_stats(km_capture *cap, km_capture_stats *out)
{
    pthread_mutex_lock(&cap->mu);
    *out = cap->stats;
    pthread_mutex_unlock(&cap->mu);
}

/* Non-IPv4 peers still need distinct addresses in an IPv4 capture. */
static km_capture_endpoint endpoint_of(const struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)ss;
        return (km_capture_endpoint){ntohl(in->sin_addr.s_addr), ntohs(in->sin_port)};
    }
    const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)ss;
    bool v6 = ss->ss_family == AF_INET6;
    const uint8_t *p = v6 ? in6->sin6_addr.s6_addr : (const uint8_t *)ss;
    size_t n = v6 ? sizeof in6->sin6_addr : sizeof *ss;
    uint32_t h = 2166136261u; /* FNV-1a over the address bytes */
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 16777619u;
    uint16_t port = v6 ? ntohs(in6->sin6_port) : 0;
    return (km_capture_endpoint){0x7fff0000u | (h & 0xffffu), port};
}

int km_capture_endpoints_of_fd(int fd, bool we_are_client, km_capture_endpoint *client, km_capture_endpoint *server,
                               km_err *err)
{
    struct sockaddr_storage local = {0}, remote = {0};
    socklen_t llen = sizeof local, rlen = sizeof remote;
    if (getsockname(fd, (struct sockaddr *)&local, &llen) || getpeername(fd, (struct sockaddr *)&remote, &rlen))
        return km_fail(err, "capture: fd %d has no connected peer: %s", fd, strerror(errno));
    *client = endpoint_of(we_are_client ? &local : &remote);
    *server = endpoint_of(we_are_client ? &remote : &local);
    return 0;
}
