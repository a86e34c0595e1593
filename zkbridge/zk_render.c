/* The znodes ZK-mode brokers read, rendered from the KRaft image in Kafka 3.9's formats (the
 * encoders in kafka.zk.ZkData and the migration clients). Kafka builds most of these from Scala
 * hash maps, so its key order is not stable; readers tolerate any order, and the full sync
 * compares JSON semantically for the same reason. Our order is the documented one. */
#include "zk_bridge.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- a tiny growable string (render output) ---- */
void zs_init(zstr *s) { s->p = NULL; s->len = s->cap = 0; s->oom = false; }
void zs_free(zstr *s) { free(s->p); zs_init(s); }

void zs_addn(zstr *s, const char *p, size_t n)
{
    if (s->oom)
        return;
    if (s->len + n + 1 > s->cap) {
        size_t cap = s->cap ? s->cap : 128;
        while (cap < s->len + n + 1)
            cap *= 2;
        char *grown = realloc(s->p, cap);
        if (!grown) {
            s->oom = true;
            return;
        }
        s->p = grown;
        s->cap = cap;
    }
    memcpy(s->p + s->len, p, n);
    s->len += n;
    s->p[s->len] = '\0';
}

void zs_add(zstr *s, const char *p) { zs_addn(s, p, strlen(p)); }

char *zs_take(zstr *s) { return s->oom ? (free(s->p), NULL) : (s->p ? s->p : strdup("")); }

void zs_fmt(zstr *s, const char *fmt, ...)
{
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n < sizeof buf)
        return zs_addn(s, buf, (size_t)n);
    char *big = malloc((size_t)n + 1);
    if (!big) {
        s->oom = true;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    zs_addn(s, big, (size_t)n);
    free(big);
}

/* A JSON string literal (jansson's escaping rules are what Kafka's Jackson accepts). */
void zs_json_str(zstr *s, const char *v)
{
    zs_add(s, "\"");
    for (const unsigned char *p = (const unsigned char *)(v ? v : ""); *p; p++) {
        if (*p == '"' || *p == '\\') {
            char e[2] = {'\\', (char)*p};
            zs_addn(s, e, 2);
        } else if (*p < 0x20) {
            zs_fmt(s, "\\u%04x", *p);
        } else {
            zs_addn(s, (const char *)p, 1);
        }
    }
    zs_add(s, "\"");
}

static void json_i32_list(zstr *s, km_i32_list l)
{
    zs_add(s, "[");
    for (int32_t i = 0; i < l.n; i++)
        zs_fmt(s, "%s%d", i ? "," : "", l.v[i]);
    zs_add(s, "]");
}

/* Uuid.toString(): URL-safe base64 without padding (22 characters). */
void zk_uuid_b64url(km_uuid id, char out[23])
{
    static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    int o = 0;
    for (int i = 0; i < 16; i += 3) {
        uint32_t v = (uint32_t)id.b[i] << 16 | (i + 1 < 16 ? (uint32_t)id.b[i + 1] << 8 : 0) |
                     (i + 2 < 16 ? id.b[i + 2] : 0);
        int chars = i + 2 < 16 ? 4 : (i + 1 < 16 ? 3 : 2);
        for (int k = 0; k < chars; k++)
            out[o++] = a[(v >> (18 - 6 * k)) & 63];
    }
    out[o] = '\0';
}

/* java.util.Base64 (standard alphabet, padded), for SCRAM credentials. */
void zs_base64(zstr *s, const uint8_t *p, int32_t n)
{
    static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int32_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
        char q[4] = {a[v >> 18 & 63], a[v >> 12 & 63], i + 1 < n ? a[v >> 6 & 63] : '=', i + 2 < n ? a[v & 63] : '='};
        zs_addn(s, q, 4);
    }
}

/* /brokers/topics/<t>: TopicZNode.encode (version 3, with topic_id). */
void zk_render_topic(zstr *s, const km_topic *t)
{
    zstr adding, removing;
    zs_init(&adding);
    zs_init(&removing);
    zs_add(s, "{\"version\":3,\"partitions\":{");
    int32_t n = km_topic_partition_count(t);
    bool first = true;
    for (int32_t i = 0; i < n; i++) {
        km_partition p;
        if (!km_topic_partition(t, i, &p))
            continue;
        zs_fmt(s, "%s\"%d\":", first ? "" : ",", i);
        json_i32_list(s, p.replicas);
        if (p.adding_replicas.n > 0) {
            zs_fmt(&adding, "%s\"%d\":", adding.len ? "," : "", i);
            json_i32_list(&adding, p.adding_replicas);
        }
        if (p.removing_replicas.n > 0) {
            zs_fmt(&removing, "%s\"%d\":", removing.len ? "," : "", i);
            json_i32_list(&removing, p.removing_replicas);
        }
        first = false;
    }
    char id[23];
    zk_uuid_b64url(km_topic_id(t), id);
    zs_fmt(s, "},\"adding_replicas\":{%s},\"removing_replicas\":{%s},\"topic_id\":\"%s\"}",
           adding.p ? adding.p : "", removing.p ? removing.p : "", id);
    zs_free(&adding);
    zs_free(&removing);
}

/* .../partitions/<p>/state: TopicPartitionStateZNode.encode; controller_epoch is the KRaft
 * controller epoch (ZkTopicMigrationClient passes state.kraftControllerEpoch()). */
void zk_render_state(zstr *s, const km_partition *p, int32_t controller_epoch)
{
    zs_fmt(s, "{\"version\":1,\"leader\":%d,\"leader_epoch\":%d,\"controller_epoch\":%d,\"isr\":", p->leader,
           p->leader_epoch, controller_epoch);
    json_i32_list(s, p->isr);
    if (p->leader_recovery_state == KM_LRS_RECOVERING)
        zs_add(s, ",\"leader_recovery_state\":1");
    zs_add(s, "}");
}

/* /config/changes/config_change_<seq>: ConfigEntityChangeNotificationSequenceZNode.encode. */
void zk_render_config_notify(zstr *s, const char *entity_path)
{
    zs_add(s, "{\"version\":2,\"entity_path\":");
    zs_json_str(s, entity_path);
    zs_add(s, "}");
}

/* /config/<type>/<name>: ConfigEntityZNode.encode. kv sorted by name. Password-type values go
 * through the PasswordEncoder, as ZkConfigMigrationClient.writeConfigs does for broker and topic
 * configs; a value that cannot be encoded fails the rendering (never written in the clear). */
void zk_render_config_kv(zstr *s, const km_config_kv *kv, int32_t n, const km_zk_pwenc *pw)
{
    zs_add(s, "{\"version\":1,\"config\":{");
    for (int32_t i = 0; i < n; i++) {
        zs_add(s, i ? "," : "");
        zs_json_str(s, kv[i].name);
        zs_add(s, ":");
        if (!km_zk_is_password_config(kv[i].name) || !km_zk_pwenc_enabled(pw)) {
            zs_json_str(s, kv[i].value);
            continue;
        }
        km_err err = {{0}};
        char *enc = km_zk_password_encode(pw, kv[i].value, &err);
        if (!enc)
            s->oom = true;
        zs_json_str(s, enc);
        free(enc);
    }
    zs_add(s, "}}");
}

/* Java's Double.toString: shortest digits that round-trip, plain between 1e-3 and 1e7, else
 * computerized scientific notation ("1.0E7"). */
void zk_java_double(char *out, size_t cap, double v)
{
    if (v == 0) {
        snprintf(out, cap, "%s", signbit(v) ? "-0.0" : "0.0");
        return;
    }
    char digits[40];
    int prec = 1;
    for (; prec <= 17; prec++) {
        snprintf(digits, sizeof digits, "%.*e", prec - 1, v);
        if (strtod(digits, NULL) == v)
            break;
    }
    /* digits is "-d.ddde+XX": split mantissa digits and exponent */
    const char *p = digits;
    bool neg = *p == '-';
    if (neg) p++;
    char mant[24];
    int m = 0;
    for (; *p && *p != 'e'; p++)
        if (*p != '.')
            mant[m++] = *p;
    mant[m] = '\0';
    int exp = atoi(p + 1);
    double a = fabs(v);
    if (a >= 1e-3 && a < 1e7) {
        char buf[64];
        int o = 0;
        if (exp >= 0) {
            for (int i = 0; i <= exp; i++) buf[o++] = i < m ? mant[i] : '0';
            buf[o++] = '.';
            if (exp + 1 >= m) buf[o++] = '0';
            for (int i = exp + 1; i < m; i++) buf[o++] = mant[i];
        } else {
            buf[o++] = '0';
            buf[o++] = '.';
            for (int i = 0; i < -exp - 1; i++) buf[o++] = '0';
            for (int i = 0; i < m; i++) buf[o++] = mant[i];
        }
        buf[o] = '\0';
        snprintf(out, cap, "%s%s", neg ? "-" : "", buf);
    } else {
        snprintf(out, cap, "%s%c.%sE%d", neg ? "-" : "", mant[0], m > 1 ? mant + 1 : "0", exp);
    }
}

/* Quota values as ZkConfigMigrationClient.writeClientQuotas writes them: LONG and INT keys as
 * integers, DOUBLE keys through Double.toString. */
void zk_quota_value(char *out, size_t cap, const char *key, double v)
{
    static const char *const integral[] = {"producer_byte_rate", "consumer_byte_rate", "connection_creation_rate"};
    for (size_t i = 0; i < sizeof integral / sizeof integral[0]; i++)
        if (!strcmp(key, integral[i])) {
            snprintf(out, cap, "%lld", (long long)(v + 1e-6));
            return;
        }
    zk_java_double(out, cap, v);
}

/* ScramCredentialUtils.credentialToString. */
void zk_scram_string(zstr *s, const km_scram *c)
{
    zs_add(s, "salt=");
    zs_base64(s, c->salt.ptr, c->salt.len);
    zs_add(s, ",stored_key=");
    zs_base64(s, c->stored_key.ptr, c->stored_key.len);
    zs_add(s, ",server_key=");
    zs_base64(s, c->server_key.ptr, c->server_key.len);
    zs_fmt(s, ",iterations=%d", c->iterations);
}

/* /latest_producer_id_block: writeProducerId builds ProducerIdsBlock(-1, next, 1000). */
void zk_render_producer_ids(zstr *s, int64_t next)
{
    zs_fmt(s, "{\"version\":1,\"broker\":-1,\"block_start\":\"%lld\",\"block_end\":\"%lld\"}", (long long)next,
           (long long)(next + 1000 - 1));
}

/* Sanitizer.sanitize: URLEncoder.encode(UTF-8) with '*' -> %2A and ' ' -> %20. */
void zs_sanitized(zstr *s, const char *v)
{
    for (const unsigned char *p = (const unsigned char *)(v ? v : ""); *p; p++) {
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '.' ||
            *p == '-' || *p == '_')
            zs_addn(s, (const char *)p, 1);
        else
            zs_fmt(s, "%%%02X", *p);
    }
}

/* /delegation_token/tokens/<id>: DelegationTokenManagerZk.toJsonCompatibleMap (version 3). */
void zk_render_token(zstr *s, const km_token *t)
{
    zstr tmp;
    zs_init(&tmp);
    zs_add(s, "{\"version\":3,\"owner\":");
    zs_sanitized(&tmp, t->owner);
    zs_json_str(s, tmp.p ? tmp.p : "");
    zs_free(&tmp);
    zs_add(s, ",\"tokenRequester\":");
    zs_sanitized(&tmp, t->requester ? t->requester : t->owner);
    zs_json_str(s, tmp.p ? tmp.p : "");
    zs_free(&tmp);
    zs_add(s, ",\"renewers\":[");
    for (int32_t i = 0; i < t->n_renewers; i++) {
        zs_add(s, i ? "," : "");
        zs_sanitized(&tmp, t->renewers[i]);
        zs_json_str(s, tmp.p ? tmp.p : "");
        zs_free(&tmp);
    }
    zs_fmt(s, "],\"issueTimestamp\":%lld,\"maxTimestamp\":%lld,\"expiryTimestamp\":%lld,\"tokenId\":",
           (long long)t->issue_timestamp, (long long)t->max_timestamp, (long long)t->expiration_timestamp);
    zs_json_str(s, t->token_id);
    zs_add(s, "}");
}

/* SecurityUtils.resourceTypeName / operationName / permissionTypeName (camel case). */
const char *zk_acl_resource_name(int8_t t)
{
    static const char *n[] = {NULL, NULL, "Topic", "Group", "Cluster", "TransactionalId", "DelegationToken", "User"};
    return t >= 0 && t < 8 ? n[t] : NULL;
}

const char *zk_acl_resource_enum(int8_t t)
{
    static const char *n[] = {NULL, NULL, "TOPIC", "GROUP", "CLUSTER", "TRANSACTIONAL_ID", "DELEGATION_TOKEN", "USER"};
    return t >= 0 && t < 8 ? n[t] : NULL;
}

const char *zk_acl_operation_name(int8_t op)
{
    static const char *n[] = {NULL, NULL, "All", "Read", "Write", "Create", "Delete", "Alter", "Describe",
                              "ClusterAction", "DescribeConfigs", "AlterConfigs", "IdempotentWrite",
                              "CreateTokens", "DescribeTokens"};
    return op >= 0 && op < 15 ? n[op] : NULL;
}

const char *zk_acl_permission_name(int8_t p) { return p == 3 ? "Allow" : p == 2 ? "Deny" : NULL; }

/* One ACL entry of ResourceZNode.encode (AclEntry.toJsonCompatibleMap). */
void zk_render_acl_entry(zstr *s, const km_acl *a)
{
    zs_add(s, "{\"principal\":");
    zs_json_str(s, a->principal);
    zs_fmt(s, ",\"permissionType\":\"%s\",\"operation\":\"%s\",\"host\":", zk_acl_permission_name(a->permission_type),
           zk_acl_operation_name(a->operation));
    zs_json_str(s, a->host);
    zs_add(s, "}");
}
