/* km_metalog.h - the KRaft `__cluster_metadata` log: public face of protocol/metalog*.
 *
 * Reads and writes Kafka record batches (format v2, magic 2) as Kafka's
 * DefaultRecordBatch lays them out, in log segments (`<20-digit base>.log`)
 * and snapshots (`<20-digit offset>-<10-digit epoch>.checkpoint`,
 * `bootstrap.checkpoint`).  CRC32C is checked on every batch; gzip, snappy
 * (xerial-framed and raw), lz4 (frame) and zstd are decompressed.  Each
 * record value is decoded through km_codec.h:
 *   - data batches: a metadata record frame [frame version uvarint = 1]
 *     [api key uvarint][version uvarint][body], body decoded with
 *     km_find_message(KM_K_METADATA, api_key);
 *   - control batches: key = (version int16, type int16), value decoded as
 *     the matching data message (LeaderChangeMessage, SnapshotHeaderRecord,
 *     SnapshotFooterRecord, KRaftVersionRecord, VotersRecord) at version 0,
 *     as Kafka's ControlRecordUtils does.
 * An unknown api key, version or control type is an error, never skipped.
 *
 * Errors: every failing call returns -1 (or NULL) and fills a km_err of the
 * form "<file>: byte <pos> (offset <kafka offset>): <reason>" - the batch's
 * byte position in the file, its (or the record's) offset where known, and
 * for record-level faults "record <i> of <n>: ..." inside the reason.
 *
 * No threads, no globals.  Follow mode is driven by the caller's event loop:
 * watch km_metalog_fd() for readability (inotify) or, when it returns -1,
 * run a timer; either way just call km_metalog_next() until it returns 0.
 */
#ifndef KM_METALOG_H
#define KM_METALOG_H

#include "km_codec.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- constants of the format ------------------------------------------------ */

#define KM_ML_BATCH_OVERHEAD 61        /* bytes of a v2 batch header */
#define KM_ML_LOG_OVERHEAD 12          /* baseOffset + batchLength */
/* KRaft writes batches of at most KafkaRaftClient.MAX_BATCH_SIZE_BYTES (8 MiB); twice that is refused. */
#define KM_ML_MAX_BATCH_DEFAULT (16u * 1024u * 1024u)
#define KM_ML_MAX_INFLATED_DEFAULT (64u * 1024u * 1024u) /* cap on one batch's decompressed records */

typedef enum km_ml_compression {
    KM_ML_NONE = 0, KM_ML_GZIP = 1, KM_ML_SNAPPY = 2, KM_ML_LZ4 = 3, KM_ML_ZSTD = 4
} km_ml_compression;

/* Kafka's ControlRecordType ids (record key bytes 2..3). */
typedef enum km_ml_control_type {
    KM_ML_CTRL_ABORT = 0,
    KM_ML_CTRL_COMMIT = 1,
    KM_ML_CTRL_LEADER_CHANGE = 2,
    KM_ML_CTRL_SNAPSHOT_HEADER = 3,
    KM_ML_CTRL_SNAPSHOT_FOOTER = 4,
    KM_ML_CTRL_KRAFT_VERSION = 5,
    KM_ML_CTRL_VOTERS = 6
} km_ml_control_type;

/* "LeaderChange", ... or NULL for an id Kafka does not define. */
const char *km_ml_control_name(int16_t type);
/* The data message a control type's value holds (NULL for ABORT/COMMIT,
 * which carry EndTransactionMarker, and for unknown types). */
const km_message_desc *km_ml_control_desc(int16_t type);

/* CRC32C (Castagnoli) as Kafka's Crc32C: crc 0 to start, chains. */
uint32_t km_crc32c(uint32_t crc, const void *data, size_t len);

/* ---- reading ------------------------------------------------------------------ */

typedef struct km_metalog km_metalog;

typedef struct km_metalog_opts {
    bool follow;              /* at the end wait for more (km_metalog_next returns 0) instead of finishing */
    bool raw;                 /* do not decode record bodies (desc/msg stay NULL; type/version are set) */
    bool no_inotify;          /* follow by polling only (km_metalog_fd() is -1) */
    size_t max_batch;         /* largest batch accepted on disk; 0: KM_ML_MAX_BATCH_DEFAULT */
    size_t max_inflated;      /* largest decompressed records section; 0: KM_ML_MAX_INFLATED_DEFAULT */
    size_t arena_limit;       /* per-batch decode arena; 0: 4 * max_inflated */
} km_metalog_opts;

/* Where the reader is, for km_metalog_record and errors. */
typedef enum km_ml_source {
    KM_ML_FROM_SNAPSHOT,      /* a .checkpoint file */
    KM_ML_FROM_LOG            /* a .log segment */
} km_ml_source;

typedef struct km_metalog_batch {
    int64_t base_offset;
    int64_t last_offset;      /* base_offset + lastOffsetDelta */
    int32_t leader_epoch;     /* partitionLeaderEpoch */
    uint16_t attributes;      /* raw */
    km_ml_compression compression;
    bool log_append_time;     /* timestamp type bit */
    bool transactional;
    bool control;
    bool has_delete_horizon;  /* then base_timestamp is the delete horizon */
    int64_t base_timestamp;
    int64_t max_timestamp;
    int64_t producer_id;
    int16_t producer_epoch;
    int32_t base_sequence;
    int32_t record_count;
    uint32_t crc;
    km_ml_source source;
    const char *file;         /* path of the file it came from */
    uint64_t file_pos;        /* byte position of the batch in that file */
    uint32_t size;            /* bytes on disk, log overhead included */
} km_metalog_batch;

typedef struct km_metalog_record {
    int64_t offset;           /* batch base_offset + offsetDelta */
    int64_t timestamp;        /* base_timestamp + timestampDelta */
    const km_metalog_batch *batch;
    int32_t index;            /* position in the batch, 0-based */
    bool last_in_batch;       /* the batch's last record: apply the batch atomically up to here */
    bool control;             /* same as batch->control */
    /* metadata record: type = api key (KM_MDR_*), version = record version,
     * frame_version = 1.  control record: type = km_ml_control_type,
     * version = control key version, frame_version = 0. */
    int16_t type;
    int16_t version;
    int16_t frame_version;
    const km_message_desc *desc;  /* NULL with opts.raw (type/version still set), and for ABORT/COMMIT markers */
    void *msg;                    /* desc->root struct, in the reader's arena */
    km_bytes key;                 /* raw record key (null for metadata records) */
    km_bytes value;               /* raw record value (the frame, for metadata) */
    int32_t header_count;         /* record headers (KRaft writes none; they are skipped) */
} km_metalog_record;

/* Lifetime: everything reachable from a km_metalog_record (batch, msg, key,
 * value, strings inside msg) stays valid until the km_metalog_next() call
 * that starts the next batch, i.e. all records of one batch stay valid
 * together until the call after the one that returned last_in_batch; and
 * never past km_metalog_close(). Copy what you keep. */

/* Opens one segment or checkpoint file (any name; `.checkpoint` files are
 * read as snapshots and must start with SnapshotHeader and end with
 * SnapshotFooter).  With opts.follow the file is followed as it grows. */
km_metalog *km_metalog_open_file(const char *path, const km_metalog_opts *opts, km_err *err);

/* Opens a `__cluster_metadata-0` directory: first the latest snapshot
 * (`*.checkpoint` with the highest offset, if any), then the log records
 * at or after the snapshot's end offset, segments in base-offset order.
 * With opts.follow it keeps reading as the active segment grows and rolls.
 * Fails if the segments do not reach back to the snapshot (a gap).
 * Following notes: snapshots written later are not re-read (the log is
 * followed instead); a segment that shrinks under the reader (a KRaft
 * follower truncating a diverged, uncommitted suffix) is an error, after
 * which the caller reopens; and the files hold records the quorum may not
 * have committed yet - the high watermark is not on disk. */
km_metalog *km_metalog_open_dir(const char *dir, const km_metalog_opts *opts, km_err *err);

/* 1: *out holds the next record; 0: no more (for now, in follow mode);
 * -1: error (err says file, byte position, offset, reason).  A torn last
 * batch (partial write) returns 0 in follow mode and is delivered whole
 * once complete; without follow it is an error.  A corrupt batch is an
 * error as soon as the file holds it whole (follow mode too: a CRC mismatch
 * on a complete last batch is never a write still landing); after an error the
 * reader stays failed (every later call returns -1 with the same err). */
int km_metalog_next(km_metalog *log, km_metalog_record *out, km_err *err);

/* Reads whole batches held in memory: the records of a Fetch response, a
 * snapshot fetched with FetchSnapshot.  `name` plays the file's part (errors,
 * batch->file; for a snapshot its `<end>-<epoch>.checkpoint` tail names the
 * snapshot id, as a file name would).  data is borrowed: it must stay valid
 * and unchanged until km_metalog_close.  Never follows; a partial last batch
 * is an error, so hand over only whole batches (km_ml_peek_batch). */
km_metalog *km_metalog_open_mem(const char *name, const uint8_t *data, size_t len, km_ml_source source,
                                const km_metalog_opts *opts, km_err *err);

/* The snapshot km_metalog_open_dir chose: 1 and its id (end offset =
 * first log offset not contained, epoch), or 0 when it read none. */
int km_metalog_snapshot_id(const km_metalog *log, int64_t *end_offset, int32_t *epoch);
/* Offset the next log record is expected at (last delivered + 1). */
int64_t km_metalog_next_offset(const km_metalog *log);

/* Follow mode: an fd (inotify) that turns readable when the file or
 * directory changes; -1 when inotify is unavailable (poll on a timer). */
int km_metalog_fd(const km_metalog *log);

void km_metalog_close(km_metalog *log);

/* ---- decoding pieces (also used by tools and tests) --------------------------- */

/* Decodes a metadata record frame (a record value) into a struct allocated
 * from arena.  Unknown frame version, api key or version is an error. */
int km_ml_decode_frame(const uint8_t *p, size_t len, int16_t *api_key, int16_t *version,
                       const km_message_desc **desc, void **msg, km_arena *arena, km_err *err);
/* Looks at the v2 batch starting at p[0..avail) without decoding its records:
 * 1 and its header in *b when it is whole and its CRC32C matches; 0 when it
 * needs more bytes than avail (a batch cut off at the end of a Fetch
 * response); -1 and err (reason only, no position) when it is invalid. */
int km_ml_peek_batch(const uint8_t *p, size_t avail, size_t max_batch, km_metalog_batch *b, km_err *err);
/* Appends frame + km_encode(body) for a metadata record. */
int km_ml_encode_frame(const km_message_desc *md, int16_t version, const void *msg,
                       km_buf *out, km_err *err);

/* ---- writing ------------------------------------------------------------------ */

/* One record to write.  Metadata: desc is a KM_K_METADATA message and
 * control_type -1.  Control: control_type is a km_ml_control_type and desc
 * its data message (km_ml_control_desc), encoded at version 0. */
typedef struct km_metalog_entry {
    const km_message_desc *desc;
    int16_t version;          /* record version (metadata only) */
    const void *msg;
    int16_t control_type;     /* -1 for metadata records */
} km_metalog_entry;

typedef struct km_metalog_batch_params {
    int64_t base_offset;
    int32_t leader_epoch;
    int64_t timestamp;        /* every record gets it (delta 0); 0 means now */
    km_ml_compression compression;
    bool transactional;
} km_metalog_batch_params;

/* Appends one complete v2 batch (header, CRC32C) to out.  All entries must
 * be metadata, or all control (a control batch).  n >= 1. */
int km_ml_encode_batch(const km_metalog_batch_params *p, const km_metalog_entry *e, size_t n,
                       km_buf *out, km_err *err);

typedef struct km_metalog_writer km_metalog_writer;

typedef struct km_metalog_writer_opts {
    int32_t leader_epoch;         /* stamped on every batch */
    km_ml_compression compression;
    uint64_t segment_bytes;       /* roll before a batch would pass this; 0: 1 GiB (Kafka's segment.bytes) */
    int64_t timestamp;            /* batch timestamps in ms; 0: the wall clock at each append */
    bool fsync;                   /* fsync after every append (and on finish) */
} km_metalog_writer_opts;

/* Appends to the `__cluster_metadata-0` style directory `dir` (created if
 * missing): continues the last segment after its last batch (its tail
 * is checked), or starts `00000000000000000000.log` in an empty dir. */
km_metalog_writer *km_metalog_writer_open_dir(const char *dir, const km_metalog_writer_opts *opts,
                                              km_err *err);

/* Starts a snapshot at `path` (written as `path.part`, renamed on
 * km_metalog_writer_finish, as Kafka does), beginning with a control batch
 * holding SnapshotHeaderRecord{version 0, last_contained_log_timestamp}.
 * Name it with km_ml_snapshot_name() or call it "bootstrap.checkpoint". */
km_metalog_writer *km_metalog_writer_open_snapshot(const char *path, int64_t last_contained_log_timestamp,
                                                   const km_metalog_writer_opts *opts, km_err *err);

/* `<20-digit end offset>-<10-digit epoch>.checkpoint` into out (>= 43 bytes). */
void km_ml_snapshot_name(int64_t end_offset, int32_t epoch, char out[48]);

/* Writes one batch of n entries at the writer's next offset; returns its
 * base offset via *base_offset (may be NULL).  Rolls the segment first if
 * it is full (directory writers). */
int km_metalog_writer_append(km_metalog_writer *w, const km_metalog_entry *e, size_t n,
                             int64_t *base_offset, km_err *err);
int64_t km_metalog_writer_next_offset(const km_metalog_writer *w);

/* Snapshots: appends the SnapshotFooter control batch, fsyncs and renames
 * `.part` into place.  Segments: fsyncs.  Then frees w (also on error). */
int km_metalog_writer_finish(km_metalog_writer *w, km_err *err);
/* Frees w without finishing (a snapshot's `.part` file is removed). */
void km_metalog_writer_abort(km_metalog_writer *w);

#endif
