/* SPDX-License-Identifier: Apache-2.0 */
/* The context coder's pieces shared by the kernel tables: band counts from the 4 band planes, a last word's padding, select and the encoder's walk (each table compiles them with its own popcount). */
#ifndef PULSE_KERNELS_CTX_H
#define PULSE_KERNELS_CTX_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__SSE4_1__)
#include <smmintrin.h>

/* The largest of the eight 16-bit lanes of q (the x86 tables' last step of a max reduction). */
static inline uint16_t ctx_hmax16(__m128i q)
{
    q = _mm_max_epu16(q, _mm_srli_si128(q, 8));
    q = _mm_max_epu16(q, _mm_srli_si128(q, 4));
    q = _mm_max_epu16(q, _mm_srli_si128(q, 2));
    return (uint16_t)_mm_extract_epi16(q, 0);
}
#endif

/* A chunk's last word of valid < 64 elements as the SIMD ctx_planes16 read it: *a (and *b,
 * when given) pointed at copies in ta (tb), zero past valid, so that whole-word loads stay
 * inside the caller's arrays (the padding reads as band 0, outside the valid bits). */
static inline void ctx_pad_word(const uint16_t **a, const uint16_t **b, size_t valid, uint16_t ta[64],
                                uint16_t tb[64])
{
    memset(ta, 0, 64 * sizeof ta[0]);
    memcpy(ta, *a, valid * 2);
    *a = ta;
    if (*b) {
        memset(tb, 0, 64 * sizeof tb[0]);
        memcpy(tb, *b, valid * 2);
        *b = tb;
    }
}

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

/* bc[nw b + w] = wc[16w + b]: the counts band after band, 16 words a 16x16 byte transpose
 * where SSE2 has one. */
static inline void ctx_counts_by_band(const uint8_t *wc, size_t nw, uint8_t *bc)
{
    size_t w = 0;
#if defined(__SSE2__)
    for (; w + 16 <= nw; w += 16) {
        __m128i r[16], t[16];
        for (unsigned i = 0; i < 16; i++)
            r[i] = _mm_loadu_si128((const __m128i *)(wc + 16 * (w + i)));
        for (unsigned i = 0; i < 8; i++) {
            t[i] = _mm_unpacklo_epi8(r[2 * i], r[2 * i + 1]);
            t[i + 8] = _mm_unpackhi_epi8(r[2 * i], r[2 * i + 1]);
        }
        /* t[i]: bands 0-7 of words 2i, 2i+1 interleaved; t[8+i]: bands 8-15 */
        for (unsigned h = 0; h < 2; h++) {
            __m128i *u = t + 8 * h, v[8], y[8];
            for (unsigned i = 0; i < 4; i++) {
                v[i] = _mm_unpacklo_epi16(u[2 * i], u[2 * i + 1]);
                v[i + 4] = _mm_unpackhi_epi16(u[2 * i], u[2 * i + 1]);
            }
            /* v[i]: bands 0-3 (v[4+i]: 4-7) of words 4i..4i+3 */
            for (unsigned g = 0; g < 2; g++) {
                __m128i *z = v + 4 * g;
                y[4 * g + 0] = _mm_unpacklo_epi32(z[0], z[1]);
                y[4 * g + 1] = _mm_unpackhi_epi32(z[0], z[1]);
                y[4 * g + 2] = _mm_unpacklo_epi32(z[2], z[3]);
                y[4 * g + 3] = _mm_unpackhi_epi32(z[2], z[3]);
            }
            /* y[4g + 0]: bands 4g+0, 4g+1 of words 0-7; y[4g+1]: bands 4g+2, 4g+3 of words 0-7;
             * y[4g+2], y[4g+3]: the same of words 8-15 */
            for (unsigned g = 0; g < 2; g++) {
                for (unsigned e = 0; e < 2; e++) {
                    __m128i a = y[4 * g + e], b = y[4 * g + 2 + e];
                    unsigned band = 8 * h + 4 * g + 2 * e;
                    _mm_storeu_si128((__m128i *)(bc + nw * band + w), _mm_unpacklo_epi64(a, b));
                    _mm_storeu_si128((__m128i *)(bc + nw * (band + 1) + w), _mm_unpackhi_epi64(a, b));
                }
            }
        }
    }
#endif
    for (; w < nw; w++)
        for (unsigned b = 0; b < 16; b++)
            bc[nw * b + w] = wc[16 * w + b];
}

/* Population count without the instruction (a generic x86-64 build would otherwise call libgcc
 * for each of the millions of counts per chunk); the instruction where the target has it. */
static inline unsigned ctx_pop64(uint64_t x)
{
#if defined(__POPCNT__) || defined(__ARM_NEON) || defined(__aarch64__)
    return (unsigned)__builtin_popcountll(x);
#else
    x = x - ((x >> 1) & 0x5555555555555555ull);
    x = (x & 0x3333333333333333ull) + ((x >> 2) & 0x3333333333333333ull);
    x = (x + (x >> 4)) & 0x0F0F0F0F0F0F0F0Full;
    return (unsigned)((x * 0x0101010101010101ull) >> 56);
#endif
}

/* x[k] = ~0 where bit k of band is 0: a plane XOR x[k] is 1 where the element agrees with band. */
static inline void ctx_band_x(unsigned band, uint64_t x[4])
{
    for (unsigned k = 0; k < 4; k++)
        x[k] = (band >> k & 1u) ? 0 : ~0ull;
}

/* The members of word w of the band whose ctx_band_x is x: its valid bits where every plane
 * agrees with the band. */
static inline uint64_t ctx_member_word(const uint64_t *plane, size_t w, const uint64_t x[4])
{
    const uint64_t *pl = plane + 5 * w;
    return pl[4] & (pl[0] ^ x[0]) & (pl[1] ^ x[1]) & (pl[2] ^ x[2]) & (pl[3] ^ x[3]);
}

/* ctx_select inverted, one word: the members mw of word w (pc of them, base before it) whose
 * rank is not listed go to pos[out..], the listed ones (*nx the next, rank[*got..] after it)
 * passed by; returns the new out. One body for the reference and the BMI2 table, each passing
 * its select-in-word. */
typedef unsigned (*ctx_select_fn)(uint64_t x, unsigned r);

static inline __attribute__((always_inline)) size_t
ctx_emit_unlisted(uint64_t mw, size_t w, uint64_t base, unsigned pc, uint64_t *nx, size_t *got, const uint32_t *rank,
                  size_t c, uint32_t *pos, size_t out, ctx_select_fn select)
{
    uint64_t sel = 0;
    while (*nx < base + pc) {
        sel |= 1ull << select(mw, (unsigned)(*nx - base));
        *nx = *got < c ? rank[(*got)++] : UINT64_MAX;
    }
    for (uint64_t chb = mw & ~sel; chb; chb &= chb - 1)
        pos[out++] = (uint32_t)(64 * w + (unsigned)__builtin_ctzll(chb));
    return out;
}

/* The encoder's walk (ctx_gaps16): one pass over the changes in position order, each band's
 * running member count advanced by the words' counts. One body for the reference and the SIMD
 * tables, which pass their own popcount and 16-band add (static inline, so each is inlined
 * into its table's copy, as kernels_ulp16.h does). */
typedef unsigned (*ctx_pop_fn)(uint64_t x);
typedef void (*ctx_addw_fn)(uint32_t *m, const uint8_t *c);

static inline __attribute__((always_inline)) size_t
ctx_gaps16_walk(const uint16_t *a, const uint16_t *b, const uint64_t *plane, const uint8_t *wc, const uint64_t *chw,
                size_t nw, const uint32_t off[16], uint32_t *gap, uint16_t *z, uint32_t cnt[16], ctx_pop_fn pop,
                ctx_addw_fn addw)
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
                uint32_t r = m[bd] + (uint32_t)pop(mw & ((1ull << j) - 1));
                size_t at = off[bd] + cnt[bd]++;
                gap[at] = r - prev[bd];
                prev[bd] = r + 1;
                size_t i = 64 * w + j;
                uint16_t d = (uint16_t)(b[i] - a[i]);
                z[at] = (uint16_t)((uint16_t)(d << 1) ^ (uint16_t)(0u - (d >> 15)));
                k++;
            }
        }
        addw(m, wc + 16 * w);
    }
    return k;
}

#if defined(__BMI2__) && defined(__AVX2__)
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

/* The inclusive running sums of 32 words' counts q[0..32) as 16-bit lanes (q[0..15] in lo,
 * the rest in hi); returns their total. */
static inline unsigned ctx_prefix32(const uint8_t *q, __m256i *lo, __m256i *hi)
{
    __m256i a = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)q));
    __m256i b = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(q + 16)));
    a = _mm256_add_epi16(a, _mm256_slli_si256(a, 2));
    b = _mm256_add_epi16(b, _mm256_slli_si256(b, 2));
    a = _mm256_add_epi16(a, _mm256_slli_si256(a, 4));
    b = _mm256_add_epi16(b, _mm256_slli_si256(b, 4));
    a = _mm256_add_epi16(a, _mm256_slli_si256(a, 8));
    b = _mm256_add_epi16(b, _mm256_slli_si256(b, 8));
    /* each 128-bit lane's last sum carried into the upper lane */
    __m256i ca = _mm256_permute2x128_si256(a, a, 0x08), cb = _mm256_permute2x128_si256(b, b, 0x08);
    ca = _mm256_shufflehi_epi16(ca, 0xFF);
    cb = _mm256_shufflehi_epi16(cb, 0xFF);
    a = _mm256_add_epi16(a, _mm256_unpackhi_epi64(ca, ca));
    b = _mm256_add_epi16(b, _mm256_unpackhi_epi64(cb, cb));
    unsigned ta = (unsigned)_mm256_extract_epi16(a, 15);
    b = _mm256_add_epi16(b, _mm256_set1_epi16((short)ta));
    *lo = a;
    *hi = b;
    return (unsigned)_mm256_extract_epi16(b, 15);
}

/* The sum of 32 counts. */
static inline unsigned ctx_sum32(const uint8_t *q)
{
    __m256i s = _mm256_sad_epu8(_mm256_loadu_si256((const __m256i *)q), _mm256_setzero_si256());
    __m128i t = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    return (unsigned)(_mm_cvtsi128_si64(t) + _mm_extract_epi64(t, 1));
}

/* ctx_select with BMI2 and AVX2 on the band's contiguous counts, 32 words a block. Listed
 * members: a block's running sums once, then each rank's word by one compare of the rank
 * against all 32 sums (no chain from rank to rank but the block's base); blocks without a
 * listed member skipped by their sum. Inverted: the block's non-empty words by a mask. */
static inline size_t ctx_select_bmi2(const uint64_t *plane, const uint8_t *bc, size_t nw, unsigned band,
                                     const uint32_t *rank, size_t c, int invert, uint32_t *pos)
{
    uint64_t x[4];
    ctx_band_x(band, x);
    uint8_t tail[32];
    size_t full = nw & ~(size_t)31;   /* words in whole blocks; the rest read from tail */
    if (full < nw) {
        memset(tail, 0, sizeof tail);
        memcpy(tail, bc + full, nw - full);
    }
    if (!invert) {
        uint64_t base = 0;              /* members before block w0 */
        size_t w0 = 0;
        uint16_t sums[33];              /* sums[i]: members in the block's words before word i */
        __m256i lo = _mm256_setzero_si256(), hi = lo;
        unsigned tot = 0;               /* the built block's members (0: none built) */
        for (size_t j = 0; j < c; j++) {
            uint64_t id = rank[j];
            if (id - base >= tot) {
                base += tot;
                if (tot)
                    w0 += 32;
                for (;;) {
                    const uint8_t *q = w0 < full ? bc + w0 : tail;
                    unsigned t = ctx_sum32(q);
                    if (id - base < t) {
                        tot = ctx_prefix32(q, &lo, &hi);
                        sums[0] = 0;
                        _mm256_storeu_si256((__m256i *)(sums + 1), lo);
                        _mm256_storeu_si256((__m256i *)(sums + 17), hi);
                        break;
                    }
                    base += t;
                    w0 += 32;
                }
            }
            unsigned r = (unsigned)(id - base);
            __m256i rv = _mm256_set1_epi16((short)r);
            unsigned gt = (unsigned)_mm256_movemask_epi8(
                _mm256_packs_epi16(_mm256_cmpgt_epi16(lo, rv), _mm256_cmpgt_epi16(hi, rv)));
            unsigned k = 32 - (unsigned)__builtin_popcount(gt);   /* the words before r's */
            size_t w = w0 + k;
            pos[j] = (uint32_t)(64 * w + ctx_select_pdep(ctx_member_word(plane, w, x), r - sums[k]));
        }
        return c;
    }
    uint64_t base = 0, nx = c ? rank[0] : UINT64_MAX;
    size_t got = c ? 1 : 0, out = 0;
    for (size_t w0 = 0; w0 < nw; w0 += 32) {
        const uint8_t *q = w0 < full ? bc + w0 : tail;
        uint32_t nz = ~(uint32_t)_mm256_movemask_epi8(
            _mm256_cmpeq_epi8(_mm256_loadu_si256((const __m256i *)q), _mm256_setzero_si256()));
        for (; nz; nz &= nz - 1) {
            unsigned i = (unsigned)__builtin_ctz(nz), pc = q[i];
            size_t w = w0 + i;
            out = ctx_emit_unlisted(ctx_member_word(plane, w, x), w, base, pc, &nx, &got, rank, c, pos, out,
                                    ctx_select_pdep);
            base += pc;
        }
    }
    return out;
}

/* ctx_gaps16 with hardware popcount, the running counts advanced 16 at a time by SSE4.1: the
 * shared walk with this ISA's two helpers inlined. */
static inline unsigned ctx_pop_hw(uint64_t x)
{
    return (unsigned)__builtin_popcountll(x);
}

static inline size_t ctx_gaps16_sse(const uint16_t *a, const uint16_t *b, const uint64_t *plane, const uint8_t *wc,
                                    const uint64_t *chw, size_t nw, const uint32_t off[16], uint32_t *gap,
                                    uint16_t *z, uint32_t cnt[16])
{
    return ctx_gaps16_walk(a, b, plane, wc, chw, nw, off, gap, z, cnt, ctx_pop_hw, ctx_add16);
}
#endif

#endif
