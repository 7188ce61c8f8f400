/* SPDX-License-Identifier: Apache-2.0 */
/* The CUDA entry points of a build without CUDA: each says so with PULSE_ERR_UNSUPPORTED. */
#include "base/fail.h"
#include "node/cuda/cuda_changes.h"
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

int cuda_changes_open(cuda_changes **out, const pulse_ckpt *base)
{
    (void)base;
    *out = NULL;
    return pulse_fail(PULSE_ERR_UNSUPPORTED, "this build of libpulseweights has no CUDA support");
}

void cuda_changes_close(cuda_changes **d)
{
    (void)d;
}

int cuda_changes_tensor(cuda_changes *d, size_t i, const pulse_tensor *now, changes_lists *l, uint64_t *count)
{
    (void)d, (void)i, (void)now, (void)l, (void)count;
    return pulse_fail(PULSE_ERR_UNSUPPORTED, "this build of libpulseweights has no CUDA support");
}

int cuda_changes_hash(cuda_changes *d, const pulse_ckpt *now, uint8_t (*hashes)[32])
{
    (void)d, (void)now, (void)hashes;
    return pulse_fail(PULSE_ERR_UNSUPPORTED, "this build of libpulseweights has no CUDA support");
}

int cuda_changes_accept(cuda_changes *d, size_t i, const changes_lists *l, uint64_t count)
{
    (void)d, (void)i, (void)l, (void)count;
    return pulse_fail(PULSE_ERR_UNSUPPORTED, "this build of libpulseweights has no CUDA support");
}
