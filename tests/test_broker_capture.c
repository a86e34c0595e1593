/* Control traffic captured by km_capture decodes in tshark's Kafka dissector without a single
 * malformed packet.  Wireshark 4.0's dissector knows LeaderAndIsr v0-4, StopReplica v0-2,
 * UpdateMetadata v0-6 and ApiVersions v0-2 (it flags anything newer as unsupported and then
 * misparses it), so the simulators advertise those maxima here; test_broker_e2e covers the rest
 * against the codec. */
#include "km_capture.h"
#include "km_testsupport.h"
#include "test_broker_rig.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static brig R;

static char *tshark(const char *pcap, const uint16_t *ports, int n, const char *filter)
{
    char *argv[64];
    char dec[8][64];
    int k = 0;
    argv[k++] = "/usr/bin/tshark";
    argv[k++] = "-r";
    argv[k++] = (char *)pcap;
    for (int i = 0; i < n; i++) {
        snprintf(dec[i], sizeof dec[i], "tcp.port==%u,kafka", ports[i]);
        argv[k++] = "-d";
        argv[k++] = dec[i];
    }
    argv[k++] = "-Y";
    argv[k++] = (char *)filter;
    argv[k] = NULL;
    char *out = NULL, *err = NULL;
    size_t len = 0;
    int rc = km_test_run(argv, NULL, 0, &out, &len, &err);
    cr_assert_eq(rc, 0, "tshark failed (%d): %s", rc, err ? err : "");
    free(err);
    return out ? out : calloc(1, 1);
}

static size_t lines(const char *s)
{
    size_t n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

static bool never(brig *r)
{
    (void)r;
    return false;
}

static void run_capture(const char *max_versions)
{
    if (access("/usr/bin/tshark", X_OK))
        cr_skip_test("tshark is not installed");
    char *dir = km_test_tmpdir("bcap");
    char pcap[512], jsonl[512];
    snprintf(pcap, sizeof pcap, "%s/brokers.pcapng", dir);
    snprintf(jsonl, sizeof jsonl, "%s/brokers.jsonl", dir);
    km_capture_opts co = { .pcapng_path = pcap, .jsonl_path = jsonl };
    km_err err;
    km_capture *cap = km_capture_open(&co, &err);
    cr_assert(cap, "%s", err.msg);
    brig_opts o = { .brokers = 3, .topics = 3, .partitions = 3, .replication = 3, .leader_changes = 10,
                    .capture = cap, .max_versions = max_versions };
    cr_assert(brig_init(&R, &o), "%s", R.why);
    R.no_lisr_topic_ids = R.no_umr_topic_ids = R.no_umr_kraft = true; /* not in these versions */
    cr_assert(brig_activate(&R), "%s", R.why);
    cr_assert(brig_run_until(&R, brig_converged, 30), "%s", R.why);
    /* a deletion brings StopReplica too */
    size_t it = 0;
    const km_topic *t = km_image_next_topic(R.img, &it);
    km_remove_topic_record rec;
    km_remove_topic_record_init(&rec);
    rec.topic_id = km_topic_id(t);
    cr_assert(brig_append(&R, &km_remove_topic_record_desc, &rec), "%s", R.why);
    cr_assert(brig_run_until(&R, brig_converged, 30), "%s", R.why);
    brig_run_until(&R, never, 0.05);
    uint16_t ports[3];
    for (int i = 0; i < 3; i++)
        ports[i] = km_bsim_port(R.sims[i]);
    brig_free(&R);
    cr_assert(!km_capture_close(cap, &err), "%s", err.msg);

    /* ApiVersions at a version the broker lacks is answered with a v0 body, as Kafka does;
     * the dissector decodes that body at the request's version and calls it malformed. */
    char *malformed = tshark(pcap, ports, 3, "_ws.malformed && !(kafka.api_key == 18 && kafka.error == 35)");
    cr_assert_eq(lines(malformed), 0, "%s: tshark found malformed or undecoded packets:\n%s", max_versions,
                 malformed);
    char *lisr = tshark(pcap, ports, 3, "kafka.api_key == 4");
    char *umr = tshark(pcap, ports, 3, "kafka.api_key == 6");
    char *sr = tshark(pcap, ports, 3, "kafka.api_key == 5");
    cr_assert(lines(lisr) >= 3 && lines(umr) >= 3 && lines(sr) >= 1, "decoded: %zu LeaderAndIsr, %zu UpdateMetadata, "
              "%zu StopReplica", lines(lisr), lines(umr), lines(sr));
    free(malformed);
    free(lisr);
    free(umr);
    free(sr);
    km_test_rmtree(dir);
    free(dir);
}

Test(broker_capture, dissector_maxima, .timeout = 180)
{
    run_capture("LeaderAndIsr=4,UpdateMetadata=6,StopReplica=2,ApiVersions=2");
}

Test(broker_capture, oldest_versions, .timeout = 180)
{
    /* Wireshark 4.0 reads OfflineReplicas in UpdateMetadata v0-3, which has it only from v4
     * (Kafka's UpdateMetadataRequest.json: "versions": "4+"), so v4 is the oldest it decodes. */
    run_capture(getenv("KM_CAPTURE_VERSIONS") ? getenv("KM_CAPTURE_VERSIONS")
                                              : "LeaderAndIsr=0,UpdateMetadata=4,StopReplica=0,ApiVersions=0");
}
