/* SPDX-License-Identifier: Apache-2.0 */
/* A tensor's changes decoded straight into the part of it an engine parameter holds (a tensor-parallel rank's rows or columns, at an offset in a fused parameter), with no index arrays. */
#include <string.h>

#include "base/fail.h"
#include "node/parallel.h"
#include "node/patch/patch_internal.h"

typedef struct piece_job {
    const pulse_patch *p;
    const patch_tensor *t;
    pulse_piece pc;
    uint8_t *dst;
    _Atomic uint64_t written;
    patch_pool pool;
} piece_job;

/* One changed element into the parameter at `at`: the new bits, or the old plus the delta. */
static inline void put(uint8_t *d, const uint8_t *src, unsigned unit, uint32_t mask, int ulp)
{
    uint32_t v = 0, old = 0;
    memcpy(&v, src, unit);
    if (ulp) {
        memcpy(&old, d, unit);
        v = (old + ((v >> 1) ^ (0u - (v & 1)))) & mask;   /* un-zigzag, add modulo 2^width */
    }
    memcpy(d, &v, unit);
}

static int piece_chunk(void *ctx, size_t k)
{
    piece_job *j = ctx;
    const size_t ci = j->t->first_coded + k;
    const patch_chunk *c = &j->p->chunks[ci];
    const pulse_piece *pc = &j->pc;
    if (patch_chunk_absent(j->p, ci))
        return 0;
    /* Row pieces: a chunk wholly outside the rows is not even decoded. */
    if (pc->dim == 0 && (c->first + c->len <= pc->start * pc->cols || c->first >= pc->stop * pc->cols))
        return 0;
    int err = 0;
    patch_scratch *s = patch_pool_take(&j->pool, &err);
    if (!s)
        return err;
    const unsigned w = j->t->unit;
    const uint64_t lo = pc->start * pc->cols, hi = pc->stop * pc->cols;
    int decoded = 0;
    if (pc->dim == 0 && c->first >= lo && c->first + c->len <= hi) {
        /* A chunk inside the rows lands contiguously: apply's own fused decode-and-add (2-bit
         * ulp chunks, the common case) writes it in place; others are decoded as below. */
        uint8_t *home = j->dst + (c->first - lo + pc->at * pc->param_cols) * w;
        if (j->p->version >= 5) {
            /* the piece holds the whole chunk's old values: a context-coded chunk decodes
             * against them (in band order, then written as below) */
            if ((err = patch_decode_chunk_base(j->p, c, s, home)) != 0) {
                patch_pool_give(&j->pool, s);
                return err;
            }
            decoded = 1;
        } else if (!patch_misaligned(home, w)) {
            err = patch_apply_checked_chunk(j->p, c, s, home);
            if (err == 0) {
                atomic_fetch_add_explicit(&j->written, c->count, memory_order_relaxed);
                patch_pool_give(&j->pool, s);
                return 0;
            }
            if (err < 0) {
                patch_pool_give(&j->pool, s);
                return err;
            }
            decoded = err == 2;   /* decoded into s, not written */
        }
        err = 0;
    }
    if (decoded || (err = patch_decode_chunk(j->p, c, s)) == 0) {
        const unsigned unit = j->t->unit;
        const uint32_t mask = unit == 4 ? UINT32_MAX : (1u << (8 * unit)) - 1;
        const int ulp = j->p->values == PULSE_VALUES_ULP;
        uint64_t n = 0;
        if (pc->dim == 0) {
            /* Whole rows: the parameter's rows are the tensor's, so a flat position moves by
             * one offset; no division per change. */
            const uint64_t to = pc->at * pc->param_cols;
            for (uint32_t m = 0; m < c->count; m++) {
                const uint64_t flat = c->first + s->idx[m];
                if (flat < lo || flat >= hi)
                    continue;
                put(j->dst + (flat - lo + to) * unit, s->vals + (size_t)m * unit, unit, mask, ulp);
                n++;
            }
        } else {
            /* Columns of every row: positions ascend, so the row is tracked by stepping, one
             * division a chunk. */
            uint64_t r = c->first / pc->cols, row0 = r * pc->cols;
            for (uint32_t m = 0; m < c->count; m++) {
                const uint64_t flat = c->first + s->idx[m];
                while (flat >= row0 + pc->cols) {
                    row0 += pc->cols;
                    r++;
                }
                const uint64_t col = flat - row0;
                if (col < pc->start || col >= pc->stop)
                    continue;
                put(j->dst + (r * pc->param_cols + col - pc->start + pc->at) * unit, s->vals + (size_t)m * unit, unit,
                    mask, ulp);
                n++;
            }
        }
        atomic_fetch_add_explicit(&j->written, n, memory_order_relaxed);
    }
    patch_pool_give(&j->pool, s);
    return err;
}

int pulse_patch_apply_piece(const pulse_patch *p, size_t i, const pulse_piece *piece, void *dst, uint64_t dst_elems,
                            int threads, uint64_t *written)
{
    if (written)
        *written = 0;
    if (!p || !piece || (!dst && dst_elems) || i >= p->ntensors)
        return pulse_fail(PULSE_ERR_INVALID, "pulse_patch_apply_piece: %s", i >= (p ? p->ntensors : 0) && p
                                                                                ? "tensor index out of range"
                                                                                : "NULL argument");
    const patch_tensor *t = &p->tensors[i];
    const pulse_piece *pc = piece;
    if (t->dtype == PULSE_DT_OPAQUE || patch_dtype_unit(t->dtype) == 0)
        return pulse_fail(PULSE_ERR_INVALID, "tensor %s: %s changes are whole-chunk byte replacements; take them "
                          "with pulse_patch_tensor_updates and base", t->name, t->dtype_name);
    /* The piece against the tensor, and everything it maps to inside the parameter: checked
     * here once, so the writes need no bound checks. */
    const uint64_t along = pc->dim == 0 ? pc->rows : pc->cols;
    const int shape_ok = pc->rows && pc->cols && t->nelems % pc->rows == 0 && t->nelems / pc->rows == pc->cols;
    if (!shape_ok || (pc->dim != 0 && pc->dim != 1) || pc->start >= pc->stop || pc->stop > along)
        return pulse_fail(PULSE_ERR_MISMATCH, "tensor %s (%llu elements): a piece of %llux%llu, %s [%llu, %llu)",
                          t->name, (unsigned long long)t->nelems, (unsigned long long)pc->rows,
                          (unsigned long long)pc->cols, pc->dim == 0 ? "rows" : "columns",
                          (unsigned long long)pc->start, (unsigned long long)pc->stop);
    const uint64_t span = pc->stop - pc->start;
    const int fits = pc->dim == 0
        ? pc->param_cols == pc->cols && pc->at <= dst_elems / pc->param_cols
              && span <= dst_elems / pc->param_cols - pc->at
        : pc->param_cols && pc->at <= pc->param_cols && span <= pc->param_cols - pc->at
              && pc->rows <= dst_elems / pc->param_cols;
    if (!fits)
        return pulse_fail(PULSE_ERR_MISMATCH, "tensor %s: its %s [%llu, %llu) at %llu do not fit a parameter of %llu "
                          "elements in rows of %llu", t->name, pc->dim == 0 ? "rows" : "columns",
                          (unsigned long long)pc->start, (unsigned long long)pc->stop, (unsigned long long)pc->at,
                          (unsigned long long)dst_elems, (unsigned long long)pc->param_cols);
    if (!t->ncoded)
        return 0;
    piece_job j = { .p = p, .t = t, .pc = *pc, .dst = dst };
    atomic_init(&j.written, 0);
    int err = patch_pool_init(&j.pool, threads, p->chunk_elems, 0);
    if (!err) {
        err = pulse_parallel_for(t->ncoded, threads, piece_chunk, &j);
        patch_pool_free(&j.pool);
    }
    if (written)
        *written = atomic_load_explicit(&j.written, memory_order_relaxed);
    return err;
}
