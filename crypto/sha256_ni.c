/* SPDX-License-Identifier: Apache-2.0 */
/* SHA-256 compression on the x86 SHA extensions; built alone with -msha -msse4.1, chosen at runtime. */
#include "crypto/sha256_ni_quad.h"

void pulse_sha256_blocks_ni(uint32_t h[8], const uint8_t *p, size_t nblocks)
{
    __m128i s0, s1;
    state_in(h, &s0, &s1);
    for (; nblocks; nblocks--, p += 64) {
        __m128i save0 = s0, save1 = s1, w[4];
        message_in(p, w);
        QUAD(0, s0, s1, w); QUAD(1, s0, s1, w); QUAD(2, s0, s1, w); QUAD(3, s0, s1, w);
        QUAD(4, s0, s1, w); QUAD(5, s0, s1, w); QUAD(6, s0, s1, w); QUAD(7, s0, s1, w);
        QUAD(8, s0, s1, w); QUAD(9, s0, s1, w); QUAD(10, s0, s1, w); QUAD(11, s0, s1, w);
        QUAD(12, s0, s1, w); QUAD(13, s0, s1, w); QUAD(14, s0, s1, w); QUAD(15, s0, s1, w);
        s0 = _mm_add_epi32(s0, save0);
        s1 = _mm_add_epi32(s1, save1);
    }
    state_out(h, s0, s1);
}

/* Two messages a block each at a time: the rounds of one are a dependent chain through
 * sha256rnds2's latency, and the other's fill the gaps (1.4x the throughput of hashing
 * them one after the other on the machine of docs/performance.md). */
#define QUAD2(q)                          \
    do {                                  \
        QUAD(q, a0, a1, wa);              \
        QUAD(q, b0, b1, wb);              \
    } while (0)

void pulse_sha256_blocks_ni_x2(uint32_t ha[8], const uint8_t *pa, uint32_t hb[8], const uint8_t *pb,
                               size_t nblocks)
{
    __m128i a0, a1, b0, b1;
    state_in(ha, &a0, &a1);
    state_in(hb, &b0, &b1);
    for (; nblocks; nblocks--, pa += 64, pb += 64) {
        __m128i sa0 = a0, sa1 = a1, sb0 = b0, sb1 = b1, wa[4], wb[4];
        message_in(pa, wa);
        message_in(pb, wb);
        QUAD2(0); QUAD2(1); QUAD2(2); QUAD2(3); QUAD2(4); QUAD2(5); QUAD2(6); QUAD2(7);
        QUAD2(8); QUAD2(9); QUAD2(10); QUAD2(11); QUAD2(12); QUAD2(13); QUAD2(14); QUAD2(15);
        a0 = _mm_add_epi32(a0, sa0);
        a1 = _mm_add_epi32(a1, sa1);
        b0 = _mm_add_epi32(b0, sb0);
        b1 = _mm_add_epi32(b1, sb1);
    }
    state_out(ha, a0, a1);
    state_out(hb, b0, b1);
}
