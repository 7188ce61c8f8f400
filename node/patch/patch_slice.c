/* SPDX-License-Identifier: Apache-2.0 */
/* A sliced patch: its head, and only the chunks a reader holding part of each tensor asked for, supplied by byte range and checked against their digests. */
#include <stdlib.h>
#include <string.h>

#include "base/fail.h"
#include "crypto/sha256.h"
#include "node/parallel.h"
#include "node/patch/patch_internal.h"

#define SLICE_RANGE_DEFAULT (8u << 20)   /* bytes one merged range may span */

static int need_sliced(const pulse_patch *p, const char *fn)
{
    if (!p)
        return pulse_fail(PULSE_ERR_INVALID, "%s: NULL patch", fn);
    if (!p->present)
        return pulse_fail(PULSE_ERR_INVALID, "%s: not a sliced patch (open it with pulse_patch_open_head)", fn);
    return 0;
}

int pulse_patch_tensor_find(const pulse_patch *p, const char *name, size_t *i)
{
    if (!p || !name || !i)
        return pulse_fail(PULSE_ERR_INVALID, "pulse_patch_tensor_find: NULL argument");
    size_t lo = 0, hi = p->ntensors;   /* names are strictly ascending (checked at open) */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(p->tensors[mid].name, name);
        if (c == 0) {
            *i = mid;
            return 0;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return pulse_fail(PULSE_ERR_NOTFOUND, "the patch has no tensor %s", name);
}

int pulse_patch_want(pulse_patch *p, size_t i, uint64_t start, uint64_t stop)
{
    int err = need_sliced(p, "pulse_patch_want");
    if (err)
        return err;
    if (i >= p->ntensors)
        return pulse_fail(PULSE_ERR_INVALID, "pulse_patch_want: tensor index %zu of %zu", i, p->ntensors);
    const patch_tensor *t = &p->tensors[i];
    if (start >= stop || stop > t->nelems)
        return pulse_fail(PULSE_ERR_MISMATCH, "slice [%llu, %llu) of tensor %s, which has %llu elements",
                          (unsigned long long)start, (unsigned long long)stop, t->name,
                          (unsigned long long)t->nelems);
    /* OPAQUE tensors are coded by bytes, and packed sub-byte dtypes do not map elements to
     * whole bytes: those are wanted whole. */
    uint64_t lo = 0, hi = t->units;
    if (t->dtype != PULSE_DT_OPAQUE && patch_dtype_unit(t->dtype) != 0) {
        lo = start;
        hi = stop;
    }
    const uint64_t c0 = lo / p->chunk_elems, c1 = (hi - 1) / p->chunk_elems;
    for (size_t k = t->first_coded; k < t->first_coded + t->ncoded; k++)
        if (p->chunks[k].index >= c0 && p->chunks[k].index <= c1)
            p->wanted[k] = 1;
    return 0;
}

/* The i-th coded chunk in data order. */
static const patch_chunk *at_of(const pulse_patch *p, size_t i)
{
    return &p->chunks[patch_chunk_by_offset(p, i)];
}

size_t pulse_patch_missing(const pulse_patch *p, uint64_t max_bytes, pulse_patch_range *out, size_t cap)
{
    if (!p || !p->present)
        return 0;
    if (max_bytes == 0)
        max_bytes = SLICE_RANGE_DEFAULT;
    size_t n = 0;
    uint64_t cur_at = 0, cur_len = 0;   /* the range being built (n - 1), counted even past cap */
    for (size_t i = 0; i < p->nchunks; i++) {   /* in data order, so the ranges ascend */
        const size_t k = patch_chunk_by_offset(p, i);
        if (!p->wanted[k] || p->present[k])
            continue;
        const patch_chunk *c = &p->chunks[k];
        const uint64_t at = p->header_bytes + c->offset, len = patch_chunk_coded(c);
        /* Only neighbours in the data merge: the range ends where this chunk starts. */
        if (n && cur_at + cur_len == at && cur_len + len <= max_bytes) {
            cur_len += len;
        } else {
            n++;
            cur_at = at;
            cur_len = len;
        }
        if (n <= cap)
            out[n - 1] = (pulse_patch_range){ .offset = cur_at, .length = cur_len };
    }
    return n;
}

int pulse_patch_supply(pulse_patch *p, uint64_t offset, const void *bytes, size_t len)
{
    int err = need_sliced(p, "pulse_patch_supply");
    if (err)
        return err;
    if (!bytes || !len || offset < p->header_bytes || offset - p->header_bytes > p->data_len
        || len > p->data_len - (offset - p->header_bytes))
        return pulse_fail(PULSE_ERR_INVALID, "pulse_patch_supply: %zu bytes at %llu are not inside the data of "
                          "this %zu-byte patch", len, (unsigned long long)offset, p->len);
    const uint64_t lo = offset - p->header_bytes, hi = lo + len;
    /* The coded chunks inside [lo, hi): positions first .. last - 1 of the data order, found by
     * offset (chunks cover the data section without overlap, checked at open). */
    size_t a = 0, b = p->nchunks;
    while (a < b) {
        size_t mid = a + (b - a) / 2;
        if (at_of(p, mid)->offset < lo)
            a = mid + 1;
        else
            b = mid;
    }
    size_t first = a, last = a;
    while (last < p->nchunks && at_of(p, last)->offset + patch_chunk_coded(at_of(p, last)) <= hi)
        last++;
    const uint64_t end = last > first ? at_of(p, last - 1)->offset + patch_chunk_coded(at_of(p, last - 1)) : lo;
    if (first == p->nchunks || at_of(p, first)->offset != lo || end != hi)
        return pulse_fail(PULSE_ERR_INVALID, "pulse_patch_supply: bytes [%llu, %llu) of the patch do not start "
                          "and end on coded chunks", (unsigned long long)offset,
                          (unsigned long long)(offset + len));
    for (size_t i = first; i < last; i++) {
        const patch_chunk *c = at_of(p, i);
        uint8_t d[32];
        pulse_sha256((const uint8_t *)bytes + (c->offset - lo), patch_chunk_coded(c), d);
        if (memcmp(d, c->digest, 32) != 0)
            return pulse_fail(PULSE_ERR_CORRUPT, "tensor %s chunk %llu: digest mismatch (bytes %llu..%llu of the "
                              "patch)", p->tensors[c->tensor].name, (unsigned long long)c->index,
                              (unsigned long long)(p->header_bytes + c->offset),
                              (unsigned long long)(p->header_bytes + c->offset + patch_chunk_coded(c)));
    }
    uint8_t **held = realloc(p->held, (p->nheld + 1) * sizeof *held);
    if (!held)
        return pulse_fail(PULSE_ERR_NOMEM, "sliced patch ranges");
    p->held = held;
    uint8_t *copy = malloc(len);
    if (!copy)
        return pulse_fail(PULSE_ERR_NOMEM, "%zu bytes of a sliced patch", len);
    memcpy(copy, bytes, len);
    p->held[p->nheld++] = copy;
    for (size_t i = first; i < last; i++) {
        const size_t k = patch_chunk_by_offset(p, i);
        p->present[k] = copy + (p->chunks[k].offset - lo);
    }
    /* New chunks are not yet decoded: the next verify checks them. */
    atomic_store_explicit(&p->verified, 0, memory_order_release);
    return 0;
}

typedef struct slice_verify_job {
    const pulse_patch *p;
    patch_pool pool;
} slice_verify_job;

static int verify_chunk(void *ctx, size_t k)
{
    slice_verify_job *j = ctx;
    if (patch_chunk_absent(j->p, k))
        return 0;
    int err = 0;
    patch_scratch *s = patch_pool_take(&j->pool, &err);
    if (!s)
        return err;
    err = patch_verify_chunk(j->p, &j->p->chunks[k], s);
    patch_pool_give(&j->pool, s);
    return err;
}

int patch_slice_verify(const pulse_patch *p, int threads)
{
    slice_verify_job j = { .p = p };
    int err = patch_pool_init(&j.pool, threads, p->chunk_elems, 0);
    if (err)
        return err;
    err = pulse_parallel_for(p->nchunks, threads, verify_chunk, &j);
    patch_pool_free(&j.pool);
    return err;
}
