/* The ZooKeeper a suite runs on, chosen by KM_TEST_ZK_SECURE (see zksecmode.h). */
#include "zksecmode.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool km_zksec_on(void)
{
    const char *mode = getenv("KM_TEST_ZK_SECURE");
    if (!mode || !*mode)
        return false;
    if (!strcmp(mode, "sasl"))
        return true;
    fprintf(stderr, "KM_TEST_ZK_SECURE=%s: unknown (want sasl, or unset for a plain ZooKeeper)\n", mode);
    abort();
}

km_zks *km_zksec_start(int n, char *err, size_t errlen)
{
    km_zks_options opt = {0};
    if (km_zksec_on()) {
        opt.sasl_users = "user_" KM_ZKSEC_USER "=\"" KM_ZKSEC_PASSWORD "\"";
        opt.require_sasl = true;
    }
    return km_zks_start_opts(n, &opt, err, errlen);
}

static km_zkc *open_session(const char *hosts, const clientid_t *id, int timeout_ms)
{
    if (!km_zksec_on())
        return km_zkc_open(hosts, id, timeout_ms);
    km_zkc_auth auth = {.sasl_user = KM_ZKSEC_USER, .sasl_password = KM_ZKSEC_PASSWORD, .session = id};
    return km_zkc_open_auth(hosts, &auth, timeout_ms);
}

km_zkc *km_zksec_open(const char *hosts, int timeout_ms) { return open_session(hosts, NULL, timeout_ms); }

int km_zksec_expire_session(const char *hosts, const clientid_t *id)
{
    km_zkc *twin = open_session(hosts, id, 10000);
    if (!twin)
        return -1;
    km_zkc_close(twin); /* closing the shared session ends it for the owner too */
    return 0;
}

const km_zk_security *km_zksec_security(void)
{
    static const km_zk_security sasl = {.sasl_mechanism = "DIGEST-MD5", .sasl_username = KM_ZKSEC_USER,
                                        .sasl_password = KM_ZKSEC_PASSWORD, .set_acl = true};
    return km_zksec_on() ? &sasl : NULL;
}

/* dir/zk-client-jaas.conf: the Client section a ZK-mode broker's JAAS file has. */
static const char *write_jaas(const char *dir)
{
    static char path[1024];
    snprintf(path, sizeof path, "%s/zk-client-jaas.conf", dir);
    FILE *f = fopen(path, "w");
    if (!f)
        return NULL;
    fputs("Client {\n  org.apache.zookeeper.server.auth.DigestLoginModule required\n"
          "  username=\"" KM_ZKSEC_USER "\" password=\"" KM_ZKSEC_PASSWORD "\";\n};\n", f);
    return fclose(f) ? NULL : path;
}

const char *const *km_zksec_daemon_settings(const char *dir)
{
    static char jaas_key[1100];
    static const char *set[3];
    const char *jaas = km_zksec_on() ? write_jaas(dir) : NULL;
    set[0] = NULL;
    if (jaas) {
        snprintf(jaas_key, sizeof jaas_key, "java.security.auth.login.config=%s", jaas);
        set[0] = jaas_key;
        set[1] = "zookeeper.set.acl=true";
        set[2] = NULL;
    }
    return set;
}

const char *km_zksec_zk_config(const char *dir)
{
    static char path[1024];
    const char *const *set = km_zksec_daemon_settings(dir);
    if (!set[0])
        return NULL;
    snprintf(path, sizeof path, "%s/zk-client.properties", dir);
    FILE *f = fopen(path, "w");
    if (!f)
        return NULL;
    for (int i = 0; set[i]; i++)
        fprintf(f, "%s\n", set[i]);
    return fclose(f) ? NULL : path;
}

/* The ACL a znode created by KM_ZKSEC_USER gets from Kafka's: "auth" stands for the creator. */
static bool acl_is(const struct ACL_vector *got, const struct ACL_vector *want)
{
    if (got->count != want->count)
        return false;
    for (int i = 0; i < want->count; i++) {
        const struct ACL *g = &got->data[i], *w = &want->data[i];
        bool creator = !strcmp(w->id.scheme, "auth");
        if (g->perms != w->perms || strcmp(g->id.scheme, creator ? "sasl" : w->id.scheme) ||
            strcmp(g->id.id, creator ? KM_ZKSEC_USER : w->id.id))
            return false;
    }
    return true;
}

static bool check_tree(km_zkc *c, const char *path, char *why, size_t whylen)
{
    struct ACL_vector acl;
    int rc = km_zkc_get_acl(c, path, &acl);
    if (rc == ZNONODE)
        return true; /* deleted meanwhile */
    if (rc != ZOK)
        return snprintf(why, whylen, "getAcl %s: %s", path, zerror(rc)), false;
    bool ok = acl_is(&acl, km_zk_acl_for(km_zksec_security(), path));
    if (!ok)
        snprintf(why, whylen, "%s: %d ACL entries, the first %s:%s perms %d: not Kafka's", path, acl.count,
                 acl.count ? acl.data[0].id.scheme : "-", acl.count ? acl.data[0].id.id : "-",
                 acl.count ? acl.data[0].perms : 0);
    deallocate_ACL_vector(&acl);
    char **kids = NULL;
    int n = 0;
    if (ok && km_zkc_children(c, path, &kids, &n) == ZOK)
        for (int i = 0; ok && i < n; i++) {
            char child[1024];
            snprintf(child, sizeof child, "%s/%s", strcmp(path, "/") ? path : "", kids[i]);
            ok = !strcmp(child, "/zookeeper") || check_tree(c, child, why, whylen);
        }
    km_zkc_free_strings(kids, n);
    return ok;
}

bool km_zksec_acls_are_kafkas(km_zkc *c, char *why, size_t whylen)
{
    char **kids = NULL;
    int n = 0;
    bool ok = km_zkc_children(c, "/", &kids, &n) == ZOK;
    if (!ok)
        snprintf(why, whylen, "cannot list /");
    for (int i = 0; ok && i < n; i++) {
        char child[1024];
        snprintf(child, sizeof child, "/%s", kids[i]);
        ok = !strcmp(child, "/zookeeper") || check_tree(c, child, why, whylen);
    }
    km_zkc_free_strings(kids, n);
    return ok;
}
