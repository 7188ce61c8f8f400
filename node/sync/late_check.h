/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: a step's result state id checked after its write, on idle cycles, for a follower whose base is its own last write (node/sync/late_check.c). */
#ifndef PULSE_NODE_SYNC_LATE_CHECK_H
#define PULSE_NODE_SYNC_LATE_CHECK_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "node/checkpoint/ckpt_internal.h"
#include "pulseweights/checkpoint.h"

#define LATE_CHECK_THREADS_MAX 64

struct late_check;
typedef struct late_worker {
    struct late_check *lc;
    size_t i;
} late_worker;

typedef struct late_check {
    int running;                 /* a check was started and not waited for */
    ckpt_chunk_ids ids;          /* the weights' state chunks, hashed by the workers */
    atomic_uint_fast64_t next;   /* the next chunk to claim */
    atomic_int working;          /* workers not finished */
    pthread_t tid[LATE_CHECK_THREADS_MAX];
    late_worker arg[LATE_CHECK_THREADS_MAX];
    _Atomic pid_t ktid[LATE_CHECK_THREADS_MAX];   /* each worker's kernel thread id, once it runs */
    size_t nthreads;
    int lift;                    /* workers at SCHED_IDLE, lifted to the normal policy when waited for */
    uint8_t want[32];
    uint64_t step;
} late_check;

/* Hashes W (its state id, on THREADS threads of idle cycles: ones no other thread wants) to
 * compare it with WANT, the result of STEP. W must stay mapped, and unwritten, until
 * late_check_wait. */
int late_check_start(late_check *lc, const pulse_ckpt *w, const uint8_t want[32], uint64_t step, int threads);
/* Whether a started check has ended (late_check_wait then does not block). */
int late_check_ended(const late_check *lc);
/* Waits for the check started, if any, helping it at the caller's priority: 0 when none or it
 * passed; else PULSE_ERR_CORRUPT (the weights are another state), *step the step it checked. */
int late_check_wait(late_check *lc, uint64_t *step);

#endif
