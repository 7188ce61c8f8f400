/* SPDX-License-Identifier: Apache-2.0 */
/* SHA-256 of many messages at once on a GPU, one thread a message: a state id's 1 MiB chunks hashed where the tensors are. */
#include <stdint.h>
#include <cuda_runtime.h>

#include "crypto/sha256_consts.h"
#include "node/cuda/cuda_kernels.h"

namespace {

__constant__ uint32_t kRound[64] = PULSE_SHA256_K_INIT;

__device__ __forceinline__ uint32_t rotr(uint32_t x, unsigned n)
{
    return __funnelshift_r(x, x, n);
}

/* One compression of the 16 big-endian words w (the schedule rolls in w itself). */
__device__ __forceinline__ void compress(uint32_t h[8], uint32_t w[16])
{
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
#pragma unroll
    for (int i = 0; i < 64; i++) {
        uint32_t wi;
        if (i < 16) {
            wi = w[i];
        } else {
            uint32_t w15 = w[(i - 15) & 15], w2 = w[(i - 2) & 15];
            uint32_t s0 = rotr(w15, 7) ^ rotr(w15, 18) ^ (w15 >> 3);
            uint32_t s1 = rotr(w2, 17) ^ rotr(w2, 19) ^ (w2 >> 10);
            wi = w[i & 15] = w[i & 15] + s0 + w[(i - 7) & 15] + s1;
        }
        uint32_t t1 = k + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + kRound[i] + wi;
        uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        k = g;
        g = f;
        f = e;
        e = d + t1;
        d = c;
        c = b;
        b = a;
        a = t1 + t2;
    }
    h[0] += a;
    h[1] += b;
    h[2] += c;
    h[3] += d;
    h[4] += e;
    h[5] += f;
    h[6] += g;
    h[7] += k;
}

__device__ __forceinline__ uint32_t be32(uint32_t x)
{
    return __byte_perm(x, 0, 0x0123);
}

/* Message t: data[t] for len[t] bytes, its digest to out + 32 t. Whole blocks are read as
 * 16-byte words where the message is so aligned (tensors on a device are), else byte by byte. */
__global__ void sha256_many_kernel(const uint8_t *const *data, const uint64_t *len, size_t n, uint8_t *out)
{
    size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (t >= n)
        return;
    const uint8_t *p = data[t];
    const uint64_t bytes = len[t], full = bytes / 64;
    uint32_t h[8] = PULSE_SHA256_H0_INIT;
    uint32_t w[16];
    const bool vec = ((uintptr_t)p & 15) == 0;
    for (uint64_t blk = 0; blk < full; blk++) {
        const uint8_t *q = p + blk * 64;
        if (vec) {
#pragma unroll
            for (int i = 0; i < 4; i++) {
                uint4 v = ((const uint4 *)q)[i];
                w[4 * i] = be32(v.x);
                w[4 * i + 1] = be32(v.y);
                w[4 * i + 2] = be32(v.z);
                w[4 * i + 3] = be32(v.w);
            }
        } else {
#pragma unroll
            for (int i = 0; i < 16; i++)
                w[i] = (uint32_t)q[4 * i] << 24 | (uint32_t)q[4 * i + 1] << 16 | (uint32_t)q[4 * i + 2] << 8 | q[4 * i + 3];
        }
        compress(h, w);
    }
    /* the tail: what is left, 0x80, zeros, the length in bits; one block or two */
    const unsigned rest = (unsigned)(bytes - full * 64), blocks = rest + 9 <= 64 ? 1 : 2;
    const uint8_t *q = p + full * 64;
    for (unsigned blk = 0; blk < blocks; blk++) {
        for (int i = 0; i < 16; i++) {
            uint32_t word = 0;
            for (int j = 0; j < 4; j++) {
                unsigned at = blk * 64 + 4 * i + j;
                uint32_t byte = at < rest ? q[at] : at == rest ? 0x80u : 0;
                if (blk == blocks - 1 && at >= blk * 64 + 56)
                    byte = (uint32_t)((bytes * 8) >> (8 * (blk * 64 + 63 - at))) & 0xffu;
                word = word << 8 | byte;
            }
            w[i] = word;
        }
        compress(h, w);
    }
    for (int i = 0; i < 8; i++) {
        out[32 * t + 4 * i] = (uint8_t)(h[i] >> 24);
        out[32 * t + 4 * i + 1] = (uint8_t)(h[i] >> 16);
        out[32 * t + 4 * i + 2] = (uint8_t)(h[i] >> 8);
        out[32 * t + 4 * i + 3] = (uint8_t)h[i];
    }
}

} // namespace

extern "C" int pulse_cu_sha256_many(const uint8_t *const *data, const uint64_t *len, size_t n, uint8_t *digests,
                                    void *stream)
{
    if (n == 0)
        return 0;
    /* few threads a block: one thread is one whole message, so the blocks spread over every SM */
    const unsigned threads = 32;
    sha256_many_kernel<<<(unsigned)((n + threads - 1) / threads), threads, 0, (cudaStream_t)stream>>>(data, len, n,
                                                                                                      digests);
    return (int)cudaGetLastError();
}
