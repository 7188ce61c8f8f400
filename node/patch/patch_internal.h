/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: the parsed form of a patch, the chunk coder and the writer shared by diff and squash. */
#ifndef PULSE_NODE_PATCH_INTERNAL_H
#define PULSE_NODE_PATCH_INTERNAL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <zstd.h>

#include "pulseweights/patch.h"
#include "node/kernels/kernels.h"

/* Fixed header (docs/patch-format.md), all integers little-endian. */
#define PATCH_MAGIC "PULSEPCH"
#define PATCH_HEADER_BYTES 104u
#define PATCH_DIGEST_BYTES 32u
#define PATCH_MAX_TABLE (1ull << 32)     /* bytes of tensor table */
#define PATCH_MAX_NAME 4096u
#define PATCH_MAX_DTYPE_NAME 32u
#define PATCH_LEB_MAX 5u                 /* LEB128 bytes of one 32-bit gap */
#define PATCH_CHUNK_ENTRY_BYTES (4u + 8u + 4u + 4u + 32u)   /* a coded chunk's table entry */

/* One coded chunk (change count > 0) of one tensor. */
typedef struct patch_chunk {
    size_t tensor;          /* index into pulse_patch.tensors */
    uint64_t index;         /* chunk number within the tensor */
    uint64_t first;         /* first unit (element, or byte for OPAQUE) covered */
    uint32_t len;           /* units covered (chunk_elems except for a tensor's last chunk) */
    uint32_t count;         /* changes (differing bytes for OPAQUE) */
    uint64_t offset;        /* from the start of the data section */
    uint32_t pos_len;
    uint32_t val_len;
    const uint8_t *digest;  /* into the patch buffer */
} patch_chunk;

typedef struct patch_tensor {
    char *name;
    char dtype_name[PATCH_MAX_DTYPE_NAME + 1];
    pulse_dtype dtype;
    unsigned elem_size;
    int ndim;
    uint64_t shape[PULSE_MAX_DIMS];
    uint64_t nelems;
    unsigned unit;          /* bytes per coded unit: elem_size, or 1 for OPAQUE */
    uint64_t units;         /* nelems, or nbytes for OPAQUE */
    uint64_t nchunks;       /* ceil(units / chunk_elems) */
    uint64_t changes;
    size_t first_coded;     /* its coded chunks are chunks[first_coded .. first_coded+ncoded) */
    size_t ncoded;
    uint64_t table_bytes;
} patch_tensor;

struct pulse_patch {
    uint8_t *buf;           /* private copy: the whole patch (in memory), or header + table + digest (file) */
    size_t len;             /* the whole patch */
    int fd;                 /* the patch file, chunk data read from it by chunk; -1 in memory */
    uint64_t data_off;      /* file offset of the data section */
    size_t max_chunk_bytes; /* largest coded chunk */
    pulse_value_code values;
    uint32_t chunk_elems;
    uint8_t base_id[32];
    uint8_t result_id[32];
    patch_tensor *tensors;
    size_t ntensors;
    patch_chunk *chunks;
    size_t nchunks;
    const uint8_t *data;    /* the data section, in memory only (NULL for a file) */
    uint64_t data_len;
    uint64_t header_bytes;
};

/* Bytes per unit of a dtype coded element-wise; 0 for OPAQUE. */
unsigned patch_dtype_unit(pulse_dtype dt);

/* Per-thread working memory, sized for one chunk; taken from a pool so that memory is
 * bounded by threads x chunk size, never by the model. */
typedef struct patch_scratch {
    uint32_t *idx;          /* chunk_elems + 64 positions */
    uint32_t *gaps;         /* chunk_elems: the encoder's gaps (the decoder writes positions directly) */
    uint8_t *leb;           /* chunk_elems * 5 */
    uint8_t *vals;          /* chunk_elems * 4 + 256: values, native width */
    uint8_t *planes;        /* chunk_elems * 4: byte planes / compressed output */
    uint8_t *dense;         /* chunk_elems * 4: squash's running chunk */
    uint8_t *mark;          /* chunk_elems: squash's changed flags */
    ZSTD_CCtx *cctx;
    ZSTD_DCtx *dctx;
    int clevel;             /* the level cctx's parameters were last set for */
    int clevel_set;
    uint8_t *in;            /* a chunk's coded bytes read from a patch file */
    size_t in_cap;
} patch_scratch;

typedef struct patch_pool {
    size_t n;
    uint32_t chunk_elems;
    int with_squash;
    patch_scratch *slots;
    atomic_int *busy;
} patch_pool;

int patch_pool_init(patch_pool *pool, int threads, uint32_t chunk_elems, int with_squash);
void patch_pool_free(patch_pool *pool);
/* Takes a free slot (allocating its buffers on first use); NULL with the error set. */
patch_scratch *patch_pool_take(patch_pool *pool, int *err);
void patch_pool_give(patch_pool *pool, patch_scratch *s);

/* Threads actually used for "threads" (0 = default). */
int patch_threads(int threads);

/* A chunk's encoded bytes (position stream then value stream) ready to be written. */
typedef struct patch_out_chunk {
    uint8_t *bytes;         /* malloc'd; pos_len + val_len bytes; NULL once spilled */
    uint64_t spill_off;     /* where the bytes are in the writer's spill file when bytes is NULL */
    uint32_t count;
    uint32_t pos_len;
    uint32_t val_len;
    uint8_t digest[32];
} patch_out_chunk;

/* Encodes an element-wise chunk from positions idx[0..k) and values (k x unit bytes,
 * native width: absolute bits, or zigzag ulp differences >= 1 when ulp != 0). k > 0. */
int patch_encode_changes(patch_scratch *s, const uint32_t *idx, size_t k, const uint8_t *vals,
                         unsigned unit, int ulp, int level, patch_out_chunk *out);
/* Encodes an OPAQUE chunk: `count` differing bytes, replaced by the len new bytes. */
int patch_encode_replace(patch_scratch *s, const uint8_t *bytes, uint32_t len, uint32_t count,
                         int level, patch_out_chunk *out);

/* Bytes of every valid coded chunk of chunk_elems elements are at most this (the coder's
 * output buffer: position frame + value frames, each bounded by ZSTD_compressBound). */
size_t patch_chunk_bytes_bound(uint32_t chunk_elems);

/* Chunk c's coded bytes into *bytes: a pointer into the in-memory patch, or a copy read
 * from the patch file into s->in. The digest is checked when `check` is set, and always for a
 * copy read from a file (the file may have changed since an earlier pass), so the bytes
 * returned are exactly the bytes whose digest was checked when that matters. */
int patch_chunk_bytes(const pulse_patch *p, const patch_chunk *c, patch_scratch *s, int check,
                      const uint8_t **bytes);

/* Decodes chunk c of p: checks its digest, decompresses with bounded sizes, checks that
 * positions lie inside the chunk and counts are as declared. Element-wise: positions in
 * s->idx (s->gaps is not filled), values in s->vals (count x unit, native width). OPAQUE: c->len bytes in s->vals. */
int patch_decode_chunk(const pulse_patch *p, const patch_chunk *c, patch_scratch *s);
/* The same without the digest, for a second decode of a chunk whose digest was already
 * checked in this patch's private buffer (p->buf is never written after open); a patch read
 * from a file is read and checked again. */
int patch_decode_checked_chunk(const pulse_patch *p, const patch_chunk *c, patch_scratch *s);
/* Fused decode + ulp add into dst (the chunk's first byte) for 16-bit chunks with 2-bit
 * symbols, digest not rechecked (see patch_decode_checked_chunk); 1 when c is not a 16-bit
 * ulp chunk, 2 when it is one of another symbol width (then decoded into s, not applied),
 * else 0 or an error. */
int patch_apply_checked_chunk(const pulse_patch *p, const patch_chunk *c, patch_scratch *s, uint8_t *dst);

/* The layout of an output tensor, for the writer. */
typedef struct patch_out_tensor {
    const char *name;
    const char *dtype_name;
    pulse_dtype dtype;
    unsigned elem_size;
    int ndim;
    const uint64_t *shape;
    uint64_t nchunks;
    uint64_t changes;
    patch_out_chunk *chunks;   /* nchunks entries; count 0 = unchanged */
} patch_out_tensor;

/* Serializes header, table, digest and data to path through a temporary file renamed into
 * place; the temporary is removed on any failure. */
int patch_write_file(const char *path, pulse_value_code values, uint32_t chunk_elems,
                     const uint8_t base_id[32], const uint8_t result_id[32],
                     const patch_out_tensor *t, size_t n);
/* The same, where coded chunks whose bytes are NULL are read back from spill_fd at their
 * spill_off (the diff spills each chunk as it is coded, so that memory stays flat). */
int patch_write_file_spill(const char *path, pulse_value_code values, uint32_t chunk_elems,
                           const uint8_t base_id[32], const uint8_t result_id[32],
                           const patch_out_tensor *t, size_t n, int spill_fd);

/* Decodes every chunk of p on `threads` threads (one scratch slot, zstd context and chunk
 * buffers per worker, reused across chunks); with write != 0 also scatters each into
 * target. No state ids, no layout check: pulse_patch_apply_ex's passes 1 and 2, exposed
 * for benchmarks. */
int patch_run_chunks(const pulse_patch *p, pulse_ckpt *target, int write, int threads);
/* Pass 2 after a successful pass 1 on the same p: chunk digests are not recomputed. */
int patch_run_checked_chunks(const pulse_patch *p, pulse_ckpt *target, int threads);

/* Layout equality of a patch tensor and a checkpoint tensor (MISMATCH naming it). */
int patch_check_layout(const pulse_patch *p, const pulse_ckpt *c);

#endif
