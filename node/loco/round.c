/* SPDX-License-Identifier: Apache-2.0 */
/* One PULSELoCo round through a store: gate, publish, wait, validate, fixed-order mean, outer step, result. */
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/fail.h"
#include "base/names.h"
#include "crypto/sha256.h"
#include "node/kernels/kernels.h"
#include "node/loco/loco_internal.h"
#include "node/loco/round_internal.h"
#include "node/parallel.h"
#include "node/sync/sync_internal.h"
#include "pulseweights/keys.h"
#include "pulseweights/record.h"
#include "pulseweights/store.h"

#define MEMBERS_MAGIC "PLSM"

static int cmp_node(const void *a, const void *b)
{
    return memcmp(((const trainer *)a)->node, ((const trainer *)b)->node, 32);
}

/* ---- gate: this trainer's shards --------------------------------------------------- */

static int append_shard(trainer *t, const loco_shard *s)
{
    loco_shard *n = realloc(t->shards, (t->n_shards + 1) * sizeof *n);
    if (!n)
        return pulse_fail(PULSE_ERR_NOMEM, "shard list");
    t->shards = n;
    t->shards[t->n_shards++] = *s;
    return 0;
}

/* One range of the gate, done on a worker thread: its e_new slice, shard and encoded object. */
typedef struct gate_job {
    loco_shard s;
    uint8_t *obj;
    size_t obj_len;
} gate_job;

typedef struct gate_ctx {
    round_ctx *c;
    gate_job *jobs;
} gate_ctx;

static int gate_range(void *ctx, size_t i)
{
    gate_ctx *g = ctx;
    round_ctx *c = g->c;
    gate_job *j = &g->jobs[i];
    const pulse_tensor *th = pulse_ckpt_tensor(c->st.theta, j->s.tensor), *e = pulse_ckpt_tensor(c->e_new, j->s.tensor);
    size_t len = (size_t)j->s.len;
    float *delta = malloc(len * 4), *val = malloc(len * 4);
    uint32_t *idx = malloc(len * 4);
    int r = (!delta || !idx || !val) ? pulse_fail(PULSE_ERR_NOMEM, "gate buffers") : 0;
    if (!r) {
        const float *theta = (const float *)(const void *)th->data + j->s.start;
        float *er = (float *)(void *)e->data + j->s.start;
        loco_delta(theta, c->local_data[j->s.tensor] + j->s.start, delta, len);
        size_t k = c->kt->gate[c->st.view](theta, delta, er, len, idx, val);
        if (c->o->bf16_values)
            k = loco_bf16_values(c->st.view, theta, er, idx, val, k);
        size_t bad = 0;
        int gc = c->kt->gate_check[c->st.view](theta, len, idx, val, k, &bad);
        if (gc != PULSE_GATE_OK)
            r = pulse_fail(PULSE_ERR_INVALID, "tensor %s element %" PRIu64 ": this trainer's own update is %s",
                           th->name, j->s.start + (k ? idx[bad] : 0),
                           gc == PULSE_GATE_NOT_FINITE ? "not finite (NaN or Inf in theta_local?)" : "malformed");
        /* The bound every receiver applies (docs/loco.md "Bounded values"): refused here, loudly,
         * rather than published and excluded by everyone else. */
        size_t over = r ? k : loco_first_over(val, k, LOCO_MAX_VALUE);
        if (over < k)
            r = pulse_fail(PULSE_ERR_INVALID, "tensor %s element %" PRIu64 ": this trainer's own update %g is over the "
                           "bound of %g per entry (diverged local training?)", th->name, j->s.start + idx[over],
                           (double)val[over], (double)LOCO_MAX_VALUE);
        if (!r && k) {
            j->s.k = (uint32_t)k;
            j->s.idx = malloc(k * 4);
            j->s.val = malloc(k * 4);
            if (!j->s.idx || !j->s.val) {
                r = pulse_fail(PULSE_ERR_NOMEM, "shard");
            } else {
                memcpy(j->s.idx, idx, k * 4);
                memcpy(j->s.val, val, k * 4);
                r = loco_shard_encode(c->st.view, j->s.start, (uint32_t)len, idx, val, (uint32_t)k, &j->obj, &j->obj_len);
            }
        }
    }
    free(delta);
    free(idx);
    free(val);
    return r;
}

/* a = (theta_r - theta_local) + e per range (ranges on all threads); e_new (the open file) is
 * updated in place; the non-empty ranges become this trainer's shards, in tensor and range order. */
static int gate_own(round_ctx *c, gate_job **jobs_out, size_t *n_jobs)
{
    trainer *me = &c->tr[c->self];
    size_t nt = pulse_ckpt_count(c->st.theta), nj = 0;
    const uint64_t cut = c->o->shard_elems ? c->o->shard_elems : LOCO_SHARD_ELEMS;
    for (size_t t = 0; t < nt; t++) {
        uint64_t ne = pulse_ckpt_tensor(c->st.theta, t)->nelems;
        c->rep->params += ne;
        nj += (size_t)((ne + cut - 1) / cut);
    }
    if (nj == 0)
        return pulse_fail(PULSE_ERR_INVALID, "theta_r has no elements");
    gate_job *jobs = calloc(nj, sizeof *jobs);
    if (!jobs)
        return pulse_fail(PULSE_ERR_NOMEM, "%zu gate ranges", nj);
    *jobs_out = jobs;
    *n_jobs = nj;
    size_t j = 0;
    for (size_t t = 0; t < nt; t++) {
        uint64_t ne = pulse_ckpt_tensor(c->st.theta, t)->nelems;
        for (uint64_t off = 0; off < ne; off += cut)
            jobs[j++].s = (loco_shard){ .tensor = t, .start = off, .len = ne - off < cut ? ne - off : cut };
    }
    gate_ctx g = { c, jobs };
    int r = pulse_parallel_for(nj, c->o->threads, gate_range, &g);
    /* A record names at least one object: with nothing to send, an empty shard of the first range. */
    size_t sent_ranges = 0;
    for (size_t i = 0; i < nj; i++)
        sent_ranges += jobs[i].s.k > 0;
    if (!r && sent_ranges == 0)
        r = loco_shard_encode(c->st.view, jobs[0].s.start, (uint32_t)jobs[0].s.len, NULL, NULL, 0, &jobs[0].obj,
                              &jobs[0].obj_len);
    for (size_t i = 0; !r && i < nj; i++) {
        if (!jobs[i].obj)
            continue;
        if ((r = append_shard(me, &jobs[i].s)) == 0) {
            me->entries += jobs[i].s.k;
            jobs[i].s.idx = NULL;   /* now owned by me->shards */
            jobs[i].s.val = NULL;
        }
    }
    c->rep->sent = me->entries;
    return r;
}

static void gate_jobs_free(gate_job *jobs, size_t n)
{
    for (size_t i = 0; jobs && i < n; i++) {
        loco_shard_free(&jobs[i].s);
        free(jobs[i].obj);
    }
    free(jobs);
}

/* ---- publish ------------------------------------------------------------------------ */

/* A re-run's record must name the very same objects (shards, members), not only the same states. */
static int same_objects(const pulse_record *prev, const pulse_record *rec)
{
    int same = sync_same_transition(prev, rec) && prev->n_objects == rec->n_objects;
    for (uint32_t i = 0; same && i < rec->n_objects; i++)
        same = !memcmp(prev->objects[i].digest, rec->objects[i].digest, 32) &&
               prev->objects[i].range_offset == rec->objects[i].range_offset &&
               !strcmp(prev->objects[i].tensor, rec->objects[i].tensor);
    return same;
}

/* Puts a signed record create-if-absent; an existing one from this node must name the same objects. */
static int put_record(round_ctx *c, pulse_record *rec, uint8_t **bytes, size_t *len)
{
    char rel[SYNC_KEY_MAX];
    return sync_commit_record(c->store, c->o->run, c->key, rec, same_objects, rel, bytes, len, &c->rep->uploaded);
}

static int publish_own(round_ctx *c, const gate_job *jobs, size_t nj)
{
    trainer *me = &c->tr[c->self];
    sync_blob *blobs = calloc(me->n_shards, sizeof *blobs);
    pulse_record rec;
    int r = pulse_record_init(&rec, PULSE_RECORD_LOCO_SHARD, c->o->run, c->st.round);
    if (!blobs && !r)
        r = pulse_fail(PULSE_ERR_NOMEM, "shard objects");
    size_t b = 0;
    for (size_t i = 0; !r && i < nj; i++) {
        if (!jobs[i].obj)
            continue;
        const loco_shard *s = &me->shards[b];
        blobs[b].data = jobs[i].obj;
        blobs[b].len = jobs[i].obj_len;
        pulse_sha256(jobs[i].obj, jobs[i].obj_len, blobs[b].digest);
        me->shard_bytes += jobs[i].obj_len;
        r = pulse_record_add_object(&rec, blobs[b].digest, jobs[i].obj_len, LOCO_SHARD_ROLE,
                                    pulse_ckpt_tensor(c->st.theta, s->tensor)->name, s->start, s->len);
        b++;
    }
    if (!r)
        r = sync_put_objects(c->store, c->o->run, blobs, b, &c->rep->uploaded);
    if (!r) {
        memcpy(rec.base, c->st.view_id, 32);
        rec.time = (uint64_t)time(NULL);
        rec.changes = me->entries;
        rec.dense_bytes = 4 * c->rep->params;
        rec.patch_bytes = me->shard_bytes;
        r = put_record(c, &rec, &c->own_rec, &c->own_rec_len);
    }
    if (!r) {
        pulse_sha256(c->own_rec, c->own_rec_len, me->rec_digest);
        me->listed = 1;
    }
    free(blobs);
    pulse_record_clear(&rec);
    c->rep->shard_bytes = me->shard_bytes;
    return r;
}

/* ---- validating another trainer's shards --------------------------------------------- */

typedef struct check_ctx {
    round_ctx *c;
    trainer *t;
    const pulse_record *rec;
    void **objs;
} check_ctx;

static int check_shard(void *ctx, size_t i)
{
    check_ctx *k = ctx;
    return loco_check_shard_object(k->c, &k->rec->objects[i], k->objs[i], k->t->shards[i].tensor, &k->t->shards[i]);
}

static int validate_trainer(round_ctx *c, trainer *t)
{
    pulse_record rec;
    void *bytes = NULL;
    size_t len = 0;
    int r = loco_fetch_record(c, PULSE_RECORD_LOCO_SHARD, t->node, &rec, &bytes, &len);
    if (r)
        return r;
    pulse_sha256(bytes, len, t->rec_digest);
    pulse_store_free(bytes);
    void **objs = calloc(rec.n_objects, sizeof *objs);
    t->shards = calloc(rec.n_objects, sizeof *t->shards);
    if (!objs || !t->shards)
        r = pulse_fail(PULSE_ERR_NOMEM, "%u shards", rec.n_objects);
    size_t prev_t = 0;
    uint64_t prev_end = 0;
    for (uint32_t i = 0; !r && i < rec.n_objects; i++) {
        const pulse_record_object *o = &rec.objects[i];
        const pulse_tensor *th = pulse_ckpt_find(c->st.theta, o->tensor);
        if (strcmp(o->role, LOCO_SHARD_ROLE) || !th) {
            r = pulse_fail(PULSE_ERR_FORMAT, "object %u: role %s, tensor '%s' not in theta_r", i, o->role, o->tensor);
            break;
        }
        size_t ti = (size_t)(th - pulse_ckpt_tensor(c->st.theta, 0));
        if (o->range_length == 0 || o->range_length > LOCO_SHARD_MAX_ELEMS || o->range_offset > th->nelems ||
            o->range_length > th->nelems - o->range_offset)
            r = pulse_fail(PULSE_ERR_FORMAT, "object %u: range [%" PRIu64 ", +%" PRIu64 ") outside tensor %s", i,
                           o->range_offset, o->range_length, o->tensor);
        else if (i > 0 && (ti < prev_t || (ti == prev_t && o->range_offset < prev_end)))
            r = pulse_fail(PULSE_ERR_FORMAT, "object %u: ranges out of order or overlapping (tensor %s)", i, o->tensor);
        else if (o->size > LOCO_SHARD_HEADER + 1024 + 12 * o->range_length)
            r = pulse_fail(PULSE_ERR_LIMIT, "object %u: %" PRIu64 " bytes for %" PRIu64 " elements", i, o->size,
                           o->range_length);
        prev_t = ti;
        prev_end = o->range_offset + o->range_length;
        t->shards[i].tensor = ti;
    }
    if (!r)
        r = sync_fetch_objects(c->store, c->o->run, rec.objects, rec.n_objects, objs, &c->rep->downloaded);
    if (!r) {
        /* Decode and gate_check every object on all threads; the first failing object's reason wins. */
        check_ctx k = { c, t, &rec, objs };
        t->n_shards = rec.n_objects;
        r = pulse_parallel_for(rec.n_objects, c->o->threads, check_shard, &k);
    }
    for (uint32_t i = 0; !r && i < rec.n_objects; i++) {
        t->shard_bytes += rec.objects[i].size;
        t->entries += t->shards[i].k;
    }
    for (uint32_t i = 0; objs && i < rec.n_objects; i++)
        pulse_store_free(objs[i]);
    free(objs);
    pulse_record_clear(&rec);
    return r;
}

/* ---- the members object of a result ------------------------------------------------- */

static int members_encode(round_ctx *c, const uint8_t theta_id[32], uint8_t **out, size_t *len)
{
    size_t k = 0;
    for (size_t i = 0; i < c->n_tr; i++)
        k += c->tr[i].included;
    size_t n = 12 + 64 * k + 32;
    uint8_t *b = calloc(1, n);
    if (!b)
        return pulse_fail(PULSE_ERR_NOMEM, "members");
    memcpy(b, MEMBERS_MAGIC, 4);
    b[4] = 1;
    for (int i = 0; i < 4; i++)
        b[8 + i] = (uint8_t)(k >> (8 * i));
    size_t p = 12;
    for (size_t i = 0; i < c->n_tr; i++) {
        if (!c->tr[i].included)
            continue;
        memcpy(b + p, c->tr[i].node, 32);
        memcpy(b + p + 32, c->tr[i].rec_digest, 32);
        p += 64;
    }
    memcpy(b + p, theta_id, 32);
    *out = b;
    *len = n;
    return 0;
}

/* Reads a result's member list into in_result/want (all members must be trainers, in node order). */
static int members_decode(round_ctx *c, const uint8_t *b, size_t n)
{
    if (n < 44 || memcmp(b, MEMBERS_MAGIC, 4) || b[4] != 1)
        return pulse_fail(PULSE_ERR_FORMAT, "not a version 1 members object");
    uint32_t k = (uint32_t)b[8] | (uint32_t)b[9] << 8 | (uint32_t)b[10] << 16 | (uint32_t)b[11] << 24;
    if (k == 0 || k > c->n_tr || n != 12 + 64 * (size_t)k + 32)
        return pulse_fail(PULSE_ERR_FORMAT, "members object of %zu bytes for %u members", n, k);
    for (uint32_t j = 0; j < k; j++) {
        trainer *t = loco_find_trainer(c, b + 12 + 64 * j);
        if (!t || (j > 0 && memcmp(b + 12 + 64 * (j - 1), b + 12 + 64 * j, 32) >= 0))
            return pulse_fail(PULSE_ERR_FORMAT, "member %u: not a trainer of this round, or out of order", j);
        t->in_result = 1;
        memcpy(t->want, b + 12 + 64 * j + 32, 32);
    }
    return 0;
}

/* The first trusted result record of this round (node order) with a readable member list, or none:
 * fills the trainers' in_result and want. */
static int find_result(round_ctx *c, int *found)
{
    *found = 0;
    uint8_t (*nodes)[32] = calloc(c->n_tr, 32);
    size_t n = 0;
    int r = nodes ? loco_list_round(c, PULSE_RECORD_LOCO_RESULT, nodes, &n) : pulse_fail(PULSE_ERR_NOMEM, "list");
    for (size_t i = 0; !r && i < n && !*found; i++) {
        pulse_record rec;
        if (loco_fetch_record(c, PULSE_RECORD_LOCO_RESULT, nodes[i], &rec, NULL, NULL) != 0)
            continue;   /* a bad result is reported when results are compared */
        void *obj = NULL;
        if (rec.n_objects == 1 && !strcmp(rec.objects[0].role, LOCO_MEMBERS_ROLE) &&
            rec.objects[0].size <= 12 + 64 * (uint64_t)c->n_tr + 32 &&
            sync_fetch_objects(c->store, c->o->run, rec.objects, 1, &obj, &c->rep->downloaded) == 0) {
            for (size_t t = 0; t < c->n_tr; t++)
                c->tr[t].in_result = 0;
            if (members_decode(c, obj, rec.objects[0].size) == 0) {
                *found = 1;
                char hex[PULSE_NODE_ID_HEX];
                pulse_node_id_hex(nodes[i], hex);
                loco_say(c, 0, "adopting the member list of trainer %.16s's result", hex);
            }
            pulse_store_free(obj);
        }
        pulse_record_clear(&rec);
    }
    if (!*found)
        for (size_t t = 0; t < c->n_tr; t++)
            c->tr[t].in_result = 0;
    free(nodes);
    return r;
}

/* ---- wait, choose the members ------------------------------------------------------- */

static int stop_at_result(round_ctx *c, void *ctx, int *found)
{
    (void)ctx;
    return find_result(c, found);
}

/* Polls until every trainer has published (or a result for the round exists, or the deadline). */
static int wait_round(round_ctx *c, int *adopted)
{
    return loco_wait_listed(c, stop_at_result, NULL, adopted);
}

/* Sets the members: the adopted result's list (each must validate here and be the same record), or
 * every trainer whose record is listed and whose shards pass (a failing one is excluded, loudly). */
static int choose(round_ctx *c, int adopted)
{
    size_t quorum = loco_quorum(c), listed = 0, included = 0;
    for (size_t i = 0; i < c->n_tr; i++)
        listed += c->tr[i].listed;
    if (!adopted && listed < quorum)
        return pulse_fail(PULSE_ERR_NOTFOUND, "quorum not reached: %zu of %zu trainers published round %" PRIu64
                          " by the deadline (%.1f s), %zu needed", listed, c->n_tr, c->st.round, c->o->deadline_s,
                          quorum);
    int r = 0;
    for (size_t i = 0; !r && i < c->n_tr; i++) {
        trainer *t = &c->tr[i];
        t->included = 0;
        if (!(adopted ? t->in_result : t->listed))
            continue;
        if (!t->checked) {
            t->checked = 1;
            if (i == c->self) {
                t->valid = 1;
            } else if (validate_trainer(c, t) == 0) {
                t->valid = 1;
            } else {
                loco_say(c, 1, "trainer %.16s (%s) excluded: %s", t->hex, t->name, pulse_last_error());
                c->rep->excluded++;
            }
        }
        if (adopted && (!t->valid || memcmp(t->rec_digest, t->want, 32)))
            r = pulse_fail(PULSE_ERR_MISMATCH, "the round's result includes trainer %.16s (%s), whose shard %s here",
                           t->hex, t->name, t->valid ? "record differs" : "fails validation");
        t->included = t->valid;
        included += (size_t)t->included;
    }
    if (!r && !adopted && included < quorum)
        r = pulse_fail(PULSE_ERR_NOTFOUND, "quorum not reached: %zu valid of %zu trainers, %zu needed", included,
                       c->n_tr, quorum);
    c->rep->adopted = adopted;
    c->rep->included = (unsigned)included;
    return r;
}

static int wait_and_choose(round_ctx *c)
{
    int adopted = 0;
    int r = wait_round(c, &adopted);
    if (!r)
        r = choose(c, adopted);
    /* A trainer that finished meanwhile fixed the round's members: follow its list rather than
     * publish a different result (the race of a straggler arriving mid-round). */
    if (!r && !adopted && (r = find_result(c, &adopted)) == 0 && adopted) {
        int differs = 0;
        for (size_t i = 0; i < c->n_tr; i++)
            differs |= c->tr[i].in_result != c->tr[i].included;
        if (differs) {
            loco_say(c, 1, "another trainer's result has fixed a different member list meanwhile: following it");
            r = choose(c, 1);
        }
    }
    return r;
}

/* ---- aggregate and step ------------------------------------------------------------- */

typedef struct agg_ctx {
    round_ctx *c;
    pulse_ckpt *theta_new, *m_new;
} agg_ctx;

/* The first of TR's shards (sorted by tensor) that belongs to tensor T or a later one. */
static size_t first_shard(const trainer *tr, size_t t)
{
    size_t lo = 0, hi = tr->n_shards;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (tr->shards[mid].tensor < t)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* One tensor: the sum goes into theta_{r+1}'s own memory (zeroed first), which the outer step
 * then overwrites element by element (it reads acc[i] before writing theta_out[i]). */
static int aggregate_tensor(void *ctx, size_t t)
{
    agg_ctx *g = ctx;
    round_ctx *c = g->c;
    const pulse_tensor *th = pulse_ckpt_tensor(c->st.theta, t);
    float *acc = (float *)(void *)pulse_ckpt_tensor(g->theta_new, t)->data;
    if (th->nelems == 0)
        return 0;
    memset(acc, 0, th->nelems * 4);   /* all +0.0f */
    /* Reduce-scatter: the owners' sums, each computed as the loop below computes it (0 + the same
     * values in the same order), added once to +0. */
    if (c->rs)
        loco_rs_add_tensor(c, t, acc);
    /* Fixed order: trainers by node id, each one's shards of this tensor in record order. */
    for (size_t k = 0; !c->rs && k < c->n_tr; k++) {
        const trainer *tr = &c->tr[k];
        if (!tr->included)
            continue;
        for (size_t i = first_shard(tr, t); i < tr->n_shards && tr->shards[i].tensor == t; i++) {
            const loco_shard *s = &tr->shards[i];
            if (s->k)
                c->kt->scatter_add_f32(acc + s->start, s->idx, s->k, s->val);
        }
    }
    float *m = (float *)(void *)pulse_ckpt_tensor(g->m_new, t)->data;
    loco_outer_step((const float *)(const void *)th->data, acc, (float)c->rep->included, m, c->o->outer_lr,
                    c->o->momentum, c->o->nesterov, acc, th->nelems);
    /* Bounded values cannot overflow the sum, but the outer step can (an outer lr, a momentum or a
     * theta_r near FP32's limit): every trainer computed these very bits, so every one refuses the
     * round here, before anything is committed or published. */
    size_t bad_t = loco_first_not_finite(acc, th->nelems), bad_m = loco_first_not_finite(m, th->nelems);
    if (bad_t < th->nelems || bad_m < th->nelems) {
        int in_theta = bad_t < th->nelems;
        return pulse_fail(PULSE_ERR_INVALID, "the outer step makes %s not finite at tensor %s element %zu (outer lr "
                          "%g, momentum %g): round %" PRIu64 " not committed", in_theta ? "theta_{r+1}" : "the momentum",
                          th->name, in_theta ? bad_t : bad_m, (double)c->o->outer_lr, (double)c->o->momentum,
                          c->st.round);
    }
    return 0;
}

static int aggregate(round_ctx *c, pulse_ckpt *theta_new, pulse_ckpt *m_new)
{
    agg_ctx g = { c, theta_new, m_new };
    return pulse_parallel_for(pulse_ckpt_count(c->st.theta), c->o->threads, aggregate_tensor, &g);
}

/* This trainer's shard missed the round: e = a everywhere (the sent entries' a come back). The
 * sum e + val is in outer.c's sense one rounding, and exact here (a - v was exact). */
static void fold_back(round_ctx *c)
{
    trainer *me = &c->tr[c->self];
    for (size_t i = 0; i < me->n_shards; i++) {
        const loco_shard *s = &me->shards[i];
        float *e = (float *)(void *)pulse_ckpt_tensor(c->e_new, s->tensor)->data + s->start;
        /* BF16 values left a - bf16(a) in e: adding the value back gives a exactly */
        for (uint32_t j = 0; j < s->k; j++)
            e[s->idx[j]] = c->o->bf16_values ? e[s->idx[j]] + s->val[j] : s->val[j];
    }
}

static int copy_to(const pulse_ckpt *src, const char *path)
{
    pulse_ckpt *o = NULL;
    int r = pulse_ckpt_create_like(&o, path, src);
    if (!r)
        r = pulse_ckpt_commit(o);
    pulse_ckpt_close(&o);
    return r;
}

/* Compares every other trusted result of this round with ours: result state and members object. */
static int compare_results(round_ctx *c, const uint8_t members_digest[32])
{
    uint8_t (*nodes)[32] = calloc(c->n_tr, 32);
    size_t n = 0;
    int r = nodes ? loco_list_round(c, PULSE_RECORD_LOCO_RESULT, nodes, &n) : pulse_fail(PULSE_ERR_NOMEM, "list");
    int bad = 0;
    char first[256] = "";
    for (size_t i = 0; !r && i < n; i++) {
        trainer *t = loco_find_trainer(c, nodes[i]);
        if (t == &c->tr[c->self])
            continue;
        pulse_record rec;
        int v = loco_fetch_record(c, PULSE_RECORD_LOCO_RESULT, nodes[i], &rec, NULL, NULL);
        const char *why = NULL;
        if (v)
            why = pulse_last_error();
        else if (memcmp(rec.result, c->rep->result, 32))
            why = "a different theta_{r+1}";
        else if (rec.n_objects != 1 || memcmp(rec.objects[0].digest, members_digest, 32))
            why = "a different member list or FP32 theta_{r+1}";
        if (why) {
            bad++;
            loco_say(c, 1, "MISMATCH: trainer %.16s (%s) reports %s", t->hex, t->name, why);
            if (!first[0])
                snprintf(first, sizeof first, "trainer %.16s (%s): %s", t->hex, t->name, why);
        } else {
            c->rep->results_compared++;
        }
        if (!v)
            pulse_record_clear(&rec);
    }
    free(nodes);
    c->rep->results_mismatched = (unsigned)bad;
    if (!r && bad)
        r = pulse_fail(PULSE_ERR_MISMATCH, "%d other result(s) of round %" PRIu64 " differ, first %s", bad,
                       c->st.round, first);
    return r;
}

static int finish_round(round_ctx *c)
{
    const pulse_loco_round_opts *o = c->o;
    uint64_t next = c->st.round + 1;
    char path[4096];
    pulse_ckpt *theta_new = NULL, *m_new = NULL;
    loco_state_path(o->state_dir, "theta", next, path);
    int r = pulse_ckpt_create_like(&theta_new, path, c->st.theta);
    if (!r) {
        loco_state_path(o->state_dir, "m", next, path);
        r = pulse_ckpt_create_like(&m_new, path, c->st.m);
    }
    if (!r)
        r = aggregate(c, theta_new, m_new);
    /* --reduce-gate: the sums this trainer withheld as an owner go into its own e (reduce.c). */
    if (!r && c->rs)
        loco_rs_carry_withheld(c);
    c->rep->self_included = c->tr[c->self].included;
    if (!r && !c->tr[c->self].included) {
        loco_say(c, 1, "this trainer's shard is not in the round: its whole a goes back into e");
        fold_back(c);
    }
    if (!r)
        r = pulse_ckpt_commit(theta_new);
    if (!r)
        r = pulse_ckpt_commit(m_new);
    if (!r)
        r = pulse_ckpt_commit(c->e_new);
    uint8_t theta_id[32];
    if (!r)
        r = pulse_ckpt_state_id(theta_new, o->threads, theta_id);
    if (!r) {
        loco_state_path(o->state_dir, "view", next, path);
        r = loco_write_view(theta_new, c->st.view, path, o->threads, c->rep->result);
    }
    /* The result record: base = theta_r's view, result = theta_{r+1}'s view, one members object. */
    uint8_t *members = NULL, *bytes = NULL;
    size_t mlen = 0, blen = 0;
    sync_blob blob = { 0 };
    pulse_record rec = { 0 };
    if (!r)
        r = members_encode(c, theta_id, &members, &mlen);
    if (!r) {
        blob = (sync_blob){ .data = members, .len = mlen };
        pulse_sha256(members, mlen, blob.digest);
        r = sync_put_objects(c->store, o->run, &blob, 1, &c->rep->uploaded);
    }
    if (!r)
        r = pulse_record_init(&rec, PULSE_RECORD_LOCO_RESULT, o->run, c->st.round);
    if (!r) {
        memcpy(rec.base, c->st.view_id, 32);
        memcpy(rec.result, c->rep->result, 32);
        rec.time = (uint64_t)time(NULL);
        rec.dense_bytes = 4 * c->rep->params;
        for (size_t i = 0; i < c->n_tr; i++)
            if (c->tr[i].included) {
                rec.changes += c->tr[i].entries;
                rec.patch_bytes += c->tr[i].shard_bytes;
            }
        r = pulse_record_add_object(&rec, blob.digest, mlen, LOCO_MEMBERS_ROLE, NULL, 0, 0);
    }
    if (!r) {
        r = put_record(c, &rec, &bytes, &blen);
        if (r == PULSE_ERR_EXISTS)
            r = pulse_fail(PULSE_ERR_MISMATCH, "this trainer already published a different result for round %" PRIu64,
                           c->st.round);
    }
    if (!r && o->out_path)
        r = copy_to(theta_new, o->out_path);
    for (size_t i = 0; !r && i < o->n_out; i++) {
        const pulse_tensor *t = pulse_ckpt_find(theta_new, o->out_tensors[i].name);
        if (t->nbytes)
            memcpy(o->out_tensors[i].data, t->data, t->nbytes);
    }
    if (!r && o->out_view_path) {
        uint8_t id[32];
        r = loco_write_view(theta_new, c->st.view, o->out_view_path, o->threads, id);
    }
    if (!r)
        r = loco_state_commit(o->state_dir, next, c->st.view, c->rep->result, c->rep->included);
    if (!r) {   /* the old round's files are no longer the state: best-effort removal */
        static const char *const what[] = { "theta", "e", "m", "view" };
        for (int w = 0; w < 4; w++) {
            loco_state_path(o->state_dir, what[w], c->st.round, path);
            unlink(path);
        }
    }
    pulse_ckpt_close(&theta_new);
    pulse_ckpt_close(&m_new);
    pulse_record_clear(&rec);
    free(members);
    free(bytes);
    if (!r)
        r = compare_results(c, blob.digest);
    return r;
}

/* ---- entry -------------------------------------------------------------------------- */

void pulse_loco_round_default_opts(pulse_loco_round_opts *o)
{
    memset(o, 0, sizeof *o);
    o->size = sizeof *o;
    o->deadline_s = 300;
    o->outer_lr = 1.0f;
    o->momentum = 0.0f;
}

/* A caller's tensor named NAME with T's shape, or NULL (with the failure detail set). */
static const pulse_loco_tensor *mem_tensor(const pulse_loco_tensor *a, size_t n, const pulse_tensor *t,
                                           const char *what)
{
    const pulse_loco_tensor *hit = NULL;
    for (size_t i = 0; i < n; i++)
        if (a[i].name && !strcmp(a[i].name, t->name)) {
            if (hit) {
                pulse_fail(PULSE_ERR_INVALID, "%s: tensor %s given twice", what, t->name);
                return NULL;
            }
            hit = &a[i];
        }
    if (!hit) {
        pulse_fail(PULSE_ERR_MISMATCH, "%s: no tensor %s", what, t->name);
        return NULL;
    }
    int same = hit->ndim == t->ndim && hit->data;
    for (int d = 0; same && d < t->ndim; d++)
        same = hit->shape[d] == t->shape[d];
    if (!same) {
        pulse_fail(PULSE_ERR_MISMATCH, "%s: tensor %s has another shape than in theta_r (or no data)", what, t->name);
        return NULL;
    }
    return hit;
}

/* theta_local from its file or the caller's memory; the out tensors checked against theta_r. */
static int local_inputs(round_ctx *c)
{
    const pulse_loco_round_opts *o = c->o;
    size_t nt = pulse_ckpt_count(c->st.theta);
    c->local_data = calloc(nt ? nt : 1, sizeof *c->local_data);
    if (!c->local_data)
        return pulse_fail(PULSE_ERR_NOMEM, "tensors");
    int r = 0;
    if (o->local_path) {
        r = pulse_ckpt_open(&c->local, o->local_path, PULSE_CKPT_READ);
        if (!r)
            r = loco_same_layout(c->st.theta, c->local, o->local_path);
        for (size_t i = 0; !r && i < nt; i++)
            c->local_data[i] = (const float *)(const void *)pulse_ckpt_tensor(c->local, i)->data;
    } else {
        if (o->n_local != nt)
            return pulse_fail(PULSE_ERR_MISMATCH, "%zu local tensors for the %zu of theta_r", o->n_local, nt);
        for (size_t i = 0; i < nt; i++) {
            const pulse_loco_tensor *m = mem_tensor(o->local_tensors, o->n_local, pulse_ckpt_tensor(c->st.theta, i),
                                                    "theta_local");
            if (!m)
                return PULSE_ERR_MISMATCH;
            c->local_data[i] = m->data;
        }
    }
    for (size_t i = 0; !r && i < o->n_out; i++) {
        const pulse_tensor *t = pulse_ckpt_find(c->st.theta, o->out_tensors[i].name ? o->out_tensors[i].name : "");
        if (!t)
            return pulse_fail(PULSE_ERR_MISMATCH, "out tensor %s is not in theta_r",
                              o->out_tensors[i].name ? o->out_tensors[i].name : "(null)");
        if (!mem_tensor(o->out_tensors, o->n_out, t, "out tensors"))
            return PULSE_ERR_MISMATCH;
    }
    return r;
}

static int setup(round_ctx *c)
{
    const pulse_loco_round_opts *o = c->o;
    int r = loco_state_load(o->state_dir, &c->st);
    if (!r)
        c->rep->round = c->st.round;
    memcpy(c->rep->base, c->st.view_id, 32);
    if (!r)
        r = local_inputs(c);
    char path[4096];
    loco_state_path(o->state_dir, "e", c->st.round + 1, path);
    if (!r)
        r = pulse_ckpt_create_like(&c->e_new, path, c->st.e);
    if (!r)
        r = pulse_key_load_secret(o->key_path, &c->key);
    if (!r)
        r = pulse_trust_new(&c->trust);
    for (size_t i = 0; !r && i < o->n_trust; i++)
        r = pulse_trust_load(c->trust, o->trust_paths[i]);
    pulse_public_key self = { .comment = "self" };
    if (!r) {
        pulse_key_public(c->key, self.key);
        if (!pulse_trust_find(c->trust, self.key))
            r = pulse_trust_add(c->trust, &self);
    }
    size_t n = r ? 0 : pulse_trust_count(c->trust);
    c->tr = calloc(n ? n : 1, sizeof *c->tr);
    if (!r && !c->tr)
        r = pulse_fail(PULSE_ERR_NOMEM, "trainers");
    for (size_t i = 0; !r && i < n; i++) {
        const pulse_public_key *k = pulse_trust_get(c->trust, i);
        memcpy(c->tr[i].node, k->key, 32);
        c->tr[i].name = k->comment;
        pulse_node_id_hex(k->key, c->tr[i].hex);
    }
    c->n_tr = n;
    if (n)
        qsort(c->tr, n, sizeof *c->tr, cmp_node);
    if (!r)
        c->self = (size_t)(loco_find_trainer(c, self.key) - c->tr);
    c->rep->trainers = (unsigned)n;
    if (!r && o->quorum > n)
        r = pulse_fail(PULSE_ERR_INVALID, "--quorum %u is more than the %zu trainers", o->quorum, n);
    if (!r)
        r = pulse_store_open(&c->store, o->store_url, NULL);
    return r;
}

int pulse_loco_round(const pulse_loco_round_opts *o, pulse_loco_report *rep)
{
    pulse_clear_error();
    memset(rep, 0, sizeof *rep);
    /* A caller built before reduce_scatter was added passes the older, shorter size: its fields
     * are read, the newer ones keep their defaults. */
    pulse_loco_round_opts full;
    pulse_loco_round_default_opts(&full);
    /* The layouts callers may have been built against: up to bf16_values, up to owner_wait_s
     * (before reduce_gate), the whole. A prefix is copied field-exact (not o->size bytes: an older
     * struct's tail padding can overlap a newer field). */
    size_t old_bf16 = offsetof(pulse_loco_round_opts, bf16_values) + sizeof o->bf16_values;
    size_t old_rs = offsetof(pulse_loco_round_opts, owner_wait_s) + sizeof o->owner_wait_s;
    int knows_gate = o && o->size == sizeof *o;
    if (knows_gate)
        full = *o;
    else if (o && o->size >= old_rs && o->size < sizeof *o)
        memcpy(&full, o, old_rs);
    else if (o && o->size >= old_bf16 && o->size < sizeof *o)
        memcpy(&full, o, old_bf16);
    else
        o = NULL;
    full.size = sizeof full;
    if (o)
        o = &full;
    if (!o || o->shard_elems > LOCO_SHARD_MAX_ELEMS || !o->store_url || !o->run ||
        !o->key_path || !o->state_dir || (!o->local_path && !o->local_tensors) || (o->n_out && !o->out_tensors) ||
        !(o->deadline_s >= 0) || !(o->owner_wait_s >= 0) || !(o->outer_lr == o->outer_lr) ||
        !(o->momentum == o->momentum))
        return pulse_fail(PULSE_ERR_INVALID, "loco round needs store, run, key, state and theta_local");
    int bad = pulse_check_run(o->run);
    if (!bad && o->publish_run)
        bad = pulse_check_run(o->publish_run);
    if (bad)
        return bad;
    if (o->reduce_gate) {
        /* The owner withholds what would not change the view; with momentum the update of every
         * position a member ever sent stays non-zero (dense), and the gate would withhold nothing
         * it could later account for. */
        if (o->momentum != 0.0f)
            return pulse_fail(PULSE_ERR_INVALID, "--reduce-gate needs outer momentum 0 (momentum %g makes the update "
                              "dense)", (double)o->momentum);
        if (!(o->outer_lr > 0.0f) || o->outer_lr - o->outer_lr != 0.0f)
            return pulse_fail(PULSE_ERR_INVALID, "--reduce-gate needs an outer lr above 0 (not %g)", (double)o->outer_lr);
        full.reduce_scatter = 1;
    }
    round_ctx c = { .o = o, .rep = rep, .kt = pulse_kernels_get() };
    gate_job *jobs = NULL;
    size_t nj = 0;
    int r = setup(&c);
    if (!r)
        r = gate_own(&c, &jobs, &nj);
    if (!r)
        r = publish_own(&c, jobs, nj);
    gate_jobs_free(jobs, nj);
    if (!r)
        loco_say(&c, 0, "published %" PRIu64 " entries of %" PRIu64 " (%" PRIu64 " bytes)", rep->sent, rep->params,
            rep->shard_bytes);
    if (!r)
        r = o->reduce_scatter ? loco_rs_round(&c) : wait_and_choose(&c);
    if (!r)
        r = finish_round(&c);
    if (!r && o->publish_run)
        r = loco_publish_view(&c);
    for (size_t i = 0; i < c.n_tr; i++) {
        for (size_t s = 0; s < c.tr[i].n_shards; s++)
            loco_shard_free(&c.tr[i].shards[s]);
        free(c.tr[i].shards);
    }
    if (o->extra)   /* a caller built before reduce_gate has the shorter extra */
        memcpy(o->extra, &c.x, knows_gate ? sizeof c.x : offsetof(pulse_loco_round_extra, rg_published));
    loco_rs_free(&c);
    free(c.tr);
    free(c.own_rec);
    free(c.local_data);
    pulse_ckpt_close(&c.e_new);
    pulse_ckpt_close(&c.local);
    loco_state_close(&c.st);
    pulse_key_free(&c.key);
    pulse_trust_free(&c.trust);
    pulse_store_close(&c.store);
    return r;
}
