/* broker_private.h - shared by proxy/broker*.c only; not part of km_broker's API. */
#ifndef KM_BROKER_PRIVATE_H
#define KM_BROKER_PRIVATE_H

#include "km_broker.h"

#include <ev.h>

typedef struct bchan_item {
    struct bchan_item *next;
    int16_t api, version;
    void *body;
    km_arena arena;
    int64_t seq;
    int64_t gate;                      /* sent once the owner released this offset; -1: at once */
    unsigned sends;                    /* times it went out (more than one: resent after a reconnect) */
} bchan_item;

typedef enum bchan_state {
    CH_WAITING,       /* backing off before the next connect */
    CH_CONNECTING,
    CH_NEGOTIATING,   /* ApiVersions in flight */
    CH_AUTHENTICATING, /* SaslHandshake / SaslAuthenticate in flight (broker_sasl.c) */
    CH_READY,
    CH_STOPPED,
} bchan_state;

#define BCHAN_API_SLOT(api) ((api) - KM_API_LEADER_AND_ISR) /* 4, 5, 6 -> 0, 1, 2 */

struct km_bchan {
    struct ev_loop *loop;
    km_bchan_config cfg;
    char *host, *client_id;
    km_bchan_hooks h;
    bchan_state state;
    km_net_conn *conn;
    struct km_capture_conn *cap_conn;
    int16_t ver[3];                    /* negotiated LeaderAndIsr, StopReplica, UpdateMetadata */
    int16_t ver_before[3];             /* ... on the connection before (what is queued was built at) */
    int16_t av_version;                /* ApiVersions version last tried */
    bchan_item *head, *tail;           /* queued, not yet sent */
    size_t queued;
    bchan_item *inflight;              /* sent (or to be resent after a reconnect), awaiting its response */
    bool inflight_on_wire;             /* inflight went out on the current connection */
    bool negotiated_once;              /* versions known: requests queue while disconnected */
    int32_t corr, inflight_corr;
    bool want_sync;                    /* full sync due once nothing is in flight */
    bool sync_first;                   /* ... and it is the first catch-up, not a remedy */
    bool holding;                      /* the owner holds every request back (ZooKeeper re-syncing) */
    int64_t released;                  /* items gated at or below this offset may go */
    int64_t next_seq;
    ev_timer reconnect_timer, request_timer, sync_timer;
    km_backoff backoff;
    km_buf wbuf;
    km_bchan_stats st;
    /* SASL (broker_sasl.c) */
    char *sasl_user, *sasl_pass;
    struct km_sasl_client *sasl;       /* the exchange in progress, kept for re-authentications (km_sasl's) */
    int16_t sasl_api, sasl_version;    /* the SASL request in flight */
    bool auth_failure_logged;          /* until an authentication succeeds again */
    ev_timer reauth_timer;             /* the session's renewal point (KIP-368) ... */
    ev_tstamp reauth_at;               /* ... on the loop's clock (0: none) */
    bool reauth_due;                   /* ... passed: re-authenticate once nothing is in flight */
    bool reauthenticating;             /* the exchange in progress renews a session */
};

/* broker_chan.c */
void km_bchan__log(km_bchan *ch, int level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void km_bchan__disconnect(km_bchan *ch, const char *why);
/* The same, logging the reconnect at `level` (a failure already logged once). */
void km_bchan__disconnect_at(km_bchan *ch, int level, const char *why);
void km_bchan__kick(km_bchan *ch);
void km_bchan__schedule_sync(km_bchan *ch);
void km_bchan__free_item(bchan_item *it);
/* broker_chan_io.c */
int km_bchan__send_framed(km_bchan *ch, int16_t api, int16_t v, const void *body, km_err *err);
/* Negotiated (and authenticated): control requests may flow. */
void km_bchan__become_ready(km_bchan *ch);
/* The same after a re-authentication: what waited goes on. */
void km_bchan__resume(km_bchan *ch);
int km_bchan__send_api_versions(km_bchan *ch);
void km_bchan__on_frame(km_net_conn *c, const uint8_t *payload, size_t len, void *ud);
void km_bchan__send_head(km_bchan *ch);
void km_bchan__capture(km_bchan *ch, int dir, const uint8_t *payload, size_t len);

/* broker_sasl.c */
/* After ApiVersions: starts SASL if configured (0), else nothing to do (1); -1: cannot. */
int km_bchan__sasl_start(km_bchan *ch, const km_api_versions_response *rs);
void km_bchan__sasl_on_response(km_bchan *ch, km_reader *r);
/* Frees the exchange in progress (disconnect, free). */
void km_bchan__sasl_reset(km_bchan *ch);
void km_bchan__sasl_init_timer(km_bchan *ch);
/* A re-authentication is due and nothing is in flight: begins it (true); requests wait. */
bool km_bchan__sasl_maybe_reauthenticate(km_bchan *ch);

#endif
