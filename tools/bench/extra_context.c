/* SPDX-License-Identifier: Apache-2.0 */
/* Benchmark: how far context beside each weight's old exponent (its neighbours' changes in the same step, its own change in the previous step) would take a BF16 step's conditional entropy below the exponent bound. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "node/patch/patch_counts.h"
#include "pulseweights/checkpoint.h"

/* Classes of a context beside the exponent, at most this many. */
#define NCLS 17u

/* What a context sees of element i: the three checkpoints and the tensor's row width. */
typedef struct {
    const uint16_t *P, *O, *N;
    size_t i, width;
} element;

/* A change in ulps as a class: 0, or its sign and bit length (capped at 8): 17 classes. */
static unsigned ulp_class(int d)
{
    if (!d)
        return 0;
    unsigned a = (unsigned)(d < 0 ? -d : d), bl = 0;
    while (a) {
        bl++;
        a >>= 1;
    }
    if (bl > 8)
        bl = 8;
    return 1u + 2u * (bl - 1u) + (d < 0);
}

static int ulps(uint16_t to, uint16_t from)
{
    return (int16_t)(uint16_t)(to - from);
}

/* A neighbour's change in this step, which a decoder in row order has already decoded:
 * 0 no such neighbour, 1 unchanged, 2 up, 3 down. */
static unsigned step_sign(const element *e, size_t j)
{
    int d = ulps(e->N[j], e->O[j]);
    return d == 0 ? 1u : d > 0 ? 2u : 3u;
}

static unsigned ctx_none(const element *e)
{
    (void)e;
    return 0;
}

static unsigned ctx_left(const element *e)
{
    return e->i % e->width ? step_sign(e, e->i - 1) : 0;
}

static unsigned ctx_above(const element *e)
{
    return e->i >= e->width ? step_sign(e, e->i - e->width) : 0;
}

static unsigned ctx_both(const element *e)
{
    return ctx_left(e) * 4u + ctx_above(e);
}

static unsigned ctx_prev_sign(const element *e)
{
    int d = ulps(e->O[e->i], e->P[e->i]);
    return d == 0 ? 0u : d > 0 ? 1u : 2u;
}

static unsigned ctx_prev_class(const element *e)
{
    return ulp_class(ulps(e->O[e->i], e->P[e->i]));
}

typedef struct {
    const char *name;
    unsigned (*cls)(const element *);
} context;

static const context contexts[] = {
    {"exponent of old", ctx_none},
    {"+ left neighbour's change (this step)", ctx_left},
    {"+ the row above's change (this step)", ctx_above},
    {"+ both neighbours' changes", ctx_both},
    {"+ previous change's sign", ctx_prev_sign},
    {"+ previous change's class", ctx_prev_class},
};
#define NCTX (sizeof contexts / sizeof contexts[0])

static uint16_t zigzag16(int d)
{
    int16_t v = (int16_t)d;
    return (uint16_t)(((uint16_t)v << 1) ^ (uint16_t)(v >> 15));
}

static void oom(void)
{
    fprintf(stderr, "extra_context: out of memory\n");
    exit(1);
}

/* The count of key in h (it is there). */
static uint64_t count_of(const patch_counts *h, uint64_t key)
{
    size_t j = patch_counts_slot(key + 1, h->cap);
    while (h->key[j] != key + 1)
        j = (j + 1) & (h->cap - 1);
    return h->cnt[j];
}

/* Conditional entropy in bits of the low 16 bits of the keys given the bits above them, and
 * a model cost of (symbols - 1) / 2 log2(n) bits per context (what describing its
 * frequencies takes at best). */
static void cond_entropy(const patch_counts *h, double *bits, double *model)
{
    /* per context (the key above its low 16 bits): its changes, and its distinct symbols */
    patch_counts tot = {0}, syms = {0};
    size_t at = 0;
    uint64_t key, n;
    while (patch_counts_next(h, &at, &key, &n))
        if (patch_counts_add_n(&tot, key >> 16, n) || patch_counts_add(&syms, key >> 16))
            oom();
    /* H(symbol | context) = H(context, symbol) - H(context), each total x entropy in bits */
    *bits = patch_counts_bits(h) - patch_counts_bits(&tot);
    double mb = 0;
    at = 0;
    while (patch_counts_next(&syms, &at, &key, &n))
        mb += ((double)n - 1) / 2 * log2((double)count_of(&tot, key));
    patch_counts_free(&tot);
    patch_counts_free(&syms);
    *model = mb;
}

/* Entropy of binary outcomes counted per context: bits, and 1/2 log2(n) per context with both. */
static void binary_entropy(const uint64_t *c0, const uint64_t *c1, size_t nctx, double *bits, double *model)
{
    for (size_t i = 0; i < nctx; i++) {
        double a = (double)c0[i], b = (double)c1[i], n = a + b;
        if (a && b) {
            *bits -= a * log2(a / n) + b * log2(b / n);
            *model += 0.5 * log2(n);
        }
    }
}

/* Per context: the positions' binary counts of the tensor at hand (by exponent and class), the
 * run's values (z keyed by exponent and class), the values as the change minus the previous
 * one, and what each totals to. */
typedef struct {
    uint64_t c0[256 * NCLS], c1[256 * NCLS];
    patch_counts val, val_rel;
    double pos, pos_model;
} tally;

static tally tallies[NCTX];

static void count_tensor(const pulse_tensor *to, const uint16_t *P, const uint16_t *O, const uint16_t *N)
{
    element e = {P, O, N, 0, to->ndim >= 2 ? (size_t)to->shape[to->ndim - 1] : (size_t)to->nelems};
    if (!e.width)
        return;
    for (size_t c = 0; c < NCTX; c++) {
        tally *t = &tallies[c];
        memset(t->c0, 0, sizeof t->c0);
        memset(t->c1, 0, sizeof t->c1);
        for (e.i = 0; e.i < to->nelems; e.i++) {
            unsigned ex = (O[e.i] >> 7) & 0xFFu, key = ex * NCLS + contexts[c].cls(&e);
            if (N[e.i] == O[e.i]) {
                t->c0[key]++;
                continue;
            }
            t->c1[key]++;
            int d = ulps(N[e.i], O[e.i]), dp = ulps(O[e.i], P[e.i]);
            if (patch_counts_add(&t->val, (uint64_t)key << 16 | zigzag16(d)) ||
                patch_counts_add(&t->val_rel, (uint64_t)key << 16 | zigzag16(d - dp)))
                oom();
        }
        binary_entropy(t->c0, t->c1, 256 * NCLS, &t->pos, &t->pos_model);
    }
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: extra_context PREV OLD NEW   (three consecutive BF16 checkpoints of one run)\n");
        return 2;
    }
    pulse_ckpt *c[3] = {NULL, NULL, NULL};
    for (int i = 0; i < 3; i++)
        if (pulse_ckpt_open(&c[i], argv[i + 1], PULSE_CKPT_READ) != 0) {
            fprintf(stderr, "extra_context: cannot open %s\n", argv[i + 1]);
            return 1;
        }
    size_t nt = pulse_ckpt_count(c[1]);
    if (pulse_ckpt_count(c[0]) != nt || pulse_ckpt_count(c[2]) != nt) {
        fprintf(stderr, "extra_context: the checkpoints' tensors differ\n");
        return 1;
    }
    uint64_t elems = 0, changes = 0;
    for (size_t t = 0; t < nt; t++) {
        const pulse_tensor *tp = pulse_ckpt_tensor(c[0], t), *to = pulse_ckpt_tensor(c[1], t),
                           *tn = pulse_ckpt_tensor(c[2], t);
        if (strcmp(tp->name, to->name) || strcmp(tn->name, to->name) || tp->dtype != to->dtype ||
            tn->dtype != to->dtype || tp->nelems != to->nelems || tn->nelems != to->nelems) {
            fprintf(stderr, "extra_context: tensor %s differs in name, dtype or shape\n", to->name);
            return 1;
        }
        if (to->dtype != PULSE_DT_BF16)
            continue;
        const uint16_t *P = (const uint16_t *)(const void *)tp->data, *O = (const uint16_t *)(const void *)to->data,
                       *N = (const uint16_t *)(const void *)tn->data;
        for (size_t i = 0; i < to->nelems; i++)
            changes += N[i] != O[i];
        elems += to->nelems;
        count_tensor(to, P, O, N);
    }
    if (!changes) {
        printf("no BF16 weight changed from OLD to NEW\n");
        return 0;
    }
    double k = (double)changes;
    printf("%llu BF16 changes of %llu elements (%.2f %%); bits a change (model cost beside, the least that\n"
           "describing each context's frequencies takes); positions per tensor, values per run:\n",
           (unsigned long long)changes, (unsigned long long)elems, 100.0 * k / (double)elems);
    printf("  context                                  positions         values            total            vs exponent\n");
    double base = 0, base_model = 0;
    for (size_t i = 0; i < NCTX; i++) {
        tally *t = &tallies[i];
        double v, vm, r, rm;
        cond_entropy(&t->val, &v, &vm);
        cond_entropy(&t->val_rel, &r, &rm);
        if (i == 0) {
            base = t->pos + v;
            base_model = t->pos_model + vm;
        }
        double tot = t->pos + v, tot_model = t->pos_model + vm;
        printf("  %-38s %6.3f (+%.3f)   %6.3f (+%.3f)   %6.3f (+%.3f)   %.3f (%.3f with model)\n", contexts[i].name,
               t->pos / k, t->pos_model / k, v / k, vm / k, tot / k, tot_model / k, tot / base,
               (tot + tot_model) / (base + base_model));
        if (contexts[i].cls == ctx_prev_class)
            printf("    values as the change minus the previous one: %.3f (+%.3f)\n", r / k, rm / k);
        patch_counts_free(&t->val);
        patch_counts_free(&t->val_rel);
    }
    for (int i = 0; i < 3; i++)
        pulse_ckpt_close(&c[i]);
    return 0;
}
