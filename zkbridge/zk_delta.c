/* One image delta -> the znodes it touches, re-rendered from the image after the delta. The
 * reconcile step compares them with what we last wrote, so an entity changed several times in
 * one delta, or changed and changed back, costs exactly what ZooKeeper needs. */
#include "zk_bridge.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void add_path(zk_tree *t, const char *path) { zk_tree_add(t, path, NULL, ZN_DIR, NOTIFY_NONE, NULL); }

/* True the first time this delta renders path. An entity's znode is rendered whole from the image,
 * so once per delta is enough: a delta of 40,000 new partitions would otherwise render their
 * topic's 700 KB assignment 40,000 times, and 6,000 ACLs on one resource its 700 KB list 6,000
 * times (gigabytes, quadratic time). */
static bool first_render(zk_vcache *seen, const char *path, zk_tree *want)
{
    if (zk_vcache_get(seen, path) >= 0)
        return false;
    if (zk_vcache_put(seen, path, 0)) {
        want->oom = true;
        return false;
    }
    return true;
}

static void topics(const km_image *img, const km_delta *d, int32_t epoch, const km_zk_pwenc *pw, zk_tree *want,
                   zk_tree *cands, zk_vcache *seen)
{
    size_t it = 0;
    km_topic_change tc;
    while (km_delta_next_topic(d, &it, &tc)) {
        int32_t n = tc.old_partitions > tc.new_partitions ? tc.old_partitions : tc.new_partitions;
        zk_topic_paths(tc.name, n, cands);
        /* A deleted topic's znodes just go: ZkTopicMigrationClient.deleteTopic writes no
         * /admin/delete_topics marker (the KRaft controller deletes the replicas with StopReplica;
         * a marker would make a ZK controller after a rollback delete a re-created topic). */
        const km_topic *t = km_image_topic_by_id(img, tc.id);
        if (!t)
            continue;
        char path[1024];
        snprintf(path, sizeof path, "/brokers/topics/%s", km_topic_name(t));
        if (first_render(seen, path, want))
            zk_render_topic_nodes(img, t, epoch, pw, want);
    }
}

/* A changed partition: its state, and the topic znode (assignment) when replicas moved. */
static void partitions(const km_image *img, const km_delta *d, int32_t epoch, zk_tree *want, zk_tree *cands,
                       zk_vcache *seen)
{
    size_t it = 0;
    km_partition_change pc;
    while (km_delta_next_partition(d, &it, &pc)) {
        const km_topic *t = km_image_topic_by_id(img, pc.topic_id);
        if (!t || !pc.has_new)
            continue; /* a deleted topic is handled whole above */
        char buf[1024];
        const char *name = km_topic_name(t);
        snprintf(buf, sizeof buf, "/brokers/topics/%s/partitions/%d", name, pc.partition);
        add_path(cands, buf);
        add_path(want, buf);
        snprintf(buf, sizeof buf, "/brokers/topics/%s/partitions", name);
        add_path(want, buf);
        snprintf(buf, sizeof buf, "/brokers/topics/%s/partitions/%d/state", name, pc.partition);
        add_path(cands, buf);
        zstr s;
        zs_init(&s);
        zk_render_state(&s, &pc.new, epoch);
        zk_tree_add(want, buf, zs_take(&s), ZN_STATE, NOTIFY_NONE, NULL);
        snprintf(buf, sizeof buf, "/brokers/topics/%s", name);
        if ((pc.what & (KM_PC_REPLICAS | KM_PC_ADDING | KM_PC_REMOVING)) && first_render(seen, buf, want)) {
            add_path(cands, buf);
            zs_init(&s);
            zk_render_topic(&s, t);
            zk_tree_add(want, buf, zs_take(&s), ZN_DATA, NOTIFY_NONE, NULL);
        }
    }
}

static void configs(const km_image *img, const km_delta *d, const km_zk_pwenc *pw, zk_tree *want, zk_tree *cands)
{
    size_t it = 0;
    km_config_change cc;
    char buf[1024];
    while (km_delta_next_config(d, &it, &cc)) {
        if (cc.type == KM_CFG_TOPIC) {
            snprintf(buf, sizeof buf, "/config/topics/%s", cc.name);
            add_path(cands, buf);
            if (km_image_topic_by_name(img, cc.name)) /* the topic's config znode lives as long as the topic */
                zk_render_topic_config(img, cc.name, pw, want);
        } else if (cc.type == KM_CFG_BROKER) {
            snprintf(buf, sizeof buf, "/config/brokers/%s", cc.name[0] ? cc.name : "<default>");
            add_path(cands, buf);
            zk_render_broker_config(cc.new, pw, want);
        }
    }
}

static void quotas_and_scram(const km_image *img, const km_delta *d, zk_tree *want, zk_tree *cands, zk_vcache *seen)
{
    size_t it = 0;
    km_quota_change qc;
    while (km_delta_next_quota(d, &it, &qc)) {
        char *p = zk_quota_path(qc.new ? qc.new : qc.old);
        if (p && first_render(seen, p, want)) {
            add_path(cands, p);
            zk_render_quotas(img, p, want);
        }
        free(p);
    }
    it = 0;
    km_scram_change sc;
    while (km_delta_next_scram(d, &it, &sc)) {
        char *p = zk_scram_user_path((sc.new ? sc.new : sc.old)->user);
        if (p && first_render(seen, p, want)) {
            add_path(cands, p);
            zk_render_quotas(img, p, want);
        }
        free(p);
    }
}

static void acls_tokens_pids(const km_image *img, const km_delta *d, zk_tree *want, zk_tree *cands, zk_vcache *seen)
{
    size_t it = 0;
    km_acl_change ac;
    while (km_delta_next_acl(d, &it, &ac)) {
        char *p = zk_acl_path(ac.new ? ac.new : ac.old);
        if (p && first_render(seen, p, want)) {
            add_path(cands, p);
            zk_render_acls(img, p, want);
        }
        free(p);
    }
    it = 0;
    km_token_change tc;
    while (km_delta_next_token(d, &it, &tc)) {
        char buf[1024];
        snprintf(buf, sizeof buf, "/delegation_token/tokens/%s", (tc.new ? tc.new : tc.old)->token_id);
        add_path(cands, buf);
        if (tc.new)
            zk_render_token_node(tc.new, want);
    }
    km_producer_ids before, after;
    if (km_delta_producer_ids(d, &before, &after) && after.next_producer_id >= 0) {
        zstr s;
        zs_init(&s);
        zk_render_producer_ids(&s, after.next_producer_id);
        zk_tree_add(want, "/latest_producer_id_block", zs_take(&s), ZN_DATA, NOTIFY_NONE, NULL);
    }
}

void zk_delta_render(const km_image *img, const km_delta *d, int32_t controller_epoch, const km_zk_pwenc *pw,
                     zk_tree *want, zk_tree *cands)
{
    zk_vcache seen = {0};
    topics(img, d, controller_epoch, pw, want, cands, &seen);
    partitions(img, d, controller_epoch, want, cands, &seen);
    configs(img, d, pw, want, cands);
    quotas_and_scram(img, d, want, cands, &seen);
    acls_tokens_pids(img, d, want, cands, &seen);
    zk_vcache_clear(&seen);
    zk_tree_sort(want);
    zk_tree_sort(cands);
}
