/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: the diff_ulp16 loop shared by ISAs without a compress instruction, over the ISA's own 64-element compare and zigzag. */
#ifndef PULSE_KERNELS_ULP16_H
#define PULSE_KERNELS_ULP16_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "node/kernels/kernels_tail.h"

/* What an ISA gives the loop: the change mask of a[0..64) vs b[0..64) (bit i: a[i] != b[i]),
 * and zigzag(b - a) of 64 elements to z[0..64). Called with the ISA's static inline functions,
 * so each is inlined into the ISA's copy of the loop. */
typedef uint64_t (*ulp16_mask64_fn)(const uint16_t *a, const uint16_t *b);
typedef void (*ulp16_zigzag64_fn)(const uint16_t *a, const uint16_t *b, uint16_t *z);

enum { ULP16_GROUP = 64 };  /* blocks of 64 elements whose masks are taken before their changes */

/* One change of diff_ulp16 at position p: its gap byte(s) and zigzag value. */
#define ULP16_EMIT(p) do { \
        uint32_t g_ = (p) - next; \
        if (__builtin_expect(g_ < 0x80, 1)) \
            leb[len++] = (uint8_t)g_; \
        else \
            len += pulse_leb_put(leb + len, g_); \
        next = (p) + 1; \
        z[k++] = zigzag16_tail(a[p], b[p]); \
    } while (0)

/* diff_ulp16 in groups of 64 blocks of 64 elements: first the group's change masks (kept only
 * for blocks with changes), then all the group's changes in one loop. Looping over each block's
 * bits instead ends that loop after a Poisson-distributed count at RL densities: one
 * mispredicted branch per block, which also throws away the loads issued past it (AVX2:
 * 36.4 -> 32.7 ms over the bench pair's 98.7M elements, docs/kernels.md). Here the loop runs
 * a known number of times and moves on to the next block's mask without a branch, selecting it
 * by mask arithmetic when the current one runs out.
 * Dense groups (>= 16 changes per block), where the per-block loop predicts well and costs
 * less per change, keep it, and code all-changed blocks as 63 zero gaps and 64 values. */
static inline __attribute__((always_inline)) size_t
diff_ulp16_groups(const uint16_t *a, const uint16_t *b, size_t n, uint8_t *leb, size_t *leb_len, uint16_t *z,
                  ulp16_mask64_fn mask64, ulp16_zigzag64_fn zigzag64)
{
    size_t i = 0, k = 0, len = 0;
    uint32_t next = 0;
    uint64_t mask[ULP16_GROUP + 1];
    uint32_t base[ULP16_GROUP + 1];
    while (i + 64 <= n) {
        size_t end = n - (n - i) % 64, blocks = 0, count = 0;
        if (end - i > 64 * ULP16_GROUP)
            end = i + 64 * ULP16_GROUP;
        for (; i < end; i += 64) {
            uint64_t m = mask64(a + i, b + i);
            mask[blocks] = m;
            base[blocks] = (uint32_t)i;
            blocks += m != 0;
            count += (size_t)__builtin_popcountll(m);
        }
        if (count >= 16 * (size_t)ULP16_GROUP) {
            for (size_t j = 0; j < blocks; j++) {
                if (mask[j] == ~0ull) {
                    uint32_t p = base[j];
                    ULP16_EMIT(p);
                    memset(leb + len, 0, 63);
                    len += 63;
                    zigzag64(a + p, b + p, z + k - 1);
                    k += 63;
                    next = p + 64;
                    continue;
                }
                for (uint64_t m = mask[j]; m; m &= m - 1) {
                    uint32_t p = base[j] + (uint32_t)__builtin_ctzll(m);
                    ULP16_EMIT(p);
                }
            }
            continue;
        }
        /* A sentinel block: the selection below reads the mask after the last. */
        mask[blocks] = 1;
        base[blocks] = 0;
        uint64_t m = mask[0];
        uint32_t at = base[0];
        const uint64_t *mq = mask;
        const uint32_t *bq = base;
        for (size_t kend = k + count; k < kend;) {
            uint32_t p = at + (uint32_t)__builtin_ctzll(m);
            ULP16_EMIT(p);
            /* out = all ones when m has no bit left: then the next block's mask and base. The
             * loads run every time (as masked operands, not branches); keeping the next mask in
             * a register instead was 0.5-2 ms slower over the bench pair in the same runs (more
             * live values: gcc spilled two of them in the loop). */
            uint64_t rest = m & (m - 1), out = 0 - (uint64_t)(rest == 0);
            m = rest | (mq[1] & out);
            at ^= (at ^ bq[1]) & (uint32_t)out;
            mq += out & 1;
            bq += out & 1;
        }
    }
    *leb_len = len;
    return diff_ulp16_tail(a, b, i, n, leb, leb_len, z, k, next);
}

#undef ULP16_EMIT

#endif
