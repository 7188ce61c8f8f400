/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: the CPU features the kernels and crypto/ choose their code by, detected once, and the PULSE_CPU_MASK switch. */
#ifndef PULSE_BASE_CPU_H
#define PULSE_BASE_CPU_H

/* Feature bits. PULSE_CPU_MASK=<hex> in the environment clears the given bits (e.g.
 * PULSE_CPU_MASK=ffffffff runs the scalar reference and portable SHA-256 everywhere). */
enum {
    PULSE_CPU_AVX2 = 1u << 0,      /* AVX2 + BMI2 + POPCNT + F16C, OS saves YMM (XGETBV) */
    PULSE_CPU_AVX512 = 1u << 1,    /* AVX-512 F/BW/VL/VBMI/VBMI2 + the AVX2 set, OS saves ZMM/opmask */
    PULSE_CPU_AVX512BF16 = 1u << 2,/* AVX512_BF16 on top of PULSE_CPU_AVX512 (the LoCo gate uses it) */
    PULSE_CPU_SHA = 1u << 3,       /* SHA extensions + SSSE3 + SSE4.1 (crypto/'s SHA-NI path) */
    PULSE_CPU_NEON = 1u << 4,      /* AArch64 Advanced SIMD */
    /* AVX-512 F + BW alone, OS saves ZMM/opmask (crypto/'s sixteen SHA-256 lanes). No mask bit
     * of its own: masking PULSE_CPU_AVX512 (2) masks it too, and 0x20 in a mask does nothing. */
    PULSE_CPU_AVX512BW = 1u << 5,
};

/* The features this CPU has (CPUID + XGETBV, detected once), PULSE_CPU_MASK not applied:
 * for tests that compare implementations on one run. */
unsigned pulse_cpu_detected(void);

/* pulse_cpu_detected() minus what PULSE_CPU_MASK clears: what dispatch uses. An unparsable
 * mask is ignored rather than guessed at. */
unsigned pulse_cpu_flags(void);

#endif
