/* SPDX-License-Identifier: Apache-2.0 */
/* pulse_patch_diff: find the changes of every chunk of every tensor on all cores, encode them, write the patch. */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/fail.h"
#include "crypto/sha256.h"
#include "node/parallel.h"
#include "node/patch/patch_internal.h"

void pulse_diff_opts_default(pulse_diff_opts *o)
{
    memset(o, 0, sizeof *o);
    o->size = sizeof *o;
    o->values = PULSE_VALUES_ULP;
    o->threads = 0;
    o->zstd_level = PULSE_PATCH_LEVEL_FAST;
    o->chunk_elems = PULSE_PATCH_DEFAULT_CHUNK;
}

/* Same names, dtypes and shapes, in the same (canonical) order. */
static int same_layout(const pulse_ckpt *a, const pulse_ckpt *b)
{
    size_t n = pulse_ckpt_count(a), m = pulse_ckpt_count(b);
    for (size_t i = 0; i < n || i < m; i++) {
        const pulse_tensor *x = i < n ? pulse_ckpt_tensor(a, i) : NULL;
        const pulse_tensor *y = i < m ? pulse_ckpt_tensor(b, i) : NULL;
        if (!x || !y || strcmp(x->name, y->name) != 0)
            return pulse_fail(PULSE_ERR_MISMATCH, "layout changed: tensor %s is not in both checkpoints",
                              !x ? y->name : !y ? x->name : strcmp(x->name, y->name) < 0 ? x->name : y->name);
        if (strcmp(x->dtype_name, y->dtype_name) != 0)
            return pulse_fail(PULSE_ERR_MISMATCH, "layout changed: tensor %s dtype %s -> %s", x->name,
                              x->dtype_name, y->dtype_name);
        if (x->ndim != y->ndim || memcmp(x->shape, y->shape, sizeof x->shape[0] * (size_t)x->ndim) != 0
            || x->nbytes != y->nbytes)
            return pulse_fail(PULSE_ERR_MISMATCH, "layout changed: tensor %s shape differs", x->name);
    }
    return 0;
}

typedef struct diff_job {
    const pulse_ckpt *a, *b;
    const pulse_diff_opts *o;
    patch_out_tensor *out;
    uint64_t *chunk_start;   /* ntensors + 1 prefix sums of chunk counts */
    size_t ntensors;
    patch_pool *pool;        /* kept between diffs (patch_pool_take_kept) */
    int spill_fd;            /* coded chunks go here as they are made (-1: kept in memory) */
    _Atomic uint64_t spill_end;
} diff_job;

/* Moves a coded chunk's bytes from the encoder's scratch to the spill file: the patch is
 * then never held in memory whole (it grows with the model; the spill file is page cache,
 * not this process's heap). Without a spill file, or when it cannot be written, the bytes
 * are kept in memory instead: correct, only less flat. */
static int spill(diff_job *d, patch_out_chunk *oc)
{
    if (d->spill_fd < 0 || !oc->staged)
        return patch_out_keep(oc);
    size_t len = (size_t)oc->pos_len + oc->val_len;
    uint64_t off = atomic_fetch_add(&d->spill_end, len);
    for (size_t put = 0; put < len;) {
        ssize_t r = pwrite(d->spill_fd, oc->staged + put, len - put, (off_t)(off + put));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return patch_out_keep(oc);
        put += (size_t)r;
    }
    oc->staged = NULL;
    oc->spill_off = off;
    return 0;
}

/* An unnamed file beside out_path (same file system as the output), or -1. */
static int spill_open(const char *out_path)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", out_path);
    char *slash = strrchr(dir, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == dir)
        dir[1] = 0;
    else
        *slash = 0;
    int fd = -1;
#ifdef O_TMPFILE
    if ((fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600)) >= 0)
        return fd;
#endif
    char tmpl[4200];
    snprintf(tmpl, sizeof tmpl, "%s/.pulse-spill-XXXXXX", dir);
    fd = mkostemp(tmpl, O_CLOEXEC);
    if (fd >= 0)
        unlink(tmpl);
    return fd;
}

/* Encodes global chunk `job` with slot s; its bytes are left staged in s->planes, its
 * digest to the caller (s->defer_digest). Sets *out to the chunk's entry. */
static int encode_chunk(diff_job *d, size_t job, patch_scratch *s, patch_out_chunk **out)
{
    size_t lo = 0, hi = d->ntensors;   /* tensor with chunk_start[t] <= job < chunk_start[t+1] */
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (d->chunk_start[mid] <= job)
            lo = mid;
        else
            hi = mid;
    }
    const pulse_tensor *ta = pulse_ckpt_tensor(d->a, lo), *tb = pulse_ckpt_tensor(d->b, lo);
    uint64_t c = job - d->chunk_start[lo];
    unsigned unit = patch_dtype_unit(ta->dtype);
    int opaque = unit == 0;
    if (opaque)
        unit = 1;
    uint64_t units = ta->nbytes / unit;
    uint64_t first = c * d->o->chunk_elems;
    size_t len = (size_t)(units - first < d->o->chunk_elems ? units - first : d->o->chunk_elems);
    const uint8_t *pa = ta->data + first * unit, *pb = tb->data + first * unit;
    patch_out_chunk *oc = &d->out[lo].chunks[c];
    *out = oc;

    int err = 0;
    const pulse_kernels *k = pulse_kernels_get();
    size_t n;
    if (unit == 2 && !opaque && d->o->values == PULSE_VALUES_ULP) {
        /* One pass from the two chunks to the position stream's bytes and the zigzag
         * values: the encoder never touches the chunk's elements again. */
        size_t leb_len = 0;
        uint16_t *z = (uint16_t *)(void *)s->vals;
        n = k->diff_ulp16((const uint16_t *)pa, (const uint16_t *)pb, len, s->leb, &leb_len, z);
        if (n)
            err = patch_encode_ulp16(s, leb_len, n, z, d->o->zstd_level, oc);
        else
            oc->count = 0;
        goto coded;
    }
    if (unit == 2 && !opaque) {
        /* One pass: positions and new values (in place for the coder; the old values after
         * them are not needed for abs). */
        uint16_t *vb = (uint16_t *)(void *)s->vals, *va = vb + d->o->chunk_elems + 64;
        n = k->diff_extract16((const uint16_t *)pa, (const uint16_t *)pb, len, s->idx, va, vb);
        if (n)
            err = patch_encode_changes(s, s->idx, n, s->vals, unit, 0, d->o->zstd_level, oc);
        else
            oc->count = 0;
        goto coded;
    }
    switch (unit) {
    case 1: n = k->diff8(pa, pb, len, s->idx); break;
    case 2: n = k->diff16((const uint16_t *)pa, (const uint16_t *)pb, len, s->idx); break;
    default: n = k->diff32((const uint32_t *)pa, (const uint32_t *)pb, len, s->idx); break;
    }
    if (n == 0) {
        oc->count = 0;
    } else if (opaque) {
        err = patch_encode_replace(s, pb, (uint32_t)len, (uint32_t)n, d->o->zstd_level, oc);
    } else {
        int ulp = d->o->values == PULSE_VALUES_ULP;
        switch (unit) {
        case 1:
            if (ulp) k->ulp_encode8(pa, pb, s->idx, n, s->vals);
            else k->gather8(pb, s->idx, n, s->vals);
            break;
        case 2:
            if (ulp) k->ulp_encode16((const uint16_t *)pa, (const uint16_t *)pb, s->idx, n, (uint16_t *)s->vals);
            else k->gather16((const uint16_t *)pb, s->idx, n, (uint16_t *)s->vals);
            break;
        default:
            if (ulp) k->ulp_encode32((const uint32_t *)pa, (const uint32_t *)pb, s->idx, n, (uint32_t *)s->vals);
            else k->gather32((const uint32_t *)pb, s->idx, n, (uint32_t *)s->vals);
            break;
        }
        err = patch_encode_changes(s, s->idx, n, s->vals, unit, ulp, d->o->zstd_level, oc);
    }
coded:
    return err;
}

/* Job j: global chunks 2j and 2j + 1 (when there is one), the second coded into the slot's
 * other output buffer, so that both are staged at once and their digests computed in one
 * interleaved pass (pulse_sha256_x2); then both are spilled, before the slot is given back. */
static int diff_pair(void *ctx, size_t j)
{
    diff_job *d = ctx;
    size_t first = 2 * j, n = first + 1 < (size_t)d->chunk_start[d->ntensors] ? 2 : 1;
    int err = 0;
    patch_scratch *s = patch_pool_take(d->pool, &err);
    if (!s)
        return err;
    patch_out_chunk *oc[2] = { NULL, NULL };
    uint8_t *home = s->planes, *other = n == 2 ? patch_scratch_planes2(s, d->o->chunk_elems) : NULL;
    s->defer_digest = 1;
    if (n == 2 && !other)
        err = PULSE_ERR_NOMEM;
    for (size_t i = 0; i < n && !err; i++) {
        s->planes = i ? other : home;
        err = encode_chunk(d, first + i, s, &oc[i]);
    }
    s->planes = home;
    s->defer_digest = 0;
    if (!err) {
        patch_out_chunk *a = oc[0]->staged ? oc[0] : oc[1], *b = oc[0]->staged ? oc[1] : NULL;
        if (a && b && b->staged)
            pulse_sha256_x2(a->staged, (size_t)a->pos_len + a->val_len, b->staged, (size_t)b->pos_len + b->val_len,
                            a->digest, b->digest);
        else if (a && a->staged)
            pulse_sha256(a->staged, (size_t)a->pos_len + a->val_len, a->digest);
        for (size_t i = 0; i < n && !err; i++)
            err = spill(d, oc[i]);   /* before the slot (where the bytes are staged) is given back */
    }
    patch_pool_give(d->pool, s);
    return err;
}

int pulse_patch_diff(const pulse_ckpt *old_ckpt, const pulse_ckpt *new_ckpt,
                     const pulse_diff_opts *opts, const char *out_path)
{
    pulse_diff_opts o;
    pulse_diff_opts_default(&o);
    if (opts) {
        if (opts->size < sizeof o.size || opts->size > sizeof o)
            return pulse_fail(PULSE_ERR_INVALID, "pulse_diff_opts: size %zu", opts->size);
        memcpy(&o, opts, opts->size);
        o.size = sizeof o;
    }
    if (!old_ckpt || !new_ckpt || !out_path)
        return pulse_fail(PULSE_ERR_INVALID, "pulse_patch_diff: NULL argument");
    if (o.values != PULSE_VALUES_ABS && o.values != PULSE_VALUES_ULP)
        return pulse_fail(PULSE_ERR_INVALID, "unknown value code %d", (int)o.values);
    if (o.chunk_elems == 0 || o.chunk_elems > PULSE_PATCH_MAX_CHUNK)
        return pulse_fail(PULSE_ERR_INVALID, "chunk size %u elements (1..%u)", o.chunk_elems,
                          PULSE_PATCH_MAX_CHUNK);
    if (o.zstd_level == 0)
        o.zstd_level = PULSE_PATCH_LEVEL_FAST;
    if (o.zstd_level < ZSTD_minCLevel() || o.zstd_level > ZSTD_maxCLevel())
        return pulse_fail(PULSE_ERR_INVALID, "zstd level %d", o.zstd_level);
    int err = same_layout(old_ckpt, new_ckpt);
    if (err)
        return err;

    uint8_t base_id[32], result_id[32];
    if (o.old_id)
        memcpy(base_id, o.old_id, 32);
    else if ((err = pulse_ckpt_state_id(old_ckpt, o.threads, base_id)) != 0)
        return err;
    if (o.new_id)
        memcpy(result_id, o.new_id, 32);
    else if ((err = pulse_ckpt_state_id(new_ckpt, o.threads, result_id)) != 0)
        return err;

    diff_job d = { .a = old_ckpt, .b = new_ckpt, .o = &o, .spill_fd = spill_open(out_path) };
    d.ntensors = pulse_ckpt_count(old_ckpt);
    d.out = calloc(d.ntensors ? d.ntensors : 1, sizeof *d.out);
    d.chunk_start = calloc(d.ntensors + 1, sizeof *d.chunk_start);
    if (!d.out || !d.chunk_start) {
        err = pulse_fail(PULSE_ERR_NOMEM, "diff tables");
        goto done;
    }
    for (size_t i = 0; i < d.ntensors; i++) {
        const pulse_tensor *t = pulse_ckpt_tensor(old_ckpt, i);
        unsigned unit = patch_dtype_unit(t->dtype);
        uint64_t units = unit ? t->nelems : t->nbytes;
        patch_out_tensor *ot = &d.out[i];
        ot->name = t->name;
        ot->dtype_name = t->dtype_name;
        ot->dtype = unit ? t->dtype : PULSE_DT_OPAQUE;
        ot->elem_size = t->elem_size;
        ot->ndim = t->ndim;
        ot->shape = t->shape;
        ot->nchunks = (units + o.chunk_elems - 1) / o.chunk_elems;
        ot->chunks = calloc(ot->nchunks ? ot->nchunks : 1, sizeof *ot->chunks);
        if (!ot->chunks) {
            err = pulse_fail(PULSE_ERR_NOMEM, "tensor %s: chunk table", t->name);
            goto done;
        }
        d.chunk_start[i + 1] = d.chunk_start[i] + ot->nchunks;
    }
    patch_pool own;
    if (!(d.pool = patch_pool_take_kept(PATCH_KEPT_DIFF, o.threads, o.chunk_elems, &own, &err)))
        goto done;
    err = pulse_parallel_for((size_t)((d.chunk_start[d.ntensors] + 1) / 2), o.threads, diff_pair, &d);
    uint64_t most = 0;
    for (size_t i = 0; i < d.ntensors; i++)
        for (uint64_t c = 0; c < d.out[i].nchunks; c++) {
            d.out[i].changes += d.out[i].chunks[c].count;
            most = d.out[i].chunks[c].count > most ? d.out[i].chunks[c].count : most;
        }
    patch_pool_give_kept(d.pool, &own, most);
    if (err)
        goto done;
    err = patch_write_file_spill(out_path, o.values, o.chunk_elems, base_id, result_id, d.out, d.ntensors,
                                 d.spill_fd);
done:
    if (d.spill_fd >= 0)
        close(d.spill_fd);
    if (d.out)
        for (size_t i = 0; i < d.ntensors; i++) {
            for (uint64_t c = 0; d.out[i].chunks && c < d.out[i].nchunks; c++)
                free(d.out[i].chunks[c].bytes);
            free(d.out[i].chunks);
        }
    free(d.out);
    free(d.chunk_start);
    return err;
}
