/* SPDX-License-Identifier: Apache-2.0 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE   /* RUSAGE_THREAD */
#endif
/* Verifying and applying a patch: everything is checked in a first pass, the target is written only in the second. */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "base/fail.h"
#include "node/checkpoint/ckpt_internal.h"
#include "node/parallel.h"
#include "node/patch/patch_internal.h"

typedef struct apply_job {
    const pulse_patch *p;
    pulse_ckpt *target;
    const pulse_ckpt *base;   /* pass 1: the target in the patch's base state, for context-coded chunks; may be NULL */
    int write;
    int checked;        /* pass 1 already checked every chunk of p */
    patch_cache *cache; /* pass 1 fills it, pass 2 adds from it; may be NULL */
    patch_populate populate; /* the target's pages made writable ahead of the writes */
    patch_pool *pool;
    const size_t *runs; /* pass 1: run j is chunks runs[j] .. runs[j + 1] - 1 */
} apply_job;

void patch_chunk_scatter(const pulse_patch *p, const patch_chunk *c, const patch_scratch *s, uint8_t *dst)
{
    const pulse_kernels *k = pulse_kernels_get();
    const patch_tensor *t = &p->tensors[c->tensor];
    if (t->dtype == PULSE_DT_OPAQUE) {
        memcpy(dst, s->vals, c->len);
        return;
    }
    int ulp = p->values == PULSE_VALUES_ULP;
    switch (t->unit) {
    case 1:
        if (ulp) k->ulp_apply8(dst, s->idx, c->count, s->vals);
        else k->scatter8(dst, s->idx, c->count, s->vals);
        break;
    case 2:
        if (ulp) k->ulp_apply16((uint16_t *)dst, s->idx, c->count, (const uint16_t *)s->vals);
        else k->scatter16((uint16_t *)dst, s->idx, c->count, (const uint16_t *)s->vals);
        break;
    default:
        if (ulp) k->ulp_apply32((uint32_t *)dst, s->idx, c->count, (const uint32_t *)s->vals);
        else k->scatter32((uint32_t *)dst, s->idx, c->count, (const uint32_t *)s->vals);
        break;
    }
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23   /* Linux 5.14 */
#endif

/* Makes the pages of [dst, dst+n) present and writable in one call before the chunk is
 * written: in a MAP_SHARED file mapping the first write to each page otherwise takes a fault
 * of its own (with ~5% of values changed every page is written). Without kernel support, or
 * on memory that is not a mapping, the call fails and the writes fault as before. */
static void populate_write(uint8_t *dst, size_t n)
{
    static _Atomic long page_size;   /* every worker may be first: an atomic, not a plain static */
    long page = atomic_load_explicit(&page_size, memory_order_relaxed);
    if (!page) {
        page = sysconf(_SC_PAGESIZE) > 0 ? sysconf(_SC_PAGESIZE) : 4096;
        atomic_store_explicit(&page_size, page, memory_order_relaxed);
    }
    uintptr_t lo = (uintptr_t)dst & ~(uintptr_t)(page - 1), hi = (uintptr_t)dst + n;
    (void)madvise((void *)lo, hi - lo, MADV_POPULATE_WRITE);
}

/* Minor faults of the calling thread so far. */
static long thread_faults(void)
{
    struct rusage u;
    return getrusage(RUSAGE_THREAD, &u) == 0 ? u.ru_minflt : 0;
}

void patch_populate_init(patch_populate *pp)
{
    /* PULSE_APPLY_POPULATE: "0" never, "1" always, unset: when the writes are seen to fault. */
    const char *e = getenv("PULSE_APPLY_POPULATE");
    pp->mode = !e || !*e ? 2 : !strcmp(e, "0") ? 0 : !strcmp(e, "1") ? 1 : 2;
    atomic_init(&pp->populating, 0);
    atomic_init(&pp->probes, 4);
}

long patch_populate_begin(patch_populate *pp, uint8_t *dst, size_t span, uint64_t count)
{
    /* Populating only pays where nearly every page gets a write (a change per page on average):
     * it also dirties the pages nothing is written to. And only where the writes would fault: a
     * fresh mapping, or one write-protected again by msync. A mapping already written since (a
     * node applying twice without a sync, the benchmark's rounds) has writable pages, and the
     * call then costs ~1 us a page for nothing. Mode 2 measures the faults of the first chunks
     * it writes and populates the rest once they fault on more than an eighth of their pages. */
    size_t pages = span / 4096;
    int want = pp->mode && count >= pages && pages > 0;
    long f0 = -1;
    if (want && pp->mode == 2 && !atomic_load_explicit(&pp->populating, memory_order_relaxed)) {
        want = 0;
        if (atomic_fetch_sub_explicit(&pp->probes, 1, memory_order_relaxed) > 0)
            f0 = thread_faults();
    }
    if (want)
        populate_write(dst, span);
    return f0;
}

void patch_populate_end(patch_populate *pp, long f0, size_t span)
{
    if (f0 >= 0 && (size_t)(thread_faults() - f0) * 8 > span / 4096)
        atomic_store_explicit(&pp->populating, 1, memory_order_relaxed);
}

/* Pass 2's writing of chunk c into dst: from pass 1's cache when it is there, else the
 * chunk is read and decoded again (the common case in one fused loop). */
static int write_chunk(apply_job *a, size_t i, patch_scratch *s, uint8_t *dst)
{
    const patch_chunk *c = &a->p->chunks[i];
    int err = patch_write_cached_chunk(a->p, i, s, a->cache, dst);
    if (err != 1)
        return err;
    if (a->p->version >= 5) {
        /* a chunk may be context-coded: decoded against dst, which still holds the base */
        const uint8_t *bytes;
        if ((err = patch_chunk_bytes(a->p, c, s, 0, &bytes)) == 0
            && (err = patch_decode_bytes_base(a->p, c, s, bytes, dst)) == 0)
            patch_chunk_scatter(a->p, c, s, dst);
        return err;
    }
    err = patch_apply_checked_chunk(a->p, c, s, dst);
    if (err == 1)
        err = patch_decode_checked_chunk(a->p, c, s);
    else if (err == 2)
        err = 0;   /* decoded by the fused path, not applied */
    else
        return err;
    if (!err)
        patch_chunk_scatter(a->p, c, s, dst);
    return err;
}

/* Pass 1 (nothing written) a run of chunks a job: read and their digests computed together. */
static int check_run(void *ctx, size_t j)
{
    apply_job *a = ctx;
    int err = 0;
    patch_scratch *s = patch_pool_take(a->pool, &err);
    if (!s)
        return err;
    err = patch_check_run(a->p, a->runs[j], a->runs[j + 1] - a->runs[j], s, a->cache, a->base);
    patch_pool_give(a->pool, s);
    return err;
}

/* Cuts p's chunks into pass 1's runs (PATCH_RUN_MOST, PATCH_RUN_BYTES, each contiguous in the
 * data section so that one read brings it) and, with more than one thread, no larger than a
 * quarter of each thread's share of the bytes, so that threads taking runs as they finish end
 * close together. runs has room for nchunks + 1 entries;
 * returns the count. */
static size_t cut_runs(const pulse_patch *p, int threads, size_t *runs)
{
    uint64_t total = 0;
    for (size_t i = 0; i < p->nchunks; i++)
        total += patch_chunk_coded(&p->chunks[i]);
    uint64_t most = threads > 1 ? total / (4 * (uint64_t)threads) : PATCH_RUN_BYTES;
    if (most > PATCH_RUN_BYTES)
        most = PATCH_RUN_BYTES;
    size_t n = 0;
    for (size_t i = 0; i < p->nchunks;) {
        runs[n++] = i;
        uint64_t bytes = patch_chunk_coded(&p->chunks[i]);
        size_t k = 1;
        while (i + k < p->nchunks && k < PATCH_RUN_MOST && patch_chunk_follows(p, i + k)) {
            uint64_t next = patch_chunk_coded(&p->chunks[i + k]);
            if (bytes + next > most)
                break;
            bytes += next;
            k++;
        }
        i += k;
    }
    runs[n] = p->nchunks;
    return n;
}

static int apply_chunk(void *ctx, size_t i)
{
    apply_job *a = ctx;
    const patch_chunk *c = &a->p->chunks[i];
    int err = 0;
    patch_scratch *s = patch_pool_take(a->pool, &err);
    if (!s)
        return err;
    const unsigned unit = a->p->tensors[c->tensor].unit;
    uint8_t *home = pulse_ckpt_tensor(a->target, c->tensor)->data + c->first * unit, *dst = home;
    size_t span = (size_t)c->len * unit;
    if (patch_misaligned(home, unit)) {
        if (!(dst = patch_scratch_bounce(s, a->p->chunk_elems))) {
            patch_pool_give(a->pool, s);
            return PULSE_ERR_NOMEM;   /* the detail is set */
        }
        memcpy(dst, home, span);
    }
    if (!a->checked) {
        /* Decode (digests checked) then scatter: a benchmark's unfused reference. */
        if ((err = patch_decode_chunk_base(a->p, c, s, dst)) == 0)
            patch_chunk_scatter(a->p, c, s, dst);
    } else {
        long f0 = patch_populate_begin(&a->populate, home, span, c->count);
        err = write_chunk(a, i, s, dst);
        patch_populate_end(&a->populate, f0, span);
    }
    if (!err && dst != home)
        memcpy(home, dst, span);
    patch_pool_give(a->pool, s);
    return err;
}

static int run_with(const pulse_patch *p, pulse_ckpt *target, int write, int checked, int threads,
                    patch_cache *cache, patch_pool *pool)
{
    apply_job a = { .p = p, .target = target, .base = target, .write = write, .checked = checked, .cache = cache,
                    .pool = pool };
    patch_populate_init(&a.populate);
    if (write)
        return pulse_parallel_for(p->nchunks, threads, apply_chunk, &a);
    size_t *runs = malloc((p->nchunks + 1) * sizeof *runs);
    if (!runs)
        return pulse_fail(PULSE_ERR_NOMEM, "pass 1 runs (%zu chunks)", p->nchunks);
    size_t n = cut_runs(p, patch_threads(threads), runs);
    a.runs = runs;
    int err = pulse_parallel_for(n, threads, check_run, &a);
    free(runs);
    return err;
}

static void pool_give(patch_pool *pool, patch_pool *own, const pulse_patch *p)
{
    uint64_t most = 0;
    for (size_t i = 0; i < p->nchunks; i++)
        most = p->chunks[i].count > most ? p->chunks[i].count : most;
    patch_pool_give_kept(pool, own, most);
}

void patch_apply_release(void)
{
    patch_pool_release_kept(PATCH_KEPT_APPLY);
    patch_cache_release();
}

static int run(const pulse_patch *p, pulse_ckpt *target, int write, int checked, int threads,
               patch_cache *cache)
{
    int err = 0;
    patch_pool own, *pool = patch_pool_take_kept(PATCH_KEPT_APPLY, threads, p->chunk_elems, &own, &err);
    if (!pool)
        return err;
    err = run_with(p, target, write, checked, threads, cache, pool);
    pool_give(pool, &own, p);
    return err;
}

int patch_run_chunks(const pulse_patch *p, pulse_ckpt *target, int write, int threads)
{
    return run(p, target, write, 0, threads, NULL);
}

int patch_run_checked_chunks(const pulse_patch *p, pulse_ckpt *target, int threads)
{
    return run(p, target, 1, 1, threads, NULL);
}

int patch_run_pass1(const pulse_patch *p, pulse_ckpt *base, int threads, patch_cache *cache)
{
    return run(p, base, 0, 0, threads, cache);
}

int patch_run_pass2(const pulse_patch *p, pulse_ckpt *target, int threads, const patch_cache *cache)
{
    /* Pass 2 only reads the cache; the job's pointer is not const because pass 1 fills it. */
    return run(p, target, 1, 1, threads, (patch_cache *)cache);
}

int pulse_patch_verify(const pulse_patch *p, const pulse_ckpt *base, int threads)
{
    if (!p)
        return pulse_fail(PULSE_ERR_INVALID, "pulse_patch_verify: NULL patch");
    int err = base ? patch_check_layout(p, base) : 0;
    if (err || atomic_load_explicit(&p->verified, memory_order_acquire))
        return err;
    err = p->present ? patch_slice_verify(p, threads) : patch_run_chunks(p, NULL, 0, threads);
    /* The field caches a fact about bytes nobody else can change; the handle stays logically const. */
    if (!err && p->fd < 0)
        atomic_store_explicit(&((pulse_patch *)p)->verified, 1, memory_order_release);
    return err;
}

void pulse_patch_apply_opts_default(pulse_patch_apply_opts *o)
{
    memset(o, 0, sizeof *o);
    o->size = sizeof *o;
}

int pulse_patch_apply(const pulse_patch *p, pulse_ckpt *target, int threads)
{
    pulse_patch_apply_opts o;
    pulse_patch_apply_opts_default(&o);
    o.threads = threads;
    return pulse_patch_apply_ex(p, target, &o);
}

int pulse_patch_apply_ex(const pulse_patch *p, pulse_ckpt *target, const pulse_patch_apply_opts *opts)
{
    pulse_patch_apply_opts o;
    pulse_patch_apply_opts_default(&o);
    if (opts) {
        if (opts->size < sizeof o.size || opts->size > sizeof o)
            return pulse_fail(PULSE_ERR_INVALID, "pulse_patch_apply_opts: size %zu", opts->size);
        memcpy(&o, opts, opts->size);
        o.size = sizeof o;
    }
    if (!p || !target)
        return pulse_fail(PULSE_ERR_INVALID, "pulse_patch_apply: NULL argument");
    if (p->present)
        return pulse_fail(PULSE_ERR_INVALID, "pulse_patch_apply: a sliced patch (its head and some chunks) cannot "
                          "be applied to a whole checkpoint");
    /* A read-only mapping would fault on the first store; a read-only wrap of caller memory
     * would be written behind its owner's back. */
    if (!(target->flags & PULSE_CKPT_WRITE))
        return pulse_fail(PULSE_ERR_INVALID, "pulse_patch_apply: the target checkpoint was not opened writable");
    const int threads = o.threads;
    int err = patch_check_layout(p, target);
    if (err)
        return err;
    uint8_t id[32];
    char h1[65], h2[65];
    if (o.trust_base_id)
        memcpy(id, o.trust_base_id, 32);
    else if ((err = pulse_ckpt_state_id(target, threads, id)) != 0)
        return err;
    if (memcmp(id, p->base_id, 32) != 0)
        return pulse_fail(PULSE_ERR_MISMATCH, "patch is for base %.16s.., the checkpoint is %.16s..",
                          pulse_id_hex(p->base_id, h1), pulse_id_hex(id, h2));
    for (size_t i = 0; i < p->ntensors; i++)
        if (p->tensors[i].ncoded && !(pulse_ckpt_tensor(target, i)->data))
            return pulse_fail(PULSE_ERR_INVALID, "tensor %s: checkpoint not writable", p->tensors[i].name);
    /* Pass 1 checks every chunk (digest, frames, gaps, values) and keeps the decompressed
     * streams of as many as the capped cache holds; nothing is written unless all pass.
     * Pass 2 adds from the cache, and reads, checks and decodes again only the chunks past
     * its cap (their digests again when they come from a file, which may have changed). */
    patch_cache cache;
    if ((err = patch_cache_open(&cache, p)) != 0)
        return err;
    patch_pool own, *pool = patch_pool_take_kept(PATCH_KEPT_APPLY, threads, p->chunk_elems, &own, &err);
    if (!pool) {
        patch_cache_close(&cache);
        return err;
    }
    err = run_with(p, target, 0, 0, threads, &cache, pool);   /* reads the target as the base, writes nothing */
    if (!err)
        err = run_with(p, target, 1, 1, threads, &cache, pool);
    pool_give(pool, &own, p);
    patch_cache_close(&cache);
    if (err)
        return err;
    if (!o.skip_result_check) {
        if ((err = pulse_ckpt_state_id(target, threads, id)) != 0)
            return err;
        if (memcmp(id, p->result_id, 32) != 0)
            return pulse_fail(PULSE_ERR_CORRUPT, "result state %.16s.. is not the patch's result %.16s.. (target was written)",
                              pulse_id_hex(id, h1), pulse_id_hex(p->result_id, h2));
    }
    /* Last: the header of a target whose tensors are not the result is never touched. */
    if (p->metadata && (err = ckpt_set_metadata(target, p->metadata)) != 0)
        return pulse_fail(err, "writing the result's metadata: %s (target was written)", pulse_last_error());
    return 0;
}
