/* SPDX-License-Identifier: Apache-2.0 */
/* Kernel family rice: rice_gaps and rice_put against a bit-by-bit Rice coder and the reference, on intact and damaged streams. */
#include <stdlib.h>
#include <string.h>

#include "checkasm.h"


/* The Rice coding written out bit by bit, independently of the library's encoder: k fields of
 * `shift` bits, then per gap its quotient in zeros and a one. Returns the bytes written to out
 * (zeroed here first; room for bytes_max). */
static size_t rice_write(const uint32_t *g, size_t k, unsigned shift, uint8_t *out, size_t bytes_max)
{
    memset(out, 0, bytes_max);
    size_t bit = 0;
    for (size_t j = 0; j < k; j++, bit += shift)
        for (unsigned b = 0; b < shift; b++)
            if (g[j] >> b & 1)
                out[(bit + b) >> 3] |= (uint8_t)(1u << ((bit + b) & 7));
    uint8_t *u = out + (k * shift + 7) / 8;
    bit = 0;
    for (size_t j = 0; j < k; j++) {
        bit += g[j] >> shift;
        u[bit >> 3] |= (uint8_t)(1u << (bit & 7));
        bit++;
    }
    return (size_t)(u - out) + (bit + 7) / 8;
}

/* The gap distributions of rice_gaps' cases: geometric at several densities, all zero,
 * runs, and gaps of every LEB128 length up to 2^32 - 1. */
static uint32_t rice_gap(int kind)
{
    switch (kind) {
    case 0: { uint32_t x = 0; while (rnd() % 19) x++; return x; }           /* ~5 % changed */
    case 1: return (uint32_t)(rnd() & 1);                                    /* dense */
    case 2: return 0;
    case 3: return rnd() % 8 ? (uint32_t)(rnd() % 40) : (uint32_t)(rnd() % 5000);   /* mixed */
    default: {                                                               /* long gaps */
        static const uint32_t big[] = {127, 128, 16383, 16384, 2097151, 2097152, 268435455, 268435456,
                                       0xfffffffeu, 0xffffffffu};
        return rnd() % 4 ? (uint32_t)(rnd() % 300) : big[rnd() % (sizeof big / sizeof big[0])];
    }
    }
}

static size_t leb_write(uint8_t *out, uint32_t v)
{
    size_t n = 0;
    for (; v >= 0x80; v >>= 7)
        out[n++] = (uint8_t)(v | 0x80);
    out[n++] = (uint8_t)v;
    return n;
}

static void check_rice_gaps(const pulse_kernels *t, const pulse_kernels *r)
{
    cur_pattern = "rice_gaps";
    /* one gap, shift 31: quotient 2 is 2^32 (overflow); quotient 1 with field 2^31 - 1 is
     * 2^32 - 1, whose position reaches any 32-bit limit */
    {
        uint8_t over[5] = {0, 0, 0, 0, 0x04}, top[5] = {0xff, 0xff, 0xff, 0x7f, 0x02};
        uint8_t o[5 + 64];
        size_t l;
        CHECK_SAME(r->rice_gaps(over, 5, 1, 31, 0xffffffffu, o, &l) == -2
                   && t->rice_gaps(over, 5, 1, 31, 0xffffffffu, o, &l) == -2, "rice_gaps overflow");
        CHECK_SAME(r->rice_gaps(top, 5, 1, 31, 0xffffffffu, o, &l) == -4
                   && t->rice_gaps(top, 5, 1, 31, 0xffffffffu, o, &l) == -4, "rice_gaps 2^32 - 1");
        top[4] = 0x01;   /* quotient 0: 2^31 - 1, position 2^31 - 1 */
        CHECK_SAME(r->rice_gaps(top, 5, 1, 31, 0xffffffffu, o, &l) == 0 && l == 5
                   && t->rice_gaps(top, 5, 1, 31, 0xffffffffu, o, &l) == 0 && l == 5, "rice_gaps 2^31 - 1");
    }
    static const size_t counts[] = {1, 2, 7, 8, 31, 32, 33, 63, 64, 65, 127, 200, 1000, 4099, 50000};
    for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++)
        for (int kind = 0; kind < 5; kind++) {
            size_t k = counts[ci];
            cur_n = k;
            cur_placement = kind;
            uint32_t *g = malloc(k * 4);
            uint64_t total = 0, qsum[32] = { 0 };
            for (size_t j = 0; j < k; j++) {
                g[j] = rice_gap(kind);
                if (kind == 4 && total + g[j] + 1 + (k - 1 - j) > 0xffffffffu)
                    g[j] = 0;   /* keep every position below 2^32 - 1, room left for the rest */
                total += (uint64_t)g[j] + 1;
                for (unsigned sh = 0; sh < 32; sh++)
                    qsum[sh] += g[j] >> sh;
            }
            uint32_t limit = kind == 4 ? 0xffffffffu : (uint32_t)total;
            uint8_t *want = malloc(k * 5 + 1);
            size_t want_len = 0;
            for (size_t j = 0; j < k; j++)
                want_len += leb_write(want + want_len, g[j]);
            /* shifts: the cheapest, its neighbours, 0 and 31 when the planes stay small */
            unsigned best = 0;
            for (unsigned sh = 1; sh < 32; sh++)
                if (qsum[sh] + k * sh < qsum[best] + k * best)
                    best = sh;
            unsigned shifts[5] = {best, best ? best - 1 : 1, best < 31 ? best + 1 : 30, 0, 31};
            for (int si = 0; si < 5; si++) {
                unsigned sh = shifts[si];
                if (qsum[sh] > ((uint64_t)64 << 20))
                    continue;   /* a unary plane of more than 8 MiB */
                size_t cap = (k * sh + 7) / 8 + (size_t)((qsum[sh] + k + 7) / 8) + 8;
                uint8_t *enc = malloc(cap);
                size_t len = rice_write(g, k, sh, enc, cap);
                size_t room = pulse_rice_leb_room(k, limit);
                CHECK_SAME(want_len <= room, "rice_gaps room bound");
                /* the stream as written, then damaged: cut short, a byte more, a flipped bit
                 * (either plane), a limit one short */
                for (int dmg = 0; dmg < 5; dmg++) {
                    size_t n = dmg == 1 ? len - 1 : dmg == 2 ? len + 1 : len;
                    if (dmg == 1 && len == 0)
                        continue;
                    guarded gd;
                    uint8_t *src = guard_alloc(&gd, n);
                    memcpy(src, enc, n < len ? n : len);
                    if (dmg == 2)
                        src[len] = (uint8_t)(rnd() & 0xff);
                    if (dmg == 3 && len)
                        src[rnd() % len] ^= (uint8_t)(1u << (rnd() % 8));
                    uint32_t lim = dmg == 4 ? limit - 1 : limit;
                    uint8_t *o_r = canary_alloc(room + 64), *o_t = canary_alloc(room + 64);
                    size_t l_r = 0, l_t = 0;
                    int rc_r = r->rice_gaps(src, n, k, sh, lim, o_r, &l_r);
                    int rc_t = t->rice_gaps(src, n, k, sh, lim, o_t, &l_t);
                    CHECK_SAME(rc_r == rc_t && (rc_r != 0 || (l_r == l_t && !memcmp(o_r, o_t, l_r))), "rice_gaps");
                    CHECK_SAME(canary_intact(o_t, room + 64) && canary_intact(o_r, room + 64), "rice_gaps overrun");
                    if (dmg == 0)
                        CHECK_SAME(rc_r == 0 && l_r == want_len && !memcmp(o_r, want, want_len), "rice_gaps definition");
                    if (dmg == 1 || dmg == 2 || (dmg == 4 && kind != 4))
                        CHECK_SAME(rc_r == (dmg == 1 ? -1 : dmg == 2 ? -3 : -4), "rice_gaps error code");
                    canary_free(o_r); canary_free(o_t);
                    guard_free(&gd);
                }
                /* the encoder's side: rice_put writes exactly these planes, from the LEB128
                 * gaps ending at a guard page */
                guarded gl;
                uint8_t *lebin = guard_alloc(&gl, want_len);
                memcpy(lebin, want, want_len);
                uint8_t *p_r = canary_alloc(len + 64), *p_t = canary_alloc(len + 64);
                size_t n_r = r->rice_put(lebin, want_len, k, sh, p_r), n_t = t->rice_put(lebin, want_len, k, sh, p_t);
                CHECK_SAME(n_r == len && !memcmp(p_r, enc, len), "rice_put definition");
                CHECK_SAME(n_t == len && !memcmp(p_t, enc, len), "rice_put");
                CHECK_SAME(canary_intact(p_t, len + 64) && canary_intact(p_r, len + 64), "rice_put overrun");
                canary_free(p_r); canary_free(p_t);
                guard_free(&gl);
                free(enc);
            }
            free(want);
            free(g);
        }
}

void checkasm_check_rice(const pulse_kernels *t, const pulse_kernels *r)
{
    check_rice_gaps(t, r);
}
