/* SPDX-License-Identifier: Apache-2.0 */
/* AVX2 kernels (x86-64, with BMI1/BMI2/POPCNT/F16C): change finding, contiguous-run scatter/gather, gaps, apply's add, the LoCo gate. */
#include <immintrin.h>
#include <pthread.h>
#include <string.h>

#include "node/kernels/kernels.h"
#include "node/kernels/kernels_ctx.h"
#include "node/kernels/kernels_tail.h"
#include "node/kernels/kernels_ulp16.h"

/* positions_of[m] lists the set bits of the byte m, ascending, padded with zeros: one
 * 8-byte load + widen + add turns 8 mask bits into up to 8 positions, so a dense mask
 * costs one store per 8 elements instead of one branch per element. */
static uint8_t positions_of[256][8];
static pthread_once_t positions_once = PTHREAD_ONCE_INIT;

static void init_positions(void)
{
    for (unsigned m = 0; m < 256; m++) {
        unsigned n = 0;
        for (unsigned bit = 0; bit < 8; bit++)
            if (m & (1u << bit))
                positions_of[m][n++] = (uint8_t)bit;
    }
}

/* Appends base + bit for every set bit of mask at idx[k..]; returns the new k. Writes up to
 * 8 entries past the returned k (inside the 64-entry slack the contract grants). Sparse
 * masks visit only their nonzero bytes; dense ones do all eight bytes without branching on
 * their contents (measured in cache: 4% changed 64 vs 50 GB/s for the sparse form, 100%
 * changed 46 vs 21 GB/s for the dense form). The popcount test itself predicts well. */
static inline size_t emit_mask(uint64_t mask, uint32_t base, uint32_t *idx, size_t k)
{
    if (_mm_popcnt_u64(mask) > 16) {
        __m256i vbase = _mm256_set1_epi32((int)base);
        for (unsigned shift = 0; shift < 64; shift += 8) {
            unsigned byte = (unsigned)(mask >> shift) & 0xff;
            __m128i packed = _mm_loadl_epi64((const __m128i *)positions_of[byte]);
            __m256i pos = _mm256_add_epi32(_mm256_cvtepu8_epi32(packed),
                                           _mm256_add_epi32(vbase, _mm256_set1_epi32((int)shift)));
            _mm256_storeu_si256((__m256i *)(idx + k), pos);
            k += (size_t)_mm_popcnt_u32(byte);
        }
        return k;
    }
    while (mask) {
        unsigned shift = (unsigned)_tzcnt_u64(mask) & ~7u;
        unsigned byte = (unsigned)(mask >> shift) & 0xff;
        __m128i packed = _mm_loadl_epi64((const __m128i *)positions_of[byte]);
        __m256i pos = _mm256_add_epi32(_mm256_cvtepu8_epi32(packed),
                                       _mm256_set1_epi32((int)(base + shift)));
        _mm256_storeu_si256((__m256i *)(idx + k), pos);
        k += (size_t)_mm_popcnt_u32(byte);
        mask &= ~(0xffull << shift);
    }
    return k;
}

static inline uint32_t ne_mask8(const uint8_t *a, const uint8_t *b)
{
    __m256i eq = _mm256_cmpeq_epi8(_mm256_loadu_si256((const __m256i *)a),
                                   _mm256_loadu_si256((const __m256i *)b));
    return ~(uint32_t)_mm256_movemask_epi8(eq);
}

static size_t diff8_avx2(const uint8_t *a, const uint8_t *b, size_t n, uint32_t *idx)
{
    size_t i = 0, k = 0;
    for (; i + 64 <= n; i += 64) {
        uint64_t m = ne_mask8(a + i, b + i) | (uint64_t)ne_mask8(a + i + 32, b + i + 32) << 32;
        if (m)
            k = emit_mask(m, (uint32_t)i, idx, k);
    }
    for (; i < n; i++)
        if (a[i] != b[i])
            idx[k++] = (uint32_t)i;
    return k;
}

/* 32 bits for 32 uint16 elements: the two compare results are packed to bytes (packs works
 * per 128-bit lane, so the quadwords are put back in order before movemask). */
static inline uint32_t ne_mask16(const uint16_t *a, const uint16_t *b)
{
    __m256i e0 = _mm256_cmpeq_epi16(_mm256_loadu_si256((const __m256i *)a),
                                    _mm256_loadu_si256((const __m256i *)b));
    __m256i e1 = _mm256_cmpeq_epi16(_mm256_loadu_si256((const __m256i *)(a + 16)),
                                    _mm256_loadu_si256((const __m256i *)(b + 16)));
    __m256i packed = _mm256_permute4x64_epi64(_mm256_packs_epi16(e0, e1), 0xd8);
    return ~(uint32_t)_mm256_movemask_epi8(packed);
}

static size_t diff16_avx2(const uint16_t *a, const uint16_t *b, size_t n, uint32_t *idx)
{
    size_t i = 0, k = 0;
    for (; i + 64 <= n; i += 64) {
        uint64_t m = ne_mask16(a + i, b + i) | (uint64_t)ne_mask16(a + i + 32, b + i + 32) << 32;
        if (m)
            k = emit_mask(m, (uint32_t)i, idx, k);
    }
    for (; i < n; i++)
        if (a[i] != b[i])
            idx[k++] = (uint32_t)i;
    return k;
}

static size_t count16_avx2(const uint16_t *a, const uint16_t *b, size_t n)
{
    size_t i = 0, k = 0;
    for (; i + 64 <= n; i += 64)
        k += (size_t)__builtin_popcountll(ne_mask16(a + i, b + i) | (uint64_t)ne_mask16(a + i + 32, b + i + 32) << 32);
    for (; i < n; i++)
        k += a[i] != b[i];
    return k;
}

/* diff16 + the changed values: the positions of each 64-element block are emitted as in
 * diff16, then its values are picked up while the block is still in L1 (AVX2 has no
 * compress instruction; these loads hit cache, unlike a later gather over the chunk). */
static size_t diff_extract16_avx2(const uint16_t *a, const uint16_t *b, size_t n, uint32_t *idx,
                                  uint16_t *va, uint16_t *vb)
{
    size_t i = 0, k = 0;
    for (; i + 64 <= n; i += 64) {
        uint64_t m = ne_mask16(a + i, b + i) | (uint64_t)ne_mask16(a + i + 32, b + i + 32) << 32;
        if (!m)
            continue;
        size_t k0 = k;
        k = emit_mask(m, (uint32_t)i, idx, k);
        if (m == ~0ull) {   /* a fully changed block: the values are the block itself */
            memcpy(va + k0, a + i, 64 * sizeof *va);
            memcpy(vb + k0, b + i, 64 * sizeof *vb);
            continue;
        }
        for (size_t j = k0; j < k; j++) {
            va[j] = a[idx[j]];
            vb[j] = b[idx[j]];
        }
    }
    for (; i < n; i++)
        if (a[i] != b[i]) {
            idx[k] = (uint32_t)i;
            va[k] = a[i];
            vb[k++] = b[i];
        }
    return k;
}

static inline uint64_t ne_mask64(const uint16_t *a, const uint16_t *b)
{
    return ne_mask16(a, b) | (uint64_t)ne_mask16(a + 32, b + 32) << 32;
}

static inline void zigzag64(const uint16_t *a, const uint16_t *b, uint16_t *z)
{
    for (unsigned v = 0; v < 64; v += 16) {
        __m256i d = _mm256_sub_epi16(_mm256_loadu_si256((const __m256i *)(b + v)),
                                     _mm256_loadu_si256((const __m256i *)(a + v)));
        _mm256_storeu_si256((__m256i *)(z + v), _mm256_xor_si256(_mm256_add_epi16(d, d), _mm256_srai_epi16(d, 15)));
    }
}

/* diff_ulp16: the shared group loop (kernels_ulp16.h) over 32-lane compares. */
static size_t diff_ulp16_avx2(const uint16_t *a, const uint16_t *b, size_t n, uint8_t *leb, size_t *leb_len,
                              uint16_t *z)
{
    return diff_ulp16_groups(a, b, n, leb, leb_len, z, ne_mask64, zigzag64);
}

/* ulp_pack2_16, 16 values a round: symbols min(z, 4) - 1 narrowed to bytes, four to a byte
 * by two multiply-adds, counts by movemask + popcount, the escapes one by one. */
static size_t ulp_pack2_16_avx2(const uint16_t *z, size_t k, uint8_t *packed, uint8_t *esc, uint32_t hist[256])
{
    size_t j = 0, el = 0;
    uint64_t c1 = 0, c2 = 0, cesc = 0;
    const __m256i four = _mm256_set1_epi16(4), one = _mm256_set1_epi16(1), two = _mm256_set1_epi16(2);
    for (; j + 16 <= k; j += 16) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(z + j));
        __m256i mn = _mm256_min_epu16(v, four), sym = _mm256_sub_epi16(mn, one);
        __m128i bytes = _mm_packus_epi16(_mm256_castsi256_si128(sym), _mm256_extracti128_si256(sym, 1));
        __m128i pairs = _mm_maddubs_epi16(bytes, _mm_set1_epi16(0x0401));
        __m128i quads = _mm_madd_epi16(pairs, _mm_set1_epi32(0x00100001));
        __m128i out = _mm_packus_epi16(_mm_packus_epi32(quads, quads), _mm_setzero_si128());
        uint32_t w = (uint32_t)_mm_cvtsi128_si32(out);
        memcpy(packed + j / 4, &w, 4);
        c1 += (uint64_t)_mm_popcnt_u32((uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi16(v, one))) / 2;
        c2 += (uint64_t)_mm_popcnt_u32((uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi16(v, two))) / 2;
        /* one bit per lane: the low byte's bit of each 16-bit lane */
        uint32_t e = _pext_u32((uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi16(mn, four)), 0x55555555u);
        cesc += (uint64_t)_mm_popcnt_u32(e);
        /* Escapes that fit one LEB128 byte (z < 132, nearly all): z - 4 narrowed to bytes and
         * compressed by the set-bit table, 8 lanes at a time, with no branch on how many there
         * are (a loop over them mispredicted its exit about once a round). */
        uint32_t wide = (uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi16(_mm256_max_epu16(v, _mm256_set1_epi16(132)), v));
        if (__builtin_expect(wide != 0, 0)) {
            el = ulp_pack2_escapes(z, j, e, esc, el);
            continue;
        }
        __m256i zm4 = _mm256_sub_epi16(v, four);   /* lanes without an escape give 0 below: unused */
        __m128i eb = _mm_packus_epi16(_mm256_castsi256_si128(zm4), _mm256_extracti128_si256(zm4, 1));
        __m128i lo = _mm_shuffle_epi8(eb, _mm_loadl_epi64((const __m128i *)positions_of[e & 0xff]));
        __m128i hi = _mm_shuffle_epi8(_mm_srli_si128(eb, 8), _mm_loadl_epi64((const __m128i *)positions_of[e >> 8]));
        _mm_storel_epi64((__m128i *)(esc + el), lo);
        el += (size_t)_mm_popcnt_u32(e & 0xff);
        _mm_storel_epi64((__m128i *)(esc + el), hi);
        el += (size_t)_mm_popcnt_u32(e >> 8);
    }
    ulp_pack2_counts(hist, j, c1, c2, cesc, esc, el);
    return ulp_pack2_16_tail(z, j, k, packed, esc, el, hist);
}

static inline uint32_t ne_mask32(const uint32_t *a, const uint32_t *b)
{
    __m256i eq = _mm256_cmpeq_epi32(_mm256_loadu_si256((const __m256i *)a),
                                    _mm256_loadu_si256((const __m256i *)b));
    return ~(uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(eq)) & 0xff;
}

static size_t diff32_avx2(const uint32_t *a, const uint32_t *b, size_t n, uint32_t *idx)
{
    size_t i = 0, k = 0;
    for (; i + 64 <= n; i += 64) {
        uint64_t m = 0;
        for (unsigned v = 0; v < 8; v++)
            m |= (uint64_t)ne_mask32(a + i + 8 * v, b + i + 8 * v) << (8 * v);
        if (m)
            k = emit_mask(m, (uint32_t)i, idx, k);
    }
    for (; i < n; i++)
        if (a[i] != b[i])
            idx[k++] = (uint32_t)i;
    return k;
}

/* The 16 positions idx[j..j+15] are idx[j], idx[j]+1, ..., idx[j]+15. Dense chunks (every
 * element changed) are then one vector load/store instead of 16 scalar ones; the full
 * compare (not just first and last) keeps duplicates or unsorted input on the exact path. */
static inline int run16(const uint32_t *idx)
{
    __m256i first = _mm256_set1_epi32((int)idx[0]);
    __m256i want0 = _mm256_add_epi32(first, _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    __m256i want1 = _mm256_add_epi32(first, _mm256_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15));
    __m256i eq = _mm256_and_si256(
        _mm256_cmpeq_epi32(want0, _mm256_loadu_si256((const __m256i *)idx)),
        _mm256_cmpeq_epi32(want1, _mm256_loadu_si256((const __m256i *)(idx + 8))));
    /* idx[0] + 15 must not wrap either, or the "run" would straddle 2^32. */
    return _mm256_movemask_epi8(eq) == -1 && idx[0] <= UINT32_MAX - 15;
}

static inline __m256i unzigzag16(__m256i z)
{
    __m256i sign = _mm256_sub_epi16(_mm256_setzero_si256(),
                                    _mm256_and_si256(z, _mm256_set1_epi16(1)));
    return _mm256_xor_si256(_mm256_srli_epi16(z, 1), sign);
}

static inline __m256i zigzag16(__m256i d)
{
    return _mm256_xor_si256(_mm256_slli_epi16(d, 1), _mm256_srai_epi16(d, 15));
}

static void gather16_avx2(const uint16_t *src, const uint32_t *idx, size_t k, uint16_t *out)
{
    size_t j = 0;
    for (; j + 16 <= k; j += 16) {
        if (run16(idx + j)) {
            _mm256_storeu_si256((__m256i *)(out + j),
                                _mm256_loadu_si256((const __m256i *)(src + idx[j])));
        } else {
            for (unsigned e = 0; e < 16; e++)
                out[j + e] = src[idx[j + e]];
        }
    }
    for (; j < k; j++)
        out[j] = src[idx[j]];
}

static void scatter16_avx2(uint16_t *dst, const uint32_t *idx, size_t k, const uint16_t *v)
{
    size_t j = 0;
    for (; j + 16 <= k; j += 16) {
        if (run16(idx + j)) {
            _mm256_storeu_si256((__m256i *)(dst + idx[j]),
                                _mm256_loadu_si256((const __m256i *)(v + j)));
        } else {
            const uint32_t *pf = prefetch_from(idx, j, k, 16);
            for (unsigned e = 0; e < 16; e++) {
                prefetch16(dst, pf[e]);
                dst[idx[j + e]] = v[j + e];
            }
        }
    }
    for (; j < k; j++)
        dst[idx[j]] = v[j];
}

static void ulp_encode16_avx2(const uint16_t *a, const uint16_t *b, const uint32_t *idx, size_t k,
                              uint16_t *out)
{
    size_t j = 0;
    for (; j + 16 <= k; j += 16) {
        if (run16(idx + j)) {
            __m256i d = _mm256_sub_epi16(_mm256_loadu_si256((const __m256i *)(b + idx[j])),
                                         _mm256_loadu_si256((const __m256i *)(a + idx[j])));
            _mm256_storeu_si256((__m256i *)(out + j), zigzag16(d));
        } else {
            for (unsigned e = 0; e < 16; e++) {
                uint16_t d = (uint16_t)(b[idx[j + e]] - a[idx[j + e]]);
                out[j + e] = (uint16_t)((uint16_t)(d << 1) ^ (uint16_t)((int16_t)d >> 15));
            }
        }
    }
    for (; j < k; j++) {
        uint16_t d = (uint16_t)(b[idx[j]] - a[idx[j]]);
        out[j] = (uint16_t)((uint16_t)(d << 1) ^ (uint16_t)((int16_t)d >> 15));
    }
}

static void ulp_apply16_avx2(uint16_t *dst, const uint32_t *idx, size_t k, const uint16_t *z)
{
    size_t j = 0;
    for (; j + 16 <= k; j += 16) {
        __m256i delta = unzigzag16(_mm256_loadu_si256((const __m256i *)(z + j)));
        if (run16(idx + j)) {
            __m256i *p = (__m256i *)(dst + idx[j]);
            _mm256_storeu_si256(p, _mm256_add_epi16(_mm256_loadu_si256(p), delta));
        } else {
            uint16_t d[16];
            _mm256_storeu_si256((__m256i *)d, delta);
            const uint32_t *pf = prefetch_from(idx, j, k, 16);
            for (unsigned e = 0; e < 16; e++) {
                prefetch16(dst, pf[e]);
                dst[idx[j + e]] = (uint16_t)(dst[idx[j + e]] + d[e]);
            }
        }
    }
    for (; j < k; j++)
        dst[idx[j]] = (uint16_t)(dst[idx[j]] + ((z[j] >> 1) ^ (uint16_t)(0u - (z[j] & 1u))));
}

static void ulp_to_abs16_avx2(const uint16_t *base, const uint32_t *idx, size_t k,
                              const uint16_t *z, uint16_t *v)
{
    size_t j = 0;
    for (; j + 16 <= k; j += 16) {
        __m256i delta = unzigzag16(_mm256_loadu_si256((const __m256i *)(z + j)));
        if (run16(idx + j)) {
            __m256i b = _mm256_loadu_si256((const __m256i *)(base + idx[j]));
            _mm256_storeu_si256((__m256i *)(v + j), _mm256_add_epi16(b, delta));
        } else {
            uint16_t d[16];
            _mm256_storeu_si256((__m256i *)d, delta);
            for (unsigned e = 0; e < 16; e++)
                v[j + e] = (uint16_t)(base[idx[j + e]] + d[e]);
        }
    }
    for (; j < k; j++)
        v[j] = (uint16_t)(base[idx[j]] + ((z[j] >> 1) ^ (uint16_t)(0u - (z[j] & 1u))));
}

/* 32-bit elements: hardware gather reads exactly 4 bytes per index, so it never touches
 * memory the scalar loop would not. */
static void gather32_avx2(const uint32_t *src, const uint32_t *idx, size_t k, uint32_t *out)
{
    size_t j = 0;
    for (; j + 8 <= k; j += 8) {
        __m256i vi = _mm256_loadu_si256((const __m256i *)(idx + j));
        _mm256_storeu_si256((__m256i *)(out + j), _mm256_i32gather_epi32((const int *)src, vi, 4));
    }
    for (; j < k; j++)
        out[j] = src[idx[j]];
}

static void gaps_encode_avx2(const uint32_t *idx, size_t k, uint32_t *gaps)
{
    if (k == 0)
        return;
    gaps[0] = idx[0];
    size_t j = 1;
    __m256i one = _mm256_set1_epi32(1);
    for (; j + 8 <= k; j += 8) {
        __m256i cur = _mm256_loadu_si256((const __m256i *)(idx + j));
        __m256i prev = _mm256_loadu_si256((const __m256i *)(idx + j - 1));
        _mm256_storeu_si256((__m256i *)(gaps + j),
                            _mm256_sub_epi32(_mm256_sub_epi32(cur, prev), one));
    }
    for (; j < k; j++)
        gaps[j] = idx[j] - idx[j - 1] - 1;
}

/* Prefix sum of 8 lanes: in-lane shifts, then the low lane's total carried to the high lane. */
static inline __m256i prefix8(__m256i x)
{
    x = _mm256_add_epi32(x, _mm256_slli_si256(x, 4));
    x = _mm256_add_epi32(x, _mm256_slli_si256(x, 8));
    __m256i low_total = _mm256_shuffle_epi32(x, 0xff);
    return _mm256_add_epi32(x, _mm256_permute2x128_si256(low_total, low_total, 0x08));
}

/* Works on next = position + 1 (0 before the first) in 32 bits, so valid values lie in
 * [1, limit]. Each step adds gap + 1 <= 2^32, so the first step whose exact sum passes 2^32
 * leaves next(32 bit) <= the previous next: "next > limit or next not increasing" in any
 * lane is exactly "some position reaches limit or wraps" (later lanes after a bad one
 * may be garbage, but the answer is already -1). */
static int gaps_decode_avx2(const uint32_t *gaps, size_t k, uint32_t limit, uint32_t *idx)
{
    uint64_t next = 0;
    size_t j = 0;
    __m256i one = _mm256_set1_epi32(1);
    __m256i vlimit = _mm256_set1_epi32((int)limit);
    __m256i rotate = _mm256_setr_epi32(7, 0, 1, 2, 3, 4, 5, 6);
    __m256i bad = _mm256_setzero_si256();
    for (; j + 8 <= k; j += 8) {
        __m256i g = _mm256_loadu_si256((const __m256i *)(gaps + j));
        __m256i vnext = _mm256_add_epi32(prefix8(_mm256_add_epi32(g, one)),
                                         _mm256_set1_epi32((int)(uint32_t)next));
        __m256i vprev = _mm256_blend_epi32(_mm256_permutevar8x32_epi32(vnext, rotate),
                                           _mm256_set1_epi32((int)(uint32_t)next), 0x01);
        /* unsigned a > b  <=>  max(a, b) != b; here: next > limit, or next <= prev */
        __m256i over = _mm256_xor_si256(_mm256_cmpeq_epi32(_mm256_max_epu32(vnext, vlimit), vlimit),
                                        _mm256_set1_epi32(-1));
        __m256i not_up = _mm256_cmpeq_epi32(_mm256_max_epu32(vnext, vprev), vprev);
        bad = _mm256_or_si256(bad, _mm256_or_si256(over, not_up));
        _mm256_storeu_si256((__m256i *)(idx + j), _mm256_sub_epi32(vnext, one));
        next = (uint32_t)_mm256_extract_epi32(vnext, 7);
        /* a bad block may leave a wrong `next`; checking once per 64 keeps the loop short
         * and the caller discards idx on error anyway */
        if ((j & 63) == 56 && !_mm256_testz_si256(bad, bad))
            return -1;
    }
    if (!_mm256_testz_si256(bad, bad))
        return -1;
    return gaps_decode_tail(gaps, j, k, next, limit, idx);
}

/* Eight changes a step while their gaps are one byte each: positions by a vector prefix sum
 * of gap + 1 (prefix8; 32-bit lanes: positions stay below 2^32 in a chunk), deltas by a lane
 * permute of the 2-bit symbols, then eight scalar adds from the vectors stored to the stack
 * (16-bit elements have no scatter). The running position advances by the byte sum of the
 * gaps (psadbw) + 8, off the vectors' latency. Escapes are patched in after the step (their
 * permuted delta is 0). The AVX-512 table keeps this one: a 16-a-step zmm version ran 940-960
 * against this one's 1200 M changes/s cache-resident on a Xeon VM (checkkernels --bench
 * --bench-bytes 65536), and the same from memory. */
static void ulp2_add16_avx2(uint16_t *d, const uint8_t *g, size_t glen, const uint8_t *packed,
                            const uint8_t *esc, size_t k)
{
    const __m256i one = _mm256_set1_epi32(1), three = _mm256_set1_epi32(3);
    const __m256i shifts = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
    const __m256i dtab = _mm256_setr_epi32(0xffff, 1, 0xfffe, 0, 0, 0, 0, 0);
    uint64_t next = 0, cur = 0;
    size_t at = 0, eat = 0, j = 0;
    while (j + 8 <= k) {
        __m128i gb;
        if (at + 8 > glen || _mm_movemask_epi8(gb = _mm_loadl_epi64((const __m128i *)(g + at)))) {
            ulp2_add16_tail(d, g, &at, packed, esc, &eat, j, j + 1, &next);
            j++;
            continue;
        }
        __m256i p = prefix8(_mm256_add_epi32(_mm256_cvtepu8_epi32(gb), one));
        p = _mm256_add_epi32(p, _mm256_set1_epi32((int)(uint32_t)(next - 1)));
        next += (uint64_t)_mm_cvtsi128_si64(_mm_sad_epu8(gb, _mm_setzero_si128())) + 8;
        uint32_t w;
        memcpy(&w, packed + (j >> 2), 4);   /* within the 4 padding bytes: j + 8 <= k */
        __m256i sym = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)(w >> (2 * (j & 3)))), shifts),
                                       three);
        unsigned em = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(sym, three)));
        uint32_t pos[8], dl[8];
        _mm256_storeu_si256((__m256i *)pos, p);
        _mm256_storeu_si256((__m256i *)dl, _mm256_permutevar8x32_epi32(dtab, sym));
        ulp2_add16_step(d, pos, dl, 8, em, esc, &eat);
        cur = prefetch_cursor(d, cur, pos[7]);
        j += 8;
        at += 8;
    }
    ulp2_add16_tail(d, g, &at, packed, esc, &eat, j, k, &next);
}

/* ---------- the LoCo gate (reference: gate_*_c in kernels_c.c) ---------- */

/* The scalar tail: the same two FP32 roundings as the reference (SSE scalar add/sub round
 * exactly like the vector lanes), `changes` decided by the view-specific test. */
static inline int nonfinite_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    return (u & 0x7f800000u) == 0x7f800000u;
}

static inline uint32_t bf16_of(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

static inline uint32_t fp16_of(float x)
{
    return (uint32_t)_cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

#define GATE_TAIL(OF) \
    for (; i < n; i++) { \
        float a = delta[i] + e[i]; \
        float x = theta[i] - a; \
        if (nonfinite_bits(theta[i]) || nonfinite_bits(a) || OF(x) != OF(theta[i])) { \
            idx[k] = (uint32_t)i; \
            val[k] = a != a ? canonical_nan() : a; \
            k++; \
            e[i] = 0.0f; \
        } else { \
            e[i] = a; \
        } \
    }

/* Lanes whose exponent field is all ones (NaN or Inf): all-ones lanes. */
static inline __m256i nonfinite8(__m256i u)
{
    __m256i expo = _mm256_set1_epi32(0x7f800000);
    return _mm256_cmpeq_epi32(_mm256_and_si256(u, expo), expo);
}

/* BF16 RNE on integer lanes, as bf16_rne in kernels_c.c, left in the top 16 bits. */
static inline __m256i bf16_rne8(__m256i u)
{
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    return _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb);
}

/* Appends the lanes of `changes` (8-bit mask) as positions base + lane and values of a (NaN
 * made canonical). Always
 * stores all 8 lanes at idx + k and val + k: k <= base and base + 8 <= n, so that stays
 * inside the room for n entries, and no branch depends on the (random) mask. */
static inline size_t emit8(unsigned changes, uint32_t base, __m256 a, uint32_t *idx, float *val, size_t k)
{
    __m256i perm = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)positions_of[changes]));
    _mm256_storeu_si256((__m256i *)(idx + k), _mm256_add_epi32(perm, _mm256_set1_epi32((int)base)));
    __m256 nan = _mm256_cmp_ps(a, a, _CMP_UNORD_Q);
    a = _mm256_blendv_ps(a, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000)), nan);
    _mm256_storeu_ps(val + k, _mm256_permutevar8x32_ps(a, perm));
    return k + (size_t)_mm_popcnt_u32(changes);
}

/* KEEP8 computes `keep` (all-ones lanes where the view does not change) from x and t. */
#define DEFINE_GATE_AVX2(V, KEEP8, OF) \
static size_t gate_##V##_avx2(const float *theta, const float *delta, float *e, size_t n, \
                              uint32_t *idx, float *val) \
{ \
    size_t i = 0, k = 0; \
    for (; i + 8 <= n; i += 8) { \
        __m256 t = _mm256_loadu_ps(theta + i); \
        __m256 a = _mm256_add_ps(_mm256_loadu_ps(delta + i), _mm256_loadu_ps(e + i)); \
        __m256 x = _mm256_sub_ps(t, a); \
        __m256i ut = _mm256_castps_si256(t), ua = _mm256_castps_si256(a), \
                ux = _mm256_castps_si256(x); \
        __m256i keep; \
        KEEP8 \
        keep = _mm256_andnot_si256(_mm256_or_si256(nonfinite8(ut), nonfinite8(ua)), keep); \
        _mm256_storeu_ps(e + i, _mm256_and_ps(_mm256_castsi256_ps(keep), a)); \
        unsigned changes = ~(unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(keep)) & 0xffu; \
        k = emit8(changes, (uint32_t)i, a, idx, val, k); \
    } \
    GATE_TAIL(OF) \
    return k; \
}

/* same BF16 <=> the top halves of the rounded patterns agree */
#define KEEP8_BF16 \
    keep = _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_xor_si256(bf16_rne8(ux), bf16_rne8(ut)), \
                                               _mm256_set1_epi32((int)0xffff0000u)), \
                              _mm256_setzero_si256());
/* vcvtps2ph with round-to-nearest-even is the IEEE conversion fp16_rne defines */
#define KEEP8_FP16 \
    (void)ux; \
    keep = _mm256_cvtepi16_epi32(_mm_cmpeq_epi16( \
        _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), \
        _mm256_cvtps_ph(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));

DEFINE_GATE_AVX2(bf16, KEEP8_BF16, bf16_of)
DEFINE_GATE_AVX2(fp16, KEEP8_FP16, fp16_of)

static inline uint64_t hsum64_avx2(__m256i v)
{
    __m128i s = _mm_add_epi64(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    return (uint64_t)_mm_cvtsi128_si64(s) + (uint64_t)_mm_extract_epi64(s, 1);
}

/* 32 bytes a step: the sign bits say whether a byte ends the run, vpsadbw sums the bytes
 * (four 64-bit lanes, no overflow for any length in memory). */
static size_t leb1_run_avx2(const uint8_t *src, size_t n, uint64_t *sum)
{
    const __m256i zero = _mm256_setzero_si256();
    const __m256i iota = _mm256_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18,
                                          19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31);
    __m256i acc = zero;
    size_t j = 0;
    for (; j + 32 <= n; j += 32) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(src + j));
        unsigned m = (unsigned)_mm256_movemask_epi8(v);
        if (m) {
            unsigned r = _tzcnt_u32(m);
            __m256i keep = _mm256_cmpgt_epi8(_mm256_set1_epi8((char)r), iota);   /* lanes < r */
            acc = _mm256_add_epi64(acc, _mm256_sad_epu8(_mm256_and_si256(v, keep), zero));
            *sum += hsum64_avx2(acc);
            return j + r;
        }
        acc = _mm256_add_epi64(acc, _mm256_sad_epu8(v, zero));
    }
    *sum += hsum64_avx2(acc);
    return leb1_run_tail(src, j, n, sum);
}

/* rice_put 32 gaps a step while they are one byte each with quotients under 8 (shift <= 6):
 * the remainders packed by two multiply-adds and a shift (8s bits in each 64-bit lane), the
 * unary codes of each lane's eight gaps made in the lane (prefix sums of quotient + 1 by three
 * shifted adds, then one variable shift of 1 per gap), and the four lanes' fields and codes
 * appended by the reference's bit writers; any other step is the reference's. The bits are
 * the reference's by construction: the planes are one concatenation, whichever way a step
 * is cut. */
static inline __attribute__((always_inline)) size_t rice_put_avx2_at(const uint8_t *leb, size_t len, size_t k,
                                                                     const unsigned s, uint8_t *out)
{
    size_t rb = pulse_rice_rem_bytes(k, s);
    rice_writer r = { .p = out }, u = { .p = out + rb };
    size_t at = 0;
    const __m256i slow = _mm256_set1_epi8((char)(0x80 | (0xffu << (s + 3 < 8 ? s + 3 : 8) & 0xff)));
    const __m256i fmask = _mm256_set1_epi8((char)((1u << s) - 1)), qmask = _mm256_set1_epi8((char)(0xffu >> s));
    const __m256i m1 = _mm256_set1_epi16((short)(1 | (1 << (8 + s)))), m2 = _mm256_set1_epi32(1 | (1 << (16 + 2 * s)));
    const __m256i one8 = _mm256_set1_epi8(1), low32 = _mm256_set1_epi64x(0xffffffffll), ones = _mm256_set1_epi64x(1);
    const __m256i bytemask = _mm256_set1_epi64x(0xff);
    const __m128i c4 = _mm_cvtsi32_si128((int)(4 * s)), cs = _mm_cvtsi32_si128((int)s);
    while (s <= 6 && at + 32 <= len) {
        __m256i x = _mm256_loadu_si256((const __m256i *)(const void *)(leb + at));
        if (!_mm256_testz_si256(x, slow)) {
            rice_put_step(leb, len, &at, s, &r, &u);
            continue;
        }
        /* remainders: pairs (a + b << s), then quads, then the lane's two halves */
        __m256i f = _mm256_maddubs_epi16(_mm256_and_si256(x, fmask), m1);
        f = _mm256_madd_epi16(f, m2);
        f = _mm256_or_si256(_mm256_and_si256(f, low32), _mm256_sll_epi64(_mm256_srli_epi64(f, 32), c4));
        /* unary: byte i of p = P_i + 1, the end of gap i's code in its lane */
        __m256i q = _mm256_and_si256(_mm256_srl_epi16(x, cs), qmask);
        __m256i p = _mm256_add_epi8(q, one8);
        p = _mm256_add_epi8(p, _mm256_slli_epi64(p, 8));
        p = _mm256_add_epi8(p, _mm256_slli_epi64(p, 16));
        p = _mm256_add_epi8(p, _mm256_slli_epi64(p, 32));
        __m256i code = _mm256_setzero_si256();
        for (int i = 0; i < 8; i++) {
            __m256i end = _mm256_and_si256(_mm256_srli_epi64(p, 8 * i), bytemask);
            code = _mm256_or_si256(code, _mm256_sllv_epi64(ones, _mm256_sub_epi64(end, ones)));
        }
        uint64_t fl[4], cl[4], pl[4];
        _mm256_storeu_si256((__m256i *)(void *)fl, f);
        _mm256_storeu_si256((__m256i *)(void *)cl, code);
        _mm256_storeu_si256((__m256i *)(void *)pl, p);
        for (int l = 0; l < 4; l++) {
            rice_bits(&r, fl[l], 8 * s);
            rice_bits_last(&u, cl[l], (unsigned)(pl[l] >> 56));
        }
        at += 32;
    }
    while (at < len)
        rice_put_step(leb, len, &at, s, &r, &u);
    rice_flush(&r);
    return (size_t)(rice_flush(&u) - out);
}

static size_t rice_put_avx2(const uint8_t *leb, size_t len, size_t k, unsigned shift, uint8_t *out)
{
    switch (shift) {
    case 0: return rice_put_avx2_at(leb, len, k, 0, out);
    case 1: return rice_put_avx2_at(leb, len, k, 1, out);
    case 2: return rice_put_avx2_at(leb, len, k, 2, out);
    case 3: return rice_put_avx2_at(leb, len, k, 3, out);
    case 4: return rice_put_avx2_at(leb, len, k, 4, out);
    case 5: return rice_put_avx2_at(leb, len, k, 5, out);
    case 6: return rice_put_avx2_at(leb, len, k, 6, out);
    default: return rice_put_ref(leb, len, k, shift, out);
    }
}

/* No byte compress here: the portable blocks (kernels_tail.h). */
static int rice_gaps_avx2(const uint8_t *src, size_t len, size_t k, unsigned shift, uint32_t limit, uint8_t *leb,
                        size_t *leb_len)
{
    return rice_gaps_portable(pulse_rice_byte_table(), src, len, k, shift, limit, leb, leb_len);
}

/* ---- the context coder's bands (format 5) ---- */

static unsigned ctx_ebase16_avx2(const uint16_t *a, size_t n)
{
    const __m256i em = _mm256_set1_epi16(0x7F80);
    __m256i m0 = _mm256_setzero_si256(), m1 = m0, m2 = m0, m3 = m0;
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        m0 = _mm256_max_epu16(m0, _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(a + i)), em));
        m1 = _mm256_max_epu16(m1, _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(a + i + 16)), em));
        m2 = _mm256_max_epu16(m2, _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(a + i + 32)), em));
        m3 = _mm256_max_epu16(m3, _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(a + i + 48)), em));
    }
    m0 = _mm256_max_epu16(_mm256_max_epu16(m0, m1), _mm256_max_epu16(m2, m3));
    uint16_t mx = ctx_hmax16(_mm_max_epu16(_mm256_castsi256_si128(m0), _mm256_extracti128_si256(m0, 1)));
    for (; i < n; i++) {
        uint16_t v = a[i] & 0x7F80u;
        mx = v > mx ? v : mx;
    }
    unsigned e = mx >> 7;
    return e > 15 ? e - 15 : 0;
}

/* 32 band bytes per register (packus interleaves the 128-bit lanes, the qword permute puts
 * them back in order); plane k: bit k of each byte moved to its top bit, then movemask. A
 * last partial word goes through a zero-padded copy (band 0, unchanged). */
static unsigned ctx_planes16_avx2(const uint16_t *a, const uint16_t *nb, size_t n, unsigned ebase, uint64_t *plane,
                                  uint8_t *wc, uint8_t *bc, uint32_t members[16], uint64_t *chw)
{
    const __m256i ff = _mm256_set1_epi16(0xFF), eb = _mm256_set1_epi16((short)ebase), top = _mm256_set1_epi16(15),
                  em = _mm256_set1_epi16(0x7F80);
    __m256i mx = _mm256_setzero_si256();   /* the exponents' max (a partial word's padding is 0) */
    size_t nw = (n + 63) / 64;
    for (size_t w = 0; w < nw; w++) {
        size_t base = w * 64, valid = n - base >= 64 ? 64 : n - base;
        uint64_t vm = valid == 64 ? ~0ull : ((1ull << valid) - 1);
        const uint16_t *o = a + base, *e = nb ? nb + base : NULL;
        uint16_t to[64], te[64];
        if (valid < 64)
            ctx_pad_word(&o, &e, valid, to, te);
        __m256i v[4];
        for (unsigned i = 0; i < 4; i++)
            v[i] = _mm256_loadu_si256((const __m256i *)(o + 16 * i));
        if (e) {
            __m256i q[4];
            for (unsigned i = 0; i < 4; i++)
                q[i] = _mm256_cmpeq_epi16(v[i], _mm256_loadu_si256((const __m256i *)(e + 16 * i)));
            __m256i e0 = _mm256_permute4x64_epi64(_mm256_packs_epi16(q[0], q[1]), 0xD8);
            __m256i e1 = _mm256_permute4x64_epi64(_mm256_packs_epi16(q[2], q[3]), 0xD8);
            uint64_t eq = (uint64_t)(uint32_t)_mm256_movemask_epi8(e0) |
                          ((uint64_t)(uint32_t)_mm256_movemask_epi8(e1) << 32);
            chw[w] = ~eq;
        }
        mx = _mm256_max_epu16(mx, _mm256_max_epu16(_mm256_max_epu16(_mm256_and_si256(v[0], em), _mm256_and_si256(v[1], em)),
                                                    _mm256_max_epu16(_mm256_and_si256(v[2], em), _mm256_and_si256(v[3], em))));
        for (unsigned i = 0; i < 4; i++)
            v[i] = _mm256_min_epu16(_mm256_subs_epu16(_mm256_and_si256(_mm256_srli_epi16(v[i], 7), ff), eb), top);
        __m256i b0 = _mm256_permute4x64_epi64(_mm256_packus_epi16(v[0], v[1]), 0xD8);
        __m256i b1 = _mm256_permute4x64_epi64(_mm256_packus_epi16(v[2], v[3]), 0xD8);
        uint64_t p[4];
        for (unsigned k = 0; k < 4; k++) {
            uint32_t lo = (uint32_t)_mm256_movemask_epi8(_mm256_slli_epi16(b0, (int)(7 - k)));
            uint32_t hi = (uint32_t)_mm256_movemask_epi8(_mm256_slli_epi16(b1, (int)(7 - k)));
            p[k] = ((uint64_t)hi << 32) | lo;
        }
        uint64_t *pl = plane + w * 5;
        pl[0] = p[0];
        pl[1] = p[1];
        pl[2] = p[2];
        pl[3] = p[3];
        pl[4] = vm;
        ctx_word_counts(p[0], p[1], p[2], p[3], vm, wc + 16 * w);
    }
    ctx_members_sum(wc, nw, members);
    if (bc)
        ctx_counts_by_band(wc, nw, bc);
    unsigned e = (unsigned)ctx_hmax16(_mm_max_epu16(_mm256_castsi256_si128(mx), _mm256_extracti128_si256(mx, 1))) >> 7;
    return e > 15 ? e - 15 : 0;
}

int pulse_kernels_init_avx2(pulse_kernels *k)
{
    if (!(pulse_cpu_flags() & PULSE_CPU_AVX2))
        return -1;
    pthread_once(&positions_once, init_positions);
    k->name = "avx2";
    k->rice_gaps = rice_gaps_avx2;
    k->rice_put = rice_put_avx2;
    k->diff8 = diff8_avx2;
    k->diff16 = diff16_avx2;
    k->count16 = count16_avx2;
    k->diff_extract16 = diff_extract16_avx2;
    k->diff_ulp16 = diff_ulp16_avx2;
    k->ulp_pack2_16 = ulp_pack2_16_avx2;
    k->diff32 = diff32_avx2;
    k->gather16 = gather16_avx2;
    k->gather32 = gather32_avx2;
    k->scatter16 = scatter16_avx2;
    k->ulp_encode16 = ulp_encode16_avx2;
    k->ulp_apply16 = ulp_apply16_avx2;
    k->ulp_to_abs16 = ulp_to_abs16_avx2;
    k->gaps_encode = gaps_encode_avx2;
    k->gaps_decode = gaps_decode_avx2;
    k->gate[PULSE_VIEW_BF16] = gate_bf16_avx2;
    k->gate[PULSE_VIEW_FP16] = gate_fp16_avx2;
    k->leb1_run = leb1_run_avx2;
    k->ulp2_add16 = ulp2_add16_avx2;
    k->ctx_ebase16 = ctx_ebase16_avx2;
    k->ctx_planes16 = ctx_planes16_avx2;
    k->ctx_select = ctx_select_bmi2;
    k->ctx_gaps16 = ctx_gaps16_sse;
    return 0;
}
