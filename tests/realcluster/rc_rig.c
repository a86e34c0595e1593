/* rc_rig.c - driving tests/realcluster/rig.py from a Criterion test (rc_rig.h). */
#include "rc_rig.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "km_testsupport.h"

#define RIG_READY_TIMEOUT_S 900 /* rig.py gives up on its own first (KM_RIG_WAIT_S per step) */

bool rc_require(void)
{
    const char *ci = getenv("CI"), *req = getenv("KM_REQUIRE_REALKAFKA");
    return (ci && *ci && strcmp(ci, "0") && strcmp(ci, "false")) || (req && !strcmp(req, "1"));
}

static char *slurp_fd(int fd)
{
    size_t len = 0, cap = 4096;
    char *buf = malloc(cap);
    ssize_t n;
    while (buf && (n = read(fd, buf + len, cap - len - 1)) > 0) {
        len += (size_t)n;
        if (cap - len < 2048) {
            char *grown = realloc(buf, cap * 2);
            if (!grown)
                break;
            buf = grown;
            cap *= 2;
        }
    }
    if (buf)
        buf[len] = '\0';
    return buf;
}

const char *rc_cache(char *why, size_t cap)
{
    static char cache[1024];
    if (cache[0])
        return cache;
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "command -v python3 >/dev/null || { echo 'python3 not found'; exit 69; }; "
             "%s/tests/realcluster/fetch-kafka 2>&1", km_test_source_dir());
    FILE *p = popen(cmd, "r");
    if (!p)
        return snprintf(why, cap, "cannot run fetch-kafka: %s", strerror(errno)), NULL;
    char *out = slurp_fd(fileno(p));
    int status = pclose(p);
    int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
    if (rc || !out) {
        snprintf(why, cap, "%s (fetch-kafka exit %d): %.800s", rc == 69 ? "Java, Maven or python3 missing"
                 : "fetching Kafka's jars failed", rc, out ? out : "");
        free(out);
        return NULL;
    }
    char *nl = strrchr(out, '\n');
    if (nl && !nl[1])
        *nl = '\0';
    nl = strrchr(out, '\n'); /* the last line is the directory; Maven's notes may precede it */
    snprintf(cache, sizeof cache, "%s", nl ? nl + 1 : out);
    free(out);
    return cache;
}

const char *rc_cache_or_skip(void)
{
    char why[1024];
    const char *cache = rc_cache(why, sizeof why);
    if (cache)
        return cache;
    if (rc_require())
        cr_assert_fail("real-cluster suite required here (CI or KM_REQUIRE_REALKAFKA=1): %s", why);
    cr_skip_test("real Kafka cluster unavailable: %s", why);
    return NULL;
}

/* One line from the rig, up to timeout_s; NULL at its end or on timeout. */
static char *read_line(rc_rig *r, int timeout_s)
{
    size_t len = 0, cap = 1 << 16;
    char *line = malloc(cap);
    time_t deadline = time(NULL) + timeout_s;
    while (line) {
        struct pollfd pfd = {.fd = r->from_rig, .events = POLLIN};
        int left = (int)(deadline - time(NULL));
        if (left <= 0 || poll(&pfd, 1, left * 1000) <= 0)
            break;
        char c;
        ssize_t n = read(r->from_rig, &c, 1);
        if (n <= 0)
            break;
        if (c == '\n') {
            line[len] = '\0';
            return line;
        }
        if (len + 2 >= cap) {
            char *grown = realloc(line, cap * 2);
            if (!grown)
                break;
            line = grown;
            cap *= 2;
        }
        line[len++] = c;
    }
    free(line);
    return NULL;
}

static void copy_str(char *dst, size_t cap, json_t *v)
{
    snprintf(dst, cap, "%s", json_string_value(v) ? json_string_value(v) : "");
}

static int parse_nodes(json_t *arr, rc_node *nodes)
{
    size_t i;
    json_t *n;
    json_array_foreach(arr, i, n) {
        if (i >= RC_MAX_NODES)
            break;
        nodes[i].id = (int)json_integer_value(json_object_get(n, "id"));
        nodes[i].port = (int)json_integer_value(json_object_get(n, "port"));
        copy_str(nodes[i].dir, sizeof nodes[i].dir, json_object_get(n, "dir"));
    }
    return (int)(json_array_size(arr) < RC_MAX_NODES ? json_array_size(arr) : RC_MAX_NODES);
}

static int parse_ready(rc_rig *r, const char *json)
{
    json_error_t jerr;
    r->ready = json_loads(json, 0, &jerr);
    if (!r->ready)
        return -1;
    copy_str(r->zk, sizeof r->zk, json_object_get(r->ready, "zookeeper"));
    copy_str(r->bootstrap, sizeof r->bootstrap, json_object_get(r->ready, "bootstrap"));
    copy_str(r->voters, sizeof r->voters, json_object_get(r->ready, "voters"));
    copy_str(r->cluster_id, sizeof r->cluster_id, json_object_get(r->ready, "cluster_id"));
    copy_str(r->tools, sizeof r->tools, json_object_get(r->ready, "tool_classes"));
    r->classpath = strdup(json_string_value(json_object_get(r->ready, "classpath")) ?: "");
    r->nbrokers = parse_nodes(json_object_get(r->ready, "brokers"), r->brokers);
    r->ncontrollers = parse_nodes(json_object_get(r->ready, "controllers"), r->controllers);
    r->start_s = json_real_value(json_object_get(r->ready, "start_s"));
    r->rss_total_kib = (long)json_integer_value(json_object_get(r->ready, "rss_total_kib"));
    return 0;
}

static void exec_rig(rc_rig *r, const char *cache, int controllers, const char *const *extra, int in[2], int out[2],
                     pid_t parent)
{
    km_test_die_with_parent(parent);
    dup2(in[0], 0);
    dup2(out[1], 1);
    char log[600], script[1024], ctl[16];
    snprintf(log, sizeof log, "%s/rig.log", r->dir);
    int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0)
        dup2(fd, 2);
    for (int i = 3; i < 1024; i++)
        close(i);
    snprintf(script, sizeof script, "%s/tests/realcluster/rig.py", km_test_source_dir());
    snprintf(ctl, sizeof ctl, "%d", controllers);
    const char *fixed[] = {"python3", script, "up", "--dir", r->dir, "--controllers", ctl, "--cache", cache};
    const char *argv[64];
    size_t n = 0;
    for (; n < sizeof fixed / sizeof *fixed; n++)
        argv[n] = fixed[n];
    for (; extra && *extra && n < sizeof argv / sizeof *argv - 1; extra++)
        argv[n++] = *extra;
    argv[n] = NULL;
    execvp("python3", (char *const *)argv);
    _exit(127);
}

rc_rig *rc_rig_start(int controllers, char *why, size_t cap)
{
    return rc_rig_start_with(controllers, NULL, why, cap);
}

rc_rig *rc_rig_start_with(int controllers, const char *const *extra, char *why, size_t cap)
{
    const char *cache = rc_cache(why, cap);
    if (!cache)
        return NULL;
    rc_rig *r = calloc(1, sizeof *r);
    char *tmp = km_test_tmpdir("realcluster");
    snprintf(r->dir, sizeof r->dir, "%s", tmp);
    free(tmp);
    int in[2], out[2];
    if (pipe(in) || pipe(out))
        return snprintf(why, cap, "pipe: %s", strerror(errno)), free(r), NULL;
    pid_t parent = getpid();
    r->pid = fork();
    if (r->pid == 0)
        exec_rig(r, cache, controllers, extra, in, out, parent);
    close(in[0]);
    close(out[1]);
    r->to_rig = in[1];
    r->from_rig = out[0];
    signal(SIGPIPE, SIG_IGN);
    char *line = read_line(r, RIG_READY_TIMEOUT_S);
    if (line && !strncmp(line, "ready ", 6) && !parse_ready(r, line + 6)) {
        free(line);
        fprintf(stderr, "realcluster: rig up in %.1f s, RSS %ld MiB (%d brokers, %d controllers, ZooKeeper)\n",
                r->start_s, r->rss_total_kib / 1024, r->nbrokers, r->ncontrollers);
        return r;
    }
    char *tails = rc_rig_tails(r, 25), kept[1200];
    rc_rig_stop_kept(r, kept, sizeof kept);
    snprintf(why, cap, "rig did not reach dual-write: %.300s\nlogs kept in %s\n%s", line ? line : "(no answer)", kept,
             tails ? tails : "");
    free(tails);
    free(line);
    return NULL;
}

char *rc_rig_cmd(rc_rig *r, const char *fmt, ...)
{
    char cmd[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(cmd, sizeof cmd - 1, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof cmd - 1)
        return NULL;
    cmd[n++] = '\n';
    if (write(r->to_rig, cmd, (size_t)n) != n)
        return NULL;
    return read_line(r, RIG_READY_TIMEOUT_S);
}

/* Where a failed test's logs go: $KM_RC_LOG_DIR, else realcluster-logs/ in the build tree (beside the kmproxy
 * binary), one folder per suite and test. */
static void kept_logs_dir(char *dest, size_t cap)
{
    const struct criterion_test *t = criterion_current_test;
    const char *suite = t && t->category ? t->category : "suite", *test = t && t->name ? t->name : "test";
    const char *base = getenv("KM_RC_LOG_DIR");
    if (base && *base) {
        snprintf(dest, cap, "%s/%s/%s", base, suite, test);
        return;
    }
    char build[600];
    snprintf(build, sizeof build, "%s", km_test_binary());
    char *slash = strrchr(build, '/');
    snprintf(dest, cap, "%.*s/realcluster-logs/%s/%s", slash ? (int)(slash - build) : 1, slash ? build : ".", suite,
             test);
}

int rc_keep_logs(const char *dir, char *dest, size_t cap)
{
    kept_logs_dir(dest, cap);
    /* Every node's logs and configuration, not its data: Kafka's partition logs (logs/), the controllers'
     * metadata log (metadata/) and ZooKeeper's snapshots (data/) are large and say nothing a reader needs. */
    char *out = NULL;
    char *argv[] = {"/bin/sh", "-c",
                    "rm -rf \"$2\" && mkdir -p \"$2\" && cd \"$1\" && "
                    "find . -type f \\( -name '*.log' -o -name '*.properties' -o -name zoo.cfg \\) "
                    "-not -path '*/logs/*' -not -path '*/metadata/*' -not -path '*/data/*' "
                    "-exec cp --parents {} \"$2\" \\; && [ -n \"$(ls -A \"$2\")\" ]",
                    "rc_keep_logs", (char *)dir, dest, NULL};
    int rc = km_test_run(argv, NULL, 0, &out, NULL, NULL);
    free(out);
    if (rc != 0)
        snprintf(dest + strlen(dest), cap - strlen(dest), " (copying from %s failed, exit %d)", dir, rc);
    return rc == 0 ? 0 : -1;
}

void rc_rig_stop_kept(rc_rig *r, char *kept, size_t cap)
{
    if (!r) {
        if (kept)
            snprintf(kept, cap, "(nowhere: no rig was running)");
        return;
    }
    if (r->to_rig > 0) {
        if (write(r->to_rig, "down\n", 5) < 0) { /* gone already: waitpid below reaps it */
        }
        close(r->to_rig);
    }
    if (r->from_rig > 0)
        close(r->from_rig);
    if (r->pid > 0) {
        for (int i = 0; i < 1200 && waitpid(r->pid, NULL, WNOHANG) == 0; i++)
            usleep(100 * 1000);
        if (kill(r->pid, SIGKILL) == 0) /* its children die with it (PR_SET_PDEATHSIG) */
            waitpid(r->pid, NULL, 0);
    }
    if (kept) {
        if (rc_keep_logs(r->dir, kept, cap) == 0)
            fprintf(stderr, "realcluster: Kafka's, ZooKeeper's and kmproxy's logs kept in %s\n", kept);
        else
            fprintf(stderr, "realcluster: the logs could not be kept: %s\n", kept);
    }
    km_test_rmtree(r->dir); /* inside the run's TMPDIR, which run_dir.c removes after the last test anyway */
    json_decref(r->ready);
    free(r->classpath);
    free(r);
}

void rc_rig_stop(rc_rig *r, bool keep_logs)
{
    char kept[1200];
    rc_rig_stop_kept(r, keep_logs ? kept : NULL, sizeof kept);
}

char *rc_rig_tails(const rc_rig *r, int lines)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "cd '%s' 2>/dev/null && for f in rig.log */server.log */stdout.log kmproxy*.log; do [ -s \"$f\" ] && "
             "{ echo \"==== $f\"; tail -n %d \"$f\" | cut -c1-400; }; done", r->dir, lines);
    FILE *p = popen(cmd, "r");
    if (!p)
        return NULL;
    char *out = slurp_fd(fileno(p));
    pclose(p);
    return out;
}

int rc_sh(const rc_rig *r, char **out, const char *fmt, ...)
{
    char *line = NULL;
    va_list ap;
    va_start(ap, fmt);
    if (vasprintf(&line, fmt, ap) < 0)
        line = NULL;
    va_end(ap);
    if (!line)
        return -1;
    setenv("CP", r->classpath, 1);
    char tools[1100];
    snprintf(tools, sizeof tools, "%s", r->tools);
    setenv("TOOLS", tools, 1);
    setenv("BS", r->bootstrap, 1);
    setenv("ZK", r->zk, 1);
    setenv("DIR", r->dir, 1);
    setenv("JAVA", "java -Xmx128m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Dlog4j.configuration=file:/dev/null", 1);
    char *argv[] = {"/bin/bash", "-c", line, NULL};
    char *err = NULL;
    int rc = km_test_run(argv, NULL, 0, out, NULL, &err);
    if (out && *out && err && *err) {
        char *both = NULL;
        if (asprintf(&both, "%s%s", *out, err) >= 0) {
            free(*out);
            *out = both;
        }
    }
    free(err);
    free(line);
    return rc;
}

char *rc_read_log(const rc_rig *r, const char *kind, int id)
{
    char path[700];
    snprintf(path, sizeof path, "%s/%s-%d/server.log", r->dir, kind, id);
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return strdup("");
    char *s = slurp_fd(fd);
    close(fd);
    return s ? s : strdup("");
}

/* `kmproxy run --config DIR/NAME.properties` (written with the quorum keys, then `keys`), output in LOG. */
static pid_t spawn_kmproxy(const rc_rig *r, const char *name, const char *keys, char *log, size_t cap)
{
    char config[700];
    snprintf(config, sizeof config, "%s/%s.properties", r->dir, name);
    snprintf(log, cap, "%s/%s.log", r->dir, name);
    FILE *f = fopen(config, "w");
    cr_assert(f, "%s: %s", config, strerror(errno));
    fprintf(f, "metadata.source=quorum\ncontroller.quorum.voters=%s\ncontroller.listener.names=CONTROLLER\n"
               "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT\nmetrics.listen=127.0.0.1:0\n"
               "%s", r->voters, keys);
    fclose(f);
    pid_t parent = getpid(), pid = fork();
    if (pid == 0) {
        km_test_die_with_parent(parent);
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        execl(km_test_binary(), "kmproxy", "run", "--config", config, (char *)NULL);
        _exit(127);
    }
    return pid;
}

pid_t rc_kmproxy_run(const rc_rig *r, const char *name, const char *extra, char *log, size_t cap)
{
    return rc_kmproxy_run_via(r, name, r->zk, extra, log, cap);
}

pid_t rc_kmproxy_run_via(const rc_rig *r, const char *name, const char *zk, const char *extra, char *log, size_t cap)
{
    char keys[2048];
    snprintf(keys, sizeof keys, "zookeeper.connect=%s\nbrokers.enabled=true\n%s", zk, extra ? extra : "");
    return spawn_kmproxy(r, name, keys, log, cap);
}

pid_t rc_kmproxy_check_only(const rc_rig *r, const char *name, int interval_ms, char *log, size_t cap)
{
    char keys[256];
    snprintf(keys, sizeof keys, "brokers.enabled=false\nverify.interval.ms=%d\nverify.timeout.ms=5000\n", interval_ms);
    return spawn_kmproxy(r, name, keys, log, cap);
}

int rc_kmproxy_metrics_port(const char *log, int timeout_s)
{
    static const char mark[] = "metrics on http://127.0.0.1:";
    for (int i = 0; i < timeout_s * 5; i++, usleep(200 * 1000)) {
        FILE *f = fopen(log, "r");
        char line[4096];
        const char *at = NULL;
        while (f && !at && fgets(line, sizeof line, f))
            at = strstr(line, mark);
        if (f)
            fclose(f);
        if (at)
            return atoi(at + sizeof mark - 1);
    }
    return -1;
}

json_t *rc_kmproxy_get(int port, const char *path, char **text)
{
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, path);
    char *argv[] = {"/usr/bin/curl", "-s", "--max-time", "10", url, NULL}, *out = NULL;
    int rc = km_test_run(argv, NULL, 0, &out, NULL, NULL);
    json_error_t jerr;
    json_t *j = rc == 0 && out ? json_loads(out, 0, &jerr) : NULL; /* /metrics is no JSON: NULL */
    if (text)
        *text = out;
    else
        free(out);
    return j;
}

long rc_kmproxy_verify_cycles(int port)
{
    json_t *st = rc_kmproxy_get(port, "/status", NULL);
    long cycles = st ? (long)json_integer_value(json_object_get(json_object_get(st, "verify"), "cycles")) : -1;
    json_decref(st);
    return cycles;
}

void rc_verify_streaks(const char *log, long from, long to, rc_streaks *s)
{
    memset(s, 0, sizeof *s);
    FILE *f = fopen(log, "r");
    char line[4096], verdict[32];
    long bad_since = -1, cycle;
    while (f && fgets(line, sizeof line, f)) {
        const char *at = strstr(line, "verify: cycle ");
        if (!at || sscanf(at, "verify: cycle %ld: the brokers are %31s", &cycle, verdict) != 2 || cycle > to)
            continue;
        bool bad = strcmp(verdict, "consistent") != 0;
        /* a streak that ended inside the window; one whose bad checks all came before it (the window opened on
         * the last of them) is not counted */
        long len = cycle - (bad_since > from ? bad_since : from + 1);
        if (!bad && bad_since >= 0 && cycle > from && len > 0) {
            s->longest = len > s->longest ? len : s->longest;
            s->streaks++;
        }
        bad_since = bad ? (bad_since >= 0 ? bad_since : cycle) : -1;
    }
    if (f)
        fclose(f);
    if (bad_since >= 0) { /* still not consistent at the window's end */
        long len = to - (bad_since > from ? bad_since : from + 1) + 1;
        s->longest = len > s->longest ? len : s->longest;
        s->streaks++;
        s->open = true;
    }
}

void rc_admin(rc_rig *r, const char *ops)
{
    char *out = NULL;
    int rc = rc_sh(r, &out, "$JAVA -cp \"$CP:$TOOLS\" RcAdmin $BS %s 2>&1 | grep -v log4j; exit ${PIPESTATUS[0]}",
                   ops);
    rc_assert(r, rc == 0, "Admin API calls failed (%d): %s\n%s", rc, ops, out ? out : "");
    free(out);
}

/* kafka.tools.DumpLogSegments over the broker's segments of TOPIC-0, summed by awk (rc_rig.h). */
bool rc_dumped_log(rc_rig *r, int broker, const char *topic, int64_t from, int64_t below, int64_t *bytes,
                   int64_t *end, int64_t *batches)
{
    char *out = NULL;
    rc_sh(r, &out, "$JAVA -cp \"$CP\" kafka.tools.DumpLogSegments --files $(ls $DIR/broker-%d/logs/%s-0/*.log | "
          "paste -sd,) 2>/dev/null | awk -v t=%lld -v hw=%lld '/^baseOffset:/ { for (i = 1; i < NF; i++) { "
          "if ($i == \"baseOffset:\") b = $(i + 1); if ($i == \"lastOffset:\") l = $(i + 1); "
          "if ($i == \"size:\") s = $(i + 1) } n++; if (l >= t && b < hw) sum += s; if (l + 1 > e) e = l + 1 } "
          "END { print n + 0, sum + 0, e + 0 }'", broker, topic, (long long)from, (long long)below);
    long long n = 0, sum = 0, e = 0;
    bool ok = out && sscanf(out, "%lld %lld %lld", &n, &sum, &e) == 3 && n > 0;
    fprintf(stderr, "realcluster: DumpLogSegments of broker %d's %s-0 from %lld below %lld: %s", broker, topic,
            (long long)from, (long long)below, out ? out : "(nothing)\n");
    free(out);
    *bytes = sum, *end = e, *batches = n;
    return ok;
}
