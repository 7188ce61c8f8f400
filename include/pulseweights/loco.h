/* SPDX-License-Identifier: Apache-2.0 */
/* PULSELoCo: trainer-to-trainer rounds (visibility gate, error feedback, fixed-order mean, outer step) over a store. */
#ifndef PULSEWEIGHTS_LOCO_H
#define PULSEWEIGHTS_LOCO_H

#include <stddef.h>
#include <stdint.h>

#include "pulseweights/checkpoint.h"
#include "pulseweights/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The low-precision view the gate tests visibility in (values match the kernels' pulse_view). */
enum { PULSE_LOCO_VIEW_BF16 = 0, PULSE_LOCO_VIEW_FP16 = 1, PULSE_LOCO_VIEW_E4M3 = 2, PULSE_LOCO_VIEW_E5M2 = 3 };

/* "bf16", "fp16", "e4m3", "e5m2" (NULL for another value) and back (-1 when unknown). */
PULSE_API const char *pulse_loco_view_name(int view);
PULSE_API int pulse_loco_view_from_name(const char *name);

/* Starts a trainer state in STATE_DIR (created when missing; an existing state is refused with
 * PULSE_ERR_EXISTS) from the F32 safetensors checkpoint FROM: theta_0 = FROM, e = 0, momentum = 0,
 * round 0, and theta_0's view (VIEW) with its state id. Every tensor must be F32. */
PULSE_API int pulse_loco_init(const char *state_dir, const char *from, int view);

/* One FP32 tensor in the caller's memory (the in-memory calls below): name and shape as in the
 * state's checkpoint, nelems = product of shape floats at data. */
typedef struct pulse_loco_tensor {
    const char *name;
    int ndim;
    uint64_t shape[PULSE_MAX_DIMS];
    float *data;
} pulse_loco_tensor;

/* pulse_loco_init from tensors in memory (T[0..n), any order, names distinct): the same state. */
PULSE_API int pulse_loco_init_tensors(const char *state_dir, const pulse_loco_tensor *t, size_t n, int view);

/* What a round is to do. Fill with pulse_loco_round_default_opts; `size` lets it grow. */
typedef struct pulse_loco_round_opts {
    size_t size;
    const char *store_url, *run, *key_path, *state_dir;
    const char *const *trust_paths;   /* .pub files or directories of them; the own key is always a trainer */
    size_t n_trust;
    const char *local_path;           /* theta_local after H local steps: F32, theta_r's layout */
    const char *out_path;             /* NULL, or where to write theta_{r+1} (F32) as well */
    const char *out_view_path;        /* NULL, or where to write theta_{r+1}'s view as well */
    double deadline_s;                /* how long to wait for the other trainers (default 300) */
    unsigned quorum;                  /* trainers needed at the deadline; 0 = a majority of the last
                                       * round's members (of all trainers before any) */
    float outer_lr;                   /* default 1.0 */
    float momentum;                   /* default 0.0 */
    int nesterov;                     /* default 0 */
    int threads;                      /* 0 = all cores */
    int verbose;                      /* log progress lines on stderr */
    uint32_t shard_elems;             /* elements per shard range; 0 = 2^20 (tests use small ones) */
    /* In memory instead of files: with local_path NULL, theta_local is local_tensors[0..n_local),
     * one per tensor of theta_r (matched by name, same shape; data read only). out_tensors, when
     * set, receive theta_{r+1} (matched by name, same shape; every one must exist in theta_r). */
    const pulse_loco_tensor *local_tensors;
    size_t n_local;
    const pulse_loco_tensor *out_tensors;
    size_t n_out;
    /* Send values rounded to BF16 (about half the value bytes); the rounding remainder stays in e.
     * An entry whose rounded value would not change the view is kept back whole. Receivers need
     * nothing new: the values are FP32 numbers whose low 16 bits are zero. */
    int bf16_values;
    /* The reduce-scatter instead of the all-gather (docs/loco.md "The reduce-scatter"): the members
     * are fixed from the shard records by a plan, each member owns some ranges, sums them from
     * everyone and publishes the sums; everyone fetches the sums. Same theta_{r+1} bits. Every
     * trainer of a round must use it, with the same shard_elems. */
    int reduce_scatter;
    /* Non-NULL: after the round commits (and its results compared equal), publish theta_{r+1}'s
     * view as step round + 1 of this sync run (docs/sync.md), signed with key_path, so `pulse pull`
     * followers see the rounds as ordinary steps. publish_store: NULL = store_url; publish_state:
     * the publisher's state directory, NULL = <state_dir>/publish. */
    const char *publish_run, *publish_store, *publish_state;
    /* NULL, or where the round reports what the fields above did (pulse_loco_report keeps its
     * layout, so callers built against it stay valid). */
    struct pulse_loco_round_extra *extra;
    /* reduce-scatter: how long to wait for the owners' sums once the plan is read; an owner still
     * missing then is left out of the next attempt. 0 = deadline_s, but at least 30 s. */
    double owner_wait_s;
    /* The reduce-scatter with the gate at the owner (implies reduce_scatter; docs/loco.md
     * "--reduce-gate"): each owner publishes only the summed entries whose mean update
     * u = outer_lr * (sum / K) changes the view of theta_r, and adds the withheld sums to its own
     * error-feedback buffer. Every trainer applies only the published entries (identical bits
     * everywhere). Needs momentum 0 and outer_lr > 0. Every trainer of a round must use it. */
    int reduce_gate;
} pulse_loco_round_opts;

/* What the reduce-scatter and the publication did (opts.extra; zeroed by the round). */
typedef struct pulse_loco_round_extra {
    unsigned rs_attempt;              /* the reduce-scatter attempt that completed (0: the first) */
    unsigned rs_owned;                /* ranges this trainer owned and summed in it */
    uint64_t rs_reduced_bytes;        /* bytes of the reduced shards it published */
    unsigned vetoed;                  /* members dropped from a plan: vetoed by an owner, or late as owners */
    int published, publish_already;   /* theta_{r+1}'s view was published (already: it was there) */
    uint64_t published_step;          /* = round + 1 */
    uint64_t publish_bytes;           /* bytes uploaded by that publication */
    /* reduce_gate (written only for callers whose opts.size includes reduce_gate): entries of the
     * owned ranges' sums this trainer published and withheld (the latter went into its e). */
    uint64_t rg_published, rg_withheld;
} pulse_loco_round_extra;

PULSE_API void pulse_loco_round_default_opts(pulse_loco_round_opts *o);

/* What a round did. */
typedef struct pulse_loco_report {
    uint64_t round;                   /* the round that ran (state now holds round + 1) */
    uint64_t params;                  /* elements of theta */
    uint64_t sent;                    /* entries this trainer sent (passed its gate) */
    uint64_t shard_bytes;             /* bytes of this trainer's shard objects */
    uint64_t uploaded, downloaded;    /* bytes moved through the store (records and objects) */
    unsigned trainers, included;      /* trainers known (trusted + self) and in the mean */
    int self_included;                /* 0: this trainer's a went back into e whole */
    unsigned excluded;                /* trainers refused (bad shard, wrong base, ...) */
    unsigned results_compared;        /* other trainers' result records compared equal */
    unsigned results_mismatched;      /* ... and different (the round then returns PULSE_ERR_MISMATCH) */
    int adopted;                      /* 1: the included set came from an earlier result record */
    uint8_t base[32], result[32];     /* view state ids of theta_r and theta_{r+1} */
} pulse_loco_report;

/* Runs one round (docs/loco.md): gate + error feedback, publish shards and the signed loco-shard
 * record, wait for the others (deadline, quorum), validate every shard (a bad one excludes its
 * trainer, logged on stderr), mean in node-id order, outer step, write the new state (crash-safe,
 * round number last), publish the loco-result record, compare the others' results.
 * Returns 0; PULSE_ERR_MISMATCH when another trainer's result for this round differs (the state
 * has advanced; the detail names the trainer); PULSE_ERR_NOTFOUND when the quorum was not reached
 * by the deadline (nothing changed); other codes from the store, the checkpoints and the records. */
PULSE_API int pulse_loco_round(const pulse_loco_round_opts *o, pulse_loco_report *rep);

/* The state's current round and its view's state id. */
PULSE_API int pulse_loco_state_round(const char *state_dir, uint64_t *round, uint8_t view_id[32], int *view);

#ifdef __cplusplus
}
#endif
#endif
