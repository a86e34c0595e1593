/* test_image_util.c - record builders shared by the image suites. */
#include "test_image_util.h"

#include <criterion/criterion.h>
#include <string.h>

void ti_ctx_open(ti_ctx *c)
{
    memset(c, 0, sizeof *c);
    c->img = km_image_new();
    c->delta = km_delta_new();
    cr_assert(c->img && c->delta);
}

void ti_ctx_close(ti_ctx *c)
{
    km_delta_free(c->delta);
    km_image_free(c->img);
}

km_uuid ti_uuid(uint8_t n)
{
    km_uuid u = {{0}};
    u.b[0] = 0x42;
    u.b[15] = n;
    return u;
}

int ti_apply(ti_ctx *c, int16_t type, int16_t version, const void *msg)
{
    return km_image_apply(c->img, type, version, msg, c->off++, 1, "test", c->delta, &c->err);
}

static void must(ti_ctx *c, int16_t type, int16_t version, const void *msg)
{
    cr_assert_eq(ti_apply(c, type, version, msg), 0, "%s", c->err.msg);
}

void ti_broker(ti_ctx *c, int32_t id, int64_t epoch, bool zk)
{
    km_register_broker_record r;
    km_register_broker_record_init(&r);
    km_register_broker_record_broker_endpoint ep = {.name = km_cstr("PLAINTEXT"), .host = km_cstr("h"), .port = 9092};
    r.broker_id = id;
    r.broker_epoch = epoch;
    r.is_migrating_zk_broker = zk;
    r.incarnation_id = ti_uuid((uint8_t)(100 + id));
    r.end_points.count = 1;
    r.end_points.items = &ep;
    r.fenced = true;
    must(c, KM_MDR_REGISTER_BROKER_RECORD, 3, &r);
}

void ti_topic(ti_ctx *c, const char *name, km_uuid id)
{
    km_topic_record r;
    km_topic_record_init(&r);
    r.name = km_cstr(name);
    r.topic_id = id;
    must(c, KM_MDR_TOPIC_RECORD, 0, &r);
}

void ti_partition(ti_ctx *c, km_uuid tid, int32_t pid, const int32_t *reps, int32_t n, int32_t leader)
{
    km_partition_record r;
    km_partition_record_init(&r);
    r.partition_id = pid;
    r.topic_id = tid;
    r.replicas.count = r.isr.count = n;
    r.replicas.items = r.isr.items = (int32_t *)reps;
    r.removing_replicas.count = r.adding_replicas.count = 0;
    r.leader = leader;
    r.leader_epoch = 0;
    r.partition_epoch = 0;
    r.directories.count = 0;
    must(c, KM_MDR_PARTITION_RECORD, 1, &r);
}

void ti_change_init(km_partition_change_record *r, km_uuid tid, int32_t pid)
{
    km_partition_change_record_init(r);
    r->topic_id = tid;
    r->partition_id = pid;
}

int ti_change(ti_ctx *c, const km_partition_change_record *r)
{
    return ti_apply(c, KM_MDR_PARTITION_CHANGE_RECORD, 1, r);
}

void ti_config(ti_ctx *c, int8_t type, const char *res, const char *name, const char *value)
{
    km_config_record r;
    km_config_record_init(&r);
    r.resource_type = type;
    r.resource_name = km_cstr(res);
    r.name = km_cstr(name);
    r.value = km_cstr(value);
    must(c, KM_MDR_CONFIG_RECORD, 0, &r);
}
