/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target for the patch parser and chunk decoder: open from memory, decode every chunk (context-coded ones against a fixed base), gather the stats, check the fused and the cached writes against decode-then-scatter, and the patch opened from its head with every chunk supplied by range against the whole. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "crypto/sha256.h"
#include "pulseweights/patch.h"
#include "node/patch/patch_ctxcode.h"
#include "node/patch/patch_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The target bytes every comparison starts from. */
static uint16_t *start_bytes(uint32_t len)
{
    uint16_t *a = malloc((size_t)len * 2);
    for (uint32_t j = 0; a && j < len; j++)
        a[j] = (uint16_t)(j * 0x9e37u);
    return a;
}

/* The reference for a 16-bit chunk that a write path accepted: decode, then ulp_apply16 (ulp)
 * or scatter16 (abs), from the same start bytes; aborts when decoding refuses it or GOT differs. */
static void expect_decode_then_scatter(const pulse_patch *p, const patch_chunk *c, patch_scratch *s,
                                       const uint16_t *got)
{
    uint16_t *a = start_bytes(c->len);
    if (!a)
        return;
    if (patch_decode_checked_chunk(p, c, s) != 0)
        abort();   /* verify passed: a write path accepted what decoding refuses */
    if (p->values == PULSE_VALUES_ABS)
        pulse_kernels_get()->scatter16(a, s->idx, c->count, (const uint16_t *)(void *)s->vals);
    else
        pulse_kernels_get()->ulp_apply16(a, s->idx, c->count, (const uint16_t *)(void *)s->vals);
    if (memcmp(a, got, (size_t)c->len * 2) != 0)
        abort();
    free(a);
}

static int chunk16(const pulse_patch *p, const patch_chunk *c)
{
    return p->tensors[c->tensor].unit == 2 && c->len <= (1u << 20);
}

/* A context-coded chunk (format 5): decodable only against a base, so the write paths that
 * take none are not asked to (check_context_chunk takes it instead). */
static int context_chunk(const pulse_patch *p, const patch_chunk *c)
{
    return patch_chunk_is_context(p, c, p->data + c->offset);
}

/* Calls check(p, c, s) on every 16-bit chunk of p, with one scratch slot of a one-thread pool. */
static void each_chunk16(const pulse_patch *p, void (*check)(const pulse_patch *, const patch_chunk *, patch_scratch *))
{
    patch_pool pool;
    if (patch_pool_init(&pool, 1, p->chunk_elems, 0) != 0)
        return;
    int err = 0;
    patch_scratch *s = patch_pool_take(&pool, &err);
    for (size_t i = 0; s && i < p->nchunks; i++)
        if (chunk16(p, &p->chunks[i]))
            check(p, &p->chunks[i], s);
    if (s)
        patch_pool_give(&pool, s);
    patch_pool_free(&pool);
}

/* A context-coded chunk decoded against the start bytes as its base: whatever the bytes, the
 * decoder either refuses them or gives exactly count distinct positions inside the chunk, none
 * of them a change of nothing; the apply's check of a chunk past its cache (no positions where
 * no value needs them) refuses exactly what the decode refuses. */
static void check_context_chunk(const pulse_patch *p, const patch_chunk *c, patch_scratch *s)
{
    if (!context_chunk(p, c))
        return;
    uint16_t *b = start_bytes(c->len);
    uint8_t *seen = calloc(c->len ? c->len : 1, 1);
    struct patch_ctx_scratch *cs = patch_scratch_ctx(s, p->chunk_elems);
    const uint8_t *bytes = p->data + c->offset;
    const pulse_dtype dt = p->tensors[c->tensor].dtype;
    const int ctx_ulp = patch_ctx_dtype_ok(dt) && p->values == PULSE_VALUES_ULP;
    int light = !b || !cs || !ctx_ulp ? -1
                          : patch_ctx_check_base(cs, dt, b, c->len, bytes, c->pos_len, bytes + c->pos_len, c->val_len,
                                                 c->count, s->idx, (uint16_t *)(void *)s->vals, "t", c->index);
    int full = b ? patch_decode_bytes_base(p, c, s, bytes, (const uint8_t *)b) : -1;
    if (light != -1 && full != -1 && (light == 0) != (full == 0))
        abort();   /* the light check and the decode disagree */
    if (b && seen && full == 0) {
        const uint16_t *z = (const uint16_t *)(const void *)s->vals;
        for (uint32_t j = 0; j < c->count; j++) {
            if (s->idx[j] >= c->len || seen[s->idx[j]] || z[j] == 0)
                abort();   /* out of the chunk, twice, or a change of nothing */
            seen[s->idx[j]] = 1;
        }
    }
    free(b);
    free(seen);
}

/* Apply's pass 2 takes a fused path for 16-bit ulp chunks with 2-bit symbols: on a verified
 * patch it must write exactly what decode + ulp_apply16 writes. */
static void check_fused_chunk(const pulse_patch *p, const patch_chunk *c, patch_scratch *s)
{
    uint16_t *b = !context_chunk(p, c) ? start_bytes(c->len) : NULL;
    if (!b)
        return;
    int fused = patch_apply_checked_chunk(p, c, s, (uint8_t *)b);
    if (fused == 0)
        expect_decode_then_scatter(p, c, s, b);
    else if (fused < 0)
        abort();   /* verify passed: the fused path refused a valid chunk */
    free(b);
}

/* Apply's pass 1 keeps an element-wise chunk's decompressed streams in a cache and pass 2
 * writes from it: on a verified patch pass 1 must accept every chunk, and a cached 16-bit
 * chunk must write exactly what decode + ulp_apply16 (ulp) or scatter16 (abs) writes. */
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
        if (patch_check_chunk(p, i, s, &cache, NULL) != 0)
            abort();   /* verify passed: pass 1 refused a chunk */
    for (size_t i = 0; opened && i < p->nchunks; i++) {
        const patch_chunk *c = &p->chunks[i];
        uint16_t *b = chunk16(p, c) ? start_bytes(c->len) : NULL;
        if (!b)
            continue;
        int w = patch_write_cached_chunk(p, i, s, &cache, (uint8_t *)b);
        if (w == 0)
            expect_decode_then_scatter(p, c, s, b);
        else if (w < 0)
            abort();   /* pass 1 accepted the chunk, the cached write refused it */
        free(b);
    }
    if (opened)
        patch_cache_close(&cache);
    if (s)
        patch_pool_give(&pool, s);
    patch_pool_free(&pool);
}

/* The same patch opened from its head and every chunk supplied by range must verify and give
 * exactly the whole patch's updates, tensor by tensor. The head is taken from p's own copy
 * (whose chunk digests a repaired run rewrote) with its header digest made right. */
static int64_t *index_of(const pulse_patch *p, size_t i, uint64_t n, int *rc)
{
    int64_t *idx = malloc((n ? n : 1) * sizeof *idx);
    *rc = idx ? pulse_patch_tensor_updates(p, i, NULL, 1, idx, NULL, NULL) : -1;
    return idx;
}

static void check_sliced(const pulse_patch *p)
{
    const size_t head = (size_t)pulse_patch_head_bytes(p);
    uint8_t *h = malloc(head);
    if (!h)
        return;
    memcpy(h, p->buf, head);
    pulse_sha256(h, head - 32, h + head - 32);
    pulse_patch *sp = NULL;
    if (pulse_patch_open_head(&sp, h, head, p->len) != 0)
        abort();   /* the head of a patch that opened must open */
    free(h);
    for (size_t i = 0; i < pulse_patch_tensor_count(sp); i++) {
        pulse_patch_tensor_info ti;
        if (pulse_patch_tensor_info_get(sp, i, 0, &ti) != 0)
            abort();
        if (ti.nelems && pulse_patch_want(sp, i, 0, ti.nelems) != 0)
            abort();
    }
    size_t n = pulse_patch_missing(sp, 0, NULL, 0);
    pulse_patch_range *rg = malloc((n ? n : 1) * sizeof *rg);
    pulse_patch_missing(sp, 0, rg, n);
    for (size_t k = 0; k < n; k++)
        if (pulse_patch_supply(sp, rg[k].offset, p->data + (rg[k].offset - head), (size_t)rg[k].length) != 0)
            abort();   /* the chunks verified in the whole patch */
    free(rg);
    if (pulse_patch_missing(sp, 0, NULL, 0) != 0 || pulse_patch_verify(sp, NULL, 1) != 0)
        abort();
    for (size_t i = 0; i < pulse_patch_tensor_count(p); i++) {
        uint64_t c = pulse_patch_tensor_changes(p, i);
        pulse_patch_tensor_info ti;
        pulse_patch_tensor_info_get(p, i, 0, &ti);
        if (pulse_patch_tensor_changes(sp, i) != c)
            abort();
        if (ti.dtype == PULSE_DT_OPAQUE || !c)
            continue;   /* OPAQUE changes need base */
        int ra, rb;
        int64_t *a = index_of(p, i, c, &ra), *b = index_of(sp, i, c, &rb);
        if (ra != rb || (ra == 0 && memcmp(a, b, c * sizeof *a)))
            abort();
        free(a);
        free(b);
    }
    pulse_patch_close(&sp);
}

/* Mutated bytes almost never carry valid SHA-256 digests, and a fuzzer that every digest
 * stops never reaches the table parser or the chunk decoders behind them. So each input runs
 * twice: as it is (the digest checks themselves), and with its digests made right: the header
 * digest over the header and table it declares, before open, and each chunk's digest over its
 * bytes in the patch's private copy, after open. */
static void repair_header_digest(uint8_t *d, size_t size)
{
    uint64_t table_len = 0;
    if (size < 104)
        return;
    for (int i = 7; i >= 0; i--)
        table_len = table_len << 8 | d[88 + i];
    if (table_len > size - 104 || size - 104 - table_len < 32)
        return;
    pulse_sha256(d, 104 + (size_t)table_len, d + 104 + table_len);
}

static void repair_chunk_digests(pulse_patch *p)
{
    for (size_t i = 0; i < p->nchunks; i++) {
        const patch_chunk *c = &p->chunks[i];
        /* the digest points into p's own copy of the input (open_mem) */
        pulse_sha256(p->data + c->offset, patch_chunk_coded(c), (uint8_t *)(uintptr_t)c->digest);
    }
}

static void run(const uint8_t *data, size_t size, int repair)
{
    pulse_patch *p = NULL;
    if (pulse_patch_open_mem(&p, data, size) != 0)
        return;
    if (repair)
        repair_chunk_digests(p);
    /* No base: the layout check is skipped, every chunk is still digested and decoded. */
    if (pulse_patch_verify(p, NULL, 1) == 0) {
        pulse_patch_stats st;
        pulse_patch_info(p, 1, &st);
        for (size_t i = 0; i < pulse_patch_tensor_count(p); i++) {
            pulse_patch_tensor_info ti;
            pulse_patch_tensor_info_get(p, i, 1, &ti);
        }
        each_chunk16(p, check_fused_chunk);
        check_cached(p);
        each_chunk16(p, check_context_chunk);
        check_sliced(p);
    }
    pulse_patch_close(&p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    run(data, size, 0);
    uint8_t *fixed = malloc(size ? size : 1);
    if (!fixed)
        return 0;
    memcpy(fixed, data, size);
    repair_header_digest(fixed, size);
    run(fixed, size, 1);
    free(fixed);
    return 0;
}
