/* SPDX-License-Identifier: Apache-2.0 */
/* The chunk decoder: a chunk's streams back to positions and values, bounded and checked. */
#include <stdlib.h>
#include <string.h>

#include "base/fail.h"
#include "node/patch/patch_internal.h"

/* ---- decoder --------------------------------------------------------------------- */

/* Decompresses exactly one frame of want_min..want_max bytes starting at src (avail bytes);
 * returns the frame's compressed size or a negative error. */
static int64_t unzstd_frame(patch_scratch *s, const patch_tensor *t, const patch_chunk *c,
                            const char *what, const uint8_t *src, size_t avail, uint8_t *dst,
                            size_t want_min, size_t want_max, size_t *got)
{
    size_t csz = 0;
    int64_t fsz = patch_frame_probe(t, c, what, src, avail, want_min, want_max, &csz);
    if (fsz < 0)
        return fsz;
    int err = patch_frame_unzstd(s, t, c, what, src, (size_t)fsz, dst, csz);
    if (err)
        return err;
    *got = csz;
    return fsz;
}

int patch_leb_positions(const uint8_t *src, size_t len, size_t k, uint32_t limit, uint32_t *idx)
{
    size_t at = 0, j = 0;
    uint64_t next = 0;   /* position of the next change if its gap is 0; 64 bits cannot wrap */
    while (j < k) {
        /* Fast path: eight one-byte gaps at once (gaps under 128, the common case). */
        if (j + 8 <= k && at + 8 <= len) {
            uint64_t x;
            memcpy(&x, src + at, 8);
            if (!(x & 0x8080808080808080ull)) {
                for (unsigned i = 0; i < 8; i++) {
                    next += (x >> (8 * i)) & 0xff;
                    idx[j + i] = (uint32_t)next++;
                }
                j += 8;
                at += 8;
                if (next > limit)
                    return -4;
                continue;
            }
        }
        uint32_t val;
        int rc = pulse_leb_get(src, len, &at, &val);
        if (rc < 0)
            return rc;
        next += val;
        if (next >= limit)
            return -4;
        idx[j++] = (uint32_t)next++;
    }
    return at == len ? 0 : -3;
}

static void store_unit(uint8_t *vals, size_t j, unsigned unit, uint32_t z)
{
    switch (unit) {
    case 1: vals[j] = (uint8_t)z; break;
    case 2: { uint16_t x = (uint16_t)z; memcpy(vals + 2 * j, &x, 2); break; }
    default: memcpy(vals + 4 * j, &z, 4); break;
    }
}

/* Four 2-bit symbols of a byte as four 16-bit lanes z = symbol + 1 (an escape lane is
 * overwritten): ulp2_lanes[b]. */
#define LANES(b) ((((uint64_t)(b) & 3) + 1) | ((((uint64_t)(b) >> 2 & 3) + 1) << 16) \
                  | ((((uint64_t)(b) >> 4 & 3) + 1) << 32) | ((((uint64_t)(b) >> 6 & 3) + 1) << 48))
#define LANES4(b) LANES(b), LANES((b) + 1), LANES((b) + 2), LANES((b) + 3)
#define LANES16(b) LANES4(b), LANES4((b) + 4), LANES4((b) + 8), LANES4((b) + 12)
#define LANES64(b) LANES16(b), LANES16((b) + 16), LANES16((b) + 32), LANES16((b) + 48)
static const uint64_t ulp2_lanes[256] = { LANES64(0), LANES64(64), LANES64(128), LANES64(192) };

int patch_unpack_ulp(const patch_tensor *t, const patch_chunk *c, patch_scratch *s, unsigned bits,
                      const uint8_t *packed, const uint8_t *esc, size_t esc_len)
{
    const size_t k = c->count;
    const unsigned unit = t->unit;
    const uint32_t m = 1u << bits, maxz = unit == 4 ? UINT32_MAX : (1u << (8 * unit)) - 1;
    size_t at = 0, j = 0;
    if (bits == 2 && unit == 2) {
        /* Hot path (BF16/F16, mostly +-1): four symbols of a byte spread into four lanes. */
        uint16_t *out = (uint16_t *)(void *)s->vals;
        for (; j + 4 <= k; j += 4) {
            unsigned b = packed[j >> 2];
            memcpy(out + j, &ulp2_lanes[b], 8);
            unsigned escapes = b & (b >> 1) & 0x55;   /* symbol 3 in a lane: low bit of its pair */
            while (escapes) {
                unsigned i = (unsigned)__builtin_ctz(escapes) >> 1;
                escapes &= escapes - 1;
                uint32_t e;
                if (pulse_leb_get(esc, esc_len, &at, &e) < 0 || e > maxz - m)
                    goto bad_escape;
                out[j + i] = (uint16_t)(e + m);
            }
        }
    }
    for (; j < k; j++) {
        size_t bit = j * bits;
        uint32_t sym = (uint32_t)(packed[bit >> 3] >> (bit & 7)) & (m - 1), z = sym + 1;
        if (sym == m - 1) {
            uint32_t e;
            if (pulse_leb_get(esc, esc_len, &at, &e) < 0 || e > maxz - m)
                goto bad_escape;
            z = e + m;
        }
        store_unit(s->vals, j, unit, z);
    }
    if (at != esc_len)
        return pulse_fail(PULSE_ERR_FORMAT, "tensor %s chunk %llu: %zu stray bytes in the escape stream",
                          t->name, (unsigned long long)c->index, esc_len - at);
    /* Padding bits of the last byte are zero: one encoding per chunk. */
    if ((k * bits) % 8 && (packed[(k * bits) / 8] >> ((k * bits) % 8)))
        return pulse_fail(PULSE_ERR_FORMAT, "tensor %s chunk %llu: nonzero padding after the last symbol",
                          t->name, (unsigned long long)c->index);
    return 0;
bad_escape:
    return pulse_fail(PULSE_ERR_FORMAT, "tensor %s chunk %llu: escape stream short, overlong or out of range",
                      t->name, (unsigned long long)c->index);
}

int patch_ulp_bits(const patch_tensor *t, const patch_chunk *c, const uint8_t **v, size_t *left,
                   unsigned *bits)
{
    if (*left < 1)
        return pulse_fail(PULSE_ERR_FORMAT, "tensor %s chunk %llu: empty value stream",
                          t->name, (unsigned long long)c->index);
    *bits = (*v)[0];
    if (*bits != 2 && *bits != 4 && *bits != 8)
        return pulse_fail(PULSE_ERR_UNSUPPORTED, "tensor %s chunk %llu: value coding %u unknown (known: 2, 4, 8-bit symbols)",
                          t->name, (unsigned long long)c->index, *bits);
    (*v)++;
    (*left)--;
    return 0;
}

/* The ulp value stream: [coding byte = symbol bits 2, 4 or 8][frame: ceil(k*bits/8) packed
 * bytes][frame: LEB128 escapes, present iff a symbol is the escape]. */
static int decode_ulp(const patch_tensor *t, const patch_chunk *c, patch_scratch *s, const uint8_t *v,
                      size_t left)
{
    const size_t k = c->count;
    unsigned bits = 0;
    int e = patch_ulp_bits(t, c, &v, &left, &bits);
    if (e)
        return e;
    size_t plen = (k * bits + 7) / 8, got, esc_len = 0;
    uint8_t *packed = s->planes;
    int64_t r = unzstd_frame(s, t, c, "value", v, left, packed, plen, plen, &got);
    if (r < 0)
        return (int)r;
    v += r;
    left -= (size_t)r;
    if (left) {
        /* The escape stream: LEB128 of at most 5 bytes per escape, one escape per change at most. */
        r = unzstd_frame(s, t, c, "escape", v, left, s->leb, 1, k * PATCH_LEB_MAX, &esc_len);
        if (r < 0)
            return (int)r;
        if ((uint64_t)r != left)
            return pulse_fail(PULSE_ERR_FORMAT, "tensor %s chunk %llu: trailing bytes in value stream",
                              t->name, (unsigned long long)c->index);
    }
    return patch_unpack_ulp(t, c, s, bits, packed, s->leb, esc_len);
}

int patch_decode_chunk(const pulse_patch *p, const patch_chunk *c, patch_scratch *s)
{
    const uint8_t *bytes;
    return patch_decode_chunk_at(p, c, s, &bytes);
}

int patch_decode_chunk_at(const pulse_patch *p, const patch_chunk *c, patch_scratch *s, const uint8_t **bytes)
{
    int err = patch_chunk_bytes(p, c, s, 1, bytes);
    return err ? err : patch_decode_bytes(p, c, s, *bytes);
}

int patch_decode_checked_chunk(const pulse_patch *p, const patch_chunk *c, patch_scratch *s)
{
    const uint8_t *bytes;
    int err = patch_chunk_bytes(p, c, s, 0, &bytes);
    return err ? err : patch_decode_bytes(p, c, s, bytes);
}

int patch_decode_bytes(const pulse_patch *p, const patch_chunk *c, patch_scratch *s, const uint8_t *bytes)
{
    const patch_tensor *t = &p->tensors[c->tensor];
    size_t got;
    if (t->dtype == PULSE_DT_OPAQUE || patch_dtype_unit(t->dtype) == 0) {
        if (c->pos_len != 0)
            return pulse_fail(PULSE_ERR_FORMAT, "tensor %s chunk %llu: opaque chunk has positions",
                              t->name, (unsigned long long)c->index);
        int64_t r = unzstd_frame(s, t, c, "value", bytes, c->val_len, s->vals, c->len, c->len, &got);
        if (r < 0)
            return (int)r;
        if ((uint64_t)r != c->val_len)
            return pulse_fail(PULSE_ERR_FORMAT, "tensor %s chunk %llu: trailing bytes in value stream",
                              t->name, (unsigned long long)c->index);
        return 0;
    }

    size_t k = c->count;
    patch_pos pp;
    int err = patch_pos_probe(p, c, bytes, &pp);
    if (!err)
        err = patch_pos_decode(s, p, c, &pp, s->leb, &got, 0);
    if (err)
        return err;
    /* LEB128 gaps: exactly k of them, each fitting 32 bits, filling the stream, every
     * position inside the chunk. */
    int lr = patch_leb_positions(s->leb, got, k, c->len, s->idx);
    int64_t r;
    if (lr < 0)
        return patch_gap_error(t, c, lr);

    unsigned unit = t->unit;
    const uint8_t *v = bytes + c->pos_len;
    size_t left = c->val_len;
    if (p->values == PULSE_VALUES_ULP)
        return decode_ulp(t, c, s, v, left);
    for (unsigned b = 0; b < unit; b++) {
        r = unzstd_frame(s, t, c, "value", v, left, s->leb + (size_t)b * k, k, k, &got);
        if (r < 0)
            return (int)r;
        v += r;
        left -= (size_t)r;
    }
    if (left != 0)
        return pulse_fail(PULSE_ERR_FORMAT, "tensor %s chunk %llu: trailing bytes in value stream",
                          t->name, (unsigned long long)c->index);
    for (unsigned b = 0; b < unit; b++)
        for (size_t j = 0; j < k; j++)
            s->vals[j * unit + b] = s->leb[(size_t)b * k + j];
    return 0;
}
