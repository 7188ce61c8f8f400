/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: the SHA-NI building blocks (four rounds with their schedule, the state's ABEF/CDGH form, a block's message words), shared by the one-, two- and four-message kernels. */
#ifndef PULSE_CRYPTO_SHA256_NI_QUAD_H
#define PULSE_CRYPTO_SHA256_NI_QUAD_H

#include <immintrin.h>
#include <stdint.h>

#include "crypto/sha256.h"

/* Four rounds (quad q) of the message whose state is s0/s1 on its message vector w[q%4].
 * The schedule for later quads is built alongside: msg2 finishes w[q+1] (needs w[q] and
 * w[q-1]); msg1 starts w[q-1]'s successor. q is a constant at every use, so the conditions
 * fold away. */
#define QUAD(q, s0, s1, w)                                                              \
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

/* The instructions want the state as ABEF / CDGH. */
static inline void state_in(const uint32_t h[8], __m128i *s0, __m128i *s1)
{
    __m128i t = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)&h[0]), 0xb1);
    __m128i u = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)&h[4]), 0x1b);
    *s0 = _mm_alignr_epi8(t, u, 8);
    *s1 = _mm_blend_epi16(u, t, 0xf0);
}

static inline void state_out(uint32_t h[8], __m128i s0, __m128i s1)
{
    __m128i t = _mm_shuffle_epi32(s0, 0x1b);
    s1 = _mm_shuffle_epi32(s1, 0xb1);
    _mm_storeu_si128((__m128i *)&h[0], _mm_blend_epi16(t, s1, 0xf0));
    _mm_storeu_si128((__m128i *)&h[4], _mm_alignr_epi8(s1, t, 8));
}

static inline void message_in(const uint8_t *p, __m128i w[4])
{
    const __m128i bswap = _mm_set_epi64x(0x0c0d0e0f08090a0bLL, 0x0405060700010203LL);
    for (int i = 0; i < 4; i++)
        w[i] = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 16 * i)), bswap);
}

#endif
