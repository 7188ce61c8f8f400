/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: the layout of an open checkpoint, shared by the reader, the writer and the state id. */
#ifndef PULSE_NODE_CHECKPOINT_INTERNAL_H
#define PULSE_NODE_CHECKPOINT_INTERNAL_H

#include "node/checkpoint/json.h"
#include "pulseweights/checkpoint.h"

/* One mapped safetensors file. */
typedef struct ckpt_file {
    char *path;          /* where it is now (a temporary name until commit) */
    char *name;          /* base name: the shard name of an index */
    int fd;              /* -1 for an in-memory image */
    uint8_t *map;
    size_t size;
    int mapped;          /* map is ours to munmap */
    json_doc doc;        /* its parsed header: tensor names point into doc.strs */
} ckpt_file;

struct pulse_ckpt {
    int flags;
    unsigned nfiles;
    ckpt_file *files;
    size_t n;
    pulse_tensor *t;     /* sorted by name */
    char *metadata;      /* compact JSON object text */

    /* Sharded form only. */
    char *index_path;    /* NULL for a single file */
    char *index_name;
    uint8_t *index_bytes;
    size_t index_len;

    /* Created and not yet committed: the temporaries to publish or remove. */
    int uncommitted;
    char *final_path;    /* the single file's, or the directory's final name */
    char *tmp_dir;       /* sharded: the temporary directory holding files and index */
};

/* A checkpoint of tensors' names, dtypes and shapes only (pulse_ckpt_wrap's checks, data NULL):
 * a patch's layout where the data is elsewhere (a GPU) or never whole (change lists). Nothing
 * may read its tensors. */
#define CKPT_LAYOUT_ONLY 0x100
int ckpt_wrap_layout(pulse_ckpt **out, const pulse_mem_tensor *t, size_t n);

/* Dtype facts: element-typed or opaque, and the width in bits. */
typedef struct dtype_info {
    const char *name;
    pulse_dtype dtype;
    unsigned bits;
} dtype_info;

const dtype_info *ckpt_dtype_lookup(const char *name);

/* pulse_ckpt_create at PATH with the tensor names and shapes of LIKE, each of DTYPE_NAME (NULL:
 * LIKE's own dtype): a zero-filled, uncommitted single file for copies and views. */
int ckpt_create_shaped_like(pulse_ckpt **out, const char *path, const pulse_ckpt *like,
                            const char *dtype_name, const char *metadata);

/* Fills the page tables of C's mappings from the page cache (MADV_POPULATE_READ; a hint, which
 * kernels before 5.14 ignore), so that a pass over them later takes no fault per page. */
void ckpt_prefault(const pulse_ckpt *c);

/* Internal entry for the fuzz target: parses a single-file image held in memory (the
 * caller keeps buf alive until close). Same validation as pulse_ckpt_open. */
int pulse_ckpt_open_memory(pulse_ckpt **out, const uint8_t *buf, size_t size);

/* A state id computed chunk by chunk: every PULSE_STATE_CHUNK-byte chunk of every tensor has a
 * global index (tensor i's chunk k is first[i] + k) and a slot for its SHA-256, which any pass
 * that has the chunk's final bytes in cache may fill, from any thread; the tree is then combined
 * without reading a tensor (the diff hashes NEW as it scans it, an apply its result as it writes). */
typedef struct ckpt_chunk_ids {
    const pulse_ckpt *c;
    uint64_t *first;        /* n + 1 prefix sums of the tensors' chunk counts */
    uint8_t (*hash)[32];    /* total slots */
    uint64_t total;
} ckpt_chunk_ids;
/* Chunks one job hashes at once: sixteen fill the AVX-512 lanes of pulse_sha256_many (else eight
 * SHA-NI pairs), and 16 MiB a job still leaves many jobs a thread on any model worth threads. */
#define CKPT_CHUNKS_A_RUN 16
int ckpt_chunk_ids_open(ckpt_chunk_ids *ids, const pulse_ckpt *c);
void ckpt_chunk_ids_close(ckpt_chunk_ids *ids);
/* The tensor that holds global chunk g. */
size_t ckpt_chunk_owner(const ckpt_chunk_ids *ids, uint64_t g);
/* Global chunk g's bytes in the checkpoint: its tensor in *tensor, its first byte in *data; returns its length. */
size_t ckpt_chunk_bytes(const ckpt_chunk_ids *ids, uint64_t g, size_t *tensor, const uint8_t **data);
/* Hashes global chunks g .. g + n - 1 from the checkpoint's bytes into their slots. */
void ckpt_chunk_ids_hash_run(ckpt_chunk_ids *ids, uint64_t g, size_t n);
/* The state id (and, when tensor_hashes is not NULL, each tensor's hash in canonical order) from
 * the slots, every one of which the caller filled. */
void ckpt_chunk_ids_state(const ckpt_chunk_ids *ids, uint8_t out[PULSE_STATE_ID_BYTES], uint8_t *tensor_hashes);

/* T's hash (pulse_tensor_hash) from the SHA-256 of each PULSE_STATE_CHUNK-byte chunk of its data
 * (ceil(nbytes / PULSE_STATE_CHUNK) x 32 bytes), hashed wherever the data is (a GPU). */
void ckpt_tensor_hash_from(const pulse_tensor *t, const uint8_t *chunk_hashes, uint8_t out[32]);

/* The state id of tensors whose hashes (canonical order) are HASHES[0..n): what a committer
 * computes for the whole model from its parts' tensor hashes. */
void ckpt_state_of_hashes(size_t n, const uint8_t (*hashes)[32], uint8_t out[PULSE_STATE_ID_BYTES]);

/* pulse_ckpt_state_id that also stores each tensor's hash (canonical order) in
 * tensor_hashes (count * 32 bytes) when it is not NULL: one pass over the data. */
int ckpt_state_id_tensors(const pulse_ckpt *c, int threads, uint8_t out[PULSE_STATE_ID_BYTES],
                          uint8_t *tensor_hashes);

/* Bytes [off, off + len) of tensor `tensor` (canonical index). */
typedef struct ckpt_span {
    size_t tensor;
    uint64_t off, len;
} ckpt_span;

/* Makes DST's tensor bytes equal to SRC's in place (DST open PULSE_CKPT_WRITE; the same tensor
 * names, dtypes and shapes, else PULSE_ERR_MISMATCH before anything is written), writing only the
 * 4 KiB blocks that differ, on `threads` threads; *written (may be NULL) gets the bytes copied.
 * With SPANS (nspans of them), only those are looked at: a caller that knows where SRC differs
 * (the diff that found it) updates in O(changes), not a pass over the model. NULL: every byte.
 * Not durable until pulse_ckpt_sync. */
int ckpt_update_from(pulse_ckpt *dst, const pulse_ckpt *src, const ckpt_span *spans, size_t nspans, int threads,
                     uint64_t *written);

/* Compact JSON text of the string->string object OBJ of D (malloc'd into *out): the form
 * pulse_ckpt_metadata gives. LABEL names the file in errors. */
int ckpt_metadata_text(const json_doc *d, const json_node *obj, const char *label, char **out);

/* Whether TEXT[0..len) is a metadata object in exactly that compact form: 0, else
 * PULSE_ERR_FORMAT naming WHAT. */
int ckpt_metadata_check(const char *text, size_t len, const char *what);

/* Makes C's __metadata__ TEXT (compact form, checked by the caller): nothing when it is already
 * that; else C's first file's header is rewritten, in place when the new one fits the old
 * header's length (padded with spaces), otherwise the file is rewritten whole (temporary, then
 * rename over it; header padded so later changes fit) and C maps the new file. A checkpoint
 * over caller memory only changes what pulse_ckpt_metadata says. C must be open writable. */
int ckpt_set_metadata(pulse_ckpt *c, const char *text);

/* rename(FROM, TO), then fsync of TO's directory: the new name survives a crash. */
int ckpt_rename_durable(const char *from, const char *to);

/* Builds "<dir>/<name>" (malloc), or NULL. */
char *ckpt_join(const char *dir, const char *name);

#endif
