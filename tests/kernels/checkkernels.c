/* SPDX-License-Identifier: Apache-2.0 */
/* checkasm-style kernel test: every ISA table against the _c reference on random and edge inputs; --bench times them. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "node/kernels/kernels.h"

/* ---------- inputs ---------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

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

/* ---------- memory with traps ---------- */

/* An input array ending exactly where a PROT_NONE page begins: any read past n faults. */
typedef struct { void *map; size_t map_size; } guarded;

static void *guard_alloc(guarded *g, size_t bytes)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t data_pages = (bytes + page - 1) / page;
    g->map_size = (data_pages + 1) * page;
    g->map = mmap(NULL, g->map_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (g->map == MAP_FAILED) { perror("mmap"); exit(2); }
    uint8_t *guard = (uint8_t *)g->map + data_pages * page;
    if (mprotect(guard, page, PROT_NONE)) { perror("mprotect"); exit(2); }
    return guard - bytes;
}

static void guard_free(guarded *g) { munmap(g->map, g->map_size); }

/* An output array with canary bytes before and after: any write outside [0, bytes) shows. */
enum { CANARY = 64 };
static const uint8_t canary_byte = 0xa5;

static void *canary_alloc(size_t bytes)
{
    uint8_t *p = malloc(bytes + 2 * CANARY);
    if (!p) { perror("malloc"); exit(2); }
    memset(p, canary_byte, bytes + 2 * CANARY);
    return p + CANARY;
}

static int canary_intact(const void *data, size_t bytes)
{
    const uint8_t *p = (const uint8_t *)data;
    for (size_t i = 0; i < CANARY; i++)
        if (p[-1 - (ptrdiff_t)i] != canary_byte || p[bytes + i] != canary_byte)
            return 0;
    return 1;
}

static void canary_free(void *data) { free((uint8_t *)data - CANARY); }

/* ---------- one test case per width ---------- */

static const char *cur_isa;
static size_t cur_n;
static const char *cur_pattern;
static int cur_placement;

#define FAILED_AT(what) fprintf(stderr, "  %s %s: n=%zu pattern=%s placement=%d\n", cur_isa, what, \
    cur_n, cur_pattern, cur_placement)

#define CHECK_SAME(cond, what) do { int ok_ = (cond); CHECK(ok_); if (!ok_) FAILED_AT(what); } while (0)

enum { SLACK = 64 }; /* idx slack granted by the diff contract */

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

static void check_gaps(const pulse_kernels *t, const pulse_kernels *r, const uint32_t *idx, size_t k,
                       uint32_t limit);

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

/* ulp_pack2_16 on k values drawn like a patch's (mostly 1..3, some escapes of every LEB
 * length, the largest 16-bit value): the reference against a decode of its own output, the
 * table under test against the reference, the histogram added to a nonzero start. */
static void check_ulp_pack2(const pulse_kernels *t, const pulse_kernels *r)
{
    cur_pattern = "ulp_pack2_16";
    static const size_t ks[] = {0, 1, 2, 3, 4, 5, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 1000, 65537};
    for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
        for (int mix = 0; mix < 3; mix++) {
            size_t k = ks[ki];
            cur_n = k;
            cur_placement = mix;
            guarded g;
            uint16_t *z = guard_alloc(&g, k * 2);
            for (size_t j = 0; j < k; j++) {
                uint64_t x = rnd();
                z[j] = mix == 0 ? (uint16_t)(1 + x % 3)                         /* no escapes */
                     : mix == 1 ? (uint16_t)(x % 10 ? 1 + (x >> 8) % 3 : 4 + (x >> 8) % 300)
                     : (uint16_t)(x % 4 == 0 ? 0xffff : x % 4 == 1 ? 1 + (x >> 8) % 0xffff : 1 + (x >> 8) % 5);
            }
            size_t proom = (k + 3) / 4 + SLACK, eroom = 3 * k + SLACK;
            uint8_t *p_r = canary_alloc(proom), *p_t = canary_alloc(proom);
            uint8_t *e_r = canary_alloc(eroom), *e_t = canary_alloc(eroom);
            uint32_t h_r[256], h_t[256], h_w[256];
            for (int i = 0; i < 256; i++)
                h_r[i] = h_t[i] = h_w[i] = (uint32_t)i * 3;
            size_t el_r = r->ulp_pack2_16(z, k, p_r, e_r, h_r), el_t = t->ulp_pack2_16(z, k, p_t, e_t, h_t);
            /* the definition: decode symbols and escapes back */
            int ok = 1;
            size_t at = 0;
            for (size_t j = 0; j < k && ok; j++) {
                unsigned sym = (p_r[j / 4] >> (2 * (j % 4))) & 3;
                uint32_t v = sym + 1;
                if (sym == 3) {
                    uint32_t e = 0;
                    for (unsigned sh = 0; at < el_r; sh += 7) {
                        uint8_t byte = e_r[at++];
                        e |= (uint32_t)(byte & 0x7f) << sh;
                        if (!(byte & 0x80))
                            break;
                    }
                    v = e + 4;
                }
                ok = v == z[j];
                h_w[z[j] < 256 ? z[j] : 0]++;
            }
            if (k % 4)
                ok = ok && !(p_r[k / 4] >> (2 * (k % 4)));
            CHECK_SAME(ok && at == el_r && !memcmp(h_r, h_w, sizeof h_w), "ulp_pack2_16 reference");
            CHECK_SAME(el_t == el_r && !memcmp(p_t, p_r, (k + 3) / 4) && !memcmp(e_t, e_r, el_r)
                       && !memcmp(h_t, h_r, sizeof h_r), "ulp_pack2_16");
            CHECK_SAME(canary_intact(p_t, proom) && canary_intact(e_t, eroom), "ulp_pack2_16 overrun");
            canary_free(p_r); canary_free(p_t); canary_free(e_r); canary_free(e_t);
            guard_free(&g);
        }
    }
}

/* ulp2_add16 from the streams a patch holds for the changes a -> b (LEB128 gaps, 2-bit
 * symbols and escapes, packed by the reference): adding them to a copy of a must give b,
 * for the reference and the table under test. Each stream ends at a guard page (the symbols
 * after their 4 zero bytes of padding), so a read past what the contract allows faults; the
 * output has canaries. */
static void check_ulp2_add16(const pulse_kernels *t, const pulse_kernels *r, const uint16_t *a,
                             const uint16_t *b, size_t n, const uint32_t *idx, size_t k)
{
    uint8_t *leb = malloc(5 * k + 1), *pk = malloc((k + 3) / 4 + SLACK), *es = malloc(3 * k + SLACK);
    uint16_t *z = malloc(2 * k + 2);
    if (!leb || !pk || !es || !z) { perror("malloc"); exit(2); }
    size_t glen = 0;
    for (size_t j = 0; j < k; j++) {
        uint32_t gap = idx[j] - (j ? idx[j - 1] + 1 : 0);
        for (; gap >= 0x80; gap >>= 7)
            leb[glen++] = (uint8_t)(gap | 0x80);
        leb[glen++] = (uint8_t)gap;
    }
    r->ulp_encode16(a, b, idx, k, z);
    uint32_t hist[256] = { 0 };
    size_t elen = r->ulp_pack2_16(z, k, pk, es, hist), plen = (k + 3) / 4;
    guarded gg, gp, ge;
    uint8_t *g_in = guard_alloc(&gg, glen), *p_in = guard_alloc(&gp, plen + 4), *e_in = guard_alloc(&ge, elen);
    memcpy(g_in, leb, glen);
    memcpy(p_in, pk, plen);
    memset(p_in + plen, 0, 4);
    memcpy(e_in, es, elen);
    uint16_t *d_r = canary_alloc(n * 2), *d_t = canary_alloc(n * 2);
    memcpy(d_r, a, n * 2);
    memcpy(d_t, a, n * 2);
    r->ulp2_add16(d_r, g_in, glen, p_in, e_in, k);
    t->ulp2_add16(d_t, g_in, glen, p_in, e_in, k);
    CHECK_SAME(!memcmp(d_r, b, n * 2), "ulp2_add16 reference (a + the streams = b)");
    CHECK_SAME(!memcmp(d_t, b, n * 2) && canary_intact(d_t, n * 2), "ulp2_add16");
    canary_free(d_r); canary_free(d_t);
    guard_free(&gg); guard_free(&gp); guard_free(&ge);
    free(leb); free(pk); free(es); free(z);
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
    check_diff_ulp16(t, r, a, b, n, idx, k);
    check_ulp2_add16(t, r, a, b, n, idx, k);
    check_gaps(t, r, idx, k, (uint32_t)n);
}

DEFINE_CASE(8, uint8_t, special8)
DEFINE_CASE(16, uint16_t, special16)
DEFINE_CASE(32, uint32_t, special32)

/* gaps_encode on valid positions, then gaps_decode with limit n (fits), the last position
 * (reaches the limit: refused) and limit 0. */
static void check_gaps(const pulse_kernels *t, const pulse_kernels *r, const uint32_t *idx, size_t k,
                       uint32_t limit)
{
    uint32_t *g_r = canary_alloc(k * 4), *g_t = canary_alloc(k * 4);
    uint32_t *i_r = canary_alloc(k * 4), *i_t = canary_alloc(k * 4);
    r->gaps_encode(idx, k, g_r);
    t->gaps_encode(idx, k, g_t);
    CHECK_SAME(!memcmp(g_r, g_t, k * 4) && canary_intact(g_t, k * 4), "gaps_encode");
    int rc_r = r->gaps_decode(g_r, k, limit, i_r), rc_t = t->gaps_decode(g_r, k, limit, i_t);
    CHECK_SAME(rc_r == 0 && rc_t == 0 && !memcmp(i_t, idx, k * 4) && canary_intact(i_t, k * 4),
               "gaps_decode");
    if (k) {
        uint32_t tight = idx[k - 1]; /* the last position == limit: must be refused */
        CHECK_SAME(r->gaps_decode(g_r, k, tight, i_r) == -1 && t->gaps_decode(g_r, k, tight, i_t) == -1,
                   "gaps_decode limit reached");
        CHECK_SAME(t->gaps_decode(g_r, k, tight + 1, i_t) == 0, "gaps_decode limit just fits");
        CHECK_SAME(t->gaps_decode(g_r, k, 0, i_t) == -1, "gaps_decode limit 0");
        CHECK_SAME(canary_intact(i_t, k * 4), "gaps_decode overrun");
    }
    canary_free(g_r); canary_free(g_t); canary_free(i_r); canary_free(i_t);
}

/* Hand-made gap sequences that wrap 2^32 or reach the limit at every lane position. */
static void check_gaps_errors(const pulse_kernels *t, const pulse_kernels *r)
{
    cur_pattern = "gaps errors";
    enum { MAXK = 80 };
    uint32_t *g = canary_alloc(MAXK * 4), *i_r = canary_alloc(MAXK * 4), *i_t = canary_alloc(MAXK * 4);
    static const uint32_t big[] = {0xffffffffu, 0xfffffffeu, 0x80000000u, 0x7fffffffu, 0x10000000u};
    for (size_t k = 1; k <= MAXK; k++) {
        cur_n = k;
        for (size_t at = 0; at < k; at++) {
            for (size_t b = 0; b < sizeof big / sizeof big[0]; b++) {
                for (size_t j = 0; j < k; j++)
                    g[j] = (uint32_t)(rnd() % 5);
                g[at] = big[b];
                if (b == 4 && k > 1) /* several large gaps: the sum passes 2^32 slowly */
                    for (size_t j = at; j < k; j++)
                        g[j] = 0x40000000u;
                static const uint32_t limits[] = {0xffffffffu, 0xfffffff0u, 1000, 0x80000000u};
                for (size_t l = 0; l < sizeof limits / sizeof limits[0]; l++) {
                    int rc_r = r->gaps_decode(g, k, limits[l], i_r);
                    int rc_t = t->gaps_decode(g, k, limits[l], i_t);
                    CHECK_SAME(rc_r == rc_t && (rc_r != 0 || !memcmp(i_r, i_t, k * 4)), "gaps_decode errors");
                    CHECK_SAME(canary_intact(i_t, MAXK * 4), "gaps_decode errors overrun");
                }
            }
        }
        /* exact boundary: positions 0..k-1 with limit k fits, limit k-1 is refused */
        for (size_t j = 0; j < k; j++)
            g[j] = 0;
        CHECK_SAME(t->gaps_decode(g, k, (uint32_t)k, i_t) == 0, "gaps_decode dense fits");
        CHECK_SAME(t->gaps_decode(g, k, (uint32_t)k - 1, i_t) == -1, "gaps_decode dense over");
        /* positions 2^32-3, 2^32-2, then 2^32-1 == limit: refused from k = 3 on */
        g[0] = 0xfffffffdu;
        int rc_r = r->gaps_decode(g, k, 0xffffffffu, i_r), rc_t = t->gaps_decode(g, k, 0xffffffffu, i_t);
        CHECK_SAME(rc_r == rc_t && (rc_r != 0 || !memcmp(i_r, i_t, k * 4)), "gaps_decode near 2^32");
    }
    canary_free(g); canary_free(i_r); canary_free(i_t);
}

/* leb1_run on byte strings ending at a guard page (a read at or past n faults): runs of
 * bytes < 0x80 of every length up to 300 (and a long one), stopped by a byte >= 0x80 at
 * every offset, or by the end; each with a nonzero starting sum, which must be added to. */
static void check_leb1_run(const pulse_kernels *t, const pulse_kernels *r)
{
    cur_pattern = "leb1_run";
    static const size_t extra[] = {1000, 4096, 65537};
    for (size_t li = 0; li < 301 + sizeof extra / sizeof extra[0]; li++) {
        size_t n = li < 301 ? li : extra[li - 301];
        for (int kind = 0; kind < 4; kind++) {
            cur_n = n;
            cur_placement = kind;
            guarded g;
            uint8_t *src = guard_alloc(&g, n);
            for (size_t i = 0; i < n; i++)   /* kind 0: small bytes, 1: up to 0x7f, 2-3: a stop byte */
                src[i] = (uint8_t)(kind == 0 ? rnd() % 4 : rnd() % 128);
            if (kind >= 2 && n)
                src[kind == 2 ? (size_t)(rnd() % n) : n - 1] = (uint8_t)(0x80 | rnd());
            if (kind == 3 && n > 2)   /* a second stop byte after the first */
                src[n / 2] = 0x80;
            uint64_t s_r = 12345, s_t = 12345;
            size_t k_r = r->leb1_run(src, n, &s_r), k_t = t->leb1_run(src, n, &s_t);
            CHECK_SAME(k_r == k_t && s_r == s_t, "leb1_run");
            /* the definition itself: the reference's run ends at the first byte >= 0x80 */
            size_t stop = 0;
            uint64_t want = 12345;
            while (stop < n && src[stop] < 0x80)
                want += src[stop++];
            CHECK_SAME(k_r == stop && s_r == want, "leb1_run definition");
            guard_free(&g);
        }
    }
}

/* ---------- rice_gaps ---------- */

/* The Rice coding written out bit by bit, independently of the library's encoder: k fields of
 * `shift` bits, then per gap its quotient in zeros and a one. Returns the bytes written to out
 * (zeroed here first; room for bytes_max). */
static size_t rice_write(const uint32_t *g, size_t k, unsigned shift, uint8_t *out, size_t bytes_max)
{
    memset(out, 0, bytes_max);
    size_t bit = 0;
    for (size_t j = 0; j < k; j++, bit += shift)
        for (unsigned b = 0; b < shift; b++)
            if (g[j] >> b & 1)
                out[(bit + b) >> 3] |= (uint8_t)(1u << ((bit + b) & 7));
    uint8_t *u = out + (k * shift + 7) / 8;
    bit = 0;
    for (size_t j = 0; j < k; j++) {
        bit += g[j] >> shift;
        u[bit >> 3] |= (uint8_t)(1u << (bit & 7));
        bit++;
    }
    return (size_t)(u - out) + (bit + 7) / 8;
}

/* The gap distributions of rice_gaps' cases: geometric at several densities, all zero,
 * runs, and gaps of every LEB128 length up to 2^32 - 1. */
static uint32_t rice_gap(int kind)
{
    switch (kind) {
    case 0: { uint32_t x = 0; while (rnd() % 19) x++; return x; }           /* ~5 % changed */
    case 1: return (uint32_t)(rnd() & 1);                                    /* dense */
    case 2: return 0;
    case 3: return rnd() % 8 ? (uint32_t)(rnd() % 40) : (uint32_t)(rnd() % 5000);   /* mixed */
    default: {                                                               /* long gaps */
        static const uint32_t big[] = {127, 128, 16383, 16384, 2097151, 2097152, 268435455, 268435456,
                                       0xfffffffeu, 0xffffffffu};
        return rnd() % 4 ? (uint32_t)(rnd() % 300) : big[rnd() % (sizeof big / sizeof big[0])];
    }
    }
}

static size_t leb_write(uint8_t *out, uint32_t v)
{
    size_t n = 0;
    for (; v >= 0x80; v >>= 7)
        out[n++] = (uint8_t)(v | 0x80);
    out[n++] = (uint8_t)v;
    return n;
}

static void check_rice_gaps(const pulse_kernels *t, const pulse_kernels *r)
{
    cur_pattern = "rice_gaps";
    /* one gap, shift 31: quotient 2 is 2^32 (overflow); quotient 1 with field 2^31 - 1 is
     * 2^32 - 1, whose position reaches any 32-bit limit */
    {
        uint8_t over[5] = {0, 0, 0, 0, 0x04}, top[5] = {0xff, 0xff, 0xff, 0x7f, 0x02};
        uint8_t o[5 + 64];
        size_t l;
        CHECK_SAME(r->rice_gaps(over, 5, 1, 31, 0xffffffffu, o, &l) == -2
                   && t->rice_gaps(over, 5, 1, 31, 0xffffffffu, o, &l) == -2, "rice_gaps overflow");
        CHECK_SAME(r->rice_gaps(top, 5, 1, 31, 0xffffffffu, o, &l) == -4
                   && t->rice_gaps(top, 5, 1, 31, 0xffffffffu, o, &l) == -4, "rice_gaps 2^32 - 1");
        top[4] = 0x01;   /* quotient 0: 2^31 - 1, position 2^31 - 1 */
        CHECK_SAME(r->rice_gaps(top, 5, 1, 31, 0xffffffffu, o, &l) == 0 && l == 5
                   && t->rice_gaps(top, 5, 1, 31, 0xffffffffu, o, &l) == 0 && l == 5, "rice_gaps 2^31 - 1");
    }
    static const size_t counts[] = {1, 2, 7, 8, 31, 32, 33, 63, 64, 65, 127, 200, 1000, 4099, 50000};
    for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++)
        for (int kind = 0; kind < 5; kind++) {
            size_t k = counts[ci];
            cur_n = k;
            cur_placement = kind;
            uint32_t *g = malloc(k * 4);
            uint64_t total = 0, qsum[32] = { 0 };
            for (size_t j = 0; j < k; j++) {
                g[j] = rice_gap(kind);
                if (kind == 4 && total + g[j] + 1 + (k - 1 - j) > 0xffffffffu)
                    g[j] = 0;   /* keep every position below 2^32 - 1, room left for the rest */
                total += (uint64_t)g[j] + 1;
                for (unsigned sh = 0; sh < 32; sh++)
                    qsum[sh] += g[j] >> sh;
            }
            uint32_t limit = kind == 4 ? 0xffffffffu : (uint32_t)total;
            uint8_t *want = malloc(k * 5 + 1);
            size_t want_len = 0;
            for (size_t j = 0; j < k; j++)
                want_len += leb_write(want + want_len, g[j]);
            /* shifts: the cheapest, its neighbours, 0 and 31 when the planes stay small */
            unsigned best = 0;
            for (unsigned sh = 1; sh < 32; sh++)
                if (qsum[sh] + k * sh < qsum[best] + k * best)
                    best = sh;
            unsigned shifts[5] = {best, best ? best - 1 : 1, best < 31 ? best + 1 : 30, 0, 31};
            for (int si = 0; si < 5; si++) {
                unsigned sh = shifts[si];
                if (qsum[sh] > ((uint64_t)64 << 20))
                    continue;   /* a unary plane of more than 8 MiB */
                size_t cap = (k * sh + 7) / 8 + (size_t)((qsum[sh] + k + 7) / 8) + 8;
                uint8_t *enc = malloc(cap);
                size_t len = rice_write(g, k, sh, enc, cap);
                size_t room = pulse_rice_leb_room(k, limit);
                CHECK_SAME(want_len <= room, "rice_gaps room bound");
                /* the stream as written, then damaged: cut short, a byte more, a flipped bit
                 * (either plane), a limit one short */
                for (int dmg = 0; dmg < 5; dmg++) {
                    size_t n = dmg == 1 ? len - 1 : dmg == 2 ? len + 1 : len;
                    if (dmg == 1 && len == 0)
                        continue;
                    guarded gd;
                    uint8_t *src = guard_alloc(&gd, n);
                    memcpy(src, enc, n < len ? n : len);
                    if (dmg == 2)
                        src[len] = (uint8_t)(rnd() & 0xff);
                    if (dmg == 3 && len)
                        src[rnd() % len] ^= (uint8_t)(1u << (rnd() % 8));
                    uint32_t lim = dmg == 4 ? limit - 1 : limit;
                    uint8_t *o_r = canary_alloc(room + 64), *o_t = canary_alloc(room + 64);
                    size_t l_r = 0, l_t = 0;
                    int rc_r = r->rice_gaps(src, n, k, sh, lim, o_r, &l_r);
                    int rc_t = t->rice_gaps(src, n, k, sh, lim, o_t, &l_t);
                    CHECK_SAME(rc_r == rc_t && (rc_r != 0 || (l_r == l_t && !memcmp(o_r, o_t, l_r))), "rice_gaps");
                    CHECK_SAME(canary_intact(o_t, room + 64) && canary_intact(o_r, room + 64), "rice_gaps overrun");
                    if (dmg == 0)
                        CHECK_SAME(rc_r == 0 && l_r == want_len && !memcmp(o_r, want, want_len), "rice_gaps definition");
                    if (dmg == 1 || dmg == 2 || (dmg == 4 && kind != 4))
                        CHECK_SAME(rc_r == (dmg == 1 ? -1 : dmg == 2 ? -3 : -4), "rice_gaps error code");
                    canary_free(o_r); canary_free(o_t);
                    guard_free(&gd);
                }
                /* the encoder's side: rice_put writes exactly these planes, from the LEB128
                 * gaps ending at a guard page */
                guarded gl;
                uint8_t *lebin = guard_alloc(&gl, want_len);
                memcpy(lebin, want, want_len);
                uint8_t *p_r = canary_alloc(len + 64), *p_t = canary_alloc(len + 64);
                size_t n_r = r->rice_put(lebin, want_len, k, sh, p_r), n_t = t->rice_put(lebin, want_len, k, sh, p_t);
                CHECK_SAME(n_r == len && !memcmp(p_r, enc, len), "rice_put definition");
                CHECK_SAME(n_t == len && !memcmp(p_t, enc, len), "rice_put");
                CHECK_SAME(canary_intact(p_t, len + 64) && canary_intact(p_r, len + 64), "rice_put overrun");
                canary_free(p_r); canary_free(p_t);
                guard_free(&gl);
                free(enc);
            }
            free(want);
            free(g);
        }
}

static const size_t lengths[] = {0, 1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 47, 63, 64, 65, 96,
    127, 128, 129, 191, 255, 256, 257, 511, 1000, 4097, 65537, 100003};

/* Every length and pattern twice: once with the arrays ending at a guard page (reads past n
 * fault), once starting 1..7 elements after a 64-byte boundary (misaligned for every vector). */
#define DEFINE_ALL(W, T) \
static void check_width##W(const pulse_kernels *t, const pulse_kernels *r) \
{ \
    for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++) { \
        size_t n = lengths[li]; \
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

typedef int (*isa_init)(pulse_kernels *);
static const struct { const char *name; isa_init init; unsigned flag; } isas[] = {
    {"avx2", pulse_kernels_init_avx2, PULSE_CPU_AVX2},
    {"avx512", pulse_kernels_init_avx512, PULSE_CPU_AVX512},
    {"neon", pulse_kernels_init_neon, PULSE_CPU_NEON},
};

#if defined(__x86_64__)
#include <cpuid.h>
/* clang 14's __builtin_cpu_supports does not know "f16c": CPUID.1:ECX bit 29 */
static int has_f16c(void)
{
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && ((c >> 29) & 1);
}
#endif

/* What the CPU has before PULSE_CPU_MASK, asked independently of cpu.c, so that a detection
 * bug cannot silently skip a table. */
static unsigned cpu_has_raw(unsigned flag)
{
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    if (flag == PULSE_CPU_AVX2)
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("bmi2") && has_f16c();
    if (flag == PULSE_CPU_AVX512)
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vbmi")
               && __builtin_cpu_supports("avx512vbmi2");
    return 0;
#elif defined(__aarch64__)
    return flag == PULSE_CPU_NEON;
#else
    (void)flag;
    return 0;
#endif
}

static unsigned env_mask(void)
{
    const char *m = getenv("PULSE_CPU_MASK");
    return m && *m ? (unsigned)strtoul(m, NULL, 16) : 0;
}

/* ---------- the LoCo gate ---------- */

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
    }
    canary_free(acc_r); canary_free(acc_t); canary_free(idx); canary_free(v);
}

static void check_gate(const pulse_kernels *t, const pulse_kernels *r)
{
    for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++) {
        size_t n = lengths[li];
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

/* ---------- --bench ---------- */

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
__attribute__((target("avx2"))) static uint64_t sum_avx2(const uint64_t *p, size_t n)
{
    __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = _mm256_add_epi64(s0, _mm256_loadu_si256((const __m256i *)(p + i)));
        s1 = _mm256_add_epi64(s1, _mm256_loadu_si256((const __m256i *)(p + i + 4)));
        s2 = _mm256_add_epi64(s2, _mm256_loadu_si256((const __m256i *)(p + i + 8)));
        s3 = _mm256_add_epi64(s3, _mm256_loadu_si256((const __m256i *)(p + i + 12)));
    }
    uint64_t out[4];
    _mm256_storeu_si256((__m256i *)out, _mm256_add_epi64(_mm256_add_epi64(s0, s1), _mm256_add_epi64(s2, s3)));
    return out[0] + out[1] + out[2] + out[3]; /* n is a multiple of 16 here */
}
#endif

static volatile uint64_t bench_sink;

static void bench_machine(void)
{
    size_t bytes = 256u << 20;
    uint64_t *src = malloc(bytes), *dst = malloc(bytes);
    if (!src || !dst) { perror("malloc"); exit(2); }
    memset(src, 1, bytes);
    memset(dst, 0, bytes);
    double best = 1e9;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (__builtin_cpu_supports("avx2")) {
        for (int rep = 0; rep < 5; rep++) {
            double t0 = now();
            bench_sink += sum_avx2(src, bytes / 8);
            double t = now() - t0;
            best = t < best ? t : best;
        }
        printf("%-8s %-22s %8.2f GB/s\n", "machine", "read (sum, avx2)", bytes / best / 1e9);
    }
#endif
    best = 1e9;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = now();
        memcpy(dst, src, bytes);
        double t = now() - t0;
        best = t < best ? t : best;
    }
    bench_sink += dst[rnd() % (bytes / 8)];
    printf("%-8s %-22s %8.2f GB/s (bytes copied / s)\n", "machine", "memcpy 256 MiB", bytes / best / 1e9);
    free(src);
    free(dst);
}

/* diff16 over two 64 MiB arrays: GB/s of input read (both arrays); scatter16 and
 * ulp_apply16 of those changes into a 64 MiB array: GB/s relative to the array size. */
static size_t bench_bytes = 64u << 20;

static void bench_table(const pulse_kernels *t)
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
            double t0 = now();
            k = t->diff16(a, b, n, idx);
            double dt = now() - t0;
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
            double t0 = now();
            k = t->diff_extract16(a, b, n, idx, xa, xb);
            double dt = now() - t0;
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
            double t0 = now();
            k = t->diff_ulp16(a, b, n, lb, &lbl, xa);
            double dt = now() - t0;
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
                double t0 = now();
                t->ulp_pack2_16(xa, k, lb, lb + k, hist);
                double dt = now() - t0;
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
                double t0 = now();
                t->ulp2_add16(b, gb, lbl, pk, es, k);
                double dt = now() - t0;
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
            double t0 = now();
            t->scatter16(a, idx, k, v);
            double dt = now() - t0;
            best = dt < best ? dt : best;
        }
        snprintf(label, sizeof label, "scatter16 %d%%", percent[pi]);
        printf("%-8s %-22s %8.2f GB/s (array), %.0f M changes/s\n", t->name, label, n * 2 / best / 1e9, k / best / 1e6);
        best = 1e9;
        for (int rep = 0; rep < reps; rep++) {
            double t0 = now();
            t->ulp_apply16(a, idx, k, v);
            double dt = now() - t0;
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
        double t0 = now();
        size_t r = t->leb1_run(g, n * 2, &sum);
        double dt = now() - t0;
        best = dt < best ? dt : best;
        sum += r;
    }
    printf("%-8s %-22s %8.2f GB/s (gap bytes read)\n", t->name, "leb1_run", n * 2 / best / 1e9);
    free(a); free(b); free(v); free(idx);
}


/* The BF16/FP16 gates over realistic weights (a few % change): GB/s of theta + delta + e read
 * (12 bytes per element), to set against the machine's streaming read. e is reset from a copy
 * before every run, outside the timing. */
static void bench_gate(const pulse_kernels *t)
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
            double t0 = now();
            k = t->gate[view](theta, delta, e, n, idx, val);
            double dt = now() - t0;
            best = dt < best ? dt : best;
        }
        char label[64];
        snprintf(label, sizeof label, "gate %s %.1f%%", views[view].name, 100.0 * k / n);
        printf("%-8s %-22s %8.2f GB/s (theta+delta+e read), %.0f M elements/s\n", t->name, label,
               12.0 * n / best / 1e9, n / best / 1e6);
    }
    free(theta); free(delta); free(e0); free(e); free(val); free(idx);
}

int main(int argc, char **argv)
{
    int bench = 0;
    const char *expect_name = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--bench"))
            bench = 1;
        else if (!strcmp(argv[i], "--bench-bytes") && i + 1 < argc)
            bench_bytes = (size_t)strtoull(argv[++i], NULL, 0) & ~(size_t)1;
        else if (!strcmp(argv[i], "--expect-name") && i + 1 < argc)
            expect_name = argv[++i];
        else {
            fprintf(stderr, "usage: checkkernels [--bench [--bench-bytes N]] [--expect-name NAME]\n");
            return 2;
        }
    }

    pulse_kernels ref;
    pulse_kernels_init_c(&ref);
    printf("cpu flags 0x%x (PULSE_CPU_MASK=%s), dispatch table: %s\n", pulse_cpu_flags(),
           getenv("PULSE_CPU_MASK") ? getenv("PULSE_CPU_MASK") : "unset", pulse_kernels_get()->name);

    if (bench) {
        if (bench_bytes == (64u << 20))
            bench_machine();
        bench_table(&ref);
        bench_gate(&ref);
        for (size_t i = 0; i < sizeof isas / sizeof isas[0]; i++) {
            pulse_kernels t = ref;
            if (isas[i].init(&t) == 0) {
                bench_table(&t);
                bench_gate(&t);
            }
        }
        return 0;
    }

    if (expect_name) {
        CHECK(!strcmp(pulse_kernels_get()->name, expect_name));
        if (strcmp(pulse_kernels_get()->name, expect_name))
            fprintf(stderr, "dispatch table is %s, expected %s\n", pulse_kernels_get()->name, expect_name);
    }

    /* The reference against itself too: proves the harness (guards, canaries, round trips). */
    cur_isa = "c";
    check_width8(&ref, &ref);
    check_width16(&ref, &ref);
    check_width32(&ref, &ref);
    check_gaps_errors(&ref, &ref);
    check_leb1_run(&ref, &ref);
    check_rice_gaps(&ref, &ref);
    check_ulp_pack2(&ref, &ref);
    check_views();
    check_gate(&ref, &ref);
    printf("tested: c\n");

    for (size_t i = 0; i < sizeof isas / sizeof isas[0]; i++) {
        pulse_kernels t = ref;
        int masked = (env_mask() & isas[i].flag) != 0;
        if (isas[i].init(&t) != 0) {
            if (cpu_has_raw(isas[i].flag) && !masked) {
                fprintf(stderr, "the CPU has %s but its table was not tested (not built or not detected)\n",
                        isas[i].name);
                CHECK(0);
            } else {
                printf("skipped: %s (%s)\n", isas[i].name, masked ? "masked" : "not on this CPU/build");
            }
            continue;
        }
        cur_isa = isas[i].name;
        check_width8(&t, &ref);
        check_width16(&t, &ref);
        check_width32(&t, &ref);
        check_gaps_errors(&t, &ref);
        check_leb1_run(&t, &ref);
        check_rice_gaps(&t, &ref);
        check_ulp_pack2(&t, &ref);
        check_gate(&t, &ref);
        printf("tested: %s\n", isas[i].name);
    }
    return check_done("checkkernels");
}
