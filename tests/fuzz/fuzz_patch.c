/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target for the patch parser and chunk decoder: open from memory, decode every chunk, gather the stats, and check the fused and the cached apply against decode-then-scatter. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pulseweights/patch.h"
#include "node/patch/patch_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Apply's pass 2 takes a fused path for 16-bit ulp chunks with 2-bit symbols: on a verified
 * patch it must write exactly what decode + ulp_apply16 writes, from the same start bytes. */
static void check_fused(const pulse_patch *p)
{
    patch_pool pool;
    if (patch_pool_init(&pool, 1, p->chunk_elems, 0) != 0)
        return;
    int err = 0;
    patch_scratch *s = patch_pool_take(&pool, &err);
    for (size_t i = 0; s && i < p->nchunks; i++) {
        const patch_chunk *c = &p->chunks[i];
        if (p->tensors[c->tensor].unit != 2 || c->len > (1u << 20))
            continue;
        uint16_t *a = malloc((size_t)c->len * 2), *b = malloc((size_t)c->len * 2);
        if (a && b) {
            for (uint32_t j = 0; j < c->len; j++)
                a[j] = b[j] = (uint16_t)(j * 0x9e37u);
            int fused = patch_apply_checked_chunk(p, c, s, (uint8_t *)b);
            if (fused == 0) {
                if (patch_decode_checked_chunk(p, c, s) != 0)
                    abort();   /* verify passed: the fused path accepted what decoding refuses */
                pulse_kernels_get()->ulp_apply16(a, s->idx, c->count, (const uint16_t *)(void *)s->vals);
                if (memcmp(a, b, (size_t)c->len * 2) != 0)
                    abort();
            } else if (fused < 0) {
                abort();   /* verify passed: the fused path refused a valid chunk */
            }
        }
        free(a);
        free(b);
    }
    if (s)
        patch_pool_give(&pool, s);
    patch_pool_free(&pool);
}

/* Apply's pass 1 keeps a ulp chunk's decompressed streams in a cache and pass 2 adds from it:
 * on a verified patch pass 1 must accept every chunk, and a cached 16-bit chunk must write
 * exactly what decode + ulp_apply16 writes. */
static void check_cached(const pulse_patch *p)
{
    patch_pool pool;
    if (patch_pool_init(&pool, 1, p->chunk_elems, 0) != 0)
        return;
    int err = 0;
    patch_scratch *s = patch_pool_take(&pool, &err);
    patch_cache cache;
    int opened = s && patch_cache_open(&cache, p) == 0;
    for (size_t i = 0; opened && i < p->nchunks; i++)
        if (patch_check_chunk(p, i, s, &cache) != 0)
            abort();   /* verify passed: pass 1 refused a chunk */
    for (size_t i = 0; opened && i < p->nchunks; i++) {
        const patch_chunk *c = &p->chunks[i];
        if (p->tensors[c->tensor].unit != 2 || c->len > (1u << 20))
            continue;
        uint16_t *a = malloc((size_t)c->len * 2), *b = malloc((size_t)c->len * 2);
        if (a && b) {
            for (uint32_t j = 0; j < c->len; j++)
                a[j] = b[j] = (uint16_t)(j * 0x9e37u);
            int w = patch_write_cached_chunk(p, i, s, &cache, (uint8_t *)b);
            if (w == 0) {
                if (patch_decode_checked_chunk(p, c, s) != 0)
                    abort();
                pulse_kernels_get()->ulp_apply16(a, s->idx, c->count, (const uint16_t *)(void *)s->vals);
                if (memcmp(a, b, (size_t)c->len * 2) != 0)
                    abort();   /* the cached write differs from decode-then-scatter */
            } else if (w < 0) {
                abort();   /* pass 1 accepted the chunk, the cached write refused it */
            }
        }
        free(a);
        free(b);
    }
    if (opened)
        patch_cache_close(&cache);
    if (s)
        patch_pool_give(&pool, s);
    patch_pool_free(&pool);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    pulse_patch *p = NULL;
    if (pulse_patch_open_mem(&p, data, size) != 0)
        return 0;
    /* No base: the layout check is skipped, every chunk is still digested and decoded. */
    if (pulse_patch_verify(p, NULL, 1) == 0) {
        pulse_patch_stats st;
        pulse_patch_info(p, 1, &st);
        for (size_t i = 0; i < pulse_patch_tensor_count(p); i++) {
            pulse_patch_tensor_info ti;
            pulse_patch_tensor_info_get(p, i, 1, &ti);
        }
        check_fused(p);
        check_cached(p);
    }
    pulse_patch_close(&p);
    return 0;
}
