/* SPDX-License-Identifier: Apache-2.0 */
/* Kernel family gate: the LoCo gate, gate_check and scatter_add_f32 against the reference, and the reference's view rounding against a decoding oracle. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "checkasm.h"

static float f32_of(uint32_t u) { float x; memcpy(&x, &u, 4); return x; }
static uint32_t bits_of(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }

/* Each view as a decoder only: exponent/mantissa bits, the largest finite magnitude code, and
 * whether overflow goes to Inf (IEEE) or saturates. The rounding oracle below is built from
 * decoding alone (nearest representable value in double arithmetic, ties to the even code),
 * so it shares no code with the reference's bit tricks. */
static const struct view_desc {
    const char *name;
    unsigned ebits, mbits;
    uint32_t maxcode, infcode; /* infcode 0: saturating */
} views[PULSE_VIEW_COUNT] = {
    [PULSE_VIEW_BF16] = {"bf16", 8, 7, 0x7f7f, 0x7f80},
    [PULSE_VIEW_FP16] = {"fp16", 5, 10, 0x7bff, 0x7c00},
    [PULSE_VIEW_FP8_E4M3] = {"e4m3", 4, 3, 0x7e, 0},
    [PULSE_VIEW_FP8_E5M2] = {"e5m2", 5, 2, 0x7b, 0},
};

static double view_decode(const struct view_desc *v, uint32_t code)
{
    int bias = (1 << (v->ebits - 1)) - 1;
    uint32_t e = code >> v->mbits, m = code & ((1u << v->mbits) - 1);
    if (e == 0)
        return ldexp((double)m, 1 - bias - (int)v->mbits);
    return ldexp(1.0 + ldexp((double)m, -(int)v->mbits), (int)e - bias);
}

static uint32_t view_oracle(pulse_view view, float xf)
{
    const struct view_desc *v = &views[view];
    uint32_t sign = (bits_of(xf) >> 31) << (v->ebits + v->mbits);
    double x = fabs((double)xf);
    double max = view_decode(v, v->maxcode);
    if (x >= max) {
        if (!v->infcode)
            return sign | v->maxcode;             /* saturating view */
        double next = 2 * view_decode(v, v->maxcode & ~((1u << v->mbits) - 1)); /* 2^(emax+1) */
        double mid = (max + next) / 2;
        /* Inf's code is even, maxcode odd: the tie goes to Inf */
        return sign | (x >= mid ? v->infcode : v->maxcode);
    }
    uint32_t lo = 0, hi = v->maxcode; /* largest code with value <= x */
    while (lo < hi) {
        uint32_t mid = (lo + hi + 1) / 2;
        if (view_decode(v, mid) <= x)
            lo = mid;
        else
            hi = mid - 1;
    }
    double below = view_decode(v, lo), above = view_decode(v, lo + 1);
    uint32_t code;
    if (x - below < above - x)
        code = lo;
    else if (x - below > above - x)
        code = lo + 1;
    else
        code = (lo & 1) ? lo + 1 : lo;
    return sign | code;
}

/* FP32 values around the view's cell edges: for a code c (magnitude, finite, below max), the
 * exact midpoint to c+1 and its FP32 neighbours, the cell value itself, with either sign. */
static float near_tie(pulse_view view, uint32_t c, int which)
{
    const struct view_desc *v = &views[view];
    double mid = (view_decode(v, c) + view_decode(v, c + 1 > v->maxcode ? v->maxcode : c + 1)) / 2;
    float m = (float)mid; /* exact: every midpoint of these views is an FP32 value */
    switch (which % 4) {
    case 0: return m;
    case 1: return nextafterf(m, INFINITY);
    case 2: return nextafterf(m, 0.0f);
    default: return (float)view_decode(v, c);
    }
}

static const uint32_t gate_special[] = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u,
    0x7fc00000u, 0xffc00000u, 0x7f800001u, 0x00000001u, 0x807fffffu, 0x007fffffu, 0x00800000u,
    0x7f7fffffu, 0xff7fffffu, 0x7f7f8000u, 0x477ff000u, 0x43e80000u, 0x47600000u, 0x33800000u};

/* The reference's pulse_view_bits against the decoding oracle: every cell edge of every view
 * (8-bit views: all codes; 16-bit: all codes too, 4 points each), specials, random patterns. */
static void check_views(void)
{
    cur_isa = "c";
    cur_pattern = "view rounding";
    for (int view = 0; view < PULSE_VIEW_COUNT; view++) {
        const struct view_desc *v = &views[view];
        size_t bad = 0;
        for (uint32_t c = 0; c <= v->maxcode; c++) {
            for (int w = 0; w < 8; w++) {
                float x = near_tie((pulse_view)view, c, w);
                if (w >= 4)
                    x = -x;
                if (pulse_view_bits((pulse_view)view, x) != view_oracle((pulse_view)view, x) && bad++ < 5)
                    fprintf(stderr, "  %s(%a = 0x%08x): 0x%x, oracle 0x%x\n", v->name, (double)x,
                            bits_of(x), pulse_view_bits((pulse_view)view, x), view_oracle((pulse_view)view, x));
            }
        }
        for (size_t s = 0; s < sizeof gate_special / sizeof gate_special[0]; s++) {
            float x = f32_of(gate_special[s]);
            if (isnan(x))
                continue;
            uint32_t want = isinf(x) ? ((bits_of(x) >> 31) << (v->ebits + v->mbits)) |
                                       (v->infcode ? v->infcode : v->maxcode)
                                     : view_oracle((pulse_view)view, x);
            if (pulse_view_bits((pulse_view)view, x) != want && bad++ < 5)
                fprintf(stderr, "  %s(special 0x%08x): 0x%x, want 0x%x\n", v->name, gate_special[s],
                        pulse_view_bits((pulse_view)view, x), want);
        }
        for (int r = 0; r < 200000; r++) {
            float x = f32_of((uint32_t)rnd());
            if (!isfinite(x))
                continue;
            if (pulse_view_bits((pulse_view)view, x) != view_oracle((pulse_view)view, x) && bad++ < 5)
                fprintf(stderr, "  %s(0x%08x): 0x%x, oracle 0x%x\n", v->name, bits_of(x),
                        pulse_view_bits((pulse_view)view, x), view_oracle((pulse_view)view, x));
        }
        CHECK_SAME(bad == 0, views[view].name);
        /* NaN: the view's quiet NaN, sign kept */
        CHECK_SAME(pulse_view_bits((pulse_view)view, f32_of(0xffc00001u)) >> (v->ebits + v->mbits) == 1,
                   "view NaN sign");
    }
}

enum gate_pattern { G_REALISTIC, G_TIES, G_SPECIAL, G_TINY, G_HUGE, G_ZERO, G_COUNT };
static const char *const gate_pattern_name[G_COUNT] = {"realistic", "ties", "special", "tiny",
                                                       "huge", "zero"};

/* Random FP32 weight-like value: mantissa random, exponent in [lo, hi) (biased). */
static float rnd_f32(unsigned lo, unsigned hi)
{
    uint64_t r = rnd();
    uint32_t e = lo + (uint32_t)(r % (hi - lo));
    return f32_of((uint32_t)(r >> 40 & 1) << 31 | e << 23 | ((uint32_t)(r >> 8) & 0x7fffffu));
}

/* theta, delta, e for one pattern. Ties: theta - a lands exactly on a cell midpoint of the
 * view (or one FP32 ulp either side, or on a cell value): with a = theta - x and x within a
 * factor 2 of theta both subtractions are exact (Sterbenz), and e = 0 makes a = delta. */
static void gate_fill(pulse_view view, float *theta, float *delta, float *e, size_t n, enum gate_pattern p)
{
    const struct view_desc *v = &views[view];
    for (size_t i = 0; i < n; i++) {
        uint64_t r = rnd();
        switch (p) {
        case G_REALISTIC: /* |w| ~ 2^-10..2^2, pseudo-gradient ~ 2^-9 of it: a few % change */
            theta[i] = rnd_f32(117, 129);
            delta[i] = theta[i] * ldexpf((float)((int)(r % 2001) - 1000) / 1000.0f, -9 - (int)(r >> 12 & 3));
            e[i] = delta[i] * (float)((int)(r >> 20 & 255) - 128) / 256.0f;
            if (view >= PULSE_VIEW_FP8_E4M3) /* FP8 cells are 16x wider: bigger steps */
                delta[i] *= 16;
            break;
        case G_TIES: {
            uint32_t top = v->maxcode > 0x7000 ? 0x7000 : v->maxcode - 1;
            uint32_t c = (uint32_t)(r % top);
            float x = near_tie(view, c, (int)(r >> 32));
            if (r >> 40 & 1)
                x = -x;
            /* theta within a factor 2 of x, on x's side of zero */
            float t = x * (1.0f + (float)(r >> 44 & 1023) / 1024.0f * ((r >> 54 & 1) ? 0.5f : -0.25f));
            if (r >> 56 & 1) { /* theta itself on a tie, x one cell away */
                t = near_tie(view, c, (int)(r >> 32));
                x = (float)view_decode(v, c + 1 > v->maxcode ? c : c + 1);
            }
            theta[i] = t;
            delta[i] = t - x;
            e[i] = (r >> 60 & 3) ? 0.0f : ldexpf((float)(r >> 8 & 255), -140);
            break;
        }
        case G_SPECIAL: {
            float pick[3];
            for (int s = 0; s < 3; s++) {
                uint64_t q = rnd();
                pick[s] = (q & 3) ? f32_of(gate_special[(q >> 8) % (sizeof gate_special / sizeof gate_special[0])])
                                  : rnd_f32(1, 254);
            }
            theta[i] = pick[0]; delta[i] = pick[1]; e[i] = pick[2];
            break;
        }
        case G_TINY: /* subnormals and the smallest normals: FP32 and BF16 subnormal edges */
            theta[i] = (r & 1) ? f32_of((uint32_t)(r >> 8) & 0x80ffffffu) : rnd_f32(1, 3);
            delta[i] = f32_of((uint32_t)(r >> 16) & 0x80ffffffu);
            e[i] = (r >> 60 & 1) ? f32_of((uint32_t)(r >> 24) & 0x800fffffu) : 0.0f;
            break;
        case G_HUGE: /* near FLT_MAX and the FP16/FP8 overflow edges: theta - a overflows */
            theta[i] = (r & 1) ? rnd_f32(252, 255) : rnd_f32(140, 145);
            delta[i] = -theta[i] * (float)(r >> 8 & 255) / 64.0f;
            e[i] = (r >> 60 & 1) ? theta[i] / 4 : 0.0f;
            break;
        default: /* G_ZERO: +-0 in every combination, plus exact cancellation a = 0 */
            theta[i] = (r & 1) ? -0.0f : 0.0f;
            delta[i] = (r & 2) ? -0.0f : 0.0f;
            e[i] = (r & 4) ? -0.0f : 0.0f;
            if (r & 8) { theta[i] = rnd_f32(100, 140); delta[i] = rnd_f32(100, 140); e[i] = -delta[i]; }
            break;
        }
    }
}

/* One gate case: reference and table on copies of e; outputs bitwise equal; e and the emitted
 * entries follow the definition (checked element by element against pulse_view_bits, which
 * check_views ties to the oracle); conservation; the receiver's check accepts finite output. */
static void gate_case(const pulse_kernels *t, const pulse_kernels *r, pulse_view view,
                      const float *theta, const float *delta, const float *e0, float *e_t, size_t n)
{
    float *e_r = canary_alloc(n * 4);
    uint32_t *idx_r = canary_alloc(n * 4), *idx_t = canary_alloc(n * 4);
    float *val_r = canary_alloc(n * 4), *val_t = canary_alloc(n * 4);
    memcpy(e_r, e0, n * 4);
    memcpy(e_t, e0, n * 4);
    size_t k_r = r->gate[view](theta, delta, e_r, n, idx_r, val_r);
    size_t k_t = t->gate[view](theta, delta, e_t, n, idx_t, val_t);
    CHECK_SAME(k_r == k_t && !memcmp(idx_r, idx_t, k_r * 4) && !memcmp(val_r, val_t, k_r * 4),
               "gate output");
    CHECK_SAME(!memcmp(e_r, e_t, n * 4), "gate error feedback");
    CHECK_SAME(canary_intact(idx_t, n * 4) && canary_intact(val_t, n * 4) && canary_intact(e_r, n * 4),
               "gate overrun");
    /* the definition, element by element, and conservation of a */
    size_t k = 0, wrong = 0;
    int finite_out = 1;
    for (size_t i = 0; i < n; i++) {
        float a = delta[i] + e0[i];
        float x = theta[i] - a;
        int changes = !isfinite(theta[i]) || !isfinite(a) ||
                      pulse_view_bits(view, x) != pulse_view_bits(view, theta[i]);
        if (changes) {
            uint32_t want = isnan(a) ? 0x7fc00000u : bits_of(a);
            if (k >= k_r || idx_r[k] != i || bits_of(val_r[k]) != want || bits_of(e_r[i]) != 0)
                wrong++;
            else if (isfinite(a) && val_r[k] + e_r[i] != a)
                wrong++;
            finite_out &= isfinite(a);
            k++;
        } else if (bits_of(e_r[i]) != bits_of(a) || 0.0f + e_r[i] != a) {
            wrong++;
        }
    }
    CHECK_SAME(wrong == 0 && k == k_r, "gate definition / conservation");
    if (finite_out) {
        size_t bad = 0;
        int rc_r = r->gate_check[view](theta, n, idx_r, val_r, k_r, &bad);
        int rc_t = t->gate_check[view](theta, n, idx_r, val_r, k_r, &bad);
        CHECK_SAME(rc_r == PULSE_GATE_OK && rc_t == PULSE_GATE_OK, "gate_check accepts gate output");
    }
    canary_free(e_r); canary_free(idx_r); canary_free(idx_t); canary_free(val_r); canary_free(val_t);
}

/* Byzantine shards: each mutation of a valid shard must be refused at the mutated entry with
 * its code, by the reference and the table alike. */
static void gate_check_case(const pulse_kernels *t, const pulse_kernels *r, pulse_view view,
                            const float *theta, const float *delta, size_t n)
{
    float *e = malloc(n * 4 + 4), *val = malloc(n * 4 + 4);
    uint32_t *idx = malloc(n * 4 + 4);
    if (!e || !idx || !val) { perror("malloc"); exit(2); }
    memset(e, 0, n * 4);
    size_t k = r->gate[view](theta, delta, e, n, idx, val);
    for (size_t j = 0; j < k; j++)
        if (!isfinite(val[j]))
            goto out; /* only finite shards are valid to start from */
    for (int m = 0; m < 7 && k > 1; m++) {
        size_t j = 1 + (size_t)(rnd() % (k - 1));
        uint32_t save_i = idx[j];
        float save_v = val[j];
        int want;
        switch (m) {
        case 0: idx[j] = idx[j - 1]; want = PULSE_GATE_UNSORTED; break;
        case 1: idx[j] = idx[j - 1] - (idx[j - 1] > 0); want = PULSE_GATE_UNSORTED; break;
        case 2: idx[j] = (uint32_t)n; want = PULSE_GATE_RANGE; break;
        case 3: val[j] = f32_of(0x7fc00000u); want = PULSE_GATE_NOT_FINITE; break;
        case 4: val[j] = -INFINITY; want = PULSE_GATE_NOT_FINITE; break;
        case 5: val[j] = 0.0f; want = PULSE_GATE_INVISIBLE; break;
        default: idx[j] = 0xffffffffu; want = PULSE_GATE_RANGE; break;
        }
        if (m == 5 && !isfinite(theta[idx[j]]))
            want = PULSE_GATE_OK; /* a non-finite weight always counts as changed */
        size_t bad_r = 12345, bad_t = 54321;
        int rc_r = r->gate_check[view](theta, n, idx, val, k, &bad_r);
        int rc_t = t->gate_check[view](theta, n, idx, val, k, &bad_t);
        if (want == PULSE_GATE_OK)
            CHECK_SAME(rc_r == PULSE_GATE_OK && rc_t == PULSE_GATE_OK, "gate_check non-finite weight");
        else
            CHECK_SAME(rc_r == want && rc_t == want && bad_r == j && bad_t == j, "gate_check refusal");
        idx[j] = save_i;
        val[j] = save_v;
    }
    /* the first entry out of range, and k == 0 */
    if (k) {
        uint32_t save = idx[0];
        idx[0] = (uint32_t)n;
        size_t bad = 99;
        CHECK_SAME(t->gate_check[view](theta, n, idx, val, k, &bad) == PULSE_GATE_RANGE && bad == 0,
                   "gate_check first entry");
        idx[0] = save;
    }
    size_t bad = 99;
    CHECK_SAME(t->gate_check[view](theta, n, idx, val, 0, &bad) == PULSE_GATE_OK, "gate_check empty");
out:
    free(e); free(idx); free(val);
}

/* scatter_add_f32: strictly ascending positions (the shard case) and random ones with repeats. */
static void scatter_add_case(const pulse_kernels *t, const pulse_kernels *r, size_t n)
{
    if (!n)
        return;
    float *acc_r = canary_alloc(n * 4), *acc_t = canary_alloc(n * 4);
    size_t m = n < 5000 ? n : 5000;
    uint32_t *idx = canary_alloc(m * 4);
    float *v = canary_alloc(m * 4);
    for (int repeat = 0; repeat < 2; repeat++) {
        for (size_t i = 0; i < n; i++)
            acc_r[i] = acc_t[i] = rnd_f32(100, 140);
        size_t k = 0;
        for (size_t i = 0; i < n && k < m; i++)
            if (repeat ? 1 : (rnd() % 3 == 0))
                idx[k++] = repeat ? (uint32_t)(rnd() % n) : (uint32_t)i;
        for (size_t j = 0; j < k; j++)
            v[j] = (rnd() & 15) ? rnd_f32(100, 140) : f32_of(gate_special[rnd() % 13]);
        r->scatter_add_f32(acc_r, idx, k, v);
        t->scatter_add_f32(acc_t, idx, k, v);
        CHECK_SAME(!memcmp(acc_r, acc_t, n * 4) && canary_intact(acc_t, n * 4),
                   repeat ? "scatter_add_f32 repeats" : "scatter_add_f32");
        /* NaN operands (0xffc00000, the signalling 0x7f800001) and Inf - Inf leave one pattern,
         * so x86, Arm and the GPU store the same bits. */
        int canonical = 1;
        for (size_t i = 0; i < n; i++) {
            uint32_t u;
            memcpy(&u, acc_r + i, 4);
            if ((u & 0x7fffffffu) > 0x7f800000u && u != 0x7fc00000u)
                canonical = 0;
        }
        CHECK_SAME(canonical, "scatter_add_f32 NaN sums are 0x7fc00000");
    }
    canary_free(acc_r); canary_free(acc_t); canary_free(idx); canary_free(v);
}

static void check_gate(const pulse_kernels *t, const pulse_kernels *r)
{
    for (size_t li = 0; li < checkasm_lengths_count; li++) {
        size_t n = checkasm_lengths[li];
        if (n > 5000)
            continue; /* every vector/tail path is covered below 5000; keeps the qemu run short */
        for (int view = 0; view < PULSE_VIEW_COUNT; view++) {
            for (int p = 0; p < G_COUNT; p++) {
                for (int placement = 0; placement < 2; placement++) {
                    char label[64];
                    snprintf(label, sizeof label, "%s %s", views[view].name, gate_pattern_name[p]);
                    cur_n = n; cur_pattern = label; cur_placement = placement;
                    guarded g[4];
                    float *arr[4];
                    for (int a = 0; a < 4; a++) {
                        if (placement == 0) {
                            arr[a] = guard_alloc(&g[a], n * 4);
                        } else {
                            float *base = guard_alloc(&g[a], (n + 32) * 4 + 64);
                            arr[a] = (float *)(((uintptr_t)base + 63) & ~(uintptr_t)63) + 1 + (a + li) % 7;
                        }
                    }
                    gate_fill((pulse_view)view, arr[0], arr[1], arr[2], n, (enum gate_pattern)p);
                    gate_case(t, r, (pulse_view)view, arr[0], arr[1], arr[2], arr[3], n);
                    if (placement == 0 && n >= 2)
                        gate_check_case(t, r, (pulse_view)view, arr[0], arr[1], n);
                    /* delta and e the same array (a = 2e), as the header allows */
                    if (placement == 1 && p == G_REALISTIC) {
                        float *e_r = malloc(n * 4 + 4), *v_r = malloc(n * 4 + 4), *v_t = malloc(n * 4 + 4);
                        uint32_t *i_r = malloc(n * 4 + 4), *i_t = malloc(n * 4 + 4);
                        if (!e_r || !v_r || !v_t || !i_r || !i_t) { perror("malloc"); exit(2); }
                        memcpy(e_r, arr[2], n * 4);
                        memcpy(arr[3], arr[2], n * 4);
                        size_t k_r = r->gate[view](arr[0], e_r, e_r, n, i_r, v_r);
                        size_t k_t = t->gate[view](arr[0], arr[3], arr[3], n, i_t, v_t);
                        CHECK_SAME(k_r == k_t && !memcmp(i_r, i_t, k_r * 4) && !memcmp(v_r, v_t, k_r * 4) &&
                                   !memcmp(e_r, arr[3], n * 4), "gate delta == e");
                        free(e_r); free(v_r); free(v_t); free(i_r); free(i_t);
                    }
                    for (int a = 0; a < 4; a++)
                        guard_free(&g[a]);
                }
            }
        }
        cur_pattern = "scatter_add";
        scatter_add_case(t, r, n);
    }
}

void checkasm_check_gate(const pulse_kernels *t, const pulse_kernels *r)
{
    if (t == r) /* pulse_view_bits is the reference's alone */
        check_views();
    check_gate(t, r);
}

/* The BF16/FP16 gates over realistic weights (a few % change): GB/s of theta + delta + e read
 * (12 bytes per element), to set against the machine's streaming read. e is reset from a copy
 * before every run, outside the timing. */
void checkasm_bench_gate(const pulse_kernels *t)
{
    size_t n = bench_bytes / 8;
    int reps = bench_bytes < (1u << 22) ? 2000 : 5;
    float *theta = malloc(n * 4), *delta = malloc(n * 4), *e0 = malloc(n * 4), *e = malloc(n * 4);
    float *val = malloc(n * 4);
    uint32_t *idx = malloc(n * 4);
    if (!theta || !delta || !e0 || !e || !val || !idx) { perror("malloc"); exit(2); }
    for (int view = 0; view < 2; view++) {
        gate_fill((pulse_view)view, theta, delta, e0, n, G_REALISTIC);
        double best = 1e9;
        size_t k = 0;
        for (int rep = 0; rep < reps; rep++) {
            memcpy(e, e0, n * 4);
            double t0 = checkasm_now();
            k = t->gate[view](theta, delta, e, n, idx, val);
            double dt = checkasm_now() - t0;
            best = dt < best ? dt : best;
        }
        char label[64];
        snprintf(label, sizeof label, "gate %s %.1f%%", views[view].name, 100.0 * k / n);
        printf("%-8s %-22s %8.2f GB/s (theta+delta+e read), %.0f M elements/s\n", t->name, label,
               12.0 * n / best / 1e9, n / best / 1e6);
    }
    free(theta); free(delta); free(e0); free(e); free(val); free(idx);
}
