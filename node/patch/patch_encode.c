/* SPDX-License-Identifier: Apache-2.0 */
/* The chunk encoder: positions as LEB128 gaps, values as byte planes or ulp symbols, each
 * zstd-compressed. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/fail.h"
#include "crypto/sha256.h"
#include "node/kernels/kernels_tail.h"
#include "node/patch/patch_internal.h"

/* ---- encoder --------------------------------------------------------------------- */

static int finish_out(const patch_scratch *s, patch_out_chunk *out, const uint8_t *bytes, size_t pos_len,
                      size_t val_len, uint32_t count)
{
    int s_defer = s->defer_digest;
    if (pos_len > UINT32_MAX || val_len > UINT32_MAX)
        return pulse_fail(PULSE_ERR_LIMIT, "encoded chunk larger than 4 GiB");
    out->staged = bytes;
    out->count = count;
    out->pos_len = (uint32_t)pos_len;
    out->val_len = (uint32_t)val_len;
    if (!s_defer)
        pulse_sha256(bytes, pos_len + val_len, out->digest);
    return 0;
}

uint8_t *patch_scratch_planes2(patch_scratch *s, uint32_t chunk_elems)
{
    if (!s->planes2 && !(s->planes2 = malloc(patch_chunk_bytes_bound(chunk_elems))))
        pulse_fail(PULSE_ERR_NOMEM, "chunk output buffer");
    return s->planes2;
}

int patch_out_keep(patch_out_chunk *oc)
{
    if (!oc->staged)
        return 0;
    size_t len = (size_t)oc->pos_len + oc->val_len;
    if (!(oc->bytes = malloc(len ? len : 1)))
        return pulse_fail(PULSE_ERR_NOMEM, "encoded chunk");
    memcpy(oc->bytes, oc->staged, len);
    oc->staged = NULL;
    return 0;
}

/* Reads value j of native width unit (1, 2 or 4 bytes). */
static uint32_t load_unit(const uint8_t *vals, size_t j, unsigned unit)
{
    switch (unit) {
    case 1: return vals[j];
    case 2: { uint16_t x; memcpy(&x, vals + 2 * j, 2); return x; }
    default: { uint32_t x; memcpy(&x, vals + 4 * j, 4); return x; }
    }
}

/* Packs zigzag ulp values (all >= 1) as `bits`-bit symbols, LSB first: symbol z - 1 for
 * z < 2^bits, else the escape symbol 2^bits - 1 with z - 2^bits appended to esc as LEB128.
 * Returns the packed length; *esc_len gets the escape bytes. */
static size_t pack_ulp(const uint8_t *vals, size_t k, unsigned unit, unsigned bits, uint8_t *packed,
                       uint8_t *esc, size_t *esc_len)
{
    const uint32_t m = 1u << bits;
    size_t plen = (k * bits + 7) / 8, el = 0, j = 0;
    memset(packed, 0, plen);
    if (bits == 2 && unit == 2) {
        /* BF16/F16 at 2 bits: the kernel ulp_values uses (its histogram is not needed here). */
        uint32_t unused[256] = { 0 };
        *esc_len = pulse_kernels_get()->ulp_pack2_16((const uint16_t *)(const void *)vals, k, packed, esc, unused);
        return plen;
    }
    if (unit == 2) {
        /* The 4- and 8-bit trials of 16-bit chunks: one byte at a time, the same
         * branch-free short escapes. */
        const uint16_t *v = (const uint16_t *)(const void *)vals;
        const unsigned per = 8 / bits;
        size_t kb = k - k % per;
        for (; j < kb; j += per) {
            unsigned byte = 0;
            for (unsigned i = 0; i < per; i++) {
                uint32_t z = v[j + i];
                if (z < m + 0x80) {
                    esc[el] = (uint8_t)(z - m);
                    el += z >= m;
                } else {
                    el += pulse_leb_put(esc + el, z - m);
                }
                byte |= (z >= m ? m - 1 : z - 1) << (bits * i);
            }
            packed[j / per] = (uint8_t)byte;
        }
    }
    for (; j < k; j++) {
        uint32_t z = load_unit(vals, j, unit), sym = m - 1;
        if (z < m)
            sym = z - 1;
        else
            el += pulse_leb_put(esc + el, z - m);
        size_t bit = j * bits;
        packed[bit >> 3] |= (uint8_t)(sym << (bit & 7));
    }
    *esc_len = el;
    return plen;
}

/* The ulp value stream at dst from symbols packed at `bits` (plen bytes) and esc_len escape
 * bytes in s->leb: [coding byte = bits][frame: packed][frame: escapes, iff any]. */
static int64_t ulp_frames(patch_scratch *s, uint8_t *dst, unsigned bits, const uint8_t *packed, size_t plen,
                          size_t esc_len, int level)
{
    dst[0] = (uint8_t)bits;
    int64_t a = patch_zstd_frame(s, dst + 1, ZSTD_compressBound(plen), packed, plen, level);
    if (a < 0)
        return a;
    int64_t b = 0;
    if (esc_len && (b = patch_zstd_frame(s, dst + 1 + a, ZSTD_compressBound(esc_len), s->leb, esc_len, level)) < 0)
        return b;
    return 1 + a + b;
}

/* The ulp value stream of k values packed at `bits`. */
static int64_t ulp_stream(patch_scratch *s, uint8_t *dst, const uint8_t *vals, size_t k, unsigned unit,
                          unsigned bits, int level)
{
    uint8_t *packed = (uint8_t *)s->gaps;   /* free once the gaps are LEB-coded: >= k bytes */
    size_t esc_len;
    size_t plen = pack_ulp(vals, k, unit, bits, packed, s->leb, &esc_len);
    return ulp_frames(s, dst, bits, packed, plen, esc_len, level);
}

/* Estimated bytes zstd's Huffman literals spend on nbytes bytes made of `per` independent
 * symbols each, the symbols having counts c[0..m) over n: the order-0 entropy of a byte plus
 * Huffman's redundancy (at most p_max + 0.086 bits), never under 1 bit nor over 8 bits per
 * byte, plus the table (about half a byte per byte value in use) and the frame header. */
static double huff_estimate(const uint32_t *c, size_t m, double n, double nbytes, unsigned per)
{
    if (nbytes <= 0 || n <= 0)
        return 0;
    double h = 0, pmax = 0, used = 0;
    for (size_t i = 0; i < m; i++)
        if (c[i]) {
            double q = (double)c[i] / n;
            h -= q * log2(q);
            pmax = q > pmax ? q : pmax;
            used++;
        }
    double bits = per * h + pow(pmax, per) + 0.086;
    bits = bits < 1 ? 1 : bits > 8 ? 8 : bits;
    double values = pow(used, per);
    return nbytes * bits / 8 + (values < 256 ? values : 256) / 2 + 12;
}

/* Estimated coded bytes of the ulp value stream at symbol width `bits`, from the histogram
 * h of the zigzag values (h[z] for z < 256; h[0] counts z >= 256, whose escapes are taken
 * as 2 incompressible bytes). */
static double ulp_estimate(const uint32_t h[256], size_t k, unsigned bits)
{
    const uint32_t m = 1u << bits;
    uint32_t sym[256] = { 0 }, esc[128] = { 0 };
    double esc_bytes = 0, wide = 0;
    for (uint32_t z = 1; z < 256; z++) {
        if (!h[z])
            continue;
        if (z < m) {
            sym[z - 1] += h[z];
            continue;
        }
        sym[m - 1] += h[z];
        if (z - m < 128) {
            esc[z - m] += h[z];
            esc_bytes += h[z];
        } else {
            wide += 2.0 * h[z];
        }
    }
    sym[m - 1] += h[0];
    wide += 2.0 * h[0];
    double packed = huff_estimate(sym, m, (double)k, ((double)k * bits + 7) / 8, 8 / bits);
    return packed + wide + huff_estimate(esc, 128, esc_bytes, esc_bytes, 1);
}

/* The histogram of the zigzag values (h[z] for z < 256, h[0] for z >= 256), added to h. */
static void ulp_histogram(const uint8_t *vals, size_t k, unsigned unit, uint32_t h[256])
{
    for (size_t j = 0; j < k; j++) {
        uint32_t z = load_unit(vals, j, unit);
        h[z < 256 ? z : 0]++;
    }
}

/* The symbol widths worth trying for a chunk of k values with histogram h, best estimate
 * first: 2 bits when almost every change is +-1 (four symbols per byte give zstd's Huffman
 * stage bytes of several bits of entropy, where one symbol per byte costs at least 1 bit),
 * 4 or 8 bits when the differences spread wider. In chunks of under ULP_TRIAL_BELOW changes,
 * where the estimate is rough, widths whose estimate is within 10% of the best are kept for
 * a trial compression; larger chunks take the estimate's best (on the bench's 100M-parameter
 * step, trials there changed the patch by one byte and cost a quarter of the diff's time).
 * So a chunk's value stream is compressed once. Returns the number of widths in w[]. */
enum { ULP_TRIAL_BELOW = 16384 };
static unsigned ulp_widths(const uint32_t h[256], size_t k, unsigned w[3])
{
    static const unsigned widths[] = { 2, 4, 8 };
    double est[3], best = 0;
    for (unsigned i = 0; i < 3; i++) {
        est[i] = ulp_estimate(h, k, widths[i]);
        if (i == 0 || est[i] < best)
            best = est[i];
    }
    unsigned n = 0;
    for (unsigned i = 0; i < 3; i++)
        if (est[i] == best)
            w[n++] = widths[i];
    for (unsigned i = 0; i < 3; i++)
        if (est[i] != best && est[i] <= 1.10 * best && k < ULP_TRIAL_BELOW)
            w[n++] = widths[i];
    return n;
}

/* The ulp value stream of k zigzag values at dst; returns its length or a negative error.
 * 16-bit values are packed at 2 bits by the kernel in the same pass that counts them, and
 * that packing is kept when 2 bits is the only width worth trying (the usual case). */
static int64_t ulp_values(patch_scratch *s, uint8_t *dst, const uint8_t *vals, size_t k, unsigned unit,
                          int level)
{
    uint32_t h[256] = { 0 };
    size_t esc_len = 0;
    uint8_t *packed = (uint8_t *)s->gaps;   /* as in ulp_stream */
    if (unit == 2)
        esc_len = pulse_kernels_get()->ulp_pack2_16((const uint16_t *)(const void *)vals, k, packed, s->leb, h);
    else
        ulp_histogram(vals, k, unit, h);
    unsigned w[3], n = ulp_widths(h, k, w), best = w[0];
    if (unit == 2 && n == 1 && best == 2)
        return ulp_frames(s, dst, 2, packed, (k + 3) / 4, esc_len, level);
    int64_t best_len = INT64_MAX;
    for (unsigned i = 0; i < n; i++) {
        int64_t r = ulp_stream(s, dst, vals, k, unit, w[i], level);
        if (r < 0)
            return r;
        if (r < best_len) {
            best_len = r;
            best = w[i];
        }
    }
    if (best != w[n - 1] && (best_len = ulp_stream(s, dst, vals, k, unit, best, level)) < 0)
        return best_len;
    return best_len;
}

/* Absolute values after the position frame (pos_len bytes at s->planes): byte planes, low
 * bytes of every value, then the next byte, each its own zstd frame with its own entropy
 * tables. The planes are built in s->leb, which the positions no longer need. */
static int abs_planes(patch_scratch *s, size_t pos_len, const uint8_t *vals, size_t k, unsigned unit,
                      int level, patch_out_chunk *out)
{
    for (unsigned b = 0; b < unit; b++)
        for (size_t j = 0; j < k; j++)
            s->leb[b * k + j] = vals[j * unit + b];
    uint8_t *dst = s->planes;
    size_t used = pos_len, val_len = 0;
    for (unsigned b = 0; b < unit; b++) {
        int64_t r = patch_zstd_frame(s, dst + used, ZSTD_compressBound(k), s->leb + b * k, k, level);
        if (r < 0)
            return (int)r;
        used += (size_t)r;
        val_len += (size_t)r;
    }
    return finish_out(s, out, dst, pos_len, val_len, (uint32_t)k);
}

int patch_encode_changes(patch_scratch *s, const uint32_t *idx, size_t k, const uint8_t *vals,
                         unsigned unit, int ulp, int level, patch_out_chunk *out)
{
    /* Gaps straight to LEB128 (one pass; nearly every gap is one byte). */
    size_t leb_len = 0;
    uint32_t next = 0;   /* the position right after the previous change */
    for (size_t j = 0; j < k; j++) {
        uint32_t g = idx[j] - next;
        next = idx[j] + 1;
        if (g < 0x80)
            s->leb[leb_len++] = (uint8_t)g;
        else
            leb_len += pulse_leb_put(s->leb + leb_len, g);
    }

    /* Output layout in s->planes: [position stream][value stream]. */
    uint8_t *dst = s->planes;
    int64_t pos_len = patch_pos_encode(s, dst, s->leb, leb_len, k, level);
    if (pos_len < 0)
        return (int)pos_len;
    size_t used = (size_t)pos_len;

    if (ulp) {
        int64_t val_len = ulp_values(s, dst + used, vals, k, unit, level);
        if (val_len < 0)
            return (int)val_len;
        return finish_out(s, out, dst, (size_t)pos_len, (size_t)val_len, (uint32_t)k);
    }

    return abs_planes(s, (size_t)pos_len, vals, k, unit, level, out);
}

int patch_encode_abs_at(patch_scratch *s, const patch_pos *pp, size_t k, const uint8_t *vals, unsigned unit,
                        int level, patch_out_chunk *out)
{
    /* in format 3 whatever format it was read from: its coding byte, then its body */
    s->planes[0] = (uint8_t)pp->coding;
    memcpy(s->planes + 1, pp->body, pp->body_len);
    return abs_planes(s, 1 + pp->body_len, vals, k, unit, level, out);
}

int patch_encode_ulp16(patch_scratch *s, size_t leb_len, size_t k, const uint16_t *z, int level,
                       patch_out_chunk *out)
{
    uint8_t *dst = s->planes;
    int64_t pos_len = patch_pos_encode(s, dst, s->leb, leb_len, k, level);
    if (pos_len < 0)
        return (int)pos_len;
    int64_t val_len = ulp_values(s, dst + pos_len, (const uint8_t *)z, k, 2, level);
    if (val_len < 0)
        return (int)val_len;
    return finish_out(s, out, dst, (size_t)pos_len, (size_t)val_len, (uint32_t)k);
}

int patch_encode_replace(patch_scratch *s, const uint8_t *bytes, uint32_t len, uint32_t count,
                         int level, patch_out_chunk *out)
{
    /* Whole chunks of OPAQUE bytes (token ids, masks) do repeat: never below level 1. */
    int64_t r = patch_zstd_frame(s, s->planes, ZSTD_compressBound(len), bytes, len, level < 1 ? 1 : level);
    if (r < 0)
        return (int)r;
    return finish_out(s, out, s->planes, 0, (size_t)r, count);
}
