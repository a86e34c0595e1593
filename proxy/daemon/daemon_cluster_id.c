/* metadata.source=quorum without cluster.id: the records carry no cluster id, so the ZooKeeper
 * guard could not tell this cluster's ZooKeeper from another's. The id is asked from the
 * controllers (DescribeCluster, KIP-919) before the first claim, and no claim is made until it is
 * known: with zk.force=true an unknown id would otherwise be overridden, and a claim deposes
 * whatever controller ZooKeeper has. */
#include "daemon_internal.h"

#define CLUSTER_ID_RETRY_SECONDS 5.0

static void on_cluster_id(const char *id, const km_err *why, void *ud)
{
    km_daemon *d = ud;
    km_err err = {{0}};
    d->cluster_id_ask = NULL;
    if (id && !km_image_set_cluster_id(d->img, id, &err)) {
        km_daemon_log(d, KM_LOG_INFO, "cluster id %s, from the controllers (DescribeCluster)", id);
        return km_daemon_read_log(d); /* the claim may go ahead now */
    }
    d->cluster_id_next_try = ev_now(d->loop) + CLUSTER_ID_RETRY_SECONDS;
    km_daemon_log(d, d->cluster_id_failures++ % 12 ? KM_LOG_DEBUG : KM_LOG_WARN,
                  "cluster id: %s; ZooKeeper is not claimed until the controllers tell the cluster id (Kafka 3.7+) "
                  "or cluster.id gives it", id ? err.msg : why->msg);
}

static void ask(km_daemon *d)
{
    km_config_quorum_security sec;
    km_err err = {{0}};
    d->cluster_id_next_try = ev_now(d->loop) + CLUSTER_ID_RETRY_SECONDS;
    if (km_config_resolve_quorum_security(&d->cfg, &sec, &err) < 0) {
        km_daemon_log(d, KM_LOG_ERROR, "cluster id: %s", err.msg);
        return;
    }
    km_quorum_login login = {.mechanism = sec.mechanism, .username = sec.username, .password = sec.password};
    const char *servers = d->cfg.quorum_bootstrap_servers ? d->cfg.quorum_bootstrap_servers : d->cfg.quorum_voters;
    d->cluster_id_ask = km_quorum_ask_cluster_id(d->loop, servers, d->quorum_tls, &login,
                                                 d->cfg.quorum_request_timeout_ms / 1000.0, on_cluster_id, d, &err);
    km_config_quorum_security_clear(&sec);
    if (!d->cluster_id_ask)
        km_daemon_log(d, KM_LOG_ERROR, "cluster id: %s", err.msg);
}

bool km_daemon_cluster_id_known(km_daemon *d)
{
    if (km_image_cluster_id(d->img))
        return true;
    if (!d->cluster_id_ask && ev_now(d->loop) >= d->cluster_id_next_try)
        ask(d);
    return false;
}

void km_daemon_cluster_id_stop(km_daemon *d)
{
    km_quorum_ask_free(d->cluster_id_ask);
    d->cluster_id_ask = NULL;
}
