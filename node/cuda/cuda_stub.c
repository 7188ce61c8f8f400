/* SPDX-License-Identifier: Apache-2.0 */
/* The CUDA entry points of a build without CUDA: each says so with PULSE_ERR_UNSUPPORTED. */
#include "base/fail.h"
#include "pulseweights/cuda.h"

int pulse_cuda_device_count(int *count)
{
    if (count)
        *count = 0;
    return pulse_fail(PULSE_ERR_UNSUPPORTED, "this build of libpulseweights has no CUDA support");
}

int pulse_cuda_apply_patch(const pulse_patch *p, void *const *device_ptrs, size_t n, void *stream,
                           int threads)
{
    (void)p, (void)device_ptrs, (void)n, (void)stream, (void)threads;
    return pulse_fail(PULSE_ERR_UNSUPPORTED, "this build of libpulseweights has no CUDA support");
}
