/* Raft simulator: Fetch, FetchSnapshot, DescribeQuorum and ApiVersions, decoded strictly and
 * answered by Kafka 3.9's rules (see km_raftsim.h for the KafkaRaftClient methods followed). */
#include "rsim_internal.h"

#include <stdio.h>
#include <string.h>
#include <time.h>



/* Uuid.METADATA_TOPIC_ID = new Uuid(0L, 1L). */
bool rsim_is_metadata_topic_id(km_uuid u)
{
    for (int i = 0; i < 15; i++)
        if (u.b[i])
            return false;
    return u.b[15] == 1;
}

int64_t rsim_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A voter's endpoint; a leader left out of the voter list still knows its own. */
const km_rsim_voter *rsim_voter(const km_rsim *s, int32_t id)
{
    for (int i = 0; i < s->n_voters; i++)
        if (s->voters[i].id == id)
            return &s->voters[i];
    return id >= 0 && id == s->cfg.node_id ? &s->self : NULL;
}

/* The struct descriptor of a field (by spec name), to km_init nested array items. */
const km_struct_desc *rsim_sub(const km_struct_desc *sd, const char *field)
{
    for (uint16_t i = 0; i < sd->nfields; i++)
        if (!strcmp(sd->fields[i].name, field))
            return sd->fields[i].sub;
    return NULL;
}

static bool is_leader(const km_rsim *s) { return s->leader_id == s->cfg.node_id; }

/* The body must fill the frame exactly (km_decode with consumed NULL). */
int rsim_decode_body(const km_message_desc *md, const rsim_req *rq, void *obj, km_arena *a, km_err *err)
{
    return km_decode(md, rq->version, rq->body, rq->len, obj, a, NULL, err);
}

/* KafkaRaftClient.validateLeaderOnlyRequest. */
int16_t rsim_leader_only_error(km_rsim *s, int32_t request_epoch)
{
    if (request_epoch < s->epoch) {
        s->st.fenced_sent++;
        return RSIM_E_FENCED_LEADER_EPOCH;
    }
    if (request_epoch > s->epoch) {
        s->st.unknown_epoch_sent++;
        return RSIM_E_UNKNOWN_LEADER_EPOCH;
    }
    if (!is_leader(s)) {
        s->st.not_leader_sent++;
        return RSIM_E_NOT_LEADER_OR_FOLLOWER;
    }
    return RSIM_E_NONE;
}

bool rsim_cluster_id_ok(const km_rsim *s, km_str given)
{
    return given.len < 0 || km_str_eq(given, s->cluster_id); /* hasValidClusterId: absent is fine */
}

/* ---- ApiVersions ------------------------------------------------------------------------ */

/* ApiVersionsRequest.SOFTWARE_NAME_VERSION_PATTERN: [a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])? */
static bool software_token_ok(km_str t)
{
    if (t.len <= 0)
        return false;
    for (int32_t i = 0; i < t.len; i++) {
        char c = t.ptr[i];
        bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        if (!alnum && ((c != '-' && c != '.') || i == 0 || i == t.len - 1))
            return false;
    }
    return true;
}

int rsim_deny(km_rsim *s, const rsim_req *rq, km_buf *out, km_err *err)
{
    bool fetchy = rq->api == KM_API_FETCH || rq->api == KM_API_FETCH_SNAPSHOT;
    if (!(fetchy && s->deny_cluster_action) && !(rq->api == KM_API_DESCRIBE_QUORUM && s->deny_describe))
        return 0;
    s->st.denied++;
    union { km_fetch_response f; km_fetch_snapshot_response fs; km_describe_quorum_response dq; } rs;
    if (rq->api == KM_API_FETCH) {
        km_fetch_response_init(&rs.f); /* v13+: the top-level error only (FetchRequest.getErrorResponse) */
        rs.f.error_code = RSIM_E_CLUSTER_AUTHORIZATION_FAILED;
    } else if (rq->api == KM_API_FETCH_SNAPSHOT) {
        km_fetch_snapshot_response_init(&rs.fs);
        rs.fs.error_code = RSIM_E_CLUSTER_AUTHORIZATION_FAILED;
    } else {
        km_describe_quorum_response_init(&rs.dq);
        rs.dq.error_code = RSIM_E_CLUSTER_AUTHORIZATION_FAILED;
    }
    return km_frame_response(rq->api, rq->version, rq->correlation_id, &rs, out, err) < 0 ? -1 : 1;
}

int rsim_serve_api_versions(km_rsim *s, const rsim_req *rq, km_buf *out, km_arena *a, km_err *err)
{
    const int16_t keys[][3] = {
        { KM_API_FETCH, RSIM_API_FETCH_MIN, s->cfg.fetch_max_version },
        { KM_API_API_VERSIONS, 0, RSIM_API_VERSIONS_MAX },
        { KM_API_DESCRIBE_QUORUM, 0, RSIM_API_DESCRIBE_QUORUM_MAX },
        { KM_API_FETCH_SNAPSHOT, 0, RSIM_API_FETCH_SNAPSHOT_MAX },
        /* A controller listener offers them whatever its protocol (ApiKeys' listeners include
         * CONTROLLER); they are served only on a SASL listener here. */
        { KM_API_SASL_HANDSHAKE, 0, 1 },
        { KM_API_SASL_AUTHENTICATE, 0, 2 },
        { KM_API_DESCRIBE_CLUSTER, 0, 1 }, /* last: left out as a pre-3.7 controller would (rsim_cluster.c) */
    };
    const int n_keys = (int)(sizeof keys / sizeof keys[0]) - (s->cfg.no_describe_cluster ? 1 : 0);
    km_api_versions_response rs;
    km_api_versions_response_init(&rs);
    int16_t v = rq->version;
    if (v < 0 || v > RSIM_API_VERSIONS_MAX) { /* Kafka answers v0 + UNSUPPORTED_VERSION so the client can retry */
        rs.error_code = RSIM_E_UNSUPPORTED_VERSION;
        v = 0;
    } else {
        km_api_versions_request q;
        if (rsim_decode_body(&km_api_versions_request_desc, rq, &q, a, err) < 0)
            return -1;
        if (v >= 3 && (!software_token_ok(q.client_software_name) || !software_token_ok(q.client_software_version))) {
            /* ControllerApis.handleApiVersionsRequest: !isValid -> INVALID_REQUEST, no api keys */
            s->st.rejected++;
            snprintf(s->st.last_rejection, sizeof s->st.last_rejection,
                     "ApiVersions v%d with ClientSoftwareName '%.*s' / Version '%.*s' fails isValid", v,
                     (int)(q.client_software_name.len > 0 ? q.client_software_name.len : 0), q.client_software_name.ptr,
                     (int)(q.client_software_version.len > 0 ? q.client_software_version.len : 0),
                     q.client_software_version.ptr);
            rs.error_code = RSIM_E_INVALID_REQUEST;
            return km_frame_response(KM_API_API_VERSIONS, v, rq->correlation_id, &rs, out, err);
        }
    }
    rs.api_keys.items = km_arena_alloc(a, sizeof *rs.api_keys.items * (size_t)n_keys);
    if (!rs.api_keys.items)
        return km_fail(err, "raftsim: out of memory");
    rs.api_keys.count = n_keys;
    for (int i = 0; i < n_keys; i++)
        rs.api_keys.items[i] = (km_api_versions_response_api_version){ .api_key = keys[i][0],
                                                                       .min_version = keys[i][1],
                                                                       .max_version = keys[i][2] };
    s->st.api_versions++;
    return km_frame_response(KM_API_API_VERSIONS, v, rq->correlation_id, &rs, out, err);
}

/* ---- Fetch ---------------------------------------------------------------------------------- */

static int fetch_top_error(const rsim_fetch *fr, int16_t code, km_buf *out, km_err *err)
{
    km_fetch_response rs;
    km_fetch_response_init(&rs);
    rs.error_code = code;
    return km_frame_response(KM_API_FETCH, fr->version, fr->correlation_id, &rs, out, err);
}

/* What KRaft never sends in a Fetch is refused outright: sessions, forgotten topics. */
static int fetch_strict(const km_fetch_request *q, km_err *err)
{
    if (q->session_id != 0 || q->session_epoch != -1)
        return km_fail(err, "Fetch with session %d epoch %d: KRaft fetches are sessionless (0, -1)", q->session_id,
                       q->session_epoch);
    if (q->forgotten_topics_data.count > 0)
        return km_fail(err, "Fetch with %d forgotten topics", q->forgotten_topics_data.count);
    return 0;
}

static bool fetch_names_metadata(const km_fetch_request *q, int16_t v)
{
    if (q->topics.count != 1 || q->topics.items[0].partitions.count != 1)
        return false;
    const km_fetch_request_topic *t = &q->topics.items[0];
    bool topic_ok = v >= 13 ? rsim_is_metadata_topic_id(t->topic_id) : km_str_eq(t->topic, RSIM_METADATA_TOPIC);
    return topic_ok && t->partitions.items[0].partition == 0;
}

int rsim_fetch_decode(km_rsim *s, const rsim_req *rq, rsim_fetch *fr, km_buf *out, km_arena *a, km_err *err)
{
    if (rq->version < RSIM_API_FETCH_MIN || rq->version > s->cfg.fetch_max_version)
        return km_fail(err, "Fetch v%d is not advertised (v%d-%d)", rq->version, RSIM_API_FETCH_MIN,
                       s->cfg.fetch_max_version);
    km_fetch_request q;
    if (rsim_decode_body(&km_fetch_request_desc, rq, &q, a, err) < 0 || fetch_strict(&q, err) < 0)
        return -1;
    memset(fr, 0, sizeof *fr);
    fr->version = rq->version;
    fr->correlation_id = rq->correlation_id;
    s->st.fetches++;
    if (!rsim_cluster_id_ok(s, q.cluster_id))
        return fetch_top_error(fr, RSIM_E_INCONSISTENT_CLUSTER_ID, out, err) < 0 ? -1 : 1;
    if (!fetch_names_metadata(&q, rq->version)) /* until multi-raft: INVALID_REQUEST */
        return fetch_top_error(fr, RSIM_E_INVALID_REQUEST, out, err) < 0 ? -1 : 1;
    const km_fetch_request_partition *p = &q.topics.items[0].partitions.items[0];
    fr->max_wait_ms = q.max_wait_ms;
    fr->replica_id = rq->version >= 15 ? q.replica_state.replica_id : q.replica_id;
    fr->current_epoch = p->current_leader_epoch;
    fr->last_fetched_epoch = p->last_fetched_epoch;
    fr->fetch_offset = p->fetch_offset;
    return 0;
}

static int add_fetch_endpoint(km_rsim *s, km_fetch_response *rs, km_arena *a, km_err *err)
{
    const km_rsim_voter *l = rsim_voter(s, s->leader_id);
    if (!l)
        return 0;
    rs->node_endpoints.items = km_arena_alloc(a, sizeof *rs->node_endpoints.items);
    if (!rs->node_endpoints.items)
        return km_fail(err, "raftsim: out of memory");
    rs->node_endpoints.count = 1;
    km_fetch_response_node_endpoint *e = rs->node_endpoints.items;
    km_init(rsim_sub(km_fetch_response_desc.root, "NodeEndpoints"), e);
    e->node_id = l->id;
    e->host = km_cstr(l->host);
    e->port = l->port;
    return 0;
}

/* KafkaRaftClient.buildFetchResponse: one partition with CurrentLeader, HW and log start. */
static km_fetch_response_partition_data *fetch_response(km_rsim *s, const rsim_fetch *fr, km_fetch_response *rs,
                                                        int16_t code, km_arena *a, km_err *err)
{
    km_fetch_response_init(rs);
    km_fetch_response_able_topic_response *t = km_arena_alloc(a, sizeof *t);
    km_fetch_response_partition_data *p = km_arena_alloc(a, sizeof *p);
    if (!t || !p) {
        km_fail(err, "raftsim: out of memory");
        return NULL;
    }
    const km_struct_desc *tsd = rsim_sub(km_fetch_response_desc.root, "Responses");
    km_init(tsd, t);
    km_init(rsim_sub(tsd, "Partitions"), p);
    if (fr->version >= 13)
        t->topic_id.b[15] = 1;
    else
        t->topic = km_cstr(RSIM_METADATA_TOPIC);
    t->partitions.count = 1;
    t->partitions.items = p;
    rs->responses.count = 1;
    rs->responses.items = t;
    p->error_code = code;
    p->high_watermark = code == RSIM_E_NONE ? rsim_hw(s) : -1;
    p->log_start_offset = s->log_start;
    p->current_leader.leader_id = s->leader_id;
    p->current_leader.leader_epoch = s->epoch;
    p->records = (km_bytes){ (const uint8_t *)"", 0 };
    if (fr->version >= 17 && add_fetch_endpoint(s, rs, a, err) < 0) /* RaftUtil.fetchResponse: v17 */
        return NULL;
    return p;
}

static int fetch_error(km_rsim *s, const rsim_fetch *fr, int16_t code, km_buf *out, km_arena *a, km_err *err)
{
    km_fetch_response rs;
    if (!fetch_response(s, fr, &rs, code, a, err))
        return -1;
    return km_frame_response(KM_API_FETCH, fr->version, fr->correlation_id, &rs, out, err) < 0 ? -1 : 1;
}

/* handleFetchRequest's argument checks, then tryCompleteFetchRequest.  1: answered; 0: park (out
 * then holds the answer built now, which a timeout sends). */
int rsim_fetch_answer(km_rsim *s, const rsim_fetch *fr, bool may_park, km_buf *out, km_arena *a, km_err *err)
{
    if (fr->max_wait_ms < 0 || fr->fetch_offset < 0 || fr->last_fetched_epoch < 0 ||
        fr->last_fetched_epoch > fr->current_epoch)
        return fetch_error(s, fr, RSIM_E_INVALID_REQUEST, out, a, err);
    int16_t code = rsim_leader_only_error(s, fr->current_epoch);
    if (code != RSIM_E_NONE)
        return fetch_error(s, fr, code, out, a, err);
    km_fetch_response rs;
    km_fetch_response_partition_data *p = fetch_response(s, fr, &rs, RSIM_E_NONE, a, err);
    if (!p)
        return -1;
    rsim_oe oe;
    bool park = false;
    rsim_valid v = rsim_validate(s, fr->fetch_offset, fr->last_fetched_epoch, &oe);
    const rsim_snapshot *latest = rsim_latest_snapshot(s);
    if (fr->fetch_offset == 0 && latest && !(latest->end == 0 && latest->epoch == 0)) {
        /* tryCompleteFetchRequest: an empty follower gets the latest non-bootstrap snapshot */
        oe = (rsim_oe){ latest->end, latest->epoch };
        v = RSIM_SNAPSHOT;
    }
    if (v == RSIM_SNAPSHOT) {
        p->snapshot_id.end_offset = oe.offset;
        p->snapshot_id.epoch = oe.epoch;
        s->st.snapshot_ids_sent++;
    } else if (v == RSIM_DIVERGING) {
        p->diverging_epoch.end_offset = oe.offset;
        p->diverging_epoch.epoch = oe.epoch;
        s->st.diverging_sent++;
    } else {
        size_t len = 0;
        const uint8_t *recs = NULL;
        rsim_read(s, fr->fetch_offset, &recs, &len);
        rsim_note_observer(s, fr->replica_id, fr->fetch_offset);
        s->st.last_fetch_offset = fr->fetch_offset;
        park = len == 0 && may_park && fr->max_wait_ms > 0; /* the fetch purgatory: data or MaxWaitMs */
        if (len && s->corrupt_records) { /* one flipped byte in the first batch's records: its CRC fails */
            uint8_t *bad = km_arena_alloc(a, len);
            if (!bad)
                return km_fail(err, "raftsim: out of memory");
            memcpy(bad, recs, len);
            bad[len > 70 ? 70 : len - 1] ^= 0x5a;
            recs = bad;
        }
        if (len)
            p->records = (km_bytes){ recs, (int32_t)len };
    }
    if (km_frame_response(KM_API_FETCH, fr->version, fr->correlation_id, &rs, out, err) < 0)
        return -1;
    return park ? 0 : 1; /* parked: out is the answer as built now, for a timeout */
}
