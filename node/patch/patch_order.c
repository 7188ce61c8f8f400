/* SPDX-License-Identifier: Apache-2.0 */
/* Coded chunks reach a patch file in table order from any number of workers, with a bounded number of bytes kept for their turn. */
#include <stdlib.h>

#include "base/fail.h"
#include "node/patch/patch_internal.h"

int patch_order_init(patch_order *o, size_t njobs, uint64_t parked_max, patch_order_chunks_fn chunks_of, void *ctx)
{
    o->next_job = 0;
    o->njobs = njobs;
    o->data_end = 0;
    o->parked_bytes = 0;
    o->parked_max = parked_max;
    o->failed = 0;
    o->chunks_of = chunks_of;
    o->ctx = ctx;
    pthread_mutex_init(&o->lock, NULL);
    pthread_cond_init(&o->moved, NULL);
    o->prefix_job = 0;
    o->prefix = 0;
    o->on_prefix = NULL;
    o->on_progress = NULL;
    o->prefix_ctx = NULL;
    o->parked = calloc(njobs ? njobs : 1, 1);
    o->written = calloc(njobs ? njobs : 1, 1);
    o->job_end = calloc(njobs ? njobs : 1, sizeof *o->job_end);
    if (!o->parked || !o->written || !o->job_end) {
        free(o->parked);
        free(o->written);
        free(o->job_end);
        o->parked = NULL;
        pthread_cond_destroy(&o->moved);
        pthread_mutex_destroy(&o->lock);
        return pulse_fail(PULSE_ERR_NOMEM, "patch output order (%zu jobs)", njobs);
    }
    return 0;
}

void patch_order_free(patch_order *o)
{
    if (!o->parked)
        return;
    free(o->parked);
    free(o->written);
    free(o->job_end);
    o->parked = NULL;
    pthread_cond_destroy(&o->moved);
    pthread_mutex_destroy(&o->lock);
}

/* Bytes a chunk puts in the data section (none when unchanged). */
static uint64_t coded_bytes(const patch_out_chunk *oc)
{
    return oc->count ? (uint64_t)oc->pos_len + oc->val_len : 0;
}

/* Places job j's chunks at the end of the data section. Called with the lock held for the
 * offsets only; the bytes are written after it is released. */
static void place(patch_order *o, size_t j, patch_out_chunk **oc, size_t n, uint64_t *at)
{
    for (size_t i = 0; i < n; i++) {
        at[i] = o->data_end;
        o->data_end += coded_bytes(oc[i]);
    }
    o->job_end[j] = o->data_end;
}

/* Job j's bytes are in the file: the prefix all in moves on, and whoever follows it is told
 * (under the lock, so it hears a prefix that only grows). */
static void done_writing(patch_order *o, size_t j)
{
    pthread_mutex_lock(&o->lock);
    o->written[j] = 1;
    uint64_t before = o->prefix;
    while (o->prefix_job < o->njobs && o->written[o->prefix_job])
        o->prefix = o->job_end[o->prefix_job++];
    if (o->on_progress && o->prefix != before)
        o->on_progress(o->prefix_ctx, o->prefix_job, o->njobs);
    if (o->on_prefix && o->prefix != before)
        o->on_prefix(o->prefix_ctx, o->file.fd, o->file.data_start, o->prefix);
    pthread_mutex_unlock(&o->lock);
}

static int put_chunk(patch_order *o, patch_out_chunk *oc, uint64_t at)
{
    if (!oc->count)
        return 0;
    size_t len = (size_t)oc->pos_len + oc->val_len;
    int err = patch_file_put(&o->file, at, oc->staged ? oc->staged : oc->bytes, len);
    oc->staged = NULL;
    free(oc->bytes);
    oc->bytes = NULL;
    return err;
}

int patch_order_commit(patch_order *o, size_t j, patch_out_chunk **oc, size_t n)
{
    uint64_t mine = 0;
    for (size_t i = 0; i < n; i++)
        mine += coded_bytes(oc[i]);
    pthread_mutex_lock(&o->lock);
    while (!o->failed && j != o->next_job && o->parked_bytes + mine > o->parked_max && o->parked_bytes)
        pthread_cond_wait(&o->moved, &o->lock);
    if (o->failed) {   /* another job's error is the writer's: this one stops quietly */
        pthread_mutex_unlock(&o->lock);
        return 0;
    }
    if (j != o->next_job) {
        int err = 0;
        for (size_t i = 0; i < n && !err; i++)
            err = patch_out_keep(oc[i]);
        if (!err) {
            o->parked[j] = 1;
            o->parked_bytes += mine;
        }
        pthread_mutex_unlock(&o->lock);
        return err;
    }
    uint64_t at[PATCH_ORDER_MAX_CHUNKS];
    place(o, j, oc, n, at);
    o->next_job++;
    pthread_mutex_unlock(&o->lock);
    int err = 0;
    for (size_t i = 0; i < n && !err; i++)
        err = put_chunk(o, oc[i], at[i]);
    if (!err)
        done_writing(o, j);
    /* Then the parked jobs right behind, one at a time (the offsets under the lock). */
    while (!err) {
        pthread_mutex_lock(&o->lock);
        size_t k = o->next_job;
        if (o->failed || k >= o->njobs || !o->parked[k]) {
            pthread_cond_broadcast(&o->moved);
            pthread_mutex_unlock(&o->lock);
            break;
        }
        patch_out_chunk *po[PATCH_ORDER_MAX_CHUNKS];
        size_t pn;
        o->chunks_of(o->ctx, k, po, &pn);
        uint64_t pat[PATCH_ORDER_MAX_CHUNKS], bytes = 0;
        place(o, k, po, pn, pat);
        for (size_t i = 0; i < pn; i++)
            bytes += coded_bytes(po[i]);
        o->parked[k] = 0;
        o->next_job++;
        pthread_mutex_unlock(&o->lock);
        for (size_t i = 0; i < pn && !err; i++)
            err = put_chunk(o, po[i], pat[i]);
        pthread_mutex_lock(&o->lock);
        o->parked_bytes -= bytes;
        pthread_mutex_unlock(&o->lock);
        if (!err)
            done_writing(o, k);
    }
    return err;
}

void patch_order_fail(patch_order *o)
{
    pthread_mutex_lock(&o->lock);
    o->failed = 1;
    pthread_cond_broadcast(&o->moved);
    pthread_mutex_unlock(&o->lock);
}
