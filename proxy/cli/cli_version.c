/* kmproxy --version: what was built (version, git commit) and the Kafka it speaks.  The request
 * version ranges are read from the codec's tables, so they cannot drift from what is built in. */
#include "km_build_info.h"
#include "km_cli.h"
#include "km_codec.h"
#include "km_image.h"

#include <stdio.h>
#include <string.h>

/* "LeaderAndIsr v0-7, ..." for the requests named (without their "Request" suffix). */
static void ranges(FILE *to, const char *const *names)
{
    for (size_t i = 0; names[i]; i++) {
        const km_message_desc *md = km_find_message_by_name(names[i]);
        int len = (int)strlen(names[i]) - (int)strlen("Request");
        if (md)
            fprintf(to, "%s%.*s v%d-%d", i ? ", " : "", len, names[i], md->valid.lo, md->valid.hi);
    }
    fputc('\n', to);
}

void km_cli_version(FILE *to)
{
    static const char *const brokers[] = {"LeaderAndIsrRequest", "UpdateMetadataRequest", "StopReplicaRequest",
                                          NULL};
    static const char *const quorum[] = {"FetchRequest", "FetchSnapshotRequest", "DescribeQuorumRequest", NULL};
    fprintf(to, "kmproxy %s\n", KM_VERSION);
    fprintf(to, "commit %s\n", KM_GIT_COMMIT);
    fprintf(to, "kafka: the ZooKeeper to KRaft migration (KIP-866) of Apache Kafka 3.9\n");
    fprintf(to, "  KRaft metadata log: up to metadata.version 3.9-IV0 (feature level %d)\n", KM_MV_3_9_IV0);
    fprintf(to, "  ZK-mode brokers (inter.broker.protocol.version 3.9; highest version both support): ");
    ranges(to, brokers);
    fprintf(to, "  KRaft quorum, as an observer: ");
    ranges(to, quorum);
}
