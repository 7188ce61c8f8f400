/* SPDX-License-Identifier: Apache-2.0 */
/* pulse_cuda_apply_patch: host decode on several threads into pinned staging slots, overlapped with copies and scatters on a stream. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "base/fail.h"
#include "node/cuda/cuda_kernels.h"
#include "node/parallel.h"
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

/* The most device workers: each holds a scratch and a pinned staging slot sized for the
 * patch's largest chunk; past this the one stream, not the host decode, is the bound. */
#define CUDA_APPLY_WORKERS_MOST 16

/* One worker's staging slot: host pinned and device copies of a chunk's positions and values,
 * and the event after which both may be refilled. */
typedef struct stage {
    uint32_t *h_idx;
    uint8_t *h_val;
    uint32_t *d_idx;
    uint8_t *d_val;
    cudaEvent_t done;   /* created last: non-NULL once the slot is allocated */
    int pending;        /* done has been recorded and not yet waited for */
} stage;

static int stage_wait(stage *s)
{
    if (!s->pending)
        return 0;
    s->pending = 0;
    int e = cudaEventSynchronize(s->done);
    return e == cudaSuccess ? 0 : cuda_fail(e, "waiting for a staging buffer");
}

static void stage_free(stage *s)
{
    (void)stage_wait(s);
    if (s->done)
        cudaEventDestroy(s->done);
    cudaFreeHost(s->h_idx);
    cudaFreeHost(s->h_val);
    cudaFree(s->d_idx);
    cudaFree(s->d_val);
    memset(s, 0, sizeof(*s));
}

static int stage_init(stage *s, size_t idx_bytes, size_t val_bytes)
{
    int e;
    memset(s, 0, sizeof(*s));
    if ((e = cudaMallocHost((void **)&s->h_idx, idx_bytes)) != cudaSuccess
        || (e = cudaMallocHost((void **)&s->h_val, val_bytes)) != cudaSuccess
        || (e = cudaMalloc((void **)&s->d_idx, idx_bytes)) != cudaSuccess
        || (e = cudaMalloc((void **)&s->d_val, val_bytes)) != cudaSuccess
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
    int e, rc;
    /* the copies out of this slot (the worker's chunk before) must be done before it is refilled */
    if ((rc = stage_wait(st)) < 0)
        return rc;
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

/* The write: workers take chunks in turn, each decoding its next chunk on the host while the
 * stream copies and scatters its last one. Chunks cover disjoint elements, so the order in
 * which the workers queue them onto the one stream does not matter. */
typedef struct apply_run {
    const pulse_patch *p;
    void *const *ptrs;
    cudaStream_t stream;
    int device;                 /* the caller's: a host thread's current device is its own */
    size_t idx_bytes, val_bytes;
    patch_pool pool;
    stage *st;                  /* one per worker */
    atomic_size_t next;         /* the next chunk to take */
    atomic_int stop;            /* a worker failed: take no more */
} apply_run;

static int apply_worker(void *ctx, size_t w)
{
    apply_run *a = ctx;
    int rc = 0, e = cudaSetDevice(a->device);
    if (e != cudaSuccess)
        rc = cuda_fail(e, "selecting the device");
    patch_scratch *scr = rc ? NULL : patch_pool_take(&a->pool, &rc);
    stage *st = &a->st[w];
    while (scr && !atomic_load(&a->stop)) {
        size_t k = atomic_fetch_add(&a->next, 1);
        if (k >= a->p->nchunks)
            break;
        const patch_chunk *c = &a->p->chunks[k];
        if ((!st->done && (rc = stage_init(st, a->idx_bytes, a->val_bytes)) < 0)
            || (rc = patch_decode_checked_chunk(a->p, c, scr)) < 0
            || (rc = queue_chunk(a->p, c, scr, st, a->ptrs[c->tensor], a->stream)) < 0)
            break;
    }
    if (rc < 0)
        atomic_store(&a->stop, 1);
    if (scr)
        patch_pool_give(&a->pool, scr);
    return rc;
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

    apply_run a;
    memset(&a, 0, sizeof a);
    a.p = p;
    a.ptrs = device_ptrs;
    a.stream = (cudaStream_t)stream;
    int e = cudaGetDevice(&a.device);
    if (e != cudaSuccess)
        return cuda_fail(e, "reading the current device");
    /* staging for the largest chunk only: a sparse step's slots are small, so cheap to pin */
    a.idx_bytes = a.val_bytes = 1;
    for (size_t k = 0; k < p->nchunks; k++) {
        const patch_chunk *c = &p->chunks[k];
        const patch_tensor *t = &p->tensors[c->tensor];
        size_t ib = (size_t)c->count * sizeof(uint32_t);
        size_t vb = t->dtype == PULSE_DT_OPAQUE ? c->len : (size_t)c->count * t->unit;
        a.idx_bytes = ib > a.idx_bytes ? ib : a.idx_bytes;
        a.val_bytes = vb > a.val_bytes ? vb : a.val_bytes;
    }
    int workers = patch_threads(threads);
    if (workers > CUDA_APPLY_WORKERS_MOST)
        workers = CUDA_APPLY_WORKERS_MOST;
    if ((size_t)workers > p->nchunks)
        workers = (int)p->nchunks;
    atomic_init(&a.next, 0);
    atomic_init(&a.stop, 0);
    if ((rc = patch_pool_init(&a.pool, workers, p->chunk_elems, 0)) < 0)
        return rc;
    if (!(a.st = calloc((size_t)workers, sizeof *a.st))) {
        patch_pool_free(&a.pool);
        return pulse_fail(PULSE_ERR_NOMEM, "cuda apply: %d staging slots", workers);
    }
    rc = pulse_parallel_for((size_t)workers, workers, apply_worker, &a);
    /* the call returns when its work on the stream is complete: every slot's last chunk */
    for (int w = 0; w < workers; w++) {
        int r = stage_wait(&a.st[w]);
        if (r < 0 && rc == 0)
            rc = r;
        stage_free(&a.st[w]);   /* nothing left to wait for */
    }
    free(a.st);
    patch_pool_free(&a.pool);
    return rc;
}
