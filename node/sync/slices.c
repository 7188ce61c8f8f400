/* SPDX-License-Identifier: Apache-2.0 */
/* The tensor slices an engine-held follower holds, and the fetch of just their part of a patch: its head, then its chunks by range. */
#include <stdlib.h>
#include <string.h>

#include "base/fail.h"
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

/* Fetches the ranges with one batch of ranged GETs of the patch object and supplies them. */
static int fetch_ranges(pulse_store *st, const char *key, pulse_patch *p, const pulse_patch_range *rg, size_t n,
                        uint64_t *moved)
{
    pulse_transfer *x = calloc(n ? n : 1, sizeof *x);
    if (!x)
        return pulse_fail(PULSE_ERR_NOMEM, "%zu ranged GETs", n);
    for (size_t i = 0; i < n; i++)
        x[i] = (pulse_transfer){ .op = PULSE_XFER_GET, .key = key, .offset = rg[i].offset, .length = rg[i].length,
                                 .max_size = (size_t)rg[i].length };
    pulse_store_batch(st, x, n);
    int r = 0;
    for (size_t i = 0; i < n && !r; i++) {
        if (x[i].result)
            r = pulse_fail(x[i].result, "object %s bytes %llu+%llu: %s", key, (unsigned long long)rg[i].offset,
                           (unsigned long long)rg[i].length, x[i].detail);
        else {
            *moved += x[i].len;
            sync_progress_add(x[i].len);
            /* A short answer is a shorter object than the record says; supply refuses it by its chunks. */
            r = x[i].len != rg[i].length
                    ? pulse_fail(PULSE_ERR_CORRUPT, "object %s: %zu bytes at %llu where the patch's head places "
                                 "%llu", key, x[i].len, (unsigned long long)rg[i].offset,
                                 (unsigned long long)rg[i].length)
                    : pulse_patch_supply(p, rg[i].offset, x[i].out, x[i].len);
        }
    }
    for (size_t i = 0; i < n; i++)
        pulse_store_free(x[i].out);
    free(x);
    return r;
}

int sync_fetch_patch_slices(pulse_store *st, const char *run, const pulse_record *rec, const sync_slices *sl,
                            pulse_patch **out, uint64_t *moved)
{
    *out = NULL;
    void *head = NULL;
    int r = sync_fetch_objects(st, run, &rec->objects[1], 1, &head, moved);
    pulse_patch *p = NULL;
    if (!r)
        r = pulse_patch_open_head(&p, head, (size_t)rec->objects[1].size, rec->objects[0].size);
    pulse_store_free(head);
    if (!r)
        r = want_all(p, sl);
    pulse_patch_range *rg = NULL;
    size_t n = r ? 0 : pulse_patch_missing(p, 0, NULL, 0);
    if (n && !(rg = malloc(n * sizeof *rg)))
        r = pulse_fail(PULSE_ERR_NOMEM, "%zu ranges", n);
    char key[SYNC_KEY_MAX];
    if (!r && n) {
        pulse_patch_missing(p, 0, rg, n);
        r = sync_object_key(run, rec->objects[0].digest, key);
    }
    if (!r && n)
        r = fetch_ranges(st, key, p, rg, n, moved);
    free(rg);
    if (r) {
        pulse_patch_close(&p);
        return r;
    }
    *out = p;
    return 0;
}
