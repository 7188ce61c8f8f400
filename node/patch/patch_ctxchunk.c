/* SPDX-License-Identifier: Apache-2.0 */
/* Context-coded chunks (formats 5 and 6) in the patch's read paths: told apart by their first byte, decoded only against the base a caller holds (and, coded by direction, the checkpoint before it). */
#include <stdlib.h>
#include <string.h>

#include "base/fail.h"
#include "node/patch/patch_ctxcode.h"
#include "node/patch/patch_dirs.h"
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

/* A chunk whose values are coded by the direction of each element in the step before the base
 * (format 6 only: earlier formats name no such step). */
static int coded_by_dirs(const pulse_patch *p, const patch_chunk *c, const uint8_t *bytes, int *dirs)
{
    *dirs = (bytes[0] & PATCH_CTX_PREV_DIRS) != 0;
    if (*dirs && p->version < PULSE_PATCH_VERSION_PREV)
        return pulse_fail(PULSE_ERR_FORMAT,
                          "tensor %s chunk %llu: coded by a previous step in a format-%u patch (only format %u "
                          "names one)", p->tensors[c->tensor].name, (unsigned long long)c->index, p->version,
                          PULSE_PATCH_VERSION_PREV);
    return 0;
}

/* The directions of chunk c's elements from the checkpoint before the base to the base (old),
 * into s->dirs. */
static int chunk_dirs(const pulse_patch *p, const patch_chunk *c, patch_scratch *s, const uint16_t *old)
{
    if (!p->prev && !p->prev_dirs)
        return pulse_fail(PULSE_ERR_UNSUPPORTED,
                          "tensor %s chunk %llu: its values are coded by the step before the base (format 6), so "
                          "decoding it needs that checkpoint or its step's directions too (--prev, --prev-dirs)",
                          p->tensors[c->tensor].name, (unsigned long long)c->index);
    if (!s->dirs && !(s->dirs = malloc(p->chunk_elems)))
        return pulse_fail(PULSE_ERR_NOMEM, "directions of a chunk (%u elements)", p->chunk_elems);
    if (p->prev)
        patch_dirs_of(pulse_ckpt_tensor(p->prev, c->tensor)->data + c->first * 2, old, c->len, s->dirs);
    else
        patch_dirs_unpack(p->prev_dirs, c->tensor, c->first, c->len, s->dirs);
    return 0;
}

void patch_dirs_of(const uint8_t *prev, const uint16_t *old, uint32_t n, uint8_t *dirs)
{
    if (!patch_misaligned(prev, 2)) {
        patch_ctx_dirs((const uint16_t *)(const void *)prev, old, n, dirs);
        return;
    }
    /* element by element: a misaligned 16-bit load is not portable C */
    for (uint32_t i = 0; i < n; i++) {
        uint16_t v;
        memcpy(&v, prev + 2 * (size_t)i, 2);
        dirs[i] = patch_ctx_dir(v, old[i]);
    }
}

/* Decodes context chunk c (bytes checked) against base into idx and z; with light set only
 * checks it against base (patch_ctx_check_base: idx and z are then scratch). A chunk coded by
 * direction takes the directions given (the chunk's, len bytes), or with NULL those from the
 * patch's previous checkpoint. */
static int decode_into(const pulse_patch *p, const patch_chunk *c, patch_scratch *s, const uint8_t *bytes,
                       const uint8_t *base, const uint8_t *given, uint32_t *idx, uint16_t *z, int light)
{
    int dirs, err = context_kind(p, c);
    if (err || (err = coded_by_dirs(p, c, bytes, &dirs)) != 0)
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
    if (dirs) {
        /* the whole decode: the values' order needs every position (idx and z are scratch when light) */
        if (!given && (err = chunk_dirs(p, c, s, old)) != 0)
            return err;
        return patch_ctx_decode_dirs(cs, t->dtype, old, given ? given : s->dirs, c->len, bytes, c->pos_len, bytes + c->pos_len,
                                     c->val_len, c->count, idx, z, t->name, c->index);
    }
    return (light ? patch_ctx_check_base : patch_ctx_decode)(cs, t->dtype, old, c->len, bytes, c->pos_len,
                                                            bytes + c->pos_len, c->val_len, c->count, idx, z,
                                                            t->name, c->index);
}

int patch_decode_bytes_base(const pulse_patch *p, const patch_chunk *c, patch_scratch *s, const uint8_t *bytes,
                            const uint8_t *base)
{
    if (!patch_chunk_is_context(p, c, bytes))
        return patch_decode_bytes(p, c, s, bytes);
    return decode_into(p, c, s, bytes, base, NULL, s->idx, (uint16_t *)(void *)s->vals, 0);
}

int patch_decode_chunk_dirs(const pulse_patch *p, const patch_chunk *c, patch_scratch *s, const uint8_t *base,
                            const uint8_t *dirs)
{
    const uint8_t *bytes;
    int err = patch_chunk_bytes(p, c, s, 1, &bytes);
    if (err || !patch_chunk_is_context(p, c, bytes))
        return err ? err : patch_decode_bytes(p, c, s, bytes);
    return decode_into(p, c, s, bytes, base, dirs, s->idx, (uint16_t *)(void *)s->vals, 0);
}

int patch_decode_chunk_base(const pulse_patch *p, const patch_chunk *c, patch_scratch *s, const uint8_t *base)
{
    const uint8_t *bytes;
    int err = patch_chunk_bytes(p, c, s, 1, &bytes);
    return err ? err : patch_decode_bytes_base(p, c, s, bytes, base);
}

int patch_check_context(const pulse_patch *p, size_t i, const uint8_t *bytes, patch_scratch *s, patch_cache *cache,
                        const uint8_t *base)
{
    const patch_chunk *c = &p->chunks[i];
    int dirs, err = context_kind(p, c);
    if (err || (err = coded_by_dirs(p, c, bytes, &dirs)) != 0)
        return err;
    if (!base)
        return (dirs ? patch_ctx_check_dirs : patch_ctx_check)(p->tensors[c->tensor].dtype, bytes, c->pos_len,
                                                               bytes + c->pos_len, c->val_len, c->count, c->len,
                                                               p->tensors[c->tensor].name, c->index);
    const size_t k = c->count, iroom = (k * 4 + 7) & ~(size_t)7, zroom = (k * 2 + 7) & ~(size_t)7;
    size_t off = patch_cache_reserve(cache, iroom + zroom);
    if (off == SIZE_MAX)   /* not kept: the write pass decodes it again, so only check it here */
        return decode_into(p, c, s, bytes, base, NULL, s->idx, (uint16_t *)(void *)s->vals, 1);
    uint32_t *idx = (uint32_t *)(void *)(cache->mem + off);
    uint16_t *z = (uint16_t *)(void *)(cache->mem + off + iroom);
    if ((err = decode_into(p, c, s, bytes, base, NULL, idx, z, 0)) != 0)
        return err;
    patch_cache_keep(cache, i, off, iroom, 0, 0, 0, PATCH_CACHE_CONTEXT);
    return 0;
}

int patch_verify_chunk(const pulse_patch *p, const patch_chunk *c, patch_scratch *s)
{
    const uint8_t *bytes;
    int err = patch_chunk_bytes(p, c, s, 1, &bytes);
    if (err || !patch_chunk_is_context(p, c, bytes))
        return err ? err : patch_decode_bytes(p, c, s, bytes);
    return patch_check_context(p, (size_t)(c - p->chunks), bytes, s, NULL, NULL);
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

int pulse_patch_set_prev(pulse_patch *p, const pulse_ckpt *prev, const uint8_t *prev_id)
{
    pulse_clear_error();
    if (!p || !prev)
        return pulse_fail(PULSE_ERR_INVALID, "set_prev: no patch or no checkpoint");
    if (p->version < PULSE_PATCH_VERSION_PREV)
        return pulse_fail(PULSE_ERR_INVALID, "a format-%u patch is not coded by the step before its base (format %u is)",
                          p->version, PULSE_PATCH_VERSION_PREV);
    int err = patch_check_layout(p, prev);
    if (err)
        return err;
    uint8_t id[PULSE_STATE_ID_BYTES];
    if (!prev_id) {
        if ((err = pulse_ckpt_state_id(prev, 0, id)) != 0)
            return err;
        prev_id = id;
    }
    char h1[65], h2[65];
    if (memcmp(prev_id, p->prev_id, 32) != 0)
        return pulse_fail(PULSE_ERR_MISMATCH, "the patch was coded after state %.16s.., the previous checkpoint is %.16s..",
                          pulse_id_hex(p->prev_id, h1), pulse_id_hex(prev_id, h2));
    p->prev = prev;
    p->prev_dirs = NULL;
    return 0;
}
