/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: a round's context, shared by the all-gather round (round.c) and the reduce-scatter
 * (reduce.c), and the services both use (round_services.c). */
#ifndef PULSE_NODE_LOCO_ROUND_INTERNAL_H
#define PULSE_NODE_LOCO_ROUND_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "node/kernels/kernels.h"
#include "node/loco/loco_internal.h"
#include "node/sync/sync_internal.h"
#include "pulseweights/keys.h"
#include "pulseweights/record.h"
#include "pulseweights/store.h"

/* One trainer of the round (the trusted keys plus this one), kept sorted by node id. */
typedef struct trainer {
    uint8_t node[32];
    char hex[PULSE_NODE_ID_HEX];
    const char *name;          /* the .pub comment */
    int listed;                /* its shard record is in the store */
    int valid;                 /* its record and every shard passed the checks */
    int included;              /* in the mean */
    int checked;               /* validation ran (valid says how it went) */
    int in_result;             /* in the member list of an earlier result of this round */
    uint8_t want[32];          /* ... with this shard-record digest */
    uint8_t rec_digest[32];    /* SHA-256 of its shard record's bytes */
    uint64_t shard_bytes, entries;
    loco_shard *shards;
    size_t n_shards;
} trainer;

struct rs_state;

typedef struct round_ctx {
    const pulse_loco_round_opts *o;
    pulse_loco_report *rep;
    const pulse_kernels *kt;
    loco_state st;
    pulse_ckpt *local, *e_new;       /* local: open when theta_local is a file */
    const float **local_data;        /* theta_local per tensor of theta_r (file or caller memory) */
    pulse_secret_key *key;
    pulse_trust *trust;
    pulse_store *store;
    trainer *tr;
    size_t n_tr, self;
    uint8_t *own_rec;
    size_t own_rec_len;
    pulse_loco_round_extra x;        /* copied to o->extra at the end */
    struct rs_state *rs;             /* the reduce-scatter's plan and reduced shards (reduce.c), or NULL */
} round_ctx;

/* ---- services of round_services.c ---- */

void loco_say(const round_ctx *c, int always, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
double loco_now_s(void);
void loco_sleep_s(double s);
trainer *loco_find_trainer(round_ctx *c, const uint8_t node[32]);
/* The trainers needed at the deadline: --quorum, else a majority of the previous round's members
 * (of every trainer when they are not known): the same number on every honest trainer. */
size_t loco_quorum(const round_ctx *c);
/* The trusted nodes with a record of KIND for this round (at most n_tr). */
int loco_list_round(round_ctx *c, int kind, uint8_t (*nodes)[32], size_t *n);
/* Polls the round's shard-record listing (50 ms doubling to 1 s), marking trainers listed, until
 * every trainer is listed or the deadline passes; before each listing STOP may end the wait by
 * setting *found (a result or plan that another trainer already published). */
typedef int (*loco_wait_stop)(round_ctx *c, void *ctx, int *found);
int loco_wait_listed(round_ctx *c, loco_wait_stop stop, void *ctx, int *found);
/* Fetches and verifies the record of KIND for this round by NODE (signature by that trusted key,
 * kind, run, round, base = theta_r's view); *bytes (when wanted) receives its bytes. */
int loco_fetch_record(round_ctx *c, int kind, const uint8_t node[32], pulse_record *rec, void **bytes,
                      size_t *len);
/* Decodes one fetched shard object of record object O (tensor index TI of theta_r) into S and runs
 * gate_check against theta_r: what every received trainer shard must pass. */
int loco_check_shard_object(round_ctx *c, const pulse_record_object *o, const void *obj, size_t ti, loco_shard *s);

/* --- the reduce-scatter (reduce.c, docs/loco.md "The reduce-scatter") --- */

/* After this trainer published its shards: agree on a plan, reduce the owned ranges, fetch every
 * reduced shard. Sets the trainers' included/rec_digest/entries/shard_bytes and rep->included. */
int loco_rs_round(round_ctx *c);
/* Adds the reduced shards of tensor T into ACC (zeroed by the caller): acc = 0 + sum. */
void loco_rs_add_tensor(const round_ctx *c, size_t t, float *acc);
void loco_rs_free(round_ctx *c);
/* --reduce-gate: adds the sums this trainer withheld in the ranges it owned (final attempt) into
 * e_new at their positions, e = e + sum (one FP32 rounding each). Nothing without the gate. */
void loco_rs_carry_withheld(round_ctx *c);

/* Publishes the committed theta_{r+1} view as step round + 1 of o->publish_run (round_publish.c). */
int loco_publish_view(round_ctx *c);

#endif
