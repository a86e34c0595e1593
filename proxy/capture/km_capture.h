/* km_capture.h - capture of Kafka traffic for debugging, as pcapng and/or JSON lines.
 *
 * pcapng: one synthetic IPv4/TCP stream per captured connection (SYN, SYN-ACK,
 * ACK, then the frames cut at the MSS with correct sequence/ack numbers and
 * checksums, FIN at the end), so Wireshark/tshark reassemble it and the Kafka
 * dissector decodes it: `tshark -r FILE -d tcp.port==PORT,kafka`.
 * JSON lines: one object per frame with time, connection, direction, api key
 * and name, version, correlation id, size and the body as km_to_json renders it
 * (broker too, for connections opened with one); responses are decoded by
 * pairing them with their request's correlation id, and carry latency_ms.
 * Connections get "open"/"close" event lines, and the file ends with a
 * "capture_end" line carrying the counters (drops included).
 *
 * The data path only copies the frame into a bounded queue; a writer thread
 * does the formatting, decoding and file I/O.  When the queue is full the
 * frame is dropped and counted, never waited for.  A drop breaks the synthetic
 * TCP stream, so the next frame of that connection starts a fresh stream (RST,
 * then a new handshake) that tshark can decode from its first byte.
 *
 * Thread-safety: km_capture_conn_open/frame/conn_close/stats may be called from
 * any thread; km_capture_open/close from one owner.
 */
#ifndef KM_CAPTURE_H
#define KM_CAPTURE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "km_codec.h" /* km_err */

#define KM_CAPTURE_BUFFER_DEFAULT (16u * 1024u * 1024u)
#define KM_CAPTURE_MSS_DEFAULT 1460
#define KM_CAPTURE_JSON_BODY_LIMIT_DEFAULT (1024u * 1024u)

typedef enum km_capture_link {
    KM_CAPTURE_ETHERNET,  /* LINKTYPE_ETHERNET: Ethernet II + IPv4 + TCP */
    KM_CAPTURE_RAW_IPV4,  /* LINKTYPE_RAW: IPv4 + TCP */
} km_capture_link;

typedef struct km_capture_opts {
    const char *pcapng_path;   /* NULL: no pcapng */
    const char *jsonl_path;    /* NULL: no JSON lines */
    size_t buffer_limit;       /* bytes (frames + ~64 B each) queued for the writer; 0: KM_CAPTURE_BUFFER_DEFAULT */
    uint16_t mss;              /* TCP payload per synthetic segment (64..65495); 0: 1460 */
    km_capture_link link;
    size_t json_body_limit;    /* larger frames get no "body" in JSON; 0: 1 MiB */
    uint64_t max_file_bytes;   /* per file; once reached that file stops growing (it may pass
                                * the limit by one record).  0: unlimited */
} km_capture_opts;

typedef enum km_capture_dir {
    KM_CAPTURE_C2S,            /* client to server: requests */
    KM_CAPTURE_S2C,            /* server to client: responses */
} km_capture_dir;

typedef struct km_capture_endpoint {
    uint32_t ip;               /* IPv4, host byte order */
    uint16_t port;
} km_capture_endpoint;

typedef struct km_capture_stats {
    uint64_t frames, bytes;                 /* queued for writing */
    uint64_t dropped_frames, dropped_bytes; /* refused because the queue was full */
    uint64_t write_errors;                  /* records the writer failed to store */
    uint64_t skipped_frames;                /* missing from a file that hit max_file_bytes */
} km_capture_stats;

typedef struct km_capture km_capture;
typedef struct km_capture_conn km_capture_conn;

/* Opens (truncates) the files, writes the pcapng header blocks and starts the writer. */
km_capture *km_capture_open(const km_capture_opts *opts, km_err *err);
/* Drains everything queued, stops the writer and closes the files.  Returns -1
 * with the first write error (file, reason) if any record could not be stored.
 * Every km_capture_conn is released; cap is freed either way. */
int km_capture_close(km_capture *cap, km_err *err);

/* A captured connection between two endpoints.  NULL only when out of memory
 * (frames for a NULL conn are ignored, so callers need no special case). */
km_capture_conn *km_capture_conn_open(km_capture *cap, km_capture_endpoint client, km_capture_endpoint server);
/* Same, for a connection to broker `broker` (-1: a bootstrap address): every JSON line carries it. */
km_capture_conn *km_capture_conn_open_broker(km_capture *cap, km_capture_endpoint client, km_capture_endpoint server,
                                             int32_t broker);
/* One frame's payload (after the 4-byte size, as km_net delivers it). */
void km_capture_frame(km_capture *cap, km_capture_conn *conn, km_capture_dir dir, const uint8_t *payload,
                      size_t len);
/* Ends the connection (FIN exchange in pcapng); conn must not be used after. */
void km_capture_conn_close(km_capture *cap, km_capture_conn *conn);

/* Counters as of now; frames still queued are counted in frames, not yet in
 * write_errors or skipped_frames (km_capture_flush first for final figures). */
void km_capture_get_stats(km_capture *cap, km_capture_stats *out);
/* Blocks the caller (never call it on the data path) until everything queued
 * so far is written and flushed to the files. */
void km_capture_flush(km_capture *cap);

/* The two ends of a connected socket, as seen from fd's side.  `we_are_client`
 * says which end fd is.  Non-IPv4 addresses map into 127.255.0.0/16 so they
 * still form distinct, decodable streams.  -1 + err if fd is not connected. */
int km_capture_endpoints_of_fd(int fd, bool we_are_client, km_capture_endpoint *client, km_capture_endpoint *server,
                               km_err *err);

#endif
