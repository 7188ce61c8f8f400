/* SPDX-License-Identifier: Apache-2.0 */
/* AVX-512 (F/BW/VL/VBMI/VBMI2) kernels: mask compares + vpcompressd for change finding, masked tails, gaps, the LoCo gate. */
#include <immintrin.h>

#include "node/kernels/kernels.h"
#include "node/kernels/kernels_ctx.h"
#include "node/kernels/kernels_tail.h"

/* Appends base + bit for each set bit of a 16-bit mask. vpcompressd into a register and a
 * full 16-lane store: compress-to-memory is microcoded and slow on AMD Zen 4, and the
 * contract grants 64 entries of slack past the count for the extra lanes. */
static inline size_t emit16(__mmask16 m, __m512i pos, uint32_t *idx, size_t k)
{
    _mm512_storeu_si512(idx + k, _mm512_maskz_compress_epi32(m, pos));
    return k + (size_t)_mm_popcnt_u32(m);
}

static const int32_t iota16[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

/* Appends the positions of a 64-bit mask whose bit b stands for element base + b. Sparse
 * masks compress only their nonzero 16-bit quarters; dense ones all four without branching
 * on their contents (same trade-off as emit_mask in kernels_avx2.c). */
static inline size_t emit64(uint64_t m, uint32_t base, uint32_t *idx, size_t k)
{
    __m512i iota = _mm512_loadu_si512(iota16);
    if (_mm_popcnt_u64(m) > 16) {
        __m512i pos = _mm512_add_epi32(iota, _mm512_set1_epi32((int)base));
        for (unsigned q = 0; q < 4; q++) {
            k = emit16((__mmask16)(m >> (16 * q)), pos, idx, k);
            pos = _mm512_add_epi32(pos, _mm512_set1_epi32(16));
        }
        return k;
    }
    while (m) {
        unsigned shift = (unsigned)_tzcnt_u64(m) & ~15u;
        __m512i pos = _mm512_add_epi32(iota, _mm512_set1_epi32((int)(base + shift)));
        k = emit16((__mmask16)(m >> shift), pos, idx, k);
        m &= ~(0xffffull << shift);
    }
    return k;
}

/* Elements left in the tail as a load mask: masked-off lanes are never read (no fault,
 * no access past n). */
static inline uint64_t tail_mask(size_t left)
{
    return left >= 64 ? ~0ull : (1ull << left) - 1;
}

static size_t diff8_avx512(const uint8_t *a, const uint8_t *b, size_t n, uint32_t *idx)
{
    size_t i = 0, k = 0;
    /* 256 bytes per array per round: the few-changes case is one kortest per round */
    for (; i + 256 <= n; i += 256) {
        __mmask64 m0 = _mm512_cmpneq_epi8_mask(_mm512_loadu_si512(a + i), _mm512_loadu_si512(b + i));
        __mmask64 m1 = _mm512_cmpneq_epi8_mask(_mm512_loadu_si512(a + i + 64), _mm512_loadu_si512(b + i + 64));
        __mmask64 m2 = _mm512_cmpneq_epi8_mask(_mm512_loadu_si512(a + i + 128), _mm512_loadu_si512(b + i + 128));
        __mmask64 m3 = _mm512_cmpneq_epi8_mask(_mm512_loadu_si512(a + i + 192), _mm512_loadu_si512(b + i + 192));
        if (!(m0 | m1 | m2 | m3))
            continue;
        k = emit64(m0, (uint32_t)i, idx, k);
        k = emit64(m1, (uint32_t)i + 64, idx, k);
        k = emit64(m2, (uint32_t)i + 128, idx, k);
        k = emit64(m3, (uint32_t)i + 192, idx, k);
    }
    for (; i < n; i += 64) {
        __mmask64 lm = tail_mask(n - i);
        __mmask64 m = _mm512_mask_cmpneq_epi8_mask(lm, _mm512_maskz_loadu_epi8(lm, a + i),
                                                   _mm512_maskz_loadu_epi8(lm, b + i));
        k = emit64(m, (uint32_t)i, idx, k);
    }
    return k;
}

/* The differing elements of a[i..i+128) and b: bits 0-63 in *lo, 64-127 in *hi. */
static inline void neq16x128(const uint16_t *a, const uint16_t *b, uint64_t *lo, uint64_t *hi)
{
    __mmask32 m0 = _mm512_cmpneq_epi16_mask(_mm512_loadu_si512(a), _mm512_loadu_si512(b));
    __mmask32 m1 = _mm512_cmpneq_epi16_mask(_mm512_loadu_si512(a + 32), _mm512_loadu_si512(b + 32));
    __mmask32 m2 = _mm512_cmpneq_epi16_mask(_mm512_loadu_si512(a + 64), _mm512_loadu_si512(b + 64));
    __mmask32 m3 = _mm512_cmpneq_epi16_mask(_mm512_loadu_si512(a + 96), _mm512_loadu_si512(b + 96));
    *lo = m0 | (uint64_t)m1 << 32;
    *hi = m2 | (uint64_t)m3 << 32;
}

/* The differing elements of the first min(left, 32) of a and b. */
static inline __mmask32 neq16_tail(const uint16_t *a, const uint16_t *b, size_t left)
{
    __mmask32 lm = (__mmask32)tail_mask(left < 32 ? left : 32);
    return _mm512_mask_cmpneq_epi16_mask(lm, _mm512_maskz_loadu_epi16(lm, a), _mm512_maskz_loadu_epi16(lm, b));
}

static size_t diff16_avx512(const uint16_t *a, const uint16_t *b, size_t n, uint32_t *idx)
{
    size_t i = 0, k = 0;
    for (; i + 128 <= n; i += 128) {
        uint64_t lo, hi;
        neq16x128(a + i, b + i, &lo, &hi);
        if (!(lo | hi))
            continue;
        k = emit64(lo, (uint32_t)i, idx, k);
        k = emit64(hi, (uint32_t)i + 64, idx, k);
    }
    for (; i < n; i += 32)
        k = emit64(neq16_tail(a + i, b + i, n - i), (uint32_t)i, idx, k);
    return k;
}

static size_t count16_avx512(const uint16_t *a, const uint16_t *b, size_t n)
{
    size_t i = 0, k = 0;
    for (; i + 128 <= n; i += 128) {
        uint64_t lo, hi;
        neq16x128(a + i, b + i, &lo, &hi);
        k += (size_t)__builtin_popcountll(lo) + (size_t)__builtin_popcountll(hi);
    }
    for (; i < n; i += 32)
        k += (size_t)__builtin_popcount(neq16_tail(a + i, b + i, n - i));
    return k;
}

/* One 32-element block of diff_extract16: positions by two vpcompressd, both values by
 * vpcompressw into registers and full 32-lane stores (the slack takes the extra lanes). */
static inline size_t extract32(__mmask32 m, __m512i va_v, __m512i vb_v, uint32_t base, uint32_t *idx,
                               uint16_t *va, uint16_t *vb, size_t k)
{
    _mm512_storeu_si512(va + k, _mm512_maskz_compress_epi16(m, va_v));
    _mm512_storeu_si512(vb + k, _mm512_maskz_compress_epi16(m, vb_v));
    __m512i pos = _mm512_add_epi32(_mm512_loadu_si512(iota16), _mm512_set1_epi32((int)base));
    size_t k1 = emit16((__mmask16)m, pos, idx, k);
    return emit16((__mmask16)(m >> 16), _mm512_add_epi32(pos, _mm512_set1_epi32(16)), idx, k1);
}

/* 128 elements of a and b as four 32-lane vectors each and their not-equal masks. */
typedef struct block128 {
    __m512i a[4], b[4];
    __mmask32 m[4];
} block128;

static inline int load128(const uint16_t *a, const uint16_t *b, block128 *x)
{
    for (int q = 0; q < 4; q++) {
        x->a[q] = _mm512_loadu_si512(a + 32 * q);
        x->b[q] = _mm512_loadu_si512(b + 32 * q);
        x->m[q] = _mm512_cmpneq_epi16_mask(x->a[q], x->b[q]);
    }
    return (x->m[0] | x->m[1] | x->m[2] | x->m[3]) != 0;
}

static size_t diff_extract16_avx512(const uint16_t *a, const uint16_t *b, size_t n, uint32_t *idx,
                                    uint16_t *va, uint16_t *vb)
{
    size_t i = 0, k = 0;
    for (; i + 128 <= n; i += 128) {
        block128 x;
        if (!load128(a + i, b + i, &x))
            continue;
        for (int q = 0; q < 4; q++)
            if (x.m[q])
                k = extract32(x.m[q], x.a[q], x.b[q], (uint32_t)(i + 32 * (size_t)q), idx, va, vb, k);
    }
    for (; i < n; i += 32) {
        __mmask32 lm = (__mmask32)tail_mask(n - i < 32 ? n - i : 32);
        __m512i av = _mm512_maskz_loadu_epi16(lm, a + i), bv = _mm512_maskz_loadu_epi16(lm, b + i);
        __mmask32 m = _mm512_mask_cmpneq_epi16_mask(lm, av, bv);
        if (m)
            k = extract32(m, av, bv, (uint32_t)i, idx, va, vb, k);
    }
    return k;
}

/* Byte lane i of a 64-byte vector: i, and i - 1 (lane 0: 0) for the gaps between lanes. */
static const uint8_t iota64b[64] = {
    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27,
    28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53,
    54, 55, 56, 57, 58, 59, 60, 61, 62, 63};
static const uint8_t prev64b[64] = {
    0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26,
    27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52,
    53, 54, 55, 56, 57, 58, 59, 60, 61, 62};

typedef struct ulp_state {
    size_t k, len;     /* changes and gap bytes so far */
    uint32_t next;     /* the position after the last change */
} ulp_state;

/* Prefetch distance in elements (2 KiB of each array): measured +10-20% at RL densities. */
#define PF 1024

static inline __m512i zigzag16_v(__m512i a, __m512i b)
{
    __m512i d = _mm512_sub_epi16(b, a);
    return _mm512_xor_si512(_mm512_slli_epi16(d, 1), _mm512_srai_epi16(d, 15));
}

/* One 64-element block of diff_ulp16 with changes m (maybe none), as two 32-lane halves of
 * a and b: the zigzag values by a vpcompressw per half; the block's local positions (bytes
 * 0..63) by one vpcompressb, whose lane-to-lane differences (vpermb + sub) are the gaps
 * inside the block, already one LEB byte each (< 64); the first gap, from the previous
 * block's last change, goes into lane 0 when it is under 0x80 (nearly always) and is written
 * as LEB128 by itself otherwise. No branch depends on whether the block has changes: at RL
 * densities that is a coin toss, and a mispredicted branch stalls the loads that keep this
 * loop at memory speed. */
static inline void ulp_block64(uint64_t m, __m512i a0, __m512i b0, __m512i a1, __m512i b1, uint32_t base,
                               uint8_t *leb, uint16_t *z, ulp_state *st)
{
    __mmask32 m0 = (__mmask32)m, m1 = (__mmask32)(m >> 32);
    _mm512_storeu_si512(z + st->k, _mm512_maskz_compress_epi16(m0, zigzag16_v(a0, b0)));
    st->k += (size_t)_mm_popcnt_u32(m0);
    _mm512_storeu_si512(z + st->k, _mm512_maskz_compress_epi16(m1, zigzag16_v(a1, b1)));
    st->k += (size_t)_mm_popcnt_u32(m1);
    size_t cnt = (size_t)_mm_popcnt_u64(m);
    __m512i loc = _mm512_maskz_compress_epi8(m, _mm512_loadu_si512(iota64b));
    __m512i prev = _mm512_permutexvar_epi8(_mm512_loadu_si512(prev64b), loc);
    __m512i gaps = _mm512_sub_epi8(_mm512_sub_epi8(loc, prev), _mm512_set1_epi8(1));
    uint32_t g0 = base + (uint32_t)_tzcnt_u64(m) - st->next;   /* m == 0: unused */
    uint32_t next = base + 64 - (uint32_t)__builtin_clzll(m | 1u);
    st->next = m ? next : st->next;
    if (__builtin_expect(g0 >= 0x80 && m, 0)) {
        st->len += pulse_leb_put(leb + st->len, g0);
        gaps = _mm512_maskz_compress_epi8(~1ull, gaps);
        _mm512_storeu_si512(leb + st->len, gaps);
        st->len += cnt - 1;
        return;
    }
    gaps = _mm512_mask_mov_epi8(gaps, 1, _mm512_set1_epi8((char)g0));
    _mm512_storeu_si512(leb + st->len, gaps);
    st->len += cnt;
}

static size_t diff_ulp16_avx512(const uint16_t *a, const uint16_t *b, size_t n, uint8_t *leb, size_t *leb_len,
                                uint16_t *z)
{
    ulp_state st = { 0, 0, 0 };
    size_t i = 0;
    for (; i + 128 <= n; i += 128) {
        block128 x;
        int any = load128(a + i, b + i, &x);
        for (int q = 0; q < 4; q++) {
            _mm_prefetch((const char *)(a + i + PF + 32 * q), _MM_HINT_T0);
            _mm_prefetch((const char *)(b + i + PF + 32 * q), _MM_HINT_T0);
        }
        if (!any)   /* unchanged stretches (sparse steps, frozen tensors) */
            continue;
        ulp_block64(x.m[0] | (uint64_t)x.m[1] << 32, x.a[0], x.b[0], x.a[1], x.b[1], (uint32_t)i, leb, z, &st);
        ulp_block64(x.m[2] | (uint64_t)x.m[3] << 32, x.a[2], x.b[2], x.a[3], x.b[3], (uint32_t)i + 64, leb, z,
                    &st);
    }
    *leb_len = st.len;
    return diff_ulp16_tail(a, b, i, n, leb, leb_len, z, st.k, st.next);
}

/* ulp_pack2_16, 32 values a round: symbols min(z, 4) - 1 narrowed to bytes, then four to a
 * byte by two multiply-adds (s0 + 4 s1, then + 16 (s2 + 4 s3)) and vpmovdb; the counts of
 * z = 1 and 2 and of escapes by popcount; the escapes themselves (a few percent) one by one. */
static size_t ulp_pack2_16_avx512(const uint16_t *z, size_t k, uint8_t *packed, uint8_t *esc,
                                  uint32_t hist[256])
{
    size_t j = 0, el = 0;
    uint64_t c1 = 0, c2 = 0, cesc = 0;
    const __m512i four = _mm512_set1_epi16(4), one = _mm512_set1_epi16(1), two = _mm512_set1_epi16(2);
    for (; j + 32 <= k; j += 32) {
        __m512i v = _mm512_loadu_si512(z + j);
        __m512i sym = _mm512_sub_epi16(_mm512_min_epu16(v, four), one);
        __m256i bytes = _mm512_cvtepi16_epi8(sym);
        __m256i pairs = _mm256_maddubs_epi16(bytes, _mm256_set1_epi16(0x0401));
        __m256i quads = _mm256_madd_epi16(pairs, _mm256_set1_epi32(0x00100001));
        _mm_storel_epi64((__m128i *)(packed + j / 4), _mm256_cvtepi32_epi8(quads));
        c1 += (uint64_t)_mm_popcnt_u32(_mm512_cmpeq_epi16_mask(v, one));
        c2 += (uint64_t)_mm_popcnt_u32(_mm512_cmpeq_epi16_mask(v, two));
        __mmask32 e = _mm512_cmpge_epu16_mask(v, four);
        if (e) {
            /* the escapes z - 4 compressed to the front; one LEB byte each when all < 0x80 */
            __m512i ev = _mm512_maskz_compress_epi16(e, _mm512_sub_epi16(v, four));
            unsigned ne = (unsigned)_mm_popcnt_u32(e);
            cesc += ne;
            if (!_mm512_cmpge_epu16_mask(ev, _mm512_set1_epi16(0x80))) {
                _mm256_storeu_si256((__m256i *)(esc + el), _mm512_cvtepi16_epi8(ev));
                el += ne;
            } else {
                el = ulp_pack2_escapes(z, j, e, esc, el);
            }
        }
    }
    ulp_pack2_counts(hist, j, c1, c2, cesc, esc, el);
    return ulp_pack2_16_tail(z, j, k, packed, esc, el, hist);
}

static size_t diff32_avx512(const uint32_t *a, const uint32_t *b, size_t n, uint32_t *idx)
{
    size_t i = 0, k = 0;
    for (; i + 64 <= n; i += 64) {
        __mmask16 m0 = _mm512_cmpneq_epi32_mask(_mm512_loadu_si512(a + i), _mm512_loadu_si512(b + i));
        __mmask16 m1 = _mm512_cmpneq_epi32_mask(_mm512_loadu_si512(a + i + 16), _mm512_loadu_si512(b + i + 16));
        __mmask16 m2 = _mm512_cmpneq_epi32_mask(_mm512_loadu_si512(a + i + 32), _mm512_loadu_si512(b + i + 32));
        __mmask16 m3 = _mm512_cmpneq_epi32_mask(_mm512_loadu_si512(a + i + 48), _mm512_loadu_si512(b + i + 48));
        uint64_t m = m0 | (uint64_t)m1 << 16 | (uint64_t)m2 << 32 | (uint64_t)m3 << 48;
        if (m)
            k = emit64(m, (uint32_t)i, idx, k);
    }
    for (; i < n; i += 16) {
        __mmask16 lm = (__mmask16)tail_mask(n - i < 16 ? n - i : 16);
        __mmask16 m = _mm512_mask_cmpneq_epi32_mask(lm, _mm512_maskz_loadu_epi32(lm, a + i),
                                                    _mm512_maskz_loadu_epi32(lm, b + i));
        k = emit64(m, (uint32_t)i, idx, k);
    }
    return k;
}

/* 32-bit elements: vpgatherdd / vpscatterdd touch exactly the 4 bytes of each index, like the
 * scalar loop; vpscatterdd writes overlapping lanes in order, so duplicates keep last-wins. */
static void gather32_avx512(const uint32_t *src, const uint32_t *idx, size_t k, uint32_t *out)
{
    for (size_t j = 0; j < k; j += 16) {
        __mmask16 lm = (__mmask16)tail_mask(k - j < 16 ? k - j : 16);
        __m512i vi = _mm512_maskz_loadu_epi32(lm, idx + j);
        __m512i v = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), lm, vi, src, 4);
        _mm512_mask_storeu_epi32(out + j, lm, v);
    }
}

static void scatter32_avx512(uint32_t *dst, const uint32_t *idx, size_t k, const uint32_t *v)
{
    for (size_t j = 0; j < k; j += 16) {
        __mmask16 lm = (__mmask16)tail_mask(k - j < 16 ? k - j : 16);
        __m512i vi = _mm512_maskz_loadu_epi32(lm, idx + j);
        _mm512_mask_i32scatter_epi32(dst, lm, vi, _mm512_maskz_loadu_epi32(lm, v + j), 4);
    }
}

static void ulp_encode32_avx512(const uint32_t *a, const uint32_t *b, const uint32_t *idx, size_t k,
                                uint32_t *out)
{
    for (size_t j = 0; j < k; j += 16) {
        __mmask16 lm = (__mmask16)tail_mask(k - j < 16 ? k - j : 16);
        __m512i vi = _mm512_maskz_loadu_epi32(lm, idx + j);
        __m512i va = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), lm, vi, a, 4);
        __m512i vb = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), lm, vi, b, 4);
        __m512i d = _mm512_sub_epi32(vb, va);
        __m512i z = _mm512_xor_si512(_mm512_slli_epi32(d, 1), _mm512_srai_epi32(d, 31));
        _mm512_mask_storeu_epi32(out + j, lm, z);
    }
}

/* ulp apply on 32-bit: gather, add, scatter. Duplicate positions inside one group of 16
 * would lose an add, so groups that are not strictly ascending (never produced by diff,
 * but allowed by the contract) take the scalar path. */
static void ulp_apply32_avx512(uint32_t *dst, const uint32_t *idx, size_t k, const uint32_t *z)
{
    size_t j = 0;
    for (; j + 16 <= k; j += 16) {
        __m512i vi = _mm512_loadu_si512(idx + j);
        __m512i vz = _mm512_loadu_si512(z + j);
        __m512i delta = _mm512_xor_si512(_mm512_srli_epi32(vz, 1),
            _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_and_si512(vz, _mm512_set1_epi32(1))));
        __mmask16 up = _mm512_cmpgt_epu32_mask(vi, _mm512_alignr_epi32(vi, vi, 15));
        if ((up & 0xfffe) != 0xfffe) {
            uint32_t d[16];
            _mm512_storeu_si512(d, delta);
            for (unsigned e = 0; e < 16; e++)
                dst[idx[j + e]] += d[e];
            continue;
        }
        __m512i cur = _mm512_i32gather_epi32(vi, dst, 4);
        _mm512_i32scatter_epi32(dst, vi, _mm512_add_epi32(cur, delta), 4);
    }
    for (; j < k; j++)
        dst[idx[j]] += (z[j] >> 1) ^ (0u - (z[j] & 1u));
}

/* 16-bit elements have no gather/scatter instruction (and a 32-bit one would touch 2 bytes
 * past the last element). Dense runs of 32 consecutive positions are one vector op; other
 * groups are scalar. See run16 in kernels_avx2.c for why every lane is compared. */
static inline int run_of(const uint32_t *idx)
{
    __m512i first = _mm512_set1_epi32((int)idx[0]);
    __m512i iota = _mm512_loadu_si512(iota16);
    __m512i want0 = _mm512_add_epi32(first, iota);
    __m512i want1 = _mm512_add_epi32(want0, _mm512_set1_epi32(16));
    __mmask16 e0 = _mm512_cmpeq_epi32_mask(want0, _mm512_loadu_si512(idx));
    __mmask16 e1 = _mm512_cmpeq_epi32_mask(want1, _mm512_loadu_si512(idx + 16));
    return (e0 & e1) == 0xffff && idx[0] <= UINT32_MAX - 31;
}

static inline __m512i unzigzag16(__m512i z)
{
    __m512i sign = _mm512_sub_epi16(_mm512_setzero_si512(), _mm512_and_si512(z, _mm512_set1_epi16(1)));
    return _mm512_xor_si512(_mm512_srli_epi16(z, 1), sign);
}

static void scatter16_avx512(uint16_t *dst, const uint32_t *idx, size_t k, const uint16_t *v)
{
    size_t j = 0;
    for (; j + 32 <= k; j += 32) {
        if (run_of(idx + j)) {
            _mm512_storeu_si512(dst + idx[j], _mm512_loadu_si512(v + j));
        } else {
            const uint32_t *pf = prefetch_from(idx, j, k, 32);
            for (unsigned e = 0; e < 32; e++) {
                prefetch16(dst, pf[e]);
                dst[idx[j + e]] = v[j + e];
            }
        }
    }
    for (; j < k; j++)
        dst[idx[j]] = v[j];
}

static void ulp_apply16_avx512(uint16_t *dst, const uint32_t *idx, size_t k, const uint16_t *z)
{
    size_t j = 0;
    for (; j + 32 <= k; j += 32) {
        __m512i delta = unzigzag16(_mm512_loadu_si512(z + j));
        if (run_of(idx + j)) {
            uint16_t *p = dst + idx[j];
            _mm512_storeu_si512(p, _mm512_add_epi16(_mm512_loadu_si512(p), delta));
        } else {
            uint16_t d[32];
            _mm512_storeu_si512(d, delta);
            const uint32_t *pf = prefetch_from(idx, j, k, 32);
            for (unsigned e = 0; e < 32; e++) {
                prefetch16(dst, pf[e]);
                dst[idx[j + e]] = (uint16_t)(dst[idx[j + e]] + d[e]);
            }
        }
    }
    for (; j < k; j++)
        dst[idx[j]] = (uint16_t)(dst[idx[j]] + ((z[j] >> 1) ^ (uint16_t)(0u - (z[j] & 1u))));
}

/* Prefix sum of 16 lanes by log-steps of whole-register lane shifts (valignd with zero). */
static inline __m512i prefix16(__m512i x)
{
    __m512i zero = _mm512_setzero_si512();
    x = _mm512_add_epi32(x, _mm512_alignr_epi32(x, zero, 15));
    x = _mm512_add_epi32(x, _mm512_alignr_epi32(x, zero, 14));
    x = _mm512_add_epi32(x, _mm512_alignr_epi32(x, zero, 12));
    return _mm512_add_epi32(x, _mm512_alignr_epi32(x, zero, 8));
}

/* Same scheme as gaps_decode_avx2: next = position + 1 in 32 bits; see there why checking
 * "next > limit or next not increasing" per lane is exact. */
static int gaps_decode_avx512(const uint32_t *gaps, size_t k, uint32_t limit, uint32_t *idx)
{
    uint64_t next = 0;
    size_t j = 0;
    __m512i one = _mm512_set1_epi32(1);
    __m512i vlimit = _mm512_set1_epi32((int)limit);
    __mmask16 bad = 0;
    for (; j + 16 <= k; j += 16) {
        __m512i g = _mm512_loadu_si512(gaps + j);
        __m512i vin = _mm512_set1_epi32((int)(uint32_t)next);
        __m512i vnext = _mm512_add_epi32(prefix16(_mm512_add_epi32(g, one)), vin);
        __m512i vprev = _mm512_alignr_epi32(vnext, vin, 15);
        bad |= _mm512_cmpgt_epu32_mask(vnext, vlimit) | _mm512_cmple_epu32_mask(vnext, vprev);
        _mm512_storeu_si512(idx + j, _mm512_sub_epi32(vnext, one));
        next = idx[j + 15] + 1ull;
        if ((j & 127) == 112 && bad)
            return -1;
    }
    if (bad)
        return -1;
    return gaps_decode_tail(gaps, j, k, next, limit, idx);
}


/* ---------- the LoCo gate (reference: gate_*_c in kernels_c.c) ---------- */

/* Lanes whose exponent field is all ones (NaN or Inf). */
static inline __mmask16 nonfinite16(__m512i u)
{
    __m512i expo = _mm512_set1_epi32(0x7f800000);
    return _mm512_cmpeq_epi32_mask(_mm512_and_si512(u, expo), expo);
}

/* NaN lanes become 0x7fc00000 (see canonical_nan in kernels_tail.h: the add's NaN operand
 * order is not ours to choose). */
static inline __m512 canonical_nan16(__m512 a)
{
    return _mm512_mask_mov_ps(a, _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q),
                              _mm512_castsi512_ps(_mm512_set1_epi32(0x7fc00000)));
}

/* BF16 RNE on integer lanes (bf16_rne in kernels_c.c), left in the top 16 bits. */
static inline __m512i bf16_rne16(__m512i u)
{
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    return _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb);
}

static inline __mmask16 keep_bf16(__m512 x, __m512 t)
{
    __m512i d = _mm512_xor_si512(bf16_rne16(_mm512_castps_si512(x)), bf16_rne16(_mm512_castps_si512(t)));
    return _mm512_testn_epi32_mask(d, _mm512_set1_epi32((int)0xffff0000u));
}

static inline __mmask16 keep_fp16(__m512 x, __m512 t)
{
    return _mm256_cmpeq_epi16_mask(_mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC),
                                   _mm512_cvtps_ph(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

#ifdef PULSE_HAVE_AVX512BF16_INSN
/* vcvtneps2bf16 rounds to nearest even like bf16_rne, but treats subnormal inputs as zero
 * and flushes subnormal results (Intel SDM, "convert_fp32_to_bfloat16"), whatever MXCSR
 * says. A lane can only be affected when x or t is subnormal (0 < |v| < 2^-126; a result
 * rounds to a BF16 subnormal only from an FP32 subnormal), so
 * such vectors (rare in weights) are redone with the integer rounding. NaN never reaches
 * this test (non-finite lanes are forced to "changes"), and +-Inf converts exactly. */
__attribute__((target("avx512bf16"))) static inline __mmask16 keep_bf16_insn(__m512 x, __m512 t)
{
    /* subnormal <=> |bits| - 1 < 0x7fffff (unsigned; +-0 wraps to the top and is excluded) */
    __m512i abs = _mm512_set1_epi32(0x7fffffff), one = _mm512_set1_epi32(1), top = _mm512_set1_epi32(0x7fffff);
    __mmask16 tiny =
        _mm512_cmplt_epu32_mask(_mm512_sub_epi32(_mm512_and_si512(_mm512_castps_si512(x), abs), one), top) |
        _mm512_cmplt_epu32_mask(_mm512_sub_epi32(_mm512_and_si512(_mm512_castps_si512(t), abs), one), top);
    if (tiny)
        return keep_bf16(x, t);
    return _mm256_cmpeq_epi16_mask((__m256i)_mm512_cvtneps_pbh(x), (__m256i)_mm512_cvtneps_pbh(t));
}
#define TARGET_BF16 __attribute__((target("avx512bf16")))
#else
#define TARGET_BF16
#endif

/* Full blocks of 16 store the compressed lanes with full-width stores (k <= i and i + 16 <= n
 * keep them inside the room for n entries); the masked tail reads and writes only its lanes. */
#define DEFINE_GATE_AVX512(V, KEEP, ATTR) \
ATTR static size_t gate_##V##_avx512(const float *theta, const float *delta, float *e, size_t n, \
                                     uint32_t *idx, float *val) \
{ \
    __m512i iota = _mm512_loadu_si512(iota16); \
    size_t i = 0, k = 0; \
    for (; i + 16 <= n; i += 16) { \
        __m512 t = _mm512_loadu_ps(theta + i); \
        __m512 a = _mm512_add_ps(_mm512_loadu_ps(delta + i), _mm512_loadu_ps(e + i)); \
        __m512 x = _mm512_sub_ps(t, a); \
        __mmask16 keep = KEEP(x, t) & ~nonfinite16(_mm512_castps_si512(t)) & \
                         ~nonfinite16(_mm512_castps_si512(a)); \
        _mm512_storeu_ps(e + i, _mm512_maskz_mov_ps(keep, a)); \
        __mmask16 changes = (__mmask16)~keep; \
        __m512i pos = _mm512_add_epi32(iota, _mm512_set1_epi32((int)i)); \
        _mm512_storeu_si512(idx + k, _mm512_maskz_compress_epi32(changes, pos)); \
        _mm512_storeu_ps(val + k, _mm512_maskz_compress_ps(changes, canonical_nan16(a))); \
        k += (size_t)_mm_popcnt_u32(changes); \
    } \
    if (i < n) { \
        __mmask16 lm = (__mmask16)((1u << (n - i)) - 1); \
        __m512 t = _mm512_maskz_loadu_ps(lm, theta + i); \
        __m512 a = _mm512_add_ps(_mm512_maskz_loadu_ps(lm, delta + i), _mm512_maskz_loadu_ps(lm, e + i)); \
        __m512 x = _mm512_sub_ps(t, a); \
        __mmask16 keep = KEEP(x, t) & ~nonfinite16(_mm512_castps_si512(t)) & \
                         ~nonfinite16(_mm512_castps_si512(a)) & lm; \
        _mm512_mask_storeu_ps(e + i, lm, _mm512_maskz_mov_ps(keep, a)); \
        __mmask16 changes = (__mmask16)(~keep & lm); \
        __mmask16 out = (__mmask16)((1u << _mm_popcnt_u32(changes)) - 1); \
        __m512i pos = _mm512_add_epi32(iota, _mm512_set1_epi32((int)i)); \
        _mm512_mask_storeu_epi32(idx + k, out, _mm512_maskz_compress_epi32(changes, pos)); \
        _mm512_mask_storeu_ps(val + k, out, _mm512_maskz_compress_ps(changes, canonical_nan16(a))); \
        k += (size_t)_mm_popcnt_u32(changes); \
    } \
    return k; \
}

DEFINE_GATE_AVX512(bf16, keep_bf16, )
DEFINE_GATE_AVX512(fp16, keep_fp16, )
#ifdef PULSE_HAVE_AVX512BF16_INSN
DEFINE_GATE_AVX512(bf16_insn, keep_bf16_insn, TARGET_BF16)
#endif

/* Aggregation: gather, add, scatter per 16 positions. Repeated positions inside one group
 * would lose an add, so groups that are not strictly ascending take the scalar path (shards
 * that passed gate_check are strictly ascending). */
static void scatter_add_f32_avx512(float *acc, const uint32_t *idx, size_t k, const float *v)
{
    size_t j = 0;
    for (; j + 16 <= k; j += 16) {
        __m512i vi = _mm512_loadu_si512(idx + j);
        __mmask16 up = _mm512_cmpgt_epu32_mask(vi, _mm512_alignr_epi32(vi, vi, 15));
        if ((up & 0xfffe) != 0xfffe) {
            scatter_add_f32_tail(acc, idx, j, j + 16, v);
            continue;
        }
        __m512 cur = _mm512_i32gather_ps(vi, acc, 4);
        _mm512_i32scatter_ps(acc, vi, canonical_nan16(_mm512_add_ps(cur, _mm512_loadu_ps(v + j))), 4);
    }
    scatter_add_f32_tail(acc, idx, j, k, v);
}

/* 64 bytes a step, the last (partial) step a masked load, so nothing at or past n is read:
 * vpmovb2m marks the bytes that end the run, vpsadbw sums the bytes before the first. */
static size_t leb1_run_avx512(const uint8_t *src, size_t n, uint64_t *sum)
{
    const __m512i zero = _mm512_setzero_si512();
    __m512i acc = zero;
    size_t j = 0;
    __m512i v;
    uint64_t hi;
    for (; j + 64 <= n; j += 64) {
        v = _mm512_loadu_si512(src + j);
        if ((hi = (uint64_t)_mm512_movepi8_mask(v)) != 0)
            goto stop;
        acc = _mm512_add_epi64(acc, _mm512_sad_epu8(v, zero));
    }
    if (j < n) {
        v = _mm512_maskz_loadu_epi8((__mmask64)_bzhi_u64(~0ull, (unsigned)(n - j)), src + j);
        if ((hi = (uint64_t)_mm512_movepi8_mask(v)) != 0)
            goto stop;
        acc = _mm512_add_epi64(acc, _mm512_sad_epu8(v, zero));
        j = n;
    }
    *sum += (uint64_t)_mm512_reduce_add_epi64(acc);
    return j;
stop:;
    unsigned r = (unsigned)_tzcnt_u64(hi);
    v = _mm512_maskz_mov_epi8((__mmask64)_bzhi_u64(~0ull, r), v);
    acc = _mm512_add_epi64(acc, _mm512_sad_epu8(v, zero));
    *sum += (uint64_t)_mm512_reduce_add_epi64(acc);
    return j + r;
}

/* rice_gaps 64 unary bits a step: vpcompressb turns the step's ones into their bit indices,
 * their differences are the quotients, vpermb + vpsrlvw cut the matching remainder fields
 * out of one masked load, and the gaps go out as one byte each. A step stops before the
 * first gap of 128 or more (that one goes through the scalar step, as does a quotient of 57
 * or more, which leaves a step without a one), and a position that reaches the limit is
 * found when the sums are settled (below); so every error is the reference's. Shifts above
 * 6 (sparse chunks, gaps mostly >= 128) take the scalar steps. */
static int rice_gaps_avx512(const uint8_t *src, size_t len, size_t k, unsigned shift, uint32_t limit, uint8_t *leb,
                            size_t *leb_len)
{
    size_t rb, ulen;
    const uint8_t *u;
    if (rice_planes(src, len, k, shift, &rb, &u, &ulen))
        return -1;
    rice_state st = { 0 };
    int rc = 0;
    if (shift <= 6) {
        const __m512i iota8 = _mm512_set_epi8(63, 62, 61, 60, 59, 58, 57, 56, 55, 54, 53, 52, 51, 50, 49, 48,
                                              47, 46, 45, 44, 43, 42, 41, 40, 39, 38, 37, 36, 35, 34, 33, 32,
                                              31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16,
                                              15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
        const __m512i prev8 = _mm512_sub_epi8(iota8, _mm512_set1_epi8(1));
        const __m512i lanes = _mm512_set_epi16(31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16,
                                               15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
        const __m512i step_lo = _mm512_mullo_epi16(lanes, _mm512_set1_epi16((short)shift));
        const __m512i step_hi = _mm512_add_epi16(step_lo, _mm512_set1_epi16((short)(32 * shift)));
        const __m512i rmask = _mm512_set1_epi16((short)((1u << shift) - 1));
        const __m512i seven = _mm512_set1_epi16(7), byte_hi = _mm512_set1_epi16(0x100);
        const __m512i big = _mm512_set1_epi16(128), zero = _mm512_setzero_si512();
        const __m128i count = _mm_cvtsi32_si128((int)shift);
        /* The state in registers, stored to st only around a scalar step. The steps' gap sums
         * add up in a vector (a horizontal sum a step would be a third of the loop's time), so
         * `next` lags: it lacks the `lag` vector's sum and one per gap since `lag_from`. It is
         * made exact before every scalar step and at the end: a position that reached the limit
         * in a vector step then shows as next > limit, and since a vector step cannot fail any
         * other way, the reference's answer is -4. */
        size_t j = 0, bit = 0, o = 0, lag_from = 0;
        uint64_t next = 0;
        __m512i lag = _mm512_setzero_si512();
#define RICE_SETTLE() do { \
            next += (uint64_t)_mm512_reduce_add_epi64(lag) + (j - lag_from); \
            lag = _mm512_setzero_si512(); \
            lag_from = j; \
            if (next > limit) { \
                rc = -4; \
                goto out; \
            } \
        } while (0)
#define RICE_SCALAR_STEP() do { \
            RICE_SETTLE(); \
            st = (rice_state){ .j = j, .bit = bit, .next = next, .o = o }; \
            if ((rc = rice_gaps_tail(src, rb, u, ulen, j + 1, shift, limit, leb, &st)) != 0) \
                goto out; \
            j = st.j; bit = st.bit; next = st.next; o = st.o; lag_from = j; \
        } while (0)
        while (j < k && (bit >> 3) + 8 <= ulen) {
            uint64_t w;
            memcpy(&w, u + (bit >> 3), 8);
            w >>= bit & 7;
            size_t left = k - j;
            if (!w) {   /* a quotient of 57 or more */
                RICE_SCALAR_STEP();
                continue;
            }
            if ((uint64_t)_mm_popcnt_u64(w) > left)
                w = _pdep_u64(((uint64_t)1 << left) - 1, w);   /* left < 64 here */
            /* quotients: differences of the ones' bit indices (the first counts from -1) */
            __m512i p = _mm512_maskz_compress_epi8(w, iota8);
            __m512i pp = _mm512_mask_permutexvar_epi8(_mm512_set1_epi8(-1), ~(__mmask64)1, prev8, p);
            __m512i q = _mm512_sub_epi8(_mm512_sub_epi8(p, pp), _mm512_set1_epi8(1));
            /* remainder fields j .. j + 63: 16-bit windows at their byte, shifted down */
            size_t rbit = j * shift, at = rbit >> 3;
            size_t avail = len - at;
            __m512i rs = _mm512_maskz_loadu_epi8(avail >= 64 ? ~(__mmask64)0 : (__mmask64)_bzhi_u64(~0ull, (unsigned)avail),
                                                 src + at);
            __m512i off = _mm512_set1_epi16((short)(rbit & 7));
            __m512i b_lo = _mm512_add_epi16(step_lo, off), b_hi = _mm512_add_epi16(step_hi, off);
            __m512i i_lo = _mm512_srli_epi16(b_lo, 3), i_hi = _mm512_srli_epi16(b_hi, 3);
            i_lo = _mm512_add_epi16(_mm512_add_epi16(i_lo, _mm512_slli_epi16(i_lo, 8)), byte_hi);
            i_hi = _mm512_add_epi16(_mm512_add_epi16(i_hi, _mm512_slli_epi16(i_hi, 8)), byte_hi);
            __m512i r_lo = _mm512_srlv_epi16(_mm512_permutexvar_epi8(i_lo, rs), _mm512_and_si512(b_lo, seven));
            __m512i r_hi = _mm512_srlv_epi16(_mm512_permutexvar_epi8(i_hi, rs), _mm512_and_si512(b_hi, seven));
            __m512i g_lo = _mm512_or_si512(_mm512_sll_epi16(_mm512_cvtepu8_epi16(_mm512_castsi512_si256(q)), count),
                                           _mm512_and_si512(r_lo, rmask));
            __m512i g_hi = _mm512_or_si512(_mm512_sll_epi16(_mm512_cvtepu8_epi16(_mm512_extracti64x4_epi64(q, 1)), count),
                                           _mm512_and_si512(r_hi, rmask));
            unsigned n = (unsigned)_mm_popcnt_u64(w);
            uint64_t valid = n == 64 ? ~0ull : ((uint64_t)1 << n) - 1;
            uint64_t large = ((uint64_t)_mm512_cmpge_epu16_mask(g_lo, big)
                              | (uint64_t)_mm512_cmpge_epu16_mask(g_hi, big) << 32) & valid;
            /* A step cut short is a branch of its own: the common step's j and bit then never
             * wait for the remainders (only the unary load and its count are on the chain). */
            uint64_t used = w;
            if (__builtin_expect(large != 0, 0)) {
                n = (unsigned)_tzcnt_u64(large);
                if (n == 0) {   /* a gap of two or more LEB128 bytes */
                    RICE_SCALAR_STEP();
                    continue;
                }
                valid = ((uint64_t)1 << n) - 1;
                used = _pdep_u64(valid, w);   /* the bits up to the step's last one */
            }
            __m512i g8 = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi16_epi8(g_lo)),
                                            _mm512_cvtepi16_epi8(g_hi), 1);
            lag = _mm512_add_epi64(lag, _mm512_sad_epu8(_mm512_maskz_mov_epi8(valid, g8), zero));
            _mm512_storeu_si512(leb + o, g8);
            o += n;
            j += n;
            bit += 64 - (size_t)__builtin_clzll(used);
        }
        RICE_SETTLE();
#undef RICE_SCALAR_STEP
#undef RICE_SETTLE
        st = (rice_state){ .j = j, .bit = bit, .next = next, .o = o };
    }
    rc = rice_gaps_tail(src, rb, u, ulen, k, shift, limit, leb, &st);
out:
    *leb_len = st.o;
    return rc ? rc : rice_finish(src, rb, u, ulen, k, shift, &st);
}

/* ---- the context coder's bands (format 5) ---- */

/* The largest 16-bit lane of v. */
static inline uint16_t hmax16_512(__m512i v)
{
    __m256i h = _mm256_max_epu16(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
    return ctx_hmax16(_mm_max_epu16(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1)));
}

static unsigned ctx_ebase16_avx512(const uint16_t *a, size_t n)
{
    const __m512i em = _mm512_set1_epi16(0x7F80);
    __m512i m0 = _mm512_setzero_si512(), m1 = m0, m2 = m0, m3 = m0;
    size_t i = 0;
    for (; i + 128 <= n; i += 128) {
        m0 = _mm512_max_epu16(m0, _mm512_and_si512(_mm512_loadu_si512(a + i), em));
        m1 = _mm512_max_epu16(m1, _mm512_and_si512(_mm512_loadu_si512(a + i + 32), em));
        m2 = _mm512_max_epu16(m2, _mm512_and_si512(_mm512_loadu_si512(a + i + 64), em));
        m3 = _mm512_max_epu16(m3, _mm512_and_si512(_mm512_loadu_si512(a + i + 96), em));
    }
    for (; i < n; i += 32) {
        __mmask32 k = n - i >= 32 ? ~(__mmask32)0 : (__mmask32)((1u << (n - i)) - 1);
        m0 = _mm512_max_epu16(m0, _mm512_and_si512(_mm512_maskz_loadu_epi16(k, a + i), em));
    }
    m0 = _mm512_max_epu16(_mm512_max_epu16(m0, m1), _mm512_max_epu16(m2, m3));
    unsigned e = (unsigned)hmax16_512(m0) >> 7;
    return e > 15 ? e - 15 : 0;
}

/* The 16 band member words of one word, 8 per register (lane q of lo: band q, of hi: band 8 + q;
 * x[k] = ~0 in the lanes whose band has bit k clear), counted by nibble lookup and vpsadbw,
 * narrowed to 16 bytes: ctx_word_counts on vectors. */
static inline void ctx_word_counts512(uint64_t p0, uint64_t p1, uint64_t p2, uint64_t p3, uint64_t v, uint8_t *wc)
{
    const __m512i x0 = _mm512_set_epi64(0, -1, 0, -1, 0, -1, 0, -1), x1 = _mm512_set_epi64(0, 0, -1, -1, 0, 0, -1, -1),
                  x2 = _mm512_set_epi64(0, 0, 0, 0, -1, -1, -1, -1), nib = _mm512_set1_epi8(0x0F),
                  lut = _mm512_set4_epi32(0x04030302, 0x03020201, 0x03020201, 0x02010100);
    /* (a ^ b) & c */
    __m512i m = _mm512_ternarylogic_epi64(_mm512_set1_epi64((long long)p0), x0, _mm512_set1_epi64((long long)v), 0x28);
    m = _mm512_ternarylogic_epi64(_mm512_set1_epi64((long long)p1), x1, m, 0x28);
    m = _mm512_ternarylogic_epi64(_mm512_set1_epi64((long long)p2), x2, m, 0x28);
    __m512i P3 = _mm512_set1_epi64((long long)p3);
    __m512i lo = _mm512_andnot_si512(P3, m), hi = _mm512_and_si512(P3, m);
    __m512i cl = _mm512_add_epi8(_mm512_shuffle_epi8(lut, _mm512_and_si512(lo, nib)),
                                 _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi64(lo, 4), nib)));
    __m512i ch = _mm512_add_epi8(_mm512_shuffle_epi8(lut, _mm512_and_si512(hi, nib)),
                                 _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi64(hi, 4), nib)));
    __m512i z = _mm512_setzero_si512();
    __m128i bl = _mm512_cvtepi64_epi8(_mm512_sad_epu8(cl, z)), bh = _mm512_cvtepi64_epi8(_mm512_sad_epu8(ch, z));
    _mm_storeu_si128((__m128i *)wc, _mm_unpacklo_epi64(bl, bh));
}

/* 64 band bytes in one register (packus interleaves 128-bit lanes, the qword permute puts them
 * back in order); plane k is the mask of the bytes with bit k set. */
static unsigned ctx_planes16_avx512(const uint16_t *a, const uint16_t *nb, size_t n, unsigned ebase, uint64_t *plane,
                                    uint8_t *wc, uint8_t *bc, uint32_t members[16], uint64_t *chw)
{
    const __m512i ff = _mm512_set1_epi16(0xFF), eb = _mm512_set1_epi16((short)ebase),
                  top = _mm512_set1_epi16(15), perm = _mm512_set_epi64(7, 5, 3, 1, 6, 4, 2, 0),
                  em = _mm512_set1_epi16(0x7F80);
    __m512i mx = _mm512_setzero_si512();   /* the exponents' max (masked loads give 0 past n) */
    size_t nw = (n + 63) / 64;
    for (size_t w = 0; w < nw; w++) {
        size_t base = w * 64, valid = n - base >= 64 ? 64 : n - base;
        uint64_t vm = valid == 64 ? ~0ull : ((1ull << valid) - 1);
        __mmask32 k0 = (__mmask32)vm, k1 = (__mmask32)(vm >> 32);
        __m512i x = _mm512_maskz_loadu_epi16(k0, a + base);
        __m512i y = _mm512_maskz_loadu_epi16(k1, a + base + 32);
        if (nb) {
            __m512i nx = _mm512_maskz_loadu_epi16(k0, nb + base);
            __m512i ny = _mm512_maskz_loadu_epi16(k1, nb + base + 32);
            chw[w] = (uint64_t)_mm512_cmpneq_epi16_mask(x, nx) | ((uint64_t)_mm512_cmpneq_epi16_mask(y, ny) << 32);
        }
        mx = _mm512_max_epu16(mx, _mm512_max_epu16(_mm512_and_si512(x, em), _mm512_and_si512(y, em)));
        x = _mm512_min_epu16(_mm512_subs_epu16(_mm512_and_si512(_mm512_srli_epi16(x, 7), ff), eb), top);
        y = _mm512_min_epu16(_mm512_subs_epu16(_mm512_and_si512(_mm512_srli_epi16(y, 7), ff), eb), top);
        __m512i bytes = _mm512_permutexvar_epi64(perm, _mm512_packus_epi16(x, y));
        uint64_t p0 = _mm512_test_epi8_mask(bytes, _mm512_set1_epi8(1));
        uint64_t p1 = _mm512_test_epi8_mask(bytes, _mm512_set1_epi8(2));
        uint64_t p2 = _mm512_test_epi8_mask(bytes, _mm512_set1_epi8(4));
        uint64_t p3 = _mm512_test_epi8_mask(bytes, _mm512_set1_epi8(8));
        uint64_t *pl = plane + w * 5;
        pl[0] = p0;
        pl[1] = p1;
        pl[2] = p2;
        pl[3] = p3;
        pl[4] = vm;
        ctx_word_counts512(p0, p1, p2, p3, vm, wc + 16 * w);
    }
    ctx_members_sum(wc, nw, members);
    if (bc)
        ctx_counts_by_band(wc, nw, bc);
    unsigned e = (unsigned)hmax16_512(mx) >> 7;
    return e > 15 ? e - 15 : 0;
}

int pulse_kernels_init_avx512(pulse_kernels *k)
{
    if (!(pulse_cpu_flags() & PULSE_CPU_AVX512))
        return -1;
    k->name = "avx512";
    k->diff8 = diff8_avx512;
    k->diff16 = diff16_avx512;
    k->count16 = count16_avx512;
    k->diff_extract16 = diff_extract16_avx512;
    k->diff_ulp16 = diff_ulp16_avx512;
    k->ulp_pack2_16 = ulp_pack2_16_avx512;
    k->diff32 = diff32_avx512;
    k->gather32 = gather32_avx512;
    k->scatter16 = scatter16_avx512;
    k->scatter32 = scatter32_avx512;
    k->ulp_encode32 = ulp_encode32_avx512;
    k->ulp_apply16 = ulp_apply16_avx512;
    k->ulp_apply32 = ulp_apply32_avx512;
    k->gaps_decode = gaps_decode_avx512;
    k->gate[PULSE_VIEW_BF16] = gate_bf16_avx512;
#ifdef PULSE_HAVE_AVX512BF16_INSN
    if (pulse_cpu_flags() & PULSE_CPU_AVX512BF16)
        k->gate[PULSE_VIEW_BF16] = gate_bf16_insn_avx512;
#endif
    k->gate[PULSE_VIEW_FP16] = gate_fp16_avx512;
    k->scatter_add_f32 = scatter_add_f32_avx512;
    k->leb1_run = leb1_run_avx512;
    k->rice_gaps = rice_gaps_avx512;
    k->ctx_ebase16 = ctx_ebase16_avx512;
    k->ctx_planes16 = ctx_planes16_avx512;
    k->ctx_select = ctx_select_bmi2;
    k->ctx_gaps16 = ctx_gaps16_sse;
    return 0;
}
