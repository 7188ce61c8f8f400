/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: the LoCo shard codec, the trainer state files and the fixed-order arithmetic of a round. */
#ifndef PULSE_NODE_LOCO_INTERNAL_H
#define PULSE_NODE_LOCO_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "pulseweights/checkpoint.h"
#include "pulseweights/loco.h"

/* Elements per shard: every tensor is cut into ranges of this many elements (the last shorter). */
#define LOCO_SHARD_ELEMS (1u << 20)
/* The most elements a received shard may cover (a decoder limit, above our own cut). */
#define LOCO_SHARD_MAX_ELEMS (1u << 24)
#define LOCO_SHARD_HEADER 40
#define LOCO_SHARD_ROLE "loco-shard"
#define LOCO_MEMBERS_ROLE "loco-members"
/* The largest magnitude a shard value may have (docs/loco.md "Bounded values"): a trainer's value
 * |a| <= 2^16, an owner's sum of K members' values |S| <= K x 2^16. Fixed, so every trainer applies
 * the same rule; far above any honest pseudo-gradient (Adam moves a weight by about lr per step),
 * and low enough that no sum, mean or outer step of bounded values can reach FP32's limit. */
#define LOCO_MAX_VALUE 65536.0f

/* One shard in memory: positions relative to `start` within tensor `tensor` (index in
 * canonical order), values FP32. idx/val owned. */
typedef struct loco_shard {
    size_t tensor;
    uint64_t start, len;       /* element range of the tensor */
    uint32_t k;
    uint32_t *idx;
    float *val;
} loco_shard;

void loco_shard_free(loco_shard *s);

/* Encodes positions (ascending, < len) and values as a shard object (malloc'ed *out). */
int loco_shard_encode(int view, uint64_t start, uint32_t len, const uint32_t *idx, const float *val,
                      uint32_t k, uint8_t **out, size_t *out_len);

/* Decodes an untrusted shard object: header, limits, exact sizes, zstd streams, gaps inside
 * [0, len). Checks the header's view, start and length against the expected ones. Does not
 * check the values (gate_check does). On success s->idx/val are owned by s. */
int loco_shard_decode(const uint8_t *buf, size_t n, int view, uint64_t start, uint64_t len, loco_shard *s);

/* --- state ------------------------------------------------------------------------ */

/* The files of a state at one round: theta (F32), e (F32), m (F32) and the view of theta. */
typedef struct loco_state {
    uint64_t round;
    int view;
    uint8_t view_id[32];          /* state id of the view file of theta_r */
    unsigned prev_members;        /* members of round r-1's result (0: not known: round 0, an older state) */
    pulse_ckpt *theta, *e, *m;    /* opened read-only */
} loco_state;

/* "<dir>/<what>-<round:012>.safetensors" */
void loco_state_path(const char *dir, const char *what, uint64_t round, char out[4096]);
int loco_state_load(const char *dir, loco_state *s);
void loco_state_close(loco_state *s);
/* Writes "<dir>/round" (temp file, fsync, rename, fsync of the directory): the commit point.
 * MEMBERS: how many trainers the result of round ROUND - 1 (the one just committed) included;
 * 0 after init (no line is written). */
int loco_state_commit(const char *dir, uint64_t round, int view, const uint8_t view_id[32], unsigned members);
/* Writes the view of the F32 checkpoint SRC to PATH (committed) and its state id into ID. */
int loco_write_view(const pulse_ckpt *src, int view, const char *path, int threads, uint8_t id[32]);
/* True when B has A's tensors (names, shapes), all F32. */
int loco_same_layout(const pulse_ckpt *a, const pulse_ckpt *b, const char *what);

/* --- arithmetic (outer.c, compiled with -ffp-contract=off: each line is one rounding) --- */

/* delta[i] = theta[i] - local[i]. */
void loco_delta(const float *theta, const float *local, float *delta, size_t n);
/* The outer step on n elements given the sum of the included sparse a (acc) and their count:
 * g = acc / count; m = mu*m + g; u = nesterov ? g + mu*m : m; theta_out = theta - lr*u.
 * theta_out may be acc (each acc[i] is read before theta_out[i] is written). */
void loco_outer_step(const float *theta, const float *acc, float count, float *m, float lr, float mu,
                     int nesterov, float *theta_out, size_t n);

/* The BF16-values option: the k gated entries (idx, val; e of the range) become BF16-rounded
 * values with the remainder a - bf16(a) left in e; an entry whose rounded value no longer changes
 * the view stays back whole (e = a). Compacts idx/val and returns the new k. */
size_t loco_bf16_values(int view, const float *theta, float *e, uint32_t *idx, float *val, size_t k);
/* The reduce-gate's mean update of k sums: u[j] = lr * (sum[j] / count) (two roundings). */
void loco_mean_update(const float *sum, size_t k, float count, float lr, float *u);
/* The reduce-gate owner step on one range (docs/loco.md "--reduce-gate"): the k union entries
 * (idx ascending within the range, val = the members' node-ordered sums; theta = the range of
 * theta_r). u = loco_mean_update; entry j is published when gate[view] with e = +0 sends u[j]
 * (view(theta - u) != view(theta), or not finite). Published entries stay in idx/val, compacted
 * in order (val still the sum); withheld ones go to hidx/hval (their sum), in order. hidx/hval
 * need room for k. Returns 0 or PULSE_ERR_NOMEM. */
struct pulse_kernels;
int loco_gate_mean(const struct pulse_kernels *kt, int view, const float *theta, float count, float lr,
                   uint32_t *idx, float *val, size_t k, uint32_t *hidx, float *hval, size_t *n_pub, size_t *n_held);
/* The withheld sums into the owner's error feedback: e[idx[j]] = e[idx[j]] + sum[j] (one rounding). */
void loco_carry_sum(float *e, const uint32_t *idx, const float *sum, size_t k);
/* The first j < k with |val[j]| not <= bound (NaN and +-Inf included), or k when there is none. */
size_t loco_first_over(const float *val, size_t k, float bound);
/* The first i < n with x[i] NaN or +-Inf, or n when every element is finite. */
size_t loco_first_not_finite(const float *x, size_t n);
/* Round to nearest even BF16, as an FP32 whose low 16 bits are zero (finite x). */
float loco_bf16_round(float x);

#endif
