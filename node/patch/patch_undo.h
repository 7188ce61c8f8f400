/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: the undo of an in-place apply, the target's bytes at every position a patch writes, kept in memory. */
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
} patch_undo;

/* Decodes every coded chunk of P (digests and every check of pass 1: a patch refused here was
 * not applied) and saves TARGET's bytes at each position it changes: O(changes) memory, ~4 +
 * unit bytes a change (an OPAQUE chunk: its whole byte range). Layout as P's (checked). */
int patch_undo_save(patch_undo *u, const pulse_patch *p, const pulse_ckpt *target, int threads);
/* Writes the saved bytes back where the target now differs (pages left alone stay clean). */
void patch_undo_restore(const patch_undo *u, pulse_ckpt *target);
void patch_undo_free(patch_undo *u);

#endif
