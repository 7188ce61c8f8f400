/* SPDX-License-Identifier: Apache-2.0 */
/* The commit of a step published in parts: every part's record checked, one head over their patches (or one keyframe of their files), one signed record of the whole model. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/fail.h"
#include "crypto/sha256.h"
#include "manifest/layout.h"
#include "manifest/patch_objects.h"
#include "node/checkpoint/ckpt_internal.h"
#include "node/patch/patch_merge.h"
#include "node/sync/part_hashes.h"
#include "node/sync/publisher.h"

enum { AS_PATCH, AS_KEYFRAME };   /* a part's two possible records of a step */

typedef struct part_in {
    char run[PULSE_RECORD_MAX_RUN + 1];
    pulse_record rec[2];
    int have[2];
    part_hashes h;
    void *head_bytes;
    pulse_patch *head;
    patch_objects po;
} part_in;

typedef struct commit_job {
    pulse_publisher *p;
    uint32_t n;
    uint64_t step;
    part_in *part;
    pulse_trust *self;
    sync_blob up[2];        /* the record's objects of the committer's own, uploaded in one batch */
    uint8_t *up_buf[2];
    size_t nup;
    uint64_t moved;         /* bytes uploaded */
    uint64_t fetched;       /* bytes downloaded: the parts' heads and tensor hashes */
    /* The run's head, fetched beside the first poll of the parts' records (the split-brain check
     * costs no request of its own): whether it was (head_fetched: 0 when not, or when stale as
     * the records took more polls, so it is fetched again at the check), its GET's result, bytes. */
    int head_fetched, head_result;
    void *head_data;
    size_t head_len;
} commit_job;

/* Object BUF (LEN bytes, taken) for the batch before the record; its digest into DIGEST. */
static void stage_object(commit_job *j, uint8_t *buf, size_t len, uint8_t digest[32])
{
    pulse_sha256(buf, len, digest);
    j->up[j->nup] = (sync_blob){ .data = buf, .len = len };
    memcpy(j->up[j->nup].digest, digest, 32);
    j->up_buf[j->nup++] = buf;
}

static int upload_staged(commit_job *j)
{
    int r = sync_put_objects(j->p->st, j->p->run, j->up, j->nup, &j->moved);
    for (size_t i = 0; i < j->nup; i++)
        free(j->up_buf[i]);
    j->nup = 0;
    return r;
}

static void parts_free(commit_job *j)
{
    for (size_t i = 0; i < j->nup; i++)
        free(j->up_buf[i]);
    for (uint32_t i = 0; j->part && i < j->n; i++) {
        part_in *q = &j->part[i];
        pulse_record_clear(&q->rec[0]);
        pulse_record_clear(&q->rec[1]);
        part_hashes_free(&q->h);
        pulse_patch_close(&q->head);
        pulse_store_free(q->head_bytes);
        patch_objects_free(&q->po);
    }
    free(j->part);
    pulse_trust_free(&j->self);
    pulse_store_free(j->head_data);
    j->head_data = NULL;
}

/* Part I's record of kind K at the step, from BYTES: signed by this trainer's key, of the part's
 * run, step and kind, filed under the key its content gives. */
static int take_record(commit_job *j, uint32_t i, int k, const char *rel, const void *bytes, size_t len)
{
    part_in *q = &j->part[i];
    pulse_record *rec = &q->rec[k];
    char want[SYNC_KEY_MAX];
    int r = pulse_record_verify(bytes, len, j->self, NULL, rec);
    if (r)
        return pulse_fail(r, "part %u of %u: %s/%s does not verify under this trainer's key: %s", i, j->n, q->run, rel,
                          pulse_last_error());
    if (strcmp(rec->run, q->run) || rec->step != j->step || pulse_record_key(rec, want, sizeof want) ||
        strcmp(want, rel))
        return pulse_fail(PULSE_ERR_AUTH, "part %u of %u: %s/%s holds a record of run %s step %llu, not this one", i,
                          j->n, q->run, rel, rec->run, (unsigned long long)rec->step);
    const pulse_record_object *last = &rec->objects[rec->n_objects - 1];
    if (strcmp(last->role, PULSE_ROLE_TENSOR_HASHES))
        return pulse_fail(PULSE_ERR_FORMAT, "part %u of %u: %s/%s names no tensor hashes (not published as a part?)",
                          i, j->n, q->run, rel);
    q->have[k] = 1;
    return 0;
}

/* Every part's records of the step, polled until each part has one or WAIT_S has passed. */
static int gather_records(commit_job *j, double wait_s)
{
    static const int kinds[2] = { PULSE_RECORD_SYNC_PATCH, PULSE_RECORD_KEYFRAME };
    const double until = pulse_monotonic_s() + wait_s;
    double nap = 0.02;
    unsigned polls = 0;
    pulse_transfer *x = calloc(2 * (size_t)j->n + 1, sizeof *x);
    char (*keys)[SYNC_KEY_MAX] = calloc(2 * (size_t)j->n + 1, sizeof *keys);
    char (*rels)[SYNC_KEY_MAX] = calloc(2 * (size_t)j->n, sizeof *rels);
    uint32_t *who = calloc(2 * (size_t)j->n, sizeof *who);
    int r = !x || !keys || !rels || !who ? pulse_fail(PULSE_ERR_NOMEM, "records of %u parts", j->n) : 0;
    for (;;) {
        size_t m = 0;
        for (uint32_t i = 0; !r && i < j->n; i++) {
            if (j->part[i].have[AS_PATCH] || j->part[i].have[AS_KEYFRAME])
                continue;
            for (int k = 0; !r && k < 2; k++) {
                r = pulse_layout_record(rels[m], SYNC_KEY_MAX, kinds[k], j->step, j->p->node);
                if (!r)
                    r = sync_run_key(j->part[i].run, rels[m], keys[m]);
                x[m] = (pulse_transfer){ .op = PULSE_XFER_GET, .key = keys[m], .length = PULSE_TO_END,
                                         .max_size = PULSE_RECORD_MAX_BYTES };
                who[m++] = i;
            }
        }
        const int with_head = !r && polls++ == 0 && !publisher_head_key(j->p, keys[m]);
        if (with_head)
            x[m] = (pulse_transfer){ .op = PULSE_XFER_GET, .key = keys[m], .length = PULSE_TO_END,
                                     .max_size = PULSE_LAYOUT_HEAD_MAX };
        if (!r && m + (size_t)with_head)
            pulse_store_batch(j->p->st, x, m + (size_t)with_head);
        /* a head that failed otherwise is fetched again at the check, which then says why */
        if (with_head && (x[m].result == 0 || x[m].result == PULSE_ERR_NOTFOUND || x[m].result == PULSE_ERR_LIMIT)) {
            j->head_fetched = 1;
            j->head_result = x[m].result;
            j->head_data = x[m].out;
            j->head_len = x[m].len;
            x[m].out = NULL;
        } else if (with_head) {
            pulse_store_free(x[m].out);
        } else if (j->head_fetched) {   /* a later poll: the head fetched with the first is stale */
            pulse_store_free(j->head_data);
            j->head_data = NULL;
            j->head_fetched = 0;
        }
        for (size_t t = 0; !r && t < m; t++) {
            uint32_t i = who[t];
            if (x[t].result == 0)
                r = take_record(j, i, (int)(t % 2), rels[t], x[t].out, x[t].len);
            else if (x[t].result != PULSE_ERR_NOTFOUND)
                r = pulse_fail(x[t].result, "part %u of %u: %s: %s", i, j->n, keys[t], x[t].detail);
        }
        for (size_t t = 0; t < m; t++) {
            pulse_store_free(x[t].out);
            x[t].out = NULL;
        }
        if (r)
            break;
        uint32_t missing = 0, first_missing = 0;
        for (uint32_t i = j->n; i-- > 0;)
            if (!j->part[i].have[AS_PATCH] && !j->part[i].have[AS_KEYFRAME]) {
                missing++;
                first_missing = i;
            }
        if (!missing)
            break;
        if (pulse_monotonic_s() + nap > until) {
            r = pulse_fail(PULSE_ERR_NOTFOUND, "part %u of %u has no record of step %llu in run %s after %g s (%u "
                           "part%s missing): nothing committed", first_missing, j->n, (unsigned long long)j->step,
                           j->part[first_missing].run, wait_s, missing, missing == 1 ? "" : "s");
            break;
        }
        struct timespec ts = { 0, (long)(nap * 1e9) };
        nanosleep(&ts, NULL);
        nap = nap * 2 > 0.25 ? 0.25 : nap * 2;
    }
    if (!r)
        pulse_clear_error();
    free(who);
    free(x);
    free(keys);
    free(rels);
    return r;
}

/* The objects wanted of each part (its tensor hashes; with a patch, its head), fetched in one batch. */
static int fetch_part_objects(commit_job *j, int with_heads)
{
    size_t per = with_heads ? 2 : 1, n = per * j->n;
    pulse_record_object *o = calloc(n, sizeof *o);
    void **data = calloc(n, sizeof *data);
    int r = !o || !data ? pulse_fail(PULSE_ERR_NOMEM, "objects of %u parts", j->n) : 0;
    for (uint32_t i = 0; !r && i < j->n; i++) {
        part_in *q = &j->part[i];
        const pulse_record *rec = &q->rec[q->have[AS_PATCH] ? AS_PATCH : AS_KEYFRAME];
        o[per * i] = rec->objects[rec->n_objects - 1];
        if (with_heads) {
            r = patch_objects_of(rec, &q->po);
            if (!r && !q->po.head)
                r = pulse_fail(PULSE_ERR_FORMAT, "part %u of %u: its patch has no head object", i, j->n);
            if (!r)
                o[per * i + 1] = *q->po.head;
        }
    }
    /* every run of the family keeps its objects in the parent's objects/ (manifest/layout.h) */
    if (!r)
        r = sync_fetch_objects(j->p->st, j->p->run, o, n, data, &j->fetched);
    for (uint32_t i = 0; !r && i < j->n; i++) {
        part_in *q = &j->part[i];
        r = part_hashes_parse(data[per * i], o[per * i].size, &q->h);
        if (r)
            r = pulse_fail(r, "part %u of %u: %s", i, j->n, pulse_last_error());
        if (!r && with_heads) {
            q->head_bytes = data[per * i + 1];
            data[per * i + 1] = NULL;
            r = pulse_patch_open_head(&q->head, q->head_bytes, (size_t)q->po.head->size, q->po.bytes);
            if (r)
                r = pulse_fail(r, "part %u of %u: its patch's head: %s", i, j->n, pulse_last_error());
        }
    }
    for (size_t t = 0; data && t < n; t++)
        pulse_store_free(data[t]);
    free(data);
    free(o);
    return r;
}

/* The whole model's tensor names and hashes, the parts' merged in name order: no tensor in two
 * parts, and each part's hashes giving the state its record says. */
typedef struct whole_entry {
    const char *name;
    const uint8_t *hash;
    uint32_t part;
} whole_entry;

typedef struct whole_hashes {
    size_t n;
    const char **name;
    uint8_t (*hash)[32];
} whole_hashes;

static int by_name(const void *a, const void *b)
{
    return strcmp(((const whole_entry *)a)->name, ((const whole_entry *)b)->name);
}

static int merge_hashes(commit_job *j, whole_hashes *w)
{
    size_t n = 0;
    for (uint32_t i = 0; i < j->n; i++) {
        part_in *q = &j->part[i];
        uint8_t id[32];
        part_hashes_state(&q->h, id);
        for (int k = 0; k < 2; k++)
            if (q->have[k] && memcmp(id, q->rec[k].result, 32))
                return pulse_fail(PULSE_ERR_CORRUPT, "part %u of %u: its tensor hashes do not give the state its "
                                  "%s record says", i, j->n, pulse_record_kind_name(q->rec[k].kind));
        n += q->h.n;
    }
    whole_entry *e = calloc(n ? n : 1, sizeof *e);
    w->name = calloc(n ? n : 1, sizeof *w->name);
    w->hash = calloc(n ? n : 1, sizeof *w->hash);
    int r = !e || !w->name || !w->hash ? pulse_fail(PULSE_ERR_NOMEM, "tensor hashes of %zu tensors", n) : 0;
    w->n = n;
    for (uint32_t i = 0, k = 0; !r && i < j->n; i++)
        for (size_t t = 0; t < j->part[i].h.n; t++)
            e[k++] = (whole_entry){ j->part[i].h.name[t], j->part[i].h.hash[t], i };
    if (!r)
        qsort(e, n, sizeof *e, by_name);
    for (size_t k = 0; !r && k < n; k++) {
        w->name[k] = e[k].name;
        memcpy(w->hash[k], e[k].hash, 32);
        if (k && !strcmp(e[k - 1].name, e[k].name))
            r = pulse_fail(PULSE_ERR_MISMATCH, "parts %u and %u both hold tensor %s: parts must hold disjoint tensors",
                           e[k - 1].part, e[k].part, e[k].name);
    }
    free(e);
    return r;
}

static void whole_free(whole_hashes *w)
{
    free((void *)w->name);
    free(w->hash);
    memset(w, 0, sizeof *w);
}

/* The tensor hashes of the last committed state LAST (its record's object), for the parts' bases. */
static int last_hashes(commit_job *j, const char *key, const uint8_t last[32], part_hashes *out)
{
    uint8_t *bytes = NULL;
    size_t len = 0;
    int verdict;
    pulse_record rec = { 0 };
    void *data = NULL;
    int r = pulse_index_get_record(j->p->ix, key, &bytes, &len, &verdict);
    if (!r)
        r = pulse_record_parse(bytes, len, &rec);
    const pulse_record_object *whole = NULL;   /* the model's: the first tensor-hashes object, tensor "" */
    for (uint32_t i = 0; !r && !whole && i < rec.n_objects; i++)
        if (!strcmp(rec.objects[i].role, PULSE_ROLE_TENSOR_HASHES) && !rec.objects[i].tensor[0])
            whole = &rec.objects[i];
    if (!r && !whole)
        r = pulse_fail(PULSE_ERR_FORMAT, "the last committed record %s names no tensor hashes (not a commit of "
                       "parts): publish a keyframe in every part", key);
    if (!r)
        r = sync_fetch_objects(j->p->st, j->p->run, whole, 1, &data, &j->fetched);
    if (!r)
        r = part_hashes_parse(data, whole->size, out);
    uint8_t id[32];
    if (!r && (part_hashes_state(out, id), memcmp(id, last, 32)))
        r = pulse_fail(PULSE_ERR_CORRUPT, "the tensor hashes of the last committed record %s do not give its state",
                       key);
    pulse_store_free(data);
    pulse_record_clear(&rec);
    free(bytes);
    return r;
}

/* Each part's patch starts from its tensors as the last commit left them. */
static int check_bases(commit_job *j, const part_hashes *last, uint64_t last_step)
{
    size_t total = 0;
    for (uint32_t i = 0; i < j->n; i++) {
        part_in *q = &j->part[i];
        part_hashes mine = { .n = q->h.n, .name = q->h.name, .hash = calloc(q->h.n ? q->h.n : 1, 32) };
        if (!mine.hash)
            return pulse_fail(PULSE_ERR_NOMEM, "tensor hashes");
        for (size_t t = 0; t < q->h.n; t++) {
            long at = part_hashes_find(last, q->h.name[t]);
            if (at < 0) {
                free(mine.hash);
                return pulse_fail(PULSE_ERR_MISMATCH, "part %u of %u holds tensor %s, which the last commit (step "
                                  "%llu) had not: the model's tensors changed; publish a keyframe in every part", i,
                                  j->n, q->h.name[t], (unsigned long long)last_step);
            }
            memcpy(mine.hash[t], last->hash[at], 32);
        }
        uint8_t id[32];
        part_hashes_state(&mine, id);
        free(mine.hash);
        if (memcmp(id, q->rec[AS_PATCH].base, 32)) {
            char a[65], b[65];
            return pulse_fail(PULSE_ERR_MISMATCH, "part %u of %u: its patch of step %llu starts from %.16s..., not "
                              "from its tensors at the last commit (step %llu, %.16s...): built on another base", i,
                              j->n, (unsigned long long)j->step, pulse_id_hex(q->rec[AS_PATCH].base, a),
                              (unsigned long long)last_step, pulse_id_hex(id, b));
        }
        total += q->h.n;
    }
    if (total != last->n)
        return pulse_fail(PULSE_ERR_MISMATCH, "the parts hold %zu tensors, the last commit (step %llu) %zu: a part "
                          "is missing tensors", total, (unsigned long long)last_step, last->n);
    return 0;
}

/* The whole model's tensor hashes as an object of the committed record (the next commit's bases). */
static int add_whole_hashes(commit_job *j, const whole_hashes *w, pulse_record *rec)
{
    uint8_t *bytes = NULL;
    size_t len = 0;
    uint8_t digest[32];
    int r = part_hashes_encode(w->n, w->name, (const uint8_t(*)[32])w->hash, &bytes, &len);
    if (!r) {
        stage_object(j, bytes, len, digest);
        r = pulse_record_add_object(rec, digest, len, PULSE_ROLE_TENSOR_HASHES, "", 0, 0);
    }
    rec->patch_bytes += len;   /* the sum of the record's objects */
    return r;
}

/* The step's patch: one head over the parts' heads, their data objects named where they are. */
static int build_patch(commit_job *j, pulse_record *rec)
{
    const pulse_patch **heads = calloc(j->n, sizeof *heads);
    uint64_t *at = calloc(j->n, sizeof *at);
    int r = !heads || !at ? pulse_fail(PULSE_ERR_NOMEM, "heads of %u parts", j->n) : 0;
    uint64_t data = 0;
    for (uint32_t i = 0; !r && i < j->n; i++) {
        part_in *q = &j->part[i];
        if (memcmp(pulse_patch_base_id(q->head), q->rec[AS_PATCH].base, 32) ||
            memcmp(pulse_patch_result_id(q->head), q->rec[AS_PATCH].result, 32))
            r = pulse_fail(PULSE_ERR_MISMATCH, "part %u of %u: its patch's own state ids differ from its record's", i,
                           j->n);
        heads[i] = q->head;
        at[i] = data;
        data += q->po.bytes - q->po.head->size;
    }
    uint8_t *head = NULL;
    size_t head_len = 0;
    if (!r)
        r = patch_merge_heads(heads, j->n, at, rec->base, rec->result, &head, &head_len);
    uint8_t digest[32];
    if (!r) {
        stage_object(j, head, head_len, digest);
        head = NULL;
        r = pulse_record_add_object(rec, digest, head_len, PULSE_ROLE_PATCH_INDEX, "", 0, head_len);
    }
    for (uint32_t i = 0; !r && i < j->n; i++) {
        const part_in *q = &j->part[i];
        for (size_t e = 1; !r && e < q->po.n; e++) {
            const pulse_record_object *o = q->po.ext[e].obj;
            uint64_t off = head_len + at[i] + (q->po.ext[e].at - q->po.head->size);
            r = pulse_record_add_object(rec, o->digest, o->size, PULSE_ROLE_PATCH_DATA, "", off, o->size);
        }
        rec->changes += q->rec[AS_PATCH].changes;
        rec->dense_bytes += q->rec[AS_PATCH].dense_bytes;
    }
    rec->patch_bytes = head_len + data;
    free(head);
    free(heads);
    free(at);
    return r;
}

/* The step's keyframe: each part's file, its chunks named by the file it rebuilds. */
static int build_keyframe(commit_job *j, pulse_record *rec)
{
    int r = 0;
    for (uint32_t i = 0; !r && i < j->n; i++) {
        const pulse_record *pr = &j->part[i].rec[AS_KEYFRAME];
        char file[64];
        snprintf(file, sizeof file, "part-%05u-of-%05u.safetensors", i, j->n);
        for (uint32_t k = 0; !r && k + 1 < pr->n_objects; k++) {   /* its chunks, less its tensor hashes */
            const pulse_record_object *o = &pr->objects[k];
            r = pulse_record_add_object(rec, o->digest, o->size, o->role, file, o->range_offset, o->range_length);
            rec->patch_bytes += o->size;
        }
        rec->changes += pr->changes;
        rec->dense_bytes += pr->dense_bytes;
    }
    return r;
}

/* What only the parts' own records name (each part's tensor hashes; with a patch, its head), named
 * again, last, by the committed record: the run's records then name every object of the step, so
 * its audit finds no orphan and its retention keeps what its records need. */
static int add_part_objects(commit_job *j, int kind, pulse_record *rec)
{
    int r = 0;
    for (uint32_t i = 0; !r && i < j->n; i++) {
        const part_in *q = &j->part[i];
        const pulse_record *pr = &q->rec[kind == PULSE_RECORD_SYNC_PATCH ? AS_PATCH : AS_KEYFRAME];
        const pulse_record_object *h = &pr->objects[pr->n_objects - 1];
        r = pulse_record_add_object(rec, h->digest, h->size, PULSE_ROLE_TENSOR_HASHES, q->run, 0, 0);
        rec->patch_bytes += h->size;
        if (!r && kind == PULSE_RECORD_SYNC_PATCH) {
            r = pulse_record_add_object(rec, q->po.head->digest, q->po.head->size, PULSE_ROLE_PART_INDEX, q->run, 0,
                                        q->po.head->size);
            rec->patch_bytes += q->po.head->size;
        }
    }
    return r;
}

static int commit_one(commit_job *j, int kind, const uint8_t base[32], const whole_hashes *w, pulse_sync_step *s)
{
    pulse_record rec;
    int r = pulse_record_init(&rec, kind, j->p->run, j->step);
    if (r)
        return r;
    rec.time = (uint64_t)time(NULL);
    if (base)
        memcpy(rec.base, base, 32);
    ckpt_state_of_hashes(w->n, (const uint8_t(*)[32])w->hash, rec.result);
    r = kind == PULSE_RECORD_SYNC_PATCH ? build_patch(j, &rec) : build_keyframe(j, &rec);
    if (!r)
        r = add_whole_hashes(j, w, &rec);
    if (!r)
        r = add_part_objects(j, kind, &rec);
    if (!r)
        r = upload_staged(j);
    uint8_t *bytes = NULL;
    size_t len = 0;
    char rel[SYNC_KEY_MAX];
    if (!r)
        r = sync_commit_record(j->p->st, j->p->run, j->p->key, &rec, sync_same_transition, rel, &bytes, &len,
                               &j->moved);
    if (!r)
        r = publisher_move_head(j->p, rel, bytes, len);
    if (!r)
        sync_step_from_record(s, &rec, rel);
    free(bytes);
    pulse_record_clear(&rec);
    return r;
}

/* The model's tensor hashes at STATE, kept for the next commit's bases. */
static int remember(pulse_publisher *p, const whole_hashes *w, const uint8_t state[32])
{
    part_hashes_free(&p->committed);
    part_hashes *h = &p->committed;
    h->name = calloc(w->n ? w->n : 1, sizeof *h->name);
    h->hash = calloc(w->n ? w->n : 1, sizeof *h->hash);
    int r = !h->name || !h->hash ? pulse_fail(PULSE_ERR_NOMEM, "tensor hashes") : 0;
    for (size_t i = 0; !r && i < w->n; i++, h->n++) {
        if (!(h->name[i] = strdup(w->name[i])))
            r = pulse_fail(PULSE_ERR_NOMEM, "tensor hashes");
        memcpy(h->hash[i], w->hash[i], 32);
    }
    if (r)
        part_hashes_free(h);
    else
        memcpy(p->committed_state, state, 32);
    return r;
}

/* The step already committed: the record the index holds for it. */
static int already(pulse_publisher *p, uint64_t step, const uint8_t state[32], pulse_sync_step *s)
{
    pulse_index_link *links = NULL;
    size_t n = 0;
    int r = pulse_index_chain(p->ix, p->run, step, &links, &n);
    if (!r && n) {
        snprintf(s->record_key, sizeof s->record_key, "%s", links[n - 1].key);
        s->kind = links[n - 1].kind;
    }
    free(links);
    s->already = 1;
    s->step = step;
    memcpy(s->result, state, 32);
    return r;
}

PULSE_API int pulse_publisher_commit(pulse_publisher *p, uint32_t parts, int64_t step, double wait_s,
                                     pulse_sync_step *out)
{
    pulse_clear_error();
    if (!p || p->o.parts)
        return pulse_fail(PULSE_ERR_INVALID, "pulse_publisher_commit: a publisher of the whole run commits, not a "
                          "part's");
    if (parts < 1 || parts > PULSE_LAYOUT_MAX_PARTS || !(wait_s >= 0))
        return pulse_fail(PULSE_ERR_INVALID, "pulse_publisher_commit: %u parts (1..%u), wait %g s", parts,
                          PULSE_LAYOUT_MAX_PARTS, wait_s);
    pulse_sync_step s = { 0 };
    uint8_t last_state[32];
    uint64_t last_step = 0;
    int have_last = 0;
    int r = pulse_index_head(p->ix, p->run, &last_step, last_state);
    if (r == 0)
        have_last = 1;
    else if (r == PULSE_ERR_NOTFOUND)
        r = 0;
    if (!r)
        pulse_clear_error();
    if (!r && step < 0)
        step = have_last ? (int64_t)last_step + 1 : 0;
    if (!r && have_last && (uint64_t)step <= last_step) {
        if ((uint64_t)step < last_step)
            return pulse_fail(PULSE_ERR_INVALID, "step %lld is not after the last committed step %llu",
                              (long long)step, (unsigned long long)last_step);
        r = already(p, last_step, last_state, &s);
        if (!r && out)
            *out = s;
        return r;
    }
    commit_job j = { .p = p, .n = parts, .step = (uint64_t)step };
    pulse_public_key self = { 0 };
    memcpy(self.key, p->node, 32);
    j.part = calloc(parts, sizeof *j.part);
    if (!r && !j.part)
        r = pulse_fail(PULSE_ERR_NOMEM, "%u parts", parts);
    if (!r)
        r = pulse_trust_new(&j.self);
    if (!r)
        r = pulse_trust_add(j.self, &self);
    for (uint32_t i = 0; !r && i < parts; i++)
        r = pulse_layout_part_run(j.part[i].run, sizeof j.part[i].run, p->run, i, parts);
    memset(&p->phases, 0, sizeof p->phases);
    double t0 = pulse_monotonic_s();
    if (!r)
        r = gather_records(&j, wait_s);
    p->phases.wait = 1e3 * (pulse_monotonic_s() - t0);
    t0 = pulse_monotonic_s();

    /* A patch needs every part's patch and a commit to start from; a keyframe every part's. */
    int all_patch = 1, all_keyframe = 1;
    uint32_t lacks_patch = 0, lacks_keyframe = 0;
    for (uint32_t i = parts; !r && i-- > 0;) {
        if (!j.part[i].have[AS_PATCH])
            all_patch = 0, lacks_patch = i;
        if (!j.part[i].have[AS_KEYFRAME])
            all_keyframe = 0, lacks_keyframe = i;
    }
    const int as_patch = have_last && all_patch;
    if (!r && !as_patch && !all_keyframe)
        r = have_last ? pulse_fail(PULSE_ERR_MISMATCH, "part %u of %u published step %llu as a keyframe only and part "
                                   "%u as a patch only: publish the step with a keyframe in every part (--keyframe)",
                                   lacks_patch, parts, (unsigned long long)step, lacks_keyframe)
                      : pulse_fail(PULSE_ERR_MISMATCH, "nothing committed yet, so step %llu needs a keyframe of every "
                                   "part; part %u of %u has none (publish it with --keyframe)",
                                   (unsigned long long)step, lacks_keyframe, parts);
    whole_hashes w = { 0 };
    part_hashes last = { 0 };
    if (!r)
        r = fetch_part_objects(&j, as_patch);
    if (!r)
        r = merge_hashes(&j, &w);
    if (!r && as_patch) {
        pulse_index_link *links = NULL;
        size_t n = 0;
        r = pulse_index_chain(p->ix, p->run, last_step, &links, &n);
        if (!r && !n)
            r = pulse_fail(PULSE_ERR_NOTFOUND, "the index holds no record of the last committed step %llu",
                           (unsigned long long)last_step);
        const part_hashes *base = &p->committed;   /* kept from the last commit of this handle */
        if (!r && (!p->committed.n || memcmp(p->committed_state, last_state, 32))) {
            r = last_hashes(&j, links[n - 1].key, last_state, &last);
            base = &last;
        }
        free(links);
        if (!r)
            r = check_bases(&j, base, last_step);
    }
    uint8_t result[32];
    if (!r) {
        ckpt_state_of_hashes(w.n, (const uint8_t(*)[32])w.hash, result);
        r = j.head_fetched ? publisher_check_head_got(p, j.head_result, j.head_data, j.head_len, have_last, last_step,
                                                      last_state, (uint64_t)step, result)
                           : publisher_check_head(p, have_last, last_step, last_state, (uint64_t)step, result);
        j.head_data = NULL;   /* taken */
        j.head_fetched = 0;
    }
    if (!r && as_patch)
        r = commit_one(&j, PULSE_RECORD_SYNC_PATCH, last_state, &w, &s);
    if (!r && all_keyframe) {
        pulse_sync_step k = { 0 };
        r = commit_one(&j, PULSE_RECORD_KEYFRAME, NULL, &w, &k);
        if (!r && !as_patch)
            s = k;
    }
    if (!r)
        r = remember(p, &w, result);
    s.moved_bytes = j.moved;
    p->phases.record = 1e3 * (pulse_monotonic_s() - t0);   /* checks, the merged head, the record */
    part_hashes_free(&last);
    whole_free(&w);
    parts_free(&j);
    if (!r && out)
        *out = s;
    return r;
}
