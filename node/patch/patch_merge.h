/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: one head over the patches of a step's parts, each over its own tensors, their data side by side. */
#ifndef PULSE_NODE_PATCH_MERGE_H
#define PULSE_NODE_PATCH_MERGE_H

#include <stddef.h>
#include <stdint.h>

#include "pulseweights/patch.h"

/* The head (header, table, digest; *out malloc'd, *len bytes) of the patch whose tensors are
 * those of PARTS[0..n) (heads opened with pulse_patch_open_head, over disjoint tensor sets, one
 * chunk size and value code) in name order, whose data section holds part i's data at DATA_AT[i]:
 * each chunk keeps its bytes and digest, so the parts' uploaded data objects are the merged
 * patch's data as they are. BASE and RESULT are the whole model's state ids; the
 * result's __metadata__ is part 0's (a sharded checkpoint's is its first shard's). PULSE_ERR_MISMATCH naming what the parts disagree on (chunk size, value
 * code, a tensor in two parts). */
int patch_merge_heads(const pulse_patch *const *parts, size_t n, const uint64_t *data_at, const uint8_t base[32],
                      const uint8_t result[32], uint8_t **out, size_t *len);

#endif
