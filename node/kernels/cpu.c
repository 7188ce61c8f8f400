/* SPDX-License-Identifier: Apache-2.0 */
/* The dispatch table: the best kernels for this CPU (features from base/cpu.c), and stubs for ISAs not built. */
#include <pthread.h>

#include "node/kernels/kernels.h"

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
