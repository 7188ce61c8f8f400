/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: where in the target a patch writes, as byte spans, for a caller that updates a copy from the new checkpoint (the publisher). */
#ifndef PULSE_NODE_PATCH_SPANS_H
#define PULSE_NODE_PATCH_SPANS_H

#include <stddef.h>

#include "node/checkpoint/ckpt_internal.h"
#include "pulseweights/patch.h"

/* The byte span of every coded chunk of p, in table order (adjacent chunks of a tensor merged),
 * malloc'd into *out (free); *n of them. Nothing outside them differs between the patch's base
 * and its result. */
int patch_changed_spans(const pulse_patch *p, ckpt_span **out, size_t *n);

#endif
