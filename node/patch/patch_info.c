/* SPDX-License-Identifier: Apache-2.0 */
/* What a patch holds (for `pulse inspect`): sizes per stream and the order-0 entropy bound of the decoded symbols. */
#include <stdlib.h>
#include <string.h>

#include "base/fail.h"
#include "node/parallel.h"
#include "node/patch/patch_counts.h"
#include "node/patch/patch_internal.h"

/* Decoding for the bound runs on all cores: each pool slot (one per concurrent body) owns
 * a pair of histograms, merged once at the end, so no lock is taken per symbol. */
typedef struct entropy_job {
    const pulse_patch *p;
    size_t first;
    patch_pool pool;
    patch_counts *gaps, *vals;  /* pool.n each, indexed by slot */
} entropy_job;

static int entropy_chunk(void *ctx, size_t i)
{
    entropy_job *e = ctx;
    const patch_chunk *c = &e->p->chunks[e->first + i];
    const patch_tensor *t = &e->p->tensors[c->tensor];
    if (t->dtype == PULSE_DT_OPAQUE)
        return 0;
    int err = 0;
    patch_scratch *s = patch_pool_take(&e->pool, &err);
    if (!s)
        return err;
    patch_counts *gaps = &e->gaps[s - e->pool.slots], *vals = &e->vals[s - e->pool.slots];
    const uint8_t *bytes;
    if ((err = patch_chunk_bytes(e->p, c, s, 1, &bytes)) != 0 || patch_chunk_is_context(e->p, c, bytes)) {
        /* a context-coded chunk's symbols need the base: left out (pulse inspect --base counts them) */
        patch_pool_give(&e->pool, s);
        return err;
    }
    if ((err = patch_decode_bytes(e->p, c, s, bytes)) == 0)
        for (uint32_t j = 0; !err && j < c->count; j++) {
            uint32_t v;
            switch (t->unit) {
            case 1: v = s->vals[j]; break;
            case 2: { uint16_t x; memcpy(&x, s->vals + 2 * (size_t)j, 2); v = x; break; }
            default: memcpy(&v, s->vals + 4 * (size_t)j, 4); break;
            }
            err = patch_counts_add(gaps, j ? s->idx[j] - s->idx[j - 1] - 1 : s->idx[0]);
            if (!err)
                err = patch_counts_add(vals, v);
        }
    patch_pool_give(&e->pool, s);
    return err;
}

/* Decodes chunks [first, first+n) and returns the bound of their gaps and value symbols. */
static int entropy_of(const pulse_patch *p, size_t first, size_t n, double *bits)
{
    *bits = 0;
    entropy_job e = { .p = p, .first = first };
    int err = patch_pool_init(&e.pool, 0, p->chunk_elems, 0);
    if (err)
        return err;
    e.gaps = calloc(e.pool.n, sizeof *e.gaps);
    e.vals = calloc(e.pool.n, sizeof *e.vals);
    if (!e.gaps || !e.vals)
        err = pulse_fail(PULSE_ERR_NOMEM, "symbol histograms");
    if (!err)
        err = pulse_parallel_for(n, 0, entropy_chunk, &e);
    const size_t slots = e.pool.n;
    patch_pool_free(&e.pool);   /* (zeroes e.pool) */
    patch_counts gaps = { 0 }, vals = { 0 };
    for (size_t i = 0; e.gaps && e.vals && i < slots; i++) {
        if (!err)
            err = patch_counts_merge(&gaps, &e.gaps[i], 0);
        if (!err)
            err = patch_counts_merge(&vals, &e.vals[i], 0);
        patch_counts_free(&e.gaps[i]);
        patch_counts_free(&e.vals[i]);
    }
    if (!err)
        *bits = patch_counts_bits(&gaps) + patch_counts_bits(&vals);
    patch_counts_free(&gaps);
    patch_counts_free(&vals);
    free(e.gaps);
    free(e.vals);
    return err;
}

int pulse_patch_tensor_info_get(const pulse_patch *p, size_t i, int decode, pulse_patch_tensor_info *info)
{
    if (!p || !info || i >= p->ntensors)
        return pulse_fail(PULSE_ERR_INVALID, "pulse_patch_tensor_info_get: bad argument");
    const patch_tensor *t = &p->tensors[i];
    memset(info, 0, sizeof *info);
    info->name = t->name;
    info->dtype_name = t->dtype_name;
    info->dtype = t->dtype;
    info->ndim = t->ndim;
    memcpy(info->shape, t->shape, sizeof t->shape);
    info->nelems = t->nelems;
    info->changes = t->changes;
    info->chunks = t->nchunks;
    info->coded_chunks = t->ncoded;
    info->table_bytes = t->table_bytes;
    for (size_t c = t->first_coded; c < t->first_coded + t->ncoded; c++) {
        info->pos_bytes += p->chunks[c].pos_len;
        info->val_bytes += p->chunks[c].val_len;
    }
    if (decode && t->dtype != PULSE_DT_OPAQUE)
        return entropy_of(p, t->first_coded, t->ncoded, &info->entropy_bits);
    return 0;
}

int pulse_patch_info(const pulse_patch *p, int decode, pulse_patch_stats *st)
{
    if (!p || !st)
        return pulse_fail(PULSE_ERR_INVALID, "pulse_patch_info: NULL argument");
    memset(st, 0, sizeof *st);
    st->file_bytes = p->len;
    st->header_bytes = p->header_bytes;
    for (size_t i = 0; i < p->ntensors; i++) {
        const patch_tensor *t = &p->tensors[i];
        st->nelems += t->nelems;
        st->dense_bytes += t->units * t->unit;
        if (t->dtype == PULSE_DT_OPAQUE)
            st->opaque_changes += t->changes;
        else
            st->changes += t->changes;
        for (size_t c = t->first_coded; c < t->first_coded + t->ncoded; c++) {
            if (t->dtype == PULSE_DT_OPAQUE)
                st->opaque_bytes += p->chunks[c].val_len;
            else {
                st->pos_bytes += p->chunks[c].pos_len;
                st->val_bytes += p->chunks[c].val_len;
            }
        }
    }
    return decode ? entropy_of(p, 0, p->nchunks, &st->entropy_bits) : 0;
}
