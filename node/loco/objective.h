/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: a built-in objective with real gradients (least squares on generated data) and the LoCo simulation. */
#ifndef PULSE_NODE_LOCO_OBJECTIVE_H
#define PULSE_NODE_LOCO_OBJECTIVE_H

#include <stddef.h>
#include <stdint.h>

/* Least squares: each trainer t holds `samples` rows x_s ~ N(0, 1)^cols and targets
 * y_s = W_true x_s + N(0, label_noise^2); W is rows x cols, W_true ~ N(0, 0.02) like an LLM's
 * linear layers, and training starts from W_true + N(0, init_noise^2).
 * Loss = 0.5 * mean over samples and outputs of (W x_s - y_s)^2. */
typedef struct loco_objective_cfg {
    uint32_t rows, cols, samples;
    unsigned trainers;
    double init_noise, label_noise;
    uint64_t seed;
} loco_objective_cfg;

typedef struct loco_objective {
    loco_objective_cfg cfg;
    float *w_true, *w0;   /* rows x cols */
    float *x, *y;         /* trainer-major: [t][s][cols], [t][s][rows] */
} loco_objective;

int loco_objective_make(loco_objective *o, const loco_objective_cfg *cfg);
void loco_objective_free(loco_objective *o);
/* The loss over every trainer's samples (their mean). */
double loco_objective_loss(const loco_objective *o, const float *w);
/* Trainer T's gradient at W into g (rows x cols); res is scratch of samples x rows floats.
 * Returns trainer T's loss at W. */
double loco_objective_grad(const loco_objective *o, const float *w, unsigned t, float *g, float *res);

/* Adam (beta 0.9, 0.999, eps 1e-8, bias-corrected); m and v of n floats, zeroed at the start. */
typedef struct loco_adam {
    float *m, *v;
    uint64_t t;
} loco_adam;
void loco_adam_step(loco_adam *a, float *w, const float *g, size_t n, float lr);

/* K trainers x R rounds x H inner Adam steps, in one process: PULSELoCo (gate, error feedback,
 * the round's fixed-order mean and outer step, shards really encoded to count bytes) and dense
 * DiLoCo (FP32 pseudo-gradients, same outer step) on the same objective, data and seeds. */
typedef struct loco_sim_cfg {
    loco_objective_cfg obj;
    unsigned rounds, inner_steps;
    float inner_lr, outer_lr, momentum;
    int nesterov;
    int view;                 /* PULSE_LOCO_VIEW_* the gate tests */
    int bf16_values;          /* send values as BF16, the rounding remainder stays in e */
    int bf16_forward;         /* gradients at the BF16 rounding of the FP32 master weights */
    uint32_t shard_elems;
    int threads;
    int quiet;                /* no per-round lines */
    /* NULL, or a directory (created; must not exist) where the PULSELoCo pass runs a third time
     * through the real rounds: one key and state per trainer, a file:// store, every trainer's
     * pulse_loco_round in its own thread on in-memory tensors. Trainer t's data goes to the key
     * of rank t in node-id order, so the round's mean adds in the same order as the in-memory
     * pass and must give the same bits. */
    const char *store_dir;
    int reduce_scatter;       /* the store pass's rounds use the reduce-scatter */
    /* The owner's gate on the mean (docs/loco.md "--reduce-gate"), in the in-memory pass (range g
     * of shard_elems owned by trainer g mod K) and in the store pass's rounds. Needs momentum 0. */
    int reduce_gate;
} loco_sim_cfg;

typedef struct loco_sim_result {
    double loss0, loss_loco, loss_dense;    /* at theta_0, and after the last round */
    double loss16_0, loss16_loco, loss16_dense;   /* the same at theta's BF16 rounding */
    double sent_per_round;                  /* entries per trainer per round (mean) */
    double shard_bytes_per_round;           /* bytes per trainer per round (mean) */
    double dense_bytes_per_round;           /* 4 x params */
    int store_ran, store_same;              /* the store pass ran; its theta equalled the in-memory one every round */
    double store_shard_bytes_per_round;     /* as reported by the rounds */
    double store_down_per_round;            /* bytes downloaded per trainer and round (mean over both) */
    double store_down_max;                  /* the most one trainer downloaded in one round */
    double rg_published_per_round, rg_withheld_per_round;   /* reduce_gate: summed entries, all owners */
} loco_sim_result;

/* Prints one line per round on stdout (unless quiet). */
int loco_sim_run(const loco_sim_cfg *cfg, loco_sim_result *out);

#endif
