/* SPDX-License-Identifier: Apache-2.0 */
/* Context-coded chunks (format 5) in the patch's read paths: told apart by their first byte, decoded only against the base a caller holds. */
#include <string.h>

#include "base/fail.h"
#include "node/patch/patch_ctxcode.h"
#include "node/patch/patch_internal.h"

int patch_chunk_is_context(const pulse_patch *p, const patch_chunk *c, const uint8_t *bytes)
{
    return p->version >= 5 && c->pos_len > 0 && patch_pos_is_context(bytes[0]);
}

struct patch_ctx_scratch *patch_scratch_ctx(patch_scratch *s, uint32_t chunk_elems)
{
    if (!s->ctx && !(s->ctx = patch_ctx_scratch_new(chunk_elems)))
        pulse_fail(PULSE_ERR_NOMEM, "context coder scratch (%u elements)", chunk_elems);
    return s->ctx;
}

const uint8_t *patch_chunk_base(const pulse_patch *p, const patch_chunk *c, const pulse_ckpt *ck)
{
    if (!ck)
        return NULL;
    return pulse_ckpt_tensor(ck, c->tensor)->data + c->first * p->tensors[c->tensor].unit;
}

/* Only BF16 and F16 ulp chunks are context-coded: the bands are their exponents. */
static int context_kind(const pulse_patch *p, const patch_chunk *c)
{
    const patch_tensor *t = &p->tensors[c->tensor];
    if (!patch_ctx_dtype_ok(t->dtype) || p->values != PULSE_VALUES_ULP)
        return pulse_fail(PULSE_ERR_FORMAT,
                          "tensor %s chunk %llu: context coding on a %s %s chunk (only BF16 and F16 ulp)",
                          t->name, (unsigned long long)c->index, t->dtype_name,
                          p->values == PULSE_VALUES_ULP ? "ulp" : "abs");
    return 0;
}

static int need_base(const pulse_patch *p, const patch_chunk *c)
{
    return pulse_fail(PULSE_ERR_UNSUPPORTED,
                      "tensor %s chunk %llu: context-coded (format 5), decoding it needs the base weights",
                      p->tensors[c->tensor].name, (unsigned long long)c->index);
}

int patch_decode_context(const pulse_patch *p, const patch_chunk *c, patch_scratch *s, const uint8_t *bytes,
                         const uint8_t *base, uint32_t *idx, uint16_t *z, int light)
{
    int err = context_kind(p, c);
    if (err)
        return err;
    if (!base)
        return need_base(p, c);
    struct patch_ctx_scratch *cs = patch_scratch_ctx(s, p->chunk_elems);
    if (!cs)
        return PULSE_ERR_NOMEM;
    const uint16_t *old = (const uint16_t *)(const void *)base;
    if (patch_misaligned(base, 2)) {
        /* the second bounce buffer: a write path keeps its aligned copy of a misaligned chunk
         * in the first (but then decodes against that copy, which is aligned) */
        uint8_t *copy = patch_scratch_bounce(s, p->chunk_elems);
        if (!copy)
            return PULSE_ERR_NOMEM;
        copy += (size_t)p->chunk_elems * 4;
        memcpy(copy, base, (size_t)c->len * 2);
        old = (const uint16_t *)(const void *)copy;
    }
    const patch_tensor *t = &p->tensors[c->tensor];
    return (light ? patch_ctx_check_base : patch_ctx_decode)(cs, t->dtype, old, c->len, bytes, c->pos_len,
                                                            bytes + c->pos_len, c->val_len, c->count, idx, z,
                                                            t->name, c->index);
}

int patch_decode_bytes_base(const pulse_patch *p, const patch_chunk *c, patch_scratch *s, const uint8_t *bytes,
                            const uint8_t *base)
{
    if (!patch_chunk_is_context(p, c, bytes))
        return patch_decode_bytes(p, c, s, bytes);
    return patch_decode_context(p, c, s, bytes, base, s->idx, (uint16_t *)(void *)s->vals, 0);
}

int patch_decode_chunk_base(const pulse_patch *p, const patch_chunk *c, patch_scratch *s, const uint8_t *base)
{
    const uint8_t *bytes;
    int err = patch_chunk_bytes(p, c, s, 1, &bytes);
    return err ? err : patch_decode_bytes_base(p, c, s, bytes, base);
}

int patch_check_context_streams(const pulse_patch *p, const patch_chunk *c, const uint8_t *bytes)
{
    int err = context_kind(p, c);
    if (err)
        return err;
    const patch_tensor *t = &p->tensors[c->tensor];
    return patch_ctx_check(t->dtype, bytes, c->pos_len, bytes + c->pos_len, c->val_len, c->count, c->len, t->name,
                           c->index);
}

int patch_verify_chunk(const pulse_patch *p, const patch_chunk *c, patch_scratch *s)
{
    const uint8_t *bytes;
    int err = patch_chunk_bytes(p, c, s, 1, &bytes);
    if (err || !patch_chunk_is_context(p, c, bytes))
        return err ? err : patch_decode_bytes(p, c, s, bytes);
    return patch_check_context_streams(p, c, bytes);
}

/* Puts a context-coded chunk's decoded changes (in band order) in ascending position: each
 * value dropped at its position in a dense array (s->planes, >= 2 x chunk bytes), a bit set in
 * a bitmap (s->leb, >= chunk / 8 bytes), then both read back in order. */
static void sort_changes(const patch_chunk *c, patch_scratch *s)
{
    uint16_t *dense = (uint16_t *)(void *)s->planes, *z = (uint16_t *)(void *)s->vals;
    uint64_t *bits = (uint64_t *)(void *)s->leb;
    const size_t words = ((size_t)c->len + 63) / 64;
    memset(bits, 0, words * 8);
    for (uint32_t j = 0; j < c->count; j++) {
        dense[s->idx[j]] = z[j];
        bits[s->idx[j] >> 6] |= 1ull << (s->idx[j] & 63);
    }
    uint32_t m = 0;
    for (size_t w = 0; w < words; w++)
        for (uint64_t b = bits[w]; b; b &= b - 1) {
            const uint32_t at = (uint32_t)(w * 64 + (size_t)__builtin_ctzll(b));
            s->idx[m] = at;
            z[m++] = dense[at];
        }
}

int patch_decode_chunk_sorted(const pulse_patch *p, const patch_chunk *c, patch_scratch *s, const uint8_t *base)
{
    const uint8_t *bytes;
    int err = patch_chunk_bytes(p, c, s, 1, &bytes);
    if (err || (err = patch_decode_bytes_base(p, c, s, bytes, base)) != 0)
        return err;
    if (patch_chunk_is_context(p, c, bytes))
        sort_changes(c, s);
    return 0;
}
