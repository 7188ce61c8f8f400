/* SPDX-License-Identifier: Apache-2.0 */
/* A least-squares objective on generated data with real gradients and Adam steps, for LoCo simulations and tests. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/fail.h"
#include "node/loco/objective.h"

/* splitmix64: a fixed, portable generator, so the data is the same on every machine. */
static uint64_t next_u64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* One N(0, 1) sample by Box-Muller in double (the second value is dropped: simplicity over speed). */
static double normal(uint64_t *s)
{
    double u1 = ((double)(next_u64(s) >> 11) + 1.0) * 0x1.0p-53;   /* (0, 1] */
    double u2 = (double)(next_u64(s) >> 11) * 0x1.0p-53;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static void fill_normal(float *out, size_t n, double sd, uint64_t *s)
{
    for (size_t i = 0; i < n; i++)
        out[i] = (float)(sd * normal(s));
}

int loco_objective_make(loco_objective *o, const loco_objective_cfg *cfg)
{
    memset(o, 0, sizeof *o);
    if (cfg->rows == 0 || cfg->cols == 0 || cfg->samples == 0 || cfg->trainers == 0 || cfg->rows > 65536 ||
        cfg->cols > 65536 || cfg->samples > 65536 || cfg->trainers > 4096 ||
        (uint64_t)cfg->rows * cfg->cols > (1ull << 28) ||
        (uint64_t)cfg->trainers * cfg->samples * (cfg->rows + cfg->cols) > (1ull << 30))
        return pulse_fail(PULSE_ERR_INVALID, "objective of %u x %u weights, %u samples x %u trainers: out of range",
                          cfg->rows, cfg->cols, cfg->samples, cfg->trainers);
    o->cfg = *cfg;
    size_t n = (size_t)cfg->rows * cfg->cols;
    size_t xs = (size_t)cfg->trainers * cfg->samples * cfg->cols, ys = (size_t)cfg->trainers * cfg->samples * cfg->rows;
    o->w_true = malloc(n * 4);
    o->w0 = malloc(n * 4);
    o->x = malloc(xs * 4);
    o->y = malloc(ys * 4);
    if (!o->w_true || !o->w0 || !o->x || !o->y) {
        loco_objective_free(o);
        return pulse_fail(PULSE_ERR_NOMEM, "objective data");
    }
    uint64_t s = cfg->seed;
    /* The target weights are scaled like an LLM's linear layers (N(0, 0.02)); training starts
     * from them plus a perturbation, as a fine-tuning run does from a pretrained model. */
    fill_normal(o->w_true, n, 0.02, &s);
    fill_normal(o->w0, n, cfg->init_noise, &s);
    for (size_t i = 0; i < n; i++)
        o->w0[i] += o->w_true[i];
    fill_normal(o->x, xs, 1.0, &s);
    /* y = x W_true^T + noise, each trainer its own samples. */
    for (size_t r = 0; r < (size_t)cfg->trainers * cfg->samples; r++) {
        const float *xr = o->x + r * cfg->cols;
        for (uint32_t j = 0; j < cfg->rows; j++) {
            const float *wj = o->w_true + (size_t)j * cfg->cols;
            double acc = 0;
            for (uint32_t c = 0; c < cfg->cols; c++)
                acc += (double)wj[c] * xr[c];
            o->y[r * cfg->rows + j] = (float)(acc + cfg->label_noise * normal(&s));
        }
    }
    return 0;
}

void loco_objective_free(loco_objective *o)
{
    free(o->w_true);
    free(o->w0);
    free(o->x);
    free(o->y);
    memset(o, 0, sizeof *o);
}

/* The residuals of trainer T's samples at W into res (samples x rows); returns 0.5 * mean square. */
static double residuals(const loco_objective *o, const float *w, unsigned t, float *res)
{
    const loco_objective_cfg *c = &o->cfg;
    const float *x = o->x + (size_t)t * c->samples * c->cols, *y = o->y + (size_t)t * c->samples * c->rows;
    double loss = 0;
    for (uint32_t s = 0; s < c->samples; s++) {
        const float *xs = x + (size_t)s * c->cols;
        for (uint32_t j = 0; j < c->rows; j++) {
            const float *wj = w + (size_t)j * c->cols;
            float acc = 0;
            for (uint32_t k = 0; k < c->cols; k++)
                acc += wj[k] * xs[k];
            float r = acc - y[(size_t)s * c->rows + j];
            if (res)
                res[(size_t)s * c->rows + j] = r;
            loss += (double)r * r;
        }
    }
    return 0.5 * loss / ((double)c->samples * c->rows);
}

double loco_objective_loss(const loco_objective *o, const float *w)
{
    double sum = 0;
    for (unsigned t = 0; t < o->cfg.trainers; t++)
        sum += residuals(o, w, t, NULL);
    return sum / o->cfg.trainers;
}

double loco_objective_grad(const loco_objective *o, const float *w, unsigned t, float *g, float *res)
{
    const loco_objective_cfg *c = &o->cfg;
    double loss = residuals(o, w, t, res);
    const float *x = o->x + (size_t)t * c->samples * c->cols;
    float scale = 1.0f / ((float)c->samples * (float)c->rows);
    memset(g, 0, (size_t)c->rows * c->cols * 4);
    /* dL/dW[j][k] = sum_s res[s][j] x[s][k] / (samples * rows) */
    for (uint32_t s = 0; s < c->samples; s++) {
        const float *xs = x + (size_t)s * c->cols;
        for (uint32_t j = 0; j < c->rows; j++) {
            float rj = res[(size_t)s * c->rows + j] * scale;
            float *gj = g + (size_t)j * c->cols;
            for (uint32_t k = 0; k < c->cols; k++)
                gj[k] += rj * xs[k];
        }
    }
    return loss;
}

void loco_adam_step(loco_adam *a, float *w, const float *g, size_t n, float lr)
{
    const float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
    a->t++;
    float c1 = 1.0f - powf(b1, (float)a->t), c2 = 1.0f - powf(b2, (float)a->t);
    for (size_t i = 0; i < n; i++) {
        a->m[i] = b1 * a->m[i] + (1.0f - b1) * g[i];
        a->v[i] = b2 * a->v[i] + (1.0f - b2) * g[i] * g[i];
        float mh = a->m[i] / c1, vh = a->v[i] / c2;
        w[i] -= lr * mh / (sqrtf(vh) + eps);
    }
}
