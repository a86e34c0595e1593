/* Broker simulator: configuration, thread mode, state access. */
#include "bsim_internal.h"

#include <ev.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

void km_bsim_config_init(km_bsim_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->broker_id = 1;
    cfg->kraft_broker_epoch = -1;
    for (int api = 0; api < KM_BSIM_APIS; api++) {
        const km_message_desc *md = km_find_message(KM_K_REQUEST, (int16_t)api);
        cfg->max_version[api] = md ? md->valid.hi : -1;
    }
    cfg->max_api_versions = 3; /* Kafka 3.9 brokers serve ApiVersions v0-3 */
}

/* "LeaderAndIsr", "LEADER_AND_ISR", "LeaderAndIsrRequest" or "4". */
static int api_key_of(const char *name, size_t n)
{
    char buf[64];
    if (n == 0 || n >= sizeof buf)
        return -1;
    memcpy(buf, name, n);
    buf[n] = '\0';
    char *end;
    long k = strtol(buf, &end, 10);
    if (*end == '\0')
        return k >= 0 && k <= INT16_MAX ? (int)k : -1;
    for (const km_message_desc *const *m = km_all_messages(); *m; m++) {
        if ((*m)->kind != KM_K_REQUEST)
            continue;
        size_t len = strlen((*m)->name) - strlen("Request");
        const char *upper = km_api_name((*m)->api_key);
        if ((len == n && !strncmp((*m)->name, buf, n)) || !strcmp((*m)->name, buf) ||
            (upper && !strcasecmp(upper, buf)))
            return (*m)->api_key;
    }
    return -1;
}

static int parse_one(km_bsim_config *cfg, const char *item, size_t n, km_err *err)
{
    const char *eq = memchr(item, '=', n);
    if (!eq)
        return km_fail(err, "--max-version: '%.*s' is not api=version", (int)n, item);
    int api = api_key_of(item, (size_t)(eq - item));
    char *end;
    long v = strtol(eq + 1, &end, 10);
    if (api < 0)
        return km_fail(err, "--max-version: unknown api '%.*s'", (int)(eq - item), item);
    if (end != item + n || v < 0 || v > 15)
        return km_fail(err, "--max-version: bad version in '%.*s'", (int)n, item);
    const km_message_desc *md = km_find_message(KM_K_REQUEST, (int16_t)api);
    if (!md || v > md->valid.hi)
        return km_fail(err, "--max-version: %s has no v%ld in the codec", km_api_name((int16_t)api), v);
    if (api == KM_API_API_VERSIONS)
        cfg->max_api_versions = (int16_t)v;
    else if (api < KM_BSIM_APIS)
        cfg->max_version[api] = (int16_t)v;
    else
        return km_fail(err, "--max-version: the simulator does not serve %s", km_api_name((int16_t)api));
    return 0;
}

int km_bsim_parse_max_versions(km_bsim_config *cfg, const char *spec, km_err *err)
{
    while (spec && *spec) {
        size_t n = strcspn(spec, ",");
        if (n && parse_one(cfg, spec, n, err))
            return -1;
        spec += n + (spec[n] == ',');
    }
    return 0;
}

json_t *km_bsim_state_json(km_bsim *s)
{
    pthread_mutex_lock(&s->mu);
    json_t *j = bsim_state_to_json(&s->st);
    pthread_mutex_unlock(&s->mu);
    return j;
}

int km_bsim_dump_locked(km_bsim *s, const char *path, km_err *err)
{
    json_t *j = bsim_state_to_json(&s->st);
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int rc = j ? json_dump_file(j, tmp, JSON_INDENT(1) | JSON_SORT_KEYS) : -1;
    json_decref(j);
    if (rc || rename(tmp, path))
        return km_fail(err, "brokersim: cannot write the state dump %s", path);
    return 0;
}

int km_bsim_dump(km_bsim *s, const char *path, km_err *err)
{
    pthread_mutex_lock(&s->mu);
    int rc = km_bsim_dump_locked(s, path, err);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

void km_bsim_set_kraft_broker_epoch(km_bsim *s, int64_t epoch)
{
    pthread_mutex_lock(&s->mu);
    s->st.kraft_epoch = epoch;
    pthread_mutex_unlock(&s->mu);
}

void km_bsim_restart(km_bsim *s, int64_t epoch)
{
    km_bsim_drop_connections(s);
    pthread_mutex_lock(&s->mu);
    bsim_forget_metadata(&s->st);
    s->st.kraft_epoch = epoch;
    pthread_mutex_unlock(&s->mu);
}

uint64_t km_bsim_requests(km_bsim *s)
{
    pthread_mutex_lock(&s->mu);
    uint64_t n = s->st.total;
    pthread_mutex_unlock(&s->mu);
    return n;
}

void km_bsim_get_security_stats(km_bsim *s, km_bsim_security_stats *out)
{
    pthread_mutex_lock(&s->mu);
    *out = s->st.sec;
    pthread_mutex_unlock(&s->mu);
}

/* ---- thread mode --------------------------------------------------------------------- */

static void on_stop(struct ev_loop *loop, ev_async *w, int revents)
{
    (void)w;
    (void)revents;
    ev_break(loop, EVBREAK_ALL);
}

static void *run(void *arg)
{
    km_bsim *s = arg;
    ev_run(s->loop, 0);
    return NULL;
}

km_bsim *km_bsim_start_thread(const km_bsim_config *cfg, km_err *err)
{
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    if (!loop)
        return km_fail(err, "brokersim: cannot create an event loop"), NULL;
    km_bsim *s = km_bsim_new(loop, cfg, err);
    ev_async *stop = malloc(sizeof *stop);
    if (!s || !stop) {
        km_bsim_free(s);
        free(stop);
        ev_loop_destroy(loop);
        return s ? (km_fail(err, "brokersim: out of memory"), NULL) : NULL;
    }
    ev_async_init(stop, on_stop);
    ev_async_start(loop, stop);
    s->stop_async = stop;
    s->own_loop = true;
    if (pthread_create(&s->thread, NULL, run, s)) {
        km_bsim_stop_thread(s);
        return km_fail(err, "brokersim: cannot start a thread"), NULL;
    }
    s->threaded = true;
    return s;
}

void km_bsim_stop_thread(km_bsim *s)
{
    if (!s)
        return;
    struct ev_loop *loop = s->loop;
    if (s->threaded) {
        ev_async_send(loop, s->stop_async);
        pthread_join(s->thread, NULL);
    }
    ev_async_stop(loop, s->stop_async);
    free(s->stop_async);
    km_bsim_free(s);
    ev_loop_destroy(loop);
}

uint64_t km_bsim_cuts(km_bsim *s)
{
    pthread_mutex_lock(&s->mu);
    uint64_t n = s->st.cuts;
    pthread_mutex_unlock(&s->mu);
    return n;
}
