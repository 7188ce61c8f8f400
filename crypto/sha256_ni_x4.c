/* SPDX-License-Identifier: Apache-2.0 */
/* Four messages' SHA-NI rounds interleaved, built twice: for SSE's sixteen vector registers and, as SHA256_NI_X4 names it, for AVX-512 VL's thirty-two, which hold all four states and schedules. */
#include "crypto/sha256_ni_quad.h"

#ifndef SHA256_NI_X4
#define SHA256_NI_X4 pulse_sha256_blocks_ni_x4
#endif

/* One message's rounds are a chain through sha256rnds2's latency; two fill part of it, four
 * the rest (docs/checkpoints.md has the rates). */
#define QUAD4(q)                 \
    do {                         \
        QUAD(q, a0, a1, wa);     \
        QUAD(q, b0, b1, wb);     \
        QUAD(q, c0, c1, wc);     \
        QUAD(q, d0, d1, wd);     \
    } while (0)

void SHA256_NI_X4(uint32_t h[4][8], const uint8_t *const p[4], size_t nblocks)
{
    __m128i a0, a1, b0, b1, c0, c1, d0, d1;
    const uint8_t *pa = p[0], *pb = p[1], *pc = p[2], *pd = p[3];
    state_in(h[0], &a0, &a1);
    state_in(h[1], &b0, &b1);
    state_in(h[2], &c0, &c1);
    state_in(h[3], &d0, &d1);
    for (; nblocks; nblocks--, pa += 64, pb += 64, pc += 64, pd += 64) {
        __m128i sa0 = a0, sa1 = a1, sb0 = b0, sb1 = b1, sc0 = c0, sc1 = c1, sd0 = d0, sd1 = d1;
        __m128i wa[4], wb[4], wc[4], wd[4];
        message_in(pa, wa);
        message_in(pb, wb);
        message_in(pc, wc);
        message_in(pd, wd);
        QUAD4(0); QUAD4(1); QUAD4(2); QUAD4(3); QUAD4(4); QUAD4(5); QUAD4(6); QUAD4(7);
        QUAD4(8); QUAD4(9); QUAD4(10); QUAD4(11); QUAD4(12); QUAD4(13); QUAD4(14); QUAD4(15);
        a0 = _mm_add_epi32(a0, sa0);
        a1 = _mm_add_epi32(a1, sa1);
        b0 = _mm_add_epi32(b0, sb0);
        b1 = _mm_add_epi32(b1, sb1);
        c0 = _mm_add_epi32(c0, sc0);
        c1 = _mm_add_epi32(c1, sc1);
        d0 = _mm_add_epi32(d0, sd0);
        d1 = _mm_add_epi32(d1, sd1);
    }
    state_out(h[0], a0, a1);
    state_out(h[1], b0, b1);
    state_out(h[2], c0, c1);
    state_out(h[3], d0, d1);
}
