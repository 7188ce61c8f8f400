/* SPDX-License-Identifier: Apache-2.0 */
/* The kernel table: element-wise jobs of the patch codec, one implementation per ISA. */
#ifndef PULSE_KERNELS_H
#define PULSE_KERNELS_H

#include <stddef.h>
#include <stdint.h>

/* CPU features the kernels use (bit mask). PULSE_CPU_MASK=<hex> in the environment clears
 * the given bits (e.g. PULSE_CPU_MASK=ffffffff runs the scalar reference everywhere). */
enum {
    PULSE_CPU_AVX2 = 1u << 0,      /* AVX2 + BMI2, OS saves YMM (XGETBV) */
    PULSE_CPU_AVX512 = 1u << 1,    /* AVX-512 F/BW/VL/VBMI2, OS saves ZMM/opmask */
    PULSE_CPU_AVX512BF16 = 1u << 2,/* AVX512_BF16 (the LoCo gate uses it) */
    PULSE_CPU_SHA = 1u << 3,       /* SHA extensions (crypto/) */
    PULSE_CPU_NEON = 1u << 4,      /* AArch64 Advanced SIMD */
};

/* Features detected once (CPUID + XGETBV), minus PULSE_CPU_MASK. */
unsigned pulse_cpu_flags(void);

/* Every kernel works on elements of 1, 2 or 4 bytes ("8/16/32"). Positions are uint32
 * indices within one chunk (chunks hold at most 2^32-1 elements). No kernel allocates,
 * none reads or writes outside [0, n) of its arrays, all accept n == 0 and unaligned pointers.
 *
 * To add a kernel: add the pointer here, the _c reference in kernels_c.c, the ISA versions,
 * a case in tests/kernels/checkkernels.c, and a bench line there. */
typedef struct pulse_kernels {
    const char *name;   /* "c", "avx2", "avx512", "neon" (best one filled in) */

    /* find changes: writes the ascending positions i < n where a[i] != b[i] (bitwise) to
     * idx (room for n entries, plus 64 entries of slack that may be scribbled) and returns
     * how many. */
    size_t (*diff8)(const uint8_t *a, const uint8_t *b, size_t n, uint32_t *idx);
    size_t (*diff16)(const uint16_t *a, const uint16_t *b, size_t n, uint32_t *idx);
    size_t (*diff32)(const uint32_t *a, const uint32_t *b, size_t n, uint32_t *idx);

    /* extract: out[j] = src[idx[j]] for j < k. */
    void (*gather8)(const uint8_t *src, const uint32_t *idx, size_t k, uint8_t *out);
    void (*gather16)(const uint16_t *src, const uint32_t *idx, size_t k, uint16_t *out);
    void (*gather32)(const uint32_t *src, const uint32_t *idx, size_t k, uint32_t *out);

    /* apply absolute values: dst[idx[j]] = v[j]. */
    void (*scatter8)(uint8_t *dst, const uint32_t *idx, size_t k, const uint8_t *v);
    void (*scatter16)(uint16_t *dst, const uint32_t *idx, size_t k, const uint16_t *v);
    void (*scatter32)(uint32_t *dst, const uint32_t *idx, size_t k, const uint32_t *v);

    /* ulp encode: out[j] = zigzag(b[idx[j]] - a[idx[j]]), the difference of the bit patterns
     * taken modulo 2^width as a signed number, zigzag-mapped (0,-1,1,-2.. -> 0,1,2,3..). */
    void (*ulp_encode8)(const uint8_t *a, const uint8_t *b, const uint32_t *idx, size_t k, uint8_t *out);
    void (*ulp_encode16)(const uint16_t *a, const uint16_t *b, const uint32_t *idx, size_t k, uint16_t *out);
    void (*ulp_encode32)(const uint32_t *a, const uint32_t *b, const uint32_t *idx, size_t k, uint32_t *out);

    /* ulp apply: dst[idx[j]] += unzigzag(z[j]) modulo 2^width. */
    void (*ulp_apply8)(uint8_t *dst, const uint32_t *idx, size_t k, const uint8_t *z);
    void (*ulp_apply16)(uint16_t *dst, const uint32_t *idx, size_t k, const uint16_t *z);
    void (*ulp_apply32)(uint32_t *dst, const uint32_t *idx, size_t k, const uint32_t *z);

    /* ulp to absolute (for squash and crash-safe apply): v[j] = base[idx[j]] + unzigzag(z[j]). */
    void (*ulp_to_abs16)(const uint16_t *base, const uint32_t *idx, size_t k, const uint16_t *z, uint16_t *v);

    /* positions <-> gaps: gaps[0] = idx[0], gaps[j] = idx[j] - idx[j-1] - 1 (idx ascending). */
    void (*gaps_encode)(const uint32_t *idx, size_t k, uint32_t *gaps);
    /* inverse prefix sum; returns 0, or -1 when a position would reach `limit` or wrap
     * (the caller refuses the chunk; idx contents are then unspecified). */
    int (*gaps_decode)(const uint32_t *gaps, size_t k, uint32_t limit, uint32_t *idx);
} pulse_kernels;

/* The best table for this CPU (honouring PULSE_CPU_MASK), filled once; never NULL. */
const pulse_kernels *pulse_kernels_get(void);

/* Tables for tests and benchmarks: the reference and each ISA this build has. Each init
 * fills only what it implements over an existing table (start from _c). Returns 0 when
 * the ISA is compiled in AND the CPU has it, -1 otherwise (table left unchanged). */
void pulse_kernels_init_c(pulse_kernels *k);
int pulse_kernels_init_avx2(pulse_kernels *k);
int pulse_kernels_init_avx512(pulse_kernels *k);
int pulse_kernels_init_neon(pulse_kernels *k);

#endif
