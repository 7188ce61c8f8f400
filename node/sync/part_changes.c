/* SPDX-License-Identifier: Apache-2.0 */
/* pulse_changes: a part's changes step by step, found where its tensors live (on the host here, on a GPU through node/cuda), for pulse_publisher_publish_changes. */
#include <stdlib.h>
#include <string.h>

#include "base/fail.h"
#include "node/checkpoint/ckpt_internal.h"
#include "node/cuda/cuda_changes.h"
#include "node/kernels/kernels.h"
#include "node/parallel.h"
#include "node/patch/patch_changes.h"
#include "node/sync/part_changes.h"
#include "pulseweights/sync.h"

/* Elements one job of the host's find compares. */
#define FIND_CHUNK ((uint64_t)1 << 20)

struct pulse_changes {
    int where;
    pulse_ckpt *layout;          /* names, dtypes, shapes in name order (no data) */
    uint8_t **base;              /* host: a copy of each tensor's bytes */
    cuda_changes *dev;           /* device: the copies on the GPU */
    changes_lists *lists;
    pulse_tensor_changes *out;
    int found;                   /* out holds changes not yet accepted */
    int broken;                  /* an accept failed midway: the base is neither state */
};

int changes_lists_reserve(changes_lists *l, uint64_t k, unsigned width)
{
    l->width = width;
    if (k <= l->cap)
        return 0;
    int64_t *index = realloc(l->index, k * sizeof *index);
    if (index)
        l->index = index;
    uint8_t *values = index ? realloc(l->values, k * width) : NULL;
    if (values)
        l->values = values;
    uint8_t *deltas = values ? realloc(l->deltas, k * width) : NULL;
    if (deltas)
        l->deltas = deltas;
    uint32_t *pos = deltas ? realloc(l->pos, k * sizeof *pos) : NULL;
    if (!pos)
        return pulse_fail(PULSE_ERR_NOMEM, "change lists of %llu elements", (unsigned long long)k);
    l->pos = pos;
    l->cap = k;
    return 0;
}

static void lists_free(changes_lists *l)
{
    free(l->index);
    free(l->values);
    free(l->deltas);
    free(l->pos);
}

void pulse_changes_close(pulse_changes **cp)
{
    if (!cp || !*cp)
        return;
    pulse_changes *c = *cp;
    size_t n = c->layout ? pulse_ckpt_count(c->layout) : 0;
    for (size_t i = 0; i < n; i++) {
        if (c->base)
            free(c->base[i]);
        if (c->lists)
            lists_free(&c->lists[i]);
    }
    free(c->base);
    free(c->lists);
    free(c->out);
    cuda_changes_close(&c->dev);
    pulse_ckpt_close(&c->layout);
    free(c);
    *cp = NULL;
}

/* T's name, dtype and shape as a pulse_tensor_changes entry names them (its strings T's). */
static pulse_mem_tensor layout_entry(const pulse_tensor *t)
{
    pulse_mem_tensor m = { .name = t->name, .dtype_name = t->dtype_name, .ndim = t->ndim, .nbytes = t->nbytes };
    memcpy(m.shape, t->shape, sizeof m.shape);
    return m;
}

/* NOW's tensors (n, in any order) as a checkpoint in name order, their data where they are. */
static int wrap_now(const pulse_mem_tensor *t, size_t n, pulse_ckpt **w)
{
    if (n && !t)
        return pulse_fail(PULSE_ERR_INVALID, "no tensors");
    return pulse_ckpt_wrap(w, t, n, PULSE_CKPT_READ);
}

PULSE_API int pulse_changes_open(pulse_changes **out, const pulse_mem_tensor *tensors, size_t n, int where)
{
    pulse_clear_error();
    if (!out || (where != PULSE_MEM_HOST && where != PULSE_MEM_CUDA))
        return pulse_fail(PULSE_ERR_INVALID, "pulse_changes_open: bad arguments");
    *out = NULL;
    pulse_ckpt *w = NULL;
    int r = wrap_now(tensors, n, &w);
    if (r)
        return r;
    pulse_changes *c = calloc(1, sizeof *c);
    if (!c || !(c->lists = calloc(n ? n : 1, sizeof *c->lists)) || !(c->out = calloc(n ? n : 1, sizeof *c->out)))
        r = pulse_fail(PULSE_ERR_NOMEM, "changes");
    for (size_t i = 0; !r && i < n; i++) {
        const pulse_tensor *t = pulse_ckpt_tensor(w, i);
        if (t->dtype == PULSE_DT_OPAQUE)
            r = pulse_fail(PULSE_ERR_INVALID, "tensor %s: %s is not element-wise: a part found by its changes holds "
                           "BF16, F16, F32 or F8 tensors", t->name, t->dtype_name);
        c->out[i].tensor = layout_entry(t);
    }
    if (!r) {
        c->where = where;
        r = patch_changes_layout(c->out, n, &c->layout);
    }
    for (size_t i = 0; !r && i < n; i++)   /* the entries name the layout's strings, which outlive W */
        c->out[i].tensor = layout_entry(pulse_ckpt_tensor(c->layout, i));
    if (!r && where == PULSE_MEM_CUDA) {
        r = cuda_changes_open(&c->dev, w);
    } else if (!r) {
        if (!(c->base = calloc(n ? n : 1, sizeof *c->base)))
            r = pulse_fail(PULSE_ERR_NOMEM, "changes");
        for (size_t i = 0; !r && i < n; i++) {
            const pulse_tensor *t = pulse_ckpt_tensor(w, i);
            if (!(c->base[i] = malloc(t->nbytes ? t->nbytes : 1)))
                r = pulse_fail(PULSE_ERR_NOMEM, "a copy of tensor %s (%llu bytes)", t->name,
                               (unsigned long long)t->nbytes);
            else
                memcpy(c->base[i], t->data, t->nbytes);
        }
    }
    pulse_ckpt_close(&w);
    if (r) {
        pulse_changes_close(&c);
        return r;
    }
    *out = c;
    return 0;
}

/* The host's find: FIND_CHUNK elements a job, each job's positions kept, then laid end to end. */
typedef struct host_find {
    pulse_changes *c;
    const pulse_ckpt *now;
    size_t *job_tensor;          /* the tensor of each job */
    uint64_t *job_first;         /* its first element */
    uint32_t **job_pos;          /* its changed positions, relative to job_first */
    uint64_t *job_count;         /* its count */
    uint64_t *job_start;         /* where its changes start in its tensor's lists */
    ckpt_chunk_ids ids;          /* NOW's state chunks, hashed by the job that compares them */
} host_find;

static int find_job(void *ctx, size_t g)
{
    host_find *h = ctx;
    const size_t i = h->job_tensor[g];
    const pulse_tensor *t = pulse_ckpt_tensor(h->now, i);
    const unsigned w = t->elem_size;
    const uint64_t first = h->job_first[g];
    const size_t len = (size_t)(t->nelems - first < FIND_CHUNK ? t->nelems - first : FIND_CHUNK);
    uint32_t *pos = malloc((len + 64) * sizeof *pos);
    if (!pos)
        return pulse_fail(PULSE_ERR_NOMEM, "positions");
    const pulse_kernels *k = pulse_kernels_get();
    const uint8_t *a = h->c->base[i] + first * w, *b = t->data + first * w;
    size_t n;
    /* the copy is aligned (malloc); the caller's tensors are taken as their dtype's alignment */
    switch (w) {
    case 1: n = k->diff8(a, b, len, pos); break;
    case 2: n = k->diff16((const uint16_t *)(const void *)a, (const uint16_t *)(const void *)b, len, pos); break;
    default: n = k->diff32((const uint32_t *)(const void *)a, (const uint32_t *)(const void *)b, len, pos); break;
    }
    uint32_t *kept = realloc(pos, (n ? n : 1) * sizeof *pos);   /* held until laid out: the changes' size only */
    h->job_pos[g] = kept ? kept : pos;
    h->job_count[g] = n;
    /* a job is a whole number of state chunks (FIND_CHUNK elements are FIND_CHUNK * w bytes, a
     * multiple of PULSE_STATE_CHUNK): hashed while the diff left them in cache */
    const uint64_t k0 = first * w / PULSE_STATE_CHUNK, k1 = ((first + len) * w + PULSE_STATE_CHUNK - 1) / PULSE_STATE_CHUNK;
    ckpt_chunk_ids_hash_run(&h->ids, h->ids.first[i] + k0, (size_t)(k1 - k0));
    return 0;
}

/* Job g's changes into its tensor's lists from where they start there. */
static int lay_job(void *ctx, size_t g)
{
    host_find *h = ctx;
    const size_t i = h->job_tensor[g];
    const pulse_tensor *t = pulse_ckpt_tensor(h->now, i);
    const unsigned w = t->elem_size;
    changes_lists *l = &h->c->lists[i];
    const uint64_t first = h->job_first[g], at = h->job_start[g], n = h->job_count[g];
    const uint8_t *a = h->c->base[i], *b = t->data;
    for (uint64_t q = 0; q < n; q++) {
        uint64_t e = first + h->job_pos[g][q];
        uint32_t va = 0, vb = 0, d;
        memcpy(&va, a + e * w, w);
        memcpy(&vb, b + e * w, w);
        d = vb - va;   /* modulo 2^(8w) once cut to w bytes (little-endian) */
        l->index[at + q] = (int64_t)e;
        memcpy(l->values + (at + q) * w, &vb, w);
        memcpy(l->deltas + (at + q) * w, &d, w);
    }
    return 0;
}

static int host_find_all(pulse_changes *c, const pulse_ckpt *now)
{
    const size_t n = pulse_ckpt_count(now);
    size_t jobs = 0;
    for (size_t i = 0; i < n; i++)
        jobs += (size_t)((pulse_ckpt_tensor(now, i)->nelems + FIND_CHUNK - 1) / FIND_CHUNK);
    host_find h = { .c = c, .now = now };
    h.job_tensor = malloc((jobs ? jobs : 1) * sizeof *h.job_tensor);
    h.job_first = malloc((jobs ? jobs : 1) * sizeof *h.job_first);
    h.job_pos = calloc(jobs ? jobs : 1, sizeof *h.job_pos);
    h.job_count = malloc((jobs ? jobs : 1) * sizeof *h.job_count);
    h.job_start = malloc((jobs ? jobs : 1) * sizeof *h.job_start);
    int r = h.job_tensor && h.job_first && h.job_pos && h.job_count && h.job_start ? 0
            : pulse_fail(PULSE_ERR_NOMEM, "find jobs");
    if (!r)
        r = ckpt_chunk_ids_open(&h.ids, now);
    for (size_t i = 0, g = 0; !r && i < n; i++)
        for (uint64_t e = 0; e < pulse_ckpt_tensor(now, i)->nelems; e += FIND_CHUNK, g++) {
            h.job_tensor[g] = i;
            h.job_first[g] = e;
        }
    if (!r)
        r = pulse_parallel_for(jobs, 0, find_job, &h);
    for (size_t i = 0, g = 0; !r && i < n; i++) {
        uint64_t k = 0;
        for (; g < jobs && h.job_tensor[g] == i; g++) {
            h.job_start[g] = k;
            k += h.job_count[g];
        }
        c->out[i].count = k;
        r = changes_lists_reserve(&c->lists[i], k, pulse_ckpt_tensor(now, i)->elem_size);
    }
    if (!r)
        r = pulse_parallel_for(jobs, 0, lay_job, &h);
    for (size_t g = 0; h.job_pos && g < jobs; g++)
        free(h.job_pos[g]);
    free(h.job_tensor);
    free(h.job_first);
    free(h.job_pos);
    free(h.job_count);
    free(h.job_start);
    uint8_t state[32];
    uint8_t (*hashes)[32] = r ? NULL : malloc((n ? n : 1) * 32);
    if (!r && !hashes)
        r = pulse_fail(PULSE_ERR_NOMEM, "tensor hashes");
    if (!r)
        ckpt_chunk_ids_state(&h.ids, state, (uint8_t *)hashes);
    for (size_t i = 0; !r && i < n; i++)
        memcpy(c->out[i].hash, hashes[i], 32);
    free(hashes);
    ckpt_chunk_ids_close(&h.ids);
    return r;
}

/* NOW's layout must be the base's: the same tensors, dtypes and shapes. */
static int same_layout(const pulse_changes *c, const pulse_ckpt *now)
{
    size_t n = pulse_ckpt_count(c->layout);
    if (pulse_ckpt_count(now) != n)
        return pulse_fail(PULSE_ERR_MISMATCH, "%zu tensors, the base has %zu", pulse_ckpt_count(now), n);
    for (size_t i = 0; i < n; i++) {
        const pulse_tensor *a = pulse_ckpt_tensor(c->layout, i), *b = pulse_ckpt_tensor(now, i);
        if (strcmp(a->name, b->name))
            return pulse_fail(PULSE_ERR_MISMATCH, "tensor %s is not in the base", strcmp(a->name, b->name) < 0 ? a->name : b->name);
        if (strcmp(a->dtype_name, b->dtype_name) || a->ndim != b->ndim ||
            memcmp(a->shape, b->shape, sizeof a->shape[0] * (size_t)a->ndim))
            return pulse_fail(PULSE_ERR_MISMATCH, "tensor %s: dtype or shape is not the base's", a->name);
    }
    return 0;
}

PULSE_API int pulse_changes_find(pulse_changes *c, const pulse_mem_tensor *now, size_t n,
                                 const pulse_tensor_changes **out)
{
    pulse_clear_error();
    if (!c || !out)
        return pulse_fail(PULSE_ERR_INVALID, "pulse_changes_find: bad arguments");
    *out = NULL;
    c->found = 0;
    if (c->broken)
        return pulse_fail(PULSE_ERR_INVALID, "the base of these changes was left half updated by a failed accept: "
                          "open them again from the tensors last published");
    pulse_ckpt *w = NULL;
    int r = wrap_now(now, n, &w);
    if (!r)
        r = same_layout(c, w);
    for (size_t i = 0; !r && !c->dev && i < n; i++) {
        const pulse_tensor *t = pulse_ckpt_tensor(w, i);
        if ((uintptr_t)t->data % t->elem_size)
            r = pulse_fail(PULSE_ERR_INVALID, "tensor %s: its data is not aligned to its %u-byte elements", t->name,
                           t->elem_size);
    }
    if (!r && c->dev) {
        for (size_t i = 0; !r && i < n; i++)
            r = cuda_changes_tensor(c->dev, i, pulse_ckpt_tensor(w, i), &c->lists[i], &c->out[i].count);
        uint8_t (*hashes)[32] = r ? NULL : malloc((n ? n : 1) * 32);
        if (!r && !hashes)
            r = pulse_fail(PULSE_ERR_NOMEM, "tensor hashes");
        if (!r)
            r = cuda_changes_hash(c->dev, w, hashes);
        for (size_t i = 0; !r && i < n; i++)
            memcpy(c->out[i].hash, hashes[i], 32);
        free(hashes);
    } else if (!r) {
        r = host_find_all(c, w);
    }
    pulse_ckpt_close(&w);
    if (r)
        return r;
    for (size_t i = 0; i < n; i++) {
        c->out[i].index = c->lists[i].index;
        c->out[i].values = c->lists[i].values;
        c->out[i].deltas = c->lists[i].deltas;
    }
    c->found = 1;
    *out = c->out;
    return 0;
}

PULSE_API int pulse_changes_accept(pulse_changes *c)
{
    pulse_clear_error();
    if (!c || !c->found)
        return pulse_fail(PULSE_ERR_INVALID, "pulse_changes_accept: no changes found since the last accept");
    int r = 0;
    for (size_t i = 0; !r && i < pulse_ckpt_count(c->layout); i++) {
        const pulse_tensor_changes *t = &c->out[i];
        if (c->dev) {
            r = cuda_changes_accept(c->dev, i, &c->lists[i], t->count);
            continue;
        }
        const unsigned w = pulse_ckpt_tensor(c->layout, i)->elem_size;
        for (uint64_t q = 0; q < t->count; q++)
            memcpy(c->base[i] + (uint64_t)t->index[q] * w, c->lists[i].values + q * w, w);
    }
    c->found = 0;
    c->broken = r != 0;
    return r;
}
