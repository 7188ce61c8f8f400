/* SPDX-License-Identifier: Apache-2.0 */
/* Kernel family diff: diff, gather, scatter and the ulp kernels of every width against the reference, as round trips a -> b; --bench times the patch path. */
#include <stdlib.h>
#include <string.h>

#include "checkasm.h"

/* Bit patterns that float-aware code gets wrong: +-0, +-Inf, quiet/signalling NaNs with
 * payloads, smallest subnormal, all-ones. A kernel must compare and add bits, not floats. */
static const uint32_t special32[] = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u,
    0x7fc00000u, 0xffc00000u, 0x7f800001u, 0x7fffffffu, 0x00000001u, 0xffffffffu};
static const uint16_t special16[] = {0x0000, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0xffc0, 0x7f81,
    0x7fff, 0x0001, 0xffff, 0x7c00, 0xfe00};
static const uint8_t special8[] = {0x00, 0x80, 0x7f, 0xff, 0x78, 0xf8, 0x7c, 0x01};

enum pattern { P_NONE, P_ALL, P_SPARSE1, P_SPARSE5, P_HALF, P_BURSTS, P_ZERO_SIGN, P_RARE, P_COUNT };
static const char *const pattern_name[P_COUNT] = {"none", "all", "1%", "5%", "50%", "bursts", "+0/-0", "1/30000"};

/* Whether element i of a change pattern differs (bursts: runs of 1..300 changed elements;
 * 1/30000: gaps of two and three LEB128 bytes, and whole 4096-element spans without a change). */
static int changed(enum pattern p, size_t i, int *burst_left)
{
    switch (p) {
    case P_NONE: return 0;
    case P_ALL: case P_ZERO_SIGN: return 1;
    case P_SPARSE1: return rnd() % 100 == 0;
    case P_SPARSE5: return rnd() % 20 == 0;
    case P_RARE: return rnd() % 30000 == 0;
    case P_HALF: return rnd() & 1;
    case P_BURSTS:
        if (*burst_left > 0) { (*burst_left)--; return 1; }
        if (rnd() % 200 == 0) { *burst_left = (int)(rnd() % 300); return 1; }
        return 0;
    default: (void)i; return 0;
    }
}

/* Runs every kernel of width W from table t and from the reference r over arrays a, b of n
 * elements (a and b already placed: guarded or offset) and compares all outputs bitwise. */
#define DEFINE_CASE(W, T, special) \
static void fill##W(T *a, T *b, size_t n, enum pattern p) \
{ \
    int burst = 0; \
    for (size_t i = 0; i < n; i++) { \
        uint64_t r = rnd(); \
        a[i] = (r & 7) == 0 ? special[(r >> 8) % (sizeof special / sizeof special[0])] : (T)(r >> 16); \
        b[i] = a[i]; \
        if (changed(p, i, &burst)) { \
            if (p == P_ZERO_SIGN) { a[i] = 0; b[i] = (T)((T)1 << (W - 1)); } \
            else do { b[i] = (rnd() & 3) == 0 ? special[rnd() % (sizeof special / sizeof special[0])] \
                                               : (T)rnd(); } while (b[i] == a[i]); \
        } \
    } \
} \
static void run_case##W(const pulse_kernels *t, const pulse_kernels *r, const T *a, const T *b, size_t n) \
{ \
    uint32_t *idx_r = canary_alloc((n + SLACK) * 4), *idx_t = canary_alloc((n + SLACK) * 4); \
    size_t k_r = r->diff##W(a, b, n, idx_r), k_t = t->diff##W(a, b, n, idx_t); \
    CHECK_SAME(k_r == k_t && !memcmp(idx_r, idx_t, k_r * 4), "diff" #W); \
    CHECK_SAME(canary_intact(idx_t, (n + SLACK) * 4), "diff" #W " overrun"); \
    size_t k = k_r; \
    /* gather / ulp_encode over the diff positions */ \
    size_t cap = k < 300 ? 300 : k; /* the random-position cases below reuse o_r, o_t */ \
    T *o_r = canary_alloc(cap * sizeof(T)), *o_t = canary_alloc(cap * sizeof(T)); \
    r->gather##W(b, idx_r, k, o_r); t->gather##W(b, idx_r, k, o_t); \
    CHECK_SAME(!memcmp(o_r, o_t, k * sizeof(T)) && canary_intact(o_t, k * sizeof(T)), "gather" #W); \
    r->ulp_encode##W(a, b, idx_r, k, o_r); t->ulp_encode##W(a, b, idx_r, k, o_t); \
    CHECK_SAME(!memcmp(o_r, o_t, k * sizeof(T)) && canary_intact(o_t, k * sizeof(T)), "ulp_encode" #W); \
    /* ulp_apply of the encoded differences turns a into b exactly */ \
    T *d_r = canary_alloc(n * sizeof(T)), *d_t = canary_alloc(n * sizeof(T)); \
    memcpy(d_r, a, n * sizeof(T)); memcpy(d_t, a, n * sizeof(T)); \
    r->ulp_apply##W(d_r, idx_r, k, o_r); t->ulp_apply##W(d_t, idx_r, k, o_r); \
    CHECK_SAME(!memcmp(d_r, d_t, n * sizeof(T)) && canary_intact(d_t, n * sizeof(T)), "ulp_apply" #W); \
    CHECK_SAME(!memcmp(d_t, b, n * sizeof(T)), "ulp_apply" #W " round trip"); \
    /* ulp_to_abs of the same differences gives b's values at the positions */ \
    T *v_r = canary_alloc(cap * sizeof(T)), *v_t = canary_alloc(cap * sizeof(T)), *want = canary_alloc(cap * sizeof(T)); \
    r->gather##W(b, idx_r, k, want); \
    r->ulp_to_abs##W(a, idx_r, k, o_r, v_r); t->ulp_to_abs##W(a, idx_r, k, o_r, v_t); \
    CHECK_SAME(!memcmp(v_r, want, k * sizeof(T)), "ulp_to_abs" #W " reference (a + ulp = b)"); \
    CHECK_SAME(!memcmp(v_t, v_r, k * sizeof(T)) && canary_intact(v_t, k * sizeof(T)), "ulp_to_abs" #W); \
    canary_free(v_r); canary_free(v_t); canary_free(want); \
    /* scatter of the gathered values turns a into b */ \
    r->gather##W(b, idx_r, k, o_r); \
    memcpy(d_t, a, n * sizeof(T)); \
    t->scatter##W(d_t, idx_r, k, o_r); \
    CHECK_SAME(!memcmp(d_t, b, n * sizeof(T)) && canary_intact(d_t, n * sizeof(T)), "scatter" #W); \
    /* random positions with repeats, random values: exercises the non-run paths */ \
    if (n) { \
        size_t m = n < 300 ? n : 300; \
        uint32_t *ri = canary_alloc(m * 4); \
        T *rv = canary_alloc(m * sizeof(T)); \
        for (size_t j = 0; j < m; j++) { ri[j] = (uint32_t)(rnd() % n); rv[j] = (T)rnd(); } \
        memcpy(d_r, a, n * sizeof(T)); memcpy(d_t, a, n * sizeof(T)); \
        r->scatter##W(d_r, ri, m, rv); t->scatter##W(d_t, ri, m, rv); \
        CHECK_SAME(!memcmp(d_r, d_t, n * sizeof(T)), "scatter" #W " random"); \
        r->ulp_apply##W(d_r, ri, m, rv); t->ulp_apply##W(d_t, ri, m, rv); \
        CHECK_SAME(!memcmp(d_r, d_t, n * sizeof(T)), "ulp_apply" #W " random"); \
        r->gather##W(a, ri, m, o_r); t->gather##W(a, ri, m, o_t); \
        CHECK_SAME(!memcmp(o_r, o_t, m * sizeof(T)), "gather" #W " random"); \
        r->ulp_encode##W(a, b, ri, m, o_r); t->ulp_encode##W(a, b, ri, m, o_t); \
        CHECK_SAME(!memcmp(o_r, o_t, m * sizeof(T)), "ulp_encode" #W " random"); \
        canary_free(ri); canary_free(rv); \
    } \
    EXTRA##W \
    canary_free(o_r); canary_free(o_t); canary_free(d_r); canary_free(d_t); \
    canary_free(idx_r); canary_free(idx_t); \
}

/* Width-specific extras: ulp_to_abs16 and the gaps kernels (run on the 16-bit positions). */
#define EXTRA8
#define EXTRA32
#define EXTRA16 extra16(t, r, a, b, n, idx_r, k);


/* diff_ulp16 against its definition (the gaps of diff16's positions as LEB128, ulp_encode16's
 * values) and the table under test against the reference, outputs sized exactly to the
 * contract's room and slack. */
static void check_diff_ulp16(const pulse_kernels *t, const pulse_kernels *r, const uint16_t *a,
                             const uint16_t *b, size_t n, const uint32_t *idx, size_t k)
{
    size_t leb_room = 5 * n + SLACK;
    uint8_t *want = malloc(5 * k + 1), *l_r = canary_alloc(leb_room), *l_t = canary_alloc(leb_room);
    uint16_t *zw = malloc(2 * k + 2), *z_r = canary_alloc((n + SLACK) * 2), *z_t = canary_alloc((n + SLACK) * 2);
    if (!want || !zw) { perror("malloc"); exit(2); }
    size_t wl = 0;
    for (size_t j = 0; j < k; j++) {
        uint32_t g = idx[j] - (j ? idx[j - 1] + 1 : 0);
        for (; g >= 0x80; g >>= 7)
            want[wl++] = (uint8_t)(g | 0x80);
        want[wl++] = (uint8_t)g;
    }
    r->ulp_encode16(a, b, idx, k, zw);
    size_t ll_r = 7, ll_t = 7;
    size_t k_r = r->diff_ulp16(a, b, n, l_r, &ll_r, z_r), k_t = t->diff_ulp16(a, b, n, l_t, &ll_t, z_t);
    CHECK_SAME(k_r == k && ll_r == wl && !memcmp(l_r, want, wl) && !memcmp(z_r, zw, 2 * k),
               "diff_ulp16 reference");
    CHECK_SAME(k_t == k_r && ll_t == ll_r && !memcmp(l_t, l_r, ll_r) && !memcmp(z_t, z_r, 2 * k_r), "diff_ulp16");
    CHECK_SAME(canary_intact(l_t, leb_room) && canary_intact(z_t, (n + SLACK) * 2), "diff_ulp16 overrun");
    free(want); free(zw);
    canary_free(l_r); canary_free(l_t); canary_free(z_r); canary_free(z_t);
}

static void extra16(const pulse_kernels *t, const pulse_kernels *r, const uint16_t *a, const uint16_t *b,
                    size_t n, const uint32_t *idx, size_t k)
{
    uint16_t *z = canary_alloc(k * 2), *v_r = canary_alloc(k * 2), *v_t = canary_alloc(k * 2);
    r->ulp_encode16(a, b, idx, k, z);
    r->ulp_to_abs16(a, idx, k, z, v_r);
    t->ulp_to_abs16(a, idx, k, z, v_t);
    CHECK_SAME(!memcmp(v_r, v_t, k * 2) && canary_intact(v_t, k * 2), "ulp_to_abs16");
    for (size_t j = 0; j < k; j++)
        z[j] = (uint16_t)rnd();
    r->ulp_to_abs16(a, idx, k, z, v_r);
    t->ulp_to_abs16(a, idx, k, z, v_t);
    CHECK_SAME(!memcmp(v_r, v_t, k * 2), "ulp_to_abs16 random");
    canary_free(z); canary_free(v_r); canary_free(v_t);
    /* diff_extract16: diff16's positions plus both values at each, in one pass */
    uint32_t *xi_r = canary_alloc((n + SLACK) * 4), *xi_t = canary_alloc((n + SLACK) * 4);
    uint16_t *xa_r = canary_alloc((n + SLACK) * 2), *xa_t = canary_alloc((n + SLACK) * 2);
    uint16_t *xb_r = canary_alloc((n + SLACK) * 2), *xb_t = canary_alloc((n + SLACK) * 2);
    size_t xk_r = r->diff_extract16(a, b, n, xi_r, xa_r, xb_r);
    size_t xk_t = t->diff_extract16(a, b, n, xi_t, xa_t, xb_t);
    int exact = xk_r == k && !memcmp(xi_r, idx, k * 4);
    for (size_t j = 0; exact && j < k; j++)
        exact = xa_r[j] == a[idx[j]] && xb_r[j] == b[idx[j]];
    CHECK_SAME(exact, "diff_extract16 reference");
    CHECK_SAME(xk_t == xk_r && !memcmp(xi_t, xi_r, xk_r * 4) && !memcmp(xa_t, xa_r, xk_r * 2)
               && !memcmp(xb_t, xb_r, xk_r * 2), "diff_extract16");
    CHECK_SAME(canary_intact(xi_t, (n + SLACK) * 4) && canary_intact(xa_t, (n + SLACK) * 2)
               && canary_intact(xb_t, (n + SLACK) * 2), "diff_extract16 overrun");
    canary_free(xi_r); canary_free(xi_t); canary_free(xa_r); canary_free(xa_t);
    canary_free(xb_r); canary_free(xb_t);
    /* count16: diff16's count, nothing written */
    CHECK_SAME(r->count16(a, b, n) == k, "count16 reference");
    CHECK_SAME(t->count16(a, b, n) == k, "count16");
    check_diff_ulp16(t, r, a, b, n, idx, k);
    check_ulp2_add16(t, r, a, b, n, idx, k);
    check_gaps(t, r, idx, k, (uint32_t)n);
}

DEFINE_CASE(8, uint8_t, special8)
DEFINE_CASE(16, uint16_t, special16)
DEFINE_CASE(32, uint32_t, special32)

/* Every length and pattern twice: once with the arrays ending at a guard page (reads past n
 * fault), once starting 1..7 elements after a 64-byte boundary (misaligned for every vector). */
#define DEFINE_ALL(W, T) \
static void check_width##W(const pulse_kernels *t, const pulse_kernels *r) \
{ \
    for (size_t li = 0; li < checkasm_lengths_count; li++) { \
        size_t n = checkasm_lengths[li]; \
        for (int p = 0; p < P_COUNT; p++) { \
            for (int placement = 0; placement < 2; placement++) { \
                cur_n = n; cur_pattern = pattern_name[p]; cur_placement = placement; \
                guarded ga, gb; \
                T *a, *b; \
                size_t off = 1 + (size_t)(li + (size_t)p) % 7; \
                if (placement == 0) { \
                    a = guard_alloc(&ga, n * sizeof(T)); \
                    b = guard_alloc(&gb, n * sizeof(T)); \
                } else { \
                    a = (T *)guard_alloc(&ga, (n + 64) * sizeof(T) + 64) ; \
                    a = (T *)(((uintptr_t)a + 63) & ~(uintptr_t)63) + off; \
                    b = (T *)guard_alloc(&gb, (n + 64) * sizeof(T) + 64); \
                    b = (T *)(((uintptr_t)b + 63) & ~(uintptr_t)63) + (7 - off + 1); \
                } \
                fill##W(a, b, n, (enum pattern)p); \
                run_case##W(t, r, a, b, n); \
                guard_free(&ga); guard_free(&gb); \
            } \
        } \
    } \
}

DEFINE_ALL(8, uint8_t)
DEFINE_ALL(16, uint16_t)
DEFINE_ALL(32, uint32_t)

/* count16 over more than 2^20 unchanged elements before the changes: a count kept in narrow
 * vector lanes must be flushed before it wraps. */
static void check_count16_long(const pulse_kernels *t, const pulse_kernels *r)
{
    size_t n = (1u << 20) + (1u << 18) + 77, k = 0;
    uint16_t *a = malloc(n * 2), *b = malloc(n * 2);
    if (!a || !b) { perror("malloc"); exit(2); }
    for (size_t i = 0; i < n; i++) {
        a[i] = b[i] = (uint16_t)rnd();
        if (i >= (1u << 20) + (1u << 17) && rnd() % 3 == 0) {
            b[i] = (uint16_t)(b[i] ^ (1u + (unsigned)(rnd() % 0xFFFF)));
            k++;
        }
    }
    cur_n = n; cur_pattern = "2^20 unchanged, then 1/3"; cur_placement = 0;
    CHECK_SAME(r->count16(a, b, n) == k, "count16 reference");
    CHECK_SAME(t->count16(a, b, n) == k, "count16");
    free(a); free(b);
}

void checkasm_check_diff(const pulse_kernels *t, const pulse_kernels *r)
{
    check_width8(t, r);
    check_width16(t, r);
    check_width32(t, r);
    check_count16_long(t, r);
}

/* diff16 over two 64 MiB arrays: GB/s of input read (both arrays); scatter16 and
 * ulp_apply16 of those changes into a 64 MiB array: GB/s relative to the array size. */
void checkasm_bench_diff(const pulse_kernels *t)
{
    size_t n = bench_bytes / 2;
    int reps = bench_bytes < (1u << 22) ? 2000 : 5; /* small arrays: cache-resident compute cost */
    uint16_t *a = malloc(n * 2), *b = malloc(n * 2), *v = malloc(n * 2);
    uint32_t *idx = malloc((n + SLACK) * 4);
    if (!a || !b || !v || !idx) { perror("malloc"); exit(2); }
    static const int percent[] = {0, 4, 100};
    for (size_t pi = 0; pi < 3; pi++) {
        for (size_t i = 0; i < n; i++) {
            a[i] = (uint16_t)rnd();
            b[i] = (rnd() % 100) < (uint64_t)percent[pi] ? (uint16_t)(a[i] ^ 1) : a[i];
        }
        double best = 1e9;
        size_t k = 0;
        for (int rep = 0; rep < reps; rep++) {
            double t0 = checkasm_now();
            k = t->diff16(a, b, n, idx);
            double dt = checkasm_now() - t0;
            best = dt < best ? dt : best;
        }
        char label[64];
        snprintf(label, sizeof label, "diff16 %d%%", percent[pi]);
        printf("%-8s %-22s %8.2f GB/s (a+b read), %zu changes\n", t->name, label, 2.0 * n * 2 / best / 1e9, k);
        /* the fused form: positions plus both values (what the 16-bit diff path runs) */
        uint16_t *xa = malloc((n + SLACK) * 2), *xb = malloc((n + SLACK) * 2);
        if (!xa || !xb) { perror("malloc"); exit(2); }
        double best_x = 1e9;
        for (int rep = 0; rep < reps; rep++) {
            double t0 = checkasm_now();
            k = t->diff_extract16(a, b, n, idx, xa, xb);
            double dt = checkasm_now() - t0;
            best_x = dt < best_x ? dt : best_x;
        }
        snprintf(label, sizeof label, "diff_extract16 %d%%", percent[pi]);
        printf("%-8s %-22s %8.2f GB/s (a+b read), %zu changes\n", t->name, label, 2.0 * n * 2 / best_x / 1e9, k);
        /* the ulp diff path: gap bytes and zigzag values straight from the arrays */
        uint8_t *lb = malloc(5 * n + SLACK);
        if (!lb) { perror("malloc"); exit(2); }
        size_t lbl = 0;
        best_x = 1e9;
        for (int rep = 0; rep < reps; rep++) {
            double t0 = checkasm_now();
            k = t->diff_ulp16(a, b, n, lb, &lbl, xa);
            double dt = checkasm_now() - t0;
            best_x = dt < best_x ? dt : best_x;
        }
        snprintf(label, sizeof label, "diff_ulp16 %d%%", percent[pi]);
        printf("%-8s %-22s %8.2f GB/s (a+b read), %zu changes\n", t->name, label, 2.0 * n * 2 / best_x / 1e9, k);
        if (k) {
            /* z drawn like a training step's (docs/patch-format.md): 87% 1 or 2, 3% 3, 10%
             * escapes, nearly all under 132 (one escape byte) */
            for (size_t j = 0; j < k; j++) {
                uint64_t r = rnd() % 1000;
                xa[j] = (uint16_t)(r < 870 ? 1 + r % 2 : r < 900 ? 3 : r < 998 ? 4 + r % 12 : 200 + r);
            }
            uint32_t hist[256] = { 0 };
            best_x = 1e9;
            for (int rep = 0; rep < reps; rep++) {
                double t0 = checkasm_now();
                t->ulp_pack2_16(xa, k, lb, lb + k, hist);
                double dt = checkasm_now() - t0;
                best_x = dt < best_x ? dt : best_x;
            }
            snprintf(label, sizeof label, "ulp_pack2_16 %d%%", percent[pi]);
            printf("%-8s %-22s %8.0f M values/s (z like a training step's: 10%% escapes)\n", t->name, label,
                   k / best_x / 1e6);
            /* apply's add of those streams (gaps from diff_ulp16 above, symbols and escapes
             * just packed) into b: the values change every run, the work does not */
            uint8_t *gb = malloc(5 * n + SLACK), *pk = malloc((k + 3) / 4 + SLACK), *es = malloc(3 * k + SLACK);
            if (!gb || !pk || !es) { perror("malloc"); exit(2); }
            t->diff_ulp16(a, b, n, gb, &lbl, xb);   /* the gaps again (lb now holds symbols) */
            size_t el = t->ulp_pack2_16(xa, k, pk, es, hist);
            (void)el;
            memset(pk + (k + 3) / 4, 0, 4);
            best_x = 1e9;
            for (int rep = 0; rep < reps; rep++) {
                double t0 = checkasm_now();
                t->ulp2_add16(b, gb, lbl, pk, es, k);
                double dt = checkasm_now() - t0;
                best_x = dt < best_x ? dt : best_x;
            }
            snprintf(label, sizeof label, "ulp2_add16 %d%%", percent[pi]);
            printf("%-8s %-22s %8.2f GB/s (array), %.0f M changes/s\n", t->name, label, n * 2 / best_x / 1e9,
                   k / best_x / 1e6);
            free(gb); free(pk); free(es);
        }
        free(lb);
        free(xa); free(xb);
        if (!percent[pi])
            continue;
        for (size_t j = 0; j < k; j++)
            v[j] = (uint16_t)(rnd() & 0xff);
        best = 1e9;
        for (int rep = 0; rep < reps; rep++) {
            double t0 = checkasm_now();
            t->scatter16(a, idx, k, v);
            double dt = checkasm_now() - t0;
            best = dt < best ? dt : best;
        }
        snprintf(label, sizeof label, "scatter16 %d%%", percent[pi]);
        printf("%-8s %-22s %8.2f GB/s (array), %.0f M changes/s\n", t->name, label, n * 2 / best / 1e9, k / best / 1e6);
        best = 1e9;
        for (int rep = 0; rep < reps; rep++) {
            double t0 = checkasm_now();
            t->ulp_apply16(a, idx, k, v);
            double dt = checkasm_now() - t0;
            best = dt < best ? dt : best;
        }
        snprintf(label, sizeof label, "ulp_apply16 %d%%", percent[pi]);
        printf("%-8s %-22s %8.2f GB/s (array), %.0f M changes/s\n", t->name, label, n * 2 / best / 1e9, k / best / 1e6);
    }
    /* leb1_run over gap bytes (all one-byte gaps, as a patch's position stream mostly is). */
    uint8_t *g = (uint8_t *)(void *)a;
    for (size_t i = 0; i < n * 2; i++)
        g[i] = (uint8_t)(rnd() % 64);
    double best = 1e9;
    uint64_t sum = 0;
    for (int rep = 0; rep < reps; rep++) {
        double t0 = checkasm_now();
        size_t r = t->leb1_run(g, n * 2, &sum);
        double dt = checkasm_now() - t0;
        best = dt < best ? dt : best;
        sum += r;
    }
    printf("%-8s %-22s %8.2f GB/s (gap bytes read)\n", t->name, "leb1_run", n * 2 / best / 1e9);
    free(a); free(b); free(v); free(idx);
}

