/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: a patch made of change lists, for a publisher that never holds the whole model (patch_changes.c). */
#ifndef PULSE_NODE_PATCH_CHANGES_H
#define PULSE_NODE_PATCH_CHANGES_H

#include <stddef.h>
#include <stdint.h>

#include "pulseweights/patch.h"

/* The patch from BASE_ID to RESULT_ID of the changes T[0..n) (the whole layout, one entry a
 * tensor in name order; LAYOUT made of them by patch_changes_layout) to out_path, as pulse_patch_diff writes one (o: its options; the
 * byte-identical patch where the lists are the diff's): element-wise tensors only, values as
 * o->values asks (deltas for ulp, values for abs), every list checked as it is cut. */
int patch_from_changes(const pulse_ckpt *layout, const pulse_tensor_changes *t, size_t n, const pulse_diff_opts *o, const uint8_t base_id[32],
                       const uint8_t result_id[32], const char *out_path);
/* The tensors of T[0..n) as a checkpoint of their layout only (no data), tensor i being T[i]'s:
 * refused unless each names a valid tensor and they come in strictly ascending (bytewise) name
 * order, as state ids and patches order them. */
int patch_changes_layout(const pulse_tensor_changes *t, size_t n, pulse_ckpt **layout);

#endif
