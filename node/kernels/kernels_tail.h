/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: scalar loops shared by the reference and the SIMD versions' tails, so a tail can never drift from the reference. */
#ifndef PULSE_KERNELS_TAIL_H
#define PULSE_KERNELS_TAIL_H

#include <stddef.h>
#include <stdint.h>

/* Decodes gaps[j..k) into idx[j..k), starting from the running position NEXT (the position
 * after idx[j-1], 0 at the start). A 64-bit running position cannot wrap for any k that fits
 * in memory, and every stored position is < limit <= UINT32_MAX, so the single comparison
 * catches both "past the end" and "wrapped 2^32". Returns 0 or -1. */
static inline int gaps_decode_tail(const uint32_t *gaps, size_t j, size_t k, uint64_t next,
                                   uint32_t limit, uint32_t *idx)
{
    for (; j < k; j++) {
        uint64_t pos = next + gaps[j];
        if (pos >= limit)
            return -1;
        idx[j] = (uint32_t)pos;
        next = pos + 1;
    }
    return 0;
}

/* leb1_run from src[j..n) on: the bytes < 0x80 up to the first other one, summed into *sum;
 * returns the index where the run stops. */
static inline size_t leb1_run_tail(const uint8_t *src, size_t j, size_t n, uint64_t *sum)
{
    uint64_t s = 0;
    for (; j < n && src[j] < 0x80; j++)
        s += src[j];
    *sum += s;
    return j;
}

#endif
