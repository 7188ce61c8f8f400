/* SPDX-License-Identifier: Apache-2.0 */
/* Benchmark: lossless coders of a BF16 step's changed positions and ulp values that use the old
 * value's exponent band as context, measured against the order-0 floor, a memcpy and a read. */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pulseweights/checkpoint.h"

#define CHUNK (1u << 20)
#define SEGW 1024u      /* words (of 64 elements) per segment: the member words stay in L2 */
#define NB 16            /* exponent bands: band = clamp(exp(old) - ebase, 0, NB - 1) */
#define NDIRECT 7        /* ulp symbols: z = 1..7 as 0..6; z >= 8 as 7 + (bit length - 4), */
#define NSYM (NDIRECT + 13) /* then its bits below the leading one raw (a magnitude class code) */
#define NZCLIP 16        /* the band table's z histogram clips here */
#define RANS_BITS 10
#define RANS_L (1u << 23)
#define RC_BITS 11       /* LZMA-style adaptive binary range coder */
#define RC_SHIFT 5

/* ---- candidates ----------------------------------------------------------------------- */

typedef struct cand {
    const char *name;
    int nbands;          /* 1 = no context (all elements in one band), NB = exponent bands */
    double rc_thresh;    /* bands whose change fraction is >= this go to the range coder; > 1 = none */
    int value_ctx;       /* 0 = one order-0 table, 1 = one table per band */
} cand;

static const cand cands[] = {
    {"R0: one band, Rice gaps; order-0 values (today's coding, no context)", 1, 2.0, 0},
    {"A:  banded Rice gaps; order-0 values", NB, 2.0, 0},
    {"A+: banded Rice gaps; per-band values", NB, 2.0, 1},
    {"A8: banded Rice gaps, 8 bands (top 8 exponents); per-band values", 8, 2.0, 1},
    {"A4: banded Rice gaps, 4 bands (top 4 exponents); per-band values", 4, 2.0, 1},
    {"B+: range-coded flags (bands >= 5% changed), Rice others; per-band values", NB, 0.05, 1},
    {"B*: range-coded flags in every band; per-band values", NB, 0.0, 1},
};
#define NCAND (sizeof cands / sizeof cands[0])

/* ---- small helpers ------------------------------------------------------------------- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts); /* CPU time: the machine is shared */
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void die(const char *msg)
{
    fprintf(stderr, "context_codec: %s\n", msg);
    exit(1);
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        die("out of memory");
    return p;
}

typedef struct buf {
    uint8_t *p;
    size_t n, cap;
} buf;

static void buf_need(buf *b, size_t more)
{
    if (b->n + more <= b->cap)
        return;
    size_t cap = b->cap ? b->cap * 2 : 4096;
    while (cap < b->n + more)
        cap *= 2;
    b->p = realloc(b->p, cap);
    if (!b->p)
        die("out of memory");
    b->cap = cap;
}

static void put_byte(buf *b, uint8_t v)
{
    buf_need(b, 1);
    b->p[b->n++] = v;
}

static void put_leb(buf *b, uint64_t v)
{
    while (v >= 0x80) {
        put_byte(b, (uint8_t)(v | 0x80));
        v >>= 7;
    }
    put_byte(b, (uint8_t)v);
}

static void put_bytes(buf *b, const void *p, size_t n)
{
    if (!n)
        return;
    buf_need(b, n);
    memcpy(b->p + b->n, p, n);
    b->n += n;
}

typedef struct rd {
    const uint8_t *p, *end;
} rd;

static uint64_t get_leb(rd *r)
{
    uint64_t v = 0;
    for (int sh = 0; sh < 64; sh += 7) {
        if (r->p >= r->end)
            die("truncated stream");
        uint8_t c = *r->p++;
        v |= (uint64_t)(c & 0x7f) << sh;
        if (!(c & 0x80))
            return v;
    }
    die("bad varint");
    return 0;
}

/* ---- bit writer / reader (LSB first) for Rice ----------------------------------------- */

typedef struct bw {
    buf *b;
    uint64_t acc;
    int n;
} bw;

static inline void bw_put(bw *w, uint64_t v, int nb)
{
    /* nb <= 32 */
    w->acc |= v << w->n;
    w->n += nb;
    if (w->n >= 32) {
        buf_need(w->b, 4);
        uint32_t lo = (uint32_t)w->acc;
        memcpy(w->b->p + w->b->n, &lo, 4);
        w->b->n += 4;
        w->acc >>= 32;
        w->n -= 32;
    }
}

static inline void bw_rice(bw *w, uint32_t g, int s)
{
    uint32_t q = g >> s;
    while (q >= 31) {
        bw_put(w, 0, 31);
        q -= 31;
    }
    bw_put(w, 1u << q, (int)q + 1);
    if (s)
        bw_put(w, g & ((1u << s) - 1), s);
}

static void bw_flush(bw *w)
{
    while (w->n > 0) {
        put_byte(w->b, (uint8_t)w->acc);
        w->acc >>= 8;
        w->n -= 8;
    }
    w->n = 0;
    w->acc = 0;
}

typedef struct br {
    const uint8_t *p, *end;
    uint64_t acc;
    int n;
} br;

static inline void br_fill(br *r)
{
    if (r->end - r->p >= 8) {
        uint64_t v;
        memcpy(&v, r->p, 8);
        r->acc |= v << r->n;
        int take = (63 - r->n) >> 3;
        r->p += take;
        r->n += take * 8;
    } else {
        while (r->n <= 56 && r->p < r->end) {
            r->acc |= (uint64_t)*r->p++ << r->n;
            r->n += 8;
        }
    }
}

static inline uint32_t br_rice(br *r, int s)
{
    uint32_t q = 0;
    for (;;) {
        if (r->n < 33)
            br_fill(r);
        if (r->acc) {
            int t = __builtin_ctzll(r->acc);
            if (t < r->n) {
                q += (uint32_t)t;
                r->acc >>= t + 1;
                r->n -= t + 1;
                break;
            }
        }
        if (r->n == 0)
            die("truncated rice stream");
        q += (uint32_t)r->n;
        r->acc = 0;
        r->n = 0;
    }
    if (s) {
        if (r->n < s)
            br_fill(r);
        if (r->n < s)
            die("truncated rice stream");
        uint32_t f = (uint32_t)(r->acc & ((1ull << s) - 1));
        r->acc >>= s;
        r->n -= s;
        return (q << s) | f;
    }
    return q;
}

/* ---- adaptive binary range coder (LZMA's) --------------------------------------------- */

typedef struct rce {
    buf *b;
    uint64_t low;
    uint32_t range;
    uint8_t cache;
    uint64_t csize;
} rce;

static void rce_init(rce *e, buf *b)
{
    e->b = b;
    e->low = 0;
    e->range = 0xFFFFFFFFu;
    e->cache = 0;
    e->csize = 1;
}

static inline void rce_shift(rce *e)
{
    if ((uint32_t)e->low < 0xFF000000u || (e->low >> 32) != 0) {
        uint8_t carry = (uint8_t)(e->low >> 32);
        uint8_t t = e->cache;
        do {
            put_byte(e->b, (uint8_t)(t + carry));
            t = 0xFF;
        } while (--e->csize != 0);
        e->cache = (uint8_t)(e->low >> 24);
    }
    e->csize++;
    e->low = (e->low & 0x00FFFFFFu) << 8;
}

static inline void rce_bit(rce *e, uint16_t *pr, int bit)
{
    uint32_t bound = (e->range >> RC_BITS) * *pr;
    if (!bit) {
        e->range = bound;
        *pr += ((1u << RC_BITS) - *pr) >> RC_SHIFT;
    } else {
        e->low += bound;
        e->range -= bound;
        *pr -= *pr >> RC_SHIFT;
    }
    while (e->range < (1u << 24)) {
        e->range <<= 8;
        rce_shift(e);
    }
}

static void rce_flush(rce *e)
{
    for (int i = 0; i < 5; i++)
        rce_shift(e);
}

typedef struct rcd {
    const uint8_t *p, *end;
    uint32_t range, code;
} rcd;

static inline uint8_t rcd_byte(rcd *d)
{
    return d->p < d->end ? *d->p++ : 0;
}

static void rcd_init(rcd *d, const uint8_t *p, size_t n)
{
    d->p = p;
    d->end = p + n;
    d->range = 0xFFFFFFFFu;
    d->code = 0;
    for (int i = 0; i < 5; i++)
        d->code = (d->code << 8) | rcd_byte(d);
}

static inline int rcd_bit(rcd *d, uint16_t *pr)
{
    uint32_t bound = (d->range >> RC_BITS) * *pr;
    int bit;
    if (d->code < bound) {
        d->range = bound;
        *pr += ((1u << RC_BITS) - *pr) >> RC_SHIFT;
        bit = 0;
    } else {
        d->code -= bound;
        d->range -= bound;
        *pr -= *pr >> RC_SHIFT;
        bit = 1;
    }
    while (d->range < (1u << 24)) {
        d->range <<= 8;
        d->code = (d->code << 8) | rcd_byte(d);
    }
    return bit;
}

/* ---- static rANS (ryg_rans byte-wise, 32-bit state) for ulp symbols ----------------- */

typedef struct rtab {
    uint16_t freq[NSYM], cum[NSYM + 1];
    uint8_t slot[1u << RANS_BITS];
} rtab;

/* Normalises counts to sum 2^RANS_BITS, every seen symbol at least 1. */
static void rtab_norm(rtab *t, const uint32_t *cnt)
{
    uint64_t tot = 0;
    for (int s = 0; s < NSYM; s++)
        tot += cnt[s];
    memset(t->freq, 0, sizeof t->freq);
    if (!tot)
        return;
    int sum = 0, best = 0;
    for (int s = 0; s < NSYM; s++) {
        if (!cnt[s])
            continue;
        uint32_t f = (uint32_t)(((uint64_t)cnt[s] << RANS_BITS) / tot);
        if (f == 0)
            f = 1;
        t->freq[s] = (uint16_t)f;
        sum += (int)f;
        if (cnt[s] > cnt[best] || !cnt[best])
            best = s;
    }
    /* put the rounding error on the most frequent symbol; steal from others if it would go < 1 */
    int diff = (1 << RANS_BITS) - sum;
    while (diff < 0 && t->freq[best] + diff < 1) {
        for (int s = 0; s < NSYM && diff < 0; s++)
            if (s != best && t->freq[s] > 1) {
                t->freq[s]--;
                diff++;
            }
    }
    t->freq[best] = (uint16_t)(t->freq[best] + diff);
}

static void rtab_build(rtab *t)
{
    t->cum[0] = 0;
    for (int s = 0; s < NSYM; s++)
        t->cum[s + 1] = (uint16_t)(t->cum[s] + t->freq[s]);
    for (int s = 0; s < NSYM; s++)
        memset(t->slot + t->cum[s], s, t->freq[s]);
}

/* ---- one chunk's context ------------------------------------------------------------ */

/* Band bytes of 64 OLD elements, then their 4 bit planes and the valid bits (AVX2 movemask). */
__attribute__((target("avx2,bmi2")))
static inline void block_masks(const uint16_t *old, int valid, int ebase, int nb, uint64_t *m)
{
    uint16_t tmp[64];
    const uint16_t *src = old;
    if (valid < 64) {
        memset(tmp, 0, sizeof tmp);
        memcpy(tmp, old, (size_t)valid * 2);
        src = tmp;
    }
    if (nb == 1) {
        m[0] = m[1] = m[2] = m[3] = 0;
        m[4] = valid == 64 ? ~0ull : ((1ull << valid) - 1);
        return;
    }
    __m256i eb = _mm256_set1_epi16((short)ebase), ff = _mm256_set1_epi16(0xFF),
            top = _mm256_set1_epi16((short)(nb - 1));
    __m256i v[4];
    for (int i = 0; i < 4; i++) {
        __m256i x = _mm256_loadu_si256((const __m256i *)(src + 16 * i));
        x = _mm256_and_si256(_mm256_srli_epi16(x, 7), ff);
        x = _mm256_min_epu16(_mm256_subs_epu16(x, eb), top);
        v[i] = x;
    }
    __m256i b0 = _mm256_permute4x64_epi64(_mm256_packus_epi16(v[0], v[1]), 0xD8);
    __m256i b1 = _mm256_permute4x64_epi64(_mm256_packus_epi16(v[2], v[3]), 0xD8);
    uint64_t vmask = valid == 64 ? ~0ull : ((1ull << valid) - 1);
    /* bit k of every band byte, moved to the byte's top bit, then movemask: one plane per bit */
    for (int k = 0; k < 4; k++) {
        uint32_t lo = (uint32_t)_mm256_movemask_epi8(_mm256_slli_epi16(b0, 7 - k));
        uint32_t hi = (uint32_t)_mm256_movemask_epi8(_mm256_slli_epi16(b1, 7 - k));
        m[k] = ((uint64_t)hi << 32) | lo;
    }
    m[4] = vmask;}

__attribute__((target("avx2,bmi2")))
static inline uint64_t block_changed(const uint16_t *old, const uint16_t *neu, int valid)
{
    uint64_t m = 0;
    if (valid < 64) {
        for (int j = 0; j < valid; j++)
            m |= (uint64_t)(old[j] != neu[j]) << j;
        return m;
    }
    for (int i = 0; i < 4; i++) {
        __m256i a = _mm256_loadu_si256((const __m256i *)(old + 16 * i));
        __m256i c = _mm256_loadu_si256((const __m256i *)(neu + 16 * i));
        __m256i e = _mm256_cmpeq_epi16(a, c);
        uint32_t mm = (uint32_t)_mm256_movemask_epi8(e);
        uint32_t bits = (uint32_t)_pext_u32(mm, 0x55555555u); /* one bit per u16, 1 = equal */
        m |= (uint64_t)(~bits & 0xFFFFu) << (16 * i);
    }
    return m;
}

static inline uint16_t zigzag16(uint16_t old, uint16_t neu)
{
    int16_t d = (int16_t)(uint16_t)(neu - old);
    return (uint16_t)(((uint16_t)d << 1) ^ (uint16_t)(d >> 15));
}

static inline uint16_t unzigzag16(uint16_t z)
{
    return (uint16_t)((z >> 1) ^ (uint16_t)-(int16_t)(z & 1));
}

static inline int zsym(uint16_t z)
{
    if (z <= NDIRECT)
        return z - 1;
    return NDIRECT + (32 - __builtin_clz(z)) - 4;
}

enum { MODE_NONE = 0, MODE_RICE = 1, MODE_RICE_INV = 2, MODE_RC = 3 };

typedef struct scratch {
    uint32_t *bidx[NB];      /* per band: band indices of changed members */
    uint32_t nb_mem[NB], kb[NB];
    uint8_t *vctx;           /* values in decode order: context */
    uint16_t *vz;            /*                          and z */
    uint32_t nv;
    uint32_t *gapcnt;        /* floor: gap histogram */
    uint32_t *zcnt;          /* floor: z histogram */
    uint32_t *gaps;
    uint64_t *plane;         /* per 64 elements: the 4 bit planes of the band, then the valid bits */
    uint64_t *chw;           /* changed bit per element (encoder) */
} scratch;

static void scratch_init(scratch *s)
{
    for (int b = 0; b < NB; b++)
        s->bidx[b] = xmalloc(sizeof(uint32_t) * CHUNK);
    s->vctx = xmalloc(CHUNK);
    s->vz = xmalloc(2 * CHUNK);
    s->gapcnt = calloc(CHUNK + 1, sizeof(uint32_t));
    s->zcnt = calloc(65536, sizeof(uint32_t));
    s->gaps = xmalloc(sizeof(uint32_t) * CHUNK);
    s->plane = xmalloc(SEGW * 5 * 8);
    s->chw = xmalloc(SEGW * 8);
    if (!s->gapcnt || !s->zcnt)
        die("out of memory");
}

static void scratch_free(scratch *s)
{
    for (int b = 0; b < NB; b++)
        free(s->bidx[b]);
    free(s->vctx);
    free(s->vz);
    free(s->gapcnt);
    free(s->zcnt);
    free(s->gaps);
    free(s->plane);
    free(s->chw);
}

static int chunk_ebase(const uint16_t *old, uint32_t n, int nbands)
{
    if (nbands == 1)
        return 0;
    uint16_t mx = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint16_t v = old[i] & 0x7F80;
        mx = v > mx ? v : mx;
    }
    int emax = mx >> 7;
    return emax >= nbands - 1 ? emax - (nbands - 1) : 0;
}

/* One pass over OLD: per 64 elements the band's 4 bit planes (a band's member word is then 4
 * ANDs away, so 16 bands cost 5 stored words, not 16), and the changed words when NEU is given.
 * Taken before anything is applied in place. AVX-512BW: 64 band bytes in one register. */
__attribute__((target("avx512f,avx512bw,avx2,bmi2")))
static void build_masks512(const uint16_t *old, const uint16_t *neu, uint32_t n, int ebase, int nb,
                           uint32_t need, scratch *S)
{
    (void)need;
    const __m512i ff = _mm512_set1_epi16(0xFF), eb = _mm512_set1_epi16((short)ebase),
                  top = _mm512_set1_epi16((short)(nb - 1)),
                  perm = _mm512_set_epi64(7, 5, 3, 1, 6, 4, 2, 0);
    for (uint32_t base = 0, w = 0; base < n; base += 64, w++) {
        uint32_t valid = n - base >= 64 ? 64 : n - base;
        uint64_t vm = valid == 64 ? ~0ull : ((1ull << valid) - 1);
        __mmask32 k0 = (__mmask32)(vm & 0xFFFFFFFFu), k1 = (__mmask32)(vm >> 32);
        __m512i a = _mm512_maskz_loadu_epi16(k0, old + base);
        __m512i c = _mm512_maskz_loadu_epi16(k1, old + base + 32);
        if (neu) {
            __m512i na = _mm512_maskz_loadu_epi16(k0, neu + base);
            __m512i nc = _mm512_maskz_loadu_epi16(k1, neu + base + 32);
            S->chw[w] = (uint64_t)_mm512_cmpneq_epi16_mask(a, na) |
                        ((uint64_t)_mm512_cmpneq_epi16_mask(c, nc) << 32);
        }
        uint64_t *pl = S->plane + (size_t)w * 5;
        pl[4] = vm;
        if (nb == 1) {
            pl[0] = pl[1] = pl[2] = pl[3] = 0;
            continue;
        }
        a = _mm512_min_epu16(_mm512_subs_epu16(_mm512_and_si512(_mm512_srli_epi16(a, 7), ff), eb), top);
        c = _mm512_min_epu16(_mm512_subs_epu16(_mm512_and_si512(_mm512_srli_epi16(c, 7), ff), eb), top);
        __m512i bytes = _mm512_permutexvar_epi64(perm, _mm512_packus_epi16(a, c));
        /* bit k of every band byte to the byte's top bit: one 64-bit plane per bit */
        pl[0] = _mm512_movepi8_mask(_mm512_slli_epi16(bytes, 7));
        pl[1] = _mm512_movepi8_mask(_mm512_slli_epi16(bytes, 6));
        pl[2] = _mm512_movepi8_mask(_mm512_slli_epi16(bytes, 5));
        pl[3] = _mm512_movepi8_mask(_mm512_slli_epi16(bytes, 4));
    }
}

static int have_avx512;

/* Member word of band b at word w: the planes agreeing with b's bits; x[k] = ~0 where b's bit k is 0. */
static inline uint64_t bmask(const uint64_t *plane, uint32_t w, const uint64_t *x)
{
    const uint64_t *p = plane + (size_t)w * 5;
    return p[4] & (p[0] ^ x[0]) & (p[1] ^ x[1]) & (p[2] ^ x[2]) & (p[3] ^ x[3]);
}

static inline void band_x(int b, uint64_t *x)
{
    for (int k = 0; k < 4; k++)
        x[k] = (b >> k & 1) ? 0 : ~0ull;
}

__attribute__((target("avx2,bmi2")))
static void build_masks(const uint16_t *old, const uint16_t *neu, uint32_t n, int ebase, int nb,
                        uint32_t need, scratch *S)
{
    if (have_avx512) {
        build_masks512(old, neu, n, ebase, nb, need, S);
        return;
    }
    (void)need;
    for (uint32_t base = 0, w = 0; base < n; base += 64, w++) {
        int valid = n - base >= 64 ? 64 : (int)(n - base);
        block_masks(old + base, valid, ebase, nb, S->plane + (size_t)w * 5);
        if (neu)
            S->chw[w] = block_changed(old + base, neu + base, valid);
    }
}

static int rice_param(const uint32_t *g, uint32_t k, uint64_t *bits_out)
{
    uint64_t sum = 0;
    for (uint32_t i = 0; i < k; i++)
        sum += g[i];
    double mean = k ? (double)sum / k : 0;
    int s0 = mean * 0.69 >= 1 ? (int)floor(log2(mean * 0.69)) : 0;
    int best = 0;
    uint64_t bestbits = UINT64_MAX;
    for (int s = s0 - 1; s <= s0 + 1; s++) {
        if (s < 0 || s > 24)
            continue;
        uint64_t bits = (uint64_t)k * (uint64_t)(s + 1);
        for (uint32_t i = 0; i < k; i++)
            bits += g[i] >> s;
        if (bits < bestbits) {
            bestbits = bits;
            best = s;
        }
    }
    *bits_out = bestbits;
    return best;
}

typedef struct sizes {
    uint64_t pos_bytes, val_bytes, hdr_bytes;
} sizes;

/* Encodes one chunk (OLD, NEW of n elements) into out. Layout: header (ebase, per band: mode,
 * count, Rice parameter, stream length), rANS tables, Rice streams, rc stream, rANS stream,
 * escapes. Sizes split into positions / values / header for the table. */
__attribute__((target("avx2,bmi2")))
static void encode_chunk(const cand *c, const uint16_t *old, const uint16_t *neu, uint32_t n,
                         scratch *S, buf *out, sizes *sz)
{
    int nb = c->nbands;
    int ebase = chunk_ebase(old, n, nb);
    memset(S->nb_mem, 0, sizeof S->nb_mem);
    memset(S->kb, 0, sizeof S->kb);
    S->nv = 0;
    uint32_t nw = (n + 63) / 64;
    /* pass 1, segment by segment, band by band: changed band indices, values in decode order */
    for (uint32_t w0 = 0; w0 < nw; w0 += SEGW) {
        uint32_t off = w0 * 64, segn = n - off < SEGW * 64 ? n - off : SEGW * 64;
        uint32_t sw = (segn + 63) / 64;
        build_masks(old + off, neu + off, segn, ebase, nb, 0xFFFFu, S);
        for (int b = 0; b < nb; b++) {
            uint64_t bx[4];
            band_x(b, bx);
            uint32_t seen = S->nb_mem[b], k = S->kb[b];
            uint32_t *bi = S->bidx[b];
            uint8_t ctx = (uint8_t)(c->value_ctx ? b : 0);
            for (uint32_t w = 0; w < sw; w++) {
                uint64_t mw = bmask(S->plane, w, bx), cb = S->chw[w] & mw;
                while (cb) {
                    int j = __builtin_ctzll(cb);
                    bi[k++] = seen + (uint32_t)__builtin_popcountll(mw & ((1ull << j) - 1));
                    uint32_t e = off + w * 64 + (uint32_t)j;
                    S->vctx[S->nv] = ctx;
                    S->vz[S->nv++] = zigzag16(old[e], neu[e]);
                    cb &= cb - 1;
                }
                seen += (uint32_t)__builtin_popcountll(mw);
            }
            S->kb[b] = k;
            S->nb_mem[b] = seen;
        }
    }
    /* modes and Rice streams */
    int mode[NB];
    int sp[NB];
    buf rs[NB];
    memset(rs, 0, sizeof rs);
    int any_rc = 0;
    for (int b = 0; b < nb; b++) {
        uint32_t k = S->kb[b], nm = S->nb_mem[b];
        sp[b] = 0;
        if (k == 0) {
            mode[b] = MODE_NONE;
            continue;
        }
        if ((double)k >= c->rc_thresh * (double)nm) {
            mode[b] = MODE_RC;
            any_rc = 1;
            continue;
        }
        uint32_t kk = 0;
        if (2 * (uint64_t)k > nm) {
            mode[b] = MODE_RICE_INV;
            uint32_t j = 0, prev = (uint32_t)-1;
            for (uint32_t i = 0; i < nm; i++) {
                if (j < k && S->bidx[b][j] == i) {
                    j++;
                    continue;
                }
                S->gaps[kk++] = i - prev - 1;
                prev = i;
            }
        } else {
            mode[b] = MODE_RICE;
            uint32_t prev = (uint32_t)-1;
            for (uint32_t i = 0; i < k; i++) {
                S->gaps[kk++] = S->bidx[b][i] - prev - 1;
                prev = S->bidx[b][i];
            }
        }
        uint64_t bits;
        int s = rice_param(S->gaps, kk, &bits);
        sp[b] = s;
        bw w = {&rs[b], 0, 0};
        for (uint32_t i = 0; i < kk; i++)
            bw_rice(&w, S->gaps[i], s);
        bw_flush(&w);
        S->kb[b] = kk; /* from here: the count of coded members */
    }
    /* range-coded flags, pass 2 in decode order */
    buf rcb = {0};
    if (any_rc) {
        rce e;
        rce_init(&e, &rcb);
        uint16_t pr[NB];
        for (int b = 0; b < NB; b++)
            pr[b] = 1u << (RC_BITS - 1);
        uint32_t need = 0;
        for (int b = 0; b < nb; b++)
            if (mode[b] == MODE_RC)
                need |= 1u << b;
        for (uint32_t w0 = 0; w0 < nw; w0 += SEGW) {
            uint32_t off = w0 * 64, segn = n - off < SEGW * 64 ? n - off : SEGW * 64;
            uint32_t sw = (segn + 63) / 64;
            build_masks(old + off, neu + off, segn, ebase, nb, need, S);
            for (int b = 0; b < nb; b++) {
                if (mode[b] != MODE_RC)
                    continue;
                uint64_t bx[4];
                band_x(b, bx);
                for (uint32_t w = 0; w < sw; w++) {
                    uint64_t mw = bmask(S->plane, w, bx), ch = S->chw[w];
                    while (mw) {
                        int j = __builtin_ctzll(mw);
                        rce_bit(&e, &pr[b], (int)((ch >> j) & 1));
                        mw &= mw - 1;
                    }
                }
            }
        }
        rce_flush(&e);
    }
    /* values: per-context tables, rANS backwards, escapes forwards */
    int nctx = c->value_ctx ? nb : 1;
    uint32_t cnt[NB][NSYM];
    memset(cnt, 0, sizeof cnt);
    buf esc = {0};
    bw ew = {&esc, 0, 0};
    for (uint32_t i = 0; i < S->nv; i++) {
        uint16_t z = S->vz[i];
        int sym = zsym(z);
        cnt[S->vctx[i]][sym]++;
        if (sym >= NDIRECT) {
            int L = sym - NDIRECT + 4;
            bw_put(&ew, z & ((1u << (L - 1)) - 1), L - 1);
        }
    }
    bw_flush(&ew);
    rtab T[NB];
    buf hdr = {0};
    put_byte(&hdr, (uint8_t)ebase);
    for (int b = 0; b < nb; b++) {
        put_byte(&hdr, (uint8_t)(mode[b] | (sp[b] << 3)));
        if (mode[b] == MODE_RICE || mode[b] == MODE_RICE_INV) {
            put_leb(&hdr, S->kb[b]);
            put_leb(&hdr, rs[b].n);
        }
    }
    size_t hdr_pos = hdr.n;
    for (int x = 0; x < nctx; x++) {
        rtab_norm(&T[x], cnt[x]);
        rtab_build(&T[x]);
        int used = 0;
        for (int s = 0; s < NSYM; s++)
            used |= T[x].freq[s] != 0;
        put_byte(&hdr, (uint8_t)used);
        if (used)
            for (int s = 0; s < NSYM; s++)
                put_leb(&hdr, T[x].freq[s]);
    }
    /* division-free encoding: a reciprocal per (context, symbol), as ryg_rans does */
    struct esym {
        uint32_t xmax, rcp, bias;
        uint16_t cmpl, shift;
    } E[NB][NSYM];
    for (int x = 0; x < nctx; x++)
        for (int sy = 0; sy < NSYM; sy++) {
            uint32_t f = T[x].freq[sy], start = T[x].cum[sy];
            struct esym *e = &E[x][sy];
            e->xmax = ((RANS_L >> RANS_BITS) << 8) * f;
            e->cmpl = (uint16_t)((1u << RANS_BITS) - f);
            if (f < 2) {
                e->rcp = ~0u;
                e->shift = 0;
                e->bias = start + (1u << RANS_BITS) - 1;
            } else {
                uint32_t sh = 0;
                while (f > (1u << sh))
                    sh++;
                e->rcp = (uint32_t)(((1ull << (sh + 31)) + f - 1) / f);
                e->shift = (uint16_t)(sh - 1);
                e->bias = start;
            }
        }
    uint8_t *rbuf = xmalloc((size_t)S->nv * 4 + 16);
    uint8_t *rp = rbuf + (size_t)S->nv * 4 + 16;
    uint32_t st = RANS_L;
    for (uint32_t i = S->nv; i-- > 0;) {
        uint16_t z = S->vz[i];
        int sym = zsym(z);
        const struct esym *e = &E[S->vctx[i]][sym];
        while (st >= e->xmax) {
            *--rp = (uint8_t)st;
            st >>= 8;
        }
        uint32_t q = (uint32_t)(((uint64_t)st * e->rcp) >> 32) >> e->shift;
        st = st + e->bias + q * e->cmpl;
    }
    rp -= 4;
    memcpy(rp, &st, 4);
    size_t rlen = (size_t)(rbuf + (size_t)S->nv * 4 + 16 - rp);
    put_leb(&hdr, rcb.n);
    put_leb(&hdr, rlen);
    put_leb(&hdr, esc.n);

    out->n = 0;
    put_leb(out, hdr.n);
    put_bytes(out, hdr.p, hdr.n);
    uint64_t posb = 0;
    for (int b = 0; b < nb; b++) {
        put_bytes(out, rs[b].p, rs[b].n);
        posb += rs[b].n;
        free(rs[b].p);
    }
    put_bytes(out, rcb.p, rcb.n);
    posb += rcb.n;
    put_bytes(out, rp, rlen);
    put_bytes(out, esc.p, esc.n);
    sz->pos_bytes += posb;
    sz->val_bytes += rlen + esc.n + (hdr.n - hdr_pos);
    sz->hdr_bytes += out->n - posb - rlen - esc.n - (hdr.n - hdr_pos);
    free(rcb.p);
    free(esc.p);
    free(hdr.p);
    free(rbuf);
}

static inline uint16_t zraw(br *r, int L)
{
    if (r->n < L)
        br_fill(r);
    if (r->n < L - 1)
        die("truncated raw ulp bits");
    uint32_t f = (uint32_t)(r->acc & ((1ull << (L - 1)) - 1));
    r->acc >>= L - 1;
    r->n -= L - 1;
    return (uint16_t)((1u << (L - 1)) | f);
}

static double t_dec_masks; /* decode time spent building the band member words */

/* Decodes one chunk and applies it in place to dst (which holds OLD on entry). */
__attribute__((target("avx2,bmi2")))
static void decode_chunk(const cand *c, const uint8_t *in, size_t inlen, uint16_t *dst, uint32_t n,
                         scratch *S)
{
    int nb = c->nbands;
    rd r = {in, in + inlen};
    uint64_t hl = get_leb(&r);
    rd h = {r.p, r.p + hl};
    if (hl > (uint64_t)(r.end - r.p))
        die("bad header length");
    const uint8_t *body = r.p + hl;
    if (h.p >= h.end)
        die("truncated header");
    int ebase = *h.p++;
    int mode[NB], sp[NB];
    uint32_t kk[NB];
    uint64_t rlen[NB];
    for (int b = 0; b < nb; b++) {
        if (h.p >= h.end)
            die("truncated header");
        uint8_t v = *h.p++;
        mode[b] = v & 7;
        sp[b] = v >> 3;
        kk[b] = 0;
        rlen[b] = 0;
        if (mode[b] == MODE_RICE || mode[b] == MODE_RICE_INV) {
            kk[b] = (uint32_t)get_leb(&h);
            rlen[b] = get_leb(&h);
        }
    }
    int nctx = c->value_ctx ? nb : 1;
    rtab T[NB];
    for (int x = 0; x < nctx; x++) {
        if (h.p >= h.end)
            die("truncated header");
        int used = *h.p++;
        memset(T[x].freq, 0, sizeof T[x].freq);
        if (used)
            for (int s = 0; s < NSYM; s++)
                T[x].freq[s] = (uint16_t)get_leb(&h);
        rtab_build(&T[x]);
    }
    uint64_t rclen = get_leb(&h), ranslen = get_leb(&h), esclen = get_leb(&h);
    const uint8_t *p = body;
    br rr[NB];
    for (int b = 0; b < nb; b++) {
        rr[b] = (br){p, p + rlen[b], 0, 0};
        p += rlen[b];
    }
    rcd rc;
    rcd_init(&rc, p, rclen);
    p += rclen;
    const uint8_t *rans = p, *rans_end = p + ranslen;
    p += ranslen;
    br esc = {p, p + esclen, 0, 0};
    if (esc.end > in + inlen)
        die("streams past the end");
    uint32_t st;
    if (ranslen < 4 && ranslen)
        die("short rANS stream");
    st = RANS_L;
    if (ranslen) {
        memcpy(&st, rans, 4);
        rans += 4;
    }
    uint16_t pr[NB];
    uint32_t need = 0;
    for (int b = 0; b < nb; b++) {
        pr[b] = 1u << (RC_BITS - 1);
        if (mode[b] != MODE_NONE)
            need |= 1u << b;
    }
    uint32_t nw = (n + 63) / 64;
    uint32_t idx[NB], left[NB], seen[NB];
    for (int b = 0; b < nb; b++) {
        idx[b] = UINT32_MAX;
        left[b] = 0;
        seen[b] = 0;
        if ((mode[b] == MODE_RICE || mode[b] == MODE_RICE_INV) && kk[b]) {
            idx[b] = br_rice(&rr[b], sp[b]);
            left[b] = kk[b] - 1;
        }
    }
    const rtab *t = &T[0];
#define APPLY_WORD(D, W, BITS)                                                                   \
    do {                                                                                        \
        uint64_t chb_ = (BITS);                                                                 \
        uint16_t *d_ = (D) + (size_t)(W) * 64;                                                  \
        while (chb_) {                                                                          \
            int j_ = __builtin_ctzll(chb_);                                                     \
            uint32_t slot_ = st & ((1u << RANS_BITS) - 1);                                      \
            int sym_ = t->slot[slot_];                                                          \
            st = t->freq[sym_] * (st >> RANS_BITS) + slot_ - t->cum[sym_];                      \
            while (st < RANS_L) {                                                               \
                if (rans >= rans_end)                                                           \
                    die("truncated rANS stream");                                               \
                st = (st << 8) | *rans++;                                                       \
            }                                                                                   \
            uint16_t z_ = sym_ < NDIRECT ? (uint16_t)(sym_ + 1) : zraw(&esc, sym_ - NDIRECT + 4);   \
            d_[j_] = (uint16_t)(d_[j_] + unzigzag16(z_));                                       \
            chb_ &= chb_ - 1;                                                                   \
        }                                                                                       \
    } while (0)
    for (uint32_t w0 = 0; w0 < nw; w0 += SEGW) {
        uint32_t off = w0 * 64, segn = n - off < SEGW * 64 ? n - off : SEGW * 64;
        uint32_t sw = (segn + 63) / 64;
        /* the segment's member words, from OLD, before anything in it is applied */
        double t0 = now_s();
        build_masks(dst + off, NULL, segn, ebase, nb, need, S);
        t_dec_masks += now_s() - t0;
        uint16_t *dseg = dst + off;
        for (int b = 0; b < nb; b++) {
            if (mode[b] == MODE_NONE)
                continue;
            uint64_t bx[4];
            band_x(b, bx);
            t = &T[c->value_ctx ? b : 0];
            if (mode[b] == MODE_RC) {
                for (uint32_t w = 0; w < sw; w++) {
                    uint64_t mw = bmask(S->plane, w, bx), chb = 0;
                    while (mw) {
                        uint64_t low = mw & -mw;
                        if (rcd_bit(&rc, &pr[b]))
                            chb |= low;
                        mw ^= low;
                    }
                    APPLY_WORD(dseg, w, chb);
                }
                continue;
            }
            /* Rice: the selected members of the band by their index in it; each word's members
             * counted by popcount, the one wanted inside a word picked with pdep */
            uint32_t id = idx[b], base = seen[b], lf = left[b];
            int inv = mode[b] == MODE_RICE_INV;
            if (!inv && id == UINT32_MAX)
                continue;
            if (!inv) {
                /* sparse: skip words by popcount to the next change, apply it at once */
                uint32_t w = 0;
                uint64_t mw = bmask(S->plane, 0, bx);
                uint32_t pc = (uint32_t)__builtin_popcountll(mw);
                while (id != UINT32_MAX) {
                    while (id >= base + pc) {
                        base += pc;
                        if (++w >= sw)
                            goto seg_done;
                        mw = bmask(S->plane, w, bx);
                        pc = (uint32_t)__builtin_popcountll(mw);
                    }
                    APPLY_WORD(dseg, w, _pdep_u64(1ull << (id - base), mw));
                    if (lf) {
                        id += br_rice(&rr[b], sp[b]) + 1;
                        lf--;
                    } else {
                        id = UINT32_MAX;
                    }
                }
                /* no change left in this band: its member count no longer matters */
            seg_done:
                idx[b] = id;
                seen[b] = base;
                left[b] = lf;
                continue;
            }
            for (uint32_t w = 0; w < sw; w++) {
                uint64_t mw = bmask(S->plane, w, bx), sel = 0;
                uint32_t pc = (uint32_t)__builtin_popcountll(mw);
                while (id < base + pc) {
                    sel |= _pdep_u64(1ull << (id - base), mw);
                    if (lf) {
                        id += br_rice(&rr[b], sp[b]) + 1;
                        lf--;
                    } else {
                        id = UINT32_MAX;
                    }
                }
                uint64_t bits = inv ? mw & ~sel : sel;
                if (bits)
                    APPLY_WORD(dseg, w, bits);
                base += pc;
            }
            idx[b] = id;
            seen[b] = base;
            left[b] = lf;
        }
    }
    for (int b = 0; b < nb; b++)
        if (idx[b] != UINT32_MAX)
            die("a position past its band");
#undef APPLY_WORD
}

/* ---- floor: order-0 entropy of (gap, ulp) per chunk ----------------------------------- */

typedef struct floorst {
    double gap_bits, z_bits, cond_pos_bits;
    uint64_t band_mem[NB], band_chg[NB], band_z[NB][NZCLIP]; /* z clipped at NZCLIP */
    double cond_z_bits;                                    /* sum over chunks of k H(z | band) */
    uint64_t changes, elems;
} floorst;

static double H_of(const uint32_t *cnt, const uint32_t *keys, uint32_t nkeys, uint64_t tot)
{
    double h = 0;
    for (uint32_t i = 0; i < nkeys; i++) {
        uint32_t c = cnt[keys[i]];
        if (!c)
            continue;
        h -= (double)c * log2((double)c / (double)tot);
    }
    return h;
}

static void chunk_floor(const uint16_t *old, const uint16_t *neu, uint32_t n, scratch *S, floorst *f)
{
    uint32_t k = 0, prev = (uint32_t)-1;
    uint32_t *gk = S->gaps;   /* reuse: gap of each change */
    static uint16_t zl[CHUNK];
    for (uint32_t i = 0; i < n; i++) {
        if (old[i] != neu[i]) {
            gk[k] = i - prev - 1;
            zl[k] = zigzag16(old[i], neu[i]);
            prev = i;
            k++;
        }
    }
    /* distinct keys: count and remember firsts */
    static uint32_t keys[CHUNK], zkeys[CHUNK];
    uint32_t nk = 0, nz = 0;
    for (uint32_t i = 0; i < k; i++) {
        if (S->gapcnt[gk[i]]++ == 0)
            keys[nk++] = gk[i];
        if (S->zcnt[zl[i]]++ == 0)
            zkeys[nz++] = zl[i];
    }
    f->gap_bits += H_of(S->gapcnt, keys, nk, k);
    f->z_bits += H_of(S->zcnt, zkeys, nz, k);
    for (uint32_t i = 0; i < nk; i++)
        S->gapcnt[keys[i]] = 0;
    for (uint32_t i = 0; i < nz; i++)
        S->zcnt[zkeys[i]] = 0;
    /* conditional entropy of the changed flag given the exponent band (ideal band context) */
    int ebase = chunk_ebase(old, n, NB);
    uint32_t nm[NB] = {0}, nc[NB] = {0};
    for (uint32_t i = 0; i < n; i++) {
        int e = ((old[i] >> 7) & 0xFF) - ebase;
        int b = e < 0 ? 0 : (e > NB - 1 ? NB - 1 : e);
        nm[b]++;
        nc[b] += old[i] != neu[i];
        if (old[i] != neu[i]) {
            uint16_t z = zigzag16(old[i], neu[i]);
            f->band_z[b][z < NZCLIP ? z - 1 : NZCLIP - 1]++;
        }
    }
    for (int b = 0; b < NB; b++) {
        f->band_mem[b] += nm[b];
        f->band_chg[b] += nc[b];
    }
    /* H(z | band): one histogram per band, keys remembered to clear it */
    for (int b = 0; b < NB; b++) {
        uint32_t nz2 = 0, kb = 0;
        for (uint32_t i = 0; i < n; i++) {
            if (old[i] == neu[i])
                continue;
            int e = ((old[i] >> 7) & 0xFF) - ebase;
            if ((e < 0 ? 0 : (e > NB - 1 ? NB - 1 : e)) != b)
                continue;
            uint16_t z = zigzag16(old[i], neu[i]);
            if (S->zcnt[z]++ == 0)
                zkeys[nz2++] = z;
            kb++;
        }
        f->cond_z_bits += H_of(S->zcnt, zkeys, nz2, kb);
        for (uint32_t i = 0; i < nz2; i++)
            S->zcnt[zkeys[i]] = 0;
    }
    for (int b = 0; b < NB; b++) {
        if (!nc[b] || nc[b] == nm[b])
            continue;
        double p = (double)nc[b] / nm[b];
        f->cond_pos_bits += nm[b] * (-(p * log2(p) + (1 - p) * log2(1 - p)));
    }
    f->changes += k;
    f->elems += n;
}

/* ---- baselines -------------------------------------------------------------------------- */

static volatile uint64_t sink;

static double time_read(const pulse_ckpt *a, const pulse_ckpt *b)
{
    double t0 = now_s();
    uint64_t s = 0;
    const pulse_ckpt *cs[2] = {a, b};
    for (int x = 0; x < 2; x++)
        for (size_t i = 0; i < pulse_ckpt_count(cs[x]); i++) {
            const pulse_tensor *t = pulse_ckpt_tensor(cs[x], i);
            const uint8_t *p = t->data;
            uint64_t j = 0;
            for (; j + 8 <= t->nbytes; j += 8) {
                uint64_t v;
                memcpy(&v, p + j, 8);
                s += v;
            }
        }
    sink = s;
    return now_s() - t0;
}

/* ---- main --------------------------------------------------------------------------------- */

typedef struct chunkref {
    const uint16_t *old, *neu;
    uint16_t *work;
    uint32_t n;
} chunkref;

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: context_codec OLD NEW [REPEAT [CANDIDATES, e.g. 024]]\n"
                        "  OLD, NEW: BF16 safetensors checkpoints of the same layout\n");
        return 2;
    }
    int repeat = argc > 3 ? atoi(argv[3]) : 3;
    if (repeat < 1)
        repeat = 1;
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("bmi2"))
        die("needs AVX2 and BMI2");
    have_avx512 = __builtin_cpu_supports("avx512bw") && !getenv("CONTEXT_CODEC_AVX2");
    printf("band enumeration: %s\n", have_avx512 ? "AVX-512BW bit planes" : "AVX2 bit planes (movemask)");
    pulse_ckpt *A = NULL, *B = NULL;
    if (pulse_ckpt_open(&A, argv[1], PULSE_CKPT_READ) != 0) {
        fprintf(stderr, "context_codec: cannot open OLD checkpoint %s\n", argv[1]);
        return 1;
    }
    if (pulse_ckpt_open(&B, argv[2], PULSE_CKPT_READ) != 0) {
        fprintf(stderr, "context_codec: cannot open NEW checkpoint %s\n", argv[2]);
        pulse_ckpt_close(&A);
        return 1;
    }
    if (pulse_ckpt_count(A) != pulse_ckpt_count(B))
        die("OLD and NEW differ in tensors");
    /* chunks of BF16 tensors; the rest is not measured */
    size_t nch = 0, cap = 1024;
    chunkref *ch = xmalloc(cap * sizeof *ch);
    uint64_t bf16_bytes = 0, total_bytes = 0;
    size_t work_elems = 0;
    for (size_t i = 0; i < pulse_ckpt_count(A); i++) {
        const pulse_tensor *ta = pulse_ckpt_tensor(A, i), *tb = pulse_ckpt_tensor(B, i);
        total_bytes += ta->nbytes;
        if (strcmp(ta->name, tb->name) || ta->dtype != tb->dtype || ta->nelems != tb->nelems)
            die("OLD and NEW differ in layout");
        if (ta->dtype != PULSE_DT_BF16)
            continue;
        bf16_bytes += ta->nbytes;
        work_elems += ta->nelems;
    }
    uint16_t *work = xmalloc(work_elems * 2);
    size_t woff = 0;
    for (size_t i = 0; i < pulse_ckpt_count(A); i++) {
        const pulse_tensor *ta = pulse_ckpt_tensor(A, i), *tb = pulse_ckpt_tensor(B, i);
        if (ta->dtype != PULSE_DT_BF16)
            continue;
        for (uint64_t off = 0; off < ta->nelems; off += CHUNK) {
            if (nch == cap) {
                cap *= 2;
                ch = realloc(ch, cap * sizeof *ch);
                if (!ch)
                    die("out of memory");
            }
            uint32_t n = (uint32_t)(ta->nelems - off < CHUNK ? ta->nelems - off : CHUNK);
            ch[nch++] = (chunkref){(const uint16_t *)ta->data + off, (const uint16_t *)tb->data + off,
                                   work + woff + off, n};
        }
        woff += ta->nelems;
    }
    scratch S;
    scratch_init(&S);

    /* floor */
    floorst fl = {0};
    for (size_t i = 0; i < nch; i++)
        chunk_floor(ch[i].old, ch[i].neu, ch[i].n, &S, &fl);
    double floor_bits = fl.gap_bits + fl.z_bits;
    double kc = (double)fl.changes;
    printf("checkpoint: %.1f MB (%.1f MB BF16 in %zu chunks of <= 2^20), changed %.3f%%\n",
           total_bytes / 1e6, bf16_bytes / 1e6, nch, 100.0 * kc / (double)fl.elems);
    printf("order-0 floor per change: gaps %.3f + ulp %.3f = %.3f bits; "
           "band-conditional flag entropy %.3f bits/change (%.3fx of gap floor)\n",
           fl.gap_bits / kc, fl.z_bits / kc, floor_bits / kc, fl.cond_pos_bits / kc,
           fl.cond_pos_bits / fl.gap_bits);

    printf("band-conditional ulp entropy H(z | band) %.3f bits/change (%.3fx of ulp floor); "
           "both conditional: %.3fx of the order-0 floor\n",
           fl.cond_z_bits / kc, fl.cond_z_bits / fl.z_bits, (fl.cond_pos_bits + fl.cond_z_bits) / floor_bits);
    printf("bands (exponent of OLD relative to the chunk's largest; band 0 also holds all below):\n"
           "  band  rel.exp  members   changed   share of changes   P(z=1|2)   H(z clipped at 16) bits\n");
    for (int b = NB - 1; b >= 0; b--) {
        if (!fl.band_mem[b])
            continue;
        double h = 0, p12 = 0;
        for (int sy = 0; sy < NZCLIP; sy++) {
            double q = fl.band_chg[b] ? (double)fl.band_z[b][sy] / (double)fl.band_chg[b] : 0;
            if (q > 0)
                h -= q * log2(q);
            if (sy < 2)
                p12 += q;
        }
        printf("  %4d  %7d  %6.2f%%  %7.2f%%  %15.2f%%  %9.3f  %8.3f\n", b, b - (NB - 1),
               100.0 * fl.band_mem[b] / (double)fl.elems, 100.0 * fl.band_chg[b] / (double)fl.band_mem[b],
               100.0 * fl.band_chg[b] / kc, p12, h);
    }

    /* baselines, best of repeat */
    double t_read = 1e9, t_cpy = 1e9;
    for (int r = 0; r < repeat; r++) {
        double t = time_read(A, B);
        t_read = t < t_read ? t : t_read;
        double t0 = now_s();
        for (size_t i = 0; i < nch; i++)
            memcpy(ch[i].work, ch[i].old, (size_t)ch[i].n * 2);
        t = now_s() - t0;
        t_cpy = t < t_cpy ? t : t_cpy;
    }
    printf("baselines: streaming read of OLD+NEW %.0f MB/s of one checkpoint's BF16 bytes "
           "(%.3f s), memcpy %.0f MB/s (%.3f s)\n",
           bf16_bytes / t_read / 1e6, t_read, bf16_bytes / t_cpy / 1e6, t_cpy);
    printf("\n%-76s %8s %8s %8s %8s %9s %9s %9s\n", "candidate", "pos b/c", "val b/c", "hdr b/c",
           "x floor", "enc/read", "dec/cpy", "masks/cpy");

    buf *enc = xmalloc(nch * sizeof *enc);
    memset(enc, 0, nch * sizeof *enc);
    int fail = 0;
    const char *only = argc > 4 ? argv[4] : NULL; /* e.g. "02": run candidates 0 and 2 only */
    for (size_t ci = 0; ci < NCAND; ci++) {
        const cand *c = &cands[ci];
        if (only && !strchr(only, (char)('0' + ci)))
            continue;
        double te = 1e9, td = 1e9, tm = 1e9;
        sizes sz = {0};
        for (int r = 0; r < repeat; r++) {
            sizes s1 = {0};
            double t0 = now_s();
            for (size_t i = 0; i < nch; i++)
                encode_chunk(c, ch[i].old, ch[i].neu, ch[i].n, &S, &enc[i], &s1);
            double t = now_s() - t0;
            te = t < te ? t : te;
            sz = s1;
            /* decode into a copy of OLD, in place; check, restore (untimed) */
            for (size_t i = 0; i < nch; i++)
                memcpy(ch[i].work, ch[i].old, (size_t)ch[i].n * 2);
            t_dec_masks = 0;
            t0 = now_s();
            for (size_t i = 0; i < nch; i++)
                decode_chunk(c, enc[i].p, enc[i].n, ch[i].work, ch[i].n, &S);
            t = now_s() - t0;
            if (t < td)
                tm = t_dec_masks;
            td = t < td ? t : td;
            for (size_t i = 0; i < nch; i++)
                if (memcmp(ch[i].work, ch[i].neu, (size_t)ch[i].n * 2)) {
                    fprintf(stderr, "context_codec: roundtrip FAILED: %s, chunk %zu\n", c->name, i);
                    fail = 1;
                    break;
                }
        }
        double pb = 8.0 * sz.pos_bytes / kc, vb = 8.0 * sz.val_bytes / kc, hb = 8.0 * sz.hdr_bytes / kc;
        printf("%-76s %8.3f %8.3f %8.3f %8.3f %9.2f %9.2f %9.2f\n", c->name, pb, vb, hb,
               (pb + vb + hb) / (floor_bits / kc), t_read / te, td / t_cpy, tm / t_cpy);
        fflush(stdout);
    }
    printf("\nenc/read = time of a streaming read of OLD+NEW / encode time (target >= 0.5); "
           "dec/cpy = decode+apply time / memcpy time (target <= 1.5), masks/cpy = its part\n"
           "enumerating band members from OLD; one thread, best of %d\n",
           repeat);
    for (size_t i = 0; i < nch; i++)
        free(enc[i].p);
    free(enc);
    scratch_free(&S);
    free(ch);
    free(work);
    pulse_ckpt_close(&A);
    pulse_ckpt_close(&B);
    if (fail) {
        fprintf(stderr, "context_codec: a candidate did not roundtrip\n");
        return 1;
    }
    return 0;
}
