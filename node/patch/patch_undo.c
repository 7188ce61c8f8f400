/* SPDX-License-Identifier: Apache-2.0 */
/* The undo of `pulse apply --in-place`: the old bytes at every position a patch writes, saved before it writes, put back when the result is refused. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "base/env_bytes.h"
#include "base/fail.h"
#include "node/checkpoint/filespace.h"
#include "node/checkpoint/ckpt_internal.h"
#include "node/parallel.h"
#include "node/patch/patch_internal.h"
#include "node/patch/patch_undo.h"

typedef struct undo_job {
    patch_undo *u;
    const pulse_ckpt *target;
    patch_pool *pool;
} undo_job;

static const uint8_t *chunk_base(const pulse_patch *p, const patch_chunk *c, const pulse_ckpt *target)
{
    return pulse_ckpt_tensor(target, c->tensor)->data + c->first * p->tensors[c->tensor].unit;
}

static int save_chunk(void *ctx, size_t i)
{
    undo_job *j = ctx;
    const pulse_patch *p = j->u->p;
    const patch_chunk *c = &p->chunks[i];
    const unsigned unit = p->tensors[c->tensor].unit;
    const uint8_t *src = chunk_base(p, c, j->target);
    patch_undo_chunk *e = &j->u->ent[i];
    int err = 0;
    patch_scratch *s = patch_pool_take(j->pool, &err);
    if (!s)
        return err;
    err = patch_decode_chunk_base(p, c, s, src);
    const int mapped = j->u->map != NULL;   /* then e's arrays are already carved out of it */
    if (!err && p->tensors[c->tensor].dtype == PULSE_DT_OPAQUE) {
        e->k = c->len;
        if (!mapped && !(e->old = malloc(c->len ? c->len : 1)))
            err = pulse_fail(PULSE_ERR_NOMEM, "undo of chunk %zu", i);
        else
            memcpy(e->old, src, c->len);
    } else if (!err) {
        e->k = c->count;
        if (!mapped) {
            e->idx = malloc((size_t)c->count * sizeof *e->idx);
            e->old = malloc((size_t)c->count * unit);
        }
        if (!e->idx || !e->old) {
            err = pulse_fail(PULSE_ERR_NOMEM, "undo of chunk %zu (%u changes)", i, c->count);
        } else {
            memcpy(e->idx, s->idx, (size_t)c->count * sizeof *e->idx);
            for (uint32_t m = 0; m < c->count; m++)
                memcpy(e->old + (size_t)m * unit, src + (size_t)e->idx[m] * unit, unit);
        }
    }
    patch_pool_give(j->pool, s);
    return err;
}

/* Bytes chunk c's saved bytes take (8-aligned, so that every chunk's positions are aligned). */
static size_t chunk_bytes(const pulse_patch *p, const patch_chunk *c)
{
    const size_t n = p->tensors[c->tensor].dtype == PULSE_DT_OPAQUE
                         ? c->len
                         : (size_t)c->count * (sizeof(uint32_t) + p->tensors[c->tensor].unit);
    return (n + 7) & ~(size_t)7;
}

/* The undo's arrays carved out of one temporary beside stem, mapped; 0, or an error (nothing
 * mapped then, and the caller keeps them in memory). */
static int map_undo(patch_undo *u, size_t total, const char *stem)
{
    void *m;
    int err = pulse_map_new_temp(stem, ".", 0600, total, NULL, 0, &m);   /* unlinked at once */
    if (err)
        return err;
    u->map = m;
    u->map_len = total;
    size_t at = 0;
    for (size_t i = 0; i < u->n; i++) {
        const patch_chunk *c = &u->p->chunks[i];
        patch_undo_chunk *e = &u->ent[i];
        if (u->p->tensors[c->tensor].dtype != PULSE_DT_OPAQUE) {
            e->idx = (uint32_t *)(void *)(u->map + at);
            e->old = u->map + at + (size_t)c->count * sizeof *e->idx;
        } else {
            e->old = u->map + at;
        }
        at += chunk_bytes(u->p, c);
    }
    return 0;
}

int patch_undo_save(patch_undo *u, const pulse_patch *p, const pulse_ckpt *target, int threads, const char *stem)
{
    memset(u, 0, sizeof *u);
    u->p = p;
    int err = patch_check_layout(p, target);
    if (err)
        return err;
    for (size_t t = 0; t < p->ntensors; t++)
        if (p->tensors[t].ncoded && !pulse_ckpt_tensor(target, t)->data)
            return pulse_fail(PULSE_ERR_INVALID, "tensor %s: checkpoint not readable", p->tensors[t].name);
    if (!p->nchunks)
        return 0;
    if (!(u->ent = calloc(p->nchunks, sizeof *u->ent)))
        return pulse_fail(PULSE_ERR_NOMEM, "undo (%zu chunks)", p->nchunks);
    u->n = p->nchunks;
    size_t total = 0;
    for (size_t i = 0; i < p->nchunks; i++)
        total += chunk_bytes(p, &p->chunks[i]);
    if (stem && total && total > pulse_env_bytes("PULSE_UNDO_MEMORY", (size_t)64 << 20, SIZE_MAX) &&
        map_undo(u, total, stem) != 0)
        pulse_clear_error();   /* in memory, as a small undo is */
    patch_pool pool;
    if ((err = patch_pool_init(&pool, threads, p->chunk_elems, 0)) != 0) {
        patch_undo_free(u);
        return err;
    }
    undo_job j = { u, target, &pool };
    err = pulse_parallel_for(p->nchunks, threads, save_chunk, &j);
    patch_pool_free(&pool);
    if (err)
        patch_undo_free(u);
    return err;
}

void patch_undo_restore(const patch_undo *u, pulse_ckpt *target)
{
    for (size_t i = 0; i < u->n; i++) {
        const patch_undo_chunk *e = &u->ent[i];
        const patch_chunk *c = &u->p->chunks[i];
        const unsigned unit = u->p->tensors[c->tensor].unit;
        uint8_t *dst = (uint8_t *)chunk_base(u->p, c, target);
        if (!e->idx) {
            if (e->old && memcmp(dst, e->old, e->k) != 0)
                memcpy(dst, e->old, e->k);
            continue;
        }
        for (uint32_t m = 0; m < e->k; m++) {
            uint8_t *at = dst + (size_t)e->idx[m] * unit;
            if (memcmp(at, e->old + (size_t)m * unit, unit) != 0)
                memcpy(at, e->old + (size_t)m * unit, unit);
        }
    }
}

void patch_undo_free(patch_undo *u)
{
    if (u->map)   /* every chunk's arrays are in it */
        munmap(u->map, u->map_len);
    else
        for (size_t i = 0; i < u->n; i++) {
            free(u->ent[i].idx);
            free(u->ent[i].old);
        }
    free(u->ent);
    memset(u, 0, sizeof *u);
}
