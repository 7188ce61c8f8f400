/* SPDX-License-Identifier: Apache-2.0 */
/* The context coder's band counts from the 4 band planes, shared by the SIMD tables (each compiles it with its own popcount). */
#ifndef PULSE_KERNELS_CTX_H
#define PULSE_KERNELS_CTX_H

#include <stdint.h>
#include <string.h>

/* wc[b] = the elements of band b among the valid bits v of one word: the 16 band member words
 * built from 4 + 4 pair products (bits 0-1 and bits 2-3 of b), one popcount each, packed into
 * two 64-bit stores. The planes are 0 outside v. */
static inline void ctx_word_counts(uint64_t p0, uint64_t p1, uint64_t p2, uint64_t p3, uint64_t v, uint8_t *wc)
{
    uint64_t n0 = ~p0 & v, n1 = ~p1, n2 = ~p2, n3 = ~p3;
    uint64_t lo[4] = {n0 & n1, p0 & n1, n0 & p1, p0 & p1};
    uint64_t hi[4] = {n2 & n3, p2 & n3, n2 & p3, p2 & p3};
    uint64_t c[2] = {0, 0};
    for (unsigned b = 0; b < 16; b++)
        c[b >> 3] |= (uint64_t)__builtin_popcountll(lo[b & 3] & hi[b >> 2]) << (8 * (b & 7));
    memcpy(wc, c, 16);
}

/* members[b] = the sum of wc[16w + b] over nw words, in 16-bit lanes of four registers,
 * flushed before a lane can pass 65535 (a byte is at most 64). */
static inline void ctx_members_sum(const uint8_t *wc, size_t nw, uint32_t members[16])
{
    const uint64_t B16 = 0x00FF00FF00FF00FFull;
    uint64_t t[4] = {0, 0, 0, 0};
    for (unsigned b = 0; b < 16; b++)
        members[b] = 0;
    for (size_t w = 0; w < nw; w++) {
        uint64_t lo, hi;
        memcpy(&lo, wc + 16 * w, 8);
        memcpy(&hi, wc + 16 * w + 8, 8);
        t[0] += lo & B16;         /* bands 0, 2, 4, 6 */
        t[1] += (lo >> 8) & B16;  /* 1, 3, 5, 7 */
        t[2] += hi & B16;         /* 8, 10, 12, 14 */
        t[3] += (hi >> 8) & B16;  /* 9, 11, 13, 15 */
        if ((w & 511) == 511 || w == nw - 1) {
            for (unsigned q = 0; q < 4; q++) {
                for (unsigned i = 0; i < 4; i++)
                    members[(q >> 1) * 8 + (q & 1) + 2 * i] += (uint32_t)(t[q] >> (16 * i)) & 0xFFFFu;
                t[q] = 0;
            }
        }
    }
}

#if defined(__BMI2__)
#include <immintrin.h>

/* m[q] += c[q] for 16 bands. */
static inline void ctx_add16(uint32_t *m, const uint8_t *c)
{
    __m128i x = _mm_loadu_si128((const __m128i *)c);
    for (unsigned q = 0; q < 4; q++) {
        __m128i s = _mm_add_epi32(_mm_loadu_si128((const __m128i *)(m + 4 * q)), _mm_cvtepu8_epi32(x));
        _mm_storeu_si128((__m128i *)(m + 4 * q), s);
        x = _mm_srli_si128(x, 4);
    }
}

/* The bit number of the r-th (from 0) set bit of x: one pdep. */
static inline unsigned ctx_select_pdep(uint64_t x, unsigned r)
{
    return (unsigned)__builtin_ctzll(_pdep_u64(1ull << r, x));
}

/* ctx_select with BMI2 (the walk of kernels_c.c's ctx_select_c, the member picked by pdep). */
static inline size_t ctx_select_walk_bmi2(const uint64_t *plane, const uint8_t *wc, size_t nw, unsigned band,
                                     const uint32_t *rank, size_t c, int invert, uint32_t *pos)
#define SELECT ctx_select_pdep
{
    uint64_t x[4];
    for (unsigned k = 0; k < 4; k++)
        x[k] = (band >> k & 1u) ? 0 : ~0ull;
    size_t out = 0;
    if (!invert) {
        uint64_t base = 0;
        size_t w = 0;
        for (size_t j = 0; j < c; j++) {
            uint64_t id = rank[j];
            unsigned pc;
            while (id >= base + (pc = wc[16 * w + band])) {
                base += pc;
                w++;
            }
            const uint64_t *pl = plane + 5 * w;
            uint64_t mw = pl[4] & (pl[0] ^ x[0]) & (pl[1] ^ x[1]) & (pl[2] ^ x[2]) & (pl[3] ^ x[3]);
            pos[j] = (uint32_t)(64 * w + SELECT(mw, (unsigned)(id - base)));
        }
        return c;
    }
    uint64_t base = 0, nx = c ? rank[0] : UINT64_MAX;
    size_t got = c ? 1 : 0;
    for (size_t w = 0; w < nw; w++) {
        unsigned pc = wc[16 * w + band];
        if (!pc)
            continue;
        const uint64_t *pl = plane + 5 * w;
        uint64_t mw = pl[4] & (pl[0] ^ x[0]) & (pl[1] ^ x[1]) & (pl[2] ^ x[2]) & (pl[3] ^ x[3]), sel = 0;
        while (nx < base + pc) {
            sel |= 1ull << SELECT(mw, (unsigned)(nx - base));
            nx = got < c ? rank[got++] : UINT64_MAX;
        }
        for (uint64_t chb = mw & ~sel; chb; chb &= chb - 1)
            pos[out++] = (uint32_t)(64 * w + (unsigned)__builtin_ctzll(chb));
        base += pc;
    }
    return out;
}
#undef SELECT

/* ctx_select with BMI2. Listed members: 8 words' counts a step, the words to skip counted by
 * comparisons instead of found by a branch per word, which mispredicts about once a change. */
static inline size_t ctx_select_bmi2(const uint64_t *plane, const uint8_t *wc, size_t nw, unsigned band,
                                     const uint32_t *rank, size_t c, int invert, uint32_t *pos)
{
    if (invert)
        return ctx_select_walk_bmi2(plane, wc, nw, band, rank, c, invert, pos);
    uint64_t x[4];
    for (unsigned k = 0; k < 4; k++)
        x[k] = (band >> k & 1u) ? 0 : ~0ull;
    uint64_t base = 0;
    size_t w = 0;
    for (size_t j = 0; j < c; j++) {
        uint64_t id = rank[j];
        for (;;) {
            if (w + 8 > nw) {
                unsigned pc;
                while (id >= base + (pc = wc[16 * w + band])) {
                    base += pc;
                    w++;
                }
                break;
            }
            const uint8_t *q = wc + 16 * w + band;
            uint64_t r = id - base;
            uint32_t s[9];
            s[0] = 0;
            for (unsigned i = 0; i < 8; i++)
                s[i + 1] = s[i] + q[16 * i];
            unsigned k = 0;
            for (unsigned i = 1; i <= 8; i++)
                k += s[i] <= r;
            base += s[k];
            w += k;
            if (k < 8)
                break;
        }
        const uint64_t *pl = plane + 5 * w;
        uint64_t mw = pl[4] & (pl[0] ^ x[0]) & (pl[1] ^ x[1]) & (pl[2] ^ x[2]) & (pl[3] ^ x[3]);
        pos[j] = (uint32_t)(64 * w + ctx_select_pdep(mw, (unsigned)(id - base)));
    }
    return c;
}

/* ctx_gaps16 with hardware popcount, the running counts advanced 16 at a time by SSE4.1. */
static inline size_t ctx_gaps16_sse(const uint16_t *a, const uint16_t *b, const uint64_t *plane, const uint8_t *wc,
                                    const uint64_t *chw, size_t nw, const uint32_t off[16], uint32_t *gap,
                                    uint16_t *z, uint32_t cnt[16])
#define POP __builtin_popcountll
#define ADDW(m, c) ctx_add16(m, c)
{
    uint32_t m[16], prev[16];   /* members before the word; the band list's last rank + 1 */
    size_t k = 0;
    for (unsigned q = 0; q < 16; q++) {
        m[q] = 0;
        prev[q] = 0;
        cnt[q] = 0;
    }
    for (size_t w = 0; w < nw; w++) {
        const uint64_t *pl = plane + 5 * w;
        uint64_t ch = chw[w];
        if (ch) {
            uint64_t p0 = pl[0], p1 = pl[1], p2 = pl[2], p3 = pl[3], v = pl[4];
            for (; ch; ch &= ch - 1) {
                unsigned j = (unsigned)__builtin_ctzll(ch);
                unsigned bd = (unsigned)((p0 >> j & 1) | (p1 >> j & 1) << 1 | (p2 >> j & 1) << 2 | (p3 >> j & 1) << 3);
                uint64_t mw = v & (p0 ^ (0 - (uint64_t)(~bd & 1))) & (p1 ^ (0 - (uint64_t)(~bd >> 1 & 1))) &
                              (p2 ^ (0 - (uint64_t)(~bd >> 2 & 1))) & (p3 ^ (0 - (uint64_t)(~bd >> 3 & 1)));
                uint32_t r = m[bd] + (uint32_t)POP(mw & ((1ull << j) - 1));
                size_t at = off[bd] + cnt[bd]++;
                gap[at] = r - prev[bd];
                prev[bd] = r + 1;
                size_t i = 64 * w + j;
                uint16_t d = (uint16_t)(b[i] - a[i]);
                z[at] = (uint16_t)((uint16_t)(d << 1) ^ (uint16_t)(0u - (d >> 15)));
                k++;
            }
        }
        ADDW(m, wc + 16 * w);
    }
    return k;
}
#undef POP
#undef ADDW
#endif

#endif
