/* test_image_dirs.c - partition directories, broker log dirs and the default metadata.version, as Kafka 3.9's
 * image holds them (DirectoryId, PartitionRegistration.merge after KAFKA-16583, BrokerRegistration, FeaturesImage). */
#include "test_image_util.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <string.h>

static ti_ctx C;

static void setup(void) { ti_ctx_open(&C); }
static void teardown(void) { ti_ctx_close(&C); }

TestSuite(image_dirs, .init = setup, .fini = teardown);

#define SETL(f, n, p) ((f).count = (n), (f).items = (p))

static km_uuid last_byte(uint8_t b)
{
    km_uuid u = {{0}};
    u.b[15] = b;
    return u;
}

static km_uuid first_byte(uint8_t b)
{
    km_uuid u = {{0}};
    u.b[0] = b;
    u.b[15] = 0x42;
    return u;
}

static km_partition part0(void)
{
    const km_topic *t = km_image_topic_by_name(C.img, "t");
    cr_assert(t);
    km_partition p;
    cr_assert(km_topic_partition(t, 0, &p));
    return p;
}

static bool dirs_are(km_uuid_list l, const km_uuid *want, int32_t n)
{
    return l.n == n && (n == 0 || !memcmp(l.v, want, (size_t)n * 16));
}

static bool all_are(km_uuid_list l, km_uuid want, int32_t n)
{
    if (l.n != n)
        return false;
    for (int32_t i = 0; i < n; i++)
        if (memcmp(&l.v[i], &want, 16))
            return false;
    return true;
}

/* Topic "t" (uuid 1), partition 0 on brokers 1,2,3 with the given directories (count 0: none, a pre-3.7 log). */
static void topic_with_dirs(const km_uuid *dirs, int32_t n_dirs)
{
    ti_topic(&C, "t", ti_uuid(1));
    km_partition_record r;
    km_partition_record_init(&r);
    int32_t reps[] = {1, 2, 3};
    r.topic_id = ti_uuid(1);
    r.partition_id = 0;
    SETL(r.replicas, 3, reps);
    SETL(r.isr, 3, reps);
    SETL(r.removing_replicas, 0, NULL);
    SETL(r.adding_replicas, 0, NULL);
    SETL(r.directories, n_dirs, (km_uuid *)dirs);
    r.leader = 1;
    r.leader_epoch = r.partition_epoch = 0;
    cr_assert_eq(ti_apply(&C, KM_MDR_PARTITION_RECORD, n_dirs ? 2 : 0, &r), 0, "%s", C.err.msg);
}

/* org.apache.kafka.common.DirectoryId: MIGRATING = new Uuid(0, 0), UNASSIGNED = (0, 1), LOST = (0, 2). */
Test(image_dirs, directory_id_constants_are_kafkas)
{
    km_uuid zero = {{0}};
    cr_assert(!memcmp(&KM_DIR_MIGRATING, &zero, 16), "MIGRATING is all zeros");
    km_uuid one = last_byte(1), two = last_byte(2);
    cr_assert(!memcmp(&KM_DIR_UNASSIGNED, &one, 16), "UNASSIGNED is 0...1");
    cr_assert(!memcmp(&KM_DIR_LOST, &two, 16), "LOST is 0...2");
}

Test(image_dirs, partition_record_without_dirs_is_migrating)
{
    topic_with_dirs(NULL, 0);
    cr_assert(all_are(part0().directories, KM_DIR_MIGRATING, 3));
}

/* KAFKA-16583: a reassignment in a pre-3.7 log (no directories anywhere) resizes the MIGRATING list. Kafka 3.7.0
 * carried directories per replica and gave new replicas UNASSIGNED; 3.7.1+ keeps them MIGRATING. */
Test(image_dirs, reassignment_without_dirs_resizes_migrating)
{
    topic_with_dirs(NULL, 0);
    km_partition_change_record r;
    ti_change_init(&r, ti_uuid(1), 0);
    int32_t grow[] = {1, 2, 3, 4}, shrink[] = {3, 4};
    SETL(r.replicas, 4, grow);
    cr_assert_eq(ti_change(&C, &r), 0, "%s", C.err.msg);
    cr_assert(all_are(part0().directories, KM_DIR_MIGRATING, 4), "new replicas are MIGRATING, not UNASSIGNED");
    SETL(r.replicas, 2, shrink);
    cr_assert_eq(ti_change(&C, &r), 0, "%s", C.err.msg);
    cr_assert(all_are(part0().directories, KM_DIR_MIGRATING, 2));
}

Test(image_dirs, assigned_dirs_are_kept_when_replicas_do_not_change)
{
    km_uuid d[] = {first_byte(1), first_byte(2), first_byte(3)};
    topic_with_dirs(d, 3);
    km_partition_change_record r;
    ti_change_init(&r, ti_uuid(1), 0);
    int32_t isr[] = {1, 2};
    SETL(r.isr, 2, isr);
    cr_assert_eq(ti_change(&C, &r), 0, "%s", C.err.msg);
    cr_assert(dirs_are(part0().directories, d, 3));
}

/* The PartitionRegistration constructor refuses assigned directories whose count differs from the replicas. */
Test(image_dirs, assigned_dirs_not_given_for_new_replicas_are_refused)
{
    km_uuid d[] = {first_byte(1), first_byte(2), first_byte(3)};
    topic_with_dirs(d, 3);
    km_partition_change_record r;
    ti_change_init(&r, ti_uuid(1), 0);
    int32_t grow[] = {1, 2, 3, 4};
    SETL(r.replicas, 4, grow);
    cr_assert_eq(ti_change(&C, &r), -1);
    cr_assert(strstr(C.err.msg, "do not match"), "%s", C.err.msg);
}

Test(image_dirs, change_with_dirs_takes_them)
{
    topic_with_dirs(NULL, 0);
    km_partition_change_record r;
    ti_change_init(&r, ti_uuid(1), 0);
    int32_t reps[] = {1, 2, 4};
    km_uuid d[] = {first_byte(7), KM_DIR_UNASSIGNED, KM_DIR_LOST};
    SETL(r.replicas, 3, reps);
    SETL(r.directories, 3, d);
    cr_assert_eq(ti_apply(&C, KM_MDR_PARTITION_CHANGE_RECORD, 2, &r), 0, "%s", C.err.msg);
    cr_assert(dirs_are(part0().directories, d, 3));
}

/* defaultToMigrating: directories that are all MIGRATING are sized by the replicas, whatever their count. */
Test(image_dirs, change_with_all_migrating_dirs_is_resized)
{
    km_uuid d[] = {first_byte(1), first_byte(2), first_byte(3)};
    topic_with_dirs(d, 3);
    km_partition_change_record r;
    ti_change_init(&r, ti_uuid(1), 0);
    km_uuid m[] = {KM_DIR_MIGRATING};
    SETL(r.directories, 1, m);
    cr_assert_eq(ti_apply(&C, KM_MDR_PARTITION_CHANGE_RECORD, 2, &r), 0, "%s", C.err.msg);
    cr_assert(all_are(part0().directories, KM_DIR_MIGRATING, 3));
}

static void register_with_dirs(int32_t id, const km_uuid *dirs, int32_t n)
{
    km_register_broker_record r;
    km_register_broker_record_init(&r);
    km_register_broker_record_broker_endpoint ep = {.name = km_cstr("PLAINTEXT"), .host = km_cstr("h"), .port = 9092};
    r.broker_id = id;
    r.broker_epoch = 5;
    r.incarnation_id = ti_uuid(9);
    SETL(r.end_points, 1, &ep);
    SETL(r.log_dirs, n, (km_uuid *)dirs);
    r.fenced = true;
    cr_assert_eq(ti_apply(&C, KM_MDR_REGISTER_BROKER_RECORD, 3, &r), 0, "%s", C.err.msg);
}

/* BrokerRegistration sorts its directories with Uuid.compareTo: the most significant half first, both signed, so
 * a uuid whose first byte is 0x80 or more sorts before one starting 0x00. */
Test(image_dirs, broker_log_dirs_are_sorted_as_kafka_sorts_them)
{
    km_uuid given[] = {first_byte(0x7f), first_byte(0x00), first_byte(0xff), first_byte(0x80)};
    km_uuid want[] = {first_byte(0x80), first_byte(0xff), first_byte(0x00), first_byte(0x7f)};
    register_with_dirs(1, given, 4);
    const km_broker *b = km_image_broker(C.img, 1);
    cr_assert(b && dirs_are(b->log_dirs, want, 4));

    km_broker_registration_change_record c;
    km_broker_registration_change_record_init(&c);
    c.broker_id = 1;
    c.broker_epoch = 5;
    km_uuid changed[] = {first_byte(0x10), first_byte(0x90)}, sorted[] = {first_byte(0x90), first_byte(0x10)};
    SETL(c.log_dirs, 2, changed);
    cr_assert_eq(ti_apply(&C, KM_MDR_BROKER_REGISTRATION_CHANGE_RECORD, 2, &c), 0, "%s", C.err.msg);
    b = km_image_broker(C.img, 1);
    cr_assert(b && dirs_are(b->log_dirs, sorted, 2));
}

/* FeaturesImage: a log from Kafka 3.0-3.2 has no FeatureLevelRecord and is at 3.0-IV1 (level 1). */
Test(image_dirs, no_feature_level_record_reads_3_0_iv1)
{
    topic_with_dirs(NULL, 0);
    cr_assert_eq(km_image_metadata_version(C.img), 1);
    km_err err = {0};
    json_t *j = km_image_to_json(C.img, &err);
    cr_assert(j, "%s", err.msg);
    cr_assert_eq(json_integer_value(json_object_get(j, "metadataVersion")), 1);
    cr_assert_eq(json_integer_value(json_object_get(json_object_get(j, "features"), "metadata.version")), 1);
    json_decref(j);
}
