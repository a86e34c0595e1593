/* image_load.c - whole-image differences (snapshots, full sync), loading a
 * file or directory, following a live log, meta.properties.
 */
#include "image_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <sys/stat.h>

/* ---- differences ----------------------------------------------------------------------------- */

static int diff_topic(km_pool *pool, const km_topic *a, const km_topic *b, km_delta *d)
{
    const km_topic *any = b ? b : a;
    /* The topic first: its entry records whether it existed before. */
    if ((!a || !b || a->n_parts != b->n_parts || strcmp(a->name, b->name)) &&
        km_delta_note_topic(d, any->id, any->name, a != NULL, a ? a->n_parts : 0, b != NULL, b ? b->n_parts : 0) < 0)
        return -1;
    int32_t n = a && a->n_parts > (b ? b->n_parts : 0) ? a->n_parts : (b ? b->n_parts : 0);
    for (int32_t i = 0; i < n; i++) {
        const km_part *pa = a && i < a->n_parts && a->parts[i].present ? &a->parts[i] : NULL;
        const km_part *pb = b && i < b->n_parts && b->parts[i].present ? &b->parts[i] : NULL;
        if ((!pa && !pb) || (pa && pb && km_part_same(pa, pb)))
            continue;
        if (km_delta_note_part(d, pool, any->id, any->name, i, pa, pb) < 0)
            return -1;
    }
    return 0;
}

static int diff_topics(km_pool *pool, const km_istate *a, const km_istate *b, km_delta *d)
{
    size_t it = 0;
    km_map_slot *s;
    while ((s = km_map_next(&a->topics_by_id, &it)))
        if (diff_topic(pool, s->val, km_map_get(&b->topics_by_id, s->key, 16), d) < 0)
            return -1;
    it = 0;
    while ((s = km_map_next(&b->topics_by_id, &it)))
        if (!km_map_get(&a->topics_by_id, s->key, 16) && diff_topic(pool, NULL, s->val, d) < 0)
            return -1;
    return 0;
}

static int diff_map(const km_map *a, const km_map *b, km_obj_kind k, km_delta *d)
{
    size_t it = 0;
    km_map_slot *s;
    while ((s = km_map_next(a, &it))) {
        const void *nb = km_map_get(b, s->key, s->klen);
        if (!km_obj_equal(s->val, nb) && km_delta_note_obj(d, k, s->key, s->klen, 0, s->val, nb) < 0)
            return -1;
    }
    it = 0;
    while ((s = km_map_next(b, &it)))
        if (!km_map_get(a, s->key, s->klen) && km_delta_note_obj(d, k, s->key, s->klen, 0, NULL, s->val) < 0)
            return -1;
    return 0;
}

static int diff_idvec(const km_id_vec *a, const km_id_vec *b, km_obj_kind k, km_delta *d)
{
    for (size_t i = 0; i < a->n; i++) {
        const void *nb = km_idvec_get(b, a->v[i].id);
        if (!km_obj_equal(a->v[i].obj, nb) &&
            km_delta_note_obj(d, k, &a->v[i].id, sizeof(int32_t), a->v[i].id, a->v[i].obj, nb) < 0)
            return -1;
    }
    for (size_t i = 0; i < b->n; i++)
        if (!km_idvec_get(a, b->v[i].id) &&
            km_delta_note_obj(d, k, &b->v[i].id, sizeof(int32_t), b->v[i].id, NULL, b->v[i].obj) < 0)
            return -1;
    return 0;
}

static int diff_features(const km_istate *a, const km_istate *b, km_delta *d)
{
    for (size_t i = 0; i < a->n_features; i++) {
        int16_t nl = km_istate_feature(b, a->features[i].name);
        if (nl != a->features[i].level && km_delta_note_feature(d, a->features[i].name, a->features[i].level, nl) < 0)
            return -1;
    }
    for (size_t i = 0; i < b->n_features; i++)
        if (!km_istate_feature(a, b->features[i].name) &&
            km_delta_note_feature(d, b->features[i].name, 0, b->features[i].level) < 0)
            return -1;
    return 0;
}

int km_im_diff(km_pool *pool, const km_istate *a, const km_istate *b, km_delta *d, km_err *err)
{
    if (diff_topics(pool, a, b, d) < 0 || diff_idvec(&a->brokers, &b->brokers, KM_OBJ_BROKER, d) < 0 ||
        diff_idvec(&a->controllers, &b->controllers, KM_OBJ_CONTROLLER, d) < 0 ||
        diff_map(&a->configs, &b->configs, KM_OBJ_CONFIG, d) < 0 ||
        diff_map(&a->quotas, &b->quotas, KM_OBJ_QUOTA, d) < 0 || diff_map(&a->scram, &b->scram, KM_OBJ_SCRAM, d) < 0 ||
        diff_map(&a->acls, &b->acls, KM_OBJ_ACL, d) < 0 || diff_map(&a->tokens, &b->tokens, KM_OBJ_TOKEN, d) < 0 ||
        diff_features(a, b, d) < 0)
        return km_fail(err, "image: out of memory computing a delta");
    if (memcmp(&a->pids, &b->pids, sizeof a->pids))
        km_delta_note_pids(d, a->pids, b->pids);
    if (a->zk_state != b->zk_state)
        km_delta_note_zk(d, a->zk_state, b->zk_state);
    return 0;
}

int km_image_full_delta(const km_image *img, km_delta *delta, km_err *err)
{
    km_istate *empty = km_istate_new();
    if (!empty)
        return km_fail(err, "image: out of memory");
    int rc = km_im_diff((km_pool *)&img->pool, empty, img->st, delta, err);
    km_istate_free((km_pool *)&img->pool, empty);
    if (rc == 0)
        km_delta_note_pos(delta, img->offset, img->epoch);
    return rc;
}

/* ---- loading ---------------------------------------------------------------------------------- */

static km_metalog *open_path(const char *path, const km_metalog_opts *opts, km_err *err)
{
    struct stat st;
    if (stat(path, &st) < 0) {
        km_fail(err, "%s: %s", path, strerror(errno));
        return NULL;
    }
    return S_ISDIR(st.st_mode) ? km_metalog_open_dir(path, opts, err) : km_metalog_open_file(path, opts, err);
}

int64_t km_image_load(km_image *img, const char *path, km_delta *delta, km_err *err)
{
    km_metalog_opts o = {0};
    km_metalog *log = open_path(path, &o, err);
    if (!log)
        return -1;
    if (!img->cluster_id && km_image_load_meta_properties(img, path, err) < 0) {
        km_metalog_close(log);
        return -1;
    }
    int64_t n = 0;
    km_metalog_record rec;
    int rc;
    while ((rc = km_metalog_next(log, &rec, err)) == 1) {
        if (km_image_apply_record(img, &rec, delta, err) < 0) {
            rc = -1;
            break;
        }
        n++;
    }
    km_metalog_close(log);
    return rc < 0 ? -1 : n;
}

/* ---- meta.properties -------------------------------------------------------------------------- */

static int read_cluster_id(km_image *img, const char *file, km_err *err)
{
    FILE *f = fopen(file, "r");
    if (!f)
        return errno == ENOENT || errno == ENOTDIR ? 0 : km_fail(err, "%s: %s", file, strerror(errno));
    char line[512];
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) {
        if (strncmp(line, "cluster.id=", 11))
            continue;
        line[strcspn(line, "\r\n")] = 0;
        found = km_image_set_cluster_id(img, line + 11, err) < 0 ? -1 : 1;
    }
    fclose(f);
    return found;
}

int km_image_load_meta_properties(km_image *img, const char *dir, km_err *err)
{
    struct stat st;
    if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode))
        return 0;
    char p[4096];
    snprintf(p, sizeof p, "%s/meta.properties", dir);
    int rc = read_cluster_id(img, p, err);
    if (rc != 0)
        return rc;
    snprintf(p, sizeof p, "%s/../meta.properties", dir);
    return read_cluster_id(img, p, err);
}

/* ---- follow ----------------------------------------------------------------------------------- */

struct km_image_follow {
    km_image *img;
    km_metalog *log;
    bool delivered;          /* the last call returned a batch: start a fresh delta */
    bool failed;
    km_err failure;
};

km_image_follow *km_image_follow_open(km_image *img, const char *path, const km_metalog_opts *opts, km_err *err)
{
    km_image_follow *f = calloc(1, sizeof *f);
    if (!f) {
        km_fail(err, "image: out of memory");
        return NULL;
    }
    km_metalog_opts o = opts ? *opts : (km_metalog_opts){0};
    o.follow = true;
    o.raw = false;
    f->img = img;
    f->delivered = true;
    f->log = open_path(path, &o, err);
    if (!f->log) {
        free(f);
        return NULL;
    }
    return f;
}

int km_image_follow_next(km_image_follow *f, km_delta *delta, km_err *err)
{
    if (f->failed) {
        if (err)
            *err = f->failure;
        return -1;
    }
    if (f->delivered)
        km_delta_clear(delta);
    f->delivered = false;
    km_metalog_record rec;
    int rc;
    while ((rc = km_metalog_next(f->log, &rec, err)) == 1) {
        if (km_image_apply_record(f->img, &rec, delta, err) < 0) {
            rc = -1;
            break;
        }
        /* A batch inside a transaction or snapshot has no visible effect yet: keep reading. */
        if (rec.last_in_batch && !f->img->in_txn && !f->img->staging) {
            f->delivered = true;
            return 1;
        }
    }
    if (rc < 0) {
        f->failed = true;
        if (err)
            f->failure = *err;
        return -1;
    }
    return 0;
}

int km_image_follow_fd(const km_image_follow *f) { return km_metalog_fd(f->log); }

void km_image_follow_close(km_image_follow *f)
{
    if (!f)
        return;
    km_metalog_close(f->log);
    free(f);
}
