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
        v = (double)m * 0x1p-133;   /* a BF16 subnormal: a normal double, exactly */
        return (h & 0x8000u) ? -v : v;
    }
    /* the same sign, exponent and mantissa bits in the double's fields */
    uint64_t bits = (uint64_t)(h & 0x8000u) << 48 | (uint64_t)(e - 127 + 1023) << 52 | (uint64_t)m << 45;
    memcpy(&v, &bits, 8);
    return v;
}

/* The BF16 pattern nearest x (ties to even, subnormals kept, overflow to infinity), from the
 * double's bits. x is 0 or at least 2^-133 in magnitude (a sum of BF16 values), never NaN. */
static inline uint16_t ctx_bf16_round(double x)
{
    uint64_t bits;
    memcpy(&bits, &x, 8);
    uint16_t sign = (uint16_t)(bits >> 48 & 0x8000u);
    uint64_t mag = bits & ~(1ull << 63);
    int E = (int)(mag >> 52) - 1023;
    if (E >= -126) {
        /* a normal result: round the 52 mantissa bits to 7 in place, the carry running into the
         * exponent field as it should */
        uint64_t r = mag + ((1ull << 44) - 1) + (mag >> 45 & 1);
        int e = (int)(r >> 52) - 1023 + 127;
        if (e >= 255)
            return (uint16_t)(sign | 0x7F80u);
        return (uint16_t)(sign | (unsigned)e << 7 | (unsigned)(r >> 45 & 0x7Fu));
    }
    if (mag == 0)
        return sign;
    /* below 2^-126: units of 2^-133, the value mant 2^(E - 52) */
    uint64_t mant = (mag & ((1ull << 52) - 1)) | (1ull << 52);
    unsigned sh = (unsigned)(-E - 81);
    if (sh > 63)
        return sign;
    uint64_t q = mant >> sh, rem = mant & ((1ull << sh) - 1), half = 1ull << (sh - 1);
    if (rem > half || (rem == half && (q & 1)))
        q++;
    return (uint16_t)(sign | q);   /* q = 128 is the smallest normal, correctly */
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
