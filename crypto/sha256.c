/* SPDX-License-Identifier: Apache-2.0 */
/* SHA-256 (FIPS 180-4): the portable compression function, padding, and the runtime choice of SHA-NI and the sixteen-lane AVX-512 kernel. */
#include <pthread.h>
#include <string.h>

#include "base/cpu.h"
#include "crypto/sha256.h"
#include "crypto/sha256_consts.h"
#include "crypto/sha256_rounds.h"

/* FIPS 180-4 round constants; aligned for the SHA-NI path's 16-byte loads. */
const uint32_t pulse_sha256_k[64] __attribute__((aligned(16))) = PULSE_SHA256_K_INIT;

static const uint32_t H0[8] = PULSE_SHA256_H0_INIT;

static inline uint32_t ror(uint32_t x, unsigned n) { return (x >> n) | (x << (32 - n)); }

static inline uint32_t load_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

#define S0(x) (ror(x, 2) ^ ror(x, 13) ^ ror(x, 22))
#define S1(x) (ror(x, 6) ^ ror(x, 11) ^ ror(x, 25))
#define G0(x) (ror(x, 7) ^ ror(x, 18) ^ ((x) >> 3))
#define G1(x) (ror(x, 17) ^ ror(x, 19) ^ ((x) >> 10))
/* One round with the working variables renamed instead of moved (a..h rotate through the
 * macro's arguments), and the message schedule kept in a 16-word ring: the compiler keeps
 * it all in registers. */
#define ROUND(a, b, c, d, e, f, g, h, i, wi)                                  \
    do {                                                                      \
        uint32_t t1_ = h + S1(e) + ((e & f) ^ (~e & g)) + pulse_sha256_k[i] + (wi);        \
        d += t1_;                                                             \
        h = t1_ + S0(a) + ((a & b) ^ (a & c) ^ (b & c));                      \
    } while (0)
#define W(i) (w[(i) & 15] += G1(w[((i) - 2) & 15]) + w[((i) - 7) & 15] + G0(w[((i) - 15) & 15]))
#define W0(i) (w[i])

void pulse_sha256_blocks_c(uint32_t st[8], const uint8_t *p, size_t nblocks)
{
    for (; nblocks; nblocks--, p += 64) {
        uint32_t w[16];
        for (int i = 0; i < 16; i++)
            w[i] = load_be32(p + 4 * i);
        uint32_t a = st[0], b = st[1], c = st[2], d = st[3], e = st[4], f = st[5], g = st[6], h = st[7];
        SHA256_EIGHT(0, W0);
        SHA256_EIGHT(8, W0);
        for (int i = 16; i < 64; i += 16) {
            SHA256_EIGHT(i, W);
            SHA256_EIGHT(i + 8, W);
        }
        st[0] += a; st[1] += b; st[2] += c; st[3] += d;
        st[4] += e; st[5] += f; st[6] += g; st[7] += h;
    }
}

typedef void (*blocks_fn)(uint32_t h[8], const uint8_t *p, size_t nblocks);

/* The CPU features are base/cpu.c's (PULSE_CPU_MASK included); an implementation this build
 * lacks counts as absent. */
static int cpu_has_sha_ni(unsigned flags)
{
#ifdef PULSE_HAVE_SHA_NI
    return (flags & PULSE_CPU_SHA) != 0;
#else
    (void)flags;
    return 0;
#endif
}

static int cpu_has_lanes16(unsigned flags)
{
#ifdef PULSE_HAVE_SHA_X16
    return (flags & PULSE_CPU_AVX512BW) != 0;
#else
    (void)flags;
    return 0;
#endif
}

static int cpu_has_x4_evex(unsigned flags)
{
#ifdef PULSE_HAVE_SHA_NI_EVEX
    return cpu_has_sha_ni(flags) && (flags & PULSE_CPU_AVX512) != 0;
#else
    (void)flags;
    return 0;
#endif
}

static blocks_fn best_blocks = pulse_sha256_blocks_c;
static const char *best_name = "portable";
static int best_lanes16;
static pulse_sha256_x4_fn best_x4;
static pthread_once_t best_once = PTHREAD_ONCE_INIT;

static void choose(void)
{
    unsigned flags = pulse_cpu_flags();
    if (cpu_has_sha_ni(flags)) {
        best_blocks = pulse_sha256_blocks_ni;
        best_name = "sha-ni";
        best_x4 = cpu_has_x4_evex(flags) ? pulse_sha256_blocks_ni_x4_evex : pulse_sha256_blocks_ni_x4;
    }
    best_lanes16 = cpu_has_lanes16(flags);
}

pulse_sha256_x4_fn pulse_sha256_x4(void)
{
    pthread_once(&best_once, choose);
    return best_x4;
}

int pulse_sha256_x4_evex_built(void)
{
    return cpu_has_x4_evex(pulse_cpu_detected());
}

static blocks_fn get_blocks(void)
{
    pthread_once(&best_once, choose);
    return best_blocks;
}

const char *pulse_sha256_impl(void)
{
    pthread_once(&best_once, choose);
    return best_name;
}

int pulse_sha256_lanes16(void)
{
    pthread_once(&best_once, choose);
    return best_lanes16;
}

int pulse_sha256_lanes16_built(void)
{
    return cpu_has_lanes16(pulse_cpu_detected());
}

#ifndef PULSE_HAVE_SHA_NI
void pulse_sha256_blocks_ni(uint32_t h[8], const uint8_t *p, size_t nblocks)
{
    pulse_sha256_blocks_c(h, p, nblocks);   /* never chosen: cpu_has_sha_ni() is 0 */
}

void pulse_sha256_blocks_ni_x2(uint32_t ha[8], const uint8_t *pa, uint32_t hb[8], const uint8_t *pb,
                               size_t nblocks)
{
    pulse_sha256_blocks_c(ha, pa, nblocks);   /* never chosen either */
    pulse_sha256_blocks_c(hb, pb, nblocks);
}

void pulse_sha256_blocks_ni_x4(uint32_t h[4][8], const uint8_t *const p[4], size_t nblocks)
{
    for (int i = 0; i < 4; i++)
        pulse_sha256_blocks_c(h[i], p[i], nblocks);   /* never chosen either */
}
#endif

#ifndef PULSE_HAVE_SHA_NI_EVEX
void pulse_sha256_blocks_ni_x4_evex(uint32_t h[4][8], const uint8_t *const p[4], size_t nblocks)
{
    pulse_sha256_blocks_ni_x4(h, p, nblocks);   /* never chosen: cpu_has_x4_evex() is 0 */
}
#endif

#ifndef PULSE_HAVE_SHA_X16
void pulse_sha256_blocks_x16(uint32_t st[8][16], const uint8_t *const p[16], unsigned live, size_t nblocks)
{
    for (int l = 0; l < 16; l++) {   /* never chosen: cpu_has_lanes16() is 0 */
        if (!((live >> l) & 1))
            continue;
        uint32_t h[8];
        for (int j = 0; j < 8; j++)
            h[j] = st[j][l];
        pulse_sha256_blocks_c(h, p[l], nblocks);
        for (int j = 0; j < 8; j++)
            st[j][l] = h[j];
    }
}
#endif

void pulse_sha256_init(pulse_sha256_ctx *c)
{
    memcpy(c->h, H0, sizeof H0);
    c->total = 0;
    c->fill = 0;
}

static void update_with(pulse_sha256_ctx *c, const void *data, size_t len, blocks_fn blocks)
{
    const uint8_t *p = data;
    c->total += len;
    if (c->fill) {
        size_t take = 64 - c->fill;
        if (take > len)
            take = len;
        memcpy(c->buf + c->fill, p, take);
        c->fill += take;
        p += take;
        len -= take;
        if (c->fill < 64)
            return;
        blocks(c->h, c->buf, 1);
        c->fill = 0;
    }
    if (len >= 64) {
        blocks(c->h, p, len / 64);
        p += len & ~(size_t)63;
        len &= 63;
    }
    if (len) {
        memcpy(c->buf, p, len);
        c->fill = len;
    }
}

static void final_with(pulse_sha256_ctx *c, uint8_t out[32], blocks_fn blocks)
{
    uint64_t bits = c->total * 8;
    size_t n = c->fill;
    c->buf[n++] = 0x80;
    if (n > 56) {
        memset(c->buf + n, 0, 64 - n);
        blocks(c->h, c->buf, 1);
        n = 0;
    }
    memset(c->buf + n, 0, 56 - n);
    for (int i = 0; i < 8; i++)
        c->buf[56 + i] = (uint8_t)(bits >> (56 - 8 * i));
    blocks(c->h, c->buf, 1);
    for (int i = 0; i < 8; i++) {
        out[4 * i] = (uint8_t)(c->h[i] >> 24);
        out[4 * i + 1] = (uint8_t)(c->h[i] >> 16);
        out[4 * i + 2] = (uint8_t)(c->h[i] >> 8);
        out[4 * i + 3] = (uint8_t)c->h[i];
    }
    memset(c, 0, sizeof *c);
}

void pulse_sha256_update(pulse_sha256_ctx *c, const void *data, size_t len)
{
    update_with(c, data, len, get_blocks());
}

void pulse_sha256_final(pulse_sha256_ctx *c, uint8_t out[32])
{
    final_with(c, out, get_blocks());
}

void pulse_sha256(const void *data, size_t len, uint8_t out[32])
{
    pulse_sha256_ctx c;
    pulse_sha256_init(&c);
    pulse_sha256_update(&c, data, len);
    pulse_sha256_final(&c, out);
}

void pulse_sha256_x2(const void *a, size_t la, const void *b, size_t lb, uint8_t out_a[32],
                     uint8_t out_b[32])
{
    pulse_sha256_ctx ca, cb;
    pulse_sha256_init(&ca);
    pulse_sha256_init(&cb);
    blocks_fn blocks = get_blocks();
    if (blocks == pulse_sha256_blocks_ni) {
        /* the whole blocks both messages have, interleaved; the rest of each alone */
        size_t nb = (la < lb ? la : lb) / 64;
        pulse_sha256_blocks_ni_x2(ca.h, a, cb.h, b, nb);
        ca.total = cb.total = (uint64_t)nb * 64;
        a = (const uint8_t *)a + nb * 64;
        b = (const uint8_t *)b + nb * 64;
        la -= nb * 64;
        lb -= nb * 64;
    }
    update_with(&ca, a, la, blocks);
    update_with(&cb, b, lb, blocks);
    final_with(&ca, out_a, blocks);
    final_with(&cb, out_b, blocks);
}

int pulse_sha256_with(const char *impl, const void *data, size_t len, uint8_t out[32])
{
    blocks_fn blocks;
    if (!strcmp(impl, "portable"))
        blocks = pulse_sha256_blocks_c;
    else if (!strcmp(impl, "sha-ni") && cpu_has_sha_ni(pulse_cpu_detected()))
        blocks = pulse_sha256_blocks_ni;
    else
        return -1;
    pulse_sha256_ctx c;
    pulse_sha256_init(&c);
    update_with(&c, data, len, blocks);
    final_with(&c, out, blocks);
    return 0;
}
