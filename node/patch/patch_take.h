/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: a patch opened over a buffer or mapping its caller hands over instead of a copy of it (the sync nodes' fetched objects). */
#ifndef PULSE_NODE_PATCH_TAKE_H
#define PULSE_NODE_PATCH_TAKE_H

#include <stddef.h>

#include "pulseweights/patch.h"

/* pulse_patch_open_mem over buf itself (len bytes from malloc, as pulse_store's fetches are):
 * the patch frees it when closed, and this call frees it when it fails. A fetched step is the
 * largest buffer a follower holds; a copy of it costs its bytes twice and a first touch of as
 * many fresh pages each step. */
int patch_open_mem_take(pulse_patch **out, void *buf, size_t len);

/* The same over a read-only mapping of len bytes (len > 0) of a file the caller has written and
 * no one else writes (a follower's fetched step, unlinked): unmapped when the patch is closed,
 * and by this call when it fails. The patch's bytes are then page cache, not the process's
 * anonymous memory, however large the step. */
int patch_open_map_take(pulse_patch **out, void *map, size_t len);

#endif
