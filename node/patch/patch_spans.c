/* SPDX-License-Identifier: Apache-2.0 */
/* The byte spans of the target that a patch's coded chunks cover. */
#include <stdlib.h>

#include "base/fail.h"
#include "node/patch/patch_internal.h"
#include "node/patch/patch_spans.h"

int patch_changed_spans(const pulse_patch *p, ckpt_span **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    ckpt_span *v = malloc((p->nchunks ? p->nchunks : 1) * sizeof *v);
    if (!v)
        return pulse_fail(PULSE_ERR_NOMEM, "changed spans of %zu chunks", p->nchunks);
    size_t m = 0;
    for (size_t i = 0; i < p->nchunks; i++) {
        const patch_chunk *c = &p->chunks[i];
        const uint64_t unit = p->tensors[c->tensor].unit, off = c->first * unit, len = (uint64_t)c->len * unit;
        if (m && v[m - 1].tensor == c->tensor && v[m - 1].off + v[m - 1].len == off)
            v[m - 1].len += len;
        else
            v[m++] = (ckpt_span){ .tensor = c->tensor, .off = off, .len = len };
    }
    *out = v;
    *n = m;
    return 0;
}
