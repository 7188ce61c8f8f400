/* SPDX-License-Identifier: Apache-2.0 */
/* The fixed-order FP32 arithmetic of a LoCo round (pseudo-gradient, mean, outer step): built with -ffp-contract=off. */
#include <string.h>

#include "node/kernels/kernels.h"
#include "node/loco/loco_internal.h"

/* Every operation below is one IEEE FP32 operation rounded to nearest even: this library is
 * compiled with -ffp-contract=off -fno-fast-math (node/loco/meson.build), so no compiler may
 * fuse a multiply and an add, and every trainer gets the same bits on every ISA. */

void loco_delta(const float *theta, const float *local, float *delta, size_t n)
{
    for (size_t i = 0; i < n; i++)
        delta[i] = theta[i] - local[i];
}

void loco_outer_step(const float *theta, const float *acc, float count, float *m, float lr, float mu,
                     int nesterov, float *theta_out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float g = acc[i] / count;      /* the mean: the node-ordered sum divided by K (not times 1/K) */
        float mm = mu * m[i];
        float mnew = mm + g;
        m[i] = mnew;
        float u = mnew;
        if (nesterov) {
            float t = mu * mnew;
            u = g + t;
        }
        float step = lr * u;
        theta_out[i] = theta[i] - step;
    }
}

float loco_bf16_round(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    memcpy(&x, &u, 4);
    return x;
}

size_t loco_bf16_values(int view, const float *theta, float *e, uint32_t *idx, float *val, size_t k)
{
    size_t kk = 0;
    for (size_t j = 0; j < k; j++) {
        uint32_t i = idx[j];
        float a = val[j], v = loco_bf16_round(a);
        /* a non-finite a is sent as it is (gate_check at home refuses it, loudly) */
        if (a - a == 0.0f) {
            float x = theta[i] - v;
            if (pulse_view_bits((pulse_view)view, x) == pulse_view_bits((pulse_view)view, theta[i])) {
                e[i] = a;   /* rounded, it would not be visible: keep it all */
                continue;
            }
            e[i] = a - v;   /* exact: v holds a's top bits */
        } else {
            v = a;
        }
        idx[kk] = i;
        val[kk++] = v;
    }
    return kk;
}
