/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: bucket keys of a run, exact object transfers and keyframes, shared by publisher and follower. */
#ifndef PULSE_NODE_SYNC_INTERNAL_H
#define PULSE_NODE_SYNC_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "pulseweights/checkpoint.h"
#include "pulseweights/keys.h"
#include "pulseweights/record.h"
#include "pulseweights/store.h"
#include "pulseweights/sync.h"

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

/* Aborts the incomplete multipart uploads under RUN's objects/ begun more than
 * SYNC_STALE_UPLOAD_S before NOW (unix seconds): left by a writer killed mid-upload, billed, and
 * shown by no listing of objects. No publish of pulse runs that long (retention's rule for
 * objects no record names is the same hour), so none of them is live. Best effort: a store
 * without multipart uploads, or one that refuses the listing, changes nothing. Returns how many
 * were aborted. A publisher calls it when it opens. */
#define SYNC_STALE_UPLOAD_S 3600
unsigned sync_abort_stale_uploads(pulse_store *st, const char *run, int64_t now);

/* The progress of the publish or step in hand, for the opts' on_progress: the caller begins
 * and ends it around the work (thread-local, so publishers on other threads keep their own);
 * it advances where the bytes are counted. FN NULL: nothing is reported. */
void sync_progress_begin(void (*fn)(void *ctx, uint64_t done, uint64_t total), void *ctx, uint64_t total);
void sync_progress_total(uint64_t total);   /* a new phase of TOTAL bytes: done back to 0 */
void sync_progress_add(uint64_t n);
void sync_progress_end(void);

/* Fetches the objects named by o[0..n) with at most their declared size, checks each size
 * and SHA-256, and returns malloc'd buffers in data[i] (free with pulse_store_free). On any
 * failure nothing is returned (all freed) and the detail names the object. */
int sync_fetch_objects(pulse_store *st, const char *run, const pulse_record_object *o, size_t n,
                       void **data, uint64_t *moved);

/* Copies C (sharded, or tensors in caller memory) into one new safetensors file at PATH, opened
 * writable and not yet committed (closing without commit removes it): a keyframe is always one
 * file, and the publisher snapshots tensors in memory this way. */
int sync_copy_to_file(const pulse_ckpt *c, const char *path, pulse_ckpt **out);

/* Publishes a keyframe of C: its single-file bytes cut into PULSE_KEYFRAME_CHUNK ranges, each
 * zstd-compressed and uploaded; the objects are appended to R. */
int sync_keyframe_publish(pulse_store *st, const char *run, const pulse_ckpt *c, int threads,
                          int zstd_level, pulse_record *r, uint64_t *moved);

/* Rebuilds the checkpoint of keyframe record R at PATH, always as one file: fetches and checks
 * every chunk, decompresses into a temporary file (a sharded keyframe: each shard into its file
 * in a temporary directory, opened as one checkpoint and copied into one file), checks its state
 * id against R's result, renames it into place. Trailing tensor-hashes objects are not fetched.
 * Nothing is left at PATH on failure, and no temporary on any path but a kill (sync_keyframe_sweep). */
int sync_keyframe_restore(pulse_store *st, const char *run, const pulse_record *r, int threads,
                          const char *path, uint64_t *moved);
/* Removes the temporaries a restore into PATH left when it was killed (PATH.keyframe.*, PATH.tmp.*). */
void sync_keyframe_sweep(const char *path);

/* Whether an existing record PREV says what MINE says (the caller's rule for a re-run). */
typedef int (*sync_same_fn)(const pulse_record *prev, const pulse_record *mine);
/* Same kind, node, base and result: the publisher's rule (the objects are regenerated alike). */
int sync_same_transition(const pulse_record *prev, const pulse_record *mine);

/* Signs REC with KEY and writes it create-if-absent under <run>/<record key> (REL receives the
 * key relative to the run; BYTES and LEN the signed record, malloc'd). When a record is already
 * there and SAME accepts it, that record's bytes are returned instead (a re-run after a crash);
 * otherwise PULSE_ERR_EXISTS naming the key. Adds the bytes sent to *moved. */
int sync_commit_record(pulse_store *st, const char *run, const pulse_secret_key *key, pulse_record *rec,
                       sync_same_fn same, char rel[SYNC_KEY_MAX], uint8_t **bytes, size_t *len,
                       uint64_t *moved);

/* What REC (committed under REL) says, as the caller's step summary (moved_bytes untouched). */
void sync_step_from_record(pulse_sync_step *s, const pulse_record *rec, const char *rel);

/* mkdir -p (EEXIST is fine, at every level); what it creates gets mode 0700. */
int sync_mkdir(const char *dir);

/* A node's state directory, held open and locked (node/sync/state_dir.c). */
typedef struct state_dir {
    int fd;   /* the lock file, flock'ed exclusively; -1: not held */
} state_dir;

/* Creates DIR as sync_mkdir does, refuses it when it is not owned by this user or group or
 * others can write it (PULSE_ERR_INVALID, naming the mode and `chmod 700 DIR`), then locks
 * DIR/lock for this process (opened O_NOFOLLOW | O_CLOEXEC, flock LOCK_EX | LOCK_NB) and writes
 * its pid there. Another process holding it: PULSE_ERR_EXISTS, "state directory DIR is in use
 * by another pulse process (pid N)". Then, lock held, kills what an on-update command of a node
 * that died on DIR left running (stale_hook_reap). Held until state_dir_close (or the
 * process ends). */
int state_dir_open(const char *dir, state_dir *out);
/* The owner and mode checks of state_dir_open alone (loco's state directory). */
int state_dir_check(const char *dir);
void state_dir_close(state_dir *d);
/* Removes the entries of DIR whose names start with one of the n stems (a directory with the
 * files in it): what a process that stopped in DIR mid-write left (call with the lock held).
 * Best effort: nothing to report. */
void state_dir_sweep(const char *dir, const char *const *stems, size_t n);

#endif
