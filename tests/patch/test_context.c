/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of pulse_patch_context_bound: where changes follow the old value's exponent the context bound is far under the order-0 one, where they do not it matches it, for every element-wise dtype, ulp and abs patches alike; bad bases and damaged chunks are refused. */
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pulseweights.h"
#include "pulseweights/patch.h"
#include "node/patch/patch_internal.h"
#include "check.h"

static char dir[256];
static uint64_t rng = 0x2545F4914F6CDD1Dull;

static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* A uniform draw in [0, 1). */
static double unif(void) { return (double)(rnd() >> 11) / 9007199254740992.0; }

static const char *path_of(const char *name)
{
    static char bufs[4][512];
    static int at;
    char *b = bufs[at++ & 3];
    snprintf(b, 512, "%s/%s", dir, name);
    return b;
}

/* One tensor per element-wise dtype, each with the bit layout its exponent is read from. */
typedef struct spec {
    const char *name, *dtype;
    unsigned w;         /* bytes */
    unsigned mbits;     /* mantissa bits: the exponent starts here */
    unsigned ebits;     /* exponent bits */
} spec;
static const spec specs[] = {
    { "a.bf16", "BF16", 2, 7, 8 },
    { "b.f16", "F16", 2, 10, 5 },
    { "c.f32", "F32", 4, 23, 8 },
    { "d.e4m3", "F8_E4M3", 1, 3, 4 },
    { "e.e5m2", "F8_E5M2", 1, 2, 5 },
};
#define NSPECS (sizeof specs / sizeof specs[0])
#define N 65536u          /* elements per tensor */
#define EXPS 8u           /* exponents drawn: lo .. lo + EXPS - 1 */

typedef struct pair {
    uint8_t *old[NSPECS], *new_[NSPECS];
    pulse_ckpt *ck_old, *ck_new;
} pair;

static int wrap(uint8_t *const *data, uint64_t n0_short, pulse_ckpt **out)
{
    pulse_mem_tensor mt[NSPECS];
    memset(mt, 0, sizeof mt);
    for (size_t i = 0; i < NSPECS; i++) {
        mt[i].name = specs[i].name;
        mt[i].dtype_name = specs[i].dtype;
        mt[i].ndim = 1;
        mt[i].shape[0] = N - (i == 2 ? n0_short : 0);
        mt[i].data = data[i];
        mt[i].nbytes = mt[i].shape[0] * specs[i].w;
    }
    return pulse_ckpt_wrap(out, mt, NSPECS, PULSE_CKPT_READ);
}

/* OLD: sign, exponent (one of EXPS around the middle of the field) and mantissa at random.
 * NEW: with `follow`, an element changes with probability 0.9 when its exponent is in the lower
 * half and never in the upper, by +-(distance under the middle) ulps: both positions and values
 * are all but fixed by the exponent. Without it, every element changes with probability 0.1
 * by +-1 or +-2 ulps whatever its exponent. */
static void make_pair(pair *p, int follow)
{
    for (size_t i = 0; i < NSPECS; i++) {
        const spec *s = &specs[i];
        const unsigned lo = (1u << (s->ebits - 1)) - EXPS / 2;
        p->old[i] = malloc((size_t)N * s->w);
        p->new_[i] = malloc((size_t)N * s->w);
        for (uint32_t e = 0; e < N; e++) {
            const uint32_t x = (uint32_t)rnd() % EXPS + lo;
            const uint32_t sign = (uint32_t)(rnd() & 1) << (8 * s->w - 1);
            /* A mantissa away from its ends, so that a few ulps never carry into the exponent. */
            const uint32_t mant = (1u << (s->mbits - 1)) + (uint32_t)rnd() % (1u << (s->mbits - 2));
            uint32_t bits = sign | x << s->mbits | (mant & ((1u << s->mbits) - 1));
            uint32_t nb = bits;
            if (follow) {
                if (x < lo + EXPS / 2 && unif() < 0.9) {
                    const uint32_t k = lo + EXPS / 2 - x;   /* 1 .. EXPS/2 */
                    nb = rnd() & 1 ? bits + k : bits - k;
                }
            } else if (unif() < 0.1) {
                const uint32_t k = 1 + (uint32_t)(rnd() & 1);
                nb = rnd() & 1 ? bits + k : bits - k;
            }
            memcpy(p->old[i] + (size_t)e * s->w, &bits, s->w);
            memcpy(p->new_[i] + (size_t)e * s->w, &nb, s->w);
        }
    }
    CHECK_OK(wrap(p->old, 0, &p->ck_old));
    CHECK_OK(wrap(p->new_, 0, &p->ck_new));
}

static void pair_free(pair *p)
{
    pulse_ckpt_close(&p->ck_old);
    pulse_ckpt_close(&p->ck_new);
    for (size_t i = 0; i < NSPECS; i++) {
        free(p->old[i]);
        free(p->new_[i]);
    }
}

static pulse_patch *diff_open(const pair *p, pulse_value_code v, const char *name)
{
    pulse_diff_opts o;
    pulse_diff_opts_default(&o);
    o.values = v;
    o.chunk_elems = 16384;   /* four chunks a tensor: gaps restart at chunk starts */
    o.threads = 2;
    CHECK_OK(pulse_patch_diff(p->ck_old, p->ck_new, &o, path_of(name)));
    pulse_patch *pp = NULL;
    CHECK_OK(pulse_patch_open(&pp, path_of(name)));
    return pp;
}

static double rel(double a, double b) { return b > 0 ? a / b : 0; }

/* The context bound of both codings of a pair; checks what does not depend on the pair:
 * totals are the sums of the tensors, the order-0 figures are pulse_patch_info's bound, and
 * abs and ulp patches of one step give the same figures (the ulp symbols are from base). */
static void bounds(const pair *p, const char *label, pulse_patch_context *tot, pulse_patch_context per[NSPECS])
{
    char un[64], an[64];
    snprintf(un, sizeof un, "%s-ulp.patch", label);
    snprintf(an, sizeof an, "%s-abs.patch", label);
    pulse_patch *ulp = diff_open(p, PULSE_VALUES_ULP, un), *abs_ = diff_open(p, PULSE_VALUES_ABS, an);
    memset(tot, 0, sizeof *tot);
    memset(per, 0, NSPECS * sizeof *per);
    if (!ulp || !abs_) {
        pulse_patch_close(&ulp);
        pulse_patch_close(&abs_);
        return;
    }
    CHECK_EQ_INT(pulse_patch_tensor_count(ulp), NSPECS);
    CHECK_OK(pulse_patch_context_bound(ulp, p->ck_old, 2, tot, per));
    pulse_patch_stats st;
    CHECK_OK(pulse_patch_info(ulp, 1, &st));
    CHECK(fabs(tot->gap_bits + tot->ulp_bits - st.entropy_bits) <= 1e-6 * st.entropy_bits + 1e-3);
    CHECK_EQ_INT(tot->changes, st.changes);
    CHECK_EQ_INT(tot->pos_bytes, st.pos_bytes);
    CHECK_EQ_INT(tot->val_bytes, st.val_bytes);
    CHECK_EQ_INT(tot->elements, (uint64_t)N * NSPECS);
    double flag = 0, flag0 = 0;
    for (size_t i = 0; i < NSPECS; i++) {
        CHECK_EQ_INT(per[i].changes, pulse_patch_tensor_changes(ulp, i));
        CHECK_EQ_INT(per[i].elements, N);
        flag += per[i].flag_bits;
        flag0 += per[i].flag0_bits;
    }
    CHECK(fabs(flag - tot->flag_bits) <= 1e-6 * tot->flag_bits);
    /* the tables the context figures leave out: some, and small at these counts */
    CHECK(tot->flag_model_bits > 0 && tot->flag_model_bits < 0.05 * tot->flag_bits);
    CHECK(tot->ulp_model_bits > 0 && tot->ulp_model_bits < 0.05 * tot->ulp_ctx_bits);
    CHECK(fabs(flag0 - tot->flag0_bits) <= 1e-6 * tot->flag0_bits);
    /* One thread, and the abs patch (deltas from base): the same figures. */
    pulse_patch_context t1, ta, pa[NSPECS];
    CHECK_OK(pulse_patch_context_bound(ulp, p->ck_old, 1, &t1, NULL));
    CHECK_OK(pulse_patch_context_bound(abs_, p->ck_old, 3, &ta, pa));
    CHECK(fabs(t1.flag_bits - tot->flag_bits) <= 1e-6 * tot->flag_bits);
    CHECK(fabs(t1.ulp_ctx_bits - tot->ulp_ctx_bits) <= 1e-6 * tot->ulp_ctx_bits + 1e-3);
    CHECK(fabs(ta.gap_bits - tot->gap_bits) <= 1e-6 * tot->gap_bits);
    CHECK(fabs(ta.flag_bits - tot->flag_bits) <= 1e-6 * tot->flag_bits);
    CHECK(fabs(ta.ulp_bits - tot->ulp_bits) <= 1e-6 * tot->ulp_bits + 1e-3);
    CHECK(fabs(ta.ulp_ctx_bits - tot->ulp_ctx_bits) <= 1e-6 * tot->ulp_ctx_bits + 1e-3);
    for (size_t i = 0; i < NSPECS; i++)
        CHECK(fabs(pa[i].ulp_ctx_bits - per[i].ulp_ctx_bits) <= 1e-6 * per[i].ulp_ctx_bits + 1e-3);
    pulse_patch_close(&ulp);
    pulse_patch_close(&abs_);
}

/* Changes that the exponent decides: for every dtype the context bound of positions and of
 * values is well under half of the order-0 one. */
static void test_follows_exponent(void)
{
    pair p;
    make_pair(&p, 1);
    pulse_patch_context tot, per[NSPECS];
    bounds(&p, "follow", &tot, per);
    for (size_t i = 0; i < NSPECS; i++) {
        printf("%-8s follows:     positions %.3f -> %.3f bits/change (x%.3f), values %.3f -> %.3f (x%.3f)\n",
               specs[i].dtype, rel(per[i].gap_bits, per[i].changes), rel(per[i].flag_bits, per[i].changes),
               rel(per[i].flag_bits, per[i].gap_bits), rel(per[i].ulp_bits, per[i].changes),
               rel(per[i].ulp_ctx_bits, per[i].changes), rel(per[i].ulp_ctx_bits, per[i].ulp_bits));
        CHECK(per[i].changes > N / 3);
        CHECK(rel(per[i].flag_bits, per[i].gap_bits) < 0.5);
        CHECK(rel(per[i].ulp_ctx_bits, per[i].ulp_bits) < 0.5);
        /* the tensor alone knows nothing here: as the gaps */
        CHECK(rel(per[i].flag0_bits, per[i].gap_bits) > 0.95);
    }
    CHECK(rel(tot.flag_bits, tot.gap_bits) < 0.5);
    CHECK(rel(tot.ulp_ctx_bits, tot.ulp_bits) < 0.5);
    CHECK(rel(tot.flag_bits + tot.ulp_ctx_bits, tot.gap_bits + tot.ulp_bits) < 0.5);
    pair_free(&p);
}

/* Changes independent of the exponent: the context bound is the order-0 one within a few %
 * (the empirical entropy of a few dozen bins is a little under the true one, never far). */
static void test_independent(void)
{
    pair p;
    make_pair(&p, 0);
    pulse_patch_context tot, per[NSPECS];
    bounds(&p, "indep", &tot, per);
    for (size_t i = 0; i < NSPECS; i++) {
        printf("%-8s independent: positions %.3f -> %.3f bits/change (x%.3f), values %.3f -> %.3f (x%.3f)\n",
               specs[i].dtype, rel(per[i].gap_bits, per[i].changes), rel(per[i].flag_bits, per[i].changes),
               rel(per[i].flag_bits, per[i].gap_bits), rel(per[i].ulp_bits, per[i].changes),
               rel(per[i].ulp_ctx_bits, per[i].changes), rel(per[i].ulp_ctx_bits, per[i].ulp_bits));
        CHECK(per[i].changes > N / 20);
        CHECK(rel(per[i].flag_bits, per[i].gap_bits) > 0.96 && rel(per[i].flag_bits, per[i].gap_bits) < 1.02);
        CHECK(rel(per[i].ulp_ctx_bits, per[i].ulp_bits) > 0.96 && rel(per[i].ulp_ctx_bits, per[i].ulp_bits) <= 1.0 + 1e-9);
    }
    CHECK(rel(tot.flag_bits, tot.gap_bits) > 0.96 && rel(tot.flag_bits, tot.gap_bits) < 1.02);
    CHECK(rel(tot.ulp_ctx_bits, tot.ulp_bits) > 0.96);
    pair_free(&p);
}

/* A base of another layout is refused naming the tensor; so is a damaged chunk, a NULL base. */
static void test_refusals(void)
{
    pair p;
    make_pair(&p, 1);
    pulse_patch *pp = diff_open(&p, PULSE_VALUES_ULP, "bad.patch");
    if (!pp) {
        pair_free(&p);
        return;
    }
    pulse_patch_context tot;
    pulse_ckpt *other = NULL;
    CHECK_OK(wrap(p.old, 1, &other));   /* c.f32 one element short */
    CHECK_ERR(pulse_patch_context_bound(pp, other, 2, &tot, NULL), PULSE_ERR_MISMATCH);
    CHECK(strstr(pulse_last_error(), "c.f32") != NULL);
    pulse_ckpt_close(&other);
    CHECK_ERR(pulse_patch_context_bound(pp, NULL, 2, &tot, NULL), PULSE_ERR_INVALID);

    const patch_tensor *t = &pp->tensors[3];   /* d.e4m3 */
    CHECK(t->ncoded > 0);
    const patch_chunk *c = &pp->chunks[t->first_coded + t->ncoded - 1];
    off_t at = (off_t)(pp->data_off + c->offset + patch_chunk_coded(c) / 2);
    pulse_patch_close(&pp);
    int fd = open(path_of("bad.patch"), O_RDWR);
    CHECK(fd >= 0);
    uint8_t b = 0;
    CHECK(pread(fd, &b, 1, at) == 1);
    b ^= 0x04;
    CHECK(pwrite(fd, &b, 1, at) == 1);
    close(fd);
    CHECK_OK(pulse_patch_open(&pp, path_of("bad.patch")));
    for (int threads = 1; pp && threads <= 3; threads += 2) {
        CHECK_ERR(pulse_patch_context_bound(pp, p.ck_old, threads, &tot, NULL), PULSE_ERR_CORRUPT);
        CHECK(strstr(pulse_last_error(), "d.e4m3") != NULL);
    }
    pulse_patch_close(&pp);
    pair_free(&p);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/pulse-test-context-XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_follows_exponent();
    test_independent();
    test_refusals();
    const char *names[] = { "follow-ulp.patch", "follow-abs.patch", "indep-ulp.patch", "indep-abs.patch",
                            "bad.patch" };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        unlink(path_of(names[i]));
    rmdir(dir);
    return check_done("test_context");
}
