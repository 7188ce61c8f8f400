/* SPDX-License-Identifier: Apache-2.0 */
/* The objects that hold a sync-patch record's patch: the whole patch in one, or its head and then its data in parts. */
#include <stdlib.h>
#include <string.h>

#include "base/fail.h"
#include "manifest/patch_objects.h"

int patch_objects_of(const pulse_record *rec, patch_objects *out)
{
    memset(out, 0, sizeof *out);
    const pulse_record_object *o = rec->objects;
    uint32_t n = rec->n_objects;
    if (n >= 1 && !strcmp(o[0].role, PULSE_ROLE_PATCH)) {
        /* one object (a third, a patch by direction, from older publishers: the plain patch does) */
        if (n > 3 || (n >= 2 && strcmp(o[1].role, PULSE_ROLE_PATCH_INDEX)) ||
            (n == 3 && strcmp(o[2].role, PULSE_ROLE_PATCH_BY_DIRECTION)))
            return pulse_fail(PULSE_ERR_FORMAT, "sync-patch record names %u objects, wanted a 'patch', at most its '"
                              PULSE_ROLE_PATCH_INDEX "' and then its '" PULSE_ROLE_PATCH_BY_DIRECTION "'", n);
        if (!(out->ext = malloc(sizeof *out->ext)))
            return pulse_fail(PULSE_ERR_NOMEM, "patch objects");
        out->ext[0] = (patch_extent){ &o[0], 0 };
        out->n = 1;
        out->bytes = o[0].size;
        out->head = n >= 2 ? &o[1] : NULL;
        return 0;
    }
    if (n < 1 || strcmp(o[0].role, PULSE_ROLE_PATCH_INDEX))
        return pulse_fail(PULSE_ERR_FORMAT, "sync-patch record names %u objects, first '%s': wanted a 'patch', or a '"
                          PULSE_ROLE_PATCH_INDEX "' and its '" PULSE_ROLE_PATCH_DATA "' objects", n, n ? o[0].role : "");
    /* a trainer in parts' tensor hashes and part heads, last: not part of the patch */
    while (n >= 2 && (!strcmp(o[n - 1].role, PULSE_ROLE_TENSOR_HASHES) || !strcmp(o[n - 1].role, PULSE_ROLE_PART_INDEX)))
        n--;
    if (!(out->ext = malloc(n * sizeof *out->ext)))
        return pulse_fail(PULSE_ERR_NOMEM, "patch objects");
    uint64_t at = 0;
    for (uint32_t i = 0; i < n; i++) {
        const int data = i > 0;
        if ((data && strcmp(o[i].role, PULSE_ROLE_PATCH_DATA)) || o[i].range_offset != at ||
            o[i].range_length != o[i].size || o[i].size > UINT64_MAX - at) {
            patch_objects_free(out);
            return pulse_fail(PULSE_ERR_FORMAT, "sync-patch record: object %u ('%s', bytes %llu+%llu of the patch) "
                              "is not the %s at byte %llu", i, o[i].role, (unsigned long long)o[i].range_offset,
                              (unsigned long long)o[i].range_length, data ? "'" PULSE_ROLE_PATCH_DATA "' object"
                              : "'" PULSE_ROLE_PATCH_INDEX "'", (unsigned long long)at);
        }
        out->ext[i] = (patch_extent){ &o[i], at };
        at += o[i].size;
    }
    out->n = n;
    out->bytes = at;
    out->head = &o[0];
    return 0;
}

void patch_objects_free(patch_objects *p)
{
    free(p->ext);
    memset(p, 0, sizeof *p);
}
