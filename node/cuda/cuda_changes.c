/* SPDX-License-Identifier: Apache-2.0 */
/* The device half of pulse_changes: the base kept on the GPU, each step compared and hashed there, only the changes copied back. */
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "base/fail.h"
#include "node/checkpoint/ckpt_internal.h"
#include "node/cuda/cuda_changes.h"
#include "node/cuda/cuda_kernels.h"
#include "pulseweights/cuda.h"

/* Elements one diff call compares: bounds the device buffers (12 bytes an element at most)
 * whatever the largest tensor. */
#define RANGE ((uint64_t)1 << 26)

struct cuda_changes {
    int device;                  /* the tensors' device: every call works there */
    size_t n;
    void **base;                 /* the copies */
    uint32_t *nelems;            /* their elements */
    uint64_t range;              /* elements the buffers below hold */
    uint32_t *d_idx, *d_count;
    void *d_val, *d_delta, *d_scratch;
    const uint8_t **d_ptrs;      /* the state chunks of the tensors hashed (cuda_changes_hash) */
    uint64_t *d_lens;
    uint8_t *d_digests;
    size_t hash_cap;
};

static int cuda_fail(cudaError_t e, const char *what)
{
    return pulse_fail(PULSE_ERR_IO, "cuda: %s: %s", what, cudaGetErrorString(e));
}

/* Whether T's data is memory of DEVICE (-1: any device, set to it); an error naming T if not. */
static int on_device(const pulse_tensor *t, int *device)
{
    struct cudaPointerAttributes a;
    if (!t->nbytes)
        return 0;
    cudaError_t e = cudaPointerGetAttributes(&a, t->data);
    if (e != cudaSuccess || (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged)) {
        cudaGetLastError();   /* a host pointer is an answer here, not a sticky error */
        return pulse_fail(PULSE_ERR_INVALID, "tensor %s: its data is not CUDA device memory", t->name);
    }
    if (*device >= 0 && a.device != *device)
        return pulse_fail(PULSE_ERR_INVALID, "tensor %s: on device %d, the others on device %d", t->name, a.device,
                          *device);
    *device = a.device;
    return 0;
}

void cuda_changes_close(cuda_changes **dp)
{
    if (!dp || !*dp)
        return;
    cuda_changes *d = *dp;
    for (size_t i = 0; d->base && i < d->n; i++)
        cudaFree(d->base[i]);
    free(d->base);
    free(d->nelems);
    cudaFree(d->d_idx);
    cudaFree(d->d_count);
    cudaFree(d->d_val);
    cudaFree(d->d_delta);
    cudaFree(d->d_scratch);
    cudaFree(d->d_ptrs);
    cudaFree(d->d_lens);
    cudaFree(d->d_digests);
    free(d);
    *dp = NULL;
}

int cuda_changes_open(cuda_changes **out, const pulse_ckpt *base)
{
    *out = NULL;
    int devices = 0, r = pulse_cuda_device_count(&devices);   /* no driver or no device: UNSUPPORTED, said so */
    if (r)
        return r;
    cuda_changes *d = calloc(1, sizeof *d);
    const size_t n = pulse_ckpt_count(base);
    if (!d || !(d->base = calloc(n ? n : 1, sizeof *d->base)) || !(d->nelems = calloc(n ? n : 1, sizeof *d->nelems))) {
        if (d)
            free(d->base);
        free(d);
        return pulse_fail(PULSE_ERR_NOMEM, "device changes");
    }
    d->n = n;
    d->device = -1;
    for (size_t i = 0; !r && i < n; i++)
        r = on_device(pulse_ckpt_tensor(base, i), &d->device);
    if (d->device < 0)
        d->device = 0;
    cudaError_t se = r ? cudaSuccess : cudaSetDevice(d->device);
    if (se != cudaSuccess)
        r = cuda_fail(se, "selecting the tensors' device");
    uint64_t most = 1;
    for (size_t i = 0; !r && i < n; i++) {
        const pulse_tensor *t = pulse_ckpt_tensor(base, i);
        cudaError_t e;
        if (t->nelems > UINT32_MAX)
            r = pulse_fail(PULSE_ERR_LIMIT, "tensor %s: %llu elements; on a device each tensor has under 2^32", t->name,
                           (unsigned long long)t->nelems);
        else if ((e = cudaMalloc(&d->base[i], t->nbytes ? t->nbytes : 1)) != cudaSuccess)
            r = cuda_fail(e, "a copy of a tensor");
        else if ((e = cudaMemcpy(d->base[i], t->data, t->nbytes, cudaMemcpyDeviceToDevice)) != cudaSuccess)
            r = cuda_fail(e, "copying a tensor");
        d->nelems[i] = (uint32_t)t->nelems;
        most = t->nelems > most ? t->nelems : most;
    }
    d->range = most < RANGE ? most : RANGE;
    cudaError_t e = cudaSuccess;
    if (!r && ((e = cudaMalloc((void **)&d->d_idx, d->range * 4)) != cudaSuccess ||
               (e = cudaMalloc((void **)&d->d_count, 4)) != cudaSuccess ||
               (e = cudaMalloc(&d->d_val, d->range * 4)) != cudaSuccess ||
               (e = cudaMalloc(&d->d_delta, d->range * 4)) != cudaSuccess ||
               (e = cudaMalloc(&d->d_scratch, pulse_cu_scratch_bytes((size_t)d->range))) != cudaSuccess))
        r = cuda_fail(e, "diff buffers");
    if (r) {
        cuda_changes_close(&d);
        return r;
    }
    *out = d;
    return 0;
}

int cuda_changes_tensor(cuda_changes *d, size_t i, const pulse_tensor *now, changes_lists *l, uint64_t *count)
{
    const unsigned w = now->elem_size;
    uint64_t total = 0;
    int r = on_device(now, &d->device);
    if (r)
        return r;
    cudaError_t e = cudaSetDevice(d->device);
    if (e != cudaSuccess)
        return cuda_fail(e, "selecting the tensors' device");
    for (uint64_t off = 0; off < now->nelems; off += d->range) {
        const uint64_t len = now->nelems - off < d->range ? now->nelems - off : d->range;
        const uint8_t *a = (const uint8_t *)d->base[i] + off * w, *b = now->data + off * w;
        uint32_t k = 0;
        if ((e = (cudaError_t)pulse_cu_diff(w, a, b, (size_t)len, d->d_idx, d->d_val, d->d_count, d->d_scratch, NULL))
                != cudaSuccess ||
            (e = cudaMemcpy(&k, d->d_count, 4, cudaMemcpyDeviceToHost)) != cudaSuccess)
            return cuda_fail(e, "diff");
        if (!k)
            continue;
        r = changes_lists_reserve(l, total + k, w);
        if (r)
            return r;
        if ((e = (cudaError_t)pulse_cu_delta(w, a, (uint32_t)len, d->d_idx, k, d->d_val, d->d_delta, NULL))
                != cudaSuccess ||
            (e = cudaMemcpy(l->pos + total, d->d_idx, (size_t)k * 4, cudaMemcpyDeviceToHost)) != cudaSuccess ||
            (e = cudaMemcpy(l->values + total * w, d->d_val, (size_t)k * w, cudaMemcpyDeviceToHost)) != cudaSuccess ||
            (e = cudaMemcpy(l->deltas + total * w, d->d_delta, (size_t)k * w, cudaMemcpyDeviceToHost)) != cudaSuccess)
            return cuda_fail(e, "copying changes to the host");
        for (uint64_t q = total; q < total + k; q++) {   /* positions of the range, made the tensor's */
            l->pos[q] += (uint32_t)off;
            l->index[q] = l->pos[q];
        }
        total += k;
    }
    *count = total;
    return 0;
}

int cuda_changes_hash(cuda_changes *d, const pulse_ckpt *now, uint8_t (*hashes)[32])
{
    const size_t n = pulse_ckpt_count(now);
    size_t chunks = 0;
    for (size_t i = 0; i < n; i++)
        chunks += (size_t)((pulse_ckpt_tensor(now, i)->nbytes + PULSE_STATE_CHUNK - 1) / PULSE_STATE_CHUNK);
    const uint8_t **ptrs = malloc((chunks ? chunks : 1) * sizeof *ptrs);
    uint64_t *lens = malloc((chunks ? chunks : 1) * sizeof *lens);
    uint8_t *digests = malloc((chunks ? chunks : 1) * 32);
    int r = ptrs && lens && digests ? 0 : pulse_fail(PULSE_ERR_NOMEM, "state chunks");
    for (size_t i = 0, c = 0; !r && i < n; i++) {
        const pulse_tensor *t = pulse_ckpt_tensor(now, i);
        for (uint64_t off = 0; off < t->nbytes; off += PULSE_STATE_CHUNK, c++) {
            ptrs[c] = t->data + off;
            lens[c] = t->nbytes - off < PULSE_STATE_CHUNK ? t->nbytes - off : PULSE_STATE_CHUNK;
        }
    }
    cudaError_t e = cudaSetDevice(d->device);
    if (e != cudaSuccess)
        r = cuda_fail(e, "selecting the tensors' device");
    if (!r && chunks > d->hash_cap) {
        cudaFree(d->d_ptrs);
        cudaFree(d->d_lens);
        cudaFree(d->d_digests);
        d->d_ptrs = NULL, d->d_lens = NULL, d->d_digests = NULL, d->hash_cap = 0;
        if ((e = cudaMalloc((void **)&d->d_ptrs, chunks * sizeof *ptrs)) != cudaSuccess ||
            (e = cudaMalloc((void **)&d->d_lens, chunks * sizeof *lens)) != cudaSuccess ||
            (e = cudaMalloc((void **)&d->d_digests, chunks * 32)) != cudaSuccess)
            r = cuda_fail(e, "hash buffers");
        else
            d->hash_cap = chunks;
    }
    if (!r && chunks &&
        ((e = cudaMemcpy(d->d_ptrs, ptrs, chunks * sizeof *ptrs, cudaMemcpyHostToDevice)) != cudaSuccess ||
         (e = cudaMemcpy(d->d_lens, lens, chunks * sizeof *lens, cudaMemcpyHostToDevice)) != cudaSuccess ||
         (e = (cudaError_t)pulse_cu_sha256_many(d->d_ptrs, d->d_lens, chunks, d->d_digests, NULL)) != cudaSuccess ||
         (e = cudaMemcpy(digests, d->d_digests, chunks * 32, cudaMemcpyDeviceToHost)) != cudaSuccess))
        r = cuda_fail(e, "hashing state chunks");
    for (size_t i = 0, c = 0; !r && i < n; i++) {
        const pulse_tensor *t = pulse_ckpt_tensor(now, i);
        ckpt_tensor_hash_from(t, digests + 32 * c, hashes[i]);
        c += (size_t)((t->nbytes + PULSE_STATE_CHUNK - 1) / PULSE_STATE_CHUNK);
    }
    free(ptrs);
    free(lens);
    free(digests);
    return r;
}

int cuda_changes_accept(cuda_changes *d, size_t i, const changes_lists *l, uint64_t count)
{
    cudaError_t e = cudaSetDevice(d->device);
    if (e != cudaSuccess)
        return cuda_fail(e, "selecting the tensors' device");
    for (uint64_t at = 0; at < count; at += d->range) {
        const uint64_t k = count - at < d->range ? count - at : d->range;
        const unsigned w = l->width;
        if ((e = cudaMemcpy(d->d_idx, l->pos + at, (size_t)k * 4, cudaMemcpyHostToDevice)) != cudaSuccess ||
            (e = cudaMemcpy(d->d_val, l->values + at * w, (size_t)k * w, cudaMemcpyHostToDevice)) != cudaSuccess ||
            (e = (cudaError_t)pulse_cu_scatter(w, d->base[i], d->nelems[i], d->d_idx, (size_t)k, d->d_val, NULL))
                != cudaSuccess)
            return cuda_fail(e, "writing changes into the base");
    }
    if ((e = cudaDeviceSynchronize()) != cudaSuccess)
        return cuda_fail(e, "writing changes into the base");
    return 0;
}
