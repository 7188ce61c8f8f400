/* SPDX-License-Identifier: Apache-2.0 */
/* AArch64 Advanced SIMD (NEON) kernels: change finding and counting, the fused ulp diff and 2-bit packing, gaps, the BF16 LoCo gate and the context coder's bands; the rest stays on the reference. */
#include <arm_neon.h>
#include <string.h>

#include "node/kernels/kernels.h"
#include "node/kernels/kernels_ctx.h"
#include "node/kernels/kernels_tail.h"
#include "node/kernels/kernels_ulp16.h"

/* NEON has no movemask: a compare result is narrowed into a 64-bit word holding a fixed
 * number of bits per element (4 for bytes, 8 for halfwords, 16 for words); one bit per
 * element is kept and its index recovered with ctz / bits-per-element. */
static inline size_t emit_bits(uint64_t bits, unsigned shift, uint32_t base, uint32_t *idx, size_t k)
{
    while (bits) {
        idx[k++] = base + (uint32_t)(__builtin_ctzll(bits) >> shift);
        bits &= bits - 1;
    }
    return k;
}

static size_t diff8_neon(const uint8_t *a, const uint8_t *b, size_t n, uint32_t *idx)
{
    size_t i = 0, k = 0;
    for (; i + 64 <= n; i += 64) {
        uint8x16_t ne[4];
        for (unsigned v = 0; v < 4; v++)
            ne[v] = vmvnq_u8(vceqq_u8(vld1q_u8(a + i + 16 * v), vld1q_u8(b + i + 16 * v)));
        uint8x16_t any = vorrq_u8(vorrq_u8(ne[0], ne[1]), vorrq_u8(ne[2], ne[3]));
        if (!vmaxvq_u8(any))
            continue; /* the common case when few elements changed: one reduction per 64 */
        for (unsigned v = 0; v < 4; v++) {
            uint64_t m = vget_lane_u64(vreinterpret_u64_u8(vshrn_n_u16(vreinterpretq_u16_u8(ne[v]), 4)), 0);
            k = emit_bits(m & 0x1111111111111111ull, 2, (uint32_t)(i + 16 * v), idx, k);
        }
    }
    for (; i < n; i++)
        if (a[i] != b[i])
            idx[k++] = (uint32_t)i;
    return k;
}

static size_t diff16_neon(const uint16_t *a, const uint16_t *b, size_t n, uint32_t *idx)
{
    size_t i = 0, k = 0;
    for (; i + 32 <= n; i += 32) {
        uint16x8_t ne[4];
        for (unsigned v = 0; v < 4; v++)
            ne[v] = vmvnq_u16(vceqq_u16(vld1q_u16(a + i + 8 * v), vld1q_u16(b + i + 8 * v)));
        uint16x8_t any = vorrq_u16(vorrq_u16(ne[0], ne[1]), vorrq_u16(ne[2], ne[3]));
        if (!vmaxvq_u16(any))
            continue;
        for (unsigned v = 0; v < 4; v++) {
            uint64_t m = vget_lane_u64(vreinterpret_u64_u8(vmovn_u16(ne[v])), 0);
            k = emit_bits(m & 0x0101010101010101ull, 3, (uint32_t)(i + 8 * v), idx, k);
        }
    }
    for (; i < n; i++)
        if (a[i] != b[i])
            idx[k++] = (uint32_t)i;
    return k;
}

/* Bit i of the result: a[i] != b[i], for 64 elements. Each compare is narrowed to bytes, the
 * changed bytes weighted 1, 2, 4 .. 128 within each eight, and three rounds of pairwise adds
 * sum every eight into one byte: byte j of the low half is the mask of elements 8j..8j+7. */
static inline uint64_t ne_mask64_neon(const uint16_t *a, const uint16_t *b)
{
    static const uint8_t weights[16] = { 1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128 };
    const uint8x16_t w = vld1q_u8(weights);
    uint8x16_t q[4];
    for (unsigned v = 0; v < 4; v++) {
        uint8x8_t lo = vmovn_u16(vceqq_u16(vld1q_u16(a + 16 * v), vld1q_u16(b + 16 * v)));
        uint8x8_t hi = vmovn_u16(vceqq_u16(vld1q_u16(a + 16 * v + 8), vld1q_u16(b + 16 * v + 8)));
        q[v] = vbicq_u8(w, vcombine_u8(lo, hi));   /* weight where not equal */
    }
    uint8x16_t s = vpaddq_u8(vpaddq_u8(q[0], q[1]), vpaddq_u8(q[2], q[3]));
    return vgetq_lane_u64(vreinterpretq_u64_u8(vpaddq_u8(s, s)), 0);
}

static inline void zigzag64_neon(const uint16_t *a, const uint16_t *b, uint16_t *z)
{
    for (unsigned v = 0; v < 64; v += 8) {
        int16x8_t d = vreinterpretq_s16_u16(vsubq_u16(vld1q_u16(b + v), vld1q_u16(a + v)));
        vst1q_u16(z + v, vreinterpretq_u16_s16(veorq_s16(vshlq_n_s16(d, 1), vshrq_n_s16(d, 15))));
    }
}

/* count16: per lane, the equal pairs counted by subtracting the compare masks (-1 each), in
 * 16-bit lanes flushed every 4096 blocks of 64 (a lane gains at most 4 a block); the changes
 * are the elements minus the equal ones. */
static size_t count16_neon(const uint16_t *a, const uint16_t *b, size_t n)
{
    size_t i = 0, same = 0;
    while (n - i >= 64) {
        size_t blocks = (n - i) / 64;
        size_t end = i + 64 * (blocks < 4096 ? blocks : 4096);
        uint16x8_t c0 = vdupq_n_u16(0), c1 = c0;
        for (; i < end; i += 64) {
            for (unsigned v = 0; v < 64; v += 16) {
                c0 = vsubq_u16(c0, vceqq_u16(vld1q_u16(a + i + v), vld1q_u16(b + i + v)));
                c1 = vsubq_u16(c1, vceqq_u16(vld1q_u16(a + i + v + 8), vld1q_u16(b + i + v + 8)));
            }
        }
        same += vaddlvq_u16(c0) + vaddlvq_u16(c1);
    }
    size_t k = i - same;
    for (; i < n; i++)
        k += a[i] != b[i];
    return k;
}

/* diff_ulp16: the shared group loop (kernels_ulp16.h) over 8-lane compares. */
static size_t diff_ulp16_neon(const uint16_t *a, const uint16_t *b, size_t n, uint8_t *leb, size_t *leb_len,
                              uint16_t *z)
{
    return diff_ulp16_groups(a, b, n, leb, leb_len, z, ne_mask64_neon, zigzag64_neon);
}

/* ulp_pack2_16, 16 values a round: symbols min(z, 4) - 1 narrowed to bytes and packed four to
 * a byte by two shift-and-or steps on wider lanes; counts by compare + add across; the escapes'
 * 16-bit mask from weighted bytes by pairwise adds, then one by one (kernels_tail.h). */
static size_t ulp_pack2_16_neon(const uint16_t *z, size_t k, uint8_t *packed, uint8_t *esc, uint32_t hist[256])
{
    static const uint8_t weights[16] = { 1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128 };
    const uint8x16_t w = vld1q_u8(weights), bit = vdupq_n_u8(1);
    const uint16x8_t four = vdupq_n_u16(4);
    size_t j = 0, el = 0;
    uint64_t c1 = 0, c2 = 0, cesc = 0;
    for (; j + 16 <= k; j += 16) {
        uint8x16_t mn = vcombine_u8(vmovn_u16(vminq_u16(vld1q_u16(z + j), four)),
                                    vmovn_u16(vminq_u16(vld1q_u16(z + j + 8), four)));   /* 1..4 */
        /* s0 | s1 << 2 in each halfword, then t0 | t1 << 4 in each word: four symbols a byte */
        uint16x8_t h = vreinterpretq_u16_u8(vsubq_u8(mn, bit));
        h = vorrq_u16(vandq_u16(h, vdupq_n_u16(0xff)), vshrq_n_u16(h, 6));
        uint32x4_t q = vreinterpretq_u32_u16(h);
        q = vorrq_u32(vandq_u32(q, vdupq_n_u32(0xffff)), vshrq_n_u32(q, 12));
        uint8x8_t out = vmovn_u16(vcombine_u16(vmovn_u32(q), vdup_n_u16(0)));
        uint32_t word = vget_lane_u32(vreinterpret_u32_u8(out), 0);
        memcpy(packed + j / 4, &word, 4);
        c1 += vaddvq_u8(vandq_u8(vceqq_u8(mn, bit), bit));
        c2 += vaddvq_u8(vandq_u8(vceqq_u8(mn, vdupq_n_u8(2)), bit));
        uint8x16_t ew = vandq_u8(vceqq_u8(mn, vdupq_n_u8(4)), w);
        uint8x8_t e8 = vpadd_u8(vget_low_u8(ew), vget_high_u8(ew));
        e8 = vpadd_u8(e8, e8);
        e8 = vpadd_u8(e8, e8);
        uint32_t e = vget_lane_u16(vreinterpret_u16_u8(e8), 0);
        cesc += (uint64_t)__builtin_popcount(e);
        el = ulp_pack2_escapes(z, j, e, esc, el);
    }
    ulp_pack2_counts(hist, j, c1, c2, cesc, esc, el);
    return ulp_pack2_16_tail(z, j, k, packed, esc, el, hist);
}

static size_t diff32_neon(const uint32_t *a, const uint32_t *b, size_t n, uint32_t *idx)
{
    size_t i = 0, k = 0;
    for (; i + 16 <= n; i += 16) {
        uint32x4_t ne[4];
        for (unsigned v = 0; v < 4; v++)
            ne[v] = vmvnq_u32(vceqq_u32(vld1q_u32(a + i + 4 * v), vld1q_u32(b + i + 4 * v)));
        uint32x4_t any = vorrq_u32(vorrq_u32(ne[0], ne[1]), vorrq_u32(ne[2], ne[3]));
        if (!vmaxvq_u32(any))
            continue;
        for (unsigned v = 0; v < 4; v++) {
            uint64_t m = vget_lane_u64(vreinterpret_u64_u16(vmovn_u32(ne[v])), 0);
            k = emit_bits(m & 0x0001000100010001ull, 4, (uint32_t)(i + 4 * v), idx, k);
        }
    }
    for (; i < n; i++)
        if (a[i] != b[i])
            idx[k++] = (uint32_t)i;
    return k;
}

static void gaps_encode_neon(const uint32_t *idx, size_t k, uint32_t *gaps)
{
    if (k == 0)
        return;
    gaps[0] = idx[0];
    size_t j = 1;
    uint32x4_t one = vdupq_n_u32(1);
    for (; j + 4 <= k; j += 4)
        vst1q_u32(gaps + j, vsubq_u32(vsubq_u32(vld1q_u32(idx + j), vld1q_u32(idx + j - 1)), one));
    for (; j < k; j++)
        gaps[j] = idx[j] - idx[j - 1] - 1;
}

/* next = position + 1 in 32 bits; see gaps_decode_avx2 for why "next > limit or next not
 * increasing" in any lane is exactly "a position reaches limit or wraps". */
static int gaps_decode_neon(const uint32_t *gaps, size_t k, uint32_t limit, uint32_t *idx)
{
    uint64_t next = 0;
    size_t j = 0;
    uint32x4_t zero = vdupq_n_u32(0), one = vdupq_n_u32(1), vlimit = vdupq_n_u32(limit);
    uint32x4_t bad = zero;
    for (; j + 4 <= k; j += 4) {
        uint32x4_t x = vaddq_u32(vld1q_u32(gaps + j), one);
        x = vaddq_u32(x, vextq_u32(zero, x, 3));
        x = vaddq_u32(x, vextq_u32(zero, x, 2));
        uint32x4_t vin = vdupq_n_u32((uint32_t)next);
        uint32x4_t vnext = vaddq_u32(x, vin);
        uint32x4_t vprev = vextq_u32(vin, vnext, 3);
        bad = vorrq_u32(bad, vorrq_u32(vcgtq_u32(vnext, vlimit), vcleq_u32(vnext, vprev)));
        vst1q_u32(idx + j, vsubq_u32(vnext, one));
        next = vgetq_lane_u32(vnext, 3);
    }
    if (vmaxvq_u32(bad))
        return -1;
    return gaps_decode_tail(gaps, j, k, next, limit, idx);
}


/* The BF16 gate (reference: gate_bf16_c in kernels_c.c). AArch64 vector FP adds round like
 * the scalar ones and honour FPCR the same way (unlike AArch32 NEON, which flushes
 * subnormals), so 4 lanes at a time give the reference's bits. */
static inline uint32x4_t bf16_rne4(uint32x4_t u)
{
    uint32x4_t lsb = vandq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(1));
    return vaddq_u32(vaddq_u32(u, vdupq_n_u32(0x7fff)), lsb);
}

static inline uint32x4_t nonfinite4(uint32x4_t u)
{
    uint32x4_t expo = vdupq_n_u32(0x7f800000);
    return vceqq_u32(vandq_u32(u, expo), expo);
}

static inline int changes_bf16(float t, float a, float x)
{
    uint32_t ut, ua, ux;
    memcpy(&ut, &t, 4);
    memcpy(&ua, &a, 4);
    memcpy(&ux, &x, 4);
    if ((ut & 0x7f800000u) == 0x7f800000u || (ua & 0x7f800000u) == 0x7f800000u)
        return 1;
    return ((ux + 0x7fffu + ((ux >> 16) & 1u)) >> 16) != ((ut + 0x7fffu + ((ut >> 16) & 1u)) >> 16);
}

/* an emitted NaN is always canonical_nan() (kernels_tail.h) */
static inline float emitted(float a)
{
    return a != a ? canonical_nan() : a;
}

static size_t gate_bf16_neon(const float *theta, const float *delta, float *e, size_t n,
                             uint32_t *idx, float *val)
{
    size_t i = 0, k = 0;
    for (; i + 4 <= n; i += 4) {
        float32x4_t t = vld1q_f32(theta + i);
        float32x4_t a = vaddq_f32(vld1q_f32(delta + i), vld1q_f32(e + i));
        float32x4_t x = vsubq_f32(t, a);
        uint32x4_t ut = vreinterpretq_u32_f32(t), ua = vreinterpretq_u32_f32(a);
        uint32x4_t same = vceqq_u32(vandq_u32(veorq_u32(bf16_rne4(vreinterpretq_u32_f32(x)), bf16_rne4(ut)),
                                              vdupq_n_u32(0xffff0000u)), vdupq_n_u32(0));
        uint32x4_t keep = vbicq_u32(same, vorrq_u32(nonfinite4(ut), nonfinite4(ua)));
        vst1q_f32(e + i, vreinterpretq_f32_u32(vandq_u32(keep, ua)));
        if (vminvq_u32(keep))
            continue; /* nothing to emit: the common case */
        float av[4];
        uint32_t kv[4];
        vst1q_f32(av, a);
        vst1q_u32(kv, keep);
        for (unsigned l = 0; l < 4; l++) {
            if (!kv[l]) {
                idx[k] = (uint32_t)(i + l);
                val[k] = emitted(av[l]);
                k++;
            }
        }
    }
    for (; i < n; i++) {
        float a = delta[i] + e[i];
        float x = theta[i] - a;
        if (changes_bf16(theta[i], a, x)) {
            idx[k] = (uint32_t)i;
            val[k] = emitted(a);
            k++;
            e[i] = 0.0f;
        } else {
            e[i] = a;
        }
    }
    return k;
}

/* ---- the context coder's bands (format 5) ---- */

/* The exponents narrowed to bytes by one vshrn #7 (the sign falls off the top), their max
 * taken on 16 bytes at a time. */
static inline uint8x16_t ctx_exp16_neon(const uint16_t *a)
{
    return vshrn_high_n_u16(vshrn_n_u16(vld1q_u16(a), 7), vld1q_u16(a + 8), 7);
}

static unsigned ctx_ebase16_neon(const uint16_t *a, size_t n)
{
    uint8x16_t m0 = vdupq_n_u8(0), m1 = m0;
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        m0 = vmaxq_u8(m0, vmaxq_u8(ctx_exp16_neon(a + i), ctx_exp16_neon(a + i + 16)));
        m1 = vmaxq_u8(m1, vmaxq_u8(ctx_exp16_neon(a + i + 32), ctx_exp16_neon(a + i + 48)));
    }
    for (; i + 16 <= n; i += 16)
        m0 = vmaxq_u8(m0, ctx_exp16_neon(a + i));
    unsigned e = vmaxvq_u8(vmaxq_u8(m0, m1));
    for (; i < n; i++) {
        unsigned v = (a[i] >> 7) & 0xFFu;
        e = v > e ? v : e;
    }
    return e > 15 ? e - 15 : 0;
}

/* bc[nw b + w] = wc[16w + b]: 16 words a 16x16 byte transpose, four rounds of zipping row i
 * with row i + 8 (each round rotates the 8 bits of row:column left by one). */
static void ctx_counts_by_band_neon(const uint8_t *wc, size_t nw, uint8_t *bc)
{
    size_t w = 0;
    for (; w + 16 <= nw; w += 16) {
        uint8x16_t r[16], t[16];
        for (unsigned i = 0; i < 16; i++)
            r[i] = vld1q_u8(wc + 16 * (w + i));
        for (unsigned round = 0; round < 4; round++) {
            for (unsigned i = 0; i < 8; i++) {
                t[2 * i] = vzip1q_u8(r[i], r[i + 8]);
                t[2 * i + 1] = vzip2q_u8(r[i], r[i + 8]);
            }
            for (unsigned i = 0; i < 16; i++)
                r[i] = t[i];
        }
        for (unsigned b = 0; b < 16; b++)
            vst1q_u8(bc + nw * b + w, r[b]);
    }
    for (; w < nw; w++)
        for (unsigned b = 0; b < 16; b++)
            bc[nw * b + w] = wc[16 * w + b];
}

/* members[0..16) += the 16-bit sums lo (bands 0-7) and hi (8-15). */
static inline void ctx_members_flush(uint32_t members[16], uint16x8_t lo, uint16x8_t hi)
{
    vst1q_u32(members, vaddw_u16(vld1q_u32(members), vget_low_u16(lo)));
    vst1q_u32(members + 4, vaddw_high_u16(vld1q_u32(members + 4), lo));
    vst1q_u32(members + 8, vaddw_u16(vld1q_u32(members + 8), vget_low_u16(hi)));
    vst1q_u32(members + 12, vaddw_high_u16(vld1q_u32(members + 12), hi));
}

/* The bands of a[0..16) as bytes (the exponents, then a saturating subtract and a min); the
 * exponents' max kept in *mx. */
static inline uint8x16_t ctx_bands16_neon(const uint16_t *o, uint8x16_t eb, uint8x16_t *mx)
{
    uint8x16_t x = ctx_exp16_neon(o);
    *mx = vmaxq_u8(*mx, x);
    return vminq_u8(vqsubq_u8(x, eb), vdupq_n_u8(15));
}

/* Plane k of 64 band bytes, still two bytes per eight: bit k of each byte shifted to its lane's
 * place in its eight (sh: lane & 7, minus k), then two rounds of pairwise adds. */
static inline uint8x16_t ctx_plane_neon(uint8x16_t b0, uint8x16_t b1, uint8x16_t b2, uint8x16_t b3, unsigned k,
                                        int8x16_t sh)
{
    const uint8x16_t bit = vdupq_n_u8((uint8_t)(1u << k));
    return vpaddq_u8(vpaddq_u8(vshlq_u8(vandq_u8(b0, bit), sh), vshlq_u8(vandq_u8(b1, bit), sh)),
                     vpaddq_u8(vshlq_u8(vandq_u8(b2, bit), sh), vshlq_u8(vandq_u8(b3, bit), sh)));
}

/* Per word of 64: the bands as bytes (ctx_bands16_neon), plane k by ctx_plane_neon and a last
 * pairwise add that pairs it with plane k + 1 (one 8-byte word each). The counts: the 16 band
 * member words built in 2-lane vectors from the planes (pair products, as ctx_word_counts),
 * vcnt, and three rounds of pairwise adds straight into wc's byte order; members summed from
 * wc in 16-bit lanes; chw as diff_ulp16's mask. A last partial word goes through a
 * zero-padded copy (band 0, unchanged, outside the valid bits). Written out rather than in
 * loops over arrays so that -O2 keeps everything in registers. */
static unsigned ctx_planes16_neon(const uint16_t *a, const uint16_t *nb, size_t n, unsigned ebase, uint64_t *plane,
                                  uint8_t *wc, uint8_t *bc, uint32_t members[16], uint64_t *chw)
{
    static const int8_t lane8[16] = { 0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7 };
    const int8x16_t sh0 = vld1q_s8(lane8), sh1 = vsubq_s8(sh0, vdupq_n_s8(1)), sh2 = vsubq_s8(sh0, vdupq_n_s8(2)),
                    sh3 = vsubq_s8(sh0, vdupq_n_s8(3));
    /* exponents are bytes: an ebase past 255 leaves every band 0, as 255 does */
    const uint8x16_t eb = vdupq_n_u8((uint8_t)(ebase > 255 ? 255 : ebase));
    /* lane 0 of each count vector holds an even band (bit 0 clear: ~p0), lane 1 an odd one */
    const uint64x2_t even = vcombine_u64(vcreate_u64(~0ull), vcreate_u64(0)), ones = vdupq_n_u64(~0ull);
    uint8x16_t mx = vdupq_n_u8(0);   /* the largest exponent */
    uint16x8_t ml = vdupq_n_u16(0), mh = ml;
    size_t nw = (n + 63) / 64;
    memset(members, 0, 16 * sizeof members[0]);
    for (size_t w = 0; w < nw; w++) {
        size_t base = w * 64, valid = n - base >= 64 ? 64 : n - base;
        uint64_t vm = valid == 64 ? ~0ull : ((1ull << valid) - 1);
        const uint16_t *o = a + base, *e = nb ? nb + base : NULL;
        uint16_t to[64], te[64];
        if (valid < 64)
            ctx_pad_word(&o, &e, valid, to, te);
        if (e)
            chw[w] = ne_mask64_neon(o, e);
        uint8x16_t b0 = ctx_bands16_neon(o, eb, &mx), b1 = ctx_bands16_neon(o + 16, eb, &mx),
                   b2 = ctx_bands16_neon(o + 32, eb, &mx), b3 = ctx_bands16_neon(o + 48, eb, &mx);
        uint64x2_t p01 = vreinterpretq_u64_u8(vpaddq_u8(ctx_plane_neon(b0, b1, b2, b3, 0, sh0),
                                                        ctx_plane_neon(b0, b1, b2, b3, 1, sh1)));
        uint64x2_t p23 = vreinterpretq_u64_u8(vpaddq_u8(ctx_plane_neon(b0, b1, b2, b3, 2, sh2),
                                                        ctx_plane_neon(b0, b1, b2, b3, 3, sh3)));
        uint64_t *pl = plane + w * 5;
        vst1q_u64(pl, p01);
        vst1q_u64(pl + 2, p23);
        pl[4] = vm;
        /* vector i: bands 2i, 2i + 1; bit 1 of the band is bit 0 of i, bits 2-3 bits 1-2 of i */
        uint64x2_t q1 = vdupq_laneq_u64(p01, 1), q2 = vdupq_laneq_u64(p23, 0), q3 = vdupq_laneq_u64(p23, 1);
        uint64x2_t a0 = vandq_u64(veorq_u64(vdupq_laneq_u64(p01, 0), even), vdupq_n_u64(vm));
        uint64x2_t l0 = vbicq_u64(a0, q1), l1 = vandq_u64(a0, q1);
        uint64x2_t h0 = veorq_u64(vorrq_u64(q2, q3), ones), h1 = vbicq_u64(q2, q3), h2 = vbicq_u64(q3, q2),
                   h3 = vandq_u64(q2, q3);
#define CTX_CNT(l, h) vcntq_u8(vreinterpretq_u8_u64(vandq_u64(l, h)))
        uint8x16_t u0 = vpaddq_u8(CTX_CNT(l0, h0), CTX_CNT(l1, h0));   /* bands 0-3, 4 bytes each */
        uint8x16_t u1 = vpaddq_u8(CTX_CNT(l0, h1), CTX_CNT(l1, h1));   /* 4-7 */
        uint8x16_t u2 = vpaddq_u8(CTX_CNT(l0, h2), CTX_CNT(l1, h2));   /* 8-11 */
        uint8x16_t u3 = vpaddq_u8(CTX_CNT(l0, h3), CTX_CNT(l1, h3));   /* 12-15 */
#undef CTX_CNT
        uint8x16_t cnt = vpaddq_u8(vpaddq_u8(u0, u1), vpaddq_u8(u2, u3));
        vst1q_u8(wc + 16 * w, cnt);
        ml = vaddw_u8(ml, vget_low_u8(cnt));
        mh = vaddw_high_u8(mh, cnt);
        if ((w & 511) == 511) {   /* a lane has at most 64 a word: flushed well before 65535 */
            ctx_members_flush(members, ml, mh);
            ml = mh = vdupq_n_u16(0);
        }
    }
    ctx_members_flush(members, ml, mh);
    if (bc)
        ctx_counts_by_band_neon(wc, nw, bc);
    unsigned e = vmaxvq_u8(mx);
    return e > 15 ? e - 15 : 0;
}

/* No byte compress here: the portable blocks (kernels_tail.h). */
static int rice_gaps_neon(const uint8_t *src, size_t len, size_t k, unsigned shift, uint32_t limit, uint8_t *leb,
                        size_t *leb_len)
{
    return rice_gaps_portable(pulse_rice_byte_table(), src, len, k, shift, limit, leb, leb_len);
}

int pulse_kernels_init_neon(pulse_kernels *k)
{
    if (!(pulse_cpu_flags() & PULSE_CPU_NEON))
        return -1;
    k->name = "neon";
    k->rice_gaps = rice_gaps_neon;
    k->diff8 = diff8_neon;
    k->diff16 = diff16_neon;
    k->count16 = count16_neon;
    k->diff32 = diff32_neon;
    k->diff_ulp16 = diff_ulp16_neon;
    k->ulp_pack2_16 = ulp_pack2_16_neon;
    k->gaps_encode = gaps_encode_neon;
    k->gaps_decode = gaps_decode_neon;
    k->gate[PULSE_VIEW_BF16] = gate_bf16_neon;
    k->ctx_ebase16 = ctx_ebase16_neon;
    k->ctx_planes16 = ctx_planes16_neon;
    return 0;
}
