/* Progress figures of a full sync for people: what is done, what the total will be, how fast and
 * how long still. The bridge plans while it writes, so the total is extrapolated from how much of
 * the image the plan has covered until it has covered all of it. */
#include "km_zkbridge.h"

#include <stdio.h>

static const char *stage_name(const km_zkb_progress *p, bool diff)
{
    switch (p->phase) {
    case KM_ZKB_WAITING: return "connecting";
    case KM_ZKB_SYNC: return p->walking ? "reading ZooKeeper" : diff ? "comparing" : "writing";
    case KM_ZKB_DUAL_WRITE: return "in sync";
    case KM_ZKB_STOPPED: return "stopped";
    }
    return "?";
}

void km_zkb_progress_eta(const km_zkb_progress *p, const km_zkb_progress *prev, double secs, bool diff,
                         km_zkb_eta *out)
{
    *out = (km_zkb_eta){.stage = stage_name(p, diff), .eta_seconds = -1};
    if (p->phase != KM_ZKB_SYNC)
        return;
    out->unit = diff && !p->walking ? "topics" : "znodes";
    if (p->walking) {
        out->done = p->znodes_read; /* the namespace's size is unknown until it has been read */
        if (prev && prev->walking && secs > 0 && p->znodes_read >= prev->znodes_read)
            out->rate = (double)(p->znodes_read - prev->znodes_read) / secs;
        return;
    }
    /* diff writes nothing: its progress is the plan's, in topics */
    out->done = diff ? p->topics_planned : p->writes_done;
    out->total = diff ? p->topics_total : p->writes_planned;
    if (!diff && p->planning && p->topics_planned > 0 && p->topics_planned < p->topics_total) {
        out->total = (size_t)((double)p->writes_planned * (double)p->topics_total / (double)p->topics_planned);
        out->estimated = true;
    }
    size_t prev_done = !prev || prev->walking ? 0 : diff ? prev->topics_planned : prev->writes_done;
    if (prev && secs > 0 && out->done >= prev_done)
        out->rate = (double)(out->done - prev_done) / secs;
    if (out->rate > 0 && out->total >= out->done && (!p->planning || out->estimated || diff))
        out->eta_seconds = (double)(out->total - out->done) / out->rate;
}

void km_zkb_eta_format(const km_zkb_eta *e, char *out, size_t cap)
{
    if (!e->unit) {
        snprintf(out, cap, "%s", e->stage);
        return;
    }
    if (!e->total) {
        snprintf(out, cap, "%s: %zu %s read, %.0f/s", e->stage, e->done, e->unit, e->rate);
        return;
    }
    char eta[32] = "ETA unknown";
    if (e->eta_seconds >= 0)
        snprintf(eta, sizeof eta, "ETA %.0fs", e->eta_seconds);
    snprintf(out, cap, "%s: %zu/%s%zu %s, %.0f/s, %s", e->stage, e->done, e->estimated ? "~" : "", e->total,
             e->unit, e->rate, eta);
}
