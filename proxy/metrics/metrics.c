/* A deliberately small HTTP/1.0 server: GET /metrics answers the exposition text, other paths
 * go to the owner's route (health checks), POST to the owner's action (run-time switches) when
 * the guard lets it, anything else 404; one request per connection.
 *
 * The port is a liveness probe's target and may be reachable by anyone, so nobody may starve it:
 * many connections are served at once (a bounded number, each with a bounded buffer), a request
 * must arrive whole within a short deadline from accept (bytes trickling in do not extend it), and
 * when every slot is taken the oldest connection still sending its request is closed to make room
 * for the new one, so a probe is always answered. */
#include "km_metrics.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ev.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_REQUEST 4096      /* a probe or a scrape request is a few hundred bytes */
#define MAX_CLIENTS 256       /* x (MAX_REQUEST + a little): about 1 MiB; fds stay within a default limit */
#define HEADER_DEADLINE 2.0   /* seconds from accept to the blank line: what an idle socket can hold */
#define WRITE_TIMEOUT 10.0    /* seconds to take the answer */
#define ACCEPT_PAUSE 0.1      /* out of file descriptors: accept again after this */
#define ACCEPT_BURST 64       /* connections accepted per wake-up: the loop has other work */
#define MAX_TOKEN 256

typedef struct metrics_client metrics_client;

struct km_metrics_server {
    struct ev_loop *loop;
    ev_io accept_io;
    int fd;
    uint16_t port;
    km_metrics_render_fn render;
    km_metrics_route_fn route;
    void *ud;
    km_metrics_action_fn action;   /* POST handler; NULL: POST is 404 */
    void *action_ud;
    bool post_enabled;             /* the guard: POST is 403 unless enabled */
    char token[MAX_TOKEN];         /* and, when set, 401 without "Authorization: Bearer <token>" */
    ev_timer accept_pause;         /* accept stopped while the process is out of descriptors */
    metrics_client *clients;       /* oldest first: the eviction order */
    metrics_client *last;
    int n_clients;
};

struct metrics_client {
    km_metrics_server *srv;
    metrics_client *prev, *next;
    ev_io io;
    ev_timer timer;
    char req[MAX_REQUEST];
    size_t req_len;
    km_buf resp;
    size_t sent;
};

static void client_free(metrics_client *c)
{
    km_metrics_server *s = c->srv;
    *(c->prev ? &c->prev->next : &s->clients) = c->next;
    *(c->next ? &c->next->prev : &s->last) = c->prev;
    s->n_clients--;
    ev_io_stop(s->loop, &c->io);
    ev_timer_stop(s->loop, &c->timer);
    close(c->io.fd);
    km_buf_free(&c->resp);
    free(c);
}

/* The request's "Authorization: Bearer <token>" equals the configured token; compared in time
 * independent of where they differ, so the answer's timing tells nothing about the token. */
static bool bearer_matches(const km_metrics_server *s, const char *req)
{
    const char *h = req;
    while ((h = strchr(h, '\n')) && strncasecmp(++h, "Authorization:", 14))
        ;
    if (!h)
        return false;
    h += 14 + strspn(h + 14, " \t");
    if (strncasecmp(h, "Bearer ", 7))
        return false;
    h += 7 + strspn(h + 7, " \t");
    size_t given = strcspn(h, " \t\r\n"), want = strlen(s->token);
    unsigned char diff = given != want;
    for (size_t i = 0; i < want; i++)
        diff |= (unsigned char)(s->token[i] ^ (i < given ? h[i] : 0));
    return !diff;
}

/* POST PATH: 403 while the guard is off, 401 without the token, else the action's answer (200,
 * or 404 for a path it does not know). 0 when the request is no POST. */
static int post(metrics_client *c, km_buf *body)
{
    const km_metrics_server *s = c->srv;
    char path[256];
    if (strncmp(c->req, "POST ", 5) || sscanf(c->req + 5, "%255s", path) != 1)
        return 0;
    if (!s->post_enabled) {
        km_buf_put(body, "POST is disabled on this port (metrics.post.enabled)\n", 53);
        return 403;
    }
    if (s->token[0] && !bearer_matches(s, c->req)) {
        km_buf_put(body, "POST needs Authorization: Bearer <metrics.post.token.file>\n", 59);
        return 401;
    }
    return s->action && s->action(path, body, s->action_ud) == 0 ? 200 : 404;
}

static const char *status_text(int status)
{
    switch (status) {
    case 200: return "200 OK";
    case 401: return "401 Unauthorized";
    case 403: return "403 Forbidden";
    case 503: return "503 Service Unavailable";
    case 500: return "500 Internal Server Error";
    default: return "404 Not Found";
    }
}

/* "GET /path HTTP/1.x": the path (query string dropped) into out; false for anything else. */
static bool request_path(const char *req, char *out, size_t cap)
{
    if (strncmp(req, "GET /", 5))
        return false;
    size_t n = strcspn(req + 4, " ?\r\n");
    if (n >= cap)
        return false;
    memcpy(out, req + 4, n);
    out[n] = '\0';
    return true;
}

static void build_response(metrics_client *c)
{
    char path[128];
    bool got = request_path(c->req, path, sizeof path);
    bool metrics = got && (!strcmp(path, "/metrics") || !strcmp(path, "/"));
    km_buf body;
    km_buf_init(&body);
    int status = 404;
    bool posted = false;
    if (metrics) {
        c->srv->render(&body, c->srv->ud);
        status = 200;
    } else if (got && c->srv->route) {
        status = c->srv->route(path, &body, c->srv->ud);
    } else if (!got) {
        status = post(c, &body);
        posted = status != 0;
    }
    if (!status || (status == 404 && !body.len)) {
        status = 404;
        km_buf_put(&body, "not found\n", 10);
    }
    char head[200];
    int n = snprintf(head, sizeof head,
                     "HTTP/1.0 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
                     status_text(status), metrics ? "text/plain; version=0.0.4" : status == 404 || posted
                     ? "text/plain" : "application/json", body.len);
    km_buf_put(&c->resp, head, (size_t)n);
    km_buf_put(&c->resp, body.data, body.len);
    km_buf_free(&body);
    /* from now on the deadline is for taking the answer */
    ev_timer_stop(c->srv->loop, &c->timer);
    ev_timer_set(&c->timer, WRITE_TIMEOUT, 0);
    ev_timer_start(c->srv->loop, &c->timer);
}

static void client_write(metrics_client *c)
{
    while (c->sent < c->resp.len) {
        ssize_t n = send(c->io.fd, c->resp.data + c->sent, c->resp.len - c->sent, MSG_NOSIGNAL);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return;
        if (n <= 0) {
            client_free(c);
            return;
        }
        c->sent += (size_t)n;
    }
    client_free(c);
}

/* Reads what has come; answers once the request is whole. false when c was freed. */
static bool client_read(metrics_client *c)
{
    ssize_t n = recv(c->io.fd, c->req + c->req_len, sizeof c->req - 1 - c->req_len, 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return true;
    if (n <= 0 || c->req_len + (size_t)n >= sizeof c->req - 1) {  /* gone, or an absurd request */
        client_free(c);
        return false;
    }
    c->req_len += (size_t)n;
    c->req[c->req_len] = '\0';
    if (!strstr(c->req, "\r\n\r\n") && !strstr(c->req, "\n\n"))
        return true;
    build_response(c);
    ev_io_stop(c->srv->loop, &c->io);
    ev_io_set(&c->io, c->io.fd, EV_WRITE);
    ev_io_start(c->srv->loop, &c->io);
    return true;
}

static void client_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)loop;
    metrics_client *c = w->data;
    if (revents & EV_READ)
        client_read(c);
    else if (revents & EV_WRITE)
        client_write(c);
}

/* A loop held up past the deadline (a long full sync) runs this before the read that is ready:
 * a request that did arrive in time is read and answered, not dropped with its probe. */
static void client_timeout_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)loop; (void)revents;
    metrics_client *c = t->data;
    bool was_reading = !c->resp.len;
    if (was_reading && !client_read(c))
        return;
    if (!was_reading || !c->resp.len) /* the answer not taken in time, or still no whole request */
        client_free(c);
}

/* Room for one more: when every slot is taken, the oldest connection still sending its request
 * goes (an idle or slow one holds a slot the least useful way), else the oldest one not taking
 * its answer: a new probe is always served. */
static bool make_room(km_metrics_server *s)
{
    if (s->n_clients < MAX_CLIENTS)
        return true;
    metrics_client *victim = s->clients;
    for (metrics_client *c = s->clients; c; c = c->next)
        if (!c->resp.len) {
            victim = c;
            break;
        }
    if (victim)
        client_free(victim);
    return victim != NULL;
}

static void add_client(km_metrics_server *s, int fd)
{
    metrics_client *c = make_room(s) ? calloc(1, sizeof *c) : NULL;
    if (!c) {
        close(fd);  /* no memory: the prober retries */
        return;
    }
    c->srv = s;
    km_buf_init(&c->resp);
    c->prev = s->last;
    *(s->last ? &s->last->next : &s->clients) = c;
    s->last = c;
    s->n_clients++;
    ev_io_init(&c->io, client_cb, fd, EV_READ);
    c->io.data = c;
    ev_io_start(s->loop, &c->io);
    ev_timer_init(&c->timer, client_timeout_cb, HEADER_DEADLINE, 0);
    c->timer.data = c;
    ev_timer_start(s->loop, &c->timer);
}

static void accept_resume_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)revents;
    km_metrics_server *s = t->data;
    ev_io_start(loop, &s->accept_io);
}

/* Out of descriptors, a pending connection would wake the loop again at once: free the oldest
 * waiting connection's, or stop accepting for a moment. */
static void out_of_descriptors(km_metrics_server *s)
{
    for (metrics_client *c = s->clients; c; c = c->next)
        if (!c->resp.len) {
            client_free(c);
            return;
        }
    ev_io_stop(s->loop, &s->accept_io);
    ev_timer_start(s->loop, &s->accept_pause);
}

static void accept_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)loop; (void)revents;
    km_metrics_server *s = w->data;
    for (int i = 0; i < ACCEPT_BURST; i++) {
        int fd = accept4(s->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0)
            add_client(s, fd);
        else if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
            out_of_descriptors(s);
        if (fd < 0)
            return;
    }
}

static int parse_host_port(const char *hp, struct sockaddr_in *sa, km_err *err)
{
    const char *colon = strrchr(hp, ':');
    char host[64];
    char *end;
    long port = colon ? strtol(colon + 1, &end, 10) : -1;
    if (!colon || (size_t)(colon - hp) >= sizeof host || !colon[1] || *end || port < 0 || port > 65535)
        return km_fail(err, "metrics.listen '%s': expected IPv4-HOST:PORT", hp);
    memcpy(host, hp, (size_t)(colon - hp));
    host[colon - hp] = '\0';
    memset(sa, 0, sizeof *sa);
    sa->sin_family = AF_INET;
    sa->sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, host, &sa->sin_addr) != 1)
        return km_fail(err, "metrics.listen '%s': '%s' is not an IPv4 address", hp, host);
    return 0;
}

km_metrics_server *km_metrics_listen(struct ev_loop *loop, const char *host_port, km_metrics_render_fn render,
                                     void *ud, km_err *err)
{
    struct sockaddr_in sa;
    if (parse_host_port(host_port, &sa, err))
        return NULL;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    socklen_t len = sizeof sa;
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) || listen(fd, SOMAXCONN) ||
        getsockname(fd, (struct sockaddr *)&sa, &len)) {
        km_fail(err, "metrics.listen %s: %s", host_port, strerror(errno));
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    km_metrics_server *s = calloc(1, sizeof *s);
    if (!s) {
        close(fd);
        km_fail(err, "metrics: out of memory");
        return NULL;
    }
    *s = (km_metrics_server){.loop = loop, .fd = fd, .port = ntohs(sa.sin_port), .render = render, .ud = ud};
    ev_io_init(&s->accept_io, accept_cb, fd, EV_READ);
    s->accept_io.data = s;
    ev_timer_init(&s->accept_pause, accept_resume_cb, ACCEPT_PAUSE, 0);
    s->accept_pause.data = s;
    ev_io_start(loop, &s->accept_io);
    return s;
}

void km_metrics_on_post(km_metrics_server *s, km_metrics_action_fn fn, void *ud)
{
    s->action = fn;
    s->action_ud = ud;
}

int km_metrics_guard_post(km_metrics_server *s, bool enabled, const char *token_file, km_err *err)
{
    s->post_enabled = false;
    s->token[0] = '\0';
    if (!token_file) {
        s->post_enabled = enabled;
        return 0;
    }
    FILE *f = fopen(token_file, "r");
    if (!f)
        return km_fail(err, "metrics.post.token.file %s: %s", token_file, strerror(errno));
    char line[MAX_TOKEN + 2] = "";
    bool read = fgets(line, sizeof line, f) != NULL;
    fclose(f);
    size_t n = strcspn(line, "\r\n");
    if (!read || !n || strcspn(line, " \t") < n)
        return km_fail(err, "metrics.post.token.file %s: the first line must hold the token (no blanks)", token_file);
    if (n >= MAX_TOKEN)
        return km_fail(err, "metrics.post.token.file %s: the token is longer than %d bytes", token_file, MAX_TOKEN - 1);
    memcpy(s->token, line, n);
    s->token[n] = '\0';
    s->post_enabled = true;
    return 0;
}

uint16_t km_metrics_port(const km_metrics_server *s) { return s->port; }

void km_metrics_set_route(km_metrics_server *s, km_metrics_route_fn route) { s->route = route; }

void km_metrics_free(km_metrics_server *s)
{
    if (!s)
        return;
    while (s->clients)
        client_free(s->clients);
    ev_io_stop(s->loop, &s->accept_io);
    ev_timer_stop(s->loop, &s->accept_pause);
    close(s->fd);
    free(s);
}

void km_metrics_sample(km_buf *out, const char *name, const char *type, const char *help, const char *labels,
                       bool first, double value)
{
    char line[512];
    int n;
    if (!labels || first) {
        n = snprintf(line, sizeof line, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
        km_buf_put(out, line, (size_t)n);
    }
    n = labels ? snprintf(line, sizeof line, "%s{%s} %.17g\n", name, labels, value)
               : snprintf(line, sizeof line, "%s %.17g\n", name, value);
    km_buf_put(out, line, (size_t)(n < (int)sizeof line ? n : (int)sizeof line - 1));
}
