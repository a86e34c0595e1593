/* cli_quorum.h - `kmproxy metadata quorum` and `kmproxy metadata dump --bootstrap-server`
 * (cli_quorum.c), and the record JSON they share with `metadata dump PATH` (cli_metadata.c). */
#ifndef KM_CLI_QUORUM_H
#define KM_CLI_QUORUM_H

#include "km_metalog.h"

struct json_t;

/* One record as kafka-dump-log --cluster-metadata-decoder prints it. */
struct json_t *km_cli_record_json(const km_metalog_record *r, km_err *err);
/* argv[0] = "quorum": DescribeQuorum, printed like kafka-metadata-quorum describe --status. */
int km_cli_metadata_quorum(int argc, char **argv);
/* argv[0] = "dump": the committed log fetched as an observer, one JSON line per record. */
int km_cli_metadata_dump_quorum(int argc, char **argv);

struct km_image;
/* The committed log fetched as an observer from the controllers at servers ("host:port,...") up to the quorum's
 * high watermark, applied to img (kmproxy verify); command_config as `metadata dump` takes it (NULL: none).
 * 0, or -1 + err (not caught up within timeout_s, the quorum refused us). */
int km_cli_quorum_image(const char *servers, const char *cluster_id, const char *command_config, double timeout_s,
                        struct km_image *img, km_err *err);

#endif
