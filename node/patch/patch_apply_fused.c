/* SPDX-License-Identifier: Apache-2.0 */
/* Apply's fused pass 2 for 2-bit ulp chunks: decompress, check as pass 1 does, add in one go. */
#include "base/fail.h"
#include "node/kernels/kernels.h"
#include "node/patch/patch_internal.h"

/* Pass 2 of an apply for the common case, BF16/F16 ulp chunks coded with 2-bit symbols, when
 * pass 1 could not keep the chunk's streams (its cache was full): the streams are
 * decompressed again into private memory, checked there by pass 1's own code, and added to
 * dst (the chunk's first element) by the ulp2_add16 kernel, without expanding positions or
 * values. Digest not rechecked (see patch_decode_checked_chunk); every other check is kept.
 * Returns 1 when the chunk is not of that kind (the caller decodes, then scatters), 2 when
 * it was decoded into s (idx, vals) but not applied (the caller scatters). */
int patch_apply_checked_chunk(const pulse_patch *p, const patch_chunk *c, patch_scratch *s, uint8_t *dst)
{
    const patch_tensor *t = &p->tensors[c->tensor];
    if (p->values != PULSE_VALUES_ULP || t->dtype == PULSE_DT_OPAQUE || t->unit != 2 || c->val_len < 1)
        return 1;
    const uint8_t *bytes;
    int err = patch_chunk_bytes(p, c, s, 0, &bytes);
    if (err)
        return err;
    if (bytes[c->pos_len] != 2) {
        /* Another symbol width: decoded here from the bytes already read; the caller scatters. */
        err = patch_decode_bytes(p, c, s, bytes);
        return err ? err : 2;
    }
    /* Decompressed into s and checked there exactly as pass 1 checks a chunk, then added by
     * the kernel, which checks nothing. */
    patch_ulp_streams st;
    if ((err = patch_check_ulp_streams(p, c, bytes, s, &st)) != 0)
        return err;
    pulse_kernels_get()->ulp2_add16((uint16_t *)(void *)dst, st.gaps, st.glen, st.packed, st.esc, c->count);
    return 0;
}
