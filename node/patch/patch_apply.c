/* SPDX-License-Identifier: Apache-2.0 */
/* Verifying and applying a patch: everything is checked in a first pass, the target is written only in the second. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/fail.h"
#include "node/parallel.h"
#include "node/patch/patch_internal.h"

int patch_check_layout(const pulse_patch *p, const pulse_ckpt *c)
{
    size_t n = pulse_ckpt_count(c);
    for (size_t i = 0; i < p->ntensors || i < n; i++) {
        const patch_tensor *pt = i < p->ntensors ? &p->tensors[i] : NULL;
        const pulse_tensor *ct = i < n ? pulse_ckpt_tensor(c, i) : NULL;
        if (!pt)
            return pulse_fail(PULSE_ERR_MISMATCH, "layout changed: tensor %s is not in the patch", ct->name);
        if (!ct)
            return pulse_fail(PULSE_ERR_MISMATCH, "layout changed: tensor %s is not in the checkpoint", pt->name);
        if (strcmp(pt->name, ct->name) != 0)
            return pulse_fail(PULSE_ERR_MISMATCH, "layout changed: tensor %s is not in the %s",
                              strcmp(pt->name, ct->name) < 0 ? pt->name : ct->name,
                              strcmp(pt->name, ct->name) < 0 ? "checkpoint" : "patch");
        unsigned unit = patch_dtype_unit(ct->dtype);
        if (strcmp(pt->dtype_name, ct->dtype_name) != 0 || pt->elem_size != ct->elem_size
            || pt->dtype != (unit ? ct->dtype : PULSE_DT_OPAQUE))
            return pulse_fail(PULSE_ERR_MISMATCH, "layout changed: tensor %s dtype %s in the patch, %s in the checkpoint",
                              pt->name, pt->dtype_name, ct->dtype_name);
        if (pt->ndim != ct->ndim || memcmp(pt->shape, ct->shape, sizeof pt->shape[0] * (size_t)pt->ndim) != 0
            || pt->units * pt->unit != ct->nbytes)
            return pulse_fail(PULSE_ERR_MISMATCH, "layout changed: tensor %s shape differs", pt->name);
    }
    return 0;
}

typedef struct apply_job {
    const pulse_patch *p;
    pulse_ckpt *target;
    int write;
    int checked;        /* pass 1 already checked every digest of p */
    int populate;       /* fault the chunk's pages in with one madvise before writing */
    patch_pool pool;
} apply_job;

static void scatter(const pulse_patch *p, const patch_chunk *c, const patch_scratch *s, uint8_t *dst)
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
    static long page;
    if (!page)
        page = sysconf(_SC_PAGESIZE) > 0 ? sysconf(_SC_PAGESIZE) : 4096;
    uintptr_t lo = (uintptr_t)dst & ~(uintptr_t)(page - 1), hi = (uintptr_t)dst + n;
    (void)madvise((void *)lo, hi - lo, MADV_POPULATE_WRITE);
}

static int apply_chunk(void *ctx, size_t i)
{
    apply_job *a = ctx;
    const patch_chunk *c = &a->p->chunks[i];
    int err = 0;
    patch_scratch *s = patch_pool_take(&a->pool, &err);
    if (!s)
        return err;
    uint8_t *dst = a->write ? pulse_ckpt_tensor(a->target, c->tensor)->data
                                  + c->first * a->p->tensors[c->tensor].unit : NULL;
    size_t span = (size_t)c->len * a->p->tensors[c->tensor].unit;
    /* Only where nearly every page gets a write (a change per page on average): populating
     * also dirties the pages nothing is written to, which then go to disk for nothing. */
    if (dst && a->populate && (size_t)c->count >= span / 4096)
        populate_write(dst, span);
    /* Pass 2's common case decodes and adds in one loop; everything else decodes, then scatters. */
    err = a->checked && a->write ? patch_apply_checked_chunk(a->p, c, s, dst) : 1;
    if (err == 1)
        err = a->checked ? patch_decode_checked_chunk(a->p, c, s) : patch_decode_chunk(a->p, c, s);
    else if (err == 2)
        err = 0;   /* decoded by the fused path, not applied */
    else
        goto done;
    if (!err && a->write)
        scatter(a->p, c, s, dst);
done:
    patch_pool_give(&a->pool, s);
    return err;
}

static int run(const pulse_patch *p, pulse_ckpt *target, int write, int checked, int threads)
{
    const char *e = getenv("PULSE_APPLY_POPULATE");   /* "0" turns it off, for measuring */
    apply_job a = { .p = p, .target = target, .write = write, .checked = checked,
                    .populate = !(e && !strcmp(e, "0")) };
    int err = patch_pool_init(&a.pool, threads, p->chunk_elems, 0);
    if (err)
        return err;
    err = pulse_parallel_for(p->nchunks, threads, apply_chunk, &a);
    patch_pool_free(&a.pool);
    return err;
}

int patch_run_chunks(const pulse_patch *p, pulse_ckpt *target, int write, int threads)
{
    return run(p, target, write, 0, threads);
}

int patch_run_checked_chunks(const pulse_patch *p, pulse_ckpt *target, int threads)
{
    return run(p, target, 1, 1, threads);
}

int pulse_patch_verify(const pulse_patch *p, const pulse_ckpt *base, int threads)
{
    if (!p)
        return pulse_fail(PULSE_ERR_INVALID, "pulse_patch_verify: NULL patch");
    int err = base ? patch_check_layout(p, base) : 0;
    if (err)
        return err;
    return patch_run_chunks(p, NULL, 0, threads);
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
    /* Pass 1 decodes and checks every chunk; nothing is written unless all pass. */
    if ((err = patch_run_chunks(p, NULL, 0, threads)) != 0)
        return err;
    for (size_t i = 0; i < p->ntensors; i++)
        if (p->tensors[i].ncoded && !(pulse_ckpt_tensor(target, i)->data))
            return pulse_fail(PULSE_ERR_INVALID, "tensor %s: checkpoint not writable", p->tensors[i].name);
    /* Pass 2 decodes again (memory stays bounded by the chunk size) and writes. The
     * digests are not recomputed: p's buffer is the private copy pass 1 checked. */
    if ((err = patch_run_checked_chunks(p, target, threads)) != 0)
        return err;
    if (o.skip_result_check)
        return 0;
    if ((err = pulse_ckpt_state_id(target, threads, id)) != 0)
        return err;
    if (memcmp(id, p->result_id, 32) != 0)
        return pulse_fail(PULSE_ERR_CORRUPT, "result state %.16s.. is not the patch's result %.16s.. (target was written)",
                          pulse_id_hex(id, h1), pulse_id_hex(p->result_id, h2));
    return 0;
}
