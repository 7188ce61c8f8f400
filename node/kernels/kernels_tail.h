/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: scalar loops shared by the reference and the SIMD versions' tails, so a tail can never drift from the reference. */
#ifndef PULSE_KERNELS_TAIL_H
#define PULSE_KERNELS_TAIL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/leb128.h"
#include "node/kernels/kernels.h"

/* A NaN's payload and sign depend on which operand the hardware propagates, and compilers
 * may swap the operands of a commutative add: an emitted NaN is therefore always this one. */
static inline float canonical_nan(void)
{
    uint32_t u = 0x7fc00000u;
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* scatter_add_f32 for j in [from, to), in order, a NaN sum stored as canonical_nan(). */
static inline void scatter_add_f32_tail(float *acc, const uint32_t *idx, size_t from, size_t to, const float *v)
{
    for (size_t j = from; j < to; j++) {
        float s = acc[idx[j]] + v[j];
        acc[idx[j]] = s == s ? s : canonical_nan();
    }
}

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
            len += pulse_leb_put(leb + len, (uint32_t)i - next);
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
        el += pulse_leb_put(esc + el, (uint32_t)z[j + (unsigned)__builtin_ctz(e)] - 4);
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
        uint32_t e = pulse_leb_get_trusted(esc, &at);   /* our own escapes: each one whole */
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
            el += pulse_leb_put(esc + el, v - 4);
    }
    return el;
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
        *next += pulse_leb_get_trusted(g, at);
        uint64_t q = (*next)++;
        unsigned sy = (unsigned)(packed[j >> 2] >> (2 * (j & 3))) & 3;
        uint32_t z = sy == 3 ? pulse_leb_get_trusted(esc, eat) + 4 : sy + 1;
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
        d[q] = (uint16_t)(d[q] + unzigzag16_of(pulse_leb_get_trusted(esc, eat) + 4));
    }
}

/* ---- rice_gaps: the state between steps and the scalar steps every version ends with ---- */

typedef struct rice_state {
    size_t j;        /* gaps decoded */
    size_t bit;      /* the next bit of the unary plane */
    uint64_t next;   /* the position after the last change (0 at the start) */
    size_t o;        /* LEB128 bytes written */
} rice_state;

/* 57 bits of p[0..n) from bit `bit` on, the bits at or past n * 8 read as zero (little-endian). */
static inline uint64_t rice_bits57(const uint8_t *p, size_t n, size_t bit)
{
    size_t b = bit >> 3;
    uint64_t w = 0;
    if (b + 8 <= n) {
        memcpy(&w, p + b, 8);
    } else {
        for (size_t i = 0; b + i < n; i++)
            w |= (uint64_t)p[b + i] << (8 * i);
    }
    return (w >> (bit & 7)) & ((1ull << 57) - 1);
}

/* The planes of a Rice stream src[0..len) of k fields of `shift` bits: the remainder plane is
 * src[0..*rb), the unary plane *u[0..*ulen). -1 when the remainder plane does not fit. */
static inline int rice_planes(const uint8_t *src, size_t len, size_t k, unsigned shift, size_t *rb,
                              const uint8_t **u, size_t *ulen)
{
    *rb = pulse_rice_rem_bytes(k, shift);
    if (*rb > len)
        return -1;
    *u = src + *rb;
    *ulen = len - *rb;
    return 0;
}

/* Gaps st->j .. end - 1 one at a time; the remainder plane is src[0..rb), the unary plane
 * u[0..ulen). Returns 0 or the first error (-1, -2, -4), st then at the failing gap. */
static inline int rice_gaps_tail(const uint8_t *src, size_t rb, const uint8_t *u, size_t ulen, size_t end,
                                 unsigned shift, uint32_t limit, uint8_t *leb, rice_state *st)
{
    const uint64_t rmask = ((uint64_t)1 << shift) - 1;
    const size_t ubits = ulen * 8;
    for (; st->j < end; st->j++) {
        uint64_t q = 0;
        size_t bit = st->bit;
        for (;;) {
            if (bit >= ubits)
                return -1;
            uint64_t w = rice_bits57(u, ulen, bit);
            if (w) {
                unsigned z = (unsigned)__builtin_ctzll(w);
                q += z;
                bit += z + 1;
                break;
            }
            q += 57;
            bit += 57;
        }
        if (q > (UINT32_MAX >> shift))
            return -2;
        uint32_t g = (uint32_t)(q << shift) | (uint32_t)(rice_bits57(src, rb, st->j * shift) & rmask);
        if (st->next + g >= limit)
            return -4;
        st->next += (uint64_t)g + 1;
        st->bit = bit;
        st->o += pulse_leb_put(leb + st->o, g);
    }
    return 0;
}

/* After the k gaps: nothing after the byte holding the k-th one, zero bits after it, zero
 * padding after the last remainder field. 0 or -3. */
static inline int rice_finish(const uint8_t *src, size_t rb, const uint8_t *u, size_t ulen, size_t k,
                              unsigned shift, const rice_state *st)
{
    if ((st->bit + 7) / 8 != ulen)
        return -3;
    if ((st->bit & 7) && (u[st->bit >> 3] >> (st->bit & 7)))
        return -3;
    size_t rbits = k * shift;
    if ((rbits & 7) && (src[rb - 1] >> (rbits & 7)))
        return -3;
    return 0;
}

/* rice_gaps without vector registers, for the ISAs that lack byte compress (AVX2, NEON):
 * blocks of up to 256 gaps in two phases. Phase 1 turns the unary plane into quotients a
 * byte at a time (a table gives the quotients of a byte's ones, a carry the zeros before
 * them); phase 2 joins eight quotients with eight remainder fields cut from one 64-bit load
 * by shifts. A block needs no check but the limit (its quotients are under 256 and its shift
 * at most 6, so no gap overflows), which is made once per block: a position at or past the
 * limit is the only way a block can fail, so the reference's answer is then -4. A block
 * stops at a run of 200 zeros or the plane's end; returns 0 (st after the last block, which
 * may have made no progress: the caller then takes one scalar step) or -4. */
typedef struct rice_byte_table {
    uint64_t q[256];   /* the quotients of the ones of byte b, each from the bit after the previous (the first from bit 0) */
    uint8_t n[256];    /* its ones */
    uint8_t tail[256]; /* the zeros after its last one (8 when none) */
} rice_byte_table;

/* The table, filled once (kernels_c.c). */
const rice_byte_table *pulse_rice_byte_table(void);

static inline void rice_table_fill(rice_byte_table *t)
{
    for (unsigned b = 0; b < 256; b++) {
        uint64_t q = 0;
        unsigned n = 0, prev = 0;
        for (unsigned i = 0; i < 8; i++)
            if (b >> i & 1) {
                q |= (uint64_t)(i - prev) << (8 * n++);
                prev = i + 1;
            }
        t->q[b] = q;
        t->n[b] = (uint8_t)n;
        t->tail[b] = (uint8_t)(8 - prev);
    }
}

/* One byte b of phase 1 (bits below `skip` already cleared), exactly: its ones' quotients
 * to q + *nq (the first after *carry zeros), stopping at the want-th one. 1 when that was
 * in b (*end_bit then after it). */
static inline int rice_phase1_byte(const rice_byte_table *tb, unsigned b, unsigned skip, size_t bi, size_t want,
                                   uint8_t *q, size_t *nq, unsigned *carry, size_t *end_bit)
{
    unsigned n = tb->n[b];
    if (!n) {
        *carry += 8 - skip;
        return 0;
    }
    uint64_t e = tb->q[b] - skip + *carry;   /* byte 0: first one's index >= skip */
    memcpy(q + *nq, &e, 8);
    if (*nq + n >= want) {
        unsigned take = (unsigned)(want - *nq), at = 0;
        for (unsigned bb = b; take; take--) {
            at = (unsigned)__builtin_ctz(bb);
            bb &= bb - 1;
        }
        *end_bit = bi * 8 + at + 1;
        *nq = want;
        return 1;
    }
    *nq += n;
    *carry = tb->tail[b];
    return 0;
}

/* Eight s-bit fields (s <= 6), the low 8s bits of x, one to a byte: halves, quarters, eighths. */
static inline uint64_t rice_spread8(uint64_t x, unsigned s)
{
    const uint64_t f1 = ((uint64_t)1 << s) - 1, f2 = ((uint64_t)1 << (2 * s)) - 1, f4 = ((uint64_t)1 << (4 * s)) - 1;
    x = (x & f4) | (x >> (4 * s) & f4) << 32;
    x = (x & (f2 | f2 << 32)) | (x >> (2 * s) & (f2 | f2 << 32)) << 16;
    const uint64_t m1 = f1 * 0x0001000100010001ull;
    return (x & m1) | (x >> s & m1) << 8;
}

static inline int rice_gaps_blocks(const rice_byte_table *tb, const uint8_t *src, size_t rb, const uint8_t *u,
                                   size_t ulen, size_t k, unsigned shift, uint32_t limit, uint8_t *leb,
                                   rice_state *st)
{
    if (shift > 6)
        return 0;
    const uint64_t ones = 0x0101010101010101ull, fm = ((uint64_t)1 << shift) - 1;
    const uint64_t small = ones * (uint8_t)(0xffu << (7 - shift) & 0xff);   /* quotient bits that make a gap >= 128 */
    uint8_t q[256 + 8];
    while (st->j < k) {
        size_t want = k - st->j < 256 ? k - st->j : 256;
        /* phase 1: quotients of the next `want` ones; end_bit = after the last one taken */
        size_t bi = st->bit >> 3, nq = 0, end_bit = st->bit;
        unsigned carry = 0;
        int done = 0;
        if (bi < ulen && (st->bit & 7)) {
            unsigned skip = (unsigned)(st->bit & 7);
            done = rice_phase1_byte(tb, (unsigned)(u[bi] >> skip) << skip, skip, bi, want, q, &nq, &carry, &end_bit);
            bi++;
        }
        if (!done) {
            /* whole bytes, eight quotients stored each time, while eight more surely fit */
            while (nq + 8 <= want && bi < ulen && carry < 200) {
                unsigned b = u[bi++];
                uint64_t e = tb->q[b] + carry;
                memcpy(q + nq, &e, 8);
                unsigned n = tb->n[b];
                nq += n;
                carry = n ? tb->tail[b] : carry + 8;
            }
            while (!done && nq < want && bi < ulen && carry < 200) {
                done = rice_phase1_byte(tb, u[bi], 0, bi, want, q, &nq, &carry, &end_bit);
                bi++;
            }
            if (!done)
                end_bit = bi * 8 - carry;
        }
        if (!nq)
            return 0;   /* a long quotient, or the plane's end: the scalar steps */
        /* phase 2: gaps of one or two LEB128 bytes (quotients < 256, shift <= 6: < 2^14) */
        uint64_t sum = 0;
        size_t o = st->o, j = st->j, g = 0;
        for (; g + 8 <= nq; g += 8) {
            uint64_t q8, w;
            memcpy(&q8, q + g, 8);
            size_t rbit = (j + g) * shift;
            if ((rbit >> 3) + 8 <= rb) {
                memcpy(&w, src + (rbit >> 3), 8);
                w >>= rbit & 7;
            } else {
                w = rice_bits57(src, rb, rbit);
            }
            uint64_t r8 = rice_spread8(w & (((uint64_t)1 << (8 * shift)) - 1), shift);
            if (!(q8 & small)) {
                uint64_t g8 = q8 << shift | r8;   /* every byte < 128: no carry between them */
                memcpy(leb + o, &g8, 8);
                o += 8;
                uint64_t t = (g8 & 0x00ff00ff00ff00ffull) + (g8 >> 8 & 0x00ff00ff00ff00ffull);
                t = (t & 0x0000ffff0000ffffull) + (t >> 16 & 0x0000ffff0000ffffull);
                sum += (t & 0xffffffffull) + (t >> 32);
                continue;
            }
            /* a gap of two bytes among them: one at a time, each checked against the limit
             * before it is written, so that no more bytes go out than valid gaps can take */
            for (unsigned i = 0; i < 8; i++) {
                uint32_t gap = (uint32_t)(q8 >> (8 * i) & 0xff) << shift | (uint32_t)(r8 >> (8 * i) & 0xff);
                if (st->next + sum + g + i + gap >= limit)
                    return -4;
                sum += gap;
                o += pulse_leb_put(leb + o, gap);
            }
        }
        for (; g < nq; g++) {
            uint32_t gap = (uint32_t)q[g] << shift | (uint32_t)(rice_bits57(src, rb, (j + g) * shift) & fm);
            if (st->next + sum + g + gap >= limit)
                return -4;
            sum += gap;
            o += pulse_leb_put(leb + o, gap);
        }
        st->next += sum + nq;
        if (st->next > limit)
            return -4;
        st->j = j + nq;
        st->o = o;
        st->bit = end_bit;
    }
    return 0;
}

/* rice_gaps for the tables without byte compress: blocks, a scalar step where a block
 * cannot go on, the final checks. */
static inline int rice_gaps_portable(const rice_byte_table *tb, const uint8_t *src, size_t len, size_t k,
                                     unsigned shift, uint32_t limit, uint8_t *leb, size_t *leb_len)
{
    size_t rb, ulen;
    const uint8_t *u;
    if (rice_planes(src, len, k, shift, &rb, &u, &ulen))
        return -1;
    rice_state st = { 0 };
    int rc = 0;
    while (st.j < k) {
        if (shift <= 6 && (rc = rice_gaps_blocks(tb, src, rb, u, ulen, k, shift, limit, leb, &st)) != 0)
            break;
        if (st.j == k)
            break;
        if ((rc = rice_gaps_tail(src, rb, u, ulen, shift > 6 ? k : st.j + 1, shift, limit, leb, &st)) != 0)
            break;
    }
    *leb_len = st.o;
    return rc ? rc : rice_finish(src, rb, u, ulen, k, shift, &st);
}

/* ---- rice_put: the bit writers and the reference step, shared with the SIMD versions ---- */

typedef struct rice_writer {
    uint8_t *p;
    uint64_t acc;
    unsigned n;   /* bits in acc, < 64 */
} rice_writer;

/* Appends the low `bits` bits of v (bits <= 64, the rest of v zero); full words only are
 * stored, so a plane never writes past its own bytes (the remainder plane lies right before
 * the unary plane). */
static inline void rice_bits(rice_writer *w, uint64_t v, unsigned bits)
{
    if (!bits)
        return;
    w->acc |= v << w->n;
    if (w->n + bits < 64) {
        w->n += bits;
        return;
    }
    memcpy(w->p, &w->acc, 8);   /* little-endian, as every reader of the planes */
    w->p += 8;
    unsigned used = 64 - w->n;
    w->acc = used < 64 ? v >> used : 0;
    w->n = w->n + bits - 64;
}

/* The same without a branch, for the unary plane (the codes' lengths vary, and a mispredicted
 * flush cost more than a store): the word is stored every time and the pointer moves on once
 * it is full, so up to 8 bytes past the plane's end are written. */
static inline void rice_bits_last(rice_writer *w, uint64_t v, unsigned bits)
{
    w->acc |= v << w->n;
    memcpy(w->p, &w->acc, 8);
    unsigned n = w->n + bits;
    uint64_t rest = (v >> 1) >> (63 - w->n);   /* v's bits that did not fit (w->n may be 0) */
    int full = n >= 64;
    w->p += full ? 8 : 0;
    w->acc = full ? rest : w->acc;
    w->n = n & 63;
}

static inline uint8_t *rice_flush(rice_writer *w)
{
    for (unsigned i = 0; i < w->n; i += 8)
        *w->p++ = (uint8_t)(w->acc >> i);
    return w->p;
}

/* One gap's quotient q in unary: q zeros, then a one. */
static inline void rice_unary(rice_writer *w, uint64_t q)
{
    for (; q >= 63; q -= 63)
        rice_bits_last(w, 0, 63);
    rice_bits_last(w, (uint64_t)1 << q, (unsigned)q + 1);
}

#define RICE_ONES 0x0101010101010101ull

/* Eight s-bit fields (s <= 7), one in each byte of x, packed into the low 8s bits. */
static inline uint64_t rice_pack_fields(uint64_t x, unsigned s)
{
    x = (x & 0x00ff00ff00ff00ffull) | ((x & 0xff00ff00ff00ff00ull) >> (8 - s));
    x = (x & 0x0000ffff0000ffffull) | ((x & 0xffff0000ffff0000ull) >> (16 - 2 * s));
    return (x & 0xffffffffull) | ((x >> 32) << (4 * s));
}

/* One step of rice_put at shift s from leb[*at]: eight one-byte gaps with quotients under 8
 * at once (their remainders packed by shifts, their unary codes, at most 64 bits, placed by
 * one multiply that sums the code lengths in every byte), else one gap. */
static inline __attribute__((always_inline)) void rice_put_step(const uint8_t *leb, size_t len, size_t *at,
                                                                const unsigned s, rice_writer *r, rice_writer *u)
{
    const uint64_t rmask = RICE_ONES * ((1u << (s < 8 ? s : 0)) - 1);
    const uint64_t slow = s < 8 ? RICE_ONES * (uint8_t)(0xffu << (s + 3 < 8 ? s + 3 : 8)) | RICE_ONES * 0x80 : ~0ull;
    uint64_t x;
    if (s < 8 && *at + 8 <= len && (memcpy(&x, leb + *at, 8), !(x & slow))) {
        rice_bits(r, rice_pack_fields(x & rmask, s), 8 * s);
        uint64_t q = x >> s & RICE_ONES * (0xffu >> s), ends = (q + RICE_ONES) * RICE_ONES;   /* byte i: P_i + 1 */
        uint64_t code = 0;
        for (unsigned i = 0; i < 8; i++)
            code |= (uint64_t)1 << ((ends >> (8 * i) & 0xff) - 1);
        rice_bits_last(u, code, (unsigned)(ends >> 56));
        *at += 8;
        return;
    }
    uint32_t g = pulse_leb_get_trusted(leb, at);   /* the encoder's own stream: always valid */
    rice_bits(r, s ? g & (uint32_t)(((uint64_t)1 << s) - 1) : 0, s);
    rice_unary(u, (uint64_t)g >> s);
}

/* The reference at a constant shift (rice_put_ref inlines it once per shift 0..7, so that
 * every mask and shift is a constant). */
static inline __attribute__((always_inline)) size_t rice_put_at(const uint8_t *leb, size_t len, size_t k,
                                                                const unsigned s, uint8_t *out)
{
    size_t rb = pulse_rice_rem_bytes(k, s);
    rice_writer r = { .p = out }, u = { .p = out + rb };
    size_t at = 0;
    while (at < len)
        rice_put_step(leb, len, &at, s, &r, &u);
    rice_flush(&r);   /* k * s bits: exactly rb bytes, the padding zero */
    return (size_t)(rice_flush(&u) - out);
}

static inline size_t rice_put_ref(const uint8_t *leb, size_t len, size_t k, unsigned s, uint8_t *out)
{
    switch (s) {
    case 0: return rice_put_at(leb, len, k, 0, out);
    case 1: return rice_put_at(leb, len, k, 1, out);
    case 2: return rice_put_at(leb, len, k, 2, out);
    case 3: return rice_put_at(leb, len, k, 3, out);
    case 4: return rice_put_at(leb, len, k, 4, out);
    case 5: return rice_put_at(leb, len, k, 5, out);
    case 6: return rice_put_at(leb, len, k, 6, out);
    case 7: return rice_put_at(leb, len, k, 7, out);
    default: return rice_put_at(leb, len, k, s, out);   /* sparse chunks: one gap at a time */
    }
}

#endif
