/* SPDX-License-Identifier: Apache-2.0 */
/* Scalar reference kernels: the definition of every job in the table, which each ISA version must match bit for bit. */
#include <pthread.h>
#include <string.h>

#include "node/kernels/kernels.h"
#include "node/kernels/kernels_ctx.h"
#include "node/kernels/kernels_tail.h"

/* One template per element width keeps the three widths identical by construction.
 * T is the element type, ST the signed type of the same width. The arithmetic is
 * done in the unsigned type (modulo 2^width); the signed view is only used for the
 * arithmetic shift of zigzag. */
#define ZIGZAG(T, ST, d) ((T)((T)((d) << 1) ^ (T)((ST)(d) >> (sizeof(T) * 8 - 1))))
#define UNZIGZAG(T, z) ((T)(((z) >> 1) ^ (T)(0u - ((z) & 1u))))

#define DEFINE_WIDTH(W, T, ST) \
static size_t diff##W##_c(const T *a, const T *b, size_t n, uint32_t *idx) \
{ \
    size_t k = 0; \
    for (size_t i = 0; i < n; i++) \
        if (a[i] != b[i]) \
            idx[k++] = (uint32_t)i; \
    return k; \
} \
static void gather##W##_c(const T *src, const uint32_t *idx, size_t k, T *out) \
{ \
    for (size_t j = 0; j < k; j++) \
        out[j] = src[idx[j]]; \
} \
static void scatter##W##_c(T *dst, const uint32_t *idx, size_t k, const T *v) \
{ \
    for (size_t j = 0; j < k; j++) \
        dst[idx[j]] = v[j]; \
} \
static void ulp_encode##W##_c(const T *a, const T *b, const uint32_t *idx, size_t k, T *out) \
{ \
    for (size_t j = 0; j < k; j++) { \
        T d = (T)(b[idx[j]] - a[idx[j]]); \
        out[j] = ZIGZAG(T, ST, d); \
    } \
} \
static void ulp_apply##W##_c(T *dst, const uint32_t *idx, size_t k, const T *z) \
{ \
    for (size_t j = 0; j < k; j++) \
        dst[idx[j]] = (T)(dst[idx[j]] + UNZIGZAG(T, z[j])); \
} \
static void ulp_to_abs##W##_c(const T *base, const uint32_t *idx, size_t k, const T *z, T *v) \
{ \
    for (size_t j = 0; j < k; j++) \
        v[j] = (T)(base[idx[j]] + UNZIGZAG(T, z[j])); \
}

DEFINE_WIDTH(8, uint8_t, int8_t)
DEFINE_WIDTH(16, uint16_t, int16_t)
DEFINE_WIDTH(32, uint32_t, int32_t)

static size_t count16_c(const uint16_t *a, const uint16_t *b, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += a[i] != b[i];
    return k;
}

static void gaps_encode_c(const uint32_t *idx, size_t k, uint32_t *gaps)
{
    uint32_t next = 0; /* the position right after the previous one */
    for (size_t j = 0; j < k; j++) {
        gaps[j] = idx[j] - next;
        next = idx[j] + 1;
    }
}

static int gaps_decode_c(const uint32_t *gaps, size_t k, uint32_t limit, uint32_t *idx)
{
    return gaps_decode_tail(gaps, 0, k, 0, limit, idx);
}


/* ---------- the LoCo gate (docs/kernels.md "The gate") ---------- */

static inline uint32_t f32_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}

/* NaN or +-Inf: exponent field all ones. */
static inline int f32_nonfinite(uint32_t u)
{
    return (u & 0x7f800000u) == 0x7f800000u;
}

/* NaN of any payload (emitted as canonical_nan(), kernels_tail.h). */
static inline int f32_isnan(uint32_t u)
{
    return (u & 0x7fffffffu) > 0x7f800000u;
}

/* BF16 = the top half of the FP32 pattern, rounded to nearest even by adding 0x7fff plus the
 * lowest kept bit. Exact for every finite value (subnormals included: BF16 has FP32's
 * exponent range) and for +-Inf; the carry out of the mantissa is the correct exponent step,
 * and the largest finite values round to Inf as IEEE says. Not for NaN (may carry into Inf). */
static inline uint32_t bf16_rne(uint32_t u)
{
    return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

/* FP32 -> a minifloat with `ebits` exponent and `mbits` mantissa bits (IEEE-style bias
 * 2^(ebits-1) - 1, subnormals), round to nearest even, for finite values and +-Inf. `maxcode`
 * is the largest finite magnitude code; a rounded magnitude above it becomes `overcode`
 * (the Inf code, or maxcode itself for a saturating view). */
static uint32_t minifloat_rne(uint32_t u, unsigned ebits, unsigned mbits, uint32_t maxcode,
                              uint32_t overcode)
{
    uint32_t sign = (u >> 31) << (ebits + mbits);
    uint32_t mag = u & 0x7fffffffu;
    int bias = (1 << (ebits - 1)) - 1;
    int emin = 1 - bias;                 /* unbiased exponent of the smallest normal */
    int exp32 = (int)(mag >> 23);
    if (exp32 == 0xff)
        return sign | overcode;          /* Inf (the gates never pass NaN here) */
    uint32_t code;
    if (exp32 - 127 >= emin) {
        /* normal in the target: round the FP32 pattern at bit 23 - mbits; a carry out of
         * the mantissa steps the exponent, which is right, then rebias */
        unsigned shift = 23 - mbits;
        uint32_t r = (mag + ((1u << (shift - 1)) - 1) + ((mag >> shift) & 1u)) >> shift;
        code = r - ((uint32_t)(127 - bias) << mbits);
    } else {
        /* subnormal or zero in the target: count quanta of 2^(emin - mbits) and round that
         * integer to even; rounding up to 1 << mbits gives the smallest normal, as it should */
        uint32_t full = exp32 ? (mag & 0x7fffffu) | 0x800000u : mag;
        int e_eff = (exp32 ? exp32 : 1) - 150; /* value = full * 2^e_eff */
        int s = (emin - (int)mbits) - e_eff;   /* > 0 here */
        if (s >= 32) {
            code = 0;                          /* full < 2^24 < half a quantum */
        } else {
            uint32_t q = full >> s, rem = full & ((1u << s) - 1), half = 1u << (s - 1);
            code = q + (rem > half || (rem == half && (q & 1u)));
        }
    }
    if (code > maxcode)
        code = overcode;
    return sign | code;
}

static inline uint32_t fp16_rne(uint32_t u) { return minifloat_rne(u, 5, 10, 0x7bff, 0x7c00); }
static inline uint32_t e4m3_rne(uint32_t u) { return minifloat_rne(u, 4, 3, 0x7e, 0x7e); }
static inline uint32_t e5m2_rne(uint32_t u) { return minifloat_rne(u, 5, 2, 0x7b, 0x7b); }

uint32_t pulse_view_bits(pulse_view view, float x)
{
    uint32_t u = f32_bits(x);
    int nan = f32_nonfinite(u) && (u & 0x7fffffu);
    uint32_t sign = u >> 31;
    switch (view) {
    case PULSE_VIEW_BF16: return nan ? (sign << 15) | 0x7fc0 : bf16_rne(u);
    case PULSE_VIEW_FP16: return nan ? (sign << 15) | 0x7e00 : fp16_rne(u);
    case PULSE_VIEW_FP8_E4M3: return nan ? (sign << 7) | 0x7f : e4m3_rne(u);
    case PULSE_VIEW_FP8_E5M2: return nan ? (sign << 7) | 0x7e : e5m2_rne(u);
    default: return 0;
    }
}

/* One gate and one check per view; ROUND is the view's conversion of FP32 bits. The FP32
 * sums are written as two statements and this file is compiled with -ffp-contract=off, so
 * no compiler may fuse or reorder them. */
#define DEFINE_GATE(V, ROUND) \
static size_t gate_##V##_c(const float *theta, const float *delta, float *e, size_t n, \
                           uint32_t *idx, float *val) \
{ \
    size_t k = 0; \
    for (size_t i = 0; i < n; i++) { \
        float a = delta[i] + e[i]; \
        float x = theta[i] - a; \
        uint32_t ut = f32_bits(theta[i]), ua = f32_bits(a); \
        if (f32_nonfinite(ut) || f32_nonfinite(ua) || ROUND(f32_bits(x)) != ROUND(ut)) { \
            idx[k] = (uint32_t)i; \
            val[k] = f32_isnan(ua) ? canonical_nan() : a; \
            k++; \
            e[i] = 0.0f; \
        } else { \
            e[i] = a; \
        } \
    } \
    return k; \
} \
static int gate_check_##V##_c(const float *theta, size_t n, const uint32_t *idx, const float *val, \
                              size_t k, size_t *bad) \
{ \
    for (size_t j = 0; j < k; j++) { \
        int rc = PULSE_GATE_OK; \
        uint32_t i = idx[j], ua = f32_bits(val[j]); \
        if (j > 0 && i <= idx[j - 1]) \
            rc = PULSE_GATE_UNSORTED; \
        else if (i >= n) \
            rc = PULSE_GATE_RANGE; \
        else if (f32_nonfinite(ua)) \
            rc = PULSE_GATE_NOT_FINITE; \
        else { \
            float x = theta[i] - val[j]; \
            uint32_t ut = f32_bits(theta[i]); \
            if (!f32_nonfinite(ut) && ROUND(f32_bits(x)) == ROUND(ut)) \
                rc = PULSE_GATE_INVISIBLE; \
        } \
        if (rc != PULSE_GATE_OK) { \
            *bad = j; \
            return rc; \
        } \
    } \
    return PULSE_GATE_OK; \
}

DEFINE_GATE(bf16, bf16_rne)
DEFINE_GATE(fp16, fp16_rne)
DEFINE_GATE(e4m3, e4m3_rne)
DEFINE_GATE(e5m2, e5m2_rne)

static void scatter_add_f32_c(float *acc, const uint32_t *idx, size_t k, const float *v)
{
    scatter_add_f32_tail(acc, idx, 0, k, v);
}

static size_t leb1_run_c(const uint8_t *src, size_t n, uint64_t *sum)
{
    return leb1_run_tail(src, 0, n, sum);
}

/* Eight changes a step while their gaps are one byte each (nearly always at RL densities):
 * escapes are patched in after the step's eight adds (their table delta is 0), so they never
 * leave the fast path; other steps go one change at a time. Each step prefetches ahead
 * (prefetch_cursor, kernels_tail.h). */
static void ulp2_add16_c(uint16_t *d, const uint8_t *g, size_t glen, const uint8_t *packed, const uint8_t *esc,
                         size_t k)
{
    static const uint16_t delta[4] = { 0xffff, 1, 0xfffe, 0 };   /* unzigzag(symbol + 1); escape: 0 for now */
    uint64_t next = 0, cur = 0;
    size_t at = 0, eat = 0, j = 0;
    while (j + 8 <= k) {
        uint64_t x;
        if (at + 8 > glen || (memcpy(&x, g + at, 8), x & 0x8080808080808080ull)) {
            ulp2_add16_tail(d, g, &at, packed, esc, &eat, j, j + 1, &next);
            j++;
            continue;
        }
        uint32_t w;
        memcpy(&w, packed + (j >> 2), 4);
        uint32_t sym = w >> (2 * (j & 3));
        uint32_t pos[8];
        for (unsigned i = 0; i < 8; i++) {
            next += (x >> (8 * i)) & 0xff;
            pos[i] = (uint32_t)next++;
            d[pos[i]] = (uint16_t)(d[pos[i]] + delta[(sym >> (2 * i)) & 3]);
        }
        cur = prefetch_cursor(d, cur, pos[7]);
        for (uint32_t em = sym & (sym >> 1) & 0x5555u; em; em &= em - 1) {
            uint32_t q = pos[__builtin_ctz(em) >> 1];
            d[q] = (uint16_t)(d[q] + unzigzag16_of(pulse_leb_get_trusted(esc, &eat) + 4));
        }
        j += 8;
        at += 8;
    }
    ulp2_add16_tail(d, g, &at, packed, esc, &eat, j, k, &next);
}

static size_t diff_extract16_c(const uint16_t *a, const uint16_t *b, size_t n, uint32_t *idx,
                               uint16_t *va, uint16_t *vb)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i]) {
            idx[k] = (uint32_t)i;
            va[k] = a[i];
            vb[k++] = b[i];
        }
    return k;
}

static size_t diff_ulp16_c(const uint16_t *a, const uint16_t *b, size_t n, uint8_t *leb, size_t *leb_len,
                           uint16_t *z)
{
    *leb_len = 0;
    return diff_ulp16_tail(a, b, 0, n, leb, leb_len, z, 0, 0);
}

static size_t ulp_pack2_16_c(const uint16_t *z, size_t k, uint8_t *packed, uint8_t *esc, uint32_t hist[256])
{
    return ulp_pack2_16_tail(z, 0, k, packed, esc, 0, hist);
}

static rice_byte_table rice_table;
static pthread_once_t rice_table_once = PTHREAD_ONCE_INIT;

static void rice_table_init(void)
{
    rice_table_fill(&rice_table);
}

const rice_byte_table *pulse_rice_byte_table(void)
{
    pthread_once(&rice_table_once, rice_table_init);
    return &rice_table;
}

static int rice_gaps_c(const uint8_t *src, size_t len, size_t k, unsigned shift, uint32_t limit, uint8_t *leb,
                       size_t *leb_len)
{
    size_t rb, ulen;
    const uint8_t *u;
    if (rice_planes(src, len, k, shift, &rb, &u, &ulen))
        return -1;
    rice_state st = { 0 };
    int rc = rice_gaps_tail(src, rb, u, ulen, k, shift, limit, leb, &st);
    *leb_len = st.o;
    return rc ? rc : rice_finish(src, rb, u, ulen, k, shift, &st);
}

static size_t rice_put_c(const uint8_t *leb, size_t len, size_t k, unsigned shift, uint8_t *out)
{
    return rice_put_ref(leb, len, k, shift, out);
}

/* ---- the context coder's bands (format 5) ---- */

/* The 64-bit loads of band bytes below read them in memory order. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the context kernels assume a little-endian target"
#endif

static unsigned ctx_ebase16_c(const uint16_t *a, size_t n)
{
    uint16_t mx = 0;
    for (size_t i = 0; i < n; i++) {
        uint16_t v = a[i] & 0x7F80u;
        mx = v > mx ? v : mx;
    }
    unsigned e = mx >> 7;
    return e > 15 ? e - 15 : 0;
}

/* Bit 0 of each of 8 bytes gathered into one byte (byte i -> bit i): the products' partial
 * terms land on distinct bits, so nothing carries into the top byte. */
static inline uint64_t ctx_gather8(uint64_t x)
{
    return ((x & 0x0101010101010101ull) * 0x0102040810204080ull) >> 56;
}

/* The counts are kept in registers: one nibble per band in 8 accumulators of 8 elements each,
 * then bytes; no popcount needed (a generic x86-64 build would call libgcc for each). */
static unsigned ctx_planes16_c(const uint16_t *a, const uint16_t *nb, size_t n, unsigned ebase, uint64_t *plane,
                               uint8_t *wc, uint8_t *bc, uint32_t members[16], uint64_t *chw)
{
    int16_t mx = 0;   /* the largest exponent */
    const uint64_t NIB = 0x0F0F0F0F0F0F0F0Full;
    size_t nw = (n + 63) / 64;
    const int16_t eb16 = (int16_t)ebase;
    for (size_t w = 0; w < nw; w++) {
        size_t base = w * 64, valid = n - base < 64 ? n - base : 64;
        const uint16_t *o = a + base;
        uint8_t bb[64];
        if (valid == 64) {
            /* signed 16-bit max/min: what SSE2 and NEON vectorise */
            for (unsigned j = 0; j < 64; j++) {
                int16_t e = (int16_t)((o[j] >> 7) & 0xFF), d = (int16_t)(e - eb16);
                mx = e > mx ? e : mx;
                d = d < 0 ? 0 : d;
                bb[j] = (uint8_t)(d > 15 ? 15 : d);
            }
        } else {
            memset(bb, 0, sizeof bb);
            for (unsigned j = 0; j < valid; j++) {
                int16_t e = (int16_t)((o[j] >> 7) & 0xFF), d = (int16_t)(e - eb16);
                mx = e > mx ? e : mx;
                d = d < 0 ? 0 : d;
                bb[j] = (uint8_t)(d > 15 ? 15 : d);
            }
        }
        uint64_t acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (unsigned j = 0; j < 64; j += 8)
            for (unsigned t = 0; t < 8; t++)
                acc[t] += 1ull << (4 * bb[j + t]);
        uint64_t lo = 0, hi = 0;    /* byte i: the count of band 2i (lo), 2i + 1 (hi) */
        for (unsigned t = 0; t < 8; t++) {
            lo += acc[t] & NIB;
            hi += (acc[t] >> 4) & NIB;
        }
        lo -= 64 - valid;           /* the padding of a last word, counted as band 0 */
        /* bytes to band order: lo's byte i is band 2i, hi's band 2i + 1 */
        uint64_t lw = 0, hw = 0;
        for (unsigned i = 0; i < 4; i++) {
            lw |= ((lo >> (8 * i)) & 0xFF) << (16 * i) | ((hi >> (8 * i)) & 0xFF) << (16 * i + 8);
            hw |= ((lo >> (8 * i + 32)) & 0xFF) << (16 * i) | ((hi >> (8 * i + 32)) & 0xFF) << (16 * i + 8);
        }
        memcpy(wc + w * 16, &lw, 8);
        memcpy(wc + w * 16 + 8, &hw, 8);
        uint64_t p0 = 0, p1 = 0, p2 = 0, p3 = 0;
        for (unsigned g = 0; g < 8; g++) {
            uint64_t x;
            memcpy(&x, bb + 8 * g, 8);
            p0 |= ctx_gather8(x) << (8 * g);
            p1 |= ctx_gather8(x >> 1) << (8 * g);
            p2 |= ctx_gather8(x >> 2) << (8 * g);
            p3 |= ctx_gather8(x >> 3) << (8 * g);
        }
        uint64_t *pl = plane + w * 5;
        pl[0] = p0;
        pl[1] = p1;
        pl[2] = p2;
        pl[3] = p3;
        pl[4] = valid == 64 ? ~0ull : ((1ull << valid) - 1);
        if (nb) {
            const uint16_t *e = nb + base;
            uint64_t ch = 0;
            if (valid == 64) {
                uint8_t c8[64];
                for (unsigned j = 0; j < 64; j++)
                    c8[j] = o[j] != e[j];
                for (unsigned g = 0; g < 8; g++) {
                    uint64_t x;
                    memcpy(&x, c8 + 8 * g, 8);
                    ch |= ctx_gather8(x) << (8 * g);
                }
            } else {
                for (unsigned j = 0; j < valid; j++)
                    ch |= (uint64_t)(o[j] != e[j]) << j;
            }
            chw[w] = ch;
        }
    }
    ctx_members_sum(wc, nw, members);
    if (bc)
        ctx_counts_by_band(wc, nw, bc);
    return mx > 15 ? (unsigned)mx - 15u : 0;
}

/* The bit number of the r-th (from 0) set bit of x; r < popcount(x). A portable pdep of one bit:
 * the bytes' running bit counts (SWAR), the byte where they pass r, then inside that byte. */
static inline unsigned ctx_select64(uint64_t x, unsigned r)
{
    const uint64_t L8 = 0x0101010101010101ull, H8 = 0x8080808080808080ull;
    uint64_t c = x - ((x >> 1) & 0x5555555555555555ull);
    c = (c & 0x3333333333333333ull) + ((c >> 2) & 0x3333333333333333ull);
    c = ((c + (c >> 4)) & 0x0F0F0F0F0F0F0F0Full) * L8;   /* byte i: set bits in bytes 0..i */
    /* bytes whose running count is <= r (no borrow: r < 64 and counts <= 64 under bit 7) */
    uint64_t le = (((uint64_t)r * L8) | H8) - c;
    unsigned byte = (unsigned)((((le & H8) >> 7) * L8) >> 56);
    if (byte)
        r -= (unsigned)(c >> (8 * byte - 8)) & 0xFFu;
    unsigned xb = (unsigned)(x >> (8 * byte)) & 0xFFu;
    while (r--)
        xb &= xb - 1;
    return 8 * byte + (unsigned)__builtin_ctz(xb);
}

/* A band's walk: to the word holding each listed member by the words' counts, then the member
 * inside the word. */
static size_t ctx_select_c(const uint64_t *plane, const uint8_t *bc, size_t nw, unsigned band, const uint32_t *rank,
                           size_t c, int invert, uint32_t *pos)
#define SELECT ctx_select64
{
    uint64_t x[4];
    ctx_band_x(band, x);
    size_t out = 0;
    if (!invert) {
        uint64_t base = 0;
        size_t w = 0;
        for (size_t j = 0; j < c; j++) {
            uint64_t id = rank[j];
            unsigned pc;
            while (id >= base + (pc = bc[w])) {
                base += pc;
                w++;
            }
            pos[j] = (uint32_t)(64 * w + SELECT(ctx_member_word(plane, w, x), (unsigned)(id - base)));
        }
        return c;
    }
    uint64_t base = 0, nx = c ? rank[0] : UINT64_MAX;
    size_t got = c ? 1 : 0;
    for (size_t w = 0; w < nw; w++) {
        unsigned pc = bc[w];
        if (!pc)
            continue;
        out = ctx_emit_unlisted(ctx_member_word(plane, w, x), w, base, pc, &nx, &got, rank, c, pos, out, SELECT);
        base += pc;
    }
    return out;
}
#undef SELECT

/* m[q] += c[q] for 16 bands. */
static inline void ctx_add16_c(uint32_t *m, const uint8_t *c)
{
    for (unsigned q = 0; q < 16; q++)
        m[q] += c[q];
}

/* The encoder's walk (kernels_ctx.h) with the portable popcount and add. */
static size_t ctx_gaps16_c(const uint16_t *a, const uint16_t *b, const uint64_t *plane, const uint8_t *wc,
                           const uint64_t *chw, size_t nw, const uint32_t off[16], uint32_t *gap, uint16_t *z,
                           uint32_t cnt[16])
{
    return ctx_gaps16_walk(a, b, plane, wc, chw, nw, off, gap, z, cnt, ctx_pop64, ctx_add16_c);
}

void pulse_kernels_init_c(pulse_kernels *k)
{
    *k = (pulse_kernels){
        .name = "c",
        .diff8 = diff8_c, .diff16 = diff16_c, .diff32 = diff32_c,
        .count16 = count16_c,
        .diff_extract16 = diff_extract16_c,
        .diff_ulp16 = diff_ulp16_c,
        .ulp_pack2_16 = ulp_pack2_16_c,
        .gather8 = gather8_c, .gather16 = gather16_c, .gather32 = gather32_c,
        .scatter8 = scatter8_c, .scatter16 = scatter16_c, .scatter32 = scatter32_c,
        .ulp_encode8 = ulp_encode8_c, .ulp_encode16 = ulp_encode16_c, .ulp_encode32 = ulp_encode32_c,
        .ulp_apply8 = ulp_apply8_c, .ulp_apply16 = ulp_apply16_c, .ulp_apply32 = ulp_apply32_c,
        .ulp_to_abs8 = ulp_to_abs8_c, .ulp_to_abs16 = ulp_to_abs16_c, .ulp_to_abs32 = ulp_to_abs32_c,
        .gaps_encode = gaps_encode_c,
        .gaps_decode = gaps_decode_c,
        .gate = {gate_bf16_c, gate_fp16_c, gate_e4m3_c, gate_e5m2_c},
        .gate_check = {gate_check_bf16_c, gate_check_fp16_c, gate_check_e4m3_c, gate_check_e5m2_c},
        .scatter_add_f32 = scatter_add_f32_c,
        .leb1_run = leb1_run_c,
        .ulp2_add16 = ulp2_add16_c,
        .rice_gaps = rice_gaps_c,
        .rice_put = rice_put_c,
        .ctx_ebase16 = ctx_ebase16_c,
        .ctx_planes16 = ctx_planes16_c,
        .ctx_select = ctx_select_c,
        .ctx_gaps16 = ctx_gaps16_c,
    };
}
