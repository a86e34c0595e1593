/* quorum_oneshot.h - one question to the KRaft controllers, for proxy/quorum only: the servers are
 * tried in turn until one answers; on each a connection (TLS when given), ApiVersions, the SASL login
 * when there is one, then the caller's request and its answer.  quorum_describe.c (DescribeQuorum)
 * and quorum_cluster.c (DescribeCluster) ask this way; the observer keeps its own long-lived
 * connection (quorum.c).
 *
 * A caller embeds q_oneshot as the first member of its own state and gets it back in every
 * callback.  Everything runs on the loop given; a callback may end the question (q_oneshot_release)
 * or fail the server, and then nothing here touches o again. */
#ifndef KM_QUORUM_ONESHOT_H
#define KM_QUORUM_ONESHOT_H

#include "quorum_internal.h"

typedef struct q_oneshot q_oneshot;

typedef struct q_oneshot_ops {
    const char *client_id;   /* every request header's: names the asker in the controller's request log */
    const char *login_word;  /* "SASL/<mechanism> <login_word> as '<user>' failed: ...", as each caller says it */
    size_t arena_limit;      /* memory one decoded answer may take */
    /* ApiVersions answered: check what it offers, then q_oneshot_login (or q_oneshot_fail). */
    void (*on_versions)(q_oneshot *o, const km_api_versions_response *rs);
    /* Logged in, or no login: send the question with q_oneshot_send. */
    void (*ask)(q_oneshot *o);
    /* The decoded answer (o->api, o->version say to what). */
    void (*on_answer)(q_oneshot *o, const void *rs);
    /* No server left, or the deadline passed: o->last says why. */
    void (*on_end)(q_oneshot *o);
} q_oneshot_ops;

struct q_oneshot {
    struct ev_loop *loop;
    km_tls_ctx *tls;
    const km_quorum_login *login;      /* NULL: no SASL */
    const q_oneshot_ops *ops;
    q_node servers[Q_MAX_NODES];
    int n, idx;                        /* servers to try; the one being asked */
    km_net_conn *conn;
    km_sasl_client *sasl;              /* the login in progress on conn */
    int16_t api, version;              /* the request in flight */
    ev_timer deadline, kick;
    km_err last;                       /* why the last server failed, or that none answered in time */
};

/* login NULL or KM_SASL_NONE: no SASL; else it must outlive o. */
void q_oneshot_init(q_oneshot *o, struct ev_loop *loop, km_tls_ctx *tls, const km_quorum_login *login,
                    const q_oneshot_ops *ops);
/* Adds "host:port,..." to the servers to try; with voter_ids an entry may also be controller.quorum.voters'
 * "id@host:port" (the id is not needed to ask).  The number added, or -1. */
int q_oneshot_add_servers(q_oneshot *o, const char *list, bool voter_ids, km_err *err);
/* Tries the first server from the loop (so no callback runs inside the caller's call); on_end follows
 * timeout_s later unless the question ended before. */
void q_oneshot_start(q_oneshot *o, double timeout_s);
/* Ends the question: no callback follows.  Safe to repeat. */
void q_oneshot_release(q_oneshot *o);

/* This server failed (why goes into o->last, named by host:port): on to the next, or on_end. */
void q_oneshot_fail(q_oneshot *o, const char *why);
/* The same, for an answer every server would give (not authorized): none of the rest is asked. */
void q_oneshot_give_up(q_oneshot *o, const char *why);
/* Sends a request on the connection; a failure fails the server. */
void q_oneshot_send(q_oneshot *o, int16_t api, int16_t version, const void *body);
/* After ApiVersions: the SASL login when there is one, then ops->ask. */
void q_oneshot_login(q_oneshot *o, const km_api_versions_response *rs);

#endif
