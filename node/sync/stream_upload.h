/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: a patch's data uploaded in parts while the diff writes it (node/sync/stream_upload.c). */
#ifndef PULSE_NODE_SYNC_STREAM_UPLOAD_H
#define PULSE_NODE_SYNC_STREAM_UPLOAD_H

#include <stddef.h>
#include <stdint.h>

#include "node/sync/sync_internal.h"
#include "pulseweights/store.h"

/* One part of the data section: bytes [off, off + len) of it, stored under its SHA-256. */
typedef struct upload_part {
    uint8_t digest[32];
    uint64_t off, len;
} upload_part;

typedef struct stream_upload stream_upload;

/* Starts the uploading thread, which stores parts of run RUN through ST (a handle of its own: no
 * one else uses it until stream_upload_finish). */
int stream_upload_start(stream_upload **out, pulse_store *st, const char *run);
/* The diff's pulse_diff_opts.on_data (CTX: the stream_upload). */
void stream_upload_on_data(void *ctx, int fd, uint64_t data_start, uint64_t bytes);
/* The diff's pulse_diff_opts.on_data_progress: how far along it is, so that parts shrink near the end. */
void stream_upload_on_progress(void *ctx, uint64_t done, uint64_t total);
/* After the diff: DATA_LEN, the data section's size when it succeeded (the rest is stored, with
 * TAIL, the patch's head and up to one more object (data and len set), beside the last parts in
 * the same batch, and waited for), or UINT64_MAX when it failed (the thread stops; parts stored
 * are orphans, which retention collects). 0 with TAIL's digests filled in, the parts in order
 * in *parts (owned by SU) and *n, the bytes sent added to *moved; or the first failure. */
int stream_upload_finish(stream_upload *su, uint64_t data_len, sync_blob *tail, size_t ntail,
                         const upload_part **parts, size_t *n, uint64_t *moved);
void stream_upload_free(stream_upload **su);

#endif
