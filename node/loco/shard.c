/* SPDX-License-Identifier: Apache-2.0 */
/* The LoCo shard object: gap-coded positions (LEB128, zstd) and FP32 values as an exponent plane (zstd) and raw sign/mantissa planes. */
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "base/fail.h"
#include "base/leb128.h"
#include "node/kernels/kernels.h"
#include "node/loco/loco_internal.h"

/* Layout (little-endian), docs/loco.md "Shard object":
 *   0 "PLSH"  4 u8 version (1)  5 u8 view  6 u16 zero  8 u32 len (elements)  12 u32 k
 *  16 u64 start  24 u32 gap bytes (LEB128, before zstd)  28 u32 zstd bytes of the gaps
 *  32 u32 zstd bytes of the value planes  36 u32 zero  40 gap stream, then value stream.
 * The value planes are byte 0 of every value, then byte 1, ... (4k bytes before zstd): the
 * sign/exponent bytes of nearby values are alike, the low mantissa bytes are not, and keeping
 * them apart lets zstd code the first ones in a few bits. */

#define SHARD_ZSTD_LEVEL 3

static void put32(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static void put64(uint8_t *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static uint32_t get32(const uint8_t *p) { uint32_t v = 0; for (int i = 3; i >= 0; i--) v = v << 8 | p[i]; return v; }
static uint64_t get64(const uint8_t *p) { uint64_t v = 0; for (int i = 7; i >= 0; i--) v = v << 8 | p[i]; return v; }

void loco_shard_free(loco_shard *s)
{
    if (!s)
        return;
    free(s->idx);
    free(s->val);
    s->idx = NULL;
    s->val = NULL;
    s->k = 0;
}

int loco_shard_encode(int view, uint64_t start, uint32_t len, const uint32_t *idx, const float *val,
                      uint32_t k, uint8_t **out, size_t *out_len)
{
    const pulse_kernels *kt = pulse_kernels_get();
    size_t gcap = (size_t)k * 5 + 1, vraw = (size_t)k * 4 + 1;
    uint32_t *gaps = malloc(((size_t)k + 1) * sizeof *gaps);
    uint8_t *graw = malloc(gcap), *planes = malloc(vraw);
    size_t zcap = ZSTD_compressBound(gcap) + ZSTD_compressBound(vraw);
    uint8_t *buf = malloc(LOCO_SHARD_HEADER + zcap);
    int r = 0;
    if (!gaps || !graw || !planes || !buf) {
        r = pulse_fail(PULSE_ERR_NOMEM, "shard of %u entries", k);
        goto out;
    }
    if (k)
        kt->gaps_encode(idx, k, gaps);
    size_t gl = 0;
    for (uint32_t j = 0; j < k; j++) {
        gl += pulse_leb_put(graw + gl, gaps[j]);
    }
    for (uint32_t j = 0; j < k; j++) {
        uint32_t bits;
        memcpy(&bits, &val[j], 4);
        planes[j] = (uint8_t)(bits >> 23);
        planes[(size_t)k + j] = (uint8_t)((bits >> 31) << 7 | ((bits >> 16) & 0x7f));
        planes[(size_t)2 * k + j] = (uint8_t)(bits >> 8);
        planes[(size_t)3 * k + j] = (uint8_t)bits;
    }
    size_t zg = ZSTD_compress(buf + LOCO_SHARD_HEADER, zcap, graw, gl, SHARD_ZSTD_LEVEL);
    if (ZSTD_isError(zg)) {
        r = pulse_fail(PULSE_ERR_INVALID, "zstd: %s", ZSTD_getErrorName(zg));
        goto out;
    }
    size_t zv = ZSTD_compress(buf + LOCO_SHARD_HEADER + zg, zcap - zg, planes, k, SHARD_ZSTD_LEVEL);
    if (ZSTD_isError(zv)) {
        r = pulse_fail(PULSE_ERR_INVALID, "zstd: %s", ZSTD_getErrorName(zv));
        goto out;
    }
    size_t zm = ZSTD_compress(buf + LOCO_SHARD_HEADER + zg + zv, zcap - zg - zv, planes + k, (size_t)k * 3,
                              SHARD_ZSTD_LEVEL);
    if (ZSTD_isError(zm)) {
        r = pulse_fail(PULSE_ERR_INVALID, "zstd: %s", ZSTD_getErrorName(zm));
        goto out;
    }
    memset(buf, 0, LOCO_SHARD_HEADER);
    memcpy(buf, "PLSH", 4);
    buf[4] = 2;
    buf[5] = (uint8_t)view;
    put32(buf + 8, len);
    put32(buf + 12, k);
    put64(buf + 16, start);
    put32(buf + 24, (uint32_t)gl);
    put32(buf + 28, (uint32_t)zg);
    put32(buf + 32, (uint32_t)zv);
    put32(buf + 36, (uint32_t)zm);
    *out = buf;
    *out_len = LOCO_SHARD_HEADER + zg + zv + zm;
    buf = NULL;
out:
    free(gaps);
    free(graw);
    free(planes);
    free(buf);
    return r;
}

/* Decompresses exactly WANT bytes from a zstd frame of ZLEN bytes (a frame of another size is refused). */
static int unzstd(const uint8_t *z, size_t zlen, uint8_t *dst, size_t want, const char *what)
{
    unsigned long long declared = ZSTD_getFrameContentSize(z, zlen);
    if (declared != want)
        return pulse_fail(PULSE_ERR_FORMAT, "shard %s stream: declares %llu bytes, header says %zu", what, declared,
                          want);
    size_t got = ZSTD_decompress(dst, want ? want : 1, z, zlen);
    if (ZSTD_isError(got) || got != want)
        return pulse_fail(PULSE_ERR_FORMAT, "shard %s stream: %s", what,
                          ZSTD_isError(got) ? ZSTD_getErrorName(got) : "wrong length");
    return 0;
}

int loco_shard_decode(const uint8_t *buf, size_t n, int view, uint64_t start, uint64_t len, loco_shard *s)
{
    memset(s, 0, sizeof *s);
    if (n < LOCO_SHARD_HEADER || memcmp(buf, "PLSH", 4) != 0 || buf[4] != 2 || buf[6] || buf[7])
        return pulse_fail(PULSE_ERR_FORMAT, "not a version 2 loco shard");
    if (buf[5] != view)
        return pulse_fail(PULSE_ERR_MISMATCH, "shard gated in view %u, this round uses %d", buf[5], view);
    uint32_t hlen = get32(buf + 8), k = get32(buf + 12), gl = get32(buf + 24), zg = get32(buf + 28),
             zv = get32(buf + 32);
    uint64_t hstart = get64(buf + 16);
    if (hlen != len || hstart != start)
        return pulse_fail(PULSE_ERR_FORMAT, "shard covers [%llu, +%u), its record says [%llu, +%llu)",
                          (unsigned long long)hstart, hlen, (unsigned long long)start, (unsigned long long)len);
    if (len == 0 || len > LOCO_SHARD_MAX_ELEMS || k > len)
        return pulse_fail(PULSE_ERR_LIMIT, "shard of %u entries over %llu elements", k, (unsigned long long)len);
    if (gl < k || (uint64_t)gl > (uint64_t)k * 5)
        return pulse_fail(PULSE_ERR_FORMAT, "shard gap stream of %u bytes for %u entries", gl, k);
    uint32_t zm = get32(buf + 36);
    if ((uint64_t)LOCO_SHARD_HEADER + zg + zv + zm != n)
        return pulse_fail(PULSE_ERR_FORMAT, "shard of %zu bytes, its header accounts for %llu", n,
                          (unsigned long long)LOCO_SHARD_HEADER + zg + zv + zm);
    uint8_t *graw = malloc((size_t)gl + 1), *planes = malloc((size_t)k * 4 + 1);
    uint32_t *gaps = malloc(((size_t)k + 1) * 4);
    s->idx = malloc(((size_t)k + 1) * 4);
    s->val = malloc(((size_t)k + 1) * 4);
    int r = 0;
    if (!graw || !planes || !gaps || !s->idx || !s->val) {
        r = pulse_fail(PULSE_ERR_NOMEM, "shard of %u entries", k);
        goto out;
    }
    if ((r = unzstd(buf + LOCO_SHARD_HEADER, zg, graw, gl, "gap")) ||
        (r = unzstd(buf + LOCO_SHARD_HEADER + zg, zv, planes, k, "exponent")) ||
        (r = unzstd(buf + LOCO_SHARD_HEADER + zg + zv, zm, planes + k, (size_t)k * 3, "mantissa")))
        goto out;
    size_t p = 0;
    for (uint32_t j = 0; j < k; j++) {
        int rc = pulse_leb_get(graw, gl, &p, &gaps[j]);
        /* -2 is a fifth byte: one that still continues, or one whose value bits pass 32 */
        if (rc == -1 || (rc == -2 && (graw[p - 1] & 0x80))) {
            r = pulse_fail(PULSE_ERR_FORMAT, "shard gap %u: truncated or longer than 32 bits", j);
            goto out;
        }
        if (rc == -2) {
            r = pulse_fail(PULSE_ERR_FORMAT, "shard gap %u beyond 32 bits", j);
            goto out;
        }
    }
    if (p != gl) {
        r = pulse_fail(PULSE_ERR_FORMAT, "shard gap stream has %u trailing bytes", (unsigned)(gl - p));
        goto out;
    }
    if (k && pulse_kernels_get()->gaps_decode(gaps, k, (uint32_t)len, s->idx) != 0) {
        r = pulse_fail(PULSE_ERR_FORMAT, "shard positions reach beyond its %llu elements", (unsigned long long)len);
        goto out;
    }
    for (uint32_t j = 0; j < k; j++) {
        uint32_t e = planes[j], sm = planes[(size_t)k + j];
        uint32_t bits = (sm >> 7) << 31 | e << 23 | (sm & 0x7f) << 16 | (uint32_t)planes[(size_t)2 * k + j] << 8 |
                        planes[(size_t)3 * k + j];
        memcpy(&s->val[j], &bits, 4);
    }
    s->start = start;
    s->len = len;
    s->k = k;
out:
    free(graw);
    free(planes);
    free(gaps);
    if (r)
        loco_shard_free(s);
    return r;
}
