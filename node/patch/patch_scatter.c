/* SPDX-License-Identifier: Apache-2.0 */
/* Sparse updates (from pulse_patch_tensor_updates) written into a caller's CPU-held tensor: one pass over the positions, in place, with no temporaries. */
#include <string.h>

#include "base/fail.h"
#include "pulseweights/patch.h"

/* One element of `W` bytes: dst = dst + src (unsigned, so the add wraps like the bits) or
 * dst = src. memcpy because neither array need be aligned to the element; on the targets we
 * build for it compiles to a plain load and store. */
#define SCATTER(T, W)                                                           \
    static void scatter_##W(uint8_t *dst, const int64_t *index, const uint8_t *src, \
                            uint64_t count, int add)                            \
    {                                                                           \
        for (uint64_t k = 0; k < count; k++) {                                  \
            uint8_t *d = dst + (uint64_t)index[k] * W;                          \
            T s, x;                                                             \
            memcpy(&s, src + k * W, W);                                         \
            if (add) {                                                          \
                memcpy(&x, d, W);                                               \
                s = (T)(x + s);                                                 \
            }                                                                   \
            memcpy(d, &s, W);                                                   \
        }                                                                       \
    }
SCATTER(uint8_t, 1)
SCATTER(uint16_t, 2)
SCATTER(uint32_t, 4)

int pulse_updates_scatter(void *dst, uint64_t nelems, unsigned width, const int64_t *index, const void *src,
                          uint64_t count, int add)
{
    if (width != 1 && width != 2 && width != 4)
        return pulse_fail(PULSE_ERR_INVALID, "scatter: element width %u (1, 2 or 4 bytes)", width);
    if (!count)
        return PULSE_OK;
    if (!index || (src && !dst))
        return pulse_fail(PULSE_ERR_INVALID, "scatter: %s is NULL with %llu updates", !index ? "index" : "dst",
                          (unsigned long long)count);
    /* Every position is checked before the first write, so a refused call leaves dst whole: an
     * engine's weights are never left half a step on. Ascending positions also mean no
     * position is written twice (an add would otherwise count twice). */
    int64_t prev = -1;
    for (uint64_t k = 0; k < count; k++) {
        int64_t at = index[k];
        if (at < 0 || (uint64_t)at >= nelems)
            return pulse_fail(PULSE_ERR_INVALID, "scatter: index[%llu] = %lld is outside the tensor's %llu elements",
                              (unsigned long long)k, (long long)at, (unsigned long long)nelems);
        if (at <= prev)
            return pulse_fail(PULSE_ERR_INVALID,
                              "scatter: index[%llu] = %lld does not ascend strictly (index[%llu] = %lld)",
                              (unsigned long long)k, (long long)at, (unsigned long long)(k - 1), (long long)prev);
        prev = at;
    }
    if (!src)
        return PULSE_OK;   /* checked only: a caller applying a step to several tensors checks all first */
    if (width == 1)
        scatter_1(dst, index, src, count, add);
    else if (width == 2)
        scatter_2(dst, index, src, count, add);
    else
        scatter_4(dst, index, src, count, add);
    return PULSE_OK;
}
