/* SPDX-License-Identifier: Apache-2.0 */
/* The chunk coder: positions as LEB128 gaps, values as byte planes, each zstd-compressed; and its bounded decoder. */
#include <stdlib.h>
#include <string.h>

#include "base/fail.h"
#include "crypto/sha256.h"
#include "node/parallel.h"
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

static void scratch_free(patch_scratch *s)
{
    free(s->idx); free(s->gaps); free(s->leb); free(s->vals); free(s->planes);
    free(s->dense); free(s->mark);
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
            s->gaps = malloc(n * sizeof *s->gaps);
            s->leb = malloc(n * PATCH_LEB_MAX);
            s->vals = malloc(n * 4);
            /* The compressed output of one stream may exceed its input a little. */
            s->planes = malloc(ZSTD_compressBound(n * PATCH_LEB_MAX) + 4 * ZSTD_compressBound(n));
            if (pool->with_squash) {
                s->dense = malloc(n * 4);
                s->mark = malloc(n);
            }
            s->cctx = ZSTD_createCCtx();
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

void patch_pool_give(patch_pool *pool, patch_scratch *s)
{
    atomic_store(&pool->busy[s - pool->slots], 0);
}

/* ---- encoder --------------------------------------------------------------------- */

static size_t leb_put(uint8_t *out, uint32_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        out[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    out[n++] = (uint8_t)v;
    return n;
}

/* Compresses src into dst (capacity cap); returns bytes or a negative error. */
static int64_t zstd_frame(patch_scratch *s, uint8_t *dst, size_t cap, const uint8_t *src, size_t n,
                          int level)
{
    ZSTD_CCtx_reset(s->cctx, ZSTD_reset_session_and_parameters);
    ZSTD_CCtx_setParameter(s->cctx, ZSTD_c_compressionLevel, level);
    ZSTD_CCtx_setParameter(s->cctx, ZSTD_c_contentSizeFlag, 1);
    ZSTD_CCtx_setParameter(s->cctx, ZSTD_c_checksumFlag, 0);   /* the chunk digest covers it */
    size_t r = ZSTD_compress2(s->cctx, dst, cap, src, n);
    if (ZSTD_isError(r))
        return pulse_fail(PULSE_ERR_NOMEM, "zstd: %s", ZSTD_getErrorName(r));
    return (int64_t)r;
}

static int finish_out(patch_out_chunk *out, const uint8_t *bytes, size_t pos_len, size_t val_len,
                      uint32_t count)
{
    if (pos_len > UINT32_MAX || val_len > UINT32_MAX)
        return pulse_fail(PULSE_ERR_LIMIT, "encoded chunk larger than 4 GiB");
    out->bytes = malloc(pos_len + val_len ? pos_len + val_len : 1);
    if (!out->bytes)
        return pulse_fail(PULSE_ERR_NOMEM, "encoded chunk");
    memcpy(out->bytes, bytes, pos_len + val_len);
    out->count = count;
    out->pos_len = (uint32_t)pos_len;
    out->val_len = (uint32_t)val_len;
    pulse_sha256(out->bytes, pos_len + val_len, out->digest);
    return 0;
}

int patch_encode_changes(patch_scratch *s, const uint32_t *idx, size_t k, const uint8_t *vals,
                         unsigned unit, int level, patch_out_chunk *out)
{
    const pulse_kernels *kn = pulse_kernels_get();
    kn->gaps_encode(idx, k, s->gaps);
    size_t leb_len = 0;
    for (size_t j = 0; j < k; j++)
        leb_len += leb_put(s->leb + leb_len, s->gaps[j]);

    /* Output layout in s->planes: [pos frame][plane 0 frame]...[plane unit-1 frame].
     * The byte planes are built in s->leb after the gaps were compressed. */
    uint8_t *dst = s->planes;
    size_t cap = ZSTD_compressBound(leb_len);
    int64_t pos_len = zstd_frame(s, dst, cap, s->leb, leb_len, level);
    if (pos_len < 0)
        return (int)pos_len;
    size_t used = (size_t)pos_len;

    /* Byte planes: low bytes of every value, then the next byte, so that each plane is
     * its own zstd frame with its own entropy tables (the high planes of ulp codes are
     * almost all zero, the low ones almost all 1 or 2). */
    for (unsigned b = 0; b < unit; b++)
        for (size_t j = 0; j < k; j++)
            s->leb[b * k + j] = vals[j * unit + b];
    size_t val_len = 0;
    for (unsigned b = 0; b < unit; b++) {
        int64_t r = zstd_frame(s, dst + used, ZSTD_compressBound(k), s->leb + b * k, k, level);
        if (r < 0)
            return (int)r;
        used += (size_t)r;
        val_len += (size_t)r;
    }
    return finish_out(out, dst, (size_t)pos_len, val_len, (uint32_t)k);
}

int patch_encode_replace(patch_scratch *s, const uint8_t *bytes, uint32_t len, uint32_t count,
                         int level, patch_out_chunk *out)
{
    int64_t r = zstd_frame(s, s->planes, ZSTD_compressBound(len), bytes, len, level);
    if (r < 0)
        return (int)r;
    return finish_out(out, s->planes, 0, (size_t)r, count);
}

/* ---- decoder --------------------------------------------------------------------- */

/* Decompresses exactly one frame of exactly `want` bytes starting at src (avail bytes);
 * returns the frame's compressed size or a negative error. */
static int64_t unzstd_frame(patch_scratch *s, const patch_tensor *t, const patch_chunk *c,
                            const char *what, const uint8_t *src, size_t avail, uint8_t *dst,
                            size_t want_min, size_t want_max, size_t *got)
{
    size_t fsz = ZSTD_findFrameCompressedSize(src, avail);
    if (ZSTD_isError(fsz))
        return pulse_fail(PULSE_ERR_FORMAT, "tensor %s chunk %llu: %s stream: bad zstd frame",
                          t->name, (unsigned long long)c->index, what);
    unsigned long long csz = ZSTD_getFrameContentSize(src, fsz);
    if (csz == ZSTD_CONTENTSIZE_ERROR || csz == ZSTD_CONTENTSIZE_UNKNOWN
        || csz < want_min || csz > want_max)
        return pulse_fail(PULSE_ERR_FORMAT, "tensor %s chunk %llu: %s stream declares %llu bytes",
                          t->name, (unsigned long long)c->index, what, csz);
    size_t r = ZSTD_decompressDCtx(s->dctx, dst, (size_t)csz, src, fsz);
    if (ZSTD_isError(r) || r != csz)
        return pulse_fail(PULSE_ERR_FORMAT, "tensor %s chunk %llu: %s stream does not decompress",
                          t->name, (unsigned long long)c->index, what);
    *got = r;
    return (int64_t)fsz;
}

int patch_decode_chunk(const pulse_patch *p, const patch_chunk *c, patch_scratch *s)
{
    const patch_tensor *t = &p->tensors[c->tensor];
    const uint8_t *bytes = p->data + c->offset;
    size_t total = (size_t)c->pos_len + c->val_len;
    uint8_t digest[32];
    pulse_sha256(bytes, total, digest);
    if (memcmp(digest, c->digest, 32) != 0)
        return pulse_fail(PULSE_ERR_CORRUPT, "tensor %s chunk %llu: digest mismatch",
                          t->name, (unsigned long long)c->index);
    size_t got;
    if (t->dtype == PULSE_DT_OPAQUE || patch_dtype_unit(t->dtype) == 0) {
        if (c->pos_len != 0)
            return pulse_fail(PULSE_ERR_FORMAT, "tensor %s chunk %llu: opaque chunk has positions",
                              t->name, (unsigned long long)c->index);
        int64_t r = unzstd_frame(s, t, c, "value", bytes, c->val_len, s->vals, c->len, c->len, &got);
        if (r < 0)
            return (int)r;
        if ((uint64_t)r != c->val_len)
            return pulse_fail(PULSE_ERR_FORMAT, "tensor %s chunk %llu: trailing bytes in value stream",
                              t->name, (unsigned long long)c->index);
        return 0;
    }

    size_t k = c->count;
    int64_t r = unzstd_frame(s, t, c, "position", bytes, c->pos_len, s->leb, k,
                             k * PATCH_LEB_MAX, &got);
    if (r < 0)
        return (int)r;
    if ((uint64_t)r != c->pos_len)
        return pulse_fail(PULSE_ERR_FORMAT, "tensor %s chunk %llu: trailing bytes in position stream",
                          t->name, (unsigned long long)c->index);
    /* LEB128 gaps: exactly k of them, each fitting 32 bits, filling the stream. */
    size_t at = 0;
    for (size_t j = 0; j < k; j++) {
        uint32_t v = 0;
        for (unsigned sh = 0;; sh += 7) {
            if (at >= got)
                return pulse_fail(PULSE_ERR_FORMAT, "tensor %s chunk %llu: position stream ends early",
                                  t->name, (unsigned long long)c->index);
            uint8_t b = s->leb[at++];
            if (sh == 28 && (b & 0xf0))
                return pulse_fail(PULSE_ERR_FORMAT, "tensor %s chunk %llu: gap overflow",
                                  t->name, (unsigned long long)c->index);
            v |= (uint32_t)(b & 0x7f) << sh;
            if (!(b & 0x80))
                break;
        }
        s->gaps[j] = v;
    }
    if (at != got)
        return pulse_fail(PULSE_ERR_FORMAT, "tensor %s chunk %llu: %zu stray bytes after the gaps",
                          t->name, (unsigned long long)c->index, got - at);
    if (pulse_kernels_get()->gaps_decode(s->gaps, k, c->len, s->idx) != 0)
        return pulse_fail(PULSE_ERR_FORMAT, "tensor %s chunk %llu: position past the chunk end (%u elements)",
                          t->name, (unsigned long long)c->index, c->len);

    unsigned unit = t->unit;
    const uint8_t *v = bytes + c->pos_len;
    size_t left = c->val_len;
    for (unsigned b = 0; b < unit; b++) {
        r = unzstd_frame(s, t, c, "value", v, left, s->leb + (size_t)b * k, k, k, &got);
        if (r < 0)
            return (int)r;
        v += r;
        left -= (size_t)r;
    }
    if (left != 0)
        return pulse_fail(PULSE_ERR_FORMAT, "tensor %s chunk %llu: trailing bytes in value stream",
                          t->name, (unsigned long long)c->index);
    for (unsigned b = 0; b < unit; b++)
        for (size_t j = 0; j < k; j++)
            s->vals[j * unit + b] = s->leb[(size_t)b * k + j];
    if (p->values == PULSE_VALUES_ULP) {
        /* Zero is "no change": a canonical patch never holds it. */
        for (size_t j = 0; j < k; j++) {
            int zero = 1;
            for (unsigned b = 0; b < unit; b++)
                zero &= s->vals[j * unit + b] == 0;
            if (zero)
                return pulse_fail(PULSE_ERR_FORMAT, "tensor %s chunk %llu: ulp difference 0 at position %u",
                                  t->name, (unsigned long long)c->index, s->idx[j]);
        }
    }
    return 0;
}
