/* SPDX-License-Identifier: Apache-2.0 */
/* pulse_patch_diff: find the changes of every chunk of every tensor on all cores, encode them, write the patch. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/fail.h"
#include "crypto/sha256.h"
#include "node/checkpoint/ckpt_internal.h"
#include "node/patch/patch_ctxcode.h"
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
    patch_build build;
    ckpt_chunk_ids *new_ids; /* NEW's state id hashed as it is scanned; NULL: given */
} diff_job;

/* Chunk c of tensor t: the spans of OLD and NEW it covers. */
static void chunk_span(const diff_job *d, size_t t, uint64_t c, const uint8_t **pa, const uint8_t **pb, size_t *len,
                       unsigned *unit)
{
    const pulse_tensor *ta = pulse_ckpt_tensor(d->a, t), *tb = pulse_ckpt_tensor(d->b, t);
    unsigned u = patch_dtype_unit(ta->dtype);
    uint64_t units = ta->nbytes / (u ? u : 1);
    uint64_t first = c * d->o->chunk_elems;
    *len = (size_t)(units - first < d->o->chunk_elems ? units - first : d->o->chunk_elems);
    *pa = ta->data + first * (u ? u : 1);
    *pb = tb->data + first * (u ? u : 1);
    *unit = u;
}

/* The plan: which chunks differ at all. A changed chunk usually differs in its first bytes, so
 * this costs a few cache lines per changed chunk and one compare of each unchanged one (which
 * the diff then skips); it fixes the table's length before any chunk is coded. */
static int plan_chunk(void *ctx, size_t g)
{
    const diff_job *d = ctx;
    size_t t = patch_chunk_tensor(d->build.chunk_start, d->build.ntensors, g), len;
    const uint64_t c = g - d->build.chunk_start[t];
    const uint8_t *pa, *pb;
    unsigned unit;
    chunk_span(d, t, c, &pa, &pb, &len, &unit);
    d->build.out[t].chunks[c].planned = memcmp(pa, pb, len * (unit ? unit : 1)) != 0;
    return 0;
}

/* Below this many changes a chunk is coded both ways and the smaller kept: the context coder's
 * per-band headers and tables (up to 16 of them) weigh against a small chunk's bytes, and a
 * chunk of few elements (a norm's weights) may have no band worth its table. Above it the
 * context coding is smaller on all but a few chunks measured, by a few bytes (docs/patch-format.md,
 * "Speed"), and the second coding is not paid. */
#define DIFF_CTX_TRY_BOTH 1024u

/* A BF16 or F16 ulp chunk coded against the exponents of its old values (format 5), into the slot's
 * output buffer, staged there with its digest left to the caller as the other codings leave it;
 * a small chunk also in today's coding; the smaller kept (the coding byte is per chunk). */
static int encode_context(diff_job *d, patch_scratch *s, pulse_dtype dt, const uint16_t *pa, const uint16_t *pb,
                          size_t len, patch_out_chunk *oc)
{
    const pulse_kernels *k = pulse_kernels_get();
    size_t n = k->count16(pa, pb, len);   /* the coders find the positions themselves */
    oc->count = 0;
    if (!n)
        return 0;
    const size_t cap = patch_chunk_bytes_bound(d->o->chunk_elems);
    struct patch_ctx_scratch *cs = patch_scratch_ctx(s, d->o->chunk_elems);
    if (!cs || (!s->ctxout && !(s->ctxout = malloc(cap))))
        return pulse_fail(PULSE_ERR_NOMEM, "context coder buffers");
    uint32_t pos_len = 0, val_len = 0;
    int err = 0, fits = patch_ctx_bound((uint32_t)len, n) <= cap;
    if (fits && (err = patch_ctx_encode(cs, dt, pa, pb, (uint32_t)len, n, s->ctxout, cap, &pos_len, &val_len)) != 0)
        return err;
    if (!fits || n < DIFF_CTX_TRY_BOTH) {
        size_t leb_len = 0;
        uint16_t *z = (uint16_t *)(void *)s->vals;
        if (k->diff_ulp16(pa, pb, len, s->leb, &leb_len, z) != n)
            return pulse_fail(PULSE_ERR_IO, "a chunk changed while the patch was being written");
        if ((err = patch_encode_ulp16(s, leb_len, n, z, d->o->zstd_level, oc)) != 0)
            return err;
        if (!fits || (size_t)oc->pos_len + oc->val_len <= (size_t)pos_len + val_len)
            return 0;   /* today's coding, staged in s->planes with its digest as usual */
    }
    memcpy(s->planes, s->ctxout, (size_t)pos_len + val_len);
    oc->staged = s->planes;
    oc->count = (uint32_t)n;
    oc->pos_len = pos_len;
    oc->val_len = val_len;
    if (!s->defer_digest)
        pulse_sha256(s->planes, (size_t)pos_len + val_len, oc->digest);
    return 0;
}

/* Encodes chunk c of tensor `tensor` (a planned one) with slot s into oc; its bytes are left
 * staged in s->planes, its digest to the driver (s->defer_digest). */
static int encode_chunk(void *ctx, size_t tensor, uint64_t c, patch_scratch *s, patch_out_chunk *oc)
{
    diff_job *d = ctx;
    size_t len;
    const uint8_t *pa, *pb;
    unsigned unit;
    chunk_span(d, tensor, c, &pa, &pb, &len, &unit);
    int opaque = unit == 0;
    if (opaque)
        unit = 1;

    int err = 0;
    if (patch_misaligned(pa, unit) || patch_misaligned(pb, unit)) {
        uint8_t *copy = patch_scratch_bounce(s, d->o->chunk_elems);
        if (!copy)
            return PULSE_ERR_NOMEM;   /* the detail is set */
        memcpy(copy, pa, len * unit);
        memcpy(copy + (size_t)d->o->chunk_elems * 4, pb, len * unit);
        pa = copy;
        pb = copy + (size_t)d->o->chunk_elems * 4;
    }
    const pulse_kernels *k = pulse_kernels_get();
    size_t n;
    const pulse_dtype dt = pulse_ckpt_tensor(d->a, tensor)->dtype;
    if (d->o->context && unit == 2 && !opaque && d->o->values == PULSE_VALUES_ULP && patch_ctx_dtype_ok(dt)) {
        err = encode_context(d, s, dt, (const uint16_t *)(const void *)pa, (const uint16_t *)(const void *)pb, len,
                             oc);
        goto coded;
    }
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
    if (!err && oc->count == 0)   /* the plan saw a difference the diff no longer sees */
        err = pulse_fail(PULSE_ERR_IO, "tensor %s changed while the patch was being written",
                         pulse_ckpt_tensor(d->b, tensor)->name);
    return err;
}

/* NEW's state chunks that start inside global chunk `job`: [*g0, *g1) in the state id's global
 * numbering. */
static void new_chunks_of(const diff_job *d, size_t job, uint64_t *g0, uint64_t *g1)
{
    size_t tensor = patch_chunk_tensor(d->build.chunk_start, d->build.ntensors, job), len;
    const uint8_t *pa, *pb;
    unsigned unit;
    chunk_span(d, tensor, job - d->build.chunk_start[tensor], &pa, &pb, &len, &unit);
    const uint64_t u = unit ? unit : 1, first = (uint64_t)(pb - pulse_ckpt_tensor(d->b, tensor)->data);
    const uint64_t k0 = (first + PULSE_STATE_CHUNK - 1) / PULSE_STATE_CHUNK;
    const uint64_t k1 = (first + len * u + PULSE_STATE_CHUNK - 1) / PULSE_STATE_CHUNK;
    *g0 = d->new_ids->first[tensor] + k0;
    *g1 = d->new_ids->first[tensor] + (k1 > k0 ? k1 : k0);
}

/* NEW's state chunks that start inside global chunks first .. first + n - 1, hashed while their
 * bytes are still in cache from the diff (a state chunk reaching into the next chunk's span
 * reads on into NEW, which nothing writes): NEW's state id costs no pass of its own. The
 * chunks' state chunks go in one run where they follow each other, so that four of them share
 * the four-message kernel. */
static void hash_new_chunks(void *ctx, size_t first, size_t n)
{
    const diff_job *d = ctx;
    uint64_t g0, g1, h0, h1;
    new_chunks_of(d, first, &g0, &g1);
    if (n == 2) {
        new_chunks_of(d, first + 1, &h0, &h1);
        if (h0 == g1)
            g1 = h1;
        else if (h1 > h0)
            ckpt_chunk_ids_hash_run(d->new_ids, h0, (size_t)(h1 - h0));
    }
    if (g1 > g0)
        ckpt_chunk_ids_hash_run(d->new_ids, g0, (size_t)(g1 - g0));
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
    ckpt_chunk_ids new_ids = { 0 };
    if (o.new_id)
        memcpy(result_id, o.new_id, 32);
    else if ((err = ckpt_chunk_ids_open(&new_ids, new_ckpt)) != 0)
        return err;

    const uint32_t version = o.context && o.values == PULSE_VALUES_ULP ? PULSE_PATCH_VERSION_CONTEXT
                                                                        : PULSE_PATCH_VERSION;
    diff_job d = { .a = old_ckpt, .b = new_ckpt, .o = &o, .new_ids = o.new_id ? NULL : &new_ids };
    d.build = (patch_build){ .o = &o, .version = version, .metadata = pulse_ckpt_metadata(new_ckpt),
                             .encode = encode_chunk, .coded = d.new_ids ? hash_new_chunks : NULL, .ctx = &d };
    if ((err = patch_build_layout(&d.build, old_ckpt)) != 0 || (err = patch_build_chunks(&d.build, out_path, plan_chunk)) != 0)
        goto done;
    if (d.new_ids) {
        ckpt_chunk_ids_state(d.new_ids, result_id, o.new_tensor_hashes_out);
        if (o.new_id_out)
            memcpy(o.new_id_out, result_id, 32);
    }
    err = patch_build_commit(&d.build, base_id, result_id);
done:
    patch_build_free(&d.build);
    ckpt_chunk_ids_close(&new_ids);
    return err;
}
