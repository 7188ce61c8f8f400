/* SPDX-License-Identifier: Apache-2.0 */
/* Sync through a store: a publisher writes signed patches and keyframes, a follower verifies and applies them. */
#ifndef PULSEWEIGHTS_SYNC_H
#define PULSEWEIGHTS_SYNC_H

#include <stddef.h>
#include <stdint.h>

#include "pulseweights/error.h"
#include "pulseweights/keys.h"
#include "pulseweights/manifest.h"
#include "pulseweights/patch.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The bucket layout and both flows are described in docs/sync.md. */

/* Bytes of file per keyframe object (before compression). */
#define PULSE_KEYFRAME_CHUNK (16u << 20)

/* What one publish or one applied step did. */
typedef struct pulse_sync_step {
    uint64_t step;
    int kind;                      /* PULSE_RECORD_SYNC_PATCH or PULSE_RECORD_KEYFRAME */
    uint8_t base[32], result[32];  /* state ids (base all zero for a keyframe) */
    uint64_t changes;              /* changed elements (keyframe: all) */
    uint64_t dense_bytes;          /* tensor data bytes of the checkpoint */
    uint64_t object_bytes;         /* bytes of the record's objects */
    uint64_t moved_bytes;          /* bytes actually uploaded or downloaded (objects + record) */
    int already;                   /* publish: the step was already published (nothing uploaded) */
    char record_key[PULSE_INDEX_MAX_KEY + 1];          /* relative to the run: records/<kind>/<step>/<node> */
} pulse_sync_step;

/* --- Publisher ---------------------------------------------------------------------- */

typedef struct pulse_publish_opts {
    size_t size;                   /* sizeof(pulse_publish_opts); set by pulse_publish_opts_default */
    const char *store_url;         /* file:///... or s3://bucket/prefix */
    const char *run;               /* run name: [A-Za-z0-9._-], first a letter or digit */
    const char *key_path;          /* the node's NAME.key */
    const char *state_dir;         /* created if absent: index.db, last.safetensors */
    pulse_value_code values;       /* default PULSE_VALUES_ULP */
    int threads;                   /* 0 = all cores */
    int zstd_level;                /* 0 (default): the codec's level for patches, 3 for keyframes */
    /* Nonzero: sync the state directory's copy of the last published state (the next diff's
     * base) after every publish, so that a power loss never costs a keyframe. 0, the default:
     * it is synced when the publisher closes, and a note names the boot that wrote it; after a
     * restart of the machine a copy that no longer hashes to its state is deleted, so the next
     * publish is a keyframe. */
    int durable;
    /* Called (may be NULL), from the publishing thread, as a keyframe's chunks are compressed and
     * uploaded (every 8 chunks): DONE bytes of the checkpoint of TOTAL. For progress meters. */
    void (*on_progress)(void *ctx, uint64_t done, uint64_t total);
    void *progress_ctx;
    /* Elements per patch chunk (1..PULSE_PATCH_MAX_CHUNK); 0, the default: 2^20. The chunk is
     * the unit a follower holding slices fetches (docs/serving.md "Slices"): smaller chunks cut
     * a tensor-parallel rank's bytes closer to its share, at ~52 bytes of table a coded chunk. */
    uint32_t chunk_elems;
    /* Nonzero: patches are context-coded (pulse_diff_opts.context, format 5): about 0.7x the
     * bytes on training steps, but followers that do not hold the weights (engine-held, slices
     * of column-split tensors, sparse updates) cannot decode them. Default 0. */
    int context;
    /* parts > 0: this publisher holds part PART (0 .. parts-1) of a model published in parts by
     * as many publishers (docs/sync.md, "A trainer in parts"): a disjoint set of whole tensors,
     * published as the run "<run>.part-PART-of-PARTS" with its tensor hashes, every step (a
     * part that did not change publishes a patch of no changes), for pulse_publisher_commit.
     * Steps must be given (>= 0). Default 0: the whole model. */
    uint32_t part, parts;
} pulse_publish_opts;

PULSE_API void pulse_publish_opts_default(pulse_publish_opts *o);

typedef struct pulse_publisher pulse_publisher;

/* Opens the store, loads the key (refused when group/others can read it), opens the index. */
PULSE_API int pulse_publisher_open(pulse_publisher **out, const pulse_publish_opts *opts);

/* Syncs the state directory's copy of the last published state to disk when publishes updated
 * it without a sync (opts.durable 0), and removes the note; 0 when there was nothing to do.
 * pulse_publisher_close does the same, but cannot say that it failed. */
PULSE_API int pulse_publisher_sync(pulse_publisher *p);
PULSE_API void pulse_publisher_close(pulse_publisher **p);

/* Flags of pulse_publisher_publish. */
#define PULSE_PUBLISH_KEYFRAME 1u   /* also publish a keyframe of this step */

/* Publishes the checkpoint at CKPT as step STEP (-1: one more than the last published, 0 for
 * the first). The first publish is a keyframe; later ones a patch against the last published
 * state (and a keyframe too with PULSE_PUBLISH_KEYFRAME). Idempotent: re-running after a crash
 * completes the step; publishing the state already published is a no-op (step->already). */
PULSE_API int pulse_publisher_publish(pulse_publisher *p, const char *ckpt, int64_t step,
                                      unsigned flags, pulse_sync_step *out);

/* The same for a checkpoint already open: a file one, or tensors in memory (pulse_ckpt_wrap).
 * Tensors in memory are copied once into the state directory (the next diff's base, as for a
 * file); the caller must not change them during the call. C is only read; it stays the caller's. */
PULSE_API int pulse_publisher_publish_ckpt(pulse_publisher *p, const pulse_ckpt *c, int64_t step,
                                           unsigned flags, pulse_sync_step *out);

/* Publishes step STEP (as pulse_publisher_publish_ckpt) from its changes alone: T[0..n), one
 * entry a tensor of the whole layout in bytewise name order, each with the tensor's hash now
 * and its changed elements since the state this publisher last published (pulse_changes_find
 * gives exactly this, from tensors on the host or a GPU). No tensor is read: the patch is made of
 * the lists (byte for byte the patch a diff of the tensors gives), the new state id of the
 * hashes. The lists are checked (order, bounds, a zero delta, the arrays the value code needs:
 * PULSE_ERR_INVALID naming the tensor) but cannot be checked against the tensors this publisher
 * never holds: a list that is not the change from the last published state makes a patch every
 * follower refuses (its result is not the record's state). Needs a step published before from
 * the tensors (the first one, a keyframe); a keyframe is published from the tensors too
 * (pulse_publisher_publish_ckpt with PULSE_PUBLISH_KEYFRAME after this call, same step). No
 * copy of the state is kept, and one left by an earlier publish is removed: a later publish from
 * the tensors is a keyframe. Not with opts.context. */
PULSE_API int pulse_publisher_publish_changes(pulse_publisher *p, const pulse_tensor_changes *t, size_t n,
                                              int64_t step, pulse_sync_step *out);

/* A part's changes step by step where its tensors live: a copy of the state last published is
 * kept beside them (host memory, or the GPU's), each step is compared with it there, and only
 * the changes and the tensors' hashes (1 MiB chunks hashed where the data is) cross to the
 * caller. PULSE_MEM_CUDA needs a build with CUDA and a device (PULSE_ERR_UNSUPPORTED
 * otherwise); PULSE_MEM_HOST is the same path on the CPU. */
typedef struct pulse_changes pulse_changes;
#define PULSE_MEM_HOST 0
#define PULSE_MEM_CUDA 1

/* Keeps a copy of TENSORS (n of them, their data in host memory, or in device memory of the
 * current CUDA device for PULSE_MEM_CUDA) as the base: the state published last (from these
 * tensors: pulse_publisher_publish_ckpt). Element-wise dtypes only (PULSE_ERR_INVALID naming
 * another); on a device each tensor below 2^32 elements. */
PULSE_API int pulse_changes_open(pulse_changes **out, const pulse_mem_tensor *tensors, size_t n, int where);
PULSE_API void pulse_changes_close(pulse_changes **c);

/* The changes from the base to NOW (the same tensors: names, dtypes, shapes, and memory kind,
 * else PULSE_ERR_MISMATCH), with NOW's tensor hashes, into *out (n entries in name order, with
 * index, values and deltas; owned by C, valid until the next find or close). The base stays. */
PULSE_API int pulse_changes_find(pulse_changes *c, const pulse_mem_tensor *now, size_t n,
                                 const pulse_tensor_changes **out);

/* The changes last found become the base (call it once their publish succeeded): only the
 * changed elements are written. */
PULSE_API int pulse_changes_accept(pulse_changes *c);

/* Commits step STEP (-1: one more than the last committed, 0 for the first) of a model published
 * in PARTS parts (pulse_publish_opts.part) as one record of P's run, signed by P's key (the key
 * the parts signed with): waits up to WAIT_S seconds for every part's record of the step, checks
 * each (signature, run, step, its tensor hashes against its state, its base against the last
 * committed step, no tensor in two parts), then writes one head over the parts' patches (their
 * data objects named where they lie) and the record, whose base and result are the whole
 * model's state ids, computed from the parts' tensor hashes without reading a tensor. A step
 * every part published as a keyframe is committed as a keyframe of the parts' files. Nothing is
 * written unless every part is there and checks: the error names the part. Idempotent, as a
 * publish. P must be opened without parts. */
PULSE_API int pulse_publisher_commit(pulse_publisher *p, uint32_t parts, int64_t step, double wait_s,
                                     pulse_sync_step *out);

/* --- Follower ----------------------------------------------------------------------- */

typedef struct pulse_follow_opts {
    size_t size;                   /* sizeof(pulse_follow_opts); set by pulse_follow_opts_default */
    const char *store_url;
    const char *run;
    const pulse_trust *trust;      /* keys whose records are accepted (borrowed) */
    const char *state_dir;         /* created if absent: index.db */
    const char *weights_path;      /* the local checkpoint, created from a keyframe when absent */
    int threads;                   /* 0 = all cores */
    /* Called after each applied step (may be NULL); a non-zero return stops the pull. */
    int (*on_step)(void *ctx, const pulse_sync_step *step);
    void *ctx;
    /* Instead of weights_path (exactly one of the two): tensors in memory, updated in place
     * (borrowed; a pulse_ckpt_wrap made with PULSE_CKPT_WRITE). Names, dtypes and shapes must be
     * the run's (PULSE_ERR_MISMATCH before anything is written otherwise). When they hold the
     * state this state directory last applied, the pull goes on from it; any other content is
     * replaced by the newest keyframe, verified in the state directory before it is copied in.
     * Each step is verified in full before the first write, so a refused step leaves the tensors
     * as they were. Nothing is journalled: memory does not outlive a crash. */
    pulse_ckpt *weights;
    /* Nonzero: sync the weights file to disk after every step (msync), so that a power loss
     * never costs a keyframe download. 0, the default: the weights are synced when the
     * follower closes and whenever a keyframe is restored, and between those a note in the
     * state directory names the boot that wrote them. A process crash loses nothing either
     * way (the page cache is the file); after the machine itself restarted, weights the note
     * says were not synced and that no longer hash to a state are replaced by the newest
     * keyframe (docs/node.md). Where the kernel has no boot id, every step is synced. */
    int durable;
    /* Seconds one pull may take, every request of it and their retries included
     * (pulse_store_set_deadline): past it the pull fails with PULSE_ERR_NETWORK, the weights at
     * the last step applied, and the next pull starts afresh. 0, the default: no bound beyond
     * the store's per-request limits. `pulse pull` and `pulse node follow` set 3600. */
    double deadline_s;
    /* Called (may be NULL), from the pulling thread, as a step's objects arrive (a keyframe's
     * every 8 chunks): DONE bytes fetched of TOTAL, the bytes of the step's objects. */
    void (*on_progress)(void *ctx, uint64_t done, uint64_t total);
    void *progress_ctx;
    /* Instead of weights_path and weights (exactly one of the three): weights a serving engine
     * holds in its own layout and memory (fused, sharded, on a GPU), which the follower never
     * reads or writes and keeps no copy of (docs/serving.md). Both callbacks are required.
     * on_patch gets each sync-patch step after every check a follower makes on its own
     * weights short of hashing them: the record's signature, key, run, step and base (the state
     * this state directory last delivered), the object's digest and size, the patch's own ids,
     * and every chunk's digest and decode (pulse_patch_verify); the engine then takes the
     * changes (pulse_patch_tensor_updates) and applies them. on_keyframe gets a keyframe
     * (starting from nothing, or when the chain is broken) as a checkpoint restored in the
     * state directory and verified against the record's state id, deleted after the call. A
     * non-zero return refuses the step (the callback must then have written nothing) and stops
     * the pull with PULSE_ERR_INVALID. The follower cannot hash what it never sees: it takes
     * the engine to hold what it last delivered (docs/trust.md "Engine-held weights"). */
    int (*on_patch)(void *ctx, const pulse_sync_step *step, const pulse_patch *p);
    int (*on_keyframe)(void *ctx, const pulse_sync_step *step, const pulse_ckpt *keyframe);
    void *engine_ctx;
    /* With on_patch: the parts of tensors the engine holds, n_slices of them (copied at open);
     * NULL, the default: every tensor whole. A tensor-parallel rank names its row range of each
     * tensor as flat elements (a column range as one range per row); an expert-parallel rank
     * names only its experts' tensors. Each patch step then fetches the patch's head, checked
     * against the signed record (object "patch-index"), and only the chunks that hold the named
     * elements, by ranged GETs of the patch object, each checked against its digest in the head:
     * on_patch gets a sliced patch (pulse_patch_open_head) holding just those chunks, checked
     * and decoded in full. A slice naming a tensor the run does not have, or elements beyond
     * one, refuses the step by name before any chunk is fetched (PULSE_ERR_INVALID: the
     * caller's slices are wrong, nothing is held against the record). A record without the head
     * object (an older publisher) is fetched whole. Keyframes are always whole. */
    const struct pulse_slice *slices;
    size_t n_slices;
} pulse_follow_opts;

/* Flat elements [start, stop) of the tensor called `tensor`, in checkpoint coordinates. */
typedef struct pulse_slice {
    const char *tensor;
    uint64_t start, stop;
} pulse_slice;

PULSE_API void pulse_follow_opts_default(pulse_follow_opts *o);

typedef struct pulse_follower pulse_follower;

PULSE_API int pulse_follower_open(pulse_follower **out, const pulse_follow_opts *opts);
PULSE_API void pulse_follower_close(pulse_follower **f);

/* Syncs the weights file to disk when steps were applied to it without a sync (opts.durable
 * 0), and removes the state directory's unsynced note; 0 when there was nothing to do.
 * pulse_follower_close does the same, but cannot say that it failed. */
PULSE_API int pulse_follower_sync(pulse_follower *f);

/* Brings the weights to the newest published state: lists the run's records, then applies the
 * chain step by step, each verified before the weights are touched. *applied (may be NULL)
 * receives the number of steps applied; *held (may be NULL) the step and state now held.
 * A refused step stops the pull with its error; the weights stay at the last good state. */
PULSE_API int pulse_follower_pull(pulse_follower *f, size_t *applied, pulse_sync_step *held);

#ifdef __cplusplus
}
#endif
#endif
