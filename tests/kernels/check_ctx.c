/* SPDX-License-Identifier: Apache-2.0 */
/* Kernel family ctx: ctx_ebase16, ctx_planes16, ctx_select and ctx_gaps16, the context coder's exponent base, band planes and counts, against their definition and the reference. */
#include <stdlib.h>
#include <string.h>

#include "checkasm.h"

enum { CTX_PATTERNS = 6 };
static const char *const ctx_pattern_name[CTX_PATTERNS] = {
    "random", "weights", "one band (top)", "one band (0)", "exponents 0/255", "max at the end"};

/* OLD by pattern; NEW = OLD with about `pct` percent changed (a low bit, the sign, anything). */
static void ctx_fill(uint16_t *a, uint16_t *b, size_t n, int pattern, unsigned pct)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t x = rnd();
        uint16_t v;
        switch (pattern) {
        case 0: v = (uint16_t)x; break;
        case 1: v = (uint16_t)((x & 0x807F) | ((108 + (x >> 20) % 17) << 7)); break;
        case 2: v = (uint16_t)((x & 0x807F) | (130u << 7)); break;
        case 3: v = (uint16_t)(x & 0x807F); break;
        case 4: v = (uint16_t)((x & 0x807F) | ((x >> 20) & 1 ? 0x7F80u : 0)); break;
        default: v = (uint16_t)((x & 0x807F) | ((100 + (x >> 20) % 8) << 7)); break;
        }
        a[i] = v;
        uint64_t y = rnd();
        b[i] = y % 100 < pct ? (uint16_t)(v ^ (y >> 32 & 1 ? 0x8000u : 1u + (uint16_t)(y >> 40) % 0x7FFF)) : v;
    }
    if (pattern == 5 && n)
        a[n - 1] = (uint16_t)(a[n - 1] | 0x7000u);   /* the largest exponent in the tail */
}

/* The definition, element by element. */
static int ctx_definition(const uint16_t *a, const uint16_t *b, size_t n, unsigned ebase, const uint64_t *plane,
                          const uint8_t *wc, const uint32_t *members, const uint64_t *chw)
{
    uint32_t mem[16] = {0};
    size_t nw = (n + 63) / 64;
    for (size_t w = 0; w < nw; w++) {
        uint8_t cnt[16] = {0};
        for (unsigned j = 0; j < 64; j++) {
            size_t i = w * 64 + j;
            unsigned band = 0, valid = i < n, ch = 0;
            if (valid) {
                unsigned e = (a[i] >> 7) & 0xFF;
                band = e > ebase ? e - ebase : 0;
                band = band > 15 ? 15 : band;
                cnt[band]++;
                ch = a[i] != b[i];
            }
            for (unsigned k = 0; k < 4; k++)
                if (((plane[5 * w + k] >> j) & 1) != ((band >> k) & 1))
                    return 0;
            if (((plane[5 * w + 4] >> j) & 1) != valid || ((chw[w] >> j) & 1) != ch)
                return 0;
        }
        if (memcmp(cnt, wc + 16 * w, 16))
            return 0;
        for (unsigned q = 0; q < 16; q++)
            mem[q] += cnt[q];
    }
    return !memcmp(mem, members, sizeof mem);
}

/* ctx_select on every band with members: a random ascending subset of the ranks (empty, one,
 * some, all), listed and inverted, against the positions of the members by definition. */
static void ctx_select_case(const pulse_kernels *t, const pulse_kernels *r, const uint16_t *a, size_t n,
                            unsigned ebase, const uint64_t *plane, const uint8_t *bc, const uint32_t *members)
{
    size_t nw = (n + 63) / 64;
    uint32_t *mpos = malloc((n + 1) * 4), *rank = malloc((n + 1) * 4), *want = malloc((n + 1) * 4);
    if (!mpos || !rank || !want) { perror("malloc"); exit(2); }
    for (unsigned band = 0; band < 16; band++) {
        uint32_t m = 0;
        for (size_t i = 0; i < n; i++) {
            unsigned e = (a[i] >> 7) & 0xFF, bd = e > ebase ? e - ebase : 0;
            if ((bd > 15 ? 15 : bd) == band)
                mpos[m++] = (uint32_t)i;
        }
        if (m != members[band] || !m)
            continue;
        unsigned den = 1 + (unsigned)(rnd() % 4);  /* listed: about 0, 1/2, 1/3, 1/4 of them, or all */
        int mix = (int)(rnd() % 5);
        size_t c = 0, nc = 0;
        for (uint32_t i = 0; i < m; i++) {
            int listed = mix == 0 ? 0 : mix == 1 ? 1 : mix == 2 ? i == m - 1 : rnd() % den == 0;
            if (listed)
                rank[c++] = i;
            else
                want[nc++] = mpos[i];
        }
        for (int inv = 0; inv < 2; inv++) {
            size_t room = inv ? nc : c;
            uint32_t *p_r = canary_alloc(room * 4 + 4), *p_t = canary_alloc(room * 4 + 4);
            size_t k_r = r->ctx_select(plane, bc + nw * band, nw, band, rank, c, inv, p_r);
            size_t k_t = t->ctx_select(plane, bc + nw * band, nw, band, rank, c, inv, p_t);
            int def = k_r == room;
            for (size_t j = 0; def && j < room; j++)
                def = p_r[j] == (inv ? want[j] : mpos[rank[j]]);
            CHECK_SAME(def, "ctx_select reference");
            CHECK_SAME(k_t == k_r && !memcmp(p_t, p_r, room * 4), "ctx_select");
            CHECK_SAME(canary_intact(p_t, room * 4 + 4), "ctx_select overrun");
            canary_free(p_r); canary_free(p_t);
        }
        /* in place: the listed ranks turned into their positions */
        uint32_t *io = malloc((c + 1) * 4);
        if (!io) { perror("malloc"); exit(2); }
        memcpy(io, rank, c * 4);
        t->ctx_select(plane, bc + nw * band, nw, band, io, c, 0, io);
        int same = 1;
        for (size_t j = 0; j < c; j++)
            same = same && io[j] == mpos[rank[j]];
        CHECK_SAME(same, "ctx_select in place");
        free(io);
    }
    free(mpos); free(rank); free(want);
}

/* ctx_gaps16 against a definition that counts every band's members element by element. */
static void ctx_gaps_case(const pulse_kernels *t, const pulse_kernels *r, const uint16_t *a, const uint16_t *b,
                          size_t n, unsigned ebase, const uint64_t *plane, const uint8_t *wc,
                          const uint32_t *members, const uint64_t *chw)
{
    size_t nw = (n + 63) / 64;
    uint32_t off[16], seen[16] = {0}, cnt_d[16] = {0}, prev[16] = {0}, cnt_r[16], cnt_t[16];
    for (unsigned q = 0, o = 0; q < 16; q++) {
        off[q] = o;
        o += members[q];
    }
    uint32_t *g_d = calloc(n + 1, 4), *g_r = canary_alloc(n * 4), *g_t = canary_alloc(n * 4);
    uint16_t *z_d = calloc(n + 1, 2), *z_r = canary_alloc(n * 2), *z_t = canary_alloc(n * 2);
    if (!g_d || !z_d) { perror("malloc"); exit(2); }
    memset(g_r, 0, n * 4); memset(g_t, 0, n * 4); memset(z_r, 0, n * 2); memset(z_t, 0, n * 2);
    size_t k_d = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned e = (a[i] >> 7) & 0xFF, bd = e > ebase ? e - ebase : 0;
        bd = bd > 15 ? 15 : bd;
        if (a[i] != b[i]) {
            size_t at = off[bd] + cnt_d[bd]++;
            g_d[at] = seen[bd] - prev[bd];
            prev[bd] = seen[bd] + 1;
            uint16_t d = (uint16_t)(b[i] - a[i]);
            z_d[at] = (uint16_t)((uint16_t)(d << 1) ^ (uint16_t)(0u - (d >> 15)));
            k_d++;
        }
        seen[bd]++;
    }
    size_t k_r = r->ctx_gaps16(a, b, plane, wc, chw, nw, off, g_r, z_r, cnt_r);
    size_t k_t = t->ctx_gaps16(a, b, plane, wc, chw, nw, off, g_t, z_t, cnt_t);
    CHECK_SAME(k_r == k_d && !memcmp(cnt_r, cnt_d, sizeof cnt_d) && !memcmp(g_r, g_d, n * 4)
               && !memcmp(z_r, z_d, n * 2), "ctx_gaps16 reference");
    CHECK_SAME(k_t == k_r && !memcmp(cnt_t, cnt_r, sizeof cnt_r) && !memcmp(g_t, g_r, n * 4)
               && !memcmp(z_t, z_r, n * 2), "ctx_gaps16");
    CHECK_SAME(canary_intact(g_t, n * 4) && canary_intact(z_t, n * 2), "ctx_gaps16 overrun");
    free(g_d); free(z_d);
    canary_free(g_r); canary_free(g_t); canary_free(z_r); canary_free(z_t);
}

static void ctx_case(const pulse_kernels *t, const pulse_kernels *r, const uint16_t *a, const uint16_t *b, size_t n)
{
    unsigned eb_r = r->ctx_ebase16(a, n), eb_t = t->ctx_ebase16(a, n);
    uint16_t mx = 0;
    for (size_t i = 0; i < n; i++)
        mx = (a[i] & 0x7F80u) > mx ? (uint16_t)(a[i] & 0x7F80u) : mx;
    unsigned eb_d = (mx >> 7) > 15 ? (mx >> 7) - 15 : 0;
    CHECK_SAME(eb_r == eb_d, "ctx_ebase16 reference");
    CHECK_SAME(eb_t == eb_r, "ctx_ebase16");
    if (!n)
        return;
    size_t nw = (n + 63) / 64;
    /* the chunk's own base, and another one (bands clamped at both ends) */
    unsigned ebs[2] = {eb_r, (unsigned)(rnd() % 241)};
    for (int e = 0; e < 2; e++) {
        uint64_t *pl_r = canary_alloc(nw * 40), *pl_t = canary_alloc(nw * 40);
        uint8_t *wc_r = canary_alloc(nw * 16), *wc_t = canary_alloc(nw * 16);
        uint8_t *bc_r = canary_alloc(nw * 16), *bc_t = canary_alloc(nw * 16);
        uint64_t *ch_r = canary_alloc(nw * 8), *ch_t = canary_alloc(nw * 8);
        uint32_t m_r[16], m_t[16], m_n[16];
        unsigned pe_r = r->ctx_planes16(a, b, n, ebs[e], pl_r, wc_r, bc_r, m_r, ch_r);
        unsigned pe_t = t->ctx_planes16(a, b, n, ebs[e], pl_t, wc_t, bc_t, m_t, ch_t);
        CHECK_SAME(pe_r == eb_d, "ctx_planes16 reference exponent base");
        CHECK_SAME(pe_t == eb_d, "ctx_planes16 exponent base");
        CHECK_SAME(ctx_definition(a, b, n, ebs[e], pl_r, wc_r, m_r, ch_r), "ctx_planes16 reference");
        int by_band = 1;   /* bc: wc band after band */
        for (size_t w = 0; w < nw; w++)
            for (unsigned q = 0; q < 16; q++)
                by_band = by_band && bc_r[nw * q + w] == wc_r[16 * w + q];
        CHECK_SAME(by_band, "ctx_planes16 reference band counts");
        CHECK_SAME(!memcmp(pl_t, pl_r, nw * 40) && !memcmp(wc_t, wc_r, nw * 16) && !memcmp(bc_t, bc_r, nw * 16)
                   && !memcmp(m_t, m_r, sizeof m_r) && !memcmp(ch_t, ch_r, nw * 8), "ctx_planes16");
        CHECK_SAME(canary_intact(pl_t, nw * 40) && canary_intact(wc_t, nw * 16) && canary_intact(bc_t, nw * 16)
                   && canary_intact(ch_t, nw * 8), "ctx_planes16 overrun");
        /* without NEW and the band counts: the same planes and counts, chw and bc untouched */
        memset(pl_t, 0xA5, nw * 40);
        memset(wc_t, 0xA5, nw * 16);
        memset(bc_t, 0x5A, nw * 16);
        unsigned pe_n = t->ctx_planes16(a, NULL, n, ebs[e], pl_t, wc_t, NULL, m_n, NULL);
        CHECK_SAME(pe_n == eb_d, "ctx_planes16 exponent base without NEW");
        int untouched = 1;
        for (size_t i = 0; i < nw * 16; i++)
            untouched = untouched && bc_t[i] == 0x5A;
        CHECK_SAME(!memcmp(pl_t, pl_r, nw * 40) && !memcmp(wc_t, wc_r, nw * 16) && !memcmp(m_n, m_r, sizeof m_r)
                   && untouched, "ctx_planes16 without NEW");
        /* NEW without the band counts, then the band counts without NEW */
        memset(ch_t, 0xA5, nw * 8);
        t->ctx_planes16(a, b, n, ebs[e], pl_t, wc_t, NULL, m_n, ch_t);
        untouched = 1;
        for (size_t i = 0; i < nw * 16; i++)
            untouched = untouched && bc_t[i] == 0x5A;
        CHECK_SAME(!memcmp(pl_t, pl_r, nw * 40) && !memcmp(wc_t, wc_r, nw * 16) && !memcmp(m_n, m_r, sizeof m_r)
                   && !memcmp(ch_t, ch_r, nw * 8) && untouched, "ctx_planes16 without bc");
        memset(ch_t, 0xA5, nw * 8);
        t->ctx_planes16(a, NULL, n, ebs[e], pl_t, wc_t, bc_t, m_n, NULL);
        untouched = 1;
        for (size_t i = 0; i < nw * 8; i++)
            untouched = untouched && ((uint8_t *)ch_t)[i] == 0xA5;
        CHECK_SAME(!memcmp(pl_t, pl_r, nw * 40) && !memcmp(wc_t, wc_r, nw * 16) && !memcmp(bc_t, bc_r, nw * 16)
                   && !memcmp(m_n, m_r, sizeof m_r) && untouched, "ctx_planes16 bc without NEW");
        if (e == 0)
            ctx_select_case(t, r, a, n, ebs[e], pl_r, bc_r, m_r);
        ctx_gaps_case(t, r, a, b, n, ebs[e], pl_r, wc_r, m_r, ch_r);
        canary_free(pl_r); canary_free(pl_t); canary_free(wc_r); canary_free(wc_t);
        canary_free(bc_r); canary_free(bc_t); canary_free(ch_r); canary_free(ch_t);
    }
}

void checkasm_check_ctx(const pulse_kernels *t, const pulse_kernels *r)
{
    static const unsigned pcts[] = {0, 5, 100};
    for (size_t li = 0; li < checkasm_lengths_count; li++) {
        size_t n = checkasm_lengths[li];
        for (int p = 0; p < CTX_PATTERNS; p++) {
            for (int placement = 0; placement < 2; placement++) {
                cur_n = n;
                cur_pattern = ctx_pattern_name[p];
                cur_placement = placement;
                guarded ga, gb;
                uint16_t *a, *b;
                if (placement == 0) {   /* ending at a PROT_NONE page */
                    a = guard_alloc(&ga, n * 2);
                    b = guard_alloc(&gb, n * 2);
                } else {                /* misaligned: 1..7 elements past a 64-byte boundary */
                    size_t off = 1 + (li + (size_t)p) % 7;
                    a = guard_alloc(&ga, (n + 64) * 2 + 64);
                    a = (uint16_t *)(((uintptr_t)a + 63) & ~(uintptr_t)63) + off;
                    b = guard_alloc(&gb, (n + 64) * 2 + 64);
                    b = (uint16_t *)(((uintptr_t)b + 63) & ~(uintptr_t)63) + (8 - off);
                }
                ctx_fill(a, b, n, p, pcts[(li + (size_t)p + (size_t)placement) % 3]);
                ctx_case(t, r, a, b, n);
                guard_free(&ga);
                guard_free(&gb);
            }
        }
    }
}

/* One 2^20-element chunk of weight-like values (a context-coded chunk), in cache. */
void checkasm_bench_ctx(const pulse_kernels *t)
{
    size_t n = 1u << 20, nw = n / 64;
    int reps = 50;
    uint16_t *a = malloc(n * 2), *b = malloc(n * 2);
    uint64_t *pl = malloc(nw * 40), *ch = malloc(nw * 8);
    uint8_t *wc = malloc(nw * 16), *bc = malloc(nw * 16);
    if (!a || !b || !pl || !ch || !wc || !bc) { perror("malloc"); exit(2); }
    ctx_fill(a, b, n, 1, 5);
    uint32_t m[16];
    double be = 1e9, bp = 1e9, bpn = 1e9;
    unsigned eb = 0;
    for (int rep = 0; rep < reps; rep++) {
        double t0 = checkasm_now();
        eb = t->ctx_ebase16(a, n);
        double t1 = checkasm_now();
        t->ctx_planes16(a, NULL, n, eb, pl, wc, bc, m, NULL);
        double t2 = checkasm_now();
        t->ctx_planes16(a, b, n, eb, pl, wc, NULL, m, ch);
        double t3 = checkasm_now();
        be = t1 - t0 < be ? t1 - t0 : be;
        bp = t2 - t1 < bp ? t2 - t1 : bp;
        bpn = t3 - t2 < bpn ? t3 - t2 : bpn;
    }
    printf("%-8s %-22s %8.3f ms a 2^20 chunk\n", t->name, "ctx_ebase16", 1e3 * be);
    printf("%-8s %-22s %8.3f ms a 2^20 chunk\n", t->name, "ctx_planes16 +bc", 1e3 * bp);
    printf("%-8s %-22s %8.3f ms a 2^20 chunk\n", t->name, "ctx_planes16 +chw", 1e3 * bpn);
    /* ctx_gaps16 right after the planes of OLD and NEW, as the encoder runs it */
    {
        uint32_t off[16], cnt[16];
        for (unsigned q = 0, o = 0; q < 16; q++) {
            off[q] = o;
            o += m[q];
        }
        uint32_t *gap = malloc(n * 4);
        uint16_t *z = malloc(n * 2);
        if (!gap || !z) { perror("malloc"); exit(2); }
        double bg = 1e9;
        size_t k = 0;
        for (int rep = 0; rep < reps; rep++) {
            t->ctx_planes16(a, b, n, eb, pl, wc, NULL, m, ch);
            double t0 = checkasm_now();
            k = t->ctx_gaps16(a, b, pl, wc, ch, nw, off, gap, z, cnt);
            double t1 = checkasm_now();
            bg = t1 - t0 < bg ? t1 - t0 : bg;
        }
        printf("%-8s %-22s %8.3f ms a 2^20 chunk (%zu changes)\n", t->name, "ctx_gaps16", 1e3 * bg, k);
        free(gap);
        free(z);
    }
    /* ctx_select over the 16 bands, about 4000 members listed in each (as a 4 % step lists
     * them), then the same ranks inverted */
    uint32_t *rank = malloc(n * 4), *pos = malloc(n * 4);
    size_t roff[17];
    if (!rank || !pos) { perror("malloc"); exit(2); }
    roff[0] = 0;
    for (unsigned band = 0; band < 16; band++) {
        size_t c = 0;
        uint64_t every = m[band] / 4000 + 1;
        for (uint32_t i = 0; i < m[band]; i++)
            if (rnd() % every == 0)
                rank[roff[band] + c++] = i;
        roff[band + 1] = roff[band] + c;
    }
    double bs = 1e9, bi = 1e9;
    for (int rep = 0; rep < reps; rep++) {
        double t0 = checkasm_now();
        for (unsigned band = 0; band < 16; band++)
            t->ctx_select(pl, bc + nw * band, nw, band, rank + roff[band], roff[band + 1] - roff[band], 0, pos);
        double t1 = checkasm_now();
        for (unsigned band = 0; band < 16; band++)
            t->ctx_select(pl, bc + nw * band, nw, band, rank + roff[band], roff[band + 1] - roff[band], 1, pos);
        double t2 = checkasm_now();
        bs = t1 - t0 < bs ? t1 - t0 : bs;
        bi = t2 - t1 < bi ? t2 - t1 : bi;
    }
    printf("%-8s %-22s %8.3f ms a 2^20 chunk (%zu listed)\n", t->name, "ctx_select", 1e3 * bs, roff[16]);
    printf("%-8s %-22s %8.3f ms a 2^20 chunk\n", t->name, "ctx_select inverted", 1e3 * bi);
    free(rank); free(pos);
    free(a); free(b); free(pl); free(ch); free(wc); free(bc);
}
