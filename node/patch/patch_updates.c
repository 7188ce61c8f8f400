/* SPDX-License-Identifier: Apache-2.0 */
/* One tensor's changes in checkpoint coordinates (index, new bits, bit deltas) decoded into the caller's own arrays, for engines that apply a step to tensors pulse never sees. */
#include <stdlib.h>
#include <string.h>

#include "base/fail.h"
#include "node/parallel.h"
#include "node/patch/patch_internal.h"

typedef struct updates_job {
    const pulse_patch *p;
    const patch_tensor *t;
    const uint8_t *base;        /* the tensor's bytes in the base checkpoint, or NULL */
    const uint64_t *out_at;     /* ncoded: each coded chunk's first output slot */
    int64_t *index;
    uint8_t *values, *deltas;   /* element width (OPAQUE: 1 byte) each, any alignment */
    patch_pool pool;
} updates_job;

/* The low `unit` bytes of x at dst / from src; memcpy because neither the caller's arrays nor
 * a safetensors tensor's data need be aligned to the element. Little-endian, like the format. */
static inline uint32_t load_unit(const uint8_t *src, unsigned unit)
{
    uint32_t x = 0;
    memcpy(&x, src, unit);
    return x;
}

static inline void store_unit(uint8_t *dst, uint32_t x, unsigned unit)
{
    memcpy(dst, &x, unit);
}

/* The element-wise changes of one decoded chunk (positions in s->idx, values in s->vals) into
 * output slots out .. out + count. Inlined per width so the copies are single moves. */
static inline void emit_elements(const updates_job *j, const patch_chunk *c, const patch_scratch *s, uint64_t out,
                                 unsigned unit, int ulp)
{
    const uint32_t mask = unit == 4 ? UINT32_MAX : (1u << (8 * unit)) - 1;
    const uint8_t *old = j->base ? j->base + c->first * unit : NULL;
    for (uint32_t m = 0; m < c->count; m++) {
        const uint32_t pos = s->idx[m];
        const uint64_t at = out + m;
        if (j->index)
            j->index[at] = (int64_t)(c->first + pos);
        uint32_t v = load_unit(s->vals + (size_t)m * unit, unit), nv, d;
        if (ulp) {
            d = ((v >> 1) ^ (0u - (v & 1))) & mask;   /* un-zigzag, modulo 2^width */
            nv = old ? (load_unit(old + (size_t)pos * unit, unit) + d) & mask : 0;
        } else {
            nv = v;
            d = old ? (v - load_unit(old + (size_t)pos * unit, unit)) & mask : 0;
        }
        if (j->values)
            store_unit(j->values + at * unit, nv, unit);
        if (j->deltas)
            store_unit(j->deltas + at * unit, d, unit);
    }
}

/* An OPAQUE chunk carries its whole new bytes (s->vals); its changes are the bytes that
 * differ from base, and their number must be the chunk's count: anything else means base is
 * not in the patch's base state (or the count is false), and the slot range would not fit. */
static int emit_bytes(const updates_job *j, const patch_chunk *c, const patch_scratch *s, uint64_t out)
{
    const uint8_t *old = j->base + c->first;
    uint32_t differ = 0;
    for (uint32_t b = 0; b < c->len; b++) {
        if (s->vals[b] == old[b])
            continue;
        if (differ < c->count) {
            const uint64_t at = out + differ;
            if (j->index)
                j->index[at] = (int64_t)(c->first + b);
            if (j->values)
                j->values[at] = s->vals[b];
            if (j->deltas)
                j->deltas[at] = (uint8_t)(s->vals[b] - old[b]);
        }
        differ++;
    }
    if (differ != c->count)
        return pulse_fail(PULSE_ERR_MISMATCH, "tensor %s chunk %llu: %u bytes differ from base, the patch says %u "
                          "(base is not in the patch's base state)", j->t->name, (unsigned long long)c->index,
                          differ, c->count);
    return 0;
}

static int updates_chunk(void *ctx, size_t i)
{
    updates_job *j = ctx;
    const patch_chunk *c = &j->p->chunks[j->t->first_coded + i];
    if (patch_chunk_absent(j->p, j->t->first_coded + i))
        return 0;
    int err = 0;
    patch_scratch *s = patch_pool_take(&j->pool, &err);
    if (!s)
        return err;
    const uint8_t *base = j->base ? j->base + c->first * j->t->unit : NULL;
    if ((err = patch_decode_chunk_sorted(j->p, c, s, base)) == 0) {
        const int ulp = j->p->values == PULSE_VALUES_ULP;
        if (j->t->dtype == PULSE_DT_OPAQUE || patch_dtype_unit(j->t->dtype) == 0) {
            if (j->base)
                err = emit_bytes(j, c, s, j->out_at[i]);
        } else if (j->t->unit == 2) {
            emit_elements(j, c, s, j->out_at[i], 2, ulp);
        } else if (j->t->unit == 4) {
            emit_elements(j, c, s, j->out_at[i], 4, ulp);
        } else {
            emit_elements(j, c, s, j->out_at[i], 1, ulp);
        }
    }
    patch_pool_give(&j->pool, s);
    return err;
}

/* Tensor i of base against the patch's: the count, name, dtype and shape (the checks and words of
 * patch_check_layout for one tensor). The whole layout is not compared on every call, which
 * would make a caller walking all tensors quadratic in their number; pulse_patch_verify(p, base)
 * compares it once. */
static int check_tensor_layout(const pulse_patch *p, size_t i, const pulse_ckpt *base)
{
    const patch_tensor *pt = &p->tensors[i];
    if (pulse_ckpt_count(base) != p->ntensors)
        return pulse_fail(PULSE_ERR_MISMATCH, "layout changed: %zu tensors in the patch, %zu in the checkpoint",
                          p->ntensors, pulse_ckpt_count(base));
    return patch_check_tensor_layout(pt, pulse_ckpt_tensor(base, i));
}

uint64_t pulse_patch_tensor_changes(const pulse_patch *p, size_t i)
{
    if (!p || i >= p->ntensors)
        return 0;
    const patch_tensor *t = &p->tensors[i];
    if (!p->present)
        return t->changes;
    uint64_t n = 0;   /* a sliced patch: the changes of the chunks it holds */
    for (size_t c = t->first_coded; c < t->first_coded + t->ncoded; c++)
        n += patch_chunk_absent(p, c) ? 0 : p->chunks[c].count;
    return n;
}

int pulse_patch_tensor_updates(const pulse_patch *p, size_t i, const pulse_ckpt *base, int threads,
                               int64_t *index, void *values, void *deltas)
{
    if (!p || i >= p->ntensors)
        return pulse_fail(PULSE_ERR_INVALID, "pulse_patch_tensor_updates: %s", p ? "tensor index out of range"
                                                                                 : "NULL patch");
    const patch_tensor *t = &p->tensors[i];
    const int opaque = t->dtype == PULSE_DT_OPAQUE || patch_dtype_unit(t->dtype) == 0;
    if (!base) {
        /* What the patch alone cannot give: an OPAQUE chunk is a whole-chunk replacement (which of
         * its bytes changed is known only against base), a ulp value is a difference, an abs value
         * is not. */
        const char *need = opaque && (index || values || deltas) ? "its changed bytes (OPAQUE, coded as whole-chunk replacements)"
                         : p->values == PULSE_VALUES_ULP && values ? "new values from a ulp patch (base + delta)"
                         : p->values == PULSE_VALUES_ABS && deltas ? "deltas from an abs patch (new - base)"
                         : NULL;
        if (need)
            return pulse_fail(PULSE_ERR_INVALID, "tensor %s: %s need base", t->name, need);
    }
    const uint8_t *base_data = NULL;
    if (base) {
        int err = check_tensor_layout(p, i, base);
        if (err)
            return err;
        base_data = pulse_ckpt_tensor(base, i)->data;
        if (t->changes && !base_data)
            return pulse_fail(PULSE_ERR_INVALID, "tensor %s: base checkpoint not readable", t->name);
    }
    if (!t->ncoded)
        return 0;

    updates_job j = { .p = p, .t = t, .base = base_data, .index = index, .values = values, .deltas = deltas };
    uint64_t *out_at = malloc(t->ncoded * sizeof *out_at);
    if (!out_at)
        return pulse_fail(PULSE_ERR_NOMEM, "tensor %s: %zu chunk offsets", t->name, t->ncoded);
    /* Each chunk's slice of the output: the prefix sums of the chunk counts (open checked that
     * they add up to the tensor's changes; a sliced patch's absent chunks take no slots). */
    uint64_t sum = 0;
    for (size_t c = 0; c < t->ncoded; c++) {
        out_at[c] = sum;
        if (!patch_chunk_absent(p, t->first_coded + c))
            sum += p->chunks[t->first_coded + c].count;
    }
    j.out_at = out_at;
    int err = patch_pool_init(&j.pool, threads, p->chunk_elems, 0);
    if (!err) {
        err = pulse_parallel_for(t->ncoded, threads, updates_chunk, &j);
        patch_pool_free(&j.pool);
    }
    free(out_at);
    return err;
}
