/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: one tensor's change lists as pulse_changes fills them, shared by its host and device halves. */
#ifndef PULSE_NODE_SYNC_PART_CHANGES_H
#define PULSE_NODE_SYNC_PART_CHANGES_H

#include <stdint.h>

typedef struct changes_lists {
    int64_t *index;
    uint8_t *values, *deltas;
    uint32_t *pos;          /* the positions again as uint32: what the device's scatter takes at accept */
    uint64_t cap;
    unsigned width;         /* bytes a value */
} changes_lists;

/* Room for k changes of `width` bytes (grown, never shrunk). 0 or PULSE_ERR_NOMEM. */
int changes_lists_reserve(changes_lists *l, uint64_t k, unsigned width);

#endif
