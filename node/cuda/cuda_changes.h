/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: the device half of pulse_changes: the base kept on the GPU, each step compared and hashed there, only the changes copied back. */
#ifndef PULSE_NODE_CUDA_CHANGES_H
#define PULSE_NODE_CUDA_CHANGES_H

#include <stddef.h>
#include <stdint.h>

#include "node/sync/part_changes.h"
#include "pulseweights/checkpoint.h"

typedef struct cuda_changes cuda_changes;

/* A copy on the current device of every tensor of BASE (its data pointers are device memory). */
int cuda_changes_open(cuda_changes **out, const pulse_ckpt *base);
void cuda_changes_close(cuda_changes **d);
/* Tensor i's changes from the copy to NOW (its data on the device, the same layout) into L
 * (*count of them: index, values, deltas and pos). */
int cuda_changes_tensor(cuda_changes *d, size_t i, const pulse_tensor *now, changes_lists *l, uint64_t *count);
/* Every tensor hash of NOW (data on the device), its state chunks hashed there in one launch:
 * HASHES gets count x 32 bytes, in NOW's order. */
int cuda_changes_hash(cuda_changes *d, const pulse_ckpt *now, uint8_t (*hashes)[32]);
/* Tensor i of the copy takes the COUNT changes in L (pos and values). */
int cuda_changes_accept(cuda_changes *d, size_t i, const changes_lists *l, uint64_t count);

#endif
