/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: a patch applied in two halves, staged beside the target as its chunks arrive, then written in one scatter (a follower's step). */
#ifndef PULSE_NODE_PATCH_STAGE_H
#define PULSE_NODE_PATCH_STAGE_H

#include <stddef.h>
#include <stdint.h>

#include "pulseweights/checkpoint.h"
#include "pulseweights/patch.h"

/* Staging takes the coded chunks in any order, from any thread, each as soon as its bytes are
 * there: it checks the chunk's digest, decodes it against the target (which still holds the
 * base), computes the chunk's span of the result beside the target, writes the span's changed
 * positions and new values into the step's journal file, and hashes the state chunks
 * (PULSE_STATE_CHUNK) the span completes. Idle workers hash the state chunks no chunk touches.
 * When every chunk is staged, the result's state id is known before one byte of the target is
 * written, so a patch whose result is not its record's is refused with the weights untouched,
 * and no separate pass hashes the base or the result: the base is checked by the same hash
 * (a target that is not the base gives another result).
 *
 * The journal holds the patch's head and, per coded chunk, a bitmap of the positions it
 * changes and their new values in position order: replaying it (patch_stage_replay) writes the
 * same bytes again, so a write torn by a crash is mended from it without the patch or the base.
 * docs/node.md, "The step journal", gives its layout. */
typedef struct patch_stage patch_stage;

/* P: a patch opened over its head (pulse_patch_open_head, no chunk needed) or whole; it must
 * outlive the stage. TARGET: the checkpoint P applies to, in P's base state; its layout is
 * checked here, and it is only read until patch_stage_write. JOURNAL_FD: a file this call sizes
 * and fills with P's head; staging writes each chunk's part. THREADS: the most workers that will
 * call patch_stage_chunk at once. HASH 0: no state chunk is hashed (the caller checks the result
 * after the write, patch_stage_finish gives no id). */
int patch_stage_open(patch_stage **out, const pulse_patch *p, const pulse_ckpt *target, int journal_fd, int threads,
                     int hash);
void patch_stage_close(patch_stage **st);

/* Bytes of the journal file. */
uint64_t patch_stage_journal_bytes(const patch_stage *st);

/* Stages coded chunk k (0 .. pulse_patch_chunk_count - 1) from its coded bytes, exactly
 * patch_stage_chunk_len(k) of them. Once per k; distinct k from any threads at once. The
 * digest, the coding and the chunk's fit to the target are checked: an error names the chunk. */
int patch_stage_chunk(patch_stage *st, size_t k, const uint8_t *bytes);
/* Where coded chunk k's bytes lie in the patch (from its first byte, the head included). */
uint64_t patch_stage_chunk_at(const patch_stage *st, size_t k);
size_t patch_stage_chunk_len(const patch_stage *st, size_t k);
size_t patch_stage_chunks(const patch_stage *st);
/* The coded chunk (k above) that is the i-th by its place in the patch: the chunks' bytes cover
 * the data section in any order (i itself when they lie in table order, as writers put them). */
size_t patch_stage_chunk_by_offset(const patch_stage *st, size_t i);

/* Hashes one run of the state chunks no coded chunk touches (so an idle worker hashes the
 * unchanged part of the model while the patch is still arriving). 1 when it did, 0 when none
 * is left. Any thread. */
int patch_stage_hash_untouched(patch_stage *st);

/* Once every chunk is staged: the rest of the untouched state chunks, the state chunks that
 * several coded chunks share (a chunk size that is not a multiple of PULSE_STATE_CHUNK), on
 * THREADS; the result's state id into result. */
int patch_stage_finish(patch_stage *st, int threads, uint8_t result[32]);

/* Writes the staged changes into TARGET (the stage's target, opened writable) from the journal,
 * on THREADS. Idempotent. */
int patch_stage_write(patch_stage *st, pulse_ckpt *target, int threads);

/* Recovery: the journal file (JOURNAL_FD, as staging left it, complete) written into TARGET,
 * whatever TARGET holds (a torn earlier write of the same step, or the base). The head in the
 * journal must be P_HEAD_DIGEST's (the SHA-256 of the patch's head the record names), so a
 * journal planted beside the weights is refused before a byte is written. */
int patch_stage_replay(int journal_fd, const uint8_t head_digest[32], pulse_ckpt *target, int threads);

#endif
