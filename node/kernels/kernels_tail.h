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

/* LEB128 of v at out (7 bits a byte, low first, high bit = more follows); returns 1..5. */
static inline size_t leb_put_tail(uint8_t *out, uint32_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        out[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    out[n++] = (uint8_t)v;
    return n;
}

/* zigzag of the 16-bit difference b - a: 0, -1, 1, -2, ... -> 0, 1, 2, 3, ... */
static inline uint16_t zigzag16_tail(uint16_t a, uint16_t b)
{
    uint16_t d = (uint16_t)(b - a);
    return (uint16_t)((uint16_t)(d << 1) ^ (uint16_t)-(d >> 15));
}

/* diff_ulp16 over elements [i, n) on from the running state: k changes so far, *leb_len gap
 * bytes, next = the position after the last change. Returns the new count. */
static inline size_t diff_ulp16_tail(const uint16_t *a, const uint16_t *b, size_t i, size_t n, uint8_t *leb,
                                     size_t *leb_len, uint16_t *z, size_t k, uint32_t next)
{
    size_t len = *leb_len;
    for (; i < n; i++)
        if (a[i] != b[i]) {
            len += leb_put_tail(leb + len, (uint32_t)i - next);
            next = (uint32_t)i + 1;
            z[k++] = zigzag16_tail(a[i], b[i]);
        }
    *leb_len = len;
    return k;
}

/* ulp_pack2_16's escapes among z[j..j+32) (bit i of e: z[j+i] >= 4), in order, appended to
 * esc from el on as LEB128(z - 4); returns the new escape byte count. */
static inline size_t ulp_pack2_escapes(const uint16_t *z, size_t j, uint32_t e, uint8_t *esc, size_t el)
{
    for (; e; e &= e - 1)
        el += leb_put_tail(esc + el, (uint32_t)z[j + (unsigned)__builtin_ctz(e)] - 4);
    return el;
}

/* The histogram of ulp_pack2_16's vector part, z[0..j): c1 values of 1, c2 of 2, cesc
 * escapes (the rest are 3s), the escapes counted from their el LEB128 bytes in esc (one
 * byte, z < 132, nearly always): cheaper than counting them one by one as they are found. */
static inline void ulp_pack2_counts(uint32_t hist[256], size_t j, uint64_t c1, uint64_t c2, uint64_t cesc,
                                    const uint8_t *esc, size_t el)
{
    hist[1] += (uint32_t)c1;
    hist[2] += (uint32_t)c2;
    hist[3] += (uint32_t)(j - c1 - c2 - cesc);
    for (size_t at = 0; at < el;) {
        if (esc[at] < 0x80) {
            hist[esc[at++] + 4]++;
            continue;
        }
        uint32_t e = 0;
        for (unsigned sh = 0; at < el; sh += 7) {
            uint8_t b = esc[at++];
            e |= (uint32_t)(b & 0x7f) << sh;
            if (!(b & 0x80))
                break;
        }
        hist[e + 4 < 256 ? e + 4 : 0]++;
    }
}

/* ulp_pack2_16 of z[j..k) on, j a multiple of 4 (packed gets whole bytes from j/4 on); el
 * escape bytes so far. Returns the new escape byte count. */
static inline size_t ulp_pack2_16_tail(const uint16_t *z, size_t j, size_t k, uint8_t *packed, uint8_t *esc,
                                       size_t el, uint32_t hist[256])
{
    for (; j < k; j++) {
        uint32_t v = z[j], sym = v < 4 ? v - 1 : 3;
        if (j % 4 == 0)
            packed[j / 4] = 0;
        packed[j / 4] |= (uint8_t)(sym << (2 * (j % 4)));
        hist[v < 256 ? v : 0]++;
        if (v >= 4)
            el += leb_put_tail(esc + el, v - 4);
    }
    return el;
}

/* A LEB128 value of a stream checked before (any length up to 5 bytes; no bounds test). */
static inline uint32_t leb_trusted(const uint8_t *src, size_t *at)
{
    uint32_t v = 0;
    for (unsigned sh = 0;; sh += 7) {
        uint8_t b = src[(*at)++];
        v |= (uint32_t)(b & 0x7f) << sh;
        if (!(b & 0x80))
            return v;
    }
}

/* unzigzag of z (0, 1, 2, 3.. -> 0, -1, 1, -2..) modulo 2^16. */
static inline uint16_t unzigzag16_of(uint32_t z)
{
    return (uint16_t)((z >> 1) ^ (0u - (z & 1)));
}

/* ulp2_add16 of changes j..k-1 from the stream offsets *at, *eat and the running position
 * *next (the position after the previous change), all three advanced: one change at a time
 * (every version's slow steps and tail). */
static inline void ulp2_add16_tail(uint16_t *d, const uint8_t *g, size_t *at, const uint8_t *packed,
                                   const uint8_t *esc, size_t *eat, size_t j, size_t k, uint64_t *next)
{
    for (; j < k; j++) {
        *next += leb_trusted(g, at);
        uint64_t q = (*next)++;
        unsigned sy = (unsigned)(packed[j >> 2] >> (2 * (j & 3))) & 3;
        uint32_t z = sy == 3 ? leb_trusted(esc, eat) + 4 : sy + 1;
        d[q] = (uint16_t)(d[q] + unzigzag16_of(z));
    }
}

/* Sparse scatters and adds miss the cache at every change at RL densities, and the hardware
 * prefetcher does not run far enough ahead of positions ~40 bytes apart: the SIMD versions'
 * scalar groups prefetch, with each change, the element SCATTER_AHEAD changes on (positions
 * are known, so the line fetched is one that will be written; docs/performance.md). This
 * returns where those positions are read: SCATTER_AHEAD on from idx[j], or idx[j] itself
 * near the end (prefetching lines being written anyway), so the loop needs no branch. The
 * address is formed as an integer; a prefetch never faults. (A loop of prefetches alone is
 * deleted by gcc 12 at -O3 as having no effect: they go in the loop that writes.) */
#define SCATTER_AHEAD 128u
static inline const uint32_t *prefetch_from(const uint32_t *idx, size_t j, size_t k, unsigned n)
{
    return j + SCATTER_AHEAD + n <= k ? idx + j + SCATTER_AHEAD : idx + j;
}
/* Into L2 (prefetcht1), not L1: the write pass of the bench pair from memory took 16.3-16.7
 * ms so against 17.2-17.4 ms with prefetcht0 in alternating runs on a Xeon VM (the L1's few
 * fill buffers stay free for the adds' loads). */
static inline void prefetch16(const uint16_t *dst, uint64_t i)
{
    __builtin_prefetch((const void *)((uintptr_t)dst + 2 * (uintptr_t)i), 0, 2);
}
/* ulp2_add16 has no position array to look ahead in: each step of eight changes prefetches
 * ADD_LINES lines from a cursor that walks the target a line at a time about ADD_AHEAD
 * elements (16 KiB of BF16) past the step's last change, which the next steps are about to
 * reach. Eight changes span ~300 bytes at RL densities (a change every ~40 bytes), so five
 * lines keep pace; the cursor is clamped to [ahead - 4 lines, that + 4 KiB], so that it
 * neither lags where changes are sparse nor runs away where they are dense. From the write
 * pass of the bench pair on a Xeon VM: 4-32 KiB ahead all alike within noise; without any
 * prefetch 24 ms, one prefetch per change 16.9-17.2 ms, this cursor 16.4-16.5 ms from
 * memory (apply_bench, alternating runs; docs/performance.md). */
#define ADD_AHEAD 8192u
#define ADD_LINES 5u
#define LINE_ELEMS16 32u
static inline uint64_t prefetch_cursor(const uint16_t *d, uint64_t cur, uint32_t last_pos)
{
    uint64_t lo = (uint64_t)last_pos + ADD_AHEAD - 4 * LINE_ELEMS16, hi = lo + 64 * LINE_ELEMS16;
    cur = cur < lo ? lo : cur > hi ? hi : cur;
    for (unsigned i = 0; i < ADD_LINES; i++)
        prefetch16(d, cur + LINE_ELEMS16 * i);
    return cur + LINE_ELEMS16 * ADD_LINES;
}

/* One SIMD step of ulp2_add16 after its vectors were stored: the n adds at pos[] of dl[] (0
 * for an escape), then the escapes (bits of em, in order) from esc. */
static inline void ulp2_add16_step(uint16_t *d, const uint32_t *pos, const uint32_t *dl, unsigned n, unsigned em,
                                   const uint8_t *esc, size_t *eat)
{
    for (unsigned e = 0; e < n; e++)
        d[pos[e]] = (uint16_t)(d[pos[e]] + dl[e]);
    for (; em; em &= em - 1) {
        uint32_t q = pos[__builtin_ctz(em)];
        d[q] = (uint16_t)(d[q] + unzigzag16_of(leb_trusted(esc, eat) + 4));
    }
}

#endif
