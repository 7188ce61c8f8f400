/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: a step's directions in memory (node/patch/patch_dirs.c), read by the diff and the decoder of format 6 chunk by chunk. */
#ifndef PULSE_NODE_PATCH_DIRS_H
#define PULSE_NODE_PATCH_DIRS_H

#include <stddef.h>
#include <stdint.h>

#include "pulseweights/patch.h"

struct pulse_dirs {
    uint8_t *image;     /* the file's bytes, whole (docs/patch-format.md, "Directions file") */
    size_t mapped;      /* image is a mapping of a file, this many bytes (0: malloc'd) */
    char *tmp;          /* being built in this temporary (mapped), not yet renamed into place */
    size_t len;
    size_t ntensors;
    uint64_t *elems;    /* per tensor: elements with a direction (0: not BF16 or F16) */
    size_t *at;         /* per tensor: where its packed directions start in image */
};

/* Elements first .. first+n of tensor's directions in d, a byte each (patch_ctx_dirs' values):
 * inline, so that the coders read it without calling into the file that decodes patches. */
static inline void patch_dirs_unpack(const pulse_dirs *d, size_t tensor, uint64_t first, uint32_t n, uint8_t *out)
{
    const uint8_t *p = d->image + d->at[tensor];
    uint32_t i = 0;
    for (; i < n && ((first + i) & 3); i++)
        out[i] = (uint8_t)((p[(first + i) >> 2] >> (2 * ((first + i) & 3))) & 3);
    for (const uint8_t *q = p + ((first + i) >> 2); i + 4 <= n; i += 4, q++) {
        const uint8_t b = *q;
        out[i] = b & 3;
        out[i + 1] = (b >> 2) & 3;
        out[i + 2] = (b >> 4) & 3;
        out[i + 3] = (uint8_t)(b >> 6);
    }
    for (; i < n; i++)
        out[i] = (uint8_t)((p[(first + i) >> 2] >> (2 * ((first + i) & 3))) & 3);
}

/* Sets element j of tensor t's directions, its two bits still 0 (as patch_dirs_empty leaves
 * them): two writers of one byte race, so elements of one byte are set by one thread. */
static inline void patch_dirs_set(pulse_dirs *d, size_t t, uint64_t j, uint8_t dir)
{
    d->image[d->at[t] + (j >> 2)] |= (uint8_t)(dir << (2 * (j & 3)));
}

/* Directions of p's tensors (BF16 and F16 ones: the others hold none) from state from_id to
 * to_id, every element unchanged; patch_dirs_seal once they are set. */
int patch_dirs_empty(pulse_dirs **d, const pulse_patch *p, const uint8_t from_id[32], const uint8_t to_id[32]);
/* The same built in a temporary beside path (PATH.tmp.XXXXXX, its space reserved, mapped), so
 * that its bytes are page cache, not the process's; patch_dirs_commit puts it in place, and
 * pulse_dirs_free of one not put there removes it. Where no such file can be made (a full disk,
 * no shared maps), the directions are built in memory as patch_dirs_empty does. */
int patch_dirs_empty_at(pulse_dirs **d, const pulse_patch *p, const uint8_t from_id[32], const uint8_t to_id[32],
                        const char *path);
void patch_dirs_seal(pulse_dirs *d);
/* pulse_dirs_of_step built beside path as patch_dirs_empty_at builds them: what a publisher
 * by direction keeps of the step it publishes, for the step after it. */
int patch_dirs_of_step_at(pulse_dirs **out, const pulse_ckpt *from, const pulse_ckpt *to, const uint8_t from_id[32],
                          const uint8_t to_id[32], int threads, const char *path);

/* pulse_patch_squash (node/patch/patch_squash.c) that also gives the directions of the composed
 * step, from base to the last patch's result, read from each chunk's base and result as the
 * squash makes it: what a follower keeps of the step it journals, with no second decode. dirs
 * NULL: none asked (pulse_patch_squash). dirs_path: built beside that file (patch_dirs_empty_at),
 * NULL: in memory. */
int patch_squash_dirs(pulse_patch *const *p, size_t n, const pulse_ckpt *base, int threads, int zstd_level,
                      const char *out_path, pulse_dirs **dirs, const char *dirs_path);

/* A node's own directions file held mapped instead of in memory: its bytes are page cache, not
 * the process's (two bits a weight, ~1.75 GB at 7B). Only for a file no other process writes or
 * truncates while the object lives, a node's own in its locked state directory: its digest is
 * checked at load, not at each read. patch_dirs_load_mapped is pulse_dirs_load over the mapping;
 * patch_dirs_save_mapped is pulse_dirs_save, after which d holds the file just written from it,
 * not hashed again (where the file cannot be mapped, d stays in memory: not an error). */
int patch_dirs_load_mapped(pulse_dirs **out, const char *path);
int patch_dirs_save_mapped(pulse_dirs *d, const char *path, int durable);
/* patch_dirs_save_mapped, or for directions built beside path (patch_dirs_empty_at) their
 * temporary renamed there (msynced first, and the directory after, with durable): no second
 * copy of the bytes. */
int patch_dirs_commit(pulse_dirs *d, const char *path, int durable);

/* Whether d holds a direction for each BF16 and F16 element of p's tensors, or of c's, and none
 * for the others (PULSE_ERR_MISMATCH naming the first tensor that differs). */
int patch_dirs_check_patch(const pulse_dirs *d, const pulse_patch *p);
int patch_dirs_check_ckpt(const pulse_dirs *d, const pulse_ckpt *c);

/* The directions of the step an in-place apply just took (node/patch/patch_undo.h): from the
 * old bytes u saved and target's new ones, with no second decode of the patch; target must hold
 * the patch's result (its state id checked by the apply). path: built beside that file
 * (patch_dirs_empty_at; patch_dirs_commit puts them there), NULL: in memory. */
struct patch_undo;
int patch_dirs_of_undo(pulse_dirs **out, const struct patch_undo *u, const pulse_ckpt *target, const char *path);

#endif
