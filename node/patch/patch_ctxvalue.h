/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: the arithmetic of format 5's predicted value mode, integer-exact so that every encoder and decoder computes the same prediction whatever the FPU's flush modes. */
#ifndef PULSE_NODE_PATCH_CTXVALUE_H
#define PULSE_NODE_PATCH_CTXVALUE_H

#include <stdint.h>
#include <string.h>

/* The order of BF16 patterns by value as a 16-bit ring: positive patterns as they are, negative
 * ones with their magnitude bits inverted (-0 just below +0, the largest negative magnitude at
 * 0x8000). Its own inverse. */
static inline uint16_t ctx_key16(uint16_t h)
{
    return (h & 0x8000u) ? (uint16_t)(h ^ 0x7FFFu) : h;
}

/* The exact value of a finite BF16 pattern as a double, built from its bits: no float is formed,
 * so a denormals-are-zero mode cannot change it. */
static inline double ctx_bf16_value(uint16_t h)
{
    unsigned e = (h >> 7) & 0xFFu, m = h & 0x7Fu;
    double v;
    if (e == 0) {
        v = (double)m * 0x1p-133;
    } else {
        uint64_t pw = (uint64_t)(e - 134 + 1023) << 52;   /* 2^(e - 134), a normal double */
        double p;
        memcpy(&p, &pw, 8);
        v = (double)(128u | m) * p;
    }
    return (h & 0x8000u) ? -v : v;
}

/* The BF16 pattern nearest x (ties to even, subnormals kept, overflow to infinity), from the
 * double's bits. x is 0 or at least 2^-133 in magnitude (a sum of BF16 values), never NaN. */
static inline uint16_t ctx_bf16_round(double x)
{
    uint64_t bits;
    memcpy(&bits, &x, 8);
    uint16_t sign = (uint16_t)(bits >> 48 & 0x8000u);
    int E = (int)(bits >> 52 & 0x7FFu) - 1023;
    if (E == -1023)
        return sign;   /* zero (a double subnormal is below 2^-133: none reaches here) */
    uint64_t mant = (bits & ((1ull << 52) - 1)) | (1ull << 52);
    if (E > 127)
        return (uint16_t)(sign | 0x7F80u);
    /* units of the result's last place: 2^(E - 7) for a normal result, 2^-133 below 2^-126 */
    unsigned sh = E >= -126 ? 45u : (unsigned)(-E - 81);
    if (sh > 63)
        return sign;
    uint64_t q = mant >> sh, rem = mant & ((1ull << sh) - 1), half = 1ull << (sh - 1);
    if (rem > half || (rem == half && (q & 1)))
        q++;
    if (E < -126)
        return (uint16_t)(sign | q);          /* q = 128 is the smallest normal, correctly */
    /* q in [128, 256]: 256 carries into the exponent */
    unsigned e = (unsigned)(E + 127);
    if (q == 256) {
        q = 128;
        e++;
    }
    if (e >= 255)
        return (uint16_t)(sign | 0x7F80u);
    return (uint16_t)(sign | e << 7 | (q & 0x7Fu));
}

/* The predicted new value of old after a step of size L (a positive finite BF16 pattern) down
 * (t = 1) or up (t = 0). A non-finite old predicts itself. */
static inline uint16_t ctx_predict(uint16_t old, unsigned t, double L)
{
    if ((old & 0x7F80u) == 0x7F80u)
        return old;
    double v = ctx_bf16_value(old);
    return ctx_bf16_round(t ? v - L : v + L);
}

/* 1 when new is below old in value order (the step's direction t). */
static inline unsigned ctx_step_down(uint16_t old, uint16_t neu)
{
    return (int16_t)ctx_key16(neu) < (int16_t)ctx_key16(old);
}

#endif
