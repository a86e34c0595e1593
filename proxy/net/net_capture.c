/* km_net's capture tap: frames in and out of a connection mirrored into km_capture. */
#include "net_private.h"

static km_capture_dir dir_out(const km_net_conn *c) { return c->we_dialled ? KM_CAPTURE_C2S : KM_CAPTURE_S2C; }
static km_capture_dir dir_in(const km_net_conn *c) { return c->we_dialled ? KM_CAPTURE_S2C : KM_CAPTURE_C2S; }

/* km_net_send takes whole frames, possibly several; a trailing partial one
 * (a caller bug the peer will notice) is simply not captured. */
static void capture_framed(km_net_conn *c, const uint8_t *p, size_t len)
{
    while (len >= 4) {
        size_t size = km_be32(p);
        if (size > len - 4)
            return;
        km_capture_frame(c->cap, c->cap_conn, dir_out(c), p + 4, size);
        p += 4 + size;
        len -= 4 + size;
    }
}

void km_net_capture(km_net_conn *c, km_capture *cap)
{
    if (c->cap || c->state == NET_DEAD)
        return;
    c->cap = cap;
    if (c->state == NET_READY)
        km_net__tap_ready(c);
}

/* The endpoints only exist once connected; what was queued before goes first. */
void km_net__tap_ready(km_net_conn *c)
{
    if (!c->cap || c->cap_conn)
        return;
    km_capture_endpoint client, server;
    km_err ignored;
    if (km_capture_endpoints_of_fd(c->fd, c->we_dialled, &client, &server, &ignored))
        return;
    c->cap_conn = km_capture_conn_open(c->cap, client, server);
    for (net_chunk *k = c->head; k; k = k->next) /* chunks are whole sends, so whole frames */
        capture_framed(c, k->data, k->len);
}

void km_net__tap_in(km_net_conn *c, const uint8_t *payload, size_t len)
{
    if (c->cap_conn)
        km_capture_frame(c->cap, c->cap_conn, dir_in(c), payload, len);
}

void km_net__tap_out(km_net_conn *c, const uint8_t *framed, size_t len)
{
    if (c->cap_conn)
        capture_framed(c, framed, len);
}

void km_net__tap_close(km_net_conn *c)
{
    if (c->cap_conn)
        km_capture_conn_close(c->cap, c->cap_conn);
    c->cap_conn = NULL;
    c->cap = NULL;
}
