/* SPDX-License-Identifier: Apache-2.0 */
/* A synthetic RL trainer: a Llama-shaped model, FP32 master weights and Adam at an RL learning
 * rate, writing the BF16 checkpoints of its trajectory (the data of bench, demo and tests). */
#ifndef PULSE_TOOLS_SYNTH_H
#define PULSE_TOOLS_SYNTH_H

#include <stddef.h>
#include <stdint.h>

struct pulse_ckpt;

/* One weight tensor of the model: a matrix [rows, cols] (HF Linear layout, [out, in]) or a
 * vector [rows] (cols == 0). Initialised as mean + std * N(0,1), or from src. */
typedef struct synth_tensor {
    char name[256];
    uint64_t rows, cols;
    uint64_t nelems;
    float init_mean, init_std;
    float grad_scale;          /* per-tensor gradient magnitude (Adam mostly divides it out) */
    int shaped;                /* the shape written is shape[0..ndim), not [rows, cols] */
    int ndim;
    uint64_t shape[8];
    const void *src;           /* the initial values (nelems of src_dtype), or NULL */
    int src_dtype;             /* PULSE_DT_F32, _BF16 or _F16 */
} synth_tensor;

/* The model: its shape and tensors, in writing order (embed, layers, final norm, lm_head). */
typedef struct synth_model {
    unsigned vocab, hidden, intermediate, layers;
    uint64_t params;           /* total elements over all tensors */
    size_t ntensors;
    synth_tensor *tensors;     /* owned; synth_model_free releases it */
    struct pulse_ckpt *from;   /* the checkpoint the initial values are mapped from, or NULL */
} synth_model;

/* How the trainer runs. synth_opts_default fills the documented defaults. */
typedef struct synth_opts {
    uint64_t params;           /* target size; the config closest to it is chosen (default 100M) */
    uint64_t seed;             /* every bit of every checkpoint follows from it (default 1) */
    double lr;                 /* Adam learning rate (default 3e-6) */
    double rho;                /* step-to-step gradient correlation (default 0.9) */
    double spread;             /* 0: matrices init normal; B > 0: magnitudes log-uniform over B binades below std */
    int fp16;                  /* write the FP16 view (F16 tensors) instead of BF16 (default 0) */
    int threads;               /* 0 = all cores; the output does not depend on it */
} synth_opts;

#define SYNTH_MIN_PARAMS (64u * 1024u)
#define SYNTH_MAX_PARAMS (64ull << 30)
#define SYNTH_MAX_STEPS 1000000u
#define SYNTH_MAX_SPREAD 64.0

void synth_opts_default(synth_opts *o);

/* Picks the Llama-shaped config whose size is closest to o->params (vocab, hidden and
 * intermediate from a ladder of sizes, the layer count fitted). Returns 0 or a negative
 * PULSE_ERR_* (INVALID for a size outside [SYNTH_MIN_PARAMS, SYNTH_MAX_PARAMS]). */
int synth_model_init(synth_model *m, const synth_opts *o);
/* The model of a real checkpoint (a .safetensors file, an index or a directory): its F32, BF16
 * and F16 tensors, their shapes and initial values (FP32 master weights from them); other
 * dtypes are left out. o->params and o->spread are not used. INVALID when it has no such
 * tensor or a name longer than 255 bytes; the checkpoint's open errors otherwise. */
int synth_model_from(synth_model *m, const synth_opts *o, const char *path);
void synth_model_free(synth_model *m);
/* The per-tensor gradient magnitudes, log-uniform over 1e-4..1e-2 by seed and index. */
void synth_grad_scales(synth_model *m, uint64_t seed);

/* Runs the trainer from its initial weights (step 0) through `steps` Adam steps. For every
 * k <= steps with paths[k] != NULL the BF16 checkpoint of the weights after k steps is
 * written to paths[k] (safetensors, atomically: a failed run leaves no file behind).
 * changed (NULL or steps+1 entries) receives, for k >= 1, how many BF16 values differ
 * between step k-1 and step k (changed[0] = 0).
 *
 * Every element evolves on its own (the gradient noise is keyed by seed, tensor, block and
 * step), so up to SYNTH_WINDOW steps are computed block by block with the state in a small
 * per-block buffer: memory does not grow with the model. Longer runs keep the FP32 master,
 * the Adam moments and the gradient state (16 bytes per parameter) between windows.
 * Returns 0 or a negative PULSE_ERR_* with the detail set. */
#define SYNTH_WINDOW 32u
int synth_run(const synth_model *m, const synth_opts *o, uint64_t steps,
              const char *const *paths, uint64_t *changed);

/* Writes "<dir>/step-<k:06>.safetensors" into buf; returns 0 or -1 when it does not fit. */
int synth_step_path(char *buf, size_t size, const char *dir, uint64_t k);

#endif
