/* SPDX-License-Identifier: Apache-2.0 */
/* SHA-256 compression on the x86 SHA extensions; built alone with -msha -msse4.1, chosen at runtime. */
#include <immintrin.h>

#include "crypto/sha256.h"

static const uint32_t K[64] __attribute__((aligned(16))) = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

/* Four rounds (quad q) on message vector W[q%4]. The schedule for later quads is built
 * alongside: msg2 finishes W[q+1] (needs W[q] and W[q-1]); msg1 starts W[q-1]'s successor.
 * q is a constant at every use, so the conditions fold away. */
#define QUAD(q)                                                                         \
    do {                                                                                \
        __m128i m_ = _mm_add_epi32(w[(q) & 3], _mm_load_si128((const __m128i *)&K[4 * (q)])); \
        s1 = _mm_sha256rnds2_epu32(s1, s0, m_);                                         \
        if ((q) >= 3 && (q) <= 14) {                                                    \
            __m128i t_ = _mm_alignr_epi8(w[(q) & 3], w[((q) + 3) & 3], 4);              \
            w[((q) + 1) & 3] = _mm_add_epi32(w[((q) + 1) & 3], t_);                     \
            w[((q) + 1) & 3] = _mm_sha256msg2_epu32(w[((q) + 1) & 3], w[(q) & 3]);      \
        }                                                                               \
        m_ = _mm_shuffle_epi32(m_, 0x0e);                                               \
        s0 = _mm_sha256rnds2_epu32(s0, s1, m_);                                         \
        if ((q) >= 1 && (q) <= 12)                                                      \
            w[((q) + 3) & 3] = _mm_sha256msg1_epu32(w[((q) + 3) & 3], w[(q) & 3]);      \
    } while (0)

void pulse_sha256_blocks_ni(uint32_t h[8], const uint8_t *p, size_t nblocks)
{
    const __m128i bswap = _mm_set_epi64x(0x0c0d0e0f08090a0bLL, 0x0405060700010203LL);
    /* The instructions want the state as ABEF / CDGH. */
    __m128i t = _mm_loadu_si128((const __m128i *)&h[0]);
    __m128i s1 = _mm_loadu_si128((const __m128i *)&h[4]);
    t = _mm_shuffle_epi32(t, 0xb1);
    s1 = _mm_shuffle_epi32(s1, 0x1b);
    __m128i s0 = _mm_alignr_epi8(t, s1, 8);
    s1 = _mm_blend_epi16(s1, t, 0xf0);

    for (; nblocks; nblocks--, p += 64) {
        __m128i save0 = s0, save1 = s1;
        __m128i w[4];
        for (int i = 0; i < 4; i++)
            w[i] = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 16 * i)), bswap);
        QUAD(0); QUAD(1); QUAD(2); QUAD(3);
        QUAD(4); QUAD(5); QUAD(6); QUAD(7);
        QUAD(8); QUAD(9); QUAD(10); QUAD(11);
        QUAD(12); QUAD(13); QUAD(14); QUAD(15);
        s0 = _mm_add_epi32(s0, save0);
        s1 = _mm_add_epi32(s1, save1);
    }

    t = _mm_shuffle_epi32(s0, 0x1b);
    s1 = _mm_shuffle_epi32(s1, 0xb1);
    s0 = _mm_blend_epi16(t, s1, 0xf0);
    s1 = _mm_alignr_epi8(s1, t, 8);
    _mm_storeu_si128((__m128i *)&h[0], s0);
    _mm_storeu_si128((__m128i *)&h[4], s1);
}
