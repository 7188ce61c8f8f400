/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: the undo of an in-place apply, the target's bytes at every position a patch writes, kept in memory or, when large, in an unlinked temporary beside the target. */
#ifndef PULSE_NODE_PATCH_UNDO_H
#define PULSE_NODE_PATCH_UNDO_H

#include <stddef.h>
#include <stdint.h>

#include "pulseweights/checkpoint.h"
#include "pulseweights/patch.h"

typedef struct patch_undo_chunk {
    uint32_t k;       /* positions saved (for OPAQUE: the chunk's bytes, contiguous) */
    uint32_t *idx;    /* positions within the chunk; NULL for OPAQUE */
    uint8_t *old;     /* k x unit bytes */
} patch_undo_chunk;

typedef struct patch_undo {
    const pulse_patch *p;
    patch_undo_chunk *ent;   /* one per coded chunk of p */
    size_t n;
    uint8_t *map;            /* every chunk's arrays in one shared mapping of a temporary; NULL: malloc'd */
    size_t map_len;
} patch_undo;

/* Decodes every coded chunk of P (digests and every check of pass 1: a patch refused here was
 * not applied) and saves TARGET's bytes at each position it changes: ~4 + unit bytes a change
 * (an OPAQUE chunk: its whole byte range). Layout as P's (checked). Where that is more than
 * PULSE_UNDO_MEMORY (64 MiB; 0: always) and stem is given, the saved bytes go to a temporary
 * STEM.XXXXXX, unlinked as soon as it is made, its blocks reserved and mapped: page cache, not
 * the process's memory (~15 GB for a 7B step that changes a third of the weights). Where no
 * such file can be made (a full disk), they are kept in memory. */
int patch_undo_save(patch_undo *u, const pulse_patch *p, const pulse_ckpt *target, int threads, const char *stem);
/* Writes the saved bytes back where the target now differs (pages left alone stay clean). */
void patch_undo_restore(const patch_undo *u, pulse_ckpt *target);
void patch_undo_free(patch_undo *u);

#endif
