/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: the parsed form of a patch, the chunk coder and the writer shared by diff and squash. */
#ifndef PULSE_NODE_PATCH_INTERNAL_H
#define PULSE_NODE_PATCH_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <zstd.h>

#include "pulseweights/patch.h"
#include "base/leb128.h"
#include "node/kernels/kernels.h"

/* Fixed header (docs/patch-format.md), all integers little-endian. */
#define PATCH_MAGIC "PULSEPCH"
/* Format 6 (format 5 whose values were coded by the step before the base) is no longer read:
 * refused at open by name, its number never given to another format. */
#define PATCH_VERSION_BY_DIRECTION 6u
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

/* A chunk's coded bytes: its position and value streams. */
static inline size_t patch_chunk_coded(const patch_chunk *c)
{
    return (size_t)c->pos_len + c->val_len;
}

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
    uint32_t version;       /* 2 .. 5: 2 has no position coding byte, 4 adds metadata, 5 context-coded chunks */
    char *metadata;         /* format 4: the result's __metadata__ (compact JSON), NULL when not carried */
    uint8_t *buf;           /* private copy: the whole patch (in memory), or header + table + digest (file) */
    size_t mapped;          /* buf is a read-only mapping of this many bytes, not malloc'd (0: malloc'd) */
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
    /* The coded chunks' bytes are disjoint and cover the data section, in any order; every
     * writer puts them in table order (in_table_order set, by_offset NULL). Otherwise by_offset
     * lists the chunks by ascending offset (a committer that merged parts' heads). */
    int in_table_order;
    size_t *by_offset;
    uint64_t header_bytes;
    /* A sliced patch (pulse_patch_open_head, patch_slice.c): only the head is held, and each
     * coded chunk's bytes once supplied (digest checked then), else NULL. NULL otherwise. */
    const uint8_t **present;
    uint8_t *wanted;        /* sliced: per coded chunk, marked by pulse_patch_want */
    uint8_t **held;         /* sliced: the supplied ranges, owned */
    size_t nheld;
    /* Every chunk's digest and coding checked once (pulse_patch_verify) on bytes only this
     * handle holds (in memory): they cannot change, so later checks of the same bytes are
     * skipped. Never set for a patch read from a file, which can change between reads. */
    atomic_int verified;
};

/* The i-th coded chunk in data order: its index in p->chunks. */
static inline size_t patch_chunk_by_offset(const pulse_patch *p, size_t i)
{
    return p->by_offset ? p->by_offset[i] : i;
}

/* Chunk k starts where chunk k - 1 ends in the data section (always, in a patch in table order). */
static inline int patch_chunk_follows(const pulse_patch *p, size_t k)
{
    const patch_chunk *a = &p->chunks[k - 1];
    return p->in_table_order || a->offset + (uint64_t)a->pos_len + a->val_len == p->chunks[k].offset;
}

/* A sliced patch's chunk k (in p->chunks) was not supplied: decoding it is refused, the walks
 * over "all" chunks (verify, updates) skip it. */
static inline int patch_chunk_absent(const pulse_patch *p, size_t k)
{
    return p->present && !p->present[k];
}

/* Checks and decodes every present chunk of a sliced patch (pulse_patch_verify's pass). */
int patch_slice_verify(const pulse_patch *p, int threads);

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
    uint8_t *planes2;       /* the diff's second output (two chunks a job), same size, lazily */
    int defer_digest;       /* set by the diff: the encoders leave out->digest to the caller */
    uint8_t *dense;         /* chunk_elems * 4: squash's running chunk */
    uint8_t *mark;          /* chunk_elems: squash's changed flags */
    ZSTD_CCtx *cctx;
    ZSTD_DCtx *dctx;
    int clevel;             /* the level cctx's parameters were last set for */
    int clevel_set;
    uint8_t *in;            /* a chunk's coded bytes read from a patch file */
    size_t in_cap;
    uint8_t *run;           /* a run of chunks' coded bytes read at once (<= PATCH_RUN_BYTES) */
    uint8_t *bounce;        /* chunk_elems * 8, lazily: aligned copies of misaligned chunks */
    size_t run_cap;
    struct patch_ctx_scratch *ctx;  /* the context coder's working memory, lazily (format 5) */
    uint8_t *ctxout;        /* the diff's context-coded chunk, beside today's coding (lazily, chunk bound) */
} patch_scratch;

typedef struct patch_pool {
    size_t n;
    uint32_t chunk_elems;
    int with_squash;
    patch_scratch *slots;
    atomic_int *busy;
} patch_pool;

int patch_pool_init(patch_pool *pool, int threads, uint32_t chunk_elems, int with_squash);
/* A pool kept between calls of one kind (patch_pool.c): returns it when free and fitting
 * (else a fresh pool in *own); give it back with patch_pool_give_kept, saying the most
 * changes one chunk had (large chunks drop their buffers, keeping the zstd contexts);
 * release frees it. NULL with *err on failure. */
typedef enum { PATCH_KEPT_APPLY, PATCH_KEPT_DIFF, PATCH_KEPT_COUNT } patch_kept_kind;
patch_pool *patch_pool_take_kept(patch_kept_kind kind, int threads, uint32_t chunk_elems, patch_pool *own,
                                 int *err);
void patch_pool_give_kept(patch_pool *pool, patch_pool *own, uint64_t most_changes);
void patch_pool_release_kept(patch_kept_kind kind);
void patch_pool_free(patch_pool *pool);
/* Takes a free slot (allocating its buffers on first use); NULL with the error set. */
patch_scratch *patch_pool_take(patch_pool *pool, int *err);
void patch_pool_give(patch_pool *pool, patch_scratch *s);
/* Frees the chunk-sized buffers of every slot (taken again on the next patch_pool_take),
 * keeping the zstd contexts and the read buffer: what a pool kept between calls holds. */
void patch_pool_trim(patch_pool *pool);

/* Threads actually used for "threads" (0 = default). */
int patch_threads(int threads);

/* A chunk's encoded bytes (position stream then value stream) ready to be written. */
typedef struct patch_out_chunk {
    uint8_t *bytes;         /* malloc'd; pos_len + val_len bytes; NULL while staged or once written */
    const uint8_t *staged;  /* the encoder's output in its scratch slot, valid until the slot is
                               given back: the caller writes it out or keeps it (patch_out_keep) */
    uint32_t count;
    uint8_t planned;        /* the diff's plan: the chunk differs (patch_table_len with planned) */
    uint32_t pos_len;
    uint32_t val_len;
    uint8_t digest[32];
} patch_out_chunk;

/* ---- the position stream (patch_positions.c) -------------------------------------------- */

/* Its first byte (format 3): the coding. */
#define PATCH_POS_ZSTD 0u   /* a zstd frame of the LEB128 gaps follows */
#define PATCH_POS_RICE 1u   /* PATCH_POS_RICE + s (s = 0..31): Rice planes, s-bit remainders */

/* A position stream's coding and body, probed before decoding. */
typedef struct patch_pos {
    unsigned coding;
    const uint8_t *body;    /* after the coding byte */
    size_t body_len;
    size_t fsz;             /* zstd: the frame's bytes (== body_len) */
    size_t glen;            /* zstd: the gap bytes the frame declares; Rice: the most they can
                               take (pulse_rice_leb_room), the decoder scribbling 64 past them */
} patch_pos;

/* Reads chunk c's position stream coding (format 2: zstd, no coding byte) and, for zstd, the
 * frame's sizes: k..5k gap bytes declared, the frame filling the stream. 0 or an error. */
int patch_pos_probe(const pulse_patch *p, const patch_chunk *c, const uint8_t *bytes, patch_pos *pp);
/* Decodes the probed stream into LEB128 gaps at leb (room for pp->glen + 64 bytes), *glen the
 * bytes. Rice is checked gap by gap as it decodes (exactly k gaps, each < 2^32, positions
 * inside the chunk, nothing after them); a zstd frame's gaps are checked the same way by
 * patch_leb_check when `check` is set (a caller that runs patch_leb_positions next passes 0). */
int patch_pos_decode(patch_scratch *s, const pulse_patch *p, const patch_chunk *c, const patch_pos *pp,
                     uint8_t *leb, size_t *glen, int check);
/* The position stream of k gaps, leb[0..leb_len) as LEB128, at dst (room for
 * patch_pos_bound(leb_len) bytes): Rice or zstd, whichever is smaller (zstd is only tried when
 * Rice is not clearly near the entropy of the gaps). Returns its length or an error. */
int64_t patch_pos_encode(patch_scratch *s, uint8_t *dst, const uint8_t *leb, size_t leb_len, size_t k, int level);
size_t patch_pos_bound(size_t leb_len);
/* One zstd frame of src[0..n) at dst (capacity cap) at `level`, with s's context; its length
 * or an error (patch_stream.c). */
int64_t patch_zstd_frame(patch_scratch *s, uint8_t *dst, size_t cap, const uint8_t *src, size_t n, int level);

/* ---- the chunk encoder (patch_encode.c) ---- */

/* Encodes an element-wise chunk from positions idx[0..k) and values (k x unit bytes,
 * native width: absolute bits, or zigzag ulp differences >= 1 when ulp != 0). k > 0. */
int patch_encode_changes(patch_scratch *s, const uint32_t *idx, size_t k, const uint8_t *vals,
                         unsigned unit, int ulp, int level, patch_out_chunk *out);
/* Encodes an absolute chunk of k > 0 changes whose position stream is already coded: pp,
 * another patch's stream probed by patch_pos_probe (its body not in s->planes or s->leb),
 * written in format 3 (a format-2 stream gets its coding byte), then vals (k x unit bytes). */
int patch_encode_abs_at(patch_scratch *s, const patch_pos *pp, size_t k, const uint8_t *vals, unsigned unit,
                        int level, patch_out_chunk *out);
/* A safetensors file does not align a tensor's data to its element size (a packed F4 tensor
 * of odd byte length shifts every tensor after it), but the kernels take element pointers:
 * a chunk whose elements are misaligned is read and written through an aligned copy. */
static inline int patch_misaligned(const void *p, unsigned unit)
{
    return unit > 1 && ((uintptr_t)p & (uintptr_t)(unit - 1)) != 0;
}
/* Two chunk-sized (chunk_elems * 4 bytes) aligned buffers, one after the other, allocated on
 * first use. NULL with an error set. */
uint8_t *patch_scratch_bounce(patch_scratch *s, uint32_t chunk_elems);
/* The scratch's second output buffer (allocated on first use). NULL with an error set. */
uint8_t *patch_scratch_planes2(patch_scratch *s, uint32_t chunk_elems);
/* Copies a staged chunk's bytes into memory of its own (oc->bytes). */
int patch_out_keep(patch_out_chunk *oc);
/* Encodes a 16-bit ulp chunk whose k > 0 changes diff_ulp16 already turned into the position
 * stream (leb_len LEB128 gap bytes in s->leb) and zigzag values z (not in s->leb or s->gaps). */
int patch_encode_ulp16(patch_scratch *s, size_t leb_len, size_t k, const uint16_t *z, int level,
                       patch_out_chunk *out);
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
/* Pass 1 takes chunks in runs: up to PATCH_RUN_MOST consecutive chunks (consecutive in the
 * data section too: a run is cut where patch_chunk_follows is not) of at most PATCH_RUN_BYTES
 * in all, so that one read brings them and pulse_sha256_many hashes them side by side (its
 * sixteen lanes want sixteen or more messages), and their bytes are still in L2 for the checks
 * that follow. */
#define PATCH_RUN_MOST 32
#define PATCH_RUN_BYTES ((size_t)2 << 20)
/* Chunks first .. first + n - 1 (n <= PATCH_RUN_MOST, at most PATCH_RUN_BYTES together when
 * n > 1) into bytes[]: pointers into the in-memory patch, or one read of their span into
 * s->run (chunk by chunk when they do not follow each other in the data); every digest
 * checked, all at once. */
int patch_chunk_bytes_run(const pulse_patch *p, size_t first, size_t n, patch_scratch *s, const uint8_t *bytes[]);

/* ---- the chunk decoder (patch_decode.c) ---- */

/* Decodes chunk c of p: checks its digest, decompresses with bounded sizes, checks that
 * positions lie inside the chunk and counts are as declared. Element-wise: positions in
 * s->idx (s->gaps is not filled), values in s->vals (count x unit, native width). OPAQUE: c->len bytes in s->vals. */
int patch_decode_chunk(const pulse_patch *p, const patch_chunk *c, patch_scratch *s);
/* The same, also saying where the chunk's coded bytes are (in the patch, or s->in; valid
 * until s reads another chunk). */
int patch_decode_chunk_at(const pulse_patch *p, const patch_chunk *c, patch_scratch *s, const uint8_t **bytes);
/* The same without the digest, for a second decode of a chunk whose digest was already
 * checked in this patch's private buffer (p->buf is never written after open); a patch read
 * from a file is read and checked again. */
int patch_decode_checked_chunk(const pulse_patch *p, const patch_chunk *c, patch_scratch *s);
/* Decodes chunk c from its coded bytes, already read (and checked as the caller needs). */
int patch_decode_bytes(const pulse_patch *p, const patch_chunk *c, patch_scratch *s, const uint8_t *bytes);
/* Fused decode + ulp add into dst (the chunk's first byte) for 16-bit chunks with 2-bit
 * symbols, digest not rechecked (see patch_decode_checked_chunk); 1 when c is not a 16-bit
 * ulp chunk, 2 when it is one of another symbol width (then decoded into s, not applied),
 * else 0 or an error (patch_apply_fused.c). */
int patch_apply_checked_chunk(const pulse_patch *p, const patch_chunk *c, patch_scratch *s, uint8_t *dst);

/* A write pass's pages of a shared file mapping made present and writable ahead of its writes
 * (MADV_POPULATE_WRITE) where they would fault, as measured on its first chunks (patch_apply.c).
 * begin before writing [dst, dst + span) with `count` changes, end after, with begin's result. */
typedef struct patch_populate {
    int mode;                /* 0: never, 1: always, 2: once the written chunks are seen to fault */
    atomic_int populating;   /* mode 2: decided to populate */
    atomic_int probes;       /* mode 2: chunks left to measure the faults of */
} patch_populate;
void patch_populate_init(patch_populate *pp);
long patch_populate_begin(patch_populate *pp, uint8_t *dst, size_t span, uint64_t count);
void patch_populate_end(patch_populate *pp, long f0, size_t span);

/* Adds (ulp) or stores (abs) decoded chunk c (positions s->idx, values s->vals) into dst, the
 * chunk's first element (aligned); an OPAQUE chunk's bytes are copied whole (patch_apply.c). */
void patch_chunk_scatter(const pulse_patch *p, const patch_chunk *c, const patch_scratch *s, uint8_t *dst);

/* ---- decoding pieces shared by the chunk decoder and the apply passes ---------------- */

/* Reads the ulp value stream's first byte, the symbol width (2, 4 or 8 bits), and steps past it;
 * FORMAT for an empty stream, UNSUPPORTED for an unknown width. */
int patch_ulp_bits(const patch_tensor *t, const patch_chunk *c, const uint8_t **v, size_t *left,
                   unsigned *bits);

/* (patch_stream.c) Checks that src[0..avail) starts with one zstd frame declaring want_min..want_max bytes of
 * content (*content); returns the frame's compressed size or a FORMAT error naming `what`. */
int64_t patch_frame_probe(const patch_tensor *t, const patch_chunk *c, const char *what, const uint8_t *src,
                          size_t avail, size_t want_min, size_t want_max, size_t *content);
/* Decompresses that frame (fsz bytes) into exactly `content` bytes at dst; 0 or FORMAT. */
int patch_frame_unzstd(patch_scratch *s, const patch_tensor *t, const patch_chunk *c, const char *what,
                       const uint8_t *src, size_t fsz, uint8_t *dst, size_t content);
/* Decodes exactly k LEB128 gaps (< 2^32 each) that fill src[0..len) exactly, straight into
 * ascending positions (position = previous + gap + 1; one pass, no gap array). Returns 0,
 * -1 (ends early), -2 (a gap overflows 32 bits), -3 (bytes left over) or -4 (a position
 * reaches limit). */
int patch_leb_positions(const uint8_t *src, size_t len, size_t k, uint32_t limit, uint32_t *idx);
/* The same checks without writing positions (pass 1 of an apply), same return codes
 * (patch_stream.c, with patch_gap_error). */
int patch_leb_check(const uint8_t *src, size_t len, size_t k, uint32_t limit);
/* The FORMAT error for a patch_leb_positions / patch_leb_check code < 0. */
int patch_gap_error(const patch_tensor *t, const patch_chunk *c, int code);
/* The checks patch_unpack_ulp makes for k 16-bit values in 2-bit symbols (the common chunk)
 * without expanding them: as many escapes in esc[0..elen) as symbols 3, each in range,
 * nothing after them, zero padding. 0 or the same FORMAT errors. */
int patch_ulp2_check16(const patch_tensor *t, const patch_chunk *c, const uint8_t *packed, size_t k,
                       const uint8_t *esc, size_t elen);
/* Expands packed ulp symbols (k = c->count of them, `bits` wide) into zigzag values in
 * s->vals (native width), taking escapes from the LEB128 bytes esc[0..esc_len); checks
 * escapes, stray escape bytes and zero padding. 0 or a FORMAT error. */
int patch_unpack_ulp(const patch_tensor *t, const patch_chunk *c, patch_scratch *s, unsigned bits,
                     const uint8_t *packed, const uint8_t *esc, size_t esc_len);

/* ---- pass 1's decoded streams, kept for pass 2 (patch_cache.c) ------------------------ */

/* Where an element-wise chunk's decompressed streams lie in the cache, once pass 1 has checked them. */
typedef struct patch_cache_entry {
    uint64_t off;           /* glen gap bytes at mem + off in a region of groom bytes, then (ulp) the packed
                             * symbols (+ 4 zero bytes) and the escapes, or (abs, bits 0) the value byte
                             * planes, plen = unit * count bytes */
    uint32_t groom, glen, plen, elen;
    uint8_t bits;           /* ulp symbol width; 0 abs; PATCH_CACHE_CONTEXT decoded positions + values */
    uint8_t cached;         /* 0: not kept (the cache was full, or an opaque chunk): pass 2 decodes again */
} patch_cache_entry;

/* Pass 1 decompresses the streams of each element-wise chunk (ulp or abs) straight into this arena
 * while room is left, checks them there, and pass 2 adds from them without reading,
 * hashing or decompressing the chunk again. The arena has a fixed cap (PATCH_CACHE_CAP, or
 * PULSE_APPLY_CACHE=<bytes>[K|M|G], 0 = off, up to PATCH_CACHE_MOST), so memory never grows
 * with the model: chunks past the cap are decoded again in pass 2. ~1.36 bytes a change at
 * RL densities, so the default holds ~49M changes (a 1B-parameter step at 5 %); an operator
 * of larger models may raise it, trading that memory for pass 2's second decoding
 * (docs/performance.md, "What limits each figure"). Its pages are kept for the next apply in the process (a
 * follower applies patch after patch), so that only the first apply pays their first touch. */
#define PATCH_CACHE_CAP (64u << 20)
#define PATCH_CACHE_MOST ((size_t)64 << 30)
#define PATCH_CACHE_CONTEXT 0xFFu
typedef struct patch_cache {
    uint8_t *mem;
    size_t cap;
    atomic_size_t used;
    patch_cache_entry *ent; /* one per coded chunk (pulse_patch.chunks) */
    size_t nent;
    int kept;               /* mem is the process's kept arena (given back at close) */
} patch_cache;

/* Reserves n bytes (a multiple of 8) of cache (may be NULL); their offset, or SIZE_MAX when
 * there is no arena or its cap is reached. */
size_t patch_cache_reserve(patch_cache *cache, size_t n);
/* Records that chunk i's checked streams lie in the cache at off (the entry's fields). */
void patch_cache_keep(patch_cache *cache, size_t i, size_t off, size_t groom, size_t glen, size_t plen, size_t elen,
                      unsigned bits);
/* A cache for p (entries zeroed). On allocation failure it has no arena and caches nothing. */
int patch_cache_open(patch_cache *cache, const pulse_patch *p);
void patch_cache_close(patch_cache *cache);
/* Frees the process's kept arena (it is taken again on the next apply). */
void patch_cache_release(void);
/* Frees what pulse_patch_apply_ex keeps between calls: the arena and the scratch pool. */
void patch_apply_release(void);

/* Pass 1 for chunk i: digest, frames, gaps and values checked; an element-wise chunk's streams are kept
 * in cache (may be NULL) while it has room. Nothing is written. base: the checkpoint in the patch's
 * base state (its id checked), against which context-coded chunks are decoded; NULL: they get
 * the checks that need no base. */
int patch_check_chunk(const pulse_patch *p, size_t i, patch_scratch *s, patch_cache *cache, const pulse_ckpt *base);
/* Pass 1 for a run of chunks (patch_chunk_bytes_run's limits): as patch_check_chunk on each,
 * with their bytes read and their digests computed all at once. */
int patch_check_run(const pulse_patch *p, size_t first, size_t n, patch_scratch *s, patch_cache *cache,
                    const pulse_ckpt *base);
/* Where a ulp chunk's checked streams lie after patch_check_ulp_streams (scratch buffers). */
typedef struct patch_ulp_streams {
    const uint8_t *gaps, *packed, *esc;   /* packed is followed by 4 zero bytes */
    size_t glen, elen;
    unsigned bits;                        /* symbol width */
} patch_ulp_streams;
/* Pass 1's checks of a ulp chunk c (element-wise, bytes digest-checked or private) without the
 * cache: its streams decompressed into s's buffers and checked there as pass 1 checks them.
 * 0 (and *out), or the same FORMAT error pass 1 gives. */
int patch_check_ulp_streams(const pulse_patch *p, const patch_chunk *c, const uint8_t *bytes, patch_scratch *s,
                            patch_ulp_streams *out);
/* Pass 2 for chunk i from the cache: adds the changes (ulp) or stores the values (abs) into
 * dst (the chunk's first byte). Returns 1 when the chunk is not cached (the caller decodes
 * it again), else 0 or an error. */
int patch_write_cached_chunk(const pulse_patch *p, size_t i, patch_scratch *s, const patch_cache *cache,
                             uint8_t *dst);

/* ---- context-coded chunks, format 5 (patch_ctxchunk.c) ---------------------------------- */

/* Whether chunk c, whose coded bytes are at bytes, is context-coded: coded against the
 * exponents of the base's old values, so that only a reader holding the base decodes it. */
int patch_chunk_is_context(const pulse_patch *p, const patch_chunk *c, const uint8_t *bytes);
/* The context coder's scratch of s (allocated on first use). NULL with an error set. */
struct patch_ctx_scratch *patch_scratch_ctx(patch_scratch *s, uint32_t chunk_elems);
/* As patch_decode_bytes, and a context-coded chunk is decoded against base (the chunk's first
 * element in the base checkpoint, any alignment): positions in s->idx (band order), zigzag ulp
 * differences in s->vals (16-bit). base NULL: a context-coded chunk is refused,
 * PULSE_ERR_UNSUPPORTED naming it. */
int patch_decode_bytes_base(const pulse_patch *p, const patch_chunk *c, patch_scratch *s, const uint8_t *bytes,
                            const uint8_t *base);
/* The same reading the chunk's bytes first (digest checked). */
int patch_decode_chunk_base(const pulse_patch *p, const patch_chunk *c, patch_scratch *s, const uint8_t *base);
/* Context chunk c (bytes digest-checked) decoded against base into idx and z (k entries each);
 * with light set only checked against base (patch_ctx_check_base: idx and z are then scratch).
 * base NULL: refused, PULSE_ERR_UNSUPPORTED naming the chunk. */
int patch_decode_context(const pulse_patch *p, const patch_chunk *c, patch_scratch *s, const uint8_t *bytes,
                         const uint8_t *base, uint32_t *idx, uint16_t *z, int light);
/* A context chunk's checks that need no base (patch_ctx_check). */
int patch_check_context_streams(const pulse_patch *p, const patch_chunk *c, const uint8_t *bytes);
/* As patch_decode_chunk_base, the positions always ascending (as every other coding gives them). */
int patch_decode_chunk_sorted(const pulse_patch *p, const patch_chunk *c, patch_scratch *s, const uint8_t *base);
/* A chunk's checks by a reader without the base (digest first): decoded whole, or, context-coded,
 * the checks patch_ctx_check makes. */
int patch_verify_chunk(const pulse_patch *p, const patch_chunk *c, patch_scratch *s);
/* The chunk's first element in checkpoint ck, or NULL when ck is NULL. */
const uint8_t *patch_chunk_base(const pulse_patch *p, const patch_chunk *c, const pulse_ckpt *ck);

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

/* The head (header, table, digest) of a patch of the tensors T[0..n) in memory (*out, malloc'd):
 * the k-th coded chunk in table order at data offset AT[k], wherever the caller placed it
 * (a committer's head over its parts' data, node/patch/patch_merge.c). */
int patch_head_build(uint32_t version, pulse_value_code values, uint32_t chunk_elems, const uint8_t base_id[32],
                     const uint8_t result_id[32], const patch_out_tensor *t, size_t n, const char *metadata,
                     const uint64_t *at, uint8_t **out, size_t *len);

/* The tensor t holding global chunk `job`: chunk_start[t] <= job < chunk_start[t + 1]
 * (chunk_start: ntensors + 1 prefix sums of the tensors' chunk counts). */
static inline size_t patch_chunk_tensor(const uint64_t *chunk_start, size_t ntensors, size_t job)
{
    size_t lo = 0, hi = ntensors;
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (chunk_start[mid] <= job)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* Serializes header, table, digest and data to path through a temporary file renamed into
 * place; the temporary is removed on any failure. */
int patch_write_file(const char *path, pulse_value_code values, uint32_t chunk_elems,
                     const uint8_t base_id[32], const uint8_t result_id[32],
                     const patch_out_tensor *t, size_t n);
/* The same carrying the result's __metadata__ (compact JSON text; NULL: not carried). */
int patch_write_file_meta(const char *path, pulse_value_code values, uint32_t chunk_elems,
                          const uint8_t base_id[32], const uint8_t result_id[32],
                          const patch_out_tensor *t, size_t n, const char *metadata);

/* A patch file written in place: the tensor table's length is fixed first, so every coded chunk
 * goes straight to its final offset in a temporary file beside path (no second copy of the data),
 * and the header and table are written last, then fsync and rename. While the chunks are put, a
 * flusher thread makes what is already written durable (fdatasync each time another step of
 * bytes has arrived), so the final fsync waits only for the last step: the device's write of
 * the patch overlaps the coding instead of following it. */
typedef struct patch_file_out {
    const char *path;
    char *tmp;
    int fd;
    uint64_t data_start;        /* header + table + digest */
    _Atomic uint64_t written;   /* chunk bytes put so far */
    int durable;                /* fsync before the rename (and the directory after it) */
    uint32_t version;           /* the format version written; 0: PULSE_PATCH_VERSION */
    /* the flusher (running only when flusher_on) */
    pthread_t flusher;
    int flusher_on;
    pthread_mutex_t flush_lock; /* guards the three fields below */
    pthread_cond_t flush_wake;
    int flush_stop, flush_errno;        /* commit/abort asks it to end; the first failure */
    _Atomic uint64_t flush_next;        /* written at or past this wakes the flusher */
    uint64_t flush_step;                /* PATCH_FLUSH_STEP, or PULSE_PATCH_FLUSH (0: no flusher) */
} patch_file_out;

/* Bytes put between two background flushes (PULSE_PATCH_FLUSH=<bytes>[K|M|G] lowers it, 0
 * turns the flusher off; docs/patch-format.md "The fused diff"). */
#define PATCH_FLUSH_STEP ((size_t)1 << 20)

/* *len = bytes of the tensor table: chunk entries sized by their counts, or with `planned` by
 * chunks[c].planned (the counts not known yet). Refuses names the table cannot hold. */
int patch_table_len(const patch_out_tensor *t, size_t n, int planned, const char *metadata, uint32_t version,
                    uint64_t *len);
/* Creates path's temporary (O_EXCL) for a table of table_len bytes; durable == 0 for a
 * scratch file (no flusher, no fsync at the commit). */
int patch_file_create(patch_file_out *f, const char *path, uint64_t table_len, int durable);
/* Writes len chunk bytes at data_off from the start of the data section; thread-safe. */
int patch_file_put(patch_file_out *f, uint64_t data_off, const uint8_t *p, size_t len);
/* Writes the header and table (refused unless its length is the planned one and the chunk bytes
 * put are exactly its data section), fsyncs, renames into place. Consumes f either way. */
int patch_file_commit(patch_file_out *f, pulse_value_code values, uint32_t chunk_elems,
                      const uint8_t base_id[32], const uint8_t result_id[32], const patch_out_tensor *t,
                      size_t n, const char *metadata);
/* Closes and removes the temporary. */
void patch_file_abort(patch_file_out *f);
/* Coded chunks reach the file in table order, straight to their final offsets, from workers
 * that finish in any order (patch_order.c). Work comes in jobs numbered in table order, each
 * of up to PATCH_ORDER_MAX_CHUNKS chunks. A job that finishes before the jobs ahead of it keeps
 * its bytes in memory (patch_out_keep) until they are written, up to parked_max bytes over all
 * such jobs; past it, it waits for them. So memory stays flat however the threads are
 * scheduled, given that jobs are handed out in order (pulse_parallel_for). */
#define PATCH_ORDER_MAX_CHUNKS 2
typedef void (*patch_order_chunks_fn)(void *ctx, size_t job, patch_out_chunk **oc, size_t *n);
typedef struct patch_order {
    patch_file_out file;     /* created by the caller (patch_file_create) */
    pthread_mutex_t lock;    /* guards the fields below */
    pthread_cond_t moved;    /* next_job advanced, parked bytes freed, or a job failed */
    size_t next_job;         /* the first job whose chunks are not yet placed in the file */
    size_t njobs;
    uint64_t data_end;       /* where the next placed chunk goes in the data section */
    uint8_t *parked;         /* per job: finished, bytes kept in memory, waiting for its turn */
    uint64_t parked_bytes, parked_max;
    int failed;
    patch_order_chunks_fn chunks_of;   /* a parked job's chunks, to write them in its turn */
    void *ctx;
    /* The data section's prefix whose bytes are all in the file (jobs finish writing in any
     * order): job_end[j] once job j is placed, written[j] once its bytes are in. */
    uint64_t *job_end;
    uint8_t *written;
    size_t prefix_job;                 /* the first job not all in */
    uint64_t prefix;
    void (*on_prefix)(void *ctx, int fd, uint64_t data_start, uint64_t bytes);   /* may be NULL */
    void (*on_progress)(void *ctx, uint64_t done, uint64_t total);   /* may be NULL: before on_prefix */
    void *prefix_ctx;
} patch_order;
int patch_order_init(patch_order *o, size_t njobs, uint64_t parked_max, patch_order_chunks_fn chunks_of, void *ctx);
/* Job j's n coded chunks (staged in the caller's slot, or kept): written now when every job
 * ahead of it is placed (and then the parked jobs behind it that were waiting for it), else
 * kept for the job that reaches them. Call it before the slot is given back. */
int patch_order_commit(patch_order *o, size_t j, patch_out_chunk **oc, size_t n);
/* A job failed: the others stop waiting and write nothing more. */
void patch_order_fail(patch_order *o);
/* Frees what init took (not the file); safe after a failed init. */
void patch_order_free(patch_order *o);

/* A patch coded two chunks a job on all cores, each job's chunks reaching the file in table order
 * (patch_build.c): the driver under the diff and the patch of change lists. The caller fills the
 * first fields; out[i].chunks[c].planned says which chunks have changes (set by the caller, or
 * by plan, called once per global chunk on all cores before the table's length is fixed). */
typedef struct patch_build {
    const pulse_diff_opts *o;      /* values, chunk_elems, threads, scratch, on_data and its company */
    patch_out_tensor *out;         /* ntensors tensors (patch_build_layout) */
    size_t ntensors;
    uint64_t *chunk_start;         /* ntensors + 1 prefix sums of the tensors' chunk counts */
    uint32_t version;
    const char *metadata;
    /* Codes chunk c of tensor t, a planned one, with slot s into oc (staged, digest deferred). */
    int (*encode)(void *ctx, size_t t, uint64_t c, patch_scratch *s, patch_out_chunk *oc);
    /* May be NULL: after global chunks first .. first + n - 1 are coded and placed. */
    void (*coded)(void *ctx, size_t first, size_t n);
    void *ctx;
    /* the driver's */
    patch_order order;
    patch_pool *pool;
    int ordered;
} patch_build;
/* b->out, b->ntensors and b->chunk_start for the tensors of LAYOUT (only their names, dtypes and
 * shapes are read), every chunk unplanned; b->o must be set. */
int patch_build_layout(patch_build *b, const pulse_ckpt *layout);
/* Plans (when plan is not NULL) and codes every chunk into a temporary beside out_path; the
 * tensors' change counts are summed. Then patch_build_commit once the ids are known, and
 * patch_build_free either way (it removes the temporary when there was no commit, and frees the
 * tables). */
int patch_build_chunks(patch_build *b, const char *out_path, int (*plan)(void *ctx, size_t g));
int patch_build_commit(patch_build *b, const uint8_t base_id[32], const uint8_t result_id[32]);
void patch_build_free(patch_build *b);

/* Frees t[0..n) (each chunk's kept bytes and its chunk array) and t itself; t may be NULL. */
void patch_out_free(patch_out_tensor *t, size_t n);

/* Every chunk of p on `threads` threads (one scratch slot, zstd context and chunk buffers
 * per worker, reused across chunks, the pool kept between calls): write == 0 checks each
 * (pass 1 without a cache: pulse_patch_verify); write != 0 decodes each with its digest and
 * scatters it into target (an unfused reference for benchmarks). No state ids, no layout
 * check. */
int patch_run_chunks(const pulse_patch *p, pulse_ckpt *target, int write, int threads);
/* Pass 2 without a cache after a successful pass 1 on the same p: every chunk read (digest
 * again for a file) and decoded again, then added. */
int patch_run_checked_chunks(const pulse_patch *p, pulse_ckpt *target, int threads);
/* The two passes of pulse_patch_apply_ex with a cache between them (cache may be NULL):
 * pass 1 checks every chunk and fills the cache (decoding context-coded chunks against base, which it
 * does not write; NULL: their base-free checks), pass 2 (only after pass 1 succeeded) writes. */
int patch_run_pass1(const pulse_patch *p, pulse_ckpt *base, int threads, patch_cache *cache);
int patch_run_pass2(const pulse_patch *p, pulse_ckpt *target, int threads, const patch_cache *cache);

/* One tensor of the patch against the checkpoint's at the same place: name, dtype, shape
 * (PULSE_ERR_MISMATCH naming it); and every tensor of both, in order (patch_layout.c). */
int patch_check_tensor_layout(const patch_tensor *pt, const pulse_tensor *ct);
int patch_check_layout(const pulse_patch *p, const pulse_ckpt *c);

#endif
