/* SPDX-License-Identifier: Apache-2.0 */
/* The chunk coder's pool: scratch buffers per worker thread, kept between calls, and the sizes
 * they are cut to. */
#include <stdlib.h>
#include <string.h>

#include "base/fail.h"
#include "node/parallel.h"
#include "node/patch/patch_ctxcode.h"
#include "node/patch/patch_internal.h"

unsigned patch_dtype_unit(pulse_dtype dt)
{
    switch (dt) {
    case PULSE_DT_BF16: case PULSE_DT_F16: return 2;
    case PULSE_DT_F32: return 4;
    case PULSE_DT_F8_E4M3: case PULSE_DT_F8_E5M2: return 1;
    default: return 0;
    }
}

int patch_threads(int threads)
{
    if (threads <= 0)
        threads = pulse_default_threads();
    return threads < 1 ? 1 : threads > 1024 ? 1024 : threads;
}

/* ---- scratch pool ---------------------------------------------------------------- */

int patch_pool_init(patch_pool *pool, int threads, uint32_t chunk_elems, int with_squash)
{
    memset(pool, 0, sizeof *pool);
    /* pulse_parallel_for runs at most `threads` bodies at once (the caller included). */
    pool->n = (size_t)patch_threads(threads) + 1;
    pool->chunk_elems = chunk_elems;
    pool->with_squash = with_squash;
    pool->slots = calloc(pool->n, sizeof *pool->slots);
    pool->busy = calloc(pool->n, sizeof *pool->busy);
    if (!pool->slots || !pool->busy) {
        free(pool->slots);
        free(pool->busy);
        return pulse_fail(PULSE_ERR_NOMEM, "patch scratch pool");
    }
    return 0;
}

size_t patch_chunk_bytes_bound(uint32_t chunk_elems)
{
    size_t n = chunk_elems;
    return 2 * ZSTD_compressBound(n * PATCH_LEB_MAX) + 4 * ZSTD_compressBound(n) + 16;
}

static void scratch_free(patch_scratch *s)
{
    free(s->idx); free(s->gaps); free(s->leb); free(s->vals); free(s->planes); free(s->planes2);
    free(s->dense); free(s->mark); free(s->in); free(s->run); free(s->bounce);
    patch_ctx_scratch_free(s->ctx);
    free(s->ctxout);
    ZSTD_freeCCtx(s->cctx);
    ZSTD_freeDCtx(s->dctx);
    memset(s, 0, sizeof *s);
}

void patch_pool_free(patch_pool *pool)
{
    if (!pool->slots)
        return;
    for (size_t i = 0; i < pool->n; i++)
        scratch_free(&pool->slots[i]);
    free(pool->slots);
    free(pool->busy);
    memset(pool, 0, sizeof *pool);
}

patch_scratch *patch_pool_take(patch_pool *pool, int *err)
{
    for (size_t i = 0; i < pool->n; i++) {
        if (atomic_exchange(&pool->busy[i], 1))
            continue;
        patch_scratch *s = &pool->slots[i];
        if (!s->idx) {
            size_t n = pool->chunk_elems;
            s->idx = malloc((n + 64) * sizeof *s->idx);
            /* Encoder gaps (4n bytes), or the fused apply's escape bytes (up to 5n). */
            s->gaps = malloc(n * PATCH_LEB_MAX + 8);
            s->leb = malloc(n * PATCH_LEB_MAX + 64);   /* + the kernels' slack */
            /* 4n bytes of values; + 256: the diff's 16-bit path keeps the new and the old values
             * of a chunk (n + 64 entries each, with the kernel's slack) side by side here. */
            s->vals = malloc(n * 4 + 256);
            /* The compressed output of one stream may exceed its input a little. */
            s->planes = malloc(patch_chunk_bytes_bound(pool->chunk_elems));
            /* (planes: >= n + 8 bytes, so the fused apply may read 4 bytes past the packed symbols) */
            if (pool->with_squash) {
                s->dense = malloc(n * 4);
                s->mark = malloc(n);
            }
            if (!s->cctx)   /* kept by patch_pool_trim */
                s->cctx = ZSTD_createCCtx();
            if (!s->dctx)
                s->dctx = ZSTD_createDCtx();
            if (!s->idx || !s->gaps || !s->leb || !s->vals || !s->planes || !s->cctx || !s->dctx
                || (pool->with_squash && (!s->dense || !s->mark))) {
                scratch_free(s);
                atomic_store(&pool->busy[i], 0);
                *err = pulse_fail(PULSE_ERR_NOMEM, "chunk buffers (%zu elements)", n);
                return NULL;
            }
        }
        return s;
    }
    *err = pulse_fail(PULSE_ERR_INVALID, "patch scratch pool exhausted");
    return NULL;
}

uint8_t *patch_scratch_bounce(patch_scratch *s, uint32_t chunk_elems)
{
    /* malloc's alignment (16) covers every element size the kernels take (<= 4) */
    if (!s->bounce && !(s->bounce = malloc((size_t)chunk_elems * 8)))
        pulse_fail(PULSE_ERR_NOMEM, "aligned copy of a misaligned chunk (%u elements)", chunk_elems);
    return s->bounce;
}

void patch_pool_trim(patch_pool *pool)
{
    for (size_t i = 0; pool->slots && i < pool->n; i++) {
        patch_scratch *s = &pool->slots[i];
        free(s->idx); free(s->gaps); free(s->leb); free(s->vals); free(s->planes); free(s->planes2);
        free(s->dense); free(s->mark); free(s->bounce);
        patch_ctx_scratch_free(s->ctx);
        free(s->ctxout);
        s->ctx = NULL;
        s->ctxout = NULL;
        s->idx = s->gaps = NULL;
        s->leb = s->vals = s->planes = s->planes2 = s->dense = s->mark = s->bounce = NULL;
    }
}

void patch_pool_give(patch_pool *pool, patch_scratch *s)
{
    atomic_store(&pool->busy[s - pool->slots], 0);
}

/* The scratch pool of the last call of each kind is kept for the next one, like apply's
 * cache arena, and for the same reason: its zstd contexts and chunk buffers are then not
 * created and faulted in again (on the bench's 100M-parameter diff, ~400 page faults and
 * ~5% of the time). One call of a kind at a time uses it; a concurrent one, or one with
 * another chunk size or more threads, gets a pool of its own for the call. */
static struct {
    atomic_flag busy;
    patch_pool pool;   /* guarded by busy */
} kept[PATCH_KEPT_COUNT] = { { ATOMIC_FLAG_INIT, { 0 } }, { ATOMIC_FLAG_INIT, { 0 } } };

patch_pool *patch_pool_take_kept(patch_kept_kind kind, int threads, uint32_t chunk_elems, patch_pool *own,
                                 int *err)
{
    size_t n = (size_t)patch_threads(threads) + 1;
    if (!atomic_flag_test_and_set(&kept[kind].busy)) {
        patch_pool *k = &kept[kind].pool;
        if (k->slots && (k->chunk_elems != chunk_elems || k->n < n))
            patch_pool_free(k);
        if (k->slots || (*err = patch_pool_init(k, threads, chunk_elems, 0)) == 0)
            return k;
        atomic_flag_clear(&kept[kind].busy);
        return NULL;
    }
    if ((*err = patch_pool_init(own, threads, chunk_elems, 0)) != 0)
        return NULL;
    return own;
}

/* Chunks with more changes than this touch over ~8 MiB of a slot's buffers (up to ~31 bytes
 * per change): after such a call the kept pool gives its chunk-sized buffers back and keeps
 * only its zstd contexts and read buffers. */
#define KEEP_BUFFERS_MAX_COUNT 262144u

void patch_pool_give_kept(patch_pool *pool, patch_pool *own, uint64_t most_changes)
{
    if (pool == own) {
        patch_pool_free(own);
        return;
    }
    if (most_changes > KEEP_BUFFERS_MAX_COUNT)
        patch_pool_trim(pool);
    for (int i = 0; i < PATCH_KEPT_COUNT; i++)
        if (pool == &kept[i].pool)
            atomic_flag_clear(&kept[i].busy);
}

void patch_pool_release_kept(patch_kept_kind kind)
{
    if (!atomic_flag_test_and_set(&kept[kind].busy)) {
        patch_pool_free(&kept[kind].pool);
        atomic_flag_clear(&kept[kind].busy);
    }
}
