/* SPDX-License-Identifier: Apache-2.0 */
/* The tensor slices an engine-held follower holds, and the fetch of just their part of a patch. */
#ifndef PULSE_NODE_SYNC_SLICES_H
#define PULSE_NODE_SYNC_SLICES_H

#include <stddef.h>
#include <stdint.h>

#include "pulseweights/patch.h"
#include "pulseweights/record.h"
#include "pulseweights/store.h"
#include "pulseweights/sync.h"

typedef struct sync_slices {
    pulse_slice *v;     /* names owned */
    size_t n;
} sync_slices;

/* Copies n slices (names included); refuses an empty name or an empty range. */
int sync_slices_copy(sync_slices *out, const pulse_slice *in, size_t n);
void sync_slices_free(sync_slices *s);

/* The sliced patch of sync-patch record rec (objects: the patch, then its head): the head
 * fetched and checked against the record, the slices marked (a tensor or range the patch does
 * not have is PULSE_ERR_MISMATCH by name, before any chunk is fetched), then the chunks that
 * hold them fetched by range and each checked against its digest. Bytes received go to *moved. */
int sync_fetch_patch_slices(pulse_store *st, const char *run, const pulse_record *rec, const sync_slices *sl,
                            pulse_patch **out, uint64_t *moved);

#endif
