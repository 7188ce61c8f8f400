/* SPDX-License-Identifier: Apache-2.0 */
/* The fixed-order FP32 arithmetic of a LoCo round (pseudo-gradient, mean, outer step): built with -ffp-contract=off. */
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
