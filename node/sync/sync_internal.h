/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: bucket keys of a run, exact object transfers and keyframes, shared by publisher and follower. */
#ifndef PULSE_NODE_SYNC_INTERNAL_H
#define PULSE_NODE_SYNC_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "pulseweights/checkpoint.h"
#include "pulseweights/record.h"
#include "pulseweights/store.h"

#define SYNC_KEY_MAX 512

/* "<run>/objects/<hex>". */
int sync_object_key(const char *run, const uint8_t digest[32], char out[SYNC_KEY_MAX]);
/* "<run>/<rel>" for a key relative to the run (a record key, "heads/sync/<node>"). */
int sync_run_key(const char *run, const char *rel, char out[SYNC_KEY_MAX]);
/* "heads/sync/<node-hex>" (relative to the run). */
void sync_head_rel(const uint8_t node[32], char out[SYNC_KEY_MAX]);

/* A blob to upload as a content-addressed object. */
typedef struct sync_blob {
    const void *data;
    size_t len;
    uint8_t digest[32];
} sync_blob;

/* Uploads blobs as objects (create-if-absent: an object already there is the same bytes by
 * construction) in one parallel batch. Adds the bytes actually sent to *moved. */
int sync_put_objects(pulse_store *st, const char *run, const sync_blob *blobs, size_t n,
                     uint64_t *moved);

/* Fetches the objects named by o[0..n) with at most their declared size, checks each size
 * and SHA-256, and returns malloc'd buffers in data[i] (free with pulse_store_free). On any
 * failure nothing is returned (all freed) and the detail names the object. */
int sync_fetch_objects(pulse_store *st, const char *run, const pulse_record_object *o, size_t n,
                       void **data, uint64_t *moved);

/* Publishes a keyframe of C: its single-file bytes cut into PULSE_KEYFRAME_CHUNK ranges, each
 * zstd-compressed and uploaded; the objects are appended to R. */
int sync_keyframe_publish(pulse_store *st, const char *run, const pulse_ckpt *c, int threads,
                          int zstd_level, pulse_record *r, uint64_t *moved);

/* Rebuilds the checkpoint of keyframe record R at PATH: fetches and checks every chunk,
 * decompresses into a temporary file, checks its state id against R's result, renames it
 * into place. Nothing is left at PATH on failure. */
int sync_keyframe_restore(pulse_store *st, const char *run, const pulse_record *r, int threads,
                          const char *path, uint64_t *moved);

/* mkdir -p of one level (EEXIST is fine). */
int sync_mkdir(const char *dir);

#endif
