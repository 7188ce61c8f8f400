/* SPDX-License-Identifier: Apache-2.0 */
/* Kernel family apply: the decoders of a patch's position and value streams (gaps_decode, leb1_run, ulp2_add16) against the reference. */
#include <stdlib.h>
#include <string.h>

#include "checkasm.h"

/* ulp2_add16 from the streams a patch holds for the changes a -> b (LEB128 gaps, 2-bit
 * symbols and escapes, packed by the reference): adding them to a copy of a must give b,
 * for the reference and the table under test. Each stream ends at a guard page (the symbols
 * after their 4 zero bytes of padding), so a read past what the contract allows faults; the
 * output has canaries. */
void check_ulp2_add16(const pulse_kernels *t, const pulse_kernels *r, const uint16_t *a,
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

/* gaps_encode on valid positions, then gaps_decode with limit n (fits), the last position
 * (reaches the limit: refused) and limit 0. */
void check_gaps(const pulse_kernels *t, const pulse_kernels *r, const uint32_t *idx, size_t k,
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

void checkasm_check_apply(const pulse_kernels *t, const pulse_kernels *r)
{
    check_gaps_errors(t, r);
    check_leb1_run(t, r);
}
