/* SPDX-License-Identifier: Apache-2.0 */
/* What a patch holds (for `pulse inspect`): sizes per stream and the order-0 entropy bound of the decoded symbols. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/fail.h"
#include "node/parallel.h"
#include "node/patch/patch_internal.h"

/* Counts of 32-bit symbols: open addressing, grown at half load. */
typedef struct histo {
    uint32_t *key;      /* symbol + 1; 0 = empty slot (symbol 0xffffffff shares slot logic via `top`) */
    uint64_t *cnt;
    size_t cap, used;
    uint64_t top;       /* count of 0xffffffff, which cannot be stored as key + 1 */
    uint64_t total;
} histo;

static size_t slot_of(uint32_t k, size_t cap)
{
    return (size_t)((k * 0x9E3779B1u) >> 7) & (cap - 1);
}

static int histo_grow(histo *h)
{
    size_t cap = h->cap ? h->cap * 2 : 1024;
    uint32_t *key = calloc(cap, sizeof *key);
    uint64_t *cnt = calloc(cap, sizeof *cnt);
    if (!key || !cnt) {
        free(key);
        free(cnt);
        return pulse_fail(PULSE_ERR_NOMEM, "symbol histogram");
    }
    for (size_t i = 0; i < h->cap; i++) {
        if (!h->key[i])
            continue;
        size_t j = slot_of(h->key[i], cap);
        while (key[j])
            j = (j + 1) & (cap - 1);
        key[j] = h->key[i];
        cnt[j] = h->cnt[i];
    }
    free(h->key);
    free(h->cnt);
    h->key = key;
    h->cnt = cnt;
    h->cap = cap;
    return 0;
}

static int histo_add_n(histo *h, uint32_t sym, uint64_t n)
{
    h->total += n;
    if (sym == UINT32_MAX) {
        h->top += n;
        return 0;
    }
    if (2 * (h->used + 1) > h->cap) {
        int err = histo_grow(h);
        if (err)
            return err;
    }
    uint32_t k = sym + 1;
    size_t j = slot_of(k, h->cap);
    while (h->key[j] && h->key[j] != k)
        j = (j + 1) & (h->cap - 1);
    if (!h->key[j]) {
        h->key[j] = k;
        h->used++;
    }
    h->cnt[j] += n;
    return 0;
}

static int histo_add(histo *h, uint32_t sym) { return histo_add_n(h, sym, 1); }

/* Adds src's counts into dst. */
static int histo_merge(histo *dst, const histo *src)
{
    int err = 0;
    for (size_t i = 0; !err && i < src->cap; i++)
        if (src->key[i])
            err = histo_add_n(dst, src->key[i] - 1, src->cnt[i]);
    if (!err && src->top)
        err = histo_add_n(dst, UINT32_MAX, src->top);
    return err;
}

/* Sum over symbols of c * log2(total / c): the order-0 bound in bits. */
static double histo_bits(const histo *h)
{
    double bits = 0, n = (double)h->total;
    for (size_t i = 0; i < h->cap; i++)
        if (h->key[i])
            bits += (double)h->cnt[i] * log2(n / (double)h->cnt[i]);
    if (h->top)
        bits += (double)h->top * log2(n / (double)h->top);
    return bits;
}

static void histo_free(histo *h)
{
    free(h->key);
    free(h->cnt);
    memset(h, 0, sizeof *h);
}

/* Decoding for the bound runs on all cores: each pool slot (one per concurrent body) owns
 * a pair of histograms, merged once at the end, so no lock is taken per symbol. */
typedef struct entropy_job {
    const pulse_patch *p;
    size_t first;
    patch_pool pool;
    histo *gaps, *vals;     /* pool.n each, indexed by slot */
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
    histo *gaps = &e->gaps[s - e->pool.slots], *vals = &e->vals[s - e->pool.slots];
    if ((err = patch_decode_chunk(e->p, c, s)) == 0)
        for (uint32_t j = 0; !err && j < c->count; j++) {
            uint32_t v;
            switch (t->unit) {
            case 1: v = s->vals[j]; break;
            case 2: { uint16_t x; memcpy(&x, s->vals + 2 * (size_t)j, 2); v = x; break; }
            default: memcpy(&v, s->vals + 4 * (size_t)j, 4); break;
            }
            err = histo_add(gaps, j ? s->idx[j] - s->idx[j - 1] - 1 : s->idx[0]);
            if (!err)
                err = histo_add(vals, v);
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
    histo gaps = { 0 }, vals = { 0 };
    for (size_t i = 0; e.gaps && e.vals && i < slots; i++) {
        if (!err)
            err = histo_merge(&gaps, &e.gaps[i]);
        if (!err)
            err = histo_merge(&vals, &e.vals[i]);
        histo_free(&e.gaps[i]);
        histo_free(&e.vals[i]);
    }
    if (!err)
        *bits = histo_bits(&gaps) + histo_bits(&vals);
    histo_free(&gaps);
    histo_free(&vals);
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
