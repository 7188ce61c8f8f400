/* SPDX-License-Identifier: Apache-2.0 */
/* The one place where the synthetic trainer turns FP32 master weights into their low-precision view (BF16 or FP16). */
#ifndef PULSE_TOOLS_SYNTH_ROUND_H
#define PULSE_TOOLS_SYNTH_ROUND_H

#include <stdint.h>
#include <string.h>

#include "node/kernels/kernels.h"

/* BF16 = the top 16 bits of the FP32 pattern, rounded to nearest, ties to even (what
 * PyTorch's .to(torch.bfloat16) does). Adding 0x7fff plus the lowest kept bit rounds the
 * dropped half correctly and carries into the exponent when the mantissa overflows, which
 * is also right for values that round up to infinity. A NaN must not be rounded (the carry
 * could turn it into an infinity), so it keeps its sign and top payload bits and gets the
 * quiet bit set. */
static inline uint16_t synth_bf16_rne(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* The view the trainer writes: BF16 as above, or FP16 rounded to nearest even with subnormals
 * kept and overflow to infinity (what PyTorch's .to(torch.float16) does), by the library's own
 * rounding of views (pulse_view_bits). */
static inline uint16_t synth_view_rne(int fp16, float f)
{
    return fp16 ? (uint16_t)pulse_view_bits(PULSE_VIEW_FP16, f) : synth_bf16_rne(f);
}

#endif
