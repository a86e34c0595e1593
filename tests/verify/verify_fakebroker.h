/* verify_fakebroker.h - a broker that answers the verifier from an image (tests/verify). */
#ifndef KM_VERIFY_FAKEBROKER_H
#define KM_VERIFY_FAKEBROKER_H

#include "km_codec.h"
#include "km_image.h"

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

typedef enum vf_tweak {
    VF_EXACT,         /* every partition as the image has it */
    VF_ISR_DIFFERS,   /* topic-0-0: one more replica in the ISR, same leader epoch (isr_differs) */
    VF_STALE_EPOCH    /* topic-0-0: the leader epoch before the image's (metadata_stale) */
} vf_tweak;

/* Reads one request from c and answers it (Metadata: the image as broker 1 at 127.0.0.1:port sees it, every
 * topic or those asked by name; ListOffsets: NONE at offset 0).  false: the peer closed, or a request it does
 * not answer. */
bool vf_answer_one(int c, const km_image *img, uint16_t port, vf_tweak tweak);

/* topic-0-0 with a stale leader beside the image's (vf_answer_stale): what a broker the image no longer names
 * leader answers when it still acts as leader, and what the image's leader answers about the truncation point. */
typedef struct vf_stale {
    int32_t self;             /* the broker this connection plays */
    int32_t stale;            /* the broker acting as topic-0-0's leader where the image names another */
    int64_t high_watermark;   /* the stale leader's ListOffsets answer (replica id -1) */
    int64_t truncation;       /* the image's leader's OffsetForLeaderEpoch answer */
    const uint8_t *log;       /* the stale leader's topic-0-0 log: whole v2 batches from offset 0; its end is the
                               * log end (ListOffsets replica id -2) */
    size_t log_len;
    int max_batches;          /* whole batches a Fetch answer holds at most, then a cut one (Kafka's size limit) */
    bool malformed_fetch;     /* Fetch answers records that are no record batch */
    bool consumer_fetch_only; /* Fetch with replica id -3 (to the log end) answered UNKNOWN_SERVER_ERROR */
} vf_stale;

/* vf_answer_one, then as s says: Metadata and ListOffsets of topic-0-0, OffsetForLeaderEpoch, DescribeProducers
 * (none), DescribeLogDirs (no log dir) and Fetch (the log from the offset asked, below the high watermark for
 * replica id -1, below the log end for -3, as Kafka 3.9 reads them). */
bool vf_answer_stale(int c, const km_image *img, uint16_t port, const vf_stale *s);

/* A child answering every connection on lfd as broker `self` of s (vf_answer_stale), until the parent ends. */
pid_t vf_serve_stale(int lfd, const km_image *img, uint16_t port, vf_stale s, int32_t self);

/* Appends a v2 batch of n (1-8) records at base to log, for a vf_stale log; its size: the bytes appended by our
 * encoder, which a test expects rather than what a reader of ours says.  Asserts. */
size_t vf_add_batch(km_buf *log, int64_t base, int n);

#endif
