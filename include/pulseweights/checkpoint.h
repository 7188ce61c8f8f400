/* SPDX-License-Identifier: Apache-2.0 */
/* Checkpoints: safetensors files (single or Hugging Face sharded) mapped in memory, and their state ids. */
#ifndef PULSEWEIGHTS_CHECKPOINT_H
#define PULSEWEIGHTS_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "pulseweights/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Element types patched element-wise; everything else is OPAQUE (carried as bytes). */
typedef enum pulse_dtype {
    PULSE_DT_OPAQUE = 0,
    PULSE_DT_BF16 = 1,
    PULSE_DT_F16 = 2,
    PULSE_DT_F32 = 3,
    PULSE_DT_F8_E4M3 = 4,
    PULSE_DT_F8_E5M2 = 5,
} pulse_dtype;

#define PULSE_MAX_DIMS 8
#define PULSE_STATE_ID_BYTES 32

/* One tensor of an open checkpoint. Owned by the checkpoint; valid until it is closed. */
typedef struct pulse_tensor {
    const char *name;            /* NUL-terminated, as in the header */
    const char *dtype_name;      /* as in the header: "BF16", "I64", "BOOL", ... */
    pulse_dtype dtype;
    unsigned elem_size;          /* bytes per element (1, 2, 4, 8; 1 for OPAQUE of unknown width) */
    int ndim;
    uint64_t shape[PULSE_MAX_DIMS];
    uint64_t nelems;             /* product of shape (1 for a scalar) */
    uint64_t nbytes;             /* nelems * elem_size; equals the data range length */
    uint8_t *data;               /* mapped bytes (writable only when opened PULSE_CKPT_WRITE) */
    unsigned file;               /* index of the shard file holding it (0 when not sharded) */
} pulse_tensor;

typedef struct pulse_ckpt pulse_ckpt;

enum {
    PULSE_CKPT_READ = 0,         /* map read-only (MAP_PRIVATE, PROT_READ) */
    PULSE_CKPT_WRITE = 1,        /* map shared and writable: stores reach the file (in-place apply) */
};

/* Limits applied to every header before anything is allocated from it. */
#define PULSE_ST_MAX_HEADER (100u << 20)   /* bytes of JSON header */
#define PULSE_ST_MAX_TENSORS (1u << 20)
#define PULSE_ST_MAX_SHARDS 4096

/* Opens PATH: a .safetensors file, a model.safetensors.index.json, or a directory holding
 * one of the two. Validates the whole header (JSON, dtypes, shapes vs sizes, offsets inside
 * the file and not overlapping) before returning. Tensors are presented sorted by name
 * (bytewise), which is the canonical order of state ids and patches.
 * On success *out owns the mappings; close with pulse_ckpt_close. */
PULSE_API int pulse_ckpt_open(pulse_ckpt **out, const char *path, int flags);

/* NULL-safe; sets *c to NULL. Does not msync: call pulse_ckpt_sync first to make writes durable. */
PULSE_API void pulse_ckpt_close(pulse_ckpt **c);

/* msync + fsync of every file of a writable checkpoint. */
PULSE_API int pulse_ckpt_sync(pulse_ckpt *c);

PULSE_API size_t pulse_ckpt_count(const pulse_ckpt *c);
PULSE_API const pulse_tensor *pulse_ckpt_tensor(const pulse_ckpt *c, size_t i);
/* Binary search by name; NULL when absent. */
PULSE_API const pulse_tensor *pulse_ckpt_find(const pulse_ckpt *c, const char *name);
/* The "__metadata__" object as compact JSON text ("{}" when absent). */
PULSE_API const char *pulse_ckpt_metadata(const pulse_ckpt *c);
/* Number of files and the path of each (1 for a single file). */
PULSE_API unsigned pulse_ckpt_nfiles(const pulse_ckpt *c);
PULSE_API const char *pulse_ckpt_file_path(const pulse_ckpt *c, unsigned i);

/* --- Writing ---------------------------------------------------------------------- */

/* What a new tensor is to be: data is written later through the returned mapping. */
typedef struct pulse_tensor_spec {
    const char *name;
    const char *dtype_name;      /* "BF16", "F32", "I64", ... */
    int ndim;
    uint64_t shape[PULSE_MAX_DIMS];
} pulse_tensor_spec;

/* Creates a single safetensors file at PATH (written to a new PATH.tmp.XXXXXX first) with the given
 * tensors (data zero-filled; laid out contiguously, widest element first, each aligned to its
 * element size, because Hugging Face's reader refuses gaps) and metadata (JSON
 * object text or NULL), and opens it PULSE_CKPT_WRITE. Fill the data, then pulse_ckpt_commit.
 * Closing without commit removes the temporary file. */
PULSE_API int pulse_ckpt_create(pulse_ckpt **out, const char *path,
                                const pulse_tensor_spec *specs, size_t n, const char *metadata);

/* Creates a checkpoint at PATH with exactly the layout of LIKE (same header bytes; for a
 * sharded LIKE, PATH is a directory receiving the same shard names and index) and copies
 * LIKE's data into it. Opened PULSE_CKPT_WRITE under a temporary name; commit to publish. */
PULSE_API int pulse_ckpt_create_like(pulse_ckpt **out, const char *path, const pulse_ckpt *like);

/* Flushes (msync, fsync), renames the temporary file(s) into place and fsyncs the directory.
 * The checkpoint stays open and now refers to the final path. */
PULSE_API int pulse_ckpt_commit(pulse_ckpt *c);

/* --- Tensors in the caller's memory ------------------------------------------------ */

/* One tensor living in the caller's memory (a numpy array, a torch tensor, ...). */
typedef struct pulse_mem_tensor {
    const char *name;            /* copied by pulse_ckpt_wrap */
    const char *dtype_name;      /* a safetensors dtype name: "BF16", "F32", "I64", ... */
    int ndim;
    uint64_t shape[PULSE_MAX_DIMS];
    void *data;                  /* borrowed: nbytes bytes, C order, as a safetensors file holds them */
    uint64_t nbytes;             /* must equal the shape's element count times the dtype's width */
} pulse_mem_tensor;

/* Makes a checkpoint over the caller's buffers, without copying the data: the tensors are
 * validated (dtype name known, nbytes agreeing with shape and dtype, names distinct and not
 * "__metadata__", data non-NULL when nbytes > 0) and presented sorted by name like an opened
 * file's. flags: PULSE_CKPT_READ, or PULSE_CKPT_WRITE to let a patch or a follower write the
 * buffers in place (then no two tensors may share a byte: an in-place ulp apply would add a
 * delta twice). The buffers must stay alive and unmoved until pulse_ckpt_close; the library
 * writes them only during calls that take the checkpoint as their target.
 * Everything that reads tensors works on it (state ids, diff, patch verify and apply, publish
 * through pulse_publisher_publish_ckpt, follow through pulse_follow_opts.weights); it has no
 * files: pulse_ckpt_nfiles is 0, pulse_ckpt_sync does nothing, pulse_ckpt_commit and
 * pulse_ckpt_create_like refuse it (PULSE_ERR_INVALID). Metadata is "{}". */
PULSE_API int pulse_ckpt_wrap(pulse_ckpt **out, const pulse_mem_tensor *t, size_t n, int flags);

/* --- Identity --------------------------------------------------------------------- */

/* Chunk size of the state id's hash tree, in bytes of tensor data. */
#define PULSE_STATE_CHUNK (1u << 20)

/* Hash of one tensor: SHA-256 over ("pulse-tensor-v1", name, dtype name, shape, and the
 * SHA-256 of each PULSE_STATE_CHUNK-byte chunk of its data). */
PULSE_API int pulse_tensor_hash(const pulse_tensor *t, uint8_t out[32]);

/* State id of the whole checkpoint: SHA-256 over ("pulse-state-v1", count, the tensor
 * hashes in canonical order). Chunks are hashed on `threads` threads (0 = all cores). */
PULSE_API int pulse_ckpt_state_id(const pulse_ckpt *c, int threads, uint8_t out[PULSE_STATE_ID_BYTES]);

/* Lower-case hex of a 32-byte id into buf (65 bytes). Returns buf. */
PULSE_API char *pulse_id_hex(const uint8_t id[32], char buf[65]);
/* Parses 64 hex digits; PULSE_ERR_FORMAT otherwise. */
PULSE_API int pulse_id_parse(const char *hex, uint8_t id[32]);

#ifdef __cplusplus
}
#endif
#endif
