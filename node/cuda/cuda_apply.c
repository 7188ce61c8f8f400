/* SPDX-License-Identifier: Apache-2.0 */
/* pulse_cuda_apply_patch: host decode into pinned double buffers, overlapped with copies and scatters on a stream. */
#include <string.h>

#include <cuda_runtime.h>

#include "base/fail.h"
#include "node/cuda/cuda_kernels.h"
#include "node/patch/patch_internal.h"
#include "pulseweights/cuda.h"

static int cuda_fail(int e, const char *what)
{
    return pulse_fail(PULSE_ERR_IO, "cuda: %s: %s", what, cudaGetErrorString((cudaError_t)e));
}

int pulse_cuda_device_count(int *count)
{
    int c = 0;
    cudaError_t e = cudaGetDeviceCount(&c);
    if (count)
        *count = 0;
    if (e != cudaSuccess)
        return pulse_fail(PULSE_ERR_UNSUPPORTED, "no CUDA device: %s", cudaGetErrorString(e));
    if (c <= 0)
        return pulse_fail(PULSE_ERR_UNSUPPORTED, "no CUDA device");
    if (count)
        *count = c;
    return 0;
}

/* One staging slot: host pinned and device copies of a chunk's positions and values, and
 * the event after which both may be reused. */
typedef struct stage {
    uint32_t *h_idx;
    uint8_t *h_val;
    uint32_t *d_idx;
    uint8_t *d_val;
    cudaEvent_t done;
    int pending;        /* done has been recorded and not yet waited for */
} stage;

static void stage_free(stage *s)
{
    if (s->pending)
        cudaEventSynchronize(s->done);
    if (s->done)
        cudaEventDestroy(s->done);
    cudaFreeHost(s->h_idx);
    cudaFreeHost(s->h_val);
    cudaFree(s->d_idx);
    cudaFree(s->d_val);
    memset(s, 0, sizeof(*s));
}

static int stage_init(stage *s, uint32_t chunk_elems)
{
    /* values: at most chunk_elems units of 4 bytes (OPAQUE chunks: chunk_elems bytes) */
    size_t ib = (size_t)chunk_elems * sizeof(uint32_t), vb = (size_t)chunk_elems * 4u;
    int e;
    memset(s, 0, sizeof(*s));
    if ((e = cudaMallocHost((void **)&s->h_idx, ib)) != cudaSuccess
        || (e = cudaMallocHost((void **)&s->h_val, vb)) != cudaSuccess
        || (e = cudaMalloc((void **)&s->d_idx, ib)) != cudaSuccess
        || (e = cudaMalloc((void **)&s->d_val, vb)) != cudaSuccess
        || (e = cudaEventCreateWithFlags(&s->done, cudaEventDisableTiming)) != cudaSuccess) {
        stage_free(s);
        return cuda_fail(e, "allocating staging buffers");
    }
    return 0;
}

/* Queues chunk c (decoded in scr) through slot st onto the stream. */
static int queue_chunk(const pulse_patch *p, const patch_chunk *c, const patch_scratch *scr, stage *st,
                       uint8_t *tensor, cudaStream_t stream)
{
    const patch_tensor *t = &p->tensors[c->tensor];
    int e;
    if (st->pending) {
        /* the copies out of this slot (two chunks ago) must be done before it is refilled */
        if ((e = cudaEventSynchronize(st->done)) != cudaSuccess)
            return cuda_fail(e, "waiting for a staging buffer");
        st->pending = 0;
    }
    uint8_t *dst = tensor + c->first * t->unit;
    if (t->dtype == PULSE_DT_OPAQUE) {
        memcpy(st->h_val, scr->vals, c->len);
        e = cudaMemcpyAsync(dst, st->h_val, c->len, cudaMemcpyHostToDevice, stream);
    } else {
        size_t vbytes = (size_t)c->count * t->unit;
        memcpy(st->h_idx, scr->idx, (size_t)c->count * sizeof(uint32_t));
        memcpy(st->h_val, scr->vals, vbytes);
        e = cudaMemcpyAsync(st->d_idx, st->h_idx, (size_t)c->count * sizeof(uint32_t),
                            cudaMemcpyHostToDevice, stream);
        if (e == cudaSuccess)
            e = cudaMemcpyAsync(st->d_val, st->h_val, vbytes, cudaMemcpyHostToDevice, stream);
        if (e == cudaSuccess)
            e = p->values == PULSE_VALUES_ULP
                ? pulse_cu_ulp_apply(t->unit, dst, c->len, st->d_idx, c->count, st->d_val, stream)
                : pulse_cu_scatter(t->unit, dst, c->len, st->d_idx, c->count, st->d_val, stream);
    }
    if (e != cudaSuccess)
        return cuda_fail(e, "queueing a chunk");
    if ((e = cudaEventRecord(st->done, stream)) != cudaSuccess)
        return cuda_fail(e, "recording an event");
    st->pending = 1;
    return 0;
}

int pulse_cuda_apply_patch(const pulse_patch *p, void *const *device_ptrs, size_t n, void *stream,
                           int threads)
{
    if (!p || (n && !device_ptrs))
        return pulse_fail(PULSE_ERR_INVALID, "cuda apply: NULL patch or device pointers");
    if (n != p->ntensors)
        return pulse_fail(PULSE_ERR_INVALID, "cuda apply: %zu device pointers for a patch of %zu tensors",
                          n, p->ntensors);
    for (size_t i = 0; i < n; i++)
        if (p->tensors[i].ncoded && !device_ptrs[i])
            return pulse_fail(PULSE_ERR_INVALID, "cuda apply: tensor %s: NULL device pointer",
                              p->tensors[i].name);
    /* The device kernels access whole elements: a tensor laid out at the file's byte offset
     * (after a packed tensor of odd length) must first be copied to an aligned allocation. */
    for (size_t i = 0; i < n; i++)
        if (p->tensors[i].ncoded && p->tensors[i].dtype != PULSE_DT_OPAQUE
            && patch_misaligned(device_ptrs[i], p->tensors[i].unit))
            return pulse_fail(PULSE_ERR_INVALID, "cuda apply: tensor %s: device pointer not aligned to its %u-byte "
                              "elements", p->tensors[i].name, p->tensors[i].unit);
    /* A context-coded chunk decodes only against the base values, which are on the device:
     * refused before anything is written rather than at the first such chunk. */
    if (p->version >= PULSE_PATCH_VERSION_CONTEXT)
        return pulse_fail(PULSE_ERR_UNSUPPORTED, "cuda apply: a format-%u (context-coded) patch decodes only against "
                          "the base weights, which are on the device; publish without --context for GPU followers",
                          p->version);
    int rc = pulse_patch_verify(p, NULL, threads);
    if (rc < 0 || p->nchunks == 0)
        return rc;

    patch_pool pool;
    if ((rc = patch_pool_init(&pool, 1, p->chunk_elems, 0)) < 0)
        return rc;
    patch_scratch *scr = patch_pool_take(&pool, &rc);
    stage st[2];
    memset(st, 0, sizeof(st));
    if (!scr)
        goto out;
    if ((rc = stage_init(&st[0], p->chunk_elems)) < 0 || (rc = stage_init(&st[1], p->chunk_elems)) < 0)
        goto out;
    for (size_t k = 0; k < p->nchunks; k++) {
        const patch_chunk *c = &p->chunks[k];
        /* the host decode of this chunk overlaps the stream's work on the previous one */
        if ((rc = patch_decode_checked_chunk(p, c, scr)) < 0)
            goto out;
        if ((rc = queue_chunk(p, c, scr, &st[k & 1], device_ptrs[c->tensor], (cudaStream_t)stream)) < 0)
            goto out;
    }
    for (int b = 0; b < 2; b++) {
        if (st[b].pending) {
            int e = cudaEventSynchronize(st[b].done);
            st[b].pending = 0;
            if (e != cudaSuccess && rc == 0)
                rc = cuda_fail(e, "finishing the apply");
        }
    }
out:
    stage_free(&st[0]);
    stage_free(&st[1]);
    if (scr)
        patch_pool_give(&pool, scr);
    patch_pool_free(&pool);
    return rc;
}
