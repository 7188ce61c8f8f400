/* SPDX-License-Identifier: Apache-2.0 */
/* The position stream of an element-wise chunk: its two codings (a zstd frame of LEB128 gaps, Rice planes), the encoder's choice between them, and the decoder back to LEB128 gaps. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "base/fail.h"
#include "node/patch/patch_ctxcode.h"
#include "node/patch/patch_internal.h"

/* ---- the plan: the Rice stream's size at every shift, estimated from one pass ----------- */

typedef struct rice_plan {
    uint32_t hist[128];      /* every fourth byte of the stream, where it is a one-byte gap */
    uint64_t sampled;        /* how many were counted */
    uint64_t small_sum;      /* the sum of all one-byte gaps (exact) */
    uint64_t big_q[32];      /* sum of g >> s over the gaps of two or more bytes, per shift s */
    uint64_t big;            /* how many of those */
    uint64_t big_bytes;      /* and their LEB128 bytes */
} rice_plan;

/* One pass over the LEB128 gaps: the one-byte gaps' sum by the leb1_run kernel, every longer
 * gap exactly, and a histogram of every fourth byte (the one-byte gaps' distribution, for
 * the shift and the entropy estimate: a full histogram took a third of the encoder's time).
 * 0, or -1 when the bytes are not k gaps (the caller's own stream: never). */
static int plan_gaps(const uint8_t *leb, size_t len, size_t k, rice_plan *pl)
{
    memset(pl, 0, sizeof *pl);
    uint32_t h[2][256];
    memset(h, 0, sizeof h);
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        h[0][leb[i]]++;
        h[1][leb[i + 4]]++;
    }
    for (; i < len; i += 4)
        h[0][leb[i]]++;
    for (unsigned v = 0; v < 128; v++) {
        pl->hist[v] = h[0][v] + h[1][v];
        pl->sampled += pl->hist[v];
    }
    const pulse_kernels *kn = pulse_kernels_get();
    size_t at = 0, gaps = 0;
    while (at < len) {
        size_t r = kn->leb1_run(leb + at, len - at, &pl->small_sum);
        at += r;
        gaps += r;
        if (at >= len)
            break;
        size_t start = at;
        uint32_t g;
        if (pulse_leb_get(leb, len, &at, &g) < 0)
            return -1;
        for (unsigned s = 0; s < 32; s++)
            pl->big_q[s] += g >> s;
        pl->big++;
        pl->big_bytes += at - start;
        gaps++;
    }
    return gaps == k ? 0 : -1;
}

/* Bytes of the Rice planes of the planned gaps at shift s (the coding byte not counted): the
 * one-byte gaps' quotients estimated from the sample, the long ones exact. */
static double rice_estimate(const rice_plan *pl, size_t k, unsigned s)
{
    double q = 0;
    for (unsigned v = 1; v < 128; v++)
        q += (double)pl->hist[v] * (v >> s);
    double small = (double)(k - pl->big);
    if (pl->sampled)
        q *= small / (double)pl->sampled;
    return (double)pulse_rice_rem_bytes(k, s) + (q + (double)pl->big_q[s] + (double)k) / 8;
}

/* The most bytes the planes at shift s can take: every quotient is at most its gap >> s, and
 * the quotients' sum at most the gaps' sum >> s. */
static uint64_t rice_most(const rice_plan *pl, size_t k, unsigned s)
{
    uint64_t q = (pl->small_sum >> s) + pl->big_q[s];
    return pulse_rice_rem_bytes(k, s) + (q + k + 7) / 8;
}

static unsigned rice_best(const rice_plan *pl, size_t k, double *bytes)
{
    unsigned best = 0;
    double most = rice_estimate(pl, k, 0);
    for (unsigned s = 1; s < 32; s++) {
        double b = rice_estimate(pl, k, s);
        if (b < most) {
            most = b;
            best = s;
        }
    }
    *bytes = most;
    return best;
}

/* What zstd's Huffman stage can reach on these bytes: their order-0 entropy, the one-byte
 * gaps' from the sample and the long gaps' bytes at 8 bits each, in bytes. */
static double entropy_bytes(const rice_plan *pl, size_t k)
{
    double n = (double)pl->sampled, bits = 0;
    for (unsigned v = 0; v < 128; v++)
        if (pl->hist[v])
            bits -= (double)pl->hist[v] * log2((double)pl->hist[v] / n);
    if (n)
        bits *= (double)(k - pl->big) / n;
    return (bits + 8.0 * (double)pl->big_bytes) / 8;
}

/* ---- encoder --------------------------------------------------------------------------- */

size_t patch_pos_bound(size_t leb_len)
{
    return 1 + ZSTD_compressBound(leb_len);
}

/* (rice_put writes up to 64 bytes past the planes: the callers' buffers,
 * patch_chunk_bytes_bound, hold the value stream after the position stream.) */

int64_t patch_pos_encode(patch_scratch *s, uint8_t *dst, const uint8_t *leb, size_t leb_len, size_t k, int level)
{
    const size_t cap = patch_pos_bound(leb_len);
    rice_plan pl;
    double rice = 0;
    unsigned shift = 0;
    int can_rice = plan_gaps(leb, leb_len, k, &pl) == 0;
    if (can_rice) {
        shift = rice_best(&pl, k, &rice);
        can_rice = rice_most(&pl, k, shift) + 1 <= cap;   /* so the writer needs no bounds */
    }
    /* Rice is near the entropy of geometric gaps (independent changes, RL's usual case) and
     * decodes twice as fast as zstd's Huffman stage. Where the gaps have structure Rice cannot
     * see (runs of changes, repeated patterns) zstd does better: it is tried whenever Rice is
     * more than 3 % above the gaps' order-0 entropy (zstd's Huffman stage lands ~1.5 % above
     * it on the bench's step), and the smaller stream is kept. */
    if (!can_rice || rice > 1.03 * entropy_bytes(&pl, k) + 64) {
        int64_t z = patch_zstd_frame(s, dst + 1, cap - 1, leb, leb_len, level);
        if (z < 0)
            return z;
        if (!can_rice || (double)z <= rice) {
            dst[0] = PATCH_POS_ZSTD;
            return 1 + z;
        }
    }
    dst[0] = (uint8_t)(PATCH_POS_RICE + shift);
    return 1 + (int64_t)pulse_kernels_get()->rice_put(leb, leb_len, k, shift, dst + 1);
}

/* ---- decoder --------------------------------------------------------------------------- */

int patch_pos_probe(const pulse_patch *p, const patch_chunk *c, const uint8_t *bytes, patch_pos *pp)
{
    const patch_tensor *t = &p->tensors[c->tensor];
    const size_t k = c->count;
    memset(pp, 0, sizeof *pp);
    if (p->version == 2) {   /* format 2: the stream is the zstd frame alone */
        pp->coding = PATCH_POS_ZSTD;
        pp->body = bytes;
        pp->body_len = c->pos_len;
    } else {
        if (c->pos_len < 1)
            return pulse_fail(PULSE_ERR_FORMAT, "tensor %s chunk %llu: empty position stream", t->name,
                              (unsigned long long)c->index);
        pp->coding = bytes[0];
        pp->body = bytes + 1;
        pp->body_len = c->pos_len - 1;
        if (patch_pos_is_context(pp->coding) && p->version >= 5)
            return pulse_fail(PULSE_ERR_UNSUPPORTED,
                              "tensor %s chunk %llu: context-coded (format 5), decoding it needs the base weights",
                              t->name, (unsigned long long)c->index);
        if (pp->coding > PATCH_POS_RICE + 31)
            return pulse_fail(PULSE_ERR_UNSUPPORTED, "tensor %s chunk %llu: position coding %u unknown (known: 0 zstd, 1-32 Rice)",
                              t->name, (unsigned long long)c->index, pp->coding);
    }
    if (pp->coding != PATCH_POS_ZSTD) {
        pp->glen = pulse_rice_leb_room(k, c->len);
        return 0;
    }
    size_t glen;
    int64_t fg = patch_frame_probe(t, c, "position", pp->body, pp->body_len, k, k * PATCH_LEB_MAX, &glen);
    if (fg < 0)
        return (int)fg;
    if ((uint64_t)fg != pp->body_len)
        return pulse_fail(PULSE_ERR_FORMAT, "tensor %s chunk %llu: trailing bytes in position stream", t->name,
                          (unsigned long long)c->index);
    pp->fsz = (size_t)fg;
    pp->glen = glen;
    return 0;
}

int patch_pos_decode(patch_scratch *s, const pulse_patch *p, const patch_chunk *c, const patch_pos *pp,
                     uint8_t *leb, size_t *glen, int check)
{
    const patch_tensor *t = &p->tensors[c->tensor];
    if (pp->coding != PATCH_POS_ZSTD) {
        /* the kernel checks every gap (count, width, bounds) as it goes */
        int rc = pulse_kernels_get()->rice_gaps(pp->body, pp->body_len, c->count, pp->coding - PATCH_POS_RICE,
                                                c->len, leb, glen);
        return rc ? patch_gap_error(t, c, rc) : 0;
    }
    int err = patch_frame_unzstd(s, t, c, "position", pp->body, pp->fsz, leb, pp->glen);
    if (err)
        return err;
    *glen = pp->glen;
    if (check) {
        int lr = patch_leb_check(leb, pp->glen, c->count, c->len);
        if (lr < 0)
            return patch_gap_error(t, c, lr);
    }
    return 0;
}
