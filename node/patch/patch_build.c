/* SPDX-License-Identifier: Apache-2.0 */
/* The driver of a patch coded chunk by chunk on all cores, two chunks a job, written in table order: shared by the diff and the patch of change lists. */
#include <stdlib.h>

#include "base/env_bytes.h"
#include "base/fail.h"
#include "crypto/sha256.h"
#include "node/parallel.h"
#include "node/patch/patch_internal.h"

/* The most coded bytes kept waiting for their turn in the output (patch_order;
 * PULSE_DIFF_PARK=<bytes>[K|M|G] lowers it). */
#define BUILD_PARKED_MAX ((size_t)64 << 20)

/* Global chunk g's entry. */
static patch_out_chunk *entry(const patch_build *b, size_t g, size_t *tensor)
{
    size_t t = patch_chunk_tensor(b->chunk_start, b->ntensors, g);
    *tensor = t;
    return &b->out[t].chunks[g - b->chunk_start[t]];
}

static size_t total_chunks(const patch_build *b)
{
    return (size_t)b->chunk_start[b->ntensors];
}

/* Job j's chunks: global chunks 2j and 2j + 1 (when there is one). */
static void pair_chunks(void *ctx, size_t j, patch_out_chunk **oc, size_t *n)
{
    const patch_build *b = ctx;
    size_t tensor;
    *n = 2 * j + 1 < total_chunks(b) ? 2 : 1;
    for (size_t i = 0; i < *n; i++)
        oc[i] = entry(b, 2 * j + i, &tensor);
}

/* Job j: global chunks 2j and 2j + 1 (when there is one), the second coded into the slot's
 * other output buffer, so that both are staged at once and their digests computed in one
 * interleaved pass (pulse_sha256_x2); then both go to the file (or are kept for their turn)
 * before the slot is given back. */
static int build_pair(void *ctx, size_t j)
{
    patch_build *b = ctx;
    size_t first = 2 * j, n = first + 1 < total_chunks(b) ? 2 : 1;
    int err = 0;
    patch_scratch *s = patch_pool_take(b->pool, &err);
    if (!s) {
        patch_order_fail(&b->order);
        return err;
    }
    patch_out_chunk *oc[2] = { NULL, NULL };
    uint8_t *home = s->planes, *other = n == 2 ? patch_scratch_planes2(s, b->o->chunk_elems) : NULL;
    s->defer_digest = 1;
    if (n == 2 && !other)
        err = PULSE_ERR_NOMEM;
    for (size_t i = 0; i < n && !err; i++) {
        size_t tensor;
        s->planes = i ? other : home;
        oc[i] = entry(b, first + i, &tensor);
        if (oc[i]->planned)
            err = b->encode(b->ctx, tensor, first + i - b->chunk_start[tensor], s, oc[i]);
        else
            oc[i]->count = 0;   /* nothing differs: nothing to code */
    }
    s->planes = home;
    s->defer_digest = 0;
    if (!err) {
        patch_out_chunk *x = oc[0]->staged ? oc[0] : oc[1], *y = oc[0]->staged ? oc[1] : NULL;
        if (x && y && y->staged)
            pulse_sha256_x2(x->staged, (size_t)x->pos_len + x->val_len, y->staged, (size_t)y->pos_len + y->val_len,
                            x->digest, y->digest);
        else if (x && x->staged)
            pulse_sha256(x->staged, (size_t)x->pos_len + x->val_len, x->digest);
        err = patch_order_commit(&b->order, j, oc, n);   /* before the slot (where they are staged) is given back */
    }
    if (!err && b->coded)
        b->coded(b->ctx, first, n);
    if (err)
        patch_order_fail(&b->order);
    patch_pool_give(b->pool, s);
    return err;
}

int patch_build_layout(patch_build *b, const pulse_ckpt *layout)
{
    b->ntensors = pulse_ckpt_count(layout);
    b->out = calloc(b->ntensors ? b->ntensors : 1, sizeof *b->out);
    b->chunk_start = calloc(b->ntensors + 1, sizeof *b->chunk_start);
    if (!b->out || !b->chunk_start)
        return pulse_fail(PULSE_ERR_NOMEM, "patch tables");
    for (size_t i = 0; i < b->ntensors; i++) {
        const pulse_tensor *t = pulse_ckpt_tensor(layout, i);
        unsigned unit = patch_dtype_unit(t->dtype);
        uint64_t units = unit ? t->nelems : t->nbytes;
        patch_out_tensor *ot = &b->out[i];
        ot->name = t->name;
        ot->dtype_name = t->dtype_name;
        ot->dtype = unit ? t->dtype : PULSE_DT_OPAQUE;
        ot->elem_size = t->elem_size;
        ot->ndim = t->ndim;
        ot->shape = t->shape;
        ot->nchunks = (units + b->o->chunk_elems - 1) / b->o->chunk_elems;
        if (!(ot->chunks = calloc(ot->nchunks ? ot->nchunks : 1, sizeof *ot->chunks)))
            return pulse_fail(PULSE_ERR_NOMEM, "tensor %s: chunk table", t->name);
        b->chunk_start[i + 1] = b->chunk_start[i] + ot->nchunks;
    }
    return 0;
}

int patch_build_chunks(patch_build *b, const char *out_path, int (*plan)(void *ctx, size_t g))
{
    b->order = (patch_order){ .file = { .fd = -1 } };
    b->ordered = 0;
    size_t njobs = (total_chunks(b) + 1) / 2;
    int err = patch_order_init(&b->order, njobs,
                               pulse_env_bytes("PULSE_DIFF_PARK", BUILD_PARKED_MAX, BUILD_PARKED_MAX), pair_chunks, b);
    if (err)
        return err;
    b->ordered = 1;
    b->order.on_prefix = b->o->on_data;
    b->order.on_progress = b->o->on_data_progress;
    b->order.prefix_ctx = b->o->data_ctx;
    uint64_t table_len = 0;
    if ((plan && (err = pulse_parallel_for(total_chunks(b), b->o->threads, plan, b->ctx)) != 0)
        || (err = patch_table_len(b->out, b->ntensors, 1, b->metadata, b->version, &table_len)) != 0
        || (err = patch_file_create(&b->order.file, out_path, table_len, !b->o->scratch)) != 0)
        return err;
    b->order.file.version = b->version;
    patch_pool own;
    if (!(b->pool = patch_pool_take_kept(PATCH_KEPT_DIFF, b->o->threads, b->o->chunk_elems, &own, &err)))
        return err;
    err = pulse_parallel_for(njobs, b->o->threads, build_pair, b);
    uint64_t most = 0;
    for (size_t i = 0; i < b->ntensors; i++)
        for (uint64_t c = 0; c < b->out[i].nchunks; c++) {
            b->out[i].changes += b->out[i].chunks[c].count;
            most = b->out[i].chunks[c].count > most ? b->out[i].chunks[c].count : most;
        }
    patch_pool_give_kept(b->pool, &own, most);
    b->pool = NULL;
    return err;
}

int patch_build_commit(patch_build *b, const uint8_t base_id[32], const uint8_t result_id[32])
{
    return patch_file_commit(&b->order.file, b->o->values, b->o->chunk_elems, base_id, result_id, b->out, b->ntensors,
                             b->metadata);
}

void patch_build_free(patch_build *b)
{
    if (b->ordered) {
        patch_file_abort(&b->order.file);   /* nothing left to do after a commit */
        patch_order_free(&b->order);
        b->ordered = 0;
    }
    patch_out_free(b->out, b->ntensors);
    free(b->chunk_start);
    b->out = NULL;
    b->chunk_start = NULL;
}
