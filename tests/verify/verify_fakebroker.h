/* verify_fakebroker.h - a broker that answers the verifier from an image (tests/verify). */
#ifndef KM_VERIFY_FAKEBROKER_H
#define KM_VERIFY_FAKEBROKER_H

#include "km_codec.h"
#include "km_image.h"

#include <stdbool.h>
#include <stdint.h>

typedef enum vf_tweak {
    VF_EXACT,         /* every partition as the image has it */
    VF_ISR_DIFFERS,   /* topic-0-0: one more replica in the ISR, same leader epoch (isr_differs) */
    VF_STALE_EPOCH    /* topic-0-0: the leader epoch before the image's (metadata_stale) */
} vf_tweak;

/* Reads one request from c and answers it (Metadata: the image as broker 1 at 127.0.0.1:port sees it, every
 * topic or those asked by name; ListOffsets: NONE at offset 0).  false: the peer closed, or a request it does
 * not answer. */
bool vf_answer_one(int c, const km_image *img, uint16_t port, vf_tweak tweak);

#endif
