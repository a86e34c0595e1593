/* Paths, temp dirs and child processes for tests. */
#include "km_testsupport.h"

#include <errno.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

const char *km_test_shared_dir(void) { return getenv("KM_SHARED_DIR") ? getenv("KM_SHARED_DIR") : KM_SHARED_DIR; }
const char *km_test_binary(void) { return KM_BINARY; }
const char *km_test_source_dir(void) { return KM_SOURCE_DIR; }

const char *km_test_proxy_threads(char *buf, size_t cap)
{
    const char *n = getenv("KM_TEST_PROXY_THREADS");
    if (!n || !*n)
        return NULL;
    snprintf(buf, cap, "proxy.threads=%s", n);
    return buf;
}

char *km_test_tmpdir(const char *tag)
{
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    char *path = NULL;
    if (asprintf(&path, "%s/km-%s-XXXXXX", base, tag) < 0)
        return NULL;
    if (!mkdtemp(path)) {
        free(path);
        return NULL;
    }
    return path;
}

static int remove_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb; (void)flag; (void)ftw;
    return remove(p);
}

void km_test_rmtree(const char *path)
{
    if (path)
        nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* Appends what fd has to *buf; returns 0 at EOF, 1 if more may come. */
static int drain_fd(int fd, char **buf, size_t *len)
{
    char chunk[65536];
    ssize_t n = read(fd, chunk, sizeof chunk);
    if (n <= 0)
        return (n < 0 && errno == EINTR) ? 1 : 0;
    char *grown = realloc(*buf, *len + (size_t)n + 1);
    if (!grown)
        return 0;
    memcpy(grown + *len, chunk, (size_t)n);
    *len += (size_t)n;
    grown[*len] = '\0';
    *buf = grown;
    return 1;
}

void km_test_die_with_parent(int parent)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) /* it died before the prctl: nobody would kill us */
        _exit(127);
}

int km_test_run(char *const argv[], const void *in, size_t in_len,
                char **out, size_t *out_len, char **err_out)
{
    signal(SIGPIPE, SIG_IGN); /* a child that exits early must not kill the test */
    int pin[2], pout[2], perr[2];
    if (pipe(pin) || pipe(pout) || pipe(perr))
        return -1;
    pid_t parent = getpid(), pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        km_test_die_with_parent(parent);
        dup2(pin[0], 0); dup2(pout[1], 1); dup2(perr[1], 2);
        close(pin[1]); close(pout[0]); close(perr[0]);
        execv(argv[0], argv);
        _exit(127);
    }
    close(pin[0]); close(pout[1]); close(perr[1]);
    size_t written = 0, olen = 0, elen = 0;
    char *obuf = calloc(1, 1), *ebuf = calloc(1, 1);
    bool out_open = true, err_open = true;
    if (!in || in_len == 0) { close(pin[1]); pin[1] = -1; }
    while (out_open || err_open) {
        struct pollfd fds[3] = {{pout[0], POLLIN, 0}, {perr[0], POLLIN, 0}, {pin[1], POLLOUT, 0}};
        int nfds = pin[1] >= 0 ? 3 : 2;
        if (!out_open) fds[0].fd = -1;
        if (!err_open) fds[1].fd = -1;
        if (poll(fds, (nfds_t)nfds, -1) < 0 && errno != EINTR)
            break;
        if (fds[0].revents) out_open = drain_fd(pout[0], &obuf, &olen);
        if (fds[1].revents) err_open = drain_fd(perr[0], &ebuf, &elen);
        if (nfds == 3 && fds[2].revents) {
            ssize_t n = write(pin[1], (const char *)in + written, in_len - written);
            if (n > 0) written += (size_t)n;
            if (n < 0 || written == in_len) { close(pin[1]); pin[1] = -1; }
        }
    }
    if (pin[1] >= 0) close(pin[1]);
    close(pout[0]); close(perr[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (out) *out = obuf; else free(obuf);
    if (out_len) *out_len = olen;
    if (err_out) *err_out = ebuf; else free(ebuf);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}
