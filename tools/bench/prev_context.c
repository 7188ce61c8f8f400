/* SPDX-License-Identifier: Apache-2.0 */
/* Benchmark: how far the previous step's change of each weight, as context beside its old exponent, would take a BF16 step's conditional entropy below the exponent bound. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pulseweights/checkpoint.h"

/* The previous step's change dp = old - prev (BF16 patterns as 16-bit integers, the ulps the
 * weight moved): 0, or its sign and bit length (capped at 8): 17 classes. */
#define NCLS 17u

static unsigned dp_class(int d)
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

static uint16_t zigzag16(int d)
{
    int16_t v = (int16_t)d;
    return (uint16_t)(((uint16_t)v << 1) ^ (uint16_t)(v >> 15));
}

/* Counts of 64-bit keys: open addressing, key + 1 stored, grown at half load. */
typedef struct counts {
    uint64_t *key, *cnt;
    size_t cap, used;
} counts;

static void counts_add_n(counts *h, uint64_t key, uint64_t n)
{
    if (2 * (h->used + 1) > h->cap) {
        counts g = {calloc(h->cap ? 2 * h->cap : 1024, 8), calloc(h->cap ? 2 * h->cap : 1024, 8),
                    h->cap ? 2 * h->cap : 1024, 0};
        if (!g.key || !g.cnt) {
            fprintf(stderr, "prev_context: out of memory\n");
            exit(1);
        }
        for (size_t i = 0; i < h->cap; i++)
            if (h->key[i]) {
                size_t j = (size_t)((h->key[i] * 0x9E3779B97F4A7C15ull) >> 17) & (g.cap - 1);
                while (g.key[j])
                    j = (j + 1) & (g.cap - 1);
                g.key[j] = h->key[i];
                g.cnt[j] = h->cnt[i];
                g.used++;
            }
        free(h->key);
        free(h->cnt);
        *h = g;
    }
    uint64_t k = key + 1;
    size_t j = (size_t)((k * 0x9E3779B97F4A7C15ull) >> 17) & (h->cap - 1);
    while (h->key[j] && h->key[j] != k)
        j = (j + 1) & (h->cap - 1);
    if (!h->key[j]) {
        h->key[j] = k;
        h->used++;
    }
    h->cnt[j] += n;
}

static void counts_add(counts *h, uint64_t key)
{
    counts_add_n(h, key, 1);
}

/* Conditional entropy in bits of the low 16 bits of the keys given the bits above them, and
 * a model cost of (symbols - 1) / 2 log2(n) bits per context (what describing its
 * frequencies takes at best). */
static void cond_entropy(const counts *h, double *bits, double *model)
{
    /* per context: its total n and distinct symbols, by a second map keyed on the context */
    counts ctx = {0};
    for (size_t i = 0; i < h->cap; i++)
        if (h->key[i]) {
            uint64_t c = (h->key[i] - 1) >> 16;
            counts_add_n(&ctx, c << 1, h->cnt[i]);   /* n */
            counts_add(&ctx, c << 1 | 1);       /* symbols */
        }
    double hb = 0, mb = 0;
    for (size_t i = 0; i < h->cap; i++) {
        if (!h->key[i])
            continue;
        uint64_t c = ((h->key[i] - 1) >> 16) << 1, k1 = c + 1;
        size_t j = (size_t)((k1 * 0x9E3779B97F4A7C15ull) >> 17) & (ctx.cap - 1);
        while (ctx.key[j] != k1)
            j = (j + 1) & (ctx.cap - 1);
        double n = (double)ctx.cnt[j];
        hb -= (double)h->cnt[i] * log2((double)h->cnt[i] / n);
    }
    for (size_t i = 0; i < ctx.cap; i++)
        if (ctx.key[i] && ((ctx.key[i] - 1) & 1)) {
            uint64_t k1 = ctx.key[i] - 1;   /* the n entry of the same context */
            size_t j = (size_t)((k1 * 0x9E3779B97F4A7C15ull) >> 17) & (ctx.cap - 1);
            while (ctx.key[j] != k1)
                j = (j + 1) & (ctx.cap - 1);
            mb += ((double)ctx.cnt[i] - 1) / 2 * log2((double)ctx.cnt[j]);
        }
    free(ctx.key);
    free(ctx.cnt);
    *bits = hb;
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

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: prev_context PREV OLD NEW   (three consecutive BF16 checkpoints of one run)\n");
        return 2;
    }
    pulse_ckpt *c[3] = {NULL, NULL, NULL};
    for (int i = 0; i < 3; i++)
        if (pulse_ckpt_open(&c[i], argv[i + 1], PULSE_CKPT_READ) != 0) {
            fprintf(stderr, "prev_context: cannot open %s\n", argv[i + 1]);
            return 1;
        }
    size_t nt = pulse_ckpt_count(c[1]);
    if (pulse_ckpt_count(c[0]) != nt || pulse_ckpt_count(c[2]) != nt) {
        fprintf(stderr, "prev_context: the checkpoints' tensors differ\n");
        return 1;
    }
    /* positions: per tensor, (exponent) and (exponent, dp class) contexts; values: the run's
     * (exponent) and (exponent, dp class) contexts of z, and of z of the change minus dp */
    static uint64_t e0[256], e1[256], p0[256 * NCLS], p1[256 * NCLS];
    double pos_e = 0, pos_em = 0, pos_p = 0, pos_pm = 0;
    counts ve = {0}, vp = {0}, vr = {0};
    uint64_t elems = 0, changes = 0;
    for (size_t t = 0; t < nt; t++) {
        const pulse_tensor *tp = pulse_ckpt_tensor(c[0], t), *to = pulse_ckpt_tensor(c[1], t),
                           *tn = pulse_ckpt_tensor(c[2], t);
        if (strcmp(tp->name, to->name) || strcmp(tn->name, to->name) || tp->dtype != to->dtype ||
            tn->dtype != to->dtype || tp->nelems != to->nelems || tn->nelems != to->nelems) {
            fprintf(stderr, "prev_context: tensor %s differs in name, dtype or shape\n", to->name);
            return 1;
        }
        if (to->dtype != PULSE_DT_BF16)
            continue;
        const uint16_t *P = (const uint16_t *)(const void *)tp->data, *O = (const uint16_t *)(const void *)to->data,
                       *N = (const uint16_t *)(const void *)tn->data;
        memset(e0, 0, sizeof e0);
        memset(e1, 0, sizeof e1);
        memset(p0, 0, sizeof p0);
        memset(p1, 0, sizeof p1);
        for (size_t i = 0; i < to->nelems; i++) {
            unsigned ex = (O[i] >> 7) & 0xFFu;
            int dp = (int16_t)(uint16_t)(O[i] - P[i]);
            unsigned cl = dp_class(dp), pc = ex * NCLS + cl;
            if (N[i] == O[i]) {
                e0[ex]++;
                p0[pc]++;
                continue;
            }
            e1[ex]++;
            p1[pc]++;
            int d = (int16_t)(uint16_t)(N[i] - O[i]);
            counts_add(&ve, (uint64_t)ex << 16 | zigzag16(d));
            counts_add(&vp, (uint64_t)pc << 16 | zigzag16(d));
            counts_add(&vr, (uint64_t)pc << 16 | zigzag16(d - dp));
            changes++;
        }
        elems += to->nelems;
        binary_entropy(e0, e1, 256, &pos_e, &pos_em);
        binary_entropy(p0, p1, 256 * NCLS, &pos_p, &pos_pm);
    }
    double val_e, val_em, val_p, val_pm, val_r, val_rm;
    cond_entropy(&ve, &val_e, &val_em);
    cond_entropy(&vp, &val_p, &val_pm);
    cond_entropy(&vr, &val_r, &val_rm);
    double k = (double)changes;
    if (!changes) {
        printf("no BF16 weight changed from OLD to NEW\n");
        return 0;
    }
    printf("%llu BF16 changes of %llu elements (%.2f %%); bits a change (model cost beside, the least that\n"
           "describing each context's frequencies takes):\n",
           (unsigned long long)changes, (unsigned long long)elems, 100.0 * k / (double)elems);
    printf("  context                                 positions          values           total    vs exponent\n");
    double te = (pos_e + val_e) / k, tem = (pos_em + val_em) / k;
    printf("  exponent of old                       %6.3f (+%.3f)   %6.3f (+%.3f)   %6.3f (+%.3f)   1.000\n", pos_e / k,
           pos_em / k, val_e / k, val_em / k, te, tem);
    double vb = val_p < val_r ? val_p : val_r, vbm = val_p < val_r ? val_pm : val_rm;
    printf("  exponent + previous change's class    %6.3f (+%.3f)   %6.3f (+%.3f)   %6.3f (+%.3f)   %.3f (%.3f with "
           "model)\n",
           pos_p / k, pos_pm / k, vb / k, vbm / k, (pos_p + vb) / k, (pos_pm + vbm) / k, (pos_p + vb) / k / te,
           (pos_p + vb + pos_pm + vbm) / (pos_e + val_e + pos_em + val_em));
    printf("    values as the change itself: %.3f, as the change minus the previous one: %.3f\n", val_p / k,
           val_r / k);
    for (int i = 0; i < 3; i++)
        pulse_ckpt_close(&c[i]);
    free(ve.key);
    free(ve.cnt);
    free(vp.key);
    free(vp.cnt);
    free(vr.key);
    free(vr.cnt);
    return 0;
}
