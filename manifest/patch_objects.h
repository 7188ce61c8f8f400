/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: which objects of a sync-patch record hold its patch, one object or a head and its data in parts (manifest/patch_objects.c). */
#ifndef PULSE_MANIFEST_PATCH_OBJECTS_H
#define PULSE_MANIFEST_PATCH_OBJECTS_H

#include <stddef.h>
#include <stdint.h>

#include "pulseweights/record.h"

/* The roles of a sync-patch record's objects (docs/sync.md, "Objects of a sync-patch record"):
 * - "patch": the whole patch in one object (publishers before patches came in parts);
 * - "patch-index": the patch's head (header, tensor table, digest): after a "patch", the same
 *   head again, for followers of slices; or first, the patch's first bytes;
 * - "patch-data": after the head, the patch's data in parts, in order, each naming its place in
 *   the patch (range_offset, and range_length its size): a publisher uploads each part as soon
 *   as the diff has written it, before the head, which comes last;
 * - "patch-by-direction": a third object of older publishers (format 6), not read;
 * - "tensor-hashes" and "part-index": last, in records of a trainer in parts (docs/sync.md, "A
 *   trainer in parts"): tensor hashes of the result (the model's, tensor "", or a part's, tensor
 *   its part run), and in a committed record each part's own head; not part of the patch. */
#define PULSE_ROLE_PATCH "patch"
#define PULSE_ROLE_PATCH_INDEX "patch-index"
#define PULSE_ROLE_PATCH_DATA "patch-data"
#define PULSE_ROLE_PATCH_BY_DIRECTION "patch-by-direction"
#define PULSE_ROLE_TENSOR_HASHES "tensor-hashes"
#define PULSE_ROLE_PART_INDEX "part-index"

/* One object of a patch, and where its first byte is in the patch. */
typedef struct patch_extent {
    const pulse_record_object *obj;
    uint64_t at;
} patch_extent;

typedef struct patch_objects {
    patch_extent *ext;                    /* in patch order, covering [0, bytes) exactly */
    size_t n;
    uint64_t bytes;                      /* the patch's size */
    const pulse_record_object *head;     /* the head object ("patch-index"); NULL where the record has none */
} patch_objects;

/* The patch of sync-patch record REC. Either one "patch" object, then at most its head
 * ("patch-index") and an older publisher's "patch-by-direction" (ignored); or the head, first,
 * then "patch-data" objects, each starting where the one before ends, then any "tensor-hashes"
 * and "part-index" objects (left out of the extents). PULSE_ERR_FORMAT naming
 * what does not fit. */
int patch_objects_of(const pulse_record *rec, patch_objects *out);
void patch_objects_free(patch_objects *p);

#endif
