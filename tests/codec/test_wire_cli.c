/* kmproxy wire decode/encode, run as a user would run it. */
#include "km_testsupport.h"

#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int wire(const char *mode, const char *kind, const char *api, const char *ver, const void *in, size_t n,
                char **out, size_t *out_len, char **err)
{
    char *argv[] = {(char *)km_test_binary(), "wire", (char *)mode, "--api", (char *)api, (char *)kind,
                    "--version", (char *)ver, NULL};
    return km_test_run(argv, in, n, out, out_len, err);
}

static const char LAI_V7[] =
    "{\"controllerId\":3000,\"isKRaftController\":true,\"controllerEpoch\":5,\"brokerEpoch\":77,\"type\":2,"
    "\"topicStates\":[{\"topicName\":\"foo\",\"topicId\":\"AAAAAAAAAAAAAAAAAAAAAQ\",\"partitionStates\":"
    "[{\"partitionIndex\":0,\"controllerEpoch\":5,\"leader\":1,\"leaderEpoch\":3,\"isr\":[1,2],"
    "\"partitionEpoch\":9,\"replicas\":[1,2,3],\"addingReplicas\":[],\"removingReplicas\":[3],\"isNew\":true,"
    "\"leaderRecoveryState\":1}]}],\"liveLeaders\":[{\"brokerId\":1,\"hostName\":\"h1\",\"port\":9092}]}\n";

Test(wire_cli, encode_then_decode_is_identity)
{
    char *bin, *json, *err;
    size_t bin_len, json_len;
    cr_assert_eq(wire("encode", "--request", "4", "7", LAI_V7, strlen(LAI_V7), &bin, &bin_len, &err), 0, "%s", err);
    free(err);
    cr_assert_eq(bin_len, 106);
    cr_assert_eq(wire("decode", "--request", "4", "7", bin, bin_len, &json, &json_len, &err), 0, "%s", err);
    cr_assert_str_eq(json, LAI_V7);
    char *bin2;
    size_t bin2_len;
    free(err);
    cr_assert_eq(wire("encode", "--request", "4", "7", json, json_len, &bin2, &bin2_len, &err), 0);
    cr_assert(bin2_len == bin_len && !memcmp(bin, bin2, bin_len));
    free(bin); free(bin2); free(json); free(err);
}

Test(wire_cli, bad_input_exits_2_with_one_line)
{
    char *out, *err;
    size_t n;
    const uint8_t truncated[] = {0, 0, 0x0b, 0xb8, 1};
    cr_assert_eq(wire("decode", "--request", "4", "7", truncated, sizeof truncated, &out, &n, &err), 2);
    cr_assert_eq(n, 0);
    cr_assert(strstr(err, "LeaderAndIsrRequest v7.ControllerEpoch") && strstr(err, "offset 5"), "%s", err);
    cr_assert_eq(strchr(err, '\n'), err + strlen(err) - 1, "more than one line: %s", err);
    free(out); free(err);
    cr_assert_eq(wire("encode", "--request", "4", "7", "{not json", 9, &out, &n, &err), 2);
    cr_assert(strstr(err, "JSON input line 1"), "%s", err);
    free(out); free(err);
    cr_assert_eq(wire("decode", "--request", "999", "0", "", 0, &out, &n, &err), 2);
    cr_assert(strstr(err, "no request with api key 999"), "%s", err);
    free(out); free(err);
    cr_assert_eq(wire("decode", "--request", "4", "9", "", 0, &out, &n, &err), 2);
    cr_assert(strstr(err, "version 9 is not valid"), "%s", err);
    free(out); free(err);
    char *argv[] = {(char *)km_test_binary(), "wire", "decode", "--bogus", NULL};
    cr_assert_eq(km_test_run(argv, NULL, 0, &out, &n, &err), 2);
    cr_assert(strstr(err, "usage: kmproxy wire"), "%s", err);
    free(out); free(err);
}

Test(wire_cli, named_messages_and_responses)
{
    char *argv[] = {(char *)km_test_binary(), "wire", "decode", "--message", "RequestHeader", "--version", "1", NULL};
    const uint8_t hdr[] = {0, 4, 0, 7, 0, 0, 0, 9, 0xff, 0xff};
    char *out, *err;
    size_t n;
    cr_assert_eq(km_test_run(argv, hdr, sizeof hdr, &out, &n, &err), 0, "%s", err);
    cr_assert_str_eq(out, "{\"requestApiKey\":4,\"requestApiVersion\":7,\"correlationId\":9,\"clientId\":null}\n");
    free(out); free(err);
    const uint8_t resp[] = {0, 0, 0, 9, 9};  /* UpdateMetadataResponse v7: error 0, no tags; then junk */
    cr_assert_eq(wire("decode", "--response", "6", "7", resp, 3, &out, &n, &err), 0, "%s", err);
    cr_assert_str_eq(out, "{\"errorCode\":0}\n");
    free(out); free(err);
    cr_assert_eq(wire("decode", "--response", "6", "7", resp, sizeof resp, &out, &n, &err), 2);
    cr_assert(strstr(err, "trailing"), "%s", err);
    free(out); free(err);
}

Test(wire_cli, help_and_version)
{
    char *out, *err;
    size_t n;
    char *help[] = {(char *)km_test_binary(), "--help", NULL};
    cr_assert_eq(km_test_run(help, NULL, 0, &out, &n, &err), 0);
    cr_assert(strstr(out, "wire") && strstr(out, "metadata"));
    free(out); free(err);
    char *ver[] = {(char *)km_test_binary(), "--version", NULL};
    cr_assert_eq(km_test_run(ver, NULL, 0, &out, &n, &err), 0);
    cr_assert(strstr(out, "kmproxy "));
    free(out); free(err);
}
