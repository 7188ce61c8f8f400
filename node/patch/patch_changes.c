/* SPDX-License-Identifier: Apache-2.0 */
/* A patch made of change lists: each tensor's changes cut at chunk boundaries and coded as the diff codes them, so a step found on a GPU gives the bytes the CPU diff gives. */
#include <stdlib.h>
#include <string.h>

#include "base/fail.h"
#include "node/checkpoint/ckpt_internal.h"
#include "node/patch/patch_changes.h"
#include "node/patch/patch_internal.h"

typedef struct changes_job {
    const pulse_tensor_changes *t;
    const pulse_diff_opts *o;
    uint64_t **at;           /* per tensor: nchunks + 1 starts of each chunk's changes in its lists */
    patch_build build;
} changes_job;

/* Tensor i's lists checked (positions strictly ascending inside the tensor, the arrays the code
 * needs) and cut at chunk boundaries into at (nchunks + 1 entries); each chunk with changes planned. */
static int cut_tensor(changes_job *j, size_t i, const pulse_tensor *lt)
{
    const pulse_tensor_changes *t = &j->t[i];
    patch_out_tensor *ot = &j->build.out[i];
    const uint64_t ce = j->o->chunk_elems;
    if (!t->count)
        return 0;
    if (!patch_dtype_unit(lt->dtype))
        return pulse_fail(PULSE_ERR_INVALID, "tensor %s: %s changes are whole bytes, not elements: publish it "
                          "from its tensors", lt->name, lt->dtype_name);
    if (t->count > lt->nelems || !t->index)
        return pulse_fail(PULSE_ERR_INVALID, "tensor %s: %llu changes of %llu elements%s", lt->name,
                          (unsigned long long)t->count, (unsigned long long)lt->nelems, t->index ? "" : " and no index");
    if (j->o->values == PULSE_VALUES_ULP ? !t->deltas : !t->values)
        return pulse_fail(PULSE_ERR_INVALID, "tensor %s: a %s patch needs the changes' %s", lt->name,
                          j->o->values == PULSE_VALUES_ULP ? "ulp" : "abs",
                          j->o->values == PULSE_VALUES_ULP ? "deltas" : "values");
    uint64_t *at = calloc(ot->nchunks + 1, sizeof *at);
    if (!at)
        return pulse_fail(PULSE_ERR_NOMEM, "tensor %s: chunk starts", lt->name);
    j->at[i] = at;
    int64_t prev = -1;
    uint64_t c = 0;
    for (uint64_t k = 0; k < t->count; k++) {
        int64_t x = t->index[k];
        if (x <= prev || (uint64_t)x >= lt->nelems)
            return pulse_fail(PULSE_ERR_INVALID, "tensor %s: change %llu at index %lld (%s)", lt->name,
                              (unsigned long long)k, (long long)x,
                              x <= prev ? "not after the one before" : "beyond the tensor");
        prev = x;
        for (; c < (uint64_t)x / ce; c++)
            at[c + 1] = k;
        ot->chunks[c].planned = 1;
    }
    for (; c < ot->nchunks; c++)
        at[c + 1] = t->count;
    return 0;
}

/* The zigzag of a width-`unit` difference, as the diff codes new - old (kernels.h ulp_encode*). */
static uint32_t zigzag(uint32_t d, unsigned unit)
{
    const unsigned bits = 8 * unit;
    const uint32_t mask = bits == 32 ? ~0u : (1u << bits) - 1, sign = (d >> (bits - 1)) & 1;
    return ((d << 1) ^ (0u - sign)) & mask;
}

/* Chunk c of tensor i (planned: it has changes) coded from its slice of the lists. */
static int encode_chunk(void *ctx, size_t i, uint64_t c, patch_scratch *s, patch_out_chunk *oc)
{
    const changes_job *j = ctx;
    const pulse_tensor_changes *t = &j->t[i];
    const unsigned unit = patch_dtype_unit(j->build.out[i].dtype);
    const uint64_t k0 = j->at[i][c], k = j->at[i][c + 1] - k0, first = c * j->o->chunk_elems;
    const int ulp = j->o->values == PULSE_VALUES_ULP;
    const uint8_t *src = (const uint8_t *)(ulp ? t->deltas : t->values) + k0 * unit;
    for (uint64_t q = 0; q < k; q++)
        s->idx[q] = (uint32_t)((uint64_t)t->index[k0 + q] - first);
    if (!ulp) {
        memcpy(s->vals, src, (size_t)k * unit);
    } else {
        for (uint64_t q = 0; q < k; q++) {
            uint32_t d = 0;
            memcpy(&d, src + q * unit, unit);   /* little-endian, as the file holds them */
            if (!d)
                return pulse_fail(PULSE_ERR_INVALID, "tensor %s: change at index %lld has delta 0 (no change)",
                                  t->tensor.name, (long long)t->index[k0 + q]);
            uint32_t z = zigzag(d, unit);
            memcpy(s->vals + q * unit, &z, unit);
        }
    }
    return patch_encode_changes(s, s->idx, (size_t)k, s->vals, unit, ulp, j->o->zstd_level, oc);
}

int patch_changes_layout(const pulse_tensor_changes *t, size_t n, pulse_ckpt **layout)
{
    *layout = NULL;
    for (size_t i = 0; i < n; i++)
        if (!t[i].tensor.name)
            return pulse_fail(PULSE_ERR_INVALID, "changes %zu: no tensor name", i);
    for (size_t i = 1; i < n; i++)
        if (strcmp(t[i - 1].tensor.name, t[i].tensor.name) >= 0)
            return pulse_fail(PULSE_ERR_INVALID, "changes of tensor %s after %s: they go in bytewise name order, "
                              "each tensor once", t[i].tensor.name, t[i - 1].tensor.name);
    pulse_mem_tensor *m = malloc((n ? n : 1) * sizeof *m);
    if (!m)
        return pulse_fail(PULSE_ERR_NOMEM, "tensor table");
    for (size_t i = 0; i < n; i++)
        m[i] = t[i].tensor;
    int err = ckpt_wrap_layout(layout, m, n);
    free(m);
    return err;
}

int patch_from_changes(const pulse_ckpt *layout, const pulse_tensor_changes *t, size_t n, const pulse_diff_opts *o,
                       const uint8_t base_id[32], const uint8_t result_id[32], const char *out_path)
{
    if (o->context)
        return pulse_fail(PULSE_ERR_INVALID, "a patch of change lists cannot be context-coded (that needs the base)");
    if (pulse_ckpt_count(layout) != n)
        return pulse_fail(PULSE_ERR_INVALID, "%zu lists of changes for %zu tensors", n, pulse_ckpt_count(layout));
    changes_job j = { .t = t, .o = o };
    j.build = (patch_build){ .o = o, .version = PULSE_PATCH_VERSION, .metadata = "{}", .encode = encode_chunk,
                             .ctx = &j };
    int err = patch_build_layout(&j.build, layout);
    if (!err && !(j.at = calloc(n ? n : 1, sizeof *j.at)))
        err = pulse_fail(PULSE_ERR_NOMEM, "chunk starts");
    for (size_t i = 0; !err && i < n; i++)
        err = cut_tensor(&j, i, pulse_ckpt_tensor(layout, i));
    if (!err)
        err = patch_build_chunks(&j.build, out_path, NULL);
    if (!err)
        err = patch_build_commit(&j.build, base_id, result_id);
    patch_build_free(&j.build);
    for (size_t i = 0; j.at && i < n; i++)
        free(j.at[i]);
    free(j.at);
    return err;
}
