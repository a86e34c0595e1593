/* zksecmode.h - the ZooKeeper a suite runs on, chosen by the environment: KM_TEST_ZK_SECURE unset
 * (or empty) is a plain server; "sasl" is one that requires SASL (requireClientAuthScheme=sasl,
 * a JAAS DIGEST-MD5 user) with every client, kmproxy's included, on zookeeper.set.acl=true. The
 * chaos and HA suites take their server, their own client, the bridge's security and kmproxy's
 * settings from here, so ctest runs the same binaries a second time on the secured server. */
#ifndef KM_ZKSECMODE_H
#define KM_ZKSECMODE_H

#include "km_zkbridge.h"
#include "zkserver.h"

#include <stdbool.h>
#include <stddef.h>

#define KM_ZKSEC_USER "kafka"
#define KM_ZKSEC_PASSWORD "kafka-secret"

/* True in secure mode. An unknown KM_TEST_ZK_SECURE value aborts, naming it (never a silent plain run). */
bool km_zksec_on(void);
/* km_zks_start in the selected mode (n servers, no snapshot, default jute.maxbuffer). */
km_zks *km_zksec_start(int n, char *err, size_t errlen);
/* The test's own client: authenticated as KM_ZKSEC_USER in secure mode. */
km_zkc *km_zksec_open(const char *hosts, int timeout_ms);
/* Ends session `id` as the server does on a timeout (km_zks_expire_session), the twin client
 * authenticating first in secure mode (an unauthenticated one is cut off before it can close). */
int km_zksec_expire_session(const char *hosts, const clientid_t *id);
/* The bridge's and writer's security: NULL in plain mode. */
const km_zk_security *km_zksec_security(void);
/* kmproxy's settings ("key=value", NULL-ended; none in plain mode): the JAAS Client section Kafka's
 * brokers use (written into dir) and zookeeper.set.acl=true. Static storage: use before the next call. */
const char *const *km_zksec_daemon_settings(const char *dir);
/* The same as a --zk-config properties file in dir for `kmproxy zk ...`; NULL in plain mode. */
const char *km_zksec_zk_config(const char *dir);
/* Every znode under the client's root (but /zookeeper) carries the ACL Kafka gives it
 * (ZkData.defaultAcls: KM_ZKSEC_USER with all permissions, plus world READ on ordinary paths).
 * False with the first difference in why. Meaningful in secure mode only. */
bool km_zksec_acls_are_kafkas(km_zkc *c, char *why, size_t whylen);

#endif
