/* SPDX-License-Identifier: Apache-2.0 */
/* One head over the patches of a step's parts: their tables merged in name order, each chunk pointing at its bytes where its part put them. */
#include <stdlib.h>
#include <string.h>

#include "base/fail.h"
#include "node/patch/patch_internal.h"
#include "node/patch/patch_merge.h"

typedef struct merged_tensor {
    const pulse_patch *p;
    size_t part;
    size_t t;
} merged_tensor;

static int by_name(const void *a, const void *b)
{
    const merged_tensor *x = a, *y = b;
    return strcmp(x->p->tensors[x->t].name, y->p->tensors[y->t].name);
}

int patch_merge_heads(const pulse_patch *const *parts, size_t n, const uint64_t *data_at, const uint8_t base[32],
                      const uint8_t result[32], uint8_t **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    if (n == 0)
        return pulse_fail(PULSE_ERR_INVALID, "no parts to merge");
    size_t nt = 0, ncoded = 0;
    uint32_t version = 0;
    for (size_t i = 0; i < n; i++) {
        const pulse_patch *p = parts[i];
        if (p->chunk_elems != parts[0]->chunk_elems || p->values != parts[0]->values)
            return pulse_fail(PULSE_ERR_MISMATCH, "part %zu: chunks of %u elements, %s values; part 0: %u, %s", i,
                              p->chunk_elems, p->values == PULSE_VALUES_ULP ? "ulp" : "abs", parts[0]->chunk_elems,
                              parts[0]->values == PULSE_VALUES_ULP ? "ulp" : "abs");
        version = p->version > version ? p->version : version;
        nt += p->ntensors;
        ncoded += p->nchunks;
    }
    merged_tensor *m = calloc(nt ? nt : 1, sizeof *m);
    patch_out_tensor *ot = calloc(nt ? nt : 1, sizeof *ot);
    uint64_t *at = calloc(ncoded ? ncoded : 1, sizeof *at);
    int err = !m || !ot || !at ? pulse_fail(PULSE_ERR_NOMEM, "merged head of %zu tensors", nt) : 0;
    for (size_t i = 0, k = 0; !err && i < n; i++)
        for (size_t t = 0; t < parts[i]->ntensors; t++)
            m[k++] = (merged_tensor){ parts[i], i, t };
    if (!err)
        qsort(m, nt, sizeof *m, by_name);
    for (size_t i = 1; !err && i < nt; i++)
        if (!by_name(&m[i - 1], &m[i]))
            err = pulse_fail(PULSE_ERR_MISMATCH, "parts %zu and %zu both hold tensor %s", m[i - 1].part, m[i].part,
                             m[i].p->tensors[m[i].t].name);
    size_t k = 0;
    for (size_t i = 0; !err && i < nt; i++) {
        const patch_tensor *pt = &m[i].p->tensors[m[i].t];
        ot[i] = (patch_out_tensor){ .name = pt->name, .dtype_name = pt->dtype_name, .dtype = pt->dtype,
                                    .elem_size = pt->elem_size, .ndim = pt->ndim, .shape = pt->shape,
                                    .nchunks = pt->nchunks, .changes = pt->changes };
        if (!pt->changes)
            continue;
        if (!(ot[i].chunks = calloc(pt->nchunks, sizeof *ot[i].chunks))) {
            err = pulse_fail(PULSE_ERR_NOMEM, "tensor %s: chunk table", pt->name);
            break;
        }
        /* a tensor's coded chunks are consecutive in p->chunks, in chunk order: the table's order */
        for (size_t c = pt->first_coded; c < pt->first_coded + pt->ncoded; c++) {
            const patch_chunk *pc = &m[i].p->chunks[c];
            patch_out_chunk *oc = &ot[i].chunks[pc->index];
            oc->count = pc->count;
            oc->pos_len = pc->pos_len;
            oc->val_len = pc->val_len;
            memcpy(oc->digest, pc->digest, 32);
            at[k++] = data_at[m[i].part] + pc->offset;
        }
    }
    if (!err)
        err = patch_head_build(version, parts[0]->values, parts[0]->chunk_elems, base, result, ot, nt, parts[0]->metadata, at,
                               out, len);
    for (size_t i = 0; ot && i < nt; i++)
        free(ot[i].chunks);
    free(ot);
    free(m);
    free(at);
    return err;
}
