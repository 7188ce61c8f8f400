/* SPDX-License-Identifier: Apache-2.0 */
/* What context the receiver holds could save: a patch's positions and ulp values against their order-0 entropy and their entropy given the exponent of each old value (`pulse inspect --base`). */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/fail.h"
#include "node/parallel.h"
#include "node/patch/patch_counts.h"
#include "node/patch/patch_internal.h"

/* Exponent bins of one dtype (the widest, BF16/F32, has 8 bits) and dtypes that have one. */
#define EXP_BINS 256u
#define DTYPES 6u

/* Sum over counts of c * log2(total / c) (patch_counts_bits of an array of counts). */
static double counts_bits(const uint64_t *c, size_t n)
{
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += c[i];
    double bits = 0;
    for (size_t i = 0; i < n; i++)
        if (c[i])
            bits += (double)c[i] * log2((double)total / (double)c[i]);
    return bits;
}

/* n x the binary entropy of k changed among n. */
static double flag_bits(uint64_t n, uint64_t k)
{
    if (!k || k == n)
        return 0;
    return (double)k * log2((double)n / (double)k) + (double)(n - k) * log2((double)n / (double)(n - k));
}

/* What describing the value contexts' frequencies would cost, the usual two-part estimate:
 * (k - 1)/2 x log2(n) bits for a context with n changes of k distinct symbols. */
static double values_model_bits(const patch_counts *joint, const uint64_t *ctx, size_t nctx)
{
    uint32_t k[DTYPES * EXP_BINS] = { 0 };
    uint64_t key, count;
    for (size_t at = 0; patch_counts_next(joint, &at, &key, &count);)
        k[key >> 32]++;
    double bits = 0;
    for (size_t c = 0; c < nctx; c++)
        if (k[c] > 1)
            bits += 0.5 * (double)(k[c] - 1) * log2((double)ctx[c]);
    return bits;
}

/* The exponent field of a bit pattern (for F8_E4M3 the 4 bits under the sign, etc.). */
static inline unsigned exponent_of(pulse_dtype dt, uint32_t x)
{
    switch (dt) {
    case PULSE_DT_BF16: return (x >> 7) & 0xff;
    case PULSE_DT_F16: return (x >> 10) & 0x1f;
    case PULSE_DT_F32: return (x >> 23) & 0xff;
    case PULSE_DT_F8_E4M3: return (x >> 3) & 0xf;
    case PULSE_DT_F8_E5M2: return (x >> 2) & 0x1f;
    default: return 0;
    }
}

static inline uint32_t load_unit(const uint8_t *src, unsigned unit)
{
    uint32_t x = 0;
    memcpy(&x, src, unit);   /* a safetensors tensor need not be aligned to its element */
    return x;
}

/* Zigzag of a difference modulo 2^(8 unit): the ulp symbol a ulp patch codes. */
static inline uint32_t zigzag(uint32_t d, unsigned unit)
{
    const unsigned bits = 8 * unit;
    const uint32_t mask = unit == 4 ? UINT32_MAX : (1u << bits) - 1;
    const uint32_t neg = (d >> (bits - 1)) & 1;
    return ((d << 1) ^ (0u - neg)) & mask;
}

/* Elements of one tensor of base per exponent. One loop per width so that each is a plain
 * load-and-count. */
static void exponent_counts(pulse_dtype dt, const uint8_t *data, uint64_t n, unsigned unit, uint64_t *cnt)
{
    if (unit == 2) {
        for (uint64_t e = 0; e < n; e++)
            cnt[exponent_of(dt, load_unit(data + 2 * e, 2))]++;
    } else if (unit == 4) {
        for (uint64_t e = 0; e < n; e++)
            cnt[exponent_of(dt, load_unit(data + 4 * e, 4))]++;
    } else {
        for (uint64_t e = 0; e < n; e++)
            cnt[exponent_of(dt, data[e])]++;
    }
}

typedef struct context_job {
    const pulse_patch *p;
    const pulse_ckpt *base;
    const size_t *order;                /* tensors, largest first: the long ones start early */
    pulse_patch_context *per;           /* ntensors */
    pthread_mutex_t lock;               /* guards the whole-patch counts below */
    patch_counts gaps, syms, joint;     /* joint: (dtype * EXP_BINS + exponent) << 32 | symbol */
    uint64_t ctx[DTYPES * EXP_BINS];    /* changes per (dtype, exponent) */
} context_job;

static int context_tensor(void *arg, size_t k)
{
    context_job *j = arg;
    const size_t i = j->order[k];
    const patch_tensor *t = &j->p->tensors[i];
    pulse_patch_context *r = &j->per[i];
    const unsigned unit = patch_dtype_unit(t->dtype);
    if (t->dtype == PULSE_DT_OPAQUE || !unit)   /* no exponent; its chunks are still checked */
        return t->ncoded ? pulse_patch_tensor_updates(j->p, i, j->base, 1, NULL, NULL, NULL) : 0;
    const uint8_t *data = pulse_ckpt_tensor(j->base, i)->data;
    if (t->nelems && !data)
        return pulse_fail(PULSE_ERR_INVALID, "tensor %s: base checkpoint not readable", t->name);
    r->elements = t->nelems;
    r->changes = t->changes;
    for (size_t c = t->first_coded; c < t->first_coded + t->ncoded; c++) {
        r->pos_bytes += j->p->chunks[c].pos_len;
        r->val_bytes += j->p->chunks[c].val_len;
    }
    uint64_t all[EXP_BINS] = { 0 }, changed[EXP_BINS] = { 0 }, ctx[EXP_BINS] = { 0 };
    exponent_counts(t->dtype, data, t->nelems, unit, all);
    int64_t *index = NULL;
    uint8_t *deltas = NULL;
    patch_counts gaps = { 0 }, syms = { 0 }, joint = { 0 };
    int err = 0;
    if (t->changes) {
        /* Memory grows with this tensor's changes, never with the model. */
        index = malloc(t->changes * sizeof *index);
        deltas = malloc(t->changes * unit);
        if (!index || !deltas)
            err = pulse_fail(PULSE_ERR_NOMEM, "tensor %s: %llu changes", t->name, (unsigned long long)t->changes);
        if (!err)
            err = pulse_patch_tensor_updates(j->p, i, j->base, 1, index, NULL, deltas);
    }
    const uint64_t ce = j->p->chunk_elems;
    for (uint64_t m = 0; !err && m < t->changes; m++) {
        const uint64_t e = (uint64_t)index[m];
        /* The gap the coder codes: from the previous change in the same chunk, else from the
         * chunk's start. */
        const uint64_t gap = m && (uint64_t)index[m - 1] / ce == e / ce ? e - (uint64_t)index[m - 1] - 1 : e % ce;
        const unsigned x = exponent_of(t->dtype, load_unit(data + e * unit, unit));
        const uint32_t sym = zigzag(load_unit(deltas + m * unit, unit), unit);
        changed[x]++;
        ctx[x]++;
        err = patch_counts_add(&gaps, gap);
        if (!err)
            err = patch_counts_add(&syms, sym);
        if (!err)
            err = patch_counts_add(&joint, (uint64_t)x << 32 | sym);
    }
    free(index);
    free(deltas);
    if (!err) {
        r->gap_bits = patch_counts_bits(&gaps);
        r->flag0_bits = flag_bits(t->nelems, t->changes);
        for (unsigned x = 0; x < EXP_BINS; x++) {
            r->flag_bits += flag_bits(all[x], changed[x]);
            /* one probability per exponent present, learnt from its elements */
            r->flag_model_bits += all[x] ? 0.5 * log2((double)all[x]) : 0;
        }
        r->ulp_model_bits = values_model_bits(&joint, ctx, EXP_BINS);
        r->ulp_bits = patch_counts_bits(&syms);
        /* H(symbol | exponent) = H(exponent, symbol) - H(exponent) */
        r->ulp_ctx_bits = fmax(0.0, patch_counts_bits(&joint) - counts_bits(ctx, EXP_BINS));
        pthread_mutex_lock(&j->lock);
        err = patch_counts_merge(&j->gaps, &gaps, 0);
        if (!err)
            err = patch_counts_merge(&j->syms, &syms, 0);
        if (!err)
            err = patch_counts_merge(&j->joint, &joint, (uint64_t)t->dtype * EXP_BINS << 32);
        for (unsigned x = 0; x < EXP_BINS; x++)
            j->ctx[(size_t)t->dtype * EXP_BINS + x] += ctx[x];
        pthread_mutex_unlock(&j->lock);
    }
    patch_counts_free(&gaps);
    patch_counts_free(&syms);
    patch_counts_free(&joint);
    return err;
}

typedef struct by_size {
    uint64_t units;
    size_t i;
} by_size;

static int larger_first(const void *a, const void *b)
{
    const by_size *x = a, *y = b;
    return x->units < y->units ? 1 : x->units > y->units ? -1 : (x->i > y->i) - (x->i < y->i);
}

int pulse_patch_context_bound(const pulse_patch *p, const pulse_ckpt *base, int threads, pulse_patch_context *out,
                              pulse_patch_context *tensors)
{
    if (!p || !base || !out)
        return pulse_fail(PULSE_ERR_INVALID, "pulse_patch_context_bound: NULL argument");
    memset(out, 0, sizeof *out);
    if (p->present)
        return pulse_fail(PULSE_ERR_INVALID, "pulse_patch_context_bound: a sliced patch does not hold every chunk");
    int err = patch_check_layout(p, base);
    if (err)
        return err;
    const size_t n = p->ntensors;
    context_job j = { .p = p, .base = base };
    size_t *order = malloc((n ? n : 1) * sizeof *order);
    by_size *sizes = malloc((n ? n : 1) * sizeof *sizes);
    j.per = calloc(n ? n : 1, sizeof *j.per);
    if (!order || !sizes || !j.per) {
        free(order);
        free(sizes);
        free(j.per);
        return pulse_fail(PULSE_ERR_NOMEM, "pulse_patch_context_bound: %zu tensors", n);
    }
    for (size_t i = 0; i < n; i++)
        sizes[i] = (by_size){ p->tensors[i].units, i };
    qsort(sizes, n, sizeof *sizes, larger_first);
    for (size_t i = 0; i < n; i++)
        order[i] = sizes[i].i;
    free(sizes);
    j.order = order;
    pthread_mutex_init(&j.lock, NULL);
    err = pulse_parallel_for(n, threads, context_tensor, &j);
    pthread_mutex_destroy(&j.lock);
    if (!err) {
        for (size_t i = 0; i < n; i++) {
            const pulse_patch_context *r = &j.per[i];
            out->elements += r->elements;
            out->changes += r->changes;
            out->pos_bytes += r->pos_bytes;
            out->val_bytes += r->val_bytes;
            out->flag0_bits += r->flag0_bits;
            out->flag_bits += r->flag_bits;
            out->flag_model_bits += r->flag_model_bits;
        }
        /* Whole-patch frequencies, as pulse_patch_info's bound: the order-0 figures are what
         * one table for the whole patch gives, the value context one table per (dtype,
         * exponent). */
        out->gap_bits = patch_counts_bits(&j.gaps);
        out->ulp_bits = patch_counts_bits(&j.syms);
        out->ulp_ctx_bits = fmax(0.0, patch_counts_bits(&j.joint) - counts_bits(j.ctx, DTYPES * EXP_BINS));
        out->ulp_model_bits = values_model_bits(&j.joint, j.ctx, DTYPES * EXP_BINS);
        if (tensors)
            memcpy(tensors, j.per, n * sizeof *tensors);
    }
    patch_counts_free(&j.gaps);
    patch_counts_free(&j.syms);
    patch_counts_free(&j.joint);
    free(order);
    free(j.per);
    return err;
}
