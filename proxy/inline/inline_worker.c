/* Worker threads: each runs its own libev loop with the sessions handed to it.
 *
 * The main loop accepts (listeners stay there: dynamic ones are opened while a response is
 * rewritten on any worker) and hands each client to the worker with the fewest, through a
 * short inbox guarded by the worker's lock and an ev_async.  From then on the client and its
 * upstream connection live on that worker alone, so reading, parsing, rewriting and writing
 * take no lock; only the rare shared steps do (routes, per-IP counts, TLS contexts). */
#include "inline_private.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void take_inbox(inl_worker *w)
{
    pthread_mutex_lock(&w->lock);
    inl_handoff_item *batch = w->inbox;
    size_t n = w->n_inbox;
    bool stopping = w->stopping;
    w->inbox = NULL;
    w->n_inbox = w->cap_inbox = 0;
    pthread_mutex_unlock(&w->lock);
    for (size_t i = 0; i < n; i++) {
        if (stopping) { /* handed over as the proxy stops: never served */
            close(batch[i].fd);
            __atomic_sub_fetch(&w->assigned, 1, __ATOMIC_RELAXED);
            __atomic_sub_fetch(&w->p->open, 1, __ATOMIC_RELAXED);
            pthread_mutex_lock(&w->p->lock);
            inl_ip_release(w->p, batch[i].ip);
            pthread_mutex_unlock(&w->p->lock);
            continue;
        }
        inl_session_start(w, batch[i].route, batch[i].fd, batch[i].peer, batch[i].ip);
    }
    free(batch);
    if (stopping) {
        while (w->sessions)
            inl_session_free(w->sessions);
        inl_memory_stop(w);
        ev_break(w->loop, EVBREAK_ALL);
    }
}

static void on_wake(struct ev_loop *loop, ev_async *a, int revents)
{
    (void)loop, (void)revents;
    take_inbox(a->data);
}

static void *run_worker(void *arg)
{
    inl_worker *w = arg;
    ev_run(w->loop, 0);
    return NULL;
}

static void worker_free(inl_worker *w)
{
    if (!w)
        return;
    for (size_t i = 0; i < w->n_inbox; i++) /* the thread never started: its inbox is ours */
        close(w->inbox[i].fd);
    free(w->inbox);
    inl_metrics_free(w);
    if (w->loop)
        ev_loop_destroy(w->loop);
    pthread_mutex_destroy(&w->lock);
    free(w);
}

static inl_worker *worker_new(km_inline *p, unsigned index, km_err *err)
{
    inl_worker *w = calloc(1, sizeof *w);
    if (!w)
        return km_fail(err, "proxy: out of memory for worker %u", index), NULL;
    w->p = p;
    w->index = index;
    pthread_mutex_init(&w->lock, NULL);
    w->loop = ev_loop_new(EVFLAG_AUTO);
    if (!w->loop) {
        worker_free(w);
        return km_fail(err, "proxy: worker %u: cannot create an event loop", index), NULL;
    }
    ev_async_init(&w->wake, on_wake);
    w->wake.data = w;
    ev_async_start(w->loop, &w->wake);
    inl_memory_init(w);
    return w;
}

/* The CPUs this process may run on (taskset, a container's cpuset), else those online. */
static size_t usable_cpus(void)
{
    cpu_set_t set;
    if (!sched_getaffinity(0, sizeof set, &set) && CPU_COUNT(&set) > 0)
        return (size_t)CPU_COUNT(&set);
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    return online > 0 ? (size_t)online : 1;
}

int inl_workers_start(km_inline *p, int32_t threads, km_err *err)
{
    size_t n = threads > 0 ? (size_t)threads : usable_cpus();
    p->workers = calloc(n, sizeof *p->workers);
    if (!p->workers)
        return km_fail(err, "proxy: out of memory for %zu workers", n);
    for (size_t i = 0; i < n; i++) {
        inl_worker *w = worker_new(p, (unsigned)i, err);
        if (!w)
            return -1;
        p->workers[p->n_workers++] = w;
        int rc = pthread_create(&w->thread, NULL, run_worker, w);
        if (rc)
            return km_fail(err, "proxy: cannot start worker thread %zu: %s", i, strerror(rc));
        w->running = true;
    }
    inl_log(p, 3, "%zu worker thread%s", n, n == 1 ? "" : "s");
    return 0;
}

void inl_workers_stop(km_inline *p)
{
    for (size_t i = 0; i < p->n_workers; i++) {
        inl_worker *w = p->workers[i];
        pthread_mutex_lock(&w->lock);
        w->stopping = true;
        pthread_mutex_unlock(&w->lock);
        if (w->running)
            ev_async_send(w->loop, &w->wake);
    }
    for (size_t i = 0; i < p->n_workers; i++) {
        inl_worker *w = p->workers[i];
        if (w->running)
            pthread_join(w->thread, NULL);
        w->running = false;
        worker_free(w);
    }
    free(p->workers);
    p->workers = NULL;
    p->n_workers = 0;
}

/* The fewest clients wins; ties go round-robin, so a burst of short connections spreads too. */
static inl_worker *least_loaded(km_inline *p)
{
    inl_worker *best = NULL;
    uint64_t fewest = UINT64_MAX;
    for (size_t k = 0; k < p->n_workers; k++) {
        inl_worker *w = p->workers[(p->next_worker + k) % p->n_workers];
        uint64_t n = __atomic_load_n(&w->assigned, __ATOMIC_RELAXED);
        if (n < fewest)
            fewest = n, best = w;
    }
    p->next_worker = (p->next_worker + 1) % p->n_workers;
    return best;
}

void inl_handoff(km_inline *p, inl_route *r, int fd, const char *peer, const char *ip)
{
    inl_worker *w = least_loaded(p);
    pthread_mutex_lock(&w->lock);
    bool ok = !w->stopping;
    if (ok && w->n_inbox == w->cap_inbox) {
        size_t cap = w->cap_inbox ? 2 * w->cap_inbox : 16;
        inl_handoff_item *grown = realloc(w->inbox, cap * sizeof *grown);
        ok = grown != NULL;
        if (ok)
            w->inbox = grown, w->cap_inbox = cap;
    }
    if (ok) {
        inl_handoff_item *h = &w->inbox[w->n_inbox++];
        h->route = r;
        h->fd = fd;
        snprintf(h->peer, sizeof h->peer, "%s", peer);
        snprintf(h->ip, sizeof h->ip, "%s", ip);
        __atomic_add_fetch(&w->assigned, 1, __ATOMIC_RELAXED);
        __atomic_add_fetch(&p->open, 1, __ATOMIC_RELAXED);
    }
    pthread_mutex_unlock(&w->lock);
    if (!ok) {
        inl_log(p, 0, "client %s: out of memory handing it to a worker", peer);
        close(fd);
        pthread_mutex_lock(&p->lock);
        inl_ip_release(p, ip);
        pthread_mutex_unlock(&p->lock);
        return;
    }
    ev_async_send(w->loop, &w->wake);
}

size_t km_inline_threads(const km_inline *p)
{
    return p->n_workers;
}
