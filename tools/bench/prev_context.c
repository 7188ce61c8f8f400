/* SPDX-License-Identifier: Apache-2.0 */
/* Benchmark: how far the previous step's change of each weight, as context beside its old exponent, would take a BF16 step's conditional entropy below the exponent bound. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "node/patch/patch_counts.h"
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

static void oom(void)
{
    fprintf(stderr, "prev_context: out of memory\n");
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
    patch_counts ve = {0}, vp = {0}, vr = {0};
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
            if (patch_counts_add(&ve, (uint64_t)ex << 16 | zigzag16(d)) ||
                patch_counts_add(&vp, (uint64_t)pc << 16 | zigzag16(d)) ||
                patch_counts_add(&vr, (uint64_t)pc << 16 | zigzag16(d - dp)))
                oom();
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
    patch_counts_free(&ve);
    patch_counts_free(&vp);
    patch_counts_free(&vr);
    return 0;
}
