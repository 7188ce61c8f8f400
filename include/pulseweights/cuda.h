/* SPDX-License-Identifier: Apache-2.0 */
/* Applying a patch straight into tensors in CUDA device memory (declared in every build). */
#ifndef PULSEWEIGHTS_CUDA_H
#define PULSEWEIGHTS_CUDA_H

#include <stddef.h>

#include "pulseweights/error.h"
#include "pulseweights/patch.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Number of CUDA devices usable by this process in *count (0 on any failure). Returns 0 when
 * there is at least one, PULSE_ERR_UNSUPPORTED when the library was built without CUDA, the
 * driver is missing or too old, or no device is present (the detail says which). */
PULSE_API int pulse_cuda_device_count(int *count);

/* Applies patch p to tensors held in device memory of the current CUDA device.
 * device_ptrs[i] is tensor i of the patch, in the patch's (sorted) tensor order, and must
 * cover that tensor's bytes; n must equal pulse_patch_tensor_count(p). stream is a
 * cudaStream_t (NULL: the legacy default stream). The tensors must be in the patch's base
 * state: their state id is not computed (nothing is copied back to the host), as with
 * pulse_patch_apply_ex's trust_base_id + skip_result_check.
 *
 * First the whole patch is verified on the host (pulse_patch_verify on `threads` threads,
 * 0 = all cores); a patch that fails leaves every tensor untouched. Then the chunks are
 * decoded on the host by up to `threads` workers (at most 16), each with a pinned staging
 * slot sized for the patch's largest chunk, so that a worker decodes its next chunk while the
 * stream copies and scatters its last one; they are written with the same contract as the CPU
 * apply's scatter step: absolute values stored, ulp values added modulo 2^width, OPAQUE
 * chunks copied whole. Returns when all of its work on the stream has completed.
 * Errors: PULSE_ERR_INVALID (arguments), the errors of pulse_patch_verify, PULSE_ERR_NOMEM,
 * PULSE_ERR_IO (a CUDA call failed: the detail names it; tensors may be partly written),
 * PULSE_ERR_UNSUPPORTED (built without CUDA). */
PULSE_API int pulse_cuda_apply_patch(const pulse_patch *p, void *const *device_ptrs, size_t n,
                                     void *stream, int threads);

#ifdef __cplusplus
}
#endif
#endif
