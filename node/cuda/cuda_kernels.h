/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: the CUDA twins of the kernel table's jobs (node/kernels/kernels.h), launched on a stream. */
#ifndef PULSE_NODE_CUDA_KERNELS_H
#define PULSE_NODE_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Every launcher takes device pointers and a cudaStream_t passed as void *, queues its work
 * and returns 0 or the cudaError_t of the launch (nothing is synchronised). Widths are 1, 2
 * or 4 bytes. Positions are uint32 like the CPU kernels'; any position >= limit is skipped
 * (the host decoder has already refused such chunks: this only keeps a bad caller in bounds). */

/* dst[idx[j]] = v[j] for j < k (kernels.h scatter8/16/32). Positions within one call must be
 * distinct (a decoded chunk's are strictly ascending); then the order of writes is irrelevant. */
int pulse_cu_scatter(unsigned width, void *dst, uint32_t limit, const uint32_t *idx, size_t k,
                     const void *v, void *stream);
/* dst[idx[j]] += unzigzag(z[j]) modulo 2^width (kernels.h ulp_apply8/16/32); distinct positions. */
int pulse_cu_ulp_apply(unsigned width, void *dst, uint32_t limit, const uint32_t *idx, size_t k,
                       const void *z, void *stream);

/* delta[j] = v[j] - base[idx[j]] modulo 2^width for j < k (the bit difference a ulp patch
 * carries, pulse_tensor_changes.deltas); positions below limit as for the scatter. */
int pulse_cu_delta(unsigned width, const void *base, uint32_t limit, const uint32_t *idx, size_t k, const void *v,
                   void *delta, void *stream);

/* SHA-256 of n messages at once, message t the len[t] bytes at data[t] (data and len in device
 * memory), its digest to digests + 32 t (cuda_sha256.cu): a tensor's state chunks. */
int pulse_cu_sha256_many(const uint8_t *const *data, const uint64_t *len, size_t n, uint8_t *digests, void *stream);

/* Device scratch bytes that pulse_cu_diff and pulse_cu_gate need for n elements. */
size_t pulse_cu_scratch_bytes(size_t n);

/* Diff/extract (kernels.h diff + gather): writes the ascending positions i < n where a[i] != b[i]
 * (bitwise) to idx, the new values b[i] to val (may be NULL), and their count (uint32) to
 * *count_dev. idx and val need room for n entries. n <= UINT32_MAX. Ordered compaction: a
 * count pass, a scan of the per-block counts, a write pass; no atomics, so the output is
 * deterministic and ascending like the CPU's. */
int pulse_cu_diff(unsigned width, const void *a, const void *b, size_t n, uint32_t *idx, void *val,
                  uint32_t *count_dev, void *scratch, void *stream);

/* The LoCo gate with error feedback for a view (pulse_view: 0 BF16, 1 FP16, 2 E4M3, 3 E5M2),
 * bit-identical to kernels.h gate[view]: the changes in ascending order to idx/val, their count
 * to *count_dev, e updated. delta may equal e. n <= UINT32_MAX. */
int pulse_cu_gate(int view, const float *theta, const float *delta, float *e, size_t n,
                  uint32_t *idx, float *val, uint32_t *count_dev, void *scratch, void *stream);

/* acc[idx[j]] += v[j] in FP32 with one rounding (kernels.h scatter_add_f32), exact and equal to
 * the CPU only when the positions of one call are distinct (one trainer's shard: gate_check
 * makes them strictly ascending). Apply trainers one call each, in node order, on one stream.
 * Plain loads and stores, not atomicAdd: atomic FP32 adds flush subnormals to zero. */
int pulse_cu_scatter_add_f32(float *acc, uint32_t limit, const uint32_t *idx, size_t k,
                             const float *v, void *stream);

/* The view rounding on the device for n floats (tests compare it with pulse_view_bits). */
int pulse_cu_view_bits(int view, const float *x, size_t n, uint32_t *out, void *stream);

#ifdef __cplusplus
}
#endif
#endif
