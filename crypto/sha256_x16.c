/* SPDX-License-Identifier: Apache-2.0 */
/* SHA-256 compression of sixteen messages at once, one per 32-bit lane of AVX-512; built alone with -mavx512f -mavx512bw, chosen at runtime. */
#include <immintrin.h>

#include "crypto/sha256.h"
#include "crypto/sha256_rounds.h"

/* Why lanes and not SHA-NI: on the machines of docs/performance.md sha256rnds2 is a long
 * dependent chain (1.2 GB/s for one message, 1.65 GB/s for two interleaved), while sixteen
 * independent messages keep both 512-bit ALU ports busy with plain rotates, adds and
 * three-input logic (vpternlogd). */

#define ROR(x, n) _mm512_ror_epi32((x), (n))
#define ADD(a, b) _mm512_add_epi32((a), (b))
#define XOR3(a, b, c) _mm512_ternarylogic_epi32((a), (b), (c), 0x96)
#define CH(e, f, g) _mm512_ternarylogic_epi32((e), (f), (g), 0xca)   /* e ? f : g */
#define MAJ(a, b, c) _mm512_ternarylogic_epi32((a), (b), (c), 0xe8)  /* at least two set */
#define BSIG0(x) XOR3(ROR(x, 2), ROR(x, 13), ROR(x, 22))
#define BSIG1(x) XOR3(ROR(x, 6), ROR(x, 11), ROR(x, 25))
#define SSIG0(x) XOR3(ROR(x, 7), ROR(x, 18), _mm512_srli_epi32((x), 3))
#define SSIG1(x) XOR3(ROR(x, 17), ROR(x, 19), _mm512_srli_epi32((x), 10))

/* Round i on the working variables named by rotation: the caller shifts names instead of
 * moving registers, so each round writes only d and h. */
#define ROUND(a, b, c, d, e, f, g, h, i, wi)                                                   \
    do {                                                                                       \
        __m512i t1_ = ADD(ADD(h, BSIG1(e)), ADD(CH(e, f, g),                                   \
                          ADD(wi, _mm512_set1_epi32((int)pulse_sha256_k[i]))));               \
        d = ADD(d, t1_);                                                                       \
        h = ADD(t1_, ADD(BSIG0(a), MAJ(a, b, c)));                                             \
    } while (0)

/* Message words: the first sixteen as loaded, later ones extended in place in a ring. */
#define WLOAD(i) (w[(i) & 15])
#define WNEXT(i) (w[(i) & 15] = ADD(ADD(SSIG1(w[((i) - 2) & 15]), w[((i) - 7) & 15]), \
                                    ADD(SSIG0(w[((i) - 15) & 15]), w[(i) & 15])))

/* Rows r[0..15] (row = lane, 16 words) to columns (column = word, 16 lanes), in place. */
static inline void transpose16(__m512i r[16])
{
    __m512i t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    /* now r[4q + k] holds word k of rows 4q..4q+3 in each 128-bit quarter j (word k + 4j) */
    for (int i = 0; i < 4; i++) {
        t[i] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0x88);
        t[i + 4] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0xdd);
        t[i + 8] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0x88);
        t[i + 12] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0xdd);
    }
    for (int i = 0; i < 4; i++) {
        r[i] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0x88);
        r[i + 8] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0xdd);
        r[i + 4] = _mm512_shuffle_i32x4(t[i + 4], t[i + 12], 0x88);
        r[i + 12] = _mm512_shuffle_i32x4(t[i + 4], t[i + 12], 0xdd);
    }
}

void pulse_sha256_blocks_x16(uint32_t st[8][16], const uint8_t *const p[16], unsigned live, size_t nblocks)
{
    static const uint8_t idle[64];   /* what a lane outside live reads; its result is discarded */
    const uint8_t *src[16];
    for (int l = 0; l < 16; l++)
        src[l] = (live >> l) & 1 ? p[l] : idle;
    const __mmask16 keep = (__mmask16)live;
    __m512i a = _mm512_loadu_si512(st[0]), b = _mm512_loadu_si512(st[1]);
    __m512i c = _mm512_loadu_si512(st[2]), d = _mm512_loadu_si512(st[3]);
    __m512i e = _mm512_loadu_si512(st[4]), f = _mm512_loadu_si512(st[5]);
    __m512i g = _mm512_loadu_si512(st[6]), h = _mm512_loadu_si512(st[7]);
    const __m512i bswap = _mm512_broadcast_i32x4(
        _mm_set_epi64x(0x0c0d0e0f08090a0bLL, 0x0405060700010203LL));
    for (size_t blk = 0; blk < nblocks; blk++) {
        __m512i w[16];
        for (int l = 0; l < 16; l++) {
            w[l] = _mm512_loadu_si512(src[l]);
            if ((live >> l) & 1)
                src[l] += 64;
        }
        transpose16(w);
        for (int i = 0; i < 16; i++)
            w[i] = _mm512_shuffle_epi8(w[i], bswap);
        __m512i sa_ = a, sb_ = b, sc_ = c, sd_ = d, se_ = e, sf_ = f, sg_ = g, sh_ = h;
        SHA256_EIGHT(0, WLOAD);
        SHA256_EIGHT(8, WLOAD);
        SHA256_EIGHT(16, WNEXT);
        SHA256_EIGHT(24, WNEXT);
        SHA256_EIGHT(32, WNEXT);
        SHA256_EIGHT(40, WNEXT);
        SHA256_EIGHT(48, WNEXT);
        SHA256_EIGHT(56, WNEXT);
        /* a lane outside live keeps its chaining value */
        a = _mm512_mask_add_epi32(sa_, keep, a, sa_);
        b = _mm512_mask_add_epi32(sb_, keep, b, sb_);
        c = _mm512_mask_add_epi32(sc_, keep, c, sc_);
        d = _mm512_mask_add_epi32(sd_, keep, d, sd_);
        e = _mm512_mask_add_epi32(se_, keep, e, se_);
        f = _mm512_mask_add_epi32(sf_, keep, f, sf_);
        g = _mm512_mask_add_epi32(sg_, keep, g, sg_);
        h = _mm512_mask_add_epi32(sh_, keep, h, sh_);
    }
    _mm512_storeu_si512(st[0], a); _mm512_storeu_si512(st[1], b);
    _mm512_storeu_si512(st[2], c); _mm512_storeu_si512(st[3], d);
    _mm512_storeu_si512(st[4], e); _mm512_storeu_si512(st[5], f);
    _mm512_storeu_si512(st[6], g); _mm512_storeu_si512(st[7], h);
}
