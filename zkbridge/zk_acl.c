/* Kafka's ACLs for the znodes it creates (zookeeper.set.acl=true): kafka.zk.ZkData.defaultAcls and
 * ZkData.sensitivePath in Kafka 3.9. One function decides for every create we send. */
#include "zk_bridge.h"

#include <string.h>
#include <zookeeper/zookeeper.h>

/* ZkData.SensitiveRootPaths: /config/users, /config/brokers, /delegation_token/tokens, matched
 * with String.startsWith as Kafka does (so /config/users itself is sensitive too). */
bool km_zk_is_sensitive_path(const char *path)
{
    static const char *const roots[] = {"/config/users", "/config/brokers", "/delegation_token/tokens"};
    for (size_t i = 0; path && i < sizeof roots / sizeof roots[0]; i++)
        if (!strncmp(path, roots[i], strlen(roots[i])))
            return true;
    return false;
}

/* ZooDefs.Ids.CREATOR_ALL_ACL plus READ_ACL_UNSAFE, or CREATOR_ALL_ACL alone on sensitive paths;
 * /consumers (the old consumers' tree) stays open; without set.acl everything is open (Kafka's
 * isSecure=false). */
const struct ACL_vector *km_zk_acl_for(const km_zk_security *sec, const char *path)
{
    enum { PERM_READ = 1, PERM_ALL = 0x1f }; /* ZooDefs.Perms (the C client's are not constants) */
    static struct ACL creator_read[] = {
        {PERM_ALL, {"auth", ""}},
        {PERM_READ, {"world", "anyone"}},
    };
    static struct ACL_vector creator_read_acl = {2, creator_read};
    if (!sec || !sec->set_acl || !strcmp(path, "/consumers"))
        return &ZOO_OPEN_ACL_UNSAFE;
    return km_zk_is_sensitive_path(path) ? &ZOO_CREATOR_ALL_ACL : &creator_read_acl;
}

/* ---- zk diff: znodes whose ACL is not what Kafka would have given them ----
 * The creator's identity ("auth" at create time) is whatever the creating session was: a broker's
 * or ours, SASL, x509 or digest. So the check is on the shape ZkData.defaultAcls gives: creator
 * entries with every permission (any scheme but world), plus world:anyone READ on an ordinary path
 * and nothing for the world on a sensitive one; /consumers open to the world. */
static bool kafka_shaped(const struct ACL_vector *acl, const char *path)
{
    enum { PERM_READ = 1, PERM_ALL = 0x1f };
    bool sensitive = km_zk_is_sensitive_path(path), consumers = !strcmp(path, "/consumers");
    int creators = 0, world_read = 0;
    for (int i = 0; i < acl->count; i++) {
        const struct ACL *a = &acl->data[i];
        bool world = !strcmp(a->id.scheme, "world") && !strcmp(a->id.id, "anyone");
        if (consumers)
            return acl->count == 1 && world && a->perms == PERM_ALL;
        if (world && a->perms == PERM_READ && !sensitive)
            world_read++;
        else if (!world && a->perms == PERM_ALL)
            creators++;
        else
            return false;
    }
    return creators > 0 && world_read == (sensitive ? 0 : 1);
}

static void acl_line(zstr *out, const char *path, const struct ACL_vector *acl)
{
    zs_fmt(out, "! %s: ACL ", path);
    for (int i = 0; i < acl->count; i++)
        zs_fmt(out, "%s%s:%s=%d", i ? "," : "", acl->data[i].id.scheme, acl->data[i].id.id, acl->data[i].perms);
    zs_fmt(out, "; Kafka writes %s\n", !strcmp(path, "/consumers") ? "world:anyone=ALL"
                                     : km_zk_is_sensitive_path(path) ? "creator-all only (a sensitive path)"
                                                                     : "creator-all plus world:anyone=READ");
}

typedef struct acl_req {
    zk_acl_diff *d;
    char *path;
} acl_req;

static void acl_pump(zk_acl_diff *d);

static void on_acl(int rc, struct ACL_vector *acl, struct Stat *st, const void *data)
{
    (void)st;
    acl_req *r = (acl_req *)data;
    zk_acl_diff *d = r->d;
    if (rc == ZOK && !kafka_shaped(acl, r->path)) {
        d->differ++;
        acl_line(d->out, r->path, acl);
    } else if (rc != ZOK && rc != ZNONODE && d->rc == ZOK) {
        d->rc = rc;
    }
    free(r->path);
    free(r);
    d->inflight--;
    acl_pump(d);
}

static void acl_pump(zk_acl_diff *d)
{
    while (d->rc == ZOK && d->next < d->n && d->inflight < 256) {
        acl_req *r = malloc(sizeof *r);
        if (!r || !(r->path = strdup(d->paths[d->next]))) {
            free(r);
            d->rc = ZSYSTEMERROR;
            break;
        }
        r->d = d;
        if (zoo_aget_acl(d->zh, r->path, on_acl, r) != ZOK) {
            free(r->path);
            free(r);
            d->rc = ZCONNECTIONLOSS;
            break;
        }
        d->next++;
        d->inflight++;
    }
    if (d->inflight == 0 && (d->next == d->n || d->rc != ZOK) && !d->finished) {
        d->finished = true;
        d->done(d, d->ctx);
    }
}

void zk_acl_diff_start(zk_acl_diff *d, zhandle_t *zh, const zk_tree *read, zstr *out,
                       void (*done)(zk_acl_diff *, void *), void *ctx)
{
    memset(d, 0, sizeof *d);
    *d = (zk_acl_diff){.zh = zh, .out = out, .done = done, .ctx = ctx};
    d->paths = calloc(read->n ? read->n : 1, sizeof *d->paths);
    for (size_t i = 0; d->paths && i < read->n; i++)
        if (!(d->paths[d->n++] = strdup(read->v[i].path)))
            d->rc = ZSYSTEMERROR;
    if (!d->paths)
        d->rc = ZSYSTEMERROR;
    acl_pump(d);
}

void zk_acl_diff_free(zk_acl_diff *d)
{
    for (size_t i = 0; d->paths && i < d->n; i++)
        free(d->paths[i]);
    free(d->paths);
    d->paths = NULL;
    d->n = 0;
}
