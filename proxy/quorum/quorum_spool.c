/* Spooling a fetched snapshot to cfg.snapshot_dir: each chunk's checked batches are appended to
 * `<end>-<epoch>.checkpoint.part` and dropped from memory, so a large snapshot costs one chunk
 * of memory instead of its size; once whole it is renamed into place (as Kafka freezes a
 * snapshot), applied with the file reader, and removed (the image is the state kept). */
#include "quorum_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int q_spool_open(km_quorum *q, km_err *err)
{
    q->spool_fd = -1;
    if (!q->cfg.snapshot_dir)
        return 0;
    char name[48], part[4300];
    km_ml_snapshot_name(q->snap_end, q->snap_epoch, name);
    snprintf(q->spool_path, sizeof q->spool_path, "%s/%s", q->cfg.snapshot_dir, name);
    snprintf(part, sizeof part, "%s.part", q->spool_path);
    q->spool_fd = open(part, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (q->spool_fd < 0)
        return km_fail(err, "%s: %s", part, strerror(errno));
    return 0;
}

int q_spool_flush(km_quorum *q, km_err *err)
{
    if (q->spool_fd < 0 || q->snap_checked == 0)
        return 0;
    for (size_t done = 0; done < q->snap_checked;) {
        ssize_t n = write(q->spool_fd, q->snap.data + done, q->snap_checked - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return km_fail(err, "%s.part: write: %s", q->spool_path, strerror(errno));
        done += (size_t)n;
    }
    size_t rest = q->snap.len - q->snap_checked;
    memmove(q->snap.data, q->snap.data + q->snap_checked, rest);
    q->snap.len = rest;
    q->snap_base += q->snap_checked;
    q->snap_checked = 0;
    return 0;
}

void q_spool_discard(km_quorum *q)
{
    if (q->spool_fd < 0)
        return;
    char part[4300];
    snprintf(part, sizeof part, "%s.part", q->spool_path);
    close(q->spool_fd);
    q->spool_fd = -1;
    unlink(part);
    unlink(q->spool_path);
}

int q_spool_apply(km_quorum *q, km_err *err)
{
    char part[4300];
    snprintf(part, sizeof part, "%s.part", q->spool_path);
    if (close(q->spool_fd) < 0 || rename(part, q->spool_path) < 0) {
        q->spool_fd = -1;
        return km_fail(err, "%s: %s", q->spool_path, strerror(errno));
    }
    q->spool_fd = -1;
    km_metalog *log = km_metalog_open_file(q->spool_path, NULL, err);
    int rc = log ? q_apply_log(q, log, err) : -1;
    unlink(q->spool_path);
    return rc;
}
