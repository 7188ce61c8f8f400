/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: LEB128 of 32-bit values (7 bits a byte, low first, high bit = more follows), the one writer and readers of the patch and shard streams. */
#ifndef PULSE_BASE_LEB128_H
#define PULSE_BASE_LEB128_H

#include <stddef.h>
#include <stdint.h>

/* Writes v at out; returns its bytes, 1..5. */
static inline size_t pulse_leb_put(uint8_t *out, uint32_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        out[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    out[n++] = (uint8_t)v;
    return n;
}

/* One value from src[*at..len), advancing *at: 0, or -1 (the bytes end before the value does)
 * or -2 (a fifth byte that continues or carries bits past 32; *at is then past it). */
static inline int pulse_leb_get(const uint8_t *src, size_t len, size_t *at, uint32_t *v)
{
    uint32_t val = 0;
    for (unsigned sh = 0;; sh += 7) {
        if (*at >= len)
            return -1;
        uint8_t byte = src[(*at)++];
        if (sh == 28 && (byte & 0xf0))
            return -2;
        val |= (uint32_t)(byte & 0x7f) << sh;
        if (!(byte & 0x80))
            break;
    }
    *v = val;
    return 0;
}

/* One value of a stream checked before (or written by pulse_leb_put): no bounds test. */
static inline uint32_t pulse_leb_get_trusted(const uint8_t *src, size_t *at)
{
    uint32_t v = 0;
    for (unsigned sh = 0;; sh += 7) {
        uint8_t b = src[(*at)++];
        v |= (uint32_t)(b & 0x7f) << sh;
        if (!(b & 0x80))
            return v;
    }
}

#endif
