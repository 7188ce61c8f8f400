/* SPDX-License-Identifier: Apache-2.0 */
/* CPU feature detection (once, CPUID + XGETBV) and the PULSE_CPU_MASK switch, for the kernels and crypto/ alike. */
#include <pthread.h>
#include <stdlib.h>

#include "base/cpu.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

/* XGETBV by opcode so this file needs no -mxsave (it is built without ISA flags); only called
 * once OSXSAVE is seen. */
static unsigned long long read_xcr0(void)
{
    unsigned lo, hi;
    __asm__ volatile(".byte 0x0f, 0x01, 0xd0" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((unsigned long long)hi << 32) | lo;
}

static unsigned detect_x86(void)
{
    unsigned a, b, c, d, flags = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return 0;
    int osxsave = (c >> 27) & 1, avx = (c >> 28) & 1, popcnt = (c >> 23) & 1, f16c = (c >> 29) & 1;
    int ssse3 = (c >> 9) & 1, sse41 = (c >> 19) & 1;
    unsigned long long xcr0 = osxsave ? read_xcr0() : 0;
    int os_ymm = (xcr0 & 0x6) == 0x6;    /* XMM + YMM state */
    int os_zmm = (xcr0 & 0xe6) == 0xe6;  /* + opmask, ZMM_Hi256, Hi16_ZMM */

    if (__get_cpuid_max(0, NULL) < 7)
        return 0;
    __cpuid_count(7, 0, a, b, c, d);
    unsigned leaf7_max_sub = a;
    int avx2 = (b >> 5) & 1, bmi2 = (b >> 8) & 1, sha = (b >> 29) & 1;
    int avx512f = (b >> 16) & 1, avx512bw = (b >> 30) & 1, avx512vl = (b >> 31) & 1;
    int vbmi = (c >> 1) & 1, vbmi2 = (c >> 6) & 1;
    int bf16 = 0;
    if (leaf7_max_sub >= 1) {
        __cpuid_count(7, 1, a, b, c, d);
        bf16 = (a >> 5) & 1;
    }

    /* SHA-NI uses XMM only: no OS state beyond SSE to ask for. */
    if (sha && ssse3 && sse41)
        flags |= PULSE_CPU_SHA;
    /* F16C came with Ivy Bridge, before AVX2; a hypervisor may still hide it */
    if (avx && os_ymm && avx2 && bmi2 && popcnt && f16c)
        flags |= PULSE_CPU_AVX2;
    /* The AVX-512 kernels also use BMI2/AVX2 instructions; every AVX-512 CPU has them,
     * but a hypervisor may hide bits, so require them rather than assume. */
    if (os_zmm && (flags & PULSE_CPU_AVX2) && avx512f && avx512bw && avx512vl && vbmi && vbmi2) {
        flags |= PULSE_CPU_AVX512;
        if (bf16)
            flags |= PULSE_CPU_AVX512BF16;
    }
    /* The SHA-256 lanes need only F and BW (Skylake-X has them without VBMI). */
    if (os_zmm && avx512f && avx512bw)
        flags |= PULSE_CPU_AVX512BW;
    return flags;
}
#endif

static unsigned detect(void)
{
#if defined(__x86_64__) || defined(__i386__)
    return detect_x86();
#elif defined(__aarch64__)
    return PULSE_CPU_NEON; /* Advanced SIMD is mandatory in AArch64 */
#else
    return 0;
#endif
}

static unsigned cpu_detected, cpu_flags;
static pthread_once_t cpu_once = PTHREAD_ONCE_INIT;

static void init_flags(void)
{
    unsigned flags = detect();
    cpu_detected = flags;
    /* Tests and bug reports switch features off without rebuilding; an unparsable
     * value is ignored rather than guessed at. */
    const char *mask = getenv("PULSE_CPU_MASK");
    if (mask && *mask) {
        char *end;
        unsigned long m = strtoul(mask, &end, 16);
        if (*end == '\0') {
            unsigned clear = (unsigned)m & ~(unsigned)PULSE_CPU_AVX512BW;
            if (clear & PULSE_CPU_AVX512)
                clear |= PULSE_CPU_AVX512BW;
            flags &= ~clear;
        }
    }
    cpu_flags = flags;
}

unsigned pulse_cpu_detected(void)
{
    pthread_once(&cpu_once, init_flags);
    return cpu_detected;
}

unsigned pulse_cpu_flags(void)
{
    pthread_once(&cpu_once, init_flags);
    return cpu_flags;
}
