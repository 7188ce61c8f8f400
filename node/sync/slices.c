/* SPDX-License-Identifier: Apache-2.0 */
/* The tensor slices an engine-held follower holds, and the fetch of just their part of a patch: its head, then its chunks by range. */
#include <stdlib.h>
#include <string.h>

#include "base/fail.h"
#include "manifest/patch_objects.h"
#include "node/sync/slices.h"
#include "node/sync/sync_internal.h"

int sync_slices_copy(sync_slices *out, const pulse_slice *in, size_t n)
{
    out->v = NULL;
    out->n = 0;
    if (!n)
        return 0;
    if (!in)
        return pulse_fail(PULSE_ERR_INVALID, "follower: %zu slices but no array", n);
    if (!(out->v = calloc(n, sizeof *out->v)))
        return pulse_fail(PULSE_ERR_NOMEM, "%zu slices", n);
    for (size_t i = 0; i < n; i++) {
        if (!in[i].tensor || !in[i].tensor[0] || in[i].start >= in[i].stop) {
            sync_slices_free(out);
            return pulse_fail(PULSE_ERR_INVALID, "slice %zu: %s", i,
                              !in[i].tensor || !in[i].tensor[0] ? "no tensor name" : "an empty element range");
        }
        out->v[i] = in[i];
        out->n = i + 1;
        if (!(out->v[i].tensor = strdup(in[i].tensor))) {
            sync_slices_free(out);
            return pulse_fail(PULSE_ERR_NOMEM, "slice names");
        }
    }
    return 0;
}

void sync_slices_free(sync_slices *s)
{
    for (size_t i = 0; s->v && i < s->n; i++)
        free((char *)s->v[i].tensor);
    free(s->v);
    s->v = NULL;
    s->n = 0;
}

/* Marks every slice; the first that does not fit the patch refuses the step by name. That is
 * the caller's slices against the run's layout, not a fault of the record: PULSE_ERR_INVALID,
 * which a follower does not store as a verdict on the record (a corrected caller goes on). */
static int want_all(pulse_patch *p, const sync_slices *sl)
{
    for (size_t i = 0; i < sl->n; i++) {
        size_t t;
        int r = pulse_patch_tensor_find(p, sl->v[i].tensor, &t);
        if (r == PULSE_ERR_NOTFOUND)
            return pulse_fail(PULSE_ERR_INVALID, "slice of tensor %s: the run has no such tensor", sl->v[i].tensor);
        if (!r && (r = pulse_patch_want(p, t, sl->v[i].start, sl->v[i].stop)) == PULSE_ERR_MISMATCH)
            return pulse_fail(PULSE_ERR_INVALID, "%s", pulse_last_error());
        if (r)
            return r;
    }
    return 0;
}

/* Fetches the patch's byte ranges RG in one batch of ranged GETs (of the objects that hold them:
 * one range may span two), and supplies each to the patch. */
static int fetch_ranges(pulse_store *st, const char *run, const patch_objects *po, pulse_patch *p,
                        const pulse_patch_range *rg, size_t n, uint64_t *moved)
{
    const size_t cap = n + po->n;
    size_t m = 0;
    pulse_transfer *x = calloc(cap, sizeof *x);
    size_t *of = calloc(cap, sizeof *of);   /* the range each piece belongs to */
    char (*keys)[SYNC_KEY_MAX] = calloc(po->n, sizeof *keys);
    int r = !x || !of || !keys ? pulse_fail(PULSE_ERR_NOMEM, "%zu ranged GETs", n) : 0;
    for (size_t e = 0; !r && e < po->n; e++)
        r = sync_object_key(run, po->ext[e].obj->digest, keys[e]);
    for (size_t i = 0; !r && i < n; i++)
        for (size_t e = 0; !r && e < po->n; e++) {
            const patch_extent *ex = &po->ext[e];
            uint64_t end = rg[i].offset + rg[i].length, xend = ex->at + ex->obj->size;
            uint64_t a = rg[i].offset > ex->at ? rg[i].offset : ex->at, b = end < xend ? end : xend;
            if (a >= b)
                continue;
            /* disjoint ranges (pulse_patch_missing's): each object boundary splits at most one */
            if (m == cap) {
                r = pulse_fail(PULSE_ERR_INVALID, "overlapping patch ranges");
                break;
            }
            x[m] = (pulse_transfer){ .op = PULSE_XFER_GET, .key = keys[e], .offset = a - ex->at, .length = b - a,
                                     .max_size = (size_t)(b - a) };
            of[m++] = i;
        }
    if (!r)
        pulse_store_batch(st, x, m);
    uint8_t *buf = NULL;
    for (size_t k = 0, i = 0; !r && i < n; i++) {
        /* this range's pieces, in order, into one buffer */
        if (!(buf = realloc(buf, (size_t)rg[i].length ? (size_t)rg[i].length : 1))) {
            r = pulse_fail(PULSE_ERR_NOMEM, "a range of %llu bytes", (unsigned long long)rg[i].length);
            break;
        }
        size_t got = 0;
        for (; !r && k < m && of[k] == i; k++) {
            if (x[k].result)
                r = pulse_fail(x[k].result, "object %s bytes %llu+%llu: %s", x[k].key, (unsigned long long)x[k].offset,
                               (unsigned long long)x[k].length, x[k].detail);
            /* a short answer is a shorter object than the record says */
            else if (x[k].len != x[k].length)
                r = pulse_fail(PULSE_ERR_CORRUPT, "object %s: %zu bytes at %llu where the patch's head places %llu",
                               x[k].key, x[k].len, (unsigned long long)x[k].offset, (unsigned long long)x[k].length);
            else {
                memcpy(buf + got, x[k].out, x[k].len);
                got += x[k].len;
            }
        }
        if (!r) {
            *moved += got;
            sync_progress_add(got);
            r = pulse_patch_supply(p, rg[i].offset, buf, got);
        }
    }
    for (size_t k = 0; x && k < m; k++)
        pulse_store_free(x[k].out);
    free(buf);
    free(x);
    free(of);
    free(keys);
    return r;
}

int sync_fetch_patch_slices(pulse_store *st, const char *run, const pulse_record *rec, const sync_slices *sl,
                            pulse_patch **out, uint64_t *moved)
{
    *out = NULL;
    patch_objects po;
    int r = patch_objects_of(rec, &po);
    if (!r && !po.head)
        r = pulse_fail(PULSE_ERR_UNSUPPORTED, "the record names no head of its patch: a follower of slices needs one");
    void *head = NULL;
    if (!r)
        r = sync_fetch_objects(st, run, po.head, 1, &head, moved);
    pulse_patch *p = NULL;
    if (!r)
        r = pulse_patch_open_head(&p, head, (size_t)po.head->size, po.bytes);
    pulse_store_free(head);
    if (!r)
        r = want_all(p, sl);
    pulse_patch_range *rg = NULL;
    size_t n = r ? 0 : pulse_patch_missing(p, 0, NULL, 0);
    if (n && !(rg = malloc(n * sizeof *rg)))
        r = pulse_fail(PULSE_ERR_NOMEM, "%zu ranges", n);
    if (!r && n) {
        pulse_patch_missing(p, 0, rg, n);
        r = fetch_ranges(st, run, &po, p, rg, n, moved);
    }
    free(rg);
    patch_objects_free(&po);
    if (r) {
        pulse_patch_close(&p);
        return r;
    }
    *out = p;
    return 0;
}
