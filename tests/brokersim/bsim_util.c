/* Broker simulator: small containers.  Look-ups are linear: simulated clusters are
 * test-sized (hundreds of partitions), and a scan keeps the state trivially correct. */
#include "bsim_internal.h"

#include <stdlib.h>
#include <string.h>

char *bsim_strdup(km_str s)
{
    if (s.len < 0)
        return NULL;
    char *p = malloc((size_t)s.len + 1);
    if (p) {
        memcpy(p, s.ptr, (size_t)s.len);
        p[s.len] = '\0';
    }
    return p;
}

int bsim_ivec_set(bsim_ivec *dst, const int32_t *v, int32_t n)
{
    int32_t *copy = NULL;
    if (n > 0) {
        copy = malloc(sizeof *copy * (size_t)n);
        if (!copy)
            return -1;
        memcpy(copy, v, sizeof *copy * (size_t)n);
    }
    free(dst->v);
    dst->v = copy;
    dst->n = n > 0 ? n : 0;
    return 0;
}

void bsim_ivec_free(bsim_ivec *v)
{
    free(v->v);
    v->v = NULL;
    v->n = 0;
}

bool bsim_ivec_has(const int32_t *v, int32_t n, int32_t x)
{
    for (int32_t i = 0; i < n; i++)
        if (v[i] == x)
            return true;
    return false;
}

bsim_part *bsim_find_part(const bsim_state *st, const char *topic, int32_t partition, size_t *idx)
{
    for (size_t i = 0; i < st->n_parts; i++) {
        bsim_part *p = st->parts[i];
        if (p->partition == partition && !strcmp(p->topic, topic)) {
            if (idx)
                *idx = i;
            return p;
        }
    }
    return NULL;
}

bsim_mpart *bsim_find_mpart(const bsim_state *st, const char *topic, int32_t partition, size_t *idx)
{
    for (size_t i = 0; i < st->n_mparts; i++) {
        bsim_mpart *p = st->mparts[i];
        if (p->partition == partition && !strcmp(p->topic, topic)) {
            if (idx)
                *idx = i;
            return p;
        }
    }
    return NULL;
}

void bsim_remove_part(bsim_state *st, size_t idx)
{
    bsim_part *p = st->parts[idx];
    free(p->topic);
    bsim_ivec_free(&p->isr);
    bsim_ivec_free(&p->replicas);
    bsim_ivec_free(&p->adding);
    bsim_ivec_free(&p->removing);
    free(p);
    st->parts[idx] = st->parts[--st->n_parts];
}

void bsim_remove_mpart(bsim_state *st, size_t idx)
{
    bsim_mpart *p = st->mparts[idx];
    free(p->topic);
    bsim_ivec_free(&p->isr);
    bsim_ivec_free(&p->replicas);
    bsim_ivec_free(&p->offline);
    free(p);
    st->mparts[idx] = st->mparts[--st->n_mparts];
}

int bsim_push(void ***arr, size_t *n, size_t *cap, void *item)
{
    if (*n == *cap) {
        size_t ncap = *cap ? *cap * 2 : 16;
        void **grown = realloc(*arr, ncap * sizeof *grown);
        if (!grown)
            return -1;
        *arr = grown;
        *cap = ncap;
    }
    (*arr)[(*n)++] = item;
    return 0;
}
