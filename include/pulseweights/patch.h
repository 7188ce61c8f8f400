/* SPDX-License-Identifier: Apache-2.0 */
/* Sparse lossless patches between checkpoints: diff, open/verify, apply, squash, inspect. */
#ifndef PULSEWEIGHTS_PATCH_H
#define PULSEWEIGHTS_PATCH_H

#include <stddef.h>
#include <stdint.h>

#include "pulseweights/error.h"
#include "pulseweights/checkpoint.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The byte layout is described in docs/patch-format.md. */
/* 3: a position coding byte (zstd or Rice); 2 (read, not written): zstd positions, ulp values
 * as packed symbols + escapes */
#define PULSE_PATCH_VERSION 4
/* 5: as 4, and a BF16 or F16 ulp chunk may be context-coded (its changes coded by the exponents
 * of the base's old values), which only a reader holding the base weights decodes. Written by a
 * diff with pulse_diff_opts.context; read by this build. */
#define PULSE_PATCH_VERSION_CONTEXT 5
/* 6 was format 6 (patches by direction): no longer read (PULSE_ERR_UNSUPPORTED at open), and
 * not given to another format. */
#define PULSE_PATCH_DEFAULT_CHUNK (1u << 20)   /* elements per chunk */
#define PULSE_PATCH_MAX_CHUNK (1u << 26)
/* The default zstd level of a diff: zstd's fastest match search with the Huffman coding of
 * literals kept on. Gap and ulp-symbol bytes have almost no LZ matches, so this is both the
 * smallest and the fastest setting measured (docs/performance.md); OPAQUE chunks, which can
 * repeat, are coded at level 1 or above. */
#define PULSE_PATCH_LEVEL_FAST (-256)
#define PULSE_PATCH_MAX_BYTES (1ull << 40)     /* largest patch file opened */

/* How changed values travel. */
typedef enum pulse_value_code {
    PULSE_VALUES_ABS = 0,   /* the new bit pattern: idempotent */
    PULSE_VALUES_ULP = 1,   /* zigzag of (new - old) bit patterns modulo 2^width, as 2/4/8-bit
                               symbols with escapes: ~a tenth of abs's value bytes */
} pulse_value_code;

/* Options of pulse_patch_diff. Fill with pulse_diff_opts_default, then change fields;
 * `size` lets the struct grow without breaking callers. */
typedef struct pulse_diff_opts {
    size_t size;                /* sizeof(pulse_diff_opts), set by pulse_diff_opts_default */
    pulse_value_code values;    /* default PULSE_VALUES_ULP */
    int threads;                /* 0 = all cores */
    int zstd_level;             /* default PULSE_PATCH_LEVEL_FAST; any zstd level (a negative
                                   one keeps Huffman-coded literals on), 0 = the default */
    uint32_t chunk_elems;       /* elements per chunk, 1..PULSE_PATCH_MAX_CHUNK; default 2^20 */
    /* Known state ids (32 bytes each; NULL, the default: computed by hashing the checkpoint).
     * A caller that already holds the id of OLD (e.g. from its index) or NEW (it just hashed
     * it) passes it here and that checkpoint is not hashed again. The id is written into the
     * patch as given: a wrong one makes a patch that every apply refuses (base id) or flags
     * after writing (result id), never a patch that silently produces other bytes. */
    const uint8_t *old_id;
    const uint8_t *new_id;
    /* Nonzero: out_path is a temporary the caller reads and deletes (a publisher uploading it),
     * so it is not made durable (no fsync, no background flush); it is still renamed into place
     * whole. Default 0: the patch is on disk when the call returns. */
    int scratch;
    /* Nonzero: BF16 and F16 chunks of a ulp patch are context-coded (format 5,
     * PULSE_PATCH_VERSION_CONTEXT): smaller, but only a reader holding the base weights decodes
     * them (an apply to a checkpoint, a squash or pulse_patch_tensor_updates given the base; not
     * an engine-held or sliced follower). Default 0. */
    int context;
    /* Where NEW's state id goes (32 bytes; NULL: nowhere) when new_id is not given: the diff
     * hashes NEW as it scans it, so a caller that needs the id (a publisher, for its record)
     * gets it without a pass of its own. */
    uint8_t *new_id_out;
    /* Called (may be NULL) from the diff's threads, one at a time, each time more of the patch's
     * data section is in the file, in order: the file (FD, valid during the call only: dup it to
     * read on), where the data section starts in it, and how many of its bytes are there from its
     * start (only ever more). The head, before the data, is written last. A publisher uploads the
     * data while the diff goes on. */
    void (*on_data)(void *ctx, int fd, uint64_t data_start, uint64_t bytes);
    void *data_ctx;
    /* Where each of NEW's tensor hashes goes (count x 32 bytes, canonical order; NULL: nowhere),
     * from the same scan as new_id_out (docs/checkpoints.md "State id"): a part publisher hands
     * them to the committer, which combines the whole model's id without reading a tensor. */
    uint8_t *new_tensor_hashes_out;
    /* Called (may be NULL) with data_ctx just before each on_data call: the data it reports is
     * that of the diff's first DONE of TOTAL jobs (pairs of chunks, in order), so that whoever
     * uploads it can tell how much is still to come (a publisher cuts smaller parts near the
     * end, so little is left to send once the diff is done). */
    void (*on_data_progress)(void *ctx, uint64_t done, uint64_t total);
} pulse_diff_opts;

PULSE_API void pulse_diff_opts_default(pulse_diff_opts *o);

/* Writes the patch turning OLD into NEW to out_path (through a temporary file renamed into
 * place; nothing is left at out_path or beside it on failure). Both state ids are computed
 * unless opts gives them (old_id, new_id).
 * opts may be NULL (defaults). The two checkpoints must have the same tensors (names, dtypes,
 * shapes): PULSE_ERR_MISMATCH naming the first that differs otherwise. */
PULSE_API int pulse_patch_diff(const pulse_ckpt *old_ckpt, const pulse_ckpt *new_ckpt,
                               const pulse_diff_opts *opts, const char *out_path);

/* An open patch (header and tables parsed and bounds-checked; chunk data not yet decoded). */
typedef struct pulse_patch pulse_patch;

/* Reads the header and tensor table of the file at path (the chunk data stays in the file,
 * which stays open: each chunk is read into a per-thread buffer and its digest checked there
 * whenever it is decoded, so memory does not grow with the patch and a file changed after
 * open is caught: PULSE_ERR_CORRUPT, or PULSE_ERR_IO when it shrank). Checks magic, version,
 * the header digest and every count, offset and length against the limits and the file size
 * before allocating from them.
 * Returns PULSE_ERR_FORMAT (malformed), PULSE_ERR_CORRUPT (digest), PULSE_ERR_LIMIT,
 * PULSE_ERR_UNSUPPORTED (other version), PULSE_ERR_IO, PULSE_ERR_NOMEM. */
PULSE_API int pulse_patch_open(pulse_patch **out, const char *path);
/* Same over len bytes at buf (copied: buf may be freed after the call). */
PULSE_API int pulse_patch_open_mem(pulse_patch **out, const void *buf, size_t len);
/* NULL-safe; sets *p to NULL. */
PULSE_API void pulse_patch_close(pulse_patch **p);

/* Header fields. */
PULSE_API pulse_value_code pulse_patch_values(const pulse_patch *p);
PULSE_API const uint8_t *pulse_patch_base_id(const pulse_patch *p);     /* 32 bytes */
PULSE_API const uint8_t *pulse_patch_result_id(const pulse_patch *p);   /* 32 bytes */
PULSE_API uint32_t pulse_patch_chunk_elems(const pulse_patch *p);
/* The format version the patch was written in (2 .. PULSE_PATCH_VERSION_CONTEXT). */
PULSE_API uint32_t pulse_patch_version(const pulse_patch *p);
PULSE_API size_t pulse_patch_tensor_count(const pulse_patch *p);

/* Checks without writing anything: the tensor layout against base (names, dtypes, shapes:
 * PULSE_ERR_MISMATCH), every chunk digest (PULSE_ERR_CORRUPT), and decodes every chunk
 * (positions inside the chunk, counts as declared: PULSE_ERR_FORMAT). base may be NULL to
 * skip the layout check. Does not compute the base's state id (pulse_patch_apply does). */
PULSE_API int pulse_patch_verify(const pulse_patch *p, const pulse_ckpt *base, int threads);

/* Applies p to target (opened PULSE_CKPT_WRITE, or made by pulse_ckpt_create_like).
 * Refuses (target untouched) unless the target's layout matches and its state id is the
 * patch's base id (PULSE_ERR_MISMATCH) and every chunk verifies; then writes all chunks on
 * `threads` threads (0 = all cores) and recomputes the state id: PULSE_ERR_CORRUPT if it is
 * not the patch's result id (the target has then been written). Memory per thread is
 * bounded by the chunk size. Does not sync: call pulse_ckpt_sync / pulse_ckpt_commit. */
PULSE_API int pulse_patch_apply(const pulse_patch *p, pulse_ckpt *target, int threads);

/* Options of pulse_patch_apply_ex. Fill with pulse_patch_apply_opts_default, then change
 * fields; `size` lets the struct grow without breaking callers.
 *
 * Safety contract of the shortcuts (both off by default):
 *  - trust_base_id: the caller states that the target's current state id is these 32 bytes
 *    (e.g. a node that holds the state it last applied and has not let anyone else write it).
 *    The target is then not hashed; the given id is still compared with the patch's base id
 *    (PULSE_ERR_MISMATCH). If the statement is false the result is garbage, and only the
 *    result check below can notice.
 *  - skip_result_check: the result's state id is not recomputed. Every chunk is still
 *    digest-checked and decoded in full before anything is written, so a damaged patch still
 *    leaves the target untouched; what is no longer caught is a target that was not in the
 *    base state (a false trust_base_id, or bytes changed behind the caller's back).
 *    Combined with trust_base_id nothing in the call ever reads the whole target: the caller
 *    owns the target's integrity and should rehash it on its own schedule. */
typedef struct pulse_patch_apply_opts {
    size_t size;                    /* sizeof(pulse_patch_apply_opts), set by the default */
    int threads;                    /* 0 = all cores */
    const uint8_t *trust_base_id;   /* NULL (default): hash the target and compare */
    int skip_result_check;          /* default 0: recompute the result id and compare */
} pulse_patch_apply_opts;

PULSE_API void pulse_patch_apply_opts_default(pulse_patch_apply_opts *o);

/* pulse_patch_apply with options (opts may be NULL: the defaults, the same as
 * pulse_patch_apply(p, target, 0)). Same checks and errors, minus those the options skip. */
PULSE_API int pulse_patch_apply_ex(const pulse_patch *p, pulse_ckpt *target, const pulse_patch_apply_opts *opts);

/* Composes consecutive patches p[0] -> ... -> p[n-1] (p[i] result id == p[i+1] base id,
 * same layout and chunk size, else PULSE_ERR_MISMATCH) into one absolute patch from p[0]'s
 * base to p[n-1]'s result, written atomically to out_path. When any input is ulp-coded,
 * base (the checkpoint in p[0]'s base state, checked) is required (PULSE_ERR_INVALID
 * without it); with base the output holds exactly the positions where the result differs
 * from base. zstd_level 0 means the default, PULSE_PATCH_LEVEL_FAST (the smallest and fastest
 * on these streams, as for a diff); a negative level keeps Huffman-coded literals on. */
PULSE_API int pulse_patch_squash(pulse_patch *const *p, size_t n, const pulse_ckpt *base,
                                 int threads, int zstd_level, const char *out_path);

/* What a patch holds, for `pulse inspect`. Sizes in bytes. */
typedef struct pulse_patch_tensor_info {
    const char *name;           /* owned by the patch */
    const char *dtype_name;
    pulse_dtype dtype;
    int ndim;
    uint64_t shape[PULSE_MAX_DIMS];
    uint64_t nelems;
    uint64_t changes;           /* changed elements (bytes for OPAQUE) */
    uint64_t chunks;            /* chunks in the tensor */
    uint64_t coded_chunks;      /* chunks carrying data */
    uint64_t pos_bytes;         /* compressed position streams */
    uint64_t val_bytes;         /* compressed value streams */
    uint64_t table_bytes;       /* this tensor's bytes in the table */
    double entropy_bits;        /* order-0 bound (gaps + value symbols) of the decoded
                                   symbols of this tensor; 0 for OPAQUE */
} pulse_patch_tensor_info;

/* Fills info for tensor i (< pulse_patch_tensor_count). With decode != 0 the chunks are
 * decoded (digests checked) to compute entropy_bits; otherwise entropy_bits is 0. */
PULSE_API int pulse_patch_tensor_info_get(const pulse_patch *p, size_t i, int decode,
                                          pulse_patch_tensor_info *info);

/* Totals over the whole patch. entropy_bits uses the symbol frequencies of the whole patch. */
typedef struct pulse_patch_stats {
    uint64_t file_bytes;
    uint64_t header_bytes;      /* fixed header + table + digest */
    uint64_t nelems;            /* all elements of all tensors */
    uint64_t dense_bytes;       /* bytes of tensor data (what a full copy would send) */
    uint64_t changes;           /* changed elements of element-wise tensors */
    uint64_t opaque_changes;    /* changed bytes of OPAQUE tensors */
    uint64_t pos_bytes;         /* of element-wise tensors */
    uint64_t val_bytes;         /* of element-wise tensors */
    uint64_t opaque_bytes;      /* compressed whole-chunk replacements of OPAQUE tensors */
    double entropy_bits;        /* order-0 bound over element-wise changes (gap + value) */
} pulse_patch_stats;
PULSE_API int pulse_patch_info(const pulse_patch *p, int decode, pulse_patch_stats *st);

/* What coding with context the receiver already holds could save (`pulse inspect --base`).
 * A weight changes in a step with a probability set by its update against its rounding cell,
 * and the cell by the exponent of its old value, which the receiver has: so the old value's
 * exponent predicts both whether an element changes and by how many ulps. Figures are
 * empirical entropies in bits (the cost of describing the frequencies themselves is not
 * counted), over the element-wise tensors (BF16, F16, F32, F8_*; OPAQUE ones are left out). */
typedef struct pulse_patch_context {
    uint64_t elements;      /* elements of the element-wise tensors */
    uint64_t changes;       /* their changed elements */
    uint64_t pos_bytes;     /* their coded position streams */
    uint64_t val_bytes;     /* their coded value streams */
    /* positions */
    double gap_bits;        /* order-0: sum of -log2 p(gap), the gaps the coder codes (what it targets) */
    double flag0_bits;      /* sum over tensors of elements x H(changed): the tensor as only context */
    double flag_bits;       /* sum over tensors of elements x H(changed | exponent of the old value) */
    /* values: the ulp symbol is the zigzag of (new - old) bit patterns, whatever the patch codes */
    double ulp_bits;        /* order-0: changes x H(ulp symbol) */
    double ulp_ctx_bits;    /* changes x H(ulp symbol | dtype, exponent of the old value) */
    /* What the context figures leave out, the cost of describing their frequencies (the usual
     * two-part estimate, (k - 1)/2 x log2(n) bits per context of n draws of k distinct
     * symbols): small against the figures on a model's step, not on a small tensor. */
    double flag_model_bits;
    double ulp_model_bits;
} pulse_patch_context;

/* Fills *out over the whole patch (symbol frequencies of the whole patch, as
 * pulse_patch_info's bound; for ulp patches gap_bits + ulp_bits is its entropy_bits) and, when
 * tensors is not NULL, tensors[i] for each tensor i < pulse_patch_tensor_count with that
 * tensor's own frequencies (all zero for OPAQUE tensors). base is the patch's base checkpoint:
 * its layout is checked (PULSE_ERR_MISMATCH naming the tensor), its state id is not (the
 * caller's part: pulse_ckpt_state_id against pulse_patch_base_id). Every coded chunk is read,
 * digest-checked and decoded as pulse_patch_verify does. Tensors run on `threads` threads (0 =
 * all cores); memory grows with the changes of the tensors in flight, not with the model.
 * A sliced patch is PULSE_ERR_INVALID. */
PULSE_API int pulse_patch_context_bound(const pulse_patch *p, const pulse_ckpt *base, int threads,
                                        pulse_patch_context *out, pulse_patch_context *tensors);

/* --- Sparse updates: a step's changes for an engine that owns its tensors ------------ */

/* Changed elements (changed bytes for OPAQUE) of tensor i, from the tensor table: no chunk is
 * read or decoded. 0 for an unchanged tensor, a NULL p or an i out of range. The same figure
 * as pulse_patch_tensor_info_get's `changes`. */
PULSE_API uint64_t pulse_patch_tensor_changes(const pulse_patch *p, size_t i);

/* One tensor's changes in checkpoint coordinates, decoded into the caller's arrays, so that a
 * serving engine applies a step to its own tensors (GPU memory, a framework's storage)
 * without pulse reading or writing them. Pull style: the caller allocates every buffer (a
 * numpy array, a pinned host tensor) and the library fills it in place, nothing is copied
 * after. Tensor i is in table order (< pulse_patch_tensor_count; names bytewise ascending,
 * as pulse_patch_tensor_info_get gives them); count = pulse_patch_tensor_changes(p, i), known
 * without decoding.
 *
 * Element-wise tensors (BF16, F16, F32, F8_*), element width w bytes (2, 2, 4, 1):
 *  - index:  count int64 flat element indices, strictly ascending, global within the tensor;
 *  - values: count x w bytes, the new bit patterns (little-endian, as in the file);
 *  - deltas: count x w bytes, the two's-complement bit difference new - old modulo 2^(8w):
 *    added with wraparound to the old bits gives the new (`w.view(int16)[idx] += d`).
 *    An abs patch carries values: deltas need base (delta = new - base[idx]). A ulp patch
 *    carries deltas (un-zigzagged): values need base (base[idx] + delta).
 * OPAQUE tensors (every other dtype: I64, BOOL, U8, ...) are coded as whole-chunk byte
 * replacements, so which bytes changed is known only against base: index are byte offsets
 * into the tensor, values the new bytes, deltas new - old per byte (w = 1), and all three
 * need base. There the number of bytes that differ from base must be the chunk's count,
 * else PULSE_ERR_MISMATCH (base is not in the base state).
 * index, values and deltas may each be NULL (not wanted); asking for one the patch cannot
 * give without base, and base NULL, is PULSE_ERR_INVALID naming it (nothing decoded).
 *
 * base, when given, must have the patch's layout: as many tensors, tensor i with the patch's
 * name, dtype and shape (PULSE_ERR_MISMATCH naming it; only tensor i is compared, so that a
 * walk over all tensors stays linear: pulse_patch_verify(p, base, ...) compares the whole
 * layout once). It must also BE IN THE PATCH'S BASE STATE: that is the caller's
 * responsibility, no state id is computed here (pulse_ckpt_state_id against
 * pulse_patch_base_id checks it). Its data is read with
 * byte copies, so a tensor at a misaligned offset in a safetensors file is fine.
 *
 * Every coded chunk of the tensor is read, digest-checked and decoded as pulse_patch_verify
 * does (PULSE_ERR_CORRUPT, PULSE_ERR_FORMAT, ...), on `threads` threads (0 = all cores), each
 * chunk filling its own slice of the arrays (memory per thread bounded by the chunk size).
 * On an error the arrays hold partial output, to be discarded. A step is all-or-nothing and
 * a later tensor may be damaged when an earlier one is not: call pulse_patch_verify(p, base,
 * threads) on the whole patch first and deliver nothing to an engine unless it succeeds
 * (the Python layer, pulseweights.Patch.updates, does exactly this). */
PULSE_API int pulse_patch_tensor_updates(const pulse_patch *p, size_t i, const pulse_ckpt *base, int threads,
                                         int64_t *index, void *values, void *deltas);

/* The other way round: one tensor's changes as a publisher that never held the whole model
 * gives them (pulse_publisher_publish_changes; pulse_changes_find finds them on the host or a
 * GPU). The layout of the tensor, its hash now, and its changed elements in the arrays of
 * pulse_patch_tensor_updates: index strictly ascending, values the new bits, deltas new - old
 * modulo 2^(8w), each nonzero. Element-wise dtypes only; an OPAQUE tensor can only be
 * unchanged (count 0). Arrays are borrowed. */
typedef struct pulse_tensor_changes {
    pulse_mem_tensor tensor;     /* name, dtype, shape, nbytes; data is not read (may be NULL) */
    uint8_t hash[32];            /* its hash now (pulse_tensor_hash) */
    uint64_t count;              /* changed elements */
    const int64_t *index;
    const void *values;          /* needed by an abs patch (may be NULL for ulp) */
    const void *deltas;          /* needed by a ulp patch (may be NULL for abs) */
} pulse_tensor_changes;

/* Writes one tensor's sparse updates (as pulse_patch_tensor_updates gives them) into a tensor
 * the caller holds in CPU memory, in place: for k < count, element index[k] of dst (nelems
 * elements of `width` bytes: 1, 2 or 4) becomes dst[index[k]] + src[k] with wraparound on the
 * integer bits when add (deltas), else src[k] (values). Little-endian bits, like the file;
 * neither dst nor src need be aligned to the element. Every index is checked before anything
 * is written: one outside [0, nelems) or not strictly ascending is PULSE_ERR_INVALID naming
 * it, and dst is left as it was; so is a width other than 1, 2 or 4. count 0 writes nothing.
 * src NULL makes the same checks and writes nothing (dst may then be NULL too): a caller
 * applying one step to several tensors checks every tensor's positions before the first write.
 * One thread; no memory allocated. */
PULSE_API int pulse_updates_scatter(void *dst, uint64_t nelems, unsigned width, const int64_t *index, const void *src,
                                    uint64_t count, int add);

/* The part of a checkpoint tensor one engine parameter holds: the tensor seen as rows x cols
 * (a 1-D tensor is one row), its rows [start, stop) whole (dim 0: a column-parallel shard, a
 * piece of a fused qkv / gate_up) or its columns [start, stop) of every row (dim 1: a
 * row-parallel shard), stored in a parameter with rows of param_cols elements from row (dim 0)
 * or column (dim 1) `at` on. pulseweights.fused.Piece is the same. */
typedef struct pulse_piece {
    uint64_t rows, cols;
    int dim;
    uint64_t start, stop;
    uint64_t param_cols;
    uint64_t at;
} pulse_piece;

/* Applies tensor i's changes that fall in the piece to dst, the engine parameter (dst_elems
 * elements of the tensor's width, CPU memory, any alignment), in place: a ulp patch adds its
 * bit deltas with wraparound, an abs patch writes its values. No index or value arrays: each
 * chunk is decoded into per-thread scratch (threads: 0 = all cores) and written from there, so
 * memory is the chunk size per thread whatever the step's changes, and chunks of a row piece
 * that hold none of its rows are not decoded. *written (may be NULL) receives the elements
 * written. Element-wise dtypes only (OPAQUE: PULSE_ERR_INVALID, take those with
 * pulse_patch_tensor_updates and base). The piece is checked against the tensor and the
 * parameter before anything is written (PULSE_ERR_MISMATCH naming the tensor). A sliced patch
 * applies the chunks it holds. As for pulse_patch_tensor_updates, the patch must have been
 * verified whole first (pulse_patch_verify) so that a step is all or nothing; dst must hold
 * the base state (the caller's word, nothing is hashed). */
PULSE_API int pulse_patch_apply_piece(const pulse_patch *p, size_t i, const pulse_piece *piece, void *dst,
                                      uint64_t dst_elems, int threads, uint64_t *written);

/* --- Slices: the part of a patch a reader holding part of each tensor needs -------------- */

/* Opens a patch from its head alone: the first pulse_patch_head_bytes bytes (header, tensor
 * table, header digest), which a sync publisher also uploads as an object of its own (role
 * "patch-index", docs/sync.md) so that its digest in the signed record binds the chunk table.
 * patch_bytes is the whole patch's size (the record's figure for the "patch" object); head_len
 * must be exactly the head. Every check pulse_patch_open makes of a head is made.
 * No chunk is present yet. A reader marks the element ranges it holds (pulse_patch_want),
 * fetches the byte ranges pulse_patch_missing lists (ranged GETs of the patch object) and hands
 * them in (pulse_patch_supply), each chunk checked against its digest in the table. On such a
 * sliced patch, pulse_patch_verify checks the chunks present, pulse_patch_tensor_changes counts
 * and pulse_patch_tensor_updates gives only theirs (changes just outside the ranges asked for
 * come with them: a chunk is the unit), reading an absent chunk is PULSE_ERR_INVALID naming
 * it, and apply and squash refuse it. Not for use from several threads while supplying. */
PULSE_API int pulse_patch_open_head(pulse_patch **out, const void *head, size_t head_len, uint64_t patch_bytes);
/* Bytes of the head (fixed header, tensor table, digest): where the data section starts. */
PULSE_API uint64_t pulse_patch_head_bytes(const pulse_patch *p);
/* Nonzero for a patch opened with pulse_patch_open_head. */
PULSE_API int pulse_patch_is_sliced(const pulse_patch *p);
/* Sets *i to the table position of the tensor called name; PULSE_ERR_NOTFOUND naming it. */
PULSE_API int pulse_patch_tensor_find(const pulse_patch *p, const char *name, size_t *i);
/* Marks as wanted the coded chunks of tensor i that hold any of its flat elements [start, stop)
 * (OPAQUE and packed sub-byte tensors: all of them). A range that is empty or beyond the
 * tensor is PULSE_ERR_MISMATCH naming it; a patch that is not sliced, PULSE_ERR_INVALID. */
PULSE_API int pulse_patch_want(pulse_patch *p, size_t i, uint64_t start, uint64_t stop);

typedef struct pulse_patch_range {
    uint64_t offset;    /* from the start of the patch */
    uint64_t length;
} pulse_patch_range;

/* The byte ranges of the patch holding wanted chunks not yet present, ascending, neighbouring
 * chunks merged while a range stays within max_bytes (0: 8 MiB). Writes the first cap of them
 * to out and returns how many there are (0 for a patch that is not sliced). */
PULSE_API size_t pulse_patch_missing(const pulse_patch *p, uint64_t max_bytes, pulse_patch_range *out, size_t cap);
/* Hands in len bytes of the patch starting at offset: whole coded chunks (a range
 * pulse_patch_missing listed, or any run of chunks neighbouring in the data), each checked
 * against its digest, then copied and made present. PULSE_ERR_INVALID for a range that does not start and
 * end on chunks, PULSE_ERR_CORRUPT naming the tensor and chunk whose digest fails; either way
 * nothing is added. */
PULSE_API int pulse_patch_supply(pulse_patch *p, uint64_t offset, const void *bytes, size_t len);

#ifdef __cplusplus
}
#endif
#endif
