/* Reconnect backoff: exponential with equal jitter, generator state in the struct. */
#include "km_net.h"

#include <math.h>

/* splitmix64: tiny, seedable, good enough to spread reconnects. */
static uint64_t next_u64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void km_backoff_init(km_backoff *b, double base, double max, uint64_t seed)
{
    b->base = base > 0 ? base : 0.1;
    b->max = max >= b->base ? max : b->base;
    b->attempt = 0;
    b->rng = seed;
}

double km_backoff_next(km_backoff *b)
{
    /* 2^attempt past 2^62 is far beyond any max, so stop counting there */
    double cap = fmin(b->max, ldexp(b->base, (int)(b->attempt < 62 ? b->attempt : 62)));
    if (b->attempt < 62)
        b->attempt++;
    double unit = (double)(next_u64(&b->rng) >> 11) / (double)(1ull << 53); /* [0, 1) */
    return cap / 2 + unit * (cap / 2);
}

void km_backoff_reset(km_backoff *b) { b->attempt = 0; }
