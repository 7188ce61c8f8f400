/* SPDX-License-Identifier: Apache-2.0 */
/* Benchmark: how far context beside each weight's old exponent (its neighbours' changes in the same step, its own changes in the previous steps) would take a BF16 step's conditional entropy below the exponent bound. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "node/patch/patch_counts.h"
#include "pulseweights/checkpoint.h"

/* Classes of a context beside the exponent, at most this many. */
#define NCLS 51u

/* What a context sees of element i: the checkpoints (PP, the one before PREV, may be NULL) and
 * the tensor's row width. */
typedef struct {
    const uint16_t *PP, *P, *O, *N;
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

/* The sign of the change two steps back (PP -> P): 0, 1 up, 2 down. */
static unsigned sign_before(const element *e)
{
    int d = ulps(e->P[e->i], e->PP[e->i]);
    return d == 0 ? 0u : d > 0 ? 1u : 2u;
}

static unsigned ctx_prev2_sign(const element *e)
{
    return ctx_prev_sign(e) * 3u + sign_before(e);
}

static unsigned ctx_prev_class_prev2_sign(const element *e)
{
    return ctx_prev_class(e) * 3u + sign_before(e);
}

typedef struct {
    const char *name;
    unsigned (*cls)(const element *);
    int needs_pp;   /* reads the checkpoint two steps back */
} context;

static const context contexts[] = {
    {"exponent of old", ctx_none, 0},
    {"+ left neighbour's change (this step)", ctx_left, 0},
    {"+ the row above's change (this step)", ctx_above, 0},
    {"+ both neighbours' changes", ctx_both, 0},
    {"+ previous change's sign", ctx_prev_sign, 0},
    {"+ previous change's class", ctx_prev_class, 0},
    {"+ previous two changes' signs", ctx_prev2_sign, 1},
    {"+ previous change's class, sign before", ctx_prev_class_prev2_sign, 1},
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

static void count_tensor(const pulse_tensor *to, const uint16_t *PP, const uint16_t *P, const uint16_t *O,
                         const uint16_t *N)
{
    element e = {PP, P, O, N, 0, to->ndim >= 2 ? (size_t)to->shape[to->ndim - 1] : (size_t)to->nelems};
    if (!e.width)
        return;
    for (size_t c = 0; c < NCTX; c++) {
        if (contexts[c].needs_pp && !PP)
            continue;
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
    if (argc != 4 && argc != 5) {
        fprintf(stderr, "usage: extra_context [PREV2] PREV OLD NEW   (consecutive BF16 checkpoints of one run;\n"
                        "       with PREV2 the contexts of the change before the previous one too)\n");
        return 2;
    }
    /* c[0] PREV2 (or NULL), c[1] PREV, c[2] OLD, c[3] NEW */
    pulse_ckpt *c[4] = {NULL, NULL, NULL, NULL};
    int first = argc == 5 ? 0 : 1;
    for (int i = first; i < 4; i++)
        if (pulse_ckpt_open(&c[i], argv[i + 1 - first], PULSE_CKPT_READ) != 0) {
            fprintf(stderr, "extra_context: cannot open %s\n", argv[i + 1 - first]);
            return 1;
        }
    size_t nt = pulse_ckpt_count(c[2]);
    for (int i = first; i < 4; i++)
        if (pulse_ckpt_count(c[i]) != nt) {
            fprintf(stderr, "extra_context: the checkpoints' tensors differ\n");
            return 1;
        }
    uint64_t elems = 0, changes = 0;
    for (size_t t = 0; t < nt; t++) {
        const pulse_tensor *to = pulse_ckpt_tensor(c[2], t);
        const uint16_t *v[4] = {NULL, NULL, NULL, NULL};
        for (int i = first; i < 4; i++) {
            const pulse_tensor *x = pulse_ckpt_tensor(c[i], t);
            if (strcmp(x->name, to->name) || x->dtype != to->dtype || x->nelems != to->nelems) {
                fprintf(stderr, "extra_context: tensor %s differs in name, dtype or shape\n", to->name);
                return 1;
            }
            v[i] = (const uint16_t *)(const void *)x->data;
        }
        if (to->dtype != PULSE_DT_BF16)
            continue;
        const uint16_t *O = v[2], *N = v[3];
        for (size_t i = 0; i < to->nelems; i++)
            changes += N[i] != O[i];
        elems += to->nelems;
        count_tensor(to, v[0], v[1], O, N);
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
        if (contexts[i].needs_pp && first)
            continue;
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
    for (int i = first; i < 4; i++)
        pulse_ckpt_close(&c[i]);
    return 0;
}
