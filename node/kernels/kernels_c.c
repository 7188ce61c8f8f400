/* SPDX-License-Identifier: Apache-2.0 */
/* Scalar reference kernels: the definition of every job in the table, which each ISA version must match bit for bit. */
#include "node/kernels/kernels.h"

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
}

DEFINE_WIDTH(8, uint8_t, int8_t)
DEFINE_WIDTH(16, uint16_t, int16_t)
DEFINE_WIDTH(32, uint32_t, int32_t)

static void ulp_to_abs16_c(const uint16_t *base, const uint32_t *idx, size_t k,
                           const uint16_t *z, uint16_t *v)
{
    for (size_t j = 0; j < k; j++)
        v[j] = (uint16_t)(base[idx[j]] + UNZIGZAG(uint16_t, z[j]));
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
    /* 64-bit running position: a sum of 32-bit gaps cannot wrap it for any k that fits
     * in memory, and every stored position is < limit <= UINT32_MAX, so the single
     * comparison catches both "past the end" and "wrapped 2^32". */
    uint64_t next = 0;
    for (size_t j = 0; j < k; j++) {
        uint64_t pos = next + gaps[j];
        if (pos >= limit)
            return -1;
        idx[j] = (uint32_t)pos;
        next = pos + 1;
    }
    return 0;
}

void pulse_kernels_init_c(pulse_kernels *k)
{
    *k = (pulse_kernels){
        .name = "c",
        .diff8 = diff8_c, .diff16 = diff16_c, .diff32 = diff32_c,
        .gather8 = gather8_c, .gather16 = gather16_c, .gather32 = gather32_c,
        .scatter8 = scatter8_c, .scatter16 = scatter16_c, .scatter32 = scatter32_c,
        .ulp_encode8 = ulp_encode8_c, .ulp_encode16 = ulp_encode16_c, .ulp_encode32 = ulp_encode32_c,
        .ulp_apply8 = ulp_apply8_c, .ulp_apply16 = ulp_apply16_c, .ulp_apply32 = ulp_apply32_c,
        .ulp_to_abs16 = ulp_to_abs16_c,
        .gaps_encode = gaps_encode_c,
        .gaps_decode = gaps_decode_c,
    };
}
