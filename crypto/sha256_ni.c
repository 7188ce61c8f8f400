/* SPDX-License-Identifier: Apache-2.0 */
/* SHA-256 compression on the x86 SHA extensions; built alone with -msha -msse4.1, chosen at runtime. */
#include <immintrin.h>

#include "crypto/sha256.h"

/* Four rounds (quad q) on message vector W[q%4]. The schedule for later quads is built
 * alongside: msg2 finishes W[q+1] (needs W[q] and W[q-1]); msg1 starts W[q-1]'s successor.
 * q is a constant at every use, so the conditions fold away. */
#define QUAD(q)                                                                         \
    do {                                                                                \
        __m128i m_ = _mm_add_epi32(w[(q) & 3], _mm_load_si128((const __m128i *)&pulse_sha256_k[4 * (q)])); \
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
