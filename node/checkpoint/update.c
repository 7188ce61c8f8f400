/* SPDX-License-Identifier: Apache-2.0 */
/* In-place update of a writable checkpoint to another one's tensor bytes (all, or the spans a diff found changed), writing only the blocks that differ. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/fail.h"
#include "node/checkpoint/ckpt_internal.h"
#include "node/parallel.h"

/* Blocks compared and copied: a page, so a block that is the same leaves its page clean and
 * the msync after the update writes back only what changed. Jobs: 1 MiB of a tensor. */
#define UPDATE_BLOCK ((uint64_t)4096)
#define UPDATE_JOB ((uint64_t)1 << 20)

typedef struct update_job {
    pulse_ckpt *dst;
    const pulse_ckpt *src;
    const ckpt_span *span;  /* the spans to update */
    uint64_t *job_start;    /* nspans + 1 prefix sums of each span's job count */
    size_t nspans;
    _Atomic uint64_t written;
} update_job;

static int update_part(void *ctx, size_t job)
{
    update_job *u = ctx;
    size_t lo = 0, hi = u->nspans;
    while (hi - lo > 1) {   /* the span with job_start[lo] <= job < job_start[lo + 1] */
        size_t mid = (lo + hi) / 2;
        if (u->job_start[mid] <= job)
            lo = mid;
        else
            hi = mid;
    }
    const ckpt_span *sp = &u->span[lo];
    const pulse_tensor *s = pulse_ckpt_tensor(u->src, sp->tensor), *d = pulse_ckpt_tensor(u->dst, sp->tensor);
    uint64_t end = sp->off + sp->len;
    uint64_t from = sp->off + (job - u->job_start[lo]) * UPDATE_JOB;
    uint64_t to = end - from < UPDATE_JOB ? end : from + UPDATE_JOB;
    uint64_t written = 0;
    for (uint64_t at = from; at < to; at += UPDATE_BLOCK) {
        size_t n = (size_t)(to - at < UPDATE_BLOCK ? to - at : UPDATE_BLOCK);
        if (memcmp(d->data + at, s->data + at, n) != 0) {
            memcpy(d->data + at, s->data + at, n);
            written += n;
        }
    }
    atomic_fetch_add(&u->written, written);
    return 0;
}

int ckpt_update_from(pulse_ckpt *dst, const pulse_ckpt *src, const ckpt_span *spans, size_t nspans, int threads,
                     uint64_t *written)
{
    if (!(dst->flags & PULSE_CKPT_WRITE))
        return pulse_fail(PULSE_ERR_INVALID, "ckpt_update_from: the target is not open for writing");
    size_t n = pulse_ckpt_count(src);
    if (pulse_ckpt_count(dst) != n)
        return pulse_fail(PULSE_ERR_MISMATCH, "layout changed: %zu tensors, the target has %zu", n,
                          pulse_ckpt_count(dst));
    /* Both lists are in canonical order: the same layout means the same tensor at each index. */
    for (size_t i = 0; i < n; i++) {
        const pulse_tensor *s = pulse_ckpt_tensor(src, i), *d = pulse_ckpt_tensor(dst, i);
        if (strcmp(s->name, d->name) != 0 || strcmp(s->dtype_name, d->dtype_name) != 0 || s->ndim != d->ndim
            || memcmp(s->shape, d->shape, sizeof s->shape[0] * (size_t)s->ndim) != 0 || s->nbytes != d->nbytes)
            return pulse_fail(PULSE_ERR_MISMATCH, "layout changed at tensor %s", s->name);
    }
    ckpt_span *whole = NULL;
    if (!spans) {   /* every tensor whole */
        if (!(whole = calloc(n ? n : 1, sizeof *whole)))
            return pulse_fail(PULSE_ERR_NOMEM, "update tables");
        for (size_t i = 0; i < n; i++)
            whole[i] = (ckpt_span){ .tensor = i, .off = 0, .len = pulse_ckpt_tensor(src, i)->nbytes };
        spans = whole;
        nspans = n;
    }
    for (size_t i = 0; i < nspans; i++)
        if (spans[i].tensor >= n || spans[i].off > pulse_ckpt_tensor(src, spans[i].tensor)->nbytes
            || spans[i].len > pulse_ckpt_tensor(src, spans[i].tensor)->nbytes - spans[i].off) {
            free(whole);
            return pulse_fail(PULSE_ERR_INVALID, "ckpt_update_from: span %zu is outside its tensor", i);
        }
    update_job u = { .dst = dst, .src = src, .span = spans, .nspans = nspans };
    if (!(u.job_start = calloc(nspans + 1, sizeof *u.job_start))) {
        free(whole);
        return pulse_fail(PULSE_ERR_NOMEM, "update tables");
    }
    for (size_t i = 0; i < nspans; i++)
        u.job_start[i + 1] = u.job_start[i] + (spans[i].len + UPDATE_JOB - 1) / UPDATE_JOB;
    int r = pulse_parallel_for((size_t)u.job_start[nspans], threads, update_part, &u);
    free(u.job_start);
    free(whole);
    if (!r && written)
        *written = atomic_load(&u.written);
    return r;
}
