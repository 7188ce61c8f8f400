/* SPDX-License-Identifier: Apache-2.0 */
/* CPU feature detection (once, CPUID + XGETBV), the PULSE_CPU_MASK switch, and the dispatch table. */
#include <pthread.h>
#include <stdlib.h>

#include "node/kernels/kernels.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

/* XGETBV by opcode so this file needs no -mxsave; only called once OSXSAVE is seen. */
static uint64_t read_xcr0(void)
{
    uint32_t lo, hi;
    __asm__ volatile(".byte 0x0f, 0x01, 0xd0" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static unsigned detect_x86(void)
{
    unsigned a, b, c, d, flags = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return 0;
    int osxsave = (c >> 27) & 1, avx = (c >> 28) & 1, popcnt = (c >> 23) & 1, f16c = (c >> 29) & 1;
    if (!osxsave || !avx)
        return 0; /* the OS does not save YMM: no AVX of any kind */
    uint64_t xcr0 = read_xcr0();
    int os_ymm = (xcr0 & 0x6) == 0x6;    /* XMM + YMM state */
    int os_zmm = (xcr0 & 0xe6) == 0xe6;  /* + opmask, ZMM_Hi256, Hi16_ZMM */

    unsigned max_leaf = __get_cpuid_max(0, NULL);
    if (max_leaf < 7)
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

    if (sha)
        flags |= PULSE_CPU_SHA; /* SHA-NI uses XMM only */
    /* F16C came with Ivy Bridge, before AVX2; a hypervisor may still hide it */
    if (os_ymm && avx2 && bmi2 && popcnt && f16c)
        flags |= PULSE_CPU_AVX2;
    /* The AVX-512 kernels also use BMI2/AVX2 instructions; every AVX-512 CPU has them,
     * but a hypervisor may hide bits, so require them rather than assume. */
    if (os_zmm && (flags & PULSE_CPU_AVX2) && avx512f && avx512bw && avx512vl && vbmi && vbmi2) {
        flags |= PULSE_CPU_AVX512;
        if (bf16)
            flags |= PULSE_CPU_AVX512BF16;
    }
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

static unsigned cpu_flags;
static pthread_once_t cpu_once = PTHREAD_ONCE_INIT;

static void init_flags(void)
{
    unsigned flags = detect();
    /* Tests and bug reports switch features off without rebuilding; an unparsable
     * value is ignored rather than guessed at. */
    const char *mask = getenv("PULSE_CPU_MASK");
    if (mask && *mask) {
        char *end;
        unsigned long m = strtoul(mask, &end, 16);
        if (*end == '\0')
            flags &= ~(unsigned)m;
    }
    cpu_flags = flags;
}

unsigned pulse_cpu_flags(void)
{
    pthread_once(&cpu_once, init_flags);
    return cpu_flags;
}

/* ISAs this build did not compile report "not available"; the ISA libraries define
 * the real ones (meson passes PULSE_HAVE_<ISA> to this file when it builds them). */
#ifndef PULSE_HAVE_AVX2
int pulse_kernels_init_avx2(pulse_kernels *k) { (void)k; return -1; }
#endif
#ifndef PULSE_HAVE_AVX512
int pulse_kernels_init_avx512(pulse_kernels *k) { (void)k; return -1; }
#endif
#ifndef PULSE_HAVE_NEON
int pulse_kernels_init_neon(pulse_kernels *k) { (void)k; return -1; }
#endif

static pulse_kernels best;
static pthread_once_t best_once = PTHREAD_ONCE_INIT;

static void init_best(void)
{
    /* Reference first, then each ISA overwrites what it implements, so a kernel an ISA
     * lacks falls back to the best earlier one. */
    pulse_kernels_init_c(&best);
    pulse_kernels_init_avx2(&best);
    pulse_kernels_init_avx512(&best);
    pulse_kernels_init_neon(&best);
}

const pulse_kernels *pulse_kernels_get(void)
{
    pthread_once(&best_once, init_best);
    return &best;
}
