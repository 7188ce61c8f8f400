/* SPDX-License-Identifier: Apache-2.0 */
/* The stream primitives the encoder, decoder, position coder and apply's checks share: one zstd
 * frame in or out, the LEB128 gap check, and the error line for bad gaps. */
#include <stdlib.h>
#include <string.h>

#include "base/fail.h"
#include "node/kernels/kernels.h"
#include "node/patch/patch_internal.h"

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

int patch_leb_check(const uint8_t *src, size_t len, size_t k, uint32_t limit)
{
    const pulse_kernels *kn = pulse_kernels_get();
    size_t at = 0, j = 0;
    uint64_t next = 0;   /* as in patch_leb_positions: the position after the previous change */
    while (j < k) {
        /* A run of one-byte gaps (nearly all of them) at SIMD speed: only its sum matters
         * for the range check, since positions ascend. */
        size_t avail = len - at < k - j ? len - at : k - j;
        uint64_t sum = 0;
        size_t r = kn->leb1_run(src + at, avail, &sum);
        j += r;
        at += r;
        next += sum + r;
        if (next > limit)
            return -4;
        if (j == k)
            break;
        uint32_t val;
        int rc = pulse_leb_get(src, len, &at, &val);
        if (rc < 0)
            return rc;
        next += val;
        if (next >= limit)
            return -4;
        next++;
        j++;
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
