/* ports.c - ports for listeners a test starts later (a JVM, kmproxy's own listeners): the test cannot hold them
 * open until the server binds, so they are drawn where nothing else takes ports on its own. */
#include "km_testsupport.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static bool port_free(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bool ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
    close(fd);
    return ok;
}

/* Ports below the kernel's ephemeral range, so that no outgoing connection (the proxy's own
 * upstream ones, a test's thousand clients) can take a port a dynamic listener will want later. */
static int ephemeral_start(void)
{
    int lo = 32768, hi = 60999;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    if (f && fscanf(f, "%d %d", &lo, &hi) != 2)
        lo = 32768;
    if (f)
        fclose(f);
    return lo;
}

int km_test_free_port_base(int n)
{
    int below = ephemeral_start() - n - 1;
    cr_assert_gt(below, 12000, "no room below the ephemeral port range");
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now); /* two calls in one second must differ */
    unsigned seed = (unsigned)now.tv_nsec ^ (unsigned)getpid() << 8;
    for (int attempt = 0; attempt < 200; attempt++) {
        int base = 10000 + (int)(rand_r(&seed) % (unsigned)(below - 10000));
        bool ok = true;
        for (int i = 1; ok && i <= n; i++)
            ok = port_free(base + i);
        if (ok)
            return base;
    }
    cr_assert_fail("no free port range of %d", n);
    return -1;
}
