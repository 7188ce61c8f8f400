/* SPDX-License-Identifier: Apache-2.0 */
/* pulse_patch_squash: compose consecutive patches chunk by chunk into one absolute patch. */
#include <stdlib.h>
#include <string.h>

#include "base/fail.h"
#include "node/parallel.h"
#include "node/patch/patch_internal.h"

/* Streaming, the most coded bytes kept waiting for their turn in the file (as the diff's). */
#define SQUASH_PARKED_MAX ((uint64_t)64 << 20)

typedef struct squash_job {
    pulse_patch *const *p;
    size_t n;
    const pulse_ckpt *base;
    int level;
    patch_out_tensor *out;
    uint64_t *chunk_start;
    size_t ntensors;
    patch_pool pool;
    /* One ulp patch against its base (a follower's journal step): which chunks the result
     * changes is known before any is coded (those the patch changes, a ulp difference never
     * being zero), so each goes to the file in its turn (order: job j = global chunk j) and the
     * squash holds a bounded number of coded bytes instead of all of them. */
    int stream;
    patch_order order;
} squash_job;

/* The coded chunk `index` of tensor t in p, or NULL when that chunk is unchanged. */
static const patch_chunk *find_chunk(const pulse_patch *p, size_t t, uint64_t index)
{
    const patch_tensor *pt = &p->tensors[t];
    size_t lo = pt->first_coded, hi = pt->first_coded + pt->ncoded;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (p->chunks[mid].index < index)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < pt->first_coded + pt->ncoded && p->chunks[lo].index == index ? &p->chunks[lo] : NULL;
}

/* One ulp patch against its base, the follower's journal step: a decoded ulp value is never
 * zero (the code stores z - 1 or an escape above the symbols), so the positions where the
 * result differs from the base are exactly the patch's, and their final values are the base's
 * plus the differences. No copy of the chunk, no diff of it, and the position stream is the
 * patch's own, copied as it is. */
static int squash_one_ulp(const squash_job *q, const patch_chunk *c, patch_scratch *s, const uint8_t *base,
                          unsigned unit, patch_out_chunk *oc)
{
    const uint8_t *bytes;
    int err = patch_decode_chunk_at(q->p[0], c, s, &bytes);
    if (err || c->count == 0) {
        oc->count = 0;
        return err;
    }
    const pulse_kernels *k = pulse_kernels_get();
    switch (unit) {
    case 1: k->ulp_to_abs8(base, s->idx, c->count, s->vals, s->dense); break;
    case 2:
        k->ulp_to_abs16((const uint16_t *)base, s->idx, c->count, (const uint16_t *)s->vals, (uint16_t *)s->dense);
        break;
    default:
        k->ulp_to_abs32((const uint32_t *)base, s->idx, c->count, (const uint32_t *)s->vals, (uint32_t *)s->dense);
        break;
    }
    patch_pos pp;
    if ((err = patch_pos_probe(q->p[0], c, bytes, &pp)) != 0)
        return err;
    return patch_encode_abs_at(s, &pp, c->count, s->dense, unit, q->level, oc);
}

/* Chunk `job`'s coded bytes, before its slot is given back: kept for the file written at the
 * end, or, streaming, written now in table order or kept for their turn. */
static int squash_out(squash_job *q, size_t job, patch_out_chunk *oc)
{
    if (!q->stream)
        return patch_out_keep(oc);
    if (oc->planned && !oc->count) {
        size_t lo = patch_chunk_tensor(q->chunk_start, q->ntensors, job);
        return pulse_fail(PULSE_ERR_CORRUPT, "tensor %s chunk %llu: the patch's chunk changes nothing",
                          q->p[0]->tensors[lo].name, (unsigned long long)(job - q->chunk_start[lo]));
    }
    return patch_order_commit(&q->order, job, &oc, 1);
}

static int squash_code(squash_job *q, size_t job)
{
    size_t lo = patch_chunk_tensor(q->chunk_start, q->ntensors, job);
    uint64_t ci = job - q->chunk_start[lo];
    patch_out_chunk *oc = &q->out[lo].chunks[ci];
    const patch_tensor *pt = &q->p[0]->tensors[lo];
    int any = 0;
    for (size_t i = 0; i < q->n && !any; i++)
        any = find_chunk(q->p[i], lo, ci) != NULL;
    if (!any)
        return q->stream ? squash_out(q, job, oc) : 0;

    int err = 0;
    patch_scratch *s = patch_pool_take(&q->pool, &err);
    if (!s)
        return err;
    const pulse_kernels *k = pulse_kernels_get();
    unsigned unit = pt->unit;
    int opaque = pt->dtype == PULSE_DT_OPAQUE;
    uint64_t first = ci * q->p[0]->chunk_elems;
    uint32_t len = (uint32_t)(pt->units - first < q->p[0]->chunk_elems ? pt->units - first
                                                                       : q->p[0]->chunk_elems);
    const uint8_t *base = q->base ? pulse_ckpt_tensor(q->base, lo)->data + first * unit : NULL;
    if (base && !opaque && patch_misaligned(base, unit)) {
        uint8_t *copy = patch_scratch_bounce(s, q->p[0]->chunk_elems);
        if (!copy) {
            err = PULSE_ERR_NOMEM;   /* the detail is set */
            patch_pool_give(&q->pool, s);
            return err;
        }
        memcpy(copy, base, (size_t)len * unit);
        base = copy;
    }
    if (base && q->n == 1 && !opaque && q->p[0]->values == PULSE_VALUES_ULP && q->p[0]->version < 5) {
        err = squash_one_ulp(q, find_chunk(q->p[0], lo, ci), s, base, unit, oc);
        if (!err)
            err = squash_out(q, job, oc);
        patch_pool_give(&q->pool, s);
        return err;
    }
    if (base)
        memcpy(s->dense, base, (size_t)len * unit);
    memset(s->mark, 0, len);
    uint32_t last_count = 0;
    for (size_t i = 0; i < q->n && !err; i++) {
        const patch_chunk *c = find_chunk(q->p[i], lo, ci);
        if (!c)
            continue;
        /* With a base, dense holds the state patch i starts from: a context-coded chunk
         * (format 5) decodes against it. */
        if ((err = patch_decode_chunk_base(q->p[i], c, s, base ? s->dense : NULL)) != 0)
            break;
        last_count = c->count;
        if (opaque) {
            memcpy(s->dense, s->vals, len);
            memset(s->mark, 1, len);
            continue;
        }
        int ulp = q->p[i]->values == PULSE_VALUES_ULP;
        switch (unit) {
        case 1:
            if (ulp) k->ulp_apply8(s->dense, s->idx, c->count, s->vals);
            else k->scatter8(s->dense, s->idx, c->count, s->vals);
            break;
        case 2:
            if (ulp) k->ulp_apply16((uint16_t *)s->dense, s->idx, c->count, (const uint16_t *)s->vals);
            else k->scatter16((uint16_t *)s->dense, s->idx, c->count, (const uint16_t *)s->vals);
            break;
        default:
            if (ulp) k->ulp_apply32((uint32_t *)s->dense, s->idx, c->count, (const uint32_t *)s->vals);
            else k->scatter32((uint32_t *)s->dense, s->idx, c->count, (const uint32_t *)s->vals);
            break;
        }
        for (uint32_t j = 0; j < c->count; j++)
            s->mark[s->idx[j]] = 1;
    }
    if (!err) {
        size_t n = 0;
        if (base) {
            /* With the base at hand the output is exactly "where the result differs". */
            switch (unit) {
            case 1: n = k->diff8(base, s->dense, len, s->idx); break;
            case 2: n = k->diff16((const uint16_t *)base, (const uint16_t *)s->dense, len, s->idx); break;
            default: n = k->diff32((const uint32_t *)base, (const uint32_t *)s->dense, len, s->idx); break;
            }
        } else {
            for (uint32_t j = 0; j < len; j++)
                if (s->mark[j])
                    s->idx[n++] = j;
        }
        if (n == 0)
            oc->count = 0;
        else if (opaque)
            err = patch_encode_replace(s, s->dense, len, base ? (uint32_t)n : last_count, q->level, oc);
        else {
            switch (unit) {
            case 1: k->gather8(s->dense, s->idx, n, s->vals); break;
            case 2: k->gather16((const uint16_t *)s->dense, s->idx, n, (uint16_t *)s->vals); break;
            default: k->gather32((const uint32_t *)s->dense, s->idx, n, (uint32_t *)s->vals); break;
            }
            err = patch_encode_changes(s, s->idx, n, s->vals, unit, 0, q->level, oc);
        }
    }
    if (!err)
        err = squash_out(q, job, oc);   /* out of the slot before it is given back */
    patch_pool_give(&q->pool, s);
    return err;
}

/* Streaming: job j's one chunk, global chunk j. */
static void squash_chunk_of(void *ctx, size_t job, patch_out_chunk **oc, size_t *n)
{
    const squash_job *q = ctx;
    size_t lo = patch_chunk_tensor(q->chunk_start, q->ntensors, job);
    oc[0] = &q->out[lo].chunks[job - q->chunk_start[lo]];
    *n = 1;
}

static int squash_chunk(void *ctx, size_t job)
{
    squash_job *q = ctx;
    int err = squash_code(q, job);
    if (err && q->stream)
        patch_order_fail(&q->order);
    return err;
}

static int same_patch_layout(const pulse_patch *a, const pulse_patch *b, size_t bi)
{
    if (a->chunk_elems != b->chunk_elems)
        return pulse_fail(PULSE_ERR_MISMATCH, "patch %zu: chunk size %u, the first patch has %u", bi + 1,
                          b->chunk_elems, a->chunk_elems);
    if (a->ntensors != b->ntensors)
        return pulse_fail(PULSE_ERR_MISMATCH, "patch %zu: layout changed: %zu tensors, the first has %zu",
                          bi + 1, b->ntensors, a->ntensors);
    for (size_t i = 0; i < a->ntensors; i++) {
        const patch_tensor *x = &a->tensors[i], *y = &b->tensors[i];
        if (strcmp(x->name, y->name) || strcmp(x->dtype_name, y->dtype_name) || x->dtype != y->dtype
            || x->elem_size != y->elem_size || x->ndim != y->ndim
            || memcmp(x->shape, y->shape, sizeof x->shape[0] * (size_t)x->ndim))
            return pulse_fail(PULSE_ERR_MISMATCH, "patch %zu: layout changed at tensor %s", bi + 1, x->name);
    }
    return 0;
}

int pulse_patch_squash(pulse_patch *const *p, size_t n, const pulse_ckpt *base, int threads, int zstd_level,
                       const char *out_path)
{
    if (!p || n == 0 || !out_path)
        return pulse_fail(PULSE_ERR_INVALID, "pulse_patch_squash: no patches or no output");
    for (size_t i = 0; i < n; i++)
        if (p[i] && p[i]->present)
            return pulse_fail(PULSE_ERR_INVALID, "pulse_patch_squash: patch %zu is sliced (its head and some chunks)", i);
    if (zstd_level == 0)
        zstd_level = PULSE_PATCH_LEVEL_FAST;
    if (zstd_level > ZSTD_maxCLevel() || zstd_level < ZSTD_minCLevel())
        return pulse_fail(PULSE_ERR_INVALID, "zstd level %d", zstd_level);
    int err, any_ulp = 0;
    char h1[65], h2[65];
    for (size_t i = 0; i < n; i++) {
        any_ulp |= p[i]->values == PULSE_VALUES_ULP;
        if (i && (err = same_patch_layout(p[0], p[i], i)) != 0)
            return err;
        if (i && memcmp(p[i - 1]->result_id, p[i]->base_id, 32) != 0)
            return pulse_fail(PULSE_ERR_MISMATCH, "patch %zu starts at %.16s.., patch %zu ends at %.16s..: not consecutive",
                              i + 1, pulse_id_hex(p[i]->base_id, h1), i, pulse_id_hex(p[i - 1]->result_id, h2));
    }
    if (any_ulp && !base)
        return pulse_fail(PULSE_ERR_INVALID, "ulp-coded patches need the base checkpoint to be squashed (--base)");
    if (base) {
        if ((err = patch_check_layout(p[0], base)) != 0)
            return err;
        uint8_t id[32];
        if ((err = pulse_ckpt_state_id(base, threads, id)) != 0)
            return err;
        if (memcmp(id, p[0]->base_id, 32) != 0)
            return pulse_fail(PULSE_ERR_MISMATCH, "base checkpoint is %.16s.., the first patch starts at %.16s..",
                              pulse_id_hex(id, h1), pulse_id_hex(p[0]->base_id, h2));
    }

    squash_job q = { .p = p, .n = n, .base = base, .level = zstd_level, .order = { .file = { .fd = -1 } } };
    q.stream = n == 1 && base && p[0]->values == PULSE_VALUES_ULP;
    q.ntensors = p[0]->ntensors;
    q.out = calloc(q.ntensors ? q.ntensors : 1, sizeof *q.out);
    q.chunk_start = calloc(q.ntensors + 1, sizeof *q.chunk_start);
    err = 0;
    if (!q.out || !q.chunk_start) {
        err = pulse_fail(PULSE_ERR_NOMEM, "squash tables");
        goto done;
    }
    for (size_t i = 0; i < q.ntensors; i++) {
        const patch_tensor *t = &p[0]->tensors[i];
        patch_out_tensor *ot = &q.out[i];
        ot->name = t->name;
        ot->dtype_name = t->dtype_name;
        ot->dtype = t->dtype;
        ot->elem_size = t->elem_size;
        ot->ndim = t->ndim;
        ot->shape = t->shape;
        ot->nchunks = t->nchunks;
        ot->chunks = calloc(t->nchunks ? t->nchunks : 1, sizeof *ot->chunks);
        if (!ot->chunks) {
            err = pulse_fail(PULSE_ERR_NOMEM, "tensor %s: chunk table", t->name);
            goto done;
        }
        q.chunk_start[i + 1] = q.chunk_start[i] + t->nchunks;
    }
    /* The result's metadata is the last one carried (patches of formats 2 and 3 carry none). */
    const char *meta = NULL;
    for (size_t i = n; i-- > 0 && !meta;)
        meta = p[i]->metadata;
    const size_t njobs = (size_t)q.chunk_start[q.ntensors];
    if (q.stream) {
        for (size_t i = 0; i < p[0]->nchunks; i++) {
            const patch_chunk *c = &p[0]->chunks[i];
            q.out[c->tensor].chunks[c->index].planned = c->count > 0;
        }
        uint64_t table_len = 0;
        if ((err = patch_table_len(q.out, q.ntensors, 1, meta, 0, &table_len)) != 0
            || (err = patch_order_init(&q.order, njobs, SQUASH_PARKED_MAX, squash_chunk_of, &q)) != 0
            || (err = patch_file_create(&q.order.file, out_path, table_len, 1)) != 0)
            goto done;
    }
    if ((err = patch_pool_init(&q.pool, threads, p[0]->chunk_elems, 1)) != 0)
        goto done;
    err = pulse_parallel_for(njobs, threads, squash_chunk, &q);
    patch_pool_free(&q.pool);
    if (err)
        goto done;
    for (size_t i = 0; i < q.ntensors; i++)
        for (uint64_t c = 0; c < q.out[i].nchunks; c++)
            q.out[i].changes += q.out[i].chunks[c].count;
    if (q.stream)
        err = patch_file_commit(&q.order.file, PULSE_VALUES_ABS, p[0]->chunk_elems, p[0]->base_id, p[n - 1]->result_id,
                                q.out, q.ntensors, meta);
    else
        err = patch_write_file_meta(out_path, PULSE_VALUES_ABS, p[0]->chunk_elems, p[0]->base_id,
                                    p[n - 1]->result_id, q.out, q.ntensors, meta);
done:
    patch_file_abort(&q.order.file);   /* nothing left to do after a commit */
    patch_order_free(&q.order);
    patch_out_free(q.out, q.ntensors);
    free(q.chunk_start);
    return err;
}
