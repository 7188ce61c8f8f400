/* SPDX-License-Identifier: Apache-2.0 */
/* The chunk coder: positions as LEB128 gaps, values as byte planes, each zstd-compressed; and its bounded decoder. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/fail.h"
#include "crypto/sha256.h"
#include "node/parallel.h"
#include "node/kernels/kernels_tail.h"
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
    free(s->dense); free(s->mark); free(s->in); free(s->run);
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

void patch_pool_trim(patch_pool *pool)
{
    for (size_t i = 0; pool->slots && i < pool->n; i++) {
        patch_scratch *s = &pool->slots[i];
        free(s->idx); free(s->gaps); free(s->leb); free(s->vals); free(s->planes); free(s->planes2);
        free(s->dense); free(s->mark);
        s->idx = s->gaps = NULL;
        s->leb = s->vals = s->planes = s->planes2 = s->dense = s->mark = NULL;
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

/* ---- encoder --------------------------------------------------------------------- */


int64_t patch_zstd_frame(patch_scratch *s, uint8_t *dst, size_t cap, const uint8_t *src, size_t n, int level)
{
    /* Parameters stick to the context across frames; they are set again only when the level
     * changes (the context is reused for every chunk of this worker). */
    if (!s->clevel_set || s->clevel != level) {
        ZSTD_CCtx_reset(s->cctx, ZSTD_reset_session_and_parameters);
        ZSTD_CCtx_setParameter(s->cctx, ZSTD_c_compressionLevel, level);
        ZSTD_CCtx_setParameter(s->cctx, ZSTD_c_contentSizeFlag, 1);
        ZSTD_CCtx_setParameter(s->cctx, ZSTD_c_checksumFlag, 0);   /* the chunk digest covers it */
        /* zstd's negative levels also switch off the Huffman coding of literals, which is
         * all these streams need (LZ matches are rare in gaps and symbols): keep it on, so
         * that a negative level means "fast match finding" only. An experimental parameter
         * (ZSTD_c_literalCompressionMode, 1 = ZSTD_ps_enable): a library that does not know
         * it refuses it and level 1 is used instead. */
        if (level < 0 && ZSTD_isError(ZSTD_CCtx_setParameter(s->cctx, (ZSTD_cParameter)1002, 1)))
            ZSTD_CCtx_setParameter(s->cctx, ZSTD_c_compressionLevel, 1);
        s->clevel = level;
        s->clevel_set = 1;
    }
    size_t r = ZSTD_compress2(s->cctx, dst, cap, src, n);
    if (ZSTD_isError(r))
        return pulse_fail(PULSE_ERR_NOMEM, "zstd: %s", ZSTD_getErrorName(r));
    return (int64_t)r;
}

static int finish_out(const patch_scratch *s, patch_out_chunk *out, const uint8_t *bytes, size_t pos_len,
                      size_t val_len, uint32_t count)
{
    int s_defer = s->defer_digest;
    if (pos_len > UINT32_MAX || val_len > UINT32_MAX)
        return pulse_fail(PULSE_ERR_LIMIT, "encoded chunk larger than 4 GiB");
    out->staged = bytes;
    out->count = count;
    out->pos_len = (uint32_t)pos_len;
    out->val_len = (uint32_t)val_len;
    if (!s_defer)
        pulse_sha256(bytes, pos_len + val_len, out->digest);
    return 0;
}

uint8_t *patch_scratch_planes2(patch_scratch *s, uint32_t chunk_elems)
{
    if (!s->planes2 && !(s->planes2 = malloc(patch_chunk_bytes_bound(chunk_elems))))
        pulse_fail(PULSE_ERR_NOMEM, "chunk output buffer");
    return s->planes2;
}

int patch_out_keep(patch_out_chunk *oc)
{
    if (!oc->staged)
        return 0;
    size_t len = (size_t)oc->pos_len + oc->val_len;
    if (!(oc->bytes = malloc(len ? len : 1)))
        return pulse_fail(PULSE_ERR_NOMEM, "encoded chunk");
    memcpy(oc->bytes, oc->staged, len);
    oc->staged = NULL;
    return 0;
}

/* Reads value j of native width unit (1, 2 or 4 bytes). */
static uint32_t load_unit(const uint8_t *vals, size_t j, unsigned unit)
{
    switch (unit) {
    case 1: return vals[j];
    case 2: { uint16_t x; memcpy(&x, vals + 2 * j, 2); return x; }
    default: { uint32_t x; memcpy(&x, vals + 4 * j, 4); return x; }
    }
}

/* Packs zigzag ulp values (all >= 1) as `bits`-bit symbols, LSB first: symbol z - 1 for
 * z < 2^bits, else the escape symbol 2^bits - 1 with z - 2^bits appended to esc as LEB128.
 * Returns the packed length; *esc_len gets the escape bytes. */
static size_t pack_ulp(const uint8_t *vals, size_t k, unsigned unit, unsigned bits, uint8_t *packed,
                       uint8_t *esc, size_t *esc_len)
{
    const uint32_t m = 1u << bits;
    size_t plen = (k * bits + 7) / 8, el = 0, j = 0;
    memset(packed, 0, plen);
    if (bits == 2 && unit == 2) {
        /* BF16/F16 at 2 bits: the kernel ulp_values uses (its histogram is not needed here). */
        uint32_t unused[256] = { 0 };
        *esc_len = pulse_kernels_get()->ulp_pack2_16((const uint16_t *)(const void *)vals, k, packed, esc, unused);
        return plen;
    }
    if (unit == 2) {
        /* The 4- and 8-bit trials of 16-bit chunks: one byte at a time, the same
         * branch-free short escapes. */
        const uint16_t *v = (const uint16_t *)(const void *)vals;
        const unsigned per = 8 / bits;
        size_t kb = k - k % per;
        for (; j < kb; j += per) {
            unsigned byte = 0;
            for (unsigned i = 0; i < per; i++) {
                uint32_t z = v[j + i];
                if (z < m + 0x80) {
                    esc[el] = (uint8_t)(z - m);
                    el += z >= m;
                } else {
                    el += pulse_leb_put(esc + el, z - m);
                }
                byte |= (z >= m ? m - 1 : z - 1) << (bits * i);
            }
            packed[j / per] = (uint8_t)byte;
        }
    }
    for (; j < k; j++) {
        uint32_t z = load_unit(vals, j, unit), sym = m - 1;
        if (z < m)
            sym = z - 1;
        else
            el += pulse_leb_put(esc + el, z - m);
        size_t bit = j * bits;
        packed[bit >> 3] |= (uint8_t)(sym << (bit & 7));
    }
    *esc_len = el;
    return plen;
}

/* The ulp value stream at dst from symbols packed at `bits` (plen bytes) and esc_len escape
 * bytes in s->leb: [coding byte = bits][frame: packed][frame: escapes, iff any]. */
static int64_t ulp_frames(patch_scratch *s, uint8_t *dst, unsigned bits, const uint8_t *packed, size_t plen,
                          size_t esc_len, int level)
{
    dst[0] = (uint8_t)bits;
    int64_t a = patch_zstd_frame(s, dst + 1, ZSTD_compressBound(plen), packed, plen, level);
    if (a < 0)
        return a;
    int64_t b = 0;
    if (esc_len && (b = patch_zstd_frame(s, dst + 1 + a, ZSTD_compressBound(esc_len), s->leb, esc_len, level)) < 0)
        return b;
    return 1 + a + b;
}

/* The ulp value stream of k values packed at `bits`. */
static int64_t ulp_stream(patch_scratch *s, uint8_t *dst, const uint8_t *vals, size_t k, unsigned unit,
                          unsigned bits, int level)
{
    uint8_t *packed = (uint8_t *)s->gaps;   /* free once the gaps are LEB-coded: >= k bytes */
    size_t esc_len;
    size_t plen = pack_ulp(vals, k, unit, bits, packed, s->leb, &esc_len);
    return ulp_frames(s, dst, bits, packed, plen, esc_len, level);
}

/* Estimated bytes zstd's Huffman literals spend on nbytes bytes made of `per` independent
 * symbols each, the symbols having counts c[0..m) over n: the order-0 entropy of a byte plus
 * Huffman's redundancy (at most p_max + 0.086 bits), never under 1 bit nor over 8 bits per
 * byte, plus the table (about half a byte per byte value in use) and the frame header. */
static double huff_estimate(const uint32_t *c, size_t m, double n, double nbytes, unsigned per)
{
    if (nbytes <= 0 || n <= 0)
        return 0;
    double h = 0, pmax = 0, used = 0;
    for (size_t i = 0; i < m; i++)
        if (c[i]) {
            double q = (double)c[i] / n;
            h -= q * log2(q);
            pmax = q > pmax ? q : pmax;
            used++;
        }
    double bits = per * h + pow(pmax, per) + 0.086;
    bits = bits < 1 ? 1 : bits > 8 ? 8 : bits;
    double values = pow(used, per);
    return nbytes * bits / 8 + (values < 256 ? values : 256) / 2 + 12;
}

/* Estimated coded bytes of the ulp value stream at symbol width `bits`, from the histogram
 * h of the zigzag values (h[z] for z < 256; h[0] counts z >= 256, whose escapes are taken
 * as 2 incompressible bytes). */
static double ulp_estimate(const uint32_t h[256], size_t k, unsigned bits)
{
    const uint32_t m = 1u << bits;
    uint32_t sym[256] = { 0 }, esc[128] = { 0 };
    double esc_bytes = 0, wide = 0;
    for (uint32_t z = 1; z < 256; z++) {
        if (!h[z])
            continue;
        if (z < m) {
            sym[z - 1] += h[z];
            continue;
        }
        sym[m - 1] += h[z];
        if (z - m < 128) {
            esc[z - m] += h[z];
            esc_bytes += h[z];
        } else {
            wide += 2.0 * h[z];
        }
    }
    sym[m - 1] += h[0];
    wide += 2.0 * h[0];
    double packed = huff_estimate(sym, m, (double)k, ((double)k * bits + 7) / 8, 8 / bits);
    return packed + wide + huff_estimate(esc, 128, esc_bytes, esc_bytes, 1);
}

/* The histogram of the zigzag values (h[z] for z < 256, h[0] for z >= 256), added to h. */
static void ulp_histogram(const uint8_t *vals, size_t k, unsigned unit, uint32_t h[256])
{
    for (size_t j = 0; j < k; j++) {
        uint32_t z = load_unit(vals, j, unit);
        h[z < 256 ? z : 0]++;
    }
}

/* The symbol widths worth trying for a chunk of k values with histogram h, best estimate
 * first: 2 bits when almost every change is +-1 (four symbols per byte give zstd's Huffman
 * stage bytes of several bits of entropy, where one symbol per byte costs at least 1 bit),
 * 4 or 8 bits when the differences spread wider. In chunks of under ULP_TRIAL_BELOW changes,
 * where the estimate is rough, widths whose estimate is within 10% of the best are kept for
 * a trial compression; larger chunks take the estimate's best (on the bench's 100M-parameter
 * step, trials there changed the patch by one byte and cost a quarter of the diff's time).
 * So a chunk's value stream is compressed once. Returns the number of widths in w[]. */
enum { ULP_TRIAL_BELOW = 16384 };
static unsigned ulp_widths(const uint32_t h[256], size_t k, unsigned w[3])
{
    static const unsigned widths[] = { 2, 4, 8 };
    double est[3], best = 0;
    for (unsigned i = 0; i < 3; i++) {
        est[i] = ulp_estimate(h, k, widths[i]);
        if (i == 0 || est[i] < best)
            best = est[i];
    }
    unsigned n = 0;
    for (unsigned i = 0; i < 3; i++)
        if (est[i] == best)
            w[n++] = widths[i];
    for (unsigned i = 0; i < 3; i++)
        if (est[i] != best && est[i] <= 1.10 * best && k < ULP_TRIAL_BELOW)
            w[n++] = widths[i];
    return n;
}

/* The ulp value stream of k zigzag values at dst; returns its length or a negative error.
 * 16-bit values are packed at 2 bits by the kernel in the same pass that counts them, and
 * that packing is kept when 2 bits is the only width worth trying (the usual case). */
static int64_t ulp_values(patch_scratch *s, uint8_t *dst, const uint8_t *vals, size_t k, unsigned unit,
                          int level)
{
    uint32_t h[256] = { 0 };
    size_t esc_len = 0;
    uint8_t *packed = (uint8_t *)s->gaps;   /* as in ulp_stream */
    if (unit == 2)
        esc_len = pulse_kernels_get()->ulp_pack2_16((const uint16_t *)(const void *)vals, k, packed, s->leb, h);
    else
        ulp_histogram(vals, k, unit, h);
    unsigned w[3], n = ulp_widths(h, k, w), best = w[0];
    if (unit == 2 && n == 1 && best == 2)
        return ulp_frames(s, dst, 2, packed, (k + 3) / 4, esc_len, level);
    int64_t best_len = INT64_MAX;
    for (unsigned i = 0; i < n; i++) {
        int64_t r = ulp_stream(s, dst, vals, k, unit, w[i], level);
        if (r < 0)
            return r;
        if (r < best_len) {
            best_len = r;
            best = w[i];
        }
    }
    if (best != w[n - 1] && (best_len = ulp_stream(s, dst, vals, k, unit, best, level)) < 0)
        return best_len;
    return best_len;
}

/* Absolute values after the position frame (pos_len bytes at s->planes): byte planes, low
 * bytes of every value, then the next byte, each its own zstd frame with its own entropy
 * tables. The planes are built in s->leb, which the positions no longer need. */
static int abs_planes(patch_scratch *s, size_t pos_len, const uint8_t *vals, size_t k, unsigned unit,
                      int level, patch_out_chunk *out)
{
    for (unsigned b = 0; b < unit; b++)
        for (size_t j = 0; j < k; j++)
            s->leb[b * k + j] = vals[j * unit + b];
    uint8_t *dst = s->planes;
    size_t used = pos_len, val_len = 0;
    for (unsigned b = 0; b < unit; b++) {
        int64_t r = patch_zstd_frame(s, dst + used, ZSTD_compressBound(k), s->leb + b * k, k, level);
        if (r < 0)
            return (int)r;
        used += (size_t)r;
        val_len += (size_t)r;
    }
    return finish_out(s, out, dst, pos_len, val_len, (uint32_t)k);
}

int patch_encode_changes(patch_scratch *s, const uint32_t *idx, size_t k, const uint8_t *vals,
                         unsigned unit, int ulp, int level, patch_out_chunk *out)
{
    /* Gaps straight to LEB128 (one pass; nearly every gap is one byte). */
    size_t leb_len = 0;
    uint32_t next = 0;   /* the position right after the previous change */
    for (size_t j = 0; j < k; j++) {
        uint32_t g = idx[j] - next;
        next = idx[j] + 1;
        if (g < 0x80)
            s->leb[leb_len++] = (uint8_t)g;
        else
            leb_len += pulse_leb_put(s->leb + leb_len, g);
    }

    /* Output layout in s->planes: [position stream][value stream]. */
    uint8_t *dst = s->planes;
    int64_t pos_len = patch_pos_encode(s, dst, s->leb, leb_len, k, level);
    if (pos_len < 0)
        return (int)pos_len;
    size_t used = (size_t)pos_len;

    if (ulp) {
        int64_t val_len = ulp_values(s, dst + used, vals, k, unit, level);
        if (val_len < 0)
            return (int)val_len;
        return finish_out(s, out, dst, (size_t)pos_len, (size_t)val_len, (uint32_t)k);
    }

    return abs_planes(s, (size_t)pos_len, vals, k, unit, level, out);
}

int patch_encode_abs_at(patch_scratch *s, const patch_pos *pp, size_t k, const uint8_t *vals, unsigned unit,
                        int level, patch_out_chunk *out)
{
    /* in format 3 whatever format it was read from: its coding byte, then its body */
    s->planes[0] = (uint8_t)pp->coding;
    memcpy(s->planes + 1, pp->body, pp->body_len);
    return abs_planes(s, 1 + pp->body_len, vals, k, unit, level, out);
}

int patch_encode_ulp16(patch_scratch *s, size_t leb_len, size_t k, const uint16_t *z, int level,
                       patch_out_chunk *out)
{
    uint8_t *dst = s->planes;
    int64_t pos_len = patch_pos_encode(s, dst, s->leb, leb_len, k, level);
    if (pos_len < 0)
        return (int)pos_len;
    int64_t val_len = ulp_values(s, dst + pos_len, (const uint8_t *)z, k, 2, level);
    if (val_len < 0)
        return (int)val_len;
    return finish_out(s, out, dst, (size_t)pos_len, (size_t)val_len, (uint32_t)k);
}

int patch_encode_replace(patch_scratch *s, const uint8_t *bytes, uint32_t len, uint32_t count,
                         int level, patch_out_chunk *out)
{
    /* Whole chunks of OPAQUE bytes (token ids, masks) do repeat: never below level 1. */
    int64_t r = patch_zstd_frame(s, s->planes, ZSTD_compressBound(len), bytes, len, level < 1 ? 1 : level);
    if (r < 0)
        return (int)r;
    return finish_out(s, out, s->planes, 0, (size_t)r, count);
}

/* ---- decoder --------------------------------------------------------------------- */

int64_t patch_frame_probe(const patch_tensor *t, const patch_chunk *c, const char *what, const uint8_t *src,
                          size_t avail, size_t want_min, size_t want_max, size_t *content)
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
    *content = (size_t)csz;
    return (int64_t)fsz;
}

int patch_frame_unzstd(patch_scratch *s, const patch_tensor *t, const patch_chunk *c, const char *what,
                       const uint8_t *src, size_t fsz, uint8_t *dst, size_t content)
{
    size_t r = ZSTD_decompressDCtx(s->dctx, dst, content, src, fsz);
    if (ZSTD_isError(r) || r != content)
        return pulse_fail(PULSE_ERR_FORMAT, "tensor %s chunk %llu: %s stream does not decompress",
                          t->name, (unsigned long long)c->index, what);
    return 0;
}

/* Decompresses exactly one frame of want_min..want_max bytes starting at src (avail bytes);
 * returns the frame's compressed size or a negative error. */
static int64_t unzstd_frame(patch_scratch *s, const patch_tensor *t, const patch_chunk *c,
                            const char *what, const uint8_t *src, size_t avail, uint8_t *dst,
                            size_t want_min, size_t want_max, size_t *got)
{
    size_t csz = 0;
    int64_t fsz = patch_frame_probe(t, c, what, src, avail, want_min, want_max, &csz);
    if (fsz < 0)
        return fsz;
    int err = patch_frame_unzstd(s, t, c, what, src, (size_t)fsz, dst, csz);
    if (err)
        return err;
    *got = csz;
    return fsz;
}

int patch_leb_positions(const uint8_t *src, size_t len, size_t k, uint32_t limit, uint32_t *idx)
{
    size_t at = 0, j = 0;
    uint64_t next = 0;   /* position of the next change if its gap is 0; 64 bits cannot wrap */
    while (j < k) {
        /* Fast path: eight one-byte gaps at once (gaps under 128, the common case). */
        if (j + 8 <= k && at + 8 <= len) {
            uint64_t x;
            memcpy(&x, src + at, 8);
            if (!(x & 0x8080808080808080ull)) {
                for (unsigned i = 0; i < 8; i++) {
                    next += (x >> (8 * i)) & 0xff;
                    idx[j + i] = (uint32_t)next++;
                }
                j += 8;
                at += 8;
                if (next > limit)
                    return -4;
                continue;
            }
        }
        uint32_t val;
        int rc = pulse_leb_get(src, len, &at, &val);
        if (rc < 0)
            return rc;
        next += val;
        if (next >= limit)
            return -4;
        idx[j++] = (uint32_t)next++;
    }
    return at == len ? 0 : -3;
}

int patch_gap_error(const patch_tensor *t, const patch_chunk *c, int code)
{
    if (code == -4)
        return pulse_fail(PULSE_ERR_FORMAT, "tensor %s chunk %llu: position past the chunk end (%u elements)",
                          t->name, (unsigned long long)c->index, c->len);
    return pulse_fail(PULSE_ERR_FORMAT, "tensor %s chunk %llu: %s", t->name, (unsigned long long)c->index,
                      code == -1 ? "position stream ends early" : code == -2 ? "gap overflow"
                                                                             : "stray bytes after the gaps");
}

static void store_unit(uint8_t *vals, size_t j, unsigned unit, uint32_t z)
{
    switch (unit) {
    case 1: vals[j] = (uint8_t)z; break;
    case 2: { uint16_t x = (uint16_t)z; memcpy(vals + 2 * j, &x, 2); break; }
    default: memcpy(vals + 4 * j, &z, 4); break;
    }
}

/* Four 2-bit symbols of a byte as four 16-bit lanes z = symbol + 1 (an escape lane is
 * overwritten): ulp2_lanes[b]. */
#define LANES(b) ((((uint64_t)(b) & 3) + 1) | ((((uint64_t)(b) >> 2 & 3) + 1) << 16) \
                  | ((((uint64_t)(b) >> 4 & 3) + 1) << 32) | ((((uint64_t)(b) >> 6 & 3) + 1) << 48))
#define LANES4(b) LANES(b), LANES((b) + 1), LANES((b) + 2), LANES((b) + 3)
#define LANES16(b) LANES4(b), LANES4((b) + 4), LANES4((b) + 8), LANES4((b) + 12)
#define LANES64(b) LANES16(b), LANES16((b) + 16), LANES16((b) + 32), LANES16((b) + 48)
static const uint64_t ulp2_lanes[256] = { LANES64(0), LANES64(64), LANES64(128), LANES64(192) };

int patch_unpack_ulp(const patch_tensor *t, const patch_chunk *c, patch_scratch *s, unsigned bits,
                      const uint8_t *packed, const uint8_t *esc, size_t esc_len)
{
    const size_t k = c->count;
    const unsigned unit = t->unit;
    const uint32_t m = 1u << bits, maxz = unit == 4 ? UINT32_MAX : (1u << (8 * unit)) - 1;
    size_t at = 0, j = 0;
    if (bits == 2 && unit == 2) {
        /* Hot path (BF16/F16, mostly +-1): four symbols of a byte spread into four lanes. */
        uint16_t *out = (uint16_t *)(void *)s->vals;
        for (; j + 4 <= k; j += 4) {
            unsigned b = packed[j >> 2];
            memcpy(out + j, &ulp2_lanes[b], 8);
            unsigned escapes = b & (b >> 1) & 0x55;   /* symbol 3 in a lane: low bit of its pair */
            while (escapes) {
                unsigned i = (unsigned)__builtin_ctz(escapes) >> 1;
                escapes &= escapes - 1;
                uint32_t e;
                if (pulse_leb_get(esc, esc_len, &at, &e) < 0 || e > maxz - m)
                    goto bad_escape;
                out[j + i] = (uint16_t)(e + m);
            }
        }
    }
    for (; j < k; j++) {
        size_t bit = j * bits;
        uint32_t sym = (uint32_t)(packed[bit >> 3] >> (bit & 7)) & (m - 1), z = sym + 1;
        if (sym == m - 1) {
            uint32_t e;
            if (pulse_leb_get(esc, esc_len, &at, &e) < 0 || e > maxz - m)
                goto bad_escape;
            z = e + m;
        }
        store_unit(s->vals, j, unit, z);
    }
    if (at != esc_len)
        return pulse_fail(PULSE_ERR_FORMAT, "tensor %s chunk %llu: %zu stray bytes in the escape stream",
                          t->name, (unsigned long long)c->index, esc_len - at);
    /* Padding bits of the last byte are zero: one encoding per chunk. */
    if ((k * bits) % 8 && (packed[(k * bits) / 8] >> ((k * bits) % 8)))
        return pulse_fail(PULSE_ERR_FORMAT, "tensor %s chunk %llu: nonzero padding after the last symbol",
                          t->name, (unsigned long long)c->index);
    return 0;
bad_escape:
    return pulse_fail(PULSE_ERR_FORMAT, "tensor %s chunk %llu: escape stream short, overlong or out of range",
                      t->name, (unsigned long long)c->index);
}

int patch_ulp_bits(const patch_tensor *t, const patch_chunk *c, const uint8_t **v, size_t *left,
                   unsigned *bits)
{
    if (*left < 1)
        return pulse_fail(PULSE_ERR_FORMAT, "tensor %s chunk %llu: empty value stream",
                          t->name, (unsigned long long)c->index);
    *bits = (*v)[0];
    if (*bits != 2 && *bits != 4 && *bits != 8)
        return pulse_fail(PULSE_ERR_UNSUPPORTED, "tensor %s chunk %llu: value coding %u unknown (known: 2, 4, 8-bit symbols)",
                          t->name, (unsigned long long)c->index, *bits);
    (*v)++;
    (*left)--;
    return 0;
}

/* The ulp value stream: [coding byte = symbol bits 2, 4 or 8][frame: ceil(k*bits/8) packed
 * bytes][frame: LEB128 escapes, present iff a symbol is the escape]. */
static int decode_ulp(const patch_tensor *t, const patch_chunk *c, patch_scratch *s, const uint8_t *v,
                      size_t left)
{
    const size_t k = c->count;
    unsigned bits = 0;
    int e = patch_ulp_bits(t, c, &v, &left, &bits);
    if (e)
        return e;
    size_t plen = (k * bits + 7) / 8, got, esc_len = 0;
    uint8_t *packed = s->planes;
    int64_t r = unzstd_frame(s, t, c, "value", v, left, packed, plen, plen, &got);
    if (r < 0)
        return (int)r;
    v += r;
    left -= (size_t)r;
    if (left) {
        /* The escape stream: LEB128 of at most 5 bytes per escape, one escape per change at most. */
        r = unzstd_frame(s, t, c, "escape", v, left, s->leb, 1, k * PATCH_LEB_MAX, &esc_len);
        if (r < 0)
            return (int)r;
        if ((uint64_t)r != left)
            return pulse_fail(PULSE_ERR_FORMAT, "tensor %s chunk %llu: trailing bytes in value stream",
                              t->name, (unsigned long long)c->index);
    }
    return patch_unpack_ulp(t, c, s, bits, packed, s->leb, esc_len);
}

static int decode_bytes(const pulse_patch *p, const patch_chunk *c, patch_scratch *s, const uint8_t *bytes);

int patch_decode_chunk(const pulse_patch *p, const patch_chunk *c, patch_scratch *s)
{
    const uint8_t *bytes;
    return patch_decode_chunk_at(p, c, s, &bytes);
}

int patch_decode_chunk_at(const pulse_patch *p, const patch_chunk *c, patch_scratch *s, const uint8_t **bytes)
{
    int err = patch_chunk_bytes(p, c, s, 1, bytes);
    return err ? err : decode_bytes(p, c, s, *bytes);
}

int patch_decode_checked_chunk(const pulse_patch *p, const patch_chunk *c, patch_scratch *s)
{
    const uint8_t *bytes;
    int err = patch_chunk_bytes(p, c, s, 0, &bytes);
    return err ? err : decode_bytes(p, c, s, bytes);
}

static int decode_bytes(const pulse_patch *p, const patch_chunk *c, patch_scratch *s, const uint8_t *bytes)
{
    const patch_tensor *t = &p->tensors[c->tensor];
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
    patch_pos pp;
    int err = patch_pos_probe(p, c, bytes, &pp);
    if (!err)
        err = patch_pos_decode(s, p, c, &pp, s->leb, &got, 0);
    if (err)
        return err;
    /* LEB128 gaps: exactly k of them, each fitting 32 bits, filling the stream, every
     * position inside the chunk. */
    int lr = patch_leb_positions(s->leb, got, k, c->len, s->idx);
    int64_t r;
    if (lr < 0)
        return patch_gap_error(t, c, lr);

    unsigned unit = t->unit;
    const uint8_t *v = bytes + c->pos_len;
    size_t left = c->val_len;
    if (p->values == PULSE_VALUES_ULP)
        return decode_ulp(t, c, s, v, left);
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
    return 0;
}

/* ---- fused apply ----------------------------------------------------------------- */

/* Pass 2 of an apply for the common case, BF16/F16 ulp chunks coded with 2-bit symbols, when
 * pass 1 could not keep the chunk's streams (its cache was full): the streams are
 * decompressed again into private memory, checked there by pass 1's own code, and added to
 * dst (the chunk's first element) by the ulp2_add16 kernel, without expanding positions or
 * values. Digest not rechecked (see patch_decode_checked_chunk); every other check is kept.
 * Returns 1 when the chunk is not of that kind (the caller decodes, then scatters), 2 when
 * it was decoded into s (idx, vals) but not applied (the caller scatters). */
int patch_apply_checked_chunk(const pulse_patch *p, const patch_chunk *c, patch_scratch *s, uint8_t *dst)
{
    const patch_tensor *t = &p->tensors[c->tensor];
    if (p->values != PULSE_VALUES_ULP || t->dtype == PULSE_DT_OPAQUE || t->unit != 2 || c->val_len < 1)
        return 1;
    const uint8_t *bytes;
    int err = patch_chunk_bytes(p, c, s, 0, &bytes);
    if (err)
        return err;
    if (bytes[c->pos_len] != 2) {
        /* Another symbol width: decoded here from the bytes already read; the caller scatters. */
        err = decode_bytes(p, c, s, bytes);
        return err ? err : 2;
    }
    /* Decompressed into s and checked there exactly as pass 1 checks a chunk, then added by
     * the kernel, which checks nothing. */
    patch_ulp_streams st;
    if ((err = patch_check_ulp_streams(p, c, bytes, s, &st)) != 0)
        return err;
    pulse_kernels_get()->ulp2_add16((uint16_t *)(void *)dst, st.gaps, st.glen, st.packed, st.esc, c->count);
    return 0;
}
