/* SPDX-License-Identifier: Apache-2.0 */
/* The fixed-order FP32 arithmetic of a LoCo round (pseudo-gradient, mean, outer step): built with -ffp-contract=off. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/fail.h"
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

void loco_mean_update(const float *sum, size_t k, float count, float lr, float *u)
{
    for (size_t j = 0; j < k; j++) {
        float g = sum[j] / count;      /* as loco_outer_step: a division, then one multiplication */
        u[j] = lr * g;
    }
}

int loco_gate_mean(const pulse_kernels *kt, int view, const float *theta, float count, float lr, uint32_t *idx,
                   float *val, size_t k, uint32_t *hidx, float *hval, size_t *n_pub, size_t *n_held)
{
    *n_pub = *n_held = 0;
    if (k == 0)
        return 0;
    /* The gate kernel on the k union entries gathered into contiguous arrays, e = +0: entry j is
     * published exactly when gate[view] would send a = u[j] + 0 against theta[idx[j]]. */
    float *th = malloc(k * 4), *u = malloc(k * 4), *e = calloc(k, 4), *pv = malloc(k * 4);
    uint32_t *pj = malloc(k * 4);
    if (!th || !u || !e || !pv || !pj) {
        free(th), free(u), free(e), free(pv), free(pj);
        return pulse_fail(PULSE_ERR_NOMEM, "gate of %zu sums", k);
    }
    for (size_t j = 0; j < k; j++)
        th[j] = theta[idx[j]];
    loco_mean_update(val, k, count, lr, u);
    size_t np = kt->gate[view](th, u, e, k, pj, pv);
    /* pj ascending: walk both lists once; published entries compact in place (q <= j). */
    size_t q = 0, h = 0, p = 0;
    for (size_t j = 0; j < k; j++) {
        if (p < np && pj[p] == j) {
            idx[q] = idx[j];
            val[q++] = val[j];
            p++;
        } else {
            hidx[h] = idx[j];
            hval[h++] = val[j];
        }
    }
    free(th), free(u), free(e), free(pv), free(pj);
    *n_pub = q;
    *n_held = h;
    return 0;
}

void loco_carry_sum(float *e, const uint32_t *idx, const float *sum, size_t k)
{
    for (size_t j = 0; j < k; j++)
        e[idx[j]] = e[idx[j]] + sum[j];
}

size_t loco_first_over(const float *val, size_t k, float bound)
{
    for (size_t j = 0; j < k; j++)
        if (!(fabsf(val[j]) <= bound))   /* a comparison: exact, the same on every ISA; NaN fails it */
            return j;
    return k;
}

size_t loco_first_not_finite(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return i;
    return n;
}
