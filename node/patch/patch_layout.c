/* SPDX-License-Identifier: Apache-2.0 */
/* A patch's tensor table against a checkpoint's tensors: the same names, dtypes and shapes, or the first that differs named. */
#include <string.h>

#include "base/fail.h"
#include "node/patch/patch_internal.h"

int patch_check_tensor_layout(const patch_tensor *pt, const pulse_tensor *ct)
{
    if (strcmp(pt->name, ct->name) != 0)
        return pulse_fail(PULSE_ERR_MISMATCH, "layout changed: tensor %s is not in the %s",
                          strcmp(pt->name, ct->name) < 0 ? pt->name : ct->name,
                          strcmp(pt->name, ct->name) < 0 ? "checkpoint" : "patch");
    unsigned unit = patch_dtype_unit(ct->dtype);
    if (strcmp(pt->dtype_name, ct->dtype_name) != 0 || pt->elem_size != ct->elem_size
        || pt->dtype != (unit ? ct->dtype : PULSE_DT_OPAQUE))
        return pulse_fail(PULSE_ERR_MISMATCH, "layout changed: tensor %s dtype %s in the patch, %s in the checkpoint",
                          pt->name, pt->dtype_name, ct->dtype_name);
    if (pt->ndim != ct->ndim || memcmp(pt->shape, ct->shape, sizeof pt->shape[0] * (size_t)pt->ndim) != 0
        || pt->units * pt->unit != ct->nbytes)
        return pulse_fail(PULSE_ERR_MISMATCH, "layout changed: tensor %s shape differs", pt->name);
    return 0;
}

int patch_check_layout(const pulse_patch *p, const pulse_ckpt *c)
{
    size_t n = pulse_ckpt_count(c);
    for (size_t i = 0; i < p->ntensors || i < n; i++) {
        const patch_tensor *pt = i < p->ntensors ? &p->tensors[i] : NULL;
        const pulse_tensor *ct = i < n ? pulse_ckpt_tensor(c, i) : NULL;
        if (!pt)
            return pulse_fail(PULSE_ERR_MISMATCH, "layout changed: tensor %s is not in the patch", ct->name);
        if (!ct)
            return pulse_fail(PULSE_ERR_MISMATCH, "layout changed: tensor %s is not in the checkpoint", pt->name);
        int r = patch_check_tensor_layout(pt, ct);
        if (r)
            return r;
    }
    return 0;
}
