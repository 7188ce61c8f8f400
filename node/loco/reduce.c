/* SPDX-License-Identifier: Apache-2.0 */
/* The reduce-scatter round: a plan fixed from the shard records, owners sum their ranges, everyone fetches the sums. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/fail.h"
#include "crypto/sha256.h"
#include "manifest/layout.h"
#include "node/loco/round_internal.h"
#include "node/parallel.h"

#define RS_MAX_ATTEMPTS 4u
#define RS_PLAN_MAGIC "PLSP"
#define RS_VETO_MAGIC "PLSV"
#define RS_PLAN_ROLE "loco-plan"
#define RS_REDUCED_ROLE "loco-reduced"
#define RS_VETO_ROLE "loco-veto"
/* Without --owner-wait, owners get --deadline from the moment the plan is read, but at least this
 * long: a trainer that planned at once (--deadline 0) must not drop owners that are still summing. */
#define RS_MIN_OWNER_WAIT 30.0

/* A plan (attempt N's members) or a decision that attempt N-1 is final (no members). */
typedef struct rs_plan {
    int final;
    unsigned attempt;
    uint32_t cut;
    size_t k;
    size_t *m;                  /* trainer index of each member, node order */
    uint8_t (*digest)[32];      /* ... and the SHA-256 of its shard record */
} rs_plan;

/* A member's shard record as the plan fixed it. */
typedef struct rs_member {
    int loaded;
    int failed;
    uint8_t digest[32];
    pulse_record rec;
    int32_t *obj_of;            /* per range: index of the record's object covering it, or -1 */
} rs_member;

/* An owner's record of the current attempt. */
enum { RS_NONE = 0, RS_REDUCED, RS_VETO, RS_BAD };
typedef struct rs_owner {
    int state;
    pulse_record rec;           /* RS_REDUCED: its reduced objects */
} rs_owner;

struct rs_state {
    uint32_t cut;
    size_t n_ranges;
    size_t *rt;                 /* per range: tensor index */
    uint64_t *rstart, *rlen;    /* per range: element range of the tensor */
    size_t *tfirst;             /* per tensor: its first range (n_tensors + 1 entries) */
    size_t *owner;              /* per range: trainer index of its owner in the current plan */
    rs_member *mem;             /* per trainer */
    rs_owner *own;              /* per trainer */
    int *vetoed;                /* per trainer: named by a veto or missed the owners' deadline */
    loco_shard **red;           /* per range: the reduced shard (NULL: nothing in it) */
    loco_shard **held;          /* --reduce-gate, per owned range: the sums withheld (NULL: none) */
    rs_plan plan;
};

static void plan_clear(rs_plan *p)
{
    free(p->m);
    free(p->digest);
    memset(p, 0, sizeof *p);
}

static void owners_clear(round_ctx *c)
{
    struct rs_state *s = c->rs;
    for (size_t i = 0; i < c->n_tr; i++) {
        pulse_record_clear(&s->own[i].rec);
        s->own[i].state = RS_NONE;
    }
}

static void reduced_clear(round_ctx *c)
{
    struct rs_state *s = c->rs;
    for (size_t g = 0; s->red && g < s->n_ranges; g++) {
        if (s->red[g]) {
            loco_shard_free(s->red[g]);
            free(s->red[g]);
            s->red[g] = NULL;
        }
        if (s->held[g]) {
            loco_shard_free(s->held[g]);
            free(s->held[g]);
            s->held[g] = NULL;
        }
    }
}

void loco_rs_free(round_ctx *c)
{
    struct rs_state *s = c->rs;
    if (!s)
        return;
    reduced_clear(c);
    owners_clear(c);
    for (size_t i = 0; i < c->n_tr; i++) {
        pulse_record_clear(&s->mem[i].rec);
        free(s->mem[i].obj_of);
    }
    plan_clear(&s->plan);
    free(s->rt);
    free(s->rstart);
    free(s->rlen);
    free(s->tfirst);
    free(s->owner);
    free(s->mem);
    free(s->own);
    free(s->vetoed);
    free(s->red);
    free(s->held);
    free(s);
    c->rs = NULL;
}

/* "<run>/loco-rs/<round:012>/<attempt:02>/<name>" (name: "plan" or an owner's node id). */
static int rs_key(const round_ctx *c, unsigned attempt, const char *name, char out[SYNC_KEY_MAX])
{
    char rel[SYNC_KEY_MAX];
    int r = pulse_layout_loco_rs(rel, sizeof rel, c->st.round, attempt, name);
    return r ? r : sync_run_key(c->o->run, rel, out);
}

/* The parameter space cut into ranges of CUT elements, tensor by tensor (canonical order). */
static int rs_layout(round_ctx *c, uint32_t cut)
{
    struct rs_state *s = c->rs;
    if (s->cut)
        return s->cut == cut ? 0 : pulse_fail(PULSE_ERR_MISMATCH, "a later plan cuts ranges of %u elements, not %u",
                                               cut, s->cut);
    if (cut == 0 || cut > LOCO_SHARD_MAX_ELEMS)
        return pulse_fail(PULSE_ERR_FORMAT, "plan: ranges of %u elements", cut);
    size_t nt = pulse_ckpt_count(c->st.theta), n = 0;
    for (size_t t = 0; t < nt; t++)
        n += (size_t)((pulse_ckpt_tensor(c->st.theta, t)->nelems + cut - 1) / cut);
    s->tfirst = calloc(nt + 1, sizeof *s->tfirst);
    s->rt = calloc(n ? n : 1, sizeof *s->rt);
    s->rstart = calloc(n ? n : 1, sizeof *s->rstart);
    s->rlen = calloc(n ? n : 1, sizeof *s->rlen);
    s->owner = calloc(n ? n : 1, sizeof *s->owner);
    s->red = calloc(n ? n : 1, sizeof *s->red);
    s->held = calloc(n ? n : 1, sizeof *s->held);
    if (!s->tfirst || !s->rt || !s->rstart || !s->rlen || !s->owner || !s->red || !s->held)
        return pulse_fail(PULSE_ERR_NOMEM, "%zu ranges", n);
    size_t g = 0;
    for (size_t t = 0; t < nt; t++) {
        uint64_t ne = pulse_ckpt_tensor(c->st.theta, t)->nelems;
        s->tfirst[t] = g;
        for (uint64_t off = 0; off < ne; off += cut, g++) {
            s->rt[g] = t;
            s->rstart[g] = off;
            s->rlen[g] = ne - off < cut ? ne - off : cut;
        }
    }
    s->tfirst[nt] = g;
    s->n_ranges = n;
    s->cut = cut;
    return 0;
}

/* The range an object covers: exactly one range of the cut (tensor, start, length), else -1. */
static long rs_range_of(const round_ctx *c, const pulse_record_object *o)
{
    const struct rs_state *s = c->rs;
    const pulse_tensor *th = pulse_ckpt_find(c->st.theta, o->tensor);
    if (!th)
        return -1;
    size_t t = (size_t)(th - pulse_ckpt_tensor(c->st.theta, 0));
    if (o->range_offset % s->cut || o->range_offset >= th->nelems)
        return -1;
    size_t g = s->tfirst[t] + (size_t)(o->range_offset / s->cut);
    if (g >= s->tfirst[t + 1] || s->rlen[g] != o->range_length)
        return -1;
    return (long)g;
}

/* Loads trainer TI's shard record (this trainer's own from memory) and maps its objects to the
 * ranges: role, tensor, exactly one range of the cut each, ascending, a bounded size. */
static int rs_member_load(round_ctx *c, size_t ti)
{
    struct rs_state *s = c->rs;
    rs_member *m = &s->mem[ti];
    if (m->loaded)
        return 0;
    if (m->failed)
        return pulse_fail(PULSE_ERR_FORMAT, "its shard record failed before");
    int r;
    if (ti == c->self) {
        r = pulse_record_parse(c->own_rec, c->own_rec_len, &m->rec);
        memcpy(m->digest, c->tr[ti].rec_digest, 32);
    } else {
        void *bytes = NULL;
        size_t len = 0;
        r = loco_fetch_record(c, PULSE_RECORD_LOCO_SHARD, c->tr[ti].node, &m->rec, &bytes, &len);
        if (!r)
            pulse_sha256(bytes, len, m->digest);
        pulse_store_free(bytes);
    }
    if (!r && !(m->obj_of = malloc((s->n_ranges ? s->n_ranges : 1) * sizeof *m->obj_of)))
        r = pulse_fail(PULSE_ERR_NOMEM, "ranges");
    for (size_t g = 0; !r && g < s->n_ranges; g++)
        m->obj_of[g] = -1;
    long prev = -1;
    for (uint32_t i = 0; !r && i < m->rec.n_objects; i++) {
        const pulse_record_object *o = &m->rec.objects[i];
        long g = strcmp(o->role, LOCO_SHARD_ROLE) ? -1 : rs_range_of(c, o);
        if (g < 0)
            r = pulse_fail(PULSE_ERR_FORMAT, "object %u (tensor '%s' at %" PRIu64 " +%" PRIu64 ") is not one range of "
                           "%u elements (every trainer of a reduce-scatter round needs the same --shard-elems)", i,
                           o->tensor, o->range_offset, o->range_length, s->cut);
        else if (g <= prev)
            r = pulse_fail(PULSE_ERR_FORMAT, "object %u: ranges out of order or repeated", i);
        else if (o->size > LOCO_SHARD_HEADER + 1024 + 12 * o->range_length)
            r = pulse_fail(PULSE_ERR_LIMIT, "object %u: %" PRIu64 " bytes for %" PRIu64 " elements", i, o->size,
                           o->range_length);
        else
            m->obj_of[g] = (int32_t)i;
        prev = g;
    }
    if (r) {
        pulse_record_clear(&m->rec);
        free(m->obj_of);
        m->obj_of = NULL;
        m->failed = 1;
        return r;
    }
    m->loaded = 1;
    c->tr[ti].entries = m->rec.changes;
    c->tr[ti].shard_bytes = m->rec.patch_bytes;
    return 0;
}

/* ---- plans -------------------------------------------------------------------------- */

static uint32_t get32(const uint8_t *b)
{
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

static void put32(uint8_t *b, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        b[i] = (uint8_t)(v >> (8 * i));
}

/* "PLSP", u8 version 1, u8 attempt, u8 final, u8 0, u32 cut, u32 K, K x (node id, record digest). */
static int plan_encode(const round_ctx *c, const rs_plan *p, uint8_t **out, size_t *len)
{
    size_t n = 16 + 64 * p->k;
    uint8_t *b = calloc(1, n);
    if (!b)
        return pulse_fail(PULSE_ERR_NOMEM, "plan");
    memcpy(b, RS_PLAN_MAGIC, 4);
    b[4] = 1;
    b[5] = (uint8_t)p->attempt;
    b[6] = (uint8_t)p->final;
    put32(b + 8, p->cut);
    put32(b + 12, (uint32_t)p->k);
    for (size_t j = 0; j < p->k; j++) {
        memcpy(b + 16 + 64 * j, c->tr[p->m[j]].node, 32);
        memcpy(b + 16 + 64 * j + 32, p->digest[j], 32);
    }
    *out = b;
    *len = n;
    return 0;
}

static int plan_decode(round_ctx *c, const uint8_t *b, size_t n, unsigned attempt, rs_plan *p)
{
    memset(p, 0, sizeof *p);
    if (n < 16 || memcmp(b, RS_PLAN_MAGIC, 4) || b[4] != 1 || b[5] != attempt || b[6] > 1 || b[7])
        return pulse_fail(PULSE_ERR_FORMAT, "not a version 1 plan of attempt %u", attempt);
    p->attempt = attempt;
    p->final = b[6];
    p->cut = get32(b + 8);
    uint32_t k = get32(b + 12);
    if (k > c->n_tr || n != 16 + 64 * (size_t)k || (p->final ? k != 0 : k == 0))
        return pulse_fail(PULSE_ERR_FORMAT, "plan of %zu bytes for %u members", n, k);
    p->k = k;
    p->m = calloc(k ? k : 1, sizeof *p->m);
    p->digest = calloc(k ? k : 1, 32);
    if (!p->m || !p->digest) {
        plan_clear(p);
        return pulse_fail(PULSE_ERR_NOMEM, "plan");
    }
    for (uint32_t j = 0; j < k; j++) {
        const uint8_t *e = b + 16 + 64 * j;
        trainer *t = loco_find_trainer(c, e);
        if (!t || (j > 0 && memcmp(e - 64, e, 32) >= 0)) {
            plan_clear(p);
            return pulse_fail(PULSE_ERR_FORMAT, "plan member %u: not a trainer of this round, or out of order", j);
        }
        p->m[j] = (size_t)(t - c->tr);
        memcpy(p->digest[j], e + 32, 32);
    }
    return 0;
}

/* Reads the plan at ATTEMPT (*found 0 when there is none yet): signed by a trusted trainer, kind
 * loco-reduced of this run and round from theta_r, one loco-plan object. */
static int plan_read(round_ctx *c, unsigned attempt, rs_plan *p, int *found)
{
    char key[SYNC_KEY_MAX];
    *found = 0;
    int r = rs_key(c, attempt, "plan", key);
    void *data = NULL, *obj = NULL;
    size_t n = 0;
    pulse_record rec = { 0 };
    const pulse_public_key *signer = NULL;
    if (!r)
        r = pulse_store_get(c->store, key, 0, PULSE_TO_END, PULSE_RECORD_MAX_BYTES, &data, &n, NULL);
    if (r == PULSE_ERR_NOTFOUND) {
        pulse_clear_error();
        return 0;
    }
    if (!r) {
        c->rep->downloaded += n;
        r = pulse_record_verify(data, n, c->trust, &signer, &rec);
    }
    if (!r && (rec.kind != PULSE_RECORD_LOCO_REDUCED || rec.step != c->st.round || strcmp(rec.run, c->o->run) ||
               memcmp(rec.base, c->st.view_id, 32) || rec.n_objects != 1 ||
               strcmp(rec.objects[0].role, RS_PLAN_ROLE) || rec.objects[0].size > 16 + 64 * (uint64_t)c->n_tr))
        r = pulse_fail(PULSE_ERR_FORMAT, "not a plan of run %s round %" PRIu64 " from this theta_r", c->o->run,
                       c->st.round);
    if (!r)
        r = sync_fetch_objects(c->store, c->o->run, rec.objects, 1, &obj, &c->rep->downloaded);
    if (!r)
        r = plan_decode(c, obj, rec.objects[0].size, attempt, p);
    if (!r)
        *found = 1;
    else
        r = pulse_fail(r, "%s: %s", key, pulse_last_error());
    pulse_store_free(obj);
    pulse_store_free(data);
    pulse_record_clear(&rec);
    return r;
}

/* Signs a loco-reduced record with the given objects and puts it create-if-absent at KEY; a record
 * already there (another trainer's plan, or this owner's own re-run) is left as it is. */
static int put_rs_record(round_ctx *c, const char *key, const sync_blob *blobs, size_t n, const char *role,
                         const uint64_t (*ranges)[3], uint64_t changes, int *won)
{
    pulse_record rec;
    uint8_t *bytes = NULL;
    size_t len = 0;
    *won = 0;
    int r = pulse_record_init(&rec, PULSE_RECORD_LOCO_REDUCED, c->o->run, c->st.round);
    if (!r)
        r = sync_put_objects(c->store, c->o->run, blobs, n, &c->rep->uploaded);
    for (size_t i = 0; !r && i < n; i++)
        r = pulse_record_add_object(&rec, blobs[i].digest, blobs[i].len, role,
                                    ranges ? pulse_ckpt_tensor(c->st.theta, (size_t)ranges[i][0])->name : NULL,
                                    ranges ? ranges[i][1] : 0, ranges ? ranges[i][2] : 0);
    if (!r) {
        memcpy(rec.base, c->st.view_id, 32);
        rec.time = (uint64_t)time(NULL);
        rec.changes = changes;
        r = pulse_record_sign(&rec, c->key, &bytes, &len);
    }
    if (!r) {
        r = pulse_store_put(c->store, key, bytes, len, PULSE_PUT_IF_ABSENT);
        if (r == 0) {
            *won = 1;
            c->rep->uploaded += len;
        } else if (r == PULSE_ERR_EXISTS) {
            pulse_clear_error();
            r = 0;
        }
    }
    free(bytes);
    pulse_record_clear(&rec);
    return r;
}

/* Writes P create-if-absent at its attempt and reads back whichever plan won (*out). */
static int plan_commit(round_ctx *c, const rs_plan *p, rs_plan *out)
{
    char key[SYNC_KEY_MAX];
    uint8_t *obj = NULL;
    size_t len = 0;
    int won = 0, found = 0;
    int r = rs_key(c, p->attempt, "plan", key);
    if (!r)
        r = plan_encode(c, p, &obj, &len);
    if (!r) {
        sync_blob b = { .data = obj, .len = len };
        pulse_sha256(obj, len, b.digest);
        r = put_rs_record(c, key, &b, 1, RS_PLAN_ROLE, NULL, p->k, &won);
    }
    free(obj);
    if (!r)
        r = plan_read(c, p->attempt, out, &found);
    if (!r && !found)
        r = pulse_fail(PULSE_ERR_NOTFOUND, "%s: the plan just written is not there", key);
    if (!r)
        loco_say(c, 0, "%s of attempt %u %s", out->final ? "final mark" : "plan", p->attempt,
                 won ? "written by this trainer" : "written by another trainer");
    return r;
}

static int stop_at_plan(round_ctx *c, void *p, int *found)
{
    return plan_read(c, 0, p, found);
}

/* Attempt 0: waits for the shard records (every trainer, or the deadline), then fixes the members
 * from the records alone, unless another trainer's plan is there first. */
static int first_plan(round_ctx *c, rs_plan *p)
{
    int found = 0;
    int r = loco_wait_listed(c, stop_at_plan, p, &found);
    if (r || found)
        return r;
    uint32_t cut = c->o->shard_elems ? c->o->shard_elems : LOCO_SHARD_ELEMS;
    if ((r = rs_layout(c, cut)))
        return r;
    rs_plan mine = { .attempt = 0, .cut = cut };
    mine.m = calloc(c->n_tr, sizeof *mine.m);
    mine.digest = calloc(c->n_tr, 32);
    if (!mine.m || !mine.digest)
        r = pulse_fail(PULSE_ERR_NOMEM, "plan");
    for (size_t i = 0; !r && i < c->n_tr; i++) {
        trainer *t = &c->tr[i];
        if (!t->listed)
            continue;
        if (rs_member_load(c, i) != 0) {
            loco_say(c, 1, "trainer %.16s (%s) excluded: %s", t->hex, t->name, pulse_last_error());
            c->rep->excluded++;
            continue;
        }
        mine.m[mine.k] = i;
        memcpy(mine.digest[mine.k++], c->rs->mem[i].digest, 32);
    }
    if (!r && mine.k < loco_quorum(c)) {
        /* Someone else may have had its quorum meanwhile: its plan is the round's. */
        if ((r = plan_read(c, 0, p, &found)) == 0 && !found)
            r = pulse_fail(PULSE_ERR_NOTFOUND, "quorum not reached: %zu of %zu trainers published a usable record for "
                           "round %" PRIu64 " by the deadline (%.1f s), %zu needed", mine.k, c->n_tr, c->st.round,
                           c->o->deadline_s, loco_quorum(c));
    } else if (!r) {
        r = plan_commit(c, &mine, p);
    }
    plan_clear(&mine);
    return r;
}

/* Takes plan P as the current one: every member's record loaded with the plan's digest,
 * owners round-robin over the ranges in node-id order. */
static int plan_apply(round_ctx *c, const rs_plan *p)
{
    struct rs_state *s = c->rs;
    /* No quorum check here: the writer applied its own, and a trainer that follows a plan made
     * without it (a straggler) must land on the same theta_{r+1}, as when adopting a result. */
    int r = rs_layout(c, p->cut);
    for (size_t j = 0; !r && j < p->k; j++) {
        trainer *t = &c->tr[p->m[j]];
        if (rs_member_load(c, p->m[j]) != 0)
            r = pulse_fail(PULSE_ERR_MISMATCH, "the plan includes trainer %.16s (%s), whose shard record fails "
                           "here: %s", t->hex, t->name, pulse_last_error());
        else if (memcmp(s->mem[p->m[j]].digest, p->digest[j], 32))
            r = pulse_fail(PULSE_ERR_MISMATCH, "the plan names another shard record of trainer %.16s (%s)", t->hex,
                           t->name);
    }
    for (size_t g = 0; !r && g < s->n_ranges; g++)
        s->owner[g] = p->m[g % p->k];
    return r;
}

/* ---- the owner's part --------------------------------------------------------------- */

/* One fetched shard of a member in an owned range: decoded and gate-checked on a worker. */
typedef struct own_job {
    size_t ti;                  /* the member */
    size_t g;                   /* the range */
    const pulse_record_object *o;
    void *data;
    loco_shard s;
    int rc;
    char why[512];
} own_job;

typedef struct own_ctx {
    round_ctx *c;
    own_job *jobs;
} own_ctx;

static int own_check(void *ctx, size_t i)
{
    own_ctx *k = ctx;
    own_job *j = &k->jobs[i];
    if (j->rc)
        return 0;   /* its fetch failed: already blamed */
    j->rc = loco_check_shard_object(k->c, j->o, j->data, k->c->rs->rt[j->g], &j->s);
    if (j->rc)
        snprintf(j->why, sizeof j->why, "%s", pulse_last_error());
    return 0;
}

/* This trainer's own shard of range G, or NULL. */
static const loco_shard *own_shard(const round_ctx *c, size_t g)
{
    const trainer *me = &c->tr[c->self];
    const struct rs_state *s = c->rs;
    size_t lo = 0, hi = me->n_shards;   /* the own shards are in tensor, then range order */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const loco_shard *m = &me->shards[mid];
        if (m->tensor < s->rt[g] || (m->tensor == s->rt[g] && m->start < s->rstart[g]))
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < me->n_shards && me->shards[lo].tensor == s->rt[g] && me->shards[lo].start == s->rstart[g])
        return &me->shards[lo];
    return NULL;
}

/* One owned range summed: the same arithmetic as the all-gather's, restricted to the range. */
typedef struct sum_job {
    size_t g;
    const loco_shard **parts;   /* per member in node order (NULL: nothing in this range) */
    loco_shard *out;
    loco_shard *held;           /* --reduce-gate: the union entries the owner's gate withheld */
    uint8_t *obj;
    size_t obj_len;
} sum_job;

typedef struct sum_ctx {
    round_ctx *c;
    sum_job *jobs;
    size_t k;
} sum_ctx;

static int sum_range(void *ctx, size_t i)
{
    sum_ctx *x = ctx;
    round_ctx *c = x->c;
    struct rs_state *s = c->rs;
    sum_job *j = &x->jobs[i];
    size_t len = (size_t)s->rlen[j->g];
    float *acc = calloc(len, 4);   /* all +0.0f, as the all-gather's accumulator */
    uint8_t *mark = calloc(len, 1);
    loco_shard *out = calloc(1, sizeof *out);
    int r = acc && mark && out ? 0 : pulse_fail(PULSE_ERR_NOMEM, "range sum");
    size_t k = 0;
    for (size_t m = 0; !r && m < x->k; m++) {
        const loco_shard *p = j->parts[m];
        if (!p || !p->k)
            continue;
        c->kt->scatter_add_f32(acc, p->idx, p->k, p->val);
        for (uint32_t e = 0; e < p->k; e++)
            mark[p->idx[e]] = 1;
    }
    for (size_t e = 0; !r && e < len; e++)
        k += mark[e];
    if (!r) {
        *out = (loco_shard){ .tensor = s->rt[j->g], .start = s->rstart[j->g], .len = len, .k = (uint32_t)k };
        out->idx = malloc((k ? k : 1) * 4);
        out->val = malloc((k ? k : 1) * 4);
        if (!out->idx || !out->val)
            r = pulse_fail(PULSE_ERR_NOMEM, "reduced shard");
    }
    for (size_t e = 0, n = 0; !r && e < len; e++)
        if (mark[e]) {
            out->idx[n] = (uint32_t)e;
            out->val[n++] = acc[e];
        }
    if (!r && c->o->reduce_gate && k) {
        /* The gate at the owner: publish only the sums whose mean update changes the view. */
        loco_shard *h = calloc(1, sizeof *h);
        if (h) {
            *h = (loco_shard){ .tensor = out->tensor, .start = out->start, .len = len };
            h->idx = malloc(k * 4);
            h->val = malloc(k * 4);
        }
        size_t np = 0, nh = 0;
        const float *theta = (const float *)(const void *)pulse_ckpt_tensor(c->st.theta, s->rt[j->g])->data +
                             s->rstart[j->g];
        r = h && h->idx && h->val ? 0 : pulse_fail(PULSE_ERR_NOMEM, "withheld sums");
        if (!r)
            r = loco_gate_mean(c->kt, c->st.view, theta, (float)x->k, c->o->outer_lr, out->idx, out->val, k, h->idx,
                               h->val, &np, &nh);
        if (!r) {
            out->k = (uint32_t)np;
            h->k = (uint32_t)nh;
        }
        if (h && (r || nh == 0)) {
            loco_shard_free(h);
            free(h);
            h = NULL;
        }
        j->held = h;
    }
    if (!r)
        r = loco_shard_encode(c->st.view, out->start, (uint32_t)len, out->idx, out->val, out->k, &j->obj, &j->obj_len);
    if (r && out) {
        loco_shard_free(out);
        free(out);
        out = NULL;
    }
    j->out = out;
    free(acc);
    free(mark);
    return r;
}

/* "PLSV", u8 version 1, 3 zero bytes, u32 n, n x node id: the members an owner refuses. */
static int publish_veto(round_ctx *c, const int *bad, unsigned attempt)
{
    size_t n = 0;
    for (size_t i = 0; i < c->n_tr; i++)
        n += bad[i] != 0;
    uint8_t *b = calloc(1, 12 + 32 * n);
    if (!b)
        return pulse_fail(PULSE_ERR_NOMEM, "veto");
    memcpy(b, RS_VETO_MAGIC, 4);
    b[4] = 1;
    put32(b + 8, (uint32_t)n);
    size_t p = 12;
    for (size_t i = 0; i < c->n_tr; i++)
        if (bad[i]) {
            memcpy(b + p, c->tr[i].node, 32);
            p += 32;
        }
    sync_blob blob = { .data = b, .len = 12 + 32 * n };
    pulse_sha256(b, blob.len, blob.digest);
    char key[SYNC_KEY_MAX];
    int won = 0, r = rs_key(c, attempt, c->tr[c->self].hex, key);
    if (!r)
        r = put_rs_record(c, key, &blob, 1, RS_VETO_ROLE, NULL, n, &won);
    free(b);
    return r;
}

/* The owner's part of attempt P: fetch the members' shards of the owned ranges (not its own),
 * validate each exactly as the all-gather does, and publish either the reduced shards or a veto
 * naming every member with a bad shard. *vetoing is set in the second case. */
static int reduce_own(round_ctx *c, const rs_plan *p, int *vetoing)
{
    struct rs_state *s = c->rs;
    *vetoing = 0;
    size_t n_owned = 0, n_jobs = 0;
    for (size_t g = 0; g < s->n_ranges; g++)
        if (s->owner[g] == c->self) {
            n_owned++;
            for (size_t j = 0; j < p->k; j++)
                n_jobs += p->m[j] != c->self && s->mem[p->m[j]].obj_of[g] >= 0;
        }
    c->x.rs_owned = (unsigned)n_owned;
    if (n_owned == 0)
        return 0;
    own_job *jobs = calloc(n_jobs ? n_jobs : 1, sizeof *jobs);
    int *bad = calloc(c->n_tr, sizeof *bad);
    pulse_record_object *objs = calloc(n_jobs ? n_jobs : 1, sizeof *objs);
    void **data = calloc(n_jobs ? n_jobs : 1, sizeof *data);
    int r = jobs && bad && objs && data ? 0 : pulse_fail(PULSE_ERR_NOMEM, "owned shards");
    /* Member by member (node order), so a member whose object cannot be fetched is the one blamed. */
    size_t nj = 0;
    for (size_t j = 0; !r && j < p->k; j++) {
        size_t ti = p->m[j], first = nj;
        if (ti == c->self)
            continue;
        for (size_t g = 0; g < s->n_ranges; g++)
            if (s->owner[g] == c->self && s->mem[ti].obj_of[g] >= 0) {
                jobs[nj].ti = ti;
                jobs[nj].g = g;
                jobs[nj].o = &s->mem[ti].rec.objects[s->mem[ti].obj_of[g]];
                objs[nj] = *jobs[nj].o;
                nj++;
            }
        if (nj == first)
            continue;
        int f = sync_fetch_objects(c->store, c->o->run, objs + first, nj - first, data + first, &c->rep->downloaded);
        if (f) {
            for (size_t q = first; q < nj; q++)
                jobs[q].rc = f;
            snprintf(jobs[first].why, sizeof jobs[first].why, "%s", pulse_last_error());
        }
        for (size_t q = first; q < nj; q++)
            jobs[q].data = f ? NULL : data[q];
    }
    /* Decode and gate_check every fetched object on all threads (own_check skips unfetched ones). */
    if (!r) {
        own_ctx k = { c, jobs };
        r = pulse_parallel_for(nj, c->o->threads, own_check, &k);
    }
    for (size_t q = 0; !r && q < nj; q++)
        if (jobs[q].rc && !bad[jobs[q].ti]) {
            trainer *t = &c->tr[jobs[q].ti];
            bad[jobs[q].ti] = 1;
            loco_say(c, 1, "trainer %.16s (%s) vetoed: %s", t->hex, t->name,
                     jobs[q].why[0] ? jobs[q].why : pulse_strerror(jobs[q].rc));
        }
    int any_bad = 0;
    for (size_t i = 0; i < c->n_tr; i++)
        any_bad |= bad[i];
    if (!r && any_bad) {
        *vetoing = 1;
        for (size_t i = 0; i < c->n_tr; i++)
            if (bad[i])
                s->vetoed[i] = 1;   /* this owner's own veto counts when it writes the next plan */
        r = publish_veto(c, bad, p->attempt);
    }
    /* Every member sound: sum the owned ranges (members in node order) and publish them. */
    sum_job *sj = NULL;
    const loco_shard **parts = NULL;
    if (!r && !any_bad) {
        sj = calloc(n_owned, sizeof *sj);
        parts = calloc(n_owned * p->k, sizeof *parts);
        if (!sj || !parts)
            r = pulse_fail(PULSE_ERR_NOMEM, "sums");
        size_t o = 0;
        for (size_t g = 0; !r && g < s->n_ranges; g++) {
            if (s->owner[g] != c->self)
                continue;
            sj[o].g = g;
            sj[o].parts = parts + o * p->k;
            for (size_t j = 0; j < p->k; j++)
                if (p->m[j] == c->self)
                    sj[o].parts[j] = own_shard(c, g);
            o++;
        }
        /* each fetched shard into its range's slot of its member (jobs are in member, range order) */
        size_t *slot = r ? NULL : calloc(s->n_ranges, sizeof *slot), *pos = r ? NULL : calloc(c->n_tr, sizeof *pos);
        if (!r && (!slot || !pos))
            r = pulse_fail(PULSE_ERR_NOMEM, "sums");
        for (size_t a = 0; !r && a < n_owned; a++)
            slot[sj[a].g] = a;
        for (size_t j = 0; !r && j < p->k; j++)
            pos[p->m[j]] = j;
        for (size_t q = 0; !r && q < nj; q++)
            sj[slot[jobs[q].g]].parts[pos[jobs[q].ti]] = &jobs[q].s;
        free(slot);
        free(pos);
        if (!r) {
            sum_ctx x = { c, sj, p->k };
            r = pulse_parallel_for(n_owned, c->o->threads, sum_range, &x);
        }
    }
    if (!r && !any_bad) {
        sync_blob *blobs = calloc(n_owned, sizeof *blobs);
        uint64_t (*ranges)[3] = calloc(n_owned, sizeof *ranges);
        size_t nb = 0;
        uint64_t entries = 0;
        r = blobs && ranges ? 0 : pulse_fail(PULSE_ERR_NOMEM, "reduced objects");
        for (size_t a = 0; !r && a < n_owned; a++) {
            /* A record names at least one object: the last owned range even when all are empty. */
            if (sj[a].out->k == 0 && !(a == n_owned - 1 && nb == 0))
                continue;
            blobs[nb] = (sync_blob){ .data = sj[a].obj, .len = sj[a].obj_len };
            pulse_sha256(sj[a].obj, sj[a].obj_len, blobs[nb].digest);
            ranges[nb][0] = s->rt[sj[a].g];
            ranges[nb][1] = s->rstart[sj[a].g];
            ranges[nb][2] = s->rlen[sj[a].g];
            entries += sj[a].out->k;
            c->x.rs_reduced_bytes += sj[a].obj_len;
            nb++;
        }
        char key[SYNC_KEY_MAX];
        int won = 0;
        if (!r)
            r = rs_key(c, p->attempt, c->tr[c->self].hex, key);
        if (!r)
            r = put_rs_record(c, key, blobs, nb, RS_REDUCED_ROLE, (const uint64_t (*)[3])ranges, entries, &won);
        for (size_t a = 0; !r && a < n_owned; a++) {   /* this trainer's own sums: no download */
            if (c->o->reduce_gate)
                c->x.rg_published += sj[a].out->k;
            if (sj[a].out->k) {
                s->red[sj[a].g] = sj[a].out;
                sj[a].out = NULL;
            }
            if (sj[a].held) {
                c->x.rg_withheld += sj[a].held->k;
                s->held[sj[a].g] = sj[a].held;
                sj[a].held = NULL;
            }
        }
        if (!r)
            loco_say(c, 0, "attempt %u: reduced %zu owned ranges (%" PRIu64 " entries)%s", p->attempt, n_owned,
                     entries, won ? "" : " (record already there: a re-run)");
        free(blobs);
        free(ranges);
    }
    for (size_t a = 0; sj && a < n_owned; a++) {
        if (sj[a].out) {
            loco_shard_free(sj[a].out);
            free(sj[a].out);
        }
        if (sj[a].held) {
            loco_shard_free(sj[a].held);
            free(sj[a].held);
        }
        free(sj[a].obj);
    }
    free(sj);
    free(parts);
    for (size_t q = 0; jobs && q < nj; q++) {
        loco_shard_free(&jobs[q].s);
        pulse_store_free(jobs[q].data);
    }
    free(jobs);
    free(objs);
    free(data);
    free(bad);
    return r;
}

/* ---- waiting for the owners, deciding the attempt ----------------------------------- */

typedef struct rs_list {
    round_ctx *c;
    size_t prefix_len, seen;
    unsigned attempt;
    int next_plan;              /* the decision key of attempt + 1 is there */
    int *present;               /* per trainer: its record of this attempt is listed */
} rs_list;

static int on_rs_key(void *ctx, const char *key, const pulse_object_info *info)
{
    (void)info;
    rs_list *l = ctx;
    if (++l->seen > (RS_MAX_ATTEMPTS + 2) * (l->c->n_tr + 1) + 64)
        return pulse_fail(PULSE_ERR_LIMIT, "too many keys under one reduce-scatter round");
    unsigned a;
    int plan;
    uint8_t node[32];
    if (pulse_layout_parse_loco_rs_tail(key + l->prefix_len, &a, &plan, node))
        return 0;
    if (plan && a == l->attempt + 1)
        l->next_plan = 1;
    if (plan || a != l->attempt)
        return 0;
    trainer *t = loco_find_trainer(l->c, node);
    if (t)
        l->present[t - l->c->tr] = 1;
    return 0;
}

/* Reads owner TI's record of ATTEMPT: signed by that owner, kind, run, round, base; a single veto
 * object (the vetoed members are marked) or reduced objects (kept for the final fetch). */
static int read_owner(round_ctx *c, unsigned attempt, size_t ti)
{
    struct rs_state *s = c->rs;
    rs_owner *w = &s->own[ti];
    trainer *t = &c->tr[ti];
    char key[SYNC_KEY_MAX];
    void *data = NULL, *obj = NULL;
    size_t n = 0;
    const pulse_public_key *signer = NULL;
    int r = rs_key(c, attempt, t->hex, key);
    if (!r)
        r = pulse_store_get(c->store, key, 0, PULSE_TO_END, PULSE_RECORD_MAX_BYTES, &data, &n, NULL);
    if (!r) {
        c->rep->downloaded += n;
        r = pulse_record_verify(data, n, c->trust, &signer, &w->rec);
    }
    pulse_store_free(data);
    if (!r && memcmp(signer->key, t->node, 32))
        r = pulse_fail(PULSE_ERR_AUTH, "signed by another key");
    if (!r && (w->rec.kind != PULSE_RECORD_LOCO_REDUCED || w->rec.step != c->st.round ||
               strcmp(w->rec.run, c->o->run) || memcmp(w->rec.base, c->st.view_id, 32)))
        r = pulse_fail(PULSE_ERR_FORMAT, "not a loco-reduced record of run %s round %" PRIu64 " from this theta_r",
                       c->o->run, c->st.round);
    if (!r && w->rec.n_objects == 1 && !strcmp(w->rec.objects[0].role, RS_VETO_ROLE)) {
        if (w->rec.objects[0].size > 12 + 32 * (uint64_t)c->n_tr)
            r = pulse_fail(PULSE_ERR_LIMIT, "a veto of %" PRIu64 " bytes", w->rec.objects[0].size);
        if (!r)
            r = sync_fetch_objects(c->store, c->o->run, w->rec.objects, 1, &obj, &c->rep->downloaded);
        const uint8_t *b = obj;
        size_t len = (size_t)w->rec.objects[0].size;
        if (!r && (len < 12 || memcmp(b, RS_VETO_MAGIC, 4) || b[4] != 1 || len != 12 + 32 * (size_t)get32(b + 8)))
            r = pulse_fail(PULSE_ERR_FORMAT, "not a version 1 veto");
        for (size_t i = 0; !r && i < get32(b + 8); i++) {
            trainer *v = loco_find_trainer(c, b + 12 + 32 * i);
            if (!v)
                continue;
            s->vetoed[v - c->tr] = 1;
            loco_say(c, 1, "owner %.16s (%s) vetoes trainer %.16s (%s) in attempt %u", t->hex, t->name, v->hex,
                     v->name, attempt);
        }
        if (!r)
            w->state = RS_VETO;
    } else if (!r) {
        for (uint32_t i = 0; !r && i < w->rec.n_objects; i++)
            if (strcmp(w->rec.objects[i].role, RS_REDUCED_ROLE))
                r = pulse_fail(PULSE_ERR_FORMAT, "object %u has role %s", i, w->rec.objects[i].role);
        if (!r)
            w->state = RS_REDUCED;
    }
    pulse_store_free(obj);
    if (r) {
        loco_say(c, 1, "owner %.16s (%s): record of attempt %u refused: %s", t->hex, t->name, attempt,
                 pulse_last_error());
        pulse_record_clear(&w->rec);
        w->state = RS_BAD;
        s->vetoed[ti] = 1;   /* an owner whose record is unusable leaves the next attempt */
    }
    return 0;
}

/* Waits for the owners of attempt P (or for the decision on it), then commits a decision: final
 * when every owner reduced, else the next attempt without the vetoed members (and, at the
 * deadline, without the owners still missing). *next receives the decision that won. */
static int wait_owners(round_ctx *c, const rs_plan *p, rs_plan *next)
{
    struct rs_state *s = c->rs;
    int *present = calloc(c->n_tr, sizeof *present), *is_owner = calloc(c->n_tr, sizeof *is_owner);
    int r = present && is_owner ? 0 : pulse_fail(PULSE_ERR_NOMEM, "owners");
    for (size_t g = 0; !r && g < s->n_ranges; g++)
        is_owner[s->owner[g]] = 1;
    char prefix[SYNC_KEY_MAX], rel[SYNC_KEY_MAX];
    if (!r)
        r = pulse_layout_loco_rs(rel, sizeof rel, c->st.round, 0, NULL);
    if (!r)
        r = sync_run_key(c->o->run, rel, prefix);
    double wait = c->o->owner_wait_s > 0 ? c->o->owner_wait_s
                  : c->o->deadline_s > RS_MIN_OWNER_WAIT ? c->o->deadline_s : RS_MIN_OWNER_WAIT;
    double deadline = loco_now_s() + wait, pause = 0.05;
    int decided = 0, timed_out = 0;
    while (!r && !decided) {
        rs_list l = { .c = c, .prefix_len = strlen(prefix), .attempt = p->attempt, .present = present };
        if ((r = pulse_store_list(c->store, prefix, NULL, on_rs_key, &l)))
            break;
        if (l.next_plan) {
            int found = 0;
            if ((r = plan_read(c, p->attempt + 1, next, &found)) == 0 && found) {
                free(present);
                free(is_owner);
                return 0;
            }
        }
        size_t waiting = 0;
        int any_veto = 0;
        for (size_t i = 0; !r && i < c->n_tr; i++) {
            if (!is_owner[i])
                continue;
            if (s->own[i].state == RS_NONE && present[i])
                r = read_owner(c, p->attempt, i);
            any_veto |= s->own[i].state == RS_VETO || s->own[i].state == RS_BAD;
            waiting += s->own[i].state == RS_NONE;
        }
        if (r)
            break;
        if (any_veto || waiting == 0) {
            decided = 1;
        } else if (loco_now_s() >= deadline) {
            decided = timed_out = 1;
        } else {
            loco_sleep_s(pause);
            pause = pause * 2 > 1.0 ? 1.0 : pause * 2;
        }
    }
    rs_plan d = { .attempt = p->attempt + 1, .cut = p->cut };
    int all_reduced = 1;
    for (size_t i = 0; !r && i < c->n_tr; i++) {
        if (!is_owner[i])
            continue;
        all_reduced &= s->own[i].state == RS_REDUCED;
        if (timed_out && s->own[i].state == RS_NONE) {
            s->vetoed[i] = 1;
            loco_say(c, 1, "owner %.16s (%s) missed the owners' deadline (%.1f s) in attempt %u", c->tr[i].hex,
                     c->tr[i].name, wait, p->attempt);
        }
    }
    if (!r && all_reduced) {
        d.final = 1;
    } else if (!r) {
        d.m = calloc(p->k, sizeof *d.m);
        d.digest = calloc(p->k, 32);
        if (!d.m || !d.digest)
            r = pulse_fail(PULSE_ERR_NOMEM, "plan");
        /* A veto that names no member (a broken or malicious owner) would repeat the attempt
         * unchanged: the vetoing owners leave instead. */
        int removes = 0;
        for (size_t j = 0; j < p->k; j++)
            removes |= s->vetoed[p->m[j]];
        for (size_t i = 0; !removes && i < c->n_tr; i++)
            if (is_owner[i] && s->own[i].state == RS_VETO)
                s->vetoed[i] = 1;
        for (size_t j = 0; !r && j < p->k; j++)
            if (!s->vetoed[p->m[j]]) {
                d.m[d.k] = p->m[j];
                memcpy(d.digest[d.k++], p->digest[j], 32);
            }
        if (!r && (d.attempt >= RS_MAX_ATTEMPTS || d.k < loco_quorum(c) || d.k == 0)) {
            /* Not this trainer's to decide (too few members for its quorum, or no attempt left):
             * another trainer may decide otherwise, and its decision holds. Wait for one. */
            int found = 0;
            double until = loco_now_s() + wait;
            pause = 0.05;
            while ((r = plan_read(c, d.attempt, next, &found)) == 0 && !found && loco_now_s() < until) {
                loco_sleep_s(pause);
                pause = pause * 2 > 1.0 ? 1.0 : pause * 2;
            }
            if (!r && !found)
                r = d.attempt >= RS_MAX_ATTEMPTS
                        ? pulse_fail(PULSE_ERR_NOTFOUND, "no reduce-scatter attempt of round %" PRIu64
                                     " completed in %u (vetoes or owners past the deadline)", c->st.round,
                                     RS_MAX_ATTEMPTS)
                        : pulse_fail(PULSE_ERR_NOTFOUND, "quorum not reached: %zu members left after vetoes and late "
                                     "owners in attempt %u, %zu needed", d.k, p->attempt, loco_quorum(c));
            plan_clear(&d);
            free(present);
            free(is_owner);
            return r;
        }
    }
    if (!r)
        r = plan_commit(c, &d, next);
    plan_clear(&d);
    free(present);
    free(is_owner);
    return r;
}

/* ---- fetching the reduced shards ------------------------------------------------------ */

typedef struct red_job {
    size_t g;
    const pulse_record_object *o;
    void *data;
    loco_shard *s;
    const char *owner;
} red_job;

typedef struct red_ctx {
    round_ctx *c;
    red_job *jobs;
    size_t k;                   /* members of the final attempt (the mean's divisor) */
} red_ctx;

static int red_decode(void *ctx, size_t i)
{
    red_ctx *x = ctx;
    round_ctx *c = x->c;
    red_job *j = &x->jobs[i];
    struct rs_state *s = c->rs;
    int r = loco_shard_decode(j->data, j->o->size, c->st.view, s->rstart[j->g], s->rlen[j->g], j->s);
    j->s->tensor = s->rt[j->g];
    if (r)
        return pulse_fail(r, "owner %s: reduced shard of tensor %s at %" PRIu64 ": %s", j->owner, j->o->tensor,
                          j->o->range_offset, pulse_last_error());
    for (uint32_t e = 0; e < j->s->k; e++)
        if (!isfinite(j->s->val[e]))
            return pulse_fail(PULSE_ERR_FORMAT, "owner %s: reduced shard of tensor %s: element %" PRIu64
                              " is not finite", j->owner, j->o->tensor, j->o->range_offset + j->s->idx[e]);
    /* The sum of x->k members' values, each within LOCO_MAX_VALUE, never exceeds k times it (K x 2^16
     * is an FP32 number and rounding is monotonic): an owner's larger sum is refused alike everywhere. */
    float bound = (float)x->k * LOCO_MAX_VALUE;
    size_t over = loco_first_over(j->s->val, j->s->k, bound);
    if (over < j->s->k)
        return pulse_fail(PULSE_ERR_FORMAT, "owner %s: reduced shard of tensor %s: element %" PRIu64 ": a sum over the "
                          "bound (%g, more than %zu members x %g)", j->owner, j->o->tensor,
                          j->o->range_offset + j->s->idx[over], (double)j->s->val[over], x->k, (double)LOCO_MAX_VALUE);
    if (c->o->reduce_gate && j->s->k) {
        /* Every published sum must pass the owner's gate: its mean update changes the view. */
        float *u = malloc((size_t)j->s->k * 4);
        if (!u)
            return pulse_fail(PULSE_ERR_NOMEM, "reduced shard");
        loco_mean_update(j->s->val, j->s->k, (float)x->k, c->o->outer_lr, u);
        size_t bad = 0;
        const float *theta = (const float *)(const void *)pulse_ckpt_tensor(c->st.theta, s->rt[j->g])->data +
                             s->rstart[j->g];
        int gc = c->kt->gate_check[c->st.view](theta, (size_t)s->rlen[j->g], j->s->idx, u, j->s->k, &bad);
        free(u);
        if (gc != PULSE_GATE_OK)
            return pulse_fail(PULSE_ERR_FORMAT, "owner %s: reduced shard of tensor %s: element %" PRIu64 ": a sum "
                              "whose mean update does not change the view (the owner's gate withholds it)", j->owner,
                              j->o->tensor, j->o->range_offset + j->s->idx[bad]);
    }
    return 0;
}

/* Every other owner's reduced shards of attempt P: each object one range that owner owns,
 * ascending; fetched with their declared size and digest; decoded; finite values. */
static int fetch_reduced(round_ctx *c, const rs_plan *p)
{
    struct rs_state *s = c->rs;
    int *is_owner = calloc(c->n_tr, sizeof *is_owner);
    int r = is_owner ? 0 : pulse_fail(PULSE_ERR_NOMEM, "owners");
    for (size_t g = 0; !r && g < s->n_ranges; g++)
        is_owner[s->owner[g]] = 1;
    for (size_t i = 0; !r && i < c->n_tr; i++) {
        if (!is_owner[i] || i == c->self || s->own[i].state == RS_REDUCED)
            continue;
        /* decided final by another trainer before this one read every owner */
        if (s->own[i].state == RS_NONE)
            read_owner(c, p->attempt, i);
        if (s->own[i].state != RS_REDUCED)
            r = pulse_fail(PULSE_ERR_MISMATCH, "attempt %u was decided final, but owner %.16s (%s) has no usable "
                           "reduced record here", p->attempt, c->tr[i].hex, c->tr[i].name);
    }
    for (size_t i = 0; !r && i < c->n_tr; i++) {
        if (!is_owner[i] || i == c->self)
            continue;
        const pulse_record *rec = &s->own[i].rec;
        const trainer *t = &c->tr[i];
        red_job *jobs = calloc(rec->n_objects, sizeof *jobs);
        void **data = calloc(rec->n_objects, sizeof *data);
        if (!jobs || !data)
            r = pulse_fail(PULSE_ERR_NOMEM, "reduced shards");
        long prev = -1;
        for (uint32_t q = 0; !r && q < rec->n_objects; q++) {
            const pulse_record_object *o = &rec->objects[q];
            long g = rs_range_of(c, o);
            if (g < 0 || s->owner[g] != i || g <= prev)
                r = pulse_fail(PULSE_ERR_FORMAT, "owner %.16s (%s): object %u (tensor '%s' at %" PRIu64 ") is not a "
                               "range it owns, or out of order", t->hex, t->name, q, o->tensor, o->range_offset);
            else if (o->size > LOCO_SHARD_HEADER + 1024 + 12 * o->range_length)
                r = pulse_fail(PULSE_ERR_LIMIT, "owner %.16s (%s): object %u: %" PRIu64 " bytes for %" PRIu64
                               " elements", t->hex, t->name, q, o->size, o->range_length);
            prev = g;
            if (!r) {
                jobs[q] = (red_job){ .g = (size_t)g, .o = o, .owner = t->hex };
                if (!(jobs[q].s = calloc(1, sizeof *jobs[q].s)))
                    r = pulse_fail(PULSE_ERR_NOMEM, "reduced shard");
            }
        }
        if (!r)
            r = sync_fetch_objects(c->store, c->o->run, rec->objects, rec->n_objects, data, &c->rep->downloaded);
        for (uint32_t q = 0; !r && q < rec->n_objects; q++)
            jobs[q].data = data[q];
        if (!r) {
            red_ctx x = { c, jobs, p->k };
            r = pulse_parallel_for(rec->n_objects, c->o->threads, red_decode, &x);
        }
        for (uint32_t q = 0; jobs && q < rec->n_objects; q++) {
            if (!r && jobs[q].s->k) {
                s->red[jobs[q].g] = jobs[q].s;
            } else if (jobs[q].s) {
                loco_shard_free(jobs[q].s);
                free(jobs[q].s);
            }
            if (data)
                pulse_store_free(data[q]);
        }
        free(jobs);
        free(data);
    }
    free(is_owner);
    return r;
}

/* ---- the round ------------------------------------------------------------------------ */

int loco_rs_round(round_ctx *c)
{
    c->rs = calloc(1, sizeof *c->rs);
    if (!c->rs)
        return pulse_fail(PULSE_ERR_NOMEM, "reduce-scatter");
    struct rs_state *s = c->rs;
    s->mem = calloc(c->n_tr, sizeof *s->mem);
    s->own = calloc(c->n_tr, sizeof *s->own);
    s->vetoed = calloc(c->n_tr, sizeof *s->vetoed);
    if (!s->mem || !s->own || !s->vetoed)
        return pulse_fail(PULSE_ERR_NOMEM, "reduce-scatter");
    rs_plan *p = &s->plan;
    int r = first_plan(c, p);
    while (!r) {
        if ((r = plan_apply(c, p)))
            break;
        int member = 0;
        for (size_t j = 0; j < p->k; j++)
            member |= p->m[j] == c->self;
        loco_say(c, 0, "attempt %u: %zu members, %zu ranges of %u elements%s", p->attempt, p->k, s->n_ranges, s->cut,
                 member ? "" : " (this trainer is not a member)");
        int vetoing = 0;
        c->x.rs_owned = 0;
        c->x.rs_reduced_bytes = 0;
        c->x.rg_published = c->x.rg_withheld = 0;
        if (member && (r = reduce_own(c, p, &vetoing)))
            break;
        if (vetoing)
            s->own[c->self].state = RS_VETO;
        else if (member && c->x.rs_owned)
            s->own[c->self].state = RS_REDUCED;
        rs_plan next = { 0 };
        if ((r = wait_owners(c, p, &next)))
            break;
        if (next.final) {
            plan_clear(&next);
            r = fetch_reduced(c, p);
            break;
        }
        /* Another attempt, without the members the decision dropped (whoever wrote it saw why). */
        for (size_t j = 0; j < p->k; j++) {
            int kept = 0;
            for (size_t q = 0; q < next.k; q++)
                kept |= next.m[q] == p->m[j];
            if (!kept) {
                trainer *t = &c->tr[p->m[j]];
                c->x.vetoed++;
                loco_say(c, 1, "trainer %.16s (%s) is left out of attempt %u (vetoed by an owner, or late as one)",
                         t->hex, t->name, next.attempt);
            }
        }
        reduced_clear(c);
        owners_clear(c);
        plan_clear(p);
        *p = next;
        memset(s->vetoed, 0, c->n_tr * sizeof *s->vetoed);
    }
    if (r)
        return r;
    /* The members of the round are the final plan's (their records' digests go in the result). */
    size_t included = 0;
    for (size_t i = 0; i < c->n_tr; i++)
        c->tr[i].included = 0;
    for (size_t j = 0; j < p->k; j++) {
        trainer *t = &c->tr[p->m[j]];
        t->included = 1;
        memcpy(t->rec_digest, p->digest[j], 32);
        included++;
    }
    c->rep->included = (unsigned)included;
    c->x.rs_attempt = p->attempt;
    return 0;
}

void loco_rs_add_tensor(const round_ctx *c, size_t t, float *acc)
{
    const struct rs_state *s = c->rs;
    for (size_t g = s->tfirst[t]; g < s->tfirst[t + 1]; g++) {
        const loco_shard *red = s->red[g];
        if (red && red->k)
            c->kt->scatter_add_f32(acc + red->start, red->idx, red->k, red->val);
    }
}

void loco_rs_carry_withheld(round_ctx *c)
{
    const struct rs_state *s = c->rs;
    for (size_t g = 0; s && s->held && g < s->n_ranges; g++) {
        const loco_shard *h = s->held[g];
        if (!h || s->owner[g] != c->self)
            continue;
        float *e = (float *)(void *)pulse_ckpt_tensor(c->e_new, h->tensor)->data + h->start;
        loco_carry_sum(e, h->idx, h->val, h->k);
    }
}
