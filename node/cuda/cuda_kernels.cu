/* SPDX-License-Identifier: Apache-2.0 */
/* CUDA kernels with the CPU reference's contracts: scatter, ulp apply, ordered diff, LoCo gate, scatter-add. */
#include <stdint.h>
#include <cuda_runtime.h>

#include "node/cuda/cuda_kernels.h"

/* Compiled with -fmad=false -ftz=false -prec-div=true: the gate's two FP32 roundings must be
 * exactly those of kernels_c.c. The sums also use __fadd_rn/__fsub_rn, which nvcc never
 * contracts into an FMA whatever the flags. */

namespace {

const unsigned kThreads = 256;          /* threads per block, a multiple of 32 */
const unsigned kItems = 16;             /* elements per thread in the compaction kernels */
const unsigned kTile = kThreads * kItems;
const unsigned kWarps = kThreads / 32;

template <typename T> struct Signed;
template <> struct Signed<uint8_t> { typedef int8_t type; };
template <> struct Signed<uint16_t> { typedef int16_t type; };
template <> struct Signed<uint32_t> { typedef int32_t type; };

template <typename T> __device__ __forceinline__ T unzigzag(T z)
{
    return (T)((z >> 1) ^ (T)(0u - (z & 1u)));
}

unsigned grid_for(size_t work)
{
    size_t b = (work + kThreads - 1) / kThreads;
    if (b > (1u << 20))
        b = 1u << 20;       /* grid-stride loops cover the rest */
    return b ? (unsigned)b : 1u;
}

template <typename T>
__global__ void scatter_kernel(T *dst, uint32_t limit, const uint32_t *idx, size_t k, const T *v)
{
    for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < k; j += (size_t)gridDim.x * blockDim.x) {
        uint32_t i = idx[j];
        if (i < limit)
            dst[i] = v[j];
    }
}

template <typename T>
__global__ void ulp_apply_kernel(T *dst, uint32_t limit, const uint32_t *idx, size_t k, const T *z)
{
    for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < k; j += (size_t)gridDim.x * blockDim.x) {
        uint32_t i = idx[j];
        if (i < limit)
            dst[i] = (T)(dst[i] + unzigzag<T>(z[j]));
    }
}

template <typename T>
__global__ void delta_kernel(const T *base, uint32_t limit, const uint32_t *idx, size_t k, const T *v, T *delta)
{
    for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < k; j += (size_t)gridDim.x * blockDim.x) {
        uint32_t i = idx[j];
        delta[j] = i < limit ? (T)(v[j] - base[i]) : (T)0;
    }
}

__global__ void scatter_add_kernel(float *acc, uint32_t limit, const uint32_t *idx, size_t k, const float *v)
{
    for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < k; j += (size_t)gridDim.x * blockDim.x) {
        uint32_t i = idx[j];
        if (i < limit) {
            float s = __fadd_rn(acc[i], v[j]);
            acc[i] = s == s ? s : __uint_as_float(0x7fc00000u); /* the CPU's canonical NaN */
        }
    }
}

/* ---------- the views' rounding: kernels_c.c's integer code, on host and device ---------- */

__host__ __device__ __forceinline__ int f32_nonfinite(uint32_t u) { return (u & 0x7f800000u) == 0x7f800000u; }
__host__ __device__ __forceinline__ int f32_isnan(uint32_t u) { return (u & 0x7fffffffu) > 0x7f800000u; }

__host__ __device__ __forceinline__ uint32_t bf16_rne(uint32_t u)
{
    return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

__host__ __device__ __forceinline__ uint32_t minifloat_rne(uint32_t u, unsigned ebits, unsigned mbits,
                                                         uint32_t maxcode, uint32_t overcode)
{
    uint32_t sign = (u >> 31) << (ebits + mbits);
    uint32_t mag = u & 0x7fffffffu;
    int bias = (1 << (ebits - 1)) - 1;
    int emin = 1 - bias;
    int exp32 = (int)(mag >> 23);
    if (exp32 == 0xff)
        return sign | overcode;
    uint32_t code;
    if (exp32 - 127 >= emin) {
        unsigned shift = 23 - mbits;
        uint32_t r = (mag + ((1u << (shift - 1)) - 1) + ((mag >> shift) & 1u)) >> shift;
        code = r - ((uint32_t)(127 - bias) << mbits);
    } else {
        uint32_t full = exp32 ? (mag & 0x7fffffu) | 0x800000u : mag;
        int e_eff = (exp32 ? exp32 : 1) - 150;
        int s = (emin - (int)mbits) - e_eff;
        if (s >= 32) {
            code = 0;
        } else {
            uint32_t q = full >> s, rem = full & ((1u << s) - 1), half = 1u << (s - 1);
            code = q + (rem > half || (rem == half && (q & 1u)));
        }
    }
    if (code > maxcode)
        code = overcode;
    return sign | code;
}

template <int V> __device__ __forceinline__ uint32_t view_round(uint32_t u)
{
    if (V == 0) return bf16_rne(u);
    if (V == 1) return minifloat_rne(u, 5, 10, 0x7bff, 0x7c00);
    if (V == 2) return minifloat_rne(u, 4, 3, 0x7e, 0x7e);
    return minifloat_rne(u, 5, 2, 0x7b, 0x7b);
}

template <int V> __global__ void view_bits_kernel(const float *x, size_t n, uint32_t *out)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t u = __float_as_uint(x[i]);
        uint32_t sign = u >> 31;
        if (f32_isnan(u))
            out[i] = V == 0 ? (sign << 15) | 0x7fc0 : V == 1 ? (sign << 15) | 0x7e00
                   : V == 2 ? (sign << 7) | 0x7f : (sign << 7) | 0x7e;
        else
            out[i] = view_round<V>(u);
    }
}

/* ---------- ordered compaction: count per tile, scan the counts, write ---------- */

/* An Op answers, for element i: visit(i, &payload) -> changed? (doing any per-element side
 * effect, only in the write pass: test(i) must be free of them), and emit(slot, i, payload). */

template <typename T> struct DiffOp {
    const T *a, *b;
    uint32_t *idx;
    T *val;
    __device__ bool test(size_t i) const { return a[i] != b[i]; }
    __device__ bool visit(size_t i, uint32_t *payload) const
    {
        T nb = b[i];
        *payload = nb;
        return a[i] != nb;
    }
    __device__ void emit(size_t slot, size_t i, uint32_t payload) const
    {
        idx[slot] = (uint32_t)i;
        if (val)
            val[slot] = (T)payload;
    }
};

template <int V> struct GateOp {
    const float *theta, *delta;
    float *e;
    uint32_t *idx;
    float *val;
    /* kernels_c.c DEFINE_GATE: a = delta + e; x = theta - a, two roundings */
    __device__ bool changes(size_t i, uint32_t *ua_out) const
    {
        float t = theta[i];
        float a = __fadd_rn(delta[i], e[i]);
        float x = __fsub_rn(t, a);
        uint32_t ut = __float_as_uint(t), ua = __float_as_uint(a);
        *ua_out = ua;
        return f32_nonfinite(ut) || f32_nonfinite(ua) || view_round<V>(__float_as_uint(x)) != view_round<V>(ut);
    }
    __device__ bool test(size_t i) const
    {
        uint32_t ua;
        return changes(i, &ua);
    }
    __device__ bool visit(size_t i, uint32_t *payload) const
    {
        uint32_t ua;
        bool ch = changes(i, &ua);
        e[i] = ch ? 0.0f : __uint_as_float(ua);
        *payload = f32_isnan(ua) ? 0x7fc00000u : ua;
        return ch;
    }
    __device__ void emit(size_t slot, size_t i, uint32_t payload) const
    {
        idx[slot] = (uint32_t)i;
        val[slot] = __uint_as_float(payload);
    }
};

/* Element order inside a tile is row-major (row r, thread t: base + r * kThreads + t), so
 * coalesced loads and ascending output go together. */
template <typename Op> __global__ void count_kernel(Op op, size_t n, uint32_t *counts)
{
    __shared__ uint32_t warp_sum[kWarps];
    size_t base = (size_t)blockIdx.x * kTile;
    uint32_t c = 0;
    for (unsigned r = 0; r < kItems; r++) {
        size_t i = base + (size_t)r * kThreads + threadIdx.x;
        if (i < n && op.test(i))
            c++;
    }
    for (int off = 16; off > 0; off >>= 1)
        c += __shfl_down_sync(0xffffffffu, c, off);
    if ((threadIdx.x & 31) == 0)
        warp_sum[threadIdx.x >> 5] = c;
    __syncthreads();
    if (threadIdx.x == 0) {
        uint32_t s = 0;
        for (unsigned w = 0; w < kWarps; w++)
            s += warp_sum[w];
        counts[blockIdx.x] = s;
    }
}

/* One block turns counts[0..nb) into exclusive offsets and writes the total. */
__global__ void scan_kernel(uint32_t *counts, size_t nb, uint32_t *total)
{
    __shared__ uint32_t warp_sum[32];
    __shared__ uint32_t carry;
    unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    if (threadIdx.x == 0)
        carry = 0;
    __syncthreads();
    for (size_t start = 0; start < nb; start += blockDim.x) {
        size_t i = start + threadIdx.x;
        uint32_t v = i < nb ? counts[i] : 0, x = v;
        for (int off = 1; off < 32; off <<= 1) {
            uint32_t y = __shfl_up_sync(0xffffffffu, x, off);
            if (lane >= (unsigned)off)
                x += y;
        }
        if (lane == 31)
            warp_sum[warp] = x;
        __syncthreads();
        if (warp == 0) {
            uint32_t w = lane < nw ? warp_sum[lane] : 0, wx = w;
            for (int off = 1; off < 32; off <<= 1) {
                uint32_t y = __shfl_up_sync(0xffffffffu, wx, off);
                if (lane >= (unsigned)off)
                    wx += y;
            }
            if (lane < nw)
                warp_sum[lane] = wx - w;   /* exclusive prefix of the warps */
        }
        __syncthreads();
        uint32_t c0 = carry;
        if (i < nb)
            counts[i] = c0 + warp_sum[warp] + x - v;
        __syncthreads();
        if (threadIdx.x == blockDim.x - 1)
            carry = c0 + warp_sum[warp] + x;
        __syncthreads();
    }
    if (threadIdx.x == 0)
        *total = carry;
}

template <typename Op> __global__ void write_kernel(Op op, size_t n, const uint32_t *offsets)
{
    __shared__ uint32_t warp_sum[kWarps];
    size_t base = (size_t)blockIdx.x * kTile;
    size_t out = offsets[blockIdx.x];
    unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (unsigned r = 0; r < kItems; r++) {
        size_t i = base + (size_t)r * kThreads + threadIdx.x;
        uint32_t payload = 0;
        bool f = i < n && op.visit(i, &payload);
        unsigned ballot = __ballot_sync(0xffffffffu, f);
        if (lane == 0)
            warp_sum[warp] = __popc(ballot);
        __syncthreads();
        uint32_t before = 0, row = 0;
        for (unsigned w = 0; w < kWarps; w++) {
            uint32_t s = warp_sum[w];
            if (w < warp)
                before += s;
            row += s;
        }
        if (f)
            op.emit(out + before + __popc(ballot & ((1u << lane) - 1u)), i, payload);
        out += row;
        __syncthreads();    /* warp_sum is rewritten by the next row */
    }
}

template <typename Op> int compact(const Op &op, size_t n, uint32_t *count_dev, void *scratch, cudaStream_t st)
{
    if (n == 0)
        return (int)cudaMemsetAsync(count_dev, 0, sizeof(uint32_t), st);
    if (n > UINT32_MAX)
        return (int)cudaErrorInvalidValue;
    size_t nb = (n + kTile - 1) / kTile;
    uint32_t *counts = (uint32_t *)scratch;
    count_kernel<Op><<<(unsigned)nb, kThreads, 0, st>>>(op, n, counts);
    scan_kernel<<<1, 1024, 0, st>>>(counts, nb, count_dev);
    write_kernel<Op><<<(unsigned)nb, kThreads, 0, st>>>(op, n, counts);
    return (int)cudaGetLastError();
}

} /* namespace */

extern "C" int pulse_cu_scatter(unsigned width, void *dst, uint32_t limit, const uint32_t *idx, size_t k,
                                const void *v, void *stream)
{
    cudaStream_t st = (cudaStream_t)stream;
    if (k == 0)
        return 0;
    unsigned g = grid_for(k);
    switch (width) {
    case 1: scatter_kernel<uint8_t><<<g, kThreads, 0, st>>>((uint8_t *)dst, limit, idx, k, (const uint8_t *)v); break;
    case 2: scatter_kernel<uint16_t><<<g, kThreads, 0, st>>>((uint16_t *)dst, limit, idx, k, (const uint16_t *)v); break;
    case 4: scatter_kernel<uint32_t><<<g, kThreads, 0, st>>>((uint32_t *)dst, limit, idx, k, (const uint32_t *)v); break;
    default: return (int)cudaErrorInvalidValue;
    }
    return (int)cudaGetLastError();
}

extern "C" int pulse_cu_ulp_apply(unsigned width, void *dst, uint32_t limit, const uint32_t *idx, size_t k,
                                  const void *z, void *stream)
{
    cudaStream_t st = (cudaStream_t)stream;
    if (k == 0)
        return 0;
    unsigned g = grid_for(k);
    switch (width) {
    case 1: ulp_apply_kernel<uint8_t><<<g, kThreads, 0, st>>>((uint8_t *)dst, limit, idx, k, (const uint8_t *)z); break;
    case 2: ulp_apply_kernel<uint16_t><<<g, kThreads, 0, st>>>((uint16_t *)dst, limit, idx, k, (const uint16_t *)z); break;
    case 4: ulp_apply_kernel<uint32_t><<<g, kThreads, 0, st>>>((uint32_t *)dst, limit, idx, k, (const uint32_t *)z); break;
    default: return (int)cudaErrorInvalidValue;
    }
    return (int)cudaGetLastError();
}

extern "C" int pulse_cu_delta(unsigned width, const void *base, uint32_t limit, const uint32_t *idx, size_t k,
                              const void *v, void *delta, void *stream)
{
    cudaStream_t st = (cudaStream_t)stream;
    if (k == 0)
        return 0;
    unsigned g = grid_for(k);
    switch (width) {
    case 1: delta_kernel<uint8_t><<<g, kThreads, 0, st>>>((const uint8_t *)base, limit, idx, k, (const uint8_t *)v, (uint8_t *)delta); break;
    case 2: delta_kernel<uint16_t><<<g, kThreads, 0, st>>>((const uint16_t *)base, limit, idx, k, (const uint16_t *)v, (uint16_t *)delta); break;
    case 4: delta_kernel<uint32_t><<<g, kThreads, 0, st>>>((const uint32_t *)base, limit, idx, k, (const uint32_t *)v, (uint32_t *)delta); break;
    default: return (int)cudaErrorInvalidValue;
    }
    return (int)cudaGetLastError();
}

extern "C" size_t pulse_cu_scratch_bytes(size_t n)
{
    return ((n + kTile - 1) / kTile + 1) * sizeof(uint32_t);
}

extern "C" int pulse_cu_diff(unsigned width, const void *a, const void *b, size_t n, uint32_t *idx, void *val,
                             uint32_t *count_dev, void *scratch, void *stream)
{
    cudaStream_t st = (cudaStream_t)stream;
    switch (width) {
    case 1: { DiffOp<uint8_t> op = {(const uint8_t *)a, (const uint8_t *)b, idx, (uint8_t *)val};
              return compact(op, n, count_dev, scratch, st); }
    case 2: { DiffOp<uint16_t> op = {(const uint16_t *)a, (const uint16_t *)b, idx, (uint16_t *)val};
              return compact(op, n, count_dev, scratch, st); }
    case 4: { DiffOp<uint32_t> op = {(const uint32_t *)a, (const uint32_t *)b, idx, (uint32_t *)val};
              return compact(op, n, count_dev, scratch, st); }
    default: return (int)cudaErrorInvalidValue;
    }
}

extern "C" int pulse_cu_gate(int view, const float *theta, const float *delta, float *e, size_t n,
                             uint32_t *idx, float *val, uint32_t *count_dev, void *scratch, void *stream)
{
    cudaStream_t st = (cudaStream_t)stream;
    switch (view) {
    case 0: { GateOp<0> op = {theta, delta, e, idx, val}; return compact(op, n, count_dev, scratch, st); }
    case 1: { GateOp<1> op = {theta, delta, e, idx, val}; return compact(op, n, count_dev, scratch, st); }
    case 2: { GateOp<2> op = {theta, delta, e, idx, val}; return compact(op, n, count_dev, scratch, st); }
    case 3: { GateOp<3> op = {theta, delta, e, idx, val}; return compact(op, n, count_dev, scratch, st); }
    default: return (int)cudaErrorInvalidValue;
    }
}

extern "C" int pulse_cu_scatter_add_f32(float *acc, uint32_t limit, const uint32_t *idx, size_t k,
                                        const float *v, void *stream)
{
    if (k == 0)
        return 0;
    scatter_add_kernel<<<grid_for(k), kThreads, 0, (cudaStream_t)stream>>>(acc, limit, idx, k, v);
    return (int)cudaGetLastError();
}

extern "C" int pulse_cu_view_bits(int view, const float *x, size_t n, uint32_t *out, void *stream)
{
    cudaStream_t st = (cudaStream_t)stream;
    if (n == 0)
        return 0;
    unsigned g = grid_for(n);
    switch (view) {
    case 0: view_bits_kernel<0><<<g, kThreads, 0, st>>>(x, n, out); break;
    case 1: view_bits_kernel<1><<<g, kThreads, 0, st>>>(x, n, out); break;
    case 2: view_bits_kernel<2><<<g, kThreads, 0, st>>>(x, n, out); break;
    case 3: view_bits_kernel<3><<<g, kThreads, 0, st>>>(x, n, out); break;
    default: return (int)cudaErrorInvalidValue;
    }
    return (int)cudaGetLastError();
}
