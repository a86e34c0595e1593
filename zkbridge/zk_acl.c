/* Kafka's ACLs for the znodes it creates (zookeeper.set.acl=true): kafka.zk.ZkData.defaultAcls and
 * ZkData.sensitivePath in Kafka 3.9. One function decides for every create we send. */
#include "zk_internal.h"

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
